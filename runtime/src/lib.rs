//! Loads tilesmith kernels from the fatbin registry by name and launches them safely.
//!
//! ```no_run
//! use tilesmith_runtime::{GemmArgs, Gpu, Registry};
//! # fn main() -> Result<(), tilesmith_runtime::Error> {
//! let registry = Registry::open(None)?;                // $TILESMITH_REGISTRY; no CUDA yet
//! let kernel = registry.kernel("gemm_tn_128x128x32")?; // manifest data; loads on first launch
//! let gpu = Gpu::new(0)?;                              // an error value where there is no GPU
//! # let (m, n, k) = (256, 256, 256);
//! let a = gpu.stream().alloc_zeros::<half::bf16>(m * k)?;
//! let b = gpu.stream().alloc_zeros::<half::bf16>(k * n)?;
//! let mut c = gpu.stream().alloc_zeros::<half::bf16>(m * n)?;
//! kernel.gemm(&gpu, GemmArgs::packed(&a, &b, &mut c, m, n, k, kernel.layout()?))?;
//! # Ok(()) }
//! ```
//!
//! Every launch is checked first against what the manifest records (dtype, layout, buffer
//! lengths, leading dimensions, divisibility, alignment) and refused with an [`Error`] naming
//! the rule, so no launch reads or writes out of bounds.

mod chooser;
pub mod dispatch;
mod error;
mod fatbin;
mod gpu;
mod kernel;
mod plan;
mod registry;

pub use chooser::{estimate_seconds, Chooser, Pick, NEAR_ENOUGH};
pub use dispatch::{Choice, Workspace};
pub use error::Error;
pub use fatbin::Fatbin;
/// The 8-bit float element types (`e4m3`, `e5m2`), for buffers of fp8 GEMMs.
pub use float8::{F8E4M3, F8E5M2};
pub use gpu::Gpu;
pub use kernel::{CallBuilder, Element, Epilogue, GemmArgs, Kernel, Target, TransposeArgs};
pub use plan::{
    check_gemm_call, plan_call, plan_gemm, plan_gemm_with, plan_transpose, runs_on, Activation, Arg, Batch, Buffer, Call, EpilogueArgs,
    GemmShape, Launch, TensorMapArg, TransposeShape,
};
pub use registry::{Embedded, Registry, REGISTRY_VAR};
pub use tilesmith_spec::{Bounds, Built, Dtype, Family, Layout, Variant};

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Defines `static REGISTRY: tilesmith_runtime::Embedded`, the registry that `tilesmith-build`
/// compiled in this crate's build script, for [`Registry::embedded`]:
///
/// ```ignore
/// tilesmith_runtime::include_registry!();
/// let registry = tilesmith_runtime::Registry::embedded(&REGISTRY)?;
/// ```
#[macro_export]
macro_rules! include_registry {
    () => {
        include!(concat!(env!("OUT_DIR"), "/tilesmith/registry.rs"));
    };
}
