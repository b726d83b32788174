//! What the CLI's test binaries share: running this build's `tilesmith` and reading its output.

use std::path::Path;
use std::process::{Command, Output};

/// `tilesmith [--root ROOT] ARGS...`, run to its end.
pub fn xtask(root: Option<&Path>, args: &[&str]) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_tilesmith"));
    if let Some(root) = root {
        command.arg("--root").arg(root);
    }
    command.args(args).output().expect("tilesmith runs")
}

/// Its standard output and error, one after the other.
pub fn text(output: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr))
}
