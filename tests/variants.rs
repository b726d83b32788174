//! The generated per-variant trials: for every variant in the manifest but its family's
//! reference variants, `<family>::<variant>::correctness` and `<family>::<variant>::perf`
//! (ignored unless asked for, with `--include-ignored` or `--ignored`), made from the family's
//! declaration, and `dispatch::...` trials of the registry's `gemm` call, which picks the
//! variant itself. Listing makes no CUDA call.
//!
//! Where the CUDA driver library cannot be loaded, every GPU trial is listed as ignored, so that
//! both `cargo test` and nextest show it skipped, and the reason is printed once; run anyway
//! (`--include-ignored`), or with a driver but no GPU, each reports itself ignored with the reason.

use libtest_mimic::{Arguments, Completion, Failed, Trial};
use std::path::Path;
use std::process::ExitCode;
use tilesmith_runtime::{Dtype, Gpu, Kernel, Layout, Registry};
use tilesmith_spec::manifest::{self, MANIFEST_FILE};
use tilesmith_spec::{Entry, Manifest};
use tilesmith_tests::host::{read_region, relative_error, Operands};
use tilesmith_tests::{device, report, trials, with_element};

/// The variants to make trials for: the registry's when TILESMITH_REGISTRY names one (a
/// bundle on a machine without the sources), else generated/manifest.json.
fn entries() -> Result<Vec<Entry>, String> {
    match std::env::var_os("TILESMITH_REGISTRY").filter(|v| !v.is_empty()) {
        Some(dir) => {
            let registry: tilesmith_spec::Registry = manifest::read(&Path::new(&dir).join(MANIFEST_FILE)).map_err(|err| err.to_string())?;
            Ok(registry.variants.into_iter().map(|built| built.entry).collect())
        }
        None => {
            let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../generated").join(MANIFEST_FILE);
            manifest::read::<Manifest>(&path).map(|m| m.variants).map_err(|err| err.to_string())
        }
    }
}

/// A GPU trial: ignored with the reason where there is no GPU, failed on any error.
fn gpu_trial(name: String, variant: String, run: fn(&Gpu, &Registry, &Kernel) -> Result<String, String>) -> Trial {
    Trial::ignorable_test(name, move || {
        let gpu = match device::gpu() {
            Ok(gpu) => gpu,
            Err(reason) => return Ok(Completion::ignored_with(reason)),
        };
        let registry = device::registry()?;
        let kernel = registry.kernel(&variant).map_err(|err| err.to_string())?;
        let summary = run(gpu, registry, &kernel)?;
        println!("{summary}");
        Ok(Completion::Completed)
    })
}

fn perf(gpu: &Gpu, registry: &Registry, kernel: &Kernel) -> Result<String, String> {
    let record = trials::performance(gpu, registry, kernel)?;
    let path = report::write(&record)?;
    Ok(format!("{} -> {}", record.summary(), path.display()))
}

/// `dispatch::<dtype>_<layout>::<shape>`: the registry's `gemm` on a spread of shapes, every
/// dtype and layout.
fn dispatch_trials(driver: bool) -> Vec<Trial> {
    let mut trials = Vec::new();
    for &dtype in Dtype::ALL {
        for &layout in Layout::ALL {
            for (label, shape) in trials::dispatch_shapes(layout) {
                let trial = Trial::ignorable_test(format!("dispatch::{dtype}_{layout}::{label}"), move || {
                    let gpu = match device::gpu() {
                        Ok(gpu) => gpu,
                        Err(reason) => return Ok(Completion::ignored_with(reason)),
                    };
                    let registry = device::registry()?;
                    let summary = with_element!(dtype, T => trials::dispatch_correctness::<T>(gpu, registry, shape))?;
                    println!("{summary}");
                    Ok(Completion::Completed)
                });
                trials.push(trial.with_ignored_flag(!driver));
            }
        }
    }
    trials
}

/// Checks of the harness's own float64 reference, which the GPU trials rely on.
fn cpu_trials() -> Vec<Trial> {
    vec![
        Trial::test("cpu::reference::layouts", || {
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
        }),
        Trial::test("cpu::reference::error_metric", || {
            let reference = [3.0, 4.0];
            check(relative_error(&[3.0, 4.0], &reference) == 0.0, "equal values")?;
            check((relative_error(&[3.0, 4.5], &reference) - 0.1).abs() < 1e-12, "0.5 off a norm of 5")?;
            check(relative_error(&[f64::NAN, 4.0], &reference).is_infinite(), "NaN fails")?;
            let poisoned = [1.0f32, f32::NAN, f32::NAN, 2.0, f32::NAN, f32::NAN];
            let (region, unwritten, outside) = read_region(&poisoned, 2, 2, 3);
            check(region.len() == 4 && unwritten == 2 && outside == 0, "a 2x2 region of a 2x3 buffer")
        }),
    ]
}

fn check(ok: bool, what: &str) -> Result<(), Failed> {
    if ok {
        Ok(())
    } else {
        Err(format!("check failed: {what}").into())
    }
}

fn main() -> ExitCode {
    let mut args = Arguments::from_args();
    // GPU trials share one GPU: one at a time unless asked otherwise.
    args.test_threads.get_or_insert(1);
    let entries = match entries() {
        Ok(entries) => entries,
        Err(err) => {
            eprintln!("error: {err}");
            return ExitCode::FAILURE;
        }
    };
    // Loading the library is no CUDA call; cudarc would panic at the first call without it.
    let driver = unsafe { cudarc::driver::sys::is_culib_present() };
    if !driver && !args.list {
        eprintln!("GPU trials ignored: no CUDA driver (libcuda could not be loaded)");
    }
    let mut all = cpu_trials();
    for entry in entries {
        let Some([correctness, perf_name]) = trials::names(&entry) else { continue };
        let name = entry.variant.name;
        all.push(gpu_trial(correctness, name.clone(), trials::correctness).with_ignored_flag(!driver));
        all.push(gpu_trial(perf_name, name, perf).with_ignored_flag(true));
    }
    all.extend(dispatch_trials(driver));
    libtest_mimic::run(&args, all).exit_code()
}
