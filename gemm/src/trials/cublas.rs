//! cuBLAS's GEMM, the baseline and reference of GEMM variants.

use crate::GemmShape;
use cudarc::cublas::sys::{cublasComputeType_t, cublasGemmAlgo_t, cublasOperation_t, cudaDataType};
use cudarc::cublas::{result as blas, CudaBlas};
use cudarc::driver::{CudaSlice, CudaStream, DevicePtr, DevicePtrMut};
use std::ffi::c_void;
use std::sync::Arc;
use tilesmith_runtime::{Dtype, Element, Gpu};

/// cuBLAS for one GEMM shape in our row-major convention.
pub struct Cublas {
    blas: CudaBlas,
}

impl Cublas {
    pub fn new(gpu: &Gpu) -> Result<Cublas, String> {
        // cudarc panics when the library is missing, so look first.
        if !unsafe { cudarc::cublas::sys::is_culib_present() } {
            return Err("libcublas could not be loaded (is the CUDA library folder on LD_LIBRARY_PATH?)".into());
        }
        CudaBlas::new(gpu.stream().clone()).map(|blas| Cublas { blas }).map_err(|err| format!("creating a cuBLAS handle: {err}"))
    }

    /// C = A·B with f32 accumulation (no TF32 for f32: the handle keeps the default math mode);
    /// a batch through cublasGemmStridedBatchedEx.
    /// cuBLAS is column-major, so it computes Cᵀ = Bᵀ·Aᵀ: a row-major operand is a column-major
    /// one transposed.
    pub fn gemm<T: Element, TC: Element, TB: Element>(
        &self,
        stream: &Arc<CudaStream>,
        shape: &GemmShape,
        a: &CudaSlice<T>,
        b: &CudaSlice<TB>,
        c: &mut CudaSlice<TC>,
    ) -> Result<(), String> {
        let op = |row_major: bool| if row_major { cublasOperation_t::CUBLAS_OP_N } else { cublasOperation_t::CUBLAS_OP_T };
        let data_type = |dtype: Dtype| match dtype {
            Dtype::F32 => Ok(cudaDataType::CUDA_R_32F),
            Dtype::F16 => Ok(cudaDataType::CUDA_R_16F),
            Dtype::Bf16 => Ok(cudaDataType::CUDA_R_16BF),
            Dtype::E4m3 | Dtype::E5m2 => Err(format!("cuBLAS's GEMM takes no {dtype} (cuBLASLt does)")),
            Dtype::I32 | Dtype::I64 | Dtype::U32 | Dtype::U8 => Err(format!("cuBLAS's GEMM here takes floats, not {dtype}")),
        };
        if TB::DTYPE != T::DTYPE {
            return Err(format!("cuBLAS's GEMM takes A and B of one type, not {} and {}", T::DTYPE, TB::DTYPE));
        }
        let (data_type, out_type) = (data_type(T::DTYPE)?, data_type(TC::DTYPE)?);
        let (alpha, beta) = (1.0f32, 0.0f32);
        let (a_ptr, _a) = a.device_ptr(stream);
        let (b_ptr, _b) = b.device_ptr(stream);
        let (c_ptr, _c) = c.device_ptr_mut(stream);
        let dim = |d: usize| i32::try_from(d).map_err(|_| format!("{d} is too large for cuBLAS"));
        let stride = |d: usize| i64::try_from(d).map_err(|_| format!("{d} is too large for cuBLAS"));
        let (transa, transb) = (op(shape.layout.b_row_major()), op(shape.layout.a_row_major()));
        let (alpha, beta) = ((&alpha as *const f32).cast::<c_void>(), (&beta as *const f32).cast::<c_void>());
        let (compute, algo) = (cublasComputeType_t::CUBLAS_COMPUTE_32F, cublasGemmAlgo_t::CUBLAS_GEMM_DFALT);
        let handle = *self.blas.handle();
        let (a_ptr, b_ptr, c_ptr) = (a_ptr as *const c_void, b_ptr as *const c_void, c_ptr as *mut c_void);
        let [sa, sb, sc] = shape.batch.strides;
        unsafe {
            if shape.is_batched() {
                blas::gemm_strided_batched_ex(
                    handle,
                    transa,
                    transb,
                    dim(shape.n)?,
                    dim(shape.m)?,
                    dim(shape.k)?,
                    alpha,
                    b_ptr,
                    data_type,
                    dim(shape.ldb)?,
                    stride(sb)?,
                    a_ptr,
                    data_type,
                    dim(shape.lda)?,
                    stride(sa)?,
                    beta,
                    c_ptr,
                    out_type,
                    dim(shape.ldc)?,
                    stride(sc)?,
                    dim(shape.batch.count)?,
                    compute,
                    algo,
                )
            } else {
                blas::gemm_ex(
                    handle,
                    transa,
                    transb,
                    dim(shape.n)?,
                    dim(shape.m)?,
                    dim(shape.k)?,
                    alpha,
                    b_ptr,
                    data_type,
                    dim(shape.ldb)?,
                    a_ptr,
                    data_type,
                    dim(shape.lda)?,
                    beta,
                    c_ptr,
                    out_type,
                    dim(shape.ldc)?,
                    compute,
                    algo,
                )
            }
        }
        .map_err(|err| format!("cuBLAS: {err}"))
    }
}
