//! Benchmarks variants against their baseline (cuBLAS for GEMM, a device-to-device copy for
//! transpose) side by side in one process, over a set of shapes; prints a table and writes
//! bench.json and one SVG chart per family and dtype. `cargo xtask bench` runs it; so does a bundle.

use clap::Parser;
use globset::{Glob, GlobSetBuilder};
use std::path::PathBuf;
use std::process::ExitCode;
use tilesmith_runtime::{
    plan_gemm, plan_transpose, Buffer, Dtype, Family, GemmShape, Gpu, Kernel, Kind, Layout, Registry, TransposeShape, Workspace,
};
use tilesmith_tests::report::{self, Record};
use tilesmith_tests::timing::{GemmCase, TransposeCase};
use tilesmith_tests::{chart, with_element};

const DEFAULT_SHAPES: &str =
    "1024x1024x1024,2048x2048x2048,4096x4096x4096,8192x8192x8192,8192x8192x1024,16384x1024x4096,4000x4000x4000,4095x4097x4099,\
16x4096x4096,128x8192x8192,3000x3000x3000,\
4096x4096,8192x8192,16384x16384,4000x4000,4095x4097";

#[derive(Parser)]
#[command(about = "tilesmith kernels against cuBLAS and a device copy, side by side")]
struct Args {
    /// Only variants whose names match this glob (repeatable).
    #[arg(long = "kernels", value_name = "GLOB")]
    kernels: Vec<String>,
    /// Comma-separated shapes: MxNxK for GEMM, MxN for transpose. A variant is run on the
    /// shapes it accepts (unchecked variants skip shapes off their tile).
    #[arg(long, default_value = DEFAULT_SHAPES)]
    shapes: String,
    /// Redraw the charts and print the table from an earlier run's bench.json; no GPU needed.
    #[arg(long, value_name = "BENCH_JSON")]
    replot: Option<PathBuf>,
    /// Also time the registry's `gemm` call, which picks its own variant, for every GEMM shape
    /// and every dtype and layout of the variants benchmarked: a row per shape, named after
    /// the pick.
    #[arg(long)]
    dispatch: bool,
    /// Folder for bench.json and the charts.
    #[arg(long, env = "TILESMITH_BENCH_DIR", default_value_os_t = report::perf_dir().with_file_name("tilesmith-bench"))]
    out: PathBuf,
}

fn main() -> ExitCode {
    match run(Args::parse()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("error: {err}");
            ExitCode::FAILURE
        }
    }
}

/// The benchmarked problem shapes, per family.
struct Shapes {
    gemm: Vec<[usize; 3]>,
    transpose: Vec<[usize; 2]>,
}

fn parse_shapes(text: &str) -> Result<Shapes, String> {
    let (mut gemm, mut transpose) = (Vec::new(), Vec::new());
    for item in text.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let dims: Vec<usize> =
            item.split('x').map(|d| d.parse().map_err(|_| format!("shape `{item}`: `{d}` is not a size"))).collect::<Result<_, _>>()?;
        match dims[..] {
            [m, n, k] if m > 0 && n > 0 && k > 0 => gemm.push([m, n, k]),
            [m, n] if m > 0 && n > 0 => transpose.push([m, n]),
            _ => return Err(format!("shape `{item}` must be MxNxK (GEMM) or MxN (transpose), every size at least 1")),
        }
    }
    Ok(Shapes { gemm, transpose })
}

fn replot(from: &std::path::Path, out: &std::path::Path) -> Result<(), String> {
    let text = std::fs::read_to_string(from).map_err(|e| format!("cannot read {}: {e}", from.display()))?;
    let records: Vec<Record> = serde_json::from_str(&text).map_err(|e| format!("{}: {e}", from.display()))?;
    let device = records.first().map(|r| r.device.clone()).ok_or(format!("{} holds no records", from.display()))?;
    write_outputs(out, &records, &device)?;
    println!("\n{}", report::table(&records));
    Ok(())
}

fn run(args: Args) -> Result<(), String> {
    if let Some(from) = &args.replot {
        return replot(from, &args.out);
    }
    let shapes = parse_shapes(&args.shapes)?;
    let mut globs = GlobSetBuilder::new();
    for pattern in &args.kernels {
        globs.add(Glob::new(pattern).map_err(|e| format!("--kernels `{pattern}`: {e}"))?);
    }
    let globs = globs.build().map_err(|e| e.to_string())?;
    let registry = Registry::open(None).map_err(|e| e.to_string())?;
    let kernels: Vec<Kernel> = registry.kernels().filter(|k| args.kernels.is_empty() || globs.is_match(k.name())).cloned().collect();
    if kernels.is_empty() {
        return Err("no variant in the registry matches --kernels".into());
    }
    let gpu = Gpu::new(0).map_err(|e| e.to_string())?;
    println!(
        "{} variant(s) on {}; registry {} ({})",
        kernels.len(),
        gpu.name(),
        registry.dir().display(),
        registry.kernels().next().map_or("empty", |k| k.info().compiler.as_str())
    );

    let mut records = Vec::new();
    let mut skipped = Vec::new();
    let mut workspace = Workspace::new();
    // Kernels sharing dtype and layout share inputs and one baseline timing per shape.
    let mut groups: Vec<(Family, Dtype, Option<Layout>, Vec<&Kernel>)> = Vec::new();
    for kernel in &kernels {
        let v = kernel.variant();
        let layout = match v.kind {
            Kind::Gemm { layout, .. } => Some(layout),
            Kind::Transpose { .. } => None,
        };
        match groups.iter_mut().find(|g| g.0 == v.family() && g.1 == v.dtype && g.2 == layout) {
            Some(group) => group.3.push(kernel),
            None => groups.push((v.family(), v.dtype, layout, vec![kernel])),
        }
    }
    for (_, dtype, layout, members) in &groups {
        with_element!(*dtype, T => match layout {
            Some(layout) => {
                for &[m, n, k] in &shapes.gemm {
                    let shape = GemmShape::packed(m, n, k, *layout);
                    let mut runnable = Vec::new();
                    for &kernel in members {
                        let buffers = shape.spans().map(|len| Buffer { len, addr: 0 });
                        match plan_gemm(kernel.info(), *dtype, &shape, buffers, gpu.sms()) {
                            Ok(_) => runnable.push(kernel),
                            Err(rule) => skipped.push(format!("{} {m}x{n}x{k}: {rule}", kernel.name())),
                        }
                    }
                    if runnable.is_empty() && !args.dispatch {
                        continue;
                    }
                    let mut case = GemmCase::<T>::new(&gpu, shape)?;
                    let baseline_ms = case.time_cublas(&gpu)?;
                    for kernel in runnable {
                        let record = case.record(&gpu, kernel, baseline_ms)?;
                        println!("{}", record.summary());
                        records.push(record);
                    }
                    if args.dispatch {
                        let record = case.record_dispatch(&gpu, &registry, &mut workspace, baseline_ms)?;
                        println!("{}", record.summary());
                        records.push(record);
                    }
                }
            }
            None => {
                for &[m, n] in &shapes.transpose {
                    let shape = TransposeShape::packed(m, n);
                    let mut runnable = Vec::new();
                    for &kernel in members {
                        let buffers = shape.spans().map(|len| Buffer { len, addr: 0 });
                        match plan_transpose(kernel.info(), *dtype, &shape, buffers, gpu.sms()) {
                            Ok(_) => runnable.push(kernel),
                            Err(rule) => skipped.push(format!("{} {m}x{n}: {rule}", kernel.name())),
                        }
                    }
                    if runnable.is_empty() {
                        continue;
                    }
                    let mut case = TransposeCase::<T>::new(&gpu, shape)?;
                    let baseline_ms = case.time_copy(&gpu)?;
                    for kernel in runnable {
                        let record = case.record(&gpu, kernel, baseline_ms)?;
                        println!("{}", record.summary());
                        records.push(record);
                    }
                }
            }
        })
    }
    write_outputs(&args.out, &records, gpu.name())?;
    if !skipped.is_empty() {
        println!("\n{} (variant, shape) pairs skipped, the variant cannot take the shape, e.g. {}", skipped.len(), skipped[0]);
    }
    println!("\n{}", report::table(&records));
    Ok(())
}

fn write_outputs(out: &std::path::Path, records: &[Record], device: &str) -> Result<(), String> {
    std::fs::create_dir_all(out).map_err(|e| format!("cannot create {}: {e}", out.display()))?;
    let json = serde_json::to_string_pretty(records).map_err(|e| e.to_string())?;
    std::fs::write(out.join("bench.json"), json + "\n").map_err(|e| format!("cannot write bench.json: {e}"))?;
    for family in [Family::Gemm, Family::Transpose] {
        for dtype in Dtype::ALL {
            let mine: Vec<Record> = records.iter().filter(|r| r.family == family.as_str() && r.dtype == dtype.as_str()).cloned().collect();
            if !mine.is_empty() {
                let title = format!("tilesmith {family} {dtype} on {device}: {} vs {}", mine[0].unit, mine[0].baseline_name);
                chart::draw(&out.join(format!("{family}_{dtype}.svg")), &title, &mine)?;
            }
        }
    }
    println!("\nwrote {}/bench.json and the charts", out.display());
    Ok(())
}
