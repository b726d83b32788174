//! `tilesmith replay`: the arguments, and which replay runs them, on the CPU: a plug-in's own
//! for the family it dispatches (GEMM's: `tilesmith_gemm::trials::replay`), else the generic
//! replay of a family's chooser (`replay_family`).

use crate::PLUGINS;
use std::path::PathBuf;
use tilesmith_runtime::Registry;
use tilesmith_spec::family_table::FamilyTable;
use tilesmith_spec::tuning::Clocks;
use tilesmith_trials::tune::ReplayRequest;

#[derive(clap::Args)]
pub struct Args {
    /// The measured table to replay (`tuning/<family>/<GPU>-<SMs>sm.json`): GEMM's against its
    /// dispatcher, another family's against the family's chooser.
    table: PathBuf,
    /// For a family's table: the shared memory a block may use on the measured GPU (an H100's
    /// and an H200's by default).
    #[arg(long, default_value_t = 232_448, value_name = "BYTES")]
    smem_per_block: u32,
    /// Also pick from this table of another GPU, as the dispatcher does where a GPU has no
    /// table of its own.
    #[arg(long, value_name = "FILE")]
    borrow: Option<PathBuf>,
    /// The measured GPU's SM clock and DRAM bandwidth, `MHZ:GBPS`, where the table does not
    /// record them (tables written before they were).
    #[arg(long, value_name = "MHZ:GBPS", value_parser = parse_clocks)]
    clocks: Option<Clocks>,
    /// Print every problem, not only the summary.
    #[arg(long)]
    verbose: bool,
}

fn parse_clocks(text: &str) -> Result<Clocks, String> {
    let parse = |part: Option<&str>| part.and_then(|p| p.trim().parse::<u32>().ok()).filter(|&v| v > 0);
    let mut parts = text.split(':');
    match (parse(parts.next()), parse(parts.next()), parts.next()) {
        (Some(sm_mhz), Some(memory_gbps), None) => Ok(Clocks { sm_mhz, memory_gbps }),
        _ => Err(format!("`{text}` is not MHZ:GBPS with both above 0, e.g. 1980:3350")),
    }
}

pub fn run(args: Args, registry: &Registry) -> Result<(), String> {
    let table = FamilyTable::read(&args.table)?;
    match PLUGINS.iter().filter_map(|p| p.tuner()).find(|t| t.family() == table.family) {
        Some(tuner) => {
            let request = ReplayRequest { borrow: args.borrow.as_deref(), clocks: args.clocks, verbose: args.verbose };
            tuner.replay(registry, &table, &request)
        }
        None => crate::replay_family::run(&table, registry, args.smem_per_block, args.verbose),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clocks_are_two_positive_numbers() {
        assert_eq!(parse_clocks("1980:3350"), Ok(Clocks { sm_mhz: 1980, memory_gbps: 3350 }));
        for bad in ["1980", "0:3350", "1980:x", "1:2:3"] {
            assert!(parse_clocks(bad).unwrap_err().contains("MHZ:GBPS"), "{bad}");
        }
    }
}
