//! GEMM's policy, the way the runtime's chooser of family `gemm` picks and runs a call (the
//! dispatcher's pick and the padded strategy), and `registry.gemm(..)`, typed sugar over that
//! family call: both take one road, with the chooser's one pick cache.

use crate::args::GemmArgs;
use crate::dispatch::{self, Choice, GemmCall, Workspace};
use crate::plan::{family_call, typed_call};
use crate::table::{check_table, class_of, entry_shape, FAMILY};
use crate::EpilogueArgs;
use std::sync::{Arc, Mutex};
use tilesmith_runtime::inventory;
use tilesmith_runtime::{
    Buffer, Call, Chooser, Class, Element, Error, Gpu, Kernel, Pick, Policy, PolicyOf, Reading, Registry, Result, TimedAs, Way, Ways,
};
use tilesmith_spec::family_table::{FamilyEntry, FamilyTable};
use tilesmith_spec::tuning::Device;

/// GEMM's dispatch on a [`Registry`].
pub trait GemmRegistry {
    /// Enqueues C = A·B with the variant and strategy the dispatcher picks for this GPU, dtype,
    /// layout and shape (GEMM's policy, [`dispatch`], asked by the family's chooser); returns the pick. `workspace` holds the
    /// scratch the padded strategy copies unaligned operands into, kept for the next call.
    /// The same pick as `registry.family("gemm")` makes for the call by name.
    fn gemm<T: Element, TC: Element, TB: Element>(
        &self,
        gpu: &Gpu,
        args: GemmArgs<'_, T, TC, TB>,
        workspace: &mut Workspace,
    ) -> Result<Choice>;

    /// What [`GemmRegistry::gemm`] would pick for this call, and why, without launching anything.
    fn choose_gemm<T: Element, TC: Element, TB: Element>(&self, gpu: &Gpu, args: &GemmArgs<'_, T, TC, TB>) -> Result<Choice>;
}

impl GemmRegistry for Registry {
    fn choose_gemm<T: Element, TC: Element, TB: Element>(&self, gpu: &Gpu, args: &GemmArgs<'_, T, TC, TB>) -> Result<Choice> {
        let (epilogue, _sync) = args.epilogue.held(gpu.stream(), T::DTYPE, TB::DTYPE);
        let call = family_call(T::DTYPE, &args.shape, args.buffers(gpu), &epilogue);
        choice(&self.family(FAMILY)?.choose(gpu, &call)?)
    }

    fn gemm<T: Element, TC: Element, TB: Element>(
        &self,
        gpu: &Gpu,
        args: GemmArgs<'_, T, TC, TB>,
        workspace: &mut Workspace,
    ) -> Result<Choice> {
        let choice = self.choose_gemm(gpu, &args)?;
        // A kept pick is checked again like any launch: buffers of another length are refused.
        choice.run(gpu, args, workspace)?;
        Ok(choice)
    }
}

/// What the chooser of family `gemm` picks for a typed call on `device`, whose blocks may use
/// `smem_per_block` bytes of shared memory, without a GPU: [`Chooser::pick`] of the call by
/// name (uncached), as GEMM's policy planned it.
pub fn choose(chooser: &Chooser, device: &Device, smem_per_block: u32, call: &GemmCall<'_>) -> std::result::Result<Choice, String> {
    let pick = chooser.pick(device, smem_per_block, &family_call(call.dtype, call.shape, call.buffers, call.epilogue))?;
    choice(&pick).map_err(|e| e.to_string())
}

/// GEMM's pick kept in a chooser's pick.
fn choice(pick: &Pick) -> Result<Choice> {
    Choice::kept_in(pick).ok_or_else(|| Error::NoVariant {
        what: "GEMM",
        rule: format!("the chooser of family {FAMILY} picked {} without GEMM's policy", pick.kernel().name()),
    })
}

/// GEMM's policy, which the chooser of family `gemm` asks: the answers of [`dispatch`].
#[derive(Debug)]
struct GemmPolicy {
    /// The registry's transpose variants, which the padded strategy moves operands with.
    transposes: Vec<Kernel>,
    /// Scratch for the padded strategy of calls by name, one per stream (work on one stream
    /// runs in order, so its scratch is free again for the next call enqueued there).
    workspaces: Mutex<Vec<(usize, Workspace)>>,
}

/// Streams whose scratch a policy keeps.
const WORKSPACES_KEPT: usize = 16;

inventory::submit! {
    PolicyOf { family: FAMILY, make: GemmPolicy::make }
}

impl GemmPolicy {
    fn make(every: &[Kernel]) -> Arc<dyn Policy> {
        let transposes = every.iter().filter(|k| k.variant().family == "transpose").cloned().collect();
        Arc::new(GemmPolicy { transposes, workspaces: Mutex::default() })
    }
}

/// `f` of a call by name read as GEMM's typed call.
fn typed<R>(call: &Call, f: impl FnOnce(&GemmCall<'_>) -> R) -> std::result::Result<R, String> {
    let (dtype, shape, buffers, epilogue) = typed_call(call)?;
    Ok(f(&GemmCall { dtype, shape: &shape, buffers, epilogue: &epilogue }))
}

impl Policy for GemmPolicy {
    fn reading(&self) -> Reading {
        dispatch::READING
    }

    fn check_table(&self, table: &FamilyTable) -> std::result::Result<(), String> {
        check_table(table)
    }

    fn classes(&self, call: &Call) -> std::result::Result<Vec<Class>, String> {
        typed(call, dispatch::classes)
    }

    fn ways(&self, chooser: &Chooser, device: &Device, _smem_per_block: u32, call: &Call) -> std::result::Result<Ways, String> {
        typed(call, |call| dispatch::ways(chooser.kernels().iter().chain(&self.transposes), device, call))?.map(Ways::Take)
    }

    fn cost(&self, _chooser: &Chooser, device: &Device, call: &Call, way: &Way) -> f64 {
        typed(call, |call| dispatch::cost(device, call, way)).unwrap_or(f64::INFINITY)
    }

    fn timings<'w>(&'w self, chooser: &'w Chooser, call: &Call, ways: &'w [Way]) -> TimedAs<'w> {
        typed(call, |call| dispatch::timings(chooser.kernels(), call, ways)).unwrap_or_else(|_| Box::new(|_| None))
    }

    unsafe fn launch(&self, gpu: &Gpu, way: &Way, call: &Call) -> Result<()> {
        let refused = |rule: String| Error::Refused { name: way.kernel.name().to_string(), rule };
        let choice = way.plan::<Choice>().ok_or_else(|| refused("a way GEMM's policy did not plan".into()))?;
        let (dtype, shape, buffers, epilogue) = typed_call(call).map_err(refused)?;
        let stream = Arc::as_ptr(gpu.stream()) as usize;
        let mut workspaces = self.workspaces.lock().unwrap_or_else(|p| p.into_inner());
        let at = match workspaces.iter().position(|(s, _)| *s == stream) {
            Some(at) => at,
            None => {
                // Scratch of streams long gone is let go (a free is ordered on its stream).
                if workspaces.len() >= WORKSPACES_KEPT {
                    workspaces.remove(0);
                }
                workspaces.push((stream, Workspace::new()));
                workspaces.len() - 1
            }
        };
        // SAFETY: the caller keeps `Policy::launch`'s promise, which is `run_buffers`'.
        unsafe { choice.run_buffers(gpu, dtype, &shape, buffers, &epilogue, &mut workspaces[at].1) }
    }

    /// A plain entry's call; entries of an epilogue of their own stand for calls with an
    /// activation and a bias, which a replay does not make.
    fn entry_call(&self, entry: &FamilyEntry) -> std::result::Result<Option<Call>, String> {
        if class_of(entry)?.2.is_some() {
            return Ok(None);
        }
        let shape = entry_shape(entry)?;
        Ok(Some(family_call(entry.dtype, &shape, Buffer::unallocated(shape.spans()), &EpilogueArgs::default())))
    }
}
