//! A kernel handle and its typed, checked launches.

use crate::error::Error;
use crate::fatbin::Fatbin;
use crate::gpu::Gpu;
use crate::plan::{plan_call, plan_gemm_with, plan_transpose, Activation, Buffer, Call, EpilogueArgs, GemmShape, Launch, TransposeShape};
use crate::Result;
use cudarc::driver::{CudaSlice, CudaStream, DevicePtr, DevicePtrMut, DeviceRepr, SyncOnDrop, ValidAsZeroBits};
use std::collections::HashMap;
use std::hash::Hash;
use std::sync::{Arc, Mutex};
use tilesmith_spec::{Built, Dtype, Layout, Variant};

/// An element type the kernels take.
pub trait Element: DeviceRepr + ValidAsZeroBits + Copy + Default + Send + Sync + std::fmt::Debug + 'static {
    const DTYPE: Dtype;
    /// A quiet NaN, to poison outputs with.
    const NAN: Self;
    fn from_f64(x: f64) -> Self;
    fn to_f64(self) -> f64;
}

impl Element for f32 {
    const DTYPE: Dtype = Dtype::F32;
    const NAN: f32 = f32::NAN;
    fn from_f64(x: f64) -> Self {
        x as f32
    }
    fn to_f64(self) -> f64 {
        f64::from(self)
    }
}

impl Element for half::f16 {
    const DTYPE: Dtype = Dtype::F16;
    const NAN: half::f16 = half::f16::NAN;
    fn from_f64(x: f64) -> Self {
        half::f16::from_f64(x)
    }
    fn to_f64(self) -> f64 {
        half::f16::to_f64(self)
    }
}

impl Element for half::bf16 {
    const DTYPE: Dtype = Dtype::Bf16;
    const NAN: half::bf16 = half::bf16::NAN;
    fn from_f64(x: f64) -> Self {
        half::bf16::from_f64(x)
    }
    fn to_f64(self) -> f64 {
        half::bf16::to_f64(self)
    }
}

impl Element for float8::F8E4M3 {
    const DTYPE: Dtype = Dtype::E4m3;
    const NAN: float8::F8E4M3 = float8::F8E4M3::from_bits(0x7f);
    /// Rounded to nearest; beyond ±448, e4m3 saturates to NaN (it has no infinity).
    fn from_f64(x: f64) -> Self {
        float8::F8E4M3::from_f64(x)
    }
    fn to_f64(self) -> f64 {
        float8::F8E4M3::to_f64(&self)
    }
}

impl Element for float8::F8E5M2 {
    const DTYPE: Dtype = Dtype::E5m2;
    const NAN: float8::F8E5M2 = float8::F8E5M2::from_bits(0x7f);
    fn from_f64(x: f64) -> Self {
        float8::F8E5M2::from_f64(x)
    }
    fn to_f64(self) -> f64 {
        float8::F8E5M2::to_f64(&self)
    }
}

/// A GEMM's epilogue: C = activation(α·A·B + β·C + bias[col] + row_bias[row]), in f32 before
/// the one rounding to C's type. The default is C = A·B. Variants of the GEMM family's
/// `epilogue` axis apply it; the others refuse anything but the default.
#[derive(Clone, Copy, Debug)]
pub struct Epilogue<'a, T> {
    pub activation: Activation,
    pub alpha: f32,
    /// With β = 0, C is not read (it may hold NaNs).
    pub beta: f32,
    /// One per column of C: N elements.
    pub bias: Option<&'a CudaSlice<T>>,
    /// One per row of C: M elements.
    pub row_bias: Option<&'a CudaSlice<T>>,
    /// The per-tensor scales of 8-bit A and B: the product is scale_a·scale_b·A·B. Variants of
    /// 16-bit inputs take only 1.
    pub scale_a: f32,
    pub scale_b: f32,
}

impl<T> Default for Epilogue<'_, T> {
    fn default() -> Self {
        Epilogue { activation: Activation::None, alpha: 1.0, beta: 0.0, bias: None, row_bias: None, scale_a: 1.0, scale_b: 1.0 }
    }
}

impl<'a, T> Epilogue<'a, T> {
    /// activation(A·B + bias), nn.Linear's bias followed by an activation.
    pub fn bias(activation: Activation, bias: &'a CudaSlice<T>) -> Self {
        Epilogue { activation, bias: Some(bias), ..Epilogue::default() }
    }

    /// scale_a·scale_b·A·B: 8-bit inputs quantized with one scale per tensor.
    pub fn scaled(scale_a: f32, scale_b: f32) -> Self {
        Epilogue { scale_a, scale_b, ..Epilogue::default() }
    }
}

impl<T: Element> Epilogue<'_, T> {
    /// As the checks see it, for A of `input` and B of `b`, with the biases' lengths and
    /// addresses, and the guards that keep the biases ordered on `stream` until they drop (after
    /// the launch is enqueued).
    pub(crate) fn held<'s>(&'s self, stream: &'s Arc<CudaStream>, input: Dtype, b: Dtype) -> (EpilogueArgs, Vec<SyncOnDrop<'s>>) {
        let mut guards = Vec::new();
        let mut buffer = |slice: Option<&'s CudaSlice<T>>| {
            slice.map(|s| {
                let (addr, guard) = s.device_ptr(stream);
                guards.push(guard);
                Buffer { len: s.len(), addr }
            })
        };
        let (bias, row_bias) = (buffer(self.bias), buffer(self.row_bias));
        let out = (T::DTYPE != input).then_some(T::DTYPE);
        let b = (b != input).then_some(b);
        let scales = [self.scale_a, self.scale_b];
        (EpilogueArgs { activation: self.activation, alpha: self.alpha, beta: self.beta, bias, row_bias, out, b, scales }, guards)
    }
}

/// The device buffers, shape and epilogue of one GEMM call: A of `T`, B of `TB` (A's type
/// unless a variant's `b_dtype` axis says otherwise: e4m3 by e5m2), C and its biases of `TC`
/// (the inputs' type unless a variant's `out` axis says otherwise: e4m3 in, bf16 out).
pub struct GemmArgs<'a, T, TC = T, TB = T> {
    pub a: &'a CudaSlice<T>,
    pub b: &'a CudaSlice<TB>,
    pub c: &'a mut CudaSlice<TC>,
    pub shape: GemmShape,
    pub epilogue: Epilogue<'a, TC>,
}

impl<'a, T, TC, TB> GemmArgs<'a, T, TC, TB> {
    /// Matrices stored without padding: leading dimensions equal to their row lengths.
    pub fn packed(
        a: &'a CudaSlice<T>,
        b: &'a CudaSlice<TB>,
        c: &'a mut CudaSlice<TC>,
        m: usize,
        n: usize,
        k: usize,
        layout: Layout,
    ) -> Self {
        GemmArgs::new(a, b, c, GemmShape::packed(m, n, k, layout))
    }

    /// C = A·B with this shape (leading dimensions included).
    pub fn new(a: &'a CudaSlice<T>, b: &'a CudaSlice<TB>, c: &'a mut CudaSlice<TC>, shape: GemmShape) -> Self {
        GemmArgs { a, b, c, shape, epilogue: Epilogue::default() }
    }

    /// The same call with this epilogue.
    pub fn with_epilogue(self, epilogue: Epilogue<'a, TC>) -> Self {
        GemmArgs { epilogue, ..self }
    }
}

impl<T: Element, TC: Element, TB: Element> GemmArgs<'_, T, TC, TB> {
    /// The buffers' lengths and addresses, for choosing a variant: nothing is enqueued on them.
    pub(crate) fn buffers(&self, gpu: &Gpu) -> [Buffer; 3] {
        let stream = gpu.stream();
        let (a, _a) = self.a.device_ptr(stream);
        let (b, _b) = self.b.device_ptr(stream);
        let (c, _c) = self.c.device_ptr(stream);
        [Buffer { len: self.a.len(), addr: a }, Buffer { len: self.b.len(), addr: b }, Buffer { len: self.c.len(), addr: c }]
    }
}

/// The device buffers and shape of one transpose call.
pub struct TransposeArgs<'a, T> {
    pub x: &'a CudaSlice<T>,
    pub y: &'a mut CudaSlice<T>,
    pub shape: TransposeShape,
}

/// A variant in the registry: its manifest data, and its fatbin, loaded on first launch.
#[derive(Clone, Debug)]
pub struct Kernel {
    built: Arc<Built>,
    fatbin: Fatbin,
    /// The launches of calls planned before, shared by the handle's clones.
    plans: Arc<Plans>,
}

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

/// Launches already planned, by call: planning checks every argument against the manifest,
/// which costs the host several microseconds, as much as a small GEMM takes on the GPU; a
/// plan depends on nothing but its key, so a call seen before launches as planned then.
#[derive(Debug, Default)]
struct Plans {
    gemm: Mutex<HashMap<GemmKey, Launch>>,
    transpose: Mutex<HashMap<TransposeKey, Launch>>,
    /// Calls by name, by [`Call::fingerprint`] and SM count; each compared in full on a hit.
    calls: Mutex<HashMap<u64, Vec<KeptCall>>>,
}

/// A call by name planned before: the call, the GPU's SM count and its launch.
type KeptCall = (Call, u32, Launch);

/// A transpose call as its plan depends on it: dtype, shape, [X, Y] and the GPU's SMs.
type TransposeKey = (Dtype, TransposeShape, [Buffer; 2], u32);

/// Calls a kernel remembers; past this many, it forgets them all (calls that vary this much
/// are not the repeated ones the cache is for).
const PLANS_KEPT: usize = 1024;

/// The launch `key`'s plan gave before, else `plan`'s, remembered when it is a launch.
fn planned<K: Eq + Hash>(
    cache: &Mutex<HashMap<K, Launch>>,
    key: K,
    plan: impl FnOnce() -> std::result::Result<Option<Launch>, String>,
) -> std::result::Result<Option<Launch>, String> {
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

impl Kernel {
    pub(crate) fn new(built: Arc<Built>, fatbin: Fatbin) -> Kernel {
        Kernel { built, fatbin, plans: Arc::default() }
    }

    pub fn name(&self) -> &str {
        &self.built.entry.variant.name
    }

    /// Everything the manifest records: axes, launch data, requirements, resources.
    pub fn info(&self) -> &Built {
        &self.built
    }

    pub fn variant(&self) -> &Variant {
        &self.built.entry.variant
    }

    /// The element type of its operand `name` (C of an fp8 GEMM: its `out` axis's type); none
    /// where its family has no such operand.
    pub fn operand_dtype(&self, name: &str) -> Option<Dtype> {
        self.built.entry.operand_dtype(name)
    }

    /// Whether it is one of its family's reference variants (the trials' yardstick, never
    /// picked by a dispatcher).
    pub fn is_reference(&self) -> bool {
        self.built.entry.is_reference()
    }

    pub fn fatbin(&self) -> &Fatbin {
        &self.fatbin
    }

    /// The GEMM layout this kernel computes.
    pub fn layout(&self) -> Result<Layout> {
        match self.variant().word("layout").and_then(Layout::parse) {
            Some(layout) if self.variant().family == "gemm" => Ok(layout),
            _ => Err(self.refused(format!("it is a kernel of family `{}` and has no GEMM layout", self.variant().family))),
        }
    }

    /// A call of this kernel with arguments bound by name, as its family declares them:
    ///
    /// ```no_run
    /// # fn f(gpu: &tilesmith_runtime::Gpu, kernel: &tilesmith_runtime::Kernel,
    /// #      x: &cudarc::driver::CudaSlice<f32>, w: &cudarc::driver::CudaSlice<f32>,
    /// #      y: &mut cudarc::driver::CudaSlice<f32>) -> tilesmith_runtime::Result<()> {
    /// kernel.call(gpu)
    ///     .operand("x", x).operand("w", w).operand_mut("y", y)
    ///     .quantity("rows", 4096).quantity("cols", 50257).quantity("ldx", 50257).quantity("ldy", 50257)
    ///     .scalar("eps", 1e-6)
    ///     .launch()
    /// # }
    /// ```
    ///
    /// Every name, size, leading dimension, alignment and range is checked against the
    /// declaration before anything is enqueued.
    pub fn call<'a>(&'a self, gpu: &'a Gpu) -> CallBuilder<'a> {
        CallBuilder::new(self, gpu)
    }

    fn refused(&self, rule: String) -> Error {
        Error::Refused { name: self.name().to_string(), rule }
    }

    /// Checks a call bound by name and enqueues it on the GPU's stream.
    pub(crate) fn launch(&self, gpu: &Gpu, call: &Call) -> Result<()> {
        match self.plan_call(gpu.sms(), call)? {
            Some(launch) => gpu.launch(&self.built, &self.fatbin, launch),
            None => Ok(()),
        }
    }

    /// The launch of a call by name, or why the variant refuses it; remembered, as GEMM calls'
    /// are, without copying the call to look it up.
    pub(crate) fn plan_call(&self, sms: u32, call: &Call) -> Result<Option<Launch>> {
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        call.fingerprint(&mut hasher);
        let hash = std::hash::Hasher::finish(&hasher);
        let calls = &self.plans.calls;
        if let Some(kept) = calls.lock().unwrap_or_else(|p| p.into_inner()).get(&hash) {
            if let Some((_, _, launch)) = kept.iter().find(|(c, s, _)| c == call && *s == sms) {
                return Ok(Some(launch.clone()));
            }
        }
        let launch = plan_call(&self.built, call, sms).map_err(|rule| self.refused(rule))?;
        if let Some(launch) = &launch {
            let mut calls = calls.lock().unwrap_or_else(|p| p.into_inner());
            if calls.len() >= PLANS_KEPT {
                calls.clear();
            }
            calls.entry(hash).or_default().push((call.clone(), sms, launch.clone()));
        }
        Ok(launch)
    }

    /// Enqueues C = A·B, or the call's epilogue of it, on the GPU's stream, after checking every
    /// argument against the manifest.
    pub fn gemm<T: Element, TC: Element, TB: Element>(&self, gpu: &Gpu, args: GemmArgs<'_, T, TC, TB>) -> Result<()> {
        let stream = gpu.stream();
        let (epilogue, _epilogue_sync) = args.epilogue.held(stream, T::DTYPE, TB::DTYPE);
        let (a, _a_sync) = args.a.device_ptr(stream);
        let (b, _b_sync) = args.b.device_ptr(stream);
        let c_len = args.c.len();
        let (c, _c_sync) = args.c.device_ptr_mut(stream);
        let buffers = [Buffer { len: args.a.len(), addr: a }, Buffer { len: args.b.len(), addr: b }, Buffer { len: c_len, addr: c }];
        self.gemm_buffers(gpu, T::DTYPE, &args.shape, buffers, &epilogue)
    }

    /// As [`Kernel::gemm`], on buffers the caller holds on the GPU's stream.
    pub(crate) fn gemm_buffers(
        &self,
        gpu: &Gpu,
        dtype: Dtype,
        shape: &GemmShape,
        buffers: [Buffer; 3],
        epilogue: &EpilogueArgs,
    ) -> Result<()> {
        match self.plan_gemm(gpu.sms(), dtype, shape, buffers, epilogue)? {
            Some(launch) => gpu.launch(&self.built, &self.fatbin, launch),
            None => Ok(()),
        }
    }

    /// The launch of a GEMM call on these buffers, or why the variant refuses it; `None` for
    /// an empty problem. Remembered, so that the call's launch finds it planned.
    pub(crate) fn plan_gemm(
        &self,
        sms: u32,
        dtype: Dtype,
        shape: &GemmShape,
        buffers: [Buffer; 3],
        epilogue: &EpilogueArgs,
    ) -> Result<Option<Launch>> {
        let key = GemmKey::new(dtype, shape, buffers, epilogue, sms);
        let plan = || plan_gemm_with(&self.built, dtype, shape, buffers, epilogue, sms);
        planned(&self.plans.gemm, key, plan).map_err(|rule| self.refused(rule))
    }

    /// Enqueues Y = Xᵀ on the GPU's stream, after checking every argument against the manifest.
    pub fn transpose<T: Element>(&self, gpu: &Gpu, args: TransposeArgs<'_, T>) -> Result<()> {
        let stream = gpu.stream();
        let (x, _x_sync) = args.x.device_ptr(stream);
        let y_len = args.y.len();
        let (y, _y_sync) = args.y.device_ptr_mut(stream);
        let buffers = [Buffer { len: args.x.len(), addr: x }, Buffer { len: y_len, addr: y }];
        self.transpose_buffers(gpu, T::DTYPE, &args.shape, buffers)
    }

    /// As [`Kernel::transpose`], on buffers the caller holds on the GPU's stream.
    pub(crate) fn transpose_buffers(&self, gpu: &Gpu, dtype: Dtype, shape: &TransposeShape, buffers: [Buffer; 2]) -> Result<()> {
        match self.plan_transpose(gpu.sms(), dtype, shape, buffers)? {
            Some(launch) => gpu.launch(&self.built, &self.fatbin, launch),
            None => Ok(()),
        }
    }

    /// As [`Kernel::plan_gemm`], for a transpose.
    pub(crate) fn plan_transpose(&self, sms: u32, dtype: Dtype, shape: &TransposeShape, buffers: [Buffer; 2]) -> Result<Option<Launch>> {
        let plan = || plan_transpose(&self.built, dtype, shape, buffers, sms);
        planned(&self.plans.transpose, (dtype, *shape, buffers, sms), plan).map_err(|rule| self.refused(rule))
    }
}

/// What a call bound by name runs on: a kernel ([`Kernel::call`]) or a family's chooser
/// ([`Chooser::call`](crate::Chooser::call)).
pub trait Target {
    /// What the launch returns: nothing for a kernel, the pick for a chooser.
    type Output;
    /// Checks the call and enqueues it on the GPU's stream.
    fn launch(&self, gpu: &Gpu, call: &Call) -> Result<Self::Output>;
}

impl Target for Kernel {
    type Output = ();
    fn launch(&self, gpu: &Gpu, call: &Call) -> Result<()> {
        Kernel::launch(self, gpu, call)
    }
}

/// A call being bound: see [`Kernel::call`]. The buffers stay borrowed, and ordered on the
/// GPU's stream, until the launch is enqueued.
pub struct CallBuilder<'a, T: Target = Kernel> {
    target: &'a T,
    gpu: &'a Gpu,
    call: Call,
    _guards: Vec<SyncOnDrop<'a>>,
}

impl<'a, T: Target> CallBuilder<'a, T> {
    pub(crate) fn new(target: &'a T, gpu: &'a Gpu) -> Self {
        CallBuilder { target, gpu, call: Call::default(), _guards: Vec::new() }
    }

    /// An operand the kernel reads.
    pub fn operand<E: Element>(mut self, name: &str, slice: &'a CudaSlice<E>) -> Self {
        let (addr, guard) = slice.device_ptr(self.gpu.stream());
        self._guards.push(guard);
        self.call = self.call.operand(name, E::DTYPE, Buffer { len: slice.len(), addr });
        self
    }

    /// An operand the kernel writes.
    pub fn operand_mut<E: Element>(mut self, name: &str, slice: &'a mut CudaSlice<E>) -> Self {
        let len = slice.len();
        let (addr, guard) = slice.device_ptr_mut(self.gpu.stream());
        self._guards.push(guard);
        self.call = self.call.operand(name, E::DTYPE, Buffer { len, addr });
        self
    }

    pub fn quantity(mut self, name: &str, value: usize) -> Self {
        self.call = self.call.quantity(name, value as u64);
        self
    }

    /// A scalar, converted to the type the family declares for it after its range is checked.
    pub fn scalar(mut self, name: &str, value: f64) -> Self {
        self.call = self.call.scalar(name, value);
        self
    }

    /// The call as bound so far, for planning without a launch.
    pub fn arguments(&self) -> &Call {
        &self.call
    }

    /// Checks the call and enqueues it on the GPU's stream.
    pub fn launch(self) -> Result<T::Output> {
        self.target.launch(self.gpu, &self.call)
    }
}

impl CallBuilder<'_, crate::Chooser> {
    /// The variant the call would run on, and why, without launching it.
    pub fn choose(&self) -> Result<crate::Pick> {
        self.target.choose(self.gpu, &self.call)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tilesmith_spec::Manifest;

    fn kernel(name: &str) -> Kernel {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../generated/manifest.json");
        let manifest: Manifest = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
        let entry = manifest.variants.into_iter().find(|e| e.variant.name == name).unwrap();
        Kernel::new(Arc::new(Built::unbuilt(entry)), Fatbin::File("unused".into()))
    }

    #[test]
    fn a_planned_call_is_kept_and_a_refused_one_is_checked_every_time() {
        let kernel = kernel("gemm_tn_128x256x64_wgmma_w12");
        let shape = GemmShape::packed(4096, 4096, 512, Layout::Tn);
        let buffers = Buffer::unallocated(shape.spans());
        let epilogue = EpilogueArgs::default();
        let first = kernel.plan_gemm(132, Dtype::Bf16, &shape, buffers, &epilogue).unwrap();
        assert_eq!(kernel.plan_gemm(132, Dtype::Bf16, &shape, buffers, &epilogue).unwrap(), first);
        assert_eq!(kernel.plans.gemm.lock().unwrap().len(), 1);
        // C one element short, after a call on the full one was kept: refused, each time.
        let mut short = buffers;
        short[2].len -= 1;
        for _ in 0..2 {
            let refused = kernel.plan_gemm(132, Dtype::Bf16, &shape, short, &epilogue).unwrap_err().to_string();
            assert!(refused.contains("c holds"), "{refused}");
        }
        assert_eq!(kernel.plans.gemm.lock().unwrap().len(), 1);
        // Another GPU's SM count is another plan: the persistent grid is as large as the GPU.
        let other = kernel.plan_gemm(114, Dtype::Bf16, &shape, buffers, &epilogue).unwrap();
        assert_ne!(other.map(|l| l.grid), first.map(|l| l.grid));
    }

    #[test]
    fn a_call_by_name_is_planned_once_and_a_refused_one_every_time() {
        let kernel = kernel("softmax_w16");
        let [x, y] = Buffer::unallocated([4096 * 50257; 2]);
        let call = |y: Buffer| {
            Call::default()
                .operand("x", Dtype::Bf16, x)
                .operand("y", Dtype::Bf16, y)
                .quantity("rows", 4096)
                .quantity("cols", 50257)
                .quantity("ldx", 50257)
                .quantity("ldy", 50257)
        };
        let first = kernel.plan_call(132, &call(y)).unwrap();
        assert_eq!(kernel.plan_call(132, &call(y)).unwrap(), first);
        assert_eq!(kernel.plans.calls.lock().unwrap().values().map(Vec::len).sum::<usize>(), 1);
        let short = Buffer { len: y.len - 1, ..y };
        for _ in 0..2 {
            let refused = kernel.plan_call(132, &call(short)).unwrap_err().to_string();
            assert!(refused.contains("y holds"), "{refused}");
        }
        // Another buffer is another plan: its address is an argument.
        let moved = Buffer { addr: y.addr + 256, ..y };
        assert_ne!(kernel.plan_call(132, &call(moved)).unwrap(), first);
        assert_eq!(kernel.plans.calls.lock().unwrap().values().map(Vec::len).sum::<usize>(), 2);
    }
}
