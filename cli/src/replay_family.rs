//! `tilesmith replay tuning/<family>/<GPU>.json`: the family chooser against a measured table,
//! on the CPU. For each entry, the pick with that entry held out (how well its neighbours stand
//! for a problem no table holds) and the cost model's pick (a GPU without a table), each at the
//! time the entry measured for it, beside the fastest variant's.

use tilesmith_runtime::{Call, Registry};
use tilesmith_spec::family_table::{self, FamilyEntry, FamilyTable};
use tilesmith_trials::declared;

/// How one way of picking did over the entries.
struct Tally {
    name: &'static str,
    /// ln(fastest / pick) summed over the picks the entry measured.
    log_sum: f64,
    measured: usize,
    within: usize,
    unmeasured: usize,
    worst: Option<(f64, String)>,
}

/// Within this fraction of the fastest counts as a good pick (the 3%).
const WITHIN: f64 = 0.97;

impl Tally {
    fn new(name: &'static str) -> Tally {
        Tally { name, log_sum: 0.0, measured: 0, within: 0, unmeasured: 0, worst: None }
    }

    fn add(&mut self, entry: &FamilyEntry, fastest_ms: f64, pick: &str, problem: &str) -> Option<f64> {
        let Some(timed) = entry.ranked.iter().find(|t| t.variant == pick) else {
            self.unmeasured += 1;
            return None;
        };
        let ratio = fastest_ms / timed.ms;
        self.log_sum += ratio.ln();
        self.measured += 1;
        self.within += usize::from(ratio >= WITHIN);
        if self.worst.as_ref().is_none_or(|(w, _)| ratio < *w) {
            self.worst = Some((ratio, format!("{problem}: {pick}")));
        }
        Some(ratio)
    }

    fn summary(&self) -> String {
        let mean = if self.measured > 0 { (self.log_sum / self.measured as f64).exp() } else { f64::NAN };
        let worst = self.worst.as_ref().map(|(r, at)| format!("{r:.3} ({at})")).unwrap_or_else(|| "-".into());
        format!(
            "{:<22} geometric mean {mean:.3} of the fastest, {} of {} within 3%, worst {worst}, {} picks unmeasured",
            self.name, self.within, self.measured, self.unmeasured
        )
    }
}

/// Replays `table` (at `path`) against the registry's variants of its family.
pub fn run(table: &FamilyTable, registry: &Registry, smem_per_block: u32, verbose: bool) -> Result<(), String> {
    let chooser = registry.family(&table.family).map_err(|e| e.to_string())?;
    let bare = registry.clone().with_family_tables(Vec::new())?;
    let bare = bare.family(&table.family).map_err(|e| e.to_string())?;
    let mut held_out = Tally::new("table, entry held out");
    let mut model = Tally::new("cost model");
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
        let a = held_out.add(entry, fastest.ms, held.kernel.name(), &problem);
        let b = model.add(entry, fastest.ms, modelled.kernel.name(), &problem);
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
    println!("{} entries of {} on {}:", table.entries.len(), table.family, table.device);
    println!("  {}", held_out.summary());
    println!("  {}", model.summary());
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
