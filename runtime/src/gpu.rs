//! One GPU: its context and stream, and the kernels loaded into it, each once, on first use.

use crate::error::{Context as _, Error};
use crate::kernel::Kernel;
use crate::plan::{runs_on, Arg, Launch, TensorMapArg};
use crate::Result;
use cudarc::driver::sys::{
    CUdevice_attribute, CUfunction, CUfunction_attribute, CUmodule, CUtensorMap, CUtensorMapDataType, CUtensorMapFloatOOBfill,
    CUtensorMapInterleave, CUtensorMapL2promotion, CUtensorMapSwizzle,
};
use cudarc::driver::{result, CudaContext, CudaStream, DriverError};
use tilesmith_spec::Dtype;
use std::collections::HashMap;
use std::ffi::{c_void, CString};
use std::sync::{Arc, Mutex};

/// Dynamic shared memory a block gets without opting in.
const DEFAULT_SMEM_LIMIT: u32 = 48 * 1024;

/// A GPU with its stream; every launch goes to that stream.
pub struct Gpu {
    ctx: Arc<CudaContext>,
    stream: Arc<CudaStream>,
    name: String,
    capability: (u32, u32),
    smem_opt_in: u32,
    sms: u32,
    loaded: Mutex<HashMap<String, Arc<Loaded>>>,
}

/// A kernel's module in this GPU's context.
struct Loaded {
    ctx: Arc<CudaContext>,
    module: CUmodule,
    function: CUfunction,
}

// The handles are plain driver handles, usable from any thread once the context is bound.
unsafe impl Send for Loaded {}
unsafe impl Sync for Loaded {}

impl Drop for Loaded {
    fn drop(&mut self) {
        if self.ctx.bind_to_thread().is_ok() {
            // Nothing to do with an error while tearing down.
            let _ = unsafe { result::module::unload(self.module) };
        }
    }
}

impl Gpu {
    /// Opens GPU `ordinal`. Without a CUDA driver or without a GPU this is an error value.
    pub fn new(ordinal: usize) -> Result<Gpu> {
        // cudarc panics when libcuda cannot be loaded, so look for it first.
        if !unsafe { cudarc::driver::sys::is_culib_present() } {
            return Err(Error::NoDriver("libcuda could not be loaded".into()));
        }
        let count = CudaContext::device_count().map_err(|err| Error::NoGpu(format!("the driver found none ({err})")))?;
        if ordinal >= count.max(0) as usize {
            return Err(Error::NoGpu(format!("GPU {ordinal} asked for, the driver sees {count}")));
        }
        let ctx = CudaContext::new(ordinal).during("creating a CUDA context")?;
        let (major, minor) = ctx.compute_capability().during("reading the compute capability")?;
        let name = ctx.name().during("reading the GPU's name")?;
        let smem_opt_in = ctx
            .attribute(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN)
            .during("reading the shared-memory limit")?;
        let sms = ctx.attribute(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT).during("reading the multiprocessor count")?;
        let stream = ctx.default_stream();
        Ok(Gpu {
            ctx,
            stream,
            name,
            capability: (major as u32, minor as u32),
            smem_opt_in: smem_opt_in as u32,
            sms: sms.max(1) as u32,
            loaded: Mutex::new(HashMap::new()),
        })
    }

    pub fn stream(&self) -> &Arc<CudaStream> {
        &self.stream
    }

    pub fn context(&self) -> &Arc<CudaContext> {
        &self.ctx
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// (major, minor), e.g. (9, 0) for an H100.
    pub fn capability(&self) -> (u32, u32) {
        self.capability
    }

    /// Its number of multiprocessors, which persistent kernels launch a block per.
    pub fn sms(&self) -> u32 {
        self.sms
    }

    /// Waits for the stream; errors a kernel raised surface here.
    pub fn synchronize(&self) -> Result<()> {
        self.stream.synchronize().during("waiting for the GPU")
    }

    /// The kernel's function in this context, loading its fatbin the first time.
    fn load(&self, kernel: &Kernel) -> Result<Arc<Loaded>> {
        let mut loaded = self.loaded.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Some(function) = loaded.get(kernel.name()) {
            return Ok(function.clone());
        }
        let entry = &kernel.info().entry;
        if !runs_on(&entry.targets, self.capability) {
            return Err(Error::NoCodeForDevice {
                name: kernel.name().to_string(),
                has: format!("SASS for {} and PTX for {}", entry.targets.sass.join(", "), entry.targets.ptx),
                device: self.name.clone(),
                major: self.capability.0,
                minor: self.capability.1,
            });
        }
        if entry.launch.dynamic_smem_bytes > self.smem_opt_in {
            return Err(Error::Refused {
                name: kernel.name().to_string(),
                rule: format!("it needs {} bytes of shared memory; {} allows {}", entry.launch.dynamic_smem_bytes, self.name, self.smem_opt_in),
            });
        }
        let bytes = std::fs::read(kernel.fatbin()).map_err(|err| Error::RegistryUnreadable {
            path: kernel.fatbin().to_path_buf(),
            reason: err.to_string(),
        })?;
        // cuModuleLoadData wants the image 8-byte aligned: copy it into u64 words.
        let mut image = vec![0u64; bytes.len().div_ceil(8)];
        unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), image.as_mut_ptr().cast::<u8>(), bytes.len()) };
        let what = format!("loading {} from {}", kernel.name(), kernel.fatbin().display());
        self.ctx.bind_to_thread().during(&what)?;
        let module = unsafe { result::module::load_data(image.as_ptr().cast::<c_void>()) }.during(&what)?;
        let symbol = CString::new(entry.entry.as_str()).map_err(|_| Error::Refused {
            name: kernel.name().to_string(),
            rule: "its entry symbol holds a NUL byte".into(),
        })?;
        // Owned from here on, so that an error below unloads the module again.
        let mut loaded_kernel = Loaded { ctx: self.ctx.clone(), module, function: std::ptr::null_mut() };
        loaded_kernel.function = unsafe { result::module::get_function(module, symbol) }
            .during(&format!("finding entry `{}` in {}", entry.entry, kernel.fatbin().display()))?;
        if entry.launch.dynamic_smem_bytes > DEFAULT_SMEM_LIMIT {
            unsafe {
                result::function::set_function_attribute(
                    loaded_kernel.function,
                    CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                    entry.launch.dynamic_smem_bytes as i32,
                )
            }
            .during(&format!("raising {}'s shared-memory limit", kernel.name()))?;
        }
        let loaded_kernel = Arc::new(loaded_kernel);
        loaded.insert(kernel.name().to_string(), loaded_kernel.clone());
        Ok(loaded_kernel)
    }

    /// Launches a kernel with the arguments its plan made from the manifest's parameter list.
    pub(crate) fn launch(&self, kernel: &Kernel, mut launch: Launch) -> Result<()> {
        let loaded = self.load(kernel)?;
        let mut maps: Vec<Box<CUtensorMap>> = Vec::new();
        for arg in &launch.args {
            if let Arg::TensorMap(map) = arg {
                maps.push(Box::new(encode(map).map_err(|source| Error::Cuda { what: format!("encoding a tensor map for {}", kernel.name()), source })?));
            }
        }
        let mut maps = maps.iter_mut();
        let mut params: Vec<*mut c_void> = launch
            .args
            .iter_mut()
            .map(|arg| match arg {
                Arg::Pointer(addr) => addr as *mut u64 as *mut c_void,
                Arg::I32(value) => value as *mut i32 as *mut c_void,
                Arg::TensorMap(_) => maps.next().map_or(std::ptr::null_mut(), |map| &mut **map as *mut CUtensorMap as *mut c_void),
            })
            .collect();
        let what = format!("launching {}", kernel.name());
        self.ctx.bind_to_thread().during(&what)?;
        let [gx, gy, gz] = launch.grid;
        let [bx, by, bz] = launch.block;
        unsafe {
            result::launch_kernel(loaded.function, (gx, gy, gz), (bx, by, bz), launch.dynamic_smem_bytes, self.stream.cu_stream(), &mut params)
        }
        .during(&what)
    }
}

/// The driver's tensor map for a checked [`TensorMapArg`]: TMA copies its boxes, zero-filling
/// what lies outside the tensor.
fn encode(map: &TensorMapArg) -> std::result::Result<CUtensorMap, DriverError> {
    let data_type = match map.dtype {
        Dtype::F16 => CUtensorMapDataType::CU_TENSOR_MAP_DATA_TYPE_FLOAT16,
        Dtype::Bf16 => CUtensorMapDataType::CU_TENSOR_MAP_DATA_TYPE_BFLOAT16,
        Dtype::F32 => CUtensorMapDataType::CU_TENSOR_MAP_DATA_TYPE_FLOAT32,
    };
    let swizzle = match map.swizzle_bytes {
        32 => CUtensorMapSwizzle::CU_TENSOR_MAP_SWIZZLE_32B,
        64 => CUtensorMapSwizzle::CU_TENSOR_MAP_SWIZZLE_64B,
        _ => CUtensorMapSwizzle::CU_TENSOR_MAP_SWIZZLE_128B,
    };
    let strides = [map.row_stride_bytes];
    let element_strides = [1u32, 1];
    let mut encoded = CUtensorMap { opaque: [0; 16] };
    unsafe {
        cudarc::driver::sys::cuTensorMapEncodeTiled(
            &mut encoded,
            data_type,
            2,
            map.addr as *mut c_void,
            map.dims.as_ptr(),
            strides.as_ptr(),
            map.box_.as_ptr(),
            element_strides.as_ptr(),
            CUtensorMapInterleave::CU_TENSOR_MAP_INTERLEAVE_NONE,
            swizzle,
            CUtensorMapL2promotion::CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
            CUtensorMapFloatOOBfill::CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE,
        )
        .result()?;
    }
    Ok(encoded)
}
