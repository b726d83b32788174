//! A kernel's launch contract as data: block, grid rule, shared memory and the parameter
//! list. Templates declare it (`partials/contract.cu.tera`), xtask validates it and renders the
//! kernel's signature from it, and the runtime builds each launch's arguments from it.

use crate::axes::Family;
use serde::{Deserialize, Serialize};

/// How a variant is launched.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LaunchSpec {
    /// Threads per block, [x, y, z].
    pub block: [u32; 3],
    pub grid: GridRule,
    /// Thread-block cluster, [x, y, z] blocks; [1, 1, 1] launches without clusters.
    pub cluster: [u32; 3],
    pub dynamic_smem_bytes: u32,
    /// The kernel's parameters, in order.
    pub params: Vec<Param>,
}

/// How the launch grid follows from the problem shape.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "rule", rename_all = "snake_case", deny_unknown_fields)]
pub enum GridRule {
    /// One block per TM×TN tile of the M×N problem: grid = (⌈N/TN⌉, ⌈M/TM⌉, 1).
    TilesMn { tm: u32, tn: u32 },
    /// At most a block per multiprocessor, in whole clusters along M; cluster c of the grid's
    /// C walks the cluster tiles c, c + C, ... (a cluster tile is a column of cluster[0]
    /// output tiles). As few clusters as take the same number of rounds as one per
    /// multiprocessor would, so that every cluster gets the same number of tiles.
    Persistent { tm: u32, tn: u32 },
    /// `splits` blocks per TM×TN tile, each taking a slice of K, launched as a cluster that
    /// adds up its partial sums: grid = (⌈N/TN⌉·splits, ⌈M/TM⌉, 1), clusters of [splits, 1, 1].
    SplitK { tm: u32, tn: u32, splits: u32 },
}

impl GridRule {
    /// The grid for an M×N problem on a GPU with `sms` multiprocessors, launched in clusters of
    /// `cluster` blocks; `None` when a dimension would exceed CUDA's limits.
    pub fn grid(&self, m: u64, n: u64, sms: u32, cluster: [u32; 3]) -> Option<[u32; 3]> {
        match *self {
            GridRule::TilesMn { tm, tn } => GridRule::SplitK { tm, tn, splits: 1 }.grid(m, n, sms, cluster),
            GridRule::SplitK { tm, tn, splits } => {
                let x = u32::try_from(n.div_ceil(u64::from(tn.max(1))).checked_mul(u64::from(splits.max(1)))?).ok()?;
                let y = u32::try_from(m.div_ceil(u64::from(tm.max(1)))).ok().filter(|&y| y <= 65_535)?;
                Some([x.max(1), y.max(1), 1])
            }
            GridRule::Persistent { tm, tn } => {
                let per_cluster = u64::from(cluster[0].max(1));
                let tiles_m = m.div_ceil(u64::from(tm.max(1))).next_multiple_of(per_cluster);
                // The kernels count tiles in an int.
                let tiles = tiles_m.checked_mul(n.div_ceil(u64::from(tn.max(1))))?;
                let units = (tiles / per_cluster).max(1);
                let rounds = units.div_ceil((u64::from(sms) / per_cluster).max(1));
                let clusters = units.div_ceil(rounds);
                (tiles <= i32::MAX as u64).then(|| [(clusters * per_cluster) as u32, 1, 1])
            }
        }
    }

    /// The output tile one block computes at a time.
    pub fn tile(&self) -> [u32; 2] {
        match *self {
            GridRule::TilesMn { tm, tn } | GridRule::Persistent { tm, tn } | GridRule::SplitK { tm, tn, .. } => [tm, tn],
        }
    }
}

/// One kernel parameter: its name in the kernel's signature and what the runtime passes.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Param {
    pub name: String,
    #[serde(flatten)]
    pub kind: ParamKind,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum ParamKind {
    /// The device address of an operand's first element.
    Pointer { operand: Operand, access: Access },
    /// A problem quantity as a 32-bit signed `int`; the runtime refuses values outside 0..=2^31-1.
    I32 { value: Quantity },
    /// A TMA descriptor (`CUtensorMap`, passed by value as `const __grid_constant__`) of an
    /// operand as stored: rows × row length with its leading dimension, the variant's element
    /// type, copied in boxes of `box_` = [elements along a row, rows], with `swizzle`-byte
    /// swizzling (32, 64 or 128). Out-of-bounds boxes read as zeros.
    TensorMap {
        operand: Operand,
        #[serde(rename = "box")]
        box_: [u32; 2],
        swizzle: u32,
    },
}

/// A matrix a call passes: A, B, C of a GEMM, X, Y of a transpose.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Operand {
    A,
    B,
    C,
    X,
    Y,
}

/// Whether a kernel only reads an operand or writes it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Access {
    Read,
    Write,
}

/// A number of a call's shape.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Quantity {
    M,
    N,
    K,
    Lda,
    Ldb,
    Ldc,
    Ldx,
    Ldy,
}

impl Operand {
    pub fn as_str(self) -> &'static str {
        match self {
            Operand::A => "A",
            Operand::B => "B",
            Operand::C => "C",
            Operand::X => "X",
            Operand::Y => "Y",
        }
    }
}

impl Quantity {
    pub fn as_str(self) -> &'static str {
        match self {
            Quantity::M => "M",
            Quantity::N => "N",
            Quantity::K => "K",
            Quantity::Lda => "lda",
            Quantity::Ldb => "ldb",
            Quantity::Ldc => "ldc",
            Quantity::Ldx => "ldx",
            Quantity::Ldy => "ldy",
        }
    }
}

impl ParamKind {
    /// The largest value the parameter holds, for integers.
    pub fn max_value(self) -> Option<u64> {
        match self {
            ParamKind::Pointer { .. } | ParamKind::TensorMap { .. } => None,
            ParamKind::I32 { .. } => Some(i32::MAX as u64),
        }
    }
}

/// The operands a call of `family` passes, with what the kernel does to each.
pub fn operands(family: Family) -> &'static [(Operand, Access)] {
    match family {
        Family::Gemm => &[(Operand::A, Access::Read), (Operand::B, Access::Read), (Operand::C, Access::Write)],
        Family::Transpose => &[(Operand::X, Access::Read), (Operand::Y, Access::Write)],
    }
}

/// The quantities a call of `family` gives.
pub fn quantities(family: Family) -> &'static [Quantity] {
    match family {
        Family::Gemm => &[Quantity::M, Quantity::N, Quantity::K, Quantity::Lda, Quantity::Ldb, Quantity::Ldc],
        Family::Transpose => &[Quantity::M, Quantity::N, Quantity::Ldx, Quantity::Ldy],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tiles_grid_rounds_up_and_refuses_overflow() {
        let rule = GridRule::TilesMn { tm: 128, tn: 64 };
        assert_eq!(rule.grid(4096, 4096, 132, [1, 1, 1]), Some([64, 32, 1]));
        assert_eq!(rule.grid(1, 65, 132, [1, 1, 1]), Some([2, 1, 1]));
        assert_eq!(rule.grid(128 * 65_536, 64, 132, [1, 1, 1]), None);
    }

    #[test]
    fn split_k_grid_has_a_block_per_slice_of_each_tile() {
        let rule = GridRule::SplitK { tm: 64, tn: 128, splits: 4 };
        assert_eq!(rule.grid(16, 4096, 132, [4, 1, 1]), Some([128, 1, 1]));
        assert_eq!(rule.grid(65, 129, 132, [4, 1, 1]), Some([8, 2, 1]));
        assert_eq!(rule.grid(64 * 65_536, 128, 132, [4, 1, 1]), None);
    }

    #[test]
    fn persistent_grid_is_one_block_per_multiprocessor_at_most() {
        let rule = GridRule::Persistent { tm: 128, tn: 256 };
        // 512 tiles take 4 rounds on 132 SMs; 128 blocks take 4 rounds too, 4 tiles each.
        assert_eq!(rule.grid(4096, 4096, 132, [1, 1, 1]), Some([128, 1, 1]));
        assert_eq!(rule.grid(8192, 8192, 132, [1, 1, 1]), Some([128, 1, 1]));
        assert_eq!(rule.grid(4096, 4352, 132, [1, 1, 1]), Some([109, 1, 1]), "544 tiles: 5 rounds of at most 109");
        assert_eq!(rule.grid(300, 300, 132, [1, 1, 1]), Some([6, 1, 1]));
        assert_eq!(rule.grid(1 << 30, 1 << 30, 132, [1, 1, 1]), None);
        // Clusters of 2 along M: 3 tile rows round up to 2 cluster rows of 2 tiles.
        assert_eq!(rule.grid(300, 300, 132, [2, 1, 1]), Some([8, 1, 1]));
        assert_eq!(rule.grid(4096, 4096, 131, [2, 1, 1]), Some([128, 1, 1]));
    }

    #[test]
    fn params_read_as_tagged_tables() {
        let json = r#"[{"name":"A","kind":"pointer","operand":"a","access":"read"},{"name":"lda","kind":"i32","value":"lda"},
            {"name":"tmB","kind":"tensor_map","operand":"b","box":[64,256],"swizzle":128}]"#;
        let params: Vec<Param> = serde_json::from_str(json).unwrap();
        assert_eq!(params[2].kind, ParamKind::TensorMap { operand: Operand::B, box_: [64, 256], swizzle: 128 });
        assert_eq!(params[0].kind, ParamKind::Pointer { operand: Operand::A, access: Access::Read });
        assert_eq!(params[1].kind, ParamKind::I32 { value: Quantity::Lda });
        assert_eq!(params[1].kind.max_value(), Some(2_147_483_647));
    }
}
