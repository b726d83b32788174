//! tilesmith's build pipeline: variants.toml → expanded variants → rendered CUDA under
//! generated/ → one checked fatbin per variant and the manifest, in the registry. The
//! `tilesmith` command runs it on a project; a crate's build.rs runs it through [`script`],
//! into `OUT_DIR`, and can embed the registry in the crate's binary.

pub mod compile;
pub mod gen;
mod guard;
mod parallel;
pub mod project;
mod registry;
mod render;
pub mod script;
pub mod select;
mod stamp;
pub mod timings;
pub mod toolchain;

pub use project::Project;
pub use select::Selection;
