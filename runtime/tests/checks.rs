//! The registry and the no-GPU path, without a GPU (the launch checks are tried through GEMM's
//! wrappers in tilesmith-gemm's tests, and through calls by name in `properties.rs`).

use std::path::Path;
use tilesmith_runtime::{runs_on, Error, Gpu, Registry};
use tilesmith_spec::{Built, Manifest, Targets};

#[test]
fn architecture_compatibility() {
    let targets = Targets { sass: vec!["sm_80".into(), "sm_90".into()], ptx: "compute_80".into() };
    assert!(runs_on(&targets, (9, 0)));
    assert!(runs_on(&targets, (8, 6)));
    assert!(runs_on(&targets, (12, 0)), "through PTX");
    assert!(!runs_on(&targets, (7, 5)));
    let hopper = Targets { sass: vec!["sm_90a".into()], ptx: "compute_90a".into() };
    assert!(runs_on(&hopper, (9, 0)));
    assert!(!runs_on(&hopper, (10, 0)));
    assert!(!runs_on(&hopper, (8, 0)));
}

#[test]
fn registry_lookup_suggests_close_names_and_says_where_it_looked() {
    let missing = Path::new("/nonexistent/registry");
    match Registry::open(Some(missing)) {
        Err(Error::RegistryNotFound { looked }) => assert_eq!(looked, [missing.to_path_buf()]),
        other => panic!("expected RegistryNotFound, got {other:?}"),
    }
    let dir = tempdir_with_registry();
    let registry = Registry::open(Some(dir.path())).unwrap();
    assert_eq!(registry.kernel("gemm_tn_128x128x32").unwrap().name(), "gemm_tn_128x128x32");
    let err = registry.kernel("gemm_tn_128x128x3").unwrap_err().to_string();
    assert!(err.starts_with("unknown kernel `gemm_tn_128x128x3`; closest: gemm_tn_128x128x32"), "{err}");
}

/// The shipped generated manifest.
fn shipped_manifest() -> Manifest {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../generated/manifest.json");
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// The shipped manifest's entry of variant `name`.
fn shipped_entry(name: &str) -> tilesmith_spec::Entry {
    shipped_manifest().variants.into_iter().find(|e| e.variant.name == name).unwrap()
}

/// An rmsnorm call of rows × cols, rows packed, on these buffers of these element types.
fn rmsnorm_call(
    rows: u64,
    cols: u64,
    dtypes: [tilesmith_runtime::Dtype; 3],
    buffers: [tilesmith_runtime::Buffer; 3],
) -> tilesmith_runtime::Call {
    let ([tx, tw, ty], [x, w, y]) = (dtypes, buffers);
    tilesmith_runtime::Call::default()
        .operand("x", tx, x)
        .operand("w", tw, w)
        .operand("y", ty, y)
        .quantity("rows", rows)
        .quantity("cols", cols)
        .quantity("ldx", cols)
        .quantity("ldy", cols)
        .scalar("eps", 1e-5)
}

/// A registry manifest made from the shipped generated manifest, without fatbins.
fn tempdir_with_registry() -> tempfile::TempDir {
    let manifest = shipped_manifest();
    let registry = tilesmith_spec::Registry {
        format: manifest.format,
        project: None,
        variants: manifest.variants.into_iter().map(Built::unbuilt).collect(),
    };
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("manifest.json"), serde_json::to_string(&registry).unwrap()).unwrap();
    dir
}

/// What the driver itself says, asked directly: whether libcuda loads, and how many GPUs it sees.
fn driver_sees() -> (bool, usize) {
    if !unsafe { cudarc::driver::sys::is_culib_present() } {
        return (false, 0);
    }
    let count = cudarc::driver::result::init().and_then(|()| cudarc::driver::result::device::get_count());
    (true, count.map_or(0, |n| n.max(0) as usize))
}

#[test]
fn no_driver_or_no_gpu_is_an_error_value() {
    let (driver, gpus) = driver_sees();
    match (driver, gpus, Gpu::new(0)) {
        (false, _, Err(Error::NoDriver(_))) | (true, 0, Err(Error::NoGpu(_))) => {}
        (true, 1.., Ok(gpu)) => eprintln!("a GPU is present: {}", gpu.name()),
        (driver, gpus, other) => {
            panic!("driver present: {driver}, GPUs: {gpus}, but Gpu::new(0) gave {:?}", other.map(|g| g.name().to_string()))
        }
    }
    match (driver, Gpu::new(10_000)) {
        (false, Err(Error::NoDriver(_))) | (true, Err(Error::NoGpu(_))) => {}
        (driver, other) => panic!("driver present: {driver}, but Gpu::new(10000) gave {:?}", other.map(|g| g.name().to_string())),
    }
}

/// A registry named by TILESMITH_REGISTRY is that registry or an error, never another one. The
/// only test here that touches the environment.
#[test]
fn a_wrong_registry_variable_is_an_error_naming_it() {
    let empty = tempfile::tempdir().unwrap();
    let missing = empty.path().join("missing");
    let cases = [
        (missing.clone(), format!("TILESMITH_REGISTRY points to {}, which is not a folder", missing.display())),
        (
            empty.path().to_path_buf(),
            format!(
                "TILESMITH_REGISTRY points to {}, which holds no manifest.json: build one with `tilesmith build`",
                empty.path().display()
            ),
        ),
    ];
    for (dir, message) in cases {
        unsafe { std::env::set_var("TILESMITH_REGISTRY", &dir) };
        let result = Registry::open(None);
        unsafe { std::env::remove_var("TILESMITH_REGISTRY") };
        assert_eq!(result.unwrap_err().to_string(), message);
    }
    // Neither a folder nor the variable: an error, never the registry of the tilesmith checkout
    // the runtime was compiled in.
    let err = Registry::open(None).unwrap_err().to_string();
    assert!(err.starts_with("no registry given: pass its folder to Registry::open, set TILESMITH_REGISTRY to it, or embed one"), "{err}");
    let good = tempdir_with_registry();
    unsafe { std::env::set_var("TILESMITH_REGISTRY", good.path()) };
    let result = Registry::open(None);
    unsafe { std::env::remove_var("TILESMITH_REGISTRY") };
    assert_eq!(result.unwrap().dir(), Some(good.path()));
}

#[test]
fn a_corrupt_registry_manifest_is_an_error_naming_the_file() {
    let dir = tempdir_with_registry();
    let path = dir.path().join("manifest.json");
    let text = std::fs::read_to_string(&path).unwrap();
    std::fs::write(&path, &text[..text.len() / 2]).unwrap();
    let err = Registry::open(Some(dir.path())).unwrap_err().to_string();
    assert!(
        err.starts_with(&format!(
            "cannot read the registry at {}: does not parse as a tilesmith manifest (EOF while parsing",
            path.display()
        )),
        "{err}"
    );
    std::fs::write(&path, r#"{"format": 99, "variants": []}"#).unwrap();
    let err = Registry::open(Some(dir.path())).unwrap_err().to_string();
    assert!(err.ends_with("has format 99, but this version of tilesmith reads formats 3 to 4"), "{err}");
}

/// An embedded registry (what tilesmith-build writes for `include_registry!`) opens without
/// files: every kernel's fatbin comes from the program; a manifest that lists a fatbin that was
/// not embedded, or that does not parse, is an error naming the project it was built from.
#[test]
fn an_embedded_registry_needs_no_files_and_refuses_what_is_missing() {
    let dir = tempdir_with_registry();
    let manifest: &'static [u8] = std::fs::read(dir.path().join("manifest.json")).unwrap().leak();
    let index: tilesmith_spec::Registry = serde_json::from_slice(manifest).unwrap();
    let fatbins: Vec<(&'static str, &'static [u8])> =
        index.variants.iter().map(|b| (&*b.fatbin.clone().leak(), &b"not a fatbin"[..])).collect();
    let fatbins: &'static [(&'static str, &'static [u8])] = fatbins.leak();
    let complete = Box::leak(Box::new(tilesmith_runtime::Embedded { project: "/somewhere/my-kernels", manifest, fatbins, tuning: &[] }));
    let registry = Registry::embedded(complete).unwrap();
    assert_eq!(registry.dir(), None);
    assert_eq!(registry.kernels().count(), index.variants.len());
    let kernel = registry.kernel("gemm_tn_128x128x32").unwrap();
    assert!(
        matches!(kernel.fatbin(), tilesmith_runtime::Fatbin::Embedded { name: "gemm_tn_128x128x32.fatbin", .. }),
        "{:?}",
        kernel.fatbin()
    );

    let short = Box::leak(Box::new(tilesmith_runtime::Embedded { fatbins: &fatbins[1..], ..*complete }));
    let err = Registry::embedded(short).unwrap_err().to_string();
    let first = &index.variants[0].fatbin;
    assert!(
        err.contains(&format!("the registry embedded from /somewhere/my-kernels/{first}")) && err.contains("it was not embedded"),
        "{err}"
    );
    let garbage = Box::leak(Box::new(tilesmith_runtime::Embedded { manifest: b"{ not json", ..*complete }));
    let err = Registry::embedded(garbage).unwrap_err().to_string();
    assert!(err.contains("the registry embedded from /somewhere/my-kernels/manifest.json") && err.contains("does not parse"), "{err}");
}

/// An operand updated in place (`readwrite`) is one buffer that shares memory with no other
/// operand, read or written; a template's alignment of one operand holds for it alone.
#[test]
fn an_operand_updated_in_place_overlaps_nothing_and_alignment_is_per_operand() {
    use tilesmith_runtime::{plan_call, Buffer, Call, Dtype};
    use tilesmith_spec::{Access, ParamKind};
    // rmsnorm's x made a residual updated in place, and its w made to want 16-byte starts.
    let mut entry = shipped_entry("rmsnorm");
    std::sync::Arc::make_mut(&mut entry.declaration).operands.iter_mut().find(|o| o.name == "x").unwrap().access = Access::ReadWrite;
    for param in &mut entry.launch.params {
        if let ParamKind::Pointer { operand, access } = &mut param.kind {
            if operand == "x" {
                *access = Access::ReadWrite;
            }
        }
    }
    entry.requires.operand_align_bytes.insert("w".into(), 16);
    entry.check().unwrap();
    let built = Built::unbuilt(entry);
    let (rows, cols) = (64u64, 1000u64);
    let n = (rows * cols) as usize;
    let call = |x: Buffer, w: Buffer, y: Buffer| rmsnorm_call(rows, cols, [Dtype::Bf16; 3], [x, w, y]);
    let [x, w, y] = Buffer::unallocated([n, cols as usize, n]);
    plan_call(&built, &call(x, w, y), 132).unwrap();
    let refused = |call: Call| plan_call(&built, &call, 132).unwrap_err();
    let message = refused(call(x, Buffer { addr: x.addr + 2 * 512, ..w }, y));
    assert!(message.contains("w (bytes") && message.contains("overlaps x") && message.contains("while it reads w"), "{message}");
    let message = refused(call(x, w, Buffer { addr: x.addr + 2 * n as u64 - 2, ..y }));
    assert!(message.contains("overlaps x") && message.contains("while it also writes"), "{message}");
    let message = refused(call(x, Buffer { addr: w.addr + 8, ..w }, y));
    assert!(message.contains("w starts at") && message.contains("not 16-byte aligned"), "{message}");
    // Other operands keep the variant's rule: x at an element's alignment.
    plan_call(&built, &call(Buffer { addr: x.addr + 2, ..x }, w, y), 132).unwrap();
}

/// An operand of more than two sides: a stride per side but the last, its span checked against
/// its buffer in every side, and one written refused where two indices would name one element.
#[test]
fn many_sided_operands_are_checked_in_every_side() {
    use tilesmith_runtime::{plan_call, Buffer, Call, Dtype};
    use tilesmith_spec::{Expr, Param, ParamKind};
    // rmsnorm's x and y made [rows, rows, cols] tensors with strides [s, ld].
    let mut entry = shipped_entry("rmsnorm");
    for (name, stride, ld) in [("x", "sx", "ldx"), ("y", "sy", "ldy")] {
        let decl = std::sync::Arc::make_mut(&mut entry.declaration).operands.iter_mut().find(|o| o.name == name).unwrap();
        decl.dims.insert(0, Expr::parse("rows").unwrap());
        decl.ld = None;
        decl.strides = vec![stride.into(), ld.into()];
        entry.launch.params.push(Param { name: stride.to_uppercase(), kind: ParamKind::I64 { value: stride.into() } });
    }
    entry.check().unwrap();
    let built = Built::unbuilt(entry);
    let (rows, cols) = (8u64, 100u64);
    let call = |x: Buffer, y: Buffer, sx: u64, sy: u64, ldy: u64| {
        Call::default()
            .operand("x", Dtype::F32, x)
            .operand("w", Dtype::Bf16, Buffer { len: cols as usize, addr: 1 << 50 })
            .operand("y", Dtype::F32, y)
            .quantity("rows", rows)
            .quantity("cols", cols)
            .quantity("ldx", cols)
            .quantity("ldy", ldy)
            .quantity("sx", sx)
            .quantity("sy", sy)
            .scalar("eps", 1e-5)
    };
    let packed = (rows * rows * cols) as usize;
    let [x, y] = Buffer::unallocated([packed, packed]);
    let refused = |call: Call| plan_call(&built, &call, 132).unwrap_err();
    // A bf16 rmsnorm's x and y are bf16; the f32 buffers are refused first.
    assert!(refused(call(x, y, rows * cols, rows * cols, cols)).contains("takes bf16 elements for x"));
    let call = |x: Buffer, y: Buffer, sx: u64, sy: u64, ldy: u64| {
        let mut c = call(x, y, sx, sy, ldy);
        c.operands.iter_mut().filter(|o| o.0 != "w").for_each(|o| o.1 = Dtype::Bf16);
        c
    };
    plan_call(&built, &call(x, y, rows * cols, rows * cols, cols), 132).unwrap();
    // The outer side of x spans past its buffer.
    let message = refused(call(x, y, rows * cols + 1, rows * cols, cols));
    assert!(message.contains("x holds 6400 elements, but 8 x 8 rows of 100 with sx = 801, ldx = 100 span 6407"), "{message}");
    // y's outer stride smaller than the rows it steps over: written twice.
    let message = refused(call(x, y, rows * cols, rows * cols - 1, cols));
    assert!(message.contains("sy = 799: the kernel writes y") && message.contains("must be at least 800"), "{message}");
    // Read operands may be read twice over (a stride of 0 repeats x along the outer side).
    plan_call(&built, &call(x, y, 0, rows * cols, cols), 132).unwrap();
    // Sides nested the other way round are fine: rows far apart, the outer side between them.
    plan_call(&built, &call(x, y, rows * cols, cols, rows * cols), 132).unwrap();
}

/// An integer operand takes an integer buffer of its type only, and a float operand no integer
/// buffer: each refused naming the operand and both types.
#[test]
fn integer_operands_take_integer_buffers_only() {
    use tilesmith_runtime::{plan_call, Buffer, Dtype};
    use tilesmith_spec::family::Values;
    use tilesmith_spec::Expr;
    // rmsnorm's w made a vector of i32 (as a gather's indices would be).
    let mut entry = shipped_entry("rmsnorm");
    let w = std::sync::Arc::make_mut(&mut entry.declaration).operands.iter_mut().find(|o| o.name == "w").unwrap();
    w.dtype = Some(Dtype::I32);
    w.values = Some(Values { integers: Some([Expr::parse("0").unwrap(), Expr::parse("cols").unwrap()]), ..Values::default() });
    entry.check().unwrap();
    let built = Built::unbuilt(entry);
    let (rows, cols) = (64u64, 1000u64);
    let call = |x: Dtype, w: Dtype| {
        let buffers = Buffer::unallocated([(rows * cols) as usize, cols as usize, (rows * cols) as usize]);
        rmsnorm_call(rows, cols, [x, w, Dtype::Bf16], buffers)
    };
    plan_call(&built, &call(Dtype::Bf16, Dtype::I32), 132).unwrap();
    let message = plan_call(&built, &call(Dtype::Bf16, Dtype::F32), 132).unwrap_err();
    assert!(message.contains("it takes i32 elements for w, but the buffer holds f32"), "{message}");
    let message = plan_call(&built, &call(Dtype::Bf16, Dtype::U32), 132).unwrap_err();
    assert!(message.contains("it takes i32 elements for w, but the buffer holds u32"), "{message}");
    let message = plan_call(&built, &call(Dtype::I32, Dtype::I32), 132).unwrap_err();
    assert!(message.contains("it takes bf16 elements for x, but the buffer holds i32"), "{message}");
}

/// An optional output (cross-entropy's `lse`) may be left out: the kernel gets a null pointer
/// in its place. An output that is not optional may not.
#[test]
fn an_optional_output_left_out_is_passed_as_a_null_pointer() {
    use tilesmith_runtime::{plan_call, Arg, Buffer, Call, Dtype};
    let entry = shipped_entry("cross_entropy");
    let lse_param = entry.launch.params.iter().position(|p| p.name == "Lse").unwrap();
    let built = Built::unbuilt(entry);
    let (rows, cols) = (64u64, 1000u64);
    let [logits, targets, loss, lse] = Buffer::unallocated([(rows * cols) as usize, rows as usize, rows as usize, rows as usize]);
    let call = || {
        Call::default()
            .operand("logits", Dtype::Bf16, logits)
            .operand("targets", Dtype::I32, targets)
            .quantity("rows", rows)
            .quantity("cols", cols)
            .quantity("ldx", cols)
    };
    let args = |call: Call| plan_call(&built, &call, 132).unwrap().unwrap().args;
    let whole = args(call().operand("loss", Dtype::F32, loss).operand("lse", Dtype::F32, lse));
    assert!(matches!(whole[lse_param], Arg::Pointer(addr) if addr == lse.addr));
    let lean = args(call().operand("loss", Dtype::F32, loss));
    assert!(matches!(lean[lse_param], Arg::Pointer(0)));
    let message = plan_call(&built, &call().operand("lse", Dtype::F32, lse), 132).unwrap_err();
    assert!(message.contains("the call does not pass operand `loss`, which every cross_entropy call passes"), "{message}");
}

/// Rules between quantities, the family's and a variant's: a call that breaks one is refused
/// naming the rule, the values it read and its words.
#[test]
fn calls_breaking_a_rule_are_refused_naming_it() {
    use tilesmith_runtime::{plan_call, Buffer, Dtype};
    use tilesmith_spec::Rule;
    let mut entry = shipped_entry("rmsnorm");
    std::sync::Arc::make_mut(&mut entry.declaration).rules =
        vec![Rule::parse("cols <= 1048576", "rows hold at most 2^20 columns").unwrap()];
    entry.requires.rules = vec![Rule::parse("rows <= 4 * cols", "this variant wants rows of at least a quarter of the rows").unwrap()];
    entry.check().unwrap();
    let built = Built::unbuilt(entry);
    let call = |rows: u64, cols: u64| {
        let buffers = Buffer::unallocated([(rows * cols) as usize, cols as usize, (rows * cols) as usize]);
        rmsnorm_call(rows, cols, [Dtype::Bf16; 3], buffers)
    };
    plan_call(&built, &call(64, 1000), 132).unwrap();
    let message = plan_call(&built, &call(2, 1048577), 132).unwrap_err();
    assert_eq!(
        message,
        "the call breaks the rule `cols <= 1048576` (cols = 1048577: 1048577 <= 1048576 is false): rows hold at most 2^20 columns"
    );
    let message = plan_call(&built, &call(4096, 1000), 132).unwrap_err();
    assert!(
        message.starts_with("the call breaks the rule `rows <= 4 * cols` (cols = 1000, rows = 4096: 4096 <= 4000 is false)"),
        "{message}"
    );
    // A rule naming what is not a quantity is refused where the manifest is read.
    let mut entry = built.entry.clone();
    entry.requires.rules = vec![Rule::parse("heads > 0", "x").unwrap()];
    assert!(entry.check().unwrap_err().contains("rule `heads > 0` uses `heads`, which is not one of: rows, cols, ldx, ldy"));
}

/// An attention call of `batch` × `seq_q` queries over `seq_k` keys, packed, bf16, head_dim 128,
/// 8 heads over 2 kv heads, without its optional `lse`; and a buffer apart for `lse`.
fn attention_call(batch: u64, seq_q: u64, seq_k: u64) -> (tilesmith_runtime::Call, tilesmith_runtime::Buffer) {
    use tilesmith_runtime::{Buffer, Call, Dtype};
    let (heads, kv_heads, dim) = (8u64, 2u64, 128u64);
    let rows = [seq_q * heads * dim, seq_k * kv_heads * dim, seq_k * kv_heads * dim, seq_q * heads * dim, seq_q * heads];
    let [q, k, v, o, lse] = Buffer::unallocated(rows.map(|r| (batch * r).max(1) as usize));
    let mut call = Call::default()
        .operand("q", Dtype::Bf16, q)
        .operand("k", Dtype::Bf16, k)
        .operand("v", Dtype::Bf16, v)
        .operand("o", Dtype::Bf16, o)
        .scalar("scale", 0.088);
    for (name, value) in [("batch", batch), ("seq_q", seq_q), ("seq_k", seq_k), ("heads", heads), ("kv_heads", kv_heads), ("head_dim", dim)]
    {
        call = call.quantity(name, value);
    }
    for (letter, seq, h) in [("q", seq_q, heads), ("k", seq_k, kv_heads), ("v", seq_k, kv_heads), ("o", seq_q, heads)] {
        call = call
            .quantity(&format!("s{letter}b"), seq * h * dim)
            .quantity(&format!("s{letter}s"), h * dim)
            .quantity(&format!("s{letter}h"), dim);
    }
    (call, lse)
}

/// Round four: an optional output left out needs none of its strides; given, it needs them all.
#[test]
fn an_optional_output_left_out_needs_no_strides() {
    use tilesmith_runtime::{plan_call, Arg, Dtype};
    let built = Built::unbuilt(shipped_entry("attention"));
    let (batch, seq_q, heads) = (2u64, 64u64, 8u64);
    let (call, lse) = attention_call(batch, seq_q, 256);
    let launch = plan_call(&built, &call, 132).unwrap().expect("a launch");
    assert!(launch.args.iter().any(|a| matches!(a, Arg::Pointer(0))), "lse passed as a null pointer");
    let with_lse = call.operand("lse", Dtype::F32, lse);
    let message = plan_call(&built, &with_lse, 132).unwrap_err();
    assert!(message.contains("the call does not give quantity `slb`"), "{message}");
    plan_call(&built, &with_lse.quantity("slb", heads * seq_q).quantity("slh", seq_q), 132).unwrap().expect("a launch");
}

/// Round four: a call with no element to write (a batch of 0, no queries) does nothing, whatever
/// its strides, rather than being refused for a grid or strides it does not need.
#[test]
fn empty_calls_of_many_sided_families_do_nothing() {
    use tilesmith_runtime::plan_call;
    let built = Built::unbuilt(shipped_entry("attention"));
    for (batch, seq_q, seq_k) in [(0, 64, 256), (2, 0, 256), (0, 0, 256)] {
        let planned = plan_call(&built, &attention_call(batch, seq_q, seq_k).0, 132);
        assert!(matches!(planned, Ok(None)), "batch {batch}, seq_q {seq_q}, seq_k {seq_k}: {planned:?}");
    }
}

/// splitkv splits a decode's keys over as many clusters as fill the GPU once (2 blocks an SM at
/// head_dim 128) and asks for a workspace for their parts and a zeroed one for its counters; a
/// call its clusters fill alone gets no split and no workspace.
#[test]
fn a_decode_of_few_sequences_splits_its_keys_over_the_gpu_with_a_workspace() {
    use tilesmith_runtime::{plan_call, Arg};
    let built = Built::unbuilt(shipped_entry("attention_splitkv_w4_c2"));
    // The bytes of its scratch workspace and of its zeroed one.
    let workspace = |args: &[Arg]| {
        let bytes = |zeroed: bool| {
            args.iter().find_map(|a| match a {
                Arg::Workspace { bytes, zeroed: z } if *z == zeroed => Some(*bytes),
                _ => None,
            })
        };
        bytes(false).zip(bytes(true))
    };
    // One sequence, 8 heads over 2 kv heads: 4 rows a row tile; 264 / (2 blocks × 2 kv heads)
    // = 66 clusters a kv head, each part 4 rows of 128 f32 and a (max, sum), a counter a block.
    let decode = plan_call(&built, &attention_call(1, 1, 131_072).0, 132).unwrap().expect("a launch");
    assert_eq!((decode.grid, decode.cluster), ([132, 2, 1], [2, 1, 1]));
    assert_eq!(workspace(&decode.args), Some((2 * 66 * 4 * (128 * 4 + 8), 2 * 2 * 4)));
    // Short keys: 256 at least a block, so 1,024 keys take 2 clusters of 2, 511 keys one.
    let short = plan_call(&built, &attention_call(1, 1, 1024).0, 132).unwrap().expect("a launch");
    assert_eq!((short.grid, workspace(&short.args)), ([4, 2, 1], Some((2 * 2 * 4 * (128 * 4 + 8), 2 * 2 * 4))));
    let shorter = plan_call(&built, &attention_call(1, 1, 511).0, 132).unwrap().expect("a launch");
    assert_eq!((shorter.grid, workspace(&shorter.args)), ([2, 2, 1], Some((0, 0))));
    // A prefill's row tiles fill the GPU alone.
    let prefill = plan_call(&built, &attention_call(2, 2048, 2048).0, 132).unwrap().expect("a launch");
    assert_eq!((prefill.grid, workspace(&prefill.args)), ([256, 2, 2], Some((0, 0))));
}

/// A workspace's size names the call's quantities (or `sms`) only, and a kernel takes one of
/// each kind at most: what every reader of a manifest checks.
#[test]
fn a_workspace_is_checked_where_the_contract_is_read() {
    use tilesmith_spec::{Expr, ParamKind};
    let entry = shipped_entry("attention_splitkv_w4_c2");
    entry.check().unwrap();
    let mut unknown = entry.clone();
    let ws = unknown.launch.params.iter_mut().find(|p| p.name == "ws").expect("splitkv takes a workspace");
    ws.kind = ParamKind::Workspace { bytes: Expr::parse("seq_k * lanes").unwrap(), zeroed: false };
    let message = unknown.check().unwrap_err();
    assert!(message.contains("parameter `ws`: bytes: expression `seq_k * lanes` uses `lanes`"), "{message}");
    let mut twice = entry.clone();
    let mut again = twice.launch.params.iter().find(|p| p.name == "arrived").unwrap().clone();
    again.name = "arrived_too".into();
    twice.launch.params.push(again);
    let message = twice.check().unwrap_err();
    assert!(message.contains("a kernel takes one zeroed workspace at most"), "{message}");
}

/// Round four: a plan refuses a buffer at address 0 that the kernel would read or write.
#[test]
fn a_required_operand_at_address_zero_is_refused() {
    use tilesmith_runtime::{plan_call, Buffer, Dtype};
    let built = Built::unbuilt(shipped_entry("rmsnorm"));
    let (rows, cols) = (64u64, 1000u64);
    let [x, w, y] = Buffer::unallocated([(rows * cols) as usize, cols as usize, (rows * cols) as usize]);
    plan_call(&built, &rmsnorm_call(rows, cols, [Dtype::Bf16; 3], [x, w, y]), 132).unwrap();
    let message = plan_call(&built, &rmsnorm_call(rows, cols, [Dtype::Bf16; 3], [Buffer { addr: 0, ..x }, w, y]), 132).unwrap_err();
    assert!(message.contains("x is at address 0, a null pointer"), "{message}");
    let (call, lse) = attention_call(2, 64, 256);
    let message = plan_call(
        &Built::unbuilt(shipped_entry("attention")),
        &call.operand("lse", Dtype::F32, Buffer { addr: 0, ..lse }).quantity("slb", 8 * 64).quantity("slh", 64),
        132,
    )
    .unwrap_err();
    assert!(message.contains("lse is at address 0") && message.contains("or leave the optional operand out"), "{message}");
}

/// cross_entropy_backward writes its gradient over the logits where the call leaves `dlogits`
/// out (the kernel gets a null pointer for it); a `dlogits` that overlaps the logits is refused.
#[test]
fn a_gradient_goes_in_place_where_the_call_leaves_its_output_out() {
    use tilesmith_runtime::{plan_call, Arg, Buffer, Call, Dtype};
    for name in ["cross_entropy_backward", "cross_entropy_backward_f32_reference"] {
        let entry = shipped_entry(name);
        let param = |p: &str| entry.launch.params.iter().position(|q| q.name == p).unwrap();
        let (x_param, dx_param) = (param("X"), param("DX"));
        let dtype = if name.contains("f32") { Dtype::F32 } else { Dtype::Bf16 };
        let built = Built::unbuilt(entry);
        let (rows, cols) = (37u64, 40u64);
        let [logits, targets, lse, dloss, dlogits] =
            Buffer::unallocated([(rows * cols) as usize, rows as usize, rows as usize, rows as usize, (rows * cols) as usize]);
        let call = || {
            Call::default()
                .operand("logits", dtype, logits)
                .operand("targets", Dtype::I32, targets)
                .operand("lse", Dtype::F32, lse)
                .operand("dloss", Dtype::F32, dloss)
                .quantity("rows", rows)
                .quantity("cols", cols)
                .quantity("ldx", cols)
                .quantity("ldd", cols)
        };
        let args = |call: Call| plan_call(&built, &call, 132).unwrap().unwrap().args;
        let apart = args(call().operand("dlogits", dtype, dlogits));
        assert!(matches!(apart[dx_param], Arg::Pointer(addr) if addr == dlogits.addr), "{name}: {apart:?}");
        let in_place = args(call());
        assert!(matches!(in_place[dx_param], Arg::Pointer(0)), "{name}: {in_place:?}");
        assert!(matches!(in_place[x_param], Arg::Pointer(addr) if addr == logits.addr), "{name}: {in_place:?}");
        let message = plan_call(&built, &call().operand("dlogits", dtype, logits), 132).unwrap_err();
        assert!(message.contains("overlaps"), "{name}: {message}");
    }
}
