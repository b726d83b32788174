//! Property tests: planning a call by name never panics, overflows or hangs on any size,
//! address or scalar, and what it accepts stays inside the buffers (GEMM's typed planners and
//! dispatcher have their own in tilesmith-gemm).
//! Run in debug, where an overflow would panic.

use proptest::prelude::*;
use std::path::Path;
use tilesmith_runtime::{plan_call, Buffer, Call, Registry};
use tilesmith_spec::{Built, GridRule, Manifest};

fn shipped() -> Vec<Built> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../generated/manifest.json");
    let manifest: Manifest = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    manifest.variants.into_iter().map(Built::unbuilt).collect()
}

/// Sizes: small ones, ones around tiles and 32-bit limits, and anything.
fn size() -> impl Strategy<Value = usize> {
    prop_oneof![0..300usize, 4000..4200usize, (i32::MAX as usize - 2)..(i32::MAX as usize + 2), any::<usize>(), Just(usize::MAX)]
}

fn address() -> impl Strategy<Value = u64> {
    prop_oneof![Just(0x7f00_0000_0000u64), (0..1u64 << 48), any::<u64>()]
}

fn buffer() -> impl Strategy<Value = Buffer> {
    (prop_oneof![Just(usize::MAX), size()], address()).prop_map(|(len, addr)| Buffer { len, addr })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    /// Any call of any shipped variant, bound by name with any sizes, buffers and scalars,
    /// through the one launch path: never a panic; a planned launch passes each operand a
    /// buffer that holds what its declaration says it spans.
    #[test]
    fn calls_by_name_never_panic_or_reach_past_a_buffer(
        index in any::<prop::sample::Index>(), sizes in prop::collection::vec(size(), 8),
        buffers in prop::collection::vec(buffer(), 4), scalar in prop_oneof![any::<f64>(), -2.0f64..2.0], sms in any::<u32>(),
        drop_one in any::<bool>(),
    ) {
        let variants = shipped();
        let built = index.get(&variants);
        let family = &built.entry.declaration;
        let mut call = Call::default();
        for (i, q) in family.all_quantities().iter().enumerate() {
            call = call.quantity(q, sizes[i % sizes.len()] as u64);
        }
        for (i, o) in family.operands.iter().enumerate() {
            call = call.operand(&o.name, o.dtype.unwrap_or(built.entry.variant.dtype), buffers[i % buffers.len()]);
        }
        for s in &family.scalars {
            call = call.scalar(&s.name, scalar);
        }
        if drop_one {
            call.quantities.pop();
        }
        if let Ok(Some(launch)) = plan_call(built, &call, sms) {
            prop_assert!(!drop_one || family.all_quantities().is_empty());
            let value = |name: &str| call.quantities.iter().find(|(q, _)| q == name).map(|(_, v)| *v);
            for (o, (_, _, buffer)) in family.operands.iter().zip(&call.operands) {
                let dims: Vec<u64> = o.dims.iter().map(|d| d.eval(&value).unwrap()).collect();
                let (rows, cols) = if dims.len() == 2 { (dims[0], dims[1]) } else { (1, dims[0]) };
                if rows == 0 || cols == 0 {
                    continue;
                }
                let row_major = match o.order.as_deref().map(|order| family.order_axis(order)) {
                    Some(Ok((axis, i))) => built.entry.variant.word(&axis.name).is_some_and(|w| w.as_bytes().get(i) == Some(&b't')),
                    _ => true,
                };
                let (r, c) = if row_major { (rows, cols) } else { (cols, rows) };
                let ld = o.ld.as_deref().and_then(value).unwrap_or(c);
                let span = u128::from(r - 1) * u128::from(ld) + u128::from(c);
                prop_assert!(buffer.len as u128 >= span, "{}: {} planned on {} elements, spanning {span}", built.entry.variant.name, o.name, buffer.len);
            }
            prop_assert!(launch.grid.iter().all(|&g| g >= 1));
        }
    }

    #[test]
    fn grid_rules_never_panic(
        tm in any::<u32>(), tn in any::<u32>(), splits in any::<u32>(), m in any::<u64>(), n in any::<u64>(),
        batch in any::<u64>(), sms in any::<u32>(), cluster in any::<[u32; 3]>(),
    ) {
        for rule in [GridRule::TilesMn { tm, tn }, GridRule::Persistent { tm, tn }, GridRule::SplitK { tm, tn, splits }] {
            if let Some(grid) = rule.grid(m, n, batch, sms, cluster) {
                prop_assert!(grid.iter().all(|&g| g >= 1));
            }
        }
    }
}

#[test]
fn a_registry_manifest_with_ld_multiple_zero_is_refused_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let mut variants = shipped();
    variants.truncate(3);
    variants[1].entry.requires.ld_multiple = 0;
    let index = tilesmith_spec::Registry { format: tilesmith_spec::manifest::FORMAT, project: None, variants };
    std::fs::write(dir.path().join("manifest.json"), serde_json::to_string(&index).unwrap()).unwrap();
    let err = Registry::open(Some(dir.path())).unwrap_err().to_string();
    assert!(err.contains("ld_multiple must be at least 1") && err.contains("manifest.json"), "{err}");
}
