//! Benchmarks variants against their family's declared baseline (a device-to-device copy of the
//! bytes moved, or a library's call, which the trials plug-in providing it times: cuBLAS for
//! GEMM) side by side in one process, over the shapes each family declares (`trials.bench`) or
//! those given; prints a table and writes bench.json and one SVG chart per family and dtype.
//! `tilesmith bench` runs it; so does a bundle.

use crate::chart;
use crate::PLUGINS;
use globset::{Glob, GlobSetBuilder};
use std::path::PathBuf;
use tilesmith_gemm::Activation;
use tilesmith_runtime::{Dtype, Gpu, Kernel, Registry};
use tilesmith_spec::family::{Baseline, Family};
use tilesmith_trials::declared::{self, Case, Shape};
use tilesmith_trials::report::{self, Record};
use tilesmith_trials::trials::{BenchGroup, Rows};

#[derive(clap::Args)]
pub struct Args {
    /// Only variants whose names match this glob (repeatable).
    #[arg(long = "kernels", value_name = "GLOB")]
    kernels: Vec<String>,
    /// Comma-separated shapes, each its family's quantities in declared order joined by `x`
    /// (MxNxK for gemm, MxN for transpose); a shape applies to every
    /// family with that many quantities. Default: each family's `trials.bench`. A variant is
    /// run on the shapes it accepts (unchecked variants skip shapes off their tile).
    #[arg(long)]
    shapes: Option<String>,
    /// Time every GEMM shape as a strided batch of this many problems, stored one after
    /// another, beside cuBLAS's strided batch (cublasGemmStridedBatchedEx).
    #[arg(long, default_value_t = 1, value_name = "PROBLEMS")]
    batch: usize,
    /// Redraw the charts and print the table from an earlier run's bench.json; no GPU needed.
    #[arg(long, value_name = "BENCH_JSON")]
    pub replot: Option<PathBuf>,
    /// Also time the call that picks its own variant (the registry's `gemm` for GEMM shapes, the
    /// family's chooser for the others) for every shape and every dtype (and GEMM layout) of
    /// the variants benchmarked, and every value they have of the axes a call states
    /// (attention's `causal`): a row per shape and call, named after the pick.
    #[arg(long)]
    dispatch: bool,
    /// Folder for bench.json and the charts (default: target/tilesmith-bench in the project, else
    /// tilesmith-bench here).
    #[arg(long, env = "TILESMITH_BENCH_DIR")]
    pub out: Option<PathBuf>,
}

/// Shapes given as `AxBxC`, every size at least 1.
fn parse_shapes(text: &str) -> Result<Vec<Vec<u64>>, String> {
    let mut shapes = Vec::new();
    for item in text.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let dims: Vec<u64> =
            item.split('x').map(|d| d.parse().map_err(|_| format!("shape `{item}`: `{d}` is not a size"))).collect::<Result<_, _>>()?;
        if dims.contains(&0) {
            return Err(format!("shape `{item}`: every size must be at least 1"));
        }
        shapes.push(dims);
    }
    Ok(shapes)
}

/// The shapes to time a family on: those given that have as many sizes as it has quantities,
/// else its declared ones.
fn family_shapes(family: &Family, given: &Option<Vec<Vec<u64>>>) -> Vec<Shape> {
    match given {
        Some(given) => given
            .iter()
            .filter(|dims| dims.len() == family.quantities.len())
            .map(|dims| family.quantities.iter().cloned().zip(dims.iter().copied()).collect())
            .collect(),
        None => family.trials.bench.iter().map(|s| declared::shape_of(family, s)).collect(),
    }
}

fn describe(shape: &Shape, family: &Family) -> String {
    family.quantities.iter().map(|q| shape.get(q).map_or("?".into(), u64::to_string)).collect::<Vec<_>>().join("x")
}

/// `--replot`: the charts and table of an earlier run's bench.json, without a registry or GPU.
/// Each record's family and dtype name a chart file, so they must be plain words.
pub fn replot(from: &std::path::Path, out: &std::path::Path) -> Result<(), String> {
    let text = tilesmith_spec::files::read_to_string(from).map_err(|e| format!("cannot read {}: {e}", from.display()))?;
    let records: Vec<Record> = serde_json::from_str(&text).map_err(|e| format!("{}: {e}", from.display()))?;
    for (index, record) in records.iter().enumerate() {
        if !tilesmith_spec::variant::is_c_identifier(&record.family) || Dtype::parse(&record.dtype).is_none() {
            return Err(format!(
                "{}: record {} has family `{}` and dtype `{}`; a family must be an identifier and a dtype one of tilesmith's",
                from.display(),
                index + 1,
                record.family,
                record.dtype
            ));
        }
    }
    let device = records.first().map(|r| r.device.clone()).ok_or(format!("{} holds no records", from.display()))?;
    write_outputs(out, &records, &device)?;
    println!("\n{}", report::table(&records));
    Ok(())
}

/// Runs the bench on the kernels of `registry`, writing into `--out`, else `default_out`.
pub fn run(args: Args, registry: &Registry, default_out: PathBuf) -> Result<(), String> {
    let out = args.out.clone().unwrap_or(default_out);
    let given = args.shapes.as_deref().map(parse_shapes).transpose()?;
    if args.batch == 0 {
        return Err("--batch must be at least 1 problem".into());
    }
    let mut globs = GlobSetBuilder::new();
    for pattern in &args.kernels {
        globs.add(Glob::new(pattern).map_err(|e| format!("--kernels `{pattern}`: {e}"))?);
    }
    let globs = globs.build().map_err(|e| e.to_string())?;
    let kernels: Vec<Kernel> =
        registry.kernels().filter(|k| !k.is_reference() && (args.kernels.is_empty() || globs.is_match(k.name()))).cloned().collect();
    if kernels.is_empty() {
        return Err("no variant in the registry matches --kernels".into());
    }
    let gpu = Gpu::new(0).map_err(|e| e.to_string())?;
    println!(
        "{} variant(s) on {}; registry {} ({})",
        kernels.len(),
        gpu.name(),
        registry.dir().map_or("embedded".into(), |dir| dir.display().to_string()),
        registry.kernels().next().map_or("empty", |k| k.info().compiler.as_str())
    );

    let mut rows = Rows::default();
    // Kernels sharing family, dtype, types of B and C, the axes names always show (a GEMM's
    // layout), and a GEMM's epilogue, share inputs and one baseline timing per shape.
    let mut groups: Vec<(String, Dtype, String, Vec<&Kernel>)> = Vec::new();
    for kernel in &kernels {
        let v = kernel.variant();
        let [b, out] = ["b", "c"].map(|name| kernel.operand_dtype(name).map_or(String::new(), |d| d.to_string()));
        let group = format!("{} {} {b} {out}", report::group(kernel), Activation::epilogue_of(v));
        match groups.iter_mut().find(|g| g.0 == v.family && g.1 == v.dtype && g.2 == group) {
            Some(entry) => entry.3.push(kernel),
            None => groups.push((v.family.clone(), v.dtype, group, vec![kernel])),
        }
    }
    for (.., members) in &groups {
        let family = &members[0].info().entry.declaration;
        let shapes = family_shapes(family, &given);
        if shapes.is_empty() {
            let family_name = &members[0].variant().family;
            let why = match &given {
                Some(_) => format!("no --shapes of {} sizes", family.quantities.len()),
                None => "no trials.bench shapes: declare some, or pass --shapes".to_string(),
            };
            rows.skipped.extend(members.iter().map(|k| format!("{} ({family_name}): {why}", k.name())));
        }
        for shape in shapes {
            let what = describe(&shape, family);
            match &family.baseline {
                // A library's baseline, from the plug-in that provides it.
                Baseline::Library(name) => {
                    let plugin = PLUGINS.iter().find(|p| p.libraries().contains(&name.as_str())).ok_or_else(|| {
                        format!(
                            "family `{}` is timed beside library `{name}`, which no plug-in bench links provides",
                            members[0].variant().family
                        )
                    })?;
                    let group = BenchGroup { members, shape: &shape, what: &what, batch: args.batch, dispatch: args.dispatch };
                    plugin.bench(&gpu, registry, &group, &mut rows)?;
                }
                Baseline::Copy => {
                    let shape_start = rows.records.len();
                    let mut runnable = Vec::new();
                    for &kernel in members {
                        match declared::with_lds(kernel, shape.clone(), 0)
                            .and_then(|full| declared::takes(kernel, &full, gpu.sms(), gpu.smem_per_block()))
                        {
                            Ok(()) => runnable.push(kernel),
                            Err(rule) => rows.skipped.push(format!("{} {what}: {rule}", kernel.name())),
                        }
                    }
                    // Kernels whose leading-dimension rules give the same shape share a case
                    // (its inputs and its copy's buffers); each is timed in turns with the copy.
                    let mut cases: Vec<(Shape, Case)> = Vec::new();
                    for kernel in runnable {
                        let full = declared::with_lds(kernel, shape.clone(), 0)?;
                        let index = match cases.iter().position(|(s, _)| *s == full) {
                            Some(index) => index,
                            None => {
                                cases.push((full.clone(), Case::new(&gpu, kernel, full)?));
                                cases.len() - 1
                            }
                        };
                        let (_, case) = &mut cases[index];
                        // A variant refusing the launch (shared memory past the GPU's, say) loses
                        // its row only.
                        rows.keep(case.record(&gpu, registry, kernel), &format!("{} {what}", kernel.name()));
                    }
                    // The call as users make it (rows packed), through the family's chooser.
                    if args.dispatch {
                        let packed = members.iter().find(|k| k.info().entry.requires.ld_multiple <= 1).unwrap_or(&members[0]);
                        let full = declared::with_lds(packed, shape.clone(), 0)?;
                        let chooser = registry.family(&packed.variant().family).map_err(|e| e.to_string())?;
                        let mut case = Case::new(&gpu, packed, full)?;
                        // The fastest variant of this shape that takes the call as made (packed
                        // rows), timed in turns with it in one case: the rows above were each
                        // timed in a turn of its own.
                        let takes_call = |name: &str| {
                            registry.kernel(name).is_ok_and(|k| declared::takes(&k, &case.shape, gpu.sms(), gpu.smem_per_block()).is_ok())
                        };
                        let fastest = rows.records[shape_start..]
                            .iter()
                            .filter(|r| takes_call(&r.variant))
                            .max_by(|a, b| a.ratio.total_cmp(&b.ratio))
                            .map(|r| r.variant.clone());
                        let beside = |case: &mut Case, record: &mut Record| -> Result<(), String> {
                            let Some(name) = &fastest else { return Ok(()) };
                            let kernel = registry.kernel(name).map_err(|e| e.to_string())?;
                            let [chosen_ms, fastest_ms] = case.time_beside(&gpu, chooser, &kernel)?;
                            record.beside = Some((name.clone(), fastest_ms / chosen_ms));
                            Ok(())
                        };
                        let record = case.record_chosen(&gpu, registry, chooser).and_then(|mut record| {
                            beside(&mut case, &mut record)?;
                            Ok(record)
                        });
                        rows.keep(record, &format!("dispatch {what}"));
                    }
                }
            }
        }
    }
    write_outputs(&out, &rows.records, gpu.name())?;
    if !rows.skipped.is_empty() {
        println!("\n{} (variant, shape) pairs skipped, the variant cannot take the shape or refused the launch:", rows.skipped.len());
        for why in &rows.skipped {
            println!("  {why}");
        }
    }
    println!("\n{}", report::table(&rows.records));
    Ok(())
}

fn write_outputs(out: &std::path::Path, records: &[Record], device: &str) -> Result<(), String> {
    std::fs::create_dir_all(out).map_err(|e| format!("cannot create {}: {e}", out.display()))?;
    let json = serde_json::to_string_pretty(records).map_err(|e| e.to_string())?;
    std::fs::write(out.join("bench.json"), json + "\n").map_err(|e| format!("cannot write bench.json: {e}"))?;
    // One chart per family and dtype, records grouped in one pass.
    let mut charts: std::collections::BTreeMap<(&str, &str), Vec<Record>> = std::collections::BTreeMap::new();
    for record in records {
        charts.entry((&record.family, &record.dtype)).or_default().push(record.clone());
    }
    for ((family, dtype), mine) in charts {
        let title = format!("tilesmith {family} {dtype} on {device}: {} vs {}", mine[0].unit, mine[0].baseline_name);
        chart::draw(&out.join(format!("{family}_{dtype}.svg")), &title, &mine)?;
    }
    println!("\nwrote {}/bench.json and the charts", out.display());
    Ok(())
}
