//! The typed arguments of GEMM and transpose calls: CUDA buffers, a shape and an epilogue.

use crate::plan::family_values;
use crate::shape::{Activation, EpilogueArgs, GemmShape, TransposeShape};
use cudarc::driver::{CudaSlice, CudaStream, DevicePtr, DevicePtrMut, SyncOnDrop};
use std::sync::Arc;
use tilesmith_runtime::{Buffer, CallBuilder, Element, Gpu, Target};
use tilesmith_spec::{Dtype, Layout};

/// A GEMM's epilogue: C = activation(α·A·B + β·C + bias[col] + row_bias[row]), in f32 before
/// the one rounding to C's type. The default is C = A·B. Variants of the GEMM family's
/// `epilogue` axis apply it; the others refuse anything but the default.
#[derive(Clone, Copy, Debug)]
pub struct Epilogue<'a, T> {
    pub activation: Activation,
    pub alpha: f32,
    /// With β = 0, C is not read (it may hold NaNs).
    pub beta: f32,
    /// One per column of C: N elements.
    pub bias: Option<&'a CudaSlice<T>>,
    /// One per row of C: M elements.
    pub row_bias: Option<&'a CudaSlice<T>>,
    /// The per-tensor scales of 8-bit A and B: the product is scale_a·scale_b·A·B. Variants of
    /// 16-bit inputs take only 1.
    pub scale_a: f32,
    pub scale_b: f32,
}

impl<T> Default for Epilogue<'_, T> {
    fn default() -> Self {
        Epilogue { activation: Activation::NONE, alpha: 1.0, beta: 0.0, bias: None, row_bias: None, scale_a: 1.0, scale_b: 1.0 }
    }
}

impl<'a, T> Epilogue<'a, T> {
    /// activation(A·B + bias), nn.Linear's bias followed by an activation.
    pub fn bias(activation: Activation, bias: &'a CudaSlice<T>) -> Self {
        Epilogue { activation, bias: Some(bias), ..Epilogue::default() }
    }

    /// scale_a·scale_b·A·B: 8-bit inputs quantized with one scale per tensor.
    pub fn scaled(scale_a: f32, scale_b: f32) -> Self {
        Epilogue { scale_a, scale_b, ..Epilogue::default() }
    }
}

impl<T: Element> Epilogue<'_, T> {
    /// As the checks see it, for A of `input` and B of `b`, with the biases' lengths and
    /// addresses, and the guards that keep the biases ordered on `stream` until they drop (after
    /// the launch is enqueued).
    pub(crate) fn held<'s>(&'s self, stream: &'s Arc<CudaStream>, input: Dtype, b: Dtype) -> (EpilogueArgs, Vec<SyncOnDrop<'s>>) {
        let mut guards = Vec::new();
        let mut buffer = |slice: Option<&'s CudaSlice<T>>| {
            slice.map(|s| {
                let (addr, guard) = s.device_ptr(stream);
                guards.push(guard);
                Buffer { len: s.len(), addr }
            })
        };
        let (bias, row_bias) = (buffer(self.bias), buffer(self.row_bias));
        let out = (T::DTYPE != input).then_some(T::DTYPE);
        let b = (b != input).then_some(b);
        let scales = [self.scale_a, self.scale_b];
        (EpilogueArgs { activation: self.activation, alpha: self.alpha, beta: self.beta, bias, row_bias, out, b, scales }, guards)
    }
}

/// The device buffers, shape and epilogue of one GEMM call: A of `T`, B of `TB` (A's type
/// unless a variant's `b_dtype` axis says otherwise: e4m3 by e5m2), C and its biases of `TC`
/// (the inputs' type unless a variant's `out` axis says otherwise: e4m3 in, bf16 out).
pub struct GemmArgs<'a, T, TC = T, TB = T> {
    pub a: &'a CudaSlice<T>,
    pub b: &'a CudaSlice<TB>,
    pub c: &'a mut CudaSlice<TC>,
    pub shape: GemmShape,
    pub epilogue: Epilogue<'a, TC>,
}

impl<'a, T, TC, TB> GemmArgs<'a, T, TC, TB> {
    /// Matrices stored without padding: leading dimensions equal to their row lengths.
    pub fn packed(
        a: &'a CudaSlice<T>,
        b: &'a CudaSlice<TB>,
        c: &'a mut CudaSlice<TC>,
        m: usize,
        n: usize,
        k: usize,
        layout: Layout,
    ) -> Self {
        GemmArgs::new(a, b, c, GemmShape::packed(m, n, k, layout))
    }

    /// C = A·B with this shape (leading dimensions included).
    pub fn new(a: &'a CudaSlice<T>, b: &'a CudaSlice<TB>, c: &'a mut CudaSlice<TC>, shape: GemmShape) -> Self {
        GemmArgs { a, b, c, shape, epilogue: Epilogue::default() }
    }

    /// The same call with this epilogue.
    pub fn with_epilogue(self, epilogue: Epilogue<'a, TC>) -> Self {
        GemmArgs { epilogue, ..self }
    }
}

impl<'a, T: Element, TC: Element, TB: Element> GemmArgs<'a, T, TC, TB> {
    /// This call bound by the family's names on `call` (`registry.family("gemm")?.call(&gpu)`),
    /// its layout and activation as axes: the call `registry.gemm` picks for.
    pub fn bind<X: Target>(self, call: CallBuilder<'a, X>) -> CallBuilder<'a, X> {
        let e = self.epilogue;
        let mut call = call.operand("a", self.a).operand("b", self.b).operand_mut("c", self.c);
        for (name, bias) in [("bias", e.bias), ("row_bias", e.row_bias)] {
            if let Some(bias) = bias {
                call = call.operand(name, bias);
            }
        }
        call.values(&family_values(&self.shape, e.activation, e.alpha, e.beta, [e.scale_a, e.scale_b]))
    }

    /// A, B and C and the epilogue as the checks see them, with the guards that keep every
    /// buffer ordered on `stream` until they drop (after the launches are enqueued): the one
    /// place a GEMM call's operands are pinned.
    pub(crate) fn pinned<'s>(&'s mut self, stream: &'s Arc<CudaStream>) -> ([Buffer; 3], EpilogueArgs, Vec<SyncOnDrop<'s>>) {
        let (epilogue, mut guards) = self.epilogue.held(stream, T::DTYPE, TB::DTYPE);
        let (a, a_guard) = self.a.device_ptr(stream);
        let (b, b_guard) = self.b.device_ptr(stream);
        let c_len = self.c.len();
        let (c, c_guard) = self.c.device_ptr_mut(stream);
        guards.extend([a_guard, b_guard, c_guard]);
        let buffers = [Buffer { len: self.a.len(), addr: a }, Buffer { len: self.b.len(), addr: b }, Buffer { len: c_len, addr: c }];
        (buffers, epilogue, guards)
    }

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
