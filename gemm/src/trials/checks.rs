//! A GEMM variant's two trials: correctness on shapes chosen for its bounds mode against a
//! float64 host product, and performance at 4096³ beside cuBLAS; and the dispatcher's
//! correctness on a spread of shapes.

use super::host::{EpilogueInputs, Operands};
use super::timing::GemmCase;
use crate::{with_inputs, with_output};
use crate::{Activation, Batch, Epilogue, GemmArgs, GemmKernel, GemmRegistry, GemmShape, Workspace};
use tilesmith_runtime::{Dtype, Element, Error, Gpu, Kernel, Layout, Registry};
use tilesmith_spec::GridRule;
use tilesmith_trials::device::{download, upload};
use tilesmith_trials::host::{random, read_regions, region_mask, relative_error};
use tilesmith_trials::report::Record;

/// The GEMM shapes a variant is tried on: every edge case for a checked variant, tile
/// multiples (one with padded leading dimensions) for an unchecked one. Leading dimensions are
/// rounded up to the multiple the variant needs (TMA's 16-byte rows); a persistent variant
/// also gets more tiles than an H200 has multiprocessors, so that blocks take several, a
/// split-K variant a long K, and every variant more K blocks than its ring holds.
pub fn gemm_shapes(kernel: &Kernel) -> Vec<GemmShape> {
    let (Ok(layout), &[tm, tn, tk]) = (kernel.layout(), kernel.variant().tile()) else { return Vec::new() };
    let [tm, tn, tk] = [tm, tn, tk].map(|t| t as usize);
    let step = kernel.info().entry.requires.ld_multiple as usize;
    let aligned = |shape: GemmShape| GemmShape {
        lda: shape.lda.next_multiple_of(step),
        ldb: shape.ldb.next_multiple_of(step),
        ldc: shape.ldc.next_multiple_of(step),
        ..shape
    };
    let packed = |m, n, k| aligned(GemmShape::packed(m, n, k, layout));
    let padded = |m, n, k, extra: usize| {
        let shape = GemmShape::packed(m, n, k, layout);
        aligned(GemmShape { lda: shape.lda + extra, ldb: shape.ldb + extra, ldc: shape.ldc + extra, ..shape })
    };
    // Rows 16 bytes apart around ragged edges: the aligned path's last chunk of a row, and
    // of the buffer, is partial.
    let rows_16 = |m, n, k| {
        let shape = GemmShape::packed(m, n, k, layout);
        let ld16 = |ld: usize| ld.next_multiple_of(16 / kernel.variant().dtype.size_bytes() as usize).next_multiple_of(step);
        GemmShape { lda: ld16(shape.lda), ldb: ld16(shape.ldb), ldc: ld16(shape.ldc), ..shape }
    };
    let mut shapes = if kernel.variant().is_checked() {
        vec![
            packed(2 * tm + 3, 2 * tn + 5, 3 * tk + 7),
            rows_16(2 * tm + 3, 2 * tn + 5, 3 * tk + 7),
            packed(tm + 1, tn - 1, (tk / 2).max(1)),
            packed(1, 2 * tn + 1, 2 * tk + 3),
            packed(2 * tm + 1, 1, 2 * tk + 3),
            padded(tm + 7, tn + 9, 2 * tk + 1, 13),
        ]
    } else {
        vec![packed(2 * tm, 3 * tn, 4 * tk), padded(tm, tn, tk, 2 * step)]
    };
    // Variants that need 16-byte rows anyway get the rows_16 shape twice.
    shapes.dedup();
    let odd = usize::from(kernel.variant().is_checked());
    // More K blocks than the ring has stages, so that every stage is refilled (the shapes
    // above stop at 4 K blocks).
    let stages = kernel.variant().count("stages").unwrap_or(1) as usize;
    shapes.push(packed(tm + 3 * odd, tn + 5 * odd, (stages + 2) * tk + 9 * odd));
    match &kernel.info().entry.launch.grid {
        GridRule::Persistent { .. } => shapes.push(packed(12 * tm + 5 * odd, 12 * tn + 3 * odd, tk + 7 * odd)),
        // A long K in slices of unequal length (the shapes above leave some slices empty).
        GridRule::SplitK { splits, .. } => shapes.push(packed(tm + 3 * odd, 3 * tn + 5 * odd, 9 * tk * *splits as usize + 11 * odd)),
        GridRule::TilesMn { .. } | GridRule::Expr { .. } => {}
    }
    shapes
}

/// Correctness of a GEMM variant: fresh random inputs, NaN-poisoned outputs, every element of
/// C checked written and nothing outside it touched, compared with a float64 host product;
/// then calls the variant cannot take must be refused. Returns a one-line summary.
pub fn correctness(gpu: &Gpu, kernel: &Kernel) -> Result<String, String> {
    let [b, out] = operand_dtypes(kernel)?;
    with_inputs!(kernel.variant().dtype, b, T, TB => with_output!(out, TC => gemm_correctness::<T, TC, TB>(gpu, kernel)))
}

/// The element types of a GEMM variant's B and C.
fn operand_dtypes(kernel: &Kernel) -> Result<[Dtype; 2], String> {
    let of = |name: &str| kernel.operand_dtype(name).ok_or(format!("the GEMM family declares no operand `{name}`"));
    Ok([of("b")?, of("c")?])
}

/// NaN elements past the end of an output, 64 rows and a bit: a write past the last row, or a
/// partial row, shows up there as one outside the output.
fn guard(ld: usize) -> usize {
    64 * ld + 64
}

/// The activation a GEMM variant's epilogue applies, and whether it has one (axis `epilogue`
/// other than `none`); one the float64 reference does not define is an error saying where it
/// goes.
pub fn epilogue_of(kernel: &Kernel) -> Result<(Activation, bool), String> {
    let word = Activation::epilogue_of(kernel.variant());
    let activation = Activation::named(word)?;
    if crate::trials::host::activation(activation).is_none() {
        return Err(format!("epilogue `{word}` has no float64 reference: define it in gemm/src/trials/host.rs (`activation`)"));
    }
    Ok((activation, word != "none"))
}

/// The `index`-th correctness case of a variant on `shape`: for an epilogue variant, random α
/// and bias, and on odd cases also β with a random C and a row bias; random per-tensor scales
/// where the variant takes them (8-bit inputs).
fn gemm_once<T: Element, TC: Element, TB: Element>(gpu: &Gpu, kernel: &Kernel, shape: GemmShape, index: usize) -> Result<f64, String> {
    let tolerance = gemm_tolerance(kernel, &shape)?;
    let epilogue = match epilogue_of(kernel)? {
        (activation, true) => EpilogueInputs::random(activation, &shape, shape.spans()[2], index % 2 == 1, index % 2 == 1),
        (_, false) => EpilogueInputs::plain(),
    };
    let epilogue = if kernel.info().entry.launch.takes_scalar("scale_a") { epilogue.with_random_scales() } else { epilogue };
    gemm_checked::<T, TC, TB>(gpu, shape, tolerance, &epilogue, |args| kernel.gemm(gpu, args).map_err(|err| err.to_string()))
}

/// One GEMM through `launch` on fresh random inputs and a NaN-poisoned C with guard rows (C's
/// regions random where the epilogue reads them), checked: every output of every problem
/// written, nothing outside them, relative error to the float64 reference within the dtype's
/// bound.
fn gemm_checked<T: Element, TC: Element, TB: Element>(
    gpu: &Gpu,
    shape: GemmShape,
    tolerance: f64,
    epilogue: &EpilogueInputs<TC>,
    launch: impl FnOnce(GemmArgs<'_, T, TC, TB>) -> Result<(), String>,
) -> Result<f64, String> {
    let [a_len, b_len, c_len] = shape.spans();
    let (a, b) = (random::<T>(a_len), random::<TB>(b_len));
    let (da, db) = (upload(gpu, &a)?, upload(gpu, &b)?);
    let mut c0 = epilogue.c.clone().unwrap_or_else(|| vec![TC::POISON; c_len]);
    c0.resize(c_len + guard(shape.ldc), TC::POISON);
    // Only C's regions are C: the gaps between rows and between problems stay poisoned.
    let Batch { count, strides: [sa, sb, sc] } = shape.batch;
    let inside = region_mask(c0.len(), shape.m, shape.n, shape.ldc, count, sc);
    for (value, _) in c0.iter_mut().zip(&inside).filter(|(_, inside)| !**inside) {
        *value = TC::POISON;
    }
    let mut dc = upload(gpu, &c0)?;
    let bias = epilogue.bias.as_deref().map(|b| upload(gpu, b)).transpose()?;
    let row_bias = epilogue.row_bias.as_deref().map(|b| upload(gpu, b)).transpose()?;
    let e = Epilogue {
        activation: epilogue.activation,
        alpha: epilogue.alpha,
        beta: epilogue.beta,
        bias: bias.as_ref(),
        row_bias: row_bias.as_ref(),
        scale_a: epilogue.scales[0],
        scale_b: epilogue.scales[1],
    };
    launch(GemmArgs::new(&da, &db, &mut dc, shape).with_epilogue(e))?;
    gpu.synchronize().map_err(|err| err.to_string())?;
    let c = download(gpu, &dc)?;
    let (region, unwritten, outside) = read_regions(&c, shape.m, shape.n, shape.ldc, count, sc);
    let batch = if shape.is_batched() { format!("{count} x ") } else { String::new() };
    let what = format!("{batch}{}x{}x{} (lda {}, ldb {}, ldc {}", shape.m, shape.n, shape.k, shape.lda, shape.ldb, shape.ldc)
        + &if shape.is_batched() { format!(", strides {sa}, {sb}, {sc})") } else { ")".into() };
    if unwritten > 0 {
        return Err(format!("{what}: {unwritten} of {} outputs left unwritten", count * shape.m * shape.n));
    }
    if outside > 0 {
        return Err(format!("{what}: {outside} elements written outside C's {}x{} regions", shape.m, shape.n));
    }
    let reference: Vec<f64> = (0..count)
        .flat_map(|p| {
            let product = Operands { shape, a: &a[p * sa..], b: &b[p * sb..] }.product();
            epilogue.apply_all(&product, &shape, p * sc)
        })
        .collect();
    let error = relative_error(&region, &reference);
    if error > tolerance {
        let inputs = if TB::DTYPE == T::DTYPE { T::DTYPE.to_string() } else { format!("{} by {}", T::DTYPE, TB::DTYPE) };
        return Err(format!("{what}: relative error {error:.3e} over the {tolerance:.0e} allowed for {inputs} to {}", TC::DTYPE));
    }
    Ok(error)
}

/// The shapes the dispatcher is tried on: tiny, skinny both ways, past a tile multiple, and
/// with odd leading dimensions (no 16-byte rows: the padded strategy or a checked mma variant).
pub fn dispatch_shapes(layout: Layout) -> Vec<(String, GemmShape)> {
    let packed = |m, n, k| GemmShape::packed(m, n, k, layout);
    let odd = |m, n, k| {
        let shape = packed(m, n, k);
        GemmShape { lda: shape.lda + 1, ldb: shape.ldb + 3, ldc: shape.ldc + 1, ..shape }
    };
    [
        packed(1, 1, 1),
        packed(16, 4096, 4096),
        packed(3000, 200, 1000),
        packed(1000, 8, 2048),
        packed(520, 1030, 777),
        packed(4095, 257, 129),
        // C rows of 1024 and K-major rows of 784: for 8-bit inputs, A's unaligned column-major
        // rows (nn, nt) or B's row-major ones (nt, tt) move into K-major copies.
        packed(520, 1024, 784),
        odd(300, 301, 302),
        odd(1000, 999, 998),
        // Batches: B shared by every problem; rows too odd for TMA.
        packed(257, 129, 65).with_batch(Batch { count: 5, strides: [257 * 65, 0, 257 * 129] }),
        odd(100, 99, 98).batched(4),
    ]
    .into_iter()
    .map(|s| {
        let batch = if s.is_batched() { format!("batch{}_", s.batch.count) } else { String::new() };
        let odd = if packed(s.m, s.n, s.k) == s.with_batch(Batch::ONE) { "" } else { "_odd_ld" };
        (format!("{batch}{}x{}x{}{odd}", s.m, s.n, s.k), s)
    })
    .collect()
}

/// The dispatcher on one call, C = A·B or, with an activation, act(α·A·B + bias): the pick
/// must take it (no refusal) and compute it right.
pub fn dispatch_correctness<T: Element, TC: Element, TB: Element>(
    gpu: &Gpu,
    registry: &Registry,
    shape: GemmShape,
    activation: Option<Activation>,
) -> Result<String, String> {
    let mut workspace = Workspace::new();
    let mut picked = None;
    let tolerance = dispatch_tolerance(registry, [T::DTYPE, TB::DTYPE, TC::DTYPE], &shape)?;
    let epilogue = match activation {
        Some(activation) => EpilogueInputs::random(activation, &shape, shape.spans()[2], false, false),
        None => EpilogueInputs::plain(),
    };
    let error = gemm_checked::<T, TC, TB>(gpu, shape, tolerance, &epilogue, |args| {
        picked = Some(registry.gemm(gpu, args, &mut workspace).map_err(|err| err.to_string())?);
        Ok(())
    })?;
    let choice = picked.ok_or("the dispatcher made no pick")?;
    // The same call by name through the family's chooser, on fresh inputs: GEMM's policy runs
    // it (padded where the pick is), with scratch of its own.
    let chooser = registry.family("gemm").map_err(|err| err.to_string())?;
    let mut by_name = None;
    let named_error = gemm_checked::<T, TC, TB>(gpu, shape, tolerance, &epilogue, |args| {
        by_name = Some(args.bind(chooser.call(gpu)).launch().map_err(|err| format!("by name: {err}"))?);
        Ok(())
    })?;
    let pick = by_name.ok_or("the family's chooser made no pick")?;
    if pick.kernel().name() != choice.kernel.name() {
        return Err(format!("by name the chooser ran {}, typed {}", pick.kernel().name(), choice.label()));
    }
    Ok(format!("{}, relative error {error:.2e} (by name {named_error:.2e}); {}", choice.label(), choice.reason))
}

fn gemm_correctness<T: Element, TC: Element, TB: Element>(gpu: &Gpu, kernel: &Kernel) -> Result<String, String> {
    let shapes = gemm_shapes(kernel);
    let mut worst: f64 = 0.0;
    for (index, shape) in shapes.iter().enumerate() {
        worst = worst.max(gemm_once::<T, TC, TB>(gpu, kernel, *shape, index)?);
    }
    let batched = batched_shape(kernel);
    worst = worst.max(gemm_once::<T, TC, TB>(gpu, kernel, batched, 1)?);
    let refused = refused_gemm::<T, TC, TB>(gpu, kernel)?;
    let bias = refused_bias::<T, TC, TB>(gpu, kernel)?;
    let overlap = refused_overlap::<T, TC, TB>(gpu, kernel)?;
    let types = refused_types::<T, TC, TB>(gpu, kernel)?;
    Ok(format!(
        "{} shapes and a batch of {}, worst relative error {worst:.2e}; refused as it must: {refused}; {bias}; {overlap}; and {types}",
        shapes.len(),
        batched.batch.count
    ))
}

/// A strided batch of 3 problems of the variant's first trial shape: A shared by all (stride
/// 0), B packed, C with a gap between problems that must stay untouched. Strides are whole
/// multiples of the variant's alignment.
fn batched_shape(kernel: &Kernel) -> GemmShape {
    let shape = gemm_shapes(kernel)[0];
    let align = (kernel.info().entry.requires.ptr_align_bytes / kernel.variant().dtype.size_bytes()).max(1) as usize;
    let [_, b, c] = shape.problem_spans();
    shape.with_batch(Batch { count: 3, strides: [0, b.next_multiple_of(align), (c + 3).next_multiple_of(align)] })
}

/// A batch whose problems' outputs overlap (C's stride one row short of a problem) must be
/// refused, C untouched.
fn refused_overlap<T: Element, TC: Element, TB: Element>(gpu: &Gpu, kernel: &Kernel) -> Result<String, String> {
    let good = batched_shape(kernel);
    let [_, b, c] = good.batch.strides;
    let shape = good.with_batch(Batch { strides: [0, b, c.saturating_sub(good.ldc)], ..good.batch });
    let what = format!("a batch whose C stride {} is below a problem's span", shape.batch.strides[2]);
    refused_call::<T, TC, TB>(gpu, kernel, shape, shape.spans()[2], None, &what)
}

/// A call on `shape` with fresh random A and B, a NaN-poisoned C of `c_len` elements, the
/// variant's activation and `bias` (nothing else of the epilogue), which must be refused
/// (`what`).
fn refused_call<T: Element, TC: Element, TB: Element>(
    gpu: &Gpu,
    kernel: &Kernel,
    shape: GemmShape,
    c_len: usize,
    bias: Option<&cudarc::driver::CudaSlice<TC>>,
    what: &str,
) -> Result<String, String> {
    let [a_len, b_len, _] = shape.spans();
    let (da, db) = (upload(gpu, &random::<T>(a_len))?, upload(gpu, &random::<TB>(b_len))?);
    let mut dc = upload(gpu, &vec![TC::POISON; c_len])?;
    let (activation, _) = epilogue_of(kernel)?;
    let args = GemmArgs::new(&da, &db, &mut dc, shape).with_epilogue(Epilogue { activation, bias, ..Epilogue::default() });
    let launched = kernel.gemm(gpu, args);
    refusal(gpu, launched, &dc, what)
}

/// What a call that must be refused (`what`) got: the rule, if refused with C untouched.
fn refusal<TC: Element>(gpu: &Gpu, launched: Result<(), Error>, c: &cudarc::driver::CudaSlice<TC>, what: &str) -> Result<String, String> {
    match launched {
        Err(Error::Refused { rule, .. }) if download(gpu, c)?.iter().all(|x| x.to_f64().is_nan()) => Ok(rule),
        Err(Error::Refused { rule, .. }) => Err(format!("refused {what} ({rule}) but C was written")),
        Err(other) => Err(format!("expected a refusal of {what}, got: {other}")),
        Ok(()) => Err(format!("launched {what}; it should have been refused")),
    }
}

/// B of a type the variant does not read must be refused, C untouched: the other 8-bit type
/// for an 8-bit B (so e4m3, A's own, for an e4m3-by-e5m2 variant), else f32 (f16 for f32).
fn refused_types<T: Element, TC: Element, TB: Element>(gpu: &Gpu, kernel: &Kernel) -> Result<String, String> {
    let shape = gemm_shapes(kernel)[0];
    let c_len = shape.spans()[2];
    match TB::DTYPE {
        Dtype::E4m3 => refused_call::<T, TC, tilesmith_runtime::F8E5M2>(gpu, kernel, shape, c_len, None, "a B of e5m2"),
        Dtype::E5m2 => refused_call::<T, TC, tilesmith_runtime::F8E4M3>(gpu, kernel, shape, c_len, None, "a B of e4m3"),
        Dtype::F32 => refused_call::<T, TC, half::f16>(gpu, kernel, shape, c_len, None, "a B of f16"),
        Dtype::F16 | Dtype::Bf16 => refused_call::<T, TC, f32>(gpu, kernel, shape, c_len, None, "a B of f32"),
        integer => Err(format!("GEMM variants multiply floats; a B of {integer} has no trial")),
    }
}

/// A bias the variant must refuse: one element short for an epilogue variant, any for one
/// without an epilogue. C must be left untouched.
fn refused_bias<T: Element, TC: Element, TB: Element>(gpu: &Gpu, kernel: &Kernel) -> Result<String, String> {
    let shape = gemm_shapes(kernel)[0];
    let (_, applies) = epilogue_of(kernel)?;
    let bias_len = if applies { shape.n - 1 } else { shape.n };
    let bias = upload(gpu, &random::<TC>(bias_len))?;
    let what = format!("a bias of {bias_len} elements for N = {}", shape.n);
    refused_call::<T, TC, TB>(gpu, kernel, shape, shape.spans()[2], Some(&bias), &what)
}

/// A call the variant must refuse: an off-tile shape for an unchecked variant, a C buffer one
/// element short for a checked one.
fn refused_gemm<T: Element, TC: Element, TB: Element>(gpu: &Gpu, kernel: &Kernel) -> Result<String, String> {
    let good = gemm_shapes(kernel)[0];
    let (shape, c_len) = if kernel.variant().is_checked() {
        (good, good.spans()[2] - 1)
    } else {
        let off_tile = GemmShape::packed(good.m + 1, good.n, good.k, good.layout);
        (off_tile, off_tile.spans()[2])
    };
    let what = format!("{}x{}x{} with C of {c_len} elements", shape.m, shape.n, shape.k);
    refused_call::<T, TC, TB>(gpu, kernel, shape, c_len, None, &what)
}

/// Edge of the square GEMM problem the performance trials time.
pub const GEMM_PERF_EDGE: usize = 4096;

/// Performance of a GEMM variant beside cuBLAS on one shared set of inputs.
pub fn performance(gpu: &Gpu, kernel: &Kernel) -> Result<Record, String> {
    let [b, out] = operand_dtypes(kernel)?;
    with_inputs!(kernel.variant().dtype, b, T, TB => with_output!(out, TC => gemm_performance::<T, TC, TB>(gpu, kernel)))
}

/// A GEMM variant beside cuBLAS (cuBLASLt for 8-bit inputs) at GEMM_PERF_EDGE³.
fn gemm_performance<T: Element, TC: Element, TB: Element>(gpu: &Gpu, kernel: &Kernel) -> Result<Record, String> {
    let layout = kernel.layout().map_err(|e| e.to_string())?;
    let shape = GemmShape::packed(GEMM_PERF_EDGE, GEMM_PERF_EDGE, GEMM_PERF_EDGE, layout);
    let mut case = GemmCase::<T, TC, TB>::new(gpu, shape, gemm_tolerance(kernel, &shape)?)?;
    let baseline_ms = case.time_cublas(gpu)?;
    // An epilogue variant is timed on activation(A·B + bias), beside cuBLAS's A·B
    // (`tilesmith bench` sets it beside cuBLASLt's fused epilogues).
    if let (activation, true) = epilogue_of(kernel)? {
        case = case.with_bias_activation(gpu, activation)?;
    }
    case.record(gpu, kernel, baseline_ms)
}

/// The largest relative error a GEMM of `kernel`'s types of A, B and C may have on `shape`, as
/// its family declares ([`tilesmith_spec::Family::tolerance`]): the largest of the types'
/// tolerances.
pub fn gemm_tolerance(kernel: &Kernel, shape: &GemmShape) -> Result<f64, String> {
    let [b, out] = operand_dtypes(kernel)?;
    let quantity = |name: &str| match name {
        "m" => Some(shape.m as u64),
        "n" => Some(shape.n as u64),
        "k" => Some(shape.k as u64),
        _ => None,
    };
    let family = &kernel.info().entry.declaration;
    let mut worst: f64 = 0.0;
    for dtype in [kernel.variant().dtype, b, out] {
        worst = worst.max(family.tolerance(dtype, &quantity)?);
    }
    Ok(worst)
}

/// As [`gemm_tolerance`], for calls the dispatcher makes: the GEMM family's, from any of its
/// variants of these types of A, B and C.
pub fn dispatch_tolerance(registry: &Registry, [dtype, b, out]: [Dtype; 3], shape: &GemmShape) -> Result<f64, String> {
    let kernel = registry
        .kernels()
        .find(|k| {
            k.variant().family == "gemm"
                && k.variant().dtype == dtype
                && k.operand_dtype("b") == Some(b)
                && k.operand_dtype("c") == Some(out)
        })
        .ok_or(format!("the registry has no GEMM variant of {dtype} by {b} to {out}"))?;
    gemm_tolerance(kernel, shape)
}
