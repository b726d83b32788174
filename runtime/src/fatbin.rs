//! Where a kernel's code is.

use std::path::PathBuf;

/// Where a kernel's fatbin is: a file of a registry folder, or bytes built into the program
/// (an embedded registry).
#[derive(Clone, Debug)]
pub enum Fatbin {
    File(PathBuf),
    Embedded { name: &'static str, bytes: &'static [u8] },
}

impl Fatbin {
    pub(crate) fn bytes(&self) -> std::io::Result<Vec<u8>> {
        match self {
            Fatbin::File(path) => tilesmith_spec::files::read(path, tilesmith_spec::files::MAX_BINARY_BYTES),
            Fatbin::Embedded { bytes, .. } => Ok(bytes.to_vec()),
        }
    }
}

impl std::fmt::Display for Fatbin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Fatbin::File(path) => write!(f, "{}", path.display()),
            Fatbin::Embedded { name, .. } => write!(f, "{name} (embedded)"),
        }
    }
}
