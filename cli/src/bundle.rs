//! `tilesmith bundle`: this `tilesmith` and the project's registry in one folder, with scripts
//! that run every trial, the bench and tuning there, for a GPU machine without a Rust toolchain.

use anyhow::{bail, Context, Result};
use std::path::{Path, PathBuf};
use tilesmith_build::compile::Options;
use tilesmith_build::{compile, gen, project, Project, Selection};
use tilesmith_spec::family_table::FamilyTable;
use tilesmith_spec::manifest::MANIFEST_FILE;
use tilesmith_spec::tuning::TUNING_DIR;

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
# beside cuBLAS (or, with --family NAME, any family's problems beside its baseline) and writes
# this GPU's tuning table; interrupt and run again to resume.
# Arguments go to `tilesmith tune` (--family, --shapes LIST, --shapes-file FILE, --dtypes, --layouts, --fresh).
# Results: $TILESMITH_TUNING_DIR (default tuning/ here): <family>/<GPU>-<SMs>sm.json. Commit it to
# the project's tuning/ folder; the next build carries it into the registry.
export TILESMITH_TUNING_DIR="${TILESMITH_TUNING_DIR:-$here/tuning}"
exec "$here/bin/tilesmith" tune "$@"
"#;

const BENCH_SCRIPT: &str = r#"# Benchmarks the bundled variants against cuBLAS and a device copy over a set of shapes.
# Arguments go to `tilesmith bench` (--kernels GLOB, --shapes LIST, --out DIR).
# Results: $TILESMITH_BENCH_DIR (default bench/ here): bench.json and an SVG chart per family and dtype.
export TILESMITH_BENCH_DIR="${TILESMITH_BENCH_DIR:-$here/bench}"
exec "$here/bin/tilesmith" bench "$@"
"#;

/// The file that marks a folder as a bundle, which a later bundle may replace.
const MARKER: &str = ".tilesmith-bundle";

/// What a bundle writes into its folder, and all a later bundle removes there (results, bench
/// and tuning output left by the scripts stay).
const WRITES: &[&str] = &["bin", "registry", "run.sh", "bench.sh", "tune.sh", MARKER];

pub fn run(project: &Project, out: Option<PathBuf>, options: &Options) -> Result<()> {
    // Checked and written where the path resolves, so that a `..` or a link cannot move a
    // write past the checks.
    let out = project::resolve(&out.unwrap_or_else(|| project.root.join("bundle")))?;
    check_out(project, &out)?;
    let all = Selection::new(&[])?;
    gen::run(project, &all, false, false)?;
    compile::run(project, &all, options)?;
    let myself = std::env::current_exe().context("cannot find this tilesmith's executable")?;

    for name in WRITES {
        let path = out.join(name);
        let removed = if path.is_dir() { std::fs::remove_dir_all(&path) } else { std::fs::remove_file(&path) };
        match removed {
            Err(err) if err.kind() != std::io::ErrorKind::NotFound => {
                return Err(err).with_context(|| format!("cannot clear {} of the earlier bundle", path.display()))
            }
            _ => {}
        }
    }
    let bin = out.join("bin");
    let registry = out.join("registry");
    std::fs::create_dir_all(&bin)?;
    std::fs::write(out.join(MARKER), "written by `tilesmith bundle`, which replaces this folder's bin/, registry/ and scripts\n")?;
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
    let tuning = registry_dir.join(TUNING_DIR);
    for (name, path) in FamilyTable::paths(&tuning)? {
        let target = registry.join(TUNING_DIR).join(name);
        std::fs::create_dir_all(target.parent().expect("inside the tuning folder"))?;
        std::fs::copy(&path, target)?;
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

/// Refuses an `--out` that would lose a user's files: the project, a folder above it or one it
/// owns, or an existing folder that holds anything and is not an earlier bundle.
fn check_out(project: &Project, out: &Path) -> Result<()> {
    let real = |path: &Path| project::resolve(path).unwrap_or_else(|_| path.to_path_buf());
    let (root, target) = (real(&project.root), out.to_path_buf());
    if root.starts_with(&target) {
        bail!(
            "bundle --out {}: is the project or a folder above it; give a folder of its own, e.g. {}",
            out.display(),
            project.root.join("bundle").display()
        );
    }
    let owned = [project.templates_dir(), project.generated_dir(), project.registry_dir(), project.tuning_dir(), project.root.join(".git")];
    if let Some(owner) = owned.iter().find(|dir| target.starts_with(real(dir))) {
        bail!("bundle --out {}: is inside {}, which the project owns; give a folder of its own", out.display(), owner.display());
    }
    if target.exists() {
        if !target.is_dir() {
            bail!("bundle --out {}: is a file, not a folder", out.display());
        }
        let empty = std::fs::read_dir(&target).with_context(|| format!("cannot read {}", out.display()))?.next().is_none();
        if !empty && !target.join(MARKER).is_file() {
            bail!(
                "bundle --out {}: the folder holds files and is not an earlier bundle (it has no {MARKER}); \
                 give a new or empty folder, so that nothing of yours is replaced",
                out.display()
            );
        }
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
