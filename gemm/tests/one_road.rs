//! One road: `registry.family("gemm")` picks by GEMM's policy, as `registry.gemm(..)` does, for
//! every entry of the committed tables and for calls no table holds; on the CPU, with the
//! shipped manifest.

use std::path::Path;
use tilesmith_gemm::dispatch::GemmCall;
use tilesmith_gemm::table::Strategy;
use tilesmith_gemm::{choose, family_call, typed_call, Activation, Batch, Choice, EpilogueArgs, GemmShape};
use tilesmith_runtime::{Buffer, Dtype, Layout, Registry};
use tilesmith_spec::family_table::FamilyTable;
use tilesmith_spec::{Built, Manifest};

/// An H100's and an H200's shared memory a block.
const SMEM_PER_BLOCK: u32 = 232_448;

/// The shipped variants with the committed GEMM tables.
fn registry() -> Registry {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let manifest: Manifest = serde_json::from_str(&std::fs::read_to_string(root.join("generated/manifest.json")).unwrap()).unwrap();
    let built = manifest.variants.into_iter().map(Built::unbuilt).collect();
    let tables: Vec<FamilyTable> = FamilyTable::read_all(&root.join("tuning"))
        .unwrap()
        .into_iter()
        .map(|(_, table)| table)
        .filter(|table| table.family == "gemm")
        .collect();
    assert_eq!(tables.len(), 2, "the H100's and the H200's");
    Registry::new(Path::new("registry"), built).with_family_tables(tables).unwrap()
}

/// The family's pick for the call by name, and the dispatcher's for the typed call.
fn both(registry: &Registry, table: &FamilyTable, dtype: Dtype, shape: &GemmShape, buffers: [Buffer; 3], epilogue: &EpilogueArgs) {
    let call = family_call(dtype, shape, buffers, epilogue);
    assert_eq!(typed_call(&call).unwrap(), (dtype, *shape, buffers, *epilogue), "the call by name reads back as the typed one");
    let chooser = registry.family("gemm").unwrap();
    let by_name = chooser.pick(&table.device, SMEM_PER_BLOCK, &call);
    let typed = choose(chooser, &table.device, SMEM_PER_BLOCK, &GemmCall { dtype, shape, buffers, epilogue });
    let label = |choice: &Choice| (choice.kernel.name().to_string(), choice.strategy, choice.reason.clone());
    match (by_name, typed) {
        (Ok(pick), Ok(choice)) => {
            let kept = Choice::kept_in(&pick).expect("GEMM's policy picked");
            assert_eq!(pick.kernel().name(), choice.kernel.name(), "{} {dtype} {shape:?}", table.device);
            assert_eq!(label(&kept), label(&choice), "{} {dtype} {shape:?}", table.device);
            assert_eq!(pick.way.strategy, choice.strategy.word(), "the way states the strategy GEMM's policy planned");
        }
        (Err(by_name), Err(typed)) => assert_eq!(by_name, typed),
        (by_name, typed) => panic!("{} {dtype} {shape:?}: by name {by_name:?}, typed {typed:?}", table.device),
    }
}

/// `shape` with A's rows one element longer than stored: off 16-byte alignment.
fn unaligned(shape: GemmShape) -> GemmShape {
    GemmShape { lda: shape.lda + 1, ..shape }
}

#[test]
fn every_table_entry_is_picked_alike_by_name_and_typed() {
    let registry = registry();
    let mut calls = 0;
    for table in registry.family("gemm").unwrap().tables() {
        for entry in &table.entries {
            let word = |key: &str| entry.class.get(key).map(String::as_str);
            let layout = Layout::parse(word("layout").unwrap()).unwrap();
            let [m, n, k] = [0, 1, 2].map(|i| entry.problem[i] as usize);
            let mut shape = GemmShape::packed(m, n, k, layout);
            if word("alignment") == Some("unaligned") {
                shape = unaligned(shape);
            }
            if entry.batch > 1 {
                let [a, b, c] = shape.spans();
                shape.batch = Batch { count: entry.batch as usize, strides: [a, b, c] };
            }
            let activation = Activation::named(word("epilogue").unwrap_or("none")).unwrap();
            let epilogue = EpilogueArgs { activation, ..EpilogueArgs::default() };
            both(&registry, table, entry.dtype, &shape, Buffer::unallocated(shape.spans()), &epilogue);
            calls += 1;
        }
    }
    assert!(calls > 1000, "{calls} entries");
}

#[test]
fn calls_no_table_holds_are_picked_alike_by_name_and_typed() {
    let registry = registry();
    let sizes = [1, 7, 64, 300, 1000, 3000, 5000, 12345];
    let bias_and_alpha = |shape: &GemmShape| {
        let bias = Buffer { len: shape.n, addr: 0x7e00_0000_0000 };
        EpilogueArgs { activation: Activation::named("gelu_tanh").unwrap(), alpha: 0.5, bias: Some(bias), ..EpilogueArgs::default() }
    };
    for table in registry.family("gemm").unwrap().tables() {
        for (i, &m) in sizes.iter().enumerate() {
            for (j, &n) in sizes.iter().enumerate() {
                let k = sizes[(i + 2 * j) % sizes.len()];
                let layout = Layout::ALL[(i + j) % 4];
                for shape in [GemmShape::packed(m, n, k, layout), unaligned(GemmShape::packed(m, n, k, layout))] {
                    let buffers = Buffer::unallocated(shape.spans());
                    for dtype in [Dtype::Bf16, Dtype::F16, Dtype::E4m3] {
                        let fp8 = EpilogueArgs { out: Some(Dtype::Bf16), ..EpilogueArgs::default() };
                        let plain = if dtype == Dtype::E4m3 { fp8 } else { EpilogueArgs::default() };
                        both(&registry, table, dtype, &shape, buffers, &plain);
                    }
                    both(&registry, table, Dtype::Bf16, &shape, buffers, &bias_and_alpha(&shape));
                }
            }
        }
    }
}

/// The layout is what a GEMM call by name must state: without it no variant's order of A and
/// B is the call's.
#[test]
fn a_gemm_call_by_name_states_its_layout() {
    let registry = registry();
    let shape = GemmShape::packed(256, 256, 256, Layout::Tn);
    let mut call = family_call(Dtype::Bf16, &shape, Buffer::unallocated(shape.spans()), &EpilogueArgs::default());
    call.axes.retain(|(name, _)| name != "layout");
    let table = &registry.family("gemm").unwrap().tables()[0];
    let err = registry.family("gemm").unwrap().pick(&table.device, SMEM_PER_BLOCK, &call).unwrap_err();
    assert!(err.contains("a GEMM call names the layout it is stored in: .axis(\"layout\", \"tn\")"), "{err}");
}

/// A bias of another type than C is refused by name, not read as C's type.
#[test]
fn a_bias_of_another_type_than_c_is_refused() {
    let shape = GemmShape::packed(256, 256, 256, Layout::Tn);
    let bias = Buffer { len: 256, addr: 0x7e00_0000_0000 };
    let epilogue = EpilogueArgs { bias: Some(bias), ..EpilogueArgs::default() };
    let mut call = family_call(Dtype::Bf16, &shape, Buffer::unallocated(shape.spans()), &epilogue);
    call.operands.iter_mut().filter(|(name, ..)| name == "bias").for_each(|(_, dtype, _)| *dtype = Dtype::F32);
    assert_eq!(typed_call(&call).unwrap_err(), "`bias` holds f32, and C holds bf16: a GEMM's biases are of C's type");
}

#[test]
fn strategies_are_the_dispatchers() {
    // The padded strategy comes through the family's pick: an unaligned call off every table.
    let registry = registry();
    let shape = unaligned(GemmShape::packed(4000, 4000, 4000, Layout::Tn));
    let table = &registry.family("gemm").unwrap().tables()[0];
    let call = family_call(Dtype::Bf16, &shape, Buffer::unallocated(shape.spans()), &EpilogueArgs::default());
    let pick = registry.family("gemm").unwrap().pick(&table.device, SMEM_PER_BLOCK, &call).unwrap();
    let choice = Choice::kept_in(&pick).unwrap();
    assert_eq!(choice.strategy, Strategy::Padded, "{}", choice.reason);
    assert!(choice.transpose.is_some());
}

/// The call `replay` makes for a table entry is in the entry's class (its layout and
/// alignment) and of its problem; entries of an epilogue of their own make none.
#[test]
fn each_plain_entry_stands_for_a_call_of_its_class() {
    let registry = registry();
    let chooser = registry.family("gemm").unwrap();
    let policy = chooser.policy().expect("GEMM's policy is linked");
    let mut made = 0;
    for table in chooser.tables() {
        for entry in &table.entries {
            let word = |key: &str| entry.class.get(key).map(String::as_str);
            let call = policy.entry_call(entry).unwrap();
            let Some(call) = call else {
                assert!(word("epilogue").is_some(), "{} {:?}: a plain entry makes a call", table.device, entry.problem);
                continue;
            };
            let (dtype, shape, buffers, epilogue) = typed_call(&call).unwrap();
            assert_eq!((dtype, epilogue), (entry.dtype, EpilogueArgs::default()));
            assert_eq!(shape.layout.as_str(), word("layout").unwrap());
            let problem = [shape.m, shape.n, shape.k].map(|d| d as u64);
            assert_eq!((shape.batch.count as u64, problem.to_vec()), (entry.batch, entry.problem.clone()));
            let class = tilesmith_gemm::dispatch::alignment(dtype, &shape, &buffers);
            assert_eq!(Some(class.to_string().as_str()), word("alignment"), "{} {:?} {shape:?}", table.device, entry.problem);
            made += 1;
        }
    }
    assert!(made > 1000, "{made} plain entries");
}
