//! `tilesmith replay tuning/<family>/<GPU>-<SMs>sm.json`: a family's chooser against a measured
//! table, on the CPU. Each entry is held out in turn (with its twins in other dtypes, which the
//! chooser reads where a dtype has none of its own) and picked for from the rest: how well
//! neighbours stand for a problem no table holds. Beside it the pick without a table (the cost
//! model, or a policy's heuristic) and, with `--borrow`, from another GPU's table. Each pick is
//! read at the time the entry measured for it (variant and way: GEMM's padded strategy), against
//! the fastest there. The call an entry stands for is the family policy's where it has one
//! (GEMM's: its layout, alignment and batch), else the entry's problem with packed rows.

use std::path::PathBuf;
use tilesmith_runtime::{Call, Chooser, Pick, Registry};
use tilesmith_spec::family_table::{self, FamilyEntry, FamilyTable};
use tilesmith_spec::tuning::{Clocks, Device};
use tilesmith_trials::declared;
use tilesmith_trials::tune::Regret;

#[derive(clap::Args)]
pub struct Args {
    /// The measured table to replay (`tuning/<family>/<GPU>-<SMs>sm.json`), against its
    /// family's chooser.
    table: PathBuf,
    /// The shared memory a block may use on the measured GPU (an H100's and an H200's by
    /// default).
    #[arg(long, default_value_t = 232_448, value_name = "BYTES")]
    smem_per_block: u32,
    /// Also pick from this table of another GPU, as the chooser does where a GPU has no table
    /// of its own.
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
    let chooser = registry.family(&table.family).map_err(|e| e.to_string())?;
    let unknown = table.unknown_variants(|name| registry.kernel(name).is_ok());
    if !unknown.is_empty() {
        println!("note: {} variants the table ranks are not in this registry (e.g. {})", unknown.len(), unknown[0]);
    }
    let device = Device { clocks: table.device.clocks.or(args.clocks), ..table.device.clone() };
    let mut held = chooser.with_tables(vec![table.clone()])?;
    let bare = chooser.with_tables(Vec::new())?;
    let borrowed = match args.borrow.as_deref() {
        Some(path) => {
            let other = FamilyTable::read(path)?;
            if other.family != table.family {
                return Err(format!(
                    "--borrow {}: a table of {}, and the replayed one is of {}",
                    path.display(),
                    other.family,
                    table.family
                ));
            }
            Some(chooser.with_tables(vec![other])?)
        }
        None => None,
    };
    // Each way of picking, as the verbose lines and the summary name it.
    let mut regrets = vec![("held out", Regret::new("table, entry held out")), ("no table", Regret::new("no table: cost model"))];
    if borrowed.is_some() {
        regrets.push(("other GPU's table", Regret::new("the other GPU's table")));
    }
    let mut replayed = 0;
    for entry in &table.entries {
        let call = match chooser.policy() {
            Some(policy) => match policy.entry_call(entry)? {
                Some(call) => call,
                None => continue,
            },
            None => packed_call(chooser, entry)?,
        };
        let Some(fastest) = fastest(chooser, entry) else { continue };
        replayed += 1;
        let twin = |e: &FamilyEntry| e.batch == entry.batch && e.problem == entry.problem && e.class == entry.class;
        let mut picks = vec![held.pick_holding_out(&device, args.smem_per_block, &call, twin).ok()];
        picks.push(bare.pick(&device, args.smem_per_block, &call).ok());
        if let Some(other) = &borrowed {
            picks.push(other.pick(&device, args.smem_per_block, &call).ok());
        }
        let problem = describe(&table, entry);
        let mut line = format!("{problem}: fastest {}", fastest.variant);
        for ((label, regret), pick) in regrets.iter_mut().zip(&picks) {
            let ms = pick.as_ref().and_then(|pick| measured(entry, pick));
            let ratio = regret.add(ms, fastest.ms, entry.baseline_ms, &problem);
            let name = pick.as_ref().map_or("none".to_string(), |p| p.way.label());
            let ratio = ratio.map_or("unmeasured".to_string(), |r| format!("{r:.3}"));
            line += &format!("; {label} {name} {ratio}");
        }
        if args.verbose {
            println!("{line}");
        }
    }
    println!("{replayed} of the {} entries of {} on {} replayed:\n{}", table.entries.len(), table.family, table.device, Regret::HEADER);
    for (_, regret) in &regrets {
        println!("{}", regret.row());
    }
    Ok(())
}

/// The entry's problem as messages write it: a batch's count, the quantities, the dtype and
/// the class.
fn describe(table: &FamilyTable, entry: &FamilyEntry) -> String {
    let batch = if entry.batch == 1 { String::new() } else { format!("{} x ", entry.batch) };
    let class: String = entry.class.iter().map(|(k, v)| format!(" {k}={v}")).collect();
    format!("{batch}{} {}{class}", family_table::describe(&table.quantities, &entry.problem), entry.dtype)
}

/// The fastest timing of the entry that runs what its call computes: a policy's entries rank
/// ways of running their class's calls only; another family's call leaves the computing axes
/// at their defaults (attention without its causal mask), so its fastest is that of the
/// variants that compute so.
fn fastest<'e>(chooser: &Chooser, entry: &'e FamilyEntry) -> Option<&'e family_table::Timed> {
    if chooser.policy().is_some() {
        return entry.ranked.iter().min_by(|a, b| a.ms.total_cmp(&b.ms));
    }
    let at_defaults = |name: &str| {
        chooser.kernels().iter().find(|k| k.name() == name).is_some_and(|k| {
            chooser
                .declaration()
                .computing_axes()
                .all(|a| a.default.as_ref().is_none_or(|default| k.variant().value(&a.name).is_none_or(|own| own == *default)))
        })
    };
    entry.ranked.iter().find(|t| at_defaults(&t.variant))
}

/// The time the entry measured for the pick's variant run its way.
fn measured(entry: &FamilyEntry, pick: &Pick) -> Option<f64> {
    entry.ranked.iter().find(|t| t.variant == pick.kernel().name() && t.strategy == pick.way.strategy).map(|t| t.ms)
}

/// The entry's problem as a call with packed rows, on buffers that hold exactly what it spans.
fn packed_call(chooser: &Chooser, entry: &FamilyEntry) -> Result<Call, String> {
    let family = chooser.declaration();
    let kernel = chooser
        .kernels()
        .iter()
        .filter(|k| k.variant().dtype == entry.dtype)
        .min_by_key(|k| k.info().entry.requires.ld_multiple)
        .ok_or_else(|| format!("the registry has no {} variant of {}", entry.dtype, chooser.name()))?;
    let shape: declared::Shape = family.quantities.iter().cloned().zip(entry.problem.iter().copied()).collect();
    declared::unallocated_call(&kernel.info().entry, &declared::with_lds(kernel, shape, 0)?)
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
