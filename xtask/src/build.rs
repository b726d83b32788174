//! `cargo xtask build`: generated sources → one fatbin per variant in registry/, with the
//! registry manifest. Incremental by content hash, parallel, atomic.

use crate::project::{temporary_sibling, write_atomic, Project};
use crate::render::Renderer;
use crate::select::Selection;
use crate::toolchain::Nvcc;
use anyhow::{bail, Context, Result};
use indicatif::{ProgressBar, ProgressStyle};
use sha2::{Digest, Sha256};
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::Instant;
use tilesmith_spec::manifest::{FORMAT, MANIFEST_FILE};
use tilesmith_spec::{Built, Entry, Manifest, Registry, Resources};

/// nvcc's flags for one variant, without input and output.
fn flags(entry: &Entry) -> Vec<String> {
    let mut flags: Vec<String> = ["--fatbin", "-O3", "-std=c++17", "-lineinfo", "-Xptxas", "-v"].map(String::from).to_vec();
    for sass in &entry.targets.sass {
        let virtual_arch = sass.replacen("sm_", "compute_", 1);
        flags.push(format!("-gencode=arch={virtual_arch},code={sass}"));
    }
    let ptx = &entry.targets.ptx;
    flags.push(format!("-gencode=arch={ptx},code={ptx}"));
    flags
}

/// What decides whether a fatbin is current: the source, the flags and the compiler.
fn content_hash(source: &[u8], flags: &[String], compiler: &str) -> String {
    let mut hasher = Sha256::new();
    hasher.update(source);
    for flag in flags {
        hasher.update([0]);
        hasher.update(flag.as_bytes());
    }
    hasher.update([0]);
    hasher.update(compiler.as_bytes());
    format!("{:x}", hasher.finalize())
}

/// A compile's ptxas report, or the reason it failed.
type Outcome = Result<Vec<Resources>, String>;

struct Job {
    entry: Entry,
    flags: Vec<String>,
    hash: String,
}

pub fn run(project: &Project, selection: &Selection, jobs: usize) -> Result<()> {
    let started = Instant::now();
    let manifest_path = project.generated_dir().join(MANIFEST_FILE);
    let manifest: Manifest = read_json(&manifest_path)
        .with_context(|| format!("cannot read {}: run `cargo xtask gen` first", project.relative(&manifest_path)))?;
    if manifest.format != FORMAT {
        bail!("{} has format {}, this xtask writes {FORMAT}: run `cargo xtask gen`", project.relative(&manifest_path), manifest.format);
    }
    let registry_dir = project.registry_dir();
    let registry_path = registry_dir.join(MANIFEST_FILE);
    let previous: BTreeMap<String, Built> = read_json::<Registry>(&registry_path)
        .ok()
        .filter(|registry| registry.format == FORMAT)
        .map(|registry| registry.variants.into_iter().map(|b| (b.entry.variant.name.clone(), b)).collect())
        .unwrap_or_default();

    let nvcc = Nvcc::locate()?;
    let mut kept = BTreeMap::new();
    let mut queue = Vec::new();
    let mut missing = Vec::new();
    for entry in &manifest.variants {
        let name = &entry.variant.name;
        let source = match std::fs::read(project.root.join(&entry.source)) {
            Ok(source) => source,
            Err(_) => {
                if selection.matches(name) {
                    missing.push(format!("{name}: {} is missing: run `cargo xtask gen`", entry.source));
                }
                continue;
            }
        };
        let flags = flags(entry);
        let hash = content_hash(&source, &flags, &nvcc.version);
        let current = previous.get(name).filter(|built| {
            built.hash == hash && built.entry == *entry && registry_dir.join(&built.fatbin).is_file()
        });
        match current {
            Some(built) => {
                kept.insert(name.clone(), built.clone());
            }
            None if selection.matches(name) => queue.push(Job { entry: entry.clone(), flags, hash }),
            None => {}
        }
    }
    let selected = manifest.variants.iter().filter(|e| selection.matches(&e.variant.name)).count();
    if selected == 0 {
        bail!("--kernels matches none of the {} variants in generated/manifest.json", manifest.variants.len());
    }
    println!(
        "nvcc: {} ({}, {})\n{selected} variant(s) selected: {} up to date, {} to compile with {jobs} job(s)",
        nvcc.path.display(),
        nvcc.origin,
        nvcc.version,
        selected - queue.len() - missing.len(),
        queue.len()
    );

    std::fs::create_dir_all(&registry_dir).with_context(|| format!("cannot create {}", registry_dir.display()))?;
    let renderer = Renderer::load(project).ok();
    let outcomes = compile_all(project, &nvcc, &queue, jobs, renderer.as_ref());

    let mut failures = missing;
    for (job, outcome) in queue.iter().zip(outcomes) {
        match outcome {
            Ok(resources) => {
                let built = Built {
                    entry: job.entry.clone(),
                    fatbin: fatbin_name(&job.entry.variant.name),
                    hash: job.hash.clone(),
                    resources,
                };
                kept.insert(job.entry.variant.name.clone(), built);
            }
            Err(message) => failures.push(format!("{}:\n{}", job.entry.variant.name, indent(&message))),
        }
    }

    // Manifest order follows generated/manifest.json.
    let variants: Vec<Built> = manifest.variants.iter().filter_map(|e| kept.remove(&e.variant.name)).collect();
    let registry = Registry { format: FORMAT, compiler: nvcc.version.clone(), variants };
    write_atomic(&registry_path, (serde_json::to_string_pretty(&registry)? + "\n").as_bytes())
        .with_context(|| format!("cannot write {}", registry_path.display()))?;
    remove_unlisted_fatbins(&registry_dir, &registry)?;

    for built in registry.variants.iter().filter(|b| b.spills() && selection.matches(&b.entry.variant.name)) {
        for r in built.resources.iter().filter(|r| r.spills()) {
            eprintln!(
                "warning: {} spills on {}: {} bytes stored, {} bytes loaded",
                built.entry.variant.name, r.arch, r.spill_store_bytes, r.spill_load_bytes
            );
        }
    }
    println!(
        "registry {}: {} variant(s) built, {} compiled now, {} failed, in {:.2} s",
        project.relative(&registry_dir),
        registry.variants.len(),
        queue.len() - failures.len().min(queue.len()),
        failures.len(),
        started.elapsed().as_secs_f64()
    );
    if !failures.is_empty() {
        bail!("{} variant(s) failed to build:\n{}", failures.len(), failures.join("\n"));
    }
    Ok(())
}

fn fatbin_name(variant: &str) -> String {
    format!("{variant}.fatbin")
}

/// Compiles every job on `jobs` threads; one result per job, in order.
fn compile_all(project: &Project, nvcc: &Nvcc, queue: &[Job], jobs: usize, renderer: Option<&Renderer>) -> Vec<Outcome> {
    let results: Vec<Mutex<Option<Outcome>>> = queue.iter().map(|_| Mutex::new(None)).collect();
    if queue.is_empty() {
        return Vec::new();
    }
    let bar = ProgressBar::new(queue.len() as u64);
    bar.set_style(
        ProgressStyle::with_template("{spinner} [{elapsed_precise}] {bar:30} {pos}/{len} compiling {msg}")
            .expect("valid progress template"),
    );
    let next = AtomicUsize::new(0);
    let running = Mutex::new(BTreeSet::new());
    std::thread::scope(|scope| {
        for _ in 0..jobs.min(queue.len()) {
            scope.spawn(|| loop {
                let index = next.fetch_add(1, Ordering::Relaxed);
                let Some(job) = queue.get(index) else { break };
                let name = job.entry.variant.name.clone();
                show_running(&bar, &running, |set| set.insert(name.clone()));
                let outcome = compile_one(project, nvcc, job, renderer);
                *results[index].lock().expect("result slot") = Some(outcome);
                show_running(&bar, &running, |set| set.remove(&name));
                bar.inc(1);
            });
        }
    });
    bar.finish_and_clear();
    results.into_iter().map(|slot| slot.into_inner().expect("result slot").expect("every job ran")).collect()
}

fn show_running(bar: &ProgressBar, running: &Mutex<BTreeSet<String>>, change: impl FnOnce(&mut BTreeSet<String>) -> bool) {
    let mut set = running.lock().expect("running set");
    change(&mut set);
    bar.set_message(set.iter().cloned().collect::<Vec<_>>().join(", "));
}

fn compile_one(project: &Project, nvcc: &Nvcc, job: &Job, renderer: Option<&Renderer>) -> Outcome {
    let registry_dir = project.registry_dir();
    let target = registry_dir.join(fatbin_name(&job.entry.variant.name));
    let staging = temporary_sibling(&target);
    let output = Command::new(&nvcc.path)
        .current_dir(&project.root)
        .args(&job.flags)
        .arg("-o")
        .arg(&staging)
        .arg(&job.entry.source)
        .output();
    let output = match output {
        Ok(output) => output,
        Err(err) => return Err(format!("cannot run {}: {err}", nvcc.path.display())),
    };
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    if !output.status.success() || !staging.is_file() {
        let _ = std::fs::remove_file(&staging);
        let message = annotate_errors(project, &stderr, &job.entry, renderer);
        return Err(format!("nvcc failed ({}):\n{}", output.status, message.trim_end()));
    }
    if let Err(err) = std::fs::rename(&staging, &target) {
        let _ = std::fs::remove_file(&staging);
        return Err(format!("cannot move the fatbin into {}: {err}", target.display()));
    }
    Ok(parse_ptxas_report(&stderr))
}

/// ptxas's `-v` report: per architecture, registers, shared memory, stack and spills.
pub fn parse_ptxas_report(stderr: &str) -> Vec<Resources> {
    let mut reports: Vec<Resources> = Vec::new();
    for line in stderr.lines() {
        if let Some(rest) = line.split("Compiling entry function").nth(1) {
            let arch = rest.rsplit("for '").next().unwrap_or("").trim_end_matches('\'').trim().to_string();
            reports.push(Resources { arch, ..Resources::default() });
            continue;
        }
        let Some(current) = reports.last_mut() else { continue };
        for part in line.split([',', ':']) {
            let words: Vec<&str> = part.split_whitespace().collect();
            let number = |index: usize| words.get(index).and_then(|w| w.parse::<u32>().ok());
            match words.as_slice() {
                ["Used", _, "registers"] => current.registers = number(1).unwrap_or(0),
                [_, "bytes", "smem"] => current.static_smem_bytes = number(0).unwrap_or(0),
                [_, "bytes", "stack", "frame"] => current.stack_bytes = number(0).unwrap_or(0),
                [_, "bytes", "spill", "stores"] => current.spill_store_bytes = number(0).unwrap_or(0),
                [_, "bytes", "spill", "loads"] => current.spill_load_bytes = number(0).unwrap_or(0),
                _ => {}
            }
        }
    }
    reports
}

/// Appends to each `file(line): error` of nvcc's output the template line it came from, where
/// the generated line appears exactly once in the variant's template or its partials.
fn annotate_errors(project: &Project, stderr: &str, entry: &Entry, renderer: Option<&Renderer>) -> String {
    let source = std::fs::read_to_string(project.root.join(&entry.source)).unwrap_or_default();
    let generated: Vec<&str> = source.lines().collect();
    let mut out = String::new();
    for line in stderr.lines().filter(|line| !line.starts_with("ptxas info") && !line.starts_with("    ")) {
        out.push_str(line);
        let origin = line
            .split_once(".cu(")
            .and_then(|(_, rest)| rest.split_once(')'))
            .and_then(|(number, _)| number.parse::<usize>().ok())
            .and_then(|number| generated.get(number.wrapping_sub(1)))
            .and_then(|text| renderer.and_then(|r| template_line(r, &entry.template, text.trim())));
        if let Some(origin) = origin {
            out.push_str(&format!("\n    from kernel-templates/{origin}"));
        }
        out.push('\n');
    }
    out
}

fn template_line(renderer: &Renderer, template: &str, text: &str) -> Option<String> {
    if text.len() < 8 {
        return None;
    }
    let mut found = renderer
        .texts
        .iter()
        .filter(|(name, _)| *name == template || name.starts_with("partials/"))
        .flat_map(|(name, body)| {
            body.lines().enumerate().filter(|(_, line)| line.trim() == text).map(move |(i, _)| format!("{name}:{}", i + 1))
        });
    let first = found.next()?;
    found.next().is_none().then_some(first)
}

fn remove_unlisted_fatbins(dir: &Path, registry: &Registry) -> Result<()> {
    let listed: BTreeSet<&str> = registry.variants.iter().map(|b| b.fatbin.as_str()).collect();
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        if name.ends_with(".fatbin") && !listed.contains(name.as_str()) {
            std::fs::remove_file(&path).with_context(|| format!("cannot remove {}", path.display()))?;
        }
    }
    Ok(())
}

fn read_json<T: serde::de::DeserializeOwned>(path: &Path) -> Result<T> {
    let text = std::fs::read_to_string(path)?;
    Ok(serde_json::from_str(&text)?)
}

fn indent(text: &str) -> String {
    text.lines().map(|line| format!("  {line}")).collect::<Vec<_>>().join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_ptxas_report_per_arch() {
        let stderr = "\
ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function 'k' for 'sm_80'
ptxas info    : Function properties for k
    16 bytes stack frame, 8 bytes spill stores, 4 bytes spill loads
ptxas info    : Used 128 registers, used 1 barriers, 1024 bytes smem, 400 bytes cmem[0]
ptxas info    : Compiling entry function 'k' for 'sm_90'
ptxas info    : Function properties for k
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 96 registers, used 1 barriers
";
        let reports = parse_ptxas_report(stderr);
        assert_eq!(reports.len(), 2);
        assert_eq!(
            reports[0],
            Resources { arch: "sm_80".into(), registers: 128, static_smem_bytes: 1024, stack_bytes: 16, spill_store_bytes: 8, spill_load_bytes: 4 }
        );
        assert!(reports[0].spills());
        assert_eq!(reports[1].registers, 96);
        assert!(!reports[1].spills());
    }

    #[test]
    fn hash_follows_source_flags_and_compiler() {
        let flags = vec!["-O3".to_string()];
        let base = content_hash(b"src", &flags, "13.0");
        assert_eq!(base, content_hash(b"src", &flags, "13.0"));
        assert_ne!(base, content_hash(b"src2", &flags, "13.0"));
        assert_ne!(base, content_hash(b"src", &["-O2".to_string()], "13.0"));
        assert_ne!(base, content_hash(b"src", &flags, "13.1"));
    }
}
