//! Reading the files tilesmith is given, bounded: only regular files (never a FIFO, which would
//! block, or a device such as /dev/zero, which never ends), and at most a size per kind; and
//! where tilesmith keeps its per-user files.

use std::io::{Error, ErrorKind, Read};
use std::path::{Path, PathBuf};

/// Environment variable naming tilesmith's per-user folder.
pub const HOME_VAR: &str = "TILESMITH_HOME";

/// tilesmith's per-user folder (the toolchain, first-call timings): `$TILESMITH_HOME`, else
/// `tilesmith/` in the platform's cache folder (`$XDG_CACHE_HOME` or `~/.cache` on Linux,
/// `~/Library/Caches` on macOS); none where the platform has no cache folder.
pub fn user_folder() -> Option<PathBuf> {
    match std::env::var_os(HOME_VAR).filter(|v| !v.is_empty()) {
        Some(home) => Some(PathBuf::from(home)),
        None => dirs::cache_dir().map(|cache| cache.join("tilesmith")),
    }
}

/// The largest text file tilesmith reads: variants.toml, a template, a manifest, a tuning table,
/// a build or cache record, a perf record, bench.json.
pub const MAX_TEXT_BYTES: u64 = 256 << 20;
/// The largest binary file tilesmith reads: a fatbin, or an object nvcc wrote.
pub const MAX_BINARY_BYTES: u64 = 1 << 30;

/// The bytes of the regular file at `path`, refused past `limit` bytes.
pub fn read(path: &Path, limit: u64) -> std::io::Result<Vec<u8>> {
    let kind = std::fs::metadata(path)?.file_type();
    if !kind.is_file() {
        let what = if kind.is_dir() { "a folder" } else { "not a regular file (a FIFO, socket or device)" };
        return Err(Error::new(ErrorKind::InvalidInput, format!("is {what}; tilesmith reads regular files only")));
    }
    let mut bytes = Vec::new();
    std::fs::File::open(path)?.take(limit + 1).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > limit {
        return Err(Error::new(ErrorKind::InvalidData, format!("is larger than the limit of {} MiB for this kind of file", limit >> 20)));
    }
    Ok(bytes)
}

/// The text of the regular file at `path`, at most `MAX_TEXT_BYTES`.
pub fn read_to_string(path: &Path) -> std::io::Result<String> {
    String::from_utf8(read(path, MAX_TEXT_BYTES)?).map_err(|_| Error::new(ErrorKind::InvalidData, "is not UTF-8 text"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn special_files_and_large_ones_are_refused() {
        #[cfg(unix)]
        {
            let zero = read_to_string(Path::new("/dev/zero")).unwrap_err().to_string();
            assert!(zero.contains("not a regular file"), "{zero}");
            let dir = tempfile::tempdir().unwrap();
            let fifo = dir.path().join("fifo");
            assert!(std::process::Command::new("mkfifo").arg(&fifo).status().unwrap().success());
            // Refused without opening it, which would block until a writer comes.
            assert!(read_to_string(&fifo).unwrap_err().to_string().contains("not a regular file"));
        }
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("big");
        std::fs::write(&path, vec![b'x'; 2 << 20]).unwrap();
        assert!(read(&path, 1 << 20).unwrap_err().to_string().contains("limit of 1 MiB"));
        assert_eq!(read(&path, 2 << 20).unwrap().len(), 2 << 20);
        assert!(read_to_string(dir.path()).unwrap_err().to_string().contains("a folder"));
    }
}
