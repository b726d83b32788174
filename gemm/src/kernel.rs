//! GEMM and transpose launches of a [`Kernel`]: typed, checked, and planned once per call.

use crate::args::{GemmArgs, TransposeArgs};
use crate::plan::{gemm_call, refuse_empty_k, transpose_call};
use crate::shape::{Activation, EpilogueArgs, GemmShape, TransposeShape};
use cudarc::driver::{DevicePtr, DevicePtrMut};
use std::collections::HashMap;
use std::hash::Hash;
use std::sync::Mutex;
use tilesmith_runtime::{Buffer, Element, Error, Gpu, Kernel, Planned, Result};
use tilesmith_spec::{Dtype, Layout};

/// GEMM and transpose calls of a kernel of those families.
pub trait GemmKernel {
    /// The GEMM layout this kernel computes; an error for a kernel of another family.
    fn layout(&self) -> Result<Layout>;

    /// Enqueues C = A·B, or the call's epilogue of it, on the GPU's stream, after checking
    /// every argument against the manifest.
    fn gemm<T: Element, TC: Element, TB: Element>(&self, gpu: &Gpu, args: GemmArgs<'_, T, TC, TB>) -> Result<()>;

    /// Enqueues Y = Xᵀ on the GPU's stream, after checking every argument against the manifest.
    fn transpose<T: Element>(&self, gpu: &Gpu, args: TransposeArgs<'_, T>) -> Result<()>;

    /// The checked launch of a GEMM call on these buffers, or why the variant refuses it;
    /// `None` for an empty problem. Remembered, so that the call's launch finds it planned.
    fn plan_gemm(
        &self,
        sms: u32,
        dtype: Dtype,
        shape: &GemmShape,
        buffers: [Buffer; 3],
        epilogue: &EpilogueArgs,
    ) -> Result<Option<Planned>>;

    /// As [`GemmKernel::plan_gemm`], for a transpose.
    fn plan_transpose(&self, sms: u32, dtype: Dtype, shape: &TransposeShape, buffers: [Buffer; 2]) -> Result<Option<Planned>>;
}

impl GemmKernel for Kernel {
    fn layout(&self) -> Result<Layout> {
        match self.variant().word("layout").and_then(Layout::parse) {
            Some(layout) if self.variant().family == "gemm" => Ok(layout),
            _ => Err(refused(self, format!("it is a kernel of family `{}` and has no GEMM layout", self.variant().family))),
        }
    }

    fn gemm<T: Element, TC: Element, TB: Element>(&self, gpu: &Gpu, mut args: GemmArgs<'_, T, TC, TB>) -> Result<()> {
        let shape = args.shape;
        let (buffers, epilogue, _guards) = args.pinned(gpu.stream());
        // SAFETY: the buffers are the borrowed slices of `args`, held until the launch is enqueued.
        unsafe { gemm_buffers(self, gpu, T::DTYPE, &shape, buffers, &epilogue) }
    }

    fn transpose<T: Element>(&self, gpu: &Gpu, args: TransposeArgs<'_, T>) -> Result<()> {
        let stream = gpu.stream();
        let (x, _x_sync) = args.x.device_ptr(stream);
        let y_len = args.y.len();
        let (y, _y_sync) = args.y.device_ptr_mut(stream);
        let buffers = [Buffer { len: args.x.len(), addr: x }, Buffer { len: y_len, addr: y }];
        // SAFETY: the buffers are the borrowed slices of `args`.
        unsafe { transpose_buffers(self, gpu, T::DTYPE, &args.shape, buffers) }
    }

    fn plan_gemm(
        &self,
        sms: u32,
        dtype: Dtype,
        shape: &GemmShape,
        buffers: [Buffer; 3],
        epilogue: &EpilogueArgs,
    ) -> Result<Option<Planned>> {
        let key = GemmKey::new(dtype, shape, buffers, epilogue, sms);
        planned(&self.extension::<Plans>().gemm, key, || {
            let call = gemm_call(self.info(), dtype, shape, buffers, epilogue).map_err(|rule| refused(self, rule))?;
            let planned = self.plan(sms, &call)?;
            refuse_empty_k(shape, planned.is_some()).map_err(|rule| refused(self, rule))?;
            Ok(planned)
        })
    }

    fn plan_transpose(&self, sms: u32, dtype: Dtype, shape: &TransposeShape, buffers: [Buffer; 2]) -> Result<Option<Planned>> {
        planned(&self.extension::<Plans>().transpose, (dtype, *shape, buffers, sms), || {
            let call = transpose_call(self.info(), dtype, shape, buffers).map_err(|rule| refused(self, rule))?;
            self.plan(sms, &call)
        })
    }
}

/// As [`GemmKernel::gemm`], on buffers the caller holds on the GPU's stream.
///
/// # Safety
///
/// As [`Kernel::launch_planned`]: each buffer is a live allocation of at least its length.
pub(crate) unsafe fn gemm_buffers(
    kernel: &Kernel,
    gpu: &Gpu,
    dtype: Dtype,
    shape: &GemmShape,
    buffers: [Buffer; 3],
    epilogue: &EpilogueArgs,
) -> Result<()> {
    match kernel.plan_gemm(gpu.sms(), dtype, shape, buffers, epilogue)? {
        // SAFETY: the caller keeps this function's promise, which is `launch_planned`'s.
        Some(planned) => unsafe { kernel.launch_planned(gpu, &planned) },
        None => Ok(()),
    }
}

/// As [`GemmKernel::transpose`], on buffers the caller holds on the GPU's stream.
///
/// # Safety
///
/// As [`gemm_buffers`].
pub(crate) unsafe fn transpose_buffers(
    kernel: &Kernel,
    gpu: &Gpu,
    dtype: Dtype,
    shape: &TransposeShape,
    buffers: [Buffer; 2],
) -> Result<()> {
    match kernel.plan_transpose(gpu.sms(), dtype, shape, buffers)? {
        // SAFETY: the caller keeps this function's promise, which is `launch_planned`'s.
        Some(planned) => unsafe { kernel.launch_planned(gpu, &planned) },
        None => Ok(()),
    }
}

pub(crate) fn refused(kernel: &Kernel, rule: String) -> Error {
    Error::Refused { name: kernel.name().to_string(), rule }
}

/// GEMM and transpose calls planned before, kept beside each kernel: looking a typed call up
/// by its key costs less host time than binding it by name, which a small GEMM would notice.
#[derive(Debug, Default)]
struct Plans {
    gemm: Mutex<HashMap<GemmKey, Planned>>,
    transpose: Mutex<HashMap<TransposeKey, Planned>>,
}

/// A transpose call as its plan depends on it: dtype, shape, [X, Y] and the GPU's SMs.
type TransposeKey = (Dtype, TransposeShape, [Buffer; 2], u32);

/// Calls a kernel remembers; past this many, it forgets them all (calls that vary this much
/// are not the repeated ones the cache is for).
const PLANS_KEPT: usize = 1024;

/// A GEMM call as its plan depends on it: the scalars by their bits.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct GemmKey {
    dtype: Dtype,
    shape: GemmShape,
    buffers: [Buffer; 3],
    activation: Activation,
    scalars: [u32; 4],
    biases: [Option<Buffer>; 2],
    out: Option<Dtype>,
    b: Option<Dtype>,
    sms: u32,
}

impl GemmKey {
    fn new(dtype: Dtype, shape: &GemmShape, buffers: [Buffer; 3], epilogue: &EpilogueArgs, sms: u32) -> GemmKey {
        let EpilogueArgs { activation, alpha, beta, bias, row_bias, out, b, scales } = *epilogue;
        let scalars = [alpha, beta, scales[0], scales[1]].map(f32::to_bits);
        GemmKey { dtype, shape: *shape, buffers, activation, scalars, biases: [bias, row_bias], out, b, sms }
    }
}

/// The launch `key`'s plan gave before, else `plan`'s, remembered when it is a launch.
fn planned<K: Eq + Hash>(
    cache: &Mutex<HashMap<K, Planned>>,
    key: K,
    plan: impl FnOnce() -> Result<Option<Planned>>,
) -> Result<Option<Planned>> {
    if let Some(launch) = cache.lock().unwrap_or_else(|p| p.into_inner()).get(&key) {
        return Ok(Some(launch.clone()));
    }
    let launch = plan()?;
    if let Some(launch) = &launch {
        let mut cache = cache.lock().unwrap_or_else(|p| p.into_inner());
        if cache.len() >= PLANS_KEPT {
            cache.clear();
        }
        cache.insert(key, launch.clone());
    }
    Ok(launch)
}

#[cfg(test)]
mod tests {
    use super::*;
    use tilesmith_runtime::{Launch, Registry};
    use tilesmith_spec::{Built, Manifest};

    fn kernel(name: &str) -> Kernel {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../generated/manifest.json");
        let manifest: Manifest = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
        let entry = manifest.variants.into_iter().find(|e| e.variant.name == name).unwrap();
        Registry::new(std::path::Path::new("unused"), vec![Built::unbuilt(entry)]).kernel(name).unwrap()
    }

    fn launch(planned: Option<Planned>) -> Option<Launch> {
        planned.map(|p| p.launch().clone())
    }

    #[test]
    fn a_planned_call_is_kept_and_a_refused_one_is_checked_every_time() {
        let kernel = kernel("gemm_tn_128x256x64_wgmma_w12");
        let kept = || kernel.extension::<Plans>().gemm.lock().unwrap().len();
        let shape = GemmShape::packed(4096, 4096, 512, Layout::Tn);
        let buffers = Buffer::unallocated(shape.spans());
        let epilogue = EpilogueArgs::default();
        let first = launch(kernel.plan_gemm(132, Dtype::Bf16, &shape, buffers, &epilogue).unwrap());
        assert_eq!(launch(kernel.plan_gemm(132, Dtype::Bf16, &shape, buffers, &epilogue).unwrap()), first);
        assert_eq!(kept(), 1);
        // C one element short, after a call on the full one was kept: refused, each time.
        let mut short = buffers;
        short[2].len -= 1;
        for _ in 0..2 {
            let refused = kernel.plan_gemm(132, Dtype::Bf16, &shape, short, &epilogue).unwrap_err().to_string();
            assert!(refused.contains("c holds"), "{refused}");
        }
        assert_eq!(kept(), 1);
        // Another GPU's SM count is another plan: the persistent grid is as large as the GPU.
        let other = launch(kernel.plan_gemm(114, Dtype::Bf16, &shape, buffers, &epilogue).unwrap());
        assert_ne!(other.map(|l| l.grid), first.map(|l| l.grid));
    }
}
