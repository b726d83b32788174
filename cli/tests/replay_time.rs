//! `tilesmith replay`'s time on a large table (issue 36, item 12), in a test binary of its own
//! so that no other test runs beside it while it is timed.

mod common;

use std::path::Path;

#[test]
fn replay_of_a_large_table_is_not_quadratic_in_its_candidates() {
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let path = workspace.join("tuning/gemm/NVIDIA_H100_80GB_HBM3-132sm.json");
    let registry = common::shipped_registry();
    let (small, small_seconds) = replay(&path, 1, registry.path());
    let (large, large_seconds) = replay(&path, 12, registry.path());
    eprintln!("replay of {small} entries: {small_seconds:.1} s of CPU; of {large}: {large_seconds:.1} s");
    // Timed against itself rather than a clock: a bound in seconds moved with the machine and
    // the matrix (debug, 2-core, M + 1 ... 11 copies: 48 s with 562 variants, 80-111 s with
    // 895; 3.6 and 29.6 s here on 2026-11-28). A copy of the table per problem held out
    // (5bbdc84) made it quadratic in the table's candidates: 160 s where linear was 48.
    let linear = large as f64 / small as f64;
    assert!(
        large_seconds < 1.75 * linear * small_seconds,
        "replay of {large} entries took {large_seconds:.1} s of CPU, of {small} {small_seconds:.1} s: over 1.75x linear"
    );
}

/// Replays the table at `path` with `copies` copies of every entry at other problems (M larger
/// by multiples of 256, so that each copy keeps its alignment and the tiles that divide it);
/// returns the number of entries replayed and the seconds of CPU taken.
fn replay(path: &Path, copies: u64, registry: &Path) -> (usize, f64) {
    use tilesmith_spec::family_table::FamilyTable;
    let mut table = FamilyTable::read(path).unwrap();
    let shipped = table.entries.clone();
    for step in 1..copies {
        for entry in &shipped {
            let mut copy = entry.clone();
            copy.problem[0] += 256 * step;
            table.insert(copy);
        }
    }
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("gemm")).unwrap();
    let file = dir.path().join("gemm").join(path.file_name().unwrap());
    std::fs::write(&file, serde_json::to_string(&table).unwrap()).unwrap();
    let args = ["replay", file.to_str().unwrap(), "--registry", registry.to_str().unwrap()];
    let (ok, printed, seconds) = common::cpu_time(dir.path(), &args);
    assert!(ok && printed.contains("entries of gemm on NVIDIA H100"), "{printed}");
    (table.entries.len(), seconds)
}
