//! GEMM's answers to the chooser's questions ([`tilesmith_runtime::Policy`], asked through
//! `registry.family("gemm")` and `registry.gemm(..)` alike): the classes of a call (layout,
//! alignment, epilogue), the ways a variant takes it (directly, or padded: unaligned operands
//! moved through scratch by transposes) and what a way costs ([`estimate_seconds`]); and the
//! padded strategy's plan and launches. No way is offered that would refuse the call.

use crate::args::GemmArgs;
use crate::kernel::{gemm_buffers, transpose_buffers, GemmKernel};
use crate::plan::{check_gemm_call, plan_gemm_with, plan_transpose};
use crate::shape::{Activation, EpilogueArgs, GemmShape, TransposeShape};
use crate::table::{self, Alignment, Strategy};
use cudarc::driver::{CudaSlice, DevicePtrMut};
use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::Arc;
use tilesmith_runtime::{runs_on, Buffer, Class, Element, Error, Gpu, Kernel, Pick, Reading, Result, Ties, TimedAs, Way};
use tilesmith_spec::family_table::Timed;
use tilesmith_spec::tuning::{Clocks, Device};
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
    /// One line for logs: the table entry or the cost model's estimate behind the pick.
    pub reason: String,
}

impl Choice {
    /// The choice GEMM's policy planned for a chooser's pick, with the pick's reason; none
    /// for a pick made without it.
    pub fn kept_in(pick: &Pick) -> Option<Choice> {
        pick.way.plan::<Choice>().map(|choice| Choice { reason: pick.reason.clone(), ..choice.clone() })
    }

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
    pub fn run<T: Element, TC: Element, TB: Element>(
        &self,
        gpu: &Gpu,
        mut args: GemmArgs<'_, T, TC, TB>,
        workspace: &mut Workspace,
    ) -> Result<()> {
        let shape = args.shape;
        let (buffers, epilogue, _guards) = args.pinned(gpu.stream());
        // SAFETY: the buffers are the borrowed slices of `args`, held until the launches are enqueued.
        unsafe { self.run_buffers(gpu, T::DTYPE, &shape, buffers, &epilogue, workspace) }
    }

    /// As [`Choice::run`], on buffers the caller holds on the GPU's stream.
    ///
    /// # Safety
    ///
    /// As [`Kernel::launch_planned`]: each buffer is a live allocation of at least its length.
    pub(crate) unsafe fn run_buffers(
        &self,
        gpu: &Gpu,
        dtype: Dtype,
        shape: &GemmShape,
        buffers: [Buffer; 3],
        epilogue: &EpilogueArgs,
        workspace: &mut Workspace,
    ) -> Result<()> {
        let shape = &canonical(dtype, shape);
        // SAFETY: the caller keeps this function's promise, which is the launches'.
        match (self.strategy, &self.transpose) {
            (Strategy::Direct, _) => unsafe { gemm_buffers(&self.kernel, gpu, dtype, shape, buffers, epilogue) },
            (Strategy::Padded, Some(transpose)) => unsafe {
                run_padded(gpu, &self.kernel, transpose, dtype, shape, buffers, epilogue, workspace)
            },
            (Strategy::Padded, None) => Err(Error::Refused {
                name: self.kernel.name().to_string(),
                rule: "the padded strategy needs a transpose variant to move operands".into(),
            }),
        }
    }
}

/// Scratch memory for the padded strategy, grown on demand and kept for the next call.
#[derive(Default, Debug)]
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
            let what = format!("allocating {bytes} bytes of GEMM workspace");
            self.buffer = Some(gpu.stream().alloc_zeros::<u8>(bytes).map_err(|source| Error::Cuda { what, source })?);
        }
        Ok(self.buffer.as_mut().expect("reserved above"))
    }
}

/// The call as the dispatcher sees it, the same memory read the same way: an operand stored as
/// one row has any leading dimension (it takes the smallest 16-byte multiple), and A or B
/// stored as rows of one element one after another (M = 1 column-major, N = 1 row-major, with a
/// leading dimension of 1) is that one row in the other storage order. A matrix-vector product
/// then needs no moves in any layout.
pub fn canonical(dtype: Dtype, shape: &GemmShape) -> GemmShape {
    let per_line = (16 / dtype.size_bytes().max(1)).max(1) as usize;
    // A row too long to round up keeps its leading dimension; the checks refuse it later.
    let one_row = |row_len: usize, ld: usize| row_len.max(1).checked_next_multiple_of(per_line).unwrap_or(ld);
    let mut out = *shape;
    let (mut a_row, mut b_row) = (shape.layout.a_row_major(), shape.layout.b_row_major());
    if !a_row && shape.m == 1 && shape.lda == 1 {
        a_row = true;
    }
    if b_row && shape.n == 1 && shape.ldb == 1 {
        b_row = false;
    }
    out.layout = layout_of(a_row, b_row);
    let [(a_rows, a_len), (b_rows, b_len), (c_rows, c_len)] = out.stored();
    if a_rows == 1 {
        out.lda = one_row(a_len, out.lda);
    }
    if b_rows == 1 {
        out.ldb = one_row(b_len, out.ldb);
    }
    if c_rows == 1 {
        out.ldc = one_row(c_len, out.ldc);
    }
    out
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
/// rows, which flips its storage order (the GEMM runs in the layout that results); one that
/// must keep its order (the only layout served is its own) is transposed twice. An unaligned
/// C is computed transposed, Cᵀ = Bᵀ·Aᵀ, into scratch and transposed into place.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Padding {
    /// A's moves, in order, each from the one before (the first from A itself).
    a: Vec<Move>,
    b: Vec<Move>,
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

/// The padded strategy's plan for a call; `None` where its scratch would not fit an address,
/// and for a batch (its moves are of one matrix each). Unaligned operands move; with `to`,
/// aligned ones also move where the GEMM must run in that layout (one the registry has
/// variants of, for a call whose layout it has none of: 8-bit inputs, K-major only), and
/// `None` where no moves give it (a move flips an operand's order).
fn padding(dtype: Dtype, shape: &GemmShape, buffers: &[Buffer; 3], to: Option<Layout>) -> Option<Padding> {
    if shape.is_batched() {
        return None;
    }
    let size = dtype.size_bytes() as usize;
    let pad = |elements: usize| Some(elements.max(1).checked_mul(size)?.checked_next_multiple_of(PADDED_ROW_BYTES)? / size);
    let mut bytes: usize = 0;
    let mut scratch = |rows: usize, ld: usize| {
        let offset = bytes;
        bytes = bytes.checked_add(rows.checked_mul(ld)?.checked_mul(size)?.checked_next_multiple_of(256)?.max(256))?;
        Some(offset)
    };
    let [(a_rows, a_cols), (b_rows, b_cols), _] = shape.stored();
    // C computed transposed, Cᵀ = Bᵀ·Aᵀ, makes the GEMM's A what B became and its B what A became.
    let c_moves = misaligned(dtype, shape.ldc, buffers[2].addr);
    let (want_a, want_b) = match to {
        Some(l) if c_moves => (Some(!l.b_row_major()), Some(!l.a_row_major())),
        Some(l) => (Some(l.a_row_major()), Some(l.b_row_major())),
        None => (None, None),
    };
    let mut operand = |rows: usize, cols: usize, ld: usize, addr: u64, row_major: bool, want: Option<bool>| {
        if !misaligned(dtype, ld, addr) && want.is_none_or(|w| w == row_major) {
            return Some((row_major, ld, Vec::new()));
        }
        let moved = TransposeShape { m: rows, n: cols, ldx: ld, ldy: pad(rows)? };
        let first = Move { shape: moved, offset: scratch(cols, moved.ldy)? };
        if want != Some(row_major) {
            return Some((!row_major, moved.ldy, vec![first]));
        }
        // Unaligned, and already in the order the GEMM needs: transposed back, aligned.
        let back = TransposeShape { m: cols, n: rows, ldx: moved.ldy, ldy: pad(cols)? };
        let second = Move { shape: back, offset: scratch(rows, back.ldy)? };
        Some((row_major, back.ldy, vec![first, second]))
    };
    let (a_row, lda, a) = operand(a_rows, a_cols, shape.lda, buffers[0].addr, shape.layout.a_row_major(), want_a)?;
    let (b_row, ldb, b) = operand(b_rows, b_cols, shape.ldb, buffers[1].addr, shape.layout.b_row_major(), want_b)?;
    let (m, n, k) = (shape.m, shape.n, shape.k);
    if !c_moves {
        let gemm = GemmShape { m, n, k, lda, ldb, ldc: shape.ldc, layout: layout_of(a_row, b_row), batch: shape.batch };
        return Some(Padding { a, b, c: None, gemm, swapped: false, bytes });
    }
    // Cᵀ (N×M) = Bᵀ·Aᵀ: Bᵀ is row-major where B is column-major, with B's leading dimension.
    let ldd = pad(m)?;
    let offset = scratch(n, ldd)?;
    let c = Some(Move { shape: TransposeShape { m: n, n: m, ldx: ldd, ldy: shape.ldc }, offset });
    let gemm = GemmShape { m: n, n: m, k, lda: ldb, ldb: lda, ldc: ldd, layout: layout_of(!b_row, !a_row), batch: shape.batch };
    Some(Padding { a, b, c, gemm, swapped: true, bytes })
}

/// The padded plan that runs the call on a variant of `layout`: the moves of unaligned
/// operands where they give that layout, else the moves that do.
fn padded_for(dtype: Dtype, shape: &GemmShape, buffers: &[Buffer; 3], layout: Layout) -> Option<Padding> {
    padding(dtype, shape, buffers, None).filter(|p| p.gemm.layout == layout).or_else(|| padding(dtype, shape, buffers, Some(layout)))
}

/// Whether no variant among `gemms` computes `layout`: the padded strategy then moves operands
/// to give the GEMM one that some variant computes.
fn unserved(gemms: &[&Kernel], layout: Layout) -> bool {
    !gemms.iter().any(|k| k.layout().ok() == Some(layout))
}

impl Padding {
    /// The buffers the GEMM and the transposes see, the workspace starting at `base`:
    /// [A, B, C] of the GEMM, and for each move [X, Y].
    fn buffers(&self, call: &[Buffer; 3], base: u64) -> ([Buffer; 3], Vec<(TransposeShape, [Buffer; 2])>) {
        let scratch = |m: &Move| Buffer { len: m.shape.spans()[1], addr: base.saturating_add(m.offset as u64) };
        let mut moves: Vec<(TransposeShape, [Buffer; 2])> = Vec::new();
        // Each operand's moves in order, each from where the one before put it.
        let mut chain = |from: Buffer, steps: &[Move]| {
            steps.iter().fold(from, |source, step| {
                moves.push((step.shape, [source, scratch(step)]));
                scratch(step)
            })
        };
        let a = chain(call[0], &self.a);
        let b = chain(call[1], &self.b);
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
/// scratch (its biases would swap sides, β·C would read scratch, and C's move is of the
/// inputs' type).
fn padded_epilogue(padding: &Padding, epilogue: &EpilogueArgs) -> bool {
    padding.c.is_none() || epilogue.is_plain()
}

/// Whether the padded strategy's moves (transposes of A's dtype) carry B too: B of A's type,
/// or of another as wide (e5m2 by e4m3: a transpose moves bytes, whatever they encode).
fn moves_bytes_alike(dtype: Dtype, epilogue: &EpilogueArgs) -> bool {
    epilogue.b.is_none_or(|b| b.size_bytes() == dtype.size_bytes())
}

/// Whether `built` takes the call with this strategy on this device. The padded strategy
/// serves unaligned calls, and, where `convert`, calls in a layout no variant computes.
fn accepts(built: &Built, transpose: Option<&Kernel>, device: &Device, call: &GemmCall<'_>, strategy: Strategy, convert: bool) -> bool {
    let GemmCall { dtype, shape, buffers, epilogue } = *call;
    if !runs_on(&built.entry.targets, (device.capability[0], device.capability[1])) {
        return false;
    }
    match strategy {
        Strategy::Direct => plan_gemm_with(built, dtype, shape, buffers, epilogue, device.sms).is_ok(),
        Strategy::Padded => {
            let Some(transpose) = transpose.filter(|_| moves_bytes_alike(dtype, epilogue)) else { return false };
            // Each operand moves as this variant's layout needs: once where that flips it into
            // the order the variant reads, twice where it is in that order already.
            let plan = match built.entry.variant.word("layout").and_then(Layout::parse) {
                _ if !convert && alignment(dtype, shape, &buffers) == Alignment::Aligned => None,
                Some(layout) => padded_for(dtype, shape, &buffers, layout),
                None => padding(dtype, shape, &buffers, None),
            };
            let Some(padding) = plan.filter(|p| padded_epilogue(p, epilogue)) else { return false };
            // The workspace starts 256-byte aligned; an address far above any buffer's stands
            // for it (0 would be refused as a null pointer).
            let (gemm, moves) = padding.buffers(&buffers, WORKSPACE_STAND_IN);
            plan_gemm_with(built, dtype, &padding.gemm, gemm, epilogue, device.sms).is_ok()
                && moves.iter().all(|(shape, io)| plan_transpose(transpose.info(), dtype, shape, *io, device.sms).is_ok())
        }
    }
}

/// Where a pick assumes the workspace lies: 256-byte aligned, apart from every buffer a call
/// passes (device addresses lie below 2^48), and with room for any span below it.
const WORKSPACE_STAND_IN: u64 = 1 << 62;

/// The GEMM variants of the dtype that take the (canonical) call on the device, with their
/// strategy: directly where they can; for an unaligned call, or one in a layout none of them
/// computes, also padded.
fn candidates<'k>(kernels: &[&'k Kernel], transpose: Option<&Kernel>, device: &Device, call: &GemmCall<'_>) -> Vec<(&'k Kernel, Strategy)> {
    let mut out = Vec::new();
    let convert = unserved(kernels, call.shape.layout);
    for strategy in [Strategy::Direct, Strategy::Padded] {
        for &kernel in kernels {
            if accepts(kernel.info(), transpose, device, call, strategy, convert) {
                out.push((kernel, strategy));
            }
        }
    }
    out
}

/// The values GEMM's declaration gives its `epilogue` axis, where `activation` is not one of them.
fn undeclared(kernels: &[&Kernel], activation: Activation) -> Option<String> {
    let gemm = kernels.iter().find(|k| k.variant().family == "gemm")?;
    let axis = gemm.info().entry.declaration.axes.iter().find(|a| a.name == "epilogue")?;
    let declared = activation == Activation::NONE || axis.values.iter().any(|v| v == activation.as_str());
    (!declared).then(|| axis.values.join(", "))
}

/// The variant that differs from `kernel` at most in its `epilogue` axis, having `epilogue`,
/// and in its layout where `layout` is given, having that one.
fn sibling<'k>(kernels: &[&'k Kernel], kernel: &Kernel, epilogue: &str, layout: Option<Layout>) -> Option<&'k Kernel> {
    let wanted = kernel.variant();
    // B's type is free too: `kernels` hold only variants reading the call's B, and a variant
    // reading B as the other 8-bit type runs the same code.
    let free = |axis: &str| axis == "epilogue" || axis == "b_dtype" || (layout.is_some() && axis == "layout");
    let same = |v: &tilesmith_spec::Variant| {
        v.backend == wanted.backend
            && v.warps == wanted.warps
            && v.bounds == wanted.bounds
            && v.tile == wanted.tile
            && Activation::epilogue_of(v) == epilogue
            && layout.is_none_or(|l| v.word("layout") == Some(l.as_str()))
            && v.axes.iter().filter(|(axis, _)| !free(axis)).eq(wanted.axes.iter().filter(|(axis, _)| !free(axis)))
    };
    kernels.iter().copied().find(|k| same(k.variant()))
}

/// How far ([`FamilyEntry::distance`](tilesmith_spec::family_table::FamilyEntry::distance), summed |log2| of problem count, M, N and K) a measured
/// problem may lie from a call and still stand for it; farther, the cost model does better
/// (`tilesmith replay`).
pub const NEAR_ENOUGH: f64 = 1.0;

/// How the chooser reads GEMM's tables: within [`NEAR_ENOUGH`]; another GPU's with M and N
/// scaled so that the problem it is compared with fills as many waves of tiles there as the
/// call does here; every entry standing (the tuner ranks every way but those its cost model
/// puts far behind); never timed on a first call (the padded way launches three variants).
pub const READING: Reading =
    Reading { near_enough: NEAR_ENOUGH, scaled: &["m", "n"], partial_entries: None, first_call: false, ties: Ties::ByName };

/// The GEMM variants of the call's dtype that may run it: of its B and C types, applying its
/// activation (their `epilogue` axis); refused where the activation is none GEMM declares.
fn gemms_of<'k>(kernels: &[&'k Kernel], call: &GemmCall<'_>) -> std::result::Result<Vec<&'k Kernel>, String> {
    let GemmCall { dtype, epilogue, .. } = *call;
    if let Some(values) = undeclared(kernels, epilogue.activation) {
        return Err(format!("activation `{}` is not a value of GEMM's `epilogue` axis, which declares {values}", epilogue.activation));
    }
    // Variants writing another type of C take no part, not even in deciding which layouts the
    // call's types are computed in (`unserved`).
    let (out, b) = (epilogue.out.unwrap_or(dtype), epilogue.b.unwrap_or(dtype));
    Ok(kernels
        .iter()
        .copied()
        .filter(|k| {
            let v = k.variant();
            v.dtype == dtype
                && v.family == "gemm"
                && !k.is_reference()
                && k.operand_dtype("b") == Some(b)
                && k.operand_dtype("c") == Some(out)
                && epilogue.activation.applied_by(Activation::epilogue_of(v))
        })
        .collect())
}

/// GEMM's classes of a call, as the chooser reads its tables: its layout and alignment
/// ([`canonical`]), with its activation where it has one (entries of their own), then plain.
pub fn classes(call: &GemmCall<'_>) -> Vec<Class> {
    let shape = canonical(call.dtype, call.shape);
    let alignment = alignment(call.dtype, &shape, &call.buffers);
    let activation = call.epilogue.activation;
    let activated = (activation != Activation::NONE).then_some(activation.as_str());
    activated.into_iter().map(Some).chain([None]).map(|with| table::class(shape.layout, alignment, with)).collect()
}

/// The ways GEMM's variants among `kernels` (with the transposes that move operands) take the
/// call on `device`: each variant applying its activation, directly where it takes the call so,
/// and for an unaligned call, or one in a layout none of them computes, also padded. The call
/// is seen as [`canonical`] makes it.
pub fn ways<'k>(
    kernels: impl IntoIterator<Item = &'k Kernel>,
    device: &Device,
    call: &GemmCall<'_>,
) -> std::result::Result<Vec<Way>, String> {
    check_gemm_call(call.shape, call.buffers)?;
    let shape = &canonical(call.dtype, call.shape);
    let call = &GemmCall { shape, ..*call };
    let all: Vec<&Kernel> = kernels.into_iter().collect();
    let transpose = transposer(all.iter().copied(), device, call.dtype);
    let gemms = gemms_of(&all, call)?;
    let ways: Vec<Way> = candidates(&gemms, transpose, device, call)
        .into_iter()
        .map(|(kernel, strategy)| {
            let transpose = (strategy == Strategy::Padded).then(|| transpose.cloned()).flatten();
            let choice = Choice { kernel: kernel.clone(), strategy, transpose, reason: String::new() };
            Way { kernel: kernel.clone(), strategy: strategy.word(), plan: Arc::new(choice) }
        })
        .collect();
    if ways.is_empty() {
        return Err(none_takes(&gemms, device, call));
    }
    Ok(ways)
}

/// The ways `kernels` take the call ([`ways`]; none where none does), each with its cost,
/// least first; ties direct first, then by name.
pub fn by_cost<'k>(kernels: impl IntoIterator<Item = &'k Kernel>, device: &Device, call: &GemmCall<'_>) -> Vec<(f64, Way)> {
    let mut out: Vec<(f64, Way)> =
        ways(kernels, device, call).unwrap_or_default().into_iter().map(|w| (cost(device, call, &w), w)).collect();
    out.sort_by(|(a, wa), (b, wb)| {
        a.total_cmp(b).then_with(|| (wa.strategy.is_some(), wa.kernel.name()).cmp(&(wb.strategy.is_some(), wb.kernel.name())))
    });
    out
}

/// A way's time on the call by GEMM's cost model ([`estimate_seconds`]).
pub fn cost(device: &Device, call: &GemmCall<'_>, way: &Way) -> f64 {
    let shape = canonical(call.dtype, call.shape);
    let strategy = way.plan::<Choice>().map_or(Strategy::Direct, |c| c.strategy);
    estimate_seconds(way.kernel.info(), device, call.dtype, &shape, &call.buffers, strategy)
}

/// A timing's variant and strategy.
type Timing = (String, Option<String>);

/// Which of `ways` a table's timing stands for: the variant of the timed one's axes with the
/// call's dtype and epilogue (and, padded, the layout the call's moves give), run the way it
/// was timed.
pub fn timings<'w>(kernels: impl IntoIterator<Item = &'w Kernel>, call: &GemmCall<'_>, ways: &'w [Way]) -> TimedAs<'w> {
    let shape = canonical(call.dtype, call.shape);
    let all: Vec<&Kernel> = kernels.into_iter().collect();
    let gemms = gemms_of(&all, call).unwrap_or_default();
    let by_name: HashMap<&str, &Kernel> = all.iter().map(|k| (k.name(), *k)).collect();
    let way_of: HashMap<(&str, Option<&str>), usize> =
        ways.iter().enumerate().map(|(i, w)| ((w.kernel.name(), w.strategy.as_deref()), i)).collect();
    // A padded way was measured for the entry's operands; the call's may move others, which
    // gives the GEMM another layout: the same variant in that one.
    let padded_layout = padding(call.dtype, &shape, &call.buffers, None).map(|p| p.gemm.layout);
    let epilogues: Vec<String> = call.epilogue.activation.epilogues().into_iter().map(str::to_string).collect();
    // Entries rank the same variants: each one's way is found once a pick.
    let found: RefCell<HashMap<Timing, Option<usize>>> = RefCell::default();
    Box::new(move |timed: &Timed| {
        let key = (timed.variant.clone(), timed.strategy.clone());
        if let Some(known) = found.borrow().get(&key) {
            return *known;
        }
        let way = Strategy::of(timed).ok().and_then(|strategy| {
            let ranked = *by_name.get(timed.variant.as_str())?;
            let layout = if strategy == Strategy::Padded { padded_layout } else { None };
            let word = strategy.word();
            epilogues
                .iter()
                .filter_map(|e| sibling(&gemms, ranked, e, layout))
                .find_map(|k| way_of.get(&(k.name(), word.as_deref())).copied())
        });
        found.borrow_mut().insert(key, way);
        way
    })
}

/// Why none of the GEMM variants that may run a call ([`gemms_of`]) takes it.
fn none_takes(gemms: &[&Kernel], device: &Device, call: &GemmCall<'_>) -> String {
    let GemmCall { dtype, shape, epilogue, .. } = *call;
    let capability = (device.capability[0], device.capability[1]);
    if !gemms.is_empty() && !gemms.iter().any(|k| runs_on(&k.info().entry.targets, capability)) {
        let mut targets: Vec<String> = gemms.iter().flat_map(|k| k.info().entry.targets.sass.clone()).collect();
        targets.sort();
        targets.dedup();
        return format!(
            "the registry's {dtype} GEMM variants have code for {} only, and {} is compute capability {}.{}",
            targets.join(", "),
            device.name,
            capability.0,
            capability.1
        );
    }
    let with = if epilogue.is_plain() { String::new() } else { format!(" with epilogue {}", epilogue.activation.epilogues().join(" or ")) };
    let writing = epilogue.out.map(|out| format!(" writing {out}")).unwrap_or_default();
    let by = epilogue.b.map(|b| format!(" by {b}")).unwrap_or_default();
    format!(
        "no {dtype}{by} {} variant{writing}{with} in the registry runs on {} and takes {}x{}x{} with these leading dimensions, pointers and epilogue arguments",
        shape.layout, device.name, shape.m, shape.n, shape.k
    )
}

/// The rates GEMM's cost model assumes where the driver reports no clocks: an H100 SXM's.
const DEFAULT_CLOCKS: Clocks = Clocks { sm_mhz: 1980, memory_gbps: 3350 };

/// Floating-point operations per second an SM sustains on a large tile at 1980 MHz: the
/// backend's declared `gflops_per_sm` (variants.toml, fitted with `tilesmith replay`), else
/// this, a CUDA-core kernel's.
const UNDECLARED_GFLOPS_PER_SM: u32 = 300;
/// Seconds a block waits for a load: the bytes its ring holds in flight, over this, bound the
/// bandwidth it draws.
const LOAD_LATENCY: f64 = 2.25e-6;
/// The bandwidth a GEMM's loads reach at best, relative to the DRAM's: above 1, since the
/// traffic counted is every operand once and part of it comes from the L2.
const BANDWIDTH_FRACTION: f64 = 1.35;
/// A launch, filling the ring and draining the last tile.
const FIXED_SECONDS: f64 = 5e-6;
/// A round of split-K blocks: the cluster barrier and adding up the slices, per slice.
const SPLIT_SECONDS: f64 = 0.3e-6;
/// How much slower a variant runs on operands whose rows are not 16-byte aligned, element by
/// element.
const ELEMENT_PATH: f64 = 6.0;
/// The padded strategy's transposes move rows with odd leading dimensions at this fraction of
/// the DRAM bandwidth, each read and written once.
const MOVE_FRACTION: f64 = 0.35;

/// GEMM's cost model: its estimate for one way, in seconds: the longer of its arithmetic and its
/// DRAM traffic, plus fixed costs, plus the padded strategy's moves.
///
/// Arithmetic: `rounds · 2·TM·TN·⌈K/split⌉ / (rate · clock/1980 MHz · efficiency)` with
/// `rounds = ⌈tiles·split / SMs⌉` and `efficiency = 1 / (1 + 3/TM + 22/TN)` (larger tiles reuse
/// more of what they load). Traffic: A, B and C once, at the bandwidth the blocks in flight
/// draw (each block's ring of `stages` K blocks over [`LOAD_LATENCY`]), at most
/// [`BANDWIDTH_FRACTION`] of the DRAM's.
pub fn estimate_seconds(built: &Built, device: &Device, dtype: Dtype, shape: &GemmShape, buffers: &[Buffer; 3], strategy: Strategy) -> f64 {
    let variant = &built.entry.variant;
    let (&[tm, tn, tk], Some(split_k)) = (variant.tile(), variant.count("split_k")) else { return f64::INFINITY };
    let (tm, tn, tk, split) = (f64::from(tm), f64::from(tn), f64::from(tk), f64::from(split_k.max(1)));
    let stages = f64::from(variant.count("stages").unwrap_or(2).max(1));
    let size = f64::from(dtype.size_bytes());
    let clocks = device.clocks.unwrap_or(DEFAULT_CLOCKS);
    let bandwidth = f64::from(clocks.memory_gbps.max(1)) * 1e9;
    // The padded strategy's GEMM (M and N swapped where C is computed transposed), the bytes
    // its moves read and write, and how many it makes.
    let (m, n, moved, moves) = match strategy {
        Strategy::Padded => {
            let layout = variant.word("layout").and_then(Layout::parse);
            let Some(p) = layout.and_then(|layout| padded_for(dtype, shape, buffers, layout)) else { return f64::INFINITY };
            let moves: Vec<&Move> = p.a.iter().chain(&p.b).chain(&p.c).collect();
            let moved: f64 = moves.iter().map(|mv| 2.0 * mv.shape.m as f64 * mv.shape.n as f64 * size).sum();
            (p.gemm.m as f64, p.gemm.n as f64, moved, moves.len() as f64)
        }
        Strategy::Direct => (shape.m as f64, shape.n as f64, 0.0, 0.0),
    };
    let k = shape.k as f64;
    let problems = shape.batch.count as f64;
    let sms = f64::from(device.sms.max(1));
    let blocks = (m / tm).ceil() * (n / tn).ceil() * split * problems;
    let rounds = (blocks / sms).ceil().max(1.0);
    let efficiency = 1.0 / (1.0 + 3.0 / tm + 22.0 / tn);
    let gflops = built.entry.gflops_per_sm.unwrap_or(UNDECLARED_GFLOPS_PER_SM);
    let rate = f64::from(gflops) * 1e9 * f64::from(clocks.sm_mhz.max(1)) / 1980.0 * efficiency;
    let mut compute = rounds * 2.0 * tm * tn * (k / split).ceil() / rate;
    // A variant that takes rows off 16-byte alignment loads them element by element.
    let element_path = strategy == Strategy::Direct
        && built.entry.requires.ptr_align_bytes < 16
        && [shape.lda, shape.ldb].iter().zip(buffers).any(|(&ld, b)| misaligned(dtype, ld, b.addr));
    if element_path {
        compute *= ELEMENT_PATH;
    }
    let in_flight = blocks.min(sms) * stages * (tm.min(m) + tn.min(n)) * tk * size;
    let drawn = (in_flight / LOAD_LATENCY).min(BANDWIDTH_FRACTION * bandwidth);
    let traffic = problems * (m * k + k * n + m * n) * size / drawn;
    let mut seconds = compute.max(traffic) + FIXED_SECONDS + moved / (MOVE_FRACTION * bandwidth) + moves * FIXED_SECONDS;
    if let GridRule::SplitK { .. } = built.entry.launch.grid {
        seconds += rounds * SPLIT_SECONDS * split;
    }
    seconds
}

/// The padded strategy's launches, each planned before the first is enqueued.
///
/// # Safety
///
/// As [`Choice::run_buffers`].
#[allow(clippy::too_many_arguments)]
unsafe fn run_padded(
    gpu: &Gpu,
    kernel: &Kernel,
    transpose: &Kernel,
    dtype: Dtype,
    shape: &GemmShape,
    call: [Buffer; 3],
    epilogue: &EpilogueArgs,
    workspace: &mut Workspace,
) -> Result<()> {
    let stream = gpu.stream();
    check_gemm_call(shape, call).map_err(|rule| Error::Refused { name: kernel.name().to_string(), rule })?;
    if shape.is_batched() {
        return Err(Error::Refused {
            name: kernel.name().to_string(),
            rule: "the padded strategy moves one matrix per operand and takes no batch: align the rows and batch strides to 16 bytes"
                .into(),
        });
    }
    let padding = padded_for(dtype, shape, &call, kernel.layout()?).ok_or_else(|| Error::Refused {
        name: kernel.name().to_string(),
        rule: format!(
            "the padded strategy has no moves of the operands that give layout {} (or its scratch would not fit an address)",
            kernel.variant().word("layout").unwrap_or("?")
        ),
    })?;
    if !padded_epilogue(&padding, epilogue) {
        return Err(Error::Refused {
            name: kernel.name().to_string(),
            rule: "the padded strategy computes an unaligned C transposed, which carries no epilogue or output type of its own: align C's rows to 16 bytes".into(),
        });
    }
    if !moves_bytes_alike(dtype, epilogue) {
        return Err(Error::Refused {
            name: kernel.name().to_string(),
            rule: format!(
                "the padded strategy moves B with A's transposes, which needs B's elements as wide as A's: {dtype} and {}",
                epilogue.b.unwrap_or(dtype)
            ),
        });
    }
    let scratch = workspace.reserve(gpu, padding.bytes.max(1))?;
    let (base, _scratch) = scratch.device_ptr_mut(stream);
    let (gemm, moves) = padding.buffers(&call, base);
    // Every launch is planned before the first is enqueued, so a refusal leaves C untouched.
    kernel.plan_gemm(gpu.sms(), dtype, &padding.gemm, gemm, epilogue)?;
    for (shape, io) in &moves {
        transpose.plan_transpose(gpu.sms(), dtype, shape, *io)?;
    }
    let (c_move, operand_moves) = match padding.c {
        Some(_) => moves.split_last().map(|(last, rest)| (Some(*last), rest)).expect("C's move is last"),
        None => (None, &moves[..]),
    };
    // SAFETY: the buffers are the call's, live as the caller promises, and the workspace's
    // scratch, which `_scratch` holds, each of the length `padding` reserved.
    unsafe {
        for (shape, io) in operand_moves {
            transpose_buffers(transpose, gpu, dtype, shape, *io)?;
        }
        gemm_buffers(kernel, gpu, dtype, &padding.gemm, gemm, epilogue)?;
        if let Some((shape, io)) = c_move {
            transpose_buffers(transpose, gpu, dtype, &shape, io)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::shape::Batch;

    #[test]
    fn padding_transposes_what_is_not_aligned() {
        // tn: A row-major 4095x4099 (lda odd), B column-major, stored 4097x4099 (ldb aligned).
        let shape = GemmShape { m: 4095, n: 4097, k: 4099, lda: 4099, ldb: 4104, ldc: 4104, layout: Layout::Tn, batch: Batch::ONE };
        let buffers = [Buffer { len: usize::MAX, addr: 256 }; 3];
        let p = padding(Dtype::Bf16, &shape, &buffers, None).unwrap();
        assert_eq!(p.a.first().map(|m| m.shape), Some(TransposeShape { m: 4095, n: 4099, ldx: 4099, ldy: 4096 }));
        assert_eq!((p.a.len(), p.b.len(), p.c, p.swapped), (1, 0, None, false));
        // Aᵀ stored row-major is A column-major: layout nn.
        assert_eq!((p.gemm.layout, p.gemm.lda, p.gemm.ldb, p.gemm.ldc), (Layout::Nn, 4096, 4104, 4104));
        assert_eq!(alignment(Dtype::Bf16, &shape, &buffers), Alignment::Unaligned);
    }

    #[test]
    fn a_layout_without_variants_is_reached_by_moving_operands() {
        let buffers = [Buffer { len: usize::MAX, addr: 256 }; 3];
        // nn to tn: A (column-major) moves to row-major, B stays column-major.
        let nn = GemmShape::packed(4096, 2048, 1024, Layout::Nn);
        let p = padding(Dtype::E4m3, &nn, &buffers, Some(Layout::Tn)).unwrap();
        assert_eq!((p.a.len(), p.b.len(), p.c.is_some(), p.gemm.layout), (1, 0, false, Layout::Tn));
        assert_eq!(p.a.first().map(|m| m.shape), Some(TransposeShape { m: 1024, n: 4096, ldx: 4096, ldy: 1024 }));
        // tt to tn: B moves; tn itself needs no move, and an unaligned row-major A stays
        // row-major through two moves (there and back, aligned).
        let tt = GemmShape::packed(4096, 2048, 1024, Layout::Tt);
        assert_eq!(padding(Dtype::E4m3, &tt, &buffers, Some(Layout::Tn)).map(|p| (p.a.len(), p.b.len())), Some((0, 1)));
        let odd = GemmShape { lda: 1025, ..GemmShape::packed(4096, 2048, 1024, Layout::Tn) };
        let p = padding(Dtype::E4m3, &odd, &buffers, Some(Layout::Tn)).unwrap();
        let shapes: Vec<TransposeShape> = p.a.iter().map(|m| m.shape).collect();
        assert_eq!(
            shapes,
            [TransposeShape { m: 4096, n: 1024, ldx: 1025, ldy: 4096 }, TransposeShape { m: 1024, n: 4096, ldx: 4096, ldy: 1024 }]
        );
        assert_eq!((p.b.len(), p.gemm.layout, p.gemm.lda), (0, Layout::Tn, 1024));
        let (gemm, moves) = p.buffers(&buffers, 1 << 20);
        assert_eq!(moves[0].1[0], buffers[0], "the first move reads A");
        assert_eq!(moves[1].1[0], moves[0].1[1], "the second reads what the first wrote");
        assert_eq!(gemm[0], moves[1].1[1], "the GEMM reads what the second wrote");
        // With C unaligned the GEMM computes Cᵀ = Bᵀ·Aᵀ, which is tn again for a tn call.
        let c_odd = GemmShape { ldc: 2049, ..GemmShape::packed(4096, 2048, 1024, Layout::Tn) };
        let p = padding(Dtype::E4m3, &c_odd, &buffers, Some(Layout::Tn)).unwrap();
        assert_eq!((p.a.len(), p.b.len(), p.swapped, p.gemm.layout), (0, 0, true, Layout::Tn));
    }

    #[test]
    fn an_unaligned_c_is_computed_transposed() {
        let shape = GemmShape { m: 4095, n: 4097, k: 4099, lda: 4099, ldb: 4099, ldc: 4097, layout: Layout::Tn, batch: Batch::ONE };
        let buffers = [Buffer { len: usize::MAX, addr: 256 }; 3];
        let p = padding(Dtype::Bf16, &shape, &buffers, None).unwrap();
        // A (t) and B (n) both move and flip: A becomes n, B becomes t; Cᵀ = Bᵀ·Aᵀ then takes
        // A' = Bᵀ (row-major where B is column-major: n) and B' = Aᵀ (t): layout nt.
        assert!(p.a.len() == 1 && p.b.len() == 1 && p.swapped);
        assert_eq!((p.gemm.m, p.gemm.n, p.gemm.k, p.gemm.layout), (4097, 4095, 4099, Layout::Nt));
        assert_eq!(p.c.map(|m| m.shape), Some(TransposeShape { m: 4097, n: 4095, ldx: 4096, ldy: 4097 }));
        let (gemm, moves) = p.buffers(&buffers, 1 << 20);
        assert_eq!(moves.len(), 3);
        assert_eq!(gemm[0].addr, moves[1].1[1].addr, "the GEMM's A is the moved B");
        assert_eq!(moves[2].1[1], buffers[2], "the last move writes C");
    }
}
