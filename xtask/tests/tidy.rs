//! The layout rules of `xtask::tidy`, one test each, on this checkout.

use std::path::{Path, PathBuf};
use xtask::tidy;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf()
}

fn holds(broken: Vec<String>) {
    assert!(broken.is_empty(), "{}", broken.join("\n"));
}

#[test]
fn the_workspace_lists_its_crates() {
    let members = tidy::members(&root());
    for crate_folder in ["spec", "pipeline", "runtime", "gemm", "tests", "cli", "xtask"] {
        assert!(members.iter().any(|m| m == crate_folder), "{crate_folder} missing from {members:?}");
    }
}

#[test]
fn code_map_names_every_crate() {
    holds(tidy::code_map_names_every_crate(&root()));
}

#[test]
fn code_map_names_every_module() {
    holds(tidy::code_map_names_every_module(&root()));
}

#[test]
fn generic_crates_name_no_family() {
    holds(tidy::generic_crates_name_no_family(&root()));
}

#[test]
fn readme_is_a_guide() {
    holds(tidy::readme_is_a_guide(&root()));
}

#[test]
fn records_stay_out_of_docs() {
    holds(tidy::records_stay_out_of_docs(&root()));
}

#[test]
fn a_crate_or_module_missing_from_the_code_map_is_found() {
    let scratch = std::env::temp_dir().join(format!("xtask-tidy-{}", std::process::id()));
    std::fs::create_dir_all(scratch.join("alpha/src")).unwrap();
    std::fs::write(scratch.join("Cargo.toml"), "[workspace]\nmembers = [\"alpha\"]\n").unwrap();
    std::fs::write(scratch.join("alpha/src/lib.rs"), "").unwrap();
    std::fs::write(scratch.join("alpha/src/beta.rs"), "").unwrap();
    std::fs::write(scratch.join("ARCHITECTURE.md"), "nothing here\n").unwrap();
    std::fs::create_dir_all(scratch.join("runtime/src")).unwrap();
    std::fs::write(scratch.join("runtime/src/lib.rs"), "// fast paths\n// the cuBLAS baseline\n").unwrap();
    std::fs::create_dir_all(scratch.join("docs/perf")).unwrap();
    std::fs::write(scratch.join("docs/perf/run.log"), "").unwrap();
    std::fs::write(scratch.join("docs/perf/bench.json"), "").unwrap();
    std::fs::write(scratch.join("docs/perf/chart.svg"), "").unwrap();
    std::fs::write(scratch.join("docs/perf/notes.md"), "").unwrap();
    std::fs::write(scratch.join("README.md"), "line\n".repeat(tidy::README_MAX_LINES + 1)).unwrap();
    let broken = tidy::broken_rules(&scratch);
    std::fs::remove_dir_all(&scratch).unwrap();
    assert!(broken.iter().any(|b| b.contains("crate folder `alpha/`")), "{broken:?}");
    assert!(broken.iter().any(|b| b.contains("module `beta` (alpha/src/beta.rs)")), "{broken:?}");
    assert!(broken.iter().any(|b| b.contains("runtime/src/lib.rs:2 says `cublas`")), "{broken:?}");
    assert!(!broken.iter().any(|b| b.contains("lib.rs:1")), "{broken:?}");
    assert!(broken.iter().any(|b| b.contains("docs/perf/run.log is not a page")), "{broken:?}");
    assert!(broken.iter().any(|b| b.contains("docs/perf/bench.json is not a page")), "{broken:?}");
    assert!(!broken.iter().any(|b| b.contains("chart.svg") || b.contains("notes.md")), "{broken:?}");
    assert!(broken.iter().any(|b| b.contains("README.md has 401 lines")), "{broken:?}");
}
