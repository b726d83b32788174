//! `tilesmith gen`: variants.toml → rendered CUDA under generated/ and its manifest, as a
//! transaction: one gen at a time (builds reading generated/ share the lock), sources first
//! and the manifest last, and a manifest that cannot be read is refused, never rewritten in
//! a way that forgets variants.

use crate::parallel;
use crate::project::{self, write_atomic, Project};
use crate::render::{Rendered, Renderer};
use crate::select::Selection;
use anyhow::{bail, Context, Result};
use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use tilesmith_spec::axes::Value;
use tilesmith_spec::manifest::{self, FORMAT, MANIFEST_FILE};
use tilesmith_spec::{Config, Diagnostic, Dtype, Entry, Manifest};

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
    // One line per distinct rule, however many variants break it.
    let mut problems: Vec<(Diagnostic, Vec<String>)> = Vec::new();
    let mut rejected = 0;
    for outcome in parallel::map(&config.variants, |declared| renderer.render(project, declared)) {
        match outcome {
            Ok(r) => rendered.push(r),
            Err(diagnostic) => {
                rejected += 1;
                let variant = diagnostic.variant.clone().unwrap_or_default();
                match problems.iter_mut().find(|(first, _)| first.rule == diagnostic.rule) {
                    Some((_, variants)) => variants.push(variant),
                    None => problems.push((diagnostic, vec![variant])),
                }
            }
        }
    }
    if !problems.is_empty() {
        let lines: Vec<String> = problems
            .iter()
            .map(|(first, variants)| match variants.len() {
                1 => first.to_string(),
                n => format!(
                    "{first}\n  ({n} variants share this error: {}{})",
                    variants[..n.min(4)].join(", "),
                    if n > 4 { ", ..." } else { "" }
                ),
            })
            .collect();
        bail!("{}\n{rejected} variant(s) rejected; nothing was written", lines.join("\n"));
    }
    if let Some(warning) = missing_references(&rendered) {
        eprintln!("{warning}");
    }
    Ok(rendered)
}

/// A warning naming the variants whose trials would have nothing to compare with: of a family
/// checked against reference variants, with no reference variant of their dtype (and of f32,
/// where the family counts units in the last place of the exact result) and their computing
/// axes. Their trials fail saying so; a project may build such variants before it has one.
fn missing_references(rendered: &[Rendered]) -> Option<String> {
    type Key<'a> = (&'a str, Dtype, Vec<(&'a String, &'a Value)>);
    fn key(e: &Entry, dtype: Dtype) -> Key<'_> {
        let computes = |name: &String| e.declaration.computing_axes().any(|a| &a.name == name);
        (e.variant.family.as_str(), dtype, e.variant.axes.iter().filter(|(name, _)| computes(name)).collect())
    }
    let references: BTreeSet<Key<'_>> =
        rendered.iter().map(|r| &r.entry).filter(|e| e.is_reference() && e.variant.is_checked()).map(|e| key(e, e.variant.dtype)).collect();
    // Per missing reference, the variants that need it.
    let mut missing: BTreeMap<Key<'_>, Vec<&str>> = BTreeMap::new();
    for e in rendered.iter().map(|r| &r.entry).filter(|e| !e.is_reference() && e.declaration.reference.backend.is_some()) {
        let exact = e.exact_check().map(|(_, dtype)| dtype);
        for dtype in [Some(e.variant.dtype), exact].into_iter().flatten() {
            if !references.contains(&key(e, dtype)) {
                missing.entry(key(e, dtype)).or_default().push(&e.variant.name);
            }
        }
    }
    if missing.is_empty() {
        return None;
    }
    let lines: Vec<String> = missing
        .iter()
        .map(|((family, dtype, axes), variants)| {
            let backend =
                rendered.iter().find(|r| r.entry.variant.family == *family).and_then(|r| r.entry.declaration.reference.backend.clone());
            let axes: String = axes.iter().map(|(name, value)| format!(", {name} = {value}")).collect();
            format!(
                "  {family}: no reference variant (backend `{}`, dtype {dtype}{axes}, bounds checked) for {} variant(s): {}{}",
                backend.unwrap_or_default(),
                variants.len(),
                variants[..variants.len().min(4)].join(", "),
                if variants.len() > 4 { ", ..." } else { "" }
            )
        })
        .collect();
    Some(format!(
        "warning: {} reference variant(s) missing, so their variants' trials have nothing to compare with and will fail; \
         declare them in variants.toml (a group with the reference backend, those dtypes and axes):\n{}",
        missing.len(),
        lines.join("\n")
    ))
}

/// The previous manifest's entries by name: none where there is no manifest. One that exists
/// but cannot be read (merge conflict, truncated, another format) is an error unless
/// `repair` says to set it aside, since the entries of variants not rendered now are taken
/// from it.
fn previous(project: &Project, repair: bool) -> Result<BTreeMap<String, Entry>> {
    let path = project.generated_dir().join(MANIFEST_FILE);
    match manifest::read::<Manifest>(&path) {
        Ok(manifest) => Ok(manifest.variants.into_iter().map(|e| (e.variant.name.clone(), e)).collect()),
        Err(err) if !err.corrupt => Ok(BTreeMap::new()),
        Err(err) if repair => {
            let aside = project::set_aside(&path).with_context(|| format!("cannot move {} aside", path.display()))?;
            eprintln!("{err}\nset aside as {}; the new manifest lists what is rendered now", project.relative(&aside));
            Ok(BTreeMap::new())
        }
        Err(err) => bail!(
            "{err}\nNothing was changed. `tilesmith gen --repair` sets it aside as {MANIFEST_FILE}.corrupt and writes a new \
             one from what the templates produce now (unselected variants keep their entries only where their sources match)"
        ),
    }
}

/// A file gen writes, and its contents.
type Output<'r> = (PathBuf, Cow<'r, str>);

/// The files `gen` owns, with the contents the templates produce now, the manifest last. With
/// `--kernels`, an unselected variant keeps its entry: the one rendered now where its source
/// on disk is what the templates produce, else the previous manifest's where its source
/// exists, so that the manifest describes the sources in generated/ and forgets none.
fn expected_files<'r>(
    project: &Project,
    rendered: &'r [Rendered],
    selection: &Selection,
    previous: &BTreeMap<String, Entry>,
) -> Result<(Vec<Output<'r>>, Vec<String>)> {
    let mut files: Vec<Output<'r>> = Vec::new();
    let mut variants = Vec::new();
    let mut unlisted = Vec::new();
    for r in rendered {
        let name = &r.entry.variant.name;
        let path = project.source_path(&r.entry.source);
        if selection.matches(name) {
            files.push((path, Cow::Borrowed(&r.source)));
            variants.push(r.entry.clone());
        } else if project::holds(&path, r.source.as_bytes()) {
            variants.push(r.entry.clone());
        } else if let Some(entry) = previous.get(name).filter(|_| path.is_file()) {
            variants.push(entry.clone());
        } else {
            unlisted.push(name.clone());
        }
    }
    let manifest = Manifest { format: FORMAT, variants };
    let json = serde_json::to_string_pretty(&manifest)? + "\n";
    files.push((project.generated_dir().join(MANIFEST_FILE), Cow::Owned(json)));
    Ok((files, unlisted))
}

/// Sources in generated/ that no declared variant renders to.
fn orphans(project: &Project, rendered: &[Rendered]) -> Result<Vec<PathBuf>> {
    let dir = project.generated_dir();
    if !dir.exists() {
        return Ok(Vec::new());
    }
    let declared: BTreeSet<PathBuf> = rendered.iter().map(|r| project.source_path(&r.entry.source)).collect();
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

pub fn run(project: &Project, selection: &Selection, check: bool, repair: bool) -> Result<()> {
    let rendered = expand(project)?;
    let selected = rendered.iter().filter(|r| selection.matches(&r.entry.variant.name)).count();
    if selected == 0 {
        bail!("--kernels matches none of the {} declared variants", rendered.len());
    }
    if check {
        return check_fresh(project, &rendered, selection, selected);
    }
    let _lock = project::lock(project, &project.generated_lock(), true, "another gen or a build reading generated/")?;
    let previous = previous(project, repair)?;
    let (files, unlisted) = expected_files(project, &rendered, selection, &previous)?;
    let orphans = orphans(project, &rendered)?;

    // Sources first, the manifest last: until it is written, builds compile what the old one
    // describes, and refuse sources whose SHA-256 it does not list.
    let (manifest, sources) = files.split_last().expect("the manifest is the last file");
    let write =
        |(path, contents): &Output<'_>| write_atomic(path, contents.as_bytes()).with_context(|| format!("cannot write {}", path.display()));
    let mut written = 0;
    for outcome in parallel::map(sources, write) {
        written += usize::from(outcome?);
    }
    if write(manifest)? {
        written += 1;
    } else {
        // Its time says when gen last saw the templates ([`stale`]), even when it is unchanged.
        // Where it cannot be set (a read-only checkout), the next build only runs gen again.
        let _ = std::fs::File::options().write(true).open(&manifest.0).and_then(|f| f.set_modified(std::time::SystemTime::now()));
    }
    for path in &orphans {
        remove_if_there(path)?;
    }
    eprintln!(
        "{selected} variant(s) rendered into {}: {written} file(s) written, {} removed, the rest unchanged",
        project.relative(&project.generated_dir()),
        orphans.len()
    );
    if !unlisted.is_empty() {
        // A few names: a first selective gen of a large project leaves hundreds.
        const NAMED: usize = 8;
        let more = if unlisted.len() > NAMED { format!(" and {} more", unlisted.len() - NAMED) } else { String::new() };
        eprintln!(
            "{} unselected variant(s) have no current source and no manifest entry, so they are not listed until generated: {}{more}",
            unlisted.len(),
            unlisted[..unlisted.len().min(NAMED)].join(", ")
        );
    }
    Ok(())
}

/// Why generated/ may not be what the templates produce now, if it may not: its manifest is
/// missing, or variants.toml or a template was changed after gen last wrote it. A build runs
/// gen first then, so that it never compiles sources older than their templates.
pub fn stale(project: &Project) -> Result<Option<String>> {
    let manifest = project.generated_dir().join(MANIFEST_FILE);
    let Ok(written) = std::fs::metadata(&manifest).and_then(|m| m.modified()) else {
        return Ok(Some(format!("{} is missing", project.relative(&manifest))));
    };
    let mut inputs = vec![project.variants_file()];
    let templates = project.templates_dir();
    if templates.is_dir() {
        inputs.extend(crate::render::template_files(&templates)?.into_iter().map(|(_, path)| path));
    }
    let newer = inputs.iter().find(|path| std::fs::metadata(path).and_then(|m| m.modified()).is_ok_and(|changed| changed > written));
    Ok(newer.map(|path| format!("{} changed after the last gen", project.relative(path))))
}

/// `gen --check`: writes nothing, and fails listing the files that differ.
fn check_fresh(project: &Project, rendered: &[Rendered], selection: &Selection, selected: usize) -> Result<()> {
    let previous = manifest::read::<Manifest>(&project.generated_dir().join(MANIFEST_FILE))
        .map(|m| m.variants.into_iter().map(|e| (e.variant.name.clone(), e)).collect())
        .unwrap_or_default();
    let (files, _) = expected_files(project, rendered, selection, &previous)?;
    let mut stale = Vec::new();
    for (path, contents) in &files {
        match tilesmith_spec::files::read_to_string(path) {
            Ok(existing) if existing == *contents => {}
            Ok(_) => stale.push(format!("  {} (differs from what the templates produce)", project.relative(path))),
            Err(_) => stale.push(format!("  {} (missing)", project.relative(path))),
        }
    }
    for path in &orphans(project, rendered)? {
        stale.push(format!("  {} (no declared variant renders it)", project.relative(path)));
    }
    if !stale.is_empty() {
        bail!("{} generated file(s) are stale; run `tilesmith gen`:\n{}", stale.len(), stale.join("\n"));
    }
    eprintln!("generated/ is up to date: {selected} variant(s) checked");
    Ok(())
}

fn remove_if_there(path: &Path) -> Result<()> {
    match std::fs::remove_file(path) {
        Err(err) if err.kind() != std::io::ErrorKind::NotFound => Err(err).with_context(|| format!("cannot remove {}", path.display())),
        _ => Ok(()),
    }
}
