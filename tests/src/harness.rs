//! The harness of the generated trials, shared by `cargo test` (cli/tests/variants.rs) and
//! `tilesmith test`: for every variant of a registry but its family's reference variants,
//! `<family>::<variant>::correctness` and `<family>::<variant>::perf` (ignored unless asked
//! for, with `--include-ignored` or `--ignored`), made from the family's declaration, and the
//! trials of the plug-ins given (a dispatcher's). Listing makes no CUDA call.
//!
//! Where the CUDA driver library cannot be loaded, every GPU trial is listed as ignored, so that
//! both `cargo test` and nextest show it skipped, and the reason is printed once; run anyway
//! (`--include-ignored`), or with a driver but no GPU, each reports itself ignored with the reason.

use crate::host::{read_regions, relative_error};
use crate::trials::{self, Plugin};
use crate::{declared, device, report};
use libtest_mimic::{Arguments, Completion, Failed, Trial};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::OnceLock;
use tilesmith_runtime::{Gpu, Kernel, Registry};
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
    /// The plug-ins whose libraries and trials this run knows.
    pub plugins: &'static [&'static dyn Plugin],
}

static REGISTRY_DIR: OnceLock<PathBuf> = OnceLock::new();
static PERF_DIR: OnceLock<PathBuf> = OnceLock::new();

/// The registry, opened once, for the GPU trials.
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
fn gpu_trial(
    name: String,
    variant: String,
    run: impl FnOnce(&Gpu, &Registry, &Kernel) -> Result<String, String> + Send + 'static,
) -> Trial {
    gpu_test(name, move |gpu, registry| {
        let kernel = registry.kernel(&variant).map_err(|err| err.to_string())?;
        run(gpu, registry, &kernel)
    })
}

/// A trial on the GPU and the registry (a plug-in's, as well as every variant's): ignored with
/// the reason where there is no GPU, failed on any error, its summary printed.
pub fn gpu_test(name: String, run: impl FnOnce(&Gpu, &Registry) -> Result<String, String> + Send + 'static) -> Trial {
    Trial::ignorable_test(name, move || {
        let gpu = match device::gpu() {
            Ok(gpu) => gpu,
            Err(reason) => return Ok(Completion::ignored_with(reason)),
        };
        let summary = run(gpu, registry()?)?;
        println!("{summary}");
        Ok(Completion::Completed)
    })
}

fn perf(plugins: &[&dyn Plugin], gpu: &Gpu, registry: &Registry, kernel: &Kernel) -> Result<String, String> {
    let record = trials::performance(plugins, gpu, registry, kernel)?;
    let path = report::write(&record, PERF_DIR.get().ok_or("the harness was not set up")?)?;
    Ok(format!("{} -> {}", record.summary(), path.display()))
}

/// Checks of the harness's own error metric and region reading, which the GPU trials rely on.
fn cpu_trials() -> Vec<Trial> {
    vec![Trial::test("cpu::reference::error_metric", || {
        let reference = [3.0, 4.0];
        check(relative_error(&[3.0, 4.0], &reference) == 0.0, "equal values")?;
        check((relative_error(&[3.0, 4.5], &reference) - 0.1).abs() < 1e-12, "0.5 off a norm of 5")?;
        check(relative_error(&[f64::NAN, 4.0], &reference).is_infinite(), "NaN fails")?;
        // A NaN the reference has is a declared result (a bad index's): matched, not measured.
        check(relative_error(&[f64::NAN, 4.0], &[f64::NAN, 4.0]) == 0.0, "NaN where the reference has NaN")?;
        check(relative_error(&[3.0, 4.0], &[f64::NAN, 4.0]).is_infinite(), "a number where the reference has NaN")?;
        // Poison is a NaN of its own bits, told apart from the NaN arithmetic writes.
        use tilesmith_runtime::Element;
        check(f32::POISON.is_nan() && f32::POISON.is_poison() && !f32::NAN.is_poison(), "f32's poison")?;
        check(half::bf16::POISON.is_poison() && !half::bf16::NAN.is_poison(), "bf16's poison")?;
        check(i32::from_f64(f64::NAN).is_poison() && !i32::from_f64(-100.0).is_poison(), "i32's poison")?;
        let poisoned = [1.0f32, f32::NAN, f32::NAN, 2.0, f32::NAN, f32::NAN];
        let (region, unwritten, outside) = read_regions(&poisoned, 2, 2, 3, 1, 0);
        check(region.len() == 4 && unwritten == 2 && outside == 0, "a 2x2 region of a 2x3 buffer")?;
        // Two 1x2 problems 3 apart: elements 0, 1 and 3, 4; 2 and 5 are outside.
        let (region, unwritten, outside) = read_regions(&[1.0f32, f32::NAN, 5.0, 2.0, 3.0, f32::NAN], 1, 2, 2, 2, 3);
        check(region.len() == 4 && unwritten == 1 && outside == 1, "two problems of a batch, a write between them")
    })]
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
    let plugins = setup.plugins;
    let mut all = cpu_trials();
    for plugin in plugins {
        all.extend(plugin.trials(&setup.entries, !driver));
    }
    // Tuning on first call, once per family whose reference is one of its variants.
    let mut families: Vec<String> = setup
        .entries
        .iter()
        .filter(|e| e.declaration.reference.library.is_none() && !e.is_reference())
        .map(|e| e.variant.family.clone())
        .collect();
    families.sort();
    families.dedup();
    for family in families {
        let name = format!("{family}::first_call");
        let run = move |gpu: &Gpu, registry: &Registry| declared::first_call(gpu, registry, &family);
        all.push(gpu_test(name, run).with_ignored_flag(!driver));
    }
    for entry in setup.entries {
        let Some([correctness, perf_name]) = trials::names(&entry) else { continue };
        let name = entry.variant.name;
        let check = move |gpu: &Gpu, registry: &Registry, kernel: &Kernel| trials::correctness(plugins, gpu, registry, kernel);
        all.push(gpu_trial(correctness, name.clone(), check).with_ignored_flag(!driver));
        let time = move |gpu: &Gpu, registry: &Registry, kernel: &Kernel| perf(plugins, gpu, registry, kernel);
        all.push(gpu_trial(perf_name, name, time).with_ignored_flag(true));
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
