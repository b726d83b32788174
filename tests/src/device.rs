//! The GPU side of the trials: one shared GPU, uploads, poisoned outputs, L2 rotation and
//! event timing.

use cudarc::driver::sys::{CUdevice_attribute, CUevent_flags};
use cudarc::driver::{CudaSlice, CudaStream, DevicePtr, DevicePtrMut};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};
use tilesmith_runtime::{Element, Gpu};

/// The process's GPU, opened once; the error says why there is none.
pub fn gpu() -> Result<&'static Gpu, String> {
    static GPU: OnceLock<Result<Gpu, String>> = OnceLock::new();
    GPU.get_or_init(|| Gpu::new(0).map_err(|err| err.to_string())).as_ref().map_err(Clone::clone)
}

pub fn upload<T: Element>(gpu: &Gpu, host: &[T]) -> Result<CudaSlice<T>, String> {
    gpu.stream().clone_htod(host).map_err(|err| format!("copying to the GPU: {err}"))
}

/// A buffer, or a view of part of one, copied to the host.
pub fn download<T: Element>(gpu: &Gpu, device: &impl DevicePtr<T>) -> Result<Vec<T>, String> {
    gpu.stream().clone_dtoh(device).map_err(|err| format!("copying from the GPU: {err}"))
}

/// Fills `device` with `T`'s poison on the GPU's stream: a timed case poisons its outputs before
/// every timing, and a host copy of the NaNs took longer than the timing (117 MB a set for a
/// 4096×14336 output).
pub fn poison<T: Element>(gpu: &Gpu, device: &mut CudaSlice<T>) -> Result<(), String> {
    use cudarc::driver::sys;
    let stream = gpu.stream();
    let len = device.len();
    let poison = T::POISON;
    let (ptr, _record) = device.device_ptr_mut(stream);
    // SAFETY: the pointer spans `len` elements of T, whose size picks the memset's width; the
    // pattern is T::POISON's bytes (T is plain data).
    let result = unsafe {
        match std::mem::size_of::<T>() {
            1 => sys::cuMemsetD8Async(ptr, std::ptr::read_unaligned(&poison as *const T as *const u8), len, stream.cu_stream()),
            2 => sys::cuMemsetD16Async(ptr, std::ptr::read_unaligned(&poison as *const T as *const u16), len, stream.cu_stream()),
            4 => sys::cuMemsetD32Async(ptr, std::ptr::read_unaligned(&poison as *const T as *const u32), len, stream.cu_stream()),
            size => return Err(format!("poisoning elements of {size} bytes: only 1, 2 and 4 are known")),
        }
    };
    result.result().map_err(|err| format!("poisoning an output: {err}"))
}

/// The device's L2 size in bytes, to size the rotation of input sets.
pub fn l2_bytes(gpu: &Gpu) -> Result<usize, String> {
    gpu.context()
        .attribute(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE)
        .map(|bytes| bytes.max(0) as usize)
        .map_err(|err| format!("reading the L2 size: {err}"))
}

/// Enough input sets of `bytes_per_set` that cycling through them overflows the L2 twice over,
/// at most 64: problems so small that 64 sets fit in the L2 run from it in any use.
pub fn rotation(gpu: &Gpu, bytes_per_set: usize) -> Result<usize, String> {
    Ok((2 * l2_bytes(gpu)?).div_ceil(bytes_per_set.max(1)).clamp(2, 64))
}

/// The least time the GPU runs the untimed calls before a timing. A GPU left idle while the
/// host made a problem's inputs drops its clocks (345 MHz seen on an idle H100), and a few
/// calls of a 25 µs kernel did not bring them back: one side of a ratio was then timed at up to
/// 3x its time (0.32-0.44 one-offs in the dispatch bench, records:docs/dispatch.md).
const MIN_WARMUP: Duration = Duration::from_millis(10);

/// Median time in milliseconds of `runs` calls of `run(i)` (i counting up, over `sets` input
/// sets), each between two CUDA events, after at least `warmup_calls` untimed calls, one on
/// every set and MIN_WARMUP of GPU time: a call remembers its plan by buffers, as a model's
/// repeated calls on the same weights and activations find it, so the timed calls see every
/// set planned, and the L2 still rotated.
pub fn median_ms(
    stream: &Arc<CudaStream>,
    warmup_calls: usize,
    runs: usize,
    sets: usize,
    mut run: impl FnMut(usize) -> Result<(), String>,
) -> Result<f64, String> {
    let [ms] = medians_ms(stream, warmup_calls, runs, sets, |i, _| run(i))?;
    Ok(ms)
}

/// `median_ms` of N sides at once, interleaved: round i calls `run(i, side)` for each side in
/// turn, so that every side sees the GPU's clocks and temperature of the same moments (timed
/// one after the other, a problem's second side ran on a GPU that the first had heated: 5-10%
/// on multi-millisecond problems). Each timed call follows an untimed call of its own side (on
/// the previous round's set, the coldest but its own), so that each side is timed in its own
/// steady state: timed right after the other side, a call pays for the lines the other left
/// dirty in the L2. A read-only kernel timed after a copy took 12% longer than after itself,
/// where the copy timed after it (nothing dirty) ran 4% faster than its own steady state
/// (cross_entropy, H200, 2026-11-30: docs/rowwise/NOTES.md, v12).
pub fn medians_ms<const N: usize>(
    stream: &Arc<CudaStream>,
    warmup_calls: usize,
    runs: usize,
    sets: usize,
    mut run: impl FnMut(usize, usize) -> Result<(), String>,
) -> Result<[f64; N], String> {
    let start = Instant::now();
    let mut warmup = 0;
    // Each round waited for, so that the clock reads the GPU's time: counted in enqueueing
    // time, 10 ms queued a thousand 0.5 ms calls, and tuning the default set took 50 s a
    // 4096x11008x4096 problem instead of 5.
    while warmup < warmup_calls.max(sets) || start.elapsed() < MIN_WARMUP {
        (0..N).try_for_each(|side| run(warmup, side))?;
        stream.synchronize().map_err(|e| format!("waiting for the warm-up calls: {e}"))?;
        warmup += 1;
    }
    // Made before timing: creating an event costs the host time the loop would add between
    // launches, which the GPU waits out when a launch is shorter.
    let flags = Some(CUevent_flags::CU_EVENT_DEFAULT);
    let event = || stream.context().new_event(flags).map_err(|e| format!("creating an event: {e}"));
    let pairs = (0..runs * N).map(|_| Ok((event()?, event()?))).collect::<Result<Vec<_>, String>>()?;
    for (i, (start, end)) in pairs.iter().enumerate() {
        let (round, side) = (warmup + i / N, i % N);
        if N > 1 {
            run(round - 1, side)?;
        }
        start.record(stream).map_err(|e| format!("recording an event: {e}"))?;
        run(round, side)?;
        end.record(stream).map_err(|e| format!("recording an event: {e}"))?;
    }
    stream.synchronize().map_err(|e| format!("waiting for the timed runs: {e}"))?;
    let mut times: [Vec<f64>; N] = std::array::from_fn(|_| Vec::with_capacity(runs));
    for (i, (start, end)) in pairs.iter().enumerate() {
        times[i % N].push(start.elapsed_ms(end).map(f64::from).map_err(|e| format!("reading an event: {e}"))?);
    }
    Ok(times.map(|mut side| {
        side.sort_by(f64::total_cmp);
        side[side.len() / 2]
    }))
}
