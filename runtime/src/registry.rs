//! Opening the registry that `cargo xtask build` wrote, and finding kernels in it by name.

use crate::kernel::Kernel;
use crate::{Error, Result};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use tilesmith_spec::manifest::{self, MANIFEST_FILE};

/// Environment variable naming the registry folder.
pub const REGISTRY_VAR: &str = "TILESMITH_REGISTRY";

/// The built variants and where their fatbins are. Opening it touches no CUDA.
#[derive(Clone, Debug)]
pub struct Registry {
    dir: PathBuf,
    kernels: BTreeMap<String, Kernel>,
}

impl Registry {
    /// Opens the registry in `dir` if given, else in `$TILESMITH_REGISTRY` if set, else in this
    /// workspace's `registry/`. A choice made by argument or variable is final: a folder that
    /// is missing or holds no manifest is an error, never a fallback to another registry.
    pub fn open(dir: Option<&Path>) -> Result<Registry> {
        if let Some(dir) = dir {
            return Registry::load(dir);
        }
        if let Some(value) = std::env::var_os(REGISTRY_VAR).filter(|v| !v.is_empty()) {
            let dir = PathBuf::from(value);
            let problem = if !dir.is_dir() {
                Some("which is not a folder")
            } else if !dir.join(MANIFEST_FILE).is_file() {
                Some("which holds no manifest.json: build one with `cargo xtask build`")
            } else {
                None
            };
            return match problem {
                Some(problem) => Err(Error::RegistryVariable { var: REGISTRY_VAR, path: dir, problem }),
                None => Registry::load(&dir),
            };
        }
        Registry::load(&Path::new(env!("CARGO_MANIFEST_DIR")).join("../registry"))
    }

    fn load(dir: &Path) -> Result<Registry> {
        let path = dir.join(MANIFEST_FILE);
        if !path.is_file() {
            return Err(Error::RegistryNotFound { looked: vec![dir.to_path_buf()] });
        }
        let registry: tilesmith_spec::Registry =
            manifest::read(&path).map_err(|err| Error::RegistryUnreadable { path: path.clone(), reason: err.reason })?;
        let kernels = registry
            .variants
            .into_iter()
            .map(|built| {
                let fatbin = dir.join(&built.fatbin);
                (built.entry.variant.name.clone(), Kernel::new(Arc::new(built), fatbin))
            })
            .collect();
        Ok(Registry { dir: dir.to_path_buf(), kernels })
    }

    pub fn dir(&self) -> &Path {
        &self.dir
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
