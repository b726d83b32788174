//! The dispatcher's choice, on the CPU: shipped variants from generated/manifest.json, a
//! fixture tuning table, and calls it must route.

use std::path::Path;
use tilesmith_gemm::dispatch::GemmCall;
use tilesmith_gemm::table::{self as tuning, Alignment, Strategy};
use tilesmith_gemm::Choice;
use tilesmith_gemm::{plan_gemm_with, Activation, Batch, EpilogueArgs, GemmKernel, GemmShape};
use tilesmith_runtime::{Buffer, Dtype, Layout, Registry};
use tilesmith_spec::family_table::{rank, FamilyEntry, Timed};
use tilesmith_spec::tuning::Device;
use tilesmith_spec::{Built, Manifest};

const ALIGNED: u64 = 0x7f00_0000_0000;

/// The activation of that name.
fn act(word: &str) -> Activation {
    Activation::named(word).unwrap()
}

fn h200() -> Device {
    Device { name: "NVIDIA H200".into(), capability: [9, 0], sms: 132, clocks: None }
}

fn entry(alignment: Alignment, shape: [u64; 3], ranked: &[(&str, Strategy, f64)]) -> FamilyEntry {
    FamilyEntry {
        dtype: Dtype::Bf16,
        class: tuning::class(Layout::Tn, alignment, None),
        problem: shape.to_vec(),
        batch: 1,
        baseline_ms: 1.0,
        ranked: rank(
            ranked.iter().map(|&(v, strategy, ms)| Timed { variant: v.into(), strategy: strategy.word(), ms, source: None }).collect(),
        )
        .unwrap(),
    }
}

/// The shipped variants, and a table for the H200 in which the fastest candidate at 4096³ is
/// an unchecked variant, which must be passed over for shapes off its tile.
fn registry() -> Registry {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../generated/manifest.json");
    let manifest: Manifest = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let built = manifest.variants.into_iter().map(Built::unbuilt).collect();
    let direct = Strategy::Direct;
    let mut table = tuning::new_table(h200(), "test".into());
    for entry in [
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
        FamilyEntry {
            class: tuning::class(Layout::Tn, Alignment::Aligned, Some("gelu_tanh")),
            ..entry(
                Alignment::Aligned,
                [16, 4096, 4096],
                &[("gemm_tn_128x128x64_wgmma_w12_s6_gelu_tanh", direct, 0.021), ("gemm_tn_64x128x64_wgmma_w8_s6_gelu_tanh", direct, 0.022)],
            )
        },
        FamilyEntry {
            batch: 64,
            ..entry(
                Alignment::Aligned,
                [512, 512, 64],
                &[("gemm_tn_128x256x64_wgmma_w12", direct, 0.020), ("gemm_tn_128x128x64_wgmma_w12_s6", direct, 0.024)],
            )
        },
    ] {
        table.insert(entry);
    }
    Registry::new(Path::new("registry"), built).with_family_tables(vec![table]).unwrap()
}

fn buffers(shape: &GemmShape) -> [Buffer; 3] {
    Buffer::unallocated(shape.spans())
}

/// The dispatcher's pick for a bf16 call with this epilogue.
fn choose_with(
    registry: &Registry,
    device: &Device,
    shape: &GemmShape,
    buffers: [Buffer; 3],
    epilogue: &EpilogueArgs,
) -> Result<Choice, String> {
    choose(registry, device, &GemmCall { dtype: Dtype::Bf16, shape, buffers, epilogue })
}

/// An H100's and an H200's shared memory a block.
const SMEM_PER_BLOCK: u32 = 232_448;

/// The pick of the registry's chooser of family `gemm` for a typed call.
fn choose(registry: &Registry, device: &Device, call: &GemmCall<'_>) -> Result<Choice, String> {
    tilesmith_gemm::choose(registry.family("gemm").unwrap(), device, SMEM_PER_BLOCK, call)
}

fn pick(registry: &Registry, device: &Device, shape: GemmShape) -> (String, Strategy, String) {
    let choice = choose_with(registry, device, &shape, buffers(&shape), &EpilogueArgs::default()).unwrap();
    assert_eq!(choice.transpose.is_some(), choice.strategy == Strategy::Padded, "the padded strategy carries its transpose variant");
    (choice.kernel.name().to_string(), choice.strategy, choice.reason)
}

#[test]
fn the_nearest_entry_gives_the_first_candidate_that_takes_the_call() {
    let registry = registry();
    let (name, strategy, reason) = pick(&registry, &h200(), GemmShape::packed(4096, 4096, 4096, Layout::Tn));
    assert_eq!((name.as_str(), strategy), ("gemm_tn_128x256x64_wgmma_w12_unchecked", Strategy::Direct));
    assert!(
        reason.contains("NVIDIA_H200-132sm.json") && reason.contains("m=4096 n=4096 k=4096") && reason.contains("rank 1 of 3"),
        "{reason}"
    );
    // 4000 is off the unchecked variant's tile: the next candidate, never a refusal.
    let (name, _, reason) = pick(&registry, &h200(), GemmShape::packed(4000, 4000, 4000, Layout::Tn));
    assert_eq!(name, "gemm_tn_128x256x64_wgmma_w12");
    assert!(reason.contains("rank 2 of 3"), "{reason}");
    let (name, _, _) = pick(&registry, &h200(), GemmShape::packed(20, 4000, 4600, Layout::Tn));
    assert_eq!(name, "gemm_tn_64x128x64_wgmma_w8_s6_splitk2");
    // Farther than a factor of 2 in all from every measured problem: the cost model.
    let (_, _, reason) = pick(&registry, &h200(), GemmShape::packed(24, 3000, 5000, Layout::Tn));
    assert!(reason.contains("no measured problem near this call") && reason.contains("cost model"), "{reason}");
}

#[test]
fn an_activation_is_a_name_the_declaration_gives_the_epilogue_axis() {
    let registry = registry();
    let shape = GemmShape::packed(512, 512, 512, Layout::Tn);
    let epilogue = EpilogueArgs { activation: act("tanh"), bias: Some(Buffer { len: 512, addr: ALIGNED }), ..EpilogueArgs::default() };
    let err = choose_with(&registry, &h200(), &shape, buffers(&shape), &epilogue).unwrap_err();
    let declared = "none, linear, relu, gelu_tanh, gelu_erf, silu";
    assert!(err.contains(&format!("the call asks for epilogue = tanh, which is not a value of axis `epilogue` ({declared})")), "{err}");
    assert!(Activation::named("gelu tanh").unwrap_err().contains("a name (letters, digits and _) of at most 23 bytes"));
    assert!(Activation::named(&"x".repeat(24)).is_err());
    assert_eq!((Activation::named("linear").unwrap(), Activation::named("none").unwrap()), (Activation::NONE, Activation::NONE));
    assert_eq!((act("gelu_tanh").to_string(), Activation::NONE.to_string()), ("gelu_tanh".to_string(), "none".to_string()));
}

#[test]
fn an_activation_measured_with_its_epilogue_takes_that_entry_first() {
    let registry = registry();
    let shape = GemmShape::packed(16, 4096, 4096, Layout::Tn);
    let bias = Buffer { len: 4096, addr: ALIGNED };
    let with = |activation| EpilogueArgs { activation, bias: Some(bias), ..EpilogueArgs::default() };
    let choice = choose_with(&registry, &h200(), &shape, buffers(&shape), &with(act("gelu_tanh"))).unwrap();
    assert_eq!(choice.kernel.name(), "gemm_tn_128x128x64_wgmma_w12_s6_gelu_tanh");
    assert!(
        choice.reason.contains("m=16 n=4096 k=4096 bf16 alignment=aligned epilogue=gelu_tanh") && choice.reason.contains("rank 1 of 2"),
        "{}",
        choice.reason
    );
    // relu has no entries of its own: the plain entry's picks, as relu variants (split-K 2 has
    // none; the 64x128 tile has).
    let choice = choose_with(&registry, &h200(), &shape, buffers(&shape), &with(act("relu"))).unwrap();
    assert_eq!(choice.kernel.name(), "gemm_tn_64x128x64_wgmma_w8_s6_relu");
    assert!(!choice.reason.contains("epilogue="), "{}", choice.reason);
    // A plain call never reads the gelu entry.
    assert_eq!(pick(&registry, &h200(), shape).0, "gemm_tn_64x128x64_wgmma_w8_s6_splitk2");
}

#[test]
fn a_batch_takes_the_nearest_measured_batch_and_one_problem_does_not() {
    let registry = registry();
    let one = GemmShape::packed(512, 512, 64, Layout::Tn);
    let (name, _, reason) = pick(&registry, &h200(), one.batched(48));
    assert_eq!(name, "gemm_tn_128x256x64_wgmma_w12");
    assert!(reason.contains("nearest measured problem 64 x m=512 n=512 k=64") && reason.contains("rank 1 of 2"), "{reason}");
    // A batch whose B is shared takes the same pick: the tiles are the same.
    let shared = one.with_batch(Batch { count: 64, strides: [512 * 64, 0, 512 * 512] });
    assert_eq!(pick(&registry, &h200(), shared).0, "gemm_tn_128x256x64_wgmma_w12");
    // One such problem is 64 times fewer tiles, nowhere near the batch.
    let (_, _, reason) = pick(&registry, &h200(), one);
    assert!(reason.contains("no measured problem near this call") && reason.contains("cost model"), "{reason}");
}

#[test]
fn a_gpu_without_a_table_borrows_the_nearest_of_its_architecture() {
    let registry = registry();
    let h100 = Device { name: "NVIDIA H100 80GB HBM3".into(), ..h200() };
    let (name, _, reason) = pick(&registry, &h100, GemmShape::packed(4096, 4096, 4096, Layout::Tn));
    assert_eq!(name, "gemm_tn_128x256x64_wgmma_w12_unchecked");
    assert!(reason.contains("NVIDIA_H200-132sm.json (measured on NVIDIA H200 (132 SMs, compute capability 9.0))"), "{reason}");
    // Half the SMs: M and N are scaled by √2 to find the problem that fills as many waves
    // there, 2896² (distance 1 from 4096³) stands for 4096² on 66 SMs, but 5793² does not.
    let half = Device { name: "NVIDIA H100 PCIe".into(), sms: 66, ..h200() };
    let (_, _, reason) = pick(&registry, &half, GemmShape::packed(2896, 2896, 4096, Layout::Tn));
    assert!(reason.contains("m and n x1.41") && reason.contains("m=4096 n=4096 k=4096"), "{reason}");
    let (_, _, reason) = pick(&registry, &half, GemmShape::packed(5793, 5793, 4096, Layout::Tn));
    assert!(reason.contains("cost model"), "{reason}");
}

#[test]
fn a_padded_pick_runs_in_the_layout_the_calls_moves_give() {
    let registry = registry();
    // The entry moved A, B and C (an nt GEMM results); this call's B and C are aligned, so only
    // A moves and the GEMM runs nn: the same variant in nn.
    let shape = GemmShape { lda: 4099, ldb: 4104, ldc: 4104, ..GemmShape::packed(4095, 4097, 4099, Layout::Tn) };
    let (name, strategy, reason) = pick(&registry, &h200(), shape);
    assert_eq!((name.as_str(), strategy), ("gemm_nn_128x256x64_wgmma_w12", Strategy::Padded));
    assert!(reason.contains("rank 1 of 3"), "{reason}");
}

#[test]
fn a_vector_operand_is_read_in_whichever_order_needs_no_move() {
    let registry = registry();
    // M = 1 in nn: A is K elements one after another, a row as much as a column; C one row.
    let shape = GemmShape::packed(1, 4096, 4096, Layout::Nn);
    let (name, strategy, _) = pick(&registry, &h200(), shape);
    assert_eq!(strategy, Strategy::Direct, "{name}");
    assert!(name.starts_with("gemm_tn_") && name.contains("wgmma"), "{name}");
    let seen = tilesmith_gemm::dispatch::canonical(Dtype::Bf16, &shape);
    assert_eq!((seen.layout, seen.lda, seen.ldb, seen.ldc), (Layout::Tn, 4096, 4096, 4096));
    assert_eq!(seen.spans(), shape.spans(), "the same memory");
    // A column of A with a stride is not a row: it stays as it is.
    let strided = GemmShape { lda: 8, ..shape };
    assert_eq!(tilesmith_gemm::dispatch::canonical(Dtype::Bf16, &strided).layout, Layout::Nn);
}

#[test]
fn a_dtype_without_entries_reads_those_of_its_width() {
    let registry = registry();
    let shape = GemmShape::packed(4096, 4096, 4096, Layout::Tn);
    let plain = EpilogueArgs::default();
    let call = |dtype| GemmCall { dtype, shape: &shape, buffers: buffers(&shape), epilogue: &plain };
    let choice = choose(&registry, &h200(), &call(Dtype::F16)).unwrap();
    assert_eq!(choice.kernel.name(), "gemm_tn_128x256x64_f16_wgmma_w12_unchecked");
    assert!(choice.reason.contains("bf16 alignment=aligned layout=tn"), "{}", choice.reason);
    // f32 has no twin of its width in the table: the cost model.
    let choice = choose(&registry, &h200(), &call(Dtype::F32)).unwrap();
    assert!(choice.reason.contains("cost model"), "{}", choice.reason);
}

#[test]
fn odd_leading_dimensions_take_the_padded_strategy_from_their_own_class() {
    let registry = registry();
    let packed = GemmShape::packed(4095, 4097, 4099, Layout::Tn);
    let (name, strategy, reason) = pick(&registry, &h200(), packed);
    // Every operand is unaligned: A and B are moved transposed and C computed as Cᵀ = Bᵀ·Aᵀ,
    // an nt GEMM; the tn variant ranked first runs as its nt sibling.
    assert_eq!((name.as_str(), strategy), ("gemm_nt_128x256x64_wgmma_w12", Strategy::Padded));
    assert!(reason.contains("unaligned") && reason.contains("rank 1 of 3"), "{reason}");
    // The same pick in every call: the choice depends on the table alone.
    for _ in 0..3 {
        assert_eq!(pick(&registry, &h200(), packed).0, name);
    }
}

#[test]
fn without_a_table_for_the_device_the_cost_model_picks_what_runs_there() {
    let registry = registry();
    let a100 = Device { name: "NVIDIA A100-SXM4-80GB".into(), capability: [8, 0], sms: 108, clocks: None };
    let (name, strategy, reason) = pick(&registry, &a100, GemmShape::packed(4096, 4096, 4096, Layout::Tn));
    assert!(reason.contains("no tuning table") && reason.contains("cost model"), "{reason}");
    assert!(!name.contains("wgmma"), "sm_90a code does not run on an A100: {name}");
    assert_eq!(strategy, Strategy::Direct);
    // A GPU of compute capability 9.0 whose table there is none of, nor of any like it.
    let slice = Device { sms: 66, ..h200() };
    let no_table = Registry::new(Path::new("registry"), registry.kernels().map(|k| k.info().clone()).collect());
    let (name, _, reason) = pick(&no_table, &slice, GemmShape::packed(4096, 4096, 4096, Layout::Tn));
    assert!(name.contains("wgmma") && reason.contains("no tuning table") && reason.contains("cost model"), "{name}: {reason}");
    // Odd leading dimensions: the element-wise loads they force on mma cost more than moving
    // the operands into aligned scratch, on an A100 and on an H200 with no table.
    let odd = GemmShape { lda: 4099, ldb: 4099, ldc: 4097, ..GemmShape::packed(4095, 4097, 4099, Layout::Tn) };
    let (name, strategy, _) = pick(&registry, &a100, odd);
    assert_eq!(strategy, Strategy::Padded);
    assert!(name.contains("128x") && !name.contains("wgmma"), "{name}");
    let (name, strategy, _) = pick(&no_table, &slice, odd);
    assert_eq!(strategy, Strategy::Padded);
    assert!(name.contains("wgmma"), "{name}");
}

#[test]
fn a_call_no_variant_can_take_is_an_error_naming_the_rule() {
    let registry = registry();
    let shape = GemmShape::packed(64, 64, 64, Layout::Tn);
    let mut short = buffers(&shape);
    short[2].len -= 1;
    let plain = EpilogueArgs::default();
    let err = choose_with(&registry, &h200(), &shape, short, &plain).unwrap_err();
    assert!(err.contains("c holds 4095 elements"), "{err}");
    let err = choose_with(&registry, &Device { capability: [7, 0], ..h200() }, &shape, buffers(&shape), &plain).unwrap_err();
    assert_eq!(err, "the registry's bf16 GEMM variants have code for sm_80, sm_90, sm_90a only, and NVIDIA H200 is compute capability 7.0");
}

#[test]
fn an_epilogue_call_takes_the_table_pick_with_that_epilogue() {
    let registry = registry();
    let shape = GemmShape::packed(4096, 4096, 4096, Layout::Tn);
    let bias = Buffer { len: 4096, addr: ALIGNED };
    let gelu = EpilogueArgs { activation: act("gelu_tanh"), bias: Some(bias), ..EpilogueArgs::default() };
    // The table ranks the unchecked 128x256 variant first, which has no epilogue sibling; the
    // second has one.
    let choice = choose_with(&registry, &h200(), &shape, buffers(&shape), &gelu).unwrap();
    assert_eq!(choice.kernel.name(), "gemm_tn_128x256x64_wgmma_w12_gelu_tanh");
    assert!(choice.reason.contains("rank 2 of 3"), "{}", choice.reason);
    // α and β alone go to a linear variant; a plain call to the one without an epilogue.
    let scaled = EpilogueArgs { alpha: 2.0, beta: 1.0, ..EpilogueArgs::default() };
    assert_eq!(
        choose_with(&registry, &h200(), &shape, buffers(&shape), &scaled).unwrap().kernel.name(),
        "gemm_tn_128x256x64_wgmma_w12_linear"
    );
    let plain = choose_with(&registry, &h200(), &shape, buffers(&shape), &EpilogueArgs::default()).unwrap();
    assert_eq!(plain.kernel.name(), "gemm_tn_128x256x64_wgmma_w12_unchecked");
    // The cost model, too, picks only variants applying the activation.
    let a100 = Device { name: "NVIDIA A100-SXM4-80GB".into(), capability: [8, 0], sms: 108, clocks: None };
    let choice = choose_with(&registry, &a100, &shape, buffers(&shape), &gelu).unwrap();
    assert_eq!(choice.kernel.name(), "gemm_tn_128x128x32_gelu_tanh");
    // No nn variant has an epilogue: A moves into a row-major copy and a tn variant applies it
    // (C stays in place, so its bias is still per column).
    let nn = GemmShape::packed(4096, 4096, 4096, Layout::Nn);
    let choice = choose_with(&registry, &h200(), &nn, buffers(&nn), &gelu).unwrap();
    assert_eq!((choice.strategy, choice.kernel.layout().unwrap()), (Strategy::Padded, Layout::Tn), "{}", choice.reason);
    assert!(choice.kernel.name().ends_with("_gelu_tanh"), "{}", choice.kernel.name());
    // An epilogue with C computed transposed (C's rows unaligned) has no variant to run on.
    let odd_c = GemmShape { ldc: 4097, ..nn };
    let err = choose_with(&registry, &h200(), &odd_c, buffers(&odd_c), &gelu).unwrap_err();
    assert!(err.contains("no bf16 nn variant with epilogue gelu_tanh"), "{err}");
}

#[test]
fn an_unaligned_operand_already_in_the_served_order_is_moved_twice_not_refused() {
    let registry = registry();
    let bias = Buffer { len: 4096, addr: ALIGNED };
    let gelu = EpilogueArgs { activation: act("gelu_tanh"), bias: Some(bias), ..EpilogueArgs::default() };
    // Epilogues are served in tn only. nn with an odd ldb: B is column-major as tn needs, but
    // its rows are not 16-byte multiples; tt with an lda not a multiple of 8, likewise for A.
    let nn = GemmShape { ldb: 4097, ..GemmShape::packed(4096, 4096, 4096, Layout::Nn) };
    let tt = GemmShape { lda: 4100, ..GemmShape::packed(4096, 4096, 4096, Layout::Tt) };
    // tn with both odd, written in f32: only wgmma variants (16-byte rows) write f32 with an
    // epilogue, so A and B both move twice.
    let tn = GemmShape { lda: 4097, ldb: 4097, ..GemmShape::packed(4096, 4096, 4096, Layout::Tn) };
    let f32_out = EpilogueArgs { out: Some(Dtype::F32), ..gelu };
    for (shape, epilogue) in [(nn, &gelu), (tt, &gelu), (tn, &f32_out)] {
        let choice = choose_with(&registry, &h200(), &shape, buffers(&shape), epilogue)
            .unwrap_or_else(|err| panic!("{:?} ld {} {}: {err}", shape.layout, shape.lda, shape.ldb));
        assert_eq!((choice.strategy, choice.kernel.layout().unwrap()), (Strategy::Padded, Layout::Tn), "{}", choice.reason);
        assert!(choice.kernel.name().contains("_gelu_tanh"), "{}", choice.kernel.name());
    }
}

#[test]
fn epilogue_arguments_a_variant_cannot_apply_are_refused() {
    let registry = registry();
    let shape = GemmShape::packed(256, 512, 128, Layout::Tn);
    let built = |name: &str| registry.kernel(name).unwrap().info().clone();
    let plan = |name: &str, epilogue: &EpilogueArgs| plan_gemm_with(&built(name), Dtype::Bf16, &shape, buffers(&shape), epilogue, 132);
    let bias = Some(Buffer { len: 512, addr: ALIGNED });
    let err = plan("gemm_tn_128x128x32", &EpilogueArgs { bias, ..EpilogueArgs::default() }).unwrap_err();
    assert!(err.contains("passes `bias`, which this variant does not apply") && err.contains("epilogue none"), "{err}");
    let err = plan("gemm_tn_128x128x32", &EpilogueArgs { beta: 0.5, ..EpilogueArgs::default() }).unwrap_err();
    assert!(err.contains("beta = 0.5") && err.contains("computes with beta = 0"), "{err}");
    let err = plan("gemm_tn_128x128x32_relu", &EpilogueArgs { activation: act("silu"), bias, ..EpilogueArgs::default() }).unwrap_err();
    assert!(err.contains("applies epilogue relu, but the call asks for activation silu (epilogue silu)"), "{err}");
    let short = Some(Buffer { len: 511, addr: ALIGNED });
    let err =
        plan("gemm_tn_128x128x32_relu", &EpilogueArgs { activation: act("relu"), bias: short, ..EpilogueArgs::default() }).unwrap_err();
    assert!(err.contains("bias holds 511 elements, but it takes n = 512 of them"), "{err}");
    let err =
        plan("gemm_tn_128x128x32_relu", &EpilogueArgs { activation: act("relu"), alpha: f32::NAN, ..EpilogueArgs::default() }).unwrap_err();
    assert!(err.contains("scalar `alpha` = NaN is not a finite number"), "{err}");
    let fine = EpilogueArgs {
        activation: act("relu"),
        alpha: 0.5,
        beta: 2.0,
        bias,
        row_bias: Some(Buffer { len: 256, addr: ALIGNED }),
        ..EpilogueArgs::default()
    };
    assert!(plan("gemm_tn_128x128x32_relu", &fine).unwrap().is_some());
}

#[test]
fn fp8_calls_go_to_the_fp8_variants_of_their_output_type_and_are_refused_elsewhere() {
    let registry = registry();
    let shape = GemmShape::packed(4096, 4096, 4096, Layout::Tn);
    let buffers = Buffer::unallocated(shape.spans());
    let call = |dtype, epilogue| GemmCall { dtype, shape: &shape, buffers, epilogue };
    let bf16_out = EpilogueArgs { out: Some(Dtype::Bf16), scales: [0.5, 4.0], ..EpilogueArgs::default() };
    let choice = choose(&registry, &h200(), &call(Dtype::E4m3, &bf16_out)).unwrap();
    assert!(choice.kernel.name().starts_with("gemm_tn_128x256x128_e4m3_wgmma_w12_outbf16"), "{}: {}", choice.kernel.name(), choice.reason);
    let f16_out = EpilogueArgs { out: Some(Dtype::F16), ..EpilogueArgs::default() };
    let choice = choose(&registry, &h200(), &call(Dtype::E5m2, &f16_out)).unwrap();
    assert_eq!(choice.kernel.operand_dtype("c"), Some(Dtype::F16));
    let f32_out = EpilogueArgs { out: Some(Dtype::F32), ..EpilogueArgs::default() };
    let choice = choose(&registry, &h200(), &call(Dtype::E4m3, &f32_out)).unwrap();
    assert_eq!(choice.kernel.operand_dtype("c"), Some(Dtype::F32));
    // No variant writes fp8: the refusal names the output type.
    let fp8_out = EpilogueArgs { out: Some(Dtype::E5m2), ..EpilogueArgs::default() };
    let refused = choose(&registry, &h200(), &call(Dtype::E4m3, &fp8_out)).unwrap_err();
    assert!(refused.contains("writing e5m2"), "{refused}");
    // bf16 inputs with f32 C in nn: an mma variant writes it directly. Without those, only tn
    // variants write f32, so the call moves A and B into tn copies, though bf16 nn variants
    // (writing bf16) exist.
    let nn = GemmShape::packed(4096, 4096, 4096, Layout::Nn);
    let to_f32 = GemmCall { dtype: Dtype::Bf16, shape: &nn, buffers: Buffer::unallocated(nn.spans()), epilogue: &f32_out };
    let choice = choose(&registry, &h200(), &to_f32).unwrap();
    assert_eq!((choice.strategy, choice.kernel.variant().backend.as_str()), (Strategy::Direct, "mma"), "{}", choice.reason);
    assert_eq!(choice.kernel.operand_dtype("c"), Some(Dtype::F32));
    let no_mma_f32 = registry.kernels().filter(|k| k.variant().backend != "mma" || k.operand_dtype("c") != Some(Dtype::F32));
    let tables = registry.family("gemm").unwrap().tables().to_vec();
    let without = Registry::new(Path::new("registry"), no_mma_f32.map(|k| k.info().clone()).collect()).with_family_tables(tables).unwrap();
    let choice = choose(&without, &h200(), &to_f32).unwrap();
    assert_eq!((choice.strategy, choice.kernel.layout().unwrap()), (Strategy::Padded, Layout::Tn), "{}", choice.reason);
    assert_eq!(choice.kernel.operand_dtype("c"), Some(Dtype::F32));
    // No fp8 variant computes nn: A and B move into K-major copies (1-byte transposes) and the
    // tn variant runs on them; aligned 16-bit calls never move (their layouts all have variants).
    let nn = GemmShape::packed(4096, 4096, 4096, Layout::Nn);
    let nn_call = GemmCall { dtype: Dtype::E4m3, shape: &nn, buffers: Buffer::unallocated(nn.spans()), epilogue: &bf16_out };
    let choice = choose(&registry, &h200(), &nn_call).unwrap();
    assert_eq!((choice.strategy, choice.kernel.layout().unwrap()), (Strategy::Padded, Layout::Tn), "{}", choice.reason);
    assert_eq!(choice.transpose.as_ref().map(|t| t.name()), Some("transpose_128x64_e4m3"));
    let bf16_nn = GemmCall { dtype: Dtype::Bf16, epilogue: &EpilogueArgs::default(), ..nn_call };
    assert_eq!(choose(&registry, &h200(), &bf16_nn).unwrap().strategy, Strategy::Direct);
    // 8-bit wgmma needs sm_90a: an A100 gets the rule, not a launch.
    let a100 = Device { name: "NVIDIA A100".into(), capability: [8, 0], sms: 108, clocks: None };
    let err = choose(&registry, &a100, &call(Dtype::E4m3, &bf16_out)).unwrap_err();
    assert_eq!(err, "the registry's e4m3 GEMM variants have code for sm_90a only, and NVIDIA A100 is compute capability 8.0");
}

#[test]
fn per_tensor_scales_are_checked_and_taken_by_fp8_variants_only() {
    let plan = |name: &str, dtype, epilogue: &EpilogueArgs| {
        let registry = registry();
        let kernel = registry.kernel(name).unwrap();
        let shape = GemmShape::packed(256, 256, 256, Layout::Tn);
        plan_gemm_with(kernel.info(), dtype, &shape, Buffer::unallocated(shape.spans()), epilogue, 132)
    };
    let fp8 = "gemm_tn_128x256x128_e4m3_wgmma_w12_outbf16";
    let scaled = |scales| EpilogueArgs { out: Some(Dtype::Bf16), scales, ..EpilogueArgs::default() };
    assert!(plan(fp8, Dtype::E4m3, &scaled([0.5, 3.0])).unwrap().is_some());
    assert_eq!(plan(fp8, Dtype::E4m3, &scaled([f32::INFINITY, 1.0])).unwrap_err(), "scalar `scale_a` = inf is not a finite number");
    assert_eq!(plan(fp8, Dtype::E4m3, &scaled([1.0, f32::NAN])).unwrap_err(), "scalar `scale_b` = NaN is not a finite number");
    // C must be of the variant's output type.
    let err = plan(fp8, Dtype::E4m3, &EpilogueArgs::default()).unwrap_err();
    assert_eq!(err, "it takes bf16 elements for c, but the buffer holds e4m3");
    // A 16-bit variant computes with scales of 1.
    let err =
        plan("gemm_tn_128x256x64_wgmma_w12", Dtype::Bf16, &EpilogueArgs { scales: [2.0, 1.0], ..EpilogueArgs::default() }).unwrap_err();
    assert!(err.starts_with("the call passes scale_a = 2, but this variant does not apply `scale_a`"), "{err}");
}

#[test]
fn mixed_fp8_calls_go_to_the_variants_reading_b_as_its_type() {
    let registry = registry();
    let choose_for = |dtype, shape: &GemmShape, epilogue: &EpilogueArgs| {
        let call = GemmCall { dtype, shape, buffers: Buffer::unallocated(shape.spans()), epilogue };
        choose(&registry, &h200(), &call)
    };
    let tn = GemmShape::packed(4096, 4096, 4096, Layout::Tn);
    let by_e5m2 = EpilogueArgs { out: Some(Dtype::Bf16), b: Some(Dtype::E5m2), scales: [0.5, 2.0], ..EpilogueArgs::default() };
    let choice = choose_for(Dtype::E4m3, &tn, &by_e5m2).unwrap();
    assert!(
        choice.kernel.name().starts_with("gemm_tn_128x256x128_e4m3_wgmma_w12_b_e5m2_outbf16"),
        "{}: {}",
        choice.kernel.name(),
        choice.reason
    );
    let by_e4m3 = EpilogueArgs { out: Some(Dtype::F32), b: Some(Dtype::E4m3), ..EpilogueArgs::default() };
    let choice = choose_for(Dtype::E5m2, &GemmShape::packed(1000, 1040, 784, Layout::Tn), &by_e4m3).unwrap();
    assert_eq!(
        [choice.kernel.variant().dtype, choice.kernel.operand_dtype("b").unwrap(), choice.kernel.operand_dtype("c").unwrap()],
        [Dtype::E5m2, Dtype::E4m3, Dtype::F32]
    );
    // Layouts with MN-major operands move them into K-major copies: B's transposes (of A's
    // 8-bit type) move its bytes as they are.
    let nn = GemmShape::packed(4096, 4096, 4096, Layout::Nn);
    let choice = choose_for(Dtype::E4m3, &nn, &by_e5m2).unwrap();
    assert_eq!((choice.strategy, choice.kernel.operand_dtype("b")), (Strategy::Padded, Some(Dtype::E5m2)), "{}", choice.reason);
    // No variant multiplies bf16 by f16: the refusal names both types.
    let by_f16 = EpilogueArgs { b: Some(Dtype::F16), ..EpilogueArgs::default() };
    let refused = choose_for(Dtype::Bf16, &tn, &by_f16).unwrap_err();
    assert!(refused.starts_with("no bf16 by f16 tn variant "), "{refused}");
    // A variant checks B's type like any operand's.
    let kernel = registry.kernel("gemm_tn_128x256x128_e4m3_wgmma_w12_b_e5m2_outbf16").unwrap();
    let plan = |epilogue: &EpilogueArgs| plan_gemm_with(kernel.info(), Dtype::E4m3, &tn, Buffer::unallocated(tn.spans()), epilogue, 132);
    assert!(plan(&by_e5m2).unwrap().is_some());
    let same = EpilogueArgs { b: None, ..by_e5m2 };
    assert_eq!(plan(&same).unwrap_err(), "it takes e5m2 elements for b, but the buffer holds e4m3");
}
