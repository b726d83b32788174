//! What a declared family's trial call passes, read from the shipped manifest (no GPU).

use std::path::Path;
use tilesmith_spec::manifest::Manifest;
use tilesmith_trials::declared::{stored, taken_scalars, Shape};

/// The shipped generated manifest's entry of variant `name`.
fn shipped_entry(name: &str) -> tilesmith_spec::Entry {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../generated/manifest.json");
    let manifest: Manifest = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    manifest.variants.into_iter().find(|e| e.variant.name == name).unwrap()
}

#[test]
fn a_call_leaves_out_the_optional_inputs_and_scalars_its_variant_does_not_take() {
    let shape: Shape = [("experts", 4), ("m", 100), ("n", 64), ("k", 64)].into_iter().map(|(q, v)| (q.to_string(), v)).collect();
    let names = |name: &str| stored(&shipped_entry(name), &shape).unwrap().into_iter().map(|op| op.decl.name).collect::<Vec<_>>();
    assert_eq!(names("grouped_gemm_128x256x64"), ["a", "w", "offs", "c"]);
    assert_eq!(names("grouped_gemm_128x256x128_e4m3_outbf16"), ["a", "w", "offs", "c", "row_scale", "col_scale"]);
    assert!(taken_scalars(&shipped_entry("grouped_gemm_128x256x64")).is_empty());
    assert_eq!(taken_scalars(&shipped_entry("grouped_gemm_128x256x128_e4m3_outbf16")), ["scale_a", "scale_b"]);
}
