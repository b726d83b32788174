//! `cargo xtask gen`: variants.toml → rendered CUDA under generated/ and its manifest.

use crate::project::{write_atomic, Project};
use crate::render::{Rendered, Renderer};
use crate::select::Selection;
use anyhow::{bail, Context, Result};
use std::path::PathBuf;
use tilesmith_spec::manifest::{self, FORMAT, MANIFEST_FILE};
use tilesmith_spec::{Config, Entry, Manifest};

/// Parses, expands, validates and renders every declared variant, in memory. Any problem with
/// any variant is an error listing them all, so nothing is written from a bad configuration.
pub fn expand(project: &Project) -> Result<Vec<Rendered>> {
    let config = Config::load(&project.variants_file()).map_err(|err| {
        let mut err = err;
        for diagnostic in &mut err.0 {
            diagnostic.file = project.relative(&diagnostic.file).into();
        }
        anyhow::anyhow!("{err}")
    })?;
    let renderer = Renderer::load(project)?;
    let mut rendered = Vec::new();
    let mut problems = Vec::new();
    for declared in &config.variants {
        match renderer.render(project, declared) {
            Ok(r) => rendered.push(r),
            Err(diagnostic) => problems.push(diagnostic.to_string()),
        }
    }
    if !problems.is_empty() {
        bail!("{}\n{} variant(s) rejected; nothing was written", problems.join("\n"), problems.len());
    }
    Ok(rendered)
}

/// The files `gen` owns, with the contents the templates produce now. With `--kernels`, the
/// manifest keeps the entries of unselected variants as they were, so that it describes the
/// sources in generated/ and not ones that were not written.
fn expected_files(project: &Project, rendered: &[Rendered], selection: &Selection) -> Result<Vec<(PathBuf, String)>> {
    let mut files: Vec<(PathBuf, String)> = rendered
        .iter()
        .filter(|r| selection.matches(&r.entry.variant.name))
        .map(|r| (project.root.join(&r.entry.source), r.source.clone()))
        .collect();
    let manifest_path = project.generated_dir().join(MANIFEST_FILE);
    let previous: Vec<Entry> = manifest::read::<Manifest>(&manifest_path).map(|m| m.variants).unwrap_or_default();
    let variants = rendered
        .iter()
        .filter_map(|r| {
            if selection.matches(&r.entry.variant.name) {
                return Some(r.entry.clone());
            }
            previous.iter().find(|e| e.variant.name == r.entry.variant.name && project.root.join(&e.source).is_file()).cloned()
        })
        .collect();
    let manifest = Manifest { format: FORMAT, variants };
    let json = serde_json::to_string_pretty(&manifest)? + "\n";
    files.push((project.generated_dir().join(MANIFEST_FILE), json));
    Ok(files)
}

/// Sources in generated/ that no declared variant renders to.
fn orphans(project: &Project, rendered: &[Rendered]) -> Result<Vec<PathBuf>> {
    let dir = project.generated_dir();
    if !dir.exists() {
        return Ok(Vec::new());
    }
    let declared: Vec<PathBuf> = rendered.iter().map(|r| project.root.join(&r.entry.source)).collect();
    let mut orphans = Vec::new();
    for entry in std::fs::read_dir(&dir).with_context(|| format!("cannot read {}", dir.display()))? {
        let path = entry?.path();
        if path.extension().is_some_and(|ext| ext == "cu") && !declared.contains(&path) {
            orphans.push(path);
        }
    }
    orphans.sort();
    Ok(orphans)
}

pub fn run(project: &Project, selection: &Selection, check: bool) -> Result<()> {
    let rendered = expand(project)?;
    let selected = rendered.iter().filter(|r| selection.matches(&r.entry.variant.name)).count();
    if selected == 0 {
        bail!("--kernels matches none of the {} declared variants", rendered.len());
    }
    let files = expected_files(project, &rendered, selection)?;
    let orphans = orphans(project, &rendered)?;

    if check {
        let mut stale = Vec::new();
        for (path, contents) in &files {
            match std::fs::read_to_string(path) {
                Ok(existing) if existing == *contents => {}
                Ok(_) => stale.push(format!("  {} (differs from what the templates produce)", project.relative(path))),
                Err(_) => stale.push(format!("  {} (missing)", project.relative(path))),
            }
        }
        for path in &orphans {
            stale.push(format!("  {} (no declared variant renders it)", project.relative(path)));
        }
        if !stale.is_empty() {
            bail!("{} generated file(s) are stale; run `cargo xtask gen`:\n{}", stale.len(), stale.join("\n"));
        }
        println!("generated/ is up to date: {selected} variant(s) checked");
        return Ok(());
    }

    let mut written = 0;
    for (path, contents) in &files {
        if write_atomic(path, contents.as_bytes()).with_context(|| format!("cannot write {}", path.display()))? {
            written += 1;
        }
    }
    for path in &orphans {
        std::fs::remove_file(path).with_context(|| format!("cannot remove {}", path.display()))?;
    }
    println!(
        "{selected} variant(s) rendered into {}: {written} file(s) written, {} removed, the rest unchanged",
        project.relative(&project.generated_dir()),
        orphans.len()
    );
    Ok(())
}
