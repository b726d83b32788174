//! The two trials every variant gets: correctness on shapes chosen for its bounds mode, and
//! performance at a large shape beside its baseline. A family's declaration says which: its
//! reference variant and a copy (`declared`), or a library call that a [`Plugin`] provides
//! under the name the declaration gives (`baseline = "<library>"`).

use crate::declared::{self, Case};
use crate::report::Record;
use libtest_mimic::Trial;
use tilesmith_runtime::{Gpu, Kernel, Registry};
use tilesmith_spec::family::Baseline;
use tilesmith_spec::Entry;

/// What a family's declaration alone cannot make trials of: library baselines and references,
/// and a plug-in's own calls (a dispatcher's). `cargo test` here and `tilesmith test` pass the
/// plug-ins they link.
pub trait Plugin: Sync {
    /// The library names it provides, as declarations write them (`baseline = "<name>"`,
    /// `reference = { library = "<name>" }`).
    fn libraries(&self) -> &'static [&'static str];
    /// Correctness of a variant whose reference is one of its libraries.
    fn correctness(&self, gpu: &Gpu, registry: &Registry, kernel: &Kernel) -> Result<String, String>;
    /// Performance of a variant whose baseline is one of its libraries.
    fn performance(&self, gpu: &Gpu, registry: &Registry, kernel: &Kernel) -> Result<Record, String>;
    /// Trials of its own for a registry of these entries, ignored where `ignored` (no driver);
    /// GPU trials are made with [`crate::harness::gpu_test`].
    fn trials(&self, entries: &[Entry], ignored: bool) -> Vec<Trial>;
    /// Its own tuner and replay, for a family it dispatches itself; none by default, and the
    /// family is tuned by the generic tuner.
    fn tuner(&self) -> Option<&dyn crate::tune::Tuner> {
        None
    }
    /// `bench`'s rows for a group of variants whose baseline is one of its libraries, on one
    /// shape: each variant beside the library, and the call through the family's chooser where
    /// the group asks. Rows are printed and pushed as they are timed; what cannot be timed goes
    /// to `skipped`, saying why.
    fn bench(&self, gpu: &Gpu, registry: &Registry, group: &BenchGroup<'_>, rows: &mut Rows) -> Result<(), String>;
}

/// What `bench` asks a plug-in to time ([`Plugin::bench`]): variants of one family, dtype,
/// operand types and shown axes, which share inputs and one baseline timing per shape.
pub struct BenchGroup<'a> {
    pub members: &'a [&'a Kernel],
    /// The shape given (packed; the plug-in sets the leading dimensions) and as messages write it.
    pub shape: &'a declared::Shape,
    pub what: &'a str,
    /// Problems of a strided batch (1: one problem), where the family takes a batch.
    pub batch: usize,
    /// Whether to time the call through the family's chooser too.
    pub dispatch: bool,
}

/// `bench`'s rows so far, and the (variant, shape) pairs it could not time, with why.
#[derive(Default)]
pub struct Rows {
    pub records: Vec<Record>,
    pub skipped: Vec<String>,
}

impl Rows {
    /// A timed row, printed and kept; or, where timing it failed, `label` and why among the
    /// skipped.
    pub fn keep(&mut self, outcome: Result<Record, String>, label: &str) {
        match outcome {
            Ok(record) => self.push(record),
            Err(why) => self.skipped.push(format!("{label}: {why}")),
        }
    }

    /// A timed row, printed and kept.
    pub fn push(&mut self, record: Record) {
        println!("{}", record.summary());
        self.records.push(record);
    }
}

/// The trials a manifest entry gets, `<family>::<variant>::correctness` and `::perf`; none for
/// its family's reference variants, which are the yardstick of the others.
pub fn names(entry: &Entry) -> Option<[String; 2]> {
    let variant = &entry.variant;
    if entry.is_reference() {
        return None;
    }
    let prefix = format!("{}::{}", variant.family, variant.name);
    Some([format!("{prefix}::correctness"), format!("{prefix}::perf")])
}

/// The plug-in providing library `name`; an error naming the family and the plug-ins known.
fn provider<'p>(plugins: &[&'p dyn Plugin], name: &str, kernel: &Kernel) -> Result<&'p dyn Plugin, String> {
    plugins.iter().copied().find(|p| p.libraries().contains(&name)).ok_or_else(|| {
        let known: Vec<&str> = plugins.iter().flat_map(|p| p.libraries().iter().copied()).collect();
        format!(
            "family `{}` names library `{name}`, which no trials plug-in linked here provides (they provide: {})",
            kernel.variant().family,
            if known.is_empty() { "none".to_string() } else { known.join(", ") }
        )
    })
}

/// Correctness: fresh random inputs, NaN-poisoned outputs, every element of the result checked
/// written and nothing outside it touched, compared with the family's reference; then a call
/// the variant cannot take must be refused. Returns a one-line summary.
pub fn correctness(plugins: &[&dyn Plugin], gpu: &Gpu, registry: &Registry, kernel: &Kernel) -> Result<String, String> {
    match &kernel.info().entry.declaration.reference.library {
        Some(name) => provider(plugins, name, kernel)?.correctness(gpu, registry, kernel),
        None => declared::correctness(gpu, registry, kernel),
    }
}

/// Performance: the kernel and its family's baseline timed side by side on one shared set of
/// inputs.
pub fn performance(plugins: &[&dyn Plugin], gpu: &Gpu, registry: &Registry, kernel: &Kernel) -> Result<Record, String> {
    match &kernel.info().entry.declaration.baseline {
        Baseline::Library(name) => provider(plugins, name, kernel)?.performance(gpu, registry, kernel),
        Baseline::Copy => {
            let mut case = Case::new(gpu, kernel, declared::perf_shape(kernel)?)?;
            case.record(gpu, registry, kernel)
        }
    }
}
