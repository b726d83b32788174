//! A kernel's launch contract as data: block, grid rule, shared memory and the parameter
//! list. Templates declare it (`partials/contract.cu.tera`), the build pipeline validates it and renders the
//! kernel's signature from it, and the runtime builds each launch's arguments from it.

use crate::arch;
use crate::expr::Expr;
use crate::family::{Family, SMS};
use crate::variant::Variant;
use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;

/// CUDA's limits on a block: threads in all, and along x, y and z.
pub const MAX_BLOCK_THREADS: u64 = 1024;
pub const MAX_BLOCK_DIMS: [u32; 3] = [1024, 1024, 64];

/// Blocks in a cluster that every Hopper GPU launches (the portable cluster size).
pub const PORTABLE_CLUSTER_BLOCKS: u32 = 8;
/// Blocks in a cluster that Hopper launches where the kernel opts in (the runtime does, for a
/// kernel declaring more than the portable size); whether they fit at once is the GPU's to say.
pub const MAX_CLUSTER_BLOCKS: u32 = 16;
/// The sides a TMA tensor map has at most.
pub const MAX_TENSOR_MAP_SIDES: usize = 5;

/// How a variant is launched.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LaunchSpec {
    /// Threads per block, [x, y, z].
    pub block: [u32; 3],
    pub grid: GridRule,
    /// Thread-block cluster, [x, y, z] blocks; [1, 1, 1] launches without clusters.
    pub cluster: [u32; 3],
    /// Dynamic shared memory: bytes, or an expression of the call's quantities (a row-wise
    /// kernel keeps a row: `cols * 4 + 16`), checked against the GPU's limit at each launch.
    pub dynamic_smem_bytes: Expr,
    /// The kernel's parameters, in order.
    pub params: Vec<Param>,
}

impl LaunchSpec {
    /// The grid of a call whose quantities `env` gives (`batch` problems at once), on a GPU of
    /// `sms` multiprocessors; refused, naming the rule and CUDA's limits, where a side is 0 or
    /// past them (x up to 2^31-1, y and z up to 65,535) or the clusters do not divide it. The
    /// runtime plans each launch with it; gen checks the declared trial shapes with it.
    pub fn grid_of(&self, family: &Family, env: &dyn Fn(&str) -> Option<u64>, problems: u64, sms: u32) -> Result<[u32; 3], String> {
        match &self.grid {
            GridRule::Expr { x, y, z, .. } => {
                let env = crate::family::with_sms(env, sms);
                let [x, y, z] = [x, y, z].map(|e| e.eval(&env));
                let (x, y, z) = (x?, y?, z?);
                let fits = x <= i32::MAX as u64 && y <= 65_535 && z <= 65_535 && x > 0 && y > 0 && z > 0;
                let whole = (0..3).all(|i| [x, y, z][i] % u64::from(self.cluster[i].max(1)) == 0);
                if !fits || !whole {
                    return Err(format!(
                        "its grid rule gives a grid of [{x}, {y}, {z}] blocks, which CUDA cannot launch in clusters of {:?} (sides from 1 to [2^31-1, 65535, 65535], whole clusters)",
                        self.cluster
                    ));
                }
                Ok([x as u32, y as u32, z as u32])
            }
            rule => {
                let along = |i: usize| family.tile.get(i).and_then(|q| env(q)).unwrap_or(1);
                let (m, n) = (along(0), along(1));
                rule.grid(m, n, problems, sms, self.cluster).ok_or_else(|| {
                    format!("{problems} {m}×{n} problem(s) need more blocks than a CUDA grid holds (at most 65535 problems)")
                })
            }
        }
    }
}

/// How the launch grid follows from the problem shape. The tile rules walk the quantities the
/// family's first two tile edges tile (M and N of a matrix product), for each problem of a batch.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "rule", rename_all = "snake_case", deny_unknown_fields)]
pub enum GridRule {
    /// One block per TM×TN tile of the M×N problem: grid = (⌈N/TN⌉, ⌈M/TM⌉, batch).
    TilesMn { tm: u32, tn: u32 },
    /// At most a block per multiprocessor, in whole clusters along M; cluster c of the grid's
    /// C walks the cluster tiles c, c + C, ... (a cluster tile is a column of cluster[0]
    /// output tiles; the batch's problems one after another). As few clusters as take the same number of rounds as one per
    /// multiprocessor would, so that every cluster gets the same number of tiles.
    Persistent { tm: u32, tn: u32 },
    /// `splits` blocks per TM×TN tile, each taking a slice of K, launched as a cluster that
    /// adds up its partial sums: grid = (⌈N/TN⌉·splits, ⌈M/TM⌉, batch), clusters of [splits, 1, 1].
    SplitK { tm: u32, tn: u32, splits: u32 },
    /// Each side an expression of the call's quantities and `sms` (`x = "cdiv(rows, 4)"`).
    /// `persistent`: the kernel's blocks loop over the work, so the launch may shrink the
    /// grid to the clusters that fit on the GPU at once (a row-wise kernel taking rows
    /// r, r + clusters, ...).
    Expr {
        x: Expr,
        y: Expr,
        z: Expr,
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        persistent: bool,
    },
}

impl GridRule {
    /// The grid for `batch` M×N problems on a GPU with `sms` multiprocessors, launched in
    /// clusters of `cluster` blocks; `None` when a dimension would exceed CUDA's limits.
    pub fn grid(&self, m: u64, n: u64, batch: u64, sms: u32, cluster: [u32; 3]) -> Option<[u32; 3]> {
        match *self {
            GridRule::Expr { .. } => None,
            GridRule::TilesMn { tm, tn } => GridRule::SplitK { tm, tn, splits: 1 }.grid(m, n, batch, sms, cluster),
            GridRule::SplitK { tm, tn, splits } => {
                let x = u32::try_from(n.div_ceil(u64::from(tn.max(1))).checked_mul(u64::from(splits.max(1)))?)
                    .ok()
                    .filter(|&x| x <= i32::MAX as u32)?;
                let y = u32::try_from(m.div_ceil(u64::from(tm.max(1)))).ok().filter(|&y| y <= 65_535)?;
                let z = u32::try_from(batch).ok().filter(|&z| z <= 65_535)?;
                Some([x.max(1), y.max(1), z.max(1)])
            }
            GridRule::Persistent { tm, tn } => {
                let per_cluster = u64::from(cluster[0].max(1));
                let tiles_m = m.div_ceil(u64::from(tm.max(1))).checked_next_multiple_of(per_cluster)?;
                // The kernels count tiles, over every problem, in an int.
                let tiles = tiles_m.checked_mul(n.div_ceil(u64::from(tn.max(1))))?.checked_mul(batch.max(1))?;
                let units = (tiles / per_cluster).max(1);
                let rounds = units.div_ceil((u64::from(sms) / per_cluster).max(1));
                let clusters = units.div_ceil(rounds);
                (tiles <= i32::MAX as u64).then(|| u32::try_from(clusters * per_cluster).ok()).flatten().map(|x| [x, 1, 1])
            }
        }
    }

    /// The output tile one block computes at a time, for the tile rules.
    pub fn tile(&self) -> Option<[u32; 2]> {
        match *self {
            GridRule::TilesMn { tm, tn } | GridRule::Persistent { tm, tn } | GridRule::SplitK { tm, tn, .. } => Some([tm, tn]),
            GridRule::Expr { .. } => None,
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

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum ParamKind {
    /// The device address of an operand's first element.
    Pointer { operand: String, access: Access },
    /// A quantity of the call as a 32-bit signed `int`; the runtime refuses values outside 0..=2^31-1.
    I32 { value: String },
    /// A quantity as a 64-bit `long long` (a batch stride, in elements); at most 2^63-1.
    I64 { value: String },
    /// A scalar of the call, passed as the type the family declares for it.
    Scalar { scalar: String },
    /// A TMA descriptor (`CUtensorMap`, passed by value as `const __grid_constant__`) of an
    /// operand as stored, each side with its stride, the variant's element type, copied in
    /// boxes of `box_` = [elements along a row, rows, the sides before those innermost first],
    /// with `swizzle`-byte swizzling (32, 64 or 128). Out-of-bounds boxes read as zeros. One
    /// more side of 1 maps the operand of every problem of a batch, its batch stride apart
    /// (one problem where the stride is 0): coordinates (x, y, ..., problem).
    TensorMap {
        operand: String,
        #[serde(rename = "box")]
        box_: Vec<u32>,
        swizzle: u32,
    },
    /// Scratch memory the runtime owns, at least `bytes` (an expression of the call's quantities
    /// and `sms`) long, passed as `void*`: one buffer a GPU, whose contents any launch may have
    /// left (partial results). `zeroed`: another buffer, all zeros at every launch, since each
    /// kernel leaves it as it found it (counters that say which block merges the partial
    /// results go back to 0); kept apart, so that no kernel's scratch lands on another's counters.
    Workspace {
        bytes: Expr,
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        zeroed: bool,
    },
}

/// The most workspace a launch may ask for: the runtime allocates it, so a call's quantities
/// must not make it unbounded.
pub const MAX_WORKSPACE_BYTES: u64 = 1 << 32;

/// Whether a kernel only reads an operand, only writes it, or reads it and then writes it in
/// place (`readwrite`: a residual updated as r ← r + x).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Access {
    Read,
    Write,
    #[serde(rename = "readwrite")]
    ReadWrite,
}

impl Access {
    /// The kernel reads what the call passes in it.
    pub fn reads(self) -> bool {
        self != Access::Write
    }

    /// The kernel writes it: no other operand may share its memory.
    pub fn writes(self) -> bool {
        self != Access::Read
    }
}

/// A parameter as written, every field of every kind optional, none other allowed.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawParam {
    name: String,
    kind: String,
    operand: Option<String>,
    access: Option<Access>,
    value: Option<String>,
    scalar: Option<String>,
    #[serde(rename = "box")]
    box_: Option<Vec<u32>>,
    swizzle: Option<u32>,
    bytes: Option<String>,
    zeroed: Option<bool>,
}

impl TryFrom<RawParam> for Param {
    type Error = String;

    fn try_from(raw: RawParam) -> Result<Param, String> {
        let name = raw.name;
        let given: Vec<&str> = [
            ("operand", raw.operand.is_some()),
            ("access", raw.access.is_some()),
            ("value", raw.value.is_some()),
            ("scalar", raw.scalar.is_some()),
            ("box", raw.box_.is_some()),
            ("swizzle", raw.swizzle.is_some()),
            ("bytes", raw.bytes.is_some()),
            ("zeroed", raw.zeroed.is_some()),
        ]
        .iter()
        .filter(|(_, present)| *present)
        .map(|(field, _)| *field)
        .collect();
        let (fields, kind): (&[&str], Option<ParamKind>) = match raw.kind.as_str() {
            "pointer" => (
                &["operand", "access"],
                raw.operand.clone().zip(raw.access).map(|(operand, access)| ParamKind::Pointer { operand, access }),
            ),
            "i32" => (&["value"], raw.value.clone().map(|value| ParamKind::I32 { value })),
            "i64" => (&["value"], raw.value.map(|value| ParamKind::I64 { value })),
            "scalar" => (&["scalar"], raw.scalar.map(|scalar| ParamKind::Scalar { scalar })),
            "tensor_map" => (
                &["operand", "box", "swizzle"],
                raw.operand.clone().zip(raw.box_).zip(raw.swizzle).map(|((operand, box_), swizzle)| ParamKind::TensorMap {
                    operand,
                    box_,
                    swizzle,
                }),
            ),
            "workspace" => (
                &["bytes", "zeroed"],
                match raw.bytes.as_deref().map(|text| (text, Expr::parse(text))) {
                    Some((text, Err(rule))) => return Err(format!("parameter `{name}`: bytes `{text}`: {rule}")),
                    bytes => bytes
                        .and_then(|(_, parsed)| parsed.ok())
                        .map(|bytes| ParamKind::Workspace { bytes, zeroed: raw.zeroed.unwrap_or(false) }),
                },
            ),
            other => {
                return Err(format!("parameter `{name}`: unknown kind `{other}` (known: pointer, i32, i64, scalar, tensor_map, workspace)"))
            }
        };
        if let Some(extra) = given.iter().find(|field| !fields.contains(field)) {
            return Err(format!("parameter `{name}`: a {} parameter has no field `{extra}` (it takes {})", raw.kind, fields.join(", ")));
        }
        kind.map(|kind| Param { name: name.clone(), kind })
            .ok_or_else(|| format!("parameter `{name}`: a {} parameter needs {}", raw.kind, fields.join(", ")))
    }
}

impl ParamKind {
    /// Bytes the kernel's parameter takes (what the compiled kernel's parameter list states):
    /// an address, an `int`, a `long long`, the scalar's type in `family`, or a `CUtensorMap`.
    /// None for a scalar `family` does not declare.
    pub fn size_bytes(&self, family: &Family) -> Option<u32> {
        match self {
            ParamKind::Pointer { .. } | ParamKind::I64 { .. } | ParamKind::Workspace { .. } => Some(8),
            ParamKind::I32 { .. } => Some(4),
            ParamKind::Scalar { scalar } => family.scalar(scalar).map(|s| s.ty.size_bytes()),
            ParamKind::TensorMap { .. } => Some(128),
        }
    }

    /// The largest value the parameter holds, for integers.
    pub fn max_value(&self) -> Option<u64> {
        match self {
            ParamKind::I32 { .. } => Some(i32::MAX as u64),
            ParamKind::I64 { .. } => Some(i64::MAX as u64),
            _ => None,
        }
    }
}

impl LaunchSpec {
    /// Whether a parameter passes this quantity (as an `i32` or an `i64`).
    pub fn takes_quantity(&self, quantity: &str) -> bool {
        self.params.iter().any(|p| matches!(&p.kind, ParamKind::I32 { value } | ParamKind::I64 { value } if value == quantity))
    }

    /// Whether a parameter passes this operand (its address or a tensor map of it).
    pub fn takes_operand(&self, operand: &str) -> bool {
        self.params
            .iter()
            .any(|p| matches!(&p.kind, ParamKind::Pointer { operand: o, .. } | ParamKind::TensorMap { operand: o, .. } if o == operand))
    }

    /// Whether a parameter passes this scalar of the family's.
    pub fn takes_scalar(&self, scalar: &str) -> bool {
        self.params.iter().any(|p| matches!(&p.kind, ParamKind::Scalar { scalar: s } if s == scalar))
    }

    /// The rules a launch contract meets whatever the template, checked by the build pipeline when it reads a
    /// template's contract and by every reader of a manifest: CUDA's limits on blocks and
    /// clusters, shared memory within each target's limit, a grid whose tile is the variant's
    /// and whose clusters and splits are its `cluster` and `split_k` axes where it has them,
    /// expressions over the family's quantities, and a parameter list that passes each operand
    /// and scalar of the family, every pointer's leading dimension and every shape quantity.
    pub fn check(&self, variant: &Variant, family: &Family, sass: &[String]) -> Result<(), String> {
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
        self.check_grid(variant, family, cluster_blocks)?;
        let quantities = family.all_quantities();
        match self.dynamic_smem_bytes.as_constant() {
            Some(bytes) => {
                for target in sass {
                    let Some(limit) = arch::smem_limit(target) else { continue };
                    if bytes > u64::from(limit) {
                        return Err(format!("needs {bytes} bytes of dynamic shared memory, over the {limit}-byte limit of {target}"));
                    }
                }
            }
            None => self.dynamic_smem_bytes.check_names(&quantities).map_err(|rule| format!("dynamic_smem_bytes: {rule}"))?,
        }
        self.check_params(variant, family)
    }

    fn check_grid(&self, variant: &Variant, family: &Family, cluster_blocks: u64) -> Result<(), String> {
        let split_k = variant.count("split_k").unwrap_or(1);
        match &self.grid {
            GridRule::SplitK { splits, .. } if self.cluster != [*splits, 1, 1] => {
                return Err(format!(
                    "cluster {:?}: the split_k grid rule launches a cluster of [{splits}, 1, 1] per tile, one block per slice of K",
                    self.cluster
                ));
            }
            GridRule::SplitK { splits, .. } if *splits != split_k => {
                return Err(format!("the split_k grid rule has {splits} splits, but the variant's split_k is {split_k}"));
            }
            GridRule::SplitK { .. } => {}
            _ if split_k > 1 => {
                return Err(format!("the variant's split_k is {split_k}, so its grid rule must be split_k with {split_k} splits"))
            }
            GridRule::Expr { x, y, z, .. } => {
                let mut known = family.all_quantities();
                known.push(SMS);
                for (side, expr) in [("x", x), ("y", y), ("z", z)] {
                    expr.check_names(&known).map_err(|rule| format!("grid.{side}: {rule}"))?;
                }
            }
            GridRule::TilesMn { .. } | GridRule::Persistent { .. }
                if cluster_blocks > 1 && (self.cluster[1..] != [1, 1] || !matches!(self.grid, GridRule::Persistent { .. })) =>
            {
                return Err(format!("cluster {:?}: clusters run along M ([n, 1, 1]) with the persistent grid rule", self.cluster));
            }
            _ => {}
        }
        if let Some(cluster) = variant.count("cluster") {
            if !matches!(self.grid, GridRule::SplitK { .. }) && self.cluster != [cluster, 1, 1] {
                return Err(format!("cluster {:?}, but the variant's cluster axis is {cluster}: launch [{cluster}, 1, 1]", self.cluster));
            }
        }
        if let Some([tm, tn]) = self.grid.tile() {
            if tm == 0 || tn == 0 {
                return Err(format!("the grid rule needs tiles of at least 1x1, got {tm}x{tn}"));
            }
            if variant.tile.len() < 2 || [tm, tn] != variant.tile[..2] {
                return Err(format!(
                    "the grid rule walks {tm}x{tn} tiles, but the variant's tile is {}",
                    variant.value("tile").map(|t| t.to_string()).unwrap_or("none".into())
                ));
            }
        }
        Ok(())
    }

    fn check_params(&self, variant: &Variant, family: &Family) -> Result<(), String> {
        let what = format!("a kernel of family `{}`", variant.family);
        let quantities = family.all_quantities();
        let mut names = BTreeSet::new();
        for param in &self.params {
            let name = &param.name;
            check_param_name(name)?;
            if !names.insert(name.as_str()) {
                return Err(format!("parameter `{name}` is declared twice"));
            }
            let operand = |operand: &str| {
                family.operand(operand).ok_or_else(|| {
                    format!(
                        "parameter `{name}` takes operand `{operand}`, which {what} does not pass (its operands: {})",
                        family.operands.iter().map(|o| o.name.as_str()).collect::<Vec<_>>().join(", ")
                    )
                })
            };
            match &param.kind {
                ParamKind::Pointer { operand: o, access } => {
                    let decl = operand(o)?;
                    if decl.access != *access {
                        return Err(format!(
                            "parameter `{name}` declares {access:?} access to `{o}`, but {what} must {:?} it",
                            decl.access
                        ));
                    }
                }
                ParamKind::I32 { value } | ParamKind::I64 { value } => {
                    if !quantities.contains(&value.as_str()) {
                        return Err(format!(
                            "parameter `{name}` takes `{value}`, which {what} does not give (its quantities: {})",
                            quantities.join(", ")
                        ));
                    }
                }
                ParamKind::Scalar { scalar } => {
                    if family.scalar(scalar).is_none() {
                        return Err(format!(
                            "parameter `{name}` takes scalar `{scalar}`, which {what} does not pass (its scalars: {})",
                            family.scalars.iter().map(|s| s.name.as_str()).collect::<Vec<_>>().join(", ")
                        ));
                    }
                }
                ParamKind::Workspace { bytes, zeroed } => {
                    let mut known = quantities.clone();
                    known.push(SMS);
                    bytes.check_names(&known).map_err(|rule| format!("parameter `{name}`: bytes: {rule}"))?;
                    let alike = self.params.iter().filter(|p| matches!(&p.kind, ParamKind::Workspace { zeroed: z, .. } if z == zeroed));
                    if alike.count() > 1 {
                        return Err(format!(
                            "parameter `{name}`: a kernel takes one {}workspace at most (the runtime keeps one a GPU)",
                            if *zeroed { "zeroed " } else { "" }
                        ));
                    }
                }
                ParamKind::TensorMap { operand: o, box_, swizzle } => {
                    let decl = operand(o)?;
                    if decl.dims.len() < 2 {
                        return Err(format!("parameter `{name}`: tensor maps are of matrices or more sides; `{o}` is a vector"));
                    }
                    if decl.optional {
                        return Err(format!("parameter `{name}`: `{o}` is optional, and a call that leaves it out has no tensor to map; take it as a pointer"));
                    }
                    if ![32, 64, 128].contains(swizzle) {
                        return Err(format!("parameter `{name}`: swizzle must be 32, 64 or 128 bytes, got {swizzle}"));
                    }
                    // TMA maps up to 5 sides: the operand's, innermost first, and one over the
                    // problems of a batch.
                    let sides = decl.dims.len();
                    let batched = sides + usize::from(decl.batch_stride.is_some());
                    if !(sides..=batched).contains(&box_.len())
                        || box_.len() > MAX_TENSOR_MAP_SIDES
                        || box_.iter().any(|&b| !(1..=256).contains(&b))
                    {
                        return Err(format!(
                            "parameter `{name}`: a box of `{o}` has a side of 1 to 256 elements for each of its {sides} sides, innermost first{}, at most {MAX_TENSOR_MAP_SIDES} in all; got {box_:?}",
                            if batched > sides { ", and may have one more over the problems of a batch" } else { "" }
                        ));
                    }
                    if box_.len() > sides && box_[sides] != 1 {
                        return Err(format!(
                            "parameter `{name}`: a box's last side runs over the problems of a batch, one at a time: it must be 1, got {box_:?}"
                        ));
                    }
                    let row_bytes = box_[0] * family.operand_dtype(variant, decl).size_bytes();
                    if row_bytes > *swizzle || !row_bytes.is_multiple_of(16) {
                        return Err(format!(
                            "parameter `{name}`: a box row of {row_bytes} bytes must be a multiple of 16 and at most the {swizzle}-byte swizzle"
                        ));
                    }
                }
            }
        }
        let gives = |quantity: &str| self.takes_quantity(quantity);
        // A kernel that takes the batch walks it, and must know where each problem's operands lie.
        let walks_batch = family.batch.as_deref().is_some_and(gives);
        for decl in &family.operands {
            let count = |tensor_map: bool| {
                self.params
                    .iter()
                    .filter(|p| match &p.kind {
                        ParamKind::Pointer { operand, .. } => !tensor_map && *operand == decl.name,
                        ParamKind::TensorMap { operand, .. } => tensor_map && *operand == decl.name,
                        _ => false,
                    })
                    .count()
            };
            let (pointers, maps) = (count(false), count(true));
            if (pointers + maps == 0 && !decl.optional) || pointers > 1 || maps > 1 {
                return Err(format!(
                    "{what} takes operand `{}` as a pointer, a tensor map or one of each; the contract has {pointers} pointer(s) and {maps} tensor map(s)",
                    decl.name
                ));
            }
            if let Some(stride) = decl.batch_stride.as_deref().filter(|s| walks_batch && pointers + maps > 0 && !gives(s)) {
                return Err(format!(
                    "the kernel walks a batch and takes `{}`, but not its batch stride: add an i64 parameter with value = \"{stride}\"",
                    decl.name
                ));
            }
            if let Some(ld) = decl.stride_names().find(|ld| pointers == 1 && !gives(ld)) {
                return Err(format!(
                    "the kernel takes a pointer to `{}` but not its stride `{ld}`: add an i32 or i64 parameter with value = \"{ld}\"",
                    decl.name
                ));
            }
        }
        for scalar in family.scalars.iter().filter(|s| s.default.is_none()) {
            if !self.params.iter().any(|p| matches!(&p.kind, ParamKind::Scalar { scalar: s } if *s == scalar.name)) {
                return Err(format!(
                    "{what} takes scalar `{}`: add a parameter with kind = \"scalar\", scalar = \"{}\"",
                    scalar.name, scalar.name
                ));
            }
        }
        if let Some(missing) = family.quantities.iter().find(|q| !gives(q)) {
            return Err(format!(
                "{what} must take `{missing}` (the problem's shape is {}): add an i32 parameter with value = \"{missing}\"",
                family.quantities.join(", ")
            ));
        }
        Ok(())
    }
}

/// Words a parameter may not be called: C++'s keywords and the names every template defines
/// (`T`, the element type). Names starting with `__` or `_` and a capital are the compiler's.
const RESERVED: &[&str] = &[
    // CUDA's built-in variables and the C library's names a kernel's code may use.
    "threadIdx",
    "blockIdx",
    "blockDim",
    "gridDim",
    "warpSize",
    "printf",
    "malloc",
    "free",
    "memcpy",
    "memset",
    "assert",
    "main",
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
    if is_reserved(name) {
        return Err(format!("parameter name `{name}` is reserved ({RESERVED_RULE})"));
    }
    Ok(())
}

/// What [`is_reserved`] refuses, for messages.
pub const RESERVED_RULE: &str =
    "a C++ keyword, a CUDA built-in such as `blockIdx`, a C library name such as `printf` or `main`, `T`, or a name starting with `__` or `_` and a capital";

/// Whether a generated source cannot use `name` for a kernel or a parameter.
pub fn is_reserved(name: &str) -> bool {
    let compilers = name.starts_with("__") || (name.starts_with('_') && name[1..].starts_with(|c: char| c.is_ascii_uppercase()));
    RESERVED.contains(&name) || compilers
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cuda_built_ins_and_c_library_names_are_reserved() {
        for name in ["blockIdx", "threadIdx", "printf", "main", "int", "T", "__x", "_Y"] {
            let message = check_param_name(name).unwrap_err();
            assert!(message.contains("is reserved") && message.contains("CUDA built-in"), "{message}");
        }
        assert_eq!(check_param_name("block_idx"), Ok(()));
    }

    #[test]
    fn tiles_grid_rounds_up_and_refuses_overflow() {
        let rule = GridRule::TilesMn { tm: 128, tn: 64 };
        assert_eq!(rule.grid(4096, 4096, 1, 132, [1, 1, 1]), Some([64, 32, 1]));
        assert_eq!(rule.grid(4096, 4096, 8, 132, [1, 1, 1]), Some([64, 32, 8]));
        assert_eq!(rule.grid(64, 64, 65_536, 132, [1, 1, 1]), None);
        assert_eq!(rule.grid(1, 65, 1, 132, [1, 1, 1]), Some([2, 1, 1]));
        assert_eq!(rule.grid(128 * 65_536, 64, 1, 132, [1, 1, 1]), None);
    }

    #[test]
    fn split_k_grid_has_a_block_per_slice_of_each_tile() {
        let rule = GridRule::SplitK { tm: 64, tn: 128, splits: 4 };
        assert_eq!(rule.grid(16, 4096, 1, 132, [4, 1, 1]), Some([128, 1, 1]));
        assert_eq!(rule.grid(65, 129, 1, 132, [4, 1, 1]), Some([8, 2, 1]));
        assert_eq!(rule.grid(64 * 65_536, 128, 1, 132, [4, 1, 1]), None);
    }

    #[test]
    fn persistent_grid_is_one_block_per_multiprocessor_at_most() {
        let rule = GridRule::Persistent { tm: 128, tn: 256 };
        // 512 tiles take 4 rounds on 132 SMs; 128 blocks take 4 rounds too, 4 tiles each.
        assert_eq!(rule.grid(4096, 4096, 1, 132, [1, 1, 1]), Some([128, 1, 1]));
        assert_eq!(rule.grid(8192, 8192, 1, 132, [1, 1, 1]), Some([128, 1, 1]));
        assert_eq!(rule.grid(4096, 4352, 1, 132, [1, 1, 1]), Some([109, 1, 1]), "544 tiles: 5 rounds of at most 109");
        assert_eq!(rule.grid(300, 300, 1, 132, [1, 1, 1]), Some([6, 1, 1]));
        assert_eq!(rule.grid(1 << 30, 1 << 30, 1, 132, [1, 1, 1]), None);
        // Clusters of 2 along M: 3 tile rows round up to 2 cluster rows of 2 tiles.
        assert_eq!(rule.grid(300, 300, 1, 132, [2, 1, 1]), Some([8, 1, 1]));
        assert_eq!(rule.grid(4096, 4096, 1, 131, [2, 1, 1]), Some([128, 1, 1]));
        // A batch walks its problems' tiles as one: 64 problems of 8 tiles take 4 rounds of 128.
        assert_eq!(rule.grid(512, 512, 64, 132, [1, 1, 1]), Some([128, 1, 1]));
        assert_eq!(rule.grid(128, 256, 3, 132, [1, 1, 1]), Some([3, 1, 1]));
    }

    #[test]
    fn params_read_as_tagged_tables() {
        let json = r#"[{"name":"A","kind":"pointer","operand":"a","access":"read"},{"name":"lda","kind":"i32","value":"lda"},
            {"name":"tmB","kind":"tensor_map","operand":"b","box":[64,256],"swizzle":128},{"name":"eps","kind":"scalar","scalar":"eps"}]"#;
        let params: Vec<Param> = serde_json::from_str(json).unwrap();
        assert_eq!(params[2].kind, ParamKind::TensorMap { operand: "b".into(), box_: vec![64, 256], swizzle: 128 });
        assert_eq!(params[0].kind, ParamKind::Pointer { operand: "a".into(), access: Access::Read });
        assert_eq!(params[1].kind, ParamKind::I32 { value: "lda".into() });
        assert_eq!(params[3].kind, ParamKind::Scalar { scalar: "eps".into() });
        assert_eq!(params[1].kind.max_value(), Some(2_147_483_647));
    }

    #[test]
    fn a_workspace_states_its_bytes_as_an_expression() {
        let read = |json: &str| serde_json::from_str::<Param>(json).map_err(|e| e.to_string());
        let ws = read(r#"{"name":"ws","kind":"workspace","bytes":"cdiv(rows, 4) * 16"}"#).unwrap();
        assert_eq!(ws.kind, ParamKind::Workspace { bytes: Expr::parse("cdiv(rows, 4) * 16").unwrap(), zeroed: false });
        let flags = read(r#"{"name":"flags","kind":"workspace","bytes":"rows * 4","zeroed":true}"#).unwrap();
        assert_eq!(flags.kind, ParamKind::Workspace { bytes: Expr::parse("rows * 4").unwrap(), zeroed: true });
        assert_eq!(serde_json::from_str::<Param>(&serde_json::to_string(&ws).unwrap()).unwrap(), ws, "written as read");
        let missing = read(r#"{"name":"ws","kind":"workspace"}"#).unwrap_err();
        assert!(missing.contains("a workspace parameter needs bytes"), "{missing}");
        let bad = read(r#"{"name":"ws","kind":"workspace","bytes":"rows *"}"#).unwrap_err();
        assert!(bad.contains("parameter `ws`: bytes `rows *`: an expression ends where a value was expected"), "{bad}");
        let extra = read(r#"{"name":"ws","kind":"workspace","bytes":"8","operand":"x"}"#).unwrap_err();
        assert!(extra.contains("a workspace parameter has no field `operand`"), "{extra}");
    }
}
