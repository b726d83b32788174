//! The figures a performance trial writes, one JSON file per variant, and the table made of them.

use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use tilesmith_runtime::{Gpu, Kernel};

/// Environment variable naming the folder performance records go to.
pub const PERF_DIR_VAR: &str = "TILESMITH_PERF_DIR";
/// The folder they go to by default, under a project's `target/`.
pub const PERF_DIR_NAME: &str = "tilesmith-perf";

/// One variant's timing beside its baseline.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Record {
    pub variant: String,
    pub family: String,
    pub dtype: String,
    /// The values of the family's axes that names show always (a `layout`), joined by
    /// `_`: variants that share them share a baseline. Empty for families without such axes.
    #[serde(default)]
    pub group: String,
    pub shape: Vec<usize>,
    pub device: String,
    /// "TFLOP/s" or "GB/s".
    pub unit: String,
    pub kernel_ms: f64,
    pub kernel: f64,
    pub baseline_name: String,
    pub baseline_ms: f64,
    pub baseline: f64,
    /// kernel / baseline, in the unit's terms: above 1 is faster than the baseline.
    pub ratio: f64,
    pub input_sets: usize,
    /// Seconds since the Unix epoch.
    pub measured_at: u64,
    /// Microseconds of CPU time one call takes to choose, plan and enqueue its launches
    /// (dispatch records): events bracket each call, so a call whose host time exceeds the
    /// GPU's is timed at its host time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_us: Option<f64>,
    /// The same for the baseline's enqueue, timed the same way beside it (a library's, a
    /// copy's `cuMemcpyDtoDAsync`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub baseline_host_us: Option<f64>,
    /// For a dispatched call: the fastest variant of its shape, timed in turns with the call in
    /// one case (same inputs, same moments), and its time over the call's (1: as fast).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub beside: Option<(String, f64)>,
}

impl Record {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        kernel: &Kernel,
        gpu: &Gpu,
        shape: Vec<usize>,
        unit: &str,
        kernel_ms: f64,
        figure: f64,
        baseline_name: &str,
        baseline_ms: f64,
        baseline: f64,
        input_sets: usize,
    ) -> Record {
        let variant = kernel.variant();
        Record {
            variant: variant.name.clone(),
            family: variant.family.clone(),
            dtype: variant.dtype.to_string(),
            group: group(kernel),
            shape,
            device: gpu.name().to_string(),
            unit: unit.to_string(),
            kernel_ms,
            kernel: figure,
            baseline_name: baseline_name.to_string(),
            baseline_ms,
            baseline,
            ratio: figure / baseline,
            input_sets,
            measured_at: std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs()),
            host_us: None,
            baseline_host_us: None,
            beside: None,
        }
    }

    /// The same timing beside another baseline of the same work.
    pub fn against(&self, baseline_name: &str, baseline_ms: f64) -> Record {
        let baseline = self.baseline * self.baseline_ms / baseline_ms;
        Record { baseline_name: baseline_name.to_string(), baseline_ms, baseline, ratio: self.kernel / baseline, ..self.clone() }
    }

    /// A one-line summary for the trial's output.
    pub fn summary(&self) -> String {
        let baseline_host = self.baseline_host_us.map(|us| format!(" ({} {us:.1})", self.baseline_name)).unwrap_or_default();
        let host = self.host_us.map(|us| format!(", host {us:.1} µs a call{baseline_host}")).unwrap_or_default();
        let beside = self.beside.as_ref().map(|(variant, of)| format!(", {of:.3} of {variant} timed in turns")).unwrap_or_default();
        format!(
            "{} {:.1} {} ({:.3} ms), {} {:.1} ({:.3} ms): ratio {:.2}{host}{beside}",
            self.variant, self.kernel, self.unit, self.kernel_ms, self.baseline_name, self.baseline, self.baseline_ms, self.ratio
        )
    }
}

/// The values of `kernel`'s axes that its family's names show always, joined by `_`.
pub fn group(kernel: &Kernel) -> String {
    let always = kernel.info().entry.declaration.axes.iter().filter(|a| a.show == tilesmith_spec::family::Show::Always);
    always.filter_map(|a| kernel.variant().value(&a.name)).map(|v| v.to_string()).collect::<Vec<_>>().join("_")
}

/// Writes a record into `dir` as `<variant>.json`.
pub fn write(record: &Record, dir: &Path) -> Result<PathBuf, String> {
    std::fs::create_dir_all(dir).map_err(|err| format!("cannot create {}: {err}", dir.display()))?;
    let path = dir.join(format!("{}.json", record.variant));
    let json = serde_json::to_string_pretty(record).map_err(|err| err.to_string())?;
    std::fs::write(&path, json + "\n").map_err(|err| format!("cannot write {}: {err}", path.display()))?;
    Ok(path)
}

/// Every record in `dir`, ordered by family and variant.
pub fn read_all(dir: &Path) -> Result<Vec<Record>, String> {
    let entries = std::fs::read_dir(dir).map_err(|err| format!("cannot read {}: {err}", dir.display()))?;
    let mut records = Vec::new();
    for entry in entries {
        let path = entry.map_err(|err| err.to_string())?.path();
        if path.extension().is_some_and(|ext| ext == "json") {
            let text = tilesmith_spec::files::read_to_string(&path).map_err(|err| format!("cannot read {}: {err}", path.display()))?;
            records.push(serde_json::from_str::<Record>(&text).map_err(|err| format!("{}: {err}", path.display()))?);
        }
    }
    records.sort_by(|a, b| (&a.family, &a.variant).cmp(&(&b.family, &b.variant)));
    Ok(records)
}

/// A Markdown table of records.
pub fn table(records: &[Record]) -> String {
    let mut out = String::from("| variant | shape | figure | baseline | ratio |\n| --- | --- | --- | --- | --- |\n");
    for r in records {
        let shape = r.shape.iter().map(usize::to_string).collect::<Vec<_>>().join("×");
        out.push_str(&format!(
            "| {} | {shape} | {:.1} {} | {} {:.1} | {:.2} |\n",
            r.variant, r.kernel, r.unit, r.baseline_name, r.baseline, r.ratio
        ));
    }
    out
}
