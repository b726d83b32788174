//! A crate's build.rs: gen and build the crate's kernels into `OUT_DIR`, and make the registry
//! available both as a folder and as a module that embeds it.
//!
//! ```no_run
//! // build.rs's main:
//! tilesmith_build::script::Script::new().run_or_exit();
//! ```
//!
//! The crate then opens `Registry::embedded(&REGISTRY)` after `tilesmith_runtime::include_registry!()`
//! (no files needed at run time), or the folder `env!("TILESMITH_REGISTRY_DIR")`.

use crate::compile::{self, Options};
use crate::project::{write_atomic, Project};
use crate::{gen, Selection};
use anyhow::{anyhow, Context, Result};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use tilesmith_spec::family_table::FamilyTable;
use tilesmith_spec::manifest::MANIFEST_FILE;
use tilesmith_spec::tuning::TUNING_DIR;

/// The environment variable the build script sets for the crate: the registry's folder.
pub const REGISTRY_DIR_VAR: &str = "TILESMITH_REGISTRY_DIR";

/// What a build script builds.
#[derive(Clone, Debug, Default)]
pub struct Script {
    root: Option<PathBuf>,
    kernels: Vec<String>,
}

impl Script {
    /// The project in the crate's folder (`CARGO_MANIFEST_DIR`), every variant.
    pub fn new() -> Script {
        Script::default()
    }

    /// The project in `dir` instead (relative to the crate's folder).
    pub fn root(mut self, dir: impl Into<PathBuf>) -> Script {
        self.root = Some(dir.into());
        self
    }

    /// Only the variants whose names match this glob (repeatable).
    pub fn kernels(mut self, glob: &str) -> Script {
        self.kernels.push(glob.to_string());
        self
    }

    /// Gens and builds into `$OUT_DIR/tilesmith/` (incremental, as `tilesmith build` is), and
    /// writes `$OUT_DIR/tilesmith/registry.rs`; tells cargo what to watch and sets
    /// `TILESMITH_REGISTRY_DIR` for the crate. Returns the registry's folder.
    pub fn run(&self) -> Result<PathBuf> {
        let var =
            |name: &str| std::env::var_os(name).map(PathBuf::from).ok_or_else(|| anyhow!("{name} is not set: run from a build script"));
        let crate_dir = var("CARGO_MANIFEST_DIR")?;
        let out = var("OUT_DIR")?.join("tilesmith");
        let root = crate_dir.join(self.root.as_deref().unwrap_or(Path::new(".")));
        let root = std::fs::canonicalize(&root).with_context(|| format!("the tilesmith project folder {}", root.display()))?;
        let project = Project { root, out: Some(out.clone()) };
        // Only paths that exist: cargo reruns a script watching a missing one on every build. A
        // tuning/ folder created later is seen once variants.toml is touched (README.md).
        for watched in [project.variants_file(), project.templates_dir(), project.tuning_dir()] {
            if watched.exists() {
                println!("cargo:rerun-if-changed={}", watched.display());
            }
        }
        // What the toolchain search reads (toolchain.rs), and how nvcc runs.
        for name in ["NVCC", "CUDA_HOME", "CUDA_PATH", "PATH", "TILESMITH_HOME", compile::LAUNCHER_VAR, compile::CACHE_VAR] {
            println!("cargo:rerun-if-env-changed={name}");
        }
        if !project.variants_file().is_file() {
            anyhow::bail!("no variants.toml in {}: tilesmith-build builds the project there", project.root.display());
        }
        let selection = Selection::new(&self.kernels)?;
        // OUT_DIR is the build's own: a manifest left unreadable there is set aside, not kept.
        gen::run(&project, &selection, false, true)?;
        let jobs = std::env::var("NUM_JOBS").ok().and_then(|n| n.parse().ok()).unwrap_or_else(compile::cores);
        let options = Options { jobs, ..Options::from_env() };
        compile::run(&project, &selection, &Options { repair: true, ..options })?;
        let registry = project.registry_dir();
        write_atomic(&out.join("registry.rs"), embedding(&project, &registry)?.as_bytes())
            .with_context(|| format!("cannot write {}", out.join("registry.rs").display()))?;
        println!("cargo:rustc-env={REGISTRY_DIR_VAR}={}", registry.display());
        Ok(registry)
    }

    /// [`Script::run`], and on failure every line of the error as a cargo error (`cargo::error`,
    /// cargo 1.84), which fails the build. The script then exits successfully: a failing
    /// script would make cargo print its whole output again after the errors.
    pub fn run_or_exit(&self) {
        if let Err(err) = self.run() {
            for line in format!("tilesmith-build: {err:#}").lines() {
                println!("cargo::error={line}");
            }
        }
    }
}

/// The module defining `REGISTRY`: the manifest, every fatbin it lists and the tuning tables,
/// through `include_bytes!` of the files in `registry`.
fn embedding(project: &Project, registry: &Path) -> Result<String> {
    let index: tilesmith_spec::Registry = tilesmith_spec::manifest::read(&registry.join(MANIFEST_FILE)).map_err(|err| anyhow!("{err}"))?;
    let bytes = |path: &Path| format!("include_bytes!({:?})", path.display().to_string());
    let mut text = String::from("// Written by tilesmith-build: the registry built for this crate.\n");
    writeln!(text, "pub static REGISTRY: tilesmith_runtime::Embedded = tilesmith_runtime::Embedded {{")?;
    writeln!(text, "    project: {:?},", project.root.display().to_string())?;
    writeln!(text, "    manifest: {},", bytes(&registry.join(MANIFEST_FILE)))?;
    writeln!(text, "    fatbins: &[")?;
    for built in &index.variants {
        writeln!(text, "        ({:?}, {}),", built.fatbin, bytes(&registry.join(&built.fatbin)))?;
    }
    writeln!(text, "    ],\n    tuning: &[")?;
    let tuning = registry.join(TUNING_DIR);
    for (name, path) in FamilyTable::paths(&tuning)? {
        writeln!(text, "        ({name:?}, {}),", bytes(&path))?;
    }
    writeln!(text, "    ],\n}};")?;
    Ok(text)
}
