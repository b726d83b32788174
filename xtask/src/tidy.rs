//! The repository's layout rules, each a function returning what breaks it (empty: it holds),
//! so that `cargo xtask tidy` lists them all and `cargo test -p xtask` fails naming the rule.

use std::path::{Path, PathBuf};

/// Every rule's findings, each line naming the rule and the file.
pub fn broken_rules(root: &Path) -> Vec<String> {
    [
        code_map_names_every_crate(root),
        code_map_names_every_module(root),
        generic_crates_name_no_family(root),
        readme_is_a_guide(root),
        records_stay_out_of_docs(root),
    ]
    .concat()
}

/// README.md is the user's guide, a few hundred lines; the reference is docs/reference.md.
pub const README_MAX_LINES: usize = 400;

/// README.md stays a guide: at most [`README_MAX_LINES`] lines.
pub fn readme_is_a_guide(root: &Path) -> Vec<String> {
    let lines = std::fs::read_to_string(root.join("README.md")).map_or(0, |t| t.lines().count());
    if lines > README_MAX_LINES {
        return vec![format!(
            "README.md has {lines} lines, past {README_MAX_LINES}: move reference material to docs/reference.md and results to docs/perf/README.md"
        )];
    }
    Vec::new()
}

/// What docs/ may hold: pages, the pictures they show, and the scripts they measure with.
const DOCS_KINDS: [&str; 4] = ["md", "svg", "png", "py"];

/// docs/ is documentation: raw records (logs, JSON, tool output, archives) and prototypes stay
/// out of main's tree, on the branch `records`, so that a clone stays small.
pub fn records_stay_out_of_docs(root: &Path) -> Vec<String> {
    let record = |path: &Path| !path.extension().and_then(|e| e.to_str()).is_some_and(|e| DOCS_KINDS.contains(&e));
    files_under(&root.join("docs"), record)
        .into_iter()
        .map(|path| {
            format!(
                "records: {} is not a page, picture or script ({}); raw records and prototypes go on the branch `records`",
                relative(root, &path),
                DOCS_KINDS.join(", ")
            )
        })
        .collect()
}

/// The crates every family goes through: they know families only as data, so that adding one
/// (or a plug-in such as tilesmith-gemm) needs no change in them.
pub const GENERIC_CRATES: [&str; 4] = ["spec", "pipeline", "runtime", "tests"];

/// Words that would mean a generic crate knows a family: the shipped families GEMM and
/// transpose, and the library their plug-in wraps.
const FAMILY_WORDS: [&str; 3] = ["gemm", "transpose", "cublas"];

/// The generic crates' sources (`src/`) and manifests (`Cargo.toml`) name no family, in code or
/// in comments, whatever the case. Their tests may use the shipped variants as fixtures.
pub fn generic_crates_name_no_family(root: &Path) -> Vec<String> {
    let mut broken = Vec::new();
    for member in GENERIC_CRATES {
        let dir = root.join(member);
        let files = rust_files(&dir.join("src")).into_iter().chain([dir.join("Cargo.toml")]);
        for file in files {
            let Ok(text) = std::fs::read_to_string(&file) else { continue };
            for (number, line) in text.lines().enumerate() {
                let lower = line.to_lowercase();
                if let Some(word) = FAMILY_WORDS.iter().find(|w| lower.contains(*w)) {
                    broken.push(format!(
                        "generic crate names a family: {}:{} says `{word}`; move it into the family's plug-in crate",
                        relative(root, &file),
                        number + 1
                    ));
                }
            }
        }
    }
    broken
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
    files_under(dir, |path| path.extension().is_some_and(|e| e == "rs"))
}

/// The files under `dir` that `keep` takes, in a stable order.
fn files_under(dir: &Path, keep: impl Fn(&Path) -> bool) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else { continue };
        for entry in entries.flatten() {
            let path = entry.path();
            if path.is_dir() {
                stack.push(path);
            } else if keep(&path) {
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
