//! Opening the registry that `cargo xtask build` wrote, and finding kernels in it by name.

use crate::kernel::Kernel;
use crate::{Error, Result};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use tilesmith_spec::manifest::{FORMAT, MANIFEST_FILE};

/// Environment variable naming the registry folder.
pub const REGISTRY_VAR: &str = "TILESMITH_REGISTRY";

/// The built variants and where their fatbins are. Opening it touches no CUDA.
#[derive(Clone, Debug)]
pub struct Registry {
    dir: PathBuf,
    compiler: String,
    kernels: BTreeMap<String, Kernel>,
}

impl Registry {
    /// Opens the registry in `dir` if given, else in `$TILESMITH_REGISTRY`, else in this
    /// workspace's `registry/`.
    pub fn open(dir: Option<&Path>) -> Result<Registry> {
        // An explicit choice is final: falling back would load kernels the caller did not ask for.
        let candidates: Vec<PathBuf> = match dir {
            Some(dir) => vec![dir.to_path_buf()],
            None => std::env::var_os(REGISTRY_VAR)
                .filter(|v| !v.is_empty())
                .map(PathBuf::from)
                .into_iter()
                .chain([Path::new(env!("CARGO_MANIFEST_DIR")).join("../registry")])
                .collect(),
        };
        match candidates.iter().find(|candidate| candidate.join(MANIFEST_FILE).is_file()) {
            Some(found) => Registry::load(found),
            None => Err(Error::RegistryNotFound { looked: candidates }),
        }
    }

    fn load(dir: &Path) -> Result<Registry> {
        let path = dir.join(MANIFEST_FILE);
        let unreadable = |reason: String| Error::RegistryUnreadable { path: path.clone(), reason };
        let text = std::fs::read_to_string(&path).map_err(|err| unreadable(err.to_string()))?;
        let registry: tilesmith_spec::Registry = serde_json::from_str(&text).map_err(|err| unreadable(err.to_string()))?;
        if registry.format != FORMAT {
            return Err(unreadable(format!("format {} is not the {FORMAT} this runtime reads; rebuild with `cargo xtask build`", registry.format)));
        }
        let kernels = registry
            .variants
            .into_iter()
            .map(|built| {
                let fatbin = dir.join(&built.fatbin);
                (built.entry.variant.name.clone(), Kernel::new(Arc::new(built), fatbin))
            })
            .collect();
        Ok(Registry { dir: dir.to_path_buf(), compiler: registry.compiler, kernels })
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// nvcc's release line for the compiler that built the registry.
    pub fn compiler(&self) -> &str {
        &self.compiler
    }

    /// The kernel of that name; an unknown name gets an error listing the closest ones.
    pub fn kernel(&self, name: &str) -> Result<Kernel> {
        self.kernels.get(name).cloned().ok_or_else(|| Error::UnknownKernel { name: name.to_string(), closest: self.closest(name) })
    }

    /// Every kernel, in manifest order of names.
    pub fn kernels(&self) -> impl Iterator<Item = &Kernel> {
        self.kernels.values()
    }

    fn closest(&self, name: &str) -> Vec<String> {
        let mut scored: Vec<(f64, &String)> =
            self.kernels.keys().map(|known| (strsim::jaro_winkler(name, known), known)).filter(|(score, _)| *score > 0.7).collect();
        scored.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(b.1)));
        scored.into_iter().take(3).map(|(_, known)| known.clone()).collect()
    }
}
