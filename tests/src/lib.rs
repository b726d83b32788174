//! What the generated per-variant trials are made of: random inputs and float64 references
//! on the host, baselines and timing on the device, trials of any family from its declaration
//! (`declared`), GEMM's against cuBLAS, and the trials themselves. The harness
//! (`variants.rs`) turns the manifest into one correctness and one performance trial per variant.

pub mod chart;
pub mod declared;
pub mod device;
pub mod host;
pub mod report;
pub mod timing;
pub mod trials;
