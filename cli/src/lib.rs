//! `tilesmith` (also `cargo tilesmith`): a project's GPU kernels from variants.toml to a tested,
//! benchmarked and tuned fatbin registry. Every command works on the project found from the
//! current folder upward (the folder holding variants.toml), or on `--root`.

mod bench;
mod bundle;
mod chart;
mod choose;
mod init;
mod list;
mod perf_table;
mod replay;
mod tune;
mod tune_family;

use anyhow::{bail, Context, Result};
use clap::{Parser, Subcommand};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use tilesmith_build::compile::{self, Options};
use tilesmith_build::{gen, toolchain, Project, Selection};
use tilesmith_runtime::{Registry, REGISTRY_VAR};
use tilesmith_spec::manifest::{self, MANIFEST_FILE};
use tilesmith_trials::report::PERF_DIR_NAME;
use tilesmith_trials::trials::Plugin;

/// The trials plug-ins this command links: GEMM's (its cuBLAS baseline and its dispatcher).
pub(crate) const PLUGINS: &[&dyn Plugin] = &[&tilesmith_gemm::trials::PLUGIN];

/// The plug-ins' checks of their tables, which every build here runs: GEMM's.
const TABLE_CHECKS: &[compile::TableCheck] = &[tilesmith_gemm::table::check_table];

#[derive(Parser)]
#[command(name = "tilesmith", version, about = "tilesmith: GPU kernel variants from templates to a tested fatbin registry")]
struct Cli {
    /// Project folder holding variants.toml, kernel-templates/, generated/ and registry/
    /// (default: the nearest folder holding a variants.toml, from the current one upward).
    #[arg(long, global = true, value_name = "DIR")]
    root: Option<PathBuf>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Create a minimal project (variants.toml, one family, one template) in DIR (default: the
    /// current folder); it builds and gets trials as it is.
    Init { dir: Option<PathBuf> },
    /// Render every variant of variants.toml into generated/ and write generated/manifest.json.
    Gen {
        /// Write nothing; fail listing the files that differ from what the templates produce.
        #[arg(long, conflicts_with = "repair")]
        check: bool,
        /// Set an unreadable generated/manifest.json aside as manifest.json.corrupt and write a
        /// new one from what the templates produce now.
        #[arg(long)]
        repair: bool,
        #[command(flatten)]
        kernels: Kernels,
    },
    /// Compile generated sources into fatbins in registry/, incrementally and in parallel.
    Build {
        #[command(flatten)]
        compile: Compile,
        /// Set an unreadable registry/manifest.json aside as manifest.json.corrupt and rebuild it
        /// from the per-variant records whose fatbins still match.
        #[arg(long)]
        repair: bool,
        #[command(flatten)]
        kernels: Kernels,
    },
    /// Show the variants with their key axes and, once built, their resources.
    List {
        /// Only variants matching this glob.
        glob: Option<String>,
        #[command(flatten)]
        kernels: Kernels,
    },
    /// Say which nvcc is used and its version, installing NVIDIA's wheels if none is found.
    Toolchain,
    /// Run the registry's trials on this machine's GPU: a correctness trial per variant, a perf
    /// trial per variant (ignored unless asked for), and the GEMM dispatcher's where there are
    /// GEMMs; the registry is generated and built first where it is the project's.
    Test {
        #[command(flatten)]
        registry: RegistryArg,
        /// Run only share k of n of the trials (split by a hash of their names), to spread them
        /// over machines or GPUs: hash:1/2 on one, hash:2/2 on the other.
        #[arg(long, value_name = "hash:k/n", value_parser = tilesmith_trials::harness::parse_partition)]
        partition: Option<(u64, u64)>,
        /// Folder for the perf trials' records (default: target/tilesmith-perf in the project,
        /// else tilesmith-perf here).
        #[arg(long, env = tilesmith_trials::report::PERF_DIR_VAR, value_name = "DIR")]
        perf_dir: Option<PathBuf>,
        /// Exit successfully even where no GPU trial could run (no GPU or no driver); without
        /// it such a run fails, so that a CI without a GPU does not pass having tested nothing.
        #[arg(long)]
        allow_no_gpu: bool,
        #[command(flatten)]
        trials: TrialArgs,
    },
    /// Benchmark variants against their family's baseline (cuBLAS for GEMM, a device copy for
    /// the others) on this machine's GPU: a table, bench.json and SVG charts.
    Bench {
        #[command(flatten)]
        registry: RegistryArg,
        #[command(flatten)]
        args: bench::Args,
    },
    /// Tune the GEMM dispatcher on this machine's GPUs: time every variant on a set of problems
    /// beside cuBLAS and write tuning/gemm/<GPU>-<SMs>sm.json, which the next build carries into
    /// the registry; with --family NAME, any family's chooser, into tuning/<NAME>/. Resumable.
    Tune {
        #[command(flatten)]
        registry: RegistryArg,
        #[command(flatten)]
        args: tune::Args,
    },
    /// What a call of a shape would run, and why, without a GPU: every variant with whether it
    /// takes the call, its table estimate and the cost model's, the pick and its reason. Reads
    /// a registry only (--registry, $TILESMITH_REGISTRY, or the project's as built).
    Choose {
        #[command(flatten)]
        registry: RegistryArg,
        #[command(flatten)]
        args: choose::Args,
    },
    /// Replay a family's chooser against a measured tuning table, without a GPU: how its picks
    /// with each entry held out, without a table, and from another GPU's table measured there,
    /// beside the fastest.
    Replay {
        #[command(flatten)]
        registry: RegistryArg,
        #[command(flatten)]
        args: replay::Args,
    },
    /// Print the perf trials' records as a Markdown table.
    PerfTable {
        /// Folder of the records (default: target/tilesmith-perf in the project).
        dir: Option<PathBuf>,
    },
    /// Generate and build the registry and copy it and a release `tilesmith` into one folder with run.sh, bench.sh and
    /// tune.sh, for running the trials, the bench and tuning on a GPU machine without Rust.
    Bundle {
        /// Where to put it (default: bundle/ in the project).
        #[arg(long, value_name = "DIR")]
        out: Option<PathBuf>,
        #[command(flatten)]
        compile: Compile,
    },
}

/// Which trials `test` runs and how it reports them: the options of cargo test's harness that
/// tilesmith's trials honour.
#[derive(clap::Args)]
struct TrialArgs {
    /// Run only the trials whose names contain FILTER (`softmax`, `::perf`).
    #[arg(value_name = "FILTER")]
    filter: Option<String>,
    /// The filter must match a whole name.
    #[arg(long)]
    exact: bool,
    /// Skip the trials whose names contain PART (repeatable).
    #[arg(long, value_name = "PART")]
    skip: Vec<String>,
    /// Run the trials ignored by default (the perf trials) too.
    #[arg(long)]
    include_ignored: bool,
    /// Run only the trials ignored by default.
    #[arg(long, conflicts_with = "include_ignored")]
    ignored: bool,
    /// List the trials on standard output, one a line (`name: test`), instead of running them.
    #[arg(long)]
    list: bool,
    /// How many trials run at once.
    #[arg(long, value_name = "N")]
    test_threads: Option<usize>,
    /// pretty (a line per trial), terse (a character per trial) or json (an event per line).
    #[arg(long, value_enum)]
    format: Option<TrialFormat>,
    /// Short for --format terse.
    #[arg(short, long, conflicts_with = "format")]
    quiet: bool,
    /// Write the report into FILE instead of standard output.
    #[arg(long, value_name = "FILE")]
    logfile: Option<String>,
}

#[derive(Clone, Copy, clap::ValueEnum)]
enum TrialFormat {
    Pretty,
    Terse,
    Json,
}

impl TrialArgs {
    fn libtest(self) -> libtest_mimic::Arguments {
        use libtest_mimic::FormatSetting;
        libtest_mimic::Arguments {
            filter: self.filter,
            exact: self.exact,
            skip: self.skip,
            include_ignored: self.include_ignored,
            ignored: self.ignored,
            list: self.list,
            test_threads: self.test_threads,
            format: self.format.map(|f| match f {
                TrialFormat::Pretty => FormatSetting::Pretty,
                TrialFormat::Terse => FormatSetting::Terse,
                TrialFormat::Json => FormatSetting::Json,
            }),
            quiet: self.quiet,
            logfile: self.logfile,
            ..libtest_mimic::Arguments::default()
        }
    }
}

/// Which registry `test`, `bench` and `tune` use.
#[derive(clap::Args)]
struct RegistryArg {
    /// A built registry folder (a bundle's, or one copied from elsewhere); no project needed.
    /// Default: $TILESMITH_REGISTRY, else the project's, built first.
    #[arg(long, value_name = "DIR")]
    registry: Option<PathBuf>,
}

/// How nvcc is run.
#[derive(clap::Args)]
struct Compile {
    /// Parallel nvcc jobs, at least 1 (default: the number of cores).
    #[arg(short, long, value_parser = clap::value_parser!(u32).range(1..))]
    jobs: Option<u32>,
    /// Run nvcc through this program, e.g. `sccache` (split on spaces; the content hash does
    /// not change).
    #[arg(long, value_name = "CMD", env = compile::LAUNCHER_VAR)]
    launcher: Option<String>,
    /// Take fatbins from this folder by content hash instead of compiling them, and put every
    /// fatbin compiled there (shared by builds and projects; sccache's counterpart on one machine).
    #[arg(long, value_name = "DIR", env = compile::CACHE_VAR)]
    cache: Option<PathBuf>,
    /// Time each compile's phases (front end, ptxas, fatbinary: nvcc's `--time`) and report
    /// them per family, with the slowest variants and the fatbins' sizes; every variant's in
    /// target/tilesmith-timings/build.json. Compiles taken from the cache are not timed.
    #[arg(long)]
    timings: bool,
    /// Build for these GPU architectures only, comma-separated (`sm_90`; it names `sm_90a`
    /// too): each variant's SASS for those of its targets, its PTX raised to the lowest of
    /// them; variants whose backends target none are not built.
    #[arg(long, value_name = "LIST", env = compile::ARCH_VAR)]
    arch: Option<String>,
}

impl Compile {
    fn options(&self, repair: bool) -> Options {
        Options {
            jobs: self.jobs.map_or_else(compile::cores, |jobs| jobs as usize),
            launcher: compile::split_launcher(self.launcher.as_deref().unwrap_or_default()),
            repair,
            cache: self.cache.clone(),
            table_checks: TABLE_CHECKS.to_vec(),
            references: true,
            timings: self.timings,
            arch: self.arch.as_deref().map(compile::split_arch),
        }
    }
}

#[derive(clap::Args)]
struct Kernels {
    /// Only variants whose names match this glob (repeatable), e.g. 'gemm_tn_*'.
    #[arg(long = "kernels", value_name = "GLOB")]
    globs: Vec<String>,
}

/// The command: parses the process's arguments, runs, and says how it went.
pub fn main() -> ExitCode {
    // `cargo tilesmith ...` runs `cargo-tilesmith tilesmith ...`.
    let mut args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    let program = args.first().map(|p| Path::new(p).file_stem().unwrap_or_default().to_string_lossy().into_owned()).unwrap_or_default();
    if program == "cargo-tilesmith" && args.get(1).is_some_and(|a| a == "tilesmith") {
        args.remove(1);
    }
    match run(Cli::parse_from(args)) {
        Ok(code) => code,
        Err(err) => {
            eprintln!("error: {err:#}");
            ExitCode::FAILURE
        }
    }
}

/// The project `--root` names, else the one found from the current folder upward.
fn project(root: &Option<PathBuf>) -> Result<Project> {
    match root {
        Some(root) => {
            let root = std::path::absolute(root)?;
            if root.is_file() {
                bail!("--root {}: is a file; give the project folder, the one holding variants.toml", root.display());
            }
            if !root.is_dir() {
                bail!("--root {}: the project folder does not exist", root.display());
            }
            Ok(Project::at(&root))
        }
        None => Project::find(&std::env::current_dir()?),
    }
}

/// What `test`, `bench` and `tune` work on: the registry, and the project if there is one
/// (for default output folders).
struct Target {
    registry: PathBuf,
    project: Option<Project>,
}

impl Target {
    /// `--registry`, else `$TILESMITH_REGISTRY` (refused when it is another project's registry
    /// and the command runs inside a project), else the project's registry, generated and built
    /// first.
    fn resolve(root: &Option<PathBuf>, given: &RegistryArg) -> Result<Target> {
        if let Some(dir) = &given.registry {
            return Ok(Target { registry: dir.clone(), project: project(root).ok() });
        }
        let from_env = std::env::var_os(REGISTRY_VAR).filter(|v| !v.is_empty()).map(PathBuf::from);
        match (from_env, project(root)) {
            (Some(dir), Ok(project)) => {
                check_same_project(&dir, &project)?;
                Ok(Target { registry: dir, project: Some(project) })
            }
            (Some(dir), Err(_)) => Ok(Target { registry: dir, project: None }),
            (None, Ok(project)) => {
                let all = Selection::new(&[])?;
                gen::run(&project, &all, false, false)?;
                compile::run(&project, &all, &Options { table_checks: TABLE_CHECKS.to_vec(), ..Options::from_env() })?;
                Ok(Target { registry: project.registry_dir(), project: Some(project) })
            }
            (None, Err(err)) => Err(err),
        }
    }

    fn output(&self, name: &str) -> PathBuf {
        output_dir(self.project.as_ref(), name)
    }

    fn open(&self) -> Result<Registry> {
        Registry::open(Some(&self.registry)).map_err(|err| anyhow::anyhow!("{err}"))
    }
}

/// Where a command writes by default: `target/<name>` in the project, else `<name>` in the
/// current folder.
fn output_dir(project: Option<&Project>, name: &str) -> PathBuf {
    project.map_or_else(|| PathBuf::from(name), |p| p.root.join("target").join(name))
}

/// Refuses a `$TILESMITH_REGISTRY` built from another project than the one the command runs in.
fn check_same_project(dir: &Path, project: &Project) -> Result<()> {
    let index: tilesmith_spec::Registry =
        manifest::read(&dir.join(MANIFEST_FILE)).with_context(|| format!("{REGISTRY_VAR}={}", dir.display()))?;
    let here = std::fs::canonicalize(&project.root).unwrap_or_else(|_| project.root.clone());
    match index.project {
        Some(built_from) if built_from != here => bail!(
            "{REGISTRY_VAR}={} is the registry of the project in {}, not of this one ({}): unset {REGISTRY_VAR} to use this \
             project's registry, or pass --registry to use that one anyway",
            dir.display(),
            built_from.display(),
            here.display()
        ),
        _ => Ok(()),
    }
}

fn run(cli: Cli) -> Result<ExitCode> {
    let done = |result: Result<()>| result.map(|()| ExitCode::SUCCESS);
    let message = |result: Result<(), String>| result.map_err(|err| anyhow::anyhow!(err));
    match cli.command {
        Command::Init { dir } => done(init::run(&dir.map_or_else(std::env::current_dir, Ok)?)),
        Command::Gen { check, repair, kernels } => done(gen::run(&project(&cli.root)?, &Selection::new(&kernels.globs)?, check, repair)),
        Command::Build { compile, repair, kernels } => {
            done(compile::run(&project(&cli.root)?, &Selection::new(&kernels.globs)?, &compile.options(repair)))
        }
        Command::List { glob, mut kernels } => {
            kernels.globs.extend(glob);
            done(list::run(&project(&cli.root)?, &Selection::new(&kernels.globs)?))
        }
        Command::Toolchain => done(print_toolchain()),
        Command::Test { registry, partition, perf_dir, allow_no_gpu, trials } => {
            let target = Target::resolve(&cli.root, &registry)?;
            let entries = tilesmith_trials::harness::registry_entries(&target.registry).map_err(|err| anyhow::anyhow!(err))?;
            let perf_dir = perf_dir.unwrap_or_else(|| target.output(PERF_DIR_NAME));
            let setup = tilesmith_trials::harness::Setup {
                entries,
                registry: target.registry,
                perf_dir,
                partition,
                require_gpu: !allow_no_gpu,
                plugins: PLUGINS,
            };
            Ok(tilesmith_trials::harness::run(trials.libtest(), setup))
        }
        Command::Bench { registry, args } => {
            if let Some(from) = &args.replot {
                let out = args.out.clone().unwrap_or_else(|| output_dir(project(&cli.root).ok().as_ref(), "tilesmith-bench"));
                return done(message(bench::replot(from, &out)));
            }
            let target = Target::resolve(&cli.root, &registry)?;
            done(message(bench::run(args, &target.open()?, target.output("tilesmith-bench"))))
        }
        Command::Tune { registry, args } => {
            let tuning_dir = |project: Option<&Project>| project.map_or_else(|| PathBuf::from("tuning"), Project::tuning_dir);
            let target = Target::resolve(&cli.root, &registry)?;
            done(message(tune::run(args, &target.open()?, tuning_dir(target.project.as_ref()))))
        }
        Command::Choose { registry, args } => {
            let project_registry = project(&cli.root).ok().map(|p| p.registry_dir());
            let dir = choose::registry_dir(registry.registry, project_registry).map_err(|err| anyhow::anyhow!(err))?;
            let registry = Registry::open(Some(&dir)).map_err(|err| anyhow::anyhow!("{err}"))?;
            done(message(choose::run(args, &registry)))
        }
        Command::Replay { registry, args } => {
            let target = Target::resolve(&cli.root, &registry)?;
            done(message(replay::run(args, &target.open()?)))
        }
        Command::PerfTable { dir } => {
            let dir = match dir {
                Some(dir) => dir,
                None => output_dir(Some(&project(&cli.root)?), PERF_DIR_NAME),
            };
            done(message(perf_table::run(&dir)))
        }
        Command::Bundle { out, compile } => done(bundle::run(&project(&cli.root)?, out, &compile.options(false))),
    }
}

fn print_toolchain() -> Result<()> {
    let nvcc = toolchain::Nvcc::locate()?;
    println!("nvcc: {} ({})", nvcc.path.display(), nvcc.origin);
    println!("version: {}", nvcc.version);
    match &nvcc.cuobjdump {
        Some(path) => println!("cuobjdump: {}", path.display()),
        None => println!("cuobjdump: not found beside nvcc"),
    }
    Ok(())
}
