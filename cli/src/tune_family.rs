//! `tilesmith tune --family NAME` for a family without a plug-in's tuner: for each dtype and
//! problem (the family's `trials.tune`, else its `trials.bench`, or `--shapes`), times every
//! variant that takes it beside a device copy of the bytes moved (whatever the family's bench
//! baseline: a table's ratios are to a copy, which any family has), through the one tuning
//! loop ([`tilesmith_trials::tune::tune`]), into `tuning/<family>/<GPU>-<SMs>sm.json`.

use std::path::Path;
use tilesmith_runtime::{runs_on, Chooser, Dtype, Gpu, Kernel, Registry};
use tilesmith_spec::family_table::{self, Timed};
use tilesmith_trials::declared::{self, Case, Shape};
use tilesmith_trials::tune::{tune, Item, Measured, Run, Timer};

/// What `tune --family` takes of `tune`'s arguments.
pub struct Options<'a> {
    pub family: &'a str,
    /// Problems, each the family's quantities in declared order joined by `x`, comma-separated.
    pub shapes: Option<&'a str>,
    /// Dtypes, comma-separated; none: every dtype the family has.
    pub dtypes: Option<&'a str>,
    pub out: &'a Path,
    pub fresh: bool,
    pub gpus: Option<&'a str>,
    pub minutes: f64,
    pub log: Option<&'a Path>,
}

pub fn run(options: Options<'_>, registry: &Registry) -> Result<(), String> {
    let chooser = registry.family(options.family).map_err(|e| e.to_string())?;
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
    let quantities = &chooser.declaration().quantities;
    let mut items = Vec::new();
    for &dtype in &dtypes {
        for problem in &problems {
            let label = format!("{} {dtype}", family_table::describe(quantities, problem));
            items.push(Item { dtype, class: Default::default(), batch: 1, problem: problem.clone(), label, what: () });
        }
    }
    let run = Run { out: options.out, fresh: options.fresh, gpus: options.gpus, minutes: options.minutes, log: options.log };
    tune(registry, options.family, &items, &Copied { registry, chooser }, &run)
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

/// The generic timer: every variant of the dtype that takes the problem (packed, as its
/// leading-dimension rules allow), beside a copy of the bytes moved.
struct Copied<'r> {
    registry: &'r Registry,
    chooser: &'r Chooser,
}

impl Copied<'_> {
    fn shape(&self, item: &Item<()>) -> Shape {
        self.chooser.declaration().quantities.iter().cloned().zip(item.problem.iter().copied()).collect()
    }
}

impl Timer<()> for Copied<'_> {
    fn measure(&self, gpu: &Gpu, item: &Item<()>, _warn: &dyn Fn(String)) -> Result<Option<Measured>, String> {
        let measured = measure(gpu, self.registry, self.chooser, item.dtype, &self.shape(item))?;
        Ok(measured.map(|(baseline_ms, timed)| Measured { baseline_ms, timed, skipped: 0 }))
    }

    /// Every variant that takes the problem is timed, so an entry lacking one (a variant
    /// added since it was measured) is measured again.
    fn candidates(&self, gpu: &Gpu, item: &Item<()>) -> Option<Vec<String>> {
        Some(takers(gpu, self.chooser, item.dtype, &self.shape(item)).map(|(kernel, _)| kernel.name().to_string()).collect())
    }

    fn best(&self, ranked: &[Timed], baseline_ms: f64) -> String {
        best_per_call(self.registry, ranked, baseline_ms)
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

/// The variants of `dtype` that take the problem on `gpu`, each with the shape it is timed on
/// (packed, as its leading-dimension rules allow).
fn takers<'c>(gpu: &'c Gpu, chooser: &'c Chooser, dtype: Dtype, shape: &'c Shape) -> impl Iterator<Item = (&'c Kernel, Shape)> + 'c {
    chooser.kernels().iter().filter(move |k| k.variant().dtype == dtype && runs_on(&k.info().entry.targets, gpu.capability())).filter_map(
        move |kernel| {
            let full = declared::with_lds(kernel, shape.clone(), 0).ok()?;
            declared::takes(kernel, &full, gpu.sms(), gpu.smem_per_block()).ok()?;
            Some((kernel, full))
        },
    )
}

/// The baseline's time and each variant's that takes the problem (packed), or none.
fn measure(gpu: &Gpu, registry: &Registry, chooser: &Chooser, dtype: Dtype, shape: &Shape) -> Result<Option<(f64, Vec<Timed>)>, String> {
    let mut cases: Vec<(Shape, Case)> = Vec::new();
    let mut timed = Vec::new();
    let mut baseline_ms = None;
    for (kernel, full) in takers(gpu, chooser, dtype, shape) {
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
        // A variant refusing the launch for a reason its plan does not show is left out (the
        // next run without --fresh measures the problem again).
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
