//! What a tilesmith variant is, defined once and shared by the build pipeline (`tilesmith-build`), the runtime and the trials.
//!
//! Data flows one way: `variants.toml` is parsed and expanded here ([`config`]) into
//! [`Variant`]s; the build pipeline renders them, reads each template's [`launch`] contract, compiles them
//! and records the result in the [`manifest`] types, which the runtime and the tests read back.

pub mod arch;
pub mod axes;
pub mod config;
pub mod expr;
pub mod family;
pub mod family_table;
pub mod files;
pub mod launch;
pub mod manifest;
pub mod rule;
pub mod tuning;
pub mod variant;

pub use axes::{Bounds, Dtype, Layout};
pub use config::{Config, ConfigError, Declared, Diagnostic};
pub use expr::Expr;
pub use family::Family;
pub use launch::{Access, GridRule, LaunchSpec, Param, ParamKind};
pub use manifest::{Built, Entry, Manifest, Registry, Requirements, Resources, Targets};
pub use rule::Rule;
pub use variant::Variant;
