//! Opening a registry, the folder `tilesmith build` writes or one embedded in the program by
//! `tilesmith-build`, and finding kernels in it by name.

use crate::chooser::{policy_of, Chooser};
use crate::extensions::Extensions;
use crate::fatbin::Fatbin;
use crate::kernel::Kernel;
use crate::{Error, Result};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use tilesmith_spec::family_table::FamilyTable;
use tilesmith_spec::manifest::{self, MANIFEST_FILE};
use tilesmith_spec::tuning::{self, TUNING_DIR};

/// Environment variable naming the registry folder.
pub const REGISTRY_VAR: &str = "TILESMITH_REGISTRY";

/// A registry built into the program: what `tilesmith-build` writes into a crate's `OUT_DIR`
/// and [`include_registry!`](crate::include_registry) includes, for [`Registry::embedded`].
#[derive(Debug)]
pub struct Embedded {
    /// The project it was built from, for messages.
    pub project: &'static str,
    /// The registry's manifest.json.
    pub manifest: &'static [u8],
    /// Each fatbin by file name.
    pub fatbins: &'static [(&'static str, &'static [u8])],
    /// Each tuning table by its path in the tuning folder (`<family>/<GPU>-<SMs>sm.json`).
    pub tuning: &'static [(&'static str, &'static [u8])],
}

/// The built variants and where their fatbins are. Opening it touches no CUDA.
#[derive(Clone, Debug)]
pub struct Registry {
    /// The folder it was opened from; none for an embedded one.
    dir: Option<PathBuf>,
    kernels: BTreeMap<String, Kernel>,
    /// Each family's chooser, with its tables (which plug-ins read too), for [`Registry::family`].
    families: BTreeMap<String, Chooser>,
    /// What plug-ins keep beside it (their parsed tables, their picks), shared by the clones.
    extensions: Arc<Extensions>,
}

impl Registry {
    /// Opens the registry in `dir` if given, else in `$TILESMITH_REGISTRY` if set; with neither,
    /// an error that says so (never a registry found from where the runtime was compiled). A
    /// choice made by argument or variable is final: a folder that is missing or holds no
    /// manifest is an error, never a fallback to another registry.
    pub fn open(dir: Option<&Path>) -> Result<Registry> {
        if let Some(dir) = dir {
            return Registry::load(dir);
        }
        if let Some(value) = std::env::var_os(REGISTRY_VAR).filter(|v| !v.is_empty()) {
            let dir = PathBuf::from(value);
            let problem = if !dir.is_dir() {
                Some("which is not a folder")
            } else if !dir.join(MANIFEST_FILE).is_file() {
                Some("which holds no manifest.json: build one with `tilesmith build`")
            } else {
                None
            };
            return match problem {
                Some(problem) => Err(Error::RegistryVariable { var: REGISTRY_VAR, path: dir, problem }),
                None => Registry::load(&dir),
            };
        }
        Err(Error::NoRegistryGiven { var: REGISTRY_VAR })
    }

    fn load(dir: &Path) -> Result<Registry> {
        let path = dir.join(MANIFEST_FILE);
        if !path.is_file() {
            return Err(Error::RegistryNotFound { looked: vec![dir.to_path_buf()] });
        }
        let registry: tilesmith_spec::Registry =
            manifest::read(&path).map_err(|err| Error::RegistryUnreadable { path: path.clone(), reason: err.reason })?;
        let unreadable = |reason: String| Error::RegistryUnreadable { path: dir.join(TUNING_DIR), reason };
        let family_tables = FamilyTable::read_all(&dir.join(TUNING_DIR)).map_err(unreadable)?;
        Registry::new(dir, registry.variants).with_family_tables(family_tables.into_iter().map(|(_, t)| t).collect()).map_err(unreadable)
    }

    /// The registry built into this program (see [`Embedded`]); it needs no file at run time.
    /// A manifest, fatbin or table that does not read is an error naming the project it was
    /// built from; a kernel built for another GPU is refused when launched, naming both.
    pub fn embedded(embedded: &'static Embedded) -> Result<Registry> {
        let origin = PathBuf::from(format!("the registry embedded from {}", embedded.project));
        let unreadable = |path: PathBuf, reason: String| Error::RegistryUnreadable { path, reason };
        let text = std::str::from_utf8(embedded.manifest).map_err(|err| unreadable(origin.join(MANIFEST_FILE), err.to_string()))?;
        let registry: tilesmith_spec::Registry =
            manifest::parse(text, &origin.join(MANIFEST_FILE)).map_err(|err| unreadable(err.path, err.reason))?;
        let mut family_tables = Vec::new();
        for (name, bytes) in embedded.tuning {
            let path = origin.join(TUNING_DIR).join(name);
            let text = std::str::from_utf8(bytes).map_err(|err| unreadable(path.clone(), err.to_string()))?;
            family_tables.push(FamilyTable::parse(text, &path).map_err(|reason| unreadable(path.clone(), reason))?);
        }
        let mut kernels = BTreeMap::new();
        for built in registry.variants {
            let Some((name, bytes)) = embedded.fatbins.iter().find(|(name, _)| *name == built.fatbin) else {
                return Err(unreadable(origin.join(&built.fatbin), "the manifest lists it, but it was not embedded".into()));
            };
            let fatbin = Fatbin::Embedded { name, bytes };
            kernels.insert(built.entry.variant.name.clone(), Kernel::new(Arc::new(built), fatbin));
        }
        let families = choosers(&kernels);
        let registry = Registry { dir: None, kernels, families, extensions: Arc::default() };
        registry.with_family_tables(family_tables).map_err(|reason| unreadable(origin.join(TUNING_DIR), reason))
    }

    /// A registry of these built variants, whose fatbins are in `dir`, without tables.
    pub fn new(dir: &Path, variants: Vec<tilesmith_spec::Built>) -> Registry {
        let kernels = variants
            .into_iter()
            .map(|built| {
                let fatbin = Fatbin::File(dir.join(&built.fatbin));
                (built.entry.variant.name.clone(), Kernel::new(Arc::new(built), fatbin))
            })
            .collect();
        let families = choosers(&kernels);
        Registry { dir: Some(dir.to_path_buf()), kernels, families, extensions: Arc::default() }
    }

    /// The value of type `T` that a plug-in keeps beside this registry, made by `init` on first
    /// use (see [`Extensions`]); an `init` that fails is tried again on the next call.
    pub fn extension<T: std::any::Any + Send + Sync, E>(
        &self,
        init: impl FnOnce() -> std::result::Result<T, E>,
    ) -> std::result::Result<Arc<T>, E> {
        self.extensions.get_or_try_init(init)
    }

    /// The same registry with these tuning tables in place of all its own (a family none of
    /// them is of has none), each checked against its family: one the registry has variants
    /// of, the same quantities, variants it has; one table per GPU. What plug-ins kept from the
    /// tables it had is dropped.
    pub fn with_family_tables(mut self, tables: Vec<FamilyTable>) -> std::result::Result<Registry, String> {
        self.extensions = Arc::default();
        self.families = choosers(&self.kernels);
        let mut by_family: BTreeMap<String, Vec<FamilyTable>> = BTreeMap::new();
        for table in tables {
            if !self.families.contains_key(&table.family) {
                return Err(format!(
                    "tuning table {}/{} is of family `{}`, of which the registry has no variant (it has {})",
                    table.family,
                    tuning::file_name(&table.device),
                    table.family,
                    self.families.keys().cloned().collect::<Vec<_>>().join(", ")
                ));
            }
            let tables = by_family.entry(table.family.clone()).or_default();
            if tables.iter().any(|t| t.device.is(&table.device)) {
                return Err(format!("two tuning tables of family {} are for {}; keep one", table.family, table.device));
            }
            tables.push(table);
        }
        for (family, tables) in by_family {
            let kernels = self.kernels.values().filter(|k| k.variant().family == family).cloned().collect();
            let policy = policy_of(&family, &self.kernels.values().cloned().collect::<Vec<_>>());
            self.families.insert(family.clone(), Chooser::new(&family, kernels, tables, policy)?);
        }
        Ok(self)
    }

    /// The chooser of a family: calls bound by its declared names run its fastest variant for
    /// the call (see [`Chooser`]).
    pub fn family(&self, name: &str) -> Result<&Chooser> {
        self.families
            .get(name)
            .ok_or_else(|| Error::UnknownFamily { name: name.to_string(), known: self.families.keys().cloned().collect() })
    }

    /// Every family's chooser, by name.
    pub fn families(&self) -> impl Iterator<Item = &Chooser> {
        self.families.values()
    }

    /// The folder it was opened from; `None` for an embedded registry.
    pub fn dir(&self) -> Option<&Path> {
        self.dir.as_deref()
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

/// A chooser per family of these kernels, without tables, with the family's policy where a
/// linked plug-in registered one.
fn choosers(kernels: &BTreeMap<String, Kernel>) -> BTreeMap<String, Chooser> {
    let every: Vec<Kernel> = kernels.values().cloned().collect();
    let mut by_family: BTreeMap<String, Vec<Kernel>> = BTreeMap::new();
    for kernel in &every {
        by_family.entry(kernel.variant().family.clone()).or_default().push(kernel.clone());
    }
    by_family
        .into_iter()
        .filter_map(|(family, kernels)| {
            let policy = policy_of(&family, &every);
            Some((family.clone(), Chooser::new(&family, kernels, Vec::new(), policy).ok()?))
        })
        .collect()
}
