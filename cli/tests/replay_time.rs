//! `tilesmith replay`'s time on a large table (issue 36, item 12), in a test binary of its own
//! so that no other test runs beside it while it is timed.

mod common;

use std::path::Path;

#[test]
fn replay_of_a_large_table_is_not_quadratic_in_its_candidates() {
    use tilesmith_gemm::table::{Key, TuningTable};
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let path = workspace.join("tuning/gemm/NVIDIA_H100_80GB_HBM3-132sm.json");
    let mut table = TuningTable::read(&path).unwrap();
    // Twelve copies of every entry at slightly other problems: 8,448 entries.
    let shipped = table.entries.clone();
    for step in 1..12 {
        for entry in &shipped {
            let mut copy = entry.clone();
            copy.shape[0] += step;
            copy.key = Key::new(copy.key.dtype, copy.key.layout, copy.key.alignment, copy.problem());
            table.insert(copy);
        }
    }
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("gemm")).unwrap();
    let file = dir.path().join("gemm").join(path.file_name().unwrap());
    std::fs::write(&file, serde_json::to_string(&table).unwrap()).unwrap();
    let registry = common::shipped_registry();
    let args = ["replay", file.to_str().unwrap(), "--registry", registry.path().to_str().unwrap()];
    let (ok, printed, seconds) = common::cpu_time(dir.path(), &args);
    assert!(ok && printed.contains("plain problems of NVIDIA H100"), "{printed}");
    eprintln!("replay of {} entries: {seconds:.1} s of CPU", table.entries.len());
    // Debug build, 2-core machine: 48 s with 562 variants (f2bc001); 80-93 s with 895 on
    // 2026-11-28, with this manifest and 34bf84c's alike. A copy of the table per problem held
    // out (5bbdc84) made it quadratic in the table's candidates: 160 s when linear was 48.
    assert!(seconds < 120.0, "replay of {} entries took {seconds:.1} s of CPU", table.entries.len());
}
