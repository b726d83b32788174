//! A registry's `gemm` call: the dispatcher's pick for each call shape, from GEMM's tuning
//! tables (the registry's tables of family `gemm`) read on first use, kept beside the registry.

use crate::args::GemmArgs;
use crate::dispatch::{self, Choice, GemmCall, Workspace};
use crate::shape::{Activation, GemmShape};
use crate::table::{check_table, FAMILY};
use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex};
use tilesmith_runtime::{Element, Error, Gpu, Registry, Result};
use tilesmith_spec::family_table::FamilyTable;
use tilesmith_spec::tuning::{file_name, TUNING_DIR};
use tilesmith_spec::Dtype;

/// GEMM's dispatch on a [`Registry`].
pub trait GemmRegistry {
    /// Enqueues C = A·B with the variant and strategy the dispatcher picks for this GPU, dtype,
    /// layout and shape (see [`dispatch::choose`]); returns the pick. `workspace` holds the
    /// scratch the padded strategy copies unaligned operands into, kept for the next call.
    fn gemm<T: Element, TC: Element, TB: Element>(
        &self,
        gpu: &Gpu,
        args: GemmArgs<'_, T, TC, TB>,
        workspace: &mut Workspace,
    ) -> Result<Choice>;

    /// What [`GemmRegistry::gemm`] would pick for this call, and why, without launching anything.
    fn choose_gemm<T: Element, TC: Element, TB: Element>(&self, gpu: &Gpu, args: &GemmArgs<'_, T, TC, TB>) -> Result<Choice>;

    /// GEMM's tuning tables, the registry's tables of family `gemm`, each checked as GEMM's on
    /// first use ([`check_table`]); one that does not pass is an error naming the file.
    fn gemm_tables(&self) -> Result<Arc<Dispatcher>>;
}

/// What the dispatcher keeps beside a registry: its tables, and the picks made so far.
#[derive(Debug)]
pub struct Dispatcher {
    pub tables: Vec<FamilyTable>,
    /// Picks by device, dtype, shape and which operands are unaligned (the padded strategy
    /// moves just those): choosing walks the table and plans candidates, which costs more host
    /// time than a small GEMM takes.
    picks: Mutex<HashMap<PickKey, Choice>>,
}

impl Dispatcher {
    pub fn new(tables: Vec<FamilyTable>) -> Dispatcher {
        Dispatcher { tables, picks: Mutex::default() }
    }
}

type PickKey = (String, u32, Dtype, GemmShape, [bool; 3], (Activation, bool, bool, bool, bool, Option<Dtype>, Option<Dtype>, bool));

/// The registry with these GEMM tables in place of all its tables (other families' too, as
/// [`Registry::with_family_tables`] replaces them), for choosing against a table not yet built
/// into it; a table that does not fit the registry (variants it lacks) is refused as that
/// refuses it.
pub fn with_tables(registry: Registry, tables: Vec<FamilyTable>) -> std::result::Result<Registry, String> {
    tables.iter().try_for_each(check_table)?;
    let registry = registry.with_family_tables(tables.clone())?;
    // Its extensions are fresh, so the tables given are the ones kept, none included.
    let _ = registry.extension(|| Ok::<_, Error>(Dispatcher::new(tables)));
    Ok(registry)
}

fn choose(registry: &Registry, dispatcher: &Dispatcher, gpu: &Gpu, call: &GemmCall<'_>) -> Result<Choice> {
    dispatch::choose(registry.kernels(), &dispatcher.tables, &gpu.device(), call).map_err(|rule| Error::NoVariant { what: "GEMM", rule })
}

impl GemmRegistry for Registry {
    fn gemm_tables(&self) -> Result<Arc<Dispatcher>> {
        self.extension(|| {
            // A registry without GEMM variants has no GEMM tables either.
            let family = self.family(FAMILY).map(|chooser| chooser.tables()).unwrap_or_default();
            let tables = family.iter().map(|table| {
                check_table(table).map(|()| table.clone()).map_err(|reason| {
                    let path = self.dir().unwrap_or(Path::new("registry")).join(TUNING_DIR).join(FAMILY).join(file_name(&table.device));
                    Error::RegistryUnreadable { path, reason }
                })
            });
            Ok(Dispatcher::new(tables.collect::<Result<_>>()?))
        })
    }

    fn choose_gemm<T: Element, TC: Element, TB: Element>(&self, gpu: &Gpu, args: &GemmArgs<'_, T, TC, TB>) -> Result<Choice> {
        let (epilogue, _sync) = args.epilogue.held(gpu.stream(), T::DTYPE, TB::DTYPE);
        choose(
            self,
            &*self.gemm_tables()?,
            gpu,
            &GemmCall { dtype: T::DTYPE, shape: &args.shape, buffers: args.buffers(gpu), epilogue: &epilogue },
        )
    }

    fn gemm<T: Element, TC: Element, TB: Element>(
        &self,
        gpu: &Gpu,
        args: GemmArgs<'_, T, TC, TB>,
        workspace: &mut Workspace,
    ) -> Result<Choice> {
        let buffers = args.buffers(gpu);
        let lds = [args.shape.lda, args.shape.ldb, args.shape.ldc];
        let unaligned = [0, 1, 2].map(|i| dispatch::misaligned(T::DTYPE, lds[i], buffers[i].addr));
        let (epilogue, sync) = args.epilogue.held(gpu.stream(), T::DTYPE, TB::DTYPE);
        drop(sync);
        // What decides which variants take the call: the epilogue's activation, which of α, β,
        // the biases and the scales differ from C = A·B, and the types of B and C.
        let asks = (
            epilogue.activation,
            epilogue.alpha != 1.0,
            epilogue.beta != 0.0,
            epilogue.bias.is_some(),
            epilogue.row_bias.is_some(),
            epilogue.out,
            epilogue.b,
            epilogue.scales != [1.0; 2],
        );
        let key = (gpu.name().to_string(), gpu.sms(), T::DTYPE, args.shape, unaligned, asks);
        let dispatcher = self.gemm_tables()?;
        let cached = dispatcher.picks.lock().unwrap_or_else(|p| p.into_inner()).get(&key).cloned();
        let choice = match cached {
            Some(choice) => choice,
            None => {
                let choice =
                    choose(self, &dispatcher, gpu, &GemmCall { dtype: T::DTYPE, shape: &args.shape, buffers, epilogue: &epilogue })?;
                dispatcher.picks.lock().unwrap_or_else(|p| p.into_inner()).insert(key, choice.clone());
                choice
            }
        };
        // A cached pick is checked again like any launch: buffers of another length are refused.
        choice.run(gpu, args, workspace)?;
        Ok(choice)
    }
}
