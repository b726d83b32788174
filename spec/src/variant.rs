//! One expanded variant: every axis fixed, and its canonical name.

use crate::axes::{Bounds, Dtype, Family, Layout};
use serde::{Deserialize, Serialize};

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
    /// C[M×N] = A[M×K] · B[K×N]; `tile` is [TM, TN, TK].
    Gemm { layout: Layout, tile: [u32; 3], stages: u32 },
    /// Y[N×M] = X[M×N]ᵀ; `tile` is [TM, TN].
    Transpose { tile: [u32; 2] },
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

    /// The name of this variant given its family's defaults: the family, the GEMM layout and
    /// the tile always, then every other axis whose value differs from the default, in a fixed
    /// order (`gemm_tn_128x128x32`, `gemm_nn_64x64x32_f32_w4_unchecked`).
    pub fn derive_name(&self, defaults: &Variant) -> String {
        let mut parts = vec![self.family().as_str().to_string()];
        if let Kind::Gemm { layout, .. } = self.kind {
            parts.push(layout.as_str().to_string());
        }
        let tile: Vec<String> = self.tile().iter().map(u32::to_string).collect();
        parts.push(tile.join("x"));
        if self.dtype != defaults.dtype {
            parts.push(self.dtype.as_str().to_string());
        }
        if self.backend != defaults.backend {
            parts.push(self.backend.clone());
        }
        if self.warps != defaults.warps {
            parts.push(format!("w{}", self.warps));
        }
        if let (Kind::Gemm { stages, .. }, Kind::Gemm { stages: default, .. }) = (&self.kind, &defaults.kind) {
            if stages != default {
                parts.push(format!("s{stages}"));
            }
        }
        if self.bounds != defaults.bounds {
            parts.push(self.bounds.as_str().to_string());
        }
        parts.join("_")
    }

    /// Every axis and its value, in declaration order, for headers and tables.
    pub fn axes(&self) -> Vec<(&'static str, String)> {
        let tile = self.tile().iter().map(u32::to_string).collect::<Vec<_>>().join("x");
        let mut axes = vec![("family", self.family().to_string())];
        if let Kind::Gemm { layout, .. } = self.kind {
            axes.push(("layout", layout.to_string()));
        }
        axes.push(("dtype", self.dtype.to_string()));
        axes.push(("tile", tile));
        axes.push(("backend", self.backend.clone()));
        axes.push(("warps", self.warps.to_string()));
        if let Kind::Gemm { stages, .. } = self.kind {
            axes.push(("stages", stages.to_string()));
        }
        axes.push(("bounds", self.bounds.to_string()));
        axes
    }
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
            kind: Kind::Gemm { layout, tile, stages: 2 },
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
        other.kind = Kind::Gemm { layout: Layout::Tt, tile: [128, 256, 64], stages: 3 };
        assert_eq!(other.derive_name(&defaults), "gemm_tt_128x256x64_mma_s3");
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
