//! Prints the performance records of a run as a Markdown table: `perf-table [DIR]`.

use std::path::PathBuf;
use std::process::ExitCode;
use tilesmith_tests::report;

fn main() -> ExitCode {
    let dir = std::env::args_os().nth(1).map(PathBuf::from).unwrap_or_else(report::perf_dir);
    match report::read_all(&dir) {
        Ok(records) if records.is_empty() => {
            eprintln!("no performance records in {}", dir.display());
            ExitCode::FAILURE
        }
        Ok(records) => {
            let device = records.iter().map(|r| r.device.as_str()).next().unwrap_or_default();
            println!("performance on {device} ({} variants, records in {})\n", records.len(), dir.display());
            print!("{}", report::table(&records));
            ExitCode::SUCCESS
        }
        Err(err) => {
            eprintln!("error: {err}");
            ExitCode::FAILURE
        }
    }
}
