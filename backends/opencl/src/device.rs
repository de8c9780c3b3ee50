//! OpenCL devices and targets: what is found on the machine, and a target opened on one device (its context, its
//! in-order queue, and the descriptor of its memory filled from what the device reports).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use opencl3::command_queue::CommandQueue;
use opencl3::context::Context;
use opencl3::device::{Device, CL_DEVICE_TYPE_ACCELERATOR, CL_DEVICE_TYPE_ALL, CL_DEVICE_TYPE_GPU};
use opencl3::platform::get_platforms;
use stowage_runtime::{LayoutSupport, MapSupport, MemoryKind, MemorySpace, StorageDescriptor};

use crate::error::{code_name, ClError, Result};

/// What a device reports, read once when devices are listed.
#[derive(Clone, Debug, PartialEq)]
pub struct DeviceInfo {
    /// Index over all devices of all platforms (`opencl:N`): GPUs first, then accelerators, then CPU devices.
    pub index: usize,
    /// The platform's name.
    pub platform: String,
    /// The device's name.
    pub name: String,
    /// The device shares memory with the host (`CL_DEVICE_HOST_UNIFIED_MEMORY`).
    pub unified: bool,
    /// Base address alignment of buffers, bytes (`CL_DEVICE_MEM_BASE_ADDR_ALIGN` is in bits).
    pub base_align: usize,
    /// The largest single allocation, bytes.
    pub max_alloc: u64,
    /// Global memory, bytes.
    pub global_mem: u64,
    /// Local memory per work-group, bytes.
    pub local_mem: u64,
    /// Compute units.
    pub compute_units: u32,
    /// The largest work-group.
    pub max_work_group: usize,
    /// A GPU (`CL_DEVICE_TYPE_GPU`).
    pub gpu: bool,
    /// Clock, MHz (0 when the device does not say).
    pub clock_mhz: u32,
    /// An NVIDIA device's compute capability (`CL_DEVICE_COMPUTE_CAPABILITY_MAJOR_NV`/`_MINOR_NV`, from
    /// `cl_nv_device_attribute_query`): `(9, 0)` on an H200. `None` on other devices.
    pub compute_capability: Option<(u32, u32)>,
}

impl DeviceInfo {
    /// Peak f32 throughput estimate for the planner's cost model, GFLOP/s: compute units × clock × lanes (256
    /// flops per cycle for a GPU's compute unit, as an NVIDIA SM's 128 FMA lanes; 32 for a CPU core's AVX-512 FMA).
    pub fn gflops(&self) -> f64 {
        let ghz = if self.clock_mhz > 0 { self.clock_mhz as f64 / 1e3 } else { 2.0 };
        self.compute_units.max(1) as f64 * ghz * if self.gpu { 256.0 } else { 32.0 }
    }

    /// True when the device has tensor cores that take `mma.sync` in TF32, fp16 and bf16 from inline PTX:
    /// NVIDIA's compute capability 8.0 or later (docs/opencl.md, "Tensor cores from OpenCL C").
    /// `STOWAGE_OPENCL_TENSOR_CORES=0` turns them off, for measuring.
    pub fn tensor_cores(&self) -> bool {
        std::env::var("STOWAGE_OPENCL_TENSOR_CORES").as_deref() != Ok("0")
            && self.compute_capability.is_some_and(|(major, _)| major >= 8)
    }
}

/// The error of OpenCL call `call` on the target of memory space `space`, from the code it returned.
pub(crate) fn call_err<'a>(
    space: &'a str,
    call: &'static str,
) -> impl Fn(opencl3::error_codes::ClError) -> ClError + 'a {
    move |e| ClError::Call { space: space.into(), call, code: code_name(e.0) }
}

/// Every OpenCL device on the machine, in platform order. An error when there is no OpenCL at all (no ICD loader,
/// no platform registered). Discovered once per process (some drivers do not take concurrent discovery).
pub fn devices() -> Result<Vec<(Device, DeviceInfo)>> {
    static FOUND: std::sync::OnceLock<std::result::Result<Vec<(Device, DeviceInfo)>, String>> =
        std::sync::OnceLock::new();
    let found = FOUND.get_or_init(|| {
        discover().map_err(|e| match e {
            ClError::NoDevice { reason, .. } => reason,
            other => other.to_string(),
        })
    });
    found.clone().map_err(|reason| ClError::NoDevice { target: "opencl".into(), reason })
}

fn discover() -> Result<Vec<(Device, DeviceInfo)>> {
    let no = |reason: String| ClError::NoDevice { target: "opencl".into(), reason };
    let platforms = get_platforms().map_err(|e| no(format!("no OpenCL platform ({})", code_name(e.0))))?;
    let mut found = Vec::new();
    for platform in platforms {
        let pname = platform.name().unwrap_or_else(|_| "?".into());
        // A platform without devices reports CL_DEVICE_NOT_FOUND: it has none to add.
        let Ok(ids) = platform.get_devices(CL_DEVICE_TYPE_ALL) else { continue };
        for id in ids {
            let d = Device::new(id);
            let index = found.len();
            let space = format!("opencl:{index}");
            let e = call_err(&space, "clGetDeviceInfo");
            let info = DeviceInfo {
                index,
                platform: pname.clone(),
                name: d.name().map_err(&e)?.trim().to_string(),
                unified: d.host_unified_memory().unwrap_or(false),
                base_align: (d.mem_base_addr_align().map_err(&e)? as usize / 8).max(1),
                max_alloc: d.max_mem_alloc_size().map_err(&e)?,
                global_mem: d.global_mem_size().map_err(&e)?,
                local_mem: d.local_mem_size().map_err(&e)?,
                compute_units: d.max_compute_units().map_err(&e)?,
                max_work_group: d.max_work_group_size().map_err(&e)?,
                gpu: d.dev_type().is_ok_and(|t| t & CL_DEVICE_TYPE_GPU != 0),
                clock_mhz: d.max_clock_frequency().unwrap_or(0),
                compute_capability: nvidia_capability(&d),
            };
            found.push((d, info));
        }
    }
    if found.is_empty() {
        return Err(no("OpenCL platforms were found but no device".into()));
    }
    // GPUs first, then accelerators, then the rest (CPU devices such as PoCL), each in discovery order: `opencl`
    // is the first device, and a machine with a GPU means that one.
    let rank = |d: &Device| {
        let t = d.dev_type().unwrap_or(0);
        if t & CL_DEVICE_TYPE_GPU != 0 {
            0
        } else if t & CL_DEVICE_TYPE_ACCELERATOR != 0 {
            1
        } else {
            2
        }
    };
    found.sort_by_key(|(d, _)| rank(d));
    for (i, (_, info)) in found.iter_mut().enumerate() {
        info.index = i;
    }
    Ok(found)
}

/// The compute capability of an NVIDIA device, read only where the device lists the extension that defines it.
fn nvidia_capability(d: &Device) -> Option<(u32, u32)> {
    let listed = d.extensions().is_ok_and(|e| e.split_whitespace().any(|x| x == "cl_nv_device_attribute_query"));
    if !listed {
        return None;
    }
    Some((d.compute_capability_major_nv().ok()?, d.compute_capability_minor_nv().ok()?))
}

/// How a target reaches its device's memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Device memory is host memory: host buffers aligned as the device asks are used in place
    /// (`CL_MEM_USE_HOST_PTR`) and reading a result shares the allocation.
    Unified,
    /// Every transfer is a copy, through a pinned staging buffer (`CL_MEM_ALLOC_HOST_PTR`) kept across runs.
    Discrete,
}

/// A target spec: `opencl`, `opencl:discrete`, `opencl:N`, `opencl:N:discrete`.
pub fn parse_target(spec: &str) -> Result<(usize, bool)> {
    let mut parts = spec.split(':');
    if parts.next() != Some("opencl") {
        return Err(ClError::UnknownTarget(spec.into()));
    }
    let (mut index, mut discrete) = (0, false);
    for (k, part) in parts.enumerate() {
        match (k, part) {
            (0, n) if n.parse::<usize>().is_ok() => index = n.parse().unwrap_or(0),
            (0 | 1, "discrete") if !discrete => discrete = true,
            _ => return Err(ClError::UnknownTarget(spec.into())),
        }
    }
    Ok((index, discrete))
}

static NEXT_TARGET: AtomicUsize = AtomicUsize::new(0);

/// The context of device `index` that every target [`Target::open`] opens on it shares, made at the first open and
/// kept for the life of the process; each target holds a reference of its own, released when it is dropped.
///
/// A context is where an OpenCL implementation keeps what it loaded to compile: PoCL loads and links its kernel
/// library (built-in functions, about 0.4 s on this project's machines) once per context, so a context per target
/// paid that at every session, which was most of a small model's compile time and most of the node suite's time
/// on PoCL. Targets on one context still have their own queues, buffers, arenas and programs.
fn process_context(index: usize, device: &Device) -> Result<Context> {
    static CONTEXTS: Mutex<Vec<(usize, Context)>> = Mutex::new(Vec::new());
    let mut contexts = CONTEXTS.lock().unwrap_or_else(|p| p.into_inner());
    let raw = match contexts.iter().find(|(i, _)| *i == index) {
        Some((_, c)) => c.get(),
        None => {
            let made = Context::from_device(device).map_err(call_err(&format!("opencl:{index}"), "clCreateContext"))?;
            let raw = made.get();
            contexts.push((index, made));
            raw
        }
    };
    // SAFETY: `raw` is a context the process keeps alive in `CONTEXTS`; the reference taken here is the one the
    // returned `Context` releases when its target is dropped.
    unsafe { opencl3::context::context::retain_context(raw) }.map_err(|e| ClError::Call {
        space: format!("opencl:{index}"),
        call: "clRetainContext",
        code: code_name(e),
    })?;
    Ok(Context::new(raw, &[device.id()]))
}

/// An opened OpenCL target: one device, its context and in-order queue. Cheap to clone (shared).
#[derive(Clone)]
pub struct Target {
    pub(crate) inner: Arc<TargetInner>,
}

pub(crate) struct TargetInner {
    /// Unique per opened target (buffers are "on" the target that made them).
    pub(crate) id: usize,
    pub(crate) info: DeviceInfo,
    pub(crate) mode: Mode,
    pub(crate) space: MemorySpace,
    pub(crate) device: Device,
    pub(crate) context: Context,
    pub(crate) queue: CommandQueue,
    /// The pinned staging buffer of the discrete path, kept and grown across runs.
    pub(crate) staging: Mutex<Option<crate::buffer::Staging>>,
    /// Kernels are timed on the device (`STOWAGE_OPENCL_PROFILE`; see `ClProgram::profile`).
    pub(crate) profiling: bool,
    /// Device buffers alive (for leak checks).
    pub(crate) live: AtomicUsize,
    /// Programs built on this target, by source hash.
    pub(crate) programs: Mutex<std::collections::HashMap<u64, Arc<opencl3::program::Program>>>,
    /// The driver's version (part of the program cache key).
    pub(crate) driver: String,
    /// How programs were obtained.
    pub(crate) stats: Stats,
    /// Launches left before the device is treated as lost ([`Target::lose_device_after`]); `usize::MAX`: never.
    pub(crate) lose_after: AtomicUsize,
    /// `cl_khr_command_buffer`'s entry points, where runs may be replayed (`replay.rs`, rule 1).
    pub(crate) command_buffers: Option<crate::replay::CommandBuffers>,
    /// Runs are replayed where they can be (`STOWAGE_OPENCL_COMMAND_BUFFER=1`, [`Target::replay_runs`]).
    pub(crate) replay: std::sync::atomic::AtomicBool,
}

/// Counters behind `Target::build_stats`.
#[derive(Default)]
pub(crate) struct Stats {
    pub(crate) compiled: AtomicUsize,
    pub(crate) loaded: AtomicUsize,
    pub(crate) reused: AtomicUsize,
}

impl std::fmt::Debug for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Target({} {:?} on {})", self.inner.space, self.inner.mode, self.inner.info.name)
    }
}

impl Target {
    /// Opens the target named `spec` (see [`parse_target`]). `opencl:discrete` takes the discrete path whatever
    /// the device reports.
    pub fn open(spec: &str) -> Result<Target> {
        let (index, force_discrete) = parse_target(spec)?;
        let all = devices().map_err(|e| match e {
            ClError::NoDevice { reason, .. } => ClError::NoDevice { target: spec.into(), reason },
            other => other,
        })?;
        let count = all.len();
        let (device, info) = all.into_iter().nth(index).ok_or_else(|| ClError::NoDevice {
            target: spec.into(),
            reason: format!("there are {count} OpenCL devices (opencl:0 to opencl:{})", count - 1),
        })?;
        let mode = if info.unified && !force_discrete { Mode::Unified } else { Mode::Discrete };
        let context = process_context(index, &device)?;
        Target::assemble(device, info, mode, context)
    }

    /// A target on `device` (described by `info`) taken in `mode`, working in `context`: its queue is made here.
    pub(crate) fn assemble(device: Device, info: DeviceInfo, mode: Mode, context: Context) -> Result<Target> {
        let kind = if mode == Mode::Unified { MemoryKind::Unified } else { MemoryKind::Device };
        let space = MemorySpace::named(format!("opencl:{}", info.index), kind);
        let profiling = std::env::var_os("STOWAGE_OPENCL_PROFILE").is_some_and(|v| !v.is_empty() && v != "0");
        let properties = if profiling { opencl3::command_queue::CL_QUEUE_PROFILING_ENABLE } else { 0 };
        // SAFETY: the device is the one the context was made for.
        let queue = unsafe { CommandQueue::create_with_properties(&context, device.id(), properties, 0) }
            .map_err(call_err(space.name(), "clCreateCommandQueue"))?;
        let driver = device.driver_version().unwrap_or_default();
        let command_buffers = if profiling { None } else { crate::replay::CommandBuffers::load(&device, properties) };
        let replay = std::env::var("STOWAGE_OPENCL_COMMAND_BUFFER").as_deref() == Ok("1");
        let inner = TargetInner {
            command_buffers,
            replay: replay.into(),
            driver,
            stats: Stats::default(),
            lose_after: AtomicUsize::new(usize::MAX),
            id: NEXT_TARGET.fetch_add(1, Ordering::Relaxed),
            info,
            mode,
            space,
            device,
            context,
            queue,
            staging: Mutex::new(None),
            profiling,
            live: AtomicUsize::new(0),
            programs: Mutex::default(),
        };
        Ok(Target { inner: Arc::new(inner) })
    }

    /// What the device reported.
    pub fn info(&self) -> &DeviceInfo {
        &self.inner.info
    }

    /// The path this target takes.
    pub fn mode(&self) -> Mode {
        self.inner.mode
    }

    /// The memory space of its buffers (`opencl:0`, unified or device).
    pub fn space(&self) -> &MemorySpace {
        &self.inner.space
    }

    /// Device buffers alive now.
    pub fn live_buffers(&self) -> usize {
        self.inner.live.load(Ordering::SeqCst)
    }

    /// Treats the device as lost after `launches` more kernel launches: from then on every launch fails as a
    /// driver reports a lost device (`CL_DEVICE_NOT_AVAILABLE`). A fault-injection seam: no OpenCL implementation
    /// here can lose its device on demand, and the error path (a clear error, every buffer released, a fresh
    /// target working) must be tested all the same.
    pub fn lose_device_after(&self, launches: usize) {
        self.inner.lose_after.store(launches, Ordering::SeqCst);
    }

    /// True when runs on this target are replayed from recorded command buffers where they can be (`replay.rs`,
    /// rule 1).
    pub fn replays(&self) -> bool {
        self.inner.replay.load(Ordering::Relaxed)
            && self.inner.command_buffers.is_some()
            && self.inner.lose_after.load(Ordering::SeqCst) == usize::MAX
    }

    /// Turns replay on or off for runs from now on (off unless `STOWAGE_OPENCL_COMMAND_BUFFER=1`: see
    /// `replay.rs` for why); returns whether runs will replay (the device must offer command buffers).
    pub fn replay_runs(&self, on: bool) -> bool {
        self.inner.replay.store(on, Ordering::Relaxed);
        self.replays()
    }

    /// Waits for all queued work.
    pub fn finish(&self) -> Result<()> {
        self.inner.queue.finish().map_err(call_err(self.inner.space.name(), "clFinish"))
    }

    /// The memory as the planner sees it, filled from the device: unified or not, its base alignment, host
    /// memory imported in place at that alignment on unified memory.
    pub fn descriptor(&self) -> StorageDescriptor {
        descriptor_for(&self.inner.info, self.inner.mode)
    }
}

/// The descriptor of a device taken in `mode`.
pub fn descriptor_for(info: &DeviceInfo, mode: Mode) -> StorageDescriptor {
    let unified = mode == Mode::Unified;
    StorageDescriptor {
        name: "opencl",
        kind: if unified { MemoryKind::Unified } else { MemoryKind::Device },
        alignment: info.base_align.max(stowage_runtime::HOST_ALIGNMENT),
        row_pitch_alignment: 1,
        layouts: &[LayoutSupport::RowMajor],
        map: if unified { MapSupport::Pointer } else { MapSupport::Copy },
        import_alignment: unified.then_some(info.base_align.max(stowage_runtime::HOST_ALIGNMENT)),
        // Rough figures for the cost model: PCIe 4/5 for a discrete device, memory bandwidth when unified.
        bandwidth_gbps: if unified { 50.0 } else { 20.0 },
        latency_us: if unified { 1.0 } else { 10.0 },
        can_slice: true,
        // The discrete path uploads and downloads through one pinned buffer kept per target (`Staging`).
        staged: !unified,
        // `raw::upload_with`: a strided input is packed as it is written into staging or device-visible memory.
        packs_on_upload: true,
    }
}

/// One line per OpenCL device for `stowage targets`, or the reason there is none.
pub fn describe_devices() -> std::result::Result<Vec<String>, String> {
    let all = devices().map_err(|e| e.to_string())?;
    Ok(all
        .iter()
        .map(|(_, i)| {
            let mode = if i.unified { "unified memory" } else { "discrete memory" };
            let d = descriptor_for(i, if i.unified { Mode::Unified } else { Mode::Discrete });
            format!(
                "opencl:{}  {} ({}): {mode}, {} MiB, buffers {}-byte aligned, largest allocation {} MiB, map {:?}, import {}",
                i.index,
                i.name,
                i.platform,
                i.global_mem >> 20,
                d.alignment,
                i.max_alloc >> 20,
                d.map,
                d.import_alignment.map_or("never".to_string(), |a| format!("in place at {a}-byte alignment")),
            )
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn target_names() {
        assert_eq!(parse_target("opencl").unwrap(), (0, false));
        assert_eq!(parse_target("opencl:discrete").unwrap(), (0, true));
        assert_eq!(parse_target("opencl:1").unwrap(), (1, false));
        assert_eq!(parse_target("opencl:2:discrete").unwrap(), (2, true));
        for bad in ["cpu", "opencl:", "opencl:x", "opencl:discrete:discrete", "opencl:1:2", "openclx"] {
            assert!(parse_target(bad).is_err(), "{bad}");
        }
    }
}
