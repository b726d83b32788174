//! The harness of the generated trials, shared by `cargo test` (tests/variants.rs) and
//! `tilesmith test`: for every variant of a registry but its family's reference variants,
//! `<family>::<variant>::correctness` and `<family>::<variant>::perf` (ignored unless asked
//! for, with `--include-ignored` or `--ignored`), made from the family's declaration, and,
//! where the registry has GEMMs, `dispatch::...` trials of its `gemm` call, which picks the
//! variant itself. Listing makes no CUDA call.
//!
//! Where the CUDA driver library cannot be loaded, every GPU trial is listed as ignored, so that
//! both `cargo test` and nextest show it skipped, and the reason is printed once; run anyway
//! (`--include-ignored`), or with a driver but no GPU, each reports itself ignored with the reason.

use crate::host::{read_regions, relative_error, Operands};
use crate::{device, report, trials, with_inputs, with_output};
use libtest_mimic::{Arguments, Completion, Failed, Trial};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::OnceLock;
use tilesmith_runtime::{Activation, Dtype, GemmShape, Gpu, Kernel, Layout, Registry};
use tilesmith_spec::Entry;

/// What the trials are made from and where they write.
pub struct Setup {
    /// The variants to make trials for (listing needs nothing else).
    pub entries: Vec<Entry>,
    /// The registry the GPU trials load kernels from, opened at the first one.
    pub registry: PathBuf,
    /// Where performance trials write their records.
    pub perf_dir: PathBuf,
    /// Only the trials of this share, `(k, n)`: those whose name hashes to k - 1 modulo n.
    pub partition: Option<(u64, u64)>,
    /// Fail where no GPU trial can run, rather than pass having run none (`tilesmith test`
    /// unless `--allow-no-gpu`; `cargo test` here, whose CI has no GPU, does not).
    pub require_gpu: bool,
}

static REGISTRY_DIR: OnceLock<PathBuf> = OnceLock::new();
static PERF_DIR: OnceLock<PathBuf> = OnceLock::new();

/// The registry, opened once.
fn registry() -> Result<&'static Registry, String> {
    static REGISTRY: OnceLock<Result<Registry, String>> = OnceLock::new();
    REGISTRY
        .get_or_init(|| {
            let dir = REGISTRY_DIR.get().ok_or("the harness was not set up")?;
            Registry::open(Some(dir)).map_err(|err| format!("{err}: run `tilesmith build`"))
        })
        .as_ref()
        .map_err(Clone::clone)
}

/// `--partition`'s value, `hash:k/n` with 1 ≤ k ≤ n.
pub fn parse_partition(text: &str) -> Result<(u64, u64), String> {
    let bad = || format!("--partition `{text}`: expected hash:k/n with 1 <= k <= n, e.g. hash:1/2");
    let (k, n) = text.strip_prefix("hash:").and_then(|rest| rest.split_once('/')).ok_or_else(bad)?;
    let (k, n): (u64, u64) = (k.parse().map_err(|_| bad())?, n.parse().map_err(|_| bad())?);
    if k == 0 || n == 0 || k > n {
        return Err(bad());
    }
    Ok((k, n))
}

/// Whether a trial belongs to share `k` of `n`: by the SHA-256 of its name, so that every
/// machine splits the list alike.
fn in_share(name: &str, (k, n): (u64, u64)) -> bool {
    use sha2::{Digest, Sha256};
    let digest = Sha256::digest(name.as_bytes());
    let value = u64::from_le_bytes(digest[..8].try_into().expect("8 bytes"));
    value % n == k - 1
}

/// A GPU trial: ignored with the reason where there is no GPU, failed on any error.
fn gpu_trial(name: String, variant: String, run: fn(&Gpu, &Registry, &Kernel) -> Result<String, String>) -> Trial {
    Trial::ignorable_test(name, move || {
        let gpu = match device::gpu() {
            Ok(gpu) => gpu,
            Err(reason) => return Ok(Completion::ignored_with(reason)),
        };
        let registry = registry()?;
        let kernel = registry.kernel(&variant).map_err(|err| err.to_string())?;
        let summary = run(gpu, registry, &kernel)?;
        println!("{summary}");
        Ok(Completion::Completed)
    })
}

fn perf(gpu: &Gpu, registry: &Registry, kernel: &Kernel) -> Result<String, String> {
    let record = trials::performance(gpu, registry, kernel)?;
    let path = report::write(&record, PERF_DIR.get().ok_or("the harness was not set up")?)?;
    Ok(format!("{} -> {}", record.summary(), path.display()))
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
fn dispatch_trials(driver: bool) -> Vec<Trial> {
    let mut trials = Vec::new();
    let mixed = [(Dtype::E4m3, Dtype::E5m2), (Dtype::E5m2, Dtype::E4m3)];
    for (dtype, b) in Dtype::ALL.iter().map(|&d| (d, d)).chain(mixed) {
        let eight_bit = dtype.size_bytes() == 1;
        let outs: &[Dtype] = match dtype.size_bytes() {
            _ if b != dtype => &[Dtype::Bf16],
            1 => &[Dtype::Bf16, Dtype::F32],
            2 => &[dtype, Dtype::F32],
            _ => &[dtype],
        };
        let inputs = if b == dtype { dtype.to_string() } else { format!("{dtype}_by_{b}") };
        for (&out, &layout) in outs.iter().flat_map(|out| Layout::ALL.iter().map(move |layout| (out, layout))) {
            let plain = trials::dispatch_shapes(layout).into_iter().map(|(label, shape)| (label, shape, None));
            let gelu = GemmShape::packed(520, 1024, 784, layout);
            // Odd leading dimensions of A and B: an operand already in the order the tn
            // epilogue variants read is moved twice, one in the other order once.
            let odd = GemmShape { lda: gelu.lda + 1, ldb: gelu.ldb + 1, ..gelu };
            let fused = [("gelu_bias_520x1024x784".to_string(), gelu), ("gelu_bias_odd_ld_520x1024x784".to_string(), odd)]
                .into_iter()
                .filter(move |_| !eight_bit)
                .map(|(label, shape)| (label, shape, Some(Activation::GeluTanh)));
            let prefix = if out == dtype || eight_bit && out == Dtype::Bf16 { String::new() } else { format!("out{out}_") };
            let step = 16 / dtype.size_bytes() as usize;
            let k_major_aligned = move |s: &GemmShape| {
                (!layout.a_row_major() || s.lda.is_multiple_of(step))
                    && (layout.b_row_major() || s.ldb.is_multiple_of(step))
                    && s.ldc.is_multiple_of(step)
            };
            let aligned = move |s: &GemmShape| !eight_bit || k_major_aligned(s);
            for (label, shape, activation) in plain.chain(fused).filter(|(_, s, _)| aligned(s)) {
                let trial = Trial::ignorable_test(format!("dispatch::{inputs}_{layout}::{prefix}{label}"), move || {
                    let gpu = match device::gpu() {
                        Ok(gpu) => gpu,
                        Err(reason) => return Ok(Completion::ignored_with(reason)),
                    };
                    let registry = registry()?;
                    let summary = with_inputs!(dtype, b, T, TB => with_output!(out, TC => trials::dispatch_correctness::<T, TC, TB>(gpu, registry, shape, activation)))?;
                    println!("{summary}");
                    Ok(Completion::Completed)
                });
                trials.push(trial.with_ignored_flag(!driver));
            }
        }
    }
    trials
}

/// Checks of the harness's own float64 reference and error metric, which the GPU trials rely
/// on; the GEMM reference's only where there are GEMMs.
fn cpu_trials(gemm: bool) -> Vec<Trial> {
    let mut all = vec![Trial::test("cpu::reference::error_metric", || {
        let reference = [3.0, 4.0];
        check(relative_error(&[3.0, 4.0], &reference) == 0.0, "equal values")?;
        check((relative_error(&[3.0, 4.5], &reference) - 0.1).abs() < 1e-12, "0.5 off a norm of 5")?;
        check(relative_error(&[f64::NAN, 4.0], &reference).is_infinite(), "NaN fails")?;
        let poisoned = [1.0f32, f32::NAN, f32::NAN, 2.0, f32::NAN, f32::NAN];
        let (region, unwritten, outside) = read_regions(&poisoned, 2, 2, 3, 1, 0);
        check(region.len() == 4 && unwritten == 2 && outside == 0, "a 2x2 region of a 2x3 buffer")?;
        // Two 1x2 problems 3 apart: elements 0, 1 and 3, 4; 2 and 5 are outside.
        let (region, unwritten, outside) = read_regions(&[1.0f32, f32::NAN, 5.0, 2.0, 3.0, f32::NAN], 1, 2, 2, 2, 3);
        check(region.len() == 4 && unwritten == 1 && outside == 1, "two problems of a batch, a write between them")
    })];
    if gemm {
        all.push(Trial::test("cpu::reference::layouts", || {
            // A = [[1, 2, 3], [4, 5, 6]], B = [[7, 8], [9, 10], [11, 12]]: C = [[58, 64], [139, 154]].
            let (a_rows, b_rows) = ([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]], [[7.0, 8.0], [9.0, 10.0], [11.0, 12.0]]);
            for layout in Layout::ALL {
                let shape = tilesmith_runtime::GemmShape::packed(2, 2, 3, *layout);
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
        }));
    }
    all
}

fn check(ok: bool, what: &str) -> Result<(), Failed> {
    if ok {
        Ok(())
    } else {
        Err(format!("check failed: {what}").into())
    }
}

/// Runs (or lists) the trials of `setup` as libtest does, with its arguments.
pub fn run(mut args: Arguments, setup: Setup) -> ExitCode {
    // GPU trials share one GPU: one at a time unless asked otherwise.
    args.test_threads.get_or_insert(1);
    REGISTRY_DIR.get_or_init(|| setup.registry.clone());
    PERF_DIR.get_or_init(|| setup.perf_dir.clone());
    // Loading the library is no CUDA call; cudarc would panic at the first call without it.
    let driver = unsafe { cudarc::driver::sys::is_culib_present() };
    const NO_DRIVER: &str = "no CUDA driver (libcuda could not be loaded)";
    if !driver && !args.list {
        eprintln!("GPU trials ignored: {NO_DRIVER}");
    }
    let gemm = setup.entries.iter().any(|e| e.variant.family == "gemm" && !e.is_reference());
    let mut all = cpu_trials(gemm);
    for entry in setup.entries {
        let Some([correctness, perf_name]) = trials::names(&entry) else { continue };
        let name = entry.variant.name;
        all.push(gpu_trial(correctness, name.clone(), trials::correctness).with_ignored_flag(!driver));
        all.push(gpu_trial(perf_name, name, perf).with_ignored_flag(true));
    }
    if gemm {
        all.extend(dispatch_trials(driver));
    }
    if let Some(share) = setup.partition {
        all.retain(|trial| in_share(trial.name(), share));
    }
    let conclusion = libtest_mimic::run(&args, all);
    let no_gpu = if driver { device::gpu().err() } else { Some(NO_DRIVER.to_string()) };
    match no_gpu {
        Some(reason) if setup.require_gpu && !args.list => {
            eprintln!(
                "error: no GPU trial could run here ({reason}), so nothing was tested; run on a machine with a GPU, or pass \
                 --allow-no-gpu to accept a run without one"
            );
            ExitCode::FAILURE
        }
        _ => conclusion.exit_code(),
    }
}

/// The entries of the registry in `dir`: what `tilesmith test` and a bundle try.
pub fn registry_entries(dir: &Path) -> Result<Vec<Entry>, String> {
    let path = dir.join(tilesmith_spec::manifest::MANIFEST_FILE);
    let registry: tilesmith_spec::Registry =
        tilesmith_spec::manifest::read(&path).map_err(|err| format!("{err}: run `tilesmith build`"))?;
    Ok(registry.variants.into_iter().map(|built| built.entry).collect())
}
