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
    fn bytes(&self) -> std::io::Result<Vec<u8>> {
        match self {
            Fatbin::File(path) => tilesmith_spec::files::read(path, tilesmith_spec::files::MAX_BINARY_BYTES),
            Fatbin::Embedded { bytes, .. } => Ok(bytes.to_vec()),
        }
    }

    /// Its bytes, where their SHA-256 is the one the registry recorded for `variant`: a file
    /// replaced or an embedding changed since the build is never loaded.
    pub(crate) fn verified_bytes(&self, variant: &str, recorded: &str) -> Result<Vec<u8>, String> {
        use sha2::{Digest, Sha256};
        let bytes = self.bytes().map_err(|err| err.to_string())?;
        let hash = format!("{:x}", Sha256::digest(&bytes));
        if hash != recorded {
            return Err(format!(
                "it is not the fatbin the registry recorded for `{variant}` (SHA-256 {hash}, recorded {recorded}): rebuild with `tilesmith build`"
            ));
        }
        Ok(bytes)
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_recorded_bytes_are_loaded() {
        let fatbin = Fatbin::Embedded { name: "k.fatbin", bytes: b"fatbin bytes" };
        let recorded = "0f3bc6ff0bbcf4e1dd9ad5bb9e6fe94e95b3c5a4f8a0e0a2b4e8e1a6f3e2a1c0";
        let err = fatbin.verified_bytes("k", recorded).unwrap_err();
        assert!(err.contains("not the fatbin the registry recorded for `k`"), "{err}");
        use sha2::{Digest, Sha256};
        let right = format!("{:x}", Sha256::digest(b"fatbin bytes"));
        assert_eq!(fatbin.verified_bytes("k", &right).unwrap(), b"fatbin bytes");
        let missing = Fatbin::File("/nonexistent/k.fatbin".into());
        assert!(missing.verified_bytes("k", &right).is_err());
    }
}
