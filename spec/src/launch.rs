//! A kernel's launch contract as data: block, grid rule, shared memory and the parameter
//! list. Templates declare it (`partials/contract.cu.tera`), xtask validates it and renders the
//! kernel's signature from it, and the runtime builds each launch's arguments from it.

use crate::arch;
use crate::axes::Family;
use crate::variant::{Kind, Variant};
use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;

/// CUDA's limits on a block: threads in all, and along x, y and z.
pub const MAX_BLOCK_THREADS: u64 = 1024;
pub const MAX_BLOCK_DIMS: [u32; 3] = [1024, 1024, 64];

/// Blocks in a cluster that every Hopper GPU launches (the portable cluster size).
pub const MAX_CLUSTER_BLOCKS: u32 = 8;

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
                let x = u32::try_from(n.div_ceil(u64::from(tn.max(1))).checked_mul(u64::from(splits.max(1)))?)
                    .ok()
                    .filter(|&x| x <= i32::MAX as u32)?;
                let y = u32::try_from(m.div_ceil(u64::from(tm.max(1)))).ok().filter(|&y| y <= 65_535)?;
                Some([x.max(1), y.max(1), 1])
            }
            GridRule::Persistent { tm, tn } => {
                let per_cluster = u64::from(cluster[0].max(1));
                let tiles_m = m.div_ceil(u64::from(tm.max(1))).checked_next_multiple_of(per_cluster)?;
                // The kernels count tiles in an int.
                let tiles = tiles_m.checked_mul(n.div_ceil(u64::from(tn.max(1))))?;
                let units = (tiles / per_cluster).max(1);
                let rounds = units.div_ceil((u64::from(sms) / per_cluster).max(1));
                let clusters = units.div_ceil(rounds);
                (tiles <= i32::MAX as u64).then(|| u32::try_from(clusters * per_cluster).ok()).flatten().map(|x| [x, 1, 1])
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
/// Read through [`RawParam`], so that a field its kind does not have is an error, not ignored.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "RawParam")]
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

/// A parameter as written, every field of every kind optional, none other allowed.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawParam {
    name: String,
    kind: String,
    operand: Option<Operand>,
    access: Option<Access>,
    value: Option<Quantity>,
    #[serde(rename = "box")]
    box_: Option<[u32; 2]>,
    swizzle: Option<u32>,
}

impl TryFrom<RawParam> for Param {
    type Error = String;

    fn try_from(raw: RawParam) -> Result<Param, String> {
        let name = raw.name;
        let given: Vec<&str> = [
            ("operand", raw.operand.is_some()),
            ("access", raw.access.is_some()),
            ("value", raw.value.is_some()),
            ("box", raw.box_.is_some()),
            ("swizzle", raw.swizzle.is_some()),
        ]
        .iter()
        .filter(|(_, present)| *present)
        .map(|(field, _)| *field)
        .collect();
        let (fields, kind): (&[&str], Option<ParamKind>) = match raw.kind.as_str() {
            "pointer" => {
                (&["operand", "access"], raw.operand.zip(raw.access).map(|(operand, access)| ParamKind::Pointer { operand, access }))
            }
            "i32" => (&["value"], raw.value.map(|value| ParamKind::I32 { value })),
            "tensor_map" => (
                &["operand", "box", "swizzle"],
                raw.operand.zip(raw.box_).zip(raw.swizzle).map(|((operand, box_), swizzle)| ParamKind::TensorMap {
                    operand,
                    box_,
                    swizzle,
                }),
            ),
            other => return Err(format!("parameter `{name}`: unknown kind `{other}` (known: pointer, i32, tensor_map)")),
        };
        if let Some(extra) = given.iter().find(|field| !fields.contains(field)) {
            return Err(format!("parameter `{name}`: a {} parameter has no field `{extra}` (it takes {})", raw.kind, fields.join(", ")));
        }
        kind.map(|kind| Param { name: name.clone(), kind })
            .ok_or_else(|| format!("parameter `{name}`: a {} parameter needs {}", raw.kind, fields.join(", ")))
    }
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

impl Operand {
    /// The quantity that holds the distance between its stored rows.
    pub fn leading_dimension(self) -> Quantity {
        match self {
            Operand::A => Quantity::Lda,
            Operand::B => Quantity::Ldb,
            Operand::C => Quantity::Ldc,
            Operand::X => Quantity::Ldx,
            Operand::Y => Quantity::Ldy,
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

impl LaunchSpec {
    /// The rules a launch contract meets whatever the template, checked by xtask when it reads a
    /// template's contract and by every reader of a manifest: CUDA's limits on blocks and
    /// clusters, shared memory within each target's limit, a grid whose tile and clusters are
    /// the variant's, and a parameter list that passes each operand of the family once, every
    /// pointer's leading dimension and the quantities that fix the problem's shape.
    pub fn check(&self, variant: &Variant, sass: &[String]) -> Result<(), String> {
        let threads: u64 = self.block.iter().map(|&b| u64::from(b)).product();
        if self.block.contains(&0) || threads > MAX_BLOCK_THREADS {
            return Err(format!("block {:?} must have 1 to {MAX_BLOCK_THREADS} threads, none of its sides 0", self.block));
        }
        if let Some(side) = (0..3).find(|&i| self.block[i] > MAX_BLOCK_DIMS[i]) {
            return Err(format!(
                "block {:?}: CUDA allows at most {:?} threads along x, y and z ({} is over)",
                self.block,
                MAX_BLOCK_DIMS,
                ["x", "y", "z"][side]
            ));
        }
        let cluster_blocks: u64 = self.cluster.iter().map(|&c| u64::from(c)).product();
        if self.cluster.contains(&0) || cluster_blocks > u64::from(MAX_CLUSTER_BLOCKS) {
            return Err(format!("cluster {:?} must have 1 to {MAX_CLUSTER_BLOCKS} blocks, none of its sides 0", self.cluster));
        }
        match self.grid {
            GridRule::SplitK { splits, .. } if self.cluster != [splits, 1, 1] => {
                return Err(format!(
                    "cluster {:?}: the split_k grid rule launches a cluster of [{splits}, 1, 1] per tile, one block per slice of K",
                    self.cluster
                ));
            }
            GridRule::SplitK { .. } => {}
            _ if cluster_blocks > 1 && (self.cluster[1..] != [1, 1] || !matches!(self.grid, GridRule::Persistent { .. })) => {
                return Err(format!("cluster {:?}: clusters run along M ([n, 1, 1]) with the persistent grid rule", self.cluster));
            }
            _ => {}
        }
        let [tm, tn] = self.grid.tile();
        if tm == 0 || tn == 0 {
            return Err(format!("the grid rule needs tiles of at least 1x1, got {tm}x{tn}"));
        }
        let tile = variant.tile();
        if tile.len() < 2 || [tm, tn] != tile[..2] {
            return Err(format!(
                "the grid rule walks {tm}x{tn} tiles, but the variant's tile is {}",
                variant.value("tile").map(|t| t.to_string()).unwrap_or_default()
            ));
        }
        match variant.kind {
            Kind::Gemm { split_k, cluster, .. } => match self.grid {
                GridRule::SplitK { splits, .. } if splits != split_k => {
                    return Err(format!("the split_k grid rule has {splits} splits, but the variant's split_k is {split_k}"));
                }
                GridRule::SplitK { .. } => {}
                _ if split_k > 1 => {
                    return Err(format!("the variant's split_k is {split_k}, so its grid rule must be split_k with {split_k} splits"))
                }
                _ if self.cluster != [cluster, 1, 1] => {
                    return Err(format!(
                        "cluster {:?}, but the variant's cluster axis is {cluster}: launch [{cluster}, 1, 1]",
                        self.cluster
                    ));
                }
                _ => {}
            },
            Kind::Transpose { .. } if cluster_blocks > 1 => {
                return Err(format!("cluster {:?}: transposes launch no clusters", self.cluster))
            }
            Kind::Transpose { .. } => {}
        }
        for target in sass {
            let Some(limit) = arch::smem_limit(target) else { continue };
            if self.dynamic_smem_bytes > limit {
                return Err(format!(
                    "needs {} bytes of dynamic shared memory, over the {limit}-byte limit of {target}",
                    self.dynamic_smem_bytes
                ));
            }
        }
        self.check_params(variant)
    }

    fn check_params(&self, variant: &Variant) -> Result<(), String> {
        let family = variant.family();
        let mut names = BTreeSet::new();
        for param in &self.params {
            let name = &param.name;
            check_param_name(name)?;
            if !names.insert(name.as_str()) {
                return Err(format!("parameter `{name}` is declared twice"));
            }
            match param.kind {
                ParamKind::Pointer { operand, access } => match operands(family).iter().find(|(o, _)| *o == operand) {
                    None => {
                        return Err(format!(
                            "parameter `{name}` points to operand {}, which a {family} call does not pass",
                            operand.as_str()
                        ))
                    }
                    Some((_, expected)) if *expected != access => {
                        return Err(format!(
                            "parameter `{name}` declares {access:?} access to {}, but a {family} kernel must {expected:?} it",
                            operand.as_str()
                        ))
                    }
                    Some(_) => {}
                },
                ParamKind::I32 { value } => {
                    if !quantities(family).contains(&value) {
                        return Err(format!("parameter `{name}` takes {}, which a {family} call does not give", value.as_str()));
                    }
                }
                ParamKind::TensorMap { operand, box_, swizzle } => {
                    if !operands(family).iter().any(|(o, _)| *o == operand) {
                        return Err(format!("parameter `{name}` maps operand {}, which a {family} call does not pass", operand.as_str()));
                    }
                    if ![32, 64, 128].contains(&swizzle) {
                        return Err(format!("parameter `{name}`: swizzle must be 32, 64 or 128 bytes, got {swizzle}"));
                    }
                    if box_.iter().any(|&b| !(1..=256).contains(&b)) {
                        return Err(format!("parameter `{name}`: box sides must be 1 to 256 elements, got {box_:?}"));
                    }
                    let row_bytes = box_[0] * variant.dtype.size_bytes();
                    if row_bytes > swizzle || !row_bytes.is_multiple_of(16) {
                        return Err(format!(
                            "parameter `{name}`: a box row of {row_bytes} bytes must be a multiple of 16 and at most the {swizzle}-byte swizzle"
                        ));
                    }
                }
            }
        }
        let gives = |quantity: Quantity| self.params.iter().any(|p| p.kind == ParamKind::I32 { value: quantity });
        for (operand, _) in operands(family) {
            let count = |tensor_map: bool| {
                self.params
                    .iter()
                    .filter(|p| match p.kind {
                        ParamKind::Pointer { operand: o, .. } => !tensor_map && o == *operand,
                        ParamKind::TensorMap { operand: o, .. } => tensor_map && o == *operand,
                        ParamKind::I32 { .. } => false,
                    })
                    .count()
            };
            let (pointers, maps) = (count(false), count(true));
            if pointers + maps == 0 || pointers > 1 || maps > 1 {
                return Err(format!(
                    "a {family} kernel takes operand {} as a pointer, a tensor map or one of each; the contract has {pointers} pointer(s) and {maps} tensor map(s)",
                    operand.as_str()
                ));
            }
            let ld = operand.leading_dimension();
            if pointers == 1 && !gives(ld) {
                return Err(format!(
                    "the kernel takes a pointer to {} but not its leading dimension: add an i32 parameter with value = \"{}\"",
                    operand.as_str(),
                    ld.as_str()
                ));
            }
        }
        if let Some(missing) = shape_quantities(family).iter().find(|q| !gives(**q)) {
            return Err(format!(
                "a {family} kernel must take {} (the problem's shape is {}): add an i32 parameter with value = \"{}\"",
                missing.as_str(),
                shape_quantities(family).iter().map(|q| q.as_str()).collect::<Vec<_>>().join(", "),
                missing.as_str().to_lowercase()
            ));
        }
        Ok(())
    }
}

/// Words a parameter may not be called: C++'s keywords and the names every template defines
/// (`T`, the element type). Names starting with `__` or `_` and a capital are the compiler's.
const RESERVED: &[&str] = &[
    "alignas",
    "alignof",
    "asm",
    "auto",
    "bool",
    "break",
    "case",
    "catch",
    "char",
    "class",
    "const",
    "constexpr",
    "const_cast",
    "continue",
    "decltype",
    "default",
    "delete",
    "do",
    "double",
    "dynamic_cast",
    "else",
    "enum",
    "explicit",
    "extern",
    "false",
    "float",
    "for",
    "friend",
    "goto",
    "if",
    "inline",
    "int",
    "long",
    "mutable",
    "namespace",
    "new",
    "noexcept",
    "nullptr",
    "operator",
    "private",
    "protected",
    "public",
    "register",
    "reinterpret_cast",
    "return",
    "short",
    "signed",
    "sizeof",
    "static",
    "static_assert",
    "static_cast",
    "struct",
    "switch",
    "template",
    "this",
    "throw",
    "true",
    "try",
    "typedef",
    "typeid",
    "typename",
    "union",
    "unsigned",
    "using",
    "virtual",
    "void",
    "volatile",
    "while",
    "T",
];

/// A parameter name is a C identifier that is neither a keyword nor a name the templates or
/// the compiler use.
pub fn check_param_name(name: &str) -> Result<(), String> {
    if !crate::variant::is_c_identifier(name) {
        return Err(format!("parameter name `{name}` is not a C identifier"));
    }
    let compilers = name.starts_with("__") || (name.starts_with('_') && name[1..].starts_with(|c: char| c.is_ascii_uppercase()));
    if RESERVED.contains(&name) || compilers {
        return Err(format!("parameter name `{name}` is reserved (a C++ keyword, `T`, or a name starting with `__` or `_` and a capital)"));
    }
    Ok(())
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

/// The quantities that fix the shape of a call of `family`, which every kernel takes.
pub fn shape_quantities(family: Family) -> &'static [Quantity] {
    match family {
        Family::Gemm => &[Quantity::M, Quantity::N, Quantity::K],
        Family::Transpose => &[Quantity::M, Quantity::N],
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
