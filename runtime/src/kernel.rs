//! A kernel handle and its typed, checked launches.

use crate::error::Error;
use crate::gpu::Gpu;
use crate::plan::{plan_gemm, plan_transpose, Buffer, GemmShape, TransposeShape};
use crate::Result;
use cudarc::driver::{CudaSlice, DevicePtr, DevicePtrMut, DeviceRepr, ValidAsZeroBits};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use tilesmith_spec::{Built, Dtype, Kind, Layout, Variant};

/// An element type the kernels take.
pub trait Element: DeviceRepr + ValidAsZeroBits + Copy + Default + Send + Sync + std::fmt::Debug + 'static {
    const DTYPE: Dtype;
    /// A quiet NaN, to poison outputs with.
    const NAN: Self;
    fn from_f64(x: f64) -> Self;
    fn to_f64(self) -> f64;
}

impl Element for f32 {
    const DTYPE: Dtype = Dtype::F32;
    const NAN: f32 = f32::NAN;
    fn from_f64(x: f64) -> Self {
        x as f32
    }
    fn to_f64(self) -> f64 {
        f64::from(self)
    }
}

impl Element for half::f16 {
    const DTYPE: Dtype = Dtype::F16;
    const NAN: half::f16 = half::f16::NAN;
    fn from_f64(x: f64) -> Self {
        half::f16::from_f64(x)
    }
    fn to_f64(self) -> f64 {
        half::f16::to_f64(self)
    }
}

impl Element for half::bf16 {
    const DTYPE: Dtype = Dtype::Bf16;
    const NAN: half::bf16 = half::bf16::NAN;
    fn from_f64(x: f64) -> Self {
        half::bf16::from_f64(x)
    }
    fn to_f64(self) -> f64 {
        half::bf16::to_f64(self)
    }
}

/// The device buffers and shape of one GEMM call.
pub struct GemmArgs<'a, T> {
    pub a: &'a CudaSlice<T>,
    pub b: &'a CudaSlice<T>,
    pub c: &'a mut CudaSlice<T>,
    pub shape: GemmShape,
}

impl<'a, T> GemmArgs<'a, T> {
    /// Matrices stored without padding: leading dimensions equal to their row lengths.
    pub fn packed(a: &'a CudaSlice<T>, b: &'a CudaSlice<T>, c: &'a mut CudaSlice<T>, m: usize, n: usize, k: usize, layout: Layout) -> Self {
        GemmArgs { a, b, c, shape: GemmShape::packed(m, n, k, layout) }
    }
}

impl<T: Element> GemmArgs<'_, T> {
    /// The buffers' lengths and addresses, for choosing a variant: nothing is enqueued on them.
    pub(crate) fn buffers(&self, gpu: &Gpu) -> [Buffer; 3] {
        let stream = gpu.stream();
        let (a, _a) = self.a.device_ptr(stream);
        let (b, _b) = self.b.device_ptr(stream);
        let (c, _c) = self.c.device_ptr(stream);
        [Buffer { len: self.a.len(), addr: a }, Buffer { len: self.b.len(), addr: b }, Buffer { len: self.c.len(), addr: c }]
    }
}

/// The device buffers and shape of one transpose call.
pub struct TransposeArgs<'a, T> {
    pub x: &'a CudaSlice<T>,
    pub y: &'a mut CudaSlice<T>,
    pub shape: TransposeShape,
}

/// A variant in the registry: its manifest data, and its fatbin, loaded on first launch.
#[derive(Clone, Debug)]
pub struct Kernel {
    built: Arc<Built>,
    fatbin: PathBuf,
}

impl Kernel {
    pub(crate) fn new(built: Arc<Built>, fatbin: PathBuf) -> Kernel {
        Kernel { built, fatbin }
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

    pub fn fatbin(&self) -> &Path {
        &self.fatbin
    }

    /// The GEMM layout this kernel computes.
    pub fn layout(&self) -> Result<Layout> {
        match self.variant().kind {
            Kind::Gemm { layout, .. } => Ok(layout),
            Kind::Transpose { .. } => Err(self.refused("it is a transpose kernel and has no GEMM layout".into())),
        }
    }

    fn refused(&self, rule: String) -> Error {
        Error::Refused { name: self.name().to_string(), rule }
    }

    /// Enqueues C = A·B on the GPU's stream, after checking every argument against the manifest.
    pub fn gemm<T: Element>(&self, gpu: &Gpu, args: GemmArgs<'_, T>) -> Result<()> {
        let stream = gpu.stream();
        let (a, _a_sync) = args.a.device_ptr(stream);
        let (b, _b_sync) = args.b.device_ptr(stream);
        let c_len = args.c.len();
        let (c, _c_sync) = args.c.device_ptr_mut(stream);
        let buffers = [Buffer { len: args.a.len(), addr: a }, Buffer { len: args.b.len(), addr: b }, Buffer { len: c_len, addr: c }];
        self.gemm_buffers(gpu, T::DTYPE, &args.shape, buffers)
    }

    /// As [`Kernel::gemm`], on buffers the caller holds on the GPU's stream.
    pub(crate) fn gemm_buffers(&self, gpu: &Gpu, dtype: Dtype, shape: &GemmShape, buffers: [Buffer; 3]) -> Result<()> {
        match plan_gemm(&self.built, dtype, shape, buffers, gpu.sms()).map_err(|rule| self.refused(rule))? {
            Some(launch) => gpu.launch(&self.built, &self.fatbin, launch),
            None => Ok(()),
        }
    }

    /// Enqueues Y = Xᵀ on the GPU's stream, after checking every argument against the manifest.
    pub fn transpose<T: Element>(&self, gpu: &Gpu, args: TransposeArgs<'_, T>) -> Result<()> {
        let stream = gpu.stream();
        let (x, _x_sync) = args.x.device_ptr(stream);
        let y_len = args.y.len();
        let (y, _y_sync) = args.y.device_ptr_mut(stream);
        let buffers = [Buffer { len: args.x.len(), addr: x }, Buffer { len: y_len, addr: y }];
        self.transpose_buffers(gpu, T::DTYPE, &args.shape, buffers)
    }

    /// As [`Kernel::transpose`], on buffers the caller holds on the GPU's stream.
    pub(crate) fn transpose_buffers(&self, gpu: &Gpu, dtype: Dtype, shape: &TransposeShape, buffers: [Buffer; 2]) -> Result<()> {
        match plan_transpose(&self.built, dtype, shape, buffers, gpu.sms()).map_err(|rule| self.refused(rule))? {
            Some(launch) => gpu.launch(&self.built, &self.fatbin, launch),
            None => Ok(()),
        }
    }
}
