//! Loads tilesmith kernels from the fatbin registry by name and launches them safely.
//!
//! ```no_run
//! use tilesmith_runtime::{Gpu, Registry};
//! # fn main() -> Result<(), tilesmith_runtime::Error> {
//! let registry = Registry::open(None)?;       // $TILESMITH_REGISTRY; no CUDA yet
//! let kernel = registry.kernel("softmax_w16")?; // manifest data; loads on first launch
//! let gpu = Gpu::new(0)?;                     // an error value where there is no GPU
//! # let (rows, cols) = (4096, 50257);
//! let x = gpu.stream().alloc_zeros::<half::bf16>(rows * cols)?;
//! let mut y = gpu.stream().alloc_zeros::<half::bf16>(rows * cols)?;
//! kernel.call(&gpu).operand("x", &x).operand_mut("y", &mut y)
//!     .quantity("rows", rows).quantity("cols", cols).quantity("ldx", cols).quantity("ldy", cols)
//!     .launch()?;
//! // Or the family's fastest variant for this call: registry.family("softmax")?.call(&gpu)...
//! # Ok(()) }
//! ```
//!
//! Every launch is checked first against what the manifest records (dtype, buffer lengths,
//! leading dimensions, divisibility, alignment) and refused with an [`Error`] naming the rule,
//! so no launch reads or writes out of bounds. Plug-ins (typed calls and dispatchers of one
//! family) build on [`Kernel::plan`], [`Kernel::extension`] and [`Registry::extension`].

mod chooser;
mod error;
mod extensions;
mod fatbin;
pub mod first_call;
mod gpu;
mod kernel;
mod plan;
mod registry;

pub use chooser::{
    estimate_seconds, Chooser, Class, Pick, Policy, PolicyOf, Reading, Ties, TimedAs, Way, Ways, MEASURED_ENOUGH, NEAR_ENOUGH,
};
pub use error::Error;
pub use extensions::Extensions;
pub use fatbin::Fatbin;
/// The 8-bit float element types (`e4m3`, `e5m2`), for buffers of fp8 kernels.
pub use float8::{F8E4M3, F8E5M2};
pub use gpu::{check_block_smem, Gpu};
/// How a plug-in registers its [`Policy`]: `tilesmith_runtime::inventory::submit! { PolicyOf { .. } }`.
pub use inventory;
pub use kernel::{CallBuilder, Element, Kernel, Planned, Target};
pub use plan::{batch_span, check_stored, plan_call, runs_on, span, Arg, Buffer, Call, Launch, OffsetsCheck, Stored, TensorMapArg};
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
