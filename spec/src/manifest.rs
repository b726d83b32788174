//! The two manifests: `generated/manifest.json`, written by `tilesmith gen` (what each
//! variant needs at launch), and `manifest.json` in the registry, written by
//! `tilesmith build` (that plus what the compiler made of it). Both are read through
//! [`read`], which checks their format.

use crate::family::Family;
use crate::launch::LaunchSpec;
use crate::variant::Variant;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Bumped whenever a manifest's shape changes, so readers refuse what they cannot read.
pub const FORMAT: u32 = 3;

/// File name of both manifests, in `generated/` and in the registry.
pub const MANIFEST_FILE: &str = "manifest.json";

/// `generated/manifest.json`: one entry per variant, in `variants.toml` order.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Manifest {
    pub format: u32,
    pub variants: Vec<Entry>,
}

/// What the runtime needs to know to launch one variant safely.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Entry {
    #[serde(flatten)]
    pub variant: Variant,
    /// Its family's declaration, as variants.toml states it: every entry carries the interface
    /// the runtime checks its calls against.
    pub declaration: Family,
    /// The template it was rendered from, relative to `kernel-templates/`.
    pub template: String,
    /// Its rendered source, relative to the workspace.
    pub source: String,
    /// SHA-256 of the source as gen wrote it: a build compiles exactly those bytes, and refuses
    /// a source that no longer has them. Empty in manifests of older tilesmiths.
    #[serde(default)]
    pub source_sha256: String,
    /// The `extern "C"` kernel symbol.
    pub entry: String,
    /// Block, grid, shared memory and the kernel's parameter list, as the template declares them.
    pub launch: LaunchSpec,
    pub requires: Requirements,
    pub targets: Targets,
    /// Its backend's declared `gflops_per_sm`, for the dispatcher's heuristic.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gflops_per_sm: Option<u32>,
}

/// The assumptions a variant makes of its arguments, which the runtime checks before launch.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Requirements {
    /// Quantities that must be multiples of these: an unchecked variant's tile edges, and what
    /// its template asks for.
    pub multiples: BTreeMap<String, u32>,
    /// Leading dimensions must be multiples of this many elements.
    pub ld_multiple: u32,
    /// Base pointers must be aligned to this many bytes.
    pub ptr_align_bytes: u32,
}

/// What a fatbin holds code for.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Targets {
    /// SASS architectures (`sm_80`, `sm_90`).
    pub sass: Vec<String>,
    /// PTX virtual architecture (`compute_80`), JIT-compiled on newer GPUs.
    pub ptx: String,
}

/// The registry's `manifest.json`: the built variants.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Registry {
    pub format: u32,
    /// The root folder of the project it was built from, as the build saw it: commands run
    /// inside one project refuse another's registry.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub project: Option<PathBuf>,
    pub variants: Vec<Built>,
}

/// One compiled variant. The registry keeps one beside each fatbin (`<name>.json`, see
/// [`record_file`]) and gathers them all into its `manifest.json`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Built {
    #[serde(flatten)]
    pub entry: Entry,
    /// File name of its fatbin inside the registry.
    pub fatbin: String,
    /// SHA-256 over source, flags and compiler version; a rebuild is skipped when it matches.
    pub hash: String,
    /// SHA-256 of the fatbin as written; a fatbin that no longer matches is rebuilt.
    pub fatbin_sha256: String,
    /// `nvcc --version`'s release line of the compiler that built it.
    pub compiler: String,
    /// ptxas's report, one per SASS architecture.
    pub resources: Vec<Resources>,
}

/// ptxas's resource report for one architecture.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Resources {
    pub arch: String,
    pub registers: u32,
    pub static_smem_bytes: u32,
    pub stack_bytes: u32,
    pub spill_store_bytes: u32,
    pub spill_load_bytes: u32,
}

impl Requirements {
    /// Multiples of at least 1 and an alignment that is a power of two.
    pub fn check(&self, family: &Family) -> Result<(), String> {
        if let Some((q, _)) = self.multiples.iter().find(|(_, m)| **m == 0) {
            return Err(format!("requires.multiples: `{q}` has a multiple of 0; multiples are at least 1"));
        }
        if let Some(q) = self.multiples.keys().find(|q| !family.all_quantities().contains(&q.as_str())) {
            return Err(format!("requires.multiples names `{q}`, which is not a quantity of the family"));
        }
        if self.ld_multiple == 0 {
            return Err("ld_multiple must be at least 1".into());
        }
        if !self.ptr_align_bytes.is_power_of_two() {
            return Err(format!("ptr_align_bytes must be a power of two, got {}", self.ptr_align_bytes));
        }
        Ok(())
    }
}

impl Entry {
    /// Whether it is one of its family's reference variants: the trials' yardstick, never tried
    /// itself nor picked by a dispatcher.
    pub fn is_reference(&self) -> bool {
        self.declaration.reference.backend.as_deref() == Some(self.variant.backend.as_str())
    }

    /// The element type of its operand `name` (C of an fp8 GEMM: its `out` axis's type); none
    /// where its family has no such operand.
    pub fn operand_dtype(&self, name: &str) -> Option<crate::Dtype> {
        self.declaration.operand(name).map(|decl| self.declaration.operand_dtype(&self.variant, decl))
    }

    /// Every rule a manifest entry meets: the variant's ([`Variant::check`](crate::Variant::check)), its entry symbol
    /// and source named after it, its requirements and its launch contract
    /// ([`LaunchSpec::check`]). Readers of manifests refuse an entry that breaks one, so that
    /// no launch is planned from nonsense.
    pub fn check(&self) -> Result<(), String> {
        let name = &self.variant.name;
        if let Some(problem) = self.declaration.check().into_iter().next() {
            return Err(format!("its family's declaration: {problem}"));
        }
        self.variant.check(&self.declaration)?;
        if self.entry != *name {
            return Err(format!("its entry symbol `{}` is not its name", self.entry));
        }
        if self.source != format!("generated/{name}.cu") {
            return Err(format!("its source `{}` is not generated/{name}.cu", self.source));
        }
        let hex = self.source_sha256.len() == 64 && self.source_sha256.bytes().all(|b| b.is_ascii_hexdigit());
        if !self.source_sha256.is_empty() && !hex {
            return Err(format!("its source_sha256 `{}` is not a SHA-256 in hex", self.source_sha256));
        }
        self.requires.check(&self.declaration)?;
        self.launch.check(&self.variant, &self.declaration, &self.targets.sass)
    }
}

/// What [`read`] checks of a manifest once it parses.
pub trait Check {
    fn check(&self) -> Result<(), String>;
}

fn check_entries<'a>(entries: impl Iterator<Item = &'a Entry>) -> Result<(), String> {
    let mut names = std::collections::BTreeSet::new();
    for entry in entries {
        let name = &entry.variant.name;
        entry.check().map_err(|rule| format!("variant `{name}`: {rule}"))?;
        if !names.insert(name) {
            return Err(format!("variant `{name}` is listed twice"));
        }
    }
    Ok(())
}

impl Check for Manifest {
    fn check(&self) -> Result<(), String> {
        check_entries(self.variants.iter())
    }
}

impl Check for Built {
    /// An entry that checks, whose fatbin is the one named after it.
    fn check(&self) -> Result<(), String> {
        let name = &self.entry.variant.name;
        self.entry.check().map_err(|rule| format!("variant `{name}`: {rule}"))?;
        if self.fatbin != fatbin_file(name) {
            return Err(format!("variant `{name}`: its fatbin `{}` is not {}", self.fatbin, fatbin_file(name)));
        }
        Ok(())
    }
}

impl Check for Registry {
    fn check(&self) -> Result<(), String> {
        self.variants.iter().try_for_each(Check::check)?;
        check_entries(self.variants.iter().map(|b| &b.entry))
    }
}

impl Resources {
    pub fn spills(&self) -> bool {
        self.spill_store_bytes > 0 || self.spill_load_bytes > 0
    }
}

impl Built {
    pub fn spills(&self) -> bool {
        self.resources.iter().any(Resources::spills)
    }
}

/// A variant's fatbin file name inside the registry.
pub fn fatbin_file(variant: &str) -> String {
    format!("{variant}.fatbin")
}

/// A variant's build record file name inside the registry.
pub fn record_file(variant: &str) -> String {
    format!("{variant}.json")
}

/// A manifest or record that cannot be used, with the file and the reason.
#[derive(Debug, thiserror::Error)]
#[error("{}: {reason}", path.display())]
pub struct ReadError {
    pub path: PathBuf,
    pub reason: String,
    /// The file exists but does not parse, or has another format: not merely absent.
    pub corrupt: bool,
}

/// Reads a manifest, refusing one that does not parse, has another format or breaks a rule of
/// [`Check`].
pub fn read<T: DeserializeOwned + Check>(path: &Path) -> Result<T, ReadError> {
    let text =
        crate::files::read_to_string(path).map_err(|err| ReadError { path: path.into(), reason: err.to_string(), corrupt: false })?;
    parse(&text, path)
}

/// Parses a manifest's text as [`read`] does; `path` names it in errors (for an embedded
/// registry, where it was built).
pub fn parse<T: DeserializeOwned + Check>(text: &str, path: &Path) -> Result<T, ReadError> {
    let corrupt = |reason: String| ReadError { path: path.into(), reason, corrupt: true };
    #[derive(Deserialize)]
    struct Head {
        format: u32,
    }
    let head: Head = serde_json::from_str(text)
        .map_err(|err| corrupt(format!("does not parse as a tilesmith manifest ({})", crate::config::plain_words(&err.to_string()))))?;
    if head.format != FORMAT {
        return Err(corrupt(format!("has format {}, but this version of tilesmith reads format {FORMAT}", head.format)));
    }
    let manifest: T = serde_json::from_str(text)
        .map_err(|err| corrupt(format!("does not parse as a tilesmith manifest ({})", crate::config::plain_words(&err.to_string()))))?;
    manifest.check().map_err(corrupt)?;
    Ok(manifest)
}
