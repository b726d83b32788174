//! `tilesmith init`: a minimal project that builds and gets trials as it is: variants.toml
//! with one family (`scale`, Y = alpha · X) and its template, the files of the standalone
//! example (examples/standalone/), which CI builds.

use anyhow::{bail, Context, Result};
use std::path::Path;

/// The project's files, by path relative to its folder.
const FILES: &[(&str, &str)] = &[
    ("variants.toml", include_str!("../../examples/standalone/variants.toml")),
    ("kernel-templates/scale.cu.tera", include_str!("../../examples/standalone/kernel-templates/scale.cu.tera")),
];

/// What the project's .gitignore needs; appended to one that exists (a `cargo new` crate's).
const GITIGNORE: &str = "# written by `tilesmith build`\n/registry\n";

pub fn run(dir: &Path) -> Result<()> {
    if dir.join("variants.toml").exists() {
        bail!("{} already holds a variants.toml: init creates a new project and overwrites nothing", dir.display());
    }
    let taken: Vec<&str> = FILES.iter().map(|(path, _)| *path).filter(|path| dir.join(path).exists()).collect();
    if !taken.is_empty() {
        bail!("{} already holds {}: init overwrites nothing", dir.display(), taken.join(", "));
    }
    // Every folder is checked before anything is written, so that a refusal leaves nothing behind.
    for (path, _) in FILES {
        for parent in Path::new(path).ancestors().skip(1).filter(|p| !p.as_os_str().is_empty()) {
            let folder = dir.join(parent);
            if folder.exists() && !folder.is_dir() {
                bail!("{} is a file, where init would create the folder {}: nothing was written", folder.display(), parent.display());
            }
        }
    }
    let gitignore = dir.join(".gitignore");
    if gitignore.exists() && !gitignore.is_file() {
        bail!("{} is not a file: nothing was written", gitignore.display());
    }
    for (path, contents) in FILES {
        let path = dir.join(path);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).with_context(|| format!("cannot create {}", parent.display()))?;
        }
        std::fs::write(&path, contents).with_context(|| format!("cannot write {}", path.display()))?;
    }
    let existing = if gitignore.is_file() { tilesmith_spec::files::read_to_string(&gitignore)? } else { String::new() };
    if !existing.lines().any(|line| line.trim() == "/registry") {
        let separator = if existing.is_empty() || existing.ends_with('\n') { "" } else { "\n" };
        std::fs::write(&gitignore, format!("{existing}{separator}{GITIGNORE}"))
            .with_context(|| format!("cannot write {}", gitignore.display()))?;
    }
    println!(
        "created a tilesmith project in {}: variants.toml (family `scale`: Y = alpha · X) and kernel-templates/scale.cu.tera.\n\
         Next: `tilesmith gen`, `tilesmith build`, `tilesmith list`, `tilesmith test` (on a machine with a GPU).",
        dir.display()
    );
    Ok(())
}
