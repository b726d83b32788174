//! What the generated per-variant trials are made of: random inputs and float64 references
//! on the host, baselines and timing on the device, trials of any family from its declaration
//! (`declared`), GEMM's against cuBLAS, and the trials themselves. The [`harness`] turns a
//! registry's manifest into one correctness and one performance trial per variant; `cargo test`
//! (tests/variants.rs) and `tilesmith test` run it.

pub mod declared;
pub mod device;
pub mod fused;
pub mod harness;
pub mod host;
pub mod report;
pub mod timing;
pub mod trials;
