//! variants.toml: parsing, expansion, naming and each validation error, message by message.

use std::path::Path;
use tilesmith_spec::{Bounds, Config, Dtype, Layout};

const BASE: &str = r#"
[gemm.defaults]
layout = "tn"
dtype = "bf16"
tile = [128, 128, 32]
backend = "simt"
warps = 8
stages = 2
bounds = "checked"

[gemm.backends.simt]
template = "gemm_simt.cu.tera"
sass = ["sm_80", "sm_90"]
ptx = "compute_80"
"#;

/// The shipped variants.toml's table `[header]`, from its header line to the next table's.
fn shipped_table(header: &str) -> String {
    let shipped = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../variants.toml")).unwrap();
    let start = shipped.find(&format!("\n[{header}]\n")).unwrap_or_else(|| panic!("variants.toml has no [{header}]"));
    let rest = &shipped[start + 1..];
    let end = rest[1..].find("\n[").map_or(rest.len(), |i| i + 2);
    rest[..end].to_string()
}

/// `text` with the shipped GEMM declaration after it, so that line numbers in `text` stay.
fn declared(text: &str) -> String {
    format!("{text}\n{}", shipped_table("gemm.family"))
}

fn parse(groups: &str) -> Result<Config, String> {
    Config::parse(Path::new("variants.toml"), &declared(&format!("{BASE}{groups}"))).map_err(|err| err.to_string())
}

fn error(groups: &str) -> String {
    match parse(groups) {
        Ok(config) => panic!("expected an error, got {} variants", config.variants.len()),
        Err(message) => message,
    }
}

/// Line numbers count from the start of BASE + groups.
fn line_of(groups: &str, needle: &str) -> usize {
    let text = format!("{BASE}{groups}");
    text.lines().position(|line| line.contains(needle)).expect("needle in text") + 1
}

#[test]
fn groups_expand_as_a_cartesian_product_in_order() {
    let config = parse(
        r#"
[[gemm.groups]]
layout = ["nn", "tn"]
dtype = ["f16", "f32"]
bounds = ["checked", "unchecked"]
"#,
    )
    .unwrap();
    let names: Vec<&str> = config.variants.iter().map(|d| d.variant.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "gemm_nn_128x128x32_f16",
            "gemm_nn_128x128x32_f16_unchecked",
            "gemm_nn_128x128x32_f32",
            "gemm_nn_128x128x32_f32_unchecked",
            "gemm_tn_128x128x32_f16",
            "gemm_tn_128x128x32_f16_unchecked",
            "gemm_tn_128x128x32_f32",
            "gemm_tn_128x128x32_f32_unchecked",
        ]
    );
    let first = &config.variants[0];
    assert_eq!(first.variant.dtype, Dtype::F16);
    assert_eq!(first.variant.bounds, Bounds::Checked);
    assert_eq!(first.variant.tile, [128, 128, 32]);
    let axes: Vec<(&str, String)> = first.variant.axes.iter().map(|(a, v)| (a.as_str(), v.to_string())).collect();
    assert_eq!(
        axes,
        [
            ("b_dtype", "in".into()),
            ("cluster", "1".into()),
            ("epilogue", "none".into()),
            ("layout", "nn".into()),
            ("out", "in".into()),
            ("schedule", "cooperative".into()),
            ("split_k", "1".into()),
            ("stages", "2".into()),
            ("swap", "none".into())
        ]
    );
    assert_eq!(first.backend.template, "gemm_simt.cu.tera");
    assert_eq!(first.line, line_of("\n[[gemm.groups]]\n", "[[gemm.groups]]"));
}

#[test]
fn the_default_variant_has_the_short_name() {
    let config = parse("[[gemm.groups]]\n").unwrap();
    assert_eq!(config.variants.len(), 1);
    assert_eq!(config.variants[0].variant.name, "gemm_tn_128x128x32");
}

#[test]
fn tiles_may_be_one_tile_or_a_list() {
    let config = parse(
        r#"
[[gemm.groups]]
tile = [[64, 64, 32], [128, 64, 16]]
warps = 4
"#,
    )
    .unwrap();
    let names: Vec<&str> = config.variants.iter().map(|d| d.variant.name.as_str()).collect();
    assert_eq!(names, ["gemm_tn_64x64x32_w4", "gemm_tn_128x64x16_w4"]);
}

#[test]
fn excludes_drop_matching_combinations() {
    let config = parse(
        r#"
[[gemm.groups]]
layout = ["nn", "tn"]
dtype = ["f16", "f32"]
exclude = [{ layout = "nn", dtype = "f32" }]
"#,
    )
    .unwrap();
    let names: Vec<&str> = config.variants.iter().map(|d| d.variant.name.as_str()).collect();
    assert_eq!(names, ["gemm_nn_128x128x32_f16", "gemm_tn_128x128x32_f16", "gemm_tn_128x128x32_f32"]);
}

#[test]
fn an_exclude_that_matches_nothing_is_an_error() {
    let groups = "\n[[gemm.groups]]\nlayout = [\"nn\"]\nexclude = [{ layout = \"tt\" }]\n";
    let message = error(groups);
    assert_eq!(message, format!("variants.toml:{}: exclude #1 matches no variant of this group", line_of(groups, "exclude")));
}

#[test]
fn unknown_axis_names_the_line_and_the_known_axes() {
    let groups = "\n[[gemm.groups]]\nlayuot = \"nn\"\n";
    assert_eq!(
        error(groups),
        format!(
            "variants.toml:{}: unknown gemm axis `layuot` (known: layout, tile, dtype, backend, warps, stages, cluster, split_k, swap, schedule, epilogue, b_dtype, out, bounds, exclude)",
            line_of(groups, "layuot")
        )
    );
}

#[test]
fn unknown_value_lists_the_allowed_ones() {
    let groups = "\n[[gemm.groups]]\ndtype = [\"f16\", \"f64\"]\n";
    assert_eq!(
        error(groups),
        format!(
            "variants.toml:{}: axis `dtype`: unknown value `f64` (expected one of f16, bf16, f32, e4m3, e5m2, i32, i64, u32, u8)",
            line_of(groups, "f64")
        )
    );
}

#[test]
fn unknown_backend_says_how_to_declare_one() {
    let groups = "\n[[gemm.groups]]\nbackend = \"wgmma\"\n";
    assert_eq!(
        error(groups),
        format!(
            "variants.toml:{}: axis `backend`: unknown backend `wgmma`: declare [gemm.backends.wgmma] (declared: simt)",
            line_of(groups, "wgmma")
        )
    );
}

#[test]
fn malformed_tiles_and_counts_are_rejected() {
    let groups = "\n[[gemm.groups]]\ntile = [128, 128]\n";
    assert!(
        error(groups).ends_with("axis `tile`: expected [m, n, k] (an edge along each): 3 integers, or a list of such tiles"),
        "{}",
        error(groups)
    );
    let groups = "\n[[gemm.groups]]\ntile = [0, 128, 32]\n";
    assert!(error(groups).ends_with("axis `tile`: tile edges must be in 1..=1024, got [0, 128, 32]"), "{}", error(groups));
    let groups = "\n[[gemm.groups]]\nwarps = 64\n";
    assert!(error(groups).ends_with("axis `warps`: 64 is out of range 1..=32"), "{}", error(groups));
    let groups = "\n[[gemm.groups]]\nwarps = \"eight\"\n";
    assert!(error(groups).ends_with("axis `warps`: expected an integer in 1..=32"), "{}", error(groups));
    let groups = "\n[[gemm.groups]]\ndtype = []\n";
    assert!(error(groups).ends_with("axis `dtype` lists no values"), "{}", error(groups));
    let groups = "\n[[gemm.groups]]\ndtype = [\"f16\", \"f16\"]\n";
    assert!(error(groups).ends_with("axis `dtype` lists `f16` twice"), "{}", error(groups));
}

#[test]
fn two_variants_with_one_name_are_an_error() {
    let groups = "\n[[gemm.groups]]\nlayout = \"nn\"\n\n[[gemm.groups]]\nlayout = [\"nn\", \"nt\"]\n";
    let first = line_of(groups, "layout = \"nn\"") - 1;
    let second = line_of(groups, "layout = [") - 1;
    assert_eq!(
        error(groups),
        format!(
            "variants.toml:{second}: variant `gemm_nn_128x128x32`: two variants share this name (the first was declared at line {first}); names must be unique"
        )
    );
}

#[test]
fn defaults_must_set_every_axis() {
    let text = BASE.replace("stages = 2\n", "") + "[[gemm.groups]]\n";
    let message = Config::parse(Path::new("v.toml"), &declared(&text)).unwrap_err().to_string();
    assert_eq!(message, "v.toml:2: [gemm.defaults] must set axis `stages`");
}

/// An axis whose declaration gives its default (GEMM's cluster, split_k, swap, epilogue,
/// b_dtype, out) takes it from there: defaults that leave it out name the same variants, and
/// defaults that set it again are refused, so the value is stated once.
#[test]
fn an_axis_declaring_its_default_takes_it_from_the_declaration() {
    let config = parse("[[gemm.groups]]\ncluster = [1, 2]\nepilogue = [\"none\", \"relu\"]\n").unwrap();
    let names: Vec<&str> = config.variants.iter().map(|d| d.variant.name.as_str()).collect();
    assert_eq!(names, ["gemm_tn_128x128x32", "gemm_tn_128x128x32_relu", "gemm_tn_128x128x32_c2", "gemm_tn_128x128x32_c2_relu"]);
    let text = BASE.replace("stages = 2\n", "stages = 2\nswap = \"none\"\n") + "[[gemm.groups]]\n";
    let line = text.lines().position(|l| l == "swap = \"none\"").unwrap() + 1;
    let message = Config::parse(Path::new("v.toml"), &declared(&text)).unwrap_err().to_string();
    assert_eq!(
        message,
        format!("v.toml:{line}: axis `swap`: [gemm.family] declares its default (`none`); [gemm.defaults] must not set it too")
    );
}

#[test]
fn backends_must_name_known_architectures() {
    let text = BASE.replace("\"sm_90\"]", "\"sm_91\"]").replace("compute_80", "compute_81") + "[[gemm.groups]]\n";
    let message = Config::parse(Path::new("v.toml"), &declared(&text)).unwrap_err().to_string();
    assert!(message.contains("backend `gemm.simt`: unknown SASS architecture `sm_91` (known: sm_80, sm_86"), "{message}");
    assert!(message.contains("backend `gemm.simt`: `compute_81` is not a known PTX architecture"), "{message}");
}

#[test]
fn a_backend_rate_must_be_above_zero() {
    let text = BASE.replace("ptx = \"compute_80\"\n", "ptx = \"compute_80\"\ngflops_per_sm = 0\n") + "[[gemm.groups]]\n";
    let message = Config::parse(Path::new("v.toml"), &declared(&text)).unwrap_err().to_string();
    assert!(message.contains("backend `gemm.simt`: gflops_per_sm must be above 0 (or left out)"), "{message}");
    let declared_rate = BASE.replace("ptx = \"compute_80\"\n", "ptx = \"compute_80\"\ngflops_per_sm = 300\n") + "[[gemm.groups]]\n";
    let config = Config::parse(Path::new("v.toml"), &declared(&declared_rate)).unwrap();
    assert!(config.variants.iter().all(|v| v.backend.gflops_per_sm == Some(300)));
}

#[test]
fn toml_errors_name_the_line() {
    let message = error("\n[[gemm.groups]]\nlayout = nn\n");
    assert!(message.starts_with(&format!("variants.toml:{}: ", line_of("\n[[gemm.groups]]\nlayout = nn\n", "= nn"))), "{message}");
    let message = error("\n[[gemm.groupz]]\n");
    assert!(message.contains("unknown field `groupz`"), "{message}");
    let message = error("\n[[fft.groups]]\n");
    assert!(message.starts_with(&format!("variants.toml:{}: missing field `defaults`", line_of("\n[[fft.groups]]\n", "fft"))), "{message}");
    let message = error("\n[fft.defaults]\n[fft.backends]\n[[fft.groups]]\n");
    assert!(message.contains("family `fft` has no declaration: add [fft.family]"), "{message}");
}

#[test]
fn a_file_without_groups_declares_nothing() {
    let message = Config::parse(Path::new("v.toml"), &declared(BASE)).unwrap_err().to_string();
    assert!(message.contains("family `gemm` has no [[gemm.groups]]"), "{message}");
}

#[test]
fn every_problem_is_reported_at_once() {
    let message = error("\n[[gemm.groups]]\nlayout = \"xx\"\n\n[[gemm.groups]]\nwarps = 99\n");
    assert_eq!(message.lines().count(), 2, "{message}");
}

#[test]
fn the_shipped_variants_file_parses() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../variants.toml");
    let config = Config::load(&path).unwrap();
    let names: Vec<&str> = config.variants.iter().map(|d| d.variant.name.as_str()).collect();
    assert!(names.contains(&"gemm_tn_128x128x32"));
    let gemm_default = config.variants.iter().find(|d| d.variant.name == "gemm_tn_128x128x32").unwrap();
    assert_eq!(gemm_default.variant.dtype, Dtype::Bf16);
    assert_eq!(gemm_default.variant.bounds, Bounds::Checked);
    // Every layout, bounds mode and 16- or 32-bit dtype; 8-bit ones are Hopper's, tn only.
    for layout in Layout::ALL {
        for dtype in Dtype::ALL.iter().filter(|d| d.size_bytes() > 1 && !d.is_integer()) {
            for bounds in Bounds::ALL {
                assert!(
                    config.variants.iter().any(|d| d.variant.dtype == *dtype
                        && d.variant.bounds == *bounds
                        && d.variant.family == "gemm"
                        && d.variant.word("layout") == Some(layout.as_str())),
                    "no GEMM for {layout} {dtype} {bounds}"
                );
            }
        }
    }
    for dtype in Dtype::ALL.iter().filter(|d| d.size_bytes() > 1 && !d.is_integer()) {
        for bounds in Bounds::ALL {
            assert!(config
                .variants
                .iter()
                .any(|d| d.variant.dtype == *dtype && d.variant.bounds == *bounds && d.variant.family == "transpose"));
        }
    }
}

#[test]
fn list_items_are_reported_at_their_own_line() {
    let groups = "\n[[gemm.groups]]\ndtype = [\n    \"f16\",\n    \"f64\",\n    \"f16\",\n]\n";
    let message = error(groups);
    let f64_line = line_of(groups, "\"f64\"");
    let twice_line = f64_line + 1;
    assert_eq!(
        message,
        format!(
            "variants.toml:{f64_line}: axis `dtype`: unknown value `f64` (expected one of f16, bf16, f32, e4m3, e5m2, i32, i64, u32, u8)\n\
             variants.toml:{twice_line}: axis `dtype` lists `f16` twice"
        )
    );
}

#[test]
fn excludes_are_reported_at_their_own_line() {
    let groups = "\n[[gemm.groups]]\nlayout = [\"nn\", \"tn\"]\nexclude = [\n    { layout = \"nn\" },\n    { layout = \"tt\" },\n    { layuot = \"tn\" },\n]\n";
    let message = error(groups);
    assert_eq!(message, format!("variants.toml:{}: exclude #3: unknown gemm axis `layuot`", line_of(groups, "layuot")));
    let groups = "\n[[gemm.groups]]\nlayout = [\"nn\", \"tn\"]\nexclude = [\n    { layout = \"nn\" },\n    { layout = \"tt\" },\n]\n";
    let message = error(groups);
    assert_eq!(message, format!("variants.toml:{}: exclude #2 matches no variant of this group", line_of(groups, "\"tt\"")));
}

#[test]
fn a_backend_with_a_bad_architecture_gets_that_error_alone() {
    let text = BASE.replace("\"sm_90\"]", "\"sm_91\"]") + "[[gemm.groups]]\nbackend = \"simt\"\n";
    let message = Config::parse(Path::new("v.toml"), &declared(&text)).unwrap_err().to_string();
    assert_eq!(message.lines().count(), 1, "{message}");
    assert!(message.contains("backend `gemm.simt`: unknown SASS architecture `sm_91`"), "{message}");
}

fn leak(text: String) -> &'static str {
    Box::leak(text.into_boxed_str())
}

/// Kernel names are API: users write them in their code. These shipped names must keep
/// meaning these axes; a change of defaults that renames them fails here.
#[test]
fn shipped_names_keep_their_axes() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../variants.toml");
    let config = Config::load(&path).unwrap();
    type Axes = std::collections::BTreeMap<&'static str, String>;
    let axes = |name: &str| -> Axes {
        let declared = config.variants.iter().find(|d| d.variant.name == name).unwrap_or_else(|| panic!("`{name}` is no longer shipped"));
        declared.variant.axis_values(&declared.family.axes()).into_iter().map(|(a, v)| (leak(a), v)).collect()
    };
    let expect = |pairs: &[(&'static str, &str)]| -> Axes { pairs.iter().map(|(a, v)| (*a, v.to_string())).collect() };
    let gemm = |layout, dtype, tile, backend, warps, stages, bounds| {
        expect(&[
            ("family", "gemm"),
            ("layout", layout),
            ("dtype", dtype),
            ("tile", tile),
            ("backend", backend),
            ("warps", warps),
            ("stages", stages),
            ("cluster", "1"),
            ("split_k", "1"),
            ("swap", "none"),
            ("schedule", "cooperative"),
            ("epilogue", "none"),
            ("b_dtype", "in"),
            ("out", "in"),
            ("bounds", bounds),
        ])
    };
    assert_eq!(axes("gemm_tn_128x128x32"), gemm("tn", "bf16", "128x128x32", "mma", "4", "4", "checked"));
    assert_eq!(axes("gemm_nt_128x128x32_f16_unchecked"), gemm("nt", "f16", "128x128x32", "mma", "4", "4", "unchecked"));
    assert_eq!(axes("gemm_tt_128x256x32_w8"), gemm("tt", "bf16", "128x256x32", "mma", "8", "4", "checked"));
    assert_eq!(axes("gemm_nn_128x128x32_f32_simt_w8_s2"), gemm("nn", "f32", "128x128x32", "simt", "8", "2", "checked"));
    assert_eq!(axes("gemm_tn_64x64x32_simt_s2_unchecked"), gemm("tn", "bf16", "64x64x32", "simt", "4", "2", "unchecked"));
    assert_eq!(axes("gemm_tn_128x256x64_wgmma_w12"), gemm("tn", "bf16", "128x256x64", "wgmma", "12", "4", "checked"));
    let mut split = gemm("nt", "f16", "64x128x64", "wgmma", "8", "6", "checked");
    split.insert("split_k", "4".into());
    assert_eq!(axes("gemm_nt_64x128x64_f16_wgmma_w8_s6_splitk4"), split);
    assert_eq!(
        axes("transpose_64x64_f32_unchecked"),
        expect(&[
            ("family", "transpose"),
            ("dtype", "f32"),
            ("tile", "64x64"),
            ("backend", "tiled"),
            ("warps", "8"),
            ("bounds", "unchecked")
        ])
    );
    assert_eq!(
        axes("transpose_128x64"),
        expect(&[
            ("family", "transpose"),
            ("dtype", "bf16"),
            ("tile", "128x64"),
            ("backend", "tiled"),
            ("warps", "8"),
            ("bounds", "checked")
        ])
    );
}

/// The variants.toml examples in the README and the reference are what users copy: each must
/// validate.
#[test]
fn the_readmes_variants_toml_examples_validate() {
    for doc in ["README.md", "docs/reference.md"] {
        let text = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(doc)).unwrap();
        let examples: Vec<&str> =
            text.split("```toml\n").skip(1).filter_map(|rest| rest.split_once("\n```").map(|(block, _)| block)).collect();
        assert!(!examples.is_empty(), "{doc} shows a variants.toml example");
        for example in examples {
            let parsed = Config::parse(Path::new(doc), example);
            assert!(parsed.is_ok(), "{doc} example does not validate: {}\n{example}", parsed.unwrap_err());
        }
    }
}

/// A declaration that breaks a rule is reported at its `[<family>.family]` line, naming the
/// item and the rule, and no variant of the family is expanded.
#[test]
fn bad_declarations_are_reported_at_the_family_table() {
    let family = shipped_table("gemm.family");
    let cases = [
        ("dims = [\"m\", \"k\"]", "dims = [\"m\", \"q\"]", "operand `a`: dims: expression `q` uses `q`, which is not one of: m, n, k"),
        ("order = \"layout[0]\"", "order = \"layuot[0]\"", "operand `a`: order `layuot[0]`: `layuot` is not one of the family's axes"),
        ("{ name = \"stages\"", "{ name = \"tile\"", "axis `tile`: axis names are C identifiers, unique, and not one of"),
        ("prefix = \"c\", default = 1", "prefix = \"c\", default = 9", "axis `cluster`: default `9` must be a count from 1 to 8"),
        (
            "prefix = \"swap_\", default = \"none\"",
            "prefix = \"swap_\", default = \"ba\"",
            "axis `swap`: default `ba` must be one of none, ab",
        ),
        ("prefix = \"c\", default = 1", "prefix = \"c\", default = \"one\"", "axis `cluster`: default `one` must be a count from 1 to 8"),
        ("bytes = \"(m * k", "bytes = \"(m * kk", "work.bytes: expression `(m * kk + k * n + m * n) * elem` uses `kk`"),
        ("tile = [\"m\", \"n\", \"k\"]", "tile = [\"m\", \"n\", \"x\"]", "tile edge `x` is not a quantity (quantities: m, n, k)"),
        ("ld = \"ldc\",", "ld = \"lda\",", "leading dimension `lda`: the name is taken"),
        ("batch_stride = \"stride_c\"", "batch_stride = \"stride_a\"", "batch stride `stride_a`: the name is taken"),
        (", batch_stride = \"stride_c\"", "", "batch `batch`: every operand written needs a batch_stride"),
        ("batch = \"batch\"", "batch = \"m\"", "batch `m`: the name is taken"),
        (
            "stride_c\", dtype_axis = \"out\"",
            "stride_c\", dtype_axis = \"epilogue\"",
            "operand `c`: dtype_axis `epilogue` must be an axis of the family whose values are among f16, bf16, f32, e4m3, e5m2, i32, i64, u32, u8, in",
        ),
        ("stride_c\", dtype_axis = \"out\"", "stride_c\", dtype_axis = \"outt\"", "operand `c`: dtype_axis `outt` must be an axis"),
        (
            "stride_c\", dtype_axis = \"out\"",
            "stride_c\", dtype_axis = \"out\", dtype = \"f32\"",
            "operand `c`: give a fixed `dtype` or a `dtype_axis`, not both",
        ),
    ];
    for (from, to, rule) in cases {
        assert!(family.contains(from), "{from}");
        let text = format!("{BASE}\n[[gemm.groups]]\n\n{}", family.replacen(from, to, 1));
        let line = text.lines().position(|l| l == "[gemm.family]").unwrap() + 1;
        let message = Config::parse(Path::new("variants.toml"), &text).unwrap_err().to_string();
        assert!(message.starts_with(&format!("variants.toml:{line}: [gemm.family]: ")) && message.contains(rule), "{rule}: {message}");
    }
}

/// Problems several families tune at are declared once, in `[shape_sets]`, and join the
/// `trials.tune` of each family naming them, after its own; a set no one declared is an error
/// at the family's table.
#[test]
fn shape_sets_join_the_tune_lists_naming_them() {
    let family = shipped_table("gemm.family");
    let text = |sets: &str| {
        let family = family.replacen("[gemm.family]\n", &format!("[gemm.family]\ntrials.tune = [{{ m = 1, n = 2, k = 3 }}]\n{sets}\n"), 1);
        format!("[shape_sets]\nsmall = [{{ m = 64, n = 64, k = 64 }}, {{ m = 8, n = 16, k = 32 }}]\n{BASE}\n[[gemm.groups]]\n\n{family}")
    };
    let config = Config::parse(Path::new("variants.toml"), &text("trials.tune_sets = [\"small\"]")).unwrap();
    let trials = &config.variants[0].family.trials;
    let tune: Vec<Vec<u64>> = trials.tune.iter().map(|shape| ["m", "n", "k"].iter().map(|q| shape[*q]).collect()).collect();
    assert_eq!(tune, [[1, 2, 3], [64, 64, 64], [8, 16, 32]]);
    assert!(trials.tune_sets.is_empty(), "resolved, so the manifest lists the shapes, not the sets");

    // A set named again and again stops at the list's limit, not at memory's.
    let many = format!("trials.tune_sets = [{}]", vec!["\"small\""; 6000].join(", "));
    let message = Config::parse(Path::new("variants.toml"), &text(&many)).unwrap_err().to_string();
    assert!(message.contains("trials.tune with its tune_sets lists more than the 10000 shapes a list may hold"), "{message}");

    let text = text("trials.tune_sets = [\"large\"]");
    let line = text.lines().position(|l| l == "[gemm.family]").unwrap() + 1;
    let message = Config::parse(Path::new("variants.toml"), &text).unwrap_err().to_string();
    assert!(
        message.starts_with(&format!(
            "variants.toml:{line}: [gemm.family]: trials.tune_sets names `large`, which [shape_sets] does not declare"
        )),
        "{message}"
    );
}

/// An operand typed by an axis says `in` for the variant's own dtype: `out = "bf16"` on bf16
/// inputs would name one kernel twice.
#[test]
fn an_output_type_equal_to_the_inputs_is_written_in() {
    let family = shipped_table("gemm.family");
    let text = format!("{BASE}\n{family}\n[[gemm.groups]]\ndtype = [\"bf16\", \"e4m3\"]\nout = \"bf16\"\n");
    let message = Config::parse(Path::new("variants.toml"), &text).unwrap_err().to_string();
    assert!(message.contains("out = bf16 is the variant's dtype: write out = \"in\""), "{message}");
}

#[test]
fn a_group_past_the_variant_limit_is_refused_before_it_expands() {
    let tiles: Vec<String> = (1..=1000).map(|edge| format!("[{edge}, 64, 32]")).collect();
    let warps: Vec<String> = (1..=32).map(|w| w.to_string()).collect();
    let groups = format!("\n[[gemm.groups]]\ntile = [{}]\nwarps = [{}]\n", tiles.join(", "), warps.join(", "));
    let message = error(&groups);
    assert!(message.contains("declares 32000 variants") && message.contains("limit of 20000 variants per project"), "{message}");
    assert!(message.contains(&format!("variants.toml:{}", line_of(&groups, "[[gemm.groups]]"))), "{message}");
}

#[test]
fn many_small_groups_take_linear_time_and_the_limit_counts_them_all() {
    // 100,000 groups of one variant each (the quadratic line count took over 120 s).
    let mut groups = String::new();
    for i in 0..100_000 {
        groups.push_str(&format!("[[gemm.groups]]\ntile = [{}, {}, 32]\n", 1 + i % 1000, 1 + i / 1000));
    }
    let start = std::time::Instant::now();
    let message = error(&groups);
    assert!(start.elapsed().as_secs() < 30, "{:?}", start.elapsed());
    assert!(message.contains("with the 20000 before it passes the limit"), "{message}");
    assert_eq!(message.matches("passes the limit").count(), 1, "{message}");
}

#[test]
fn an_exclude_removing_every_variant_is_an_error() {
    let message = error("\n[[gemm.groups]]\nlayout = \"nn\"\nexclude = [{ layout = \"nn\" }]\n");
    assert!(message.contains("removes every variant of this group"), "{message}");
}

#[test]
fn kernel_names_and_scalars_that_cannot_compile_are_refused() {
    let scale = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/standalone/variants.toml")).unwrap();
    let parse = |text: &str| Config::parse(Path::new("variants.toml"), text).map(drop).unwrap_err().to_string();
    for family in ["int", "main", "printf", "blockIdx"] {
        let message = parse(&scale.replace("[scale.", &format!("[{family}.")));
        assert!(
            message.contains(&format!("name `{family}` cannot name a kernel: it is reserved"))
                || message.contains(&format!("family name `{family}` must be lowercase")),
            "{message}"
        );
    }
    let fractional =
        scale.replace("type = \"f32\", min = -1000.0, max = 1000.0, trial = 1.5", "type = \"i32\", min = -1000, max = 1000, trial = 1.5");
    assert_ne!(fractional, scale);
    let message = parse(&fractional);
    assert!(message.contains("scalar `alpha` is an integer (int), but its trial value is 1.5"), "{message}");
}

#[test]
fn per_element_ulps_are_at_least_half_a_unit_and_need_a_reference_variant() {
    let scale = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/standalone/variants.toml")).unwrap();
    let with = |ulps: &str| scale.replace("bf16 = 1e-2 } }", &format!("bf16 = 1e-2 }}, ulps = {{ {ulps} }} }}"));
    assert_ne!(with("f16 = 0.5"), scale);
    assert!(Config::parse(Path::new("variants.toml"), &with("f16 = 0.5, bf16 = 0.55")).is_ok());
    let message = Config::parse(Path::new("variants.toml"), &with("bf16 = 0.4")).map(drop).unwrap_err().to_string();
    assert!(message.contains("reference.ulps: each is finite and at least 0.5"), "{message}");
    // 1 ulp of bf16 at 1.0 is 2^-7, at 0.75 2^-8; of f16 at 1.0 2^-10, and 2^-24 among its subnormals.
    assert_eq!(Dtype::Bf16.ulp(1.0), 2f64.powi(-7));
    assert_eq!(Dtype::Bf16.ulp(-0.75), 2f64.powi(-8));
    assert_eq!(Dtype::F16.ulp(1.0), 2f64.powi(-10));
    assert_eq!(Dtype::F16.ulp(1e-6), 2f64.powi(-24));
    assert_eq!(Dtype::F16.ulp(0.0), 2f64.powi(-24));
}

/// A family with an integer operand, one updated in place and trial values declared: what
/// parses, and each broken rule reported at its `[<family>.family]` line.
#[test]
fn integer_in_place_and_drawn_operands() {
    let family = r#"[loss.family]
quantities = ["rows", "cols"]
operands = [
    { name = "x", access = "read", dims = ["rows", "cols"], ld = "ldx", values = { uniform = [-30.0, 30.0] } },
    { name = "t", access = "read", dims = ["rows"], dtype = "i32", values = { integers = [0, "cols"], ignore = -100, ignore_fraction = 0.1, outside_fraction = 0.02 } },
    { name = "r", access = "readwrite", dims = ["rows", "cols"], ld = "ldr" },
    { name = "loss", access = "write", dims = ["rows"], dtype = "f32" },
]
work = { bytes = "rows * cols * elem + rows * (elem_t + elem_loss) + 2 * rows * cols * elem_r" }
baseline = "copy"
reference = { backend = "reference", tolerance = { f32 = 1e-5 } }

[loss.defaults]
dtype = "f32"
backend = "reference"
warps = 4
bounds = "checked"

[loss.backends.reference]
template = "loss.cu.tera"
sass = ["sm_90"]
ptx = "compute_90"

[[loss.groups]]
"#;
    let config = Config::parse(Path::new("variants.toml"), family).unwrap();
    let declared = &config.variants[0].family;
    assert_eq!(declared.operand("t").unwrap().dtype, Some(Dtype::I32));
    // Rules between quantities: their names must be quantities, and the declared trial shapes
    // must keep them.
    let ruled = family.replacen(
        "work = ",
        "rules = [{ holds = \"cols % 2 == 0\", says = \"rows have pairs\" }]\ntrials.shapes = [{ rows = 3, cols = 128256 }]\nwork = ",
        1,
    );
    assert_ne!(ruled, family);
    assert_eq!(Config::parse(Path::new("variants.toml"), &ruled).unwrap().variants[0].family.rules.len(), 1);
    for (holds, rule) in [
        ("colz % 2 == 0", "rule `colz % 2 == 0` uses `colz`, which is not one of: rows, cols"),
        (
            "cols % 2 == 1",
            "trials: shape cols=128256 rows=3: the call breaks the rule `cols % 2 == 1` (cols = 128256: 0 == 1 is false): rows have pairs",
        ),
        ("cols % 2", "rule `cols % 2`: write two expressions with one of =="),
    ] {
        let message = Config::parse(Path::new("variants.toml"), &ruled.replace("cols % 2 == 0", holds)).unwrap_err().to_string();
        assert!(message.contains(rule), "{holds}: {message}");
    }
    // An output a call may leave out (the kernel gets a null pointer).
    let lean = family.replacen("{ name = \"loss\", access = \"write\"", "{ name = \"loss\", access = \"write\", optional = true", 1);
    assert!(Config::parse(Path::new("variants.toml"), &lean).unwrap().variants[0].family.operand("loss").unwrap().optional);
    assert!(declared.operand("r").unwrap().access.reads() && declared.operand("r").unwrap().access.writes());
    let cases = [
        ("integers = [0, \"cols\"]", "integers = [0, \"colz\"]", "operand `t`: values.integers names `colz`, which is not a quantity"),
        ("uniform = [-30.0, 30.0]", "uniform = [3.0, 3.0]", "operand `x`: values: the range [3, 3) holds no value"),
        ("uniform = [-30.0, 30.0]", "uniform = [0.0, 1.0], normal = [0.0, 1.0]", "operand `x`: values: give one of"),
        ("ignore = -100, ", "", "operand `t`: values: `ignore` and `ignore_fraction` go together"),
        (
            "dtype = \"i32\", values = { integers = [0, \"cols\"], ignore = -100, ignore_fraction = 0.1, outside_fraction = 0.02 }",
            "dtype = \"i32\"",
            "operand `t` holds integers: declare the values trials draw for it",
        ),
        ("access = \"readwrite\"", "access = \"readwrite\", values = { normal = [0.0, 0.0] }", "operand `r`: values: normal = [0, 0]"),
        (
            "{ name = \"loss\", access = \"write\"",
            "{ name = \"loss\", access = \"write\", values = { normal = [0.0, 1.0] }",
            "operand `loss`: `values` fills what a kernel reads",
        ),
        ("elem_t", "elem_q", "work.bytes: expression"),
        (
            "access = \"readwrite\"",
            "access = \"readwrite\", optional = true",
            "operand `r`: an operand updated in place may not be optional",
        ),
    ];
    for (from, to, rule) in cases {
        assert!(family.contains(from), "{from}");
        let text = family.replacen(from, to, 1);
        let message = Config::parse(Path::new("variants.toml"), &text).unwrap_err().to_string();
        assert!(message.starts_with("variants.toml:1: [loss.family]: ") && message.contains(rule), "{rule}: {message}");
    }
    let message = Config::parse(Path::new("variants.toml"), &family.replace("\"readwrite\"", "\"rw\"")).unwrap_err().to_string();
    assert!(message.contains("variants.toml:6: unknown value `rw`, expected one of `read`, `write`, `readwrite`"), "{message}");
    // Constant ranges are checked against a fixed integer type at gen.
    let u8_family = family.replace(
        "dtype = \"i32\", values = { integers = [0, \"cols\"], ignore = -100, ignore_fraction = 0.1, outside_fraction = 0.02 }",
        "dtype = \"u8\", values = { integers = [0, 300] }",
    );
    let message = Config::parse(Path::new("variants.toml"), &u8_family).unwrap_err().to_string();
    assert!(message.contains("operand `t`: values: 299 is not a value of u8 (0 to 255)"), "{message}");
    // An operand typed by the variant's dtype is checked for each variant (in the manifest's
    // check, at gen): in an i32 variant, `r` holds integers and declares no values.
    let config = Config::parse(
        Path::new("variants.toml"),
        &family.replace("dtype = \"f32\"\nbackend", "dtype = \"i32\"\nbackend").replace("f32 = 1e-5 }", "f32 = 1e-5, i32 = 0.0 }"),
    )
    .unwrap();
    let declared = &config.variants[0];
    let message = declared.family.undrawn_integers(&declared.variant).unwrap_err();
    assert!(message.contains("operand `r` (i32) holds integers: declare the values trials draw for it"), "{message}");
    assert!(config.variants[0]
        .family
        .undrawn_integers(&Config::parse(Path::new("variants.toml"), family).unwrap().variants[0].variant)
        .is_ok());
}

/// Operands of more than two sides name a stride for each side but the last.
#[test]
fn many_sided_operands_name_a_stride_per_side() {
    let family = r#"[rope.family]
quantities = ["batch", "seq", "heads", "dim"]
operands = [
    { name = "q", access = "readwrite", dims = ["batch", "seq", "heads", "dim"], strides = ["sqb", "sqs", "sqh"] },
    { name = "cos", access = "read", dims = ["seq", "dim"], ld = "ldc" },
]
work = { bytes = "2 * batch * seq * heads * dim * elem" }
baseline = "copy"
reference = { backend = "reference", tolerance = { bf16 = 1e-2 } }

[rope.defaults]
dtype = "bf16"
backend = "reference"
warps = 4
bounds = "checked"

[rope.backends.reference]
template = "rope.cu.tera"
sass = ["sm_90"]
ptx = "compute_90"

[[rope.groups]]
"#;
    let config = Config::parse(Path::new("variants.toml"), family).unwrap();
    let declared = &config.variants[0].family;
    assert_eq!(declared.all_quantities(), ["batch", "seq", "heads", "dim", "sqb", "sqs", "sqh", "ldc"]);
    let values = [("batch", 2), ("seq", 3), ("heads", 4), ("dim", 64), ("sqb", 3 * 4 * 64), ("sqs", 4 * 64), ("sqh", 64), ("ldc", 64)];
    let quantity = |name: &str| values.iter().find(|(n, _)| *n == name).map(|(_, v)| *v);
    let stored = declared.stored(&config.variants[0].variant, &declared.operands[0], &quantity).unwrap();
    assert_eq!((stored.rows, stored.cols, stored.ld, stored.outer), (4, 64, 64, vec![(2, 768), (3, 256)]));
    let cases = [
        (
            "strides = [\"sqb\", \"sqs\", \"sqh\"]",
            "strides = [\"sqb\", \"sqs\"]",
            "operand `q`: an operand of 4 sides names a stride for each but the last (contiguous): 3 quantities, where `strides` lists 2",
        ),
        // Round four: no side at all ("`strides` has 0 quantities, not 0" at 594d27a).
        ("dims = [\"seq\", \"dim\"], ld = \"ldc\"", "dims = []", "operand `cos`: `dims` lists no side; an operand has 1 to 8"),
        ("strides = [\"sqb\", \"sqs\", \"sqh\"]", "strides = [\"sqb\", \"sqs\", \"ldc\"]", "`ldc`: the name is taken"),
        ("ld = \"ldc\"", "strides = [\"ldc\"], ld = \"ldd\"", "operand `cos`: give `ld` (a matrix) or `strides`, not both"),
        ("dims = [\"seq\", \"dim\"], ld = \"ldc\"", "dims = [\"dim\"], ld = \"ldc\"", "operand `cos`: a vector is contiguous"),
        (
            "dims = [\"batch\", \"seq\", \"heads\", \"dim\"]",
            "dims = [\"batch\", \"seq\", \"heads\", \"dim\", \"dim\", \"dim\", \"dim\", \"dim\", \"dim\"]",
            "operand `q`: dims has 1 to 8 sides",
        ),
    ];
    for (from, to, rule) in cases {
        assert!(family.contains(from), "{from}");
        let message = Config::parse(Path::new("variants.toml"), &family.replacen(from, to, 1)).unwrap_err().to_string();
        assert!(message.starts_with("variants.toml:1: [rope.family]: ") && message.contains(rule), "{rule}: {message}");
    }
}

#[test]
fn an_output_is_judged_relative_to_another_output_only() {
    let scale = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/standalone/variants.toml")).unwrap();
    let with = |pair: &str| scale.replace("bf16 = 1e-2 } }", &format!("bf16 = 1e-2 }}, relative_to = {{ {pair} }} }}"));
    assert_ne!(with("y = \"x\""), scale);
    for pair in ["y = \"x\"", "y = \"y\"", "z = \"y\""] {
        let message = Config::parse(Path::new("variants.toml"), &with(pair)).map(drop).unwrap_err().to_string();
        assert!(
            message.contains("reference.relative_to: `") && message.contains("names two different outputs of the family"),
            "{pair}: {message}"
        );
    }
}

/// The shipped GEMM declaration with `axis` declared beside its own, and `groups` after BASE.
fn with_axis(axis: &str, groups: &str) -> Result<Config, String> {
    let family = shipped_table("gemm.family").replacen("axes = [\n", &format!("axes = [\n    {axis},\n"), 1);
    Config::parse(Path::new("variants.toml"), &format!("{BASE}{groups}\n{family}")).map_err(|err| err.to_string())
}

/// Round four: an axis's values may be written as numbers, in its declaration and in groups.
#[test]
fn numeric_axis_values_may_be_numbers() {
    let axis = r#"{ name = "group", values = [64, 128], prefix = "g", default = 64 }"#;
    let config = with_axis(axis, "[[gemm.groups]]\ngroup = [64, 128]\n").unwrap();
    let names: Vec<&str> = config.variants.iter().map(|d| d.variant.name.as_str()).collect();
    assert_eq!(names, ["gemm_tn_128x128x32", "gemm_tn_128x128x32_g128"]);
    let as_words =
        with_axis(r#"{ name = "group", values = ["64", "128"], prefix = "g", default = "64" }"#, "[[gemm.groups]]\ngroup = \"128\"\n");
    assert_eq!(as_words.unwrap().variants[0].variant.name, "gemm_tn_128x128x32_g128");
    let message = with_axis(axis, "[[gemm.groups]]\ngroup = 96\n").unwrap_err();
    assert!(message.contains("axis `group`: unknown value `96` (expected one of 64, 128)"), "{message}");
    let message = with_axis(r#"{ name = "group", values = [64, 1.5], default = 64 }"#, "[[gemm.groups]]\n").unwrap_err();
    assert!(message.contains("1.5 is not a whole number") && !message.contains("untagged"), "{message}");
}

/// Round four: an axis may not take a name the templates see beside the axes.
#[test]
fn an_axis_may_not_hide_a_name_templates_see() {
    for (name, says) in [
        ("variant", "`variant`:"),
        ("params", "`params`:"),
        ("tm", "the tile's edge along `m`"),
        ("a_row_major", "whether operand `a` is row-major"),
    ] {
        let message = with_axis(&format!(r#"{{ name = "{name}", values = ["x"], default = "x" }}"#), "[[gemm.groups]]\n").unwrap_err();
        assert!(
            message.contains(&format!("axis `{name}`: the name is taken by what templates see")) && message.contains(says),
            "{message}"
        );
    }
}

/// Round four: a float where an expression goes says what an expression takes.
#[test]
fn a_float_in_an_expression_is_named_as_such() {
    let family = shipped_table("gemm.family");
    let (start, end) = (family.find("work = ").unwrap(), family[family.find("work = ").unwrap()..].find('\n').unwrap());
    let family = format!("{}work = {{ flops = 2.5 }}{}", &family[..start], &family[start + end..]);
    let message = Config::parse(Path::new("variants.toml"), &format!("{BASE}[[gemm.groups]]\n{family}")).unwrap_err().to_string();
    assert!(message.contains("2.5 is not a whole number") && !message.contains("untagged"), "{message}");
}

/// Round four: a long axis list is read in linear time before the variant limit refuses it
/// (594d27a looked each value up in the list of those before it: 26.6 s for 200,000).
#[test]
fn a_long_axis_list_is_refused_in_linear_time() {
    let parse_tiles = |count: usize| {
        let tiles: Vec<String> =
            (0..count).map(|i| format!("[{}, {}, {}]", 16 * (1 + i % 64), 16 * (1 + i / 64 % 64), 16 * (1 + i / 4096))).collect();
        let groups = format!("[[gemm.groups]]\ntile = [{}]\n", tiles.join(", "));
        let start = std::time::Instant::now();
        let message = error(&groups);
        assert!(message.contains("20000"), "{message}");
        start.elapsed().as_secs_f64()
    };
    // Ten times the values: linear work takes about 10 times as long, quadratic 100 times. The
    // bound leaves room for wall time's noise (other tests run beside this one): the best of
    // three of each, and 40 times.
    let best = |count: usize| (0..3).map(|_| parse_tiles(count)).fold(f64::INFINITY, f64::min);
    let (small, large) = (best(25_000), best(250_000));
    assert!(large < 40.0 * small.max(0.02), "25,000 tiles {small} s, 250,000 {large} s");
}
