//! Tunes the dispatcher for this machine's GPU: for each dtype, layout and shape of a tuning
//! set, times every variant that takes the problem (directly, or padded where the operands are
//! not aligned) side by side with cuBLAS, ranks them and writes the device's tuning table.
//! The table is written after every problem, so an interrupted run loses at most one, and a
//! second run skips what the table already holds. `tilesmith tune` (`--family gemm`, the
//! default) runs it through the plug-in's [`Tuner`](tilesmith_trials::tune::Tuner); so does
//! a bundle.

use crate::table::{self, Alignment, Strategy};
use crate::trials::checks as trials;
use crate::trials::timing::GemmCase;
use crate::{dispatch, Activation, Choice, EpilogueArgs, GemmShape, Workspace};
use std::collections::BTreeMap;
use std::path::Path;
use tilesmith_runtime::{Buffer, Dtype, Gpu, Kernel, Layout, Registry, Way};
use tilesmith_spec::family_table::{self, Timed};
use tilesmith_spec::tuning;
use tilesmith_trials::tune::{tune, Item, Measured as Timings, Run, Timer, TuneRequest};
use tilesmith_trials::with_element;

/// The default tuning set, most wanted first (a run out of time keeps what it measured):
/// transformer layers' problems (M tokens of 1, 16, 128 or 4096 by weights of 4096, 11008 and
/// 14336), the bench's, skinny ones and odd leading dimensions (`!`), strided batches
/// (attention's many small products, a few large ones), then a grid of 16, 256 and 4096 in M,
/// N and K: 78 problems in 4 layouts, 302 once buckets repeat: about 9 minutes on an H100 and
/// 8 on an H200, summing the runs that measured its parts. M = 64 (a 64-row tile's, where the
/// entries at M = 16 and 96 rank others) and 2048-4096 x 1024 (where 128x128 and 128x256
/// tiles trade places with the waves they make) are where picks change.
const LLM: &str = "1x4096x4096,1x11008x4096,1x4096x11008,1x14336x4096,1x4096x14336,\
16x4096x4096,16x11008x4096,16x4096x11008,16x14336x4096,16x4096x14336,\
128x4096x4096,128x11008x4096,128x4096x11008,128x14336x4096,128x4096x14336,\
4096x4096x4096,4096x11008x4096,4096x4096x11008,4096x14336x4096,4096x4096x14336";
const EXTRA: &str = "1024x1024x1024,2048x2048x2048,8192x8192x8192,8192x8192x1024,16384x1024x4096,4000x4000x4000,3000x3000x3000,\
128x8192x8192,96x5120x5120,96x4096x4096,96x11008x4096,96x4096x11008,12288x64x4096,64x64x65536,128x128x128,1024x128x8192,\
4095x4097x4099!,1023x1025x1027!,513x1025x2047!,1000x1001x1003!,127x4097x4099!,2047x2049x2051!,\
64x4096x4096,64x11008x4096,64x4096x11008,2048x1024x4096,4096x1024x8192";
const BATCHES: &str = "64x512x512x64,8x4096x4096x4096,32x1024x1024x128,128x256x256x64,16x2048x2048x2048,4x4096x11008x4096";
const GRID: [usize; 3] = [16, 256, 4096];
/// Timed launches: a first look (the median of LOOK), then the median of RUNS after WARMUP for
/// candidates within PRUNE times the fastest so far. A first look of one launch pruned the
/// right pick where that launch was slow (H100, 1x4096x4096 tn: 46 µs, 14 µs on the next run).
const WARMUP: usize = 2;
const LOOK: usize = 3;
const RUNS: usize = 7;
const PRUNE: f64 = 2.0;
/// Candidates GEMM's cost model puts at more than SKIP times the fastest measured so far are not
/// launched: CUDA-core kernels on large problems (estimated 20 to 25 times slower), whose first
/// looks took minutes of the default set.
const SKIP: f64 = 6.0;
/// cuBLAS launches on a 4096³ bf16 problem before the first problem is measured, so that the
/// GPU has left its idle clocks.
const WARM_GPU: usize = 200;

/// A problem of the tuning set.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Problem {
    /// Problems in a strided batch, each matrix right after the previous problem's; 1 for one.
    pub batch: usize,
    pub shape: [usize; 3],
    pub odd_ld: bool,
}

fn parse_problems(text: &str) -> Result<Vec<Problem>, String> {
    let mut problems = Vec::new();
    for item in text.split([',', '\n', ' ']).map(str::trim).filter(|s| !s.is_empty()) {
        let (dims, odd_ld) = match item.strip_suffix('!') {
            Some(dims) => (dims, true),
            None => (item, false),
        };
        let sizes: Vec<usize> =
            dims.split('x').map(|d| d.parse().map_err(|_| format!("problem `{item}`: `{d}` is not a size"))).collect::<Result<_, _>>()?;
        match sizes[..] {
            [m, n, k] if m > 0 && n > 0 && k > 0 => problems.push(Problem { batch: 1, shape: [m, n, k], odd_ld }),
            [batch, m, n, k] if batch > 0 && m > 0 && n > 0 && k > 0 => problems.push(Problem { batch, shape: [m, n, k], odd_ld }),
            _ => {
                return Err(format!(
                    "problem `{item}` must be MxNxK, or BxMxNxK for a batch of B problems, with every size at least 1, `!` after it for odd leading dimensions"
                ))
            }
        }
    }
    Ok(problems)
}

fn problems(shapes: Option<&str>, shapes_file: Option<&Path>) -> Result<Vec<Problem>, String> {
    let mut problems = Vec::new();
    if let Some(text) = shapes {
        problems.extend(parse_problems(text)?);
    }
    if let Some(path) = shapes_file {
        let text = tilesmith_spec::files::read_to_string(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        let lines: Vec<&str> = text.lines().map(|line| line.split('#').next().unwrap_or("")).collect();
        problems.extend(parse_problems(&lines.join(",")).map_err(|e| format!("{}: {e}", path.display()))?);
    }
    if problems.is_empty() {
        problems.extend(parse_problems(LLM)?);
        problems.extend(parse_problems(EXTRA)?);
        problems.extend(parse_problems(BATCHES)?);
        for m in GRID {
            for n in GRID {
                for k in GRID {
                    problems.push(Problem { batch: 1, shape: [m, n, k], odd_ld: false });
                }
            }
        }
    }
    let mut unique = Vec::new();
    for problem in problems {
        if !unique.contains(&problem) {
            unique.push(problem);
        }
    }
    Ok(unique)
}

fn list<T>(text: &str, what: &str, parse: fn(&str) -> Option<T>) -> Result<Vec<T>, String> {
    text.split(',').map(str::trim).filter(|s| !s.is_empty()).map(|s| parse(s).ok_or(format!("unknown {what} `{s}`"))).collect()
}

/// The shape of a problem in a layout ([`GemmShape::tuned`]).
pub fn shape(problem: Problem, layout: Layout) -> GemmShape {
    GemmShape::tuned(problem.batch, problem.shape, layout, problem.odd_ld)
}

/// The epilogue `--epilogue` names: an activation that variants of `epilogues` (the values
/// the registry's GEMM variants have) apply, since calls with none take the plain entries.
fn measured(word: Option<&str>, epilogues: &[&str]) -> Result<Measured, String> {
    let Some(word) = word else { return Ok(None) };
    let activation = Activation::named(word).map_err(|rule| format!("--epilogue {word}: {rule}"))?;
    let activations: Vec<&str> = epilogues.iter().copied().filter(|e| !matches!(*e, "none" | "linear")).collect();
    if activation == Activation::NONE || !activations.contains(&word) {
        return Err(format!(
            "--epilogue {word}: tuning entries of their own are for the activations the registry's GEMM variants apply ({}); calls with none or linear take the plain entries",
            activations.join(", ")
        ));
    }
    Ok(Some((word.to_string(), activation)))
}

/// The epilogue whose variants a run ranks, its `epilogue` value and activation; `None`: the
/// plain GEMMs.
type Measured = Option<(String, Activation)>;

/// Tunes GEMM's policy on the kernels of `registry` through the one tuning loop
/// ([`tilesmith_trials::tune::tune`]), writing each GPU's table into `request.out`
/// (`gemm/<GPU>-<SMs>sm.json`). Its own flags: `layouts` (default all four), `epilogue` (an
/// activation whose variants get entries of their own).
pub fn run(registry: &Registry, request: &TuneRequest<'_>) -> Result<(), String> {
    let problems = problems(request.shapes, request.shapes_file)?;
    let dtypes = list(request.dtypes.unwrap_or("bf16"), "dtype", Dtype::parse)?;
    if let Some(eight_bit) = dtypes.iter().find(|d| d.size_bytes() == 1) {
        return Err(format!("--dtypes {eight_bit}: tuning tables hold 16- and 32-bit GEMMs; 8-bit ones are picked by its cost model"));
    }
    let layouts = list(request.flag("layouts").unwrap_or("nn,nt,tn,tt"), "layout", Layout::parse)?;
    let mut epilogues: Vec<&str> =
        registry.kernels().filter(|k| k.variant().family == table::FAMILY).map(|k| Activation::epilogue_of(k.variant())).collect();
    epilogues.sort();
    epilogues.dedup();
    let epilogue = measured(request.flag("epilogue"), &epilogues)?;
    let mut items = Vec::new();
    for &problem in &problems {
        for &dtype in &dtypes {
            for &layout in &layouts {
                let (class, batch, dims) = identity(problem, dtype, layout, &epilogue);
                let with = epilogue.as_ref().map(|(word, _)| format!(" with {word}")).unwrap_or_default();
                let odd = if problem.odd_ld { " odd ld" } else { "" };
                let label = format!("{dtype} {layout} {}{odd}{with}", table::describe(batch, &dims));
                items.push(Item { dtype, class, batch, problem: dims, label, what: (problem, layout) });
            }
        }
    }
    let run = Run { out: request.out, fresh: request.fresh, gpus: request.gpus, minutes: request.minutes, log: request.log };
    tune(registry, table::FAMILY, &items, &GemmTimer { registry, epilogue }, &run)
}

/// The entry a problem makes, its class, batch and [M, N, K]: as the dispatcher sees the call
/// ([`dispatch::canonical`]), so a matrix-vector product in nn is the tn entry.
fn identity(problem: Problem, dtype: Dtype, layout: Layout, epilogue: &Measured) -> (BTreeMap<String, String>, u64, Vec<u64>) {
    let shape = dispatch::canonical(dtype, &shape(problem, layout));
    // Packed odd sizes are unaligned too, `!` or not.
    let alignment: Alignment = dispatch::alignment(dtype, &shape, &Buffer::unallocated(shape.spans()));
    let class = table::class(shape.layout, alignment, epilogue.as_ref().map(|(word, _)| word.as_str()));
    (class, shape.batch.count as u64, [shape.m, shape.n, shape.k].map(|d| d as u64).to_vec())
}

/// GEMM's timer: each problem's ways (GEMM's policy's, by its cost model) beside cuBLAS.
struct GemmTimer<'r> {
    registry: &'r Registry,
    epilogue: Measured,
}

impl Timer<(Problem, Layout)> for GemmTimer<'_> {
    /// cuBLAS launches on a 4096³ bf16 problem, so that the GPU has left its idle clocks.
    fn warm(&self, gpu: &Gpu) -> Result<(), String> {
        GemmCase::<half::bf16>::new(gpu, GemmShape::packed(4096, 4096, 4096, Layout::Tn), 0.0)?.time_cublas_runs(gpu, WARM_GPU, 1).map(drop)
    }

    fn measure(&self, gpu: &Gpu, item: &Item<(Problem, Layout)>, warn: &dyn Fn(String)) -> Result<Option<Timings>, String> {
        let (problem, layout) = item.what;
        let shape = shape(problem, layout);
        with_element!(item.dtype, T => measure::<T>(gpu, self.registry, item.dtype, shape, &self.epilogue, warn))
    }

    fn best(&self, ranked: &[Timed], baseline_ms: f64) -> String {
        let label = |t: &Timed| t.strategy.as_ref().map_or(t.variant.clone(), |s| format!("{s}({})", t.variant));
        ranked.first().map_or(String::new(), |t| format!("{} {:.2}x cuBLAS", label(t), baseline_ms / t.ms))
    }
}

/// The candidates for a problem, the cost model's favourites first so that pruning bites early.
fn candidates(
    registry: &Registry,
    gpu: &Gpu,
    dtype: Dtype,
    shape: &GemmShape,
    epilogue: &Measured,
) -> (Vec<(f64, Kernel, Strategy)>, Option<Kernel>) {
    let buffers = Buffer::unallocated(shape.spans());
    let device = gpu.device();
    let transpose = dispatch::transposer(registry.kernels(), &device, dtype);
    // Plain entries rank main loops, the variants without an epilogue, and the dispatcher maps
    // a pick to its epilogue sibling; an epilogue's entries rank its own variants.
    let (word, activation) = epilogue.as_ref().map_or(("none", Activation::NONE), |(word, activation)| (word.as_str(), *activation));
    let gemms: Vec<&Kernel> = registry
        .kernels()
        .filter(|k| {
            let v = k.variant();
            v.dtype == dtype && v.family == "gemm" && !k.is_reference() && Activation::epilogue_of(v) == word
        })
        .collect();
    let args = EpilogueArgs { activation, ..EpilogueArgs::default() };
    let call = dispatch::GemmCall { dtype, shape, buffers, epilogue: &args };
    let ranked = dispatch::by_cost(gemms.into_iter().chain(transpose), &device, &call);
    let strategy = |way: &Way| way.plan::<Choice>().map_or(Strategy::Direct, |c| c.strategy);
    (ranked.into_iter().map(|(seconds, way)| (seconds, way.kernel.clone(), strategy(&way))).collect(), transpose.cloned())
}

/// The problem's ways, timed beside cuBLAS: each ranked by a first look, and measured in full
/// where that look is within PRUNE of the fastest so far; those the cost model puts past SKIP
/// times the fastest are not launched.
fn measure<T: tilesmith_runtime::Element>(
    gpu: &Gpu,
    registry: &Registry,
    dtype: Dtype,
    shape: GemmShape,
    epilogue: &Measured,
    warn: &dyn Fn(String),
) -> Result<Option<Timings>, String> {
    let (candidates, transpose) = candidates(registry, gpu, dtype, &shape, epilogue);
    if candidates.is_empty() {
        return Ok(None);
    }
    let mut skipped = 0;
    let mut case = GemmCase::<T>::new(gpu, shape, trials::dispatch_tolerance(registry, [dtype; 3], &shape)?)?;
    // cuBLAS's plain GEMM stays the ratio's baseline; the candidates add a bias and activate.
    let cublas_ms = case.time_cublas_runs(gpu, WARMUP, RUNS)?;
    if let Some((_, activation)) = epilogue {
        case = case.with_bias_activation(gpu, *activation)?;
    }
    let problem =
        format!("{} {dtype} {}", table::describe(shape.batch.count as u64, &[shape.m, shape.n, shape.k].map(|d| d as u64)), shape.layout);
    if !tuning::valid_ms(cublas_ms) {
        return Err(format!("cuBLAS timed {cublas_ms} ms on {problem}"));
    }
    let mut workspace = Workspace::new();
    let mut measured: Vec<Timed> = Vec::new();
    let mut best = f64::INFINITY;
    for (estimate, kernel, strategy) in candidates {
        if estimate * 1e3 > SKIP * best {
            skipped += 1;
            continue;
        }
        let choice = Choice::forced(kernel, strategy, transpose.clone());
        let warn = |what: String| warn(format!("{}: {what}", choice.label()));
        let first = match case.time_choice(gpu, &choice, &mut workspace, 1, LOOK) {
            Ok(ms) => ms,
            Err(err) => {
                warn(err);
                continue;
            }
        };
        let ms = if first > PRUNE * best {
            first
        } else {
            match case.time_choice(gpu, &choice, &mut workspace, WARMUP, RUNS) {
                Ok(ms) => ms,
                Err(err) => {
                    warn(err);
                    continue;
                }
            }
        };
        if !tuning::valid_ms(ms) {
            warn(format!("timed {ms} ms; left out"));
            continue;
        }
        best = best.min(ms);
        let source = family_table::stamp(&choice.kernel.info().entry.source_sha256);
        measured.push(Timed { variant: choice.kernel.name().to_string(), strategy: strategy.word(), ms, source });
    }
    // Nothing timed: the problem stays unmeasured, for the cost model.
    Ok(Some(Timings { baseline_ms: cublas_ms, timed: measured, skipped }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn four_sizes_are_a_batch_and_bad_problems_are_refused() {
        let problems = parse_problems("64x512x512x64, 4095x4097x4099!").unwrap();
        assert_eq!(problems[0], Problem { batch: 64, shape: [512, 512, 64], odd_ld: false });
        assert_eq!(problems[1], Problem { batch: 1, shape: [4095, 4097, 4099], odd_ld: true });
        let batch = shape(problems[0], Layout::Tn);
        assert_eq!((batch.batch.count, batch.batch.strides), (64, [512 * 64, 512 * 64, 512 * 512]));
        for bad in ["0x512x512x64", "512x512", "1x2x3x4x5", "8x8xk"] {
            assert!(parse_problems(bad).unwrap_err().contains(bad), "{bad}");
        }
    }

    #[test]
    fn an_epilogue_of_its_own_is_an_activation() {
        let epilogues = ["gelu_tanh", "linear", "none", "relu"];
        assert_eq!(measured(Some("gelu_tanh"), &epilogues), Ok(Some(("gelu_tanh".to_string(), Activation::named("gelu_tanh").unwrap()))));
        assert_eq!(measured(None, &epilogues), Ok(None));
        for bad in ["none", "linear", "gelu", "gelu tanh"] {
            assert!(measured(Some(bad), &epilogues).unwrap_err().contains(&format!("--epilogue {bad}:")), "{bad}");
        }
        let err = measured(Some("silu"), &epilogues).unwrap_err();
        assert!(err.contains("the registry's GEMM variants apply (gelu_tanh, relu)"), "{err}");
    }

    #[test]
    fn the_default_set_holds_the_batches_and_counts_as_its_comment_says() {
        let set = problems(None, None).unwrap();
        assert_eq!(set.len(), 78);
        assert!(set.contains(&Problem { batch: 8, shape: [4096, 4096, 4096], odd_ld: false }));
        let mut keys = HashSet::new();
        for &problem in &set {
            for layout in Layout::ALL {
                keys.insert(identity(problem, Dtype::Bf16, *layout, &None));
            }
        }
        assert_eq!(keys.len(), 302);
    }
}
