//! `cargo test`'s generated trials of this workspace's variants (see
//! `tilesmith_trials::harness`): listed from generated/manifest.json, so that listing needs no
//! build, and run against registry/; or, where TILESMITH_REGISTRY names a registry, its own.

use libtest_mimic::Arguments;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use tilesmith_spec::manifest::{self, MANIFEST_FILE};
use tilesmith_spec::Manifest;
use tilesmith_trials::harness::{self, Setup};
use tilesmith_trials::trials::Plugin;

/// The plug-ins of this workspace: GEMM's (its cuBLAS baseline and its dispatcher's trials).
const PLUGINS: &[&dyn Plugin] = &[&tilesmith_gemm::trials::PLUGIN];

fn main() -> ExitCode {
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let given = std::env::var_os(tilesmith_runtime::REGISTRY_VAR).filter(|v| !v.is_empty()).map(PathBuf::from);
    let entries = match &given {
        Some(dir) => harness::registry_entries(dir),
        None => manifest::read::<Manifest>(&workspace.join("generated").join(MANIFEST_FILE)).map(|m| m.variants).map_err(|e| e.to_string()),
    };
    let entries = match entries {
        Ok(entries) => entries,
        Err(err) => {
            eprintln!("error: {err}");
            return ExitCode::FAILURE;
        }
    };
    let perf_dir = std::env::var_os(tilesmith_trials::report::PERF_DIR_VAR)
        .filter(|v| !v.is_empty())
        .map_or_else(|| workspace.join("target").join(tilesmith_trials::report::PERF_DIR_NAME), PathBuf::from);
    let registry = given.unwrap_or_else(|| workspace.join("registry"));
    harness::run(Arguments::from_args(), Setup { entries, registry, perf_dir, partition: None, require_gpu: false, plugins: PLUGINS })
}
