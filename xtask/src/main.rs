//! tilesmith's build tool: `cargo xtask gen`, `build`, `list` and `toolchain`.

mod build;
mod bundle;
mod gen;
mod list;
mod parallel;
mod project;
mod registry;
mod render;
mod select;
mod toolchain;

use anyhow::Result;
use clap::{Parser, Subcommand};
use project::Project;
use select::Selection;
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Parser)]
#[command(name = "cargo xtask", about = "tilesmith: GPU kernel variants from templates to a fatbin registry")]
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
    /// Benchmark variants against cuBLAS (GEMM) and a device copy (transpose) on this machine's
    /// GPU: a table, bench.json and SVG charts. Arguments go to the bench program.
    Bench {
        /// e.g. --kernels 'gemm_tn_*' --shapes 4096x4096x4096,8192x8192 --out DIR
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
    /// Tune the dispatcher on this machine's GPU: time every variant on a set of GEMM problems
    /// beside cuBLAS and write tuning/<GPU>-<SMs>sm.json, which the next build carries into the
    /// registry. Resumable; arguments go to the tune program.
    Tune {
        /// e.g. --shapes 16x4096x4096,4095x4097x4099! --dtypes bf16 --layouts tn
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
    /// Build the registry, the release test binary and the example into one folder with a
    /// run.sh, for running every trial on a GPU machine without Rust.
    Bundle {
        /// Where to put it (default: bundle/ in the workspace).
        #[arg(long, value_name = "DIR")]
        out: Option<PathBuf>,
        #[command(flatten)]
        compile: Compile,
    },
}

/// How nvcc is run.
#[derive(clap::Args)]
struct Compile {
    /// Parallel nvcc jobs, at least 1 (default: the number of cores).
    #[arg(short, long, value_parser = clap::value_parser!(u32).range(1..))]
    jobs: Option<u32>,
    /// Run nvcc through this program, e.g. `sccache` (split on spaces; the content hash does
    /// not change).
    #[arg(long, value_name = "CMD", env = build::LAUNCHER_VAR)]
    launcher: Option<String>,
}

impl Compile {
    fn options(&self, repair: bool) -> build::Options {
        build::Options {
            jobs: self.jobs.map_or_else(build::cores, |jobs| jobs as usize),
            launcher: build::split_launcher(self.launcher.as_deref().unwrap_or_default()),
            repair,
        }
    }
}

#[derive(clap::Args)]
struct Kernels {
    /// Only variants whose names match this glob (repeatable), e.g. 'gemm_tn_*'.
    #[arg(long = "kernels", value_name = "GLOB")]
    globs: Vec<String>,
}

fn main() -> ExitCode {
    match run(Cli::parse()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("error: {err:#}");
            ExitCode::FAILURE
        }
    }
}

fn run(cli: Cli) -> Result<()> {
    let project = match cli.root {
        Some(root) => {
            let root = std::path::absolute(&root)?;
            if root.is_file() {
                anyhow::bail!("--root {}: is a file; give the project folder, the one holding variants.toml", root.display());
            }
            if !root.is_dir() {
                anyhow::bail!("--root {}: the project folder does not exist", root.display());
            }
            Project { root }
        }
        None => Project::find(&std::env::current_dir()?)?,
    };
    match cli.command {
        Command::Gen { check, repair, kernels } => gen::run(&project, &Selection::new(&kernels.globs)?, check, repair),
        Command::Build { compile, repair, kernels } => build::run(&project, &Selection::new(&kernels.globs)?, &compile.options(repair)),
        Command::Bundle { out, compile } => bundle::run(&project, out, &compile.options(false)),
        Command::Bench { args } => bundle::run_program(&project, "bench", &args),
        Command::Tune { args } => bundle::run_program(&project, "tune", &args),
        Command::List { glob, mut kernels } => {
            kernels.globs.extend(glob);
            list::run(&project, &Selection::new(&kernels.globs)?)
        }
        Command::Toolchain => {
            let nvcc = toolchain::Nvcc::locate()?;
            println!("nvcc: {} ({})", nvcc.path.display(), nvcc.origin);
            println!("version: {}", nvcc.version);
            match &nvcc.cuobjdump {
                Some(path) => println!("cuobjdump: {}", path.display()),
                None => println!("cuobjdump: not found beside nvcc"),
            }
            Ok(())
        }
    }
}
