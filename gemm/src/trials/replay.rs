//! Replays the dispatcher against a measured tuning table, on the CPU: for each problem the
//! table holds (plain entries), what the heuristic picks (as on a GPU without a table), what the
//! table picks with that problem held out (how well its neighbours stand for it), and what
//! another GPU's table picks where one is given (as the nearest-table fallback would); each pick
//! at the time the table measured for it, against the fastest candidate's and cuBLAS's. For
//! fitting the heuristic and judging a table's coverage without a GPU.

use crate::dispatch::{self, GemmCall};
use crate::table::{self, Alignment, Strategy};
use crate::trials::tune;
use crate::{EpilogueArgs, GemmShape};
use tilesmith_runtime::{Buffer, Registry};
use tilesmith_spec::family_table::{FamilyEntry, FamilyTable};
use tilesmith_spec::tuning::Device;
use tilesmith_trials::tune::{Regret, ReplayRequest};

/// The call a table entry stands for, stored as `tilesmith tune` measured it.
fn call_shape(entry: &FamilyEntry) -> Result<GemmShape, String> {
    let (layout, alignment, _) = table::class_of(entry)?;
    let &[m, n, k] = entry.problem.as_slice() else { return Err(format!("problem {:?} is not [M, N, K]", entry.problem)) };
    let [m, n, k] = [m, n, k].map(|d| d as usize);
    let packed = GemmShape::packed(m, n, k, layout);
    let packed_class = dispatch::alignment(entry.dtype, &packed, &Buffer::unallocated(packed.spans()));
    let odd_ld = alignment == Alignment::Unaligned && packed_class == Alignment::Aligned;
    Ok(tune::shape(tune::Problem { batch: entry.batch as usize, shape: [m, n, k], odd_ld }, layout))
}

/// Replays GEMM's table against the dispatcher: the summary, and with `request.verbose` every
/// problem.
pub fn run(registry: &Registry, table: &FamilyTable, request: &ReplayRequest<'_>) -> Result<(), String> {
    table::check_table(table).map_err(|rule| format!("the GEMM table of {}: {rule}", table.device))?;
    let borrowed = request.borrow.map(|path| FamilyTable::read(path).and_then(|t| table::check_table(&t).map(|()| t))).transpose()?;
    let device = Device { clocks: table.device.clocks.or(request.clocks), ..table.device.clone() };
    let kernels: Vec<_> = registry.kernels().collect();
    let unknown = table.unknown_variants(|name| registry.kernel(name).is_ok());
    if !unknown.is_empty() {
        println!("note: {} variants the table ranks are not in this registry (e.g. {})", unknown.len(), unknown[0]);
    }
    let mut policies = vec![Regret::new("heuristic"), Regret::new("table, problem held out")];
    if borrowed.is_some() {
        policies.push(Regret::new("the other GPU's table"));
    }
    let plain = EpilogueArgs::default();
    // The table less the problem replayed: its entries are taken out and put back in place for
    // each problem, rather than the table copied for each (quadratic in the entries' candidates).
    let mut held_out = table.clone();
    // Epilogue entries stand for calls with an activation and a bias, which the replay does
    // not make.
    let mut scored = 0;
    for entry in &table.entries {
        let (layout, alignment, epilogue) = table::class_of(entry)?;
        if epilogue.is_some() {
            continue;
        }
        scored += 1;
        let shape = call_shape(entry)?;
        let buffers = Buffer::unallocated(shape.spans());
        let call = GemmCall { dtype: entry.dtype, shape: &shape, buffers, epilogue: &plain };
        let problem = format!("{} {} {} {alignment}", table::describe(entry.batch, &entry.problem), entry.dtype, shape.layout);
        let pick = |tables: &[FamilyTable]| {
            dispatch::choose(kernels.iter().copied(), tables, &device, &call).ok().map(|c| (c.kernel.name().to_string(), c.strategy))
        };
        // Held out in every dtype: the dispatcher reads a dtype of the same width where the
        // call's has no entry, and the twin would stand in for the problem itself.
        let twin = |e: &FamilyEntry| e.batch == entry.batch && e.problem == entry.problem && e.class == entry.class;
        let twins: Vec<usize> = held_out.entries.iter().enumerate().filter(|(_, e)| twin(e)).map(|(i, _)| i).collect();
        let removed: Vec<(usize, FamilyEntry)> = twins.iter().rev().map(|&i| (i, held_out.entries.remove(i))).collect();
        let without = pick(std::slice::from_ref(&held_out));
        for (index, removed) in removed.into_iter().rev() {
            held_out.entries.insert(index, removed);
        }
        let mut picks = vec![pick(&[]), without];
        if let Some(other) = &borrowed {
            picks.push(pick(std::slice::from_ref(other)));
        }
        let fastest = entry.fastest_ms();
        let mut line = format!("{problem} ({layout}):");
        for (policy, pick) in policies.iter_mut().zip(picks) {
            let label = pick.as_ref().map_or("none".into(), |(name, strategy)| format!("{name} {strategy:?}"));
            let ms = pick.and_then(|(name, strategy)| {
                entry.ranked.iter().find(|t| t.variant == name && Strategy::of(t) == Ok(strategy)).map(|t| t.ms)
            });
            let ratio = policy.add(ms, fastest, entry.baseline_ms, &problem).map_or("unmeasured".into(), |r| format!("{r:.2}"));
            line += &format!("  {}: {label} {ratio} of the fastest;", policy.name);
        }
        if request.verbose {
            println!("{line}");
        }
    }
    println!("{scored} plain problems of {} ({} SMs); x baseline is x cuBLAS\n", table.device.name, table.device.sms);
    println!("{}", Regret::HEADER);
    for policy in &policies {
        println!("{}", policy.row());
    }
    Ok(())
}
