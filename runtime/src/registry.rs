//! Opening a registry, the folder `tilesmith build` writes or one embedded in the program by
//! `tilesmith-build`, and finding kernels in it by name.

use crate::chooser::Chooser;
use crate::dispatch::{self, Choice, GemmCall, Workspace};
use crate::fatbin::Fatbin;
use crate::gpu::Gpu;
use crate::kernel::{Element, GemmArgs, Kernel};
use crate::plan::{Activation, GemmShape};
use crate::{Error, Result};
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use tilesmith_spec::family_table::FamilyTable;
use tilesmith_spec::manifest::{self, MANIFEST_FILE};
use tilesmith_spec::tuning::{TuningTable, TUNING_DIR};
use tilesmith_spec::Dtype;

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
    /// Each tuning table by its path in the tuning folder (`<GPU>-<SMs>sm.json` for GEMM,
    /// `<family>/<GPU>-<SMs>sm.json` for the others).
    pub tuning: &'static [(&'static str, &'static [u8])],
}

/// The built variants and where their fatbins are. Opening it touches no CUDA.
#[derive(Clone, Debug)]
pub struct Registry {
    /// The folder it was opened from; none for an embedded one.
    dir: Option<PathBuf>,
    kernels: BTreeMap<String, Kernel>,
    /// The tuning tables in `tuning/`, one per device, for [`Registry::gemm`].
    tables: Vec<TuningTable>,
    /// Picks already made, by device, dtype, shape and which operands are unaligned (the
    /// padded strategy moves just those): choosing walks the table and plans candidates,
    /// which costs more host time than a small GEMM takes.
    picks: Arc<Mutex<HashMap<PickKey, Choice>>>,
    /// Each family's chooser, with its tables, for [`Registry::family`].
    families: BTreeMap<String, Chooser>,
}

type PickKey = (String, u32, Dtype, GemmShape, [bool; 3], (Activation, bool, bool, bool, bool, Option<Dtype>, Option<Dtype>, bool));

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
        let tables = read_tables(&dir.join(TUNING_DIR))?;
        let unreadable = |reason: String| Error::RegistryUnreadable { path: dir.join(TUNING_DIR), reason };
        let family_tables = FamilyTable::read_all(&dir.join(TUNING_DIR)).map_err(unreadable)?;
        Registry::new(dir, registry.variants, tables)
            .with_family_tables(family_tables.into_iter().map(|(_, t)| t).collect())
            .map_err(unreadable)
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
        let (mut tables, mut family_tables) = (Vec::new(), Vec::new());
        for (name, bytes) in embedded.tuning {
            let path = origin.join(TUNING_DIR).join(name);
            let text = std::str::from_utf8(bytes).map_err(|err| unreadable(path.clone(), err.to_string()))?;
            // GEMM's tables lie in the tuning folder itself, the other families' in a folder each.
            if name.contains('/') {
                family_tables.push(FamilyTable::parse(text, &path).map_err(|reason| unreadable(path.clone(), reason))?);
            } else {
                tables.push(TuningTable::parse(text, &path).map_err(|reason| unreadable(path.clone(), reason))?);
            }
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
        Registry { dir: None, kernels, tables, picks: Arc::default(), families }
            .with_family_tables(family_tables)
            .map_err(|reason| unreadable(origin.join(TUNING_DIR), reason))
    }

    /// A registry of these built variants, whose fatbins are in `dir`, and tuning tables.
    pub fn new(dir: &Path, variants: Vec<tilesmith_spec::Built>, tables: Vec<TuningTable>) -> Registry {
        let kernels = variants
            .into_iter()
            .map(|built| {
                let fatbin = Fatbin::File(dir.join(&built.fatbin));
                (built.entry.variant.name.clone(), Kernel::new(Arc::new(built), fatbin))
            })
            .collect();
        let families = choosers(&kernels);
        Registry { dir: Some(dir.to_path_buf()), kernels, tables, picks: Arc::default(), families }
    }

    /// The same registry with these family tuning tables, each checked against its family: one
    /// the registry has variants of, the same quantities, variants it has; one table per GPU.
    pub fn with_family_tables(mut self, tables: Vec<FamilyTable>) -> std::result::Result<Registry, String> {
        let mut by_family: BTreeMap<String, Vec<FamilyTable>> = BTreeMap::new();
        for table in tables {
            if !self.families.contains_key(&table.family) {
                return Err(format!(
                    "tuning table {}/{} is of family `{}`, of which the registry has no variant (it has {})",
                    table.family,
                    TuningTable::file_name(&table.device),
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
            self.families.insert(family.clone(), Chooser::new(&family, kernels, tables)?);
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

    /// The tuning tables the registry carries.
    pub fn tables(&self) -> &[TuningTable] {
        &self.tables
    }

    /// What [`Registry::gemm`] would pick for this call, and why, without launching anything.
    pub fn choose_gemm<T: Element, TC: Element, TB: Element>(&self, gpu: &Gpu, args: &GemmArgs<'_, T, TC, TB>) -> Result<Choice> {
        let (epilogue, _sync) = args.epilogue.held(gpu.stream(), T::DTYPE, TB::DTYPE);
        self.choose(gpu, &GemmCall { dtype: T::DTYPE, shape: &args.shape, buffers: args.buffers(gpu), epilogue: &epilogue })
    }

    fn choose(&self, gpu: &Gpu, call: &GemmCall<'_>) -> Result<Choice> {
        dispatch::choose(self.kernels.values(), &self.tables, &gpu.device(), call).map_err(Error::NoVariant)
    }

    /// Enqueues C = A·B with the variant and strategy the dispatcher picks for this GPU, dtype,
    /// layout and shape (see [`dispatch::choose`]); returns the pick. `workspace` holds the
    /// scratch the padded strategy copies unaligned operands into, kept for the next call.
    pub fn gemm<T: Element, TC: Element, TB: Element>(
        &self,
        gpu: &Gpu,
        args: GemmArgs<'_, T, TC, TB>,
        workspace: &mut Workspace,
    ) -> Result<Choice> {
        let buffers = args.buffers(gpu);
        let lds = [args.shape.lda, args.shape.ldb, args.shape.ldc];
        let unaligned = [0, 1, 2].map(|i| dispatch::misaligned(T::DTYPE, lds[i], buffers[i].addr));
        let (epilogue, sync) = args.epilogue.held(gpu.stream(), T::DTYPE, TB::DTYPE);
        drop(sync);
        // What decides which variants take the call: the epilogue's activation, which of α, β,
        // the biases and the scales differ from C = A·B, and the types of B and C.
        let asks = (
            epilogue.activation,
            epilogue.alpha != 1.0,
            epilogue.beta != 0.0,
            epilogue.bias.is_some(),
            epilogue.row_bias.is_some(),
            epilogue.out,
            epilogue.b,
            epilogue.scales != [1.0; 2],
        );
        let key = (gpu.name().to_string(), gpu.sms(), T::DTYPE, args.shape, unaligned, asks);
        let cached = self.picks.lock().unwrap_or_else(|p| p.into_inner()).get(&key).cloned();
        let choice = match cached {
            Some(choice) => choice,
            None => {
                let choice = self.choose(gpu, &GemmCall { dtype: T::DTYPE, shape: &args.shape, buffers, epilogue: &epilogue })?;
                self.picks.lock().unwrap_or_else(|p| p.into_inner()).insert(key, choice.clone());
                choice
            }
        };
        // A cached pick is checked again like any launch: buffers of another length are refused.
        choice.run(gpu, args, workspace)?;
        Ok(choice)
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

/// A chooser per family of these kernels, without tables.
fn choosers(kernels: &BTreeMap<String, Kernel>) -> BTreeMap<String, Chooser> {
    let mut by_family: BTreeMap<String, Vec<Kernel>> = BTreeMap::new();
    for kernel in kernels.values() {
        by_family.entry(kernel.variant().family.clone()).or_default().push(kernel.clone());
    }
    by_family.into_iter().filter_map(|(family, kernels)| Some((family.clone(), Chooser::new(&family, kernels, Vec::new()).ok()?))).collect()
}

/// The registry's tuning tables; a folder that is absent means none; one that cannot be listed,
/// a table that does not read or breaks a rule, or two tables for one device are an error
/// naming the file.
fn read_tables(dir: &Path) -> Result<Vec<TuningTable>> {
    let tables = TuningTable::read_all(dir).map_err(|reason| Error::RegistryUnreadable { path: dir.to_path_buf(), reason })?;
    Ok(tables.into_iter().map(|(_, table)| table).collect())
}
