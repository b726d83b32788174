//! `tilesmith perf-table`: the performance records of a trial run as a Markdown table.

use std::path::Path;
use tilesmith_trials::report;

pub fn run(dir: &Path) -> Result<(), String> {
    let records = report::read_all(dir)?;
    let Some(first) = records.first() else {
        return Err(format!("no performance records in {}", dir.display()));
    };
    println!("performance on {} ({} variants, records in {})\n", first.device, records.len(), dir.display());
    print!("{}", report::table(&records));
    Ok(())
}
