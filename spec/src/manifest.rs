//! The two manifests: `generated/manifest.json`, written by `cargo xtask gen` (what each
//! variant needs at launch), and `manifest.json` in the registry, written by
//! `cargo xtask build` (that plus what the compiler made of it).

use crate::variant::Variant;
use serde::{Deserialize, Serialize};

/// Bumped whenever a manifest's shape changes, so readers refuse what they cannot read.
pub const FORMAT: u32 = 1;

/// File name of both manifests, in `generated/` and in the registry.
pub const MANIFEST_FILE: &str = "manifest.json";

/// `generated/manifest.json`: one entry per variant, in `variants.toml` order.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Manifest {
    pub format: u32,
    pub variants: Vec<Entry>,
}

/// What the runtime needs to know to launch one variant safely.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Entry {
    #[serde(flatten)]
    pub variant: Variant,
    /// The template it was rendered from, relative to `kernel-templates/`.
    pub template: String,
    /// Its rendered source, relative to the workspace.
    pub source: String,
    /// The `extern "C"` kernel symbol.
    pub entry: String,
    /// Threads per block, [x, y, z].
    pub block: [u32; 3],
    pub grid: GridRule,
    pub dynamic_smem_bytes: u32,
    pub requires: Requirements,
    pub targets: Targets,
}

/// How the launch grid follows from the problem shape.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "rule", rename_all = "snake_case")]
pub enum GridRule {
    /// One block per TM×TN tile of the M×N problem: grid = (⌈N/TN⌉, ⌈M/TM⌉, 1).
    TilesMn { tm: u32, tn: u32 },
}

impl GridRule {
    /// The grid for an M×N problem; `None` when a dimension would exceed CUDA's limits.
    pub fn grid(&self, m: u64, n: u64) -> Option<[u32; 3]> {
        match *self {
            GridRule::TilesMn { tm, tn } => {
                let x = u32::try_from(n.div_ceil(u64::from(tn))).ok()?;
                let y = u32::try_from(m.div_ceil(u64::from(tm))).ok().filter(|&y| y <= 65_535)?;
                Some([x.max(1), y.max(1), 1])
            }
        }
    }
}

/// The assumptions a variant makes of its arguments, which the runtime checks before launch.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Requirements {
    /// M, N and K must be multiples of these (all 1 for a bounds-checked variant; K is 1 for
    /// families without a K).
    pub shape_multiple: [u32; 3],
    /// Leading dimensions must be multiples of this many elements.
    pub ld_multiple: u32,
    /// Base pointers must be aligned to this many bytes.
    pub ptr_align_bytes: u32,
}

/// What a fatbin holds code for.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Targets {
    /// SASS architectures (`sm_80`, `sm_90`).
    pub sass: Vec<String>,
    /// PTX virtual architecture (`compute_80`), JIT-compiled on newer GPUs.
    pub ptx: String,
}

/// The registry's `manifest.json`: the built variants.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Registry {
    pub format: u32,
    /// `nvcc --version`'s release line of the compiler that built them.
    pub compiler: String,
    pub variants: Vec<Built>,
}

/// One compiled variant.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Built {
    #[serde(flatten)]
    pub entry: Entry,
    /// File name of its fatbin inside the registry.
    pub fatbin: String,
    /// SHA-256 over source, flags and compiler version; a rebuild is skipped when it matches.
    pub hash: String,
    /// ptxas's report, one per SASS architecture.
    pub resources: Vec<Resources>,
}

/// ptxas's resource report for one architecture.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Resources {
    pub arch: String,
    pub registers: u32,
    pub static_smem_bytes: u32,
    pub stack_bytes: u32,
    pub spill_store_bytes: u32,
    pub spill_load_bytes: u32,
}

impl Resources {
    pub fn spills(&self) -> bool {
        self.spill_store_bytes > 0 || self.spill_load_bytes > 0
    }
}

impl Built {
    pub fn spills(&self) -> bool {
        self.resources.iter().any(Resources::spills)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tiles_grid_rounds_up_and_refuses_overflow() {
        let rule = GridRule::TilesMn { tm: 128, tn: 64 };
        assert_eq!(rule.grid(4096, 4096), Some([64, 32, 1]));
        assert_eq!(rule.grid(1, 65), Some([2, 1, 1]));
        assert_eq!(rule.grid(128 * 65_536, 64), None);
    }
}
