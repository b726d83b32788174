//! The tuning table of any family: for one GPU and one family, each measured problem (a value
//! per declared quantity) and its variants ranked by median time, beside the family's baseline.
//! `tilesmith tune` writes it into `tuning/<family>/<GPU>-<SMs>sm.json`, the build carries it
//! into the registry, and the runtime's chooser reads it. A plug-in's dispatcher keeps its
//! tables in the same format: its entries state a `class` (what else tells its calls apart)
//! and its candidates a `strategy` (how it ran them), both absent for the family's chooser.

use crate::axes::Dtype;
use crate::tuning::{self, show_ms, valid_ms, Device, NEAR_TIE};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The format this tilesmith writes and reads.
pub const FAMILY_TABLE_FORMAT: u32 = 1;

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FamilyTable {
    pub format: u32,
    pub family: String,
    pub device: Device,
    /// The compiler the registry was built with when the table was measured.
    pub compiler: String,
    /// The family's quantities, in declared order: what each entry's `problem` lists.
    pub quantities: Vec<String>,
    pub entries: Vec<FamilyEntry>,
}

/// One measured problem: packed operands, of one dtype.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FamilyEntry {
    pub dtype: Dtype,
    /// What else tells calls apart than their dtype and quantities, for a plug-in's dispatcher
    /// (a layout, an alignment, an epilogue with entries of its own); empty (left out of the file) for the family's chooser, which reads only entries without one.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub class: BTreeMap<String, String>,
    /// A value per quantity of the table, in its order.
    pub problem: Vec<u64>,
    /// Problems in the batch measured (the family's declared `batch`), each after the one
    /// before; 1 (left out of the file) for a single problem.
    #[serde(default = "one", skip_serializing_if = "is_one")]
    pub batch: u64,
    /// The family's declared baseline on the same problem (a device copy of the bytes moved,
    /// or the library the family names).
    pub baseline_ms: f64,
    /// Every variant that took the problem, fastest first ([`rank`]).
    pub ranked: Vec<Timed>,
}

fn one() -> u64 {
    1
}

fn is_one(value: &u64) -> bool {
    *value == 1
}

/// A variant's median time on an entry's problem.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Timed {
    pub variant: String,
    /// How a plug-in's dispatcher ran it other than directly on the call's buffers (`padded`:
    /// through aligned copies); absent (left out of the file) for a direct run, the only kind the family's
    /// chooser reads.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub strategy: Option<String>,
    pub ms: f64,
    /// The first [`STAMP_DIGITS`] hex digits of the SHA-256 of the variant's source when it was
    /// timed (its manifest entry's `source_sha256`); absent in timings made before it was
    /// recorded, which are never taken for stale.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
}

/// How many hex digits of a source's SHA-256 a timing records.
pub const STAMP_DIGITS: usize = 16;

/// The stamp a timing records of a source whose SHA-256 is `sha256` (hex); none where the
/// manifest states none.
pub fn stamp(sha256: &str) -> Option<String> {
    sha256.get(..STAMP_DIGITS).map(str::to_string)
}

impl Timed {
    /// Whether it timed another source than the one whose SHA-256 is `current`: the variant
    /// changed since, and the time is a hint, not a measurement of what runs. A timing without a
    /// stamp, or a variant without a hash, is not stale.
    pub fn is_stale(&self, current: &str) -> bool {
        self.source.as_deref().is_some_and(|own| !current.is_empty() && !current.starts_with(own))
    }

    /// [`Timed::is_stale`] against the sources as `current` gives them (a variant's
    /// `source_sha256` now, none where it is not held).
    pub fn is_stale_in<'s>(&self, current: impl Fn(&str) -> Option<&'s str>) -> bool {
        current(&self.variant).is_some_and(|now| self.is_stale(now))
    }

    /// Whether it ran the variant on the call's own buffers.
    pub fn is_direct(&self) -> bool {
        self.strategy.is_none()
    }
}

/// Orders timed variants: by time, except that those within [`NEAR_TIE`] of the fastest left
/// are ranked among themselves by strategy (direct first) and name, so that noise does not
/// reorder ties.
pub fn rank(mut timed: Vec<Timed>) -> Result<Vec<Timed>, String> {
    if let Some(bad) = timed.iter().find(|t| !valid_ms(t.ms)) {
        return Err(format!("variant {} has time {} ms; times are {}", bad.variant, show_ms(bad.ms), crate::tuning::valid_ms_words()));
    }
    let order = |a: &Timed, b: &Timed| (&a.strategy, &a.variant).cmp(&(&b.strategy, &b.variant));
    timed.sort_by(|a, b| a.ms.total_cmp(&b.ms).then_with(|| order(a, b)));
    let mut ranked = Vec::with_capacity(timed.len());
    while !timed.is_empty() {
        let limit = timed[0].ms * (1.0 + NEAR_TIE);
        let tied = timed.iter().take_while(|t| t.ms <= limit).count().max(1);
        let mut group: Vec<Timed> = timed.drain(..tied).collect();
        group.sort_by(order);
        ranked.extend(group);
    }
    Ok(ranked)
}

/// Log-space distance between two problems: the sum over their quantities of |log2(a) - log2(b)|.
/// Twice as many rows is as far as twice as many columns.
pub fn distance(a: &[u64], b: &[u64]) -> f64 {
    a.iter().zip(b).map(|(&x, &y)| ((x.max(1) as f64).log2() - (y.max(1) as f64).log2()).abs()).sum()
}

/// How many measured problems, nearest first, a variant's estimate reads ([`estimate`]).
pub const NEIGHBOURS: usize = 4;

/// How many measured problems near a call, nearest first, a pick reads at most: its time stays
/// bounded however densely a table is measured around the call.
pub const NEAR_READ: usize = 4 * NEIGHBOURS;

/// A variant's estimated time on a call, from the measured problems near it ([`estimate`]).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Estimate {
    /// ln(its time / the fastest time) there: 0 where it is estimated as fast as the fastest
    /// of each problem read.
    pub slowdown: f64,
    /// How many problems it was read from.
    pub read: usize,
}

/// The estimate of one variant on a call from the measured problems near it, nearest first:
/// for each, its distance from the call ([`FamilyEntry::distance`]), the variant's time there
/// (none where it was not timed there) and the fastest time there. Of the first [`NEIGHBOURS`]
/// that time it, the mean of ln(its time / the fastest), each weighted by 1/(distance + 1/4)²;
/// the problem alone where the nearest that times it is the call's own; none where no problem
/// times it.
///
/// Reading a variant's own neighbours rather than the nearest problem's ranking keeps a pick
/// right between measured problems where the fastest variant changes (`tilesmith replay`, each
/// entry of the committed tables held out: docs/chooser.md).
pub fn estimate(near: impl IntoIterator<Item = (f64, Option<f64>, f64)>) -> Option<Estimate> {
    let (mut sum, mut weights, mut read) = (0.0, 0.0, 0);
    for (distance, own, fastest) in near {
        let Some(own) = own else { continue };
        // A problem measured exactly is its own answer: the call's ranking there is known.
        if read == 0 && distance == 0.0 {
            return Some(Estimate { slowdown: (own / fastest).ln(), read: 1 });
        }
        let weight = 1.0 / (distance + 0.25).powi(2);
        sum += weight * (own / fastest).ln();
        weights += weight;
        read += 1;
        if read == NEIGHBOURS {
            break;
        }
    }
    (read > 0).then(|| Estimate { slowdown: sum / weights, read })
}

/// A taker's timing in one measured problem: its time, its place in the ranking, and whether
/// it timed a source that changed since (a hint).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Timing {
    pub ms: f64,
    pub rank: usize,
    pub stale: bool,
}

/// The pick [`least`] makes: which taker, its estimate, whether it was read from hints only,
/// the nearest problem that times it with its rank there (for the reason), and every taker's
/// estimate (none where no problem near times it).
#[derive(Clone, Debug, PartialEq)]
pub struct Least {
    pub taker: usize,
    pub estimate: Estimate,
    pub hints: bool,
    pub entry: usize,
    pub rank: usize,
    pub estimates: Vec<Option<Estimate>>,
}

/// How every table is read: of `takers` variants (or ways of running one) that take a call,
/// each estimated from the measured problems `near` it ([`estimate`]; `timing(taker, entry)`
/// says how an entry timed it), the least estimate; among those within [`NEAR_TIE`] of it, the
/// first by `prefer`, which orders (taker, slowdown) pairs (an unchecked variant first, a
/// direct run first). Timings of stale sources are read only where no taker has a timing of
/// its source as it is. None where no problem near times any taker.
pub fn least(
    takers: usize,
    near: &[(f64, &FamilyEntry)],
    timing: impl Fn(usize, usize) -> Option<Timing>,
    prefer: impl Fn((usize, f64), (usize, f64)) -> std::cmp::Ordering,
) -> Option<Least> {
    let estimates = |hints: bool| -> Vec<(usize, Estimate)> {
        (0..takers)
            .filter_map(|taker| {
                let own = |entry: usize| timing(taker, entry).filter(|t| hints || !t.stale).map(|t| t.ms);
                let times = near.iter().enumerate().map(|(i, (distance, e))| (*distance, own(i), e.fastest_ms()));
                estimate(times).map(|e| (taker, e))
            })
            .collect()
    };
    let (estimated, hints) = match estimates(false) {
        fresh if !fresh.is_empty() => (fresh, false),
        _ => (estimates(true), true),
    };
    let least = estimated.iter().map(|(_, e)| e.slowdown).min_by(f64::total_cmp)?;
    let tie = least + (1.0 + NEAR_TIE).ln();
    let &(taker, estimate) = estimated
        .iter()
        .filter(|(_, e)| e.slowdown <= tie)
        .min_by(|(a, ea), (b, eb)| prefer((*a, ea.slowdown), (*b, eb.slowdown)))
        .expect("the least is within a tie of itself");
    let (entry, rank) = (0..near.len())
        .find_map(|i| timing(taker, i).filter(|t| hints || !t.stale).map(|t| (i, t.rank)))
        .expect("an estimate reads an entry");
    let mut estimates = vec![None; takers];
    for (t, e) in estimated {
        estimates[t] = Some(e);
    }
    Some(Least { taker, estimate, hints, entry, rank, estimates })
}

/// A problem as messages write it: `rows=4096 cols=50257`.
pub fn describe(quantities: &[String], problem: &[u64]) -> String {
    quantities.iter().zip(problem).map(|(q, v)| format!("{q}={v}")).collect::<Vec<_>>().join(" ")
}

impl FamilyEntry {
    /// The time of its fastest variant.
    pub fn fastest_ms(&self) -> f64 {
        self.ranked.iter().map(|t| t.ms).fold(f64::INFINITY, f64::min)
    }

    /// Its fastest variant's speed relative to the baseline: above 1 is faster.
    pub fn ratio(&self, timed: &Timed) -> f64 {
        self.baseline_ms / timed.ms
    }

    /// Its distance from a call of `batch` problems of `problem`: [`distance`] over the
    /// quantities and the batch, so that a batch of 2 is as far from one problem as twice the
    /// rows are.
    pub fn distance(&self, batch: u64, problem: &[u64]) -> f64 {
        distance(&self.problem, problem) + distance(&[self.batch], &[batch])
    }

    /// What tells it apart from the table's other entries, in the table's order.
    fn identity(&self) -> (Dtype, &BTreeMap<String, String>, u64, &[u64]) {
        (self.dtype, &self.class, self.batch, &self.problem)
    }

    /// It as messages name it: `entry 3 (rows=4096 cols=4096 bf16)`, with its batch and class.
    fn describe(&self, index: usize, quantities: &[String]) -> String {
        let batch = if self.batch == 1 { String::new() } else { format!("batch={} ", self.batch) };
        let class: String = self.class.iter().map(|(k, v)| format!(" {k}={v}")).collect();
        format!("entry {index} ({batch}{} {}{class})", describe(quantities, &self.problem), self.dtype)
    }
}

impl FamilyTable {
    /// An empty table of `family` on `device`.
    pub fn new(family: &str, device: Device, compiler: String, quantities: Vec<String>) -> FamilyTable {
        FamilyTable { format: FAMILY_TABLE_FORMAT, family: family.to_string(), device, compiler, quantities, entries: Vec::new() }
    }

    /// The entries of `dtype` and `class` within `within` of `batch` problems of `problem`, with
    /// their distances, nearest first ([`FamilyEntry::distance`]; equal distances by batch and
    /// problem). Only those within are sorted: a pick costs one pass over the table.
    pub fn nearest(
        &self,
        dtype: Dtype,
        class: &BTreeMap<String, String>,
        batch: u64,
        problem: &[u64],
        within: f64,
    ) -> Vec<(f64, &FamilyEntry)> {
        // Each distance computed once, not 2·log2(n) times in the sort's comparator.
        let mut entries: Vec<(f64, &FamilyEntry)> = self
            .entries
            .iter()
            .filter(|e| e.dtype == dtype)
            .map(|e| (e.distance(batch, problem), e))
            // The class compared last: its words cost more than a distance.
            .filter(|(d, e)| *d <= within && &e.class == class)
            .collect();
        entries.sort_by(|(da, a), (db, b)| da.total_cmp(db).then((a.batch, &a.problem).cmp(&(b.batch, &b.problem))));
        entries
    }

    /// Adds or replaces the entry of its dtype, class, batch and problem, keeping entries in
    /// order.
    pub fn insert(&mut self, entry: FamilyEntry) {
        self.entries.retain(|e| e.identity() != entry.identity());
        self.entries.push(entry);
        self.entries.sort_by(|a, b| a.identity().cmp(&b.identity()));
    }

    /// Where the table of `family` on `device` lives under a tuning folder.
    pub fn path(tuning: &Path, family: &str, device: &Device) -> PathBuf {
        tuning.join(family).join(tuning::file_name(device))
    }

    /// Parses a table's text; `path` is where it came from, which must be where
    /// [`FamilyTable::path`] puts it (its folder named for its family, its file for its device).
    pub fn parse(text: &str, path: &Path) -> Result<FamilyTable, String> {
        let table: FamilyTable =
            serde_json::from_str(text).map_err(|err| format!("{}: not a family tuning table ({err})", path.display()))?;
        if table.format != FAMILY_TABLE_FORMAT {
            return Err(format!(
                "{}: family tuning table format {}, this tilesmith reads {FAMILY_TABLE_FORMAT}: run `tilesmith tune --family {}` again",
                path.display(),
                table.format,
                table.family
            ));
        }
        table.check().map_err(|rule| format!("{}: {rule}", path.display()))?;
        let expected = tuning::file_name(&table.device);
        let folder = path.parent().and_then(Path::file_name).map(|f| f.to_string_lossy().into_owned());
        let file = path.file_name().map(|f| f.to_string_lossy().into_owned());
        if folder.as_deref().is_some_and(|f| f != table.family) || file.as_deref().is_some_and(|f| f != expected) {
            return Err(format!(
                "{}: the table is of family `{}` on {}, which goes in {}/{expected}; move it or measure it again",
                path.display(),
                table.family,
                table.device,
                table.family
            ));
        }
        Ok(table)
    }

    /// Reads a table ([`FamilyTable::parse`]).
    pub fn read(path: &Path) -> Result<FamilyTable, String> {
        let text = crate::files::read_to_string(path).map_err(|err| format!("cannot read {}: {err}", path.display()))?;
        FamilyTable::parse(&text, path)
    }

    /// The rules every table meets: a family and quantities that are identifiers, a device as
    /// [`Device::check`] has it, entries with a value above 0 for each quantity and the batch,
    /// classes and strategies that are names, valid times, variants in rank order, and no two
    /// entries for one dtype, class, batch and problem.
    pub fn check(&self) -> Result<(), String> {
        if !crate::config::is_identifier(&self.family) {
            return Err(format!("family `{}` is not a name (letters, digits and _, not starting with a digit)", self.family));
        }
        self.device.check()?;
        if self.quantities.is_empty() || self.quantities.iter().any(|q| !crate::config::is_identifier(q)) {
            return Err(format!("quantities {:?}: a table lists its family's quantities, each a name", self.quantities));
        }
        let mut seen = std::collections::BTreeMap::new();
        for (index, entry) in self.entries.iter().enumerate() {
            let at = entry.describe(index + 1, &self.quantities);
            if entry.problem.len() != self.quantities.len() || entry.problem.contains(&0) {
                return Err(format!("{at}: its problem {:?} needs a value above 0 for each of {:?}", entry.problem, self.quantities));
            }
            if entry.batch == 0 {
                return Err(format!("{at}: a batch holds at least one problem"));
            }
            let names = entry.class.iter().flat_map(|(k, v)| [k, v]).chain(entry.ranked.iter().filter_map(|t| t.strategy.as_ref()));
            if let Some(bad) = names.into_iter().find(|name| !crate::config::is_identifier(name)) {
                return Err(format!("{at}: `{bad}` in its class or a strategy is not a name (letters, digits and _)"));
            }
            if !valid_ms(entry.baseline_ms) {
                return Err(format!(
                    "{at}: baseline time {} ms; times are {}",
                    show_ms(entry.baseline_ms),
                    crate::tuning::valid_ms_words()
                ));
            }
            if entry.ranked.is_empty() {
                return Err(format!("{at}: ranks no variant"));
            }
            if let Some(bad) = entry
                .ranked
                .iter()
                .find(|t| t.source.as_deref().is_some_and(|s| s.len() != STAMP_DIGITS || !s.bytes().all(|b| b.is_ascii_hexdigit())))
            {
                return Err(format!("{at}: {}'s source stamp is not {STAMP_DIGITS} hex digits", bad.variant));
            }
            let ranked = rank(entry.ranked.clone()).map_err(|rule| format!("{at}: {rule}"))?;
            if ranked != entry.ranked {
                return Err(format!("{at}: its variants are not in rank order (fastest first, near ties direct first, then by name)"));
            }
            if let Some(first) = seen.insert(entry.identity(), index + 1) {
                return Err(format!("{at}: measures the same problem as entry {first}"));
            }
        }
        Ok(())
    }

    /// The table as a registry built for some variants only carries it: each entry ranks those
    /// `built` holds (ranked again), and an entry left with none is dropped.
    pub fn keeping(&self, built: impl Fn(&str) -> bool) -> Result<FamilyTable, String> {
        let mut table = self.clone();
        for entry in &mut table.entries {
            entry.ranked = rank(entry.ranked.drain(..).filter(|t| built(&t.variant)).collect())?;
        }
        table.entries.retain(|e| !e.ranked.is_empty());
        Ok(table)
    }

    /// The table's file text: pretty JSON, one line at the end.
    pub fn to_text(&self) -> Result<String, String> {
        serde_json::to_string_pretty(self).map(|json| json + "\n").map_err(|e| e.to_string())
    }

    /// Whether it can serve the chooser of `family` (its declaration): problems of the family's
    /// quantities, ranking only variants `ranks` holds (the family's own, not its reference
    /// variants). The build checks every table so before it carries it; a registry when it
    /// opens.
    pub fn check_serves(&self, family: &crate::Family, ranks: impl Fn(&str) -> bool) -> Result<(), String> {
        if self.quantities != family.quantities {
            return Err(format!(
                "it measures problems of quantities {}, but family {} declares {}",
                self.quantities.join(", "),
                self.family,
                family.quantities.join(", ")
            ));
        }
        let unknown = self.unknown_variants(ranks);
        match unknown.first() {
            Some(first) => Err(format!(
                "it ranks {} variant(s) that are not variants of {} the chooser may run ({first}{}): a reference variant, or one \
                 not declared or not built",
                unknown.len(),
                self.family,
                if unknown.len() > 1 { ", ..." } else { "" }
            )),
            None => Ok(()),
        }
    }

    /// The timings of variants whose source changed since (`current` gives a variant's
    /// `source_sha256` now, none where it is not held): how many, and the variants, by name.
    pub fn stale<'s>(&self, current: impl Fn(&str) -> Option<&'s str>) -> (usize, Vec<String>) {
        let stale: Vec<&Timed> = self.entries.iter().flat_map(|e| &e.ranked).filter(|t| t.is_stale_in(&current)).collect();
        let mut variants: Vec<String> = stale.iter().map(|t| t.variant.clone()).collect();
        variants.sort();
        variants.dedup();
        (stale.len(), variants)
    }

    /// How a message names the stale timings of [`FamilyTable::stale`]; none where there are none.
    pub fn stale_words<'s>(&self, current: impl Fn(&str) -> Option<&'s str>) -> Option<String> {
        let (count, variants) = self.stale(current);
        let first: Vec<&str> = variants.iter().take(3).map(String::as_str).collect();
        (count > 0).then(|| {
            format!(
                "{count} timing(s) of {} variant(s) whose source changed since they were timed ({}{}): the chooser reads them as \
                 hints; `tilesmith tune --family {}` measures them again",
                variants.len(),
                first.join(", "),
                if variants.len() > 3 { ", ..." } else { "" },
                self.family
            )
        })
    }

    /// The variants the entries rank that `known` does not hold.
    pub fn unknown_variants(&self, known: impl Fn(&str) -> bool) -> Vec<String> {
        let mut unknown: Vec<String> =
            self.entries.iter().flat_map(|e| &e.ranked).filter(|t| !known(&t.variant)).map(|t| t.variant.clone()).collect();
        unknown.sort();
        unknown.dedup();
        unknown
    }

    /// Every family table under a tuning folder (`<family>/*.json`), in path order, with its
    /// path relative to the folder (`softmax/NVIDIA_H200-132sm.json`); none where the folder
    /// does not exist.
    pub fn paths(tuning: &Path) -> std::io::Result<Vec<(String, PathBuf)>> {
        if !tuning.is_dir() {
            return Ok(Vec::new());
        }
        let mut out = Vec::new();
        for folder in std::fs::read_dir(tuning)? {
            let folder = folder?.path();
            if !folder.is_dir() {
                continue;
            }
            let family = folder.file_name().map(|f| f.to_string_lossy().into_owned()).unwrap_or_default();
            for file in std::fs::read_dir(&folder)? {
                let path = file?.path();
                if path.extension().is_some_and(|x| x == "json") {
                    let name = path.file_name().map(|f| f.to_string_lossy().into_owned()).unwrap_or_default();
                    out.push((format!("{family}/{name}"), path));
                }
            }
        }
        out.sort();
        Ok(out)
    }

    /// Reads every family table under a tuning folder ([`FamilyTable::paths`]).
    pub fn read_all(tuning: &Path) -> Result<Vec<(String, FamilyTable)>, String> {
        let paths = FamilyTable::paths(tuning).map_err(|err| format!("cannot list {}: {err}", tuning.display()))?;
        paths.into_iter().map(|(name, path)| Ok((name, FamilyTable::read(&path)?))).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn device() -> Device {
        Device { name: "GPU".into(), capability: [9, 0], sms: 132, clocks: None }
    }

    /// An entry's problem and its ranked (variant, ms).
    type Row<'a> = (&'a [u64], &'a [(&'a str, f64)]);

    fn table(entries: &[Row]) -> FamilyTable {
        let mut table = FamilyTable::new("softmax", device(), "nvcc".into(), vec!["rows".into(), "cols".into()]);
        table.entries = entries
            .iter()
            .map(|(problem, ranked)| FamilyEntry {
                dtype: Dtype::Bf16,
                class: BTreeMap::new(),
                problem: problem.to_vec(),
                batch: 1,
                baseline_ms: 1.0,
                ranked: ranked.iter().map(|(v, ms)| Timed { variant: v.to_string(), strategy: None, ms: *ms, source: None }).collect(),
            })
            .collect();
        table
    }

    #[test]
    fn nearest_is_by_log_distance_over_the_quantities() {
        let t = table(&[(&[1024, 1024], &[("a", 1.0)]), (&[8192, 8192], &[("b", 1.0)]), (&[65536, 1024], &[("c", 1.0)])]);
        let plain = BTreeMap::new();
        let order: Vec<&str> =
            t.nearest(Dtype::Bf16, &plain, 1, &[60000, 1000], f64::INFINITY).iter().map(|(_, e)| e.ranked[0].variant.as_str()).collect();
        assert_eq!(order, ["c", "a", "b"]);
        assert!(t.nearest(Dtype::F32, &plain, 1, &[1024, 1024], f64::INFINITY).is_empty());
        assert_eq!(t.nearest(Dtype::Bf16, &plain, 1, &[60000, 1000], 1.0).len(), 1, "only c lies within 1");
        assert_eq!(distance(&[2048, 1024], &[1024, 2048]), 2.0);
    }

    /// The least estimate runs; a near tie goes to the preferred taker; a stale timing counts
    /// only where no taker has a fresh one, and the pick says so.
    #[test]
    fn the_least_estimate_runs_and_ties_go_to_the_preferred() {
        let t = table(&[(&[4096, 4096], &[("a", 1.0), ("b", 1.01), ("c", 1.5)]), (&[8192, 4096], &[("c", 1.0), ("a", 1.2)])]);
        let near: Vec<(f64, &FamilyEntry)> = t.entries.iter().enumerate().map(|(i, e)| (i as f64, e)).collect();
        let names = ["a", "b", "c"];
        let timing = |stale: &'static [&'static str]| {
            let near = &near;
            move |taker: usize, entry: usize| {
                let ranked = &near[entry].1.ranked;
                let rank = ranked.iter().position(|r| r.variant == names[taker])?;
                Some(Timing { ms: ranked[rank].ms, rank, stale: stale.contains(&names[taker]) })
            }
        };
        let by_name = |(a, _): (usize, f64), (b, _): (usize, f64)| a.cmp(&b);
        let pick = least(3, &near, timing(&[]), by_name).unwrap();
        // The exact problem is the answer: a (0) and b (ln 1.01, a near tie); a is preferred.
        assert_eq!((pick.taker, pick.entry, pick.rank, pick.hints), (0, 0, 0, false));
        assert!(pick.estimates[1].is_some_and(|e| e.slowdown > 0.0) && pick.estimates[2].is_some());
        let b_first = |(a, _): (usize, f64), (b, _): (usize, f64)| (a != 1).cmp(&(b != 1));
        assert_eq!(least(3, &near, timing(&[]), b_first).unwrap().taker, 1, "a tie goes to the preferred");
        assert_eq!(least(3, &near, timing(&["a", "b"]), by_name).unwrap().taker, 2, "stale timings wait");
        let hinted = least(3, &near, timing(&["a", "b", "c"]), by_name).unwrap();
        assert!(hinted.hints && hinted.taker == 0);
        assert_eq!(least(3, &[], timing(&[]), by_name), None);
    }

    #[test]
    fn nonsense_is_refused_naming_the_entry_and_rule() {
        let path = Path::new("tuning/softmax/GPU-132sm.json");
        let parse = |t: &FamilyTable| FamilyTable::parse(&serde_json::to_string(t).unwrap(), path);
        assert!(parse(&table(&[(&[4096, 4096], &[("a", 1.0), ("b", 2.0)])])).is_ok());
        let slow_first = parse(&table(&[(&[4096, 4096], &[("b", 2.0), ("a", 1.0)])])).unwrap_err();
        assert!(slow_first.contains("entry 1 (rows=4096 cols=4096 bf16): its variants are not in rank order"), "{slow_first}");
        let short = parse(&table(&[(&[4096], &[("a", 1.0)])])).unwrap_err();
        assert!(short.contains("needs a value above 0 for each of [\"rows\", \"cols\"]"), "{short}");
        let twice = parse(&table(&[(&[64, 64], &[("a", 1.0)]), (&[64, 64], &[("a", 1.0)])])).unwrap_err();
        assert!(twice.contains("entry 2 (rows=64 cols=64 bf16): measures the same problem as entry 1"), "{twice}");
        let tiny = parse(&table(&[(&[64, 64], &[("a", 1e-300)])])).unwrap_err();
        assert!(tiny.contains("variant a has time 1e-300 ms"), "{tiny}");
        let elsewhere = FamilyTable::parse(&serde_json::to_string(&table(&[])).unwrap(), Path::new("tuning/rmsnorm/GPU-132sm.json"));
        assert!(elsewhere
            .unwrap_err()
            .contains("of family `softmax` on GPU (132 SMs, compute capability 9.0), which goes in softmax/GPU-132sm.json"));
        let mut bad_family = table(&[]);
        bad_family.family = "../x".into();
        let refused = FamilyTable::parse(&serde_json::to_string(&bad_family).unwrap(), Path::new("t.json")).unwrap_err();
        assert!(refused.contains("family `../x` is not a name"), "{refused}");
    }

    #[test]
    fn near_ties_rank_direct_first_then_by_name() {
        let timed = |variant: &str, strategy: Option<&str>, ms| Timed {
            variant: variant.into(),
            strategy: strategy.map(Into::into),
            ms,
            source: None,
        };
        let ranked = rank(vec![timed("z", None, 1.0), timed("a", None, 1.01)]).unwrap();
        assert_eq!(ranked[0].variant, "a");
        let ranked = rank(vec![timed("b", None, 1.0), timed("a", None, 1.015), timed("c", Some("padded"), 0.99), timed("d", None, 1.5)]);
        let names: Vec<String> = ranked.unwrap().into_iter().map(|t| t.variant).collect();
        assert_eq!(names, ["b", "c", "a", "d"], "c is fastest but ties with b, which runs directly");
    }

    #[test]
    fn a_class_and_a_batch_are_entries_of_their_own() {
        let mut t = table(&[(&[512, 512], &[("a", 1.0)])]);
        let mut batched = t.entries[0].clone();
        batched.batch = 64;
        batched.ranked[0].variant = "batched".into();
        let mut classed = t.entries[0].clone();
        classed.class.insert("layout".into(), "tn".into());
        classed.ranked[0].variant = "classed".into();
        t.insert(batched.clone());
        t.insert(classed.clone());
        assert_eq!(t.entries.len(), 3);
        let first = |class: &BTreeMap<String, String>, batch| {
            t.nearest(Dtype::Bf16, class, batch, &[512, 512], f64::INFINITY)[0].1.ranked[0].variant.clone()
        };
        assert_eq!(first(&BTreeMap::new(), 1), "a");
        assert_eq!(first(&BTreeMap::new(), 48), "batched");
        assert_eq!(first(&classed.class, 1), "classed");
        let text = serde_json::to_string(&t).unwrap();
        assert!(text.contains(r#""class":{"layout":"tn"}"#) && text.contains(r#""batch":64"#), "{text}");
        assert_eq!(text.matches(r#""batch":"#).count(), 1, "a single problem's batch is left out: {text}");
        t.check().unwrap();
        t.entries[2].class.insert("epilogue".into(), "gelu tanh".into());
        assert!(t.check().unwrap_err().contains("`gelu tanh` in its class or a strategy is not a name"));
        t.entries[2].class.clear();
        t.entries[2].batch = 0;
        assert!(t.check().unwrap_err().contains("batch=0 rows=512 cols=512 bf16): a batch holds at least one problem"));
    }
}
