//! One GEMM call for any shape: the dispatcher picks a variant and a strategy for this device,
//! dtype, layout and shape from the device's tuning table, or by a documented heuristic where
//! there is none, and never picks one that would refuse the call.

use crate::error::{Context as _, Error};
use crate::gpu::Gpu;
use crate::kernel::{Element, GemmArgs, Kernel};
use crate::plan::{check_gemm_call, plan_gemm, runs_on, Buffer, GemmShape};
use crate::Result;
use cudarc::driver::sys::{self, CUmemorytype, CUDA_MEMCPY2D};
use cudarc::driver::{CudaSlice, DevicePtr, DevicePtrMut};
use tilesmith_spec::tuning::{Alignment, Device, Strategy, TuningTable};
use tilesmith_spec::{Built, Dtype, GridRule, Kind};

/// Rows of operands copied for the padded strategy start 128 bytes apart at least, a whole
/// number of 128-byte lines, which TMA reads best.
const PADDED_ROW_BYTES: usize = 128;

/// What the dispatcher picked for a call, and why.
#[derive(Clone, Debug)]
pub struct Choice {
    pub kernel: Kernel,
    pub strategy: Strategy,
    /// One line for logs: the table entry or the heuristic's estimate behind the pick.
    pub reason: String,
}

impl Choice {
    /// `variant` or `padded(variant)`.
    pub fn label(&self) -> String {
        match self.strategy {
            Strategy::Direct => self.kernel.name().to_string(),
            Strategy::Padded => format!("padded({})", self.kernel.name()),
        }
    }
}

/// Scratch memory for the padded strategy, grown on demand and kept for the next call.
#[derive(Default)]
pub struct Workspace {
    buffer: Option<CudaSlice<u8>>,
}

impl Workspace {
    pub fn new() -> Workspace {
        Workspace::default()
    }

    /// Bytes held now.
    pub fn bytes(&self) -> usize {
        self.buffer.as_ref().map_or(0, CudaSlice::len)
    }

    fn reserve(&mut self, gpu: &Gpu, bytes: usize) -> Result<&mut CudaSlice<u8>> {
        if self.bytes() < bytes {
            self.buffer = None;
            self.buffer = Some(gpu.stream().alloc_zeros::<u8>(bytes).during(&format!("allocating {bytes} bytes of GEMM workspace"))?);
        }
        Ok(self.buffer.as_mut().expect("reserved above"))
    }
}

/// Whether a call's operands suit TMA as they are.
pub fn alignment(dtype: Dtype, shape: &GemmShape, buffers: &[Buffer; 3]) -> Alignment {
    let size = dtype.size_bytes() as usize;
    let aligned = [shape.lda, shape.ldb, shape.ldc].iter().all(|ld| ld * size % 16 == 0) && buffers.iter().all(|b| b.addr % 16 == 0);
    if aligned { Alignment::Aligned } else { Alignment::Unaligned }
}

/// One operand as the padded strategy moves it: where it is, and where its copy goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Copy {
    rows: usize,
    cols: usize,
    ld: usize,
    /// Leading dimension of the copy, in elements.
    padded_ld: usize,
    /// Byte offset of the copy in the workspace.
    offset: usize,
}

/// The padded strategy's plan: which of A, B and C go through scratch, the shape the kernel
/// then sees, and the workspace bytes it needs.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Padding {
    copies: [Option<Copy>; 3],
    shape: GemmShape,
    bytes: usize,
}

fn padding(dtype: Dtype, shape: &GemmShape, buffers: &[Buffer; 3]) -> Padding {
    let size = dtype.size_bytes() as usize;
    let stored = shape.stored();
    let lds = [shape.lda, shape.ldb, shape.ldc];
    let mut bytes = 0;
    let mut copies = [None; 3];
    let mut padded = lds;
    for i in 0..3 {
        let (rows, cols) = stored[i];
        if lds[i] * size % 16 == 0 && buffers[i].addr % 16 == 0 {
            continue;
        }
        let padded_ld = (cols * size).next_multiple_of(PADDED_ROW_BYTES) / size;
        copies[i] = Some(Copy { rows, cols, ld: lds[i], padded_ld, offset: bytes });
        padded[i] = padded_ld;
        bytes += (rows * padded_ld * size).next_multiple_of(256);
    }
    let shape = GemmShape { lda: padded[0], ldb: padded[1], ldc: padded[2], ..*shape };
    Padding { copies, shape, bytes }
}

/// Whether `built` takes the call with this strategy on this device.
fn accepts(built: &Built, device: &Device, dtype: Dtype, shape: &GemmShape, buffers: &[Buffer; 3], strategy: Strategy) -> bool {
    if !runs_on(&built.entry.targets, (device.capability[0], device.capability[1])) {
        return false;
    }
    match strategy {
        Strategy::Direct => plan_gemm(built, dtype, shape, *buffers, device.sms).is_ok(),
        Strategy::Padded => {
            if alignment(dtype, shape, buffers) == Alignment::Aligned {
                return false;
            }
            let padding = padding(dtype, shape, buffers);
            // The copies start 256-byte aligned in the workspace; the rest stay where they are.
            let scratch = padding.shape.spans();
            let moved = std::array::from_fn(|i| match padding.copies[i] {
                Some(copy) => Buffer { len: scratch[i], addr: copy.offset as u64 },
                None => buffers[i],
            });
            plan_gemm(built, dtype, &padding.shape, moved, device.sms).is_ok()
        }
    }
}

/// Picks the variant and strategy for a call. With a table for this device (same name, compute
/// capability and SM count): the nearest measured problem of the call's dtype, layout and
/// alignment, its candidates in rank order, the first that takes the call; then the next
/// nearest problem. Otherwise, or when no table candidate takes it, [`heuristic`].
pub fn choose<'k>(
    kernels: impl IntoIterator<Item = &'k Kernel>,
    tables: &[TuningTable],
    device: &Device,
    dtype: Dtype,
    shape: &GemmShape,
    buffers: [Buffer; 3],
) -> std::result::Result<Choice, String> {
    check_gemm_call(shape, buffers)?;
    let kernels: Vec<&Kernel> = kernels
        .into_iter()
        .filter(|k| k.variant().dtype == dtype && matches!(k.variant().kind, Kind::Gemm { layout, .. } if layout == shape.layout))
        .collect();
    let class = alignment(dtype, shape, &buffers);
    let problem = [shape.m, shape.n, shape.k].map(|d| d as u64);
    if let Some(table) = tables.iter().find(|t| &t.device == device) {
        for entry in table.nearest(dtype, shape.layout, class, problem) {
            for (rank, candidate) in entry.ranked.iter().enumerate() {
                let Some(kernel) = kernels.iter().find(|k| k.name() == candidate.variant) else { continue };
                if accepts(kernel.info(), device, dtype, shape, &buffers, candidate.strategy) {
                    let [m, n, k] = entry.shape;
                    let reason = format!(
                        "tuning table {}: nearest measured problem {m}x{n}x{k} ({dtype} {} {:?}), rank {} of {}, {:.2}x cuBLAS there",
                        TuningTable::file_name(device),
                        shape.layout,
                        class,
                        rank + 1,
                        entry.ranked.len(),
                        candidate.ratio(entry)
                    );
                    return Ok(Choice { kernel: (*kernel).clone(), strategy: candidate.strategy, reason });
                }
            }
        }
    }
    let why = if tables.iter().any(|t| &t.device == device) { "no table candidate takes this call" } else { "no tuning table for this device" };
    heuristic(&kernels, device, dtype, shape, &buffers).map(|(choice, estimate)| Choice {
        reason: format!("{why} ({} {}sm): heuristic, estimated {:.1} us", device.name, device.sms, estimate * 1e6),
        ..choice
    })
}

/// The heuristic: among the variants that take the call (directly, else padded), the least
/// estimated time, ties by name. A variant's estimate is its rounds of tiles, each the tile's
/// multiply-adds at a rate for its backend and tile shape, plus the padded copies at 3 TB/s:
///
/// `rounds = ⌈tiles·split_k / SMs⌉`, `time = rounds · 2·TM·TN·⌈K/split_k⌉ / (rate · efficiency)`,
/// where `rate` is 6 TFLOP/s per SM for wgmma, half that for mma and 1/20 for simt, and
/// `efficiency = 1 / (1 + 16/TM + 32/TN)` (larger tiles reuse more of what they load).
pub fn heuristic(kernels: &[&Kernel], device: &Device, dtype: Dtype, shape: &GemmShape, buffers: &[Buffer; 3]) -> std::result::Result<(Choice, f64), String> {
    let mut best: Option<(f64, &Kernel, Strategy)> = None;
    for strategy in [Strategy::Direct, Strategy::Padded] {
        for kernel in kernels {
            if !accepts(kernel.info(), device, dtype, shape, buffers, strategy) {
                continue;
            }
            let estimate = estimate_seconds(kernel.info(), device, dtype, shape, buffers, strategy);
            if best.as_ref().is_none_or(|(t, k, _)| estimate < *t || (estimate == *t && kernel.name() < k.name())) {
                best = Some((estimate, kernel, strategy));
            }
        }
        if best.is_some() {
            break;
        }
    }
    let (estimate, kernel, strategy) = best.ok_or_else(|| {
        format!("no {dtype} {} variant in the registry runs on {} and takes {}x{}x{} with these leading dimensions and pointers", shape.layout, device.name, shape.m, shape.n, shape.k)
    })?;
    Ok((Choice { kernel: kernel.clone(), strategy, reason: String::new() }, estimate))
}

fn estimate_seconds(built: &Built, device: &Device, dtype: Dtype, shape: &GemmShape, buffers: &[Buffer; 3], strategy: Strategy) -> f64 {
    let variant = &built.entry.variant;
    let Kind::Gemm { tile: [tm, tn, _], split_k, .. } = variant.kind else { return f64::INFINITY };
    let (tm, tn, split) = (f64::from(tm), f64::from(tn), u64::from(split_k.max(1)));
    let tiles = (shape.m as f64 / tm).ceil() * (shape.n as f64 / tn).ceil();
    let rounds = (tiles * split as f64 / f64::from(device.sms.max(1))).ceil().max(1.0);
    let rate = match variant.backend.as_str() {
        "wgmma" => 6e12,
        "mma" => 3e12,
        _ => 0.3e12,
    };
    let efficiency = 1.0 / (1.0 + 16.0 / tm + 32.0 / tn);
    let k = (shape.k as u64).div_ceil(split) as f64;
    let mut seconds = rounds * 2.0 * tm * tn * k / (rate * efficiency);
    if strategy == Strategy::Padded {
        let padding = padding(dtype, shape, buffers);
        let moved: usize = padding.copies.iter().flatten().map(|c| 2 * c.rows * c.cols * dtype.size_bytes() as usize).sum();
        seconds += moved as f64 / 3e12;
    }
    if let GridRule::SplitK { .. } = built.entry.launch.grid {
        // The partial sums go through shared memory once more.
        seconds += 2e-6;
    }
    seconds
}

impl Choice {
    /// Enqueues C = A·B with this pick, using `workspace` for the padded strategy. A choice
    /// made for another call is checked like any launch, and refused if it does not fit.
    pub fn run<T: Element>(&self, gpu: &Gpu, args: GemmArgs<'_, T>, workspace: &mut Workspace) -> Result<()> {
        match self.strategy {
            Strategy::Direct => self.kernel.gemm(gpu, args),
            Strategy::Padded => run_padded(gpu, &self.kernel, args, workspace),
        }
    }

    /// The choice to run `kernel` with `strategy`, for timing the candidates one by one.
    pub fn forced(kernel: Kernel, strategy: Strategy) -> Choice {
        Choice { kernel, strategy, reason: "chosen by the caller".into() }
    }
}

fn run_padded<T: Element>(gpu: &Gpu, kernel: &Kernel, args: GemmArgs<'_, T>, workspace: &mut Workspace) -> Result<()> {
    let stream = gpu.stream();
    let size = T::DTYPE.size_bytes() as usize;
    let (a, _a) = args.a.device_ptr(stream);
    let (b, _b) = args.b.device_ptr(stream);
    let c_len = args.c.len();
    let (c, _c) = args.c.device_ptr_mut(stream);
    let buffers = [Buffer { len: args.a.len(), addr: a }, Buffer { len: args.b.len(), addr: b }, Buffer { len: c_len, addr: c }];
    let refused = |rule: String| Error::Refused { name: kernel.name().to_string(), rule };
    check_gemm_call(&args.shape, buffers).map_err(refused)?;
    let padding = padding(T::DTYPE, &args.shape, &buffers);
    let scratch = workspace.reserve(gpu, padding.bytes.max(1))?;
    let (base, _scratch) = scratch.device_ptr_mut(stream);
    let spans = padding.shape.spans();
    let mut moved = buffers;
    for (i, copy) in padding.copies.iter().enumerate() {
        if let Some(copy) = copy {
            moved[i] = Buffer { len: spans[i], addr: base + copy.offset as u64 };
            if i < 2 && copy.rows > 0 && copy.cols > 0 {
                copy_2d(gpu, moved[i].addr, copy.padded_ld * size, buffers[i].addr, copy.ld * size, copy.cols * size, copy.rows)?;
            }
        }
    }
    kernel.gemm_buffers(gpu, T::DTYPE, &padding.shape, moved)?;
    if let Some(copy) = padding.copies[2].filter(|c| c.rows > 0 && c.cols > 0) {
        copy_2d(gpu, buffers[2].addr, copy.ld * size, moved[2].addr, copy.padded_ld * size, copy.cols * size, copy.rows)?;
    }
    Ok(())
}

/// A strided device-to-device copy of `rows` rows of `width` bytes, on the GPU's stream. The
/// callers checked both sides against their buffers.
fn copy_2d(gpu: &Gpu, dst: u64, dst_pitch: usize, src: u64, src_pitch: usize, width: usize, rows: usize) -> Result<()> {
    let mut copy: CUDA_MEMCPY2D = unsafe { std::mem::zeroed() };
    copy.srcMemoryType = CUmemorytype::CU_MEMORYTYPE_DEVICE;
    copy.srcDevice = src;
    copy.srcPitch = src_pitch;
    copy.dstMemoryType = CUmemorytype::CU_MEMORYTYPE_DEVICE;
    copy.dstDevice = dst;
    copy.dstPitch = dst_pitch;
    copy.WidthInBytes = width;
    copy.Height = rows;
    gpu.context().bind_to_thread().during("binding the context")?;
    unsafe { sys::cuMemcpy2DAsync_v2(&copy, gpu.stream().cu_stream()) }.result().during("copying an operand into aligned scratch")
}

#[cfg(test)]
mod tests {
    use super::*;
    use tilesmith_spec::Layout;

    #[test]
    fn padding_copies_only_what_is_not_aligned() {
        let shape = GemmShape { m: 4095, n: 4097, k: 4099, lda: 4099, ldb: 4104, ldc: 4097, layout: Layout::Tn };
        let buffers = [Buffer { len: usize::MAX, addr: 256 }; 3];
        let p = padding(Dtype::Bf16, &shape, &buffers);
        assert_eq!(p.copies[0].map(|c| (c.rows, c.cols, c.padded_ld, c.offset)), Some((4095, 4099, 4160, 0)));
        assert_eq!(p.copies[1], None);
        let a_bytes = (4095 * 4160 * 2usize).next_multiple_of(256);
        assert_eq!(p.copies[2].map(|c| (c.rows, c.cols, c.padded_ld, c.offset)), Some((4095, 4097, 4160, a_bytes)));
        assert_eq!((p.shape.lda, p.shape.ldb, p.shape.ldc), (4160, 4104, 4160));
        assert_eq!(alignment(Dtype::Bf16, &shape, &buffers), Alignment::Unaligned);
        let misplaced = [Buffer { len: usize::MAX, addr: 258 }, buffers[1], buffers[2]];
        let aligned = GemmShape { ldc: 4104, lda: 4104, ..shape };
        assert_eq!(alignment(Dtype::Bf16, &aligned, &misplaced), Alignment::Unaligned);
        assert_eq!(padding(Dtype::Bf16, &aligned, &misplaced).copies.map(|c| c.is_some()), [true, false, false]);
    }
}
