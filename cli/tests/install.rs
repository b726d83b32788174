//! tilesmith used as someone else's project would use it: the CLI installed with `cargo install`
//! into a temporary folder and run in a project outside the repository, and the standalone
//! example crate (its own workspace, kernels built by build.rs and embedded) built and run.
//! Both build into this workspace's target folder, so that what `cargo test` compiled is reused.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf()
}

fn target_dir() -> PathBuf {
    Path::new(env!("CARGO_TARGET_TMPDIR")).parent().unwrap().to_path_buf()
}

fn cargo() -> Command {
    let mut command = Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()));
    command.env("CARGO_TARGET_DIR", target_dir());
    command
}

fn text(output: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr))
}

fn run(command: &mut Command) -> String {
    let output = command.output().expect("the command starts");
    assert!(output.status.success(), "{command:?} failed:\n{}", text(&output));
    text(&output)
}

fn fails(command: &mut Command) -> String {
    let output = command.output().expect("the command starts");
    assert!(!output.status.success(), "{command:?} should have failed:\n{}", text(&output));
    text(&output)
}

#[test]
fn the_installed_cli_inits_builds_lists_and_lists_trials_outside_the_repository() {
    let install = tempfile::tempdir().unwrap();
    run(cargo()
        .args(["install", "--quiet", "--locked", "--debug", "--path"])
        .arg(workspace().join("cli"))
        .arg("--root")
        .arg(install.path()));
    let bin = install.path().join("bin");
    let tilesmith = bin.join("tilesmith");
    assert!(bin.join("cargo-tilesmith").is_file(), "cargo-tilesmith is installed too");

    let outside = tempfile::tempdir().unwrap();
    let project = outside.path().join("my-kernels");
    // Outside any project: the folder searched from, and what to do.
    let out = fails(Command::new(&tilesmith).current_dir(outside.path()).arg("list"));
    assert!(out.contains(&format!("no variants.toml in {}", outside.path().display())) && out.contains("tilesmith init"), "{out}");
    let out = fails(Command::new(&tilesmith).current_dir(outside.path()).arg("frobnicate"));
    assert!(out.contains("unrecognized subcommand 'frobnicate'"), "{out}");

    run(Command::new(&tilesmith).current_dir(outside.path()).arg("init").arg(&project));
    let out = fails(Command::new(&tilesmith).current_dir(outside.path()).arg("init").arg(&project));
    assert!(out.contains("already holds a variants.toml"), "{out}");
    // From a subfolder, as cargo finds Cargo.toml.
    let inside = project.join("kernel-templates");
    let out = run(Command::new(&tilesmith).current_dir(&inside).arg("gen"));
    assert!(out.contains("9 variant(s) rendered"), "{out}");
    let out = run(Command::new(&tilesmith).current_dir(&inside).arg("build"));
    assert!(out.contains("9 variant(s) built") && out.contains("0 failed"), "{out}");
    assert!(project.join("registry/scale_f16_w8.fatbin").is_file());

    // `cargo tilesmith` is the same command.
    let path =
        std::env::join_paths(std::iter::once(bin.clone()).chain(std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default())))
            .unwrap();
    let out = run(cargo().current_dir(&project).env("PATH", &path).args(["tilesmith", "list"]));
    assert!(out.contains("scale_bf16_w8") && !out.contains("gemm"), "{out}");

    // The trials of this registry: its family's, no dispatcher's.
    let out = run(Command::new(&tilesmith).current_dir(&project).args(["test", "--list"]));
    assert!(out.contains("scale::scale_f16_w8::correctness: test") && out.contains("scale::scale::perf: test"), "{out}");
    assert!(!out.contains("dispatch::") && !out.contains("cpu::reference::layouts") && !out.contains("_reference::"), "{out}");
    let all = out.lines().filter(|l| l.ends_with(": test")).count();
    // The harness's own check, tuning on first call for the family, two trials per variant.
    assert!(out.contains("scale::first_call: test"), "{out}");
    assert_eq!(all, 1 + 1 + 2 * 6, "{out}");
    // Round four: standard output holds the list alone, while gen and build (which `test` runs
    // first) report on standard error; `test --help` is tilesmith's, with the options that do
    // something.
    let output = Command::new(&tilesmith).current_dir(&project).args(["test", "--list"]).output().unwrap();
    let (stdout, stderr) = (String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
    assert!(output.status.success() && stderr.contains("variant(s) rendered") && stderr.contains("9 up to date"), "{stderr}");
    assert!(stdout.lines().all(|l| l.ends_with(": test") || l.ends_with(": bench")), "not only the list on stdout:\n{stdout}");
    assert_eq!(stdout.lines().count(), all, "{stdout}");
    let help = run(Command::new(&tilesmith).args(["test", "--help"]));
    assert!(help.contains("Usage: tilesmith test") && help.contains("--include-ignored") && help.contains("--allow-no-gpu"), "{help}");
    assert!(!help.contains("No-op") && !help.contains("nocapture") && !help.contains("Usefull"), "{help}");
    let halves: Vec<usize> = ["hash:1/2", "hash:2/2"]
        .iter()
        .map(|share| {
            let out = run(Command::new(&tilesmith).current_dir(&project).args(["test", "--list", "--partition", share]));
            out.lines().filter(|l| l.ends_with(": test")).count()
        })
        .collect();
    assert_eq!(halves[0] + halves[1], all, "the shares split the list: {halves:?}");
    let out = fails(Command::new(&tilesmith).current_dir(&project).args(["test", "--partition", "hash:3/2"]));
    assert!(out.contains("expected hash:k/n with 1 <= k <= n"), "{out}");
    // A run in which no GPU trial can run fails, saying so, unless allowed: a user's CI without
    // a GPU must not pass having tested nothing. With a GPU the trials run and pass.
    let output = Command::new(&tilesmith).current_dir(&project).args(["test", "--skip", "::perf"]).output().unwrap();
    let out = format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
    if output.status.success() {
        assert!(out.contains("8 passed") && out.contains("0 ignored"), "{out}");
    } else {
        assert!(out.contains("no GPU trial could run here") && out.contains("--allow-no-gpu"), "{out}");
        let out = run(Command::new(&tilesmith).current_dir(&project).args(["test", "--skip", "::perf", "--allow-no-gpu"]));
        assert!(out.contains("test result: ok") && out.contains("7 ignored"), "{out}");
    }

    // Another project's registry in TILESMITH_REGISTRY is refused inside this one.
    let other = outside.path().join("other");
    run(Command::new(&tilesmith).current_dir(outside.path()).arg("init").arg(&other));
    // build gens first where generated/ is missing or older than a template (round four); test
    // (as bench and tune) gens and builds first always.
    let out = run(Command::new(&tilesmith).current_dir(&other).arg("build"));
    assert!(out.contains("generated/manifest.json is missing: running gen first") && out.contains("9 compiled now"), "{out}");
    run(Command::new(&tilesmith).current_dir(&other).args(["test", "--list"]));
    let out =
        fails(Command::new(&tilesmith).current_dir(&project).env("TILESMITH_REGISTRY", other.join("registry")).args(["test", "--list"]));
    assert!(out.contains("is the registry of the project in") && out.contains("not of this one"), "{out}");
    // With --registry it is taken as given, without a project.
    let out =
        run(Command::new(&tilesmith).current_dir(outside.path()).arg("test").arg("--list").arg("--registry").arg(other.join("registry")));
    assert!(out.contains("scale::scale::correctness"), "{out}");
}

#[test]
fn the_standalone_example_builds_its_kernels_in_build_rs_and_embeds_them() {
    let example = workspace().join("examples/standalone");
    run(cargo().current_dir(&example).args(["build", "--quiet", "--locked"]));
    let binary = target_dir().join("debug/tilesmith-standalone");
    let out = run(&mut Command::new(&binary));
    assert!(out.contains("9 kernels embedded; `scale` is the f32 plain variant, 128 threads a block"), "{out}");
    // Without a GPU it says so; with one it ran the kernel and checked every element.
    assert!(out.contains("nothing launched: ") || out.contains("1000003 elements, 0 wrong"), "{out}");
    // Built once, the crate is up to date: its build script does not run again.
    let out = run(cargo().current_dir(&example).args(["build", "--locked", "-v"]));
    assert!(out.contains("Fresh tilesmith-standalone") && !out.contains("build-script-build`"), "{out}");
}
