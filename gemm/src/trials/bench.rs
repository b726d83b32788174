//! `bench`'s rows for the families timed beside GEMM's libraries: GEMM beside cuBLAS (cuBLASLt
//! for 8-bit inputs and fused epilogues), with the `gemm` call through the family's chooser;
//! a family of matrix products (attention) beside cuBLAS on a GEMM of as many FLOPs.

use super::checks;
use super::fused::{LtGemm, Unfused};
use super::timing::{FusedBaseline, GemmCase};
use super::{flops_record, flops_record_chosen, GEMM_FLOPS_LIBRARY, GEMM_LIBRARY};
use crate::table::Strategy;
use crate::{plan_gemm_with, with_inputs, with_output, Activation, Choice, EpilogueArgs, GemmKernel, GemmShape, Workspace};
use tilesmith_runtime::{Buffer, Dtype, Element, Gpu, Kernel, Registry};
use tilesmith_spec::family::Baseline;
use tilesmith_trials::declared;
use tilesmith_trials::report::Record;
use tilesmith_trials::trials::{BenchGroup, Rows};

/// The rows of one group on one shape ([`tilesmith_trials::trials::Plugin::bench`]).
pub fn group(gpu: &Gpu, registry: &Registry, group: &BenchGroup<'_>, rows: &mut Rows) -> Result<(), String> {
    let BenchGroup { members, shape, what, dispatch, .. } = *group;
    let first = members.first().ok_or("an empty group")?;
    match &first.info().entry.declaration.baseline {
        Baseline::Library(name) if name == GEMM_LIBRARY => {
            let dtype = first.variant().dtype;
            let [b, out] = ["b", "c"].map(|name| first.operand_dtype(name).unwrap_or(dtype));
            with_inputs!(dtype, b, T, TB => with_output!(out, TC => gemm::<T, TC, TB>(gpu, registry, group, rows)))
        }
        Baseline::Library(name) if name == GEMM_FLOPS_LIBRARY => {
            // Each variant timed, with its time, to time the call beside the fastest.
            let mut timed: Vec<(f64, &Kernel)> = Vec::new();
            for &kernel in members {
                let record = declared::with_lds(kernel, shape.clone(), 0)
                    .and_then(|full| declared::takes(kernel, &full, gpu.sms(), gpu.smem_per_block()))
                    .and_then(|()| flops_record(gpu, registry, kernel, shape.clone()));
                if let Ok(record) = &record {
                    timed.push((record.kernel_ms, kernel));
                }
                rows.keep(record, &format!("{} {what}", kernel.name()));
            }
            if dispatch {
                let chooser = registry.family(&first.variant().family).map_err(|e| e.to_string())?;
                for kernel in declared::first_per_call(members.iter().copied(), |k| declared::call_axes(k)) {
                    // The fastest variant asked the same question (attention's mask).
                    let asked = declared::call_axes(kernel);
                    let fastest = timed.iter().filter(|(_, k)| declared::call_axes(k) == asked).min_by(|a, b| a.0.total_cmp(&b.0));
                    let record = flops_record_chosen(gpu, registry, chooser, kernel, shape.clone(), fastest.map(|(_, k)| *k));
                    rows.keep(record, &format!("dispatch {what}"));
                }
            }
            Ok(())
        }
        other => Err(format!("the GEMM plug-in does not time beside {other:?}")),
    }
}

/// GEMM variants of one layout, types and epilogue beside cuBLAS, packed, as a strided batch
/// of `batch` problems where it is above 1; then the `gemm` call.
fn gemm<T: Element, TC: Element, TB: Element>(
    gpu: &Gpu,
    registry: &Registry,
    group: &BenchGroup<'_>,
    rows: &mut Rows,
) -> Result<(), String> {
    let BenchGroup { members, shape, what, batch, dispatch } = *group;
    let dtype = T::DTYPE;
    let (b, out) = (TB::DTYPE, TC::DTYPE);
    let layout = members[0].layout().map_err(|e| e.to_string())?;
    let [m, n, k] = ["m", "n", "k"].map(|q| shape.get(q).copied().unwrap_or(1) as usize);
    let shape = GemmShape::packed(m, n, k, layout).batched(batch);
    let (activation, fused) = checks::epilogue_of(members[0])?;
    if (fused || dtype.size_bytes() == 1) && shape.is_batched() {
        let why = if fused { "fused-epilogue" } else { "8-bit (cuBLASLt)" };
        rows.skipped.extend(members.iter().map(|k| format!("{} {what}: {why} baselines are of single problems", k.name())));
        return Ok(());
    }
    // A fused epilogue is timed as activation(A·B + bias).
    let [sa, sb, sc] = shape.spans();
    let [a, b_buffer, c, bias] = Buffer::unallocated([sa, sb, sc, shape.n]);
    let epilogue = EpilogueArgs {
        activation,
        bias: fused.then_some(bias),
        out: (out != dtype).then_some(out),
        b: (b != dtype).then_some(b),
        ..EpilogueArgs::default()
    };
    let mut runnable = Vec::new();
    for &kernel in members {
        match plan_gemm_with(kernel.info(), dtype, &shape, [a, b_buffer, c], &epilogue, gpu.sms()) {
            Ok(_) => runnable.push(kernel),
            Err(rule) => rows.skipped.push(format!("{} {what}: {rule}", kernel.name())),
        }
    }
    if runnable.is_empty() && !dispatch {
        return Ok(());
    }
    let mut case = GemmCase::<T, TC, TB>::new(gpu, shape, checks::gemm_tolerance(members[0], &shape)?)?;
    let baselines = if fused {
        case = case.with_bias_activation(gpu, activation)?;
        match fused_baselines(gpu, &mut case, activation) {
            Ok(baselines) => baselines,
            Err(why) => {
                rows.skipped.push(format!("{what}: {why}"));
                return Ok(());
            }
        }
    } else {
        match case.time_cublas(gpu) {
            Ok(ms) => vec![(GemmCase::<T, TC, TB>::baseline_name().to_string(), ms)],
            // Not every type cuBLASLt takes in every pairing (e5m2 × e5m2).
            Err(why) => {
                rows.skipped.push(format!("{what}: no {} baseline ({why})", GemmCase::<T, TC, TB>::baseline_name()));
                return Ok(());
            }
        }
    };
    // One row per baseline for each timing.
    let each = |rows: &mut Rows, record: Record| {
        for (name, ms) in &baselines {
            rows.push(record.against(name, *ms));
        }
    };
    // The fastest variant, to time the call beside.
    let mut fastest: Option<(f64, &Kernel)> = None;
    for kernel in runnable {
        match case.record(gpu, kernel, baselines[0].1) {
            Ok(record) => {
                if fastest.is_none_or(|(ms, _)| record.kernel_ms < ms) {
                    fastest = Some((record.kernel_ms, kernel));
                }
                each(rows, record)
            }
            Err(why) => rows.skipped.push(format!("{} {what}: {why}", kernel.name())),
        }
    }
    if dispatch {
        let mut workspace = Workspace::new();
        // Unfused, timed in turns with its own baseline, not beside the problem's.
        let baseline_ms = if fused { Some(baselines[0].1) } else { None };
        let mut record = case.record_dispatch(gpu, registry, &mut workspace, baseline_ms)?;
        if let Some((_, kernel)) = fastest {
            let choice = Choice::forced(kernel.clone(), Strategy::Direct, None);
            let [chosen_ms, fastest_ms] = case.time_dispatch_beside(gpu, registry, &mut workspace, &choice)?;
            record.beside = Some((kernel.name().to_string(), fastest_ms / chosen_ms));
        }
        if fused {
            each(rows, record);
        } else {
            rows.push(record);
        }
    }
    Ok(())
}

/// The baselines of activation(A·B + bias), the first the record's: cuBLASLt's own epilogue
/// where it has one, then cuBLAS followed by a separate bias + activation kernel; one that
/// cannot run here is left out, saying why.
fn fused_baselines<T: Element, TC: Element, TB: Element>(
    gpu: &Gpu,
    case: &mut GemmCase<T, TC, TB>,
    activation: Activation,
) -> Result<Vec<(String, f64)>, String> {
    let mut out = Vec::new();
    let bias = &case.bias_activation.as_ref().expect("set by the caller").2;
    let candidates = [
        LtGemm::new::<T, TC, TB>(gpu, &case.shape, Some((activation, bias))).map(FusedBaseline::Lt),
        Unfused::new(gpu, TC::DTYPE, activation).map(FusedBaseline::Unfused),
    ];
    for candidate in candidates {
        match candidate {
            Ok(baseline) => out.push((baseline.name().to_string(), case.time_fused_baseline(gpu, &baseline)?)),
            Err(why) => println!("baseline left out: {why}"),
        }
    }
    if out.is_empty() {
        return Err("no baseline for a fused bias and activation runs here".into());
    }
    Ok(out)
}
