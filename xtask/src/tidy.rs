//! The repository's layout rules, each a function returning what breaks it (empty: it holds),
//! so that `cargo xtask tidy` lists them all and `cargo test -p xtask` fails naming the rule.

use std::path::{Path, PathBuf};

/// Every rule's findings, each line naming the rule and the file.
pub fn broken_rules(root: &Path) -> Vec<String> {
    [code_map_names_every_crate(root), code_map_names_every_module(root)].concat()
}

/// The workspace's member folders, as the root Cargo.toml lists them.
pub fn members(root: &Path) -> Vec<String> {
    let manifest = std::fs::read_to_string(root.join("Cargo.toml")).unwrap_or_default();
    let Some(list) = manifest.lines().find_map(|line| line.trim().strip_prefix("members = [")) else {
        return Vec::new();
    };
    list.trim_end_matches(']').split(',').map(|m| m.trim().trim_matches('"').to_string()).filter(|m| !m.is_empty()).collect()
}

fn architecture(root: &Path) -> String {
    std::fs::read_to_string(root.join("ARCHITECTURE.md")).unwrap_or_default()
}

/// ARCHITECTURE.md's code map names every crate folder (`` `spec/` ``).
pub fn code_map_names_every_crate(root: &Path) -> Vec<String> {
    let map = architecture(root);
    members(root)
        .into_iter()
        .filter(|m| !map.contains(&format!("`{m}/`")))
        .map(|m| format!("code map: ARCHITECTURE.md does not name the crate folder `{m}/`"))
        .collect()
}

/// ARCHITECTURE.md's code map names every module of every crate (`` `chooser` ``), so that a
/// module added without a line saying its job is caught.
pub fn code_map_names_every_module(root: &Path) -> Vec<String> {
    let map = architecture(root);
    let mut broken = Vec::new();
    for member in members(root) {
        for file in rust_files(&root.join(&member).join("src")) {
            let stem = file.file_stem().and_then(|s| s.to_str()).unwrap_or_default();
            let in_bin = file.parent().is_some_and(|p| p.ends_with("bin"));
            if ["lib", "main", "mod"].contains(&stem) || in_bin {
                continue;
            }
            if !map.contains(&format!("`{stem}`")) && !map.contains(&format!("`{stem}` (")) {
                broken.push(format!("code map: ARCHITECTURE.md does not name module `{stem}` ({})", relative(root, &file)));
            }
        }
    }
    broken
}

/// The `.rs` files under `dir`, in a stable order.
pub fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else { continue };
        for entry in entries.flatten() {
            let path = entry.path();
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                found.push(path);
            }
        }
    }
    found.sort();
    found
}

fn relative(root: &Path, path: &Path) -> String {
    path.strip_prefix(root).unwrap_or(path).display().to_string()
}
