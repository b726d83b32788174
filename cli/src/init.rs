//! `tilesmith init`: a minimal project that builds and gets trials as it is: variants.toml
//! with one family (`scale`, Y = alpha · X) and its template, the files of the standalone
//! example (examples/standalone/), which CI builds.

use anyhow::{bail, Context, Result};
use std::path::Path;

/// The project's files, by path relative to its folder.
const FILES: &[(&str, &str)] = &[
    ("variants.toml", include_str!("../../examples/standalone/variants.toml")),
    ("kernel-templates/scale.cu.tera", include_str!("../../examples/standalone/kernel-templates/scale.cu.tera")),
    (".gitignore", "# written by `tilesmith build`\n/registry\n"),
];

pub fn run(dir: &Path) -> Result<()> {
    if dir.join("variants.toml").exists() {
        bail!("{} already holds a variants.toml: init creates a new project and overwrites nothing", dir.display());
    }
    let taken: Vec<&str> = FILES.iter().map(|(path, _)| *path).filter(|path| dir.join(path).exists()).collect();
    if !taken.is_empty() {
        bail!("{} already holds {}: init overwrites nothing", dir.display(), taken.join(", "));
    }
    for (path, contents) in FILES {
        let path = dir.join(path);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).with_context(|| format!("cannot create {}", parent.display()))?;
        }
        std::fs::write(&path, contents).with_context(|| format!("cannot write {}", path.display()))?;
    }
    println!(
        "created a tilesmith project in {}: variants.toml (family `scale`: Y = alpha · X) and kernel-templates/scale.cu.tera.\n\
         Next: `tilesmith gen`, `tilesmith build`, `tilesmith list`, `tilesmith test` (on a machine with a GPU).",
        dir.display()
    );
    Ok(())
}
