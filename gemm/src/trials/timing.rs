//! Timed problems: inputs made once, rotated over sets larger than the L2, and timed for
//! kernels and baselines alike, each the median of RUNS event-timed launches after WARMUP.
//! Every timed kernel result is spot checked, so a fast wrong kernel fails.

use super::cublas::Cublas;
use super::fused::{LtGemm, Unfused};
use super::host::{activate, Operands};
use crate::{Activation, Choice, Epilogue, GemmArgs, GemmKernel, GemmRegistry, GemmShape, Workspace};
use cudarc::driver::CudaSlice;
use rand::Rng;
use tilesmith_runtime::{Element, Gpu, Kernel, Registry};
use tilesmith_trials::device::{download, median_ms, medians_ms, poison, rotation, upload};
use tilesmith_trials::host::{random, relative_error};
use tilesmith_trials::report::Record;

const WARMUP: usize = 5;
const RUNS: usize = 25;

/// The library a GEMM is timed beside: cuBLAS, or cuBLASLt for 8-bit inputs (cuBLAS's GEMM
/// takes none).
enum Library {
    Cublas(Cublas),
    Lt(LtGemm),
}

impl Library {
    fn run<T: Element, TC: Element, TB: Element>(
        &self,
        gpu: &Gpu,
        shape: &GemmShape,
        a: &CudaSlice<T>,
        b: &CudaSlice<TB>,
        c: &mut CudaSlice<TC>,
    ) -> Result<(), String> {
        match self {
            Library::Cublas(cublas) => cublas.gemm(gpu.stream(), shape, a, b, c),
            Library::Lt(lt) => lt.run(gpu.stream(), a, b, c),
        }
    }
}

/// One GEMM problem, ready to time: A of `T`, B of `TB`, outputs of `TC`.
pub struct GemmCase<T: Element, TC: Element = T, TB: Element = T> {
    pub shape: GemmShape,
    a: Vec<T>,
    b: Vec<TB>,
    inputs: Vec<(CudaSlice<T>, CudaSlice<TB>)>,
    outputs: Vec<CudaSlice<TC>>,
    library: Option<Library>,
    /// Largest relative error the spot check allows: the family's declared tolerance.
    tolerance: f64,
    /// What the timed calls fuse: activation(A·B + bias), the bias on the host and the GPU.
    pub bias_activation: Option<(Activation, Vec<TC>, CudaSlice<TC>)>,
}

impl<T: Element, TC: Element, TB: Element> GemmCase<T, TC, TB> {
    pub fn new(gpu: &Gpu, shape: GemmShape, tolerance: f64) -> Result<Self, String> {
        let [a_len, b_len, c_len] = shape.spans();
        let (a, b) = (random::<T>(a_len), random::<TB>(b_len));
        let size = |dtype: tilesmith_runtime::Dtype| dtype.size_bytes() as usize;
        let bytes = a_len * size(T::DTYPE) + b_len * size(TB::DTYPE) + c_len * size(TC::DTYPE);
        let sets = rotation(gpu, bytes)?;
        let mut inputs = Vec::with_capacity(sets);
        let mut outputs = Vec::with_capacity(sets);
        for _ in 0..sets {
            inputs.push((upload(gpu, &a)?, upload(gpu, &b)?));
            outputs.push(gpu.stream().alloc_zeros::<TC>(c_len).map_err(|e| format!("allocating C: {e}"))?);
        }
        Ok(GemmCase { shape, a, b, inputs, outputs, library: None, tolerance, bias_activation: None })
    }

    /// Whether the baseline is cuBLASLt: cuBLAS's GEMM takes no 8-bit inputs.
    fn lt_baseline() -> bool {
        T::DTYPE.size_bytes() == 1
    }

    /// The baseline's name in records.
    pub fn baseline_name() -> &'static str {
        if Self::lt_baseline() {
            "cuBLASLt"
        } else {
            "cuBLAS"
        }
    }

    /// The same problem with activation(A·B + bias) fused, a random bias of N elements.
    pub fn with_bias_activation(mut self, gpu: &Gpu, activation: Activation) -> Result<Self, String> {
        let bias = random::<TC>(self.shape.n);
        let device = upload(gpu, &bias)?;
        self.bias_activation = Some((activation, bias, device));
        Ok(self)
    }

    fn flops(&self) -> f64 {
        2.0 * (self.shape.batch.count * self.shape.m * self.shape.n * self.shape.k) as f64
    }

    /// The shape as records state it: M, N, K, after the problem count of a batch.
    fn dims(&self) -> Vec<usize> {
        let s = self.shape;
        let batch = s.is_batched().then_some(s.batch.count);
        batch.into_iter().chain([s.m, s.n, s.k]).collect()
    }

    /// Median milliseconds of the kernel, whose last result is then spot checked.
    pub fn time_kernel(&mut self, gpu: &Gpu, kernel: &Kernel) -> Result<f64, String> {
        self.time(gpu, WARMUP, RUNS, |args| kernel.gemm(gpu, args).map_err(|err| err.to_string()))
    }

    /// Median milliseconds of a dispatcher's choice (a variant, directly or padded), spot checked.
    pub fn time_choice(
        &mut self,
        gpu: &Gpu,
        choice: &Choice,
        workspace: &mut Workspace,
        warmup: usize,
        runs: usize,
    ) -> Result<f64, String> {
        self.time(gpu, warmup, runs, |args| choice.run(gpu, args, workspace).map_err(|err| err.to_string()))
    }

    /// Median milliseconds of the registry's `gemm` call, picking its variant, spot checked.
    pub fn time_dispatch(&mut self, gpu: &Gpu, registry: &Registry, workspace: &mut Workspace) -> Result<f64, String> {
        self.time(gpu, WARMUP, RUNS, |args| registry.gemm(gpu, args, workspace).map(drop).map_err(|err| err.to_string()))
    }

    /// Mean microseconds of CPU time the registry's `gemm` call takes (choosing, planning,
    /// enqueueing), over HOST_CALLS calls enqueued back to back, fewer than a stream queues.
    fn host_us(&mut self, gpu: &Gpu, registry: &Registry, workspace: &mut Workspace) -> Result<f64, String> {
        const HOST_CALLS: usize = 64;
        self.poison_outputs(gpu)?;
        let epilogue = fused(&self.bias_activation);
        let (shape, sets) = (self.shape, self.inputs.len());
        let (inputs, outputs) = (&self.inputs, &mut self.outputs);
        gpu.synchronize().map_err(|err| err.to_string())?;
        let start = std::time::Instant::now();
        for i in 0..HOST_CALLS {
            let (a, b) = &inputs[i % sets];
            registry
                .gemm(gpu, GemmArgs::new(a, b, &mut outputs[i % sets], shape).with_epilogue(epilogue), workspace)
                .map_err(|err| err.to_string())?;
        }
        let host = start.elapsed();
        gpu.synchronize().map_err(|err| err.to_string())?;
        self.spot_check(gpu)?;
        Ok(host.as_secs_f64() * 1e6 / HOST_CALLS as f64)
    }

    /// As [`GemmCase::host_us`], for the baseline library's enqueue (cuBLAS's, cuBLASLt's) on
    /// the same inputs.
    fn library_host_us(&mut self, gpu: &Gpu) -> Result<f64, String> {
        const HOST_CALLS: usize = 64;
        self.open_library(gpu)?;
        let (shape, sets) = (self.shape, self.inputs.len());
        let (inputs, outputs, library) = (&self.inputs, &mut self.outputs, self.library.as_ref().expect("opened above"));
        gpu.synchronize().map_err(|err| err.to_string())?;
        let start = std::time::Instant::now();
        for i in 0..HOST_CALLS {
            let (a, b) = &inputs[i % sets];
            library.run(gpu, &shape, a, b, &mut outputs[i % sets])?;
        }
        let host = start.elapsed();
        gpu.synchronize().map_err(|err| err.to_string())?;
        Ok(host.as_secs_f64() * 1e6 / HOST_CALLS as f64)
    }

    fn time(
        &mut self,
        gpu: &Gpu,
        warmup: usize,
        runs: usize,
        mut launch: impl FnMut(GemmArgs<'_, T, TC, TB>) -> Result<(), String>,
    ) -> Result<f64, String> {
        let (shape, sets) = (self.shape, self.inputs.len());
        self.poison_outputs(gpu)?;
        let epilogue = fused(&self.bias_activation);
        let (inputs, outputs) = (&self.inputs, &mut self.outputs);
        let ms = median_ms(gpu.stream(), warmup, runs, sets, |i| {
            let (a, b) = &inputs[i % sets];
            launch(GemmArgs::new(a, b, &mut outputs[i % sets], shape).with_epilogue(epilogue))
        })?;
        self.spot_check(gpu)?;
        Ok(ms)
    }

    /// Median milliseconds of cuBLAS (cuBLASLt for 8-bit inputs) on the same inputs.
    pub fn time_cublas(&mut self, gpu: &Gpu) -> Result<f64, String> {
        self.time_cublas_runs(gpu, WARMUP, RUNS)
    }

    pub fn time_cublas_runs(&mut self, gpu: &Gpu, warmup: usize, runs: usize) -> Result<f64, String> {
        self.open_library(gpu)?;
        let (shape, sets) = (self.shape, self.inputs.len());
        let (inputs, outputs, library) = (&self.inputs, &mut self.outputs, self.library.as_ref().expect("opened above"));
        median_ms(gpu.stream(), warmup, runs, sets, |i| {
            let (a, b) = &inputs[i % sets];
            library.run(gpu, &shape, a, b, &mut outputs[i % sets])
        })
    }

    /// Median milliseconds of the registry's `gemm` call and of the baseline library, timed in
    /// turns, the library on the input set half a rotation from the call's, so that neither
    /// finds the other's inputs in the L2 ([`GemmCase::in_turns`]).
    pub fn time_dispatch_beside_baseline(
        &mut self,
        gpu: &Gpu,
        registry: &Registry,
        workspace: &mut Workspace,
    ) -> Result<(f64, f64), String> {
        self.open_library(gpu)?;
        let library = self.library.take().expect("opened above");
        let half = self.inputs.len() / 2;
        let timed = self.in_turns(gpu, registry, workspace, half, |args| library.run(gpu, &args.shape, args.a, args.b, args.c));
        self.library = Some(library);
        let [ours, baseline] = timed?;
        Ok((ours, baseline))
    }

    /// Median milliseconds of the registry's `gemm` call and of `fastest` run directly on the
    /// same sets, timed in turns ([`GemmCase::in_turns`]).
    pub fn time_dispatch_beside(
        &mut self,
        gpu: &Gpu,
        registry: &Registry,
        workspace: &mut Workspace,
        fastest: &Choice,
    ) -> Result<[f64; 2], String> {
        let mut own = Workspace::new();
        self.in_turns(gpu, registry, workspace, 0, |args| fastest.run(gpu, args, &mut own).map_err(|err| err.to_string()))
    }

    /// Median milliseconds of the registry's `gemm` call and of `other`, timed in turns
    /// (`medians_ms`) so that the two see the GPU at the same moments, `other` on the input set
    /// `offset` sets from the call's. The call's result is spot checked after one more call on
    /// the poisoned first set, which `other` may have written last.
    fn in_turns(
        &mut self,
        gpu: &Gpu,
        registry: &Registry,
        workspace: &mut Workspace,
        offset: usize,
        mut other: impl FnMut(GemmArgs<'_, T, TC, TB>) -> Result<(), String>,
    ) -> Result<[f64; 2], String> {
        let (shape, sets) = (self.shape, self.inputs.len());
        let epilogue = fused(&self.bias_activation);
        let (inputs, outputs) = (&self.inputs, &mut self.outputs);
        let ms = medians_ms(gpu.stream(), WARMUP, RUNS, sets, |i, side| {
            let set = (i + side * offset) % sets;
            let (a, b) = &inputs[set];
            let args = GemmArgs::new(a, b, &mut outputs[set], shape).with_epilogue(epilogue);
            match side {
                0 => registry.gemm(gpu, args, workspace).map(drop).map_err(|err| err.to_string()),
                _ => other(args),
            }
        })?;
        poison(gpu, &mut self.outputs[0])?;
        let (a, b) = &self.inputs[0];
        let args = GemmArgs::new(a, b, &mut self.outputs[0], shape).with_epilogue(fused(&self.bias_activation));
        registry.gemm(gpu, args, workspace).map_err(|err| err.to_string())?;
        self.spot_check(gpu)?;
        Ok(ms)
    }

    /// The baseline library, opened on first use.
    fn open_library(&mut self, gpu: &Gpu) -> Result<(), String> {
        if self.library.is_none() {
            self.library = Some(if Self::lt_baseline() {
                if self.shape.is_batched() {
                    return Err("the cuBLASLt baseline of 8-bit inputs times single problems".into());
                }
                Library::Lt(LtGemm::new::<T, TC, TB>(gpu, &self.shape, None)?)
            } else {
                Library::Cublas(Cublas::new(gpu)?)
            });
        }
        Ok(())
    }

    /// Median milliseconds of a fused-epilogue baseline on the same inputs and bias:
    /// cuBLASLt's own epilogue, or cuBLAS and a separate kernel; its last result spot checked.
    pub fn time_fused_baseline(&mut self, gpu: &Gpu, baseline: &FusedBaseline) -> Result<f64, String> {
        let (shape, sets) = (self.shape, self.inputs.len());
        self.poison_outputs(gpu)?;
        let Some((_, _, bias)) = &self.bias_activation else { return Err("the problem fuses no bias and activation".into()) };
        let (inputs, outputs) = (&self.inputs, &mut self.outputs);
        let ms = median_ms(gpu.stream(), WARMUP, RUNS, sets, |i| {
            let (a, b) = &inputs[i % sets];
            match baseline {
                FusedBaseline::Lt(lt) => lt.run(gpu.stream(), a, b, &mut outputs[i % sets]),
                FusedBaseline::Unfused(unfused) => unfused.run(gpu.stream(), &shape, a, b, &mut outputs[i % sets], bias),
            }
        })?;
        self.spot_check(gpu)?;
        Ok(ms)
    }

    /// NaN in every output set, so that the spot check after a timing catches what it left unwritten.
    fn poison_outputs(&mut self, gpu: &Gpu) -> Result<(), String> {
        self.outputs.iter_mut().try_for_each(|output| poison(gpu, output))
    }

    /// Compares 256 random elements of the first output set, 16 in each of 16 random rows (of
    /// random problems of a batch), with float64 dot products. Only those rows are copied back:
    /// the whole output was most of a large problem's time in `tune`.
    fn spot_check(&self, gpu: &Gpu) -> Result<(), String> {
        let [sa, sb, sc] = self.shape.batch.strides;
        let mut rng = rand::rng();
        let (mut got, mut want) = (Vec::new(), Vec::new());
        for _ in 0..16 {
            let p = rng.random_range(0..self.shape.batch.count);
            let i = rng.random_range(0..self.shape.m);
            let start = p * sc + i * self.shape.ldc;
            let row = download(gpu, &self.outputs[0].slice(start..start + self.shape.n))?;
            let operands = Operands { shape: self.shape, a: &self.a[p * sa..], b: &self.b[p * sb..] };
            for _ in 0..16 {
                let j = rng.random_range(0..self.shape.n);
                got.push(row[j].to_f64());
                want.push(match &self.bias_activation {
                    Some((activation, bias, _)) => activate(*activation, operands.c(i, j) + bias[j].to_f64()),
                    None => operands.c(i, j),
                });
            }
        }
        let error = relative_error(&got, &want);
        let tolerance = self.tolerance;
        if error > tolerance {
            return Err(format!("the timed result is wrong: relative error {error:.3e} on 256 sampled elements (allowed {tolerance:.0e})"));
        }
        Ok(())
    }

    /// Times the registry's `gemm` call and reports it beside the baseline, named
    /// `dispatch:<pick>`: beside `baseline_ms` where given, else beside the library, timed in
    /// turns with it (`time_dispatch_beside_baseline`).
    pub fn record_dispatch(
        &mut self,
        gpu: &Gpu,
        registry: &Registry,
        workspace: &mut Workspace,
        baseline_ms: Option<f64>,
    ) -> Result<Record, String> {
        let choice = {
            let GemmCase { inputs, outputs, bias_activation, shape, .. } = self;
            let args = GemmArgs::new(&inputs[0].0, &inputs[0].1, &mut outputs[0], *shape).with_epilogue(fused(bias_activation));
            registry.choose_gemm(gpu, &args).map_err(|err| err.to_string())?
        };
        let (ms, baseline_ms) = match baseline_ms {
            Some(baseline_ms) => (self.time_dispatch(gpu, registry, workspace)?, baseline_ms),
            None => self.time_dispatch_beside_baseline(gpu, registry, workspace)?,
        };
        let tera = |ms: f64| self.flops() / (ms * 1e-3) / 1e12;
        let s = self.shape;
        let mut record = Record::new(
            &choice.kernel,
            gpu,
            self.dims(),
            "TFLOP/s",
            ms,
            tera(ms),
            Self::baseline_name(),
            baseline_ms,
            tera(baseline_ms),
            self.inputs.len(),
        );
        record.variant = format!("dispatch:{}", choice.label());
        // The call's layout: a padded pick's kernel may run in another.
        record.group = s.layout.to_string();
        record.host_us = Some(self.host_us(gpu, registry, workspace)?);
        record.baseline_host_us = Some(self.library_host_us(gpu)?);
        Ok(record)
    }

    /// Times the kernel and reports it beside the baseline's `baseline_ms`.
    pub fn record(&mut self, gpu: &Gpu, kernel: &Kernel, baseline_ms: f64) -> Result<Record, String> {
        let kernel_ms = self.time_kernel(gpu, kernel)?;
        let tera = |ms: f64| self.flops() / (ms * 1e-3) / 1e12;
        Ok(Record::new(
            kernel,
            gpu,
            self.dims(),
            "TFLOP/s",
            kernel_ms,
            tera(kernel_ms),
            Self::baseline_name(),
            baseline_ms,
            tera(baseline_ms),
            self.inputs.len(),
        ))
    }
}

/// The epilogue of timed calls fusing activation(A·B + bias), or none.
fn fused<TC>(bias_activation: &Option<(Activation, Vec<TC>, CudaSlice<TC>)>) -> Epilogue<'_, TC> {
    match bias_activation {
        Some((activation, _, bias)) => Epilogue::bias(*activation, bias),
        None => Epilogue::default(),
    }
}

/// A baseline for activation(A·B + bias).
pub enum FusedBaseline {
    /// cuBLASLt with its own epilogue.
    Lt(LtGemm),
    /// cuBLAS, then a separate bias + activation kernel.
    Unfused(Unfused),
}

impl FusedBaseline {
    pub fn name(&self) -> &'static str {
        match self {
            FusedBaseline::Lt(_) => "cuBLASLt fused",
            FusedBaseline::Unfused(_) => "cuBLAS + bias kernel",
        }
    }
}
