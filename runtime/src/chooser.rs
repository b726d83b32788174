//! One call for any family: the chooser binds a call's arguments by the family's declared
//! names, keeps the family's variants that take it (planning is `can_implement`), and runs the
//! fastest: the least estimate from the measured problems near the call in the family's tuning
//! table ([`family_table::estimate`], the rule a plug-in's dispatcher reads its tables by too),
//! else the one the cost model ([`estimate_seconds`]) puts first. Picks are kept per call shape.
//! A family whose plug-in registers a [`Policy`] (classes of calls, other ways to run a variant)
//! is picked and run by that policy, through this same chooser and pick cache.

use crate::first_call;
use crate::gpu::static_smem;
use crate::kernel::{CallBuilder, Kernel, Target};
use crate::plan::{plan_call, runs_on, Call, Launch};
use crate::{Error, Gpu, Result};
use std::any::Any;
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use tilesmith_spec::family::Family;
use tilesmith_spec::family_table::{self, FamilyEntry, FamilyTable};
use tilesmith_spec::tuning::{self, Clocks, Device, NEAR_TIE};
use tilesmith_spec::Dtype;

/// How far ([`family_table::distance`], summed |log2| over the quantities) a measured problem
/// may lie from a call and still stand for it: four times the rows, or twice the rows and half
/// the columns. Farther than the 1 of the tile dispatcher's plug-in: the cost model knows less
/// of row-wise kernels than that heuristic of its tiles (H200, f32 softmax 4096x50257: the model picked the warp
/// variant, 0.45x the fastest; the entry at 2048x32768, 1.6 away, ranks the fastest first).
pub const NEAR_ENOUGH: f64 = 2.0;

/// An entry that ranks none of a call's newer variants (a backend added after the table was
/// measured) still stands for the call where its pick reached this much of the baseline: little
/// is left to gain there, and the measured pick beats the cost model's guess (the H100 tables of
/// softmax and rmsnorm before the `cluster` backend, whose narrow rows it serves worst).
pub const MEASURED_ENOUGH: f64 = 0.8;

/// A family's variants, tables and picks: what [`Registry::family`](crate::Registry::family)
/// returns. Clones share the picks.
#[derive(Clone, Debug)]
pub struct Chooser {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    family: String,
    declaration: Arc<Family>,
    /// Every variant but the reference ones, by name.
    kernels: Vec<Kernel>,
    tables: Vec<FamilyTable>,
    /// The family's policy, where a plug-in registered one.
    policy: Option<Arc<dyn Policy>>,
    /// Picks by [`PickKey::hash_of`], each with its key and whether it was timed on first call
    /// (or read from such a timing), compared in full on a hit.
    picks: Mutex<HashMap<u64, Vec<Kept>>>,
    /// Whether calls are tuned on their first launch (asked by the environment unless set),
    /// and the folder their timings are kept in where not the per-user one.
    first_call: Mutex<(Option<bool>, Option<PathBuf>)>,
    /// The first-call timings, opened on first use, per GPU (name and SMs).
    timed: Mutex<Vec<((String, u32), first_call::Store)>>,
}

/// A kept pick: its key, the pick, and whether it was timed on a first call.
type Kept = (PickKey, Pick, bool);

/// Picks a chooser keeps; past this many it forgets them all (calls that vary this much are
/// not the repeated ones the cache is for).
const PICKS_KEPT: usize = 4096;

/// What a pick depends on: the GPU, and the call's names, element types, values, the axes it
/// asks for (attention's causal mask) and how its buffers are aligned (variants differ in the
/// alignment they need), never its addresses.
#[derive(Clone, Debug, PartialEq, Eq)]
struct PickKey {
    device: (String, u32),
    operands: Vec<(String, Dtype, u32)>,
    quantities: Vec<(String, u64)>,
    scalars: Vec<(String, u64)>,
    axes: Vec<(String, String)>,
}

/// The alignment of an address, as far as any rule asks (256 bytes).
pub(crate) fn aligned(addr: u64) -> u32 {
    addr.trailing_zeros().min(8)
}

impl PickKey {
    /// The key of `call` on the GPU named `device` with `sms` multiprocessors.
    fn new((device, sms): (&str, u32), call: &Call) -> PickKey {
        PickKey {
            device: (device.to_string(), sms),
            operands: call.operands.iter().map(|(name, dtype, buffer)| (name.clone(), *dtype, aligned(buffer.addr))).collect(),
            quantities: call.quantities.clone(),
            scalars: call.scalars.iter().map(|(name, value)| (name.clone(), value.to_bits())).collect(),
            axes: call.axes.clone(),
        }
    }

    /// Its hash, computed from the GPU and the call without making the key.
    fn hash_of(device: (&str, u32), call: &Call) -> u64 {
        use std::hash::{Hash, Hasher};
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        device.hash(&mut hasher);
        for (name, dtype, buffer) in &call.operands {
            (name, dtype, aligned(buffer.addr)).hash(&mut hasher);
        }
        call.quantities.hash(&mut hasher);
        for (name, value) in &call.scalars {
            (name, value.to_bits()).hash(&mut hasher);
        }
        call.axes.hash(&mut hasher);
        hasher.finish()
    }

    /// Whether it is the key of this GPU and call, compared without making one.
    fn is(&self, (device, sms): (&str, u32), call: &Call) -> bool {
        self.device.0 == device
            && self.device.1 == sms
            && self.operands.len() == call.operands.len()
            && self
                .operands
                .iter()
                .zip(&call.operands)
                .all(|((n, d, a), (name, dtype, buffer))| n == name && d == dtype && *a == aligned(buffer.addr))
            && self.quantities == call.quantities
            && self.scalars.len() == call.scalars.len()
            && self.scalars.iter().zip(&call.scalars).all(|((n, bits), (name, value))| n == name && *bits == value.to_bits())
            && self.axes == call.axes
    }
}

/// The variant a chooser runs for a call, and why.
#[derive(Clone)]
pub struct Pick {
    pub kernel: Kernel,
    /// One line for logs: the table entry or the cost model's estimate behind the pick.
    pub reason: String,
    /// Every variant that takes the call, with the table's estimate of its time there
    /// ([`family_table::estimate`]'s ln(its time / the fastest's)); none where no measured
    /// problem near the call times it, and none listed where a [`Policy`] picked.
    pub takers: Arc<[(Kernel, Option<f64>)]>,
    /// What a [`Policy`] keeps of its pick beyond the kernel (the way it runs it, the other
    /// variants that way launches), for its [`Policy::launch`]; none for the generic pick.
    pub way: Option<Arc<dyn Any + Send + Sync>>,
}

impl std::fmt::Debug for Pick {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pick").field("kernel", &self.kernel.name()).field("reason", &self.reason).finish_non_exhaustive()
    }
}

/// What a plug-in decides for the calls of its family in place of the generic rule: how a call
/// is picked (by the class of the call, among variants run directly or with operands
/// moved) and run. Registered with `inventory::submit!` as a [`PolicyOf`], it serves every
/// registry's chooser of that family in a program that links the plug-in, so that
/// `registry.family(..)` and the plug-in's typed calls take one road, with one pick cache.
pub trait Policy: Send + Sync + std::fmt::Debug {
    /// Checks a table of the family beyond what every family's meets (a class, a strategy);
    /// a table that fails makes the registry fail to open, naming the file.
    fn check_table(&self, table: &FamilyTable) -> std::result::Result<(), String>;

    /// The pick for a call the family's declaration binds, among `chooser`'s variants and
    /// from its tables, on `device`, whose blocks may use `smem_per_block` bytes of shared memory.
    fn pick(&self, chooser: &Chooser, device: &Device, smem_per_block: u32, call: &Call) -> std::result::Result<Pick, String>;

    /// Enqueues `call` with a pick it made for a call of the same shape.
    ///
    /// # Safety
    /// [`Target::launch`]'s: the call's buffers are device memory of the lengths it says.
    unsafe fn launch(&self, gpu: &Gpu, pick: &Pick, call: &Call) -> Result<()>;

    /// The call an entry of a table of the family stands for, on unallocated buffers, as the
    /// tuner timed it (`tilesmith replay` picks for it on the CPU); none for an entry a replay
    /// does not make.
    fn entry_call(&self, entry: &FamilyEntry) -> std::result::Result<Option<Call>, String>;

    /// How a table states the way `pick` runs its call ([`Timed::strategy`]): none for
    /// directly.
    ///
    /// [`Timed::strategy`]: tilesmith_spec::family_table::Timed::strategy
    fn strategy(&self, pick: &Pick) -> Option<String>;
}

/// A plug-in's [`Policy`] for a family, registered with `inventory::submit!`.
pub struct PolicyOf {
    pub family: &'static str,
    /// Makes the policy, given every variant of the registry (a policy may run another
    /// family's, as one that moves operands through scratch may).
    pub make: fn(&[Kernel]) -> Arc<dyn Policy>,
}

inventory::collect!(PolicyOf);

/// The policy registered for `family`, if a linked plug-in registered one.
pub(crate) fn policy_of(family: &str, every: &[Kernel]) -> Option<Arc<dyn Policy>> {
    inventory::iter::<PolicyOf>.into_iter().find(|p| p.family == family).map(|p| (p.make)(every))
}

impl Chooser {
    /// The chooser of `family` over these variants (reference ones are left out) and tables,
    /// each checked against the family (its quantities, and variants it has) and its policy.
    pub(crate) fn new(
        family: &str,
        kernels: Vec<Kernel>,
        tables: Vec<FamilyTable>,
        policy: Option<Arc<dyn Policy>>,
    ) -> std::result::Result<Chooser, String> {
        let declaration = kernels.first().map(|k| k.info().entry.declaration.clone()).ok_or_else(|| format!("no variant of {family}"))?;
        for table in &tables {
            let file = tuning::file_name(&table.device);
            table
                .check_serves(&declaration, |name| kernels.iter().any(|k| k.name() == name && !k.is_reference()))
                .map_err(|rule| format!("tuning table {family}/{file}: {rule}; build them or tune it again"))?;
            if let Some(policy) = &policy {
                policy.check_table(table).map_err(|rule| format!("tuning table {family}/{file}: {rule}"))?;
            }
        }
        let kernels = kernels.into_iter().filter(|k| !k.is_reference()).collect();
        let inner = Inner {
            family: family.to_string(),
            declaration,
            kernels,
            tables,
            policy,
            picks: Mutex::default(),
            first_call: Mutex::default(),
            timed: Mutex::default(),
        };
        Ok(Chooser { inner: Arc::new(inner) })
    }

    pub fn name(&self) -> &str {
        &self.inner.family
    }

    /// Its declaration, as the manifest records it.
    pub fn declaration(&self) -> &Family {
        &self.inner.declaration
    }

    /// The variants it chooses among (the reference ones left out), by name.
    pub fn kernels(&self) -> &[Kernel] {
        &self.inner.kernels
    }

    /// Its tuning tables, one per GPU measured.
    pub fn tables(&self) -> &[FamilyTable] {
        &self.inner.tables
    }

    /// Its family's policy, where a linked plug-in registered one.
    pub fn policy(&self) -> Option<&dyn Policy> {
        self.inner.policy.as_deref()
    }

    /// The chooser of the same variants and policy reading these tables instead (none: the
    /// cost model's, or the policy's heuristic), each checked as a registry's are.
    pub fn with_tables(&self, tables: Vec<FamilyTable>) -> std::result::Result<Chooser, String> {
        Chooser::new(self.name(), self.inner.kernels.clone(), tables, self.inner.policy.clone())
    }

    /// [`Chooser::pick`] with the entries `held_out` names taken out of the tables, and put
    /// back in place after: a replay's pick for a problem from its neighbours alone, without a
    /// copy of the tables per problem. Only a chooser no clone shares may do this.
    pub fn pick_holding_out(
        &mut self,
        device: &Device,
        smem_per_block: u32,
        call: &Call,
        held_out: impl Fn(&FamilyEntry) -> bool,
    ) -> std::result::Result<Pick, String> {
        let Some(inner) = Arc::get_mut(&mut self.inner) else {
            return Err(format!("the chooser of {} is shared: entries are held out of one of its own", self.inner.family));
        };
        let mut removed: Vec<(usize, usize, FamilyEntry)> = Vec::new();
        for (t, table) in inner.tables.iter_mut().enumerate() {
            for i in (0..table.entries.len()).rev() {
                if held_out(&table.entries[i]) {
                    removed.push((t, i, table.entries.remove(i)));
                }
            }
        }
        let pick = self.pick(device, smem_per_block, call);
        let Some(inner) = Arc::get_mut(&mut self.inner) else {
            return Err(format!("the chooser of {} was cloned while picking: its held-out entries cannot be put back", self.inner.family));
        };
        for (t, i, entry) in removed.into_iter().rev() {
            inner.tables[t].entries.insert(i, entry);
        }
        pick
    }

    /// A call of the family with arguments bound by name, as it declares them; `launch` runs
    /// the variant [`Chooser::choose`] picks and returns the pick:
    ///
    /// ```no_run
    /// # fn f(registry: &tilesmith_runtime::Registry, gpu: &tilesmith_runtime::Gpu,
    /// #      x: &cudarc::driver::CudaSlice<half::bf16>, y: &mut cudarc::driver::CudaSlice<half::bf16>)
    /// #      -> tilesmith_runtime::Result<()> {
    /// let pick = registry.family("softmax")?.call(gpu)
    ///     .operand("x", x).operand_mut("y", y)
    ///     .quantity("rows", 4096).quantity("cols", 50257).quantity("ldx", 50257).quantity("ldy", 50257)
    ///     .launch()?;
    /// println!("{}: {}", pick.kernel.name(), pick.reason);
    /// # Ok(()) }
    /// ```
    pub fn call<'a>(&'a self, gpu: &'a Gpu) -> CallBuilder<'a, Chooser> {
        CallBuilder::new(self, gpu)
    }

    /// The variant a call runs on, and why, without launching it: of the variants that take
    /// the call, the least estimate ([`family_table::estimate`]) from the measured problems
    /// within [`NEAR_ENOUGH`] in this GPU's table, or, where it has none, in that of the GPU of
    /// the same compute capability nearest in SMs and clock ([`Device::table_in`], as plug-in
    /// dispatchers read theirs). Otherwise the cost model's least estimate. With tuning on first
    /// call, a call shape timed before (in this process or one before it) runs the variant timed
    /// fastest.
    pub fn choose(&self, gpu: &Gpu, call: &Call) -> Result<Pick> {
        self.chosen(gpu, call).map(|(pick, _)| pick)
    }

    /// Whether calls are tuned on their first launch ([`first_call`]): `on`, for every call of
    /// this chooser (and its clones) from now; by default as `TILESMITH_TUNE_FIRST_CALL` says.
    /// A family with a plug-in's policy is picked by the policy, never timed.
    pub fn tune_first_calls(&self, on: bool) {
        self.inner.first_call.lock().unwrap_or_else(|p| p.into_inner()).0 = Some(on);
    }

    /// Keeps the first-call timings in `folder` instead of `first-call/` in tilesmith's
    /// per-user folder (`$TILESMITH_HOME`, else the platform's cache folder).
    pub fn keep_first_calls_in(&self, folder: &Path) {
        self.inner.first_call.lock().unwrap_or_else(|p| p.into_inner()).1 = Some(folder.to_path_buf());
        self.inner.timed.lock().unwrap_or_else(|p| p.into_inner()).clear();
    }

    fn tunes_first_calls(&self) -> bool {
        let set = self.inner.first_call.lock().unwrap_or_else(|p| p.into_inner()).0;
        self.inner.policy.is_none() && set.unwrap_or_else(first_call::asked_by_environment)
    }

    /// The pick for a call, kept or made, and whether it was timed on a first call.
    fn chosen(&self, gpu: &Gpu, call: &Call) -> Result<(Pick, bool)> {
        let device = (gpu.name(), gpu.sms());
        let hash = PickKey::hash_of(device, call);
        if let Some(kept) = self.inner.picks.lock().unwrap_or_else(|p| p.into_inner()).get(&hash) {
            if let Some((_, pick, timed)) = kept.iter().find(|(key, ..)| key.is(device, call)) {
                return Ok((pick.clone(), *timed));
            }
        }
        let mut pick = self
            .pick(&gpu.device(), gpu.smem_per_block(), call)
            .map_err(|rule| Error::NoFamilyVariant { family: self.name().to_string(), rule })?;
        let mut timed = false;
        if self.tunes_first_calls() && pick.takers.len() > 1 {
            let stored = self.with_store(gpu, |store| Some((store.get(&first_call::key(call))?.to_string(), store.file())));
            if let Some((kernel, file)) = stored.and_then(|(name, file)| Some((self.taker(&pick, &name)?, file))) {
                pick = Pick { kernel, reason: format!("timed on an earlier first call of this shape ({file})"), ..pick };
                timed = true;
            }
        }
        self.keep(device, call, &pick, timed);
        Ok((pick, timed))
    }

    /// The taker of a pick named `name`.
    fn taker(&self, pick: &Pick, name: &str) -> Option<Kernel> {
        pick.takers.iter().find(|(k, _)| k.name() == name).map(|(k, _)| k.clone())
    }

    /// Keeps a pick for the call, in place of one kept before.
    fn keep(&self, device: (&str, u32), call: &Call, pick: &Pick, timed: bool) {
        let mut picks = self.inner.picks.lock().unwrap_or_else(|p| p.into_inner());
        if picks.len() >= PICKS_KEPT {
            picks.clear();
        }
        let kept = picks.entry(PickKey::hash_of(device, call)).or_default();
        kept.retain(|(key, ..)| !key.is(device, call));
        kept.push((PickKey::new(device, call), pick.clone(), timed));
    }

    /// `f` of the first-call timings on this GPU, opened on first use.
    fn with_store<R>(&self, gpu: &Gpu, f: impl FnOnce(&mut first_call::Store) -> R) -> R {
        let mut stores = self.inner.timed.lock().unwrap_or_else(|p| p.into_inner());
        let at = match stores.iter().position(|((name, sms), _)| name == gpu.name() && *sms == gpu.sms()) {
            Some(at) => at,
            None => {
                let folder = self.inner.first_call.lock().unwrap_or_else(|p| p.into_inner()).1.clone();
                let store = first_call::Store::open(folder, self.name(), self.kernels(), gpu);
                stores.push(((gpu.name().to_string(), gpu.sms()), store));
                stores.len() - 1
            }
        };
        f(&mut stores[at].1)
    }

    /// Times the first [`first_call::CANDIDATES`] takers of a pick on the call's buffers (the
    /// pick's own first, then by the table's estimate, then the cost model's) and keeps the
    /// fastest; near ties ([`NEAR_TIE`]) go to the one earlier in that order.
    ///
    /// # Safety
    ///
    /// [`Target::launch`]'s.
    unsafe fn time_first_call(&self, gpu: &Gpu, call: &Call, pick: Pick) -> Result<Pick> {
        let device = gpu.device();
        let model = |k: &Kernel| {
            let launch = k.plan_call(gpu.sms(), call).ok().flatten();
            launch.map_or(f64::INFINITY, |launch| estimate_seconds(&self.inner.declaration, k, &launch, call, &device))
        };
        let mut order: Vec<(f64, f64, &Kernel)> =
            pick.takers.iter().map(|(k, estimate)| (estimate.unwrap_or(f64::INFINITY), model(k), k)).collect();
        order.sort_by(|a, b| {
            (a.2.name() != pick.kernel.name()).cmp(&(b.2.name() != pick.kernel.name())).then(a.0.total_cmp(&b.0)).then(a.1.total_cmp(&b.1))
        });
        let candidates: Vec<&Kernel> = order.iter().map(|(.., k)| *k).take(first_call::CANDIDATES).collect();
        // SAFETY: the caller's promise, which is the timings'.
        let times = unsafe { first_call::time(gpu, &self.inner.declaration, &candidates, call)? };
        let Some(fastest) = times.iter().flatten().copied().min_by(f64::total_cmp) else {
            return Ok(pick);
        };
        let at =
            times.iter().position(|t| t.is_some_and(|ms| ms <= fastest * (1.0 + NEAR_TIE))).expect("the fastest is within a tie of itself");
        let kernel = candidates[at].clone();
        let own = times[0].map_or("did not launch".to_string(), |ms| format!("{:.3}x the fastest", ms / fastest));
        let file = self.with_store(gpu, |store| {
            store.put(first_call::key(call), kernel.name());
            store.file()
        });
        let reason = format!(
            "timed on first call: {} of {} variant(s) taking it, on the call's buffers, fastest {fastest:.4} ms; the estimate's pick {} ran {own} ({}); kept in {file}",
            candidates.len(),
            pick.takers.len(),
            pick.kernel.name(),
            pick.reason
        );
        Ok(Pick { kernel, reason, ..pick })
    }

    /// [`Chooser::choose`] without a GPU: for `device`, whose blocks may use `smem_per_block`
    /// bytes of shared memory; uncached.
    pub fn pick(&self, device: &Device, smem_per_block: u32, call: &Call) -> std::result::Result<Pick, String> {
        self.bind(call)?;
        if let Some(policy) = &self.inner.policy {
            return policy.pick(self, device, smem_per_block, call);
        }
        let capability = (device.capability[0], device.capability[1]);
        let mut refusals: Vec<(String, String)> = Vec::new();
        let mut takers: Vec<(&Kernel, Launch)> = Vec::new();
        // An axis that changes what a variant computes, which the call leaves out, is at the
        // family's default: a call that does not ask for attention's causal mask gets none.
        let defaults: Vec<(&str, String)> = self
            .inner
            .declaration
            .computing_axes()
            .filter(|a| !call.axes.iter().any(|(name, _)| *name == a.name))
            .filter_map(|a| Some((a.name.as_str(), a.default.as_ref()?.to_string())))
            .collect();
        for kernel in &self.inner.kernels {
            if !runs_on(&kernel.info().entry.targets, capability) {
                continue;
            }
            let other = defaults.iter().find_map(|(axis, default)| {
                kernel.variant().value(axis).map(|v| v.to_string()).filter(|own| own != default).map(|own| (axis, default, own))
            });
            if let Some((axis, default, own)) = other {
                let rule = format!(
                    "it computes {axis} = {own}, and the call leaves axis `{axis}` at its default, {default} (ask with .axis(\"{axis}\", ...))"
                );
                refusals.push((kernel.name().to_string(), rule));
                continue;
            }
            match plan_call(kernel.info(), call, device.sms) {
                Ok(Some(launch)) => {
                    let smem = u64::from(launch.dynamic_smem_bytes) + u64::from(static_smem(kernel.info()));
                    if smem > u64::from(smem_per_block) {
                        let rule = format!("the call needs {smem} bytes of shared memory a block; {} allows {smem_per_block}", device.name);
                        refusals.push((kernel.name().to_string(), rule));
                    } else {
                        takers.push((kernel, launch));
                    }
                }
                // Nothing to write: any variant that takes the call does nothing.
                Ok(None) => {
                    return Ok(Pick {
                        kernel: kernel.clone(),
                        reason: "the call writes no element".into(),
                        takers: Arc::new([]),
                        way: None,
                    })
                }
                Err(rule) => refusals.push((kernel.name().to_string(), rule)),
            }
        }
        if takers.is_empty() {
            return Err(self.none_takes(device, &refusals));
        }
        let problem: Vec<u64> = self.inner.declaration.quantities.iter().map(|q| quantity(call, q).unwrap_or(0)).collect();
        let batch = self.inner.declaration.batch.as_deref().and_then(|b| quantity(call, b)).unwrap_or(1);
        let dtype = takers[0].0.variant().dtype;
        let table = device.table_in(&self.inner.tables, |t| &t.device).map(|(table, _)| table);
        // A dtype without entries reads those of another as wide, whose variants move as many
        // bytes (f16 calls take bf16's picks); integers and floats never stand for each other.
        let widths = Dtype::ALL
            .iter()
            .copied()
            .filter(|&d| d != dtype && d.size_bytes() == dtype.size_bytes() && d.is_integer() == dtype.is_integer());
        let dtypes: Vec<Dtype> = std::iter::once(dtype).chain(widths).collect();
        if let Some(table) = table {
            // Entries of a class are a plug-in dispatcher's, which it reads itself.
            let plain = BTreeMap::new();
            let measured = dtypes.iter().copied().find(|&d| table.entries.iter().any(|e| e.dtype == d && e.class.is_empty()));
            let of_dtype = measured.map(|d| table.nearest(d, &plain, batch, &problem, NEAR_ENOUGH)).unwrap_or_default();
            // The variant of the call's dtype with a ranked one's other axes.
            let by_name: HashMap<&str, &Kernel> = self.inner.kernels.iter().map(|k| (k.name(), k)).collect();
            let same = |k: &Kernel, ranked: &str| {
                by_name.get(ranked).is_some_and(|r| {
                    let (v, r) = (k.variant(), r.variant());
                    v.backend == r.backend && v.tile == r.tile && v.warps == r.warps && v.bounds == r.bounds && v.axes == r.axes
                })
            };
            // Only direct runs count: another strategy is a plug-in's, which this call does not take.
            let timed_as = |k: &Kernel, entry: &'_ FamilyEntry| -> Option<usize> {
                entry.ranked.iter().position(|t| t.is_direct() && same(k, &t.variant))
            };
            // A taker an entry does not rank was refused at the entry's problem (rows past its
            // shared memory), or is newer than the table (a backend added since). Where one was
            // refused, the entry picked among the others only: it is passed over. Newer ones
            // leave the entry standing where its pick reached MEASURED_ENOUGH of the baseline
            // there: the table keeps its measured picks until a tune run ranks the new variants.
            let fits_there = |k: &Kernel, entry: &FamilyEntry| {
                let value = |q: &str| table.quantities.iter().position(|n| n == q).and_then(|i| entry.problem.get(i).copied());
                let dynamic = k.info().entry.launch.dynamic_smem_bytes.eval(&value);
                dynamic.is_ok_and(|bytes| bytes + u64::from(static_smem(k.info())) <= u64::from(smem_per_block))
            };
            let unranked = |entry: &FamilyEntry| takers.iter().filter(|(k, _)| timed_as(k, entry).is_none()).count();
            let stands = |entry: &FamilyEntry| {
                let newer = takers.iter().filter(|(k, _)| timed_as(k, entry).is_none()).all(|(k, _)| fits_there(k, entry));
                let best = entry.ranked.iter().find(|t| t.is_direct() && takers.iter().any(|(k, _)| same(k, &t.variant)));
                unranked(entry) == 0 || (newer && best.is_some_and(|t| entry.ratio(t) >= MEASURED_ENOUGH))
            };
            let near: Vec<(f64, &FamilyEntry)> = of_dtype.into_iter().filter(|(_, e)| stands(e)).take(family_table::NEAR_READ).collect();
            // A timing of a variant whose source changed since is a hint (stale).
            let source = |variant: &str| by_name.get(variant).map(|k| k.info().entry.source_sha256.as_str());
            let timing = |taker: usize, entry: usize| {
                let entry = near[entry].1;
                let rank = timed_as(takers[taker].0, entry)?;
                let timed = &entry.ranked[rank];
                Some(family_table::Timing { ms: timed.ms, rank, stale: source(&timed.variant).is_some_and(|now| timed.is_stale(now)) })
            };
            // Near ties go to a variant without bounds checks where one takes the call: it does
            // the same work without them (H200, softmax bf16 32768x4096: 6% faster in turns,
            // tied in the table).
            let checked = |t: usize| takers[t].0.variant().is_checked();
            let prefer = |(a, sa): (usize, f64), (b, sb): (usize, f64)| {
                checked(a).cmp(&checked(b)).then(sa.total_cmp(&sb)).then_with(|| takers[a].0.name().cmp(takers[b].0.name()))
            };
            if let Some(least) = family_table::least(takers.len(), &near, timing, prefer) {
                let kernel = takers[least.taker].0;
                let (distance, entry) = near[least.entry];
                let rank = least.rank;
                let borrowed = if table.device.is(device) { String::new() } else { format!(" (measured on {})", table.device) };
                let newer = unranked(entry);
                let newer =
                    if newer == 0 { String::new() } else { format!(" ({newer} newer variant(s) taking the call not ranked there)") };
                let newer = if least.hints { newer + " (from timings of sources changed since: hints)" } else { newer };
                let reason = format!(
                    "tuning table {}/{}{borrowed}: estimated {:.1}% over the fastest from {} measured problem(s); nearest measured problem {} {}, rank {} of {}, {:.2}x the baseline there, {distance:.2} away{newer}",
                    self.name(),
                    tuning::file_name(&table.device),
                    (least.estimate.slowdown.exp() - 1.0) * 100.0,
                    least.estimate.read,
                    family_table::describe(&table.quantities, &entry.problem),
                    entry.dtype,
                    rank + 1,
                    entry.ranked.len(),
                    entry.ratio(&entry.ranked[rank])
                );
                let estimated = takers.iter().zip(&least.estimates).map(|((k, _), e)| ((*k).clone(), e.map(|e| e.slowdown))).collect();
                return Ok(Pick { kernel: kernel.clone(), reason, takers: estimated, way: None });
            }
        }
        let why = match table {
            Some(_) => "no measured problem near this call ranks every variant that takes it (or every one newer than the table, with a pick near the baseline)",
            None => "no tuning table of this family for this GPU's compute capability",
        };
        let (seconds, kernel) = takers
            .iter()
            .map(|(kernel, launch)| (estimate_seconds(&self.inner.declaration, kernel, launch, call, device), *kernel))
            .min_by(|a, b| a.0.total_cmp(&b.0).then_with(|| a.1.name().cmp(b.1.name())))
            .expect("at least one variant takes the call");
        let reason = format!("{why}: cost model, estimated {:.1} us", seconds * 1e6);
        let unestimated = takers.iter().map(|(k, _)| ((*k).clone(), None)).collect();
        Ok(Pick { kernel: kernel.clone(), reason, takers: unestimated, way: None })
    }

    /// The family-level rules of a call's names and scalars ([`plan::bind`](crate::plan)).
    fn bind(&self, call: &Call) -> std::result::Result<(), String> {
        crate::plan::bind(&self.inner.declaration, self.name(), call).map(drop)
    }

    /// Why no variant takes a call: the refusals, one per distinct rule, the first few.
    fn none_takes(&self, device: &Device, refusals: &[(String, String)]) -> String {
        if refusals.is_empty() {
            let mut targets: Vec<String> = self.inner.kernels.iter().flat_map(|k| k.info().entry.targets.sass.clone()).collect();
            targets.sort();
            targets.dedup();
            return format!("its variants have code for {} only, and {device} has none of it", targets.join(", "));
        }
        let mut rules: Vec<String> = Vec::new();
        for (name, rule) in refusals {
            if !rules.iter().any(|r| r.ends_with(rule.as_str())) {
                rules.push(format!("{name}: {rule}"));
            }
        }
        let more = if rules.len() > 4 { format!("; and {} other rule(s)", rules.len() - 4) } else { String::new() };
        format!("none of its {} variant(s) on {device} takes the call: {}{more}", refusals.len(), rules[..rules.len().min(4)].join("; "))
    }
}

impl Target for Chooser {
    type Output = Pick;

    /// Runs the pick; a cached one is checked again like any launch.
    unsafe fn launch(&self, gpu: &Gpu, call: &Call) -> Result<Pick> {
        let (mut pick, timed) = self.chosen(gpu, call)?;
        if !timed && pick.takers.len() > 1 && self.tunes_first_calls() {
            // SAFETY: the caller keeps `Target::launch`'s promise, which is the timings'.
            pick = unsafe { self.time_first_call(gpu, call, pick)? };
            self.keep((gpu.name(), gpu.sms()), call, &pick, true);
        }
        // SAFETY: the caller keeps `Target::launch`'s promise, which is the kernel's and the
        // policy's.
        match &self.inner.policy {
            Some(policy) => unsafe { policy.launch(gpu, &pick, call)? },
            None => unsafe { pick.kernel.launch(gpu, call)? },
        }
        Ok(pick)
    }
    fn family(&self) -> &Family {
        self.declaration()
    }
    fn refusal(&self, rule: String) -> Error {
        Error::NoFamilyVariant { family: self.name().to_string(), rule }
    }
}

/// A quantity's value in a call, or its family's default.
fn quantity(call: &Call, name: &str) -> Option<u64> {
    call.quantities.iter().find(|(n, _)| n == name).map(|(_, v)| *v)
}

/// The rates the cost model assumes where the driver reports no clocks: an H100 SXM's.
const DEFAULT_CLOCKS: Clocks = Clocks { sm_mhz: 1980, memory_gbps: 3350 };
/// Threads an SM holds at once (Ampere and Hopper).
const THREADS_PER_SM: u64 = 2048;
/// Blocks an SM holds at once.
const BLOCKS_PER_SM: u64 = 32;
/// Shared memory an SM holds (Hopper: 228 KiB).
const SMEM_PER_SM: u64 = 228 * 1024;
/// Bytes a thread keeps in flight (a 16-byte load), and how long one takes: the bandwidth the
/// threads in flight draw is their count × this ÷ that.
const BYTES_IN_FLIGHT: f64 = 16.0;
const LOAD_LATENCY: f64 = 1.0e-6;
/// The fraction of the DRAM bandwidth a streaming kernel reaches at best.
const BANDWIDTH_FRACTION: f64 = 0.92;
/// A launch.
const FIXED_SECONDS: f64 = 3e-6;
/// Each wave of blocks: their start, their reductions and barriers, their end.
const WAVE_SECONDS: f64 = 0.5e-6;
/// GFLOP/s an SM sustains at 1980 MHz where the backend declares no `gflops_per_sm`: a CUDA-core
/// kernel's.
const UNDECLARED_GFLOPS_PER_SM: u32 = 300;

/// The cost model's estimate for a variant on a call, in seconds: the longer of the bytes it
/// moves (its backend's declared `cost_bytes`, else the family's `work` bytes) at the bandwidth the launch's threads in flight draw and its FLOPs at
/// the backend's declared rate, plus a launch and a cost per wave of blocks. Only a fallback:
/// the tuning tables rank variants by measurement.
pub fn estimate_seconds(family: &Family, kernel: &Kernel, launch: &Launch, call: &Call, device: &Device) -> f64 {
    let env = |name: &str| family.work_value(kernel.variant(), name, &|q| quantity(call, q));
    let bytes = kernel.info().entry.cost_bytes.as_ref().unwrap_or(&family.work.bytes).eval(&env).unwrap_or(0) as f64;
    let flops = family.work.flops.eval(&env).unwrap_or(0) as f64;
    let clocks = device.clocks.unwrap_or(DEFAULT_CLOCKS);
    let sms = u64::from(device.sms.max(1));
    let threads = u64::from(launch.block.iter().product::<u32>().max(1));
    let blocks: u64 = launch.grid.iter().map(|&g| u64::from(g.max(1))).product();
    let smem = u64::from(launch.dynamic_smem_bytes) + kernel.info().resources.first().map_or(0, |r| u64::from(r.static_smem_bytes));
    let per_sm = (THREADS_PER_SM / threads).min(BLOCKS_PER_SM).min(SMEM_PER_SM / smem.max(1)).max(1);
    let resident = blocks.min(sms * per_sm);
    let drawn = (resident * threads) as f64 * BYTES_IN_FLIGHT / LOAD_LATENCY;
    let bandwidth = drawn.min(BANDWIDTH_FRACTION * f64::from(clocks.memory_gbps.max(1)) * 1e9);
    let gflops = kernel.info().entry.gflops_per_sm.unwrap_or(UNDECLARED_GFLOPS_PER_SM);
    let rate = f64::from(gflops) * 1e9 * (resident.min(sms) as f64) * f64::from(clocks.sm_mhz.max(1)) / 1980.0;
    let waves = blocks.div_ceil(sms * per_sm) as f64;
    (bytes / bandwidth).max(flops / rate) + FIXED_SECONDS + waves * WAVE_SECONDS
}

#[cfg(test)]
mod tests {
    use super::PickKey;
    use crate::plan::Call;

    /// A call asking for attention's causal mask is another question than the same call
    /// without it: a pick kept for one must not answer the other (it ran the unmasked
    /// variant, which then refused the launch).
    #[test]
    fn a_pick_is_kept_per_axes_asked() {
        let device = ("NVIDIA H200", 132);
        let plain = Call::default().quantity("seq_q", 2048);
        let causal = plain.clone().axis("causal", "causal");
        let key = PickKey::new(device, &plain);
        assert!(key.is(device, &plain));
        assert!(!key.is(device, &causal));
        assert_ne!(PickKey::hash_of(device, &plain), PickKey::hash_of(device, &causal));
        assert!(PickKey::new(device, &causal).is(device, &causal));
    }
}
