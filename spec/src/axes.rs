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
