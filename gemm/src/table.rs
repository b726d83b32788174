//! GEMM's tuning table: for one GPU, per GEMM problem class, the ways to compute it (variant
//! and strategy) ranked by measured time, beside cuBLAS. It is stored as any family's table
//! (`tuning/gemm/<GPU>-<SMs>sm.json`, [`FamilyTable`]), each entry's class stating its layout,
//! alignment and, for entries of their own, epilogue, and each padded candidate its strategy;
//! this is the dispatcher's typed view of it. `tilesmith tune` writes it, the build carries it
//! into the registry, and the dispatcher reads it from the registry's `gemm` tables.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::Path;
use tilesmith_spec::family_table::{self, FamilyEntry, FamilyTable, Timed};
use tilesmith_spec::tuning::Device;
use tilesmith_spec::{Dtype, Layout};

/// The family whose tables these are.
pub const FAMILY: &str = "gemm";
/// Its quantities, in declared order: what an entry's problem lists.
const QUANTITIES: [&str; 3] = ["m", "n", "k"];

/// GEMM's tables, as the dispatcher reads them; written as a [`FamilyTable`].
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(into = "FamilyTable")]
pub struct TuningTable {
    pub device: Device,
    /// The compiler the registry was built with when the table was measured.
    pub compiler: String,
    pub entries: Vec<TuningEntry>,
}

impl std::fmt::Display for Alignment {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Alignment::Aligned => "aligned",
            Alignment::Unaligned => "unaligned",
        })
    }
}

/// Whether a call's operands suit TMA as they are: 16-byte-aligned starts and leading
/// dimensions that are multiples of 16 bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Alignment {
    Aligned,
    Unaligned,
}

/// How a dispatcher runs a variant for a call.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Strategy {
    /// The variant on the caller's buffers.
    Direct,
    /// The operands that are not aligned are moved into aligned scratch with 128-byte rows by a
    /// transpose (which flips their storage order, so the variant's layout may differ from the
    /// call's); an unaligned C is computed transposed there and transposed into place.
    Padded,
}

/// The problem class a tuning entry stands for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Key {
    pub dtype: Dtype,
    pub layout: Layout,
    pub alignment: Alignment,
    /// ⌊log2⌉ of M, N and K, rounded to the nearest integer: the bucket.
    pub bucket: [u32; 3],
    /// The bucket of a batch's problem count; 0 for one problem (left out of the file).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub batch: u32,
}

fn is_zero(value: &u32) -> bool {
    *value == 0
}

fn one() -> u64 {
    1
}

fn is_one(value: &u64) -> bool {
    *value == 1
}

/// One measured problem and its candidates, fastest first.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TuningEntry {
    pub key: Key,
    /// [M, N, K] as measured.
    pub shape: [u64; 3],
    /// Problems in the batch measured, each matrix right after the previous problem's; 1
    /// (left out of the file) for a single problem.
    #[serde(default = "one", skip_serializing_if = "is_one")]
    pub batch: u64,
    /// The `epilogue` value of the variants ranked, measured with a bias per column (α = 1,
    /// β = 0); absent for plain GEMMs, whose picks stand for every epilogue without its own
    /// entries.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub epilogue: Option<String>,
    pub cublas_ms: f64,
    pub ranked: Vec<Candidate>,
}

/// One way to compute an entry's problem, with its median time.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Candidate {
    pub variant: String,
    pub strategy: Strategy,
    pub ms: f64,
}

impl TuningEntry {
    /// [problems, M, N, K]: what the dispatcher measures distances between.
    pub fn problem(&self) -> [u64; 4] {
        let [m, n, k] = self.shape;
        [self.batch, m, n, k]
    }

    /// What tells entries apart in a table, in its order: plain entries first, then by key
    /// and problem.
    fn identity(&self) -> (Option<&str>, Key, [u64; 4]) {
        (self.epilogue.as_deref(), self.key, self.problem())
    }
}

impl Candidate {
    /// Its speed relative to cuBLAS on the entry's problem: above 1 is faster.
    pub fn ratio(&self, entry: &TuningEntry) -> f64 {
        entry.cublas_ms / self.ms
    }
}

/// The bucket of a size: log2 rounded to the nearest integer (0 for 0 and 1).
pub fn bucket(size: u64) -> u32 {
    if size <= 1 {
        return 0;
    }
    (size as f64).log2().round() as u32
}

impl Key {
    /// The key of a problem [problems, M, N, K].
    pub fn new(dtype: Dtype, layout: Layout, alignment: Alignment, [batch, m, n, k]: [u64; 4]) -> Key {
        Key { dtype, layout, alignment, bucket: [bucket(m), bucket(n), bucket(k)], batch: bucket(batch) }
    }
}

/// A problem [problems, M, N, K] as messages write it: `MxNxK`, or `B x MxNxK` for a batch.
pub fn describe([batch, m, n, k]: [u64; 4]) -> String {
    let problems = if batch == 1 { String::new() } else { format!("{batch} x ") };
    format!("{problems}{m}x{n}x{k}")
}

/// Orders measured candidates by the table's rule ([`family_table::rank`]): by time, except
/// that candidates within [`NEAR_TIE`](tilesmith_spec::tuning::NEAR_TIE) of the fastest are ranked among
/// themselves by strategy (direct first) and name. A time outside the valid range is refused,
/// naming its candidate.
pub fn rank(candidates: Vec<Candidate>) -> Result<Vec<Candidate>, String> {
    let timed = candidates.into_iter().map(|c| Timed { strategy: c.strategy.word(), variant: c.variant, ms: c.ms }).collect();
    let ranked = family_table::rank(timed)?;
    Ok(ranked
        .into_iter()
        .map(|t| {
            let strategy = if t.is_direct() { Strategy::Direct } else { Strategy::Padded };
            Candidate { variant: t.variant, strategy, ms: t.ms }
        })
        .collect())
}

/// Log-space distance between two problems [problems, M, N, K]: the sum over the four of
/// |log2(a) - log2(b)|. A batch of 2 is as far from one problem as twice the M is.
pub fn distance(a: [u64; 4], b: [u64; 4]) -> f64 {
    family_table::distance(&a, &b)
}

/// The build's check of a table (`compile::Options::table_checks`): GEMM's must read as a
/// [`TuningTable`]; other families' pass.
pub fn check_table(table: &FamilyTable) -> Result<(), String> {
    if table.family != FAMILY {
        return Ok(());
    }
    TuningTable::from_family(table).map(drop)
}

impl Strategy {
    /// How a family table states it: none for a direct run.
    fn word(self) -> Option<String> {
        match self {
            Strategy::Direct => None,
            Strategy::Padded => Some("padded".into()),
        }
    }
}

impl TuningTable {
    /// An empty table of `device`.
    pub fn new(device: Device, compiler: String) -> TuningTable {
        TuningTable { device, compiler, entries: Vec::new() }
    }

    /// The entries for this dtype, layout, alignment and epilogue (`None`: plain), nearest to
    /// `problem` ([problems, M, N, K]) first (log-space distance; equal distances by problem),
    /// so that a caller can fall back to the next.
    pub fn nearest(
        &self,
        dtype: Dtype,
        layout: Layout,
        alignment: Alignment,
        epilogue: Option<&str>,
        problem: [u64; 4],
    ) -> Vec<&TuningEntry> {
        // Each distance computed once, not 2·log2(n) times in the sort's comparator.
        let mut entries: Vec<(f64, [u64; 4], &TuningEntry)> = self
            .entries
            .iter()
            .filter(|e| e.key.dtype == dtype && e.key.layout == layout && e.key.alignment == alignment && e.epilogue.as_deref() == epilogue)
            .map(|e| (distance(e.problem(), problem), e.problem(), e))
            .collect();
        entries.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
        entries.into_iter().map(|(_, _, e)| e).collect()
    }

    /// The entry measured for exactly this problem ([problems, M, N, K]) with this epilogue
    /// (`None`: plain), if any.
    pub fn entry(&self, key: &Key, epilogue: Option<&str>, problem: [u64; 4]) -> Option<&TuningEntry> {
        self.entries.iter().find(|e| e.identity() == (epilogue, *key, problem))
    }

    /// Adds or replaces the entry for its problem and epilogue, keeping entries in a fixed
    /// order (plain entries first).
    pub fn insert(&mut self, entry: TuningEntry) {
        self.entries.retain(|e| e.identity() != entry.identity());
        self.entries.push(entry);
        self.entries.sort_by(|a, b| a.identity().cmp(&b.identity()));
    }

    /// Reads a table ([`FamilyTable::read`], then [`TuningTable::from_family`]).
    pub fn read(path: &Path) -> Result<TuningTable, String> {
        let table = FamilyTable::read(path)?;
        TuningTable::from_family(&table).map_err(|rule| format!("{}: {rule}", path.display()))
    }

    /// The typed view of a family table of GEMM, checked: problems of `m`, `n` and `k`, each
    /// entry's class a layout and an alignment (and an epilogue of the `epilogue` axis, for
    /// entries of their own), and its strategies direct (none stated) or `padded`. The rest
    /// (times, rank order, one entry per problem) is [`FamilyTable::check`]'s.
    pub fn from_family(table: &FamilyTable) -> Result<TuningTable, String> {
        if table.family != FAMILY || table.quantities != QUANTITIES {
            return Err(format!(
                "a table of family `{}` over {:?} is not GEMM's (family `{FAMILY}` over {QUANTITIES:?})",
                table.family, table.quantities
            ));
        }
        let mut entries = Vec::with_capacity(table.entries.len());
        for (index, entry) in table.entries.iter().enumerate() {
            let at = || format!("entry {} ({} x {:?} {})", index + 1, entry.batch, entry.problem, entry.dtype);
            let class = |name: &str| entry.class.get(name).map(String::as_str);
            let layout = class("layout").and_then(Layout::parse);
            let alignment = match class("alignment") {
                Some("aligned") => Some(Alignment::Aligned),
                Some("unaligned") => Some(Alignment::Unaligned),
                _ => None,
            };
            let (Some(layout), Some(alignment)) = (layout, alignment) else {
                return Err(format!(
                    "{}: its class {:?} needs a layout (nn, nt, tn or tt) and an alignment (aligned or unaligned)",
                    at(),
                    entry.class
                ));
            };
            if let Some(other) = entry.class.keys().find(|k| !["layout", "alignment", "epilogue"].contains(&k.as_str())) {
                return Err(format!("{}: its class names `{other}`; GEMM's entries state a layout, an alignment and an epilogue", at()));
            }
            let epilogue = class("epilogue").map(str::to_string);
            if let Some(word) = &epilogue {
                if crate::Activation::named(word)? == crate::Activation::NONE {
                    return Err(format!("{}: epilogue `{word}` applies no activation; its calls read the plain entries", at()));
                }
            }
            let mut ranked = Vec::with_capacity(entry.ranked.len());
            for timed in &entry.ranked {
                let strategy = match timed.strategy.as_deref() {
                    None => Strategy::Direct,
                    Some("padded") => Strategy::Padded,
                    Some(other) => {
                        return Err(format!(
                            "{}: {} has strategy `{other}`; GEMM's are direct (none stated) and `padded`",
                            at(),
                            timed.variant
                        ))
                    }
                };
                ranked.push(Candidate { variant: timed.variant.clone(), strategy, ms: timed.ms });
            }
            let &[m, n, k] = entry.problem.as_slice() else {
                return Err(format!("{}: a problem states M, N and K", at()));
            };
            entries.push(TuningEntry {
                key: Key::new(entry.dtype, layout, alignment, [entry.batch, m, n, k]),
                shape: [m, n, k],
                batch: entry.batch,
                epilogue,
                cublas_ms: entry.baseline_ms,
                ranked,
            });
        }
        Ok(TuningTable { device: table.device.clone(), compiler: table.compiler.clone(), entries })
    }

    /// It as a family table, as it is written.
    pub fn to_family(&self) -> FamilyTable {
        let mut family =
            FamilyTable::new(FAMILY, self.device.clone(), self.compiler.clone(), QUANTITIES.iter().map(|q| q.to_string()).collect());
        for entry in &self.entries {
            let mut class = BTreeMap::from([
                ("layout".to_string(), entry.key.layout.as_str().to_string()),
                ("alignment".to_string(), entry.key.alignment.to_string()),
            ]);
            if let Some(epilogue) = &entry.epilogue {
                class.insert("epilogue".into(), epilogue.clone());
            }
            family.insert(FamilyEntry {
                dtype: entry.key.dtype,
                class,
                problem: entry.shape.to_vec(),
                batch: entry.batch,
                baseline_ms: entry.cublas_ms,
                ranked: entry.ranked.iter().map(|c| Timed { variant: c.variant.clone(), strategy: c.strategy.word(), ms: c.ms }).collect(),
            });
        }
        family
    }

    /// Reads a table of the format before tables lay in a folder per family
    /// (`tuning/<GPU>-<SMs>sm.json`), for `tilesmith tune --upgrade`; its buckets are computed
    /// again from its problems, and the result is checked as a family table.
    pub fn read_earlier_format(path: &Path) -> Result<TuningTable, String> {
        #[derive(Deserialize)]
        struct Earlier {
            format: u32,
            device: Device,
            compiler: String,
            entries: Vec<TuningEntry>,
        }
        let text = tilesmith_spec::files::read_to_string(path).map_err(|err| format!("cannot read {}: {err}", path.display()))?;
        let earlier: Earlier = serde_json::from_str(&text)
            .map_err(|err| format!("{}: not a GEMM tuning table of the earlier format ({err})", path.display()))?;
        if earlier.format != 1 {
            return Err(format!("{}: GEMM tuning table format {}; the earlier format is 1", path.display(), earlier.format));
        }
        let mut table = TuningTable::new(earlier.device, earlier.compiler);
        for mut entry in earlier.entries {
            entry.key = Key::new(entry.key.dtype, entry.key.layout, entry.key.alignment, entry.problem());
            table.insert(entry);
        }
        let family = table.to_family();
        family.check().map_err(|rule| format!("{}: {rule}", path.display()))?;
        Ok(table)
    }
}

impl From<TuningTable> for FamilyTable {
    fn from(table: TuningTable) -> FamilyTable {
        table.to_family()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn candidate(variant: &str, strategy: Strategy, ms: f64) -> Candidate {
        Candidate { variant: variant.into(), strategy, ms }
    }

    /// A GEMM table of one entry (4096³ bf16) with this class and strategy, as text.
    fn family_text(class: &str, strategy: &str) -> String {
        format!(
            r#"{{"format": 1, "family": "gemm", "device": {{"name": "GPU", "capability": [9, 0], "sms": 132}}, "compiler": "",
            "quantities": ["m", "n", "k"], "entries": [{{"dtype": "bf16", "class": {class}, "problem": [4096, 4096, 4096],
            "baseline_ms": 1.0, "ranked": [{{"variant": "gemm_tn_128x128x32"{strategy}, "ms": 0.9}}]}}]}}"#
        )
    }

    #[test]
    fn nonsense_tables_are_refused_in_words() {
        let path = Path::new("tuning/gemm/GPU-132sm.json");
        let read = |text: String| FamilyTable::parse(&text, path).and_then(|t| check_table(&t));
        let class = r#"{"layout": "tn", "alignment": "aligned"}"#;
        assert_eq!(read(family_text(class, "")), Ok(()));
        assert_eq!(read(family_text(class, r#", "strategy": "padded""#)), Ok(()));
        let strategy = read(family_text(class, r#", "strategy": "sideways""#)).unwrap_err();
        assert!(
            strategy.contains("gemm_tn_128x128x32 has strategy `sideways`; GEMM's are direct (none stated) and `padded`"),
            "{strategy}"
        );
        let no_layout = read(family_text(r#"{"alignment": "aligned"}"#, "")).unwrap_err();
        assert!(
            no_layout.contains("entry 1 (1 x [4096, 4096, 4096] bf16): its class") && no_layout.contains("needs a layout"),
            "{no_layout}"
        );
        let extra = read(family_text(r#"{"layout": "tn", "alignment": "aligned", "swizzle": "x"}"#, "")).unwrap_err();
        assert!(extra.contains("its class names `swizzle`"), "{extra}");
        let epilogue = read(family_text(r#"{"layout": "tn", "alignment": "aligned", "epilogue": "linear"}"#, "")).unwrap_err();
        assert!(epilogue.contains("epilogue `linear` applies no activation; its calls read the plain entries"), "{epilogue}");
        let mut other = FamilyTable::parse(&family_text(class, ""), path).unwrap();
        other.quantities = vec!["m".into(), "n".into()];
        assert!(TuningTable::from_family(&other).unwrap_err().contains("is not GEMM's (family `gemm` over [\"m\", \"n\", \"k\"])"));
        other.family = "softmax".into();
        assert_eq!(check_table(&other), Ok(()), "other families' tables are not GEMM's to check");
    }

    #[test]
    fn a_table_reads_back_as_written_and_the_earlier_format_converts() {
        let mut table = table();
        table.insert(entry([1, 16, 4096, 4096], Alignment::Aligned));
        table.insert(TuningEntry { epilogue: Some("gelu_tanh".into()), ..entry([64, 512, 512, 64], Alignment::Unaligned) });
        for entry in &mut table.entries {
            entry.ranked =
                rank(vec![candidate("gemm_tn_128x128x32", Strategy::Direct, 1.0), candidate("gemm_nt_128x128x32", Strategy::Padded, 0.5)])
                    .unwrap();
        }
        let text = serde_json::to_string_pretty(&table).unwrap();
        assert!(text.contains(r#""family": "gemm""#) && text.contains(r#""strategy": "padded""#), "{text}");
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("gemm").join("GPU-132sm.json");
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, &text).unwrap();
        assert_eq!(TuningTable::read(&path).unwrap(), table);
        // The earlier format: GEMM's own fields, buckets stated (and here wrong: computed again).
        let earlier = r#"{"format": 1, "device": {"name": "GPU", "capability": [9, 0], "sms": 132}, "compiler": "", "entries": [
            {"key": {"dtype": "bf16", "layout": "tn", "alignment": "aligned", "bucket": [0, 0, 0]}, "shape": [16, 4096, 4096],
             "cublas_ms": 1.0, "ranked": [{"variant": "gemm_tn_128x128x32", "strategy": "direct", "ms": 0.9}]}]}"#;
        let old = dir.path().join("GPU-132sm.json");
        std::fs::write(&old, earlier).unwrap();
        let converted = TuningTable::read_earlier_format(&old).unwrap();
        assert_eq!(converted.entries[0].key, Key::new(Dtype::Bf16, Layout::Tn, Alignment::Aligned, [1, 16, 4096, 4096]));
        std::fs::write(&old, earlier.replace("0.9", "-1")).unwrap();
        assert!(TuningTable::read_earlier_format(&old).unwrap_err().contains("variant gemm_tn_128x128x32 has time -1 ms"));
    }

    #[test]
    fn buckets_round_log2() {
        assert_eq!([bucket(1), bucket(16), bucket(22), bucket(23), bucket(3000), bucket(4096)], [0, 4, 4, 5, 12, 12]);
    }

    #[test]
    fn near_ties_are_ranked_by_strategy_and_name_not_by_time() {
        let ranked = rank(vec![
            candidate("b", Strategy::Direct, 1.00),
            candidate("a", Strategy::Direct, 1.015),
            candidate("c", Strategy::Padded, 0.99),
            candidate("d", Strategy::Direct, 1.5),
        ])
        .unwrap();
        let names: Vec<&str> = ranked.iter().map(|c| c.variant.as_str()).collect();
        assert_eq!(names, ["b", "c", "a", "d"], "c is fastest but b ties with it and ranks first as direct");
        // The same measurements in any order give the same ranking.
        let again = rank(ranked.iter().rev().cloned().collect()).unwrap();
        assert_eq!(again, ranked);
    }

    fn entry([batch, m, n, k]: [u64; 4], alignment: Alignment) -> TuningEntry {
        TuningEntry {
            key: Key::new(Dtype::Bf16, Layout::Tn, alignment, [batch, m, n, k]),
            shape: [m, n, k],
            batch,
            epilogue: None,
            cublas_ms: 1.0,
            ranked: vec![candidate("gemm_tn_128x128x32", Strategy::Direct, 1.0)],
        }
    }

    fn table() -> TuningTable {
        TuningTable::new(Device { name: "GPU".into(), capability: [9, 0], sms: 132, clocks: None }, String::new())
    }

    #[test]
    fn nearest_is_by_log_distance_within_the_class() {
        let mut table = table();
        for shape in [[1, 4096, 4096, 4096], [1, 2048, 2048, 2048], [1, 16, 4096, 4096]] {
            table.insert(entry(shape, Alignment::Aligned));
        }
        table.insert(entry([1, 3000, 3000, 3000], Alignment::Unaligned));
        let near = table.nearest(Dtype::Bf16, Layout::Tn, Alignment::Aligned, None, [1, 3000, 3000, 3000]);
        assert_eq!(near[0].shape, [4096, 4096, 4096]);
        assert_eq!(near.len(), 3);
        assert_eq!(table.nearest(Dtype::Bf16, Layout::Tn, Alignment::Aligned, None, [1, 32, 4000, 4000])[0].shape, [16, 4096, 4096]);
        assert!(table.nearest(Dtype::F16, Layout::Tn, Alignment::Aligned, None, [1, 32, 32, 32]).is_empty());
        assert_eq!(tilesmith_spec::tuning::file_name(&table.device), "GPU-132sm.json");
    }

    #[test]
    fn a_batch_is_a_problem_of_its_own_nearest_to_batches() {
        let mut table = table();
        for problem in [[1, 512, 512, 64], [64, 512, 512, 64], [1, 4096, 4096, 4096]] {
            table.insert(entry(problem, Alignment::Aligned));
        }
        assert_eq!(table.entries.len(), 3, "one problem and a batch of it are two entries");
        assert_eq!(table.nearest(Dtype::Bf16, Layout::Tn, Alignment::Aligned, None, [48, 512, 512, 64])[0].problem(), [64, 512, 512, 64]);
        assert_eq!(table.nearest(Dtype::Bf16, Layout::Tn, Alignment::Aligned, None, [1, 600, 512, 64])[0].problem(), [1, 512, 512, 64]);
        assert!(table
            .entry(&Key::new(Dtype::Bf16, Layout::Tn, Alignment::Aligned, [64, 512, 512, 64]), None, [64, 512, 512, 64])
            .is_some());
        assert!(table
            .entry(&Key::new(Dtype::Bf16, Layout::Tn, Alignment::Aligned, [60, 512, 512, 64]), None, [60, 512, 512, 64])
            .is_none());
        table.to_family().check().unwrap();
    }

    #[test]
    fn an_epilogue_entry_is_found_for_its_epilogue_only() {
        let mut table = table();
        let plain = entry([1, 16, 14336, 4096], Alignment::Aligned);
        let gelu = TuningEntry { epilogue: Some("gelu_tanh".into()), ..plain.clone() };
        table.insert(gelu.clone());
        table.insert(plain.clone());
        assert_eq!(table.entries, [plain.clone(), gelu.clone()], "two entries, plain first");
        let near = |epilogue| table.nearest(Dtype::Bf16, Layout::Tn, Alignment::Aligned, epilogue, [1, 16, 14336, 4096]);
        assert_eq!(near(Some("gelu_tanh")), [&gelu]);
        assert_eq!(near(None), [&plain]);
        assert!(near(Some("relu")).is_empty());
        assert_eq!(table.entry(&plain.key, Some("gelu_tanh"), plain.problem()), Some(&gelu));
        let text = serde_json::to_string(&gelu).unwrap();
        assert!(text.contains(r#""epilogue":"gelu_tanh""#), "{text}");
        assert!(!serde_json::to_string(&plain).unwrap().contains("epilogue"));
        table.entries[1].cublas_ms = f64::NAN;
        let err = table.to_family().check().unwrap_err();
        assert!(err.contains("(m=16 n=14336 k=4096 bf16 alignment=aligned epilogue=gelu_tanh layout=tn): baseline time NaN ms"), "{err}");
    }

    #[test]
    fn single_problems_read_and_write_as_before_batches() {
        let single = entry([1, 16, 4096, 4096], Alignment::Aligned);
        let text = serde_json::to_string(&single).unwrap();
        assert!(!text.contains("batch"), "{text}");
        assert_eq!(serde_json::from_str::<TuningEntry>(&text).unwrap(), single);
        let batch = entry([64, 512, 512, 64], Alignment::Aligned);
        let text = serde_json::to_string(&batch).unwrap();
        assert!(text.contains(r#""batch":6"#) && text.contains(r#""batch":64"#), "{text}");
        assert_eq!(serde_json::from_str::<TuningEntry>(&text).unwrap(), batch);
    }

    #[test]
    fn an_empty_batch_is_refused() {
        let mut table = table();
        let mut empty = entry([1, 512, 512, 64], Alignment::Aligned);
        empty.batch = 0;
        table.entries = vec![empty];
        assert!(table.to_family().check().unwrap_err().contains("a batch holds at least one problem"));
    }
}
