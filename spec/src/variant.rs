//! One expanded variant: every axis fixed, and its canonical name.

use crate::axes::{self, Bounds, Dtype, Family, Layout, Naming, Value};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The longest variant name: a name is a file name in generated/ and the registry, with room for
/// the suffixes of their temporary files within the 255 bytes most file systems allow.
pub const MAX_NAME_LEN: usize = 200;

/// A fully specified kernel variant.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Variant {
    /// Canonical name, also the kernel's entry symbol; see [`Variant::derive_name`].
    pub name: String,
    pub backend: String,
    pub dtype: Dtype,
    pub warps: u32,
    pub bounds: Bounds,
    #[serde(flatten)]
    pub kind: Kind,
}

/// The axes that only one family has.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "family", rename_all = "lowercase")]
pub enum Kind {
    /// C[M×N] = A[M×K] · B[K×N]; `tile` is [TM, TN, TK]; `cluster` blocks along M share
    /// their B tiles (thread-block clusters); `split_k` blocks share one output tile, each
    /// taking a slice of K, and add their partial sums.
    Gemm {
        layout: Layout,
        tile: [u32; 3],
        stages: u32,
        cluster: u32,
        /// Absent from manifests written before the axis existed, whose variants had none.
        #[serde(default = "one")]
        split_k: u32,
    },
    /// Y[N×M] = X[M×N]ᵀ; `tile` is [TM, TN].
    Transpose { tile: [u32; 2] },
}

fn one() -> u32 {
    1
}

impl Variant {
    pub fn family(&self) -> Family {
        match self.kind {
            Kind::Gemm { .. } => Family::Gemm,
            Kind::Transpose { .. } => Family::Transpose,
        }
    }

    pub fn is_checked(&self) -> bool {
        self.bounds == Bounds::Checked
    }

    /// The block tile: [TM, TN, TK] for GEMM, [TM, TN] for transpose.
    pub fn tile(&self) -> &[u32] {
        match &self.kind {
            Kind::Gemm { tile, .. } => tile,
            Kind::Transpose { tile } => tile,
        }
    }

    /// What any variant read from a manifest must be: a name that is a C identifier of at most
    /// [`MAX_NAME_LEN`] characters, and counts and tile edges of at least 1.
    pub fn check(&self) -> Result<(), String> {
        check_name(&self.name)?;
        if self.tile().contains(&0) {
            return Err(format!("tile {:?} has an edge of 0", self.tile()));
        }
        let counts = match self.kind {
            Kind::Gemm { stages, cluster, split_k, .. } => {
                vec![("warps", self.warps), ("stages", stages), ("cluster", cluster), ("split_k", split_k)]
            }
            Kind::Transpose { .. } => vec![("warps", self.warps)],
        };
        match counts.iter().find(|(_, n)| *n == 0) {
            Some((axis, _)) => Err(format!("axis `{axis}` is 0; it must be at least 1")),
            None => Ok(()),
        }
    }

    /// The value of an axis, or `None` where the family has no such axis.
    pub fn value(&self, axis: &str) -> Option<Value> {
        Some(match (axis, &self.kind) {
            ("layout", Kind::Gemm { layout, .. }) => Value::Word(layout.to_string()),
            ("stages", Kind::Gemm { stages, .. }) => Value::Count(*stages),
            ("cluster", Kind::Gemm { cluster, .. }) => Value::Count(*cluster),
            ("split_k", Kind::Gemm { split_k, .. }) => Value::Count(*split_k),
            ("tile", _) => Value::Tile(self.tile().to_vec()),
            ("dtype", _) => Value::Word(self.dtype.to_string()),
            ("backend", _) => Value::Word(self.backend.clone()),
            ("warps", _) => Value::Count(self.warps),
            ("bounds", _) => Value::Word(self.bounds.to_string()),
            _ => return None,
        })
    }

    /// The variant with these values, one per axis of `family`, each already checked against
    /// its domain; unnamed. `None` where a value is missing or of the wrong kind.
    pub fn from_values(family: Family, values: &BTreeMap<&str, Value>) -> Option<Variant> {
        let word = |axis: &str| match values.get(axis) {
            Some(Value::Word(word)) => Some(word.clone()),
            _ => None,
        };
        let count = |axis: &str| match values.get(axis) {
            Some(Value::Count(n)) => Some(*n),
            _ => None,
        };
        let tile = match values.get("tile") {
            Some(Value::Tile(tile)) => tile.clone(),
            _ => return None,
        };
        let kind = match family {
            Family::Gemm => Kind::Gemm {
                layout: Layout::parse(&word("layout")?)?,
                tile: tile.try_into().ok()?,
                stages: count("stages")?,
                cluster: count("cluster")?,
                split_k: count("split_k")?,
            },
            Family::Transpose => Kind::Transpose { tile: tile.try_into().ok()? },
        };
        Some(Variant {
            name: String::new(),
            backend: word("backend")?,
            dtype: Dtype::parse(&word("dtype")?)?,
            warps: count("warps")?,
            bounds: Bounds::parse(&word("bounds")?)?,
            kind,
        })
    }

    /// The name of this variant given its family's defaults: the family, then each axis as
    /// [`axes::AXES`] says (`gemm_tn_128x128x32`, `gemm_nn_64x64x32_f32_w4_unchecked`).
    pub fn derive_name(&self, defaults: &Variant) -> String {
        let mut parts = vec![self.family().as_str().to_string()];
        for axis in axes::of(self.family()) {
            let (Some(value), default) = (self.value(axis.name), defaults.value(axis.name)) else { continue };
            match axis.naming {
                Naming::Always => parts.push(value.to_string()),
                Naming::IfNotDefault if Some(&value) != default.as_ref() => parts.push(value.to_string()),
                Naming::Prefixed(prefix) if Some(&value) != default.as_ref() => parts.push(format!("{prefix}{value}")),
                _ => {}
            }
        }
        parts.join("_")
    }

    /// Every axis and its value, the family first, for headers and tables.
    pub fn axes(&self) -> Vec<(&'static str, String)> {
        let mut axes = vec![("family", self.family().to_string())];
        axes.extend(axes::of(self.family()).filter_map(|axis| Some((axis.name, self.value(axis.name)?.to_string()))));
        axes
    }
}

/// Letters, digits and `_`, not starting with a digit.
pub fn is_c_identifier(name: &str) -> bool {
    name.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_') && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// A variant name names a kernel symbol and files: a C identifier of at most [`MAX_NAME_LEN`]
/// characters.
pub fn check_name(name: &str) -> Result<(), String> {
    if name.len() > MAX_NAME_LEN {
        return Err(format!(
            "the name is {} characters long; names are at most {MAX_NAME_LEN} (they name files, whose temporary copies must stay within 255 bytes): shorten a backend name",
            name.len()
        ));
    }
    if !is_c_identifier(name) {
        return Err(format!("name `{name}` is not a C identifier (letters, digits and `_`, not starting with a digit)"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gemm(layout: Layout, tile: [u32; 3], dtype: Dtype, warps: u32, bounds: Bounds) -> Variant {
        Variant {
            name: String::new(),
            backend: "simt".into(),
            dtype,
            warps,
            bounds,
            kind: Kind::Gemm { layout, tile, stages: 2, cluster: 1, split_k: 1 },
        }
    }

    #[test]
    fn default_axes_are_left_out_of_the_name() {
        let defaults = gemm(Layout::Tn, [128, 128, 32], Dtype::Bf16, 8, Bounds::Checked);
        assert_eq!(defaults.derive_name(&defaults), "gemm_tn_128x128x32");
        let other = gemm(Layout::Nn, [64, 64, 32], Dtype::F32, 4, Bounds::Unchecked);
        assert_eq!(other.derive_name(&defaults), "gemm_nn_64x64x32_f32_w4_unchecked");
    }

    #[test]
    fn backend_and_stages_show_when_they_differ() {
        let defaults = gemm(Layout::Tn, [128, 128, 32], Dtype::Bf16, 8, Bounds::Checked);
        let mut other = defaults.clone();
        other.backend = "mma".into();
        other.kind = Kind::Gemm { layout: Layout::Tt, tile: [128, 256, 64], stages: 3, cluster: 2, split_k: 4 };
        assert_eq!(other.derive_name(&defaults), "gemm_tt_128x256x64_mma_s3_c2_splitk4");
    }

    #[test]
    fn transpose_names_have_no_layout() {
        let defaults = Variant {
            name: String::new(),
            backend: "tiled".into(),
            dtype: Dtype::Bf16,
            warps: 8,
            bounds: Bounds::Checked,
            kind: Kind::Transpose { tile: [64, 64] },
        };
        let mut f32 = defaults.clone();
        f32.dtype = Dtype::F32;
        assert_eq!(f32.derive_name(&defaults), "transpose_64x64_f32");
    }

    #[test]
    fn manifest_json_round_trips() {
        let v = gemm(Layout::Nt, [64, 64, 32], Dtype::F16, 4, Bounds::Checked);
        let json = serde_json::to_string(&v).unwrap();
        assert!(json.contains("\"family\":\"gemm\""), "{json}");
        assert_eq!(serde_json::from_str::<Variant>(&json).unwrap(), v);
    }
}
