//! Where a tilesmith project keeps its files.

use anyhow::{bail, Context};
use std::fs::{File, OpenOptions, TryLockError};
use std::path::{Path, PathBuf};
use tilesmith_spec::files;

/// The folders and files one run of the pipeline works on: the project's sources under `root`,
/// and generated/ and registry/ there too, or under `out` for a build script (`OUT_DIR`), which
/// must not write into the crate's sources.
#[derive(Clone, Debug)]
pub struct Project {
    pub root: PathBuf,
    pub out: Option<PathBuf>,
}

impl Project {
    /// The project holding `from`: the nearest folder, `from` or above it, that holds a
    /// variants.toml, as cargo finds Cargo.toml.
    pub fn find(from: &Path) -> anyhow::Result<Project> {
        match from.ancestors().find(|dir| dir.join("variants.toml").is_file()) {
            Some(root) => Ok(Project::at(root)),
            None => anyhow::bail!(
                "no variants.toml in {} or any folder above it: run inside a tilesmith project (the folder holding variants.toml), give --root, or create one with `tilesmith init`",
                from.display()
            ),
        }
    }

    /// The project whose sources and outputs are all under `root`.
    pub fn at(root: &Path) -> Project {
        Project { root: root.to_path_buf(), out: None }
    }

    pub fn variants_file(&self) -> PathBuf {
        self.root.join("variants.toml")
    }

    pub fn templates_dir(&self) -> PathBuf {
        self.root.join("kernel-templates")
    }

    pub fn generated_dir(&self) -> PathBuf {
        self.out.as_ref().unwrap_or(&self.root).join("generated")
    }

    /// Where a manifest entry's source is: its `source` names it as `generated/<file>`.
    pub fn source_path(&self, source: &str) -> PathBuf {
        self.generated_dir().join(Path::new(source).file_name().unwrap_or_default())
    }

    /// The committed tuning tables, which a build copies into the registry.
    pub fn tuning_dir(&self) -> PathBuf {
        self.root.join(tilesmith_spec::tuning::TUNING_DIR)
    }

    /// Held by `gen` while it writes generated/, and shared by builds while they read it.
    pub fn generated_lock(&self) -> PathBuf {
        self.generated_dir().join(".lock")
    }

    pub fn registry_dir(&self) -> PathBuf {
        self.out.as_ref().unwrap_or(&self.root).join("registry")
    }

    /// A path relative to the root, for messages and manifests.
    pub fn relative(&self, path: &Path) -> String {
        path.strip_prefix(&self.root).unwrap_or(path).display().to_string()
    }
}

/// Takes a lock on `path` (created if needed) for as long as the returned file lives:
/// exclusive for a writer, shared for a reader. While another process holds it, says so,
/// naming the file and `holder` (what holds such locks), and waits.
pub fn lock(project: &Project, path: &Path, exclusive: bool, holder: &str) -> anyhow::Result<File> {
    use anyhow::Context;
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).with_context(|| format!("cannot create {}", parent.display()))?;
    }
    let file = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(path)
        .with_context(|| format!("cannot open {}", path.display()))?;
    let attempt = if exclusive { file.try_lock() } else { file.try_lock_shared() };
    match attempt {
        Ok(()) => {}
        Err(TryLockError::WouldBlock) => {
            eprintln!("waiting for {holder}, which holds {}", project.relative(path));
            let waited = if exclusive { file.lock() } else { file.lock_shared() };
            waited.with_context(|| format!("cannot lock {}", path.display()))?;
            eprintln!("it finished; going on");
        }
        Err(TryLockError::Error(err)) => return Err(err).with_context(|| format!("cannot lock {}", path.display())),
    }
    Ok(file)
}

/// SHA-256 in hex: of a source (gen's manifest, build's check) and of a fatbin (its record).
pub fn sha256_hex(bytes: &[u8]) -> String {
    use sha2::{Digest, Sha256};
    format!("{:x}", Sha256::digest(bytes))
}

/// Moves an unreadable file aside as `<name>.corrupt`, or `<name>.corrupt.1`, `.2`, ... where
/// earlier ones are kept; returns where it went.
pub fn set_aside(path: &Path) -> std::io::Result<PathBuf> {
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let aside = (0..)
        .map(|n| path.with_file_name(if n == 0 { format!("{name}.corrupt") } else { format!("{name}.corrupt.{n}") }))
        .find(|candidate| !candidate.exists())
        .expect("an unused name");
    std::fs::rename(path, &aside)?;
    Ok(aside)
}

/// Whether `path` is a regular file (not a link) holding exactly `contents`. Only such a file
/// of the same length is read: a FIFO or a device put where tilesmith writes would block or
/// never end, and a link may lead out of the project; either is replaced like any stale file.
pub fn holds(path: &Path, contents: &[u8]) -> bool {
    let same_length = std::fs::symlink_metadata(path).is_ok_and(|m| m.is_file() && m.len() == contents.len() as u64);
    same_length && files::read(path, contents.len() as u64).is_ok_and(|existing| existing == contents)
}

/// Writes `contents` to `path` through a temporary file and a rename, so that readers never see
/// a partial file; does nothing when the file already holds exactly `contents`.
pub fn write_atomic(path: &Path, contents: &[u8]) -> std::io::Result<bool> {
    if holds(path, contents) {
        return Ok(false);
    }
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent)?;
    }
    let tmp = temporary_sibling(path);
    std::fs::write(&tmp, contents)?;
    std::fs::rename(&tmp, path).inspect_err(|_| {
        let _ = std::fs::remove_file(&tmp);
    })?;
    Ok(true)
}

/// `path` as the file system resolves it, for checking where a write would land before it is
/// made: the longest part that exists with its links and `..` resolved, then the rest, which
/// may not hold `..` (a missing folder followed by `..` names a place only once created).
pub fn resolve(path: &Path) -> anyhow::Result<PathBuf> {
    use std::path::Component;
    let absolute = std::path::absolute(path).with_context(|| format!("cannot make {} absolute", path.display()))?;
    let mut existing = absolute.clone();
    let mut rest = Vec::new();
    let real = loop {
        match std::fs::canonicalize(&existing) {
            Ok(real) => break real,
            Err(_) => match (existing.file_name(), existing.parent()) {
                (Some(name), Some(parent)) => {
                    rest.push(name.to_os_string());
                    existing = parent.to_path_buf();
                }
                // `..` or the root: walk up lexically, then check the rest below.
                _ => match existing.parent() {
                    Some(parent) => {
                        rest.push("..".into());
                        existing = parent.to_path_buf();
                    }
                    None => break existing,
                },
            },
        }
    };
    let mut resolved = real;
    for name in rest.iter().rev() {
        match Path::new(name).components().next() {
            Some(Component::Normal(part)) => resolved.push(part),
            Some(Component::CurDir) => {}
            _ => bail!("{}: `..` after {}, which does not exist: name the folder without `..`", path.display(), resolved.display()),
        }
    }
    Ok(resolved)
}

/// A name beside `path` that no other process or thread uses.
pub fn temporary_sibling(path: &Path) -> PathBuf {
    use std::sync::atomic::{AtomicUsize, Ordering};
    static COUNTER: AtomicUsize = AtomicUsize::new(0);
    let unique = COUNTER.fetch_add(1, Ordering::Relaxed);
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    path.with_file_name(format!(".{name}.{}.{unique}.tmp", std::process::id()))
}
