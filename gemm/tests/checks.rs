//! GEMM's and transpose's launch checks through their typed wrappers (and so the runtime's
//! `plan_call` on the shipped GEMMs), and GEMM's tables in a registry, all without a GPU.

use std::path::Path;
use tilesmith_gemm::{Batch, GemmKernel, GemmShape, TransposeShape};
use tilesmith_runtime::{Arg, Buffer, Registry};
use tilesmith_spec::{Built, Dtype, Layout, Manifest, Param, ParamKind};

const ALIGNED: u64 = 0x7f00_0000_0000;

fn built(name: &str) -> Built {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../generated/manifest.json");
    let manifest: Manifest = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let entry = manifest.variants.into_iter().find(|e| e.variant.name == name).unwrap_or_else(|| panic!("{name} not shipped"));
    Built::unbuilt(entry)
}

/// A registry manifest made from the shipped generated manifest, without fatbins.
fn tempdir_with_registry() -> tempfile::TempDir {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../generated/manifest.json");
    let manifest: Manifest = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let registry = tilesmith_spec::Registry {
        format: manifest.format,
        project: None,
        variants: manifest.variants.into_iter().map(Built::unbuilt).collect(),
    };
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("manifest.json"), serde_json::to_string(&registry).unwrap()).unwrap();
    dir
}

fn buffers(shape: &GemmShape) -> [Buffer; 3] {
    Buffer::unallocated(shape.spans())
}

fn gemm(name: &str, dtype: Dtype, shape: GemmShape) -> Result<Option<tilesmith_runtime::Launch>, String> {
    tilesmith_gemm::plan_gemm(&built(name), dtype, &shape, buffers(&shape), 132)
}

#[test]
fn a_valid_gemm_gets_its_grid_from_the_manifest() {
    let shape = GemmShape::packed(300, 200, 77, Layout::Tn);
    let launch = gemm("gemm_tn_128x128x32", Dtype::Bf16, shape).unwrap().unwrap();
    assert_eq!(launch.grid, [2, 3, 1]);
    // The mma backend's 4 warps and 4 stages of (128 + 128) x 32 bf16.
    assert_eq!(launch.block, [128, 1, 1]);
    assert_eq!(launch.dynamic_smem_bytes, 65536);
    assert_eq!(gemm("gemm_tn_128x128x32", Dtype::Bf16, GemmShape::packed(0, 200, 77, Layout::Tn)), Ok(None));
}

#[test]
fn gemm_refusals_name_the_rule() {
    let tn = GemmShape::packed(256, 256, 256, Layout::Tn);
    assert_eq!(gemm("gemm_tn_128x128x32", Dtype::F32, tn).unwrap_err(), "it takes bf16 elements, but the buffers hold f32");
    assert_eq!(gemm("transpose_128x64", Dtype::Bf16, tn).unwrap_err(), "it is a kernel of family `transpose`, not of family `gemm`");
    assert_eq!(
        gemm("gemm_tn_128x128x32", Dtype::Bf16, GemmShape::packed(256, 256, 256, Layout::Nn)).unwrap_err(),
        "it computes layout tn, but the call is for layout nn"
    );
    assert_eq!(
        gemm("gemm_tn_128x128x32", Dtype::Bf16, GemmShape { lda: 255, ..tn }).unwrap_err(),
        "lda = 255 is less than 256, the length of a stored row of a (row-major, layout tn)"
    );
    let nn = GemmShape::packed(256, 128, 64, Layout::Nn);
    assert_eq!(
        gemm("gemm_nn_128x128x32", Dtype::Bf16, GemmShape { lda: 200, ..nn }).unwrap_err(),
        "lda = 200 is less than 256, the length of a stored row of a (column-major, layout nn)"
    );
    assert_eq!(
        gemm("gemm_tn_128x128x32_unchecked", Dtype::Bf16, GemmShape::packed(200, 256, 256, Layout::Tn)).unwrap_err(),
        "m = 200 is not a multiple of 128: unchecked variants take tile multiples only; use a checked variant"
    );
    assert_eq!(
        gemm("gemm_tn_128x128x32_unchecked", Dtype::Bf16, GemmShape::packed(256, 256, 48, Layout::Tn)).unwrap_err(),
        "k = 48 is not a multiple of 32: unchecked variants take tile multiples only; use a checked variant"
    );
    assert_eq!(
        gemm("gemm_tn_128x128x32_unchecked", Dtype::Bf16, GemmShape { ldc: 260, ..tn }).unwrap_err(),
        "ldc = 260 is not a multiple of 8 elements, as this unchecked variant assumes (16-byte rows)"
    );
    assert_eq!(
        gemm("gemm_tn_128x128x32", Dtype::Bf16, GemmShape::packed(3_000_000_000, 1, 1, Layout::Tn)).unwrap_err(),
        "m = 3000000000 does not fit the kernel's 32-bit parameter `M` (at most 2147483647)"
    );
}

#[test]
fn arguments_follow_the_parameter_list() {
    let shape = GemmShape { lda: 40, ..GemmShape::packed(300, 200, 32, Layout::Tn) };
    let launch = gemm("gemm_tn_128x128x32", Dtype::Bf16, shape).unwrap().unwrap();
    let [a, b, c] = buffers(&shape).map(|b| Arg::Pointer(b.addr));
    let one_problem = [Arg::I32(1), Arg::I64(0), Arg::I64(0), Arg::I64(0)];
    let sizes = [Arg::I32(300), Arg::I32(200), Arg::I32(32), Arg::I32(40), Arg::I32(32), Arg::I32(200)];
    assert_eq!(launch.args, [[a, b, c].as_slice(), &sizes, &one_problem].concat());

    // A parameter added to the contract is passed, and checked, with no change to the runtime.
    let mut built = built("gemm_tn_128x128x32");
    built.entry.launch.params.insert(0, Param { name: "ldc_again".into(), kind: ParamKind::I32 { value: "ldc".into() } });
    let planned = tilesmith_gemm::plan_gemm(&built, Dtype::Bf16, &shape, buffers(&shape), 132).unwrap().unwrap();
    assert_eq!(planned.args[0], Arg::I32(200));
    built.entry.launch.params.push(Param { name: "rows".into(), kind: ParamKind::I32 { value: "ldx".into() } });
    assert_eq!(
        tilesmith_gemm::plan_gemm(&built, Dtype::Bf16, &shape, buffers(&shape), 132).unwrap_err(),
        "its parameter `rows` wants ldx, which this call does not give"
    );
}

/// Leading dimensions past 2^31 with buffers long enough for them: they would wrap in the
/// kernels' `int` parameters, so every one is refused, naming the parameter.
#[test]
fn leading_dimensions_past_the_parameter_range_are_refused() {
    for ld in [(1usize << 31) + 8, (1usize << 32) + 16] {
        let tn = GemmShape::packed(2, 64, 64, Layout::Tn);
        for (shape, name) in
            [(GemmShape { lda: ld, ..tn }, "lda"), (GemmShape { ldb: ld, ..tn }, "ldb"), (GemmShape { ldc: ld, ..tn }, "ldc")]
        {
            let spans = shape.spans();
            assert!(spans.iter().any(|&s| s > ld), "the buffer is long enough for {name} = {ld}");
            for variant in ["gemm_tn_128x128x32", "gemm_tn_128x128x32_f32_simt_w8_s2"] {
                let dtype = if variant.contains("f32") { Dtype::F32 } else { Dtype::Bf16 };
                assert_eq!(
                    gemm(variant, dtype, shape).unwrap_err(),
                    format!("{name} = {ld} does not fit the kernel's 32-bit parameter `{name}` (at most 2147483647)")
                );
            }
        }
        let shape = TransposeShape { ldx: ld, ..TransposeShape::packed(2, 64) };
        let buffers = Buffer::unallocated(shape.spans());
        assert_eq!(
            tilesmith_gemm::plan_transpose(&built("transpose_64x64_f32"), Dtype::F32, &shape, buffers, 132).unwrap_err(),
            format!("ldx = {ld} does not fit the kernel's 32-bit parameter `ldx` (at most 2147483647)")
        );
    }
}

#[test]
fn short_or_misaligned_buffers_are_refused() {
    let built = built("gemm_tn_128x128x32_unchecked");
    let shape = GemmShape::packed(128, 128, 32, Layout::Tn);
    let [a, b, c] = buffers(&shape);
    let short = Buffer { len: a.len - 1, ..a };
    assert_eq!(
        tilesmith_gemm::plan_gemm(&built, Dtype::Bf16, &shape, [short, b, c], 132).unwrap_err(),
        "a holds 4095 elements, but 128 rows of 32 with lda = 32 span 4096"
    );
    let shifted = Buffer { addr: ALIGNED + 2, ..c };
    assert_eq!(
        tilesmith_gemm::plan_gemm(&built, Dtype::Bf16, &shape, [a, b, shifted], 132).unwrap_err(),
        format!("c starts at {:#x}, which is not 16-byte aligned", ALIGNED + 2)
    );
    // A buffer that would wrap past the top of the address space is refused as such.
    let wrapping = Buffer { addr: u64::MAX - 4095, ..c };
    assert_eq!(
        tilesmith_gemm::plan_gemm(&built, Dtype::Bf16, &shape, [a, b, wrapping], 132).unwrap_err(),
        format!("c starts at {:#x} and holds 16384 elements: it would run past the top of the address space", u64::MAX - 4095)
    );
    // A checked variant takes any element-aligned address and odd leading dimensions.
    let checked = built_checked_odd();
    assert!(checked.is_ok(), "{checked:?}");
}

fn built_checked_odd() -> Result<Option<tilesmith_runtime::Launch>, String> {
    let shape = GemmShape { lda: 4099, ldb: 4099, ldc: 4097, ..GemmShape::packed(4095, 4097, 4099, Layout::Tn) };
    let [a, b, c] = buffers(&shape);
    let c = Buffer { addr: ALIGNED + 2, ..c };
    tilesmith_gemm::plan_gemm(&built("gemm_tn_128x128x32"), Dtype::Bf16, &shape, [a, b, c], 132)
}

#[test]
fn a_quantity_past_the_parameter_range_is_named_before_any_span() {
    let built = built("softmax");
    let call = |rows: u64| {
        let call = tilesmith_runtime::Call::default()
            .quantity("rows", rows)
            .quantity("cols", 1024)
            .quantity("ldx", 1024)
            .quantity("ldy", 1024)
            .operand("x", Dtype::Bf16, Buffer { len: 1 << 40, addr: 1 << 48 })
            .operand("y", Dtype::Bf16, Buffer { len: 1 << 40, addr: 2 << 48 });
        tilesmith_runtime::plan_call(&built, &call, 132)
    };
    let message = call(u64::MAX).unwrap_err();
    assert!(message.contains("rows = 18446744073709551615 does not fit the kernel's 32-bit parameter"), "{message}");
}

#[test]
fn transpose_checks() {
    let plan = |name: &str, shape: TransposeShape, lens: [usize; 2]| {
        tilesmith_gemm::plan_transpose(&built(name), Dtype::F32, &shape, Buffer::unallocated(lens), 132)
    };
    let shape = TransposeShape::packed(100, 70);
    assert_eq!(TransposeShape { ldx: 75, ldy: 101, ..shape }.spans(), [99 * 75 + 70, 69 * 101 + 100]);
    assert_eq!(plan("transpose_64x64_f32", shape, [7000, 7000]).unwrap().unwrap().grid, [2, 2, 1]);
    assert_eq!(
        plan("transpose_64x64_f32", TransposeShape { ldy: 99, ..shape }, [7000, 7000]).unwrap_err(),
        "ldy = 99 is less than 100, the length of a stored row of y (row-major)"
    );
    assert_eq!(
        plan("transpose_64x64_f32", shape, [7000, 6999]).unwrap_err(),
        "y holds 6999 elements, but 70 rows of 100 with ldy = 100 span 7000"
    );
    assert_eq!(
        plan("transpose_64x64_f32_unchecked", shape, [7000, 7000]).unwrap_err(),
        "m = 100 is not a multiple of 64: unchecked variants take tile multiples only; use a checked variant"
    );
    assert_eq!(
        plan("gemm_tn_128x128x32_f32_simt_w8_s2", shape, [7000, 7000]).unwrap_err(),
        "it is a kernel of family `gemm`, not of family `transpose`"
    );
}

#[test]
fn a_split_k_gemm_launches_a_cluster_per_tile_whole() {
    let shape = GemmShape::packed(16, 4096, 4096, Layout::Tn);
    let launch = gemm("gemm_tn_64x128x64_wgmma_w8_s6_splitk4", Dtype::Bf16, shape).unwrap().unwrap();
    assert_eq!((launch.grid, launch.cluster, launch.block), ([128, 1, 1], [4, 1, 1], [256, 1, 1]), "32 tiles, 4 blocks each");
    assert!(!launch.persistent, "a split-K grid is launched whole, never capped to resident clusters");
    let persistent =
        gemm("gemm_tn_128x256x64_wgmma_w12_c2", Dtype::Bf16, GemmShape::packed(4096, 4096, 4096, Layout::Tn)).unwrap().unwrap();
    assert!(persistent.persistent);
    // Split-K writes C from registers: a pointer, and no tensor map of C.
    let kinds: Vec<&str> = launch
        .args
        .iter()
        .map(|a| match a {
            Arg::Pointer(_) => "pointer",
            Arg::I32(_) => "i32",
            Arg::I64(_) => "i64",
            Arg::TensorMap(_) => "map",
            Arg::Workspace { .. } => "workspace",
            Arg::U32(_) | Arg::F32(_) | Arg::F64(_) => "scalar",
        })
        .collect();
    assert_eq!(kinds, ["map", "map", "pointer", "i32", "i32", "i32", "i32", "i32", "i64", "i64", "i64"]);
}

#[test]
fn a_hopper_gemm_gets_tensor_maps_of_its_operands_as_stored_and_a_persistent_grid() {
    let tn = GemmShape { lda: 4096, ..GemmShape::packed(4000, 3000, 4000, Layout::Tn) };
    let launch = gemm("gemm_tn_128x256x64_wgmma_w12", Dtype::Bf16, tn).unwrap().unwrap();
    assert_eq!(launch.grid, [128, 1, 1], "384 tiles: 3 rounds of 128 blocks");
    assert_eq!(launch.block, [384, 1, 1]);
    let Arg::TensorMap(a) = launch.args[0] else { panic!("{:?}", launch.args[0]) };
    assert_eq!((a.dims, a.strides_bytes[0], a.box_, a.swizzle_bytes), ([4000, 4000, 1, 1, 1], 8192, [64, 128, 1, 1, 1], 128));
    let Arg::TensorMap(b) = launch.args[1] else { panic!("{:?}", launch.args[1]) };
    assert_eq!((b.dims, b.box_), ([4000, 3000, 1, 1, 1], [64, 256, 1, 1, 1]));
    let Arg::TensorMap(c) = launch.args[2] else { panic!("{:?}", launch.args[2]) };
    assert_eq!((c.dims, c.strides_bytes[0], c.box_), ([3000, 4000, 1, 1, 1], 6000, [64, 64, 1, 1, 1]));

    // MN-major operands are mapped as stored, in 64-element boxes along their rows.
    let nt = GemmShape::packed(512, 1024, 256, Layout::Nt);
    let launch = gemm("gemm_nt_128x256x64_f16_wgmma_w12", Dtype::F16, nt).unwrap().unwrap();
    assert_eq!(launch.grid, [16, 1, 1]);
    let Arg::TensorMap(a) = launch.args[0] else { panic!() };
    assert_eq!((a.dims, a.box_), ([512, 256, 1, 1, 1], [64, 64, 1, 1, 1]));
    let Arg::TensorMap(b) = launch.args[1] else { panic!() };
    assert_eq!((b.dims, b.box_), ([1024, 256, 1, 1, 1], [64, 64, 1, 1, 1]));

    // Clusters of 2 blocks along M: the grid is whole clusters, at most one block per SM.
    let mut clustered = built("gemm_tn_128x256x64_wgmma_w12");
    clustered.entry.launch.cluster = [2, 1, 1];
    let plan = |shape: GemmShape| tilesmith_gemm::plan_gemm(&clustered, Dtype::Bf16, &shape, buffers(&shape), 132);
    let launch = plan(tn).unwrap().unwrap();
    assert_eq!((launch.grid, launch.cluster), ([128, 1, 1], [2, 1, 1]));
    // 3 tile rows make 2 cluster rows; 2 tile columns: 4 clusters, 8 blocks.
    assert_eq!(plan(GemmShape::packed(300, 304, 64, Layout::Tn)).unwrap().unwrap().grid, [8, 1, 1]);

    // TMA's 16-byte rows: an odd leading dimension is refused with the rule named.
    assert_eq!(
        gemm("gemm_tn_128x256x64_wgmma_w12", Dtype::Bf16, GemmShape::packed(4095, 4097, 4099, Layout::Tn)).unwrap_err(),
        "lda = 4099 is not a multiple of 8 elements, as this checked variant assumes (16-byte rows)"
    );
}

#[test]
fn a_strided_batch_is_mapped_per_problem_and_its_bad_strides_are_refused() {
    let one = GemmShape::packed(512, 512, 64, Layout::Tn);
    let batch = one.batched(64);
    assert_eq!(batch.batch.strides, [512 * 64, 512 * 64, 512 * 512]);
    assert_eq!(batch.spans(), [64 * 512 * 64, 64 * 512 * 64, 64 * 512 * 512]);

    // Hopper: the tiles of every problem share one persistent grid, each operand mapped in 3D.
    let launch = gemm("gemm_tn_128x256x64_wgmma_w12", Dtype::Bf16, batch).unwrap().unwrap();
    assert_eq!(launch.grid, [128, 1, 1], "64 problems of 8 tiles: 4 rounds of 128 blocks");
    let Arg::TensorMap(a) = launch.args[0] else { panic!("{:?}", launch.args[0]) };
    assert_eq!((a.rank, a.dims, a.strides_bytes), (3, [64, 512, 64, 1, 1], [128, 512 * 64 * 2, 0, 0]));
    let Arg::TensorMap(c) = launch.args[2] else { panic!("{:?}", launch.args[2]) };
    assert_eq!((c.dims, c.strides_bytes), ([512, 512, 64, 1, 1], [1024, 512 * 512 * 2, 0, 0]));
    assert!(launch.args.contains(&Arg::I32(64)) && launch.args.contains(&Arg::I64(512 * 512)));
    // A stride of 0 shares B: its map holds one problem.
    let shared_b = one.with_batch(Batch { count: 64, strides: [512 * 64, 0, 512 * 512] });
    let launch = gemm("gemm_tn_128x256x64_wgmma_w12", Dtype::Bf16, shared_b).unwrap().unwrap();
    let Arg::TensorMap(b) = launch.args[1] else { panic!() };
    assert_eq!(b.dims, [64, 512, 1, 1, 1]);
    // One block per tile and problem elsewhere: the problems along z.
    assert_eq!(gemm("gemm_tn_128x128x32", Dtype::Bf16, batch).unwrap().unwrap().grid, [4, 4, 64]);
    assert_eq!(gemm("gemm_tn_128x128x32", Dtype::Bf16, one.batched(0)), Ok(None), "no problems, nothing to do");

    let refused = |name: &str, shape: GemmShape| gemm(name, Dtype::Bf16, shape).unwrap_err();
    let strides = |strides: [usize; 3]| one.with_batch(Batch { count: 3, strides });
    assert_eq!(
        refused("gemm_tn_128x128x32", strides([0, 0, 512 * 511])),
        "stride_c = 261632: the 3 problems' c would overlap, each spanning 262144 elements; stride_c must be at least 262144"
    );
    assert!(refused("gemm_tn_128x128x32", strides([0, 0, 0])).starts_with("stride_c = 0: the 3 problems' c would overlap"));
    assert_eq!(
        refused("gemm_tn_128x256x64_wgmma_w12", strides([4, 0, 512 * 512])),
        "stride_a = 4 elements puts the a of problem 1 8 bytes on, which is not 16-byte aligned as this checked variant needs"
    );
    assert_eq!(
        refused("gemm_tn_128x128x32", one.with_batch(Batch { count: 70_000, strides: [0, 0, 512 * 512] })),
        "70000 512×512 problem(s) need more blocks than a CUDA grid holds (at most 65535 problems)"
    );
    // A stride of 2^63 elements that buffers as long hold: its bytes overflow 64 bits (a
    // panic found by the properties); no buffer that long fits below the top of the address
    // space, which is the rule that refuses it.
    let huge = one.with_batch(Batch { count: 2, strides: [1 << 63, 0, 1 << 63] });
    let buffers = [
        Buffer { len: usize::MAX, addr: 0x1000_0000 },
        Buffer { len: 1 << 20, addr: 0x2000_0000 },
        Buffer { len: usize::MAX, addr: 0x3000_0000 },
    ];
    let err = tilesmith_gemm::plan_gemm(&built("gemm_tn_128x128x32"), Dtype::Bf16, &huge, buffers, 132).unwrap_err();
    assert!(err.contains("run past the top of the address space"), "{err}");
    // Buffers that hold one problem, not three.
    let short = tilesmith_gemm::plan_gemm(&built("gemm_tn_128x128x32"), Dtype::Bf16, &batch, Buffer::unallocated(one.spans()), 132);
    assert_eq!(short.unwrap_err(), "a holds 32768 elements, but 64 problems of 32768 elements, 32768 apart, span 2097152");
}

#[test]
fn an_input_overlapping_the_output_is_refused() {
    let shape = GemmShape::packed(256, 256, 256, Layout::Tn);
    let [a, b, c] = Buffer::unallocated(shape.spans());
    let inside_c = Buffer { addr: c.addr + 1024, ..a };
    let err = tilesmith_gemm::plan_gemm(&built("gemm_tn_128x128x32"), Dtype::Bf16, &shape, [inside_c, b, c], 132).unwrap_err();
    assert_eq!(
        err,
        "a (bytes 0x3000000000400..0x3000000020400) overlaps c (bytes 0x3000000000000..0x3000000020000), which the kernel writes while it reads a"
    );
}

#[test]
fn a_corrupt_tuning_table_is_an_error_naming_the_file() {
    let dir = tempdir_with_registry();
    let folder = dir.path().join("tuning/gemm");
    std::fs::create_dir_all(&folder).unwrap();
    let path = folder.join("NVIDIA_H200-132sm.json");
    std::fs::write(&path, r#"{"format": 1, "device": {"name": "NVIDIA H200"}}"#).unwrap();
    // A table that does not read as any family's keeps the registry from opening.
    let err = Registry::open(Some(dir.path())).unwrap_err().to_string();
    assert!(err.contains(&format!("{}: not a family tuning table (missing field", path.display())), "{err}");
    // One that reads as a family's but not as GEMM's: GEMM's policy refuses it as the registry opens.
    let classless = r#"{"format": 1, "family": "gemm", "device": {"name": "NVIDIA H200", "capability": [9, 0], "sms": 132},
        "compiler": "", "quantities": ["m", "n", "k"], "entries": [{"dtype": "bf16", "problem": [64, 64, 64], "baseline_ms": 1.0,
        "ranked": [{"variant": "gemm_tn_128x128x32", "ms": 1.0}]}]}"#;
    std::fs::write(&path, classless).unwrap();
    let err = Registry::open(Some(dir.path())).unwrap_err().to_string();
    let tuning = dir.path().join("tuning");
    assert!(
        err.starts_with(&format!("cannot read the registry at {}: tuning table gemm/NVIDIA_H200-132sm.json: entry 1", tuning.display()))
            && err.contains("needs a layout"),
        "{err}"
    );
}

#[test]
fn a_gemm_kernel_has_a_layout_and_another_family_none() {
    let registry = Registry::open(Some(tempdir_with_registry().path())).unwrap();
    assert_eq!(registry.kernel("gemm_tn_128x128x32").unwrap().layout().unwrap(), Layout::Tn);
    let err = registry.kernel("transpose_128x64").unwrap().layout().unwrap_err().to_string();
    assert_eq!(err, "kernel `transpose_128x64` refused the launch: it is a kernel of family `transpose` and has no GEMM layout");
}
