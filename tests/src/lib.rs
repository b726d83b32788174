//! What the generated per-variant trials are made of: random inputs and float64 references
//! on the host, timing on the device, trials of any family from its declaration
//! (`declared`), and the trials themselves, with plug-ins for what a declaration cannot say
//! (library baselines, a dispatcher's trials). The [`harness`] turns a registry's manifest
//! into one correctness and one performance trial per variant; `cargo test` (cli/tests/variants.rs)
//! and `tilesmith test` run it.

pub mod declared;
pub mod device;
pub mod harness;
pub mod host;
pub mod report;
pub mod trials;
pub mod tune;

/// Runs `$body` with `$t` bound to the Rust type of `$dtype`.
/// `$dtype` is a `tilesmith_runtime::Dtype` the call site has in scope as `Dtype`.
#[macro_export]
macro_rules! with_element {
    ($dtype:expr, $t:ident => $body:expr) => {
        match $dtype {
            Dtype::F32 => {
                type $t = f32;
                $body
            }
            Dtype::F16 => {
                type $t = half::f16;
                $body
            }
            Dtype::Bf16 => {
                type $t = half::bf16;
                $body
            }
            Dtype::E4m3 => {
                type $t = tilesmith_runtime::F8E4M3;
                $body
            }
            Dtype::E5m2 => {
                type $t = tilesmith_runtime::F8E5M2;
                $body
            }
            Dtype::I32 => {
                type $t = i32;
                $body
            }
            Dtype::I64 => {
                type $t = i64;
                $body
            }
            Dtype::U32 => {
                type $t = u32;
                $body
            }
            Dtype::U8 => {
                type $t = u8;
                $body
            }
        }
    };
}
