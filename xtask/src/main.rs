//! `cargo xtask`: this repository's own developer tasks, on the repository's variants.toml.
//! Users run the shipped `tilesmith` command instead; these are the few tasks a contributor
//! needs, run from any folder of the checkout.
//!
//! - `cargo xtask gen`: render the shipped variants into generated/.
//! - `cargo xtask fresh`: fail where generated/ differs from what the templates produce.
//! - `cargo xtask build [-j N]`: compile generated/ into registry/ (installs nvcc's wheels).
//! - `cargo xtask tidy`: the repository's layout rules (also `cargo test -p xtask`).

use xtask::tidy;

use anyhow::{bail, Result};
use std::path::PathBuf;
use std::process::ExitCode;
use tilesmith_build::compile::{self, Options};
use tilesmith_build::{gen, Project, Selection};

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("error: {err:#}");
            ExitCode::FAILURE
        }
    }
}

const USAGE: &str = "usage: cargo xtask gen | fresh | build [-j N] | tidy";

fn run(args: &[String]) -> Result<()> {
    let project = Project::at(&repository());
    let all = Selection::new(&[])?;
    match args.iter().map(String::as_str).collect::<Vec<_>>()[..] {
        ["gen"] => gen::run(&project, &all, false, false),
        ["fresh"] => gen::run(&project, &all, true, false),
        ["build"] => compile::run(&project, &all, &options()),
        ["build", "-j", jobs] => match jobs.parse::<usize>() {
            Ok(jobs) if jobs > 0 => compile::run(&project, &all, &Options { jobs, ..options() }),
            _ => bail!("-j {jobs}: give a whole number of jobs, at least 1"),
        },
        ["tidy"] => {
            let broken = tidy::broken_rules(&repository());
            for rule in &broken {
                eprintln!("{rule}");
            }
            if broken.is_empty() {
                println!("tidy: every rule holds");
                Ok(())
            } else {
                bail!("tidy: {} rule(s) broken", broken.len())
            }
        }
        _ => bail!("{USAGE}"),
    }
}

/// The build's options from the environment, with the checks of GEMM's tables (the plug-in
/// tables this repository commits).
fn options() -> Options {
    Options { table_checks: vec![tilesmith_gemm::table::check_table], ..Options::from_env() }
}

/// The checkout's root: the folder above this crate's.
fn repository() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).parent().expect("xtask/ lies in the repository").to_path_buf()
}
