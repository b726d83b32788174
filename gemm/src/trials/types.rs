//! GEMM's element-type dispatch: A and B (one type, or e4m3 and e5m2 mixed), and C.

/// Runs `$body` with `$t` and `$tb` bound to the Rust types of a GEMM's A and B: one type, or
/// e4m3 and e5m2 either way round (the only mix variants take, wgmma's 8-bit one), else
/// evaluates to an error naming them.
#[macro_export]
macro_rules! with_inputs {
    ($a:expr, $b:expr, $t:ident, $tb:ident => $body:expr) => {
        match ($a, $b) {
            (Dtype::E4m3, Dtype::E5m2) => {
                type $t = tilesmith_runtime::F8E4M3;
                type $tb = tilesmith_runtime::F8E5M2;
                $body
            }
            (Dtype::E5m2, Dtype::E4m3) => {
                type $t = tilesmith_runtime::F8E5M2;
                type $tb = tilesmith_runtime::F8E4M3;
                $body
            }
            (a, b) if a == b => tilesmith_trials::with_element!(a, $t => {
                type $tb = $t;
                $body
            }),
            (a, b) => Err(format!("the GEMM trials take A and B of one type, or of e4m3 and e5m2, not {a} and {b}")),
        }
    };
}

/// Runs `$body` with `$t` bound to the Rust type of `$dtype`, a GEMM output's (f32, f16 or
/// bf16: no kernel writes 8-bit outputs), else evaluates to an error naming it.
#[macro_export]
macro_rules! with_output {
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
            other => Err(format!("the GEMM trials check f32, f16 and bf16 outputs, not {other}")),
        }
    };
}
