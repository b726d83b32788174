//! One GEMM call for any shape: the dispatcher picks a variant and a strategy for this device,
//! dtype, layout and shape from the device's tuning table, or by a documented heuristic where
//! there is none, and never picks one that would refuse the call.

use crate::error::{Context as _, Error};
use crate::gpu::Gpu;
use crate::kernel::{Element, GemmArgs, Kernel};
use crate::plan::{check_gemm_call, plan_gemm_with, plan_transpose, runs_on, Activation, Buffer, EpilogueArgs, GemmShape, TransposeShape};
use crate::Result;
use cudarc::driver::{CudaSlice, DevicePtr, DevicePtrMut};
use tilesmith_spec::tuning::{Alignment, Device, Strategy, TuningTable};
use tilesmith_spec::{Built, Dtype, GridRule, Layout};

/// Rows of the operands the padded strategy moves start 128 bytes apart at least, a whole
/// number of 128-byte lines, which TMA reads best.
const PADDED_ROW_BYTES: usize = 128;

/// What the dispatcher picked for a call, and why.
#[derive(Clone, Debug)]
pub struct Choice {
    /// The GEMM variant. With the padded strategy its layout may differ from the call's: a
    /// moved operand is stored transposed.
    pub kernel: Kernel,
    pub strategy: Strategy,
    /// The transpose variant that moves operands, for the padded strategy.
    pub transpose: Option<Kernel>,
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

    /// The choice to run `kernel` with `strategy` (and `transpose` for the padded one), for
    /// timing the candidates one by one.
    pub fn forced(kernel: Kernel, strategy: Strategy, transpose: Option<Kernel>) -> Choice {
        Choice { kernel, strategy, transpose, reason: "chosen by the caller".into() }
    }

    /// Enqueues C = A·B with this pick, using `workspace` for the padded strategy. A choice
    /// made for another call is checked like any launch, and refused if it does not fit.
    pub fn run<T: Element>(&self, gpu: &Gpu, args: GemmArgs<'_, T>, workspace: &mut Workspace) -> Result<()> {
        match (self.strategy, &self.transpose) {
            (Strategy::Direct, _) => self.kernel.gemm(gpu, args),
            (Strategy::Padded, Some(transpose)) => run_padded(gpu, &self.kernel, transpose, args, workspace),
            (Strategy::Padded, None) => Err(Error::Refused {
                name: self.kernel.name().to_string(),
                rule: "the padded strategy needs a transpose variant to move operands".into(),
            }),
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

/// Whether an operand with this leading dimension and start needs moving for TMA.
pub fn misaligned(dtype: Dtype, ld: usize, addr: u64) -> bool {
    !(ld as u128 * u128::from(dtype.size_bytes())).is_multiple_of(16) || !addr.is_multiple_of(16)
}

/// Whether a call's operands suit TMA as they are.
pub fn alignment(dtype: Dtype, shape: &GemmShape, buffers: &[Buffer; 3]) -> Alignment {
    let lds = [shape.lda, shape.ldb, shape.ldc];
    if (0..3).any(|i| misaligned(dtype, lds[i], buffers[i].addr)) {
        Alignment::Unaligned
    } else {
        Alignment::Aligned
    }
}

/// An operand moved through scratch by a transpose (X = the stored matrix, Y its transpose),
/// and the byte offset of the scratch side in the workspace.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Move {
    shape: TransposeShape,
    offset: usize,
}

/// The padded strategy's plan. An unaligned A or B is transposed into scratch with aligned
/// rows, which flips its storage order (the GEMM runs in the layout that results); an
/// unaligned C is computed transposed, Cᵀ = Bᵀ·Aᵀ, into scratch and transposed into place.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Padding {
    a: Option<Move>,
    b: Option<Move>,
    /// Cᵀ in scratch (X) into C (Y).
    c: Option<Move>,
    /// The GEMM the kernel computes.
    gemm: GemmShape,
    /// Whether the GEMM's A operand is (what became of) B, when C is computed transposed.
    swapped: bool,
    bytes: usize,
}

fn layout_of(a_row_major: bool, b_row_major: bool) -> Layout {
    *Layout::ALL.iter().find(|l| l.a_row_major() == a_row_major && l.b_row_major() == b_row_major).expect("four layouts")
}

/// The padded strategy's plan for a call; `None` where its scratch would not fit an address.
fn padding(dtype: Dtype, shape: &GemmShape, buffers: &[Buffer; 3]) -> Option<Padding> {
    let size = dtype.size_bytes() as usize;
    let pad = |elements: usize| Some(elements.max(1).checked_mul(size)?.checked_next_multiple_of(PADDED_ROW_BYTES)? / size);
    let mut bytes: usize = 0;
    let mut scratch = |rows: usize, ld: usize| {
        let offset = bytes;
        bytes = bytes.checked_add(rows.checked_mul(ld)?.checked_mul(size)?.checked_next_multiple_of(256)?.max(256))?;
        Some(offset)
    };
    let [(a_rows, a_cols), (b_rows, b_cols), _] = shape.stored();
    let mut operand = |rows: usize, cols: usize, ld: usize, addr: u64, row_major: bool| {
        if !misaligned(dtype, ld, addr) {
            return Some((row_major, ld, None));
        }
        let moved = TransposeShape { m: rows, n: cols, ldx: ld, ldy: pad(rows)? };
        let offset = scratch(cols, moved.ldy)?;
        Some((!row_major, moved.ldy, Some(Move { shape: moved, offset })))
    };
    let (a_row, lda, a) = operand(a_rows, a_cols, shape.lda, buffers[0].addr, shape.layout.a_row_major())?;
    let (b_row, ldb, b) = operand(b_rows, b_cols, shape.ldb, buffers[1].addr, shape.layout.b_row_major())?;
    let (m, n, k) = (shape.m, shape.n, shape.k);
    if !misaligned(dtype, shape.ldc, buffers[2].addr) {
        let gemm = GemmShape { m, n, k, lda, ldb, ldc: shape.ldc, layout: layout_of(a_row, b_row) };
        return Some(Padding { a, b, c: None, gemm, swapped: false, bytes });
    }
    // Cᵀ (N×M) = Bᵀ·Aᵀ: Bᵀ is row-major where B is column-major, with B's leading dimension.
    let ldd = pad(m)?;
    let offset = scratch(n, ldd)?;
    let c = Some(Move { shape: TransposeShape { m: n, n: m, ldx: ldd, ldy: shape.ldc }, offset });
    let gemm = GemmShape { m: n, n: m, k, lda: ldb, ldb: lda, ldc: ldd, layout: layout_of(!b_row, !a_row) };
    Some(Padding { a, b, c, gemm, swapped: true, bytes })
}

impl Padding {
    /// The buffers the GEMM and the transposes see, the workspace starting at `base`:
    /// [A, B, C] of the GEMM, and for each move [X, Y].
    fn buffers(&self, call: &[Buffer; 3], base: u64) -> ([Buffer; 3], Vec<(TransposeShape, [Buffer; 2])>) {
        let scratch = |m: &Move| Buffer { len: m.shape.spans()[1], addr: base.saturating_add(m.offset as u64) };
        let a = self.a.as_ref().map_or(call[0], scratch);
        let b = self.b.as_ref().map_or(call[1], scratch);
        let mut moves: Vec<(TransposeShape, [Buffer; 2])> = Vec::new();
        if let Some(m) = &self.a {
            moves.push((m.shape, [call[0], a]));
        }
        if let Some(m) = &self.b {
            moves.push((m.shape, [call[1], b]));
        }
        let gemm = match &self.c {
            Some(m) => {
                let d = Buffer { len: m.shape.spans()[0], addr: base.saturating_add(m.offset as u64) };
                moves.push((m.shape, [d, call[2]]));
                [b, a, d]
            }
            None => [a, b, call[2]],
        };
        (gemm, moves)
    }
}

/// The transpose variant the padded strategy moves operands with: the first checked one of
/// the dtype, by name, that runs on the device.
pub fn transposer<'k>(kernels: impl IntoIterator<Item = &'k Kernel>, device: &Device, dtype: Dtype) -> Option<&'k Kernel> {
    kernels
        .into_iter()
        .filter(|k| {
            let v = k.variant();
            v.dtype == dtype
                && v.is_checked()
                && v.family == "transpose"
                && !k.is_reference()
                && runs_on(&k.info().entry.targets, (device.capability[0], device.capability[1]))
        })
        .min_by(|a, b| a.name().cmp(b.name()))
}

/// One GEMM call as the dispatcher sees it: what it multiplies and what its epilogue asks.
#[derive(Clone, Copy, Debug)]
pub struct GemmCall<'c> {
    pub dtype: Dtype,
    pub shape: &'c GemmShape,
    pub buffers: [Buffer; 3],
    pub epilogue: &'c EpilogueArgs,
}

/// Whether the padded strategy can carry this epilogue: not where C is computed transposed in
/// scratch (its biases would swap sides and β·C would read scratch).
fn padded_epilogue(padding: &Padding, epilogue: &EpilogueArgs) -> bool {
    padding.c.is_none() || epilogue.is_plain()
}

/// Whether `built` takes the call with this strategy on this device.
fn accepts(built: &Built, transpose: Option<&Kernel>, device: &Device, call: &GemmCall<'_>, strategy: Strategy) -> bool {
    let GemmCall { dtype, shape, buffers, epilogue } = *call;
    if !runs_on(&built.entry.targets, (device.capability[0], device.capability[1])) {
        return false;
    }
    match strategy {
        Strategy::Direct => plan_gemm_with(built, dtype, shape, buffers, epilogue, device.sms).is_ok(),
        Strategy::Padded => {
            let Some(transpose) = transpose else { return false };
            if alignment(dtype, shape, &buffers) == Alignment::Aligned {
                return false;
            }
            let Some(padding) = padding(dtype, shape, &buffers).filter(|p| padded_epilogue(p, epilogue)) else { return false };
            // The workspace starts 256-byte aligned; address 0 stands for it.
            let (gemm, moves) = padding.buffers(&buffers, 0);
            plan_gemm_with(built, dtype, &padding.gemm, gemm, epilogue, device.sms).is_ok()
                && moves.iter().all(|(shape, io)| plan_transpose(transpose.info(), dtype, shape, *io, device.sms).is_ok())
        }
    }
}

/// The GEMM variants of the dtype that take the call on the device, with their strategy:
/// directly where they can; for an unaligned call, also padded.
pub fn candidates<'k>(
    kernels: &[&'k Kernel],
    transpose: Option<&Kernel>,
    device: &Device,
    call: &GemmCall<'_>,
) -> Vec<(&'k Kernel, Strategy)> {
    let mut out = Vec::new();
    for strategy in [Strategy::Direct, Strategy::Padded] {
        for &kernel in kernels {
            if accepts(kernel.info(), transpose, device, call, strategy) {
                out.push((kernel, strategy));
            }
        }
    }
    out
}

/// The variant that differs from `kernel` in its `epilogue` axis only, having `epilogue`.
fn with_epilogue<'k>(kernels: &[&'k Kernel], kernel: &Kernel, epilogue: &str) -> Option<&'k Kernel> {
    let wanted = kernel.variant();
    let same = |v: &tilesmith_spec::Variant| {
        v.backend == wanted.backend
            && v.warps == wanted.warps
            && v.bounds == wanted.bounds
            && v.tile == wanted.tile
            && Activation::epilogue_of(v) == epilogue
            && v.axes.iter().filter(|(axis, _)| *axis != "epilogue").eq(wanted.axes.iter().filter(|(axis, _)| *axis != "epilogue"))
    };
    kernels.iter().copied().find(|k| same(k.variant()))
}

/// Picks the variant and strategy for a call. Only variants applying the call's activation
/// (its `epilogue` axis) compete. With a table for this device (same name, compute capability
/// and SM count): the nearest measured problem of the call's dtype, layout and alignment, its
/// candidates in rank order (each as the variant of the same axes with the call's epilogue),
/// the first that takes the call; then the next nearest problem. Otherwise, or when no table
/// candidate takes it, [`heuristic`].
pub fn choose<'k>(
    kernels: impl IntoIterator<Item = &'k Kernel>,
    tables: &[TuningTable],
    device: &Device,
    call: &GemmCall<'_>,
) -> std::result::Result<Choice, String> {
    let GemmCall { dtype, shape, buffers, epilogue } = *call;
    check_gemm_call(shape, buffers)?;
    let all: Vec<&Kernel> = kernels.into_iter().collect();
    let transpose = transposer(all.iter().copied(), device, dtype);
    let gemms: Vec<&Kernel> = all
        .iter()
        .copied()
        .filter(|k| {
            let v = k.variant();
            v.dtype == dtype
                && v.family == "gemm"
                && !k.is_reference()
                && epilogue.activation.epilogues().contains(&Activation::epilogue_of(v))
        })
        .collect();
    let class = alignment(dtype, shape, &buffers);
    let problem = [shape.m, shape.n, shape.k].map(|d| d as u64);
    let chosen = |kernel: &Kernel, strategy: Strategy, reason: String| Choice {
        kernel: kernel.clone(),
        strategy,
        transpose: (strategy == Strategy::Padded).then(|| transpose.cloned()).flatten(),
        reason,
    };
    if let Some(table) = tables.iter().find(|t| &t.device == device) {
        for entry in table.nearest(dtype, shape.layout, class, problem) {
            for (rank, candidate) in entry.ranked.iter().enumerate() {
                let Some(ranked) = all.iter().find(|k| k.name() == candidate.variant) else { continue };
                let takes = |kernel: &&Kernel| accepts(kernel.info(), transpose, device, call, candidate.strategy);
                let kernel = epilogue.activation.epilogues().iter().filter_map(|word| with_epilogue(&gemms, ranked, word)).find(takes);
                if let Some(kernel) = kernel {
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
                    return Ok(chosen(kernel, candidate.strategy, reason));
                }
            }
        }
    }
    let why =
        if tables.iter().any(|t| &t.device == device) { "no table candidate takes this call" } else { "no tuning table for this device" };
    let (kernel, strategy, estimate) = heuristic(&gemms, transpose, device, call)?;
    Ok(chosen(kernel, strategy, format!("{why} ({} {}sm): heuristic, estimated {:.1} us", device.name, device.sms, estimate * 1e6)))
}

/// The heuristic: among the variants that take the call (directly, else padded), the least
/// estimated time, ties by name. A variant's estimate is its rounds of tiles, each the tile's
/// multiply-adds at a rate for its backend and tile shape, plus the padded moves at 3 TB/s:
///
/// `rounds = ⌈tiles·split_k / SMs⌉`, `time = rounds · 2·TM·TN·⌈K/split_k⌉ / (rate · efficiency)`,
/// where `rate` is 6 TFLOP/s per SM for wgmma, half that for mma and 1/20 for simt, and
/// `efficiency = 1 / (1 + 16/TM + 32/TN)` (larger tiles reuse more of what they load).
pub fn heuristic<'k>(
    kernels: &[&'k Kernel],
    transpose: Option<&Kernel>,
    device: &Device,
    call: &GemmCall<'_>,
) -> std::result::Result<(&'k Kernel, Strategy, f64), String> {
    let GemmCall { dtype, shape, buffers, epilogue } = *call;
    let mut best: Option<(f64, &Kernel, Strategy)> = None;
    for (kernel, strategy) in candidates(kernels, transpose, device, call) {
        if best.is_some_and(|(_, _, s)| s != strategy) {
            break;
        }
        let estimate = estimate_seconds(kernel.info(), device, dtype, shape, &buffers, strategy);
        if best.as_ref().is_none_or(|(t, k, _)| estimate < *t || (estimate == *t && kernel.name() < k.name())) {
            best = Some((estimate, kernel, strategy));
        }
    }
    let (estimate, kernel, strategy) = best.ok_or_else(|| {
        let with = if epilogue.is_plain() { String::new() } else { format!(" with epilogue {}", epilogue.activation.epilogues().join(" or ")) };
        format!(
            "no {dtype} {} variant{with} in the registry runs on {} and takes {}x{}x{} with these leading dimensions, pointers and epilogue arguments",
            shape.layout, device.name, shape.m, shape.n, shape.k
        )
    })?;
    Ok((kernel, strategy, estimate))
}

/// The heuristic's estimate for one candidate, in seconds.
pub fn estimate_seconds(built: &Built, device: &Device, dtype: Dtype, shape: &GemmShape, buffers: &[Buffer; 3], strategy: Strategy) -> f64 {
    let variant = &built.entry.variant;
    let (&[tm, tn, _], Some(split_k)) = (variant.tile(), variant.count("split_k")) else { return f64::INFINITY };
    let (tm, tn, split) = (f64::from(tm), f64::from(tn), u64::from(split_k.max(1)));
    // The padded strategy's GEMM (M and N swapped where C is computed transposed) and the
    // bytes its moves read and write.
    let (m, n, moved) = match strategy {
        Strategy::Padded => {
            let Some(p) = padding(dtype, shape, buffers) else { return f64::INFINITY };
            let moved: f64 = [p.a, p.b, p.c]
                .iter()
                .flatten()
                .map(|mv| 2.0 * mv.shape.m as f64 * mv.shape.n as f64 * f64::from(dtype.size_bytes()))
                .sum();
            (p.gemm.m, p.gemm.n, moved)
        }
        Strategy::Direct => (shape.m, shape.n, 0.0),
    };
    let tiles = (m as f64 / tm).ceil() * (n as f64 / tn).ceil();
    let rounds = (tiles * split as f64 / f64::from(device.sms.max(1))).ceil().max(1.0);
    let rate = match variant.backend.as_str() {
        "wgmma" => 6e12,
        "mma" => 3e12,
        _ => 0.3e12,
    };
    let efficiency = 1.0 / (1.0 + 16.0 / tm + 32.0 / tn);
    let k = (shape.k as u64).div_ceil(split) as f64;
    let mut seconds = rounds * 2.0 * tm * tn * k / (rate * efficiency) + moved / 3e12;
    if let GridRule::SplitK { .. } = built.entry.launch.grid {
        // The partial sums go through shared memory once more.
        seconds += 2e-6;
    }
    seconds
}

fn run_padded<T: Element>(gpu: &Gpu, kernel: &Kernel, transpose: &Kernel, args: GemmArgs<'_, T>, workspace: &mut Workspace) -> Result<()> {
    let stream = gpu.stream();
    let (epilogue, _epilogue_sync) = args.epilogue.held(stream);
    let (a, _a) = args.a.device_ptr(stream);
    let (b, _b) = args.b.device_ptr(stream);
    let c_len = args.c.len();
    let (c, _c) = args.c.device_ptr_mut(stream);
    let call = [Buffer { len: args.a.len(), addr: a }, Buffer { len: args.b.len(), addr: b }, Buffer { len: c_len, addr: c }];
    check_gemm_call(&args.shape, call).map_err(|rule| Error::Refused { name: kernel.name().to_string(), rule })?;
    let padding = padding(T::DTYPE, &args.shape, &call).ok_or_else(|| Error::Refused {
        name: kernel.name().to_string(),
        rule: "the padded strategy's scratch would not fit an address".into(),
    })?;
    if !padded_epilogue(&padding, &epilogue) {
        return Err(Error::Refused {
            name: kernel.name().to_string(),
            rule: "the padded strategy computes an unaligned C transposed, which carries no epilogue: align C's rows to 16 bytes".into(),
        });
    }
    let scratch = workspace.reserve(gpu, padding.bytes.max(1))?;
    let (base, _scratch) = scratch.device_ptr_mut(stream);
    let (gemm, moves) = padding.buffers(&call, base);
    // Every launch is planned before the first is enqueued, so a refusal leaves C untouched.
    plan_gemm_with(kernel.info(), T::DTYPE, &padding.gemm, gemm, &epilogue, gpu.sms())
        .map_err(|rule| Error::Refused { name: kernel.name().to_string(), rule })?;
    for (shape, io) in &moves {
        plan_transpose(transpose.info(), T::DTYPE, shape, *io, gpu.sms())
            .map_err(|rule| Error::Refused { name: transpose.name().to_string(), rule })?;
    }
    let (c_move, operand_moves) = match padding.c {
        Some(_) => moves.split_last().map(|(last, rest)| (Some(*last), rest)).expect("C's move is last"),
        None => (None, &moves[..]),
    };
    for (shape, io) in operand_moves {
        transpose.transpose_buffers(gpu, T::DTYPE, shape, *io)?;
    }
    kernel.gemm_buffers(gpu, T::DTYPE, &padding.gemm, gemm, &epilogue)?;
    if let Some((shape, io)) = c_move {
        transpose.transpose_buffers(gpu, T::DTYPE, &shape, io)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn padding_transposes_what_is_not_aligned() {
        // tn: A row-major 4095x4099 (lda odd), B column-major, stored 4097x4099 (ldb aligned).
        let shape = GemmShape { m: 4095, n: 4097, k: 4099, lda: 4099, ldb: 4104, ldc: 4104, layout: Layout::Tn };
        let buffers = [Buffer { len: usize::MAX, addr: 256 }; 3];
        let p = padding(Dtype::Bf16, &shape, &buffers).unwrap();
        assert_eq!(p.a.map(|m| m.shape), Some(TransposeShape { m: 4095, n: 4099, ldx: 4099, ldy: 4096 }));
        assert_eq!((p.b, p.c, p.swapped), (None, None, false));
        // Aᵀ stored row-major is A column-major: layout nn.
        assert_eq!((p.gemm.layout, p.gemm.lda, p.gemm.ldb, p.gemm.ldc), (Layout::Nn, 4096, 4104, 4104));
        assert_eq!(alignment(Dtype::Bf16, &shape, &buffers), Alignment::Unaligned);
    }

    #[test]
    fn an_unaligned_c_is_computed_transposed() {
        let shape = GemmShape { m: 4095, n: 4097, k: 4099, lda: 4099, ldb: 4099, ldc: 4097, layout: Layout::Tn };
        let buffers = [Buffer { len: usize::MAX, addr: 256 }; 3];
        let p = padding(Dtype::Bf16, &shape, &buffers).unwrap();
        // A (t) and B (n) both move and flip: A becomes n, B becomes t; Cᵀ = Bᵀ·Aᵀ then takes
        // A' = Bᵀ (row-major where B is column-major: n) and B' = Aᵀ (t): layout nt.
        assert!(p.a.is_some() && p.b.is_some() && p.swapped);
        assert_eq!((p.gemm.m, p.gemm.n, p.gemm.k, p.gemm.layout), (4097, 4095, 4099, Layout::Nt));
        assert_eq!(p.c.map(|m| m.shape), Some(TransposeShape { m: 4097, n: 4095, ldx: 4096, ldy: 4097 }));
        let (gemm, moves) = p.buffers(&buffers, 1 << 20);
        assert_eq!(moves.len(), 3);
        assert_eq!(gemm[0].addr, moves[1].1[1].addr, "the GEMM's A is the moved B");
        assert_eq!(moves[2].1[1], buffers[2], "the last move writes C");
    }
}
