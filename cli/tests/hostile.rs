//! Inputs as a careless user or an attacker would write them (the third reliability round):
//! each is refused with the thing named and the rule broken, within bounded time and memory,
//! and nothing of the user's is lost.

mod common;

use common::{text, xtask};
use std::path::{Path, PathBuf};
use std::process::Command;

/// Fails with a message (an exit code, not a signal: a stack overflow or an abort is a failure
/// of this test).
fn refused(root: Option<&Path>, args: &[&str]) -> String {
    let output = xtask(root, args);
    assert_eq!(output.status.code(), Some(1), "tilesmith {args:?} should have been refused:\n{}", text(&output));
    text(&output)
}

/// A project made by `tilesmith init`.
fn project() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let output = xtask(None, &["init", dir.path().to_str().unwrap()]);
    assert!(output.status.success(), "{}", text(&output));
    dir
}

fn files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            out.extend(files(&path));
        } else {
            out.push(path);
        }
    }
    out.sort();
    out
}

#[test]
fn bundle_never_replaces_a_users_folder_the_project_or_one_above_it() {
    let project = project();
    let root = project.path();
    let before = files(root);
    let mine = tempfile::tempdir().unwrap();
    std::fs::write(mine.path().join("thesis.tex"), "years of work").unwrap();
    let message = refused(Some(root), &["bundle", "--out", mine.path().to_str().unwrap()]);
    assert!(message.contains("not an earlier bundle"), "{message}");
    assert!(mine.path().join("thesis.tex").is_file());
    for (out, rule) in [
        (root.to_path_buf(), "the project or a folder above it"),
        (root.join("."), "the project or a folder above it"),
        (root.parent().unwrap().to_path_buf(), "the project or a folder above it"),
        (PathBuf::from("/"), "the project or a folder above it"),
        (root.join("kernel-templates"), "which the project owns"),
        (root.join("registry"), "which the project owns"),
        (root.join("generated").join("deeper"), "which the project owns"),
        // A missing folder before `..`: the path the OS would use once the folder is made.
        (root.join("nothere/../.."), "does not exist"),
        (root.join("nothere/../kernel-templates/b"), "does not exist"),
        (root.join("kernel-templates/../kernel-templates/b"), "which the project owns"),
    ] {
        let message = refused(Some(root), &["bundle", "--out", out.to_str().unwrap()]);
        assert!(message.contains(rule), "{}: {message}", out.display());
    }
    assert_eq!(files(root), before, "a refused bundle touched the project");
}

fn template(root: &Path) -> PathBuf {
    root.join("kernel-templates").join("scale.cu.tera")
}

/// The init project with `extra` templates and the scale template's text replaced by `text`.
fn with_template(text: &str, extra: &[(&str, &str)]) -> tempfile::TempDir {
    let project = project();
    std::fs::write(template(project.path()), text).unwrap();
    for (name, body) in extra {
        std::fs::write(project.path().join("kernel-templates").join(name), body).unwrap();
    }
    project
}

/// `count` macros each calling the next, the last writing `x`: a chain `count` calls deep.
fn chain(count: usize) -> &'static str {
    let mut text: String = (0..count).map(|i| format!("{{% macro m{i}() %}}{{{{ self::m{}() }}}}{{% endmacro m{i} %}}", i + 1)).collect();
    text.push_str(&format!("{{% macro m{count}() %}}x{{% endmacro m{count} %}}"));
    text.leak()
}

/// A template's text, other templates beside it, and the rule its gen must be refused with.
type Case<'a> = (String, Vec<(&'a str, &'a str)>, &'a str);

#[test]
fn templates_that_recurse_loop_or_grow_without_bound_are_refused_by_name() {
    let cases: Vec<Case> = vec![
        ("{% include \"scale.cu.tera\" %}".into(), vec![], "scale.cu.tera recurses (scale.cu.tera → scale.cu.tera)"),
        (
            "{% include \"a.cu.tera\" %}".into(),
            vec![("a.cu.tera", "{% include \"b.cu.tera\" %}"), ("b.cu.tera", "{% include \"a.cu.tera\" %}")],
            "recurses",
        ),
        ("{% macro m(n) %}{{ self::m(n=n) }}{% endmacro m %}{{ self::m(n=1) }}".into(), vec![], "macro m of scale.cu.tera recurses"),
        ("{% for i in range(end=1000000000000) %}{% endfor %}".into(), vec![], "more than the limit of 1000000"),
        (
            "{% for i in range(end=1000000) %}{{ \"0123456789012345678901234567890123456789\" }}{% endfor %}".into(),
            vec![],
            "writes more than the limit of 16 MiB",
        ),
        (format!("{{{{ {}1{} }}}}", "(".repeat(20_000), ")".repeat(20_000)), vec![], "nests tags or brackets deeper than the limit of 64"),
        (format!("{}{}", "{% if true %}".repeat(10_000), "{% endif %}".repeat(10_000)), vec![], "deeper than the limit of 64"),
        ("{% if emit == \"launch\" %}{{ backed }}{% endif %}".into(), vec![], "first used at line 1); did you mean `backend`?"),
        // Round four: growth that writes nothing, long expressions and deep chains of calls.
        (
            "{% set s = \"x\" %}{% for i in range(end=40) %}{% set_global s = s ~ s %}{% endfor %}".into(),
            vec![],
            "grew past the limit of 1024 MiB of memory while rendering",
        ),
        (
            "{% set s = \"x\" %}{% for i in range(end=40) %}{% set_global s = s | replace(from=\"x\", to=\"xx\") %}{% endfor %}".into(),
            vec![],
            "grew past the limit of 1024 MiB of memory while rendering",
        ),
        (format!("{{% set big = {} %}}", vec!["1"; 50_000].join(" + ")), vec![], "line 1: a tag of 200009 bytes, past the limit of 4096"),
        (
            "{% import \"chain.cu.tera\" as c %}{% set z = c::m0() %}".into(),
            vec![("chain.cu.tera", chain(1_000))],
            "enters a chain of 129 includes and macro calls, past the limit of 128",
        ),
    ];
    for (text, extra, rule) in cases {
        let project = with_template(&text, &extra);
        let message = refused(Some(project.path()), &["gen"]);
        assert!(message.contains(rule), "{rule}:\n{message}");
        assert!(!project.path().join("generated").exists(), "{rule}: gen wrote generated/");
    }
}

#[test]
fn a_template_doubling_its_work_is_stopped_at_the_time_limit() {
    // 40 macros each calling the one below twice: 2^40 calls.
    let mut text = String::from("{% macro m0() %}x{% endmacro m0 %}\n");
    for level in 1..=40 {
        let below = level - 1;
        text.push_str(&format!("{{% macro m{level}() %}}{{{{ self::m{below}() }}}}{{{{ self::m{below}() }}}}{{% endmacro m{level} %}}\n"));
    }
    text.push_str("{% if emit == \"launch\" %}{{ self::m40() }}{% endif %}");
    let project = with_template(&text, &[]);
    let start = std::time::Instant::now();
    let message = refused(Some(project.path()), &["gen"]);
    assert!(message.contains("did not finish rendering within the limit of 10 s"), "{message}");
    // Round four: once one render runs away, the other variants of the template are not started
    // beside it (nine took 45 s at 594d27a, each its own 10 s).
    assert!(message.contains("9 variants share this error"), "{message}");
    assert!(start.elapsed().as_secs() < 30, "{:?}", start.elapsed());
}

#[test]
fn one_template_error_is_reported_once_with_the_count_of_variants_sharing_it() {
    let text = std::fs::read_to_string(template(project().path())).unwrap();
    let project = with_template(&text.replace("{{ threads }}, 1, 1]", "{{ threadz }}, 1, 1]"), &[]);
    let message = refused(Some(project.path()), &["gen"]);
    assert_eq!(message.matches("threadz").count(), 1, "{message}");
    assert!(message.contains("9 variants share this error"), "{message}");
}

#[test]
fn expressions_too_long_or_deep_are_refused_naming_the_file() {
    let project = project();
    let variants = project.path().join("variants.toml");
    let text = std::fs::read_to_string(&variants).unwrap();
    assert!(xtask(Some(project.path()), &["gen"]).status.success());
    let manifest = project.path().join("generated").join("manifest.json");
    let generated = std::fs::read_to_string(&manifest).unwrap();
    for (expr, rule) in [
        (format!("{}n{}", "(".repeat(20_000), ")".repeat(20_000)), "longer than the limit of 4096"),
        (vec!["n"; 50_000].join(" + "), "longer than the limit of 4096"),
        (format!("{}n{}", "(".repeat(100), ")".repeat(100)), "deeper than the limit of 64"),
    ] {
        std::fs::write(&variants, text.replace("\"2 * n * elem\"", &format!("\"{expr}\""))).unwrap();
        for command in [&["gen"][..], &["list"], &["gen", "--repair"]] {
            let message = refused(Some(project.path()), command);
            assert!(message.contains("variants.toml") && message.contains(rule), "{command:?}: {message}");
        }
        // The same expression in the manifest gen wrote: the build and its repair refuse it.
        std::fs::write(&variants, &text).unwrap();
        std::fs::write(&manifest, generated.replace("\"2 * n * elem\"", &format!("\"{expr}\""))).unwrap();
        for command in [&["build"][..], &["build", "--repair"]] {
            let message = refused(Some(project.path()), command);
            assert!(message.contains("manifest.json") && message.contains(rule), "{command:?}: {message}");
        }
        std::fs::write(&manifest, &generated).unwrap();
    }
}

#[cfg(unix)]
#[test]
fn special_files_are_refused_not_read_forever() {
    let project = project();
    let variants = project.path().join("variants.toml");
    std::fs::remove_file(&variants).unwrap();
    std::os::unix::fs::symlink("/dev/zero", &variants).unwrap();
    let message = refused(Some(project.path()), &["gen"]);
    assert!(message.contains("variants.toml") && message.contains("not a regular file"), "{message}");

    let project = with_template("", &[]);
    std::fs::remove_file(template(project.path())).unwrap();
    assert!(Command::new("mkfifo").arg(template(project.path())).status().unwrap().success());
    let message = refused(Some(project.path()), &["gen"]);
    assert!(message.contains("scale.cu.tera") && message.contains("not a regular file"), "{message}");

    let project = crate::project();
    std::fs::create_dir_all(project.path().join("tuning/gemm")).unwrap();
    std::os::unix::fs::symlink("/dev/zero", project.path().join("tuning/gemm/NVIDIA_H100-132sm.json")).unwrap();
    let message = refused(Some(project.path()), &["build"]);
    assert!(message.contains("NVIDIA_H100-132sm.json") && message.contains("not a regular file"), "{message}");

    let dir = tempfile::tempdir().unwrap();
    let replot = dir.path().join("bench.json");
    std::os::unix::fs::symlink("/dev/zero", &replot).unwrap();
    let message = refused(None, &["bench", "--replot", replot.to_str().unwrap(), "--out", dir.path().to_str().unwrap()]);
    assert!(message.contains("bench.json") && message.contains("not a regular file"), "{message}");
}

/// Round four: special files where gen and build write (not where they read) are replaced, never
/// read: a FIFO would block, a link to /dev/zero would be read to the memory cap.
#[cfg(unix)]
#[test]
fn special_files_where_gen_and_build_write_are_replaced_not_read() {
    let project = project();
    let root = project.path();
    assert!(xtask(Some(root), &["gen"]).status.success());
    let generated = root.join("generated");
    let source = std::fs::read_dir(&generated)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|e| e == "cu"))
        .expect("init's project renders a source");
    for (path, special) in [(&source, "fifo"), (&generated.join("manifest.json"), "fifo"), (&source, "zero")] {
        std::fs::remove_file(path).unwrap();
        if special == "fifo" {
            assert!(Command::new("mkfifo").arg(path).status().unwrap().success());
        } else {
            std::os::unix::fs::symlink("/dev/zero", path).unwrap();
        }
        let output = common::xtask_within(60, Some(root), &["gen"]);
        assert!(output.status.success(), "gen over a {special} at {}: {}", path.display(), text(&output));
        assert!(std::fs::symlink_metadata(path).unwrap().is_file(), "{} was not replaced", path.display());
    }
    let name = source.file_stem().unwrap().to_str().unwrap();
    let record = root.join("registry").join(format!("{name}.json"));
    std::fs::create_dir_all(record.parent().unwrap()).unwrap();
    assert!(Command::new("mkfifo").arg(&record).status().unwrap().success());
    // No nvcc is needed to get past the records: the build reads them before compiling.
    let output = common::xtask_within(60, Some(root), &["build", "--kernels", name]);
    assert_ne!(output.status.code(), Some(124), "build blocked on a FIFO at {}: {}", record.display(), text(&output));
}

/// Round four: gen says which variants have no reference to be checked against, before any GPU
/// runs their trials.
#[test]
fn gen_names_variants_without_their_reference() {
    let project = project();
    let variants = project.path().join("variants.toml");
    let declared = std::fs::read_to_string(&variants).unwrap();
    let cut = declared
        .replace("dtype = [\"f32\", \"f16\", \"bf16\"]\nbackend = \"reference\"", "dtype = [\"f32\", \"f16\"]\nbackend = \"reference\"");
    assert_ne!(cut, declared, "init's variants.toml has no reference group to cut");
    std::fs::write(&variants, cut).unwrap();
    let output = xtask(Some(project.path()), &["gen"]);
    let message = text(&output);
    assert!(output.status.success(), "{message}");
    assert!(message.contains("warning: 1 reference variant(s) missing"), "{message}");
    assert!(
        message.contains("scale: no reference variant (backend `reference`, dtype bf16, bounds checked) for 2 variant(s): scale_bf16"),
        "{message}"
    );
}

/// Round four: a grid past CUDA's limits for a declared trial shape is refused at gen (the
/// runtime refuses such a call too, `runtime/tests`), naming the shape and the limit.
#[test]
fn a_trial_grid_past_cudas_limits_is_refused_at_gen() {
    let project = project();
    let template = template(project.path());
    let text = std::fs::read_to_string(&template).unwrap();
    let rows_on_y = text.replace("x = \"cdiv(n, {{ threads }})\", y = \"1\"", "x = \"1\", y = \"cdiv(n, {{ threads }})\"");
    assert_ne!(rows_on_y, text, "init's template has no grid rule to change");
    std::fs::write(&template, rows_on_y).unwrap();
    let message = refused(Some(project.path()), &["gen"]);
    assert!(message.contains("trials.perf { n = 16777216 }") && message.contains("grid of [1, "), "{message}");
    assert!(message.contains("65535") && message.contains("belongs on x"), "{message}");
}

/// `tilesmith ARGS` in `root` with its address space capped at `mib` MiB (bash's `ulimit -v`):
/// an allocation past it fails the command.
fn within_memory(mib: u64, root: &Path, args: &[&str]) -> std::process::Output {
    Command::new("bash")
        .arg("-c")
        .arg(format!("ulimit -v {} && exec \"$0\" --root \"$1\" \"${{@:2}}\"", mib * 1024))
        .arg(env!("CARGO_BIN_EXE_tilesmith"))
        .arg(root)
        .args(args)
        .output()
        .unwrap()
}

/// Round four: memory follows the declaration's size once, not once per variant: a family of
/// 195 variants declaring 10,000 trial shapes gens, lists and reads its manifest in 768 MiB
/// (594d27a copied the declaration into every variant, and into the manifest's JSON twice);
/// past 10,000 shapes a list is refused by name.
#[cfg(unix)]
#[test]
fn a_large_declaration_is_held_once_and_its_lists_are_bounded() {
    let project = project();
    let variants = project.path().join("variants.toml");
    let shapes = |count: usize| (1..=count).map(|n| format!("{{ n = {n} }}")).collect::<Vec<_>>().join(", ");
    let warps = (1..=32).map(|w| w.to_string()).collect::<Vec<_>>().join(", ");
    let declared = std::fs::read_to_string(&variants)
        .unwrap()
        .replace("trials.perf = { n = 16777216 }", &format!("trials.perf = {{ n = 16777216 }}\ntrials.shapes = [{}]", shapes(10_000)))
        .replace("warps = [4, 8]", &format!("warps = [{warps}]\nbounds = [\"checked\", \"unchecked\"]"));
    std::fs::write(&variants, &declared).unwrap();
    for args in [&["gen"][..], &["list"]] {
        let output = within_memory(768, project.path(), args);
        assert!(output.status.success(), "{args:?}: {}", text(&output));
    }
    assert!(text(&within_memory(768, project.path(), &["list"])).contains("195 variant(s)"));
    std::fs::write(&variants, declared.replace("{ n = 10000 }]", "{ n = 10000 }, { n = 10001 }]")).unwrap();
    let message = refused(Some(project.path()), &["gen"]);
    assert!(message.contains("trials.shapes lists 10001 shapes, more than the 10000 a list may hold"), "{message}");
}

/// Round four: a kernel whose compiled parameter list is not its launch contract's is refused by
/// the build, naming both; 594d27a built it, and its launch would have been undefined.
#[test]
fn a_hand_written_signature_that_is_not_the_contract_fails_the_build() {
    let text = std::fs::read_to_string(template(project().path())).unwrap();
    for (signature, says) in [
        (
            "const T* __restrict__ X, T* __restrict__ Y, int n, float alpha, int extra",
            "takes 5 parameter(s) on sm_80, but its launch contract declares 4: `X` (8 bytes), `Y` (8 bytes), `n` (4 bytes), `alpha` (4 bytes)",
        ),
        (
            "const T* __restrict__ X, T* __restrict__ Y, long long n, float alpha",
            "takes 8 bytes as its parameter 3 on sm_80, but its launch contract's parameter 3 is `n` (4 bytes)",
        ),
    ] {
        let project = with_template(&text.replace("{{ variant }}({{ signature }})", &format!("{{{{ variant }}}}({signature})")), &[]);
        assert!(xtask(Some(project.path()), &["gen"]).status.success());
        let message = refused(Some(project.path()), &["build", "--kernels", "scale"]);
        assert!(message.contains(says), "{message}");
        assert!(message.contains("kernel-templates/scale.cu.tera"), "{message}");
        assert!(!project.path().join("registry/scale.fatbin").exists(), "{message}");
    }
}

/// Round four: a fatbin replaced by an older file that keeps its modification time (`cp -p`) is
/// not taken for the one recorded: the build compiles it again.
#[cfg(unix)]
#[test]
fn a_fatbin_replaced_by_an_older_copy_is_compiled_again() {
    let project = project();
    let root = project.path();
    assert!(xtask(Some(root), &["gen"]).status.success());
    let output = xtask(Some(root), &["build", "--kernels", "scale"]);
    assert!(output.status.success(), "{}", text(&output));
    let registry = root.join("registry");
    let (fatbin, other) = (registry.join("scale.fatbin"), registry.join("scale_reference.fatbin"));
    let recorded = std::fs::read(&fatbin).unwrap();
    // Another fatbin of this build put in its place, its modification time kept.
    assert!(Command::new("cp").arg("-p").arg(&other).arg(&fatbin).status().unwrap().success());
    assert_ne!(std::fs::read(&fatbin).unwrap(), recorded);
    let output = xtask(Some(root), &["build", "--kernels", "scale"]);
    let message = text(&output);
    assert!(output.status.success() && message.contains("no longer matches the SHA-256 recorded"), "{message}");
    assert_eq!(std::fs::read(&fatbin).unwrap().len(), recorded.len(), "compiled again");
}

/// Round four: a project folder whose name is not UTF-8 is named in the build's refusal
/// ("path contains invalid UTF-8 characters" at 594d27a, after compiling everything).
#[cfg(target_os = "linux")]
#[test]
fn a_project_path_that_is_not_utf8_is_named() {
    use std::os::unix::ffi::OsStrExt;
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join(std::ffi::OsStr::from_bytes(b"proj\xff"));
    let output = Command::new(env!("CARGO_BIN_EXE_tilesmith")).arg("init").arg(&root).output().unwrap();
    assert!(output.status.success(), "{}", text(&output));
    let output = Command::new(env!("CARGO_BIN_EXE_tilesmith")).arg("--root").arg(&root).arg("build").output().unwrap();
    let message = text(&output);
    assert_eq!(output.status.code(), Some(1), "{message}");
    assert!(message.contains("proj\u{fffd}") && message.contains("is not valid UTF-8"), "{message}");
    assert!(!root.join("registry").exists(), "{message}");
}

/// Round four: declarations that no GPU or call could use are refused at gen: clusters on an
/// sm_80 target, f16 trial values past 65,504, a rule no call keeps.
#[test]
fn declarations_that_cannot_work_are_refused_at_gen() {
    let text = std::fs::read_to_string(template(project().path())).unwrap();
    let clusters = with_template(&text.replace("dynamic_smem_bytes = 0", "cluster = [2, 1, 1]\ndynamic_smem_bytes = 0"), &[]);
    let message = refused(Some(clusters.path()), &["gen"]);
    assert!(
        message.contains("launches clusters of [2, 1, 1] blocks, which need sm_90 or later, but its backend targets sm_80"),
        "{message}"
    );
    for (from, to, says) in [
        (
            "{ name = \"x\", access = \"read\", dims = [\"n\"] }",
            "{ name = \"x\", access = \"read\", dims = [\"n\"], values = { uniform = [-100000.0, 100000.0] } }",
            "operand `x` (f16): its trial values reach 100000, past 65504, the largest finite f16",
        ),
        ("work = {", "rules = [{ holds = \"n < 0\", says = \"never\" }]\nwork = {", "rule `n < 0` holds for no call"),
    ] {
        let project = project();
        let variants = project.path().join("variants.toml");
        let declared = std::fs::read_to_string(&variants).unwrap();
        assert!(declared.contains(from), "{from}");
        std::fs::write(&variants, declared.replacen(from, to, 1)).unwrap();
        let message = refused(Some(project.path()), &["gen"]);
        assert!(message.contains(says), "{message}");
    }
}

/// Round four: kernel-templates/ holding links to folders (two to `.` made gen walk forever, one
/// to `/` the file system) is refused naming the link; an empty subfolder changes nothing.
#[cfg(unix)]
#[test]
fn links_to_folders_in_the_templates_are_refused_and_empty_folders_ignored() {
    let project = project();
    let templates = project.path().join("kernel-templates");
    std::fs::create_dir_all(templates.join("aaa_empty")).unwrap();
    std::fs::create_dir_all(templates.join("zzz_empty")).unwrap();
    let output = common::xtask_within(60, Some(project.path()), &["gen"]);
    assert!(output.status.success(), "{}", text(&output));
    for (link, to) in [("loop_a", "."), ("root", "/")] {
        std::os::unix::fs::symlink(to, templates.join(link)).unwrap();
        if link == "loop_a" {
            std::os::unix::fs::symlink(".", templates.join("loop_b")).unwrap();
        }
        let output = common::xtask_within(60, Some(project.path()), &["gen"]);
        let message = text(&output);
        assert_eq!(output.status.code(), Some(1), "{link}: {message}");
        assert!(message.contains("is a link to a folder"), "{link}: {message}");
        for name in [link, "loop_b"] {
            let _ = std::fs::remove_file(templates.join(name));
        }
    }
}

#[test]
fn init_writes_nothing_when_it_cannot_finish_and_joins_an_existing_gitignore() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("kernel-templates"), "a file").unwrap();
    let message = refused(None, &["init", dir.path().to_str().unwrap()]);
    assert!(message.contains("kernel-templates is a file") && message.contains("nothing was written"), "{message}");
    assert_eq!(files(dir.path()), [dir.path().join("kernel-templates")]);

    // A fresh `cargo new` crate: its .gitignore keeps its lines and gains the registry's.
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join(".gitignore"), "/target").unwrap();
    let output = xtask(None, &["init", dir.path().to_str().unwrap()]);
    assert!(output.status.success(), "{}", text(&output));
    let gitignore = std::fs::read_to_string(dir.path().join(".gitignore")).unwrap();
    assert!(gitignore.starts_with("/target\n") && gitignore.contains("\n/registry\n"), "{gitignore}");
}

/// The `"key": number` values of a JSON text, in order.
fn numbers(text: &str, key: &str) -> Vec<u64> {
    text.match_indices(&format!("\"{key}\": "))
        .map(|(at, m)| text[at + m.len()..].split(|c: char| !c.is_ascii_digit()).next().unwrap().parse().unwrap())
        .collect()
}

#[test]
fn a_cache_record_whose_report_the_fatbin_contradicts_is_not_taken() {
    let project = project();
    let root = project.path();
    let cache = tempfile::tempdir().unwrap();
    let cache_arg = cache.path().to_str().unwrap();
    assert!(xtask(Some(root), &["gen"]).status.success());
    let built = xtask(Some(root), &["build", "--cache", cache_arg]);
    assert!(built.status.success(), "{}", text(&built));
    let honest = std::fs::read_to_string(root.join("registry").join("scale.json")).unwrap();
    let registers = numbers(&honest, "registers");
    assert!(!registers.is_empty() && registers.iter().all(|&r| r > 0 && r < 255), "{honest}");

    std::fs::remove_dir_all(root.join("registry")).unwrap();
    let again = text(&xtask(Some(root), &["build", "--cache", cache_arg]));
    assert!(again.contains("(9 taken from the cache)"), "honest records are taken: {again}");

    for entry in std::fs::read_dir(cache.path()).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "json") {
            let record = std::fs::read_to_string(&path).unwrap();
            std::fs::write(&path, record.replace("\"registers\":", "\"registers\":9999,\"was\":")).unwrap();
        }
    }
    std::fs::remove_dir_all(root.join("registry")).unwrap();
    let tampered = text(&xtask(Some(root), &["build", "--cache", cache_arg]));
    assert!(tampered.contains("9 compiled now, 0 failed") && !tampered.contains("taken from the cache"), "{tampered}");
    let listed = text(&xtask(Some(root), &["list"]));
    assert!(!listed.contains("9999"), "{listed}");
    assert_eq!(numbers(&std::fs::read_to_string(root.join("registry").join("scale.json")).unwrap(), "registers"), registers);

    // A file given as the cache is refused once, before any compile.
    let file = cache.path().join("not-a-folder");
    std::fs::write(&file, "").unwrap();
    let message = refused(Some(root), &["build", "--cache", file.to_str().unwrap()]);
    assert_eq!(message.matches("is a file; the cache is a folder").count(), 1, "{message}");
}

/// `count` bench records, their families alternating between `families`.
fn bench_records(count: usize, families: &[&str]) -> String {
    bench_records_of(count, families, |i| 1024 + i / 200)
}

/// `count` records of 200 variants over `families`, record i of `rows(i)` × 4096.
fn bench_records_of(count: usize, families: &[&str], rows: impl Fn(usize) -> usize) -> String {
    let records: Vec<String> = (0..count)
        .map(|i| {
            format!(
                r#"{{"variant": "v{}", "family": "{}", "dtype": "bf16", "shape": [{}, 4096], "device": "GPU", "unit": "GB/s",
                "kernel_ms": 0.1, "kernel": 1000.0, "baseline_name": "device copy", "baseline_ms": 0.1, "baseline": 2000.0,
                "ratio": 0.5, "input_sets": 1, "measured_at": 0}}"#,
                i % 200,
                families[i % families.len()],
                rows(i)
            )
        })
        .collect();
    format!("[{}]", records.join(",\n"))
}

#[test]
fn replot_writes_only_into_its_folder_and_takes_linear_time() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    for family in ["../../escaped", "/tmp/absolute", "a/b", ""] {
        let records = dir.path().join("bench.json");
        std::fs::write(&records, bench_records(1, &[family])).unwrap();
        let message = refused(None, &["bench", "--replot", records.to_str().unwrap(), "--out", out.to_str().unwrap()]);
        assert!(message.contains("a family must be an identifier"), "{family}: {message}");
        assert!(!out.exists() && !dir.path().join("escaped_bf16.svg").exists(), "{family}: something was written");
    }
    // 20,000 records of two families, alternating (one pass per family in a run of records
    // made this quadratic: 95 s).
    let records = dir.path().join("bench.json");
    std::fs::write(&records, bench_records(20_000, &["softmax", "rmsnorm"])).unwrap();
    let start = std::time::Instant::now();
    let output = xtask(None, &["bench", "--replot", records.to_str().unwrap(), "--out", out.to_str().unwrap()]);
    assert!(output.status.success(), "{}", text(&output));
    assert!(start.elapsed().as_secs() < 20, "{:?}", start.elapsed());
    let mut written: Vec<String> =
        std::fs::read_dir(&out).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    written.sort();
    assert_eq!(written, ["bench.json", "rmsnorm_bf16.svg", "softmax_bf16.svg"]);
    // Round four: one chart of records of distinct shapes (looked up in lists at 594d27a: 35 s
    // for 20,000, four times as long per doubling) takes linear time: 10 times the records,
    // under 40 times the CPU time (quadratic work takes 100 times).
    let timed = |count: usize| {
        std::fs::write(&records, bench_records_of(count, &["softmax"], |i| 1 + i)).unwrap();
        let (ok, printed, seconds) =
            common::cpu_time(dir.path(), &["bench", "--replot", records.to_str().unwrap(), "--out", out.to_str().unwrap()]);
        assert!(ok, "{printed}");
        seconds
    };
    let (small, large) = (timed(2_000), timed(20_000));
    assert!(large < 40.0 * small.max(0.05), "2,000 records {small} s, 20,000 {large} s");
}

#[test]
fn a_generated_source_includes_only_the_toolchains_headers() {
    let project = project();
    let text = std::fs::read_to_string(template(project.path())).unwrap();
    std::fs::write(project.path().join("mine.h"), "#define SCALE 2\n").unwrap();
    for include in ["#include \"../mine.h\"", "#include </etc/hostname>", "#include <../mine.h>", "  #  include \"mine.h\""] {
        std::fs::write(
            template(project.path()),
            text.replace("{% include \"partials/header.cu.tera\" %}", &format!("{include}\n{{% include \"partials/header.cu.tera\" %}}")),
        )
        .unwrap();
        let message = refused(Some(project.path()), &["gen"]);
        assert!(message.contains("a generated source includes only the toolchain's headers"), "{include}: {message}");
    }
}

#[test]
fn a_project_path_with_shell_characters_builds_and_writes_only_inside() {
    let outer = tempfile::tempdir().unwrap();
    let root = outer.path().join("kernels $HOME `x` \"quoted\" 'single'");
    std::fs::create_dir(&root).unwrap();
    let output = xtask(None, &["init", root.to_str().unwrap()]);
    assert!(output.status.success(), "{}", text(&output));
    let before: Vec<PathBuf> = std::fs::read_dir(outer.path()).unwrap().map(|e| e.unwrap().path()).collect();
    for command in [&["gen"][..], &["build"]] {
        let output = xtask(Some(&root), command);
        assert!(output.status.success(), "{command:?}: {}", text(&output));
    }
    assert!(root.join("registry").join("scale_f16_w8.fatbin").is_file());
    let after: Vec<PathBuf> = std::fs::read_dir(outer.path()).unwrap().map(|e| e.unwrap().path()).collect();
    assert_eq!(after, before, "nothing was written beside the project");
}

#[test]
fn a_bundle_replaces_only_what_an_earlier_bundle_wrote() {
    let project = project();
    let out = tempfile::tempdir().unwrap();
    let bundle = out.path().join("bundle");
    let output = xtask(Some(project.path()), &["bundle", "--out", bundle.to_str().unwrap()]);
    assert!(output.status.success(), "{}", text(&output));
    assert!(bundle.join(".tilesmith-bundle").is_file() && bundle.join("registry/scale.fatbin").is_file());
    // What the scripts wrote there stays; what the bundle wrote is replaced.
    std::fs::create_dir(bundle.join("results")).unwrap();
    std::fs::write(bundle.join("results/trials.log"), "a GPU's afternoon").unwrap();
    std::fs::write(bundle.join("registry/stale.fatbin"), "from an older bundle").unwrap();
    let output = xtask(Some(project.path()), &["bundle", "--out", bundle.to_str().unwrap()]);
    assert!(output.status.success(), "{}", text(&output));
    assert_eq!(std::fs::read_to_string(bundle.join("results/trials.log")).unwrap(), "a GPU's afternoon");
    assert!(!bundle.join("registry/stale.fatbin").exists() && bundle.join("registry/scale.fatbin").is_file());
}
