//! The generic chooser on the CPU: the shipped variants from generated/manifest.json, fixture
//! family tables, and calls it must route or refuse by name.

use std::path::Path;
use tilesmith_runtime::{Buffer, Call, Dtype, Registry};
use tilesmith_spec::family_table::{FamilyEntry, FamilyTable, Timed};
use tilesmith_spec::tuning::Device;
use tilesmith_spec::{Built, Manifest};

/// The shared memory an H100's block may use.
const H100_SMEM: u32 = 232_448;

fn h100() -> Device {
    Device { name: "NVIDIA H100 80GB HBM3".into(), capability: [9, 0], sms: 132, clocks: None }
}

fn shipped() -> Vec<Built> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../generated/manifest.json");
    let manifest: Manifest = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    manifest.variants.into_iter().map(Built::unbuilt).collect()
}

fn entry(dtype: Dtype, problem: [u64; 2], ranked: &[(&str, f64)]) -> FamilyEntry {
    let ranked = ranked.iter().map(|&(v, ms)| Timed { variant: v.into(), strategy: None, ms, source: None }).collect();
    FamilyEntry {
        dtype,
        class: Default::default(),
        problem: problem.to_vec(),
        batch: 1,
        baseline_ms: 0.1,
        ranked: tilesmith_spec::family_table::rank(ranked).unwrap(),
    }
}

/// A softmax table for the H100: at 1024 columns the warp variant first, at 8192 the block one
/// of 8 warps, at 131072 only the warp variant (the block ones refuse rows past their shared
/// memory).
fn softmax_table() -> FamilyTable {
    let mut table = FamilyTable::new("softmax", h100(), "test".into(), vec!["rows".into(), "cols".into()]);
    /// Every bf16 variant, `first` fastest and its checked sibling next.
    fn all(first: &str) -> Vec<(&str, f64)> {
        let sibling = first.trim_end_matches("_unchecked");
        let mut ranked = vec![(first, 0.10)];
        if sibling != first {
            ranked.push((sibling, 0.11));
        }
        for (i, v) in ["softmax", "softmax_unchecked", "softmax_w4", "softmax_w4_unchecked", "softmax_w16", "softmax_w16_unchecked"]
            .into_iter()
            .chain(["softmax_warp_w4", "softmax_warp_w4_unchecked"])
            .filter(|v| *v != first && *v != sibling)
            .enumerate()
        {
            ranked.push((v, 0.2 + i as f64 * 0.01));
        }
        ranked
    }
    table.insert(entry(Dtype::Bf16, [65536, 1024], &all("softmax_warp_w4_unchecked")));
    table.insert(entry(Dtype::Bf16, [8192, 8192], &all("softmax")));
    table.insert(entry(Dtype::Bf16, [512, 131072], &[("softmax_warp_w4", 1.0), ("softmax_warp_w4_unchecked", 1.1)]));
    table.insert(entry(Dtype::F32, [8192, 8192], &[("softmax_f32_w16", 0.2), ("softmax_f32", 0.3)]));
    table
}

fn registry(tables: Vec<FamilyTable>) -> Result<Registry, String> {
    Registry::new(Path::new("registry"), shipped()).with_family_tables(tables)
}

/// A packed softmax call of `dtype` on buffers that hold exactly what it spans.
fn softmax_call(dtype: Dtype, rows: u64, cols: u64) -> Call {
    let len = (rows * cols) as usize;
    let [x, y] = Buffer::unallocated([len, len]);
    Call::default()
        .operand("x", dtype, x)
        .operand("y", dtype, y)
        .quantity("rows", rows)
        .quantity("cols", cols)
        .quantity("ldx", cols)
        .quantity("ldy", cols)
}

#[test]
fn an_unchecked_sibling_tied_with_the_first_runs_where_it_takes_the_call() {
    let mut table = FamilyTable::new("softmax", h100(), "test".into(), vec!["rows".into(), "cols".into()]);
    let mut ranked = vec![("softmax_w4", 0.100), ("softmax_w4_unchecked", 0.101)];
    ranked.extend(
        ["softmax", "softmax_unchecked", "softmax_w16", "softmax_w16_unchecked", "softmax_warp_w4", "softmax_warp_w4_unchecked"]
            .into_iter()
            .enumerate()
            .map(|(i, v)| (v, 0.2 + i as f64 * 0.01)),
    );
    table.insert(entry(Dtype::Bf16, [4096, 4096], &ranked));
    assert_eq!(table.entries[0].ranked[0].variant, "softmax_w4", "near ties rank by name");
    let registry = registry(vec![table]).unwrap();
    let softmax = registry.family("softmax").unwrap();
    let pick = softmax.pick(&h100(), H100_SMEM, &softmax_call(Dtype::Bf16, 4096, 4096)).unwrap();
    assert_eq!(pick.kernel().name(), "softmax_w4_unchecked", "{}", pick.reason);
    assert!(pick.reason.contains("rank 2 of 8"), "{}", pick.reason);
    // 4095 columns are off the unchecked variants' multiple: the checked one runs.
    let pick = softmax.pick(&h100(), H100_SMEM, &softmax_call(Dtype::Bf16, 4096, 4095)).unwrap();
    assert_eq!(pick.kernel().name(), "softmax_w4", "{}", pick.reason);
}

#[test]
fn a_call_runs_the_first_variant_of_the_nearest_measured_problem_that_takes_it() {
    let registry = registry(vec![softmax_table()]).unwrap();
    let softmax = registry.family("softmax").unwrap();
    let pick = |call: &Call| softmax.pick(&h100(), H100_SMEM, call).unwrap();
    // 999 columns are not a multiple of 8: the unchecked first of the ranking refuses them.
    let narrow = pick(&softmax_call(Dtype::Bf16, 60000, 999));
    assert_eq!(narrow.kernel().name(), "softmax_warp_w4");
    assert!(narrow.reason.contains("nearest measured problem rows=65536 cols=1024 bf16, rank 2 of 8"), "{}", narrow.reason);
    let wide = pick(&softmax_call(Dtype::Bf16, 8192, 8192));
    assert_eq!(wide.kernel().name(), "softmax");
    // The fixture predates the cluster backend: its measured pick (at the baseline) stands.
    assert!(wide.reason.contains("way(s) taking the call not ranked there"), "{}", wide.reason);
    // The f32 entry's pick reached half the baseline only: the newer variants may do better,
    // and the cost model weighs them all.
    let slow = pick(&softmax_call(Dtype::F32, 8192, 8192));
    assert!(slow.reason.contains("cost model"), "{}", slow.reason);
    // f16 reads bf16's entries, as the variant of the same axes.
    let half = pick(&softmax_call(Dtype::F16, 8192, 8192));
    assert_eq!(half.kernel().name(), "softmax_f16");
    assert!(half.reason.contains("8192 bf16"), "{}", half.reason);
    // Far from every entry: the cost model, which the reason says.
    let small = pick(&softmax_call(Dtype::Bf16, 16, 64));
    assert!(small.reason.contains("cost model, estimated"), "{}", small.reason);
    // Another GPU of the same architecture reads the nearest table, saying so.
    let h200 = Device { name: "NVIDIA H200".into(), ..h100() };
    let borrowed = softmax.pick(&h200, H100_SMEM, &softmax_call(Dtype::Bf16, 8192, 8192)).unwrap();
    assert!(borrowed.reason.contains("(measured on NVIDIA H100 80GB HBM3"), "{}", borrowed.reason);
}

#[test]
fn entries_of_a_class_and_runs_of_a_strategy_are_a_plug_ins_not_the_choosers() {
    // Every f32 variant, the block one of 16 warps first.
    let ranked: Vec<(&str, f64)> = [
        "softmax_f32_w16",
        "softmax_f32_w16_unchecked",
        "softmax_f32",
        "softmax_f32_unchecked",
        "softmax_f32_w4",
        "softmax_f32_w4_unchecked",
        "softmax_f32_warp_w4",
        "softmax_f32_warp_w4_unchecked",
    ]
    .into_iter()
    .enumerate()
    .map(|(i, v)| (v, 0.1 + i as f64 * 0.1))
    .collect();
    let mut table = FamilyTable::new("softmax", h100(), "test".into(), vec!["rows".into(), "cols".into()]);
    table.insert(entry(Dtype::F32, [8192, 8192], &ranked));
    // A nearer entry of a class, ranking the block variant of 4 warps first: not read.
    let mut classed = entry(Dtype::F32, [8000, 8000], &[("softmax_f32_w4", 0.1)]);
    classed.class.insert("layout".into(), "tn".into());
    table.insert(classed);
    // A padded run ranked first is skipped: the call runs what was measured directly.
    table.entries[0].ranked.insert(0, Timed { variant: "softmax_f32_w4".into(), strategy: Some("padded".into()), ms: 0.05, source: None });
    let registry = registry(vec![table]).unwrap();
    let pick = registry.family("softmax").unwrap().pick(&h100(), H100_SMEM, &softmax_call(Dtype::F32, 8000, 8000)).unwrap();
    assert_eq!(pick.kernel().name(), "softmax_f32_w16", "{}", pick.reason);
    assert!(pick.reason.contains("rows=8192 cols=8192 f32, rank 2 of 9"), "{}", pick.reason);
}

#[test]
fn an_entry_that_does_not_rank_every_variant_taking_the_call_is_passed_over() {
    let registry = registry(vec![softmax_table()]).unwrap();
    let softmax = registry.family("softmax").unwrap();
    // 100,000 bf16 columns fit a block's shared memory; the entry at 131,072 ranks only the warp
    // variants (the block ones refused it), which are ten times slower here: the cost model
    // picks among every variant instead.
    let pick = softmax.pick(&h100(), H100_SMEM, &softmax_call(Dtype::Bf16, 700, 100_000)).unwrap();
    assert!(pick.reason.contains("no measured problem near this call ranks every way that takes it"), "{}", pick.reason);
    assert_ne!(pick.kernel().variant().backend, "warp", "{}", pick.reason);
    // In f32 those rows need 400,016 bytes of shared memory, past an H100's block: the block
    // variants refuse them whatever the cost model would say of them; a pick splits the row
    // over a cluster (the cluster backend's shared memory, or the regs backend's registers).
    let pick = softmax.pick(&h100(), H100_SMEM, &softmax_call(Dtype::F32, 700, 100_000)).unwrap();
    assert_ne!(pick.kernel().variant().backend, "block", "{}", pick.reason);
    assert!(pick.kernel().variant().count("cluster").is_some_and(|c| c > 1), "{}: {}", pick.kernel().name(), pick.reason);
}

#[test]
fn families_without_tables_get_the_cost_models_pick() {
    let registry = registry(Vec::new()).unwrap();
    for (family, call) in [
        ("softmax", softmax_call(Dtype::Bf16, 1024, 32768)),
        ("rmsnorm", {
            let [x, w, y] = Buffer::unallocated([4096 * 4096, 4096, 4096 * 4096]);
            Call::default()
                .operand("x", Dtype::F32, x)
                .operand("w", Dtype::F32, w)
                .operand("y", Dtype::F32, y)
                .quantity("rows", 4096)
                .quantity("cols", 4096)
                .quantity("ldx", 4096)
                .quantity("ldy", 4096)
                .scalar("eps", 1e-6)
        }),
    ] {
        let pick = registry.family(family).unwrap().pick(&h100(), H100_SMEM, &call).unwrap();
        assert!(pick.reason.starts_with("no tuning table of this family"), "{}", pick.reason);
        assert!(!pick.kernel().is_reference(), "{}", pick.kernel().name());
        // Rows of 32768 elements: a warp per row reads them ten times slower than a block
        // (which caches the row, or holds it in registers).
        assert!(["block", "regs"].contains(&pick.kernel().variant().backend.as_str()), "{family}: {}", pick.kernel().name());
    }
}

#[test]
fn bad_calls_are_refused_naming_the_family_the_argument_and_the_rule() {
    let registry = registry(Vec::new()).unwrap();
    let softmax = registry.family("softmax").unwrap();
    let refused = |call: Call| softmax.pick(&h100(), H100_SMEM, &call).unwrap_err();
    let unknown = refused(softmax_call(Dtype::Bf16, 64, 64).quantity("colz", 64));
    assert!(
        unknown.contains("quantity `colz`, which a softmax call does not take (quantities it takes: rows, cols, ldx, ldy)"),
        "{unknown}"
    );
    let twice = refused(softmax_call(Dtype::Bf16, 64, 64).quantity("rows", 64));
    assert!(twice.contains("the call gives quantity `rows` twice"), "{twice}");
    let [x, _] = Buffer::unallocated([64, 64]);
    let missing =
        refused(Call::default().operand("x", Dtype::Bf16, x).quantity("rows", 8).quantity("cols", 8).quantity("ldx", 8).quantity("ldy", 8));
    assert!(missing.contains("does not pass operand `y`, which every softmax call passes"), "{missing}");
    let scalar = refused(softmax_call(Dtype::Bf16, 64, 64).scalar("eps", 1.0));
    assert!(scalar.contains("scalar `eps`, which a softmax call does not take (scalars it takes: none)"), "{scalar}");
    let no_rows = {
        let [x, y] = Buffer::unallocated([64, 64]);
        refused(
            Call::default()
                .operand("x", Dtype::Bf16, x)
                .operand("y", Dtype::Bf16, y)
                .quantity("cols", 8)
                .quantity("ldx", 8)
                .quantity("ldy", 8),
        )
    };
    assert!(no_rows.contains("does not give quantity `rows`, which every softmax call gives"), "{no_rows}");
    // Names right, but no variant takes it: each distinct rule, with a variant that gave it.
    let short = {
        let [x, y] = Buffer::unallocated([64, 63]);
        refused(
            Call::default()
                .operand("x", Dtype::Bf16, x)
                .operand("y", Dtype::Bf16, y)
                .quantity("rows", 8)
                .quantity("cols", 8)
                .quantity("ldx", 8)
                .quantity("ldy", 8),
        )
    };
    assert!(short.contains("takes the call: softmax") && short.contains("y holds 63 elements"), "{short}");
    let e8 = refused(softmax_call(Dtype::E4m3, 64, 64));
    assert!(e8.contains("takes the call"), "{e8}");
    let unknown_family = registry.family("softmx").unwrap_err().to_string();
    assert!(
        unknown_family.contains("unknown family `softmx`; the registry has ") && unknown_family.contains(" softmax, "),
        "{unknown_family}"
    );
}

#[test]
fn tables_the_registry_cannot_use_are_refused_at_open() {
    let mut other = softmax_table();
    other.family = "groupnorm".into();
    let refused = registry(vec![other]).unwrap_err();
    assert!(refused.contains("is of family `groupnorm`, of which the registry has no variant"), "{refused}");
    let mut quantities = softmax_table();
    quantities.quantities = vec!["n".into(), "d".into()];
    let refused = registry(vec![quantities]).unwrap_err();
    assert!(refused.contains("measures problems of quantities n, d, but family softmax declares rows, cols"), "{refused}");
    let mut stranger = softmax_table();
    stranger.insert(entry(Dtype::Bf16, [4, 4], &[("rmsnorm_w4", 1.0)]));
    let refused = registry(vec![stranger]).unwrap_err();
    assert!(refused.contains("ranks 1 variant(s) that are not variants of softmax the chooser may run (rmsnorm_w4)"), "{refused}");
    let refused = registry(vec![softmax_table(), softmax_table()]).unwrap_err();
    assert!(refused.contains("two tuning tables of family softmax are for NVIDIA H100 80GB HBM3"), "{refused}");
}

#[test]
fn the_committed_tables_open_with_the_shipped_variants_and_are_read() {
    let tuning = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tuning");
    let tables: Vec<FamilyTable> = FamilyTable::read_all(&tuning).unwrap().into_iter().map(|(_, t)| t).collect();
    assert!(tables.len() >= 4, "softmax and rmsnorm on the H100 and the H200");
    let registry = registry(tables).unwrap();
    let pick = registry.family("rmsnorm").unwrap().pick(&h100(), H100_SMEM, &{
        let [x, w, y] = Buffer::unallocated([8192 * 8192, 8192, 8192 * 8192]);
        Call::default()
            .operand("x", Dtype::Bf16, x)
            .operand("w", Dtype::Bf16, w)
            .operand("y", Dtype::Bf16, y)
            .quantity("rows", 8192)
            .quantity("cols", 8192)
            .quantity("ldx", 8192)
            .quantity("ldy", 8192)
            .scalar("eps", 1e-6)
    });
    let pick = pick.unwrap();
    // `rmsnorm` ranks first, `rmsnorm_unchecked` second within a near tie: the unchecked one runs.
    assert_eq!(pick.kernel().name(), "rmsnorm_unchecked", "{}", pick.reason);
    assert!(
        pick.reason
            .contains("tuning table rmsnorm/NVIDIA_H100_80GB_HBM3-132sm.json: estimated 0.0% over the fastest from 1 measured problem(s); nearest measured problem rows=8192 cols=8192 bf16, rank 2"),
        "{}",
        pick.reason
    );
}

/// A packed attention call ([batch, seq, heads, head_dim] operands, no log-sum-exp).
fn attention_call(batch: u64, seq_q: u64, seq_k: u64, heads: u64, kv_heads: u64, head_dim: u64) -> Call {
    let [q, k, v, o] = Buffer::unallocated([
        (batch * seq_q * heads * head_dim) as usize,
        (batch * seq_k * kv_heads * head_dim) as usize,
        (batch * seq_k * kv_heads * head_dim) as usize,
        (batch * seq_q * heads * head_dim) as usize,
    ]);
    let mut call =
        Call::default().operand("q", Dtype::Bf16, q).operand("k", Dtype::Bf16, k).operand("v", Dtype::Bf16, v).operand("o", Dtype::Bf16, o);
    for (name, value) in
        [("batch", batch), ("seq_q", seq_q), ("seq_k", seq_k), ("heads", heads), ("kv_heads", kv_heads), ("head_dim", head_dim)]
    {
        call = call.quantity(name, value);
    }
    for (op, seq, h) in [("q", seq_q, heads), ("k", seq_k, kv_heads), ("v", seq_k, kv_heads), ("o", seq_q, heads)] {
        let p = &op[..1];
        call = call
            .quantity(&format!("s{p}h"), head_dim)
            .quantity(&format!("s{p}s"), h * head_dim)
            .quantity(&format!("s{p}b"), seq * h * head_dim);
    }
    call.quantity("slb", heads * seq_q).quantity("slh", seq_q).scalar("scale", 0.125)
}

#[test]
fn a_call_gets_what_it_asks_of_the_axes_that_change_what_is_computed() {
    let tuning = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tuning");
    let tables: Vec<FamilyTable> = FamilyTable::read_all(&tuning).unwrap().into_iter().map(|(_, t)| t).collect();
    let registry = registry(tables).unwrap();
    let attention = registry.family("attention").unwrap();
    let causal = |name: &str| registry.kernel(name).unwrap().variant().value("causal").unwrap().to_string();
    // The H100's table ranks a causal variant first at this prefill (it does half the work):
    // a call that does not ask for the mask must not get it.
    let prefill = attention_call(4, 4096, 4096, 32, 32, 128);
    let pick = attention.pick(&h100(), H100_SMEM, &prefill).unwrap();
    assert_eq!(causal(pick.kernel().name()), "none", "{}: {}", pick.kernel().name(), pick.reason);
    assert_eq!(pick.kernel().variant().backend, "wgmma", "{}", pick.reason);
    let pick = attention.pick(&h100(), H100_SMEM, &prefill.clone().axis("causal", "causal")).unwrap();
    assert_eq!(causal(pick.kernel().name()), "causal", "{}: {}", pick.kernel().name(), pick.reason);
    // Decoding: the split-KV backend, as measured.
    let pick = attention.pick(&h100(), H100_SMEM, &attention_call(4, 1, 8192, 32, 8, 128)).unwrap();
    assert_eq!(pick.kernel().variant().backend, "splitkv", "{}: {}", pick.kernel().name(), pick.reason);
    assert_eq!(causal(pick.kernel().name()), "none", "{}", pick.kernel().name());

    let refused = |call: Call| attention.pick(&h100(), H100_SMEM, &call).unwrap_err();
    let word = refused(prefill.clone().axis("causal", "diagonal"));
    assert!(word.contains("causal = diagonal, which is not a value of axis `causal` (none, causal)"), "{word}");
    let tuning = refused(prefill.clone().axis("cluster", "4"));
    assert!(tuning.contains("axis `cluster`, which changes how a attention variant computes, not what"), "{tuning}");
    let unknown = refused(prefill.clone().axis("mask", "causal"));
    assert!(unknown.contains("axis `mask`, which a attention call does not take (axes it takes: causal)"), "{unknown}");
    let twice = refused(prefill.clone().axis("causal", "none").axis("causal", "none"));
    assert!(twice.contains("asks for axis `causal` twice"), "{twice}");
    // A variant by name computes what it computes: a call asking otherwise is refused.
    let named = registry.kernel("attention_causal").unwrap().plan(132, &prefill.clone().axis("causal", "none")).unwrap_err().to_string();
    assert!(named.contains("the call asks for causal = none; attention_causal computes causal = causal"), "{named}");
}

#[test]
fn attention_calls_that_break_a_rule_are_refused_naming_it() {
    let registry = registry(Vec::new()).unwrap();
    let plan = |name: &str, call: &Call| registry.kernel(name).unwrap().plan(132, call).unwrap_err().to_string();
    let grouped = plan("attention", &attention_call(1, 64, 64, 6, 4, 128));
    assert!(grouped.contains("heads must be a multiple of kv_heads"), "{grouped}");
    let dim = plan("attention", &attention_call(1, 64, 64, 8, 8, 64));
    assert!(dim.contains("this variant's head_dim is 128"), "{dim}");
    let causal = plan("attention_causal", &attention_call(1, 65, 64, 8, 8, 128));
    assert!(causal.contains("give seq_q <= seq_k"), "{causal}");
    // Every variant of the family refuses the grouping, and the chooser says so.
    let chosen = registry.family("attention").unwrap().pick(&h100(), H100_SMEM, &attention_call(1, 64, 64, 6, 4, 128)).unwrap_err();
    assert!(chosen.contains("heads must be a multiple of kv_heads"), "{chosen}");
    // An LSE one element short, and an O that is Q: refused before anything runs.
    let [lse] = Buffer::unallocated([8 * 64 - 1]);
    let short = plan("attention", &attention_call(1, 64, 64, 8, 8, 128).operand("lse", Dtype::F32, Buffer { addr: 7 << 48, ..lse }));
    assert!(short.contains("lse") && short.contains(&format!("{}", 8 * 64 - 1)), "{short}");
    let mut aliased = attention_call(1, 64, 64, 8, 8, 128);
    let q = aliased.operands[0].2;
    aliased.operands[3].2 = q;
    let overlap = plan("attention", &aliased);
    assert!(overlap.contains("overlaps") && overlap.contains("which the kernel writes"), "{overlap}");
}

/// A varlen attention call: `batch` sequences packed into `total_q` query and `total_k` key
/// rows ([total, heads, head_dim] operands), their offsets in two i32 buffers.
fn varlen_call(batch: u64, [total_q, total_k]: [u64; 2], [max_q, max_k]: [u64; 2], heads: u64, kv_heads: u64, head_dim: u64) -> Call {
    let [q, k, v, o, cu_q, cu_k] = Buffer::unallocated([
        (total_q * heads * head_dim) as usize,
        (total_k * kv_heads * head_dim) as usize,
        (total_k * kv_heads * head_dim) as usize,
        (total_q * heads * head_dim) as usize,
        batch as usize + 1,
        batch as usize + 1,
    ]);
    let mut call = Call::default()
        .operand("q", Dtype::Bf16, q)
        .operand("k", Dtype::Bf16, k)
        .operand("v", Dtype::Bf16, v)
        .operand("o", Dtype::Bf16, o)
        .operand("cu_q", Dtype::I32, cu_q)
        .operand("cu_k", Dtype::I32, cu_k);
    let quantities = [
        ("batch", batch),
        ("total_q", total_q),
        ("total_k", total_k),
        ("max_seq_q", max_q),
        ("max_seq_k", max_k),
        ("heads", heads),
        ("kv_heads", kv_heads),
        ("head_dim", head_dim),
    ];
    for (name, value) in quantities {
        call = call.quantity(name, value);
    }
    for (p, h) in [("q", heads), ("k", kv_heads), ("v", kv_heads), ("o", heads)] {
        call = call.quantity(&format!("s{p}h"), head_dim).quantity(&format!("s{p}s"), h * head_dim);
    }
    call.quantity("slh", total_q).scalar("scale", 0.125)
}

#[test]
fn varlen_launches_carry_their_offsets_checks_and_the_checks_refuse_broken_offsets() {
    let registry = registry(Vec::new()).unwrap();
    let call = varlen_call(3, [300, 700], [200, 400], 8, 2, 128);
    let planned = registry.kernel("attention_varlen").unwrap().plan(132, &call).unwrap().unwrap();
    let launch = planned.launch();
    // A block per tile: the longest query sequence's 2 tiles of 128 rows, for every head of each
    // of the 3 sequences.
    assert_eq!(launch.grid, [2 * 8 * 3, 1, 1]);
    let checks: Vec<(&str, usize, u64, Option<u64>)> =
        launch.offsets.iter().map(|c| (c.operand.as_str(), c.len, c.total, c.longest)).collect();
    assert_eq!(checks, [("cu_q", 4, 300, Some(200)), ("cu_k", 4, 700, Some(400))]);
    let cu_q = &launch.offsets[0];
    assert_eq!(cu_q.check(&[0, 100, 250, 300]), Ok(()));
    assert_eq!(cu_q.check(&[0, 0, 0, 0]), Ok(()));
    let refused = |values: &[i32]| cu_q.check(values).unwrap_err();
    assert!(refused(&[0, 100, 50, 300]).contains("cu_q[2] = 50 is less than cu_q[1] = 100: offsets must not decrease"));
    assert!(refused(&[0, 100, 250, 301]).contains("cu_q[3] = 301 is past the end: offsets end at 300 or less"));
    assert!(refused(&[0, 201, 250, 300]).contains("cu_q[1] - cu_q[0] = 201: a piece is longer than the 200"));
    assert!(refused(&[-1, 100, 250, 300]).contains("cu_q[0] = -1: offsets start at 0 or more"));

    // Buffers and quantities are checked as any operand's, before anything runs.
    let plan = |name: &str, call: &Call| registry.kernel(name).unwrap().plan(132, call).unwrap_err().to_string();
    let mut short = call.clone();
    short.operands[4].2.len = 3;
    let message = plan("attention_varlen", &short);
    assert!(message.contains("cu_q holds 3 elements, but it takes batch + 1 = 4"), "{message}");
    let mut floats = call.clone();
    floats.operands[5].1 = Dtype::F32;
    let message = plan("attention_varlen", &floats);
    assert!(message.contains("it takes i32 elements for cu_k, but the buffer holds f32"), "{message}");
    let message = plan("attention_varlen", &varlen_call(3, [300, 700], [0, 400], 8, 2, 128));
    assert!(message.contains("max_seq_q, the longest query sequence, sizes the grid"), "{message}");
    let message = plan("attention_varlen_d64", &call);
    assert!(message.contains("this variant's head_dim is 64"), "{message}");
    // Dense attention's rules on seq_q and seq_k are not varlen's: rows without keys are
    // defined there (O = 0), so a causal variant takes any lengths.
    assert!(registry.kernel("attention_varlen_causal").unwrap().plan(132, &call).is_ok());

    // The chooser picks among the family's variants (no tables: the cost model).
    let family = registry.family("attention_varlen").unwrap();
    let prefill = family.pick(&h100(), H100_SMEM, &varlen_call(8, [16384, 16384], [2048, 2048], 32, 8, 128)).unwrap();
    assert_eq!(prefill.kernel().variant().backend, "wgmma", "{}", prefill.reason);
    let decode = family.pick(&h100(), H100_SMEM, &varlen_call(4, [4, 32768], [1, 8192], 32, 8, 128)).unwrap();
    assert_ne!(decode.kernel().variant().backend, "wgmma", "{}: {}", decode.kernel().name(), decode.reason);

    // The committed H100 table: split-KV for decoding, and never the causal variant its
    // prefill entries rank first for a call that does not ask for the mask.
    let tuning = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tuning");
    let tables: Vec<FamilyTable> = FamilyTable::read_all(&tuning).unwrap().into_iter().map(|(_, t)| t).collect();
    let tuned = self::registry(tables).unwrap();
    let family = tuned.family("attention_varlen").unwrap();
    let decode = family.pick(&h100(), H100_SMEM, &varlen_call(4, [4, 32768], [1, 8192], 32, 8, 128)).unwrap();
    assert_eq!(decode.kernel().name(), "attention_varlen_splitkv_w4_c4", "{}", decode.reason);
    let prefill = family.pick(&h100(), H100_SMEM, &varlen_call(8, [16384, 16384], [2048, 2048], 32, 8, 128)).unwrap();
    assert_eq!(prefill.kernel().name(), "attention_varlen", "{}", prefill.reason);
}

// Issue 58: a timing of a variant whose source changed since it was timed is a hint: the
// chooser reads the timings of sources as they are first, and the stale ones only where no
// taker has any; the table says which are stale.
#[test]
fn stale_timings_are_hints_and_are_named() {
    let sources: std::collections::BTreeMap<String, String> =
        shipped().into_iter().map(|b| (b.entry.variant.name.clone(), b.entry.source_sha256.clone())).collect();
    let stamped = |variant: &str, ms: f64, stale: bool| {
        let own = tilesmith_spec::family_table::stamp(&sources[variant]).unwrap();
        let source = if stale { "0123456789abcdef".to_string() } else { own };
        Timed { variant: variant.into(), strategy: None, ms, source: Some(source) }
    };
    let table = |stale_fast: bool, stale_slow: bool| {
        let mut table = FamilyTable::new("softmax", h100(), "test".into(), vec!["rows".into(), "cols".into()]);
        let mut entry = entry(Dtype::Bf16, [4096, 4096], &[]);
        let mut ranked = vec![stamped("softmax_w16_unchecked", 0.05, stale_fast), stamped("softmax_w4_unchecked", 0.10, stale_slow)];
        for v in ["softmax", "softmax_unchecked", "softmax_w4", "softmax_w16", "softmax_warp_w4", "softmax_warp_w4_unchecked"] {
            ranked.push(stamped(v, 0.3, false));
        }
        entry.ranked = tilesmith_spec::family_table::rank(ranked).unwrap();
        table.insert(entry);
        table
    };
    let pick = |table: FamilyTable| {
        let registry = registry(vec![table]).unwrap();
        registry.family("softmax").unwrap().pick(&h100(), H100_SMEM, &softmax_call(Dtype::Bf16, 4096, 4096)).unwrap()
    };
    let fresh = pick(table(false, false));
    assert_eq!(fresh.kernel().name(), "softmax_w16_unchecked", "{}", fresh.reason);
    // Its source changed since: the fastest fresh timing runs.
    let passed_over = pick(table(true, false));
    assert_eq!(passed_over.kernel().name(), "softmax_w4_unchecked", "{}", passed_over.reason);
    assert!(!passed_over.reason.contains("hints"), "{}", passed_over.reason);
    let stale = table(true, false);
    let current = |v: &str| sources.get(v).map(String::as_str);
    assert_eq!(stale.stale(current), (1, vec!["softmax_w16_unchecked".to_string()]));
    let words = stale.stale_words(current).unwrap();
    assert!(words.contains("1 timing(s) of 1 variant(s) whose source changed since they were timed (softmax_w16_unchecked)"), "{words}");
    assert!(table(false, false).stale_words(current).is_none());
    // Every timing stale: they are read as hints, and the reason says so.
    let mut all_stale = table(true, true);
    for timed in &mut all_stale.entries[0].ranked {
        timed.source = Some("0123456789abcdef".into());
    }
    let hinted = pick(all_stale);
    assert_eq!(hinted.kernel().name(), "softmax_w16_unchecked", "{}", hinted.reason);
    assert!(hinted.reason.contains("(from timings of sources changed since: hints)"), "{}", hinted.reason);
    // A stamp that is not one is refused when the table is read.
    let mut bad = table(false, false);
    bad.entries[0].ranked[0].source = Some("xyz".into());
    assert!(bad.check().unwrap_err().contains("source stamp is not 16 hex digits"));
}

/// A grouped GEMM call: `m` rows over `experts` experts of [n, k] weights, packed.
fn grouped_call(experts: u64, m: u64, n: u64, k: u64) -> Call {
    let [a, w, offs, c] = Buffer::unallocated([(m * k) as usize, (experts * n * k) as usize, experts as usize, (m * n) as usize]);
    Call::default()
        .operand("a", Dtype::Bf16, a)
        .operand("w", Dtype::Bf16, w)
        .operand("offs", Dtype::I32, offs)
        .operand("c", Dtype::Bf16, c)
        .quantity("experts", experts)
        .quantity("m", m)
        .quantity("n", n)
        .quantity("k", k)
        .quantity("lda", k)
        .quantity("swe", n * k)
        .quantity("swn", k)
        .quantity("ldc", n)
}

#[test]
fn grouped_gemm_offsets_are_ends_checked_before_the_launch() {
    let registry = registry(Vec::new()).unwrap();
    let planned = registry.kernel("grouped_gemm_128x256x64").unwrap().plan(132, &grouped_call(8, 1000, 512, 256)).unwrap().unwrap();
    let launch = planned.launch();
    // Persistent: no more blocks than the tiles there can be, (8 row tiles + one partial an
    // expert) x 2 column tiles.
    assert_eq!(launch.grid, [32, 1, 1]);
    let checks: Vec<(&str, usize, u64, bool)> = launch.offsets.iter().map(|c| (c.operand.as_str(), c.len, c.total, c.ends)).collect();
    assert_eq!(checks, [("offs", 8, 1000, true)]);
    let offs = &launch.offsets[0];
    assert_eq!(offs.check(&[0, 0, 100, 100, 500, 999, 1000, 1000]), Ok(()));
    assert_eq!(offs.check(&[0, 0, 0, 0, 0, 0, 0, 0]), Ok(()));
    let refused = |values: &[i32]| offs.check(values).unwrap_err();
    assert!(refused(&[-1, 0, 100, 100, 500, 999, 1000, 1000]).contains("offs[0] = -1 is less than the first piece's start = 0"));
    assert!(refused(&[0, 200, 100, 100, 500, 999, 1000, 1000]).contains("offs[2] = 100 is less than offs[1] = 200"));
    assert!(refused(&[0, 0, 100, 100, 500, 999, 1000, 1001]).contains("offs[7] = 1001 is past the end: offsets end at 1000 or less"));
    // One offset an expert, not one more.
    let mut long = grouped_call(8, 1000, 512, 256);
    long.operands[2].2.len = 9;
    let planned = registry.kernel("grouped_gemm_128x256x64").unwrap().plan(132, &long).unwrap().unwrap();
    assert_eq!(planned.launch().offsets[0].len, 8);
    let mut short = grouped_call(8, 1000, 512, 256);
    short.operands[2].2.len = 7;
    let message = registry.kernel("grouped_gemm_128x256x64").unwrap().plan(132, &short).unwrap_err().to_string();
    assert!(message.contains("offs holds 7 elements, but it takes experts = 8"), "{message}");
}
