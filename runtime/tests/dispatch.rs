//! The dispatcher's choice, on the CPU: shipped variants from generated/manifest.json, a
//! fixture tuning table, and calls it must route.

use std::path::Path;
use tilesmith_runtime::dispatch::choose;
use tilesmith_runtime::{Buffer, Dtype, GemmShape, Layout, Registry};
use tilesmith_spec::tuning::{self, Alignment, Candidate, Device, Key, Strategy, TuningEntry, TuningTable, TUNING_FORMAT};
use tilesmith_spec::{Built, Manifest};

const ALIGNED: u64 = 0x7f00_0000_0000;

fn h200() -> Device {
    Device { name: "NVIDIA H200".into(), capability: [9, 0], sms: 132 }
}

fn entry(alignment: Alignment, shape: [u64; 3], ranked: &[(&str, Strategy, f64)]) -> TuningEntry {
    TuningEntry {
        key: Key::new(Dtype::Bf16, Layout::Tn, alignment, shape),
        shape,
        cublas_ms: 1.0,
        ranked: tuning::rank(ranked.iter().map(|&(v, strategy, ms)| Candidate { variant: v.into(), strategy, ms }).collect()).unwrap(),
    }
}

/// The shipped variants, and a table for the H200 in which the fastest candidate at 4096³ is
/// an unchecked variant, which must be passed over for shapes off its tile.
fn registry() -> Registry {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../generated/manifest.json");
    let manifest: Manifest = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let built = manifest
        .variants
        .into_iter()
        .map(|entry| {
            let fatbin = format!("{}.fatbin", entry.variant.name);
            Built { entry, fatbin, hash: String::new(), fatbin_sha256: String::new(), compiler: "test".into(), resources: Vec::new() }
        })
        .collect();
    let direct = Strategy::Direct;
    let table = TuningTable {
        format: TUNING_FORMAT,
        device: h200(),
        compiler: "test".into(),
        entries: vec![
            entry(
                Alignment::Aligned,
                [4096, 4096, 4096],
                &[
                    ("gemm_tn_128x256x64_wgmma_w12_unchecked", direct, 0.170),
                    ("gemm_tn_128x256x64_wgmma_w12", direct, 0.180),
                    ("gemm_tn_128x128x32", direct, 0.33),
                ],
            ),
            entry(
                Alignment::Aligned,
                [16, 4096, 4096],
                &[("gemm_tn_64x128x64_wgmma_w8_s6_splitk2", direct, 0.018), ("gemm_tn_64x128x64_wgmma_w8_s6", direct, 0.020)],
            ),
            entry(
                Alignment::Unaligned,
                [4095, 4097, 4099],
                &[
                    ("gemm_tn_128x256x64_wgmma_w12", Strategy::Padded, 0.29),
                    ("gemm_nt_128x256x64_wgmma_w12", Strategy::Padded, 0.30),
                    ("gemm_tn_128x128x32", direct, 0.50),
                ],
            ),
        ],
    };
    Registry::new(Path::new("registry"), built, vec![table])
}

fn buffers(shape: &GemmShape) -> [Buffer; 3] {
    shape.spans().map(|len| Buffer { len, addr: ALIGNED })
}

fn pick(registry: &Registry, device: &Device, shape: GemmShape) -> (String, Strategy, String) {
    let choice = choose(registry.kernels(), registry.tables(), device, Dtype::Bf16, &shape, buffers(&shape)).unwrap();
    assert_eq!(choice.transpose.is_some(), choice.strategy == Strategy::Padded, "the padded strategy carries its transpose variant");
    (choice.kernel.name().to_string(), choice.strategy, choice.reason)
}

#[test]
fn the_nearest_entry_gives_the_first_candidate_that_takes_the_call() {
    let registry = registry();
    let (name, strategy, reason) = pick(&registry, &h200(), GemmShape::packed(4096, 4096, 4096, Layout::Tn));
    assert_eq!((name.as_str(), strategy), ("gemm_tn_128x256x64_wgmma_w12_unchecked", Strategy::Direct));
    assert!(reason.contains("NVIDIA_H200-132sm.json") && reason.contains("4096x4096x4096") && reason.contains("rank 1 of 3"), "{reason}");
    // 4000 is off the unchecked variant's tile: the next candidate, never a refusal.
    let (name, _, reason) = pick(&registry, &h200(), GemmShape::packed(4000, 4000, 4000, Layout::Tn));
    assert_eq!(name, "gemm_tn_128x256x64_wgmma_w12");
    assert!(reason.contains("rank 2 of 3"), "{reason}");
    let (name, _, _) = pick(&registry, &h200(), GemmShape::packed(24, 3000, 5000, Layout::Tn));
    assert_eq!(name, "gemm_tn_64x128x64_wgmma_w8_s6_splitk2");
}

#[test]
fn odd_leading_dimensions_take_the_padded_strategy_from_their_own_class() {
    let registry = registry();
    let packed = GemmShape::packed(4095, 4097, 4099, Layout::Tn);
    let (name, strategy, reason) = pick(&registry, &h200(), packed);
    // Every operand is unaligned: A and B are moved transposed and C computed as Cᵀ = Bᵀ·Aᵀ,
    // an nt GEMM; the tn variant ranked above it cannot take that and is passed over.
    assert_eq!((name.as_str(), strategy), ("gemm_nt_128x256x64_wgmma_w12", Strategy::Padded));
    assert!(reason.contains("Unaligned") && reason.contains("rank 2 of 3"), "{reason}");
    // The same pick in every call: the choice depends on the table alone.
    for _ in 0..3 {
        assert_eq!(pick(&registry, &h200(), packed).0, name);
    }
}

#[test]
fn without_a_table_for_the_device_the_heuristic_picks_what_runs_there() {
    let registry = registry();
    let a100 = Device { name: "NVIDIA A100-SXM4-80GB".into(), capability: [8, 0], sms: 108 };
    let (name, strategy, reason) = pick(&registry, &a100, GemmShape::packed(4096, 4096, 4096, Layout::Tn));
    assert!(reason.contains("no tuning table for this device") && reason.contains("heuristic"), "{reason}");
    assert!(!name.contains("wgmma"), "sm_90a code does not run on an A100: {name}");
    assert_eq!(strategy, Strategy::Direct);
    // An H200 with another SM count (a MIG slice, say) has no table either; sm_90a runs there.
    let slice = Device { sms: 66, ..h200() };
    let (name, _, reason) = pick(&registry, &slice, GemmShape::packed(4096, 4096, 4096, Layout::Tn));
    assert!(name.contains("wgmma") && reason.contains("heuristic"), "{name}: {reason}");
    // Odd leading dimensions on an A100: a checked mma variant takes them as they are.
    let odd = GemmShape { lda: 4099, ldb: 4099, ldc: 4097, ..GemmShape::packed(4095, 4097, 4099, Layout::Tn) };
    let (name, strategy, _) = pick(&registry, &a100, odd);
    assert_eq!(strategy, Strategy::Direct);
    assert!(name.contains("128x") && !name.contains("unchecked"), "{name}");
}

#[test]
fn a_call_no_variant_can_take_is_an_error_naming_the_rule() {
    let registry = registry();
    let shape = GemmShape::packed(64, 64, 64, Layout::Tn);
    let mut short = buffers(&shape);
    short[2].len -= 1;
    let err = choose(registry.kernels(), registry.tables(), &h200(), Dtype::Bf16, &shape, short).unwrap_err();
    assert!(err.contains("c holds 4095 elements"), "{err}");
    let err = choose(registry.kernels(), registry.tables(), &Device { capability: [7, 0], ..h200() }, Dtype::Bf16, &shape, buffers(&shape))
        .unwrap_err();
    assert!(err.contains("no bf16 tn variant in the registry runs on NVIDIA H200"), "{err}");
}
