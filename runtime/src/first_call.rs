//! Tuning on first call, opt in (`TILESMITH_TUNE_FIRST_CALL=1` or
//! [`Chooser::tune_first_calls`](crate::Chooser::tune_first_calls)): the first launch of a call
//! shape the tables do not settle times the variants that take it, on the call's own buffers,
//! and runs the fastest from then on. The answer is kept in a file per family, GPU, driver and
//! registry in tilesmith's per-user folder, so a later process starts from it. Tables are
//! sparse: off them, the estimate's pick ran 0.80-0.87 of the fastest variant at some regular
//! shapes (H200, docs/chooser.md); a timing on the spot does not guess.

use crate::chooser::aligned;
use crate::gpu::Gpu;
use crate::kernel::Kernel;
use crate::plan::Call;
use crate::{Error, Result};
use cudarc::driver::sys;
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::path::PathBuf;
use tilesmith_spec::family::Family;
use tilesmith_spec::files;

/// Environment variable that turns tuning on first call on for every chooser of the process.
pub const VAR: &str = "TILESMITH_TUNE_FIRST_CALL";

/// The most variants timed for one call, in the order the table and the cost model put them.
pub const CANDIDATES: usize = 12;
/// Launches of each candidate before timing, and rounds of timed launches taken in turns
/// (each candidate's time is its median round).
const WARMUP: usize = 2;
const ROUNDS: usize = 5;
const RUNS: usize = 3;
/// Call shapes a file keeps; past this many it starts anew (calls that vary this much are not
/// the repeated ones it is for).
const KEPT: usize = 4096;
/// The largest file read back.
const MAX_FILE_BYTES: u64 = 16 << 20;

/// Whether the environment asks for it: read once, since every launch of a pick not timed asks.
pub(crate) fn asked_by_environment() -> bool {
    static ASKED: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ASKED.get_or_init(|| std::env::var_os(VAR).is_some_and(|v| !v.is_empty() && v != "0"))
}

/// A call shape as a line of the store: every name with its element type and alignment, value
/// or bits, in the call's order (the pick cache's key, without the GPU, which names the file).
pub(crate) fn key(call: &Call) -> String {
    let operands = call.operands.iter().map(|(name, dtype, buffer)| format!("{name}:{dtype}:{}", aligned(buffer.addr)));
    let quantities = call.quantities.iter().map(|(name, value)| format!("{name}={value}"));
    let scalars = call.scalars.iter().map(|(name, value)| format!("{name}={:#x}", value.to_bits()));
    let axes = call.axes.iter().map(|(name, value)| format!("{name}={value}"));
    [operands.collect::<Vec<_>>(), quantities.collect(), scalars.collect(), axes.collect()].map(|part| part.join(",")).join("|")
}

/// A family's first-call timings on one GPU: variant by call shape, and the file they are kept in.
#[derive(Debug, Default)]
pub(crate) struct Store {
    path: Option<PathBuf>,
    picks: BTreeMap<String, String>,
}

impl Store {
    /// The store of `family` over `kernels` on `gpu`, in `folder` (else `first-call/` in the
    /// per-user folder): its file is named after the family, the GPU and its SM count, the
    /// driver's version and a hash of the variants' names and code, so that a rebuilt registry
    /// or another driver starts anew. A file that does not read (or
    /// a platform without a per-user folder) starts empty; the next timing writes it again.
    pub(crate) fn open(folder: Option<PathBuf>, family: &str, kernels: &[Kernel], gpu: &Gpu) -> Store {
        let mut driver = 0;
        // SAFETY: writes one integer; the driver is loaded (a Gpu exists).
        let _ = unsafe { sys::cuDriverGetVersion(&mut driver) };
        let name = file_name(family, kernels, gpu.name(), gpu.sms(), driver);
        let folder = folder.or_else(|| files::user_folder().map(|home| home.join("first-call")));
        Store::at(folder.map(|folder| folder.join(name)))
    }

    /// The store kept in the file at `path` (none: in memory only), read where it reads.
    fn at(path: Option<PathBuf>) -> Store {
        let picks = path
            .as_deref()
            .and_then(|path| files::read(path, MAX_FILE_BYTES).ok())
            .and_then(|bytes| serde_json::from_slice::<BTreeMap<String, String>>(&bytes).ok())
            .unwrap_or_default();
        Store { path, picks }
    }

    pub(crate) fn get(&self, key: &str) -> Option<&str> {
        self.picks.get(key).map(String::as_str)
    }

    /// Where it is kept, for reasons.
    pub(crate) fn file(&self) -> String {
        self.path.as_ref().map_or_else(|| "memory only: no per-user folder".into(), |p| p.display().to_string())
    }

    /// Keeps `variant` for `key` and writes the file (a temporary file renamed over it, so a
    /// reader never sees half of one); a write that fails leaves the timing in memory only.
    pub(crate) fn put(&mut self, key: String, variant: &str) {
        if self.picks.len() >= KEPT {
            self.picks.clear();
        }
        self.picks.insert(key, variant.to_string());
        let Some(path) = &self.path else { return };
        let write = || -> std::io::Result<()> {
            std::fs::create_dir_all(path.parent().expect("a file in a folder"))?;
            let temporary = path.with_extension(format!("json.{}.tmp", std::process::id()));
            std::fs::write(&temporary, serde_json::to_vec_pretty(&self.picks).map_err(std::io::Error::other)?)?;
            std::fs::rename(&temporary, path)
        };
        let _ = write();
    }
}

/// The file of a family's timings on a GPU: the family, the GPU's name and SMs, the driver's
/// version and a hash of the variants' names and code.
fn file_name(family: &str, kernels: &[Kernel], gpu: &str, sms: u32, driver: i32) -> String {
    let mut hasher = Sha256::new();
    for kernel in kernels {
        hasher.update(kernel.name().as_bytes());
        hasher.update(kernel.info().fatbin_sha256.as_bytes());
        hasher.update(kernel.info().entry.source_sha256.as_bytes());
    }
    let registry: String = hasher.finalize().iter().take(8).map(|b| format!("{b:02x}")).collect();
    let device: String = gpu.chars().map(|c| if c.is_ascii_alphanumeric() { c } else { '_' }).collect();
    format!("{family}-{device}-{sms}sm-driver{driver}-{registry}.json")
}

/// A driver error while tuning on first call, saying what it was doing.
fn cuda(doing: &str) -> impl Fn(cudarc::driver::DriverError) -> Error {
    let what = format!("tuning on first call: {doing}");
    move |source| Error::Cuda { what: what.clone(), source }
}

/// Each candidate's median time in milliseconds on the call's buffers (none where its launch
/// failed), taken in turns so that every one sees the GPU at the same moments. Operands the
/// family reads and writes are copied aside first (a copy of each buffer, for the timing) and
/// put back after, also where the timing fails part way, so the call's own launch (or the
/// caller, given an error) finds them as the caller left them.
///
/// # Safety
///
/// [`Target::launch`](crate::Target::launch)'s: the call's buffers are live device memory of
/// the lengths it states, on the GPU's context.
pub(crate) unsafe fn time(gpu: &Gpu, family: &Family, candidates: &[&Kernel], call: &Call) -> Result<Vec<Option<f64>>> {
    let stream = gpu.stream();
    // Each read-write operand's buffer, copied aside.
    let mut aside = Vec::new();
    for (name, dtype, buffer) in &call.operands {
        if family.operand(name).is_some_and(|o| o.access.reads() && o.access.writes()) {
            let bytes = buffer.len.saturating_mul(dtype.size_bytes() as usize);
            let copy = stream.alloc_zeros::<u8>(bytes.max(1)).map_err(cuda("allocating a copy of a read-write operand"))?;
            let to = {
                let (to, _sync) = cudarc::driver::DevicePtr::device_ptr(&copy, stream);
                // SAFETY: the call's buffer holds `bytes` (the caller's promise), the copy as many.
                unsafe { cudarc::driver::result::memcpy_dtod_async(to, buffer.addr, bytes, stream.cu_stream()) }
                    .map_err(cuda("copying a read-write operand aside"))?;
                to
            };
            aside.push((buffer.addr, to, bytes, copy));
        }
    }
    // SAFETY: the caller's promise, which is every timed launch's.
    let timed = unsafe { time_in_turns(gpu, candidates, call) };
    // Put back whatever the timings did, also where they failed part way.
    let mut restored = Ok(());
    for (from, to, bytes, _copy) in &aside {
        // SAFETY: as above, the other way.
        let back = unsafe { cudarc::driver::result::memcpy_dtod_async(*from, *to, *bytes, stream.cu_stream()) };
        restored = restored.and(back.map_err(cuda("putting a read-write operand back")));
    }
    let (times, failed) = timed?;
    restored?;
    Ok(times
        .into_iter()
        .zip(failed)
        .map(|(mut ms, failed)| {
            ms.sort_by(f64::total_cmp);
            (!failed && !ms.is_empty()).then(|| ms[ms.len() / 2])
        })
        .collect())
}

/// Each candidate's timed rounds, and whether its launch failed ([`time`]'s loop).
///
/// # Safety
///
/// As [`time`].
unsafe fn time_in_turns(gpu: &Gpu, candidates: &[&Kernel], call: &Call) -> Result<(Vec<Vec<f64>>, Vec<bool>)> {
    let stream = gpu.stream();
    let timer = || stream.context().new_event(Some(sys::CUevent_flags::CU_EVENT_DEFAULT));
    let mut times: Vec<Vec<f64>> = vec![Vec::new(); candidates.len()];
    let mut failed = vec![false; candidates.len()];
    for round in 0..=ROUNDS {
        for (i, kernel) in candidates.iter().enumerate() {
            if failed[i] {
                continue;
            }
            let (start, end) = (timer().map_err(cuda("making an event"))?, timer().map_err(cuda("making an event"))?);
            start.record(stream).map_err(cuda("recording an event"))?;
            // The first round warms each candidate up (loads its code, fills its caches).
            let runs = if round == 0 { WARMUP } else { RUNS };
            // SAFETY: the caller's promise, which is every launch's.
            let launched = (0..runs).try_for_each(|_| unsafe { kernel.launch(gpu, call) });
            if launched.is_err() {
                failed[i] = true;
                continue;
            }
            end.record(stream).map_err(cuda("recording an event"))?;
            if round > 0 {
                let ms = start.elapsed_ms(&end).map_err(cuda("reading an event"))?;
                times[i].push(f64::from(ms) / RUNS as f64);
            }
        }
    }
    Ok((times, failed))
}

#[cfg(test)]
mod tests {
    use super::{key, Store};
    use crate::plan::{Buffer, Call};
    use tilesmith_spec::Dtype;

    /// Timings are read back by a later store of the same file; a file that does not read
    /// starts empty and is written anew; no temporary file is left.
    #[test]
    fn timings_are_kept_in_their_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("first-call").join("softmax-H200.json");
        let mut store = Store::at(Some(path.clone()));
        assert_eq!(store.get("a"), None);
        store.put("a".into(), "softmax_w4");
        store.put("b".into(), "softmax");
        assert_eq!(Store::at(Some(path.clone())).get("a"), Some("softmax_w4"));
        std::fs::write(&path, "{ not json").unwrap();
        let mut store = Store::at(Some(path.clone()));
        assert_eq!(store.get("a"), None);
        store.put("c".into(), "softmax_w16");
        assert_eq!(Store::at(Some(path.clone())).get("c"), Some("softmax_w16"));
        let left: Vec<_> = std::fs::read_dir(path.parent().unwrap()).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert_eq!(left, ["softmax-H200.json"]);
    }

    /// A key tells apart what a pick depends on: alignment, values, scalars' bits, axes.
    #[test]
    fn keys_tell_call_shapes_apart() {
        let call = |addr: u64, cols: u64, eps: f64, causal: bool| {
            let call = Call::default()
                .operand("x", Dtype::Bf16, Buffer { len: 64 * cols as usize, addr })
                .quantity("cols", cols)
                .scalar("eps", eps);
            if causal {
                call.axis("causal", "causal")
            } else {
                call
            }
        };
        let base = key(&call(1 << 20, 1024, 1e-6, false));
        assert_eq!(base, "x:bf16:8|cols=1024|eps=0x3eb0c6f7a0b5ed8d|");
        for other in [call(1 << 20 | 16, 1024, 1e-6, false), call(1 << 20, 1025, 1e-6, false), call(1 << 20, 1024, 1e-5, false)] {
            assert_ne!(key(&other), base);
        }
        assert_eq!(key(&call(1 << 20, 1024, 1e-6, true)), "x:bf16:8|cols=1024|eps=0x3eb0c6f7a0b5ed8d|causal=causal");
    }
}
