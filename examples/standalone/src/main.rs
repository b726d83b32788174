//! Opens the registry build.rs embedded, looks up a kernel by name, and, where there is a GPU,
//! runs it and checks what it wrote.

use std::process::ExitCode;
use tilesmith_runtime::{Gpu, Registry};

tilesmith_runtime::include_registry!();

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
    let registry = Registry::embedded(&REGISTRY)?;
    let kernel = registry.kernel("scale")?;
    println!(
        "{} kernels embedded; `{}` is the {} {} variant, {} threads a block",
        registry.kernels().count(),
        kernel.name(),
        kernel.variant().dtype,
        kernel.variant().backend,
        kernel.info().entry.launch.block[0]
    );
    let gpu = match Gpu::new(0) {
        Ok(gpu) => gpu,
        Err(err) => {
            println!("nothing launched: {err}");
            return Ok(());
        }
    };
    let n = 1_000_003;
    let alpha = 2.5;
    let x_host: Vec<f32> = (0..n).map(|i| ((i * 7919) % 2001) as f32 / 1000.0 - 1.0).collect();
    let x = gpu.stream().clone_htod(&x_host)?;
    let mut y = gpu.stream().clone_htod(&vec![f32::NAN; n])?;
    kernel.call(&gpu).operand("x", &x).operand_mut("y", &mut y).quantity("n", n).scalar("alpha", alpha).launch()?;
    let y_host = gpu.stream().clone_dtoh(&y)?;
    let wrong = x_host.iter().zip(&y_host).filter(|(x, y)| **y != (alpha as f32) * **x).count();
    println!("scale on {}: {n} elements, {wrong} wrong", gpu.name());
    if wrong > 0 {
        return Err(format!("{wrong} elements differ from alpha * x").into());
    }
    Ok(())
}
