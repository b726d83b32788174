//! GEMM (C = A·B with an epilogue) and transpose as a plug-in of tilesmith's runtime: their
//! typed calls, the dispatcher that picks a GEMM variant and strategy per call from GEMM's
//! tuning tables (the policy the runtime's chooser of family `gemm` asks, registered when this
//! crate is linked), and its words in the one table format. The runtime, the pipeline and the
//! trials harness name no family; everything that knows GEMM is here.
//!
//! ```no_run
//! use tilesmith_gemm::{GemmArgs, GemmKernel, GemmRegistry, Workspace};
//! use tilesmith_runtime::{Gpu, Registry};
//! # fn main() -> Result<(), tilesmith_runtime::Error> {
//! let registry = Registry::open(None)?;
//! let gpu = Gpu::new(0)?;
//! # let (m, n, k) = (256, 256, 256);
//! let a = gpu.stream().alloc_zeros::<half::bf16>(m * k)?;
//! let b = gpu.stream().alloc_zeros::<half::bf16>(k * n)?;
//! let mut c = gpu.stream().alloc_zeros::<half::bf16>(m * n)?;
//! // One variant by name...
//! let kernel = registry.kernel("gemm_tn_128x128x32")?;
//! kernel.gemm(&gpu, GemmArgs::packed(&a, &b, &mut c, m, n, k, kernel.layout()?))?;
//! // ...or the dispatcher's pick for this GPU and shape...
//! let choice = registry.gemm(&gpu, GemmArgs::packed(&a, &b, &mut c, m, n, k, kernel.layout()?), &mut Workspace::new())?;
//! println!("{}: {}", choice.label(), choice.reason);
//! // ...which is the family's call by name, with the layout as an axis.
//! let pick = registry.family("gemm")?.call(&gpu)
//!     .operand("a", &a).operand("b", &b).operand_mut("c", &mut c)
//!     .quantity("m", m).quantity("n", n).quantity("k", k)
//!     .quantity("lda", k).quantity("ldb", k).quantity("ldc", n)
//!     .axis("layout", "tn")
//!     .launch()?;
//! assert_eq!(pick.kernel().name(), choice.kernel.name());
//! # Ok(()) }
//! ```

mod args;
pub mod dispatch;
mod kernel;
mod plan;
mod registry;
mod shape;
pub mod table;
#[cfg(feature = "trials")]
pub mod trials;

pub use args::{Epilogue, GemmArgs, TransposeArgs};
pub use dispatch::{Choice, Workspace};
pub use kernel::GemmKernel;
pub use plan::{check_gemm_call, family_call, plan_gemm, plan_gemm_with, plan_transpose, typed_call};
pub use registry::{choose, GemmRegistry};
pub use shape::{Activation, Batch, EpilogueArgs, GemmShape, TransposeShape};
