//! Replays the dispatcher against a measured tuning table, on the CPU: for each problem the
//! table holds (plain entries), what the heuristic picks (as on a GPU without a table), what the table picks
//! with that problem held out (how well its neighbours stand for it), and what another GPU's
//! table picks where one is given (as the nearest-table fallback would); each pick at the time
//! the table measured for it, beside the fastest candidate's and cuBLAS's. For fitting the
//! heuristic and judging a table's coverage without a GPU.

use crate::dispatch::{self, GemmCall};
use crate::table::{self, Alignment, TuningEntry, TuningTable};
use crate::trials::tune;
use crate::{EpilogueArgs, GemmShape};
use tilesmith_runtime::{Buffer, Registry};
use tilesmith_spec::family_table::FamilyTable;
use tilesmith_spec::tuning::Device;
use tilesmith_trials::tune::ReplayRequest;

/// One way of picking, and how its picks measured.
struct Policy {
    name: &'static str,
    /// log(cuBLAS / pick) summed over the problems whose pick the table measured.
    log_sum: f64,
    measured: usize,
    /// Picks the table has no time for (a candidate it did not measure).
    unmeasured: usize,
    under: usize,
    worst: Option<(f64, String)>,
}

impl Policy {
    fn new(name: &'static str) -> Policy {
        Policy { name, log_sum: 0.0, measured: 0, unmeasured: 0, under: 0, worst: None }
    }

    /// Counts a pick; returns its ratio to cuBLAS where the table measured it.
    fn add(&mut self, entry: &TuningEntry, pick: Option<(String, table::Strategy)>, problem: &str) -> Option<f64> {
        let ratio = pick
            .and_then(|(name, strategy)| entry.ranked.iter().find(|c| c.variant == name && c.strategy == strategy).map(|c| c.ratio(entry)));
        match ratio {
            Some(ratio) => {
                self.log_sum += ratio.ln();
                self.measured += 1;
                self.under += usize::from(ratio < 0.9);
                if self.worst.as_ref().is_none_or(|(w, _)| ratio < *w) {
                    self.worst = Some((ratio, problem.to_string()));
                }
            }
            None => self.unmeasured += 1,
        }
        ratio
    }

    fn summary(&self) -> String {
        let mean = (self.log_sum / self.measured.max(1) as f64).exp();
        let worst = self.worst.as_ref().map_or("-".into(), |(w, p)| format!("{w:.2} ({p})"));
        format!("| {} | {mean:.3} | {} | {} | {} | {worst} |", self.name, self.measured, self.under, self.unmeasured)
    }
}

/// The call a table entry stands for, stored as `tilesmith tune` measured it.
fn call_shape(entry: &TuningEntry) -> GemmShape {
    let [m, n, k] = entry.shape.map(|d| d as usize);
    let packed = GemmShape::packed(m, n, k, entry.key.layout);
    let packed_class = dispatch::alignment(entry.key.dtype, &packed, &Buffer::unallocated(packed.spans()));
    let odd_ld = entry.key.alignment == Alignment::Unaligned && packed_class == Alignment::Aligned;
    tune::shape(tune::Problem { batch: entry.batch as usize, shape: [m, n, k], odd_ld }, entry.key.layout)
}

/// Replays GEMM's table (read as a family table) against the dispatcher: the summary, and with
/// `request.verbose` every problem.
pub fn run(registry: &Registry, family: &FamilyTable, request: &ReplayRequest<'_>) -> Result<(), String> {
    let table = TuningTable::from_family(family).map_err(|rule| format!("the GEMM table of {}: {rule}", family.device))?;
    let borrowed = request.borrow.map(TuningTable::read).transpose()?;
    let device = Device { clocks: table.device.clocks.or(request.clocks), ..table.device.clone() };
    let kernels: Vec<_> = registry.kernels().collect();
    let unknown = family.unknown_variants(|name| registry.kernel(name).is_ok());
    if !unknown.is_empty() {
        println!("note: {} variants the table ranks are not in this registry (e.g. {})", unknown.len(), unknown[0]);
    }
    let mut policies = vec![Policy::new("fastest measured"), Policy::new("heuristic"), Policy::new("table, problem held out")];
    if borrowed.is_some() {
        policies.push(Policy::new("the other GPU's table"));
    }
    let plain = EpilogueArgs::default();
    // The table less the problem replayed: its entries are taken out and put back in place for
    // each problem, rather than the table copied for each (quadratic in the entries' candidates).
    let mut held_out = table.clone();
    // Epilogue entries stand for calls with an activation and a bias, which the replay does
    // not make.
    for entry in table.entries.iter().filter(|e| e.epilogue.is_none()) {
        let shape = call_shape(entry);
        let buffers = Buffer::unallocated(shape.spans());
        let call = GemmCall { dtype: entry.key.dtype, shape: &shape, buffers, epilogue: &plain };
        let problem = format!("{} {} {} {}", table::describe(entry.problem()), entry.key.dtype, shape.layout, entry.key.alignment);
        let pick = |tables: &[TuningTable]| {
            dispatch::choose(kernels.iter().copied(), tables, &device, &call).ok().map(|c| (c.kernel.name().to_string(), c.strategy))
        };
        // Held out in every dtype: the dispatcher reads a dtype of the same width where the
        // call's has no entry, and the twin would stand in for the problem itself.
        let twin =
            |e: &TuningEntry| e.problem() == entry.problem() && e.key.layout == entry.key.layout && e.key.alignment == entry.key.alignment;
        let twins: Vec<usize> = held_out.entries.iter().enumerate().filter(|(_, e)| twin(e)).map(|(i, _)| i).collect();
        let removed: Vec<(usize, TuningEntry)> = twins.iter().rev().map(|&i| (i, held_out.entries.remove(i))).collect();
        let without = pick(std::slice::from_ref(&held_out));
        for (index, removed) in removed.into_iter().rev() {
            held_out.entries.insert(index, removed);
        }
        let mut picks = vec![entry.ranked.first().map(|c| (c.variant.clone(), c.strategy)), pick(&[]), without];
        if let Some(other) = &borrowed {
            picks.push(pick(std::slice::from_ref(other)));
        }
        let mut line = format!("{problem}:");
        for (policy, pick) in policies.iter_mut().zip(picks) {
            let label = pick.as_ref().map_or("none".into(), |(name, strategy)| format!("{name} {strategy:?}"));
            let ratio = policy.add(entry, pick, &problem).map_or("unmeasured".into(), |r| format!("{r:.2}"));
            line += &format!("  {}: {label} {ratio};", policy.name);
        }
        if request.verbose {
            println!("{line}");
        }
    }
    let scored = table.entries.iter().filter(|e| e.epilogue.is_none()).count();
    println!("{scored} plain problems of {} ({} SMs)\n", table.device.name, table.device.sms);
    println!("| picks by | geometric mean x cuBLAS | measured | under 0.9 | unmeasured | worst |");
    println!("| --- | --- | --- | --- | --- | --- |");
    for policy in &policies {
        println!("{}", policy.summary());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::table::{Candidate, Key, Strategy};
    use tilesmith_spec::{Dtype, Layout};

    #[test]
    fn a_policy_scores_picks_at_their_measured_ratio() {
        let entry = TuningEntry {
            key: Key::new(Dtype::Bf16, Layout::Tn, Alignment::Aligned, [1, 16, 4096, 4096]),
            shape: [16, 4096, 4096],
            batch: 1,
            epilogue: None,
            cublas_ms: 1.0,
            ranked: vec![
                Candidate { variant: "fast".into(), strategy: Strategy::Direct, ms: 0.5 },
                Candidate { variant: "slow".into(), strategy: Strategy::Direct, ms: 2.0 },
            ],
        };
        let mut policy = Policy::new("test");
        assert_eq!(policy.add(&entry, Some(("fast".into(), Strategy::Direct)), "a"), Some(2.0));
        assert_eq!(policy.add(&entry, Some(("slow".into(), Strategy::Direct)), "b"), Some(0.5));
        // Measured direct, not padded; and no pick at all: neither counts toward the mean.
        assert_eq!(policy.add(&entry, Some(("fast".into(), Strategy::Padded)), "c"), None);
        assert_eq!(policy.add(&entry, None, "d"), None);
        assert_eq!((policy.measured, policy.unmeasured, policy.under), (2, 2, 1));
        assert!(policy.summary().starts_with("| test | 1.000 | 2 | 1 | 2 | 0.50 (b) |"), "{}", policy.summary());
    }
}
