//! The registry folder as a transaction. One build at a time holds its lock; each variant's
//! fatbin and its record (`<name>.json`: what was built from what, and the fatbin's own hash)
//! are written atomically as the variant finishes; `manifest.json`, the index the runtime reads,
//! is gathered from the records after each one. An interrupted build loses nothing finished,
//! and a broken index is refused, never taken for an empty registry.

use crate::project::{self, sha256_hex, write_atomic, Project};
use crate::select::Selection;
use anyhow::{bail, Context, Result};
use std::collections::{BTreeMap, BTreeSet};
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use tilesmith_spec::manifest::Check as _;
use tilesmith_spec::manifest::{self, fatbin_file, record_file, FORMAT, MANIFEST_FILE};
use tilesmith_spec::{Built, Entry, Manifest, Registry, Resources};

/// Held by the build that writes the registry.
const LOCK_FILE: &str = ".lock";

/// The folder of private source copies inside the registry ([`RegistryDir::private_sources`]).
const PRIVATE_SOURCES: &str = ".sources";

/// Where an unreadable index is moved by `build --repair`.
const SET_ASIDE: &str = "manifest.json.corrupt";

/// The registry folder, locked for this process until dropped.
pub struct RegistryDir {
    dir: PathBuf,
    /// The project's root, recorded in the index.
    project: PathBuf,
    /// The index as it is on disk, when known: one that would be written unchanged is not
    /// written again (a no-op build of a large matrix spent a tenth of its time there).
    on_disk: Mutex<Option<Registry>>,
    _lock: File,
}

impl RegistryDir {
    /// Takes the registry's lock, waiting (and saying so) while another build holds it, then
    /// removes the temporary files an interrupted build left behind.
    pub fn lock(project: &Project) -> Result<RegistryDir> {
        let dir = project.registry_dir();
        let lock = project::lock(project, &dir.join(LOCK_FILE), true, "another build")?;
        let root = std::fs::canonicalize(&project.root).unwrap_or_else(|_| project.root.clone());
        let registry = RegistryDir { dir, project: root, on_disk: Mutex::new(None), _lock: lock };
        registry.remove_temporaries()?;
        Ok(registry)
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// No other build runs while the lock is held, so every temporary file is a leftover.
    fn remove_temporaries(&self) -> Result<()> {
        self.clear_private_sources()?;
        for path in self.files()? {
            let name = file_name(&path);
            if name.starts_with('.') && name.ends_with(".tmp") {
                std::fs::remove_file(&path).with_context(|| format!("cannot remove the leftover {}", path.display()))?;
            }
        }
        Ok(())
    }

    fn files(&self) -> Result<Vec<PathBuf>> {
        let entries = std::fs::read_dir(&self.dir).with_context(|| format!("cannot read {}", self.dir.display()))?;
        entries.map(|entry| Ok(entry?.path())).collect()
    }

    /// Refuses an index that exists but cannot be read, unless asked to repair it: then it is
    /// set aside and rebuilt from the records.
    pub fn check_index(&self, repair: bool) -> Result<()> {
        let path = self.dir.join(MANIFEST_FILE);
        if !path.exists() {
            return Ok(());
        }
        let err = match manifest::read::<Registry>(&path) {
            Ok(index) => {
                *self.on_disk.lock().unwrap_or_else(|poisoned| poisoned.into_inner()) = Some(index);
                return Ok(());
            }
            Err(err) => err,
        };
        if repair {
            let aside = project::set_aside(&path).with_context(|| format!("cannot move {} aside", path.display()))?;
            eprintln!("{err}\nset aside as {}; the index is rebuilt from the per-variant records", aside.display());
            return Ok(());
        }
        bail!(
            "{err}\nNothing was changed. `tilesmith build --repair` sets it aside as {SET_ASIDE} and rebuilds it from \
             the per-variant records (registry/<variant>.json) whose fatbins still match their recorded SHA-256, \
             compiling only what they do not cover"
        )
    }

    /// The records of declared variants whose fatbins are there and unchanged, and the
    /// unselected variants whose record or fatbin is broken: those are compiled again too, so
    /// that the index never silently loses them.
    pub fn records(&self, manifest: &Manifest, selection: &Selection) -> (BTreeMap<String, Built>, Vec<String>) {
        let mut records = BTreeMap::new();
        let mut broken = Vec::new();
        for entry in &manifest.variants {
            let name = &entry.variant.name;
            let path = self.dir.join(record_file(name));
            if !path.exists() {
                continue;
            }
            match self.read_record(name, &path) {
                Ok(built) => {
                    records.insert(name.clone(), built);
                }
                Err(problem) => {
                    let also = if selection.matches(name) { "" } else { " (although not selected)" };
                    eprintln!("{name}: {problem}; it will be compiled again{also}");
                    if !selection.matches(name) {
                        broken.push(name.clone());
                    }
                }
            }
        }
        (records, broken)
    }

    /// A variant's record, refused where it does not parse, breaks a manifest rule, is the
    /// record of another variant, or its fatbin no longer has the recorded SHA-256. A fatbin
    /// last changed before its record was written (which is after the fatbin takes its place) is
    /// the one recorded, as make would have it; any other is hashed again. Hashing every fatbin
    /// took a fifth of a no-op build of the shipped matrix (292 MB), and the runtime checks
    /// the SHA-256 of every fatbin it loads all the same.
    fn read_record(&self, name: &str, path: &Path) -> Result<Built, String> {
        let text = tilesmith_spec::files::read_to_string(path).map_err(|err| format!("cannot read {}: {err}", path.display()))?;
        let built: Built = serde_json::from_str(&text).map_err(|err| format!("{} does not parse ({err})", path.display()))?;
        if built.entry.variant.name != name {
            return Err(format!("{} holds the record of another variant, `{}`", path.display(), built.entry.variant.name));
        }
        built.check().map_err(|rule| format!("{}: {rule}", path.display()))?;
        let fatbin = self.dir.join(&built.fatbin);
        if written_before(&fatbin, path) {
            return Ok(built);
        }
        match sha256_file(&fatbin) {
            Ok(hash) if hash == built.fatbin_sha256 => Ok(built),
            Ok(_) => Err(format!("{} no longer matches the SHA-256 recorded when it was built", fatbin.display())),
            Err(err) => Err(format!("cannot read {}: {err}", fatbin.display())),
        }
    }

    /// Records a fatbin that has just taken its place.
    pub fn record(&self, entry: &Entry, hash: &str, resources: Vec<Resources>, compiler: &str) -> Result<Built, String> {
        let name = &entry.variant.name;
        let fatbin = fatbin_file(name);
        let fatbin_sha256 = sha256_file(&self.dir.join(&fatbin)).map_err(|err| format!("cannot read the fatbin just written: {err}"))?;
        let built =
            Built { entry: entry.clone(), fatbin, hash: hash.to_string(), fatbin_sha256, compiler: compiler.to_string(), resources };
        let path = self.dir.join(record_file(name));
        let json = serde_json::to_string_pretty(&built).map_err(|err| err.to_string())? + "\n";
        write_atomic(&path, json.as_bytes()).map_err(|err| format!("cannot write {}: {err}", path.display()))?;
        Ok(built)
    }

    /// The folder nvcc runs in: it holds private copies of the sources being compiled at the
    /// same relative paths as in the project (`generated/<name>.cu`), so that what nvcc reads
    /// is what was hashed, and what it embeds (the path, in messages, line info and internal
    /// symbols) is what it embedded when compiling generated/ itself. Only the build holding
    /// the lock uses it.
    pub fn private_sources(&self) -> PathBuf {
        self.dir.join(PRIVATE_SOURCES)
    }

    /// Removes the private copies, which no other build can be using.
    pub fn clear_private_sources(&self) -> Result<()> {
        let dir = self.private_sources();
        match std::fs::remove_dir_all(&dir) {
            Err(err) if err.kind() != std::io::ErrorKind::NotFound => Err(err).with_context(|| format!("cannot remove {}", dir.display())),
            _ => Ok(()),
        }
    }

    /// Removes a variant's fatbin and record.
    pub fn forget(&self, variant: &str) -> Result<()> {
        for path in [self.dir.join(fatbin_file(variant)), self.dir.join(record_file(variant))] {
            match std::fs::remove_file(&path) {
                Err(err) if err.kind() != std::io::ErrorKind::NotFound => {
                    return Err(err).with_context(|| format!("cannot remove {}", path.display()))
                }
                _ => {}
            }
        }
        Ok(())
    }

    /// Writes the index: the recorded variants, in `generated/manifest.json` order.
    pub fn write_index(&self, manifest: &Manifest, records: &BTreeMap<String, Built>) -> Result<Registry, String> {
        let variants = manifest.variants.iter().filter_map(|e| records.get(&e.variant.name).cloned()).collect();
        let index = Registry { format: FORMAT, project: Some(self.project.clone()), variants };
        let path = self.dir.join(MANIFEST_FILE);
        let mut on_disk = self.on_disk.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        if on_disk.as_ref() == Some(&index) && path.is_file() {
            return Ok(index);
        }
        let json = serde_json::to_string_pretty(&index).map_err(|err| err.to_string())? + "\n";
        write_atomic(&path, json.as_bytes()).map_err(|err| format!("cannot write {}: {err}", path.display()))?;
        *on_disk = Some(index.clone());
        Ok(index)
    }

    /// Removes the fatbins and records of variants that neither generated/manifest.json nor
    /// variants.toml (`declared`, when it reads) lists.
    pub fn remove_undeclared(&self, manifest: &Manifest, declared: &Option<BTreeSet<String>>) -> Result<()> {
        let names = manifest.variants.iter().map(|e| &e.variant.name).chain(declared.iter().flatten());
        let declared: BTreeSet<String> = names.flat_map(|name| [fatbin_file(name), record_file(name)]).collect();
        for path in self.files()? {
            let name = file_name(&path);
            let ours = name.ends_with(".fatbin") || (name.ends_with(".json") && name != MANIFEST_FILE);
            if ours && !declared.contains(&name) {
                std::fs::remove_file(&path).with_context(|| format!("cannot remove {}", path.display()))?;
            }
        }
        Ok(())
    }
}

fn file_name(path: &Path) -> String {
    path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default()
}

/// Whether `file` was last changed strictly before `after` was last modified: false where either
/// time cannot be read. A file's change time (ctime) moves with every write, rename or `touch`,
/// and no tool sets it back, so a fatbin replaced by an older copy (`cp -p`, which keeps the
/// modification time) is not taken for the one recorded.
#[cfg(unix)]
fn written_before(file: &Path, after: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    let changed = std::fs::metadata(file).map(|m| (m.ctime(), m.ctime_nsec()));
    let modified = std::fs::metadata(after).map(|m| (m.mtime(), m.mtime_nsec()));
    matches!((changed, modified), (Ok(changed), Ok(modified)) if changed < modified)
}

#[cfg(not(unix))]
fn written_before(_: &Path, _: &Path) -> bool {
    false
}

fn sha256_file(path: &Path) -> std::io::Result<String> {
    Ok(sha256_hex(&tilesmith_spec::files::read(path, tilesmith_spec::files::MAX_BINARY_BYTES)?))
}
