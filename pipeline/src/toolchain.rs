//! Finding nvcc, or installing NVIDIA's CUDA 13.0 compiler wheels from PyPI when there is none.

use crate::project::temporary_sibling;
use anyhow::{bail, Context, Result};
use std::path::{Path, PathBuf};
use std::process::Command;
use tilesmith_spec::files::{user_folder, HOME_VAR};

/// The wheels that make a working nvcc: the compiler, its runtime headers, the CRT headers,
/// NVVM, and CCCL, which nvcc's wheel does not pull in (cuda_bf16.h needs its `nv/target`).
/// Pinned to 13.0 to match the GPU machines' driver. cuobjdump and nvdisasm (which
/// `cuobjdump --dump-sass` runs) have no 13.0 wheels; the oldest 13.x ones read 13.0 fatbins.
const WHEELS: &[&str] = &[
    "nvidia-cuda-nvcc==13.0.*",
    "nvidia-cuda-runtime==13.0.*",
    "nvidia-cuda-crt==13.0.*",
    "nvidia-nvvm==13.0.*",
    "nvidia-cuda-cccl==13.0.*",
    "nvidia-cuda-cuobjdump==13.2.*",
    "nvidia-cuda-nvdisasm==13.2.*",
];

/// Folder under the toolchain folder holding the installed wheels.
const INSTALL_NAME: &str = "cuda-13.0";

/// A usable nvcc.
#[derive(Clone, Debug)]
pub struct Nvcc {
    pub path: PathBuf,
    /// Where it was found: which variable, PATH, /usr/local/cuda, or the project's own install.
    pub origin: String,
    /// The release line of `nvcc --version`, e.g. "Cuda compilation tools, release 13.0, V13.0.88".
    pub version: String,
    pub cuobjdump: Option<PathBuf>,
}

impl Nvcc {
    /// Looks in NVCC, CUDA_HOME / CUDA_PATH, PATH and /usr/local/cuda, in that order, then in
    /// the per-user toolchain folder ([`install_dir`]), installing the wheels there if needed.
    pub fn locate() -> Result<Nvcc> {
        if let Some(path) = std::env::var_os("NVCC").filter(|v| !v.is_empty()) {
            return Nvcc::at(PathBuf::from(path), "the NVCC environment variable");
        }
        for var in ["CUDA_HOME", "CUDA_PATH"] {
            if let Some(home) = std::env::var_os(var).filter(|v| !v.is_empty()) {
                return Nvcc::at(Path::new(&home).join("bin/nvcc"), var);
            }
        }
        if let Some(path) = std::env::var_os("PATH")
            .iter()
            .flat_map(std::env::split_paths)
            .map(|dir| dir.join("nvcc"))
            .find(|candidate| candidate.is_file())
        {
            return Nvcc::at(path, "PATH");
        }
        let system = PathBuf::from("/usr/local/cuda/bin/nvcc");
        if system.is_file() {
            return Nvcc::at(system, "/usr/local/cuda");
        }
        let dir = install_dir()?;
        let installed = dir.join("nvidia/cu13/bin/nvcc");
        if !installed.is_file() {
            install(&dir, &installed)?;
        }
        Nvcc::at(installed, &format!("NVIDIA's PyPI wheels in {}", dir.display()))
    }

    fn at(path: PathBuf, origin: &str) -> Result<Nvcc> {
        if path.is_dir() {
            bail!("{origin} points to nvcc at {}, which is a folder, not the nvcc program", path.display());
        }
        if !path.is_file() {
            bail!("{origin} points to nvcc at {}, which does not exist", path.display());
        }
        let output =
            Command::new(&path).arg("--version").output().with_context(|| format!("cannot run {} (from {origin})", path.display()))?;
        let text = String::from_utf8_lossy(&output.stdout);
        if !output.status.success() {
            bail!(
                "{} --version (from {origin}) failed ({}):\n{}{}",
                path.display(),
                output.status,
                text,
                String::from_utf8_lossy(&output.stderr).trim_end()
            );
        }
        let Some(version) = text.lines().find(|line| line.contains("release")) else {
            bail!("{} --version (from {origin}) printed no release line:\n{text}", path.display());
        };
        let cuobjdump = path.with_file_name("cuobjdump");
        Ok(Nvcc {
            origin: origin.to_string(),
            version: version.trim().to_string(),
            cuobjdump: cuobjdump.is_file().then_some(cuobjdump),
            path,
        })
    }
}

/// Where the wheels are installed, once per user and shared by every project:
/// `$TILESMITH_HOME/toolchain/`, else `tilesmith/toolchain/` in the platform's cache folder
/// (`$XDG_CACHE_HOME` or `~/.cache` on Linux, `~/Library/Caches` on macOS).
fn install_dir() -> Result<PathBuf> {
    let home = user_folder().ok_or_else(|| anyhow::anyhow!("no cache folder for the toolchain: set {HOME_VAR} (or NVCC, CUDA_HOME)"))?;
    Ok(home.join("toolchain").join(INSTALL_NAME))
}

/// Installs the wheels into a temporary folder and renames it into place, so an interrupted
/// install never leaves a half-filled toolchain behind; a lock makes concurrent builds wait for
/// one install instead of each downloading their own.
fn install(target: &Path, nvcc: &Path) -> Result<()> {
    let parent = target.parent().expect("install dir has a parent");
    std::fs::create_dir_all(parent).with_context(|| format!("cannot create {}", parent.display()))?;
    let lock = std::fs::File::create(parent.join("install.lock")).context("cannot create the install lock")?;
    lock.lock().context("cannot take the install lock")?;
    if nvcc.is_file() {
        return Ok(());
    }
    require("python3", &["--version"], "python3 is needed to install NVIDIA's nvcc wheels")?;
    require("python3", &["-m", "pip", "--version"], "pip is needed to install NVIDIA's nvcc wheels (python3 -m pip)")?;
    require("g++", &["--version"], "g++ is needed: nvcc uses it as its host compiler")?;
    let staging = temporary_sibling(target);
    eprintln!("no nvcc found: installing NVIDIA's CUDA 13.0 compiler wheels into {} (once)", target.display());
    let status = Command::new("python3")
        .args([
            "-m",
            "pip",
            "install",
            "--quiet",
            "--root-user-action=ignore",
            "--disable-pip-version-check",
            "--no-warn-script-location",
            "--target",
        ])
        .arg(&staging)
        .args(WHEELS)
        .status()
        .context("cannot run python3 -m pip")?;
    if !status.success() {
        let _ = std::fs::remove_dir_all(&staging);
        bail!("pip could not install {} ({status})", WHEELS.join(" "));
    }
    std::fs::rename(&staging, target).with_context(|| {
        let _ = std::fs::remove_dir_all(&staging);
        format!("cannot move the installed toolchain into {}", target.display())
    })?;
    Ok(())
}

fn require(program: &str, args: &[&str], why: &str) -> Result<()> {
    match Command::new(program).args(args).output() {
        Ok(output) if output.status.success() => Ok(()),
        _ => bail!("{why}, and `{program} {}` failed", args.join(" ")),
    }
}
