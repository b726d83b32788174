//! What every tuner shares (the generic family tuner in the CLI and a plug-in's own): a kind
//! of GPU with its table and the problems left, the GPUs asked for, writing a table so that an
//! interrupt leaves the old one, and the requests the CLI passes a plug-in's tuner and replay.

use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant};
use tilesmith_runtime::Gpu;
use tilesmith_spec::tuning::Device;

/// One kind of GPU being tuned: its table (`T`), where it goes, and the problems (`P`) left;
/// its GPUs' workers share them.
pub struct Kind<T, P> {
    pub device: Device,
    pub path: PathBuf,
    pub table: Mutex<T>,
    pub queue: Mutex<VecDeque<P>>,
}

/// Writes each kind's table once the workers are done, saying how many entries it holds
/// (`entries`) and how many problems are left for the next run.
pub fn finish<T: serde::Serialize, P>(kinds: &[Kind<T, P>], entries: impl Fn(&T) -> usize) -> Result<(), String> {
    for kind in kinds {
        let table = kind.table.lock().map_err(|_| "a tuning thread panicked holding the table".to_string())?;
        write(&kind.path, &*table)?;
        let left = kind.queue.lock().map_or(0, |q| q.len());
        let more = if left > 0 { format!("; {left} problems left for the next run (out of time)") } else { String::new() };
        println!("{} entries in {}{more}", entries(&table), kind.path.display());
    }
    Ok(())
}

/// Runs `work` on each GPU of `ordinals` (whose devices are `devices`, in order), a thread each,
/// with the kind of its device; the first error of any, once all have stopped.
pub fn run_on_gpus<T: Send, P: Send>(
    ordinals: &[usize],
    devices: &[Device],
    kinds: &[Kind<T, P>],
    work: impl Fn(usize, &Kind<T, P>) -> Result<(), String> + Sync,
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
pub fn write<T: serde::Serialize + ?Sized>(path: &Path, table: &T) -> Result<(), String> {
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

/// How long a run may start problems for.
pub fn deadline(minutes: f64) -> Instant {
    Instant::now() + Duration::from_secs_f64(minutes * 60.0)
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

/// A plug-in's own tuner for its family, which `tilesmith tune --family` runs in place of the
/// generic one: one that times a library beside, strategies, classes of its own.
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
    use super::Regret;

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
