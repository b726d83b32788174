//! Inputs as a careless user or an attacker would write them (the third reliability round):
//! each is refused with the thing named and the rule broken, within bounded time and memory,
//! and nothing of the user's is lost.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn xtask(root: Option<&Path>, args: &[&str]) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_tilesmith"));
    if let Some(root) = root {
        command.arg("--root").arg(root);
    }
    command.args(args).output().expect("tilesmith runs")
}

fn text(output: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr))
}

/// Fails with a message (an exit code, not a signal: a stack overflow or an abort is a failure
/// of this test).
fn refused(root: Option<&Path>, args: &[&str]) -> String {
    let output = xtask(root, args);
    assert_eq!(output.status.code(), Some(1), "tilesmith {args:?} should have been refused:\n{}", text(&output));
    text(&output)
}

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf()
}

/// A project made by `tilesmith init`.
fn project() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let output = xtask(None, &["init", dir.path().to_str().unwrap()]);
    assert!(output.status.success(), "{}", text(&output));
    dir
}

fn files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            out.extend(files(&path));
        } else {
            out.push(path);
        }
    }
    out.sort();
    out
}

#[test]
fn bundle_never_replaces_a_users_folder_the_project_or_one_above_it() {
    let project = project();
    let root = project.path();
    let before = files(root);
    let mine = tempfile::tempdir().unwrap();
    std::fs::write(mine.path().join("thesis.tex"), "years of work").unwrap();
    let message = refused(Some(root), &["bundle", "--out", mine.path().to_str().unwrap()]);
    assert!(message.contains("not an earlier bundle"), "{message}");
    assert!(mine.path().join("thesis.tex").is_file());
    for (out, rule) in [
        (root.to_path_buf(), "the project or a folder above it"),
        (root.join("."), "the project or a folder above it"),
        (root.parent().unwrap().to_path_buf(), "the project or a folder above it"),
        (PathBuf::from("/"), "the project or a folder above it"),
        (root.join("kernel-templates"), "which the project owns"),
        (root.join("registry"), "which the project owns"),
        (root.join("generated").join("deeper"), "which the project owns"),
    ] {
        let message = refused(Some(root), &["bundle", "--out", out.to_str().unwrap()]);
        assert!(message.contains(rule), "{}: {message}", out.display());
    }
    assert_eq!(files(root), before, "a refused bundle touched the project");
}
