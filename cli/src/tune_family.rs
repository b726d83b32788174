//! `tilesmith tune --family NAME`: for each dtype and problem (the family's `trials.tune`, else
//! its `trials.bench`, or `--shapes`), times every variant that takes it beside a device copy
//! of the bytes moved (whatever the family's bench baseline: a table's ratios are to a copy,
//! which any family has), ranks them and writes the family's table for
//! this GPU, `tuning/<family>/<GPU>-<SMs>sm.json`, after every problem. Problems are shared out
//! among the GPUs of one kind; a second run skips what the table holds.

use std::collections::VecDeque;
use std::path::PathBuf;
use std::sync::Mutex;
use std::time::Instant;
use tilesmith_runtime::{runs_on, Chooser, Dtype, Gpu, Registry};
use tilesmith_spec::family_table::{self, FamilyEntry, FamilyTable, Timed};
use tilesmith_spec::tuning::Device;
use tilesmith_trials::declared::{self, Case, Shape};

/// What `tune --family` takes of `tune`'s arguments.
pub struct Options<'a> {
    pub family: &'a str,
    /// Problems, each the family's quantities in declared order joined by `x`, comma-separated.
    pub shapes: Option<&'a str>,
    /// Dtypes, comma-separated; none: every dtype the family has.
    pub dtypes: Option<&'a str>,
    pub out: PathBuf,
    pub fresh: bool,
    /// The GPUs to tune on, asked for once the arguments are checked: bad arguments are
    /// refused on a machine without a GPU too.
    pub gpus: Box<dyn FnOnce() -> Result<Vec<usize>, String> + 'a>,
    pub deadline: Instant,
}

/// A family's kind of GPU: its table and the (dtype, problem) pairs left.
type Kind = tilesmith_trials::tune::Kind<FamilyTable, (Dtype, Vec<u64>)>;

pub fn run(options: Options<'_>, registry: &Registry) -> Result<(), String> {
    let chooser = registry.family(options.family).map_err(|e| e.to_string())?;
    let family = chooser.declaration();
    let problems = problems(chooser, options.shapes)?;
    let mut dtypes: Vec<Dtype> = chooser.kernels().iter().map(|k| k.variant().dtype).collect();
    dtypes.sort();
    dtypes.dedup();
    if let Some(text) = options.dtypes {
        let asked: Vec<Dtype> = text
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(|s| {
                Dtype::parse(s)
                    .filter(|d| dtypes.contains(d))
                    .ok_or_else(|| format!("--dtypes {s}: family {} has no {s} variant", options.family))
            })
            .collect::<Result<_, _>>()?;
        dtypes = asked;
    }
    let ordinals = (options.gpus)()?;
    let devices: Vec<Device> =
        ordinals.iter().map(|&o| Gpu::new(o).map(|g| g.device())).collect::<Result<_, _>>().map_err(|e| e.to_string())?;
    let compiler = chooser.kernels().first().map(|k| k.info().compiler.clone()).unwrap_or_default();
    let mut kinds: Vec<Kind> = Vec::new();
    for device in &devices {
        if kinds.iter().any(|k| k.device.is(device)) {
            continue;
        }
        let path = FamilyTable::path(&options.out, options.family, device);
        let mut table = match path.exists() {
            true => FamilyTable::read(&path)?,
            false => FamilyTable::new(options.family, device.clone(), compiler.clone(), family.quantities.clone()),
        };
        if !table.device.is(device) || table.quantities != family.quantities {
            return Err(format!(
                "{} was measured on {} over {:?}: move it aside or pass another --out",
                path.display(),
                table.device,
                table.quantities
            ));
        }
        table.compiler = compiler.clone();
        table.device.clocks = device.clocks;
        let mut queue = VecDeque::new();
        for &dtype in &dtypes {
            for problem in &problems {
                let held = table.entries.iter().any(|e| e.dtype == dtype && e.problem == *problem);
                if options.fresh || !held {
                    queue.push_back((dtype, problem.clone()));
                }
            }
        }
        println!(
            "tuning {} of {} {} problems on {} into {}",
            queue.len(),
            problems.len() * dtypes.len(),
            options.family,
            device,
            path.display()
        );
        kinds.push(Kind { device: device.clone(), path, table: Mutex::new(table), queue: Mutex::new(queue) });
    }
    let folder = options.out.join(options.family);
    std::fs::create_dir_all(&folder).map_err(|e| format!("cannot create {}: {e}", folder.display()))?;
    let worked = tilesmith_trials::tune::run_on_gpus(&ordinals, &devices, &kinds, |ordinal, kind| {
        work(ordinal, kind, registry, chooser, options.deadline)
    });
    tilesmith_trials::tune::finish(&kinds, |table| table.entries.len())?;
    worked
}

/// The problems to measure: `--shapes`, else the declared `trials.tune`, else `trials.bench`.
fn problems(chooser: &Chooser, shapes: Option<&str>) -> Result<Vec<Vec<u64>>, String> {
    let family = chooser.declaration();
    let quantities = &family.quantities;
    let mut problems: Vec<Vec<u64>> = match shapes {
        Some(text) => text
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(|item| {
                let sizes: Vec<u64> =
                    item.split('x').map(|d| d.parse::<u64>().ok().filter(|&d| d > 0)).collect::<Option<_>>().ok_or_else(|| {
                        format!("--shapes `{item}`: each size is a whole number above 0, as {} joined by `x`", quantities.join("x"))
                    })?;
                if sizes.len() != quantities.len() {
                    return Err(format!(
                        "--shapes `{item}`: family {} takes {} sizes ({})",
                        chooser.name(),
                        quantities.len(),
                        quantities.join("x")
                    ));
                }
                Ok(sizes)
            })
            .collect::<Result<_, String>>()?,
        None => {
            let declared = if family.trials.tune.is_empty() { &family.trials.bench } else { &family.trials.tune };
            declared.iter().map(|shape| quantities.iter().map(|q| shape.get(q).copied().unwrap_or(1)).collect()).collect()
        }
    };
    if problems.is_empty() {
        return Err(format!("family {} declares no trials.tune or trials.bench shapes: pass --shapes", chooser.name()));
    }
    problems.dedup();
    Ok(problems)
}

fn work(ordinal: usize, kind: &Kind, registry: &Registry, chooser: &Chooser, deadline: Instant) -> Result<(), String> {
    let gpu = Gpu::new(ordinal).map_err(|e| e.to_string())?;
    let quantities = chooser.declaration().quantities.clone();
    loop {
        if Instant::now() >= deadline {
            return Ok(());
        }
        let Some((dtype, problem)) = kind.queue.lock().map_err(|_| "the queue was poisoned")?.pop_front() else { return Ok(()) };
        let started = Instant::now();
        let shape: Shape = quantities.iter().cloned().zip(problem.iter().copied()).collect();
        let what = format!("{} {dtype}", family_table::describe(&quantities, &problem));
        match measure(&gpu, registry, chooser, dtype, &shape)? {
            Some((baseline_ms, timed)) => {
                let ranked = family_table::rank(timed)?;
                let worst = ranked.last().expect("one at least");
                println!(
                    "GPU {ordinal} {what}: {} variants in {:.1} s; best {}; worst {} {:.2}x",
                    ranked.len(),
                    started.elapsed().as_secs_f64(),
                    best_per_call(registry, &ranked, baseline_ms),
                    worst.variant,
                    baseline_ms / worst.ms
                );
                let mut table = kind.table.lock().map_err(|_| "the table was poisoned")?;
                table.insert(FamilyEntry { dtype, class: Default::default(), problem, batch: 1, baseline_ms, ranked });
                tilesmith_trials::tune::write(&kind.path, &*table)?;
            }
            None => println!("GPU {ordinal} {what}: no variant takes it"),
        }
    }
}

/// The fastest ranked variant of each call the entry answers, against the copy: one entry ranks
/// the variants of every call of a problem, and under attention's causal mask a variant does
/// half the work, so the fastest of all answers another call than an unmasked one.
fn best_per_call(registry: &Registry, ranked: &[Timed], baseline_ms: f64) -> String {
    let call = |timed: &&Timed| registry.kernel(&timed.variant).map(|kernel| declared::call_axes(&kernel)).unwrap_or_default();
    let best = declared::first_per_call(ranked, call);
    best.iter().map(|timed| format!("{} {:.2}x the copy", timed.variant, baseline_ms / timed.ms)).collect::<Vec<_>>().join(", ")
}

/// The baseline's time and each variant's that takes the problem (packed), or none.
fn measure(gpu: &Gpu, registry: &Registry, chooser: &Chooser, dtype: Dtype, shape: &Shape) -> Result<Option<(f64, Vec<Timed>)>, String> {
    let capability = gpu.capability();
    let mut cases: Vec<(Shape, Case)> = Vec::new();
    let mut timed = Vec::new();
    let mut baseline_ms = None;
    for kernel in chooser.kernels().iter().filter(|k| k.variant().dtype == dtype && runs_on(&k.info().entry.targets, capability)) {
        let Ok(full) = declared::with_lds(kernel, shape.clone(), 0) else { continue };
        if declared::takes(kernel, &full, gpu.sms()).is_err() {
            continue;
        }
        // Variants whose leading-dimension rules give the same shape share a case.
        let index = match cases.iter().position(|(s, _)| *s == full) {
            Some(index) => index,
            None => {
                let mut case = Case::new(gpu, kernel, full.clone())?;
                baseline_ms.get_or_insert(case.time_copy(gpu)?);
                cases.push((full, case));
                cases.len() - 1
            }
        };
        // A variant refusing the launch (shared memory past this GPU's) is left out.
        match cases[index].1.time_kernel(gpu, registry, kernel) {
            Ok(ms) => {
                let source = family_table::stamp(&kernel.info().entry.source_sha256);
                timed.push(Timed { variant: kernel.name().to_string(), strategy: None, ms, source })
            }
            Err(why) if why.contains("refused") => {}
            Err(why) => return Err(format!("{}: {why}", kernel.name())),
        }
    }
    Ok(baseline_ms.filter(|_| !timed.is_empty()).map(|ms| (ms, timed)))
}
