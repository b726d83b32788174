//! Where a tilesmith project keeps its files.

use std::path::{Path, PathBuf};

/// The folders and files one `xtask` run works on.
#[derive(Clone, Debug)]
pub struct Project {
    pub root: PathBuf,
}

impl Project {
    /// The tilesmith workspace this xtask was built in.
    pub fn workspace() -> Project {
        let manifest_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
        Project { root: manifest_dir.parent().unwrap_or(manifest_dir).to_path_buf() }
    }

    pub fn variants_file(&self) -> PathBuf {
        self.root.join("variants.toml")
    }

    pub fn templates_dir(&self) -> PathBuf {
        self.root.join("kernel-templates")
    }

    pub fn generated_dir(&self) -> PathBuf {
        self.root.join("generated")
    }

    pub fn registry_dir(&self) -> PathBuf {
        self.root.join("registry")
    }

    /// A path relative to the root, for messages and manifests.
    pub fn relative(&self, path: &Path) -> String {
        path.strip_prefix(&self.root).unwrap_or(path).display().to_string()
    }
}

/// Writes `contents` to `path` through a temporary file and a rename, so that readers never see
/// a partial file; does nothing when the file already holds exactly `contents`.
pub fn write_atomic(path: &Path, contents: &[u8]) -> std::io::Result<bool> {
    if std::fs::read(path).is_ok_and(|existing| existing == contents) {
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

/// A name beside `path` that no other process or thread uses.
pub fn temporary_sibling(path: &Path) -> PathBuf {
    use std::sync::atomic::{AtomicUsize, Ordering};
    static COUNTER: AtomicUsize = AtomicUsize::new(0);
    let unique = COUNTER.fetch_add(1, Ordering::Relaxed);
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    path.with_file_name(format!(".{name}.{}.{unique}.tmp", std::process::id()))
}
