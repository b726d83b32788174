//! One expanded variant: every axis fixed, and its canonical name.

use crate::axes::{Axis, Bounds, Dtype, Naming, Value};
use crate::family::Family;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The longest variant name: a name is a file name in generated/ and the registry, with room for
/// the suffixes of their temporary files within the 255 bytes most file systems allow.
pub const MAX_NAME_LEN: usize = 200;

/// A fully specified kernel variant: the axes every family has as fields, the family's own
/// axes (`layout`, `stages`, ...) by name. Its JSON is flat: `"layout": "tn"` beside
/// `"family": "matmul"`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Variant {
    /// Canonical name, also the kernel's entry symbol; see [`Variant::derive_name`].
    pub name: String,
    pub family: String,
    pub backend: String,
    pub dtype: Dtype,
    pub warps: u32,
    pub bounds: Bounds,
    /// The block tile, one edge per quantity the family's `tile` names; empty where it has none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tile: Vec<u32>,
    /// The family's own axes.
    #[serde(flatten)]
    pub axes: BTreeMap<String, Value>,
}

impl Variant {
    pub fn is_checked(&self) -> bool {
        self.bounds == Bounds::Checked
    }

    pub fn tile(&self) -> &[u32] {
        &self.tile
    }

    /// A count axis of the family's own, where the variant has it.
    pub fn count(&self, axis: &str) -> Option<u32> {
        match self.axes.get(axis) {
            Some(Value::Count(n)) => Some(*n),
            _ => None,
        }
    }

    /// A word axis of the family's own, where the variant has it.
    pub fn word(&self, axis: &str) -> Option<&str> {
        match self.axes.get(axis) {
            Some(Value::Word(word)) => Some(word),
            _ => None,
        }
    }

    /// What any variant read from a manifest must be, against its family's declaration: a name
    /// that is a C identifier of at most [`MAX_NAME_LEN`] characters, the family's axes and no
    /// other, each value in its domain, counts and tile edges of at least 1.
    pub fn check(&self, family: &Family) -> Result<(), String> {
        check_name(&self.name)?;
        if self.tile.len() != family.tile.len() || self.tile.contains(&0) {
            return Err(format!("tile {:?} must have {} edges of at least 1 ({})", self.tile, family.tile.len(), family.tile.join(", ")));
        }
        if self.warps == 0 {
            return Err("axis `warps` is 0; it must be at least 1".into());
        }
        for axis in &family.axes {
            let ok = match (self.axes.get(&axis.name), axis.range) {
                (Some(Value::Count(n)), Some([min, max])) => (min..=max).contains(n),
                (Some(Value::Word(word)), None) => axis.values.contains(word),
                _ => false,
            };
            if !ok {
                return Err(format!(
                    "axis `{}` is {}, which is not one of its values ({})",
                    axis.name,
                    self.axes.get(&axis.name).map_or("missing".into(), |v| format!("`{v}`")),
                    match axis.range {
                        Some([min, max]) => format!("{min}..={max}"),
                        None => axis.values.join(", "),
                    }
                ));
            }
        }
        if let Some(extra) = self.axes.keys().find(|key| !family.axes.iter().any(|a| &a.name == *key)) {
            return Err(format!("it has an axis `{extra}` that family `{}` does not declare", self.family));
        }
        Ok(())
    }

    /// The value of an axis, or `None` where the family has no such axis.
    pub fn value(&self, axis: &str) -> Option<Value> {
        Some(match axis {
            "tile" if self.tile.is_empty() => return None,
            "tile" => Value::Tile(self.tile.clone()),
            "dtype" => Value::Word(self.dtype.to_string()),
            "backend" => Value::Word(self.backend.clone()),
            "warps" => Value::Count(self.warps),
            "bounds" => Value::Word(self.bounds.to_string()),
            _ => return self.axes.get(axis).cloned(),
        })
    }

    /// The variant of `family` with these values, one per axis in `axes`, each already checked
    /// against its domain; unnamed. `None` where a value is missing or of the wrong kind.
    pub fn from_values(family: &str, axes: &[Axis], values: &BTreeMap<&str, Value>) -> Option<Variant> {
        let word = |axis: &str| match values.get(axis) {
            Some(Value::Word(word)) => Some(word.clone()),
            _ => None,
        };
        let tile = match values.get("tile") {
            Some(Value::Tile(tile)) => tile.clone(),
            _ => Vec::new(),
        };
        let warps = match values.get("warps") {
            Some(Value::Count(n)) => *n,
            _ => return None,
        };
        let own = axes.iter().filter(|axis| !crate::family::COMMON_AXES.contains(&axis.name.as_str()));
        Some(Variant {
            name: String::new(),
            family: family.to_string(),
            backend: word("backend")?,
            dtype: Dtype::parse(&word("dtype")?)?,
            warps,
            bounds: Bounds::parse(&word("bounds")?)?,
            tile,
            axes: own.map(|axis| Some((axis.name.clone(), values.get(axis.name.as_str())?.clone()))).collect::<Option<_>>()?,
        })
    }

    /// The name of this variant given its family's axes and defaults: the family, then each
    /// axis as [`Naming`] says (`matmul_tn_128x128x32`, `matmul_nn_64x64x32_f32_w4_unchecked`).
    pub fn derive_name(&self, axes: &[Axis], defaults: &Variant) -> String {
        let mut parts = vec![self.family.clone()];
        for axis in axes {
            let (Some(value), default) = (self.value(&axis.name), defaults.value(&axis.name)) else { continue };
            match &axis.naming {
                Naming::Always => parts.push(value.to_string()),
                Naming::IfNotDefault { prefix } if Some(&value) != default.as_ref() => parts.push(format!("{prefix}{value}")),
                _ => {}
            }
        }
        parts.join("_")
    }

    /// Every axis and its value, the family first, in `axes`' order, for headers and tables.
    pub fn axis_values(&self, axes: &[Axis]) -> Vec<(String, String)> {
        let mut out = vec![("family".to_string(), self.family.clone())];
        out.extend(axes.iter().filter_map(|axis| Some((axis.name.clone(), self.value(&axis.name)?.to_string()))));
        out
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
    if crate::launch::is_reserved(name) {
        return Err(format!("name `{name}` cannot name a kernel: it is reserved ({})", crate::launch::RESERVED_RULE));
    }
    Ok(())
}
