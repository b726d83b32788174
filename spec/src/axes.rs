//! The closed sets of values an axis can take.

use serde::{Deserialize, Serialize};
use std::fmt;

macro_rules! axis_enum {
    ($(#[$meta:meta])* $name:ident { $($(#[$vmeta:meta])* $variant:ident => $text:literal),+ $(,)? }) => {
        $(#[$meta])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
        pub enum $name { $($(#[$vmeta])* #[serde(rename = $text)] $variant),+ }

        impl $name {
            pub const ALL: &'static [$name] = &[$($name::$variant),+];

            pub fn as_str(self) -> &'static str {
                match self { $($name::$variant => $text),+ }
            }

            pub fn parse(text: &str) -> Option<Self> {
                Self::ALL.iter().copied().find(|v| v.as_str() == text)
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.as_str())
            }
        }
    };
}

axis_enum! {
    /// A kernel family: one problem, many variants.
    Family { Gemm => "gemm", Transpose => "transpose" }
}

axis_enum! {
    /// Storage order of GEMM operands, CUTLASS/cuBLAS style: one letter per operand, A first;
    /// `t` is row-major and `n` column-major. A is M×K, B is K×N, C is always M×N row-major.
    Layout { Nn => "nn", Nt => "nt", Tn => "tn", Tt => "tt" }
}

axis_enum! {
    /// Element type of the inputs and of the output; GEMM accumulates in f32.
    Dtype { F16 => "f16", Bf16 => "bf16", F32 => "f32" }
}

axis_enum! {
    /// Whether a variant masks partial tiles (`checked`) or assumes tile-multiple shapes.
    Bounds { Checked => "checked", Unchecked => "unchecked" }
}

impl Layout {
    /// A is stored row-major (contiguous along K).
    pub fn a_row_major(self) -> bool {
        matches!(self, Layout::Tn | Layout::Tt)
    }

    /// B is stored row-major (contiguous along N).
    pub fn b_row_major(self) -> bool {
        matches!(self, Layout::Nt | Layout::Tt)
    }
}

impl Dtype {
    pub fn size_bytes(self) -> u32 {
        match self {
            Dtype::F16 | Dtype::Bf16 => 2,
            Dtype::F32 => 4,
        }
    }

    /// The CUDA C++ type that stores one element.
    pub fn cuda_type(self) -> &'static str {
        match self {
            Dtype::F16 => "__half",
            Dtype::Bf16 => "__nv_bfloat16",
            Dtype::F32 => "float",
        }
    }
}

/// What values an axis takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Domain {
    Layout,
    Dtype,
    Bounds,
    /// A backend declared in the family's `[<family>.backends]`.
    Backend,
    Count {
        min: u32,
        max: u32,
    },
    /// A tile of this many edges.
    Tile(usize),
}

/// How a variant's name shows an axis.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Naming {
    /// Always, as the value (`tn`, `128x128x32`).
    Always,
    /// As the value, where it differs from the family's default (`f16`, `wgmma`).
    IfNotDefault,
    /// As this prefix and the value, where it differs from the default (`w8`, `s3`).
    Prefixed(&'static str),
}

/// One axis: the single declaration that parsing, defaults, naming, headers, the templates'
/// context and `xtask list` all follow.
#[derive(Clone, Copy, Debug)]
pub struct Axis {
    pub name: &'static str,
    pub domain: Domain,
    pub naming: Naming,
    pub families: &'static [Family],
}

const BOTH: &[Family] = &[Family::Gemm, Family::Transpose];
const GEMM: &[Family] = &[Family::Gemm];

/// Every axis, in the order names show them and groups expand them.
pub const AXES: &[Axis] = &[
    Axis { name: "layout", domain: Domain::Layout, naming: Naming::Always, families: GEMM },
    Axis { name: "tile", domain: Domain::Tile(3), naming: Naming::Always, families: GEMM },
    Axis { name: "tile", domain: Domain::Tile(2), naming: Naming::Always, families: &[Family::Transpose] },
    Axis { name: "dtype", domain: Domain::Dtype, naming: Naming::IfNotDefault, families: BOTH },
    Axis { name: "backend", domain: Domain::Backend, naming: Naming::IfNotDefault, families: BOTH },
    Axis { name: "warps", domain: Domain::Count { min: 1, max: 32 }, naming: Naming::Prefixed("w"), families: BOTH },
    Axis { name: "stages", domain: Domain::Count { min: 1, max: 8 }, naming: Naming::Prefixed("s"), families: GEMM },
    Axis { name: "cluster", domain: Domain::Count { min: 1, max: 8 }, naming: Naming::Prefixed("c"), families: GEMM },
    Axis { name: "split_k", domain: Domain::Count { min: 1, max: 8 }, naming: Naming::Prefixed("splitk"), families: GEMM },
    Axis { name: "bounds", domain: Domain::Bounds, naming: Naming::IfNotDefault, families: BOTH },
];

/// The axes of a family, in order.
pub fn of(family: Family) -> impl Iterator<Item = &'static Axis> {
    AXES.iter().filter(move |axis| axis.families.contains(&family))
}

/// One axis value, checked against its domain.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Value {
    Word(String),
    Count(u32),
    Tile(Vec<u32>),
}

impl fmt::Display for Value {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Value::Word(word) => f.write_str(word),
            Value::Count(n) => write!(f, "{n}"),
            Value::Tile(edges) => f.write_str(&edges.iter().map(u32::to_string).collect::<Vec<_>>().join("x")),
        }
    }
}

impl Value {
    /// The value as the templates see it: a string, a number, or a list of numbers.
    pub fn to_json(&self) -> serde_json::Value {
        match self {
            Value::Word(word) => serde_json::Value::from(word.as_str()),
            Value::Count(n) => serde_json::Value::from(*n),
            Value::Tile(edges) => serde_json::Value::from(edges.clone()),
        }
    }
}
