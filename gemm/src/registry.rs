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
use tilesmith_runtime::{Buffer, Call, Chooser, Element, Error, Gpu, Kernel, Pick, Policy, PolicyOf, Registry, Result};
use tilesmith_spec::family_table::{FamilyEntry, FamilyTable};
use tilesmith_spec::tuning::Device;

/// GEMM's dispatch on a [`Registry`].
pub trait GemmRegistry {
    /// Enqueues C = A·B with the variant and strategy the dispatcher picks for this GPU, dtype,
    /// layout and shape (see [`dispatch::choose`]); returns the pick. `workspace` holds the
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

/// GEMM's pick kept in a chooser's pick.
fn choice(pick: &Pick) -> Result<Choice> {
    Choice::kept_in(pick).cloned().ok_or_else(|| Error::NoVariant {
        what: "GEMM",
        rule: format!("the chooser of family {FAMILY} picked {} without GEMM's policy", pick.kernel.name()),
    })
}

/// The chooser of family `gemm` asks this: the dispatcher's pick ([`dispatch::choose`]) from
/// the family's tables, and a pick run directly or padded.
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

impl Policy for GemmPolicy {
    fn check_table(&self, table: &FamilyTable) -> std::result::Result<(), String> {
        check_table(table)
    }

    fn pick(&self, chooser: &Chooser, device: &Device, _smem_per_block: u32, call: &Call) -> std::result::Result<Pick, String> {
        let (dtype, shape, buffers, epilogue) = typed_call(call)?;
        let kernels = chooser.kernels().iter().chain(&self.transposes);
        let choice = dispatch::choose(kernels, chooser.tables(), device, &GemmCall { dtype, shape: &shape, buffers, epilogue: &epilogue })?;
        Ok(Pick { kernel: choice.kernel.clone(), reason: choice.reason.clone(), takers: Arc::new([]), way: Some(Arc::new(choice)) })
    }

    unsafe fn launch(&self, gpu: &Gpu, pick: &Pick, call: &Call) -> Result<()> {
        let choice = choice(pick)?;
        let (dtype, shape, buffers, epilogue) =
            typed_call(call).map_err(|rule| Error::Refused { name: choice.kernel.name().to_string(), rule })?;
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

    fn strategy(&self, pick: &Pick) -> Option<String> {
        Choice::kept_in(pick).and_then(|choice| choice.strategy.word())
    }
}
