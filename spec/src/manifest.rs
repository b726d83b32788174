//! The two manifests: `generated/manifest.json`, written by `tilesmith gen` (what each
//! variant needs at launch), and `manifest.json` in the registry, written by
//! `tilesmith build` (that plus what the compiler made of it). Both are read through
//! [`read`], which checks their format.

use crate::family::Family;
use crate::launch::LaunchSpec;
use crate::variant::Variant;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use std::cell::RefCell;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

/// Bumped whenever a manifest's shape changes, so readers refuse what they cannot read.
/// Format 4 states each family's declaration once; format 3, a declaration per entry, still reads.
pub const FORMAT: u32 = 4;
/// The oldest format this tilesmith reads.
const OLDEST_READ: u32 = 3;

/// File name of both manifests, in `generated/` and in the registry.
pub const MANIFEST_FILE: &str = "manifest.json";

/// `generated/manifest.json`: one entry per variant, in `variants.toml` order. Written with
/// each family's declaration once ([`fold`]).
#[derive(Clone, Debug, PartialEq)]
pub struct Manifest {
    pub format: u32,
    pub variants: Vec<Entry>,
}

impl Serialize for Manifest {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let entries: Vec<&Entry> = self.variants.iter().collect();
        let (families, variants) = folded(&entries, |e| e).map_err(serde::ser::Error::custom)?;
        #[derive(Serialize)]
        struct Fields {
            families: BTreeMap<String, serde_json::Value>,
            format: u32,
            variants: Vec<serde_json::Value>,
        }
        Fields { families, format: self.format, variants }.serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for Manifest {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        struct Fields {
            format: u32,
            #[serde(default)]
            families: BTreeMap<String, Arc<Family>>,
            variants: Vec<serde_json::Value>,
        }
        let fields = Fields::deserialize(deserializer)?;
        let variants = unfolded(&fields.families, fields.variants).map_err(serde::de::Error::custom)?;
        Ok(Manifest { format: fields.format, variants })
    }
}

thread_local! {
    /// While an entry of a manifest is written: its family's declaration as the manifest
    /// states it under `families`, which the entry then leaves out. While one is read: that
    /// declaration, which an entry without its own takes.
    static STATED: RefCell<Option<Arc<Family>>> = const { RefCell::new(None) };
}

/// Runs `f` with `stated` as the declaration entries leave out or take ([`STATED`]).
fn with_stated<T>(stated: Option<&Arc<Family>>, f: impl FnOnce() -> T) -> T {
    STATED.with(|s| *s.borrow_mut() = stated.cloned());
    let result = f();
    STATED.with(|s| *s.borrow_mut() = None);
    result
}

/// Whether an entry being written leaves its declaration out: it is its family's stated one.
fn is_stated(declaration: &Arc<Family>) -> bool {
    STATED.with(|s| s.borrow().as_ref().is_some_and(|stated| Arc::ptr_eq(stated, declaration) || **stated == **declaration))
}

/// The declaration of an entry read without one: its family's stated one in a manifest, else
/// [`unstated`], which [`Entry::check`] refuses.
fn stated_or_unstated() -> Arc<Family> {
    STATED.with(|s| s.borrow().clone()).unwrap_or_else(unstated)
}

/// The declaration of an entry that states none and has no manifest's to take.
fn unstated() -> Arc<Family> {
    static UNSTATED: OnceLock<Arc<Family>> = OnceLock::new();
    Arc::clone(UNSTATED.get_or_init(|| Arc::new(Family::unstated())))
}

/// Entries written with each family's declaration once, under `families` (the first entry's),
/// and left out of the entries that have it; an entry built from an older declaration keeps
/// its own. Each entry's JSON is made alone, so a large declaration is never copied per entry.
#[allow(clippy::type_complexity)]
fn folded<T: Serialize>(
    items: &[&T],
    entry: impl Fn(&T) -> &Entry,
) -> Result<(BTreeMap<String, serde_json::Value>, Vec<serde_json::Value>), serde_json::Error> {
    let mut stated: BTreeMap<&str, &Arc<Family>> = BTreeMap::new();
    for item in items {
        let e = entry(item);
        stated.entry(e.variant.family.as_str()).or_insert(&e.declaration);
    }
    let variants = items
        .iter()
        .map(|item| with_stated(stated.get(entry(item).variant.family.as_str()).copied(), || serde_json::to_value(item)))
        .collect::<Result<Vec<_>, _>>()?;
    let families = stated.into_iter().map(|(name, d)| Ok((name.to_string(), serde_json::to_value(&**d)?))).collect::<Result<_, _>>()?;
    Ok((families, variants))
}

/// The entries of a manifest's JSON, each without a declaration of its own given its family's
/// stated one (shared, not copied); a manifest written before declarations were folded (no
/// `families`) reads as it is.
fn unfolded<T: DeserializeOwned>(families: &BTreeMap<String, Arc<Family>>, values: Vec<serde_json::Value>) -> Result<Vec<T>, String> {
    values
        .into_iter()
        .map(|value| {
            let family = value.get("family").and_then(serde_json::Value::as_str).unwrap_or_default().to_string();
            let stated = families.get(&family);
            if value.get("declaration").is_none() && stated.is_none() {
                return Err(format!("variant of family `{family}` has no declaration, and `families` states none for it"));
            }
            with_stated(stated, || serde_json::from_value(value)).map_err(|err| err.to_string())
        })
        .collect()
}

/// What the runtime needs to know to launch one variant safely.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Entry {
    #[serde(flatten)]
    pub variant: Variant,
    /// Its family's declaration, as variants.toml states it: every entry carries the interface
    /// the runtime checks its calls against. Shared by the entries of a family (one copy in
    /// memory and in a manifest, however large).
    #[serde(default = "stated_or_unstated", skip_serializing_if = "is_stated")]
    pub declaration: Arc<Family>,
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
    /// Its backend's declared `cost_bytes`, for the chooser's cost model.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost_bytes: Option<crate::Expr>,
    /// Its backend's declared `bytes_in_flight` (a thread's), for the chooser's cost model.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bytes_in_flight: Option<crate::Expr>,
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
    /// Bytes the start of these operands must be aligned to, beyond `ptr_align_bytes`: a
    /// template's per-operand rule (16-byte vectors of x, element loads of an index operand).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub operand_align_bytes: BTreeMap<String, u32>,
    /// Rules of this variant's calls beyond its family's (a head size it was built for, a mask
    /// it cannot apply to every shape): a template's `rules = [{ holds, says }]`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rules: Vec<crate::Rule>,
}

/// What a fatbin holds code for.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Targets {
    /// SASS architectures (`sm_80`, `sm_90`).
    pub sass: Vec<String>,
    /// PTX virtual architecture (`compute_80`), JIT-compiled on newer GPUs.
    pub ptx: String,
}

/// The registry's `manifest.json`: the built variants, each family's declaration stated once.
#[derive(Clone, Debug, PartialEq)]
pub struct Registry {
    pub format: u32,
    /// The root folder of the project it was built from, as the build saw it: commands run
    /// inside one project refuse another's registry.
    pub project: Option<PathBuf>,
    pub variants: Vec<Built>,
}

impl Serialize for Registry {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let built: Vec<&Built> = self.variants.iter().collect();
        let (families, variants) = folded(&built, |b| &b.entry).map_err(serde::ser::Error::custom)?;
        #[derive(Serialize)]
        struct Fields<'a> {
            families: BTreeMap<String, serde_json::Value>,
            format: u32,
            #[serde(skip_serializing_if = "Option::is_none")]
            project: Option<&'a PathBuf>,
            variants: Vec<serde_json::Value>,
        }
        Fields { families, format: self.format, project: self.project.as_ref(), variants }.serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for Registry {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        struct Fields {
            format: u32,
            #[serde(default)]
            project: Option<PathBuf>,
            #[serde(default)]
            families: BTreeMap<String, Arc<Family>>,
            variants: Vec<serde_json::Value>,
        }
        let fields = Fields::deserialize(deserializer)?;
        let variants = unfolded(&fields.families, fields.variants).map_err(serde::de::Error::custom)?;
        Ok(Registry { format: fields.format, project: fields.project, variants })
    }
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
        for (operand, &bytes) in &self.operand_align_bytes {
            if family.operand(operand).is_none() {
                return Err(format!("align names `{operand}`, which is not an operand of the family"));
            }
            if !bytes.is_power_of_two() {
                return Err(format!("align: `{operand}` must be aligned to a power of two of bytes, got {bytes}"));
            }
        }
        let quantities = family.all_quantities();
        self.rules.iter().try_for_each(|rule| rule.check_names(&quantities))?;
        self.rules.iter().try_for_each(crate::Rule::check_can_hold)
    }
}

impl Entry {
    /// Whether it is one of its family's reference variants: the trials' yardstick, never tried
    /// itself nor picked by a dispatcher.
    pub fn is_reference(&self) -> bool {
        self.declaration.reference.backend.as_deref() == Some(self.variant.backend.as_str())
    }

    /// Whether it is the reference variant the trials check `variant` with in `dtype`: of the
    /// same family, checked, with `variant`'s values of the axes that change what is computed
    /// (tuning axes, how it is computed, need not match).
    pub fn is_reference_for(&self, variant: &crate::Variant, dtype: crate::Dtype) -> bool {
        let r = &self.variant;
        let computes = |(name, _): &(&String, _)| self.declaration.computing_axes().any(|a| &a.name == *name);
        r.family == variant.family
            && self.is_reference()
            && r.dtype == dtype
            && r.is_checked()
            && r.axes.iter().filter(computes).eq(variant.axes.iter().filter(computes))
    }

    /// The exact check its trials make, where its family bounds its dtype's error in units in
    /// the last place: the bound, and the dtype of the reference variant whose results, computed
    /// in f64, stand for the exact ones (f32).
    pub fn exact_check(&self) -> Option<(f64, crate::Dtype)> {
        self.declaration.reference.ulps.get(&self.variant.dtype).map(|&ulps| (ulps, crate::Dtype::F32))
    }

    /// The element type of its operand `name` (an output whose type an axis sets, as `out` does); none
    /// where its family has no such operand.
    pub fn operand_dtype(&self, name: &str) -> Option<crate::Dtype> {
        self.declaration.operand(name).map(|decl| self.declaration.operand_dtype(&self.variant, decl))
    }

    /// Every rule a manifest entry meets: the variant's ([`Variant::check`](crate::Variant::check)), its entry symbol
    /// and source named after it, its requirements and its launch contract
    /// ([`LaunchSpec::check`]). Readers of manifests refuse an entry that breaks one, so that
    /// no launch is planned from nonsense.
    pub fn check(&self) -> Result<(), String> {
        self.check_with(false)
    }

    /// [`Entry::check`], leaving out its declaration's own check where that was made already.
    fn check_with(&self, declaration_checked: bool) -> Result<(), String> {
        let name = &self.variant.name;
        if Arc::ptr_eq(&self.declaration, &unstated()) {
            return Err("it states no declaration of its family".into());
        }
        if !declaration_checked {
            if let Some(problem) = self.declaration.check().into_iter().next() {
                return Err(format!("its family's declaration: {problem}"));
            }
        }
        self.variant.check(&self.declaration)?;
        self.declaration.undrawn_integers(&self.variant)?;
        self.declaration.values_fit(&self.variant)?;
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
        let declared = [("cost_bytes", &self.cost_bytes), ("bytes_in_flight", &self.bytes_in_flight)];
        // The names are gathered only for entries that declare an expression: every entry of a
        // manifest is checked as it is read.
        if declared.iter().any(|(_, bytes)| bytes.is_some()) {
            let elems = self.declaration.elem_names();
            let known: Vec<&str> = self
                .declaration
                .all_quantities()
                .into_iter()
                .chain([crate::family::ELEM])
                .chain(elems.iter().map(String::as_str))
                .chain(self.declaration.axes.iter().filter(|a| a.range.is_some()).map(|a| a.name.as_str()))
                .collect();
            for (field, bytes) in declared {
                if let Some(bytes) = bytes {
                    bytes.check_names(&known).map_err(|rule| format!("its backend's {field}: {rule}"))?;
                }
            }
        }
        // Thread-block clusters are Hopper's (compute capability 9.0): an older target cannot
        // launch them.
        if self.launch.cluster.iter().product::<u32>() > 1 {
            let targets = self.targets.sass.iter().chain([&self.targets.ptx]);
            if let Some(old) = targets.into_iter().find(|t| crate::arch::compute_capability(t).is_some_and(|cc| cc < (9, 0))) {
                return Err(format!(
                    "it launches clusters of {:?} blocks, which need sm_90 or later, but its backend targets {old}",
                    self.launch.cluster
                ));
            }
        }
        self.launch.check(&self.variant, &self.declaration, &self.targets.sass)
    }
}

/// What [`read`] checks of a manifest once it parses.
pub trait Check {
    fn check(&self) -> Result<(), String>;
}

fn check_entries<'a>(entries: impl Iterator<Item = &'a Entry>) -> Result<(), String> {
    let mut names = std::collections::BTreeSet::new();
    // A declaration its entries share is checked once, however many they are.
    let mut checked: Vec<&Arc<Family>> = Vec::new();
    for entry in entries {
        let name = &entry.variant.name;
        let declaration_checked = checked.iter().any(|d| Arc::ptr_eq(d, &entry.declaration));
        entry.check_with(declaration_checked).map_err(|rule| format!("variant `{name}`: {rule}"))?;
        if !declaration_checked {
            checked.push(&entry.declaration);
        }
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
    /// The record of an entry that was not compiled: its fatbin's name, no hashes, no
    /// resources. For planning and choosing without a GPU (registry fixtures in tests).
    pub fn unbuilt(entry: Entry) -> Built {
        Built {
            fatbin: fatbin_file(&entry.variant.name),
            entry,
            hash: String::new(),
            fatbin_sha256: String::new(),
            compiler: "none".into(),
            resources: Vec::new(),
        }
    }

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
    if !(OLDEST_READ..=FORMAT).contains(&head.format) {
        return Err(corrupt(format!("has format {}, but this version of tilesmith reads formats {OLDEST_READ} to {FORMAT}", head.format)));
    }
    let manifest: T = serde_json::from_str(text)
        .map_err(|err| corrupt(format!("does not parse as a tilesmith manifest ({})", crate::config::plain_words(&err.to_string()))))?;
    manifest.check().map_err(corrupt)?;
    Ok(manifest)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shipped() -> Manifest {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../generated/manifest.json");
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
    }

    #[test]
    fn a_declaration_is_written_once_per_family_and_read_back_into_every_entry() {
        let manifest = shipped();
        let text = serde_json::to_string(&manifest).unwrap();
        let value: serde_json::Value = serde_json::from_str(&text).unwrap();
        let families: std::collections::BTreeSet<&str> = manifest.variants.iter().map(|e| e.variant.family.as_str()).collect();
        assert_eq!(value["families"].as_object().unwrap().len(), families.len());
        assert!(value["variants"].as_array().unwrap().iter().all(|e| e.get("declaration").is_none()));
        assert_eq!(serde_json::from_str::<Manifest>(&text).unwrap(), manifest);
        // An entry from an older declaration keeps its own; the others share the family's.
        let mut mixed = manifest.clone();
        assert!(std::sync::Arc::make_mut(&mut mixed.variants[1].declaration).trials.bench.pop().is_some());
        let text = serde_json::to_string(&mixed).unwrap();
        let value: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert!(value["variants"][1].get("declaration").is_some() && value["variants"][0].get("declaration").is_none());
        assert_eq!(serde_json::from_str::<Manifest>(&text).unwrap(), mixed);
    }

    #[test]
    fn format_3_with_a_declaration_per_entry_still_reads_and_a_missing_one_is_named() {
        let manifest = shipped();
        let mut value: serde_json::Value = serde_json::to_value(&manifest).unwrap();
        let families = value.as_object_mut().unwrap().remove("families").unwrap();
        for entry in value["variants"].as_array_mut().unwrap() {
            let family = entry["family"].as_str().unwrap().to_string();
            entry["declaration"] = families[&family].clone();
        }
        value["format"] = 3.into();
        let old = parse::<Manifest>(&value.to_string(), Path::new("manifest.json")).unwrap();
        assert_eq!(old.variants, manifest.variants);
        value["variants"][0].as_object_mut().unwrap().remove("declaration");
        let first = value["variants"][0]["family"].as_str().unwrap().to_string();
        let err = parse::<Manifest>(&value.to_string(), Path::new("manifest.json")).unwrap_err().to_string();
        assert!(err.contains(&format!("variant of family `{first}` has no declaration, and `families` states none for it")), "{err}");
    }
}
