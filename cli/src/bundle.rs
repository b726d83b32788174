//! `tilesmith bundle`: this `tilesmith` and the project's registry in one folder, with scripts
//! that run every trial, the bench and tuning there, for a GPU machine without a Rust toolchain.

use anyhow::{Context, Result};
use std::path::{Path, PathBuf};
use tilesmith_build::compile::Options;
use tilesmith_build::{compile, Project, Selection};
use tilesmith_spec::manifest::MANIFEST_FILE;
use tilesmith_spec::tuning::{TuningTable, TUNING_DIR};

/// What every script starts with: the bundled registry, and cuBLAS on the library path.
const PRELUDE: &str = r#"#!/usr/bin/env bash
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
export TILESMITH_REGISTRY="$here/registry"
# cuBLAS, the GEMM baseline, is loaded at run time.
for lib in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib; do
  if [ -d "$lib" ]; then export LD_LIBRARY_PATH="$lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"; fi
done
"#;

const RUN_SCRIPT: &str = r#"# Runs every tilesmith trial (correctness and performance) on this machine's GPU; no Rust needed.
# Extra arguments go to `tilesmith test`, e.g. a filter such as 'gemm::', '--skip ::perf' or
# '--partition hash:1/2'.
# Results: $TILESMITH_PERF_DIR (default results/ here): trials.log, one JSON per perf trial, perf.md.
export TILESMITH_PERF_DIR="${TILESMITH_PERF_DIR:-$here/results}"
mkdir -p "$TILESMITH_PERF_DIR"
"$here/bin/tilesmith" test --include-ignored "$@" 2>&1 | tee "$TILESMITH_PERF_DIR/trials.log"
status=${PIPESTATUS[0]}
if ls "$TILESMITH_PERF_DIR"/*.json >/dev/null 2>&1; then
  "$here/bin/tilesmith" perf-table "$TILESMITH_PERF_DIR" | tee "$TILESMITH_PERF_DIR/perf.md"
fi
exit "$status"
"#;

const TUNE_SCRIPT: &str = r#"# Tunes the dispatcher on this machine's GPU: times every variant on a set of GEMM problems
# beside cuBLAS and writes this GPU's tuning table; interrupt and run again to resume.
# Arguments go to `tilesmith tune` (--shapes LIST, --shapes-file FILE, --dtypes, --layouts, --fresh).
# Results: $TILESMITH_TUNING_DIR (default tuning/ here): <GPU>-<SMs>sm.json. Commit it to the
# project's tuning/ folder; the next build carries it into the registry.
export TILESMITH_TUNING_DIR="${TILESMITH_TUNING_DIR:-$here/tuning}"
exec "$here/bin/tilesmith" tune "$@"
"#;

const BENCH_SCRIPT: &str = r#"# Benchmarks the bundled variants against cuBLAS and a device copy over a set of shapes.
# Arguments go to `tilesmith bench` (--kernels GLOB, --shapes LIST, --out DIR).
# Results: $TILESMITH_BENCH_DIR (default bench/ here): bench.json and an SVG chart per family and dtype.
export TILESMITH_BENCH_DIR="${TILESMITH_BENCH_DIR:-$here/bench}"
exec "$here/bin/tilesmith" bench "$@"
"#;

pub fn run(project: &Project, out: Option<PathBuf>, options: &Options) -> Result<()> {
    let out = out.unwrap_or_else(|| project.root.join("bundle"));
    compile::run(project, &Selection::new(&[])?, options)?;
    let myself = std::env::current_exe().context("cannot find this tilesmith's executable")?;

    if out.exists() {
        std::fs::remove_dir_all(&out).with_context(|| format!("cannot clear {}", out.display()))?;
    }
    let bin = out.join("bin");
    let registry = out.join("registry");
    std::fs::create_dir_all(&bin)?;
    std::fs::create_dir_all(&registry)?;
    std::fs::copy(&myself, bin.join("tilesmith")).with_context(|| format!("cannot copy {}", myself.display()))?;
    let registry_dir = project.registry_dir();
    for entry in std::fs::read_dir(&registry_dir)? {
        let path = entry?.path();
        let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        if name.ends_with(".fatbin") || name == MANIFEST_FILE {
            std::fs::copy(&path, registry.join(&name))?;
        }
    }
    for path in TuningTable::paths(&registry_dir.join(TUNING_DIR))? {
        std::fs::create_dir_all(registry.join(TUNING_DIR))?;
        std::fs::copy(&path, registry.join(TUNING_DIR).join(path.file_name().expect("a file")))?;
    }
    for (name, body) in [("run.sh", RUN_SCRIPT), ("bench.sh", BENCH_SCRIPT), ("tune.sh", TUNE_SCRIPT)] {
        let script = out.join(name);
        std::fs::write(&script, format!("{PRELUDE}{body}"))?;
        make_executable(&script)?;
    }
    println!(
        "bundle in {} ({:.1} MiB): ./run.sh runs every trial, ./bench.sh benchmarks, ./tune.sh tunes the dispatcher",
        out.display(),
        size(&out)? as f64 / (1 << 20) as f64
    );
    if cfg!(debug_assertions) {
        println!("note: this tilesmith is a debug build, slow on the host side of trials; bundle with a release one (cargo install, or cargo run --release)");
    }
    Ok(())
}

#[cfg(unix)]
fn make_executable(path: &Path) -> Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755))?;
    Ok(())
}

#[cfg(not(unix))]
fn make_executable(_: &Path) -> Result<()> {
    Ok(())
}

fn size(dir: &Path) -> Result<u64> {
    let mut total = 0;
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        total += if entry.file_type()?.is_dir() { size(&entry.path())? } else { entry.metadata()?.len() };
    }
    Ok(total)
}
