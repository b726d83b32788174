//! `tilesmith replay tuning/<family>/<GPU>.json`: the family chooser against a measured table,
//! on the CPU. For each entry, the pick with that entry held out (how well its neighbours stand
//! for a problem no table holds) and the cost model's pick (a GPU without a table), each at the
//! time the entry measured for it, beside the fastest variant's.

use tilesmith_runtime::{Call, Registry};
use tilesmith_spec::family_table::{self, FamilyEntry, FamilyTable};
use tilesmith_trials::declared;
use tilesmith_trials::tune::Regret;

/// Replays `table` (at `path`) against the registry's variants of its family.
pub fn run(table: &FamilyTable, registry: &Registry, smem_per_block: u32, verbose: bool) -> Result<(), String> {
    let chooser = registry.family(&table.family).map_err(|e| e.to_string())?;
    let bare = registry.clone().with_family_tables(Vec::new())?;
    let bare = bare.family(&table.family).map_err(|e| e.to_string())?;
    let mut held_out = Regret::new("table, entry held out");
    let mut model = Regret::new("cost model");
    let device = &table.device;
    for (index, entry) in table.entries.iter().enumerate() {
        let problem = format!("{} {}", family_table::describe(&table.quantities, &entry.problem), entry.dtype);
        let call = packed_call(chooser, entry)?;
        let mut others = table.clone();
        others.entries.remove(index);
        let without = registry.clone().with_family_tables(vec![others])?;
        let without = without.family(&table.family).map_err(|e| e.to_string())?;
        let held = without.pick(device, smem_per_block, &call)?;
        let modelled = bare.pick(device, smem_per_block, &call)?;
        // The call leaves the computing axes at their defaults (attention without its causal
        // mask): the fastest is that of the variants that compute so.
        let at_defaults = |name: &str| {
            registry.kernel(name).is_ok_and(|k| {
                chooser
                    .declaration()
                    .computing_axes()
                    .all(|a| a.default.as_ref().is_none_or(|default| k.variant().value(&a.name).is_none_or(|own| own == *default)))
            })
        };
        let Some(fastest) = entry.ranked.iter().find(|t| at_defaults(&t.variant)) else { continue };
        let measured = |pick: &str| entry.ranked.iter().find(|t| t.variant == pick).map(|t| t.ms);
        let a = held_out.add(measured(held.kernel.name()), fastest.ms, entry.baseline_ms, &problem);
        let b = model.add(measured(modelled.kernel.name()), fastest.ms, entry.baseline_ms, &problem);
        if verbose {
            let show = |r: Option<f64>| r.map_or("unmeasured".to_string(), |r| format!("{r:.3}"));
            println!(
                "{problem}: fastest {}; held out {} {}; cost model {} {}",
                fastest.variant,
                held.kernel.name(),
                show(a),
                modelled.kernel.name(),
                show(b)
            );
        }
    }
    println!("{} entries of {} on {}:\n{}", table.entries.len(), table.family, table.device, Regret::HEADER);
    println!("{}\n{}", held_out.row(), model.row());
    Ok(())
}

/// The entry's problem as a call with packed rows, on buffers that hold exactly what it spans.
fn packed_call(chooser: &tilesmith_runtime::Chooser, entry: &FamilyEntry) -> Result<Call, String> {
    let family = chooser.declaration();
    let kernel = chooser
        .kernels()
        .iter()
        .filter(|k| k.variant().dtype == entry.dtype)
        .min_by_key(|k| k.info().entry.requires.ld_multiple)
        .ok_or_else(|| format!("the registry has no {} variant of {}", entry.dtype, chooser.name()))?;
    let shape: declared::Shape = family.quantities.iter().cloned().zip(entry.problem.iter().copied()).collect();
    declared::unallocated_call(family, kernel.variant(), &declared::with_lds(kernel, shape, 0)?)
}
