//! Opens the registry, looks up a GEMM kernel (default `gemm_tn_128x128x32`), multiplies two
//! random matrices, checks the result against the CPU in float64, and prints the time.
//!
//! `cargo run --release -p tilesmith-gemm --example gemm [KERNEL] [M N K]`

use cudarc::driver::sys::CUevent_flags;
use half::bf16;
use rand::Rng;
use std::process::ExitCode;
use tilesmith_gemm::{GemmArgs, GemmKernel, GemmShape};
use tilesmith_runtime::{Dtype, Gpu, Registry};

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("error: {err}");
            ExitCode::FAILURE
        }
    }
}

fn run() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let name = args.first().map_or("gemm_tn_128x128x32", String::as_str);
    let dims: Vec<usize> = args.iter().skip(1).map(|a| a.parse()).collect::<Result<_, _>>()?;
    let (m, n, k) = match dims[..] {
        [] => (1024, 1024, 1024),
        [m, n, k] => (m, n, k),
        _ => return Err("give M N K, all three".into()),
    };

    let registry = Registry::open(None)?;
    let kernel = registry.kernel(name)?;
    if kernel.variant().dtype != Dtype::Bf16 {
        return Err(format!("this example feeds bf16; {name} takes {}", kernel.variant().dtype).into());
    }
    let layout = kernel.layout()?;
    let gpu = Gpu::new(0)?;
    println!(
        "{name} on {} (sm_{}{}), registry {}",
        gpu.name(),
        gpu.capability().0,
        gpu.capability().1,
        registry.dir().map_or("embedded".into(), |dir| dir.display().to_string())
    );

    let mut rng = rand::rng();
    let mut random = |len: usize| -> Vec<bf16> { (0..len).map(|_| bf16::from_f64(rng.random_range(-1.0..1.0))).collect() };
    let shape = GemmShape::packed(m, n, k, layout);
    let [a_len, b_len, c_len] = shape.spans();
    let (a, b) = (random(a_len), random(b_len));
    let stream = gpu.stream();
    let (da, db) = (stream.clone_htod(&a)?, stream.clone_htod(&b)?);
    let mut dc = stream.clone_htod(&vec![bf16::NAN; c_len])?;

    kernel.gemm(&gpu, GemmArgs::packed(&da, &db, &mut dc, m, n, k, layout))?;
    let runs = 10;
    let start = stream.record_event(Some(CUevent_flags::CU_EVENT_DEFAULT))?;
    for _ in 0..runs {
        kernel.gemm(&gpu, GemmArgs::packed(&da, &db, &mut dc, m, n, k, layout))?;
    }
    let end = stream.record_event(Some(CUevent_flags::CU_EVENT_DEFAULT))?;
    gpu.synchronize()?;
    let ms = f64::from(start.elapsed_ms(&end)?) / f64::from(runs);
    let c = stream.clone_dtoh(&dc)?;

    // float64 reference on the CPU, with the operands read as the layout stores them.
    let at = |i: usize, p: usize| if layout.a_row_major() { a[i * k + p] } else { a[p * m + i] }.to_f64();
    let bt = |p: usize, j: usize| if layout.b_row_major() { b[p * n + j] } else { b[j * k + p] }.to_f64();
    let (mut diff, mut norm) = (0.0, 0.0);
    for i in 0..m {
        for j in 0..n {
            let want: f64 = (0..k).map(|p| at(i, p) * bt(p, j)).sum();
            let got = c[i * n + j].to_f64();
            diff += (got - want) * (got - want);
            norm += want * want;
        }
    }
    let error = (diff / norm).sqrt();
    let tflops = 2.0 * (m * n * k) as f64 / (ms * 1e-3) / 1e12;
    println!("{m}x{n}x{k} bf16: {ms:.3} ms per launch ({tflops:.1} TFLOP/s, mean of {runs}), relative error vs CPU {error:.2e}");
    if error.is_nan() || error > 1e-2 {
        return Err(format!("relative error {error:.2e} is over bf16's 1e-2").into());
    }
    Ok(())
}
