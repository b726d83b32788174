//! One call for any family, one road: the chooser binds a call's arguments by the family's
//! declared names and asks the family's [`Policy`] three questions: the class of the call
//! (which of a table's entries stand for it), the ways the variants take it (planning is
//! `can_implement`; a plug-in's may also run a variant on operands moved to aligned scratch), and what a
//! way costs. It runs the fastest way: the least estimate from the measured problems of the
//! call's class near it in the family's tuning table ([`family_table::estimate`]), else the
//! least cost. Picks are kept per call shape. A family without a plug-in's policy gets the
//! generic answers: one class, each variant directly, the cost model [`estimate_seconds`].

use crate::first_call;
use crate::gpu::{block_smem, check_block_smem};
use crate::kernel::{CallBuilder, Kernel, Target};
use crate::plan::{plan_call, runs_on, Call, Launch};
use crate::{Error, Gpu, Result};
use std::any::Any;
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use tilesmith_spec::family::Family;
use tilesmith_spec::family_table::{self, FamilyEntry, FamilyTable, Timed};
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

/// The variant a chooser runs for a call, the way it runs it, and why.
#[derive(Clone)]
pub struct Pick {
    pub way: Way,
    /// One line for logs: the table entry or the cost model's estimate behind the pick.
    pub reason: String,
    /// Every way that takes the call, with the table's estimate of its time there
    /// ([`family_table::estimate`]'s ln(its time / the fastest's)); none where no measured
    /// problem near the call times it.
    pub takers: Arc<[(Way, Option<f64>)]>,
}

impl Pick {
    /// The variant it runs.
    pub fn kernel(&self) -> &Kernel {
        &self.way.kernel
    }
}

impl std::fmt::Debug for Pick {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pick").field("way", &self.way.label()).field("reason", &self.reason).finish_non_exhaustive()
    }
}

/// A way to run a variant on a call, as the family's [`Policy`] names it.
#[derive(Clone)]
pub struct Way {
    pub kernel: Kernel,
    /// How a table states the way ([`Timed::strategy`]): none for directly, on the call's
    /// buffers (the only way of a family without a plug-in's policy).
    pub strategy: Option<String>,
    /// The policy's plan of the way: the generic policy's is the variant's [`Launch`]; a
    /// plug-in's, what it needs to run it (the variants that move operands, say).
    pub plan: Arc<dyn Any + Send + Sync>,
}

impl Way {
    /// `variant`, or `strategy(variant)`.
    pub fn label(&self) -> String {
        match &self.strategy {
            None => self.kernel.name().to_string(),
            Some(strategy) => format!("{strategy}({})", self.kernel.name()),
        }
    }

    /// Its plan, as the policy that made it keeps it.
    pub fn plan<T: Any>(&self) -> Option<&T> {
        self.plan.downcast_ref::<T>()
    }
}

/// The ways a family's variants take a call ([`Policy::ways`]).
pub enum Ways {
    /// At least one way, each planned.
    Take(Vec<Way>),
    /// The call writes no element: this variant, which takes it, does nothing.
    NothingWritten(Kernel),
}

/// How the chooser reads a family's tables: what a [`Policy`] states as data.
#[derive(Clone, Copy, Debug)]
pub struct Reading {
    /// How far ([`family_table::distance`], summed |log2| over the quantities and the batch) a
    /// measured problem may lie from a call and still stand for it.
    pub near_enough: f64,
    /// The quantities scaled by √(the table's GPU's SMs / this GPU's) to look a call up in
    /// another GPU's table: the problem it is compared with then fills as many waves of tiles
    /// there as the call does here.
    pub scaled: &'static [&'static str],
    /// Whether an entry that ranks not every way taking a call stands for it: where the ways
    /// it does not rank would fit its problem and its pick reached this much of the baseline
    /// (`Some`), or always (`None`).
    pub partial_entries: Option<f64>,
    /// Whether calls may be tuned on their first launch: every way is the variant launched on
    /// the call's buffers as a kernel by name is.
    pub first_call: bool,
    /// How near ties between the ways' estimates are broken, after direct ways first.
    pub ties: Ties,
}

/// How near ties ([`NEAR_TIE`]) between ways' estimates are broken, after direct ways first.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ties {
    /// A variant without bounds checks where one takes the call (it does the same work without
    /// them: H200, softmax bf16 32768x4096, 6% faster in turns, tied in the table), then the
    /// lesser estimate, then by name.
    Unchecked,
    /// By name.
    ByName,
}

impl Reading {
    /// The generic policy's.
    pub const GENERIC: Reading =
        Reading { near_enough: NEAR_ENOUGH, scaled: &[], partial_entries: Some(MEASURED_ENOUGH), first_call: true, ties: Ties::Unchecked };
}

/// What the chooser asks a family about a call: its classes (which of a table's entries stand
/// for it), the ways the variants run it, and what a way costs where no table measured near.
/// Every method has the generic answer, which a family without a plug-in gets: one class, each
/// variant directly on the call's buffers, the cost model [`estimate_seconds`]. A plug-in's
/// policy, registered with `inventory::submit!` as a [`PolicyOf`], answers for every registry's
/// chooser of its family in a program that links the plug-in, so that `registry.family(..)`
/// and the plug-in's typed calls take one road, with one pick cache.
pub trait Policy: Send + Sync + std::fmt::Debug {
    /// How the chooser reads the family's tables.
    fn reading(&self) -> Reading {
        Reading::GENERIC
    }

    /// Checks a table of the family beyond what every family's meets (a class, a strategy);
    /// a table that fails makes the registry fail to open, naming the file.
    fn check_table(&self, _table: &FamilyTable) -> std::result::Result<(), String> {
        Ok(())
    }

    /// The classes of a call: the entries of the first class that has any near it, in this
    /// order, stand for it (a plug-in's: the call's layout and alignment, say, with its
    /// epilogue, then without). Every call is of the one class, none, by default.
    fn classes(&self, _call: &Call) -> std::result::Result<Vec<Class>, String> {
        Ok(vec![Class::new()])
    }

    /// The ways `chooser`'s variants take a call on `device`, whose blocks may use
    /// `smem_per_block` bytes of shared memory, each planned; why none does otherwise.
    fn ways(&self, chooser: &Chooser, device: &Device, smem_per_block: u32, call: &Call) -> std::result::Result<Ways, String> {
        generic_ways(chooser, device, smem_per_block, call)
    }

    /// A way's time on a call by the family's cost model, in seconds.
    fn cost(&self, chooser: &Chooser, device: &Device, call: &Call, way: &Way) -> f64 {
        way.plan::<Launch>().map_or(f64::INFINITY, |launch| estimate_seconds(chooser.declaration(), &way.kernel, launch, call, device))
    }

    /// Which of `ways` a table's timing stands for, where one does: by default a direct timing
    /// of a variant with the axes of one way's but for its dtype (an entry of another dtype as
    /// wide stands for the call's).
    fn timings<'w>(&'w self, chooser: &'w Chooser, _call: &Call, ways: &'w [Way]) -> TimedAs<'w> {
        let by_name: HashMap<&str, &Kernel> = chooser.kernels().iter().map(|k| (k.name(), k)).collect();
        Box::new(move |timed: &Timed| {
            let ranked = by_name.get(timed.variant.as_str())?.variant();
            let same = |v: &tilesmith_spec::Variant| {
                v.backend == ranked.backend
                    && v.tile == ranked.tile
                    && v.warps == ranked.warps
                    && v.bounds == ranked.bounds
                    && v.axes == ranked.axes
            };
            ways.iter().position(|w| timed.is_direct() && w.strategy.is_none() && same(w.kernel.variant()))
        })
    }

    /// Enqueues `call` with a way it planned for a call of the same shape.
    ///
    /// # Safety
    /// [`Target::launch`]'s: the call's buffers are device memory of the lengths it says.
    unsafe fn launch(&self, gpu: &Gpu, way: &Way, call: &Call) -> Result<()> {
        // SAFETY: the caller's promise, which is the kernel's.
        unsafe { way.kernel.launch(gpu, call) }
    }

    /// The call an entry of a table of the family stands for, on unallocated buffers, as the
    /// tuner timed it (`tilesmith replay` picks for it on the CPU); none for an entry a replay
    /// does not make. Asked of a plug-in's policy only: the replay makes the generic call from
    /// the declaration.
    fn entry_call(&self, _entry: &FamilyEntry) -> std::result::Result<Option<Call>, String> {
        Ok(None)
    }
}

/// Which way a table's timing stands for ([`Policy::timings`]).
pub type TimedAs<'w> = Box<dyn Fn(&Timed) -> Option<usize> + 'w>;

/// A class of calls: the words an entry's class holds ([`FamilyEntry::class`]).
pub type Class = BTreeMap<String, String>;

/// The policy of a family without a plug-in's: every answer the generic one.
#[derive(Debug)]
struct Generic;

impl Policy for Generic {}

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
    /// println!("{}: {}", pick.way.label(), pick.reason);
    /// # Ok(()) }
    /// ```
    pub fn call<'a>(&'a self, gpu: &'a Gpu) -> CallBuilder<'a, Chooser> {
        CallBuilder::new(self, gpu)
    }

    /// The way a call runs, and why, without launching it ([`Chooser::pick`]): from this GPU's
    /// table, or, where it has none, that of the GPU of the same compute capability nearest in
    /// SMs and clock ([`Device::table_in`]). With tuning on first call, a call shape timed
    /// before (in this process or one before it) runs the variant timed fastest.
    pub fn choose(&self, gpu: &Gpu, call: &Call) -> Result<Pick> {
        self.chosen(gpu, call).map(|(pick, _)| pick)
    }

    /// Whether calls are tuned on their first launch ([`first_call`]): `on`, for every call of
    /// this chooser (and its clones) from now; by default as `TILESMITH_TUNE_FIRST_CALL` says.
    /// A family whose policy runs ways of its own ([`Reading::first_call`]) is never timed.
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
        self.asks().reading().first_call && set.unwrap_or_else(first_call::asked_by_environment)
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
            if let Some((way, file)) = stored.and_then(|(name, file)| Some((self.taker(&pick, &name)?, file))) {
                pick = Pick { way, reason: format!("timed on an earlier first call of this shape ({file})"), ..pick };
                timed = true;
            }
        }
        self.keep(device, call, &pick, timed);
        Ok((pick, timed))
    }

    /// The way of a pick that runs the variant named `name` directly.
    fn taker(&self, pick: &Pick, name: &str) -> Option<Way> {
        pick.takers.iter().find(|(w, _)| w.strategy.is_none() && w.kernel.name() == name).map(|(w, _)| w.clone())
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
        let policy = self.asks();
        let own = |w: &Way| w.kernel.name() == pick.kernel().name();
        let mut order: Vec<(f64, f64, &Way)> =
            pick.takers.iter().map(|(w, estimate)| (estimate.unwrap_or(f64::INFINITY), policy.cost(self, &device, call, w), w)).collect();
        order.sort_by(|a, b| (!own(a.2)).cmp(&!own(b.2)).then(a.0.total_cmp(&b.0)).then(a.1.total_cmp(&b.1)));
        let ways: Vec<&Way> = order.iter().map(|(.., w)| *w).take(first_call::CANDIDATES).collect();
        let candidates: Vec<&Kernel> = ways.iter().map(|w| &w.kernel).collect();
        // SAFETY: the caller's promise, which is the timings'.
        let times = unsafe { first_call::time(gpu, &self.inner.declaration, &candidates, call)? };
        let Some(fastest) = times.iter().flatten().copied().min_by(f64::total_cmp) else {
            return Ok(pick);
        };
        let at =
            times.iter().position(|t| t.is_some_and(|ms| ms <= fastest * (1.0 + NEAR_TIE))).expect("the fastest is within a tie of itself");
        let way = ways[at].clone();
        let own = times[0].map_or("did not launch".to_string(), |ms| format!("{:.3}x the fastest", ms / fastest));
        let file = self.with_store(gpu, |store| {
            store.put(first_call::key(call), way.kernel.name());
            store.file()
        });
        let reason = format!(
            "timed on first call: {} of {} variant(s) taking it, on the call's buffers, fastest {fastest:.4} ms; the estimate's pick {} ran {own} ({}); kept in {file}",
            candidates.len(),
            pick.takers.len(),
            pick.kernel().name(),
            pick.reason
        );
        Ok(Pick { way, reason, ..pick })
    }

    /// [`Chooser::choose`] without a GPU: for `device`, whose blocks may use `smem_per_block`
    /// bytes of shared memory; uncached. The family's policy names the ways that take the call
    /// and its classes; of the ways, the least estimate ([`family_table::estimate`]) from the
    /// measured problems of the first class near the call (of its dtype, else of one as wide)
    /// runs, near ties ([`NEAR_TIE`]) broken as the policy's [`Reading`] says; with none, the
    /// least cost by the policy's model, ties direct first, then by name.
    pub fn pick(&self, device: &Device, smem_per_block: u32, call: &Call) -> std::result::Result<Pick, String> {
        self.bind(call)?;
        let policy = self.asks();
        let ways = match policy.ways(self, device, smem_per_block, call)? {
            Ways::NothingWritten(kernel) => {
                let way = Way { kernel, strategy: None, plan: Arc::new(()) };
                return Ok(Pick { way, reason: "the call writes no element".into(), takers: Arc::new([]) });
            }
            Ways::Take(ways) if ways.is_empty() => return Err(format!("no variant of {} takes the call", self.name())),
            Ways::Take(ways) => ways,
        };
        let table = device.table_in(&self.inner.tables, |t| &t.device);
        if let Some((table, own)) = table {
            if let Some(pick) = self.read_table(policy, table, own, device, smem_per_block, call, &ways)? {
                return Ok(pick);
            }
        }
        let why = match (table, policy.reading().partial_entries) {
            (Some(_), Some(_)) => "no measured problem near this call ranks every way that takes it (or every one that fits it, with a pick near the baseline)",
            (Some(_), None) => "no measured problem near this call times a way that takes it",
            (None, _) => "no tuning table of this family for this GPU's compute capability",
        };
        let costs: Vec<f64> = ways.iter().map(|way| policy.cost(self, device, call, way)).collect();
        let least = (0..ways.len())
            .min_by(|&a, &b| {
                let key = |w: usize| (ways[w].strategy.is_some(), ways[w].kernel.name());
                costs[a].total_cmp(&costs[b]).then_with(|| key(a).cmp(&key(b)))
            })
            .expect("at least one way takes the call");
        let reason = format!("{why} ({device}): cost model, estimated {:.1} us", costs[least] * 1e6);
        let way = ways[least].clone();
        Ok(Pick { way, reason, takers: ways.into_iter().map(|w| (w, None)).collect() })
    }

    /// Checks a table of the family as its policy reads tables ([`Policy::check_table`]).
    pub fn check_table(&self, table: &FamilyTable) -> std::result::Result<(), String> {
        self.asks().check_table(table)
    }

    /// A way's time on a call by the family's cost model ([`Policy::cost`]), in seconds.
    pub fn cost(&self, device: &Device, call: &Call, way: &Way) -> f64 {
        self.asks().cost(self, device, call, way)
    }

    /// The policy the chooser asks: the plug-in's, else the generic one.
    fn asks(&self) -> &dyn Policy {
        self.inner.policy.as_deref().unwrap_or(&Generic)
    }

    /// The pick from `table` (the device's own where `own`) among `ways`, where a measured
    /// problem near the call times one.
    #[allow(clippy::too_many_arguments)]
    fn read_table(
        &self,
        policy: &dyn Policy,
        table: &FamilyTable,
        own: bool,
        device: &Device,
        smem_per_block: u32,
        call: &Call,
        ways: &[Way],
    ) -> std::result::Result<Option<Pick>, String> {
        let reading = policy.reading();
        let declaration = &self.inner.declaration;
        let scale = if own { 1.0 } else { (f64::from(table.device.sms) / f64::from(device.sms.max(1))).sqrt() };
        let problem: Vec<u64> = declaration
            .quantities
            .iter()
            .map(|q| {
                let value = quantity(call, q).unwrap_or(0);
                if reading.scaled.contains(&q.as_str()) {
                    ((value as f64 * scale).round() as u64).max(1)
                } else {
                    value
                }
            })
            .collect();
        let batch = declaration.batch.as_deref().and_then(|b| quantity(call, b)).unwrap_or(1);
        // A dtype without entries near reads those of another as wide, whose variants move as
        // many bytes (f16 calls take bf16's picks); integers and floats never stand for each other.
        let dtype = ways[0].kernel.variant().dtype;
        let widths = Dtype::ALL
            .iter()
            .copied()
            .filter(|&d| d != dtype && d.size_bytes() == dtype.size_bytes() && d.is_integer() == dtype.is_integer());
        let dtypes: Vec<Dtype> = std::iter::once(dtype).chain(widths).collect();
        let timed_as = policy.timings(self, call, ways);
        let by_name: HashMap<&str, &Kernel> = self.inner.kernels.iter().map(|k| (k.name(), k)).collect();
        // A timing of a variant whose source changed since is a hint (stale).
        let stale = |t: &Timed| by_name.get(t.variant.as_str()).is_some_and(|k| t.is_stale(&k.info().entry.source_sha256));
        // A way an entry does not time was refused at the entry's problem (rows past its shared
        // memory), skipped there, or is newer than the table (a backend added since). Where one
        // would not fit there, the entry picked among the others only: it is passed over. Where
        // the policy reads partial entries so, the others leave it standing where its pick
        // reached that much of the baseline: the table keeps its measured picks until a tune
        // run ranks the new variants.
        let fits_there = |k: &Kernel, entry: &FamilyEntry| {
            let value = |q: &str| table.quantities.iter().position(|n| n == q).and_then(|i| entry.problem.get(i).copied());
            let dynamic = k.info().entry.launch.dynamic_smem_bytes.eval(&value);
            dynamic.is_ok_and(|bytes| block_smem(k.info(), bytes) <= u64::from(smem_per_block))
        };
        let stands = |entry: &FamilyEntry, timings: &HashMap<usize, family_table::Timing>| {
            let Some(enough) = reading.partial_entries else { return true };
            let mut unranked = (0..ways.len()).filter(|w| !timings.contains_key(w)).peekable();
            if unranked.peek().is_none() {
                return true;
            }
            let best = entry.ranked.iter().find(|t| timed_as(t).is_some());
            unranked.all(|w| fits_there(&ways[w].kernel, entry)) && best.is_some_and(|t| entry.ratio(t) >= enough)
        };
        for class in policy.classes(call)? {
            for &d in &dtypes {
                // Each entry's timings of the ways, the first in rank order kept.
                let mut near: Vec<(f64, &FamilyEntry)> = Vec::new();
                let mut timings: Vec<HashMap<usize, family_table::Timing>> = Vec::new();
                for (distance, entry) in table.nearest(d, &class, batch, &problem, reading.near_enough) {
                    let mut of_ways = HashMap::new();
                    for (rank, t) in entry.ranked.iter().enumerate() {
                        if let Some(w) = timed_as(t) {
                            of_ways.entry(w).or_insert(family_table::Timing { ms: t.ms, rank, stale: stale(t) });
                        }
                    }
                    if stands(entry, &of_ways) {
                        near.push((distance, entry));
                        timings.push(of_ways);
                    }
                    if near.len() == family_table::NEAR_READ {
                        break;
                    }
                }
                let timing = |way: usize, entry: usize| timings[entry].get(&way).copied();
                // Near ties go to the direct way, then to a variant without bounds checks where
                // one takes the call: it does the same work without them (H200, softmax bf16
                // 32768x4096: 6% faster in turns, tied in the table).
                let key = |w: usize| (ways[w].strategy.is_some(), reading.ties == Ties::Unchecked && ways[w].kernel.variant().is_checked());
                let prefer = |(a, sa): (usize, f64), (b, sb): (usize, f64)| {
                    let estimate = if reading.ties == Ties::Unchecked { sa.total_cmp(&sb) } else { std::cmp::Ordering::Equal };
                    key(a).cmp(&key(b)).then(estimate).then_with(|| ways[a].kernel.name().cmp(ways[b].kernel.name()))
                };
                let Some(least) = family_table::least(ways.len(), &near, timing, prefer) else { continue };
                let (distance, entry) = near[least.entry];
                let rank = least.rank;
                let scaled = if scale == 1.0 || reading.scaled.is_empty() {
                    String::new()
                } else {
                    format!(", {} x{scale:.2}", reading.scaled.join(" and "))
                };
                let borrowed = if own { String::new() } else { format!(" (measured on {}{scaled})", table.device) };
                let unranked = (0..ways.len()).filter(|w| !timings[least.entry].contains_key(w)).count();
                let unranked = if unranked == 0 { String::new() } else { format!(" ({unranked} way(s) taking the call not ranked there)") };
                let hinted = if least.hints { " (from timings of sources changed since: hints)" } else { "" };
                let batch = if entry.batch == 1 { String::new() } else { format!("{} x ", entry.batch) };
                let class: String = entry.class.iter().map(|(k, v)| format!(" {k}={v}")).collect();
                let reason = format!(
                    "tuning table {}/{}{borrowed}: estimated {:.1}% over the fastest from {} measured problem(s); nearest measured problem {batch}{} {}{class}, rank {} of {}, {:.2}x the baseline there, {distance:.2} away{unranked}{hinted}",
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
                let takers = ways.iter().zip(&least.estimates).map(|(w, e)| (w.clone(), e.map(|e| e.slowdown))).collect();
                return Ok(Some(Pick { way: ways[least.taker].clone(), reason, takers }));
            }
        }
        Ok(None)
    }

    /// The family-level rules of a call's names and scalars ([`plan::bind`](crate::plan)).
    fn bind(&self, call: &Call) -> std::result::Result<(), String> {
        crate::plan::bind(&self.inner.declaration, self.name(), call).map(drop)
    }
}

/// The generic policy's ways: each variant that runs on the device, computes what the call
/// asks (an axis it leaves out at the family's default) and plans it within the device's shared
/// memory, directly on the call's buffers.
fn generic_ways(chooser: &Chooser, device: &Device, smem_per_block: u32, call: &Call) -> std::result::Result<Ways, String> {
    let capability = (device.capability[0], device.capability[1]);
    let mut refusals: Vec<(String, String)> = Vec::new();
    let mut ways: Vec<Way> = Vec::new();
    // An axis that changes what a variant computes, which the call leaves out, is at the
    // family's default: a call that does not ask for attention's causal mask gets none.
    let defaults: Vec<(&str, String)> = chooser
        .declaration()
        .computing_axes()
        .filter(|a| !call.axes.iter().any(|(name, _)| *name == a.name))
        .filter_map(|a| Some((a.name.as_str(), a.default.as_ref()?.to_string())))
        .collect();
    for kernel in chooser.kernels() {
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
            Ok(Some(launch)) => match check_block_smem(kernel.info(), u64::from(launch.dynamic_smem_bytes), smem_per_block, &device.name) {
                Ok(()) => ways.push(Way { kernel: kernel.clone(), strategy: None, plan: Arc::new(launch) }),
                Err(rule) => refusals.push((kernel.name().to_string(), rule)),
            },
            Ok(None) => return Ok(Ways::NothingWritten(kernel.clone())),
            Err(rule) => refusals.push((kernel.name().to_string(), rule)),
        }
    }
    if ways.is_empty() {
        return Err(none_takes(chooser, device, &refusals));
    }
    Ok(Ways::Take(ways))
}

/// Why no variant takes a call: the refusals, one per distinct rule, the first few.
fn none_takes(chooser: &Chooser, device: &Device, refusals: &[(String, String)]) -> String {
    if refusals.is_empty() {
        let mut targets: Vec<String> = chooser.kernels().iter().flat_map(|k| k.info().entry.targets.sass.clone()).collect();
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
        unsafe { self.asks().launch(gpu, &pick.way, call)? };
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
/// SMs a GPC holds at most (Hopper: 9 TPCs of 2). A cluster's blocks run on one GPC.
const SMS_PER_GPC: u64 = 18;
/// Shared memory an SM holds (Hopper: 228 KiB).
const SMEM_PER_SM: u64 = 228 * 1024;
/// Bytes a thread keeps in flight where its backend declares no `bytes_in_flight` (a 16-byte
/// load), and how long one takes: the bandwidth the threads in flight draw is their count ×
/// this ÷ that.
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
/// moves (its backend's declared `cost_bytes`, else the family's `work` bytes) at the bandwidth
/// the launch's threads in flight draw (each its backend's `bytes_in_flight`, a block no more
/// than its share of the bytes) and its FLOPs at
/// the backend's declared rate, plus a launch and a cost per wave of blocks (clusters of blocks
/// fit fewer at once). Only a fallback:
/// the tuning tables rank variants by measurement.
pub fn estimate_seconds(family: &Family, kernel: &Kernel, launch: &Launch, call: &Call, device: &Device) -> f64 {
    let env = |name: &str| family.work_value(kernel.variant(), name, &|q| quantity(call, q));
    let bytes = kernel.info().entry.cost_bytes.as_ref().unwrap_or(&family.work.bytes).eval(&env).unwrap_or(0) as f64;
    let flops = family.work.flops.eval(&env).unwrap_or(0) as f64;
    let clocks = device.clocks.unwrap_or(DEFAULT_CLOCKS);
    let sms = u64::from(device.sms.max(1));
    let threads = u64::from(launch.block.iter().product::<u32>().max(1));
    let blocks: u64 = launch.grid.iter().map(|&g| u64::from(g.max(1))).product();
    let smem = block_smem(kernel.info(), u64::from(launch.dynamic_smem_bytes));
    let per_sm = (THREADS_PER_SM / threads).min(BLOCKS_PER_SM).min(SMEM_PER_SM / smem.max(1)).max(1);
    // A cluster's blocks share a GPC, whose last cluster-less-one slots stay idle on average
    // (H200, a kernel of 2 blocks an SM: 14 clusters of 16 fit at once, 30 of 8, 132 of 2).
    let cluster = u64::from(launch.cluster.iter().product::<u32>().max(1));
    let slots = (sms * per_sm).saturating_sub(sms.div_ceil(SMS_PER_GPC) * (cluster - 1)).max(cluster);
    let resident = blocks.min(slots);
    let in_flight = kernel.info().entry.bytes_in_flight.as_ref().and_then(|b| b.eval(&env).ok()).map_or(BYTES_IN_FLIGHT, |b| b as f64);
    // A block keeps no more in flight than its share of the bytes: one row of 4,096 columns over
    // 512 threads of 8 vectors leaves most of them idle. With this and `bytes_in_flight`, the
    // picks of the H200's row-wise tables replayed went from 0.43-0.70 of the fastest, 9 in 10,
    // to 0.78-0.89 (calls of 1-16 rows had been the worst).
    let per_block = (threads as f64 * in_flight).min(bytes / blocks as f64).max(1.0);
    let drawn = resident as f64 * per_block / LOAD_LATENCY;
    let bandwidth = drawn.min(BANDWIDTH_FRACTION * f64::from(clocks.memory_gbps.max(1)) * 1e9);
    let gflops = kernel.info().entry.gflops_per_sm.unwrap_or(UNDECLARED_GFLOPS_PER_SM);
    let rate = f64::from(gflops) * 1e9 * (resident.min(sms) as f64) * f64::from(clocks.sm_mhz.max(1)) / 1980.0;
    let waves = blocks.div_ceil(slots) as f64;
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
