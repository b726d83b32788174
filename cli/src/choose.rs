//! `tilesmith choose --family NAME SHAPE`: what a call of that shape would run, and why, on a
//! GPU named by a table, without a GPU: every way the family's variants take the call, with
//! its table estimate and the cost model's, why the others do not, then the pick and its
//! reason. It reads only a registry; every family's call goes through its chooser.

use std::path::PathBuf;
use tilesmith_gemm::{family_call, table as gemm_table, EpilogueArgs, GemmShape};
use tilesmith_runtime::{plan_call, runs_on, Buffer, Call, Dtype, Layout, Registry};
use tilesmith_spec::tuning::Device;
use tilesmith_trials::declared;

#[derive(clap::Args)]
pub struct Args {
    /// The family whose call is chosen.
    #[arg(long)]
    family: String,
    /// The call's quantities in the family's declared order joined by `x` (MxNxK for gemm,
    /// rowsxcols for softmax); operands packed.
    shape: String,
    /// The call's dtype (default: bf16 where the family has it, else its first).
    #[arg(long)]
    dtype: Option<String>,
    /// The GPU, as a table of the family names it (a part of its name, e.g. H200); default:
    /// the first GPU the family's tables measured.
    #[arg(long)]
    gpu: Option<String>,
    /// For gemm: the call's layout.
    #[arg(long, default_value = "tn")]
    layout: String,
    /// The shared memory a block may use on that GPU (an H100's and an H200's by default).
    #[arg(long, default_value_t = 232_448, value_name = "BYTES")]
    smem_per_block: u32,
}

/// The registry `choose` reads: `--registry`, else `$TILESMITH_REGISTRY`, else the project's
/// as it is (never built for the question).
pub fn registry_dir(given: Option<PathBuf>, project_registry: Option<PathBuf>) -> Result<PathBuf, String> {
    let from_env = std::env::var_os(tilesmith_runtime::REGISTRY_VAR).filter(|v| !v.is_empty()).map(PathBuf::from);
    let dir = given.or(from_env).or(project_registry).ok_or("no registry: pass --registry DIR, or run inside a project")?;
    if !dir.join(tilesmith_spec::manifest::MANIFEST_FILE).is_file() {
        return Err(format!("{} holds no registry: `tilesmith build` makes one (choose never builds to answer)", dir.display()));
    }
    Ok(dir)
}

pub fn run(args: Args, registry: &Registry) -> Result<(), String> {
    let chooser = registry.family(&args.family).map_err(|e| e.to_string())?;
    let family = chooser.declaration();
    let sizes: Vec<u64> =
        args.shape.split('x').map(|d| d.trim().parse::<u64>().ok().filter(|&d| d > 0)).collect::<Option<_>>().ok_or_else(|| {
            format!("shape `{}`: each size is a whole number above 0, as {} joined by `x`", args.shape, family.quantities.join("x"))
        })?;
    if sizes.len() != family.quantities.len() {
        return Err(format!(
            "shape `{}`: family {} takes {} sizes ({})",
            args.shape,
            args.family,
            family.quantities.len(),
            family.quantities.join("x")
        ));
    }
    let mut dtypes: Vec<Dtype> = chooser.kernels().iter().map(|k| k.variant().dtype).collect();
    dtypes.sort();
    dtypes.dedup();
    let dtype = match &args.dtype {
        Some(word) => Dtype::parse(word).filter(|d| dtypes.contains(d)).ok_or_else(|| {
            format!("--dtype {word}: family {} has {}", args.family, dtypes.iter().map(Dtype::to_string).collect::<Vec<_>>().join(", "))
        })?,
        None => *dtypes.iter().find(|&&d| d == Dtype::Bf16).or(dtypes.first()).ok_or("the family has no variant")?,
    };
    let device = device(chooser.tables().iter().map(|t| &t.device), args.gpu.as_deref())?;
    println!("{} {} {dtype} on {device}", args.family, args.shape);
    let source = |variant: &str| chooser.kernels().iter().find(|k| k.name() == variant).map(|k| k.info().entry.source_sha256.as_str());
    for table in chooser.tables().iter().filter(|t| t.device.is(&device)) {
        if let Some(words) = table.stale_words(source) {
            println!("note: {words}");
        }
    }
    let call = if args.family == gemm_table::FAMILY {
        gemm_call(dtype, &sizes, &args.layout)?
    } else {
        let shape: declared::Shape = family.quantities.iter().cloned().zip(sizes.iter().copied()).collect();
        // The call as a variant with the least leading-dimension rule takes it packed.
        let packer = chooser
            .kernels()
            .iter()
            .filter(|k| k.variant().dtype == dtype)
            .min_by_key(|k| k.info().entry.requires.ld_multiple)
            .ok_or_else(|| format!("the registry has no {dtype} variant of {}", args.family))?;
        declared::unallocated_call(&packer.info().entry, &declared::with_lds(packer, shape, 0)?)?
    };
    let pick = chooser.pick(&device, args.smem_per_block, &call)?;
    for (way, estimate) in pick.takers.iter() {
        let table = estimate.map_or("not measured near".to_string(), |e| format!("{:+.1}% of the fastest", (e.exp() - 1.0) * 100.0));
        let model = chooser.cost(&device, &call, way) * 1e6;
        let mark = if way.kernel.name() == pick.kernel().name() && way.strategy == pick.way.strategy { "*" } else { " " };
        println!("{mark} {}: takes it: table {table}; cost model {model:.1} us", way.label());
    }
    // Why the others of the dtype do not: the planner's rule, where a variant runs only
    // directly (a plug-in's ways are its own: their count is said).
    let capability = (device.capability[0], device.capability[1]);
    let others =
        chooser.kernels().iter().filter(|k| k.variant().dtype == dtype && !pick.takers.iter().any(|(w, _)| w.kernel.name() == k.name()));
    if chooser.policy().is_some() {
        println!("  {} other {dtype} variant(s) take it no way", others.count());
    } else {
        for kernel in others {
            let line = match plan_call(kernel.info(), &call, device.sms) {
                _ if !runs_on(&kernel.info().entry.targets, capability) => "has no code for this GPU".to_string(),
                Err(rule) => format!("refuses it: {rule}"),
                Ok(_) => "refuses it (past this GPU's shared memory, or a computing axis the call leaves at its default)".into(),
            };
            println!("  {}: {line}", kernel.name());
        }
    }
    println!("pick: {}\nwhy: {}", pick.way.label(), pick.reason);
    Ok(())
}

/// The GPU named `name` (a part of a table's device name, any case), else the first table's.
fn device<'d>(devices: impl Iterator<Item = &'d Device> + Clone, name: Option<&str>) -> Result<Device, String> {
    let known = || devices.clone().map(|d| d.name.clone()).collect::<Vec<_>>().join(", ");
    match name {
        Some(name) => devices.clone().find(|d| d.name.to_lowercase().contains(&name.to_lowercase())).cloned().ok_or_else(|| {
            format!("--gpu {name}: the family's tables measured {}", if known().is_empty() { "no GPU".into() } else { known() })
        }),
        None => devices
            .clone()
            .next()
            .cloned()
            .ok_or_else(|| "the family has no tuning table to name a GPU: pass --gpu with a table, or tune it".into()),
    }
}

/// GEMM's call of these sizes, packed in `layout`.
fn gemm_call(dtype: Dtype, sizes: &[u64], layout: &str) -> Result<Call, String> {
    let layout = Layout::parse(layout).ok_or_else(|| format!("--layout {layout}: one of nn, nt, tn, tt"))?;
    let [m, n, k] = [0, 1, 2].map(|i| sizes[i] as usize);
    let shape = GemmShape::packed(m, n, k, layout);
    Ok(family_call(dtype, &shape, Buffer::unallocated(shape.spans()), &EpilogueArgs::default()))
}
