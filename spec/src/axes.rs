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
    /// Storage order of a matrix product's operands (its `layout` axis), CUTLASS style: one letter per operand, A first;
    /// `t` is row-major and `n` column-major. A is M×K, B is K×N, C is always M×N row-major.
    Layout { Nn => "nn", Nt => "nt", Tn => "tn", Tt => "tt" }
}

axis_enum! {
    /// Element type of the inputs, and of the outputs unless an operand's `dtype_axis` says
    /// otherwise; matrix products accumulate in f32. e4m3 and e5m2 are Hopper's 8-bit floats
    /// (OCP FP8); i32, i64, u32 and u8 are integers (indices, targets, masks).
    Dtype { F16 => "f16", Bf16 => "bf16", F32 => "f32", E4m3 => "e4m3", E5m2 => "e5m2", I32 => "i32", I64 => "i64", U32 => "u32", U8 => "u8" }
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
            Dtype::E4m3 | Dtype::E5m2 | Dtype::U8 => 1,
            Dtype::F16 | Dtype::Bf16 => 2,
            Dtype::F32 | Dtype::I32 | Dtype::U32 => 4,
            Dtype::I64 => 8,
        }
    }

    /// Whether it holds whole numbers only: a value of another kind is never taken for one of
    /// these, whatever their widths.
    pub fn is_integer(self) -> bool {
        matches!(self, Dtype::I32 | Dtype::I64 | Dtype::U32 | Dtype::U8)
    }

    /// The spacing of this type's values at `x` (a unit in the last place): 2^(e - mantissa
    /// bits) for x's binary exponent e, no lower than the subnormals' spacing; 1 for integers.
    pub fn ulp(self, x: f64) -> f64 {
        let (mantissa_bits, min_exponent) = match self {
            Dtype::F16 => (10, -14),
            Dtype::Bf16 => (7, -126),
            Dtype::F32 => (23, -126),
            Dtype::E4m3 => (3, -6),
            Dtype::E5m2 => (2, -14),
            Dtype::I32 | Dtype::I64 | Dtype::U32 | Dtype::U8 => return 1.0,
        };
        let exponent = if x == 0.0 || !x.is_finite() { min_exponent } else { (x.abs().log2().floor() as i32).max(min_exponent) };
        2f64.powi(exponent - mantissa_bits)
    }

    /// The CUDA C++ type that stores one element.
    pub fn cuda_type(self) -> &'static str {
        match self {
            Dtype::F16 => "__half",
            Dtype::Bf16 => "__nv_bfloat16",
            Dtype::F32 => "float",
            Dtype::E4m3 => "__nv_fp8_e4m3",
            Dtype::E5m2 => "__nv_fp8_e5m2",
            Dtype::I32 => "int",
            Dtype::I64 => "long long",
            Dtype::U32 => "unsigned int",
            Dtype::U8 => "unsigned char",
        }
    }

    /// The largest finite value of a floating-point type; none for integers.
    pub fn max_finite(self) -> Option<f64> {
        match self {
            Dtype::F16 => Some(65_504.0),
            Dtype::Bf16 => Some(3.389_531_389_251_535e38),
            Dtype::F32 => Some(f64::from(f32::MAX)),
            Dtype::E4m3 => Some(448.0),
            Dtype::E5m2 => Some(57_344.0),
            Dtype::I32 | Dtype::I64 | Dtype::U32 | Dtype::U8 => None,
        }
    }

    /// The values it holds exactly, for integers: what a trial's range must lie in.
    pub fn integer_range(self) -> Option<(f64, f64)> {
        match self {
            Dtype::I32 => Some((f64::from(i32::MIN), f64::from(i32::MAX))),
            Dtype::I64 => Some((-(2f64.powi(63)), 2f64.powi(63) - 1.0)),
            Dtype::U32 => Some((0.0, f64::from(u32::MAX))),
            Dtype::U8 => Some((0.0, 255.0)),
            _ => None,
        }
    }
}

/// What values an axis takes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Domain {
    /// One of these words.
    Words(Vec<String>),
    /// A backend declared in the family's `[<family>.backends]`.
    Backend,
    Count {
        min: u32,
        max: u32,
    },
    /// A tile: an edge along each of these quantities.
    Tile(Vec<String>),
}

/// How a variant's name shows an axis.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Naming {
    /// Always, as the value (`tn`, `128x128x32`).
    Always,
    /// As this prefix and the value, where it differs from the family's default (`f16`, `w8`).
    IfNotDefault { prefix: String },
}

/// One axis of a family (see [`crate::family::Family::axes`]): the single declaration that
/// parsing, defaults, naming, headers, the templates' context and `tilesmith list` all follow.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Axis {
    pub name: String,
    pub domain: Domain,
    pub naming: Naming,
    /// The value `[<family>.defaults]` leaves to the declaration (an own axis's `default`).
    pub default: Option<Value>,
}

/// One axis value, checked against its domain.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(untagged)]
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

impl<'de> Deserialize<'de> for Value {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Value, D::Error> {
        struct Visitor;
        impl<'de> serde::de::Visitor<'de> for Visitor {
            type Value = Value;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an axis value: a word, a whole number up to 4294967295, or a tile (a list of such numbers)")
            }
            fn visit_str<E: serde::de::Error>(self, word: &str) -> Result<Value, E> {
                Ok(Value::Word(word.to_string()))
            }
            fn visit_u64<E: serde::de::Error>(self, n: u64) -> Result<Value, E> {
                u32::try_from(n)
                    .map(Value::Count)
                    .map_err(|_| E::custom(format!("{n} is too large for an axis value (at most 4294967295)")))
            }
            fn visit_i64<E: serde::de::Error>(self, n: i64) -> Result<Value, E> {
                u64::try_from(n).map_err(|_| E::custom(format!("{n} is negative: axis values are words or whole numbers from 0")))?;
                self.visit_u64(n as u64)
            }
            fn visit_f64<E: serde::de::Error>(self, x: f64) -> Result<Value, E> {
                Err(E::custom(format!("{x} is not a whole number: axis values are words or whole numbers")))
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
                let mut edges = Vec::new();
                while let Some(edge) = seq.next_element::<u32>()? {
                    edges.push(edge);
                }
                Ok(Value::Tile(edges))
            }
        }
        deserializer.deserialize_any(Visitor)
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
