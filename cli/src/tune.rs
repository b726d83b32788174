//! `tilesmith tune`: the arguments, and which family's problems and timer the one tuning loop
//! (`tilesmith_trials::tune::tune`) runs: a plug-in's for the family it has a policy for
//! (GEMM's, the default: `tilesmith_gemm::trials::tune`), else the generic ones (`tune_family`).

use crate::PLUGINS;
use std::path::PathBuf;
use tilesmith_runtime::Registry;
use tilesmith_trials::tune::{TuneRequest, Tuner};

#[derive(clap::Args)]
pub struct Args {
    /// Comma-separated problems MxNxK, a trailing `!` for odd leading dimensions; they replace
    /// the default set (transformer layers' problems, the bench's, and a grid of 16, 256 and 4096).
    #[arg(long)]
    shapes: Option<String>,
    /// A file of problems, one or more per line in --shapes' form; `#` starts a comment.
    #[arg(long, value_name = "FILE")]
    shapes_file: Option<PathBuf>,
    /// Tune the chooser of this family instead of GEMM's dispatcher (`gemm`, the default): its
    /// declared `trials.tune` problems (else `trials.bench`), or --shapes given as its
    /// quantities joined by `x`, into tuning/<family>/<GPU>-<SMs>sm.json. --layouts,
    /// --epilogue and --shapes-file are GEMM's.
    #[arg(long, value_name = "NAME")]
    family: Option<String>,
    /// Dtypes to tune, comma-separated (default: bf16 for GEMM, every dtype of the family with
    /// --family). A dtype's entries stand for another of the same width where that has none
    /// (f16 runs bf16's picks), so one of each width does.
    #[arg(long)]
    dtypes: Option<String>,
    /// Layouts to tune, comma-separated.
    #[arg(long, default_value = "nn,nt,tn,tt")]
    layouts: String,
    /// Rank the variants of this `epilogue` value (relu, gelu_tanh, gelu_erf, silu), each timed
    /// with a bias per column, into entries of their own, which the dispatcher reads first for
    /// calls with that activation (default: plain GEMMs, whose picks stand for every epilogue
    /// without entries of its own).
    #[arg(long, value_name = "WORD")]
    epilogue: Option<String>,
    /// Folder of the tables; a family's table for a GPU is `<family>/<name>-<SMs>sm.json` there
    /// (default: the project's tuning/, else tuning/ here).
    #[arg(long, env = "TILESMITH_TUNING_DIR")]
    out: Option<PathBuf>,
    /// Measure again the problems of the set that the table already holds (their entries are
    /// replaced; the table's other entries stay). Without it, a run measures those the table
    /// lacks, those whose entries time a variant whose source changed since, and (--family, but
    /// GEMM's) those whose entries lack a variant that takes the problem now.
    #[arg(long)]
    fresh: bool,
    /// GPUs to tune on, comma-separated ordinals (default: every GPU). The problems are shared
    /// out among the GPUs of one kind; each kind gets its own table.
    #[arg(long, value_name = "LIST")]
    gpus: Option<String>,
    /// Stop starting problems after this many minutes; what is left is measured by the next
    /// run, which skips what the table holds.
    #[arg(long, default_value_t = 10.0)]
    minutes: f64,
    /// Append a line per problem measured to FILE: GPU, problem, seconds taken, candidates
    /// timed and not launched, the pick's speed relative to the baseline (GEMM: cuBLAS; any
    /// other family: a copy of the bytes moved; above 1: faster).
    #[arg(long, value_name = "FILE")]
    log: Option<PathBuf>,
}

/// The plug-in tuner of `family`, or, with none named, the first plug-in's (GEMM's).
fn tuner(family: Option<&str>) -> Option<&'static dyn Tuner> {
    PLUGINS.iter().filter_map(|p| p.tuner()).find(|t| family.is_none_or(|f| f == t.family()))
}

/// Tunes on the kernels of `registry`, writing the tables into `--out`, else `default_out`.
pub fn run(args: Args, registry: &Registry, default_out: PathBuf) -> Result<(), String> {
    let out = args.out.clone().unwrap_or(default_out);
    if let Some(tuner) = tuner(args.family.as_deref()) {
        let mut flags: Vec<(&str, &str)> = vec![("layouts", args.layouts.as_str())];
        flags.extend(args.epilogue.as_deref().map(|e| ("epilogue", e)));
        let request = TuneRequest {
            shapes: args.shapes.as_deref(),
            shapes_file: args.shapes_file.as_deref(),
            dtypes: args.dtypes.as_deref(),
            flags: &flags,
            out: &out,
            fresh: args.fresh,
            gpus: args.gpus.as_deref(),
            minutes: args.minutes,
            log: args.log.as_deref(),
        };
        return tuner.tune(registry, &request);
    }
    let family = args.family.as_deref().unwrap_or_default();
    let plugin_only = [("--epilogue", args.epilogue.is_some()), ("--shapes-file", args.shapes_file.is_some())];
    if let Some((flag, _)) = plugin_only.iter().find(|(_, given)| *given) {
        return Err(format!(
            "{flag} is for tuning GEMM's policy; --family {family} takes --shapes, --dtypes, --out, --fresh, --gpus, --minutes and --log"
        ));
    }
    let options = crate::tune_family::Options {
        family,
        shapes: args.shapes.as_deref(),
        dtypes: args.dtypes.as_deref(),
        out: &out,
        fresh: args.fresh,
        gpus: args.gpus.as_deref(),
        minutes: args.minutes,
        log: args.log.as_deref(),
    };
    crate::tune_family::run(options, registry)
}
