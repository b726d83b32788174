//! GEMM's tuning table: for one GPU, per GEMM problem class, the ways to compute it (variant
//! and strategy) ranked by measured time, beside cuBLAS. `tilesmith tune` writes it into the
//! tuning folder itself (`tuning/<GPU>-<SMs>sm.json`), the build carries it into the registry
//! as a plug-in table, and the dispatcher reads it.

use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use tilesmith_spec::tuning::{self, show_ms, valid_ms, valid_ms_words, Device, NEAR_TIE};
use tilesmith_spec::{Dtype, Layout};

/// The table format this tilesmith writes and reads.
pub const TUNING_FORMAT: u32 = 1;

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TuningTable {
    pub format: u32,
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

/// Orders measured candidates by the table's rule: by time, except that candidates within
/// [`NEAR_TIE`] of the fastest are ranked among themselves by strategy and name, and so on
/// down the list from the next one left. A time outside [`tuning::MIN_MS`]..=[`tuning::MAX_MS`] is refused,
/// naming its candidate.
pub fn rank(mut candidates: Vec<Candidate>) -> Result<Vec<Candidate>, String> {
    if let Some(bad) = candidates.iter().find(|c| !valid_ms(c.ms)) {
        return Err(format!(
            "candidate {} ({:?}) has time {} ms; times are {}",
            bad.variant,
            bad.strategy,
            show_ms(bad.ms),
            valid_ms_words()
        ));
    }
    candidates.sort_by(|a, b| a.ms.total_cmp(&b.ms).then_with(|| (a.strategy, &a.variant).cmp(&(b.strategy, &b.variant))));
    let mut ranked = Vec::with_capacity(candidates.len());
    while !candidates.is_empty() {
        let limit = candidates[0].ms * (1.0 + NEAR_TIE);
        let tied = candidates.iter().take_while(|c| c.ms <= limit).count().max(1);
        let mut group: Vec<Candidate> = candidates.drain(..tied).collect();
        group.sort_by(|a, b| (a.strategy, &a.variant).cmp(&(b.strategy, &b.variant)));
        ranked.extend(group);
    }
    Ok(ranked)
}

/// Log-space distance between two problems [problems, M, N, K]: the sum over the four of
/// |log2(a) - log2(b)|. A batch of 2 is as far from one problem as twice the M is.
pub fn distance(a: [u64; 4], b: [u64; 4]) -> f64 {
    a.iter().zip(b).map(|(&x, y)| ((x.max(1) as f64).log2() - (y.max(1) as f64).log2()).abs()).sum()
}

/// The build's check of a plug-in table (`compile::Options::table_checks`): GEMM's are the
/// plug-in tables this crate reads, so every one must read as a [`TuningTable`].
pub fn check_plugin_table(table: &tuning::PluginTable) -> Result<(), String> {
    TuningTable::parse(&table.text, &table.path).map(drop)
}

impl TuningTable {
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
        let mut entries: Vec<&TuningEntry> = self
            .entries
            .iter()
            .filter(|e| e.key.dtype == dtype && e.key.layout == layout && e.key.alignment == alignment && e.epilogue.as_deref() == epilogue)
            .collect();
        entries
            .sort_by(|a, b| distance(a.problem(), problem).total_cmp(&distance(b.problem(), problem)).then(a.problem().cmp(&b.problem())));
        entries
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

    /// Reads a table, checking its format, the file name its device goes by and every entry
    /// ([`TuningTable::check`]).
    pub fn read(path: &Path) -> Result<TuningTable, String> {
        let text = tilesmith_spec::files::read_to_string(path).map_err(|err| format!("cannot read {}: {err}", path.display()))?;
        TuningTable::parse(&text, path)
    }

    /// Parses a table's text as [`TuningTable::read`] does; `path` is the file it came from.
    pub fn parse(text: &str, path: &Path) -> Result<TuningTable, String> {
        let table: TuningTable = serde_json::from_str(text).map_err(|err| format!("{}: not a tuning table ({err})", path.display()))?;
        if table.format != TUNING_FORMAT {
            return Err(format!(
                "{}: tuning table format {}, this tilesmith reads {TUNING_FORMAT}: run `tilesmith tune` again",
                path.display(),
                table.format
            ));
        }
        let expected = tuning::file_name(&table.device);
        if path.file_name().is_some_and(|name| name.to_string_lossy() != expected) {
            return Err(format!(
                "{}: the table is for {} ({} SMs), whose table is named {expected}; rename it or measure it again",
                path.display(),
                table.device.name,
                table.device.sms
            ));
        }
        table.check().map_err(|rule| format!("{}: {rule}", path.display()))?;
        Ok(table)
    }

    /// The rules every table meets: a device with SMs, and entries whose problems have no zero,
    /// whose key holds the buckets of their problem, and whose times (cuBLAS's and every
    /// candidate's) are [`valid_ms`], candidates in rank order; clocks above 0 where recorded,
    /// and no two entries for one problem.
    pub fn check(&self) -> Result<(), String> {
        self.device.check()?;
        let mut seen = std::collections::BTreeMap::new();
        for (index, entry) in self.entries.iter().enumerate() {
            let problem = describe(entry.problem());
            let with = entry.epilogue.as_deref().map(|e| format!(" with epilogue {e}")).unwrap_or_default();
            let at = format!("entry {} ({problem} {} {} {}{with})", index + 1, entry.key.dtype, entry.key.layout, entry.key.alignment);
            if let Some(first) = seen.insert(entry.identity(), index + 1) {
                return Err(format!("{at}: measures the same problem as entry {first}; keep one"));
            }
            if entry.problem().contains(&0) {
                return Err(format!("{at}: a problem has no zero dimension and a batch at least one problem"));
            }
            let expected = Key::new(entry.key.dtype, entry.key.layout, entry.key.alignment, entry.problem());
            if (entry.key.bucket, entry.key.batch) != (expected.bucket, expected.batch) {
                return Err(format!(
                    "{at}: buckets {:?} and batch {} are not its problem's ({:?} and {})",
                    entry.key.bucket, entry.key.batch, expected.bucket, expected.batch
                ));
            }
            if !valid_ms(entry.cublas_ms) {
                return Err(format!("{at}: cuBLAS's time {} ms is not {}", show_ms(entry.cublas_ms), valid_ms_words()));
            }
            let ranked = rank(entry.ranked.clone()).map_err(|rule| format!("{at}: {rule}"))?;
            if ranked != entry.ranked {
                return Err(format!("{at}: its candidates are not in rank order (by time, near ties by strategy and name)"));
            }
        }
        Ok(())
    }

    /// The variants the entries rank that `known` does not hold: the dispatcher skips them, so
    /// a table naming them was measured with another registry.
    pub fn unknown_variants(&self, known: impl Fn(&str) -> bool) -> Vec<String> {
        let mut unknown: Vec<String> =
            self.entries.iter().flat_map(|e| &e.ranked).filter(|c| !known(&c.variant)).map(|c| c.variant.clone()).collect();
        unknown.sort();
        unknown.dedup();
        unknown
    }

    /// Reads every table of a tuning folder ([`TuningTable::paths`]), refusing two that claim
    /// one device.
    pub fn read_all(dir: &Path) -> Result<Vec<(PathBuf, TuningTable)>, String> {
        let paths = tuning::paths(dir).map_err(|err| format!("cannot list {}: {err}", dir.display()))?;
        let mut tables: Vec<(PathBuf, TuningTable)> = Vec::new();
        for path in paths {
            let table = TuningTable::read(&path)?;
            if let Some((other, _)) = tables.iter().find(|(_, t)| t.device.is(&table.device)) {
                return Err(format!("{} and {} are both tables for {}; keep one", other.display(), path.display(), table.device));
            }
            tables.push((path, table));
        }
        Ok(tables)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn candidate(variant: &str, strategy: Strategy, ms: f64) -> Candidate {
        Candidate { variant: variant.into(), strategy, ms }
    }

    /// A table of one device with these clocks and entries (`(shape, cuBLAS ms, candidate ms)`).
    fn table_text(clocks: &str, entries: &[([u64; 3], &str, &str)]) -> String {
        let entries: Vec<String> = entries
            .iter()
            .map(|(shape, cublas, ms)| {
                let bucket = shape.map(|d| (d as f64).log2().round() as u64);
                format!(
                    r#"{{"key": {{"dtype": "bf16", "layout": "tn", "alignment": "aligned", "bucket": {bucket:?}}}, "shape": {shape:?},
                    "cublas_ms": {cublas}, "ranked": [{{"variant": "gemm_tn_128x128x32", "strategy": "direct", "ms": {ms}}}]}}"#
                )
            })
            .collect();
        format!(
            r#"{{"format": 1, "device": {{"name": "GPU", "capability": [9, 0], "sms": 132{clocks}}}, "compiler": "", "entries": [{}]}}"#,
            entries.join(", ")
        )
    }

    #[test]
    fn nonsense_tables_are_refused_in_words() {
        let path = Path::new("GPU-132sm.json");
        let read = |text: &str| TuningTable::parse(text, path).map(drop);
        assert_eq!(read(&table_text("", &[([4096; 3], "1.0", "0.9")])), Ok(()));
        let zero = read(&table_text(r#", "clocks": {"sm_mhz": 0, "memory_gbps": 0}"#, &[])).unwrap_err();
        assert!(zero.contains("device GPU (132 SMs, compute capability 9.0): clocks of 0 MHz"), "{zero}");
        let twice = read(&table_text("", &[([4096; 3], "1.0", "0.9"), ([4096; 3], "1.0", "0.8")])).unwrap_err();
        assert!(twice.contains("entry 2 (4096x4096x4096 bf16 tn aligned): measures the same problem as entry 1"), "{twice}");
        for tiny in [("1e-300", "0.9"), ("1.0", "1e-300")] {
            let message = read(&table_text("", &[([4096; 3], tiny.0, tiny.1)])).unwrap_err();
            assert!(message.contains(" 1e-300 ms") && message.contains("between 1e-6 and 1e7 ms"), "{message}");
        }
        let no_sms = TuningTable::parse(&table_text("", &[]).replace("\"sms\": 132", "\"sms\": 0"), Path::new("GPU-0sm.json")).unwrap_err();
        assert!(no_sms.contains("device `GPU (0 SMs, compute capability 9.0)`"), "{no_sms}");
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
            ranked: vec![],
        }
    }

    fn table() -> TuningTable {
        TuningTable {
            format: TUNING_FORMAT,
            device: Device { name: "GPU".into(), capability: [9, 0], sms: 132, clocks: None },
            compiler: String::new(),
            entries: vec![],
        }
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
        assert_eq!(tuning::file_name(&table.device), "GPU-132sm.json");
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
        table.check().unwrap();
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
        assert!(table.check().unwrap_err().contains("16x14336x4096 bf16 tn aligned with epilogue gelu_tanh"));
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
    fn an_entry_whose_batch_is_not_its_bucket_is_refused() {
        let mut table = table();
        let mut wrong = entry([64, 512, 512, 64], Alignment::Aligned);
        wrong.key.batch = 0;
        table.insert(wrong);
        let err = table.check().unwrap_err();
        assert!(err.contains("64 x 512x512x64") && err.contains("batch 0") && err.contains("6)"), "{err}");
        let mut empty = entry([1, 512, 512, 64], Alignment::Aligned);
        empty.batch = 0;
        table.entries = vec![empty];
        assert!(table.check().unwrap_err().contains("at least one problem"));
    }
}
