//! One GPU: its context and stream, and the kernels loaded into it, each once, on first use.

use crate::error::{Context as _, Error};
use crate::fatbin::Fatbin;
use crate::plan::{runs_on, Arg, Launch, OffsetsCheck, TensorMapArg};
use crate::Result;
use cudarc::driver::sys::{
    self, CUdevice_attribute, CUfunction_attribute, CUlaunchAttribute, CUlaunchAttributeID, CUlaunchAttributeValue,
    CUlaunchAttributeValue_union__bindgen_ty_1, CUlaunchConfig, CUtensorMap, CUtensorMapDataType, CUtensorMapFloatOOBfill,
    CUtensorMapInterleave, CUtensorMapL2promotion, CUtensorMapSwizzle,
};
use cudarc::driver::{CudaContext, CudaFunction, CudaSlice, CudaStream, DevicePtr, DriverError, PinnedHostSlice};
use cudarc::nvrtc::Ptx;
use std::collections::HashMap;
use std::ffi::c_void;
use std::sync::{Arc, Mutex};
use tilesmith_spec::launch::PORTABLE_CLUSTER_BLOCKS;
use tilesmith_spec::tuning::{Clocks, Device};
use tilesmith_spec::{Built, Dtype};

/// Dynamic shared memory a block gets without opting in.
const DEFAULT_SMEM_LIMIT: u32 = 48 * 1024;

/// The SM clock and DRAM bandwidth the driver reports; `None` where it reports no figure
/// (the attributes are deprecated and may one day read 0).
fn read_clocks(ctx: &CudaContext) -> Option<Clocks> {
    let read = |attribute| ctx.attribute(attribute).ok().filter(|&v| v > 0).map(|v| v as u64);
    let sm_khz = read(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_CLOCK_RATE)?;
    let memory_khz = read(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE)?;
    let bus_bits = read(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH)?;
    let memory_gbps = 2 * memory_khz * 1000 * (bus_bits / 8) / 1_000_000_000;
    Some(Clocks { sm_mhz: (sm_khz / 1000) as u32, memory_gbps: memory_gbps as u32 })
}

/// A GPU with its stream; every launch goes to that stream.
pub struct Gpu {
    ctx: Arc<CudaContext>,
    stream: Arc<CudaStream>,
    name: String,
    capability: (u32, u32),
    smem_opt_in: u32,
    sms: u32,
    clocks: Option<Clocks>,
    /// Loaded kernels by the SHA-256 of their fatbin, so that a rebuilt registry or a second
    /// registry never gets another fatbin's code under the same name.
    loaded: Mutex<HashMap<String, CudaFunction>>,
    /// Tensor maps encoded before: encoding three costs the host microseconds a launch, and
    /// repeated calls (the same weights and activations each step) ask for the same ones.
    maps: Mutex<HashMap<TensorMapArg, CUtensorMap>>,
    /// Clusters of a persistent launch that fit on the GPU at once, by function, block, shared
    /// memory and cluster shape: asking the driver costs about as much as the launch.
    clusters_fit: Mutex<HashMap<ClusterFit, u32>>,
    /// Page-locked host memory that offsets are read back into before a launch (grown as
    /// calls need): one copy and one wait for all of a call's, no pageable staging.
    staging: Mutex<Option<PinnedHostSlice<i32>>>,
    /// The workspaces of the kernels that take them, grown as calls need: scratch, and one that
    /// is zero at every launch (zeroed when allocated, left so by each kernel). One of each a
    /// GPU, since every launch goes to its one stream, in turn.
    workspace: Mutex<[Option<CudaSlice<u8>>; 2]>,
}

/// Tensor maps a GPU keeps encoded; past this many it forgets them all.
const MAPS_KEPT: usize = 4096;

/// What the clusters of a persistent launch that fit depend on: the function (by address, held
/// by `loaded` as long as the GPU), its block, dynamic shared memory and cluster shape.
type ClusterFit = (usize, [u32; 3], u32, [u32; 3]);

impl Gpu {
    /// How many GPUs the driver sees. Without a CUDA driver or without a GPU this is an error value.
    pub fn count() -> Result<usize> {
        // cudarc panics when libcuda cannot be loaded, so look for it first.
        if !unsafe { cudarc::driver::sys::is_culib_present() } {
            return Err(Error::NoDriver("libcuda could not be loaded".into()));
        }
        let count = CudaContext::device_count().map_err(|err| Error::NoGpu(format!("the driver found none ({err})")))?;
        Ok(count.max(0) as usize)
    }

    /// Opens GPU `ordinal`. Without a CUDA driver or without a GPU this is an error value.
    pub fn new(ordinal: usize) -> Result<Gpu> {
        let count = Gpu::count()?;
        if ordinal >= count {
            return Err(Error::NoGpu(format!("GPU {ordinal} asked for, the driver sees {count}")));
        }
        let ctx = CudaContext::new(ordinal).during("creating a CUDA context")?;
        let (major, minor) = ctx.compute_capability().during("reading the compute capability")?;
        let name = ctx.name().during("reading the GPU's name")?;
        let smem_opt_in = ctx
            .attribute(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN)
            .during("reading the shared-memory limit")?;
        let sms = ctx.attribute(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT).during("reading the multiprocessor count")?;
        let clocks = read_clocks(&ctx);
        let stream = ctx.default_stream();
        Ok(Gpu {
            ctx,
            stream,
            name,
            capability: (major as u32, minor as u32),
            smem_opt_in: smem_opt_in as u32,
            sms: sms.max(1) as u32,
            clocks,
            loaded: Mutex::new(HashMap::new()),
            maps: Mutex::new(HashMap::new()),
            clusters_fit: Mutex::new(HashMap::new()),
            staging: Mutex::new(None),
            workspace: Mutex::new([None, None]),
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

    /// The GPU as tuning tables name it.
    pub fn device(&self) -> Device {
        Device { name: self.name.clone(), capability: [self.capability.0, self.capability.1], sms: self.sms, clocks: self.clocks }
    }

    /// The shared memory a block may use, dynamic and static together (the opt-in limit).
    pub fn smem_per_block(&self) -> u32 {
        self.smem_opt_in
    }

    /// Its number of multiprocessors, which persistent kernels launch a block per.
    pub fn sms(&self) -> u32 {
        self.sms
    }

    /// Waits for the stream; errors a kernel raised surface here.
    pub fn synchronize(&self) -> Result<()> {
        self.stream.synchronize().during("waiting for the GPU")
    }

    /// The kernel's function in this context, loading its fatbin the first time; the fatbin
    /// must still be the one the registry recorded.
    fn load(&self, info: &Built, fatbin: &Fatbin) -> Result<CudaFunction> {
        let name = info.entry.variant.name.as_str();
        let entry = &info.entry;
        if !runs_on(&entry.targets, self.capability) {
            return Err(Error::NoCodeForDevice {
                name: name.to_string(),
                has: format!("SASS for {} and PTX for {}", entry.targets.sass.join(", "), entry.targets.ptx),
                device: self.name.clone(),
                major: self.capability.0,
                minor: self.capability.1,
            });
        }
        // The shared memory a call needs was checked against the limit by `launch`.
        let static_smem = static_smem(info);
        let mut loaded = self.loaded.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Some(function) = loaded.get(&info.fatbin_sha256) {
            return Ok(function.clone());
        }
        let unreadable = |reason: String| Error::RegistryUnreadable { path: fatbin.to_string().into(), reason };
        let bytes = fatbin.verified_bytes(name, &info.fatbin_sha256).map_err(unreadable)?;
        if entry.entry.contains('\0') {
            return Err(Error::Refused { name: name.to_string(), rule: "its entry symbol holds a NUL byte".into() });
        }
        let what = format!("loading {name} from {fatbin}");
        let module = self.ctx.load_module(Ptx::from_binary(bytes)).during(&what)?;
        let function = module.load_function(&entry.entry).during(&format!("finding entry `{}` in {fatbin}", entry.entry))?;
        // Opting in to what the GPU allows a block, where the kernel may need more than the
        // default: the attribute allows, it reserves nothing.
        let may_need = entry.launch.dynamic_smem_bytes.as_constant().unwrap_or(u64::MAX);
        if may_need > u64::from(DEFAULT_SMEM_LIMIT) {
            let allowed = u64::from(self.smem_opt_in - static_smem.min(self.smem_opt_in)).min(may_need);
            function
                .set_attribute(CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, allowed as i32)
                .during(&format!("raising {}'s shared-memory limit", name))?;
        }
        if entry.launch.cluster.iter().product::<u32>() > PORTABLE_CLUSTER_BLOCKS {
            function
                .set_attribute(CUfunction_attribute::CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED, 1)
                .during(&format!("allowing {name} clusters of {:?} blocks", entry.launch.cluster))?;
        }
        loaded.insert(info.fatbin_sha256.clone(), function.clone());
        Ok(function)
    }

    /// Launches a kernel with the arguments its plan made from the manifest's parameter list.
    pub(crate) fn launch(&self, info: &Built, fatbin: &Fatbin, launch: Launch) -> Result<()> {
        let name = info.entry.variant.name.as_str();
        // Before loading: a call past the limit is refused without touching the driver.
        if block_smem(info, u64::from(launch.dynamic_smem_bytes)) > u64::from(self.smem_opt_in) {
            return Err(Error::Refused {
                name: name.to_string(),
                rule: format!(
                    "this call needs {} bytes of dynamic and {} of static shared memory; {} allows {} a block",
                    launch.dynamic_smem_bytes,
                    static_smem(info),
                    self.name,
                    self.smem_opt_in
                ),
            });
        }
        let function = self.load(info, fatbin)?;
        self.check_offsets(name, &launch.offsets)?;
        // The tensor maps the arguments name, encoded (once per GPU) before the launch.
        let maps = launch
            .args
            .iter()
            .filter_map(|arg| match arg {
                Arg::TensorMap(map) => Some(self.encoded(map)),
                _ => None,
            })
            .collect::<std::result::Result<Vec<CUtensorMap>, _>>()
            .map_err(|err| Error::Cuda { what: format!("encoding a tensor map for {name}"), source: err })?;
        // Held through the launch: a call growing the workspace meanwhile would free it first.
        let takes_workspace = launch.args.iter().any(|arg| matches!(arg, Arg::Workspace { .. }));
        let mut workspace = takes_workspace.then(|| self.workspace.lock().unwrap_or_else(|p| p.into_inner()));
        let mut launch = launch;
        for arg in &mut launch.args {
            if let (Arg::Workspace { bytes, zeroed }, Some(workspace)) = (*arg, workspace.as_mut()) {
                let kept = &mut workspace[usize::from(zeroed)];
                *arg = Arg::Pointer(self.workspace_of(kept, bytes).during(&format!("allocating {bytes} bytes of workspace for {name}"))?);
            }
        }
        self.launch_ex(&function, &launch, &maps).map_err(|err| Error::Cuda { what: format!("launching {name}"), source: err })
    }

    /// The workspace's address, grown to at least `bytes` (a power of two, so that calls
    /// asking for a little more each time do not allocate each time); null for none. The old
    /// one is freed in stream order, after the launches that use it.
    fn workspace_of(&self, kept: &mut Option<CudaSlice<u8>>, bytes: u64) -> std::result::Result<u64, DriverError> {
        if bytes == 0 {
            return Ok(0);
        }
        let bytes = usize::try_from(bytes).map_err(|_| DriverError(sys::cudaError_enum::CUDA_ERROR_OUT_OF_MEMORY))?;
        let workspace = match kept {
            Some(workspace) if workspace.len() >= bytes => workspace,
            slot => {
                *slot = None;
                slot.insert(self.stream.alloc_zeros::<u8>(bytes.checked_next_power_of_two().unwrap_or(bytes))?)
            }
        };
        let (addr, _sync) = workspace.device_ptr(&self.stream);
        Ok(addr)
    }

    /// Reads back the operands of offsets (after the work queued before, which may write them),
    /// all in one wait, and refuses the launch where they break their rules: the kernel would
    /// index with them.
    fn check_offsets(&self, name: &str, checks: &[OffsetsCheck]) -> Result<()> {
        if checks.is_empty() {
            return Ok(());
        }
        let what = format!("reading back the offsets of {name}");
        let len: usize = checks.iter().map(|c| c.len).sum();
        let mut kept = self.staging.lock().unwrap_or_else(|p| p.into_inner());
        let staging = match &mut *kept {
            Some(staging) if staging.len() >= len => staging,
            slot => {
                let grown = len.checked_next_power_of_two().unwrap_or(len);
                // Plain page-locked memory (write-combined is slow to read on the host).
                slot.insert(unsafe { self.ctx.alloc_pinned_with_flags::<i32>(grown, 0) }.during(&what)?)
            }
        };
        let base = staging.as_mut_ptr().during(&what)?;
        self.ctx.bind_to_thread().during(&what)?;
        let mut at = 0;
        for check in checks {
            // The plan checked that the buffer holds `len` i32 elements at `addr`; the staging
            // memory holds `len` in all, and stays locked until the values are read.
            let into = unsafe { std::slice::from_raw_parts_mut(base.add(at), check.len) };
            unsafe { cudarc::driver::result::memcpy_dtoh_async(into, check.addr, self.stream.cu_stream()) }.during(&what)?;
            at += check.len;
        }
        self.stream.synchronize().during(&what)?;
        let values = unsafe { std::slice::from_raw_parts(base, len) };
        let mut at = 0;
        for check in checks {
            check.check(&values[at..at + check.len]).map_err(|rule| Error::Refused { name: name.to_string(), rule })?;
            at += check.len;
        }
        Ok(())
    }

    /// The driver's tensor map for `map`, encoded once.
    fn encoded(&self, map: &TensorMapArg) -> std::result::Result<CUtensorMap, DriverError> {
        if let Some(encoded) = self.maps.lock().unwrap_or_else(|p| p.into_inner()).get(map) {
            return Ok(*encoded);
        }
        let encoded = encode(map)?;
        let mut maps = self.maps.lock().unwrap_or_else(|p| p.into_inner());
        if maps.len() >= MAPS_KEPT {
            maps.clear();
        }
        maps.insert(*map, encoded);
        Ok(encoded)
    }

    /// Every launch, through cuLaunchKernelEx: the plan's arguments passed where they lie (the
    /// one conversion from plan to driver), `maps` the encoded tensor maps in argument order.
    /// With thread-block clusters, a persistent grid gets no more clusters than fit on the GPU
    /// at once (not every multiprocessor may host a cluster's block), or some would wait for a
    /// second wave; other grids (split-K, a cluster per tile) run in as many waves as they need.
    fn launch_ex(&self, function: &CudaFunction, launch: &Launch, maps: &[CUtensorMap]) -> std::result::Result<(), DriverError> {
        let mut maps = maps.iter();
        let mut params: Vec<*mut c_void> = Vec::with_capacity(launch.args.len());
        for arg in &launch.args {
            let param = match arg {
                Arg::Pointer(addr) => addr as *const u64 as *mut c_void,
                Arg::I32(value) => value as *const i32 as *mut c_void,
                Arg::I64(value) => value as *const i64 as *mut c_void,
                Arg::U32(value) => value as *const u32 as *mut c_void,
                Arg::F32(value) => value as *const f32 as *mut c_void,
                Arg::F64(value) => value as *const f64 as *mut c_void,
                // Replaced by its address before this point.
                Arg::Workspace { .. } => return Err(DriverError(sys::cudaError_enum::CUDA_ERROR_INVALID_VALUE)),
                Arg::TensorMap(_) => match maps.next() {
                    Some(map) => map as *const CUtensorMap as *mut c_void,
                    None => return Err(DriverError(sys::cudaError_enum::CUDA_ERROR_INVALID_VALUE)),
                },
            };
            params.push(param);
        }
        let [x, y, z] = launch.cluster;
        let mut value: CUlaunchAttributeValue = unsafe { std::mem::zeroed() };
        value.clusterDim = CUlaunchAttributeValue_union__bindgen_ty_1 { x, y, z };
        let mut attribute = CUlaunchAttribute { id: CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION, pad: [0; 4], value };
        let clustered = launch.cluster != [1, 1, 1];
        let [gx, gy, gz] = launch.grid;
        let [bx, by, bz] = launch.block;
        let mut config = CUlaunchConfig {
            gridDimX: gx,
            gridDimY: gy,
            gridDimZ: gz,
            blockDimX: bx,
            blockDimY: by,
            blockDimZ: bz,
            sharedMemBytes: launch.dynamic_smem_bytes,
            hStream: self.stream.cu_stream(),
            attrs: &mut attribute,
            numAttrs: u32::from(clustered),
        };
        self.ctx.bind_to_thread()?;
        if clustered && launch.persistent {
            let key = (function.cu_function() as usize, launch.block, launch.dynamic_smem_bytes, launch.cluster);
            let kept = self.clusters_fit.lock().unwrap_or_else(|p| p.into_inner()).get(&key).copied();
            let fit = match kept {
                Some(fit) => fit,
                None => {
                    let mut fit = 0;
                    unsafe { sys::cuOccupancyMaxActiveClusters(&mut fit, function.cu_function(), &config) }.result()?;
                    let fit = u32::try_from(fit).unwrap_or(0);
                    let mut kept = self.clusters_fit.lock().unwrap_or_else(|p| p.into_inner());
                    if kept.len() >= MAPS_KEPT {
                        kept.clear();
                    }
                    kept.insert(key, fit);
                    fit
                }
            };
            if fit > 0 {
                config.gridDimX = config.gridDimX.min(fit * x);
            }
        }
        // The plan checked every argument against the kernel's parameter list and the operands;
        // `launch` and `maps`, which `params` point into, outlive the call.
        unsafe { sys::cuLaunchKernelEx(&config, function.cu_function(), params.as_mut_ptr(), std::ptr::null_mut()) }.result()
    }
}

/// ptxas's static shared memory, which counts against the same per-block limit as the dynamic.
pub(crate) fn static_smem(info: &Built) -> u32 {
    info.resources.iter().map(|r| r.static_smem_bytes).max().unwrap_or(0)
}

/// The shared memory a block of `info`'s launch needs: `dynamic` bytes and ptxas's static ones,
/// both against the GPU's [`Gpu::smem_per_block`].
pub(crate) fn block_smem(info: &Built, dynamic: u64) -> u64 {
    dynamic + u64::from(static_smem(info))
}

/// Whether a block of `info`'s launch with `dynamic` bytes fits the `smem_per_block` that `gpu`
/// (a GPU's name, as a refusal says it) allows; the refusal's rule where it does not.
pub fn check_block_smem(info: &Built, dynamic: u64, smem_per_block: u32, gpu: &str) -> std::result::Result<(), String> {
    let smem = block_smem(info, dynamic);
    if smem > u64::from(smem_per_block) {
        return Err(format!("the call needs {smem} bytes of shared memory a block; {gpu} allows {smem_per_block}"));
    }
    Ok(())
}

/// The driver's tensor map for a checked [`TensorMapArg`]: TMA copies its boxes, zero-filling
/// what lies outside the tensor.
fn encode(map: &TensorMapArg) -> std::result::Result<CUtensorMap, DriverError> {
    let data_type = match map.dtype {
        Dtype::F16 => CUtensorMapDataType::CU_TENSOR_MAP_DATA_TYPE_FLOAT16,
        Dtype::Bf16 => CUtensorMapDataType::CU_TENSOR_MAP_DATA_TYPE_BFLOAT16,
        Dtype::F32 => CUtensorMapDataType::CU_TENSOR_MAP_DATA_TYPE_FLOAT32,
        // TMA has no 8-bit float types: it moves their bytes (zero bytes are +0 in both).
        Dtype::E4m3 | Dtype::E5m2 | Dtype::U8 => CUtensorMapDataType::CU_TENSOR_MAP_DATA_TYPE_UINT8,
        Dtype::I32 => CUtensorMapDataType::CU_TENSOR_MAP_DATA_TYPE_INT32,
        Dtype::U32 => CUtensorMapDataType::CU_TENSOR_MAP_DATA_TYPE_UINT32,
        Dtype::I64 => CUtensorMapDataType::CU_TENSOR_MAP_DATA_TYPE_INT64,
    };
    let swizzle = match map.swizzle_bytes {
        32 => CUtensorMapSwizzle::CU_TENSOR_MAP_SWIZZLE_32B,
        64 => CUtensorMapSwizzle::CU_TENSOR_MAP_SWIZZLE_64B,
        _ => CUtensorMapSwizzle::CU_TENSOR_MAP_SWIZZLE_128B,
    };
    // Rows whose stride is not a multiple of 128 bytes put most box rows across two lines;
    // promoting each miss to 256 bytes then fetches lines no box needs. H100, a 3000³ matrix
    // product (rows of 6000 bytes), 192x192 tiles in clusters of 2: 0.80 of the vendor library
    // with 256-byte promotion, 0.95 with 128 (records:docs/dispatch.md, "L2 promotion"); aligned rows
    // keep the 256 bytes tuned on.
    let promotion = if map.strides_bytes[0].is_multiple_of(128) {
        CUtensorMapL2promotion::CU_TENSOR_MAP_L2_PROMOTION_L2_256B
    } else {
        CUtensorMapL2promotion::CU_TENSOR_MAP_L2_PROMOTION_L2_128B
    };
    let element_strides = [1u32; 5];
    let mut encoded = CUtensorMap { opaque: [0; 16] };
    unsafe {
        sys::cuTensorMapEncodeTiled(
            &mut encoded,
            data_type,
            map.rank,
            map.addr as *mut c_void,
            map.dims.as_ptr(),
            map.strides_bytes.as_ptr(),
            map.box_.as_ptr(),
            element_strides.as_ptr(),
            CUtensorMapInterleave::CU_TENSOR_MAP_INTERLEAVE_NONE,
            swizzle,
            promotion,
            CUtensorMapFloatOOBfill::CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE,
        )
        .result()?;
    }
    Ok(encoded)
}
