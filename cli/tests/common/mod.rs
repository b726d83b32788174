//! What the CLI's test binaries share: running this build's `tilesmith` and reading its output.
// Each test binary uses a part of it.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// `tilesmith [--root ROOT] ARGS...`, run to its end.
pub fn xtask(root: Option<&Path>, args: &[&str]) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_tilesmith"));
    if let Some(root) = root {
        command.arg("--root").arg(root);
    }
    command.args(args).output().expect("tilesmith runs")
}

/// `tilesmith [--root ROOT] ARGS...`, killed after `seconds` (exit code 124): for inputs that
/// once made it block or run forever, so that a regression fails the test instead of hanging it.
pub fn xtask_within(seconds: u32, root: Option<&Path>, args: &[&str]) -> Output {
    let mut command = Command::new("timeout");
    command.arg(seconds.to_string()).arg(env!("CARGO_BIN_EXE_tilesmith"));
    if let Some(root) = root {
        command.arg("--root").arg(root);
    }
    command.args(args).output().expect("timeout runs tilesmith")
}

/// Its standard output and error, one after the other.
pub fn text(output: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr))
}

/// `tilesmith ARGS...` run to its end, with its printed text and the CPU seconds (user) it
/// spent, from bash's `time`: unlike wall time, that does not grow when other tests share the
/// machine's cores.
pub fn cpu_time(scratch: &Path, args: &[&str]) -> (bool, String, f64) {
    let output = Command::new("bash")
        .arg("-c")
        .arg("TIMEFORMAT=%U; { time \"$@\" > \"$0.out\" 2>&1; } 2> \"$0.time\"")
        .arg(scratch.join("timed"))
        .arg(env!("CARGO_BIN_EXE_tilesmith"))
        .args(args)
        .output()
        .expect("bash runs");
    let printed = std::fs::read_to_string(scratch.join("timed.out")).unwrap_or_default();
    let timed = std::fs::read_to_string(scratch.join("timed.time")).unwrap_or_default();
    let seconds = timed.trim().parse().unwrap_or_else(|_| panic!("bash's time printed {timed:?}"));
    (output.status.success(), printed, seconds)
}

/// A registry folder holding the shipped manifest's variants (no fatbins: replay loads none).
pub fn shipped_registry() -> tempfile::TempDir {
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let text = std::fs::read_to_string(workspace.join("generated/manifest.json")).unwrap();
    let manifest: tilesmith_spec::Manifest = serde_json::from_str(&text).unwrap();
    let registry = tilesmith_spec::Registry {
        format: manifest.format,
        project: None,
        variants: manifest.variants.into_iter().map(tilesmith_spec::Built::unbuilt).collect(),
    };
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("manifest.json"), serde_json::to_string(&registry).unwrap()).unwrap();
    dir
}

/// The cuobjdump that `tilesmith toolchain` finds beside nvcc.
pub fn cuobjdump_path() -> PathBuf {
    let toolchain = text(&xtask(None, &["toolchain"]));
    toolchain
        .lines()
        .find_map(|line| line.strip_prefix("cuobjdump: "))
        .map(|path| PathBuf::from(path.trim()))
        .filter(|path| path.is_file())
        .unwrap_or_else(|| panic!("no cuobjdump beside nvcc:\n{toolchain}"))
}

/// What `cuobjdump FLAG FATBIN` prints (ELF and PTX architectures, symbols, SASS).
pub fn cuobjdump(tool: &Path, fatbin: &Path, flag: &str) -> String {
    let output = Command::new(tool).arg(flag).arg(fatbin).output().expect("cuobjdump runs");
    assert!(output.status.success(), "cuobjdump {flag} {} failed: {}", fatbin.display(), text(&output));
    text(&output)
}
