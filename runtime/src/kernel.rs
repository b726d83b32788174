//! A kernel handle and its typed, checked launches.

use crate::error::Error;
use crate::extensions::Extensions;
use crate::fatbin::Fatbin;
use crate::gpu::Gpu;
use crate::plan::{plan_call, Buffer, Call, Launch};
use crate::Result;
use cudarc::driver::{CudaSlice, DevicePtr, DevicePtrMut, DeviceRepr, SyncOnDrop, ValidAsZeroBits};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use tilesmith_spec::family::Family;
use tilesmith_spec::{Access, Built, Dtype, Variant};

/// An element type the kernels take.
pub trait Element: DeviceRepr + ValidAsZeroBits + Copy + Default + Send + Sync + std::fmt::Debug + 'static {
    const DTYPE: Dtype;
    /// What outputs are poisoned with before a trial's launch, so that an element left
    /// unwritten shows: a quiet NaN of its own bits (a kernel's arithmetic writes the
    /// canonical NaN, which a family may declare as a result), or an integer type's largest
    /// value (integers have no NaN).
    const POISON: Self;
    /// `x` rounded to the type; for integers, NaN gives [`Element::POISON`] and other values
    /// are rounded to the nearest and saturate at the type's range.
    fn from_f64(x: f64) -> Self;
    fn to_f64(self) -> f64;
    /// Whether it holds [`Element::POISON`], bit for bit.
    fn is_poison(self) -> bool;
}

/// Integers: the poison is the type's largest value, which a trial's output then reads as
/// unwritten (a kernel that writes it fails its trial, never passes one it should fail).
macro_rules! integer_element {
    ($($t:ty => $dtype:ident),+) => {$(
        impl Element for $t {
            const DTYPE: Dtype = Dtype::$dtype;
            const POISON: $t = <$t>::MAX;
            fn from_f64(x: f64) -> Self {
                if x.is_nan() { Self::POISON } else { x.round() as $t }
            }
            fn to_f64(self) -> f64 {
                self as f64
            }
            fn is_poison(self) -> bool {
                self == Self::POISON
            }
        }
    )+};
}

integer_element!(i32 => I32, i64 => I64, u32 => U32, u8 => U8);

impl Element for f32 {
    const DTYPE: Dtype = Dtype::F32;
    const POISON: f32 = f32::from_bits(0x7fc0_0bad);
    fn from_f64(x: f64) -> Self {
        x as f32
    }
    fn to_f64(self) -> f64 {
        f64::from(self)
    }
    fn is_poison(self) -> bool {
        self.to_bits() == Self::POISON.to_bits()
    }
}

impl Element for half::f16 {
    const DTYPE: Dtype = Dtype::F16;
    const POISON: half::f16 = half::f16::from_bits(0x7e5a);
    fn from_f64(x: f64) -> Self {
        half::f16::from_f64(x)
    }
    fn to_f64(self) -> f64 {
        half::f16::to_f64(self)
    }
    fn is_poison(self) -> bool {
        self.to_bits() == Self::POISON.to_bits()
    }
}

impl Element for half::bf16 {
    const DTYPE: Dtype = Dtype::Bf16;
    const POISON: half::bf16 = half::bf16::from_bits(0x7fda);
    fn from_f64(x: f64) -> Self {
        half::bf16::from_f64(x)
    }
    fn to_f64(self) -> f64 {
        half::bf16::to_f64(self)
    }
    fn is_poison(self) -> bool {
        self.to_bits() == Self::POISON.to_bits()
    }
}

impl Element for float8::F8E4M3 {
    const DTYPE: Dtype = Dtype::E4m3;
    /// e4m3 has two NaNs; conversions give 0x7f, so the poison is the other.
    const POISON: float8::F8E4M3 = float8::F8E4M3::from_bits(0xff);
    /// Rounded to nearest; beyond ±448, e4m3 saturates to NaN (it has no infinity).
    fn from_f64(x: f64) -> Self {
        float8::F8E4M3::from_f64(x)
    }
    fn to_f64(self) -> f64 {
        float8::F8E4M3::to_f64(&self)
    }
    fn is_poison(self) -> bool {
        self.to_bits() == Self::POISON.to_bits()
    }
}

impl Element for float8::F8E5M2 {
    const DTYPE: Dtype = Dtype::E5m2;
    const POISON: float8::F8E5M2 = float8::F8E5M2::from_bits(0xfe);
    fn from_f64(x: f64) -> Self {
        float8::F8E5M2::from_f64(x)
    }
    fn to_f64(self) -> f64 {
        float8::F8E5M2::to_f64(&self)
    }
    fn is_poison(self) -> bool {
        self.to_bits() == Self::POISON.to_bits()
    }
}

/// A variant in the registry: its manifest data, and its fatbin, loaded on first launch.
#[derive(Clone, Debug)]
pub struct Kernel {
    built: Arc<Built>,
    fatbin: Fatbin,
    /// The launches of calls planned before, shared by the handle's clones.
    plans: Arc<Plans>,
    /// What plug-ins keep beside it (their own plan caches), shared by the clones.
    extensions: Arc<Extensions>,
}

/// Launches already planned, by call: planning checks every argument against the manifest,
/// which costs the host several microseconds, as much as a small kernel takes on the GPU; a
/// plan depends on nothing but its key, so a call seen before launches as planned then.
#[derive(Debug, Default)]
struct Plans {
    /// Calls by name, by [`Call::fingerprint`] and SM count; each compared in full on a hit.
    calls: Mutex<HashMap<u64, Vec<KeptCall>>>,
}

/// A call by name planned before: the call, the GPU's SM count and its launch.
type KeptCall = (Call, u32, Launch);

/// Calls a kernel remembers; past this many, it forgets them all (calls that vary this much
/// are not the repeated ones the cache is for).
const PLANS_KEPT: usize = 1024;

impl Kernel {
    pub(crate) fn new(built: Arc<Built>, fatbin: Fatbin) -> Kernel {
        Kernel { built, fatbin, plans: Arc::default(), extensions: Arc::default() }
    }

    pub fn name(&self) -> &str {
        &self.built.entry.variant.name
    }

    /// Everything the manifest records: axes, launch data, requirements, resources.
    pub fn info(&self) -> &Built {
        &self.built
    }

    pub fn variant(&self) -> &Variant {
        &self.built.entry.variant
    }

    /// The element type of its operand `name` (an output whose type an axis sets, as `out` does); none
    /// where its family has no such operand.
    pub fn operand_dtype(&self, name: &str) -> Option<Dtype> {
        self.built.entry.operand_dtype(name)
    }

    /// Whether it is one of its family's reference variants (the trials' yardstick, never
    /// picked by a dispatcher).
    pub fn is_reference(&self) -> bool {
        self.built.entry.is_reference()
    }

    pub fn fatbin(&self) -> &Fatbin {
        &self.fatbin
    }

    /// A call of this kernel with arguments bound by name, as its family declares them:
    ///
    /// ```no_run
    /// # fn f(gpu: &tilesmith_runtime::Gpu, kernel: &tilesmith_runtime::Kernel,
    /// #      x: &cudarc::driver::CudaSlice<f32>, w: &cudarc::driver::CudaSlice<f32>,
    /// #      y: &mut cudarc::driver::CudaSlice<f32>) -> tilesmith_runtime::Result<()> {
    /// kernel.call(gpu)
    ///     .operand("x", x).operand("w", w).operand_mut("y", y)
    ///     .quantity("rows", 4096).quantity("cols", 50257).quantity("ldx", 50257).quantity("ldy", 50257)
    ///     .scalar("eps", 1e-6)
    ///     .launch()
    /// # }
    /// ```
    ///
    /// Every name, size, leading dimension, alignment and range is checked against the
    /// declaration before anything is enqueued.
    pub fn call<'a>(&'a self, gpu: &'a Gpu) -> CallBuilder<'a> {
        CallBuilder::new(self, gpu)
    }

    fn refused(&self, rule: String) -> Error {
        Error::Refused { name: self.name().to_string(), rule }
    }

    /// Checks a call bound by name and enqueues it on the GPU's stream.
    ///
    /// # Safety
    ///
    /// As [`Target::launch`].
    pub(crate) unsafe fn launch(&self, gpu: &Gpu, call: &Call) -> Result<()> {
        match self.plan_call(gpu.sms(), call)? {
            Some(launch) => gpu.launch(&self.built, &self.fatbin, launch),
            None => Ok(()),
        }
    }

    /// The checked launch of a call by name ([`plan_call`]), or why the variant refuses it;
    /// `None` where the call has nothing to compute. Remembered, as [`Kernel::plan_call`] says.
    pub fn plan(&self, sms: u32, call: &Call) -> Result<Option<Planned>> {
        Ok(self.plan_call(sms, call)?.map(|launch| Planned { of: self.built.clone(), launch }))
    }

    /// The launch of a call by name, or why the variant refuses it; remembered, without copying
    /// the call to look it up.
    pub(crate) fn plan_call(&self, sms: u32, call: &Call) -> Result<Option<Launch>> {
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        call.fingerprint(&mut hasher);
        let hash = std::hash::Hasher::finish(&hasher);
        let calls = &self.plans.calls;
        if let Some(kept) = calls.lock().unwrap_or_else(|p| p.into_inner()).get(&hash) {
            if let Some((_, _, launch)) = kept.iter().find(|(c, s, _)| c == call && *s == sms) {
                return Ok(Some(launch.clone()));
            }
        }
        let launch = plan_call(&self.built, call, sms).map_err(|rule| self.refused(rule))?;
        if let Some(launch) = &launch {
            let mut calls = calls.lock().unwrap_or_else(|p| p.into_inner());
            if calls.len() >= PLANS_KEPT {
                calls.clear();
            }
            calls.entry(hash).or_default().push((call.clone(), sms, launch.clone()));
        }
        Ok(launch)
    }

    /// Launches a plan this kernel made, on the GPU's stream.
    ///
    /// # Safety
    ///
    /// A plan checks a call's addresses against the lengths the call states, not against
    /// memory: every operand's buffer in the planned call must be a live allocation of the
    /// GPU's context, of at least the length the call gave, until the kernel has run (a plan
    /// made from `CudaSlice`s the caller holds borrowed meanwhile).
    pub unsafe fn launch_planned(&self, gpu: &Gpu, planned: &Planned) -> Result<()> {
        if !Arc::ptr_eq(&planned.of, &self.built) {
            let rule = format!("the plan was made by kernel `{}`", planned.of.entry.variant.name);
            return Err(self.refused(rule));
        }
        gpu.launch(&self.built, &self.fatbin, planned.launch.clone())
    }

    /// The value of type `T` that a plug-in keeps beside this kernel (see [`Extensions`]).
    pub fn extension<T: std::any::Any + Send + Sync + Default>(&self) -> Arc<T> {
        self.extensions.get()
    }
}

/// A launch that [`Kernel::plan`] checked, for [`Kernel::launch_planned`]: only the runtime
/// makes one, so nothing reaches the driver unchecked but what a plan cannot see, whether its
/// addresses are memory (which is why launching one is `unsafe`, and so is launching a `Call`
/// of raw addresses through [`Target`]):
///
/// ```compile_fail,E0133
/// # fn f(kernel: &tilesmith_runtime::Kernel, gpu: &tilesmith_runtime::Gpu, planned: &tilesmith_runtime::Planned) {
/// let _ = kernel.launch_planned(gpu, planned);
/// # }
/// ```
///
/// ```compile_fail,E0133
/// # use tilesmith_runtime::Target;
/// # fn f(kernel: &tilesmith_runtime::Kernel, gpu: &tilesmith_runtime::Gpu, call: &tilesmith_runtime::Call) {
/// let _ = Target::launch(kernel, gpu, call);
/// # }
/// ```
#[derive(Clone, Debug)]
pub struct Planned {
    of: Arc<Built>,
    launch: Launch,
}

impl Planned {
    pub fn launch(&self) -> &Launch {
        &self.launch
    }
}

/// What a call bound by name runs on: a kernel ([`Kernel::call`]) or a family's chooser
/// ([`Chooser::call`](crate::Chooser::call)).
pub trait Target {
    /// What the launch returns: nothing for a kernel, the pick for a chooser.
    type Output;
    /// Checks the call and enqueues it on the GPU's stream.
    ///
    /// # Safety
    ///
    /// As [`Kernel::launch_planned`]: the call's buffers are live allocations of at least their
    /// stated lengths (a [`CallBuilder`] makes them from borrowed `CudaSlice`s).
    unsafe fn launch(&self, gpu: &Gpu, call: &Call) -> Result<Self::Output>;
    /// The declaration of the family it belongs to.
    fn family(&self) -> &Family;
    /// The error of a call it refuses before planning, naming it.
    fn refusal(&self, rule: String) -> Error;
}

impl Target for Kernel {
    type Output = ();
    unsafe fn launch(&self, gpu: &Gpu, call: &Call) -> Result<()> {
        // SAFETY: the caller keeps `Target::launch`'s promise, which is this one's.
        unsafe { Kernel::launch(self, gpu, call) }
    }
    fn family(&self) -> &Family {
        &self.built.entry.declaration
    }
    fn refusal(&self, rule: String) -> Error {
        Error::Refused { name: self.name().to_string(), rule }
    }
}

/// Refuses operands passed by shared borrow ([`CallBuilder::operand`]) that the family's kernels
/// write: a `&CudaSlice` promises the buffer stays as it is.
pub(crate) fn written_through_shared(family: &Family, shared: &[String]) -> std::result::Result<(), String> {
    let mut written = shared.iter().filter_map(|name| family.operand(name).filter(|o| o.access.writes()));
    match written.next() {
        Some(operand) => Err(format!(
            "operand `{}` is written by the kernel (access `{}`): pass it with operand_mut (a mutable borrow), not operand",
            operand.name,
            if operand.access == Access::ReadWrite { "readwrite" } else { "write" }
        )),
        None => Ok(()),
    }
}

/// A call being bound: see [`Kernel::call`]. The buffers stay borrowed, and ordered on the
/// GPU's stream, until the launch is enqueued.
pub struct CallBuilder<'a, T: Target = Kernel> {
    target: &'a T,
    gpu: &'a Gpu,
    call: Call,
    /// The operands passed by shared borrow, which the kernel must only read.
    shared: Vec<String>,
    _guards: Vec<SyncOnDrop<'a>>,
}

impl<'a, T: Target> CallBuilder<'a, T> {
    pub(crate) fn new(target: &'a T, gpu: &'a Gpu) -> Self {
        CallBuilder { target, gpu, call: Call::default(), shared: Vec::new(), _guards: Vec::new() }
    }

    /// An operand the kernel reads; one it writes is refused at the launch.
    pub fn operand<E: Element>(mut self, name: &str, slice: &'a CudaSlice<E>) -> Self {
        let (addr, guard) = slice.device_ptr(self.gpu.stream());
        self._guards.push(guard);
        self.shared.push(name.to_string());
        self.call = self.call.operand(name, E::DTYPE, Buffer { len: slice.len(), addr });
        self
    }

    /// An operand the kernel writes (or reads and writes in place).
    pub fn operand_mut<E: Element>(mut self, name: &str, slice: &'a mut CudaSlice<E>) -> Self {
        let len = slice.len();
        let (addr, guard) = slice.device_ptr_mut(self.gpu.stream());
        self._guards.push(guard);
        self.call = self.call.operand(name, E::DTYPE, Buffer { len, addr });
        self
    }

    pub fn quantity(mut self, name: &str, value: usize) -> Self {
        self.call = self.call.quantity(name, value as u64);
        self
    }

    /// A scalar, converted to the type the family declares for it after its range is checked.
    pub fn scalar(mut self, name: &str, value: f64) -> Self {
        self.call = self.call.scalar(name, value);
        self
    }

    /// The value the call asks of an axis that changes what a variant computes (attention's
    /// `causal`): a named variant must have it; a family's chooser picks among those that do,
    /// and takes the family's default for an axis the call leaves out.
    pub fn axis(mut self, name: &str, value: &str) -> Self {
        self.call = self.call.axis(name, value);
        self
    }

    /// The quantities, scalars and axes of `values` (a call by name without operands, as a
    /// plug-in's typed call binds them), after those bound so far.
    pub fn values(mut self, values: &Call) -> Self {
        self.call.quantities.extend(values.quantities.iter().cloned());
        self.call.scalars.extend(values.scalars.iter().cloned());
        self.call.axes.extend(values.axes.iter().cloned());
        self
    }

    /// The call as bound so far, for planning without a launch.
    pub fn arguments(&self) -> &Call {
        &self.call
    }

    /// Checks the call and enqueues it on the GPU's stream.
    pub fn launch(self) -> Result<T::Output> {
        written_through_shared(self.target.family(), &self.shared).map_err(|rule| self.target.refusal(rule))?;
        // SAFETY: every buffer of the call was taken from a `CudaSlice` this builder borrows.
        unsafe { self.target.launch(self.gpu, &self.call) }
    }
}

impl CallBuilder<'_, crate::Chooser> {
    /// The variant the call would run on, and why, without launching it.
    pub fn choose(&self) -> Result<crate::Pick> {
        self.target.choose(self.gpu, &self.call)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tilesmith_spec::Manifest;

    fn kernel(name: &str) -> Kernel {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../generated/manifest.json");
        let manifest: Manifest = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
        let entry = manifest.variants.into_iter().find(|e| e.variant.name == name).unwrap();
        Kernel::new(Arc::new(Built::unbuilt(entry)), Fatbin::File("unused".into()))
    }

    #[test]
    fn operands_the_kernel_writes_are_refused_through_a_shared_borrow() {
        let names = |names: &[&str]| names.iter().map(|n| n.to_string()).collect::<Vec<_>>();
        let softmax = kernel("softmax_w16");
        assert!(written_through_shared(softmax.family(), &names(&["x"])).is_ok());
        let rule = written_through_shared(softmax.family(), &names(&["x", "y"])).unwrap_err();
        assert!(rule.contains("operand `y` is written by the kernel (access `write`): pass it with operand_mut"), "{rule}");
        let add = kernel("add_rmsnorm");
        let rule = written_through_shared(add.family(), &names(&["x", "r", "w"])).unwrap_err();
        assert!(rule.contains("operand `r` is written by the kernel (access `readwrite`)"), "{rule}");
    }

    #[test]
    fn a_call_by_name_is_planned_once_and_a_refused_one_every_time() {
        let kernel = kernel("softmax_w16");
        let [x, y] = Buffer::unallocated([4096 * 50257; 2]);
        let call = |y: Buffer| {
            Call::default()
                .operand("x", Dtype::Bf16, x)
                .operand("y", Dtype::Bf16, y)
                .quantity("rows", 4096)
                .quantity("cols", 50257)
                .quantity("ldx", 50257)
                .quantity("ldy", 50257)
        };
        let first = kernel.plan_call(132, &call(y)).unwrap();
        assert_eq!(kernel.plan_call(132, &call(y)).unwrap(), first);
        assert_eq!(kernel.plans.calls.lock().unwrap().values().map(Vec::len).sum::<usize>(), 1);
        let short = Buffer { len: y.len - 1, ..y };
        for _ in 0..2 {
            let refused = kernel.plan_call(132, &call(short)).unwrap_err().to_string();
            assert!(refused.contains("y holds"), "{refused}");
        }
        // Another buffer is another plan: its address is an argument.
        let moved = Buffer { addr: y.addr + 256, ..y };
        assert_ne!(kernel.plan_call(132, &call(moved)).unwrap(), first);
        assert_eq!(kernel.plans.calls.lock().unwrap().values().map(Vec::len).sum::<usize>(), 2);
    }
}
