//! GEMM's trials as a plug-in of the trials harness: the `cublas_gemm` library (the reference
//! and baseline GEMM's declaration names), the dispatcher's own trials,
//! `dispatch::<dtype>_<layout>::<shape>`, with a check of the host reference's layouts, the
//! dispatcher's tuner (`tune`), and `bench`'s rows beside its libraries.

mod bench;
pub mod checks;
pub mod cublas;
pub mod fused;
pub mod host;
pub mod timing;
pub mod tune;
mod types;

use crate::{with_inputs, with_output, Activation, GemmShape};
use host::Operands;
use libtest_mimic::Trial;
use tilesmith_runtime::{Chooser, Dtype, Gpu, Kernel, Layout, Registry, F8E4M3};
use tilesmith_spec::family::Baseline;
use tilesmith_spec::Entry;
use tilesmith_trials::declared;
use tilesmith_trials::harness;
use tilesmith_trials::report::Record;
use tilesmith_trials::trials::{BenchGroup, Plugin, Rows};
use tilesmith_trials::tune::{TuneRequest, Tuner};

/// The plug-in: `cargo test` here and `tilesmith test` pass it to the harness.
pub static PLUGIN: GemmTrials = GemmTrials;

pub struct GemmTrials;

/// The library name GEMM's declaration gives its baseline and reference.
pub const GEMM_LIBRARY: &str = "cublas_gemm";

/// The baseline of a family whose work is matrix products (attention): cuBLAS on a square
/// GEMM of as many FLOPs as the call, in its input type, so that the ratio of the two TFLOP/s
/// reads as the fraction of a GEMM's tensor-core speed the call reaches.
pub const GEMM_FLOPS_LIBRARY: &str = "cublas_gemm_flops";

/// The side of [`GEMM_FLOPS_LIBRARY`]'s square GEMM for `flops`: ∛(flops / 2), to a multiple of
/// 64 (cuBLAS's fast tiles), at least 64.
pub fn flops_gemm_side(flops: f64) -> usize {
    (((flops / 2.0).cbrt() / 64.0).round().max(1.0) * 64.0) as usize
}

/// A variant of a family with the [`GEMM_FLOPS_LIBRARY`] baseline timed on `shape` (its result
/// checked against the reference's), then the GEMM of as many FLOPs: both in TFLOP/s.
pub fn flops_record(gpu: &Gpu, registry: &Registry, kernel: &Kernel, shape: declared::Shape) -> Result<Record, String> {
    let mut case = declared::Case::new(gpu, kernel, declared::with_lds(kernel, shape, 0)?)?;
    let ms = case.time_kernel(gpu, registry, kernel)?;
    flops_row(gpu, kernel, &case, ms)
}

/// As [`flops_record`], for the call through the family's chooser (`dispatch:<pick>`), timed
/// alone as the variants' rows are, with the host time of a cached call, and timed in turns
/// with `fastest` where it takes the call; `kernel` lays out the operands (packed rows).
pub fn flops_record_chosen(
    gpu: &Gpu,
    registry: &Registry,
    chooser: &Chooser,
    kernel: &Kernel,
    shape: declared::Shape,
    fastest: Option<&Kernel>,
) -> Result<Record, String> {
    let mut case = declared::Case::new(gpu, kernel, declared::with_lds(kernel, shape, 0)?)?;
    let (ms, pick, host_us) = case.time_chosen_alone(gpu, registry, chooser)?;
    let mut record = flops_row(gpu, pick.kernel(), &case, ms)?;
    record.variant = format!("dispatch:{}", pick.kernel().name());
    record.host_us = Some(host_us);
    if let Some(fastest) = fastest.filter(|k| declared::takes(k, &case.shape, gpu.sms(), gpu.smem_per_block()).is_ok()) {
        let [chosen_ms, fastest_ms] = case.time_beside(gpu, chooser, fastest)?;
        record.beside = Some((fastest.name().to_string(), fastest_ms / chosen_ms));
    }
    Ok(record)
}

fn flops_row(gpu: &Gpu, kernel: &Kernel, case: &declared::Case, kernel_ms: f64) -> Result<Record, String> {
    let entry = &kernel.info().entry;
    let (family, variant, shape) = (&entry.declaration, &entry.variant, &case.shape);
    let flops = family.work.flops.eval(&|name| family.work_value(variant, name, &|q| shape.get(q).copied()))? as f64;
    let (baseline_ms, baseline) = time_flops_gemm(gpu, variant.dtype, flops)?;
    let sides = family.quantities.iter().map(|q| shape[q] as usize).collect();
    let name = format!("cuBLAS GEMM {0}x{0}x{0}", flops_gemm_side(flops));
    let tera = flops / (kernel_ms * 1e-3) / 1e12;
    Ok(Record::new(kernel, gpu, sides, "TFLOP/s", kernel_ms, tera, &name, baseline_ms, baseline, case.input_sets()))
}

/// Median milliseconds of cuBLAS on the square GEMM of [`flops_gemm_side`], inputs and output
/// of `dtype` (e4m3: cuBLASLt's, into bf16, as the 8-bit kernels write), and its TFLOP/s.
pub fn time_flops_gemm(gpu: &Gpu, dtype: Dtype, flops: f64) -> Result<(f64, f64), String> {
    let n = flops_gemm_side(flops);
    let shape = GemmShape::packed(n, n, n, Layout::Tn);
    let ms = match dtype {
        Dtype::E4m3 => timing::GemmCase::<F8E4M3, half::bf16, F8E4M3>::new(gpu, shape, f64::INFINITY)?.time_cublas(gpu),
        _ => with_output!(dtype, T => timing::GemmCase::<T, T, T>::new(gpu, shape, f64::INFINITY)?.time_cublas(gpu)),
    }?;
    Ok((ms, 2.0 * (n as f64).powi(3) / (ms * 1e-3) / 1e12))
}

impl Tuner for GemmTrials {
    fn family(&self) -> &'static str {
        crate::table::FAMILY
    }

    fn tune(&self, registry: &Registry, request: &TuneRequest<'_>) -> Result<(), String> {
        tune::run(registry, request)
    }
}

impl Plugin for GemmTrials {
    fn tuner(&self) -> Option<&dyn Tuner> {
        Some(self)
    }

    fn libraries(&self) -> &'static [&'static str] {
        &[GEMM_LIBRARY, GEMM_FLOPS_LIBRARY]
    }

    fn correctness(&self, gpu: &Gpu, _: &Registry, kernel: &Kernel) -> Result<String, String> {
        checks::correctness(gpu, kernel)
    }

    fn performance(&self, gpu: &Gpu, registry: &Registry, kernel: &Kernel) -> Result<Record, String> {
        match &kernel.info().entry.declaration.baseline {
            Baseline::Library(name) if name == GEMM_FLOPS_LIBRARY => flops_record(gpu, registry, kernel, declared::perf_shape(kernel)?),
            _ => checks::performance(gpu, kernel),
        }
    }

    fn bench(&self, gpu: &Gpu, registry: &Registry, group: &BenchGroup<'_>, rows: &mut Rows) -> Result<(), String> {
        bench::group(gpu, registry, group, rows)
    }

    /// The dispatcher's trials and the reference's check, where the registry has GEMMs.
    fn trials(&self, entries: &[Entry], ignored: bool) -> Vec<Trial> {
        if !entries.iter().any(|e| e.variant.family == "gemm" && !e.is_reference()) {
            return Vec::new();
        }
        let mut all = vec![reference_layouts()];
        all.extend(dispatch_trials(ignored));
        all
    }
}

/// The host product in every layout, on a product worked by hand.
fn reference_layouts() -> Trial {
    Trial::test("cpu::reference::layouts", || {
        // A = [[1, 2, 3], [4, 5, 6]], B = [[7, 8], [9, 10], [11, 12]]: C = [[58, 64], [139, 154]].
        let (a_rows, b_rows) = ([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]], [[7.0, 8.0], [9.0, 10.0], [11.0, 12.0]]);
        for layout in Layout::ALL {
            let shape = GemmShape::packed(2, 2, 3, *layout);
            let a: Vec<f32> =
                if layout.a_row_major() { a_rows.concat() } else { (0..3).flat_map(|k| (0..2).map(move |i| a_rows[i][k])).collect() };
            let b: Vec<f32> =
                if layout.b_row_major() { b_rows.concat() } else { (0..2).flat_map(|j| (0..3).map(move |k| b_rows[k][j])).collect() };
            let product = Operands { shape, a: &a, b: &b }.product();
            if product != [58.0, 64.0, 139.0, 154.0] {
                return Err(format!("layout {layout}: {product:?}").into());
            }
        }
        Ok(())
    })
}

/// `dispatch::<dtype>_<layout>::<shape>`: the registry's `gemm` on a spread of shapes, every
/// dtype and layout; 8-bit inputs with bf16 out; 16- and 32-bit inputs also with bias + GELU
/// in every layout (`gelu_bias_<shape>`: layouts without epilogue variants move A or B); 8- and
/// 16-bit inputs also with f32 out (`outf32_<shape>`: checked mma variants take every shape);
/// e4m3 by e5m2 and e5m2 by e4m3 (`<a>_by_<b>_<layout>`) with bf16 out.
/// 8-bit calls run on the shapes whose C rows and K-major operands' rows are 16-byte multiples
/// of the inputs' elements: the padded strategy never moves a C of another type than the
/// inputs, and its moves of A or B are transposes, which give an unaligned operand the other
/// order (fine for an MN-major one, which the tn variants want K-major).
fn dispatch_trials(ignored: bool) -> Vec<Trial> {
    let mut trials = Vec::new();
    let mixed = [(Dtype::E4m3, Dtype::E5m2), (Dtype::E5m2, Dtype::E4m3)];
    for (dtype, b) in Dtype::ALL.iter().filter(|d| !d.is_integer()).map(|&d| (d, d)).chain(mixed) {
        let eight_bit = dtype.size_bytes() == 1;
        let outs: &[Dtype] = match dtype.size_bytes() {
            _ if b != dtype => &[Dtype::Bf16],
            1 => &[Dtype::Bf16, Dtype::F32],
            2 => &[dtype, Dtype::F32],
            _ => &[dtype],
        };
        let inputs = if b == dtype { dtype.to_string() } else { format!("{dtype}_by_{b}") };
        for (&out, &layout) in outs.iter().flat_map(|out| Layout::ALL.iter().map(move |layout| (out, layout))) {
            let plain = checks::dispatch_shapes(layout).into_iter().map(|(label, shape)| (label, shape, None));
            let gelu = GemmShape::packed(520, 1024, 784, layout);
            // Odd leading dimensions of A and B: an operand already in the order the tn
            // epilogue variants read is moved twice, one in the other order once.
            let odd = GemmShape { lda: gelu.lda + 1, ldb: gelu.ldb + 1, ..gelu };
            let fused = [("gelu_bias_520x1024x784".to_string(), gelu), ("gelu_bias_odd_ld_520x1024x784".to_string(), odd)]
                .into_iter()
                .filter(move |_| !eight_bit)
                .map(|(label, shape)| (label, shape, Activation::named("gelu_tanh").ok()));
            let prefix = if out == dtype || eight_bit && out == Dtype::Bf16 { String::new() } else { format!("out{out}_") };
            let step = 16 / dtype.size_bytes() as usize;
            let k_major_aligned = move |s: &GemmShape| {
                (!layout.a_row_major() || s.lda.is_multiple_of(step))
                    && (layout.b_row_major() || s.ldb.is_multiple_of(step))
                    && s.ldc.is_multiple_of(step)
            };
            let aligned = move |s: &GemmShape| !eight_bit || k_major_aligned(s);
            for (label, shape, activation) in plain.chain(fused).filter(|(_, s, _)| aligned(s)) {
                let trial = harness::gpu_test(
                    format!("dispatch::{inputs}_{layout}::{prefix}{label}"),
                    move |gpu, registry| with_inputs!(dtype, b, T, TB => with_output!(out, TC => checks::dispatch_correctness::<T, TC, TB>(gpu, registry, shape, activation))),
                );
                trials.push(trial.with_ignored_flag(ignored));
            }
        }
    }
    trials
}
