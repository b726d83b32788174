//! `tilesmith build`: generated sources → one fatbin per variant in registry/, with the
//! registry manifest. Incremental by content hash, parallel; each fatbin is checked and
//! recorded as it is made (see [`crate::registry`]).

use crate::project::{self, sha256_hex, temporary_sibling, write_atomic, Project};
use crate::registry::RegistryDir;
use crate::render::Renderer;
use crate::select::Selection;
use crate::stamp;
use crate::timings::Timing;
use crate::toolchain::Nvcc;
use anyhow::{anyhow, bail, Context, Result};
use indicatif::{ProgressBar, ProgressStyle};
use sha2::{Digest, Sha256};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};
use tilesmith_spec::family_table::FamilyTable;
use tilesmith_spec::files::{self, MAX_BINARY_BYTES, MAX_TEXT_BYTES};
use tilesmith_spec::manifest::{self, fatbin_file, MANIFEST_FILE};
use tilesmith_spec::tuning::{self, TUNING_DIR};
use tilesmith_spec::{arch, Built, Config, Entry, Manifest, Registry, Resources};

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

/// Why a variant was not built. `own` failures come from the variant itself (nvcc's error in
/// its source, a fatbin that fails its checks): they remove its older build, which would pass
/// for it. Others (a compiler that cannot start or was killed, a full disk) keep it.
#[derive(Debug)]
struct Failure {
    own: bool,
    message: String,
}

/// What one compile made: ptxas's report, or why it failed.
type Outcome = Result<Vec<Resources>, Failure>;

pub struct Job {
    pub entry: Entry,
    pub flags: Vec<String>,
    /// [`content_hash`] of its source, flags and compiler.
    pub hash: String,
    /// The source bytes read under generated/'s lock: what is hashed is what is compiled.
    source: Vec<u8>,
}

/// The environment variable naming a fatbin cache folder, as `--cache` does.
pub const CACHE_VAR: &str = "TILESMITH_CACHE";

/// A folder of fatbins by content hash (source, flags, compiler), shared by builds and
/// projects: `<hash>.fatbin` and `<hash>.json` (its SHA-256 and ptxas's report). A build takes
/// a fatbin from it instead of compiling when both are there and the fatbin still matches, and
/// puts every fatbin it compiles there. sccache re-runs nvcc's preprocessing on every hit;
/// this costs a copy.
struct Cache {
    dir: PathBuf,
}

#[derive(serde::Serialize, serde::Deserialize)]
struct Cached {
    fatbin_sha256: String,
    resources: Vec<Resources>,
}

impl Cache {
    /// Writes the cached fatbin of `hash` to `to` and returns its report, if the cache holds a
    /// sound one.
    fn fetch(&self, hash: &str, to: &Path) -> Option<Vec<Resources>> {
        let cached: Cached = serde_json::from_slice(&files::read(&self.dir.join(format!("{hash}.json")), MAX_TEXT_BYTES).ok()?).ok()?;
        let bytes = files::read(&self.dir.join(format!("{hash}.fatbin")), MAX_BINARY_BYTES).ok()?;
        (sha256_hex(&bytes) == cached.fatbin_sha256 && std::fs::write(to, &bytes).is_ok()).then_some(cached.resources)
    }

    /// Puts a compiled fatbin in: the fatbin first, its record last, each atomically.
    fn store(&self, hash: &str, fatbin: &Path, resources: &[Resources]) -> Result<(), String> {
        let bytes = files::read(fatbin, MAX_BINARY_BYTES).map_err(|err| err.to_string())?;
        let record = Cached { fatbin_sha256: sha256_hex(&bytes), resources: resources.to_vec() };
        let json = serde_json::to_vec(&record).map_err(|err| err.to_string())?;
        write_atomic(&self.dir.join(format!("{hash}.fatbin")), &bytes)
            .and_then(|_| write_atomic(&self.dir.join(format!("{hash}.json")), &json))
            .map(drop)
            .map_err(|err| format!("cannot write into the cache {}: {err}", self.dir.display()))
    }
}

/// The environment variable naming the architectures to build for, as `--arch` does.
pub const ARCH_VAR: &str = "TILESMITH_ARCH";

/// An architecture list as `--arch` takes it: comma-separated.
pub fn split_arch(list: &str) -> Vec<String> {
    list.split(',').map(str::trim).filter(|a| !a.is_empty()).map(String::from).collect()
}

/// `entry` for the GPUs of `list` ([`arch::narrowed`]); none where its backend targets none.
fn narrowed(entry: &Entry, list: &[String]) -> Option<Entry> {
    Some(Entry { targets: arch::narrowed(&entry.targets, list)?, ..entry.clone() })
}

/// Where `build --timings` writes every variant's timing, under the project.
pub const TIMINGS_FILE: &str = "target/tilesmith-timings/build.json";

/// The environment variable naming a program to run nvcc through, as `--launcher` does.
pub const LAUNCHER_VAR: &str = "TILESMITH_NVCC_LAUNCHER";

/// How `build` runs.
pub struct Options {
    pub jobs: usize,
    /// A program to run nvcc through (`sccache`), with its own arguments.
    pub launcher: Vec<String>,
    /// Set an unreadable registry manifest aside and rebuild it from the per-variant records.
    pub repair: bool,
    /// A folder of fatbins by content hash ([`Cache`]), looked in before compiling.
    pub cache: Option<PathBuf>,
    /// The checks of the plug-ins linked (the CLI passes its plug-in's), run on every table
    /// before anything is built; none (a crate's build.rs) checks what every table states, and
    /// a plug-in checks the rest of its own (its classes and strategies) when it reads them.
    pub table_checks: Vec<TableCheck>,
    /// With a selection, also the reference variants that check the selected ones: the CLI's
    /// build, whose partial registry `test` and `bench` then check; a crate's build.rs embeds
    /// only what it names.
    pub references: bool,
    /// Time each compile's phases (nvcc's `--time`) and report them per variant and family
    /// ([`crate::timings`]).
    pub timings: bool,
    /// Build for these GPU architectures only (`sm_90`; one names its `a` variant too): each
    /// variant's SASS targets narrowed to them, its PTX raised to the lowest kept where it was
    /// older (one front end fewer); a variant with none of them is not built. None: the
    /// project's `[build] arch`, else every target.
    pub arch: Option<Vec<String>>,
}

/// A plug-in's check of the tables it reads (of their classes and strategies), passed every
/// table and naming the rule in its error; it passes the tables of other families.
pub type TableCheck = fn(&FamilyTable) -> Result<(), String>;

impl Options {
    /// A job per core, the launcher and the cache from the environment, no repair.
    pub fn from_env() -> Options {
        Options {
            jobs: cores(),
            launcher: split_launcher(&std::env::var(LAUNCHER_VAR).unwrap_or_default()),
            repair: false,
            cache: std::env::var_os(CACHE_VAR).filter(|v| !v.is_empty()).map(PathBuf::from),
            table_checks: Vec::new(),
            references: false,
            timings: false,
            arch: std::env::var(ARCH_VAR).ok().filter(|v| !v.trim().is_empty()).map(|v| split_arch(&v)),
        }
    }
}

pub fn cores() -> usize {
    std::thread::available_parallelism().map_or(1, usize::from)
}

/// A launcher command line: the program and its arguments, split on spaces.
pub fn split_launcher(command: &str) -> Vec<String> {
    command.split_whitespace().map(String::from).collect()
}

/// A program as a command line names it: a path, or a name looked up in PATH; found only when
/// it is an executable file.
fn find_program(program: &str) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let executable = |path: &Path| path.metadata().is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0);
    if program.contains('/') {
        let path = PathBuf::from(program);
        return executable(&path).then_some(path);
    }
    std::env::var_os("PATH").iter().flat_map(std::env::split_paths).map(|dir| dir.join(program)).find(|path| executable(path))
}

pub fn run(project: &Project, selection: &Selection, options: &Options) -> Result<()> {
    // The registry's manifest (JSON) records where it was built, and a crate's build.rs embeds
    // its files by path: both need the path as text.
    if project.root.to_str().is_none() || project.out.as_ref().is_some_and(|out| out.to_str().is_none()) {
        bail!(
            "the project folder {} is not valid UTF-8: tilesmith records it as text in the registry; move or rename the \
             project to a UTF-8 path",
            project.root.display()
        );
    }
    if let Some(why) = crate::gen::stale(project)? {
        // Every variant, as `tilesmith gen` would: a selection's references, and the variants
        // not selected, keep their entries.
        eprintln!("{why}: running gen first");
        crate::gen::run(project, &Selection::new(&[])?, false, false)?;
    }
    let started = Instant::now();
    check_options(options)?;
    let through = if options.launcher.is_empty() { String::new() } else { format!(", through `{}`", options.launcher.join(" ")) };
    // A build asked as the last clean one was, whose files are all as it left them, has
    // nothing to do: it says so from the stamp, parsing nothing else.
    let mut located = None;
    if let Some(stamp) = (!options.repair && !options.timings).then(|| stamp::read(project)).flatten() {
        let nvcc = Nvcc::locate()?;
        let key = stamp_key(&nvcc, selection, options);
        if let Some(said) = stamp.unchanged(project, &key) {
            say_plan(&nvcc, &through, said.selected, said.up_to_date, 0, options.jobs);
            said.notes.iter().for_each(|note| eprintln!("{note}"));
            eprintln!(
                "registry {}: {} variant(s) built, 0 compiled now, 0 failed, in {:.2} s (nothing changed since the last build)",
                project.relative(&project.registry_dir()),
                said.built,
                started.elapsed().as_secs_f64()
            );
            return Ok(());
        }
        located = Some(nvcc);
    }
    // Everything that could stop the build is checked before the registry is touched.
    // The variants variants.toml declares, if it reads: a build removes the fatbins of variants
    // that neither it nor generated/manifest.json lists, so a manifest that lost entries costs
    // no builds.
    let config = Config::load(&project.variants_file()).ok();
    let tables = project_tables(project, config.as_ref(), &options.table_checks)?;
    let arch = match &options.arch {
        Some(list) => Some((list.clone(), "--arch")),
        None => config.as_ref().and_then(|c| c.build.arch.clone()).map(|list| (list, "[build] arch in variants.toml")),
    };
    let declared: Option<BTreeSet<String>> = config.map(|c| c.variants.into_iter().map(|d| d.variant.name).collect());
    let nvcc = match located {
        Some(nvcc) => nvcc,
        None => Nvcc::locate()?,
    };
    let Some(cuobjdump) = nvcc.cuobjdump.clone() else {
        bail!("no cuobjdump beside {}: it is needed to check each fatbin nvcc writes", nvcc.path.display());
    };
    let registry = RegistryDir::lock(project)?;
    stamp::remove(project).with_context(|| format!("cannot remove the build's stamp in {}", registry.dir().display()))?;
    registry.check_index(options.repair)?;
    let generated = read_generated(project, selection, &registry, options.references)?;
    let (manifest, selection) = (&generated.manifest, &generated.selection);
    let mut records = generated.records;
    let mut queue = Vec::new();
    let mut failures: Vec<(String, Failure)> =
        generated.stale.into_iter().map(|(name, message)| (name, Failure { own: false, message })).collect();
    let mut elsewhere = Vec::new();
    for (entry, source) in generated.sources {
        let entry = match &arch {
            Some((list, _)) => match narrowed(&entry, list) {
                Some(entry) => entry,
                None => {
                    elsewhere.push(entry.variant.name.clone());
                    continue;
                }
            },
            None => entry,
        };
        let flags = flags(&entry);
        let hash = content_hash(&source, &flags, &nvcc.version);
        if !records.get(&entry.variant.name).is_some_and(|built| built.hash == hash && built.entry == entry) {
            queue.push(Job { entry, flags, hash, source });
        }
    }
    let selected = manifest.variants.iter().filter(|e| selection.matches(&e.variant.name)).count();
    let pending: BTreeSet<&str> = queue
        .iter()
        .map(|j| j.entry.variant.name.as_str())
        .chain(failures.iter().map(|(name, _)| name.as_str()))
        .chain(elsewhere.iter().map(String::as_str))
        .collect();
    let up_to_date =
        manifest.variants.iter().filter(|e| selection.matches(&e.variant.name) && !pending.contains(e.variant.name.as_str())).count();
    say_plan(&nvcc, &through, selected, up_to_date, queue.len(), options.jobs);
    // What a build with nothing to do would print again: the stamp keeps it.
    let mut notes = Notes::default();
    if !generated.references.is_empty() {
        notes.say(format!("with the reference variant(s) that check them: {}", generated.references.join(", ")));
    }
    if let Some((list, from)) = &arch {
        notes.say(format!("for {} only ({from}): each variant's code for those of its architectures", list.join(", ")));
        if !elsewhere.is_empty() {
            let shown = elsewhere.iter().take(4).cloned().collect::<Vec<_>>().join(", ");
            let more = if elsewhere.len() > 4 { format!(" and {} more", elsewhere.len() - 4) } else { String::new() };
            notes.say(format!("not built, their backends targeting none of them: {shown}{more}"));
        }
    }

    if let Some(dir) = &options.cache {
        std::fs::create_dir_all(dir).with_context(|| format!("--cache {}: cannot create the cache folder", dir.display()))?;
    }
    let cache = options.cache.clone().map(|dir| Cache { dir });
    let workdir = Workdir::for_registry(&registry)?;
    let compiler = Compiler {
        project,
        workdir: workdir.path(),
        nvcc: &nvcc,
        cuobjdump: &cuobjdump,
        launcher: &options.launcher,
        cache: cache.as_ref(),
        cached: AtomicUsize::new(0),
        renderer: OnceLock::new(),
        // nvcc's `--time` would reach the launcher, which caches by its flags.
        timings: (options.timings && options.launcher.is_empty()).then(Mutex::default),
    };
    if options.timings && !options.launcher.is_empty() {
        eprintln!("--timings: compiles through a launcher are not timed (nvcc's --time would change what it caches by)");
    }
    let done = Mutex::new(&mut records);
    let cpu_before = crate::timings::children_cpu_s();
    let outcomes = compile_all(&compiler, &registry, &queue, options.jobs, |job, resources| {
        // Recorded as soon as it is made, so that an interrupted build keeps it.
        let built = registry.record(&job.entry, &job.hash, resources, &nvcc.version)?;
        let mut records = done.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        records.insert(job.entry.variant.name.clone(), built);
        registry.write_index(manifest, &records).map(drop)
    });

    // The failures come first in the report; what went wrong after them is listed below them.
    let mut also = Vec::new();
    if let Err(err) = registry.clear_private_sources() {
        also.push(format!("{err:#}"));
    }
    for (job, outcome) in queue.iter().zip(outcomes) {
        let name = &job.entry.variant.name;
        if let Err(failure) = outcome {
            if failure.own {
                // What was asked for and failed keeps no older build that would pass for it.
                if let Err(err) = registry.forget(name) {
                    also.push(format!("{err:#}"));
                }
                records.remove(name);
            }
            failures.push((name.clone(), failure));
        }
    }
    let compiled = queue.len() - failures.iter().filter(|(name, _)| queue.iter().any(|j| &j.entry.variant.name == name)).count();
    let index = match registry.write_index(manifest, &records) {
        Ok(index) => Some(index),
        Err(err) => {
            also.push(err);
            None
        }
    };
    if let Err(err) = registry.remove_undeclared(manifest, &declared) {
        also.push(format!("{err:#}"));
    }
    // A partial build (`--kernels`) may hold no variant of some family: its tables stay out,
    // as a registry refuses a table of a family it has no variant of.
    let held: BTreeSet<&str> = records.values().map(|built| built.entry.variant.family.as_str()).collect();
    let (carried, left): (Vec<_>, Vec<_>) = tables.into_iter().partition(|(_, table)| held.contains(table.family.as_str()));
    if !left.is_empty() {
        let names: Vec<&str> = left.iter().map(|(name, _)| name.as_str()).collect();
        notes.say(format!("not carried into the registry, which holds no variant of their family: tuning/{}", names.join(", tuning/")));
    }
    if let Err(err) = carry_tables(project, &carried, |variant| records.contains_key(variant), &mut notes) {
        also.push(format!("{err:#}"));
    }
    for (name, table) in &carried {
        if let Some(words) = table.stale_words(|variant| records.get(variant).map(|built| built.entry.source_sha256.as_str())) {
            notes.say(format!("tuning/{name}: {words}"));
        }
    }

    if let Some(index) = &index {
        report(index, manifest, selection, &mut notes);
    }
    if let Some(timings) = compiler.timings.as_ref().map(|t| t.lock().unwrap_or_else(|p| p.into_inner())) {
        let cpu_s = crate::timings::children_cpu_s() - cpu_before;
        match crate::timings::report(&timings, cpu_s, &project.root.join(TIMINGS_FILE)) {
            Ok(text) => eprint!("{text}"),
            Err(err) => also.push(err),
        }
    }
    let cached = match compiler.cached.load(Ordering::Relaxed) {
        0 => String::new(),
        n => format!(" ({n} taken from the cache)"),
    };
    eprintln!(
        "registry {}: {} variant(s) built, {compiled} compiled now{cached}, {} failed, in {:.2} s",
        project.relative(registry.dir()),
        index.as_ref().map_or(records.len(), |i| i.variants.len()),
        failures.len(),
        started.elapsed().as_secs_f64()
    );
    let mut problems = Vec::new();
    if failures.is_empty() && also.is_empty() {
        if let Some(index) = &index {
            // Built again at once, every variant just compiled is up to date.
            let said =
                stamp::Said { selected, up_to_date: selected.saturating_sub(elsewhere.len()), built: index.variants.len(), notes: notes.0 };
            let sources: Vec<String> = manifest.variants.iter().map(|e| e.source.clone()).collect();
            // Without it the next build takes the full road: nothing is lost.
            if let Err(err) = stamp::write(project, stamp_key(&nvcc, selection, options), &sources, said) {
                eprintln!("warning: cannot write the build's stamp in {}: {err}", registry.dir().display());
            }
        }
    }
    if !failures.is_empty() {
        let kept = failures.iter().filter(|(_, f)| !f.own).count();
        problems.push(format!("{} variant(s) failed to build:\n{}", failures.len(), distinct_failures(&failures).join("\n")));
        if kept > 0 {
            problems.push(format!("{kept} of them failed for a reason outside their source; their earlier builds, if any, are kept"));
        }
    }
    if !also.is_empty() {
        problems.push(format!("also:\n{}", indent(&also.join("\n"))));
    }
    if !problems.is_empty() {
        bail!("{}", problems.join("\n"));
    }
    Ok(())
}

/// One paragraph per distinct failure, naming the variants that share it: a template's error
/// fails every variant rendered from it with the same message but for the variant's name.
fn distinct_failures(failures: &[(String, Failure)]) -> Vec<String> {
    let mut distinct: Vec<(&str, &Failure, Vec<&str>)> = Vec::new();
    let mut index: std::collections::HashMap<String, usize> = std::collections::HashMap::new();
    for (name, failure) in failures {
        let key = failure.message.replace(name.as_str(), "\u{0}");
        match index.get(&key) {
            Some(&at) => distinct[at].2.push(name),
            None => {
                index.insert(key, distinct.len());
                distinct.push((name, failure, Vec::new()));
            }
        }
    }
    const NAMED: usize = 4;
    distinct
        .into_iter()
        .map(|(first, failure, sharing)| {
            let also = match sharing.len() {
                0 => String::new(),
                n => format!(
                    " (and {n} more with the same error: {}{})",
                    sharing[..n.min(NAMED)].join(", "),
                    if n > NAMED { ", ..." } else { "" }
                ),
            };
            format!("{first}{also}:\n{}", indent(&failure.message))
        })
        .collect()
}

/// Refuses what was asked wrongly, before anything else: even a build with nothing to do.
fn check_options(options: &Options) -> Result<()> {
    if let Some(list) = &options.arch {
        arch::check_list(list).map_err(|problem| anyhow!("--arch {problem}"))?;
    }
    if let Some(program) = options.launcher.first() {
        if find_program(program).is_none() {
            bail!(
                "the compiler launcher `{program}` (--launcher or {LAUNCHER_VAR}) is not an executable file here or in PATH; \
                 nothing was compiled and the registry is unchanged"
            );
        }
    }
    if let Some(dir) = options.cache.as_ref().filter(|dir| dir.exists() && !dir.is_dir()) {
        bail!("--cache {}: is a file; the cache is a folder (created if missing)", dir.display());
    }
    Ok(())
}

/// The first lines of a build's report: the compiler, and what there is to do.
fn say_plan(nvcc: &Nvcc, through: &str, selected: usize, up_to_date: usize, to_compile: usize, jobs: usize) {
    eprintln!(
        "nvcc: {} ({}, {}){through}\n{selected} variant(s) selected: {up_to_date} up to date, {to_compile} to compile with {jobs} job(s)",
        nvcc.path.display(),
        nvcc.origin,
        nvcc.version,
    );
}

/// What a build asks: the stamp of one asked otherwise is not taken.
fn stamp_key(nvcc: &Nvcc, selection: &Selection, options: &Options) -> stamp::Key {
    let nvcc = format!("{} {}", nvcc.path.display(), nvcc.version);
    stamp::Key::new(nvcc, options.arch.clone(), selection.patterns().to_vec(), options.references)
}

/// Lines a build prints that one with nothing to do prints again.
#[derive(Default)]
struct Notes(Vec<String>);

impl Notes {
    fn say(&mut self, line: String) {
        eprintln!("{line}");
        self.0.push(line);
    }
}

/// Warnings for spills of selected variants, and a note on unselected ones built from older
/// sources.
fn report(index: &Registry, manifest: &Manifest, selection: &Selection, notes: &mut Notes) {
    for built in index.variants.iter().filter(|b| b.spills() && selection.matches(&b.entry.variant.name)) {
        for r in built.resources.iter().filter(|r| r.spills()) {
            notes.say(format!(
                "warning: {} spills on {}: {} bytes stored, {} bytes loaded",
                built.entry.variant.name, r.arch, r.spill_store_bytes, r.spill_load_bytes
            ));
        }
    }
    let current: BTreeMap<&str, &Entry> = manifest.variants.iter().map(|e| (e.variant.name.as_str(), e)).collect();
    let older: Vec<&str> = index
        .variants
        .iter()
        .filter(|b| !selection.matches(&b.entry.variant.name))
        // A build for some architectures (`--arch`) records the entry narrowed to them.
        .filter(|b| {
            current
                .get(b.entry.variant.name.as_str())
                .is_some_and(|e| **e != b.entry && narrowed(e, &b.entry.targets.sass).as_ref() != Some(&b.entry))
        })
        .map(|b| b.entry.variant.name.as_str())
        .collect();
    if !older.is_empty() {
        notes.say(format!(
            "kept {} unselected variant(s) built from older sources; build them to refresh: {}",
            older.len(),
            older.join(", ")
        ));
    }
}

/// What a build takes from generated/, read under its lock so that no gen changes it halfway:
/// the manifest, and the bytes of each selected source that match its SHA-256 there.
struct Generated {
    manifest: Manifest,
    /// The selection the build works on: the one asked for, with the references it added.
    selection: Selection,
    references: Vec<String>,
    /// The registry's records of declared variants whose fatbins are unchanged.
    records: BTreeMap<String, Built>,
    sources: Vec<(Entry, Vec<u8>)>,
    /// Selected variants whose source is missing or is not what the manifest says.
    stale: Vec<(String, String)>,
}

fn read_generated(project: &Project, selection: &Selection, registry: &RegistryDir, references: bool) -> Result<Generated> {
    let _lock = project::lock(project, &project.generated_lock(), false, "a gen writing generated/")?;
    let manifest_path = project.generated_dir().join(MANIFEST_FILE);
    let manifest: Manifest = manifest::read(&manifest_path).map_err(|err| anyhow!("{err}: run `tilesmith gen`"))?;
    if !manifest.variants.iter().any(|e| selection.matches(&e.variant.name)) {
        bail!("--kernels matches none of the {} variants in generated/manifest.json", manifest.variants.len());
    }
    let mut building = selection.clone();
    let references = if references { building.add_references(&manifest.variants) } else { Vec::new() };
    let selection = &building;
    // Unselected variants whose records are broken are compiled again, as the build says.
    let (records, broken) = registry.records(&manifest, selection);
    let selected: Vec<&Entry> =
        manifest.variants.iter().filter(|e| selection.matches(&e.variant.name) || broken.contains(&e.variant.name)).collect();
    let mut sources = Vec::new();
    let mut stale = Vec::new();
    for entry in selected {
        let name = entry.variant.name.clone();
        match files::read(&project.source_path(&entry.source), MAX_TEXT_BYTES) {
            Err(_) => stale.push((name, format!("{} is missing: run `tilesmith gen`", entry.source))),
            Ok(_) if entry.source_sha256.is_empty() => {
                stale.push((name, "generated/manifest.json predates source hashes: run `tilesmith gen`".to_string()))
            }
            Ok(bytes) if sha256_hex(&bytes) != entry.source_sha256 => stale.push((
                name,
                format!(
                    "{} is not the source generated/manifest.json lists (edited, or a gen did not finish): run `tilesmith gen`",
                    entry.source
                ),
            )),
            Ok(bytes) => sources.push((entry.clone(), bytes)),
        }
    }
    Ok(Generated { manifest, selection: building, references, records, sources, stale })
}

/// Where nvcc runs: the registry's private folder, or, where that folder's path holds
/// characters a shell reads (nvcc passes paths to its stages through one), a temporary folder
/// of a plain path, removed when the build ends.
enum Workdir {
    Private(PathBuf),
    Temporary(tempfile::TempDir),
}

impl Workdir {
    fn for_registry(registry: &RegistryDir) -> Result<Workdir> {
        let plain = |path: &Path| path.to_str().is_some_and(|p| p.chars().all(|c| c.is_ascii_alphanumeric() || "/._-+".contains(c)));
        let private = registry.private_sources();
        if plain(&private) {
            return Ok(Workdir::Private(private));
        }
        let temp = std::env::temp_dir();
        let root = if plain(&temp) { temp } else { PathBuf::from("/tmp") };
        let dir = tempfile::Builder::new()
            .prefix("tilesmith-nvcc-")
            .tempdir_in(&root)
            .with_context(|| format!("cannot create a folder for nvcc to run in under {}", root.display()))?;
        Ok(Workdir::Temporary(dir))
    }

    fn path(&self) -> &Path {
        match self {
            Workdir::Private(path) => path,
            Workdir::Temporary(dir) => dir.path(),
        }
    }
}

/// What compiles one job.
struct Compiler<'a> {
    project: &'a Project,
    /// Where nvcc runs ([`Workdir`]), on private copies of the sources.
    workdir: &'a Path,
    nvcc: &'a Nvcc,
    cuobjdump: &'a Path,
    launcher: &'a [String],
    cache: Option<&'a Cache>,
    /// How many fatbins came from the cache.
    cached: AtomicUsize,
    /// Loaded on the first compile error, to point it at its template line.
    renderer: OnceLock<Option<Renderer>>,
    /// Each compile's phases, where `--timings` asks for them.
    timings: Option<Mutex<Vec<Timing>>>,
}

/// Compiles every job on `jobs` threads, handing each fatbin that passed its checks to
/// `finished`; one outcome per job, in order. After a failure to start the compiler, the jobs
/// not yet started are not started.
fn compile_all(
    compiler: &Compiler<'_>,
    registry: &RegistryDir,
    queue: &[Job],
    jobs: usize,
    finished: impl Fn(&Job, Vec<Resources>) -> Result<(), String> + Sync,
) -> Vec<Outcome> {
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
    let stopped = AtomicBool::new(false);
    let running = Mutex::new(BTreeSet::new());
    let (done, failed, over) = (AtomicUsize::new(0), AtomicUsize::new(0), AtomicBool::new(false));
    std::thread::scope(|scope| {
        // Where the bar is hidden (standard error not a terminal: CI logs, build.rs), a line
        // every PIPE_EVERY instead of an hour of silence.
        if bar.is_hidden() {
            scope.spawn(|| pipe_progress(queue.len(), &done, &failed, &over));
        }
        let workers: Vec<_> = (0..jobs.min(queue.len()))
            .map(|_| {
                scope.spawn(|| loop {
                    let index = next.fetch_add(1, Ordering::Relaxed);
                    let Some(job) = queue.get(index) else { break };
                    let outcome = if stopped.load(Ordering::Relaxed) {
                        Err(Failure {
                            own: false,
                            message: "not compiled: the build stopped at the compiler's first failure to start".into(),
                        })
                    } else {
                        let name = job.entry.variant.name.clone();
                        show_running(&bar, &running, |set| set.insert(name.clone()));
                        let outcome = compiler.compile(registry, job).and_then(|resources| {
                            finished(job, resources.clone()).map(|()| resources).map_err(|message| Failure { own: false, message })
                        });
                        show_running(&bar, &running, |set| set.remove(&name));
                        outcome
                    };
                    if let Err(Failure { message, .. }) = &outcome {
                        failed.fetch_add(1, Ordering::Relaxed);
                        if message.starts_with(CANNOT_START) {
                            stopped.store(true, Ordering::Relaxed);
                        }
                    }
                    *results[index].lock().expect("result slot") = Some(outcome);
                    bar.inc(1);
                    done.fetch_add(1, Ordering::Relaxed);
                })
            })
            .collect();
        // The reporter stops once the workers have, a panicking one included.
        let panicked = workers.into_iter().filter_map(|w| w.join().err()).next();
        over.store(true, Ordering::Relaxed);
        if let Some(panic) = panicked {
            std::panic::resume_unwind(panic);
        }
    });
    bar.finish_and_clear();
    results.into_iter().map(|slot| slot.into_inner().expect("result slot").expect("every job ran")).collect()
}

/// How often a build whose progress bar is hidden says how far it is.
const PIPE_EVERY: Duration = Duration::from_secs(10);

/// Says every [`PIPE_EVERY`], on standard error, how many of `total` compiles are done and
/// failed, and the time left at the rate so far; returns once `over`.
fn pipe_progress(total: usize, done: &AtomicUsize, failed: &AtomicUsize, over: &AtomicBool) {
    let started = Instant::now();
    let mut said = Instant::now();
    while !over.load(Ordering::Relaxed) {
        std::thread::sleep(Duration::from_millis(100));
        let finished = done.load(Ordering::Relaxed);
        if said.elapsed() >= PIPE_EVERY {
            said = Instant::now();
            let elapsed = started.elapsed().as_secs_f64();
            let left = if finished == 0 {
                "unknown".to_string()
            } else {
                format!("~{:.0} s", elapsed / finished as f64 * total.saturating_sub(finished) as f64)
            };
            eprintln!("compiling: {finished}/{total} done, {} failed, {elapsed:.0} s elapsed, {left} left", failed.load(Ordering::Relaxed));
        }
    }
}

/// How a failure to start the compiler begins, which stops the build.
const CANNOT_START: &str = "cannot start";

fn show_running(bar: &ProgressBar, running: &Mutex<BTreeSet<String>>, change: impl FnOnce(&mut BTreeSet<String>) -> bool) {
    let mut set = running.lock().expect("running set");
    change(&mut set);
    bar.set_message(set.iter().cloned().collect::<Vec<_>>().join(", "));
}

impl Compiler<'_> {
    /// Compiles one variant into the registry, through the launcher if there is one, and
    /// checks what nvcc wrote before it takes the fatbin's place. nvcc compiles a private copy
    /// of the bytes that were hashed ([`RegistryDir::private_sources`]).
    fn compile(&self, registry: &RegistryDir, job: &Job) -> Outcome {
        let not_own = |message: String| Failure { own: false, message };
        let target = registry.dir().join(fatbin_file(&job.entry.variant.name));
        let staging = temporary_sibling(&target);
        if let Some(resources) = self.cache.and_then(|cache| cache.fetch(&job.hash, &staging)) {
            // The record's report is taken only where the fatbin's own resource usage agrees.
            let sound = check_fatbin(self.cuobjdump, &staging, &job.entry)
                .and_then(|()| check_params(self.cuobjdump, &staging, &job.entry))
                .and_then(|()| check_report(self.cuobjdump, &staging, &job.entry, &resources))
                .is_ok();
            if sound && std::fs::rename(&staging, &target).is_ok() {
                self.cached.fetch_add(1, Ordering::Relaxed);
                return Ok(resources);
            }
            let _ = std::fs::remove_file(&staging);
        }
        let private = self.workdir;
        let copy = private.join(&job.entry.source);
        let written = copy.parent().map_or(Ok(()), std::fs::create_dir_all).and_then(|()| std::fs::write(&copy, &job.source));
        if let Err(err) = written {
            let _ = std::fs::remove_file(&copy);
            return Err(not_own(format!("cannot write the source's private copy {}: {err}", copy.display())));
        }
        // Through a launcher nvcc compiles to an object (`-c`), which sccache caches (it fails on
        // `--fatbin` of several architectures), and the fatbin is taken from the object's
        // `.nv_fatbin` section: the same code, so the content hash is the same either way.
        let object = staging.with_extension("o.tmp");
        let (mut command, flags, output_file) = match self.launcher.split_first() {
            Some((launcher, args)) => {
                let mut command = Command::new(launcher);
                command.args(args).arg(&self.nvcc.path);
                let flags = job.flags.iter().map(|f| if f == "--fatbin" { "-c".to_string() } else { f.clone() }).collect();
                (command, flags, &object)
            }
            None => (Command::new(&self.nvcc.path), job.flags.clone(), &staging),
        };
        // nvcc passes file names to its stages through a shell: it is given names relative to
        // the private folder (a variant's name and a fixed suffix), never the project's path,
        // which may hold `$`, quotes or spaces.
        let relative_output = format!("{}.out.tmp", job.entry.variant.name);
        // The phases' table goes beside it; the flag is not hashed (it changes no code).
        let time_table = format!("{}.time.csv", job.entry.variant.name);
        if self.timings.is_some() {
            let _ = std::fs::remove_file(private.join(&time_table));
            command.arg("--time").arg(&time_table);
        }
        let began = Instant::now();
        let output = command.current_dir(private).args(&flags).arg("-o").arg(&relative_output).arg(&job.entry.source).output();
        let wall_s = began.elapsed().as_secs_f64();
        let output = output.and_then(|output| {
            let written = private.join(&relative_output);
            if written.exists() {
                // A temporary work folder may be on another file system than the registry.
                if std::fs::rename(&written, output_file).is_err() {
                    std::fs::copy(&written, output_file)?;
                    std::fs::remove_file(&written)?;
                }
            }
            Ok(output)
        });
        let _ = std::fs::remove_file(&copy);
        if output_file == &object {
            let extracted = if object.is_file() { fatbin_of_object(&object, &staging) } else { Ok(()) };
            let _ = std::fs::remove_file(&object);
            if let Err(problem) = extracted {
                let _ = std::fs::remove_file(&staging);
                return Err(not_own(problem));
            }
        }
        let output = match output {
            Ok(output) => output,
            Err(err) => {
                let program = self.launcher.first().map_or_else(|| self.nvcc.path.display().to_string(), Clone::clone);
                return Err(not_own(format!("{CANNOT_START} {program}: {err}")));
            }
        };
        let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
        if !output.status.success() || !staging.is_file() {
            let _ = std::fs::remove_file(&staging);
            let message = annotate_errors(&stderr, job, self.renderer.get_or_init(|| Renderer::load(self.project).ok()).as_ref());
            // Its own error: nvcc ran to the end and pointed into the source, or ptxas refused it.
            let own =
                output.status.code().is_some() && (stderr.contains(&format!("{}(", job.entry.source)) || stderr.contains("ptxas error"));
            let why = if own { String::new() } else { " with no error in the source".to_string() };
            return Err(Failure { own, message: format!("nvcc failed ({}){why}:\n{}", output.status, message.trim_end()) });
        }
        let mut resources = parse_ptxas_report(&stderr);
        // In the order of the targets: a launcher may run nvcc's stages in parallel (sccache
        // does), and their reports then come in any order.
        resources.sort_by_key(|r| job.entry.targets.sass.iter().position(|sass| *sass == r.arch));
        let checked = check_fatbin(self.cuobjdump, &staging, &job.entry)
            .and_then(|()| check_params(self.cuobjdump, &staging, &job.entry))
            .and_then(|()| check_smem(&job.entry, &resources));
        if let Err(problem) = checked {
            let _ = std::fs::remove_file(&staging);
            // A cuobjdump that cannot start says nothing about the fatbin.
            let own = !problem.starts_with("cannot run");
            return Err(Failure { own, message: format!("{problem} (from template kernel-templates/{})", job.entry.template) });
        }
        if let Some(cache) = self.cache {
            if let Err(problem) = cache.store(&job.hash, &staging, &resources) {
                eprintln!("warning: {problem}");
            }
        }
        if let Some(timings) = &self.timings {
            let table = std::fs::read_to_string(private.join(&time_table)).unwrap_or_default();
            let _ = std::fs::remove_file(private.join(&time_table));
            let [front_end_s, ptxas_s, fatbinary_s, other_s] = crate::timings::parse(&table).unwrap_or([0.0, 0.0, 0.0, wall_s]);
            let timing = Timing {
                variant: job.entry.variant.name.clone(),
                family: job.entry.variant.family.clone(),
                front_end_s,
                ptxas_s,
                fatbinary_s,
                other_s,
                wall_s,
                fatbin_bytes: staging.metadata().map_or(0, |m| m.len()),
            };
            timings.lock().unwrap_or_else(|p| p.into_inner()).push(timing);
        }
        if let Err(err) = std::fs::rename(&staging, &target) {
            let _ = std::fs::remove_file(&staging);
            return Err(not_own(format!("cannot move the fatbin into {}: {err}", target.display())));
        }
        Ok(resources)
    }
}

/// Writes the fatbin nvcc embedded in an object (its `.nv_fatbin` section) to `fatbin`.
fn fatbin_of_object(object: &Path, fatbin: &Path) -> Result<(), String> {
    use object::{Object as _, ObjectSection as _};
    let bytes =
        files::read(object, MAX_BINARY_BYTES).map_err(|err| format!("cannot read the object nvcc wrote, {}: {err}", object.display()))?;
    let file = object::File::parse(&*bytes).map_err(|err| format!("the object nvcc wrote does not parse: {err}"))?;
    let section = file.section_by_name(".nv_fatbin").ok_or("the object nvcc wrote holds no .nv_fatbin section")?;
    let data = section.data().map_err(|err| format!("the object's .nv_fatbin section does not read: {err}"))?;
    std::fs::write(fatbin, data).map_err(|err| format!("cannot write {}: {err}", fatbin.display()))
}

/// Checks the shared memory a block needs, the template's dynamic bytes and the static bytes
/// ptxas reports, against each architecture's limit: the template could only check the first.
/// Dynamic bytes that follow the call's quantities are checked at each launch instead.
fn check_smem(entry: &Entry, resources: &[Resources]) -> Result<(), String> {
    let dynamic = entry.launch.dynamic_smem_bytes.as_constant().unwrap_or(0);
    for r in resources {
        let Some(limit) = arch::smem_limit(&r.arch) else { continue };
        if dynamic + u64::from(r.static_smem_bytes) > u64::from(limit) {
            return Err(format!(
                "the kernel needs {dynamic} bytes of dynamic and {} of static shared memory, over the {limit}-byte limit of {}",
                r.static_smem_bytes, r.arch
            ));
        }
    }
    Ok(())
}

/// cuobjdump's listing of `fatbin` with `flag`; `failed` says what its failure means. An error
/// starting "cannot run" says nothing about the fatbin.
fn cuobjdump_listing(cuobjdump: &Path, flag: &str, fatbin: &Path, failed: &str) -> Result<String, String> {
    let output =
        Command::new(cuobjdump).arg(flag).arg(fatbin).output().map_err(|err| format!("cannot run {}: {err}", cuobjdump.display()))?;
    if !output.status.success() {
        return Err(format!("{failed}: {}", String::from_utf8_lossy(&output.stderr).trim()));
    }
    Ok(String::from_utf8_lossy(&output.stdout).into_owned())
}

/// Whether ptxas's `report` (from a cache record) says what the fatbin's own resource usage
/// (cuobjdump) says of the kernel: registers, shared memory and stack, per architecture.
fn check_report(cuobjdump: &Path, fatbin: &Path, entry: &Entry, report: &[Resources]) -> Result<(), String> {
    let listing = cuobjdump_listing(cuobjdump, "--dump-resource-usage", fatbin, "cuobjdump --dump-resource-usage failed")?;
    let (mut arch, mut function) = (String::new(), String::new());
    let mut found = 0;
    for line in listing.lines().map(str::trim) {
        if let Some(value) = line.strip_prefix("arch = ") {
            arch = value.to_string();
        } else if let Some(name) = line.strip_prefix("Function ").and_then(|rest| rest.strip_suffix(':')) {
            function = name.to_string();
        } else if line.starts_with("REG:") && function == entry.entry {
            let field = |key: &str| {
                line.split_whitespace().find_map(|f| f.strip_prefix(key)).and_then(|v| v.parse::<u32>().ok()).unwrap_or(u32::MAX)
            };
            let Some(reported) = report.iter().find(|r| r.arch == arch) else {
                return Err(format!("the record has no report for {arch}"));
            };
            let (registers, shared, stack) = (field("REG:"), field("SHARED:"), field("STACK:"));
            // cuobjdump counts the 1 KiB sm_90 reserves for the system in each block's shared memory.
            let shared_agrees = (reported.static_smem_bytes..=reported.static_smem_bytes.saturating_add(1024)).contains(&shared);
            if registers != reported.registers || stack != reported.stack_bytes || !shared_agrees {
                return Err(format!(
                    "the record's {arch} report does not match the fatbin's: {registers} registers, {shared} bytes of shared memory, \
                     {stack} of stack"
                ));
            }
            found += 1;
        }
    }
    if found != report.len() {
        return Err(format!("the fatbin reports {found} architectures, the record {}", report.len()));
    }
    Ok(())
}

/// Checks that a fatbin parses and holds the kernel's entry symbol for every promised SASS
/// architecture, and PTX for the promised virtual one.
fn check_fatbin(cuobjdump: &Path, fatbin: &Path, entry: &Entry) -> Result<(), String> {
    let listing = cuobjdump_listing(cuobjdump, "--dump-elf-symbols", fatbin, "the fatbin nvcc wrote does not parse")?;
    // Sections start "Fatbin elf code:" or "Fatbin ptx code:", then name their `arch = sm_90`;
    // an ELF section then lists its symbols, kernels marked STO_ENTRY.
    let mut elf_has_entry: BTreeMap<String, bool> = BTreeMap::new();
    let mut ptx = BTreeSet::new();
    let mut section: Option<(bool, String)> = None;
    for line in listing.lines().map(str::trim) {
        if line.starts_with("Fatbin elf code") || line.starts_with("Fatbin ptx code") {
            section = Some((line.contains("elf"), String::new()));
        } else if let (Some((is_elf, arch)), Some(value)) = (section.as_mut(), line.strip_prefix("arch = ")) {
            *arch = value.to_string();
            if *is_elf {
                elf_has_entry.entry(arch.clone()).or_insert(false);
            } else {
                ptx.insert(arch.clone());
            }
        } else if let Some((true, arch)) = &section {
            if line.contains("STO_ENTRY") && line.split_whitespace().last() == Some(entry.entry.as_str()) {
                elf_has_entry.insert(arch.clone(), true);
            }
        }
    }
    for sass in &entry.targets.sass {
        match elf_has_entry.get(sass) {
            None => return Err(format!("the fatbin holds no {sass} code")),
            Some(false) => {
                return Err(format!(
                "the fatbin's {sass} code has no kernel entry `{}`: the kernel must be declared `extern \"C\" __global__` under that name",
                entry.entry
            ))
            }
            Some(true) => {}
        }
    }
    let ptx_arch = entry.targets.ptx.replacen("compute_", "sm_", 1);
    if !ptx.contains(&ptx_arch) {
        return Err(format!("the fatbin holds no PTX for {}", entry.targets.ptx));
    }
    Ok(())
}

/// Checks the kernel's compiled parameter list against its launch contract's: in each SASS
/// architecture's `.nv.info.<entry>` section (cuobjdump -elf), the number of parameters and
/// the size of each. A signature that differs would take the runtime's arguments at the wrong
/// places: undefined behaviour at launch, which no later check would see. (Two kinds of one
/// size, an `int` and a `float`, look alike here.)
fn check_params(cuobjdump: &Path, fatbin: &Path, entry: &Entry) -> Result<(), String> {
    let listing = cuobjdump_listing(cuobjdump, "-elf", fatbin, "cuobjdump -elf failed")?;
    let section = format!(".nv.info.{}", entry.entry);
    // Per architecture, each parameter's size by its position.
    let mut compiled: BTreeMap<String, BTreeMap<u64, u64>> = BTreeMap::new();
    let (mut arch, mut inside) = (String::new(), false);
    let hex = |line: &str, key: &str| {
        let rest = line.split_once(key)?.1.trim_start().strip_prefix(':')?.trim_start();
        u64::from_str_radix(rest.split_whitespace().next()?.trim_start_matches("0x"), 16).ok()
    };
    for line in listing.lines().map(str::trim) {
        if let Some(value) = line.strip_prefix("arch = ") {
            arch = value.to_string();
            inside = false;
        } else if line.starts_with('.') {
            inside = line == section;
        } else if inside && line.starts_with("Value:") && line.contains("Ordinal") {
            if let (Some(ordinal), Some(size)) = (hex(line, "Ordinal"), hex(line, "Size")) {
                compiled.entry(arch.clone()).or_default().insert(ordinal, size);
            }
        }
    }
    let declared = &entry.launch.params;
    let describe = |p: &tilesmith_spec::Param| format!("`{}` ({} bytes)", p.name, p.kind.size_bytes(&entry.declaration).unwrap_or(0));
    for sass in &entry.targets.sass {
        let sizes = compiled.remove(sass).unwrap_or_default();
        if sizes.len() != declared.len() || sizes.keys().copied().ne(0..declared.len() as u64) {
            return Err(format!(
                "the compiled kernel `{}` takes {} parameter(s) on {sass}, but its launch contract declares {}: {}; the kernel's \
                 signature must list the contract's parameters in order (the template's `signature` writes it)",
                entry.entry,
                sizes.len(),
                declared.len(),
                declared.iter().map(describe).collect::<Vec<_>>().join(", ")
            ));
        }
        for ((position, &size), param) in sizes.iter().zip(declared) {
            let expected = param.kind.size_bytes(&entry.declaration).map(u64::from);
            if expected != Some(size) {
                return Err(format!(
                    "the compiled kernel `{}` takes {size} bytes as its parameter {} on {sass}, but its launch contract's parameter {} \
                     is {}",
                    entry.entry,
                    position + 1,
                    position + 1,
                    describe(param)
                ));
            }
        }
    }
    Ok(())
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
fn annotate_errors(stderr: &str, job: &Job, renderer: Option<&Renderer>) -> String {
    let entry = &job.entry;
    let source = String::from_utf8_lossy(&job.source);
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
            out.push_str(&format!("\n    from {origin}"));
        }
        out.push('\n');
    }
    out
}

fn template_line(renderer: &Renderer, template: &str, text: &str) -> Option<String> {
    if text.len() < 8 {
        return None;
    }
    let mut found =
        renderer.texts.iter().filter(|(name, _)| *name == template || name.starts_with("partials/")).flat_map(|(name, body)| {
            body.lines()
                .enumerate()
                .filter(|(_, line)| line.trim() == text)
                .map(move |(i, _)| format!("{}:{}", renderer.origin(name), i + 1))
        });
    let first = found.next()?;
    found.next().is_none().then_some(first)
}

fn indent(text: &str) -> String {
    text.lines().map(|line| format!("  {line}")).collect::<Vec<_>>().join("\n")
}

/// The project's tuning tables (`tuning/<family>/*.json`, [`FamilyTable`]: format, file name,
/// entries), each checked, with their paths in the tuning folder: each may rank only declared
/// variants of its own family, and passes the `checks` of the plug-ins linked. A table in the
/// tuning folder itself would not be read: it is refused, saying where tables go.
fn project_tables(project: &Project, config: Option<&Config>, checks: &[TableCheck]) -> Result<Vec<(String, FamilyTable)>> {
    let dir = project.tuning_dir();
    let fix = "fix it, remove it or run `tilesmith tune` again";
    if let Some(old) = tuning::paths(&dir).with_context(|| format!("cannot list {}", dir.display()))?.first() {
        bail!(
            "tuning table {}: tables lie in a folder per family (tuning/<family>/<GPU>-<SMs>sm.json), and one in the \
             tuning folder itself is not read: move it into its family's folder or remove it",
            project.relative(old)
        );
    }
    let family_tables = FamilyTable::read_all(&dir).map_err(|err| anyhow!("tuning table {err}; {fix}"))?;
    for (name, table) in &family_tables {
        for check in checks {
            check(table).map_err(|err| anyhow!("tuning table tuning/{name}: {err}; {fix}"))?;
        }
        // Checked as the registry will check it when it opens, against the declared variants
        // (variants.toml that does not read is refused by gen).
        let Some(config) = config else { continue };
        let of_family: Vec<&tilesmith_spec::Declared> = config.variants.iter().filter(|d| d.variant.family == table.family).collect();
        let Some(family) = of_family.first().map(|d| &d.family) else {
            bail!("tuning table tuning/{name} is of family `{}`, which variants.toml does not declare; remove it", table.family);
        };
        let ranks = |variant: &str| {
            of_family.iter().any(|d| d.variant.name == variant && family.reference.backend.as_deref() != Some(d.variant.backend.as_str()))
        };
        table.check_serves(family, ranks).map_err(|rule| {
            anyhow!("tuning table tuning/{name}: {rule}; run `tilesmith tune --family {}` again or remove it", table.family)
        })?;
    }
    Ok(family_tables)
}

/// Copies the tuning tables into the registry, each at its path in the tuning folder, and
/// removes those the project no longer has. Each goes through a temporary file, removed again
/// when the copy fails. A table ranking variants the registry does not hold (`built`: a build
/// of some variants only, `--kernels`) is carried ranking those it holds, since a registry
/// refuses a table ranking others.
fn carry_tables(project: &Project, tables: &[(String, FamilyTable)], built: impl Fn(&str) -> bool, notes: &mut Notes) -> Result<()> {
    let to = project.registry_dir().join(TUNING_DIR);
    for (name, table) in tables {
        let path = project.tuning_dir().join(name);
        let target = to.join(name);
        let folder = target.parent().expect("inside the tuning folder");
        std::fs::create_dir_all(folder).with_context(|| format!("cannot create {}", folder.display()))?;
        let unbuilt = table.unknown_variants(&built);
        if !unbuilt.is_empty() {
            let text = table.keeping(&built).and_then(|kept| kept.to_text()).map_err(|err| anyhow!("tuning table tuning/{name}: {err}"))?;
            write_atomic(&target, text.as_bytes()).with_context(|| format!("cannot write {}", target.display()))?;
            notes.say(format!(
                "tuning/{name} carried ranking the registry's variants only: {} it ranks are not built ({}{})",
                unbuilt.len(),
                unbuilt[0],
                if unbuilt.len() > 1 { ", ..." } else { "" }
            ));
            continue;
        }
        let temporary = temporary_sibling(&target);
        let copied = std::fs::copy(&path, &temporary).and_then(|_| std::fs::rename(&temporary, &target));
        if let Err(err) = copied {
            let _ = std::fs::remove_file(&temporary);
            return Err(err).with_context(|| format!("cannot copy {} into {}", path.display(), to.display()));
        }
    }
    let mut listed: Vec<PathBuf> = tuning::paths(&to).with_context(|| format!("cannot list {}", to.display()))?;
    listed.extend(FamilyTable::paths(&to).with_context(|| format!("cannot list {}", to.display()))?.into_iter().map(|(_, path)| path));
    for stale in listed {
        if !tables.iter().any(|(name, _)| to.join(name) == stale) {
            std::fs::remove_file(&stale).with_context(|| format!("cannot remove {}", stale.display()))?;
        }
    }
    Ok(())
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
            Resources {
                arch: "sm_80".into(),
                registers: 128,
                static_smem_bytes: 1024,
                stack_bytes: 16,
                spill_store_bytes: 8,
                spill_load_bytes: 4
            }
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

    /// The shipped entry of this name.
    fn shipped(name: &str) -> Entry {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../generated/manifest.json");
        let manifest: Manifest = manifest::read(&path).unwrap();
        manifest.variants.into_iter().find(|e| e.variant.name == name).unwrap()
    }

    #[test]
    fn arch_narrows_targets_and_raises_the_ptx() {
        let block = shipped("layernorm_w4");
        assert_eq!(
            (block.targets.sass.clone(), block.targets.ptx.as_str()),
            (vec!["sm_80".to_string(), "sm_90".to_string()], "compute_80")
        );
        let hopper = narrowed(&block, &["sm_90".into()]).unwrap();
        assert_eq!((hopper.targets.sass, hopper.targets.ptx.as_str()), (vec!["sm_90".to_string()], "compute_90"));
        let ampere = narrowed(&block, &["sm_80".into(), "sm_120".into()]).unwrap();
        assert_eq!((ampere.targets.sass, ampere.targets.ptx.as_str()), (vec!["sm_80".to_string()], "compute_80"));
        // sm_90 names sm_90a; a backend for sm_90a only has nothing for sm_80.
        let hopper_only = shipped("attention_f16_d64");
        assert_eq!(hopper_only.targets.sass, ["sm_90a"]);
        assert_eq!(narrowed(&hopper_only, &["sm_90".into()]).as_ref(), Some(&hopper_only));
        assert_eq!(narrowed(&hopper_only, &["sm_80".into()]), None);
        // One -gencode fewer: SASS for sm_90 from the compute_90 PTX, one front end.
        assert_eq!(narrowed(&block, &["sm_90".into()]).map(|e| flags(&e).len()), Some(flags(&block).len() - 1));
    }
}
