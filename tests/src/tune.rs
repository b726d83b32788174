//! The one tuning loop every family's tuner runs (the generic one in the CLI, a plug-in's
//! own): for each kind of GPU its table and the problems it does not hold yet, shared out among
//! the GPUs of that kind; each problem's candidates timed beside the family's baseline by the
//! family's [`Timer`], ranked, and the table written after every problem (through a temporary
//! file, so that an interrupt leaves the old one), until the problems or the time run out.

use indicatif::{ProgressBar, ProgressStyle};
use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::io::Write;
use std::path::Path;
use std::sync::Mutex;
use std::time::{Duration, Instant};
use tilesmith_runtime::{Dtype, Gpu, Registry};
use tilesmith_spec::family_table::{self, FamilyEntry, FamilyTable, Timed};
use tilesmith_spec::tuning::Device;

/// A problem of a tuning run: where its entry goes in the family's table (dtype, class, batch
/// and problem: the identity the chooser reads it by), how lines name it, and what the
/// family's [`Timer`] needs to time it.
#[derive(Clone, Debug)]
pub struct Item<P> {
    pub dtype: Dtype,
    pub class: BTreeMap<String, String>,
    pub batch: u64,
    pub problem: Vec<u64>,
    pub label: String,
    pub what: P,
}

impl<P> Item<P> {
    fn identity(&self) -> (Dtype, &BTreeMap<String, String>, u64, &[u64]) {
        (self.dtype, &self.class, self.batch, &self.problem)
    }

    /// Whether `table` holds the problem measured as the registry is now: an entry for it none
    /// of whose timings is of a source changed since (`source`: a variant's SHA-256 now, none
    /// for a variant no longer built) and that times each of `candidates` (where the timer
    /// names them). A run without --fresh measures the others, so a tune after a template
    /// change (which leaves its variants' timings hints) or after variants were added
    /// re-measures just the problems they concern, over as many runs as it takes.
    fn held_in<'s>(&self, table: &FamilyTable, source: impl Fn(&str) -> Option<&'s str>, candidates: Option<&[String]>) -> bool {
        table.entries.iter().any(|e| {
            (e.dtype, &e.class, e.batch, e.problem.as_slice()) == self.identity()
                && !e.ranked.iter().any(|t| t.is_stale_in(&source))
                && candidates.is_none_or(|names| names.iter().all(|name| e.ranked.iter().any(|t| t.variant == *name)))
        })
    }
}

/// What a [`Timer`] measured of a problem.
pub struct Measured {
    /// The baseline's median milliseconds (a copy of the bytes moved, or a plug-in's library).
    pub baseline_ms: f64,
    /// Each candidate's that ran.
    pub timed: Vec<Timed>,
    /// Candidates not launched (estimated far behind the fastest timed).
    pub skipped: usize,
}

/// Times a family's candidates for a problem beside its baseline: the generic families' (each
/// variant that takes the problem, beside a copy of the bytes moved) or a plug-in's (the ways
/// its policy offers, beside its library).
pub trait Timer<P>: Sync {
    /// Runs on each GPU before its first problem.
    fn warm(&self, _gpu: &Gpu) -> Result<(), String> {
        Ok(())
    }

    /// The problem's timings, none where no candidate takes it or none ran; `warn` says why a
    /// candidate was left out.
    fn measure(&self, gpu: &Gpu, item: &Item<P>, warn: &dyn Fn(String)) -> Result<Option<Measured>, String>;

    /// The candidates `measure` would time for the problem on `gpu`, where the timer knows them
    /// without timing (none: a timer that prunes, whose entries rank only some); a problem whose
    /// entry lacks one of them is measured again.
    fn candidates(&self, _gpu: &Gpu, _item: &Item<P>) -> Option<Vec<String>> {
        None
    }

    /// The fastest of a ranking as a line says it (`variant 1.20x the copy`).
    fn best(&self, ranked: &[Timed], baseline_ms: f64) -> String {
        ranked.first().map_or(String::new(), |t| format!("{} {:.2}x the baseline", t.variant, baseline_ms / t.ms))
    }
}

/// How a run goes: where the tables go, whether problems a table holds are measured again, on
/// which GPUs (`--gpus`), for how long, and the file a line per problem is appended to.
pub struct Run<'a> {
    pub out: &'a Path,
    pub fresh: bool,
    pub gpus: Option<&'a str>,
    pub minutes: f64,
    pub log: Option<&'a Path>,
}

/// Tunes `family` on this machine's GPUs: `items`, most wanted first, timed by `timer`, into
/// `<out>/<family>/<GPU>-<SMs>sm.json`.
pub fn tune<P: Clone + Send + Sync>(
    registry: &Registry,
    family: &str,
    items: &[Item<P>],
    timer: &dyn Timer<P>,
    run: &Run<'_>,
) -> Result<(), String> {
    if !(run.minutes > 0.0 && run.minutes.is_finite()) {
        return Err(format!("--minutes {} must be a number of minutes above 0", run.minutes));
    }
    let chooser = registry.family(family).map_err(|e| e.to_string())?;
    let quantities = chooser.declaration().quantities.clone();
    let deadline = Instant::now() + Duration::from_secs_f64(run.minutes * 60.0);
    let ordinals = gpus(run.gpus)?;
    let handles: Vec<Gpu> = ordinals.iter().map(|&o| Gpu::new(o)).collect::<Result<_, _>>().map_err(|e| e.to_string())?;
    let devices: Vec<Device> = handles.iter().map(Gpu::device).collect();
    let compiler = chooser.kernels().first().map(|k| k.info().compiler.clone()).unwrap_or_default();
    let mut kinds: Vec<Kind<P>> = Vec::new();
    for (gpu, device) in handles.iter().zip(&devices) {
        if kinds.iter().any(|k| k.device.is(device)) {
            continue;
        }
        let path = FamilyTable::path(run.out, family, device);
        let mut table = match path.exists() {
            true => FamilyTable::read(&path)?,
            false => FamilyTable::new(family, device.clone(), compiler.clone(), quantities.clone()),
        };
        if !table.device.is(device) || table.quantities != quantities {
            return Err(format!(
                "{} was measured on {} over {:?}: move it aside or pass another --out",
                path.display(),
                table.device,
                table.quantities
            ));
        }
        chooser.check_table(&table).map_err(|rule| format!("{}: {rule}", path.display()))?;
        table.compiler = compiler.clone();
        table.device.clocks = device.clocks;
        let mut queued = HashSet::new();
        let sources: HashMap<&str, &str> = chooser.kernels().iter().map(|k| (k.name(), k.info().entry.source_sha256.as_str())).collect();
        let source = |variant: &str| sources.get(variant).copied();
        let queue: VecDeque<Item<P>> = items
            .iter()
            .filter(|item| {
                (run.fresh || !item.held_in(&table, source, timer.candidates(gpu, item).as_deref())) && queued.insert(item.identity())
            })
            .cloned()
            .collect();
        let gpus = devices.iter().filter(|d| d.is(device)).count();
        println!("tuning {} of {} {family} problems on {gpus} {device} into {}", queue.len(), items.len(), path.display());
        kinds.push(Kind { device: device.clone(), path, table: Mutex::new(table), queue: Mutex::new(queue) });
    }
    std::fs::create_dir_all(run.out.join(family)).map_err(|e| format!("cannot create {}: {e}", run.out.join(family).display()))?;
    let log = match run.log {
        Some(path) => Some(Mutex::new(
            std::fs::OpenOptions::new().create(true).append(true).open(path).map_err(|e| format!("cannot open {}: {e}", path.display()))?,
        )),
        None => None,
    };
    let total: usize = kinds.iter().map(|k| k.queue.lock().map_or(0, |q| q.len())).sum();
    let bar = ProgressBar::new(total as u64);
    bar.set_style(
        ProgressStyle::with_template("{bar:40} {pos}/{len} problems, {elapsed} elapsed, ~{eta} left  {msg}").map_err(|e| e.to_string())?,
    );
    let worker = Worker { timer, bar: &bar, log: &log, deadline };
    let worked = run_on_gpus(&ordinals, &devices, &kinds, |ordinal, kind| worker.work(ordinal, kind));
    bar.finish_and_clear();
    for kind in &kinds {
        let table = kind.table.lock().map_err(|_| "a tuning thread panicked holding the table".to_string())?;
        write(&kind.path, &*table)?;
        let left = kind.queue.lock().map_or(0, |q| q.len());
        let more = if left > 0 { format!("; {left} problems left for the next run (out of time)") } else { String::new() };
        println!("{} entries in {}{more}", table.entries.len(), kind.path.display());
    }
    worked
}

/// One kind of GPU being tuned: its table, where it goes, and the problems left; its GPUs'
/// workers share them.
struct Kind<P> {
    device: Device,
    path: std::path::PathBuf,
    table: Mutex<FamilyTable>,
    queue: Mutex<VecDeque<Item<P>>>,
}

/// What each GPU's worker shares.
struct Worker<'a, P> {
    timer: &'a dyn Timer<P>,
    bar: &'a ProgressBar,
    log: &'a Option<Mutex<std::fs::File>>,
    deadline: Instant,
}

impl<P> Worker<'_, P> {
    /// One GPU's share: its kind's problems one by one until none are left or time is up,
    /// writing the table after each.
    fn work(&self, ordinal: usize, kind: &Kind<P>) -> Result<(), String> {
        let gpu = Gpu::new(ordinal).map_err(|e| e.to_string())?;
        self.timer.warm(&gpu)?;
        loop {
            if Instant::now() >= self.deadline {
                return Ok(());
            }
            let Some(item) = kind.queue.lock().map_err(|_| "the queue was poisoned")?.pop_front() else { return Ok(()) };
            self.bar.set_message(item.label.clone());
            let started = Instant::now();
            let warn = |what: String| self.say(format!("warning: {}: {what}", item.label));
            let measured = self.timer.measure(&gpu, &item, &warn)?;
            self.bar.inc(1);
            let seconds = started.elapsed().as_secs_f64();
            let Some(Measured { baseline_ms, timed, skipped }) = measured.filter(|m| !m.timed.is_empty()) else {
                self.say(format!("GPU {ordinal} {}: no candidate takes it", item.label));
                self.log_line(format!("GPU {ordinal}\t{}\t{seconds:.2} s\t0 timed\t0 not launched\tno candidate\n", item.label))?;
                continue;
            };
            let ranked = family_table::rank(timed)?;
            let count = ranked.len();
            self.say(format!(
                "GPU {ordinal} {}: {count} timed, {skipped} not launched, in {seconds:.1} s; best {}",
                item.label,
                self.timer.best(&ranked, baseline_ms)
            ));
            let pick = baseline_ms / ranked[0].ms;
            self.log_line(format!(
                "GPU {ordinal}\t{}\t{seconds:.2} s\t{count} timed\t{skipped} not launched\tpick {pick:.3}x the baseline\n",
                item.label
            ))?;
            let entry = FamilyEntry { dtype: item.dtype, class: item.class, problem: item.problem, batch: item.batch, baseline_ms, ranked };
            let mut table = kind.table.lock().map_err(|_| "the table was poisoned")?;
            table.insert(entry);
            write(&kind.path, &*table)?;
        }
    }

    /// A line above the progress bar, or, where it is hidden (output to a pipe or a file), on
    /// standard output.
    fn say(&self, line: String) {
        if self.bar.is_hidden() {
            println!("{line}");
        } else {
            self.bar.println(line);
        }
    }

    fn log_line(&self, line: String) -> Result<(), String> {
        let Some(log) = self.log else { return Ok(()) };
        log.lock().map_err(|_| "the log was poisoned")?.write_all(line.as_bytes()).map_err(|e| format!("writing the log: {e}"))
    }
}

/// Runs `work` on each GPU of `ordinals` (whose devices are `devices`, in order), a thread each,
/// with the kind of its device; the first error of any, once all have stopped.
fn run_on_gpus<P: Send + Sync>(
    ordinals: &[usize],
    devices: &[Device],
    kinds: &[Kind<P>],
    work: impl Fn(usize, &Kind<P>) -> Result<(), String> + Sync,
) -> Result<(), String> {
    let work = &work;
    let results: Vec<Result<(), String>> = std::thread::scope(|scope| {
        let workers: Vec<_> = ordinals
            .iter()
            .zip(devices)
            .map(|(&ordinal, device)| {
                let kind = kinds.iter().find(|k| k.device.is(device)).expect("a kind per device");
                scope.spawn(move || work(ordinal, kind))
            })
            .collect();
        workers.into_iter().map(|w| w.join().unwrap_or_else(|_| Err("a tuning thread panicked".into()))).collect()
    });
    results.into_iter().collect()
}

/// Writes a table through a temporary file, so that an interrupted write leaves the old one.
fn write<T: serde::Serialize + ?Sized>(path: &Path, table: &T) -> Result<(), String> {
    let json = serde_json::to_string_pretty(table).map_err(|e| e.to_string())? + "\n";
    let temporary = path.with_extension("json.tmp");
    std::fs::write(&temporary, json).map_err(|e| format!("cannot write {}: {e}", temporary.display()))?;
    std::fs::rename(&temporary, path).map_err(|e| format!("cannot replace {}: {e}", path.display()))
}

/// The GPUs `--gpus` names (comma-separated ordinals), each once (two workers on one GPU
/// would time each other's kernels), else every GPU.
pub fn gpus(list: Option<&str>) -> Result<Vec<usize>, String> {
    let count = Gpu::count().map_err(|e| e.to_string())?;
    let ordinals: Vec<usize> = match list {
        Some(text) => text
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(|s| s.parse().map_err(|_| format!("--gpus: `{s}` is not a GPU ordinal")))
            .collect::<Result<_, _>>()?,
        None => (0..count).collect(),
    };
    if let Some(bad) = ordinals.iter().find(|&&o| o >= count) {
        return Err(format!("--gpus names GPU {bad}, the driver sees {count}"));
    }
    if ordinals.is_empty() || (1..ordinals.len()).any(|i| ordinals[..i].contains(&ordinals[i])) {
        return Err(format!("--gpus must name each GPU once and at least one; got {:?}", list.unwrap_or("")));
    }
    Ok(ordinals)
}

/// What `tilesmith tune` passes a plug-in's tuner.
pub struct TuneRequest<'a> {
    /// Problems as the plug-in writes them, comma-separated.
    pub shapes: Option<&'a str>,
    /// A file of problems in `shapes`' form, one or more per line, `#` starting a comment.
    pub shapes_file: Option<&'a Path>,
    /// Dtypes, comma-separated; none: the plug-in's default.
    pub dtypes: Option<&'a str>,
    /// Flags only a plug-in's tuner takes, by name without the dashes, as given
    /// (`layouts`, `epilogue`).
    pub flags: &'a [(&'a str, &'a str)],
    /// The tuning folder; a family's table for a GPU is `<family>/<GPU>-<SMs>sm.json` there.
    pub out: &'a Path,
    /// Measure again the problems the table holds.
    pub fresh: bool,
    /// `--gpus` as given ([`gpus`]).
    pub gpus: Option<&'a str>,
    pub minutes: f64,
    /// A file to append a line per problem measured to.
    pub log: Option<&'a Path>,
}

impl TuneRequest<'_> {
    /// The value of plug-in flag `name`, if given.
    pub fn flag(&self, name: &str) -> Option<&str> {
        self.flags.iter().find(|(n, _)| *n == name).map(|(_, v)| *v)
    }
}

/// A plug-in's tuning of its family, which `tilesmith tune --family` runs in place of the
/// generic one: its tuning set (problems, classes and flags of its own) and a [`Timer`] beside
/// its library, run through [`tune`].
pub trait Tuner: Sync {
    /// The family it tunes.
    fn family(&self) -> &'static str;
    /// Tunes the family on this machine's GPUs, writing its tables into `request.out`.
    fn tune(&self, registry: &tilesmith_runtime::Registry, request: &TuneRequest<'_>) -> Result<(), String>;
}

/// How one way of picking did over a table's problems (`tilesmith replay`): each pick at the
/// time the table measured for it, against the fastest there and the baseline there.
pub struct Regret {
    pub name: &'static str,
    /// (fastest / pick, baseline / pick, where) per problem whose pick the table measured.
    picks: Vec<(f64, f64, String)>,
    /// Picks the table has no time for (a variant it did not measure there).
    pub unmeasured: usize,
}

/// Within this fraction of the fastest counts as a right pick (issue 58's 3%).
pub const RIGHT: f64 = 0.97;

impl Regret {
    pub fn new(name: &'static str) -> Regret {
        Regret { name, picks: Vec::new(), unmeasured: 0 }
    }

    /// Counts a pick measured at `fastest_ms`'s problem in `pick_ms`, else (none) an unmeasured one;
    /// returns its fraction of the fastest.
    pub fn add(&mut self, pick_ms: Option<f64>, fastest_ms: f64, baseline_ms: f64, at: &str) -> Option<f64> {
        let Some(ms) = pick_ms else {
            self.unmeasured += 1;
            return None;
        };
        self.picks.push((fastest_ms / ms, baseline_ms / ms, at.to_string()));
        Some(fastest_ms / ms)
    }

    /// The fractions of the fastest, least first.
    fn sorted(&self) -> Vec<f64> {
        let mut ratios: Vec<f64> = self.picks.iter().map(|p| p.0).collect();
        ratios.sort_by(f64::total_cmp);
        ratios
    }

    /// The median fraction of the fastest (1 with no picks measured).
    pub fn median(&self) -> f64 {
        let ratios = self.sorted();
        if ratios.is_empty() {
            return 1.0;
        }
        let mid = ratios.len() / 2;
        if ratios.len() % 2 == 1 {
            ratios[mid]
        } else {
            (ratios[mid - 1] + ratios[mid]) / 2.0
        }
    }

    /// The fraction of the fastest that 9 in 10 picks reach: the 90th percentile of the regret.
    pub fn ninth_decile(&self) -> f64 {
        let ratios = self.sorted();
        ratios.get(ratios.len() / 10).copied().unwrap_or(1.0)
    }

    /// The least fraction of the fastest, and where.
    pub fn worst(&self) -> Option<(f64, &str)> {
        self.picks.iter().min_by(|a, b| a.0.total_cmp(&b.0)).map(|(r, _, at)| (*r, at.as_str()))
    }

    /// The picks measured, and how many of them are within [`RIGHT`] of the fastest.
    pub fn right(&self) -> (usize, usize) {
        (self.picks.iter().filter(|p| p.0 >= RIGHT).count(), self.picks.len())
    }

    /// The geometric mean of the picks' speed relative to the baseline.
    pub fn against_baseline(&self) -> f64 {
        (self.picks.iter().map(|p| p.1.ln()).sum::<f64>() / self.picks.len().max(1) as f64).exp()
    }

    /// The header of [`Regret::row`]'s table.
    pub const HEADER: &'static str = "| picks by | median of the fastest | 9 in 10 reach | worst | within 3% | x baseline | unmeasured |\n| --- | --- | --- | --- | --- | --- | --- |";

    /// One row of a markdown table.
    pub fn row(&self) -> String {
        let worst = self.worst().map_or("-".into(), |(r, at)| format!("{r:.3} ({at})"));
        let (right, measured) = self.right();
        format!(
            "| {} | {:.3} | {:.3} | {worst} | {right} of {measured} | {:.3} | {} |",
            self.name,
            self.median(),
            self.ninth_decile(),
            self.against_baseline(),
            self.unmeasured
        )
    }
}

#[cfg(test)]
mod tests {
    use super::{Item, Regret};
    use std::collections::BTreeMap;
    use tilesmith_runtime::Dtype;
    use tilesmith_spec::family_table::{FamilyEntry, FamilyTable, Timed};
    use tilesmith_spec::tuning::Device;

    #[test]
    fn a_problem_counts_as_held_only_where_its_entry_times_the_sources_as_they_are() {
        let timed = |variant: &str, source: &str| Timed { variant: variant.into(), strategy: None, ms: 1.0, source: Some(source.into()) };
        let h200 = Device { name: "NVIDIA H200".into(), capability: [9, 0], sms: 132, clocks: None };
        let mut table = FamilyTable::new("softmax", h200, String::new(), vec!["rows".into(), "cols".into()]);
        let entry = FamilyEntry {
            dtype: Dtype::Bf16,
            class: BTreeMap::new(),
            problem: vec![64, 4096],
            batch: 1,
            baseline_ms: 1.0,
            ranked: vec![timed("a", "aaaa"), timed("b", "bbbb"), timed("gone", "cccc")],
        };
        table.entries.push(entry);
        let item =
            |problem: Vec<u64>| Item { dtype: Dtype::Bf16, class: BTreeMap::new(), batch: 1, problem, label: String::new(), what: () };
        let now = |a: &'static str, b: &'static str| {
            move |variant: &str| match variant {
                "a" => Some(a),
                "b" => Some(b),
                _ => None,
            }
        };
        assert!(item(vec![64, 4096]).held_in(&table, now("aaaa0000", "bbbb0000"), None));
        // A variant whose source changed since: the problem is measured again.
        assert!(!item(vec![64, 4096]).held_in(&table, now("aaaa0000", "dddd0000"), None));
        // Another problem, or dtype, is not held at all.
        assert!(!item(vec![128, 4096]).held_in(&table, now("aaaa0000", "bbbb0000"), None));
        let f32 = Item { dtype: Dtype::F32, ..item(vec![64, 4096]) };
        assert!(!f32.held_in(&table, now("aaaa0000", "bbbb0000"), None));
        // Where the timer names the candidates: held while the entry times each of them, not
        // once a variant it never timed takes the problem (one added since).
        let names = |list: &[&str]| list.iter().map(|n| n.to_string()).collect::<Vec<_>>();
        assert!(item(vec![64, 4096]).held_in(&table, now("aaaa0000", "bbbb0000"), Some(&names(&["a", "b"]))));
        assert!(!item(vec![64, 4096]).held_in(&table, now("aaaa0000", "bbbb0000"), Some(&names(&["a", "b", "new"]))));
    }

    #[test]
    fn regret_reads_each_pick_against_the_fastest() {
        let mut regret = Regret::new("test");
        assert_eq!(regret.add(Some(2.0), 1.0, 4.0, "a"), Some(0.5));
        for at in ["b", "c", "d"] {
            regret.add(Some(1.0), 1.0, 2.0, at);
        }
        assert_eq!(regret.add(None, 1.0, 1.0, "e"), None);
        assert_eq!((regret.median(), regret.ninth_decile(), regret.right(), regret.unmeasured), (1.0, 0.5, (3, 4), 1));
        assert_eq!(regret.worst(), Some((0.5, "a")));
        assert!((regret.against_baseline() - 2.0).abs() < 1e-12);
        assert!(regret.row().starts_with("| test | 1.000 | 0.500 | 0.500 (a) | 3 of 4 | 2.000 | 1 |"), "{}", regret.row());
    }
}
