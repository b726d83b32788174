//! Property tests: no GEMM or transpose check, planner or dispatcher function panics,
//! overflows or hangs on any shape, stride, address or manifest, and what they accept stays
//! inside the buffers.
//! Run in debug, where an overflow would panic.

use proptest::prelude::*;
use std::path::Path;
use tilesmith_gemm::table::{Alignment, Strategy as Pick};
use tilesmith_gemm::{
    check_gemm_call, plan_gemm, plan_gemm_with, plan_transpose, Activation, Batch, EpilogueArgs, GemmShape, TransposeShape,
};
use tilesmith_gemm::{choose, dispatch};
use tilesmith_runtime::{Buffer, Layout, Registry};
use tilesmith_spec::manifest::Check;
use tilesmith_spec::tuning::Device;
use tilesmith_spec::{Built, Dtype, GridRule, Manifest};

/// An H100's and an H200's shared memory a block.
const SMEM_PER_BLOCK: u32 = 232_448;

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

fn layout() -> impl Strategy<Value = Layout> {
    prop::sample::select(Layout::ALL.to_vec())
}

fn dtype() -> impl Strategy<Value = Dtype> {
    prop::sample::select(Dtype::ALL.iter().copied().filter(|d| !d.is_integer()).collect::<Vec<_>>())
}

/// One problem mostly; else a batch of any count and strides.
fn batch() -> impl Strategy<Value = Batch> {
    prop_oneof![3 => Just(Batch::ONE), 1 => (size(), size(), size(), size()).prop_map(|(count, a, b, c)| Batch { count, strides: [a, b, c] })]
}

fn gemm_shape() -> impl Strategy<Value = GemmShape> {
    (size(), size(), size(), size(), size(), size(), layout(), any::<bool>(), batch()).prop_map(
        |(m, n, k, lda, ldb, ldc, layout, packed, batch)| {
            if packed {
                GemmShape::packed(m % 5000, n % 5000, k % 5000, layout).batched(batch.count % 100)
            } else {
                GemmShape { m, n, k, lda, ldb, ldc, layout, batch }
            }
        },
    )
}

fn h100() -> Device {
    Device { name: "NVIDIA H100 80GB HBM3".into(), capability: [9, 0], sms: 132, clocks: None }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn planning_a_gemm_never_panics_and_never_reaches_past_a_buffer(
        index in any::<prop::sample::Index>(), dtype in dtype(), shape in gemm_shape(),
        buffers in [buffer(), buffer(), buffer()], sms in any::<u32>(),
    ) {
        let variants = shipped();
        let built = index.get(&variants);
        if let Ok(Some(launch)) = plan_gemm(built, dtype, &shape, buffers, sms) {
            let spans = shape.spans();
            for i in 0..3 {
                prop_assert!(spans[i] <= buffers[i].len, "operand {i} spans {} of {}", spans[i], buffers[i].len);
            }
            prop_assert!(launch.grid.iter().all(|&g| g >= 1) && launch.grid[1] <= 65_535 && launch.grid[0] <= i32::MAX as u32);
            prop_assert!(shape.m.max(shape.n).max(shape.k) <= i32::MAX as usize);
        }
        let _ = check_gemm_call(&shape, buffers);
    }

    #[test]
    fn planning_a_transpose_never_panics(
        index in any::<prop::sample::Index>(), dtype in dtype(), m in size(), n in size(), ldx in size(), ldy in size(),
        buffers in [buffer(), buffer()], sms in any::<u32>(),
    ) {
        let variants = shipped();
        let shape = TransposeShape { m, n, ldx, ldy };
        if let Ok(Some(_)) = plan_transpose(index.get(&variants), dtype, &shape, buffers, sms) {
            let spans = shape.spans();
            prop_assert!(spans[0] <= buffers[0].len && spans[1] <= buffers[1].len);
        }
    }

    #[test]
    fn the_dispatcher_never_panics_and_picks_only_what_takes_the_call(
        dtype in dtype(), shape in gemm_shape(), buffers in [buffer(), buffer(), buffer()],
        sms in 1u32..200, ld in any::<usize>(), addr in any::<u64>(),
        activation in prop_oneof![Just("none"), Just("relu"), Just("gelu_tanh"), Just("gelu_erf"), Just("silu"), Just("tanh")], bias in proptest::option::of(buffer()), beta in prop_oneof![Just(0.0f32), any::<f32>()],
    ) {
        let registry = Registry::new(Path::new("."), shipped());
        let device = Device { sms, ..h100() };
        let _ = dispatch::misaligned(dtype, ld, addr);
        let _ = dispatch::alignment(dtype, &shape, &buffers);
        let epilogue = EpilogueArgs { activation: Activation::named(activation).unwrap(), beta, bias, ..EpilogueArgs::default() };
        let call = dispatch::GemmCall { dtype, shape: &shape, buffers, epilogue: &epilogue };
        let chooser = registry.family("gemm").unwrap();
        if let Ok(choice) = choose(chooser, &device, SMEM_PER_BLOCK, &call) {
            // A direct pick runs on the call as the dispatcher sees it (`Choice::run`).
            let seen = dispatch::canonical(dtype, &shape);
            if choice.strategy == Pick::Direct {
                prop_assert!(plan_gemm_with(choice.kernel.info(), dtype, &seen, buffers, &epilogue, sms).is_ok());
            }
            for strategy in [Pick::Direct, Pick::Padded] {
                let _ = dispatch::estimate_seconds(choice.kernel.info(), &device, dtype, &shape, &buffers, strategy);
            }
        }
        let _ = dispatch::by_cost(registry.kernels(), &device, &call);
    }

    /// Any integer of a manifest entry changed to anything: either the manifest's rules refuse
    /// it, or planning with it cannot panic.
    #[test]
    fn manifests_with_any_integers_are_refused_or_planned_safely(
        index in any::<prop::sample::Index>(), field in 0usize..9, value in prop_oneof![Just(0u32), 1u32..300, any::<u32>()],
        shape in gemm_shape(), sms in any::<u32>(),
    ) {
        let variants = shipped();
        let mut built = index.get(&variants).clone();
        let entry = &mut built.entry;
        match field {
            0 => entry.requires.ld_multiple = value,
            1 => {
                entry.requires.multiples.insert(["m", "n", "k"][(value % 3) as usize].into(), value / 3);
            }
            2 => entry.requires.ptr_align_bytes = value,
            3 => entry.launch.block[(value % 3) as usize] = value / 3,
            4 => entry.launch.cluster[0] = value,
            5 => entry.launch.grid = GridRule::TilesMn { tm: value, tn: value / 2 },
            6 => entry.launch.grid = GridRule::Persistent { tm: value, tn: 128 },
            7 => entry.launch.dynamic_smem_bytes = tilesmith_spec::Expr::constant(u64::from(value)),
            _ => entry.variant.warps = value,
        }
        let spans = shape.spans();
        let buffers = spans.map(|len| Buffer { len, addr: 0x7f00_0000_0000 });
        if field == 0 && value == 0 {
            prop_assert!(built.check().unwrap_err().contains("ld_multiple must be at least 1"));
        }
        if built.check().is_ok() {
            let _ = plan_gemm(&built, built.entry.variant.dtype, &shape, buffers, sms);
            let t = TransposeShape::packed(shape.m, shape.n);
            let _ = plan_transpose(&built, built.entry.variant.dtype, &t, t.spans().map(|len| Buffer { len, addr: 0x7f00_0000_0000 }), sms);
        }
    }
}

#[test]
fn shapes_at_the_limits_of_the_types_are_refused_or_planned_without_overflow() {
    let variants = shipped();
    let all = [Buffer { len: usize::MAX, addr: 0x7f00_0000_0000 }; 3];
    let huge = GemmShape { m: 1, n: 16, k: 16, lda: 1 << 63, ldb: 16, ldc: 16, layout: Layout::Tn, batch: Batch::ONE };
    let big = GemmShape::packed(i32::MAX as usize, i32::MAX as usize, i32::MAX as usize, Layout::Tn);
    for built in &variants {
        for shape in [huge, big, GemmShape { lda: usize::MAX, ..huge }] {
            let _ = plan_gemm(built, built.entry.variant.dtype, &shape, all, 132);
        }
    }
    assert!(dispatch::misaligned(Dtype::F32, usize::MAX, 0));
    let registry = Registry::new(Path::new("."), variants);
    let chooser = registry.family("gemm").unwrap();
    for shape in [huge, big, GemmShape { lda: usize::MAX, ..huge }] {
        let _ = choose(
            chooser,
            &h100(),
            SMEM_PER_BLOCK,
            &dispatch::GemmCall { dtype: Dtype::Bf16, shape: &shape, buffers: all, epilogue: &EpilogueArgs::default() },
        );
    }
    assert_eq!(GridRule::Persistent { tm: 128, tn: 256 }.grid(u64::MAX, u64::MAX, 1, 132, [2, 1, 1]), None);
    assert_eq!(dispatch::alignment(Dtype::Bf16, &huge, &all), Alignment::Aligned);
}

#[test]
fn packed_shapes_with_a_zero_are_nothing_to_do_in_every_layout() {
    for built in shipped().iter().filter(|b| b.entry.variant.family == "gemm" && b.entry.variant.is_checked()) {
        let layout = built.entry.variant.word("layout").and_then(Layout::parse).expect("a GEMM has a layout");
        let activation = Activation::named(Activation::epilogue_of(&built.entry.variant)).unwrap();
        let dtype = built.entry.variant.dtype;
        let [b, out] = ["b", "c"].map(|name| built.entry.operand_dtype(name).filter(|&d| d != dtype));
        let epilogue = EpilogueArgs { activation, out, b, ..EpilogueArgs::default() };
        let plan = |shape: &GemmShape, buffers| plan_gemm_with(built, dtype, shape, buffers, &epilogue, 132);
        for (m, n) in [(0, 64), (64, 0), (0, 0)] {
            let shape = GemmShape::packed(m, n, 64, layout);
            let buffers = shape.spans().map(|len| Buffer { len, addr: 0x7f00_0000_0000 });
            assert_eq!(plan(&shape, buffers), Ok(None), "{} {m}x{n}", built.entry.variant.name);
        }
        let shape = GemmShape::packed(64, 64, 0, layout);
        let buffers = shape.spans().map(|len| Buffer { len, addr: 0x7f00_0000_0000 });
        let err = plan(&shape, buffers).unwrap_err();
        assert!(err.starts_with("K = 0 makes C = A·B all zeros"), "{err}");
    }
}
