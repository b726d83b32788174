//! The baselines of GEMMs with a fused bias and activation: cuBLASLt with its own epilogue
//! (`CUBLASLT_EPILOGUE_GELU_BIAS` and kin), and cuBLAS followed by a separate bias + activation
//! kernel, compiled here with NVRTC. Both are planned once per problem, so that a timed call
//! is one enqueue, as ours is.

use super::cublas::Cublas;
use crate::{Activation, GemmShape};
use cudarc::cublaslt::result as lt;
use cudarc::cublaslt::sys::{self, cublasComputeType_t, cublasLtEpilogue_t, cublasLtMatmulDescAttributes_t as Attr, cudaDataType};
use cudarc::driver::{CudaFunction, CudaSlice, CudaStream, DevicePtr, DevicePtrMut, LaunchConfig, PushKernelArg};
use std::ffi::c_void;
use std::sync::Arc;
use tilesmith_runtime::{Dtype, Element, Gpu};

fn data_type(dtype: Dtype) -> Result<cudaDataType, String> {
    match dtype {
        Dtype::F32 => Ok(cudaDataType::CUDA_R_32F),
        Dtype::F16 => Ok(cudaDataType::CUDA_R_16F),
        Dtype::Bf16 => Ok(cudaDataType::CUDA_R_16BF),
        Dtype::E4m3 => Ok(cudaDataType::CUDA_R_8F_E4M3),
        Dtype::E5m2 => Ok(cudaDataType::CUDA_R_8F_E5M2),
        Dtype::I32 | Dtype::I64 | Dtype::U32 | Dtype::U8 => Err(format!("cuBLASLt's matrix products here take floats, not {dtype}")),
    }
}

/// cuBLASLt's epilogue for activation(A·B + bias), where it has one.
pub fn lt_epilogue(activation: Activation) -> Option<cublasLtEpilogue_t> {
    match activation.as_str() {
        "none" => Some(cublasLtEpilogue_t::CUBLASLT_EPILOGUE_BIAS),
        "relu" => Some(cublasLtEpilogue_t::CUBLASLT_EPILOGUE_RELU_BIAS),
        "gelu_tanh" => Some(cublasLtEpilogue_t::CUBLASLT_EPILOGUE_GELU_BIAS),
        _ => None,
    }
}

/// One cuBLASLt problem, C = act(A·B + bias) or C = A·B, in our row-major convention, with its
/// algorithm chosen once. cuBLASLt is column-major: it computes Cᵀ (N×M) = Bᵀ·Aᵀ, so our
/// per-column bias is its per-row one. 8-bit inputs accumulate in the tensor cores' own fp8
/// path (`CUBLASLT_MATMUL_DESC_FAST_ACCUM`), as ours do; A is of `T`, B of `TB`, C of `TC`.
pub struct LtGemm {
    handle: sys::cublasLtHandle_t,
    desc: sys::cublasLtMatmulDesc_t,
    layouts: [sys::cublasLtMatrixLayout_t; 3],
    algo: sys::cublasLtMatmulAlgo_t,
    workspace: CudaSlice<u8>,
}

impl LtGemm {
    pub fn new<T: Element, TC: Element, TB: Element>(
        gpu: &Gpu,
        shape: &GemmShape,
        fused: Option<(Activation, &CudaSlice<TC>)>,
    ) -> Result<LtGemm, String> {
        if !unsafe { sys::is_culib_present() } {
            return Err("libcublasLt could not be loaded (is the CUDA library folder on LD_LIBRARY_PATH?)".into());
        }
        let epilogue = match fused {
            Some((activation, _)) => lt_epilogue(activation).ok_or(format!("cuBLASLt has no epilogue for {activation:?}"))?,
            None => cublasLtEpilogue_t::CUBLASLT_EPILOGUE_DEFAULT,
        };
        fn err(what: &'static str) -> impl Fn(cudarc::cublaslt::result::CublasError) -> String {
            move |e| format!("cuBLASLt {what}: {e}")
        }
        // Allocated first, so that a failure leaves no handle behind.
        let workspace = gpu.stream().alloc_zeros::<u8>(32 << 20).map_err(|e| format!("cuBLASLt workspace: {e}"))?;
        let handle = lt::create_handle().map_err(err("handle"))?;
        let mut plan = LtGemm {
            handle,
            desc: std::ptr::null_mut(),
            layouts: [std::ptr::null_mut(); 3],
            algo: unsafe { std::mem::zeroed() },
            workspace,
        };
        let (ty, ty_b, out) = (data_type(T::DTYPE)?, data_type(TB::DTYPE)?, data_type(TC::DTYPE)?);
        let (m, n, k) = (shape.m as u64, shape.n as u64, shape.k as u64);
        // Its A is our B (N×K as it sees it), its B our A (K×M), its D our C (N×M).
        let trans_a = !shape.layout.b_row_major();
        let trans_b = !shape.layout.a_row_major();
        let a = if trans_a { (k, n) } else { (n, k) };
        let b = if trans_b { (m, k) } else { (k, m) };
        plan.layouts = [
            lt::create_matrix_layout(ty_b, a.0, a.1, shape.ldb as i64).map_err(err("layout"))?,
            lt::create_matrix_layout(ty, b.0, b.1, shape.lda as i64).map_err(err("layout"))?,
            lt::create_matrix_layout(out, n, m, shape.ldc as i64).map_err(err("layout"))?,
        ];
        plan.desc = lt::create_matmul_desc(cublasComputeType_t::CUBLAS_COMPUTE_32F, cudaDataType::CUDA_R_32F).map_err(err("descriptor"))?;
        let set = |attr: Attr, value: *const c_void, size: usize| unsafe { lt::set_matmul_desc_attribute(plan.desc, attr, value, size) };
        let (ta, tb) = (i32::from(trans_a), i32::from(trans_b));
        set(Attr::CUBLASLT_MATMUL_DESC_TRANSA, (&ta as *const i32).cast(), 4).map_err(err("transa"))?;
        set(Attr::CUBLASLT_MATMUL_DESC_TRANSB, (&tb as *const i32).cast(), 4).map_err(err("transb"))?;
        set(
            Attr::CUBLASLT_MATMUL_DESC_EPILOGUE,
            (&epilogue as *const cublasLtEpilogue_t).cast(),
            std::mem::size_of::<cublasLtEpilogue_t>(),
        )
        .map_err(err("epilogue"))?;
        if let Some((_, bias)) = fused {
            let (bias_ptr, _bias) = bias.device_ptr(gpu.stream());
            set(Attr::CUBLASLT_MATMUL_DESC_BIAS_POINTER, (&bias_ptr as *const u64).cast(), 8).map_err(err("bias"))?;
        }
        if T::DTYPE.size_bytes() == 1 {
            let fast = 1i8;
            set(Attr::CUBLASLT_MATMUL_DESC_FAST_ACCUM, (&fast as *const i8).cast(), 1).map_err(err("fast accumulation"))?;
        }
        let pref = lt::create_matmul_pref().map_err(err("preference"))?;
        let size = plan.workspace.len();
        let found = unsafe {
            lt::set_matmul_pref_attribute(
                pref,
                sys::cublasLtMatmulPreferenceAttributes_t::CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                (&size as *const usize).cast(),
                std::mem::size_of::<usize>(),
            )
            .and_then(|()| {
                let [la, lb, lc] = plan.layouts;
                lt::get_matmul_algo_heuristic(plan.handle, plan.desc, la, lb, lc, lc, pref)
            })
        };
        unsafe { lt::destroy_matmul_pref(pref) }.map_err(err("preference"))?;
        plan.algo = found.map_err(err("algorithm search"))?.algo;
        Ok(plan)
    }

    /// Enqueues one call on `stream`.
    pub fn run<T: Element, TC: Element, TB: Element>(
        &self,
        stream: &Arc<CudaStream>,
        a: &CudaSlice<T>,
        b: &CudaSlice<TB>,
        c: &mut CudaSlice<TC>,
    ) -> Result<(), String> {
        let (alpha, beta) = (1.0f32, 0.0f32);
        let (a_ptr, _a) = a.device_ptr(stream);
        let (b_ptr, _b) = b.device_ptr(stream);
        let (c_ptr, _c) = c.device_ptr_mut(stream);
        let (w_ptr, _w) = self.workspace.device_ptr(stream);
        let [la, lb, lc] = self.layouts;
        unsafe {
            lt::matmul(
                self.handle,
                self.desc,
                (&alpha as *const f32).cast(),
                (&beta as *const f32).cast(),
                b_ptr as *const c_void,
                la,
                a_ptr as *const c_void,
                lb,
                c_ptr as *const c_void,
                lc,
                c_ptr as *mut c_void,
                lc,
                &self.algo,
                w_ptr as *mut c_void,
                self.workspace.len(),
                stream.cu_stream() as sys::cudaStream_t,
            )
        }
        .map_err(|e| format!("cuBLASLt matmul: {e}"))
    }
}

impl Drop for LtGemm {
    fn drop(&mut self) {
        // Errors on teardown have nowhere to go; the handle's memory is freed either way.
        unsafe {
            for layout in self.layouts.into_iter().filter(|l| !l.is_null()) {
                let _ = lt::destroy_matrix_layout(layout);
            }
            if !self.desc.is_null() {
                let _ = lt::destroy_matmul_desc(self.desc);
            }
            let _ = lt::destroy_handle(self.handle);
        }
    }
}

/// C = act(C + bias) in place, 8 elements a thread, each row's bias per column; elements as
/// raw 16 or 32 bits, converted with PTX so that NVRTC needs no headers.
const BIAS_ACT_SOURCE: &str = r#"
__device__ float load(unsigned short x, int bf16) {
    if (bf16) return __uint_as_float((unsigned)x << 16);
    float f; asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(x)); return f;
}
__device__ unsigned short store(float f, int bf16) {
    unsigned short r;
    if (bf16) asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(r) : "f"(f));
    else asm("cvt.rn.f16.f32 %0, %1;" : "=h"(r) : "f"(f));
    return r;
}
__device__ float act(float x, int kind) {
    switch (kind) {
    case 1: return x < 0.0f ? 0.0f : x;
    case 2: { float t; asm("tanh.approx.f32 %0, %1;" : "=f"(t) : "f"(0.7978845608f * (x + 0.044715f * x * x * x))); return 0.5f * x * (1.0f + t); }
    case 3: return 0.5f * x * (1.0f + erff(x * 0.70710678f));
    case 4: return x / (1.0f + __expf(-x));
    default: return x;
    }
}
// rows x n, n a multiple of 8 and ldc too, C 16-byte aligned.
extern "C" __global__ void bias_act16(unsigned short* c, const unsigned short* bias, long long rows, int n, int ldc, int kind, int bf16) {
    const long long per_row = n / 8;
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < rows * per_row; i += (long long)gridDim.x * blockDim.x) {
        const long long row = i / per_row; const int col = (int)(i % per_row) * 8;
        uint4* p = reinterpret_cast<uint4*>(c + row * ldc + col);
        uint4 v = *p; const uint4 b = *reinterpret_cast<const uint4*>(bias + col);
        unsigned short* e = reinterpret_cast<unsigned short*>(&v);
        const unsigned short* be = reinterpret_cast<const unsigned short*>(&b);
        for (int j = 0; j < 8; ++j) e[j] = store(act(load(e[j], bf16) + load(be[j], bf16), kind), bf16);
        *p = v;
    }
}
"#;

/// cuBLAS's GEMM followed by a separate bias + activation kernel over C.
pub struct Unfused {
    cublas: Cublas,
    function: CudaFunction,
    kind: i32,
}

impl Unfused {
    pub fn new(gpu: &Gpu, dtype: Dtype, activation: Activation) -> Result<Unfused, String> {
        if dtype == Dtype::F32 {
            return Err("the separate bias + activation kernel takes 16-bit elements".into());
        }
        if !unsafe { cudarc::nvrtc::sys::is_culib_present() } {
            return Err("libnvrtc could not be loaded (is the CUDA library folder on LD_LIBRARY_PATH?)".into());
        }
        // The bf16 conversions need compute_80, above NVRTC's default; the driver JITs it for
        // any newer GPU.
        let options = cudarc::nvrtc::CompileOptions { arch: Some("compute_80"), ..Default::default() };
        let ptx = cudarc::nvrtc::compile_ptx_with_opts(BIAS_ACT_SOURCE, options).map_err(|e| format!("NVRTC: {e}"))?;
        let module = gpu.context().load_module(ptx).map_err(|e| format!("loading the bias kernel: {e}"))?;
        let function = module.load_function("bias_act16").map_err(|e| format!("loading the bias kernel: {e}"))?;
        // The kernel's `kind`, as its `act` numbers the activations.
        let Some(kind) = ["none", "relu", "gelu_tanh", "gelu_erf", "silu"].iter().position(|a| *a == activation.as_str()) else {
            return Err(format!("the separate bias + activation kernel has no {activation}"));
        };
        let kind = kind as i32;
        Ok(Unfused { cublas: Cublas::new(gpu)?, function, kind })
    }

    /// Enqueues the GEMM and the bias kernel; C's rows must allow 16-byte vectors, of 16-bit
    /// elements.
    pub fn run<T: Element, TC: Element, TB: Element>(
        &self,
        stream: &Arc<CudaStream>,
        shape: &GemmShape,
        a: &CudaSlice<T>,
        b: &CudaSlice<TB>,
        c: &mut CudaSlice<TC>,
        bias: &CudaSlice<TC>,
    ) -> Result<(), String> {
        if TC::DTYPE.size_bytes() != 2 {
            return Err(format!("the separate bias kernel takes 16-bit outputs, not {}", TC::DTYPE));
        }
        if !shape.n.is_multiple_of(8) || !shape.ldc.is_multiple_of(8) {
            return Err(format!("the separate bias kernel takes N and ldc in multiples of 8, got {} and {}", shape.n, shape.ldc));
        }
        self.cublas.gemm(stream, shape, a, b, c)?;
        let (rows, n, ldc, bf16) = (shape.m as i64, shape.n as i32, shape.ldc as i32, i32::from(TC::DTYPE == Dtype::Bf16));
        let vectors = (shape.m * shape.n / 8) as u32;
        let config =
            LaunchConfig { grid_dim: (vectors.div_ceil(256).clamp(1, 132 * 16), 1, 1), block_dim: (256, 1, 1), shared_mem_bytes: 0 };
        let mut launch = stream.launch_builder(&self.function);
        launch.arg(c).arg(bias).arg(&rows).arg(&n).arg(&ldc).arg(&self.kind).arg(&bf16);
        unsafe { launch.launch(config) }.map(drop).map_err(|e| format!("the bias kernel: {e}"))
    }
}
