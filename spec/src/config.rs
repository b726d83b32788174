//! `variants.toml`: parsing, expansion of groups into variants, and the checks that need no
//! template. Nothing here touches the file system except [`Config::load`].
//!
//! ```toml
//! [matmul.defaults]            # one value per axis (but those the axis declares with
//!                             # `default = ...`); names leave default values out
//! layout = "tn"
//! ...
//! [matmul.backends.simt]       # template and targets of a backend value
//! template = "matmul_simt.cu.tera"
//! sass = ["sm_80", "sm_90"]
//! ptx = "compute_80"
//!
//! [[matmul.groups]]            # axes given as lists expand as a cartesian product
//! layout = ["nn", "nt", "tn", "tt"]
//! tile = [[128, 128, 32], [64, 64, 32]]
//! exclude = [{ layout = "nn", tile = [64, 64, 32] }]
//!
//! [build]                      # optional: the project's build settings
//! arch = ["sm_90"]             # build for these GPUs unless --arch says otherwise
//! ```

use crate::arch;
use crate::axes::{Axis, Domain, Value};
use crate::family::{Family, MAX_TRIAL_SHAPES, SAME_DTYPE};
use crate::variant::Variant;
use serde::Deserialize;
use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use toml::de::{DeTable, DeValue};
use toml::Spanned;

/// A problem found in `variants.toml` (or, by the build pipeline, in a variant's template), located by line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Diagnostic {
    pub file: PathBuf,
    pub line: usize,
    pub variant: Option<String>,
    pub rule: String,
}

impl fmt::Display for Diagnostic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}: ", self.file.display(), self.line)?;
        if let Some(variant) = &self.variant {
            write!(f, "variant `{variant}`: ")?;
        }
        f.write_str(&self.rule)
    }
}

/// Every problem found, so that one run reports them all.
#[derive(Debug, thiserror::Error)]
pub struct ConfigError(pub Vec<Diagnostic>);

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let lines: Vec<String> = self.0.iter().map(Diagnostic::to_string).collect();
        f.write_str(&lines.join("\n"))
    }
}

/// The template and compile targets of one backend value.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Backend {
    /// Path of the template, relative to `kernel-templates/`.
    pub template: String,
    /// Architectures to embed SASS for (`sm_80`, `sm_90a`).
    pub sass: Vec<String>,
    /// Virtual architecture to embed PTX for, so newer GPUs can JIT it (`compute_80`).
    pub ptx: String,
    /// GFLOP/s an SM sustains on one of its large tiles at 1980 MHz: what cost models (the
    /// chooser's, a plug-in dispatcher's) assume of the backend's kernels where no table speaks.
    #[serde(default)]
    pub gflops_per_sm: Option<u32>,
    /// The bytes the chooser's cost model counts a call of this backend as moving, where they
    /// are not its family's `work.bytes`: an expression of the family's quantities and `elem`
    /// (the row-wise warp backends read a row's tail past 1,024 elements three times, with
    /// narrow loads).
    #[serde(default)]
    pub cost_bytes: Option<crate::Expr>,
    /// The bytes a thread of this backend keeps in flight at once, where not one 16-byte load:
    /// an expression of the same names as `cost_bytes` (the `regs` backends issue `vectors`
    /// 16-byte loads before using any). The chooser's cost model draws bandwidth by it.
    #[serde(default)]
    pub bytes_in_flight: Option<crate::Expr>,
}

/// A variant as declared: its axes, where it came from, and its backend's build data.
#[derive(Clone, Debug, PartialEq)]
pub struct Declared {
    pub variant: Variant,
    /// The line of the group that produced it.
    pub line: usize,
    pub backend: Backend,
    /// Its family's declaration.
    pub family: Arc<Family>,
}

/// The parsed and expanded `variants.toml`.
#[derive(Clone, Debug)]
pub struct Config {
    pub path: PathBuf,
    pub variants: Vec<Declared>,
    pub build: Build,
}

/// The table name the project's build settings take; no family may have it.
pub const BUILD_TABLE: &str = "build";

/// The table name of the shape lists several families tune at (`trials.tune_sets` names them);
/// no family may have it.
pub const SHAPE_SETS_TABLE: &str = "shape_sets";

/// `[shape_sets]`: named lists of shapes, quantity by quantity.
type ShapeSets = BTreeMap<String, Vec<BTreeMap<String, u64>>>;

/// The project's build settings, `[build]`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Build {
    /// The GPU architectures a build is for where `--arch` (or `TILESMITH_ARCH`) names none:
    /// each variant's SASS for those of its backend's targets. None: every target.
    #[serde(default)]
    pub arch: Option<Vec<String>>,
}

/// The file's top level: `[build]`, `[shape_sets]` and the families, each in the toml
/// deserializer's own hands so that spans reach every nested value.
struct File {
    build: Option<Spanned<Build>>,
    shape_sets: ShapeSets,
    families: Vec<(String, Spanned<FamilyDecl>)>,
}

impl<'de> Deserialize<'de> for File {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<File, D::Error> {
        struct Top;
        impl<'de> serde::de::Visitor<'de> for Top {
            type Value = File;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("tables of families, an optional [build] and an optional [shape_sets]")
            }
            fn visit_map<M: serde::de::MapAccess<'de>>(self, mut map: M) -> Result<File, M::Error> {
                let mut file = File { build: None, shape_sets: ShapeSets::new(), families: Vec::new() };
                while let Some(key) = map.next_key::<String>()? {
                    if key == BUILD_TABLE {
                        file.build = Some(map.next_value()?);
                    } else if key == SHAPE_SETS_TABLE {
                        file.shape_sets = map.next_value()?;
                    } else {
                        file.families.push((key, map.next_value()?));
                    }
                }
                Ok(file)
            }
        }
        deserializer.deserialize_map(Top)
    }
}

impl Config {
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let text = crate::files::read_to_string(path).map_err(|err| {
            ConfigError(vec![Diagnostic {
                file: path.to_path_buf(),
                line: 0,
                variant: None,
                rule: format!("cannot read the variants file: {err}"),
            }])
        })?;
        Config::parse(path, &text)
    }

    /// Parses `text`, naming `path` in messages.
    pub fn parse(path: &Path, text: &str) -> Result<Config, ConfigError> {
        let line_starts = text.match_indices('\n').map(|(at, _)| at + 1).collect();
        let mut parser = Parser { path, text, items: item_offsets(text), line_starts, expanded: 0, diagnostics: Vec::new() };
        let (variants, build) = parser.parse();
        if parser.diagnostics.is_empty() {
            Ok(Config { path: path.to_path_buf(), variants, build })
        } else {
            Err(ConfigError(parser.diagnostics))
        }
    }
}

type AxisTable = BTreeMap<String, Spanned<toml::Value>>;

/// A family as variants.toml writes it: `[<name>.family]`, `.defaults`, `.backends`, `.groups`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FamilyDecl {
    family: Option<Spanned<Family>>,
    defaults: Spanned<AxisTable>,
    backends: BTreeMap<String, Spanned<Backend>>,
    #[serde(default)]
    groups: Vec<Spanned<AxisTable>>,
}

/// Largest tile edge accepted; templates may set tighter rules.
const MAX_TILE_EDGE: i64 = 1024;

/// The most variants a project may declare, counted before any group is expanded.
pub const MAX_VARIANTS: usize = 20_000;

struct Parser<'a> {
    path: &'a Path,
    text: &'a str,
    /// For each array in the file, by the offset where it starts, where its items start: serde's
    /// spans stop at the array, and a bad item is reported at its own line.
    items: BTreeMap<usize, Vec<usize>>,
    /// Where each line after the first starts, for line numbers in time logarithmic in the file.
    line_starts: Vec<usize>,
    /// Variants expanded so far, against `MAX_VARIANTS`.
    expanded: usize,
    diagnostics: Vec<Diagnostic>,
}

impl Parser<'_> {
    fn line_of(&self, offset: usize) -> usize {
        self.line_starts.partition_point(|&start| start <= offset) + 1
    }

    /// Where item `index` of the array that starts at `array` starts; the array's start if unknown.
    fn item_offset(&self, array: usize, index: usize) -> usize {
        self.items.get(&array).and_then(|items| items.get(index)).copied().unwrap_or(array)
    }

    fn report(&mut self, offset: usize, variant: Option<&str>, rule: String) {
        let line = self.line_of(offset);
        self.diagnostics.push(Diagnostic { file: self.path.to_path_buf(), line, variant: variant.map(str::to_string), rule });
    }

    fn parse(&mut self) -> (Vec<Declared>, Build) {
        let file: File = match toml::from_str(self.text) {
            Ok(file) => file,
            Err(err) => {
                let offset = err.span().map_or(0, |span| span.start);
                self.report(offset, None, plain_words(err.message().trim()));
                return (Vec::new(), Build::default());
            }
        };
        let build = file.build.map(|build| self.build(build)).unwrap_or_default();
        let mut variants = Vec::new();
        // In the order the file declares them.
        let mut families = file.families;
        families.sort_by_key(|(_, decl)| decl.span().start);
        for (name, decl) in families {
            if !is_identifier(&name) {
                let at = decl.span().start;
                self.report(at, None, format!("family name `{name}` must be lowercase letters, digits and `_`, starting with a letter"));
                continue;
            }
            variants.extend(self.family(&name, decl, &file.shape_sets));
        }
        if variants.is_empty() && self.diagnostics.is_empty() {
            self.report(
                0,
                None,
                "declares no variants: add a family with [<family>.family], .defaults, .backends and [[<family>.groups]]".into(),
            );
        }
        self.check_unique(&variants);
        (variants, build)
    }

    /// `[build]`, its architectures checked.
    fn build(&mut self, build: Spanned<Build>) -> Build {
        let at = build.span().start;
        let build = build.into_inner();
        if let Some(list) = &build.arch {
            if let Err(problem) = arch::check_list(list) {
                self.report(at, None, format!("[{BUILD_TABLE}] arch: {problem}"));
            }
        }
        build
    }

    fn family(&mut self, family: &str, decl: Spanned<FamilyDecl>, shape_sets: &ShapeSets) -> Vec<Declared> {
        let family_offset = decl.span().start;
        let decl = decl.into_inner();
        let Some(family_decl) = decl.family else {
            self.report(
                family_offset,
                None,
                format!("family `{family}` has no declaration: add [{family}.family] (README.md, \"Adding a family\")"),
            );
            return Vec::new();
        };
        let declaration_offset = family_decl.span().start;
        let mut declaration = family_decl.into_inner();
        for set in std::mem::take(&mut declaration.trials.tune_sets) {
            let Some(shapes) = shape_sets.get(&set) else {
                let rule = format!("[{family}.family]: trials.tune_sets names `{set}`, which [{SHAPE_SETS_TABLE}] does not declare");
                self.report(declaration_offset, None, rule);
                continue;
            };
            // Checked before the copy: a large set named many times would otherwise grow the
            // list past any memory.
            if declaration.trials.tune.len() + shapes.len() > MAX_TRIAL_SHAPES {
                let rule = format!(
                    "[{family}.family]: trials.tune with its tune_sets lists more than the {MAX_TRIAL_SHAPES} shapes a list may hold"
                );
                self.report(declaration_offset, None, rule);
                break;
            }
            declaration.trials.tune.extend(shapes.iter().cloned());
        }
        let declaration = Arc::new(declaration);
        let problems = declaration.check();
        for problem in &problems {
            self.report(declaration_offset, None, format!("[{family}.family]: {problem}"));
        }
        let backends = self.backends(family, &decl.backends);
        if let Some(backend) = declaration.reference.backend.as_ref().filter(|b| !backends.contains_key(*b)) {
            self.report(
                declaration_offset,
                None,
                format!("[{family}.family]: reference backend `{backend}` is not declared: add [{family}.backends.{backend}]"),
            );
        }
        if !problems.is_empty() {
            return Vec::new();
        }
        let axes = declaration.axes();
        let Some(defaults) = self.defaults(family, &axes, &decl.defaults, &backends) else {
            return Vec::new();
        };
        if decl.groups.is_empty() {
            self.report(family_offset, None, format!("family `{family}` has no [[{family}.groups]]"));
        }
        let mut declared = Vec::new();
        for group in &decl.groups {
            declared.extend(self.group(family, &axes, group, &defaults, &backends, &declaration));
        }
        let tolerance = &declaration.reference.tolerance;
        // Results are compared in the variant's dtype and each written operand's.
        let written = declaration.operands.iter().filter(|o| o.access.writes());
        let dtypes =
            declared.iter().flat_map(|d| written.clone().map(|o| declaration.operand_dtype(&d.variant, o)).chain([d.variant.dtype]));
        if let Some(missing) = dtypes.into_iter().find(|dtype| !tolerance.contains_key(dtype)) {
            self.report(
                declaration_offset,
                None,
                format!("[{family}.family]: reference.tolerance has no entry for {missing}, which variants of the family use"),
            );
        }
        declared
    }

    fn backends(&mut self, family: &str, decls: &BTreeMap<String, Spanned<Backend>>) -> BTreeMap<String, Backend> {
        let mut backends = BTreeMap::new();
        for (name, decl) in decls {
            let offset = decl.span().start;
            let backend = decl.get_ref();
            if !is_identifier(name) {
                self.report(
                    offset,
                    None,
                    format!("backend name `{name}` must be lowercase letters, digits and `_`, starting with a letter"),
                );
            }
            if backend.template.trim().is_empty() {
                self.report(offset, None, format!("backend `{family}.{name}` names no template"));
            }
            if backend.sass.is_empty() {
                self.report(offset, None, format!("backend `{family}.{name}` lists no SASS architecture"));
            }
            for sass in &backend.sass {
                if arch::smem_limit(sass).is_none() {
                    let known: Vec<_> = arch::known_sass().collect();
                    self.report(
                        offset,
                        None,
                        format!("backend `{family}.{name}`: unknown SASS architecture `{sass}` (known: {})", known.join(", ")),
                    );
                }
            }
            if !arch::is_known_ptx(&backend.ptx) {
                self.report(
                    offset,
                    None,
                    format!(
                        "backend `{family}.{name}`: `{}` is not a known PTX architecture (`compute_80`, `compute_90`, ...)",
                        backend.ptx
                    ),
                );
            }
            if backend.gflops_per_sm == Some(0) {
                self.report(offset, None, format!("backend `{family}.{name}`: gflops_per_sm must be above 0 (or left out)"));
            }
            // Declared even when broken, so that its uses are not reported as unknown too.
            backends.insert(name.clone(), backend.clone());
        }
        backends
    }

    fn defaults(
        &mut self,
        family: &str,
        axes: &[Axis],
        table: &Spanned<AxisTable>,
        backends: &BTreeMap<String, Backend>,
    ) -> Option<Variant> {
        let before = self.diagnostics.len();
        self.unknown_axes(family, axes, table.get_ref(), &[]);
        let mut values = BTreeMap::new();
        for Axis { name: axis, domain, default, .. } in axes {
            match (table.get_ref().get(axis), default) {
                (None, Some(value)) => {
                    values.insert(axis.as_str(), value.clone());
                }
                (None, None) => self.report(table.span().start, None, format!("[{family}.defaults] must set axis `{axis}`")),
                (Some(raw), Some(value)) => self.report(
                    raw.span().start,
                    None,
                    format!(
                        "axis `{axis}`: [{family}.family] declares its default ({}); [{family}.defaults] must not set it too",
                        show(value)
                    ),
                ),
                (Some(raw), None) => {
                    if let Some(value) = self.value(family, axis, domain, raw, backends) {
                        values.insert(axis.as_str(), value);
                    }
                }
            }
        }
        if self.diagnostics.len() != before {
            return None;
        }
        Variant::from_values(family, axes, &values)
    }

    fn unknown_axes(&mut self, family: &str, axes: &[Axis], table: &AxisTable, extra: &[&str]) {
        let names: Vec<&str> = axes.iter().map(|axis| axis.name.as_str()).collect();
        for (key, value) in table {
            if !names.contains(&key.as_str()) && !extra.contains(&key.as_str()) {
                let mut known = names.clone();
                known.extend_from_slice(extra);
                self.report(value.span().start, None, format!("unknown {family} axis `{key}` (known: {})", known.join(", ")));
            }
        }
    }

    fn group<'a>(
        &mut self,
        family: &str,
        axes: &'a [Axis],
        group: &Spanned<AxisTable>,
        defaults: &Variant,
        backends: &BTreeMap<String, Backend>,
        declaration: &Arc<Family>,
    ) -> Vec<Declared> {
        let line = self.line_of(group.span().start);
        let table = group.get_ref();
        let before = self.diagnostics.len();
        self.unknown_axes(family, axes, table, &["exclude"]);

        // Per axis, the values this group expands over (a default when the group is silent).
        let mut choices: Vec<(&'a str, Vec<Value>)> = Vec::new();
        for Axis { name: axis, domain, .. } in axes {
            let values = match table.get(axis) {
                Some(raw) => self.values(family, axis, domain, raw, backends),
                None => defaults.value(axis).into_iter().collect(),
            };
            choices.push((axis.as_str(), values));
        }
        let excludes = table.get("exclude").map(|raw| self.excludes(family, axes, raw, backends)).unwrap_or_default();
        if self.diagnostics.len() != before || self.expanded > MAX_VARIANTS {
            return Vec::new();
        }
        let count = choices.iter().try_fold(1usize, |count, (_, values)| count.checked_mul(values.len()));
        match count.and_then(|count| count.checked_add(self.expanded)) {
            Some(total) if total <= MAX_VARIANTS => self.expanded = total,
            _ => {
                let count = count.map_or("more than 2^64".into(), |n| n.to_string());
                self.report(
                    group.span().start,
                    None,
                    format!(
                        "this group of {family} declares {count} variants, which with the {} before it passes the limit of \
                         {MAX_VARIANTS} variants per project",
                        self.expanded
                    ),
                );
                // Past the limit: later groups are neither expanded nor reported again.
                self.expanded = MAX_VARIANTS + 1;
                return Vec::new();
            }
        }

        let mut used = vec![false; excludes.len()];
        let mut declared = Vec::new();
        for combination in cartesian(&choices) {
            let matching: Vec<usize> = excludes
                .iter()
                .enumerate()
                .filter(|(_, exclude)| exclude.iter().all(|(axis, value)| combination.get(axis) == Some(value)))
                .map(|(index, _)| index)
                .collect();
            if !matching.is_empty() {
                matching.into_iter().for_each(|index| used[index] = true);
                continue;
            }
            // Every value was checked against its axis's domain above.
            let Some(mut variant) = Variant::from_values(family, axes, &combination) else { continue };
            variant.name = variant.derive_name(axes, defaults);
            // One name per kernel: an operand typed by an axis names the variant's dtype as `in`.
            for operand in &declaration.operands {
                if let Some(axis) = operand.dtype_axis.as_deref().filter(|a| variant.word(a) == Some(variant.dtype.as_str())) {
                    self.report(
                        group.span().start,
                        Some(&variant.name),
                        format!("{axis} = {} is the variant's dtype: write {axis} = \"{SAME_DTYPE}\"", variant.dtype),
                    );
                }
            }
            let backend = backends[&variant.backend].clone();
            declared.push(Declared { variant, line, backend, family: Arc::clone(declaration) });
        }
        if let Some(raw) = table.get("exclude") {
            for (index, _) in used.iter().enumerate().filter(|(_, used)| !**used) {
                let at = self.item_offset(raw.span().start, index);
                self.report(at, None, format!("exclude #{} matches no variant of this group", index + 1));
            }
            if declared.is_empty() {
                self.report(raw.span().start, None, "`exclude` removes every variant of this group, which then declares none".into());
            }
        }
        declared
    }

    fn excludes<'a>(
        &mut self,
        family: &str,
        axes: &'a [Axis],
        raw: &Spanned<toml::Value>,
        backends: &BTreeMap<String, Backend>,
    ) -> Vec<BTreeMap<&'a str, Value>> {
        let offset = raw.span().start;
        let Some(entries) = raw.get_ref().as_array() else {
            self.report(offset, None, "`exclude` must be an array of tables such as [{ layout = \"nn\" }]".into());
            return Vec::new();
        };
        let mut excludes = Vec::new();
        for (index, entry) in entries.iter().enumerate() {
            let at = self.item_offset(offset, index);
            let Some(table) = entry.as_table().filter(|table| !table.is_empty()) else {
                self.report(at, None, format!("exclude #{} must be a non-empty table of axis = value", index + 1));
                continue;
            };
            let mut exclude = BTreeMap::new();
            for (key, value) in table {
                let Some(Axis { name: axis, domain, .. }) = axes.iter().find(|axis| axis.name == *key) else {
                    self.report(at, None, format!("exclude #{}: unknown {family} axis `{key}`", index + 1));
                    continue;
                };
                let spanned = Spanned::new(at..at, value.clone());
                if let Some(value) = self.value(family, axis, domain, &spanned, backends) {
                    exclude.insert(axis.as_str(), value);
                }
            }
            excludes.push(exclude);
        }
        excludes
    }

    /// The values an axis takes in a group: a single value or a list of them.
    fn values(
        &mut self,
        family: &str,
        axis: &str,
        domain: &Domain,
        raw: &Spanned<toml::Value>,
        backends: &BTreeMap<String, Backend>,
    ) -> Vec<Value> {
        let is_list = match (domain, raw.get_ref()) {
            (Domain::Tile(_), toml::Value::Array(items)) => items.first().is_some_and(toml::Value::is_array),
            (_, toml::Value::Array(_)) => true,
            _ => false,
        };
        if !is_list {
            return self.value(family, axis, domain, raw, backends).into_iter().collect();
        }
        let items = raw.get_ref().as_array().map(Vec::as_slice).unwrap_or_default();
        if items.is_empty() {
            self.report(raw.span().start, None, format!("axis `{axis}` lists no values"));
        }
        let mut values: Vec<Value> = Vec::new();
        // Seen values in a set: a list of 200,000 values is checked in linear time.
        let mut seen = std::collections::BTreeSet::new();
        for (index, item) in items.iter().enumerate() {
            let at = self.item_offset(raw.span().start, index);
            let spanned = Spanned::new(at..at, item.clone());
            if let Some(value) = self.value(family, axis, domain, &spanned, backends) {
                if !seen.insert(value.clone()) {
                    self.report(at, None, format!("axis `{axis}` lists {} twice", show(&value)));
                } else {
                    values.push(value);
                }
            }
        }
        values
    }

    fn value(
        &mut self,
        family: &str,
        axis: &str,
        domain: &Domain,
        raw: &Spanned<toml::Value>,
        backends: &BTreeMap<String, Backend>,
    ) -> Option<Value> {
        let offset = raw.span().start;
        let fail = |parser: &mut Self, rule: String| {
            parser.report(offset, None, format!("axis `{axis}`: {rule}"));
            None
        };
        match domain {
            Domain::Words(_) | Domain::Backend => {
                // Listed only for an error message: a project may declare thousands of backends.
                let known = || -> Vec<String> {
                    match domain {
                        Domain::Words(words) => words.clone(),
                        _ => backends.keys().cloned().collect(),
                    }
                };
                // A whole number stands for its decimal text (`head = 64` for the word "64").
                let number = raw.get_ref().as_integer().map(|n| n.to_string());
                let Some(word) = raw.get_ref().as_str().or(number.as_deref()) else {
                    return fail(self, format!("expected a word, one of {}", known().join(", ")));
                };
                let is_known = match domain {
                    Domain::Backend => backends.contains_key(word),
                    _ => known().iter().any(|k| k == word),
                };
                if is_known {
                    Some(Value::Word(word.to_string()))
                } else if matches!(domain, Domain::Backend) {
                    fail(self, format!("unknown backend `{word}`: declare [{family}.backends.{word}] (declared: {})", known().join(", ")))
                } else {
                    fail(self, format!("unknown value `{word}` (expected one of {})", known().join(", ")))
                }
            }
            &Domain::Count { min, max } => match raw.get_ref().as_integer() {
                Some(n) if (i64::from(min)..=i64::from(max)).contains(&n) => Some(Value::Count(n as u32)),
                Some(n) => fail(self, format!("{n} is out of range {min}..={max}")),
                None => fail(self, format!("expected an integer in {min}..={max}")),
            },
            Domain::Tile(quantities) => {
                let len = quantities.len();
                let edges: Option<Vec<i64>> =
                    raw.get_ref().as_array().map(|items| items.iter().filter_map(toml::Value::as_integer).collect());
                let shape = format!("[{}] (an edge along each)", quantities.join(", "));
                match edges {
                    Some(edges) if edges.len() == len && raw.get_ref().as_array().is_some_and(|a| a.len() == len) => {
                        if edges.iter().all(|e| (1..=MAX_TILE_EDGE).contains(e)) {
                            Some(Value::Tile(edges.iter().map(|&e| e as u32).collect()))
                        } else {
                            fail(self, format!("tile edges must be in 1..={MAX_TILE_EDGE}, got {edges:?}"))
                        }
                    }
                    _ => fail(self, format!("expected {shape}: {len} integers, or a list of such tiles")),
                }
            }
        }
    }

    fn check_unique(&mut self, variants: &[Declared]) {
        let mut seen: BTreeMap<&str, usize> = BTreeMap::new();
        let mut duplicates = Vec::new();
        for declared in variants {
            if let Err(rule) = crate::variant::check_name(&declared.variant.name) {
                self.diagnostics.push(Diagnostic {
                    file: self.path.to_path_buf(),
                    line: declared.line,
                    variant: Some(declared.variant.name.clone()),
                    rule,
                });
            }
            match seen.get(declared.variant.name.as_str()) {
                Some(first) => duplicates.push((declared.line, declared.variant.name.clone(), *first)),
                None => {
                    seen.insert(&declared.variant.name, declared.line);
                }
            }
        }
        for (line, name, first) in duplicates {
            self.diagnostics.push(Diagnostic {
                file: self.path.to_path_buf(),
                line,
                variant: Some(name),
                rule: format!("two variants share this name (the first was declared at line {first}); names must be unique"),
            });
        }
    }
}

/// The start of every array item in `text`, by the start of its array.
fn item_offsets(text: &str) -> BTreeMap<usize, Vec<usize>> {
    fn walk(value: &Spanned<DeValue<'_>>, out: &mut BTreeMap<usize, Vec<usize>>) {
        match value.get_ref() {
            DeValue::Array(items) => {
                out.insert(value.span().start, items.iter().map(|item| item.span().start).collect());
                items.iter().for_each(|item| walk(item, out));
            }
            DeValue::Table(table) => table.values().for_each(|item| walk(item, out)),
            _ => {}
        }
    }
    let mut out = BTreeMap::new();
    if let Ok(table) = DeTable::parse(text) {
        table.get_ref().values().for_each(|value| walk(value, &mut out));
    }
    out
}

/// A parser's message in tilesmith's words: serde calls a value of a closed set a "variant",
/// which here means a kernel.
pub fn plain_words(message: &str) -> String {
    message.replace("unknown variant", "unknown value")
}

pub fn is_identifier(name: &str) -> bool {
    name.starts_with(|c: char| c.is_ascii_lowercase()) && name.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
}

fn show(value: &Value) -> String {
    match value {
        Value::Word(word) => format!("`{word}`"),
        Value::Count(n) => n.to_string(),
        Value::Tile(tile) => format!("{tile:?}"),
    }
}

/// Every combination of one value per axis, the last axis varying fastest.
fn cartesian<'a>(choices: &[(&'a str, Vec<Value>)]) -> Vec<BTreeMap<&'a str, Value>> {
    let mut combinations = vec![BTreeMap::new()];
    for (axis, values) in choices {
        combinations = combinations
            .into_iter()
            .flat_map(|partial| {
                values.iter().map(move |value| {
                    let mut next = partial.clone();
                    next.insert(*axis, value.clone());
                    next
                })
            })
            .collect();
    }
    combinations
}
