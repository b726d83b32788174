//! A build's stamp: what the last build that ended cleanly read and wrote, each file by size,
//! modification and change time, with what it printed. A build asked the same whose files all still
//! match answers "nothing changed" from the stamp alone, without parsing a manifest, a record
//! or a table (as make trusts modification times); any difference, a file added or removed
//! included, takes the full road, which checks everything and writes a new stamp.

use crate::project::{write_atomic, Project};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::Path;
use std::time::UNIX_EPOCH;
use tilesmith_spec::files::{self, MAX_TEXT_BYTES};

/// In the registry folder; its leading dot keeps it out of what the stamp watches there.
const STAMP_FILE: &str = ".build-stamp";

/// What a build was asked: a build asked otherwise does not take the stamp.
#[derive(Serialize, Deserialize, PartialEq, Debug)]
pub struct Key {
    /// The program building (its checks are part of what was checked).
    pub exe: Option<Stat>,
    /// nvcc's path and version.
    pub nvcc: String,
    /// `--arch` (or `TILESMITH_ARCH`); variants.toml's `[build] arch` is watched as a file.
    pub arch: Option<Vec<String>>,
    /// `--kernels` globs, and whether the references they need were added.
    pub selection: Vec<String>,
    pub references: bool,
}

impl Key {
    pub fn new(nvcc: String, arch: Option<Vec<String>>, selection: Vec<String>, references: bool) -> Key {
        let exe = std::env::current_exe().ok().and_then(|path| Stat::of(&path));
        Key { exe, nvcc, arch, selection, references }
    }
}

/// A file's size, modification time and (on Unix) change time, to the nanosecond where the
/// file system keeps them. The change time moves with every write and no tool sets it back,
/// so a file put back with its old modification time (`cp -p`, `touch -d`) is a change.
#[derive(Serialize, Deserialize, PartialEq, Eq, Clone, Copy, Debug)]
pub struct Stat {
    len: u64,
    modified_ns: u128,
    changed_ns: i128,
}

impl Stat {
    fn of(path: &Path) -> Option<Stat> {
        let meta = std::fs::metadata(path).ok()?;
        let modified_ns = meta.modified().ok()?.duration_since(UNIX_EPOCH).ok()?.as_nanos();
        #[cfg(unix)]
        let changed_ns = {
            use std::os::unix::fs::MetadataExt;
            i128::from(meta.ctime()) * 1_000_000_000 + i128::from(meta.ctime_nsec())
        };
        #[cfg(not(unix))]
        let changed_ns = 0;
        Some(Stat { len: meta.len(), modified_ns, changed_ns })
    }
}

/// What a no-op build prints, beside nvcc and the time it took.
#[derive(Serialize, Deserialize, Debug)]
pub struct Said {
    /// Variants selected, those up to date, and those the registry's index holds.
    pub selected: usize,
    pub up_to_date: usize,
    pub built: usize,
    /// Every other line the build printed that a build with nothing to do prints again.
    pub notes: Vec<String>,
}

#[derive(Serialize, Deserialize)]
pub struct Stamp {
    key: Key,
    /// Every file watched, by its path under the project's root.
    files: BTreeMap<String, Stat>,
    said: Said,
}

/// The folders whose every file is watched (a file added there is a change): the templates,
/// the tuning tables and the registry. Sources are watched by the manifest's list.
fn folders(project: &Project) -> [std::path::PathBuf; 3] {
    [project.templates_dir(), project.tuning_dir(), project.registry_dir()]
}

/// Folders nested deeper than the tuning tables' (`registry/tuning/<family>/<table>`) are not
/// walked: a stamp that cannot see everything is never taken.
const MAX_DEPTH: usize = 3;

/// Every file under `dir` but those whose names start with a dot (the registry's lock, its
/// private sources, temporaries and this stamp), by path under the project's root; None where
/// a folder cannot be read or goes deeper than [`MAX_DEPTH`].
fn listed(project: &Project, dir: &Path, out: &mut BTreeMap<String, Option<Stat>>) -> Option<()> {
    let mut folders = vec![(dir.to_path_buf(), 0)];
    while let Some((folder, depth)) = folders.pop() {
        let entries = match std::fs::read_dir(&folder) {
            Err(err) if err.kind() == std::io::ErrorKind::NotFound && depth == 0 => continue,
            entries => entries.ok()?,
        };
        for entry in entries {
            let entry = entry.ok()?;
            if entry.file_name().to_string_lossy().starts_with('.') {
                continue;
            }
            let path = entry.path();
            if entry.file_type().ok()?.is_dir() {
                if depth + 1 > MAX_DEPTH {
                    return None;
                }
                folders.push((path, depth + 1));
            } else {
                out.insert(project.relative(&path), Stat::of(&path));
            }
        }
    }
    Some(())
}

/// What the build just done read and wrote: the watched folders' files, variants.toml,
/// generated/manifest.json and the `sources` it lists. None where some cannot be read.
fn watched(project: &Project, sources: &[String]) -> Option<BTreeMap<String, Stat>> {
    let mut files = BTreeMap::new();
    for dir in folders(project) {
        listed(project, &dir, &mut files)?;
    }
    let manifest = project.generated_dir().join(tilesmith_spec::manifest::MANIFEST_FILE);
    for path in [project.variants_file(), manifest].into_iter().chain(sources.iter().map(|s| project.source_path(s))) {
        files.insert(project.relative(&path), Stat::of(&path));
    }
    files.into_iter().map(|(path, stat)| Some((path, stat?))).collect()
}

/// The last clean build's stamp, if there is one that reads.
pub fn read(project: &Project) -> Option<Stamp> {
    serde_json::from_slice(&files::read(&project.registry_dir().join(STAMP_FILE), MAX_TEXT_BYTES).ok()?).ok()
}

impl Stamp {
    /// What the build said, where it was asked as `key` is, every file it watched is as it
    /// left it, and the watched folders hold no other file.
    pub fn unchanged(self, project: &Project, key: &Key) -> Option<Said> {
        if self.key != *key {
            return None;
        }
        let mut now = BTreeMap::new();
        for dir in folders(project) {
            listed(project, &dir, &mut now)?;
        }
        let prefixes = folders(project).map(|dir| project.relative(&dir));
        let in_folders = |file: &str| prefixes.iter().any(|prefix| Path::new(file).starts_with(prefix));
        if self.files.keys().filter(|file| in_folders(file)).count() != now.len() {
            return None;
        }
        for (file, stat) in &self.files {
            let current = match now.get(file) {
                Some(current) => *current,
                None if in_folders(file) => return None,
                None => Stat::of(&project.root.join(file)),
            };
            if current != Some(*stat) {
                return None;
            }
        }
        Some(self.said)
    }
}

/// Removes the stamp: done before a build changes anything, so that one interrupted leaves
/// none behind.
pub fn remove(project: &Project) -> std::io::Result<()> {
    match std::fs::remove_file(project.registry_dir().join(STAMP_FILE)) {
        Err(err) if err.kind() != std::io::ErrorKind::NotFound => Err(err),
        _ => Ok(()),
    }
}

/// Writes the stamp of a build that ended cleanly. Not written where some file cannot be read;
/// the next build then takes the full road.
pub fn write(project: &Project, key: Key, sources: &[String], said: Said) -> std::io::Result<()> {
    let Some(files) = watched(project, sources) else { return Ok(()) };
    let stamp = Stamp { key, files, said };
    write_atomic(&project.registry_dir().join(STAMP_FILE), &serde_json::to_vec(&stamp)?).map(drop)
}
