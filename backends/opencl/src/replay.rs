//! A run's kernels replayed as one recorded command buffer (`cl_khr_command_buffer`), where the device offers
//! one: the host enqueues a run in one call instead of one per kernel, which is what a batch-1 GPU run waits on.
//!
//! Rules (each tied to the code that keeps it, and to `backends/opencl/tests/runs.rs`):
//! 1. **Where.** A target replays when it is asked to (`STOWAGE_OPENCL_COMMAND_BUFFER=1`, or
//!    [`Target::replay_runs`]), its device lists `cl_khr_command_buffer`, the extension's functions resolve on its
//!    platform ([`CommandBuffers::load`]), its queue has the properties the device requires for command buffers,
//!    it does not profile (a profile times each kernel, which needs an event per launch) and no device loss is
//!    being injected. It is off unless asked: measured on the H200 (NVIDIA's OpenCL 565, batch 1, median of 200
//!    runs), replay made no run faster: the transformer block 0.163 ms replayed against 0.128 ms launched, ResNet-50
//!    at TF32 1.18 against 1.07, SqueezeNet and ResNet-50 in fp32 within 6%; on PoCL it is within noise.
//! 2. **What is recorded.** A run is first bound: every launch's kernel, its arguments (memory object and offset)
//!    and sizes, in order ([`Bound`]). A recording replays a run whose bound launches are equal to the ones it was
//!    recorded from, and no other (`ClProgram::run`). Arguments are compared by their allocations' process-unique
//!    ids, never by `cl_mem` addresses, which a freed object's successor may take.
//! 3. **When.** A run bound as the run before it was is recorded, then enqueued; later equal runs enqueue the
//!    recording. Any other run launches kernel by kernel, so a program whose buffers change every run (inputs
//!    imported in place from new host memory) never pays for recordings it cannot use.
//! 4. **Order.** Each recorded command waits for the sync point of the one before it: the recording runs in the
//!    order the queue would have run the launches, whatever an implementation does with in-order queues.
//! 5. **Stable buffers.** What keeps a repeated run bound the same (`run.rs`): values at the plan's places in the
//!    arena; the buffer pool put in one order before each run, so that a run takes the same buffers as the one
//!    before; uploads into a pooled buffer; outputs into the previous run's, once the caller has dropped it (only
//!    memory the program allocated: never a caller's).
//! 7. **One at a time.** A recording is enqueued again only after its previous enqueue has finished (a buffer
//!    made without simultaneous use may not be pending twice); a recording or a replay the driver refuses leaves
//!    the program launching kernel by kernel.
//! 6. **Events.** The buffers a run touched get its last command's event (the replay's, or the last launch's), as
//!    launches give theirs: reads of an output wait for it, and host memory is freed only after it.

use std::ffi::c_void;
use std::sync::Arc;

use opencl3::event::Event;
use opencl3::kernel::Kernel;
use opencl_sys::{
    cl_command_buffer_khr, cl_command_queue, cl_int, cl_kernel, cl_platform_id, cl_sync_point_khr,
    CL_DEVICE_COMMAND_BUFFER_REQUIRED_QUEUE_PROPERTIES_KHR, CL_SUCCESS,
};

use crate::device::Target;
use crate::error::{ClError, Result};

/// One launch of a run, bound to the memory it runs on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Bound {
    /// The step it belongs to (for profiles and errors).
    pub step: usize,
    /// The program's kernel index.
    pub kernel: usize,
    /// Each argument: a memory object and the byte offset of the buffer in it (arguments are buffers only).
    pub args: Vec<(usize, u64)>,
    /// Each argument's allocation by its process-unique id, and the offset (rule 2).
    pub keys: Vec<(u64, u64)>,
    pub global: Vec<usize>,
    pub local: Option<Vec<usize>>,
}

/// Where a program stands with replay (`replay.rs`, rule 3).
#[derive(Default)]
pub(crate) enum Replay {
    /// No run yet.
    #[default]
    None,
    /// The last run, launched kernel by kernel.
    Seen(Vec<Bound>),
    /// A recording, and what it was recorded from.
    Recorded(Recording),
    /// The driver refused a recording: this program launches kernel by kernel.
    Refused,
}

type CreateFn = unsafe extern "C" fn(u32, *const cl_command_queue, *const u64, *mut cl_int) -> cl_command_buffer_khr;
type OneFn = unsafe extern "C" fn(cl_command_buffer_khr) -> cl_int;
type NdRangeFn = unsafe extern "C" fn(
    cl_command_buffer_khr,
    cl_command_queue,
    *const u64,
    cl_kernel,
    u32,
    *const usize,
    *const usize,
    *const usize,
    u32,
    *const cl_sync_point_khr,
    *mut cl_sync_point_khr,
    *mut c_void,
) -> cl_int;
type EnqueueFn = unsafe extern "C" fn(
    u32,
    *mut cl_command_queue,
    cl_command_buffer_khr,
    u32,
    *const c_void,
    *mut *mut c_void,
) -> cl_int;

/// The extension's entry points on one platform, typed as the extension's header declares them (`opencl_sys`'s
/// `cl_ext` `*_t` types), with property lists taken as the 64-bit words they are made of.
pub(crate) struct CommandBuffers {
    create: CreateFn,
    finalize: OneFn,
    release: OneFn,
    nd_range: NdRangeFn,
    enqueue: EnqueueFn,
}

impl std::fmt::Debug for CommandBuffers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("CommandBuffers")
    }
}

/// Looks `name` up on `platform`.
fn entry(platform: cl_platform_id, name: &str) -> Option<*mut c_void> {
    let name = std::ffi::CString::new(name).ok()?;
    let library = cl3::load_library().as_ref().ok()?;
    let f = library.clGetExtensionFunctionAddressForPlatform(platform, name.as_ptr())?;
    (!f.is_null()).then_some(f)
}

impl CommandBuffers {
    /// The entry points for `device` when it can replay on a queue made with `queue_properties` (rule 1), else
    /// `None`.
    pub(crate) fn load(device: &opencl3::device::Device, queue_properties: u64) -> Option<CommandBuffers> {
        if !device.extensions().ok()?.split_whitespace().any(|e| e == "cl_khr_command_buffer") {
            return None;
        }
        let required = device.get_data(CL_DEVICE_COMMAND_BUFFER_REQUIRED_QUEUE_PROPERTIES_KHR).ok()?;
        let required = u64::from_ne_bytes(required.get(..8)?.try_into().ok()?);
        if required & !queue_properties != 0 {
            return None;
        }
        let platform = device.platform().ok()?;
        let (create, finalize, release, nd_range, enqueue) = (
            entry(platform, "clCreateCommandBufferKHR")?,
            entry(platform, "clFinalizeCommandBufferKHR")?,
            entry(platform, "clReleaseCommandBufferKHR")?,
            entry(platform, "clCommandNDRangeKernelKHR")?,
            entry(platform, "clEnqueueCommandBufferKHR")?,
        );
        // SAFETY: each pointer is what the platform returned for that name, a function of the C signature its type
        // spells out.
        unsafe {
            Some(CommandBuffers {
                create: std::mem::transmute::<*mut c_void, CreateFn>(create),
                finalize: std::mem::transmute::<*mut c_void, OneFn>(finalize),
                release: std::mem::transmute::<*mut c_void, OneFn>(release),
                nd_range: std::mem::transmute::<*mut c_void, NdRangeFn>(nd_range),
                enqueue: std::mem::transmute::<*mut c_void, EnqueueFn>(enqueue),
            })
        }
    }
}

/// A finalized command buffer of a run's launches.
pub(crate) struct Recording {
    buffer: cl_command_buffer_khr,
    target: Target,
    /// What was recorded: a run bound equal to it replays (rule 2).
    pub launches: Vec<Bound>,
    /// The last enqueue's event (rule 7).
    pending: std::sync::Mutex<Option<Arc<Event>>>,
}

// SAFETY: OpenCL objects may be used from any thread (the one call that is not thread-safe on one object,
// `clSetKernelArg`, is made under the kernel's mutex); the recording is only enqueued and released.
unsafe impl Send for Recording {}
// SAFETY: as above; `&Recording` only enqueues.
unsafe impl Sync for Recording {}

impl Drop for Recording {
    fn drop(&mut self) {
        if let Some(fns) = &self.target.inner.command_buffers {
            // SAFETY: made by `create` on this platform and released once, here.
            unsafe { (fns.release)(self.buffer) };
        }
    }
}

fn failed(target: &Target, call: &'static str, code: cl_int) -> ClError {
    ClError::Call { space: target.space().to_string(), call, code: crate::error::code_name(code) }
}

/// The target's entry points, or the error of a call made without them.
fn entries<'a>(target: &'a Target, call: &'static str) -> Result<&'a CommandBuffers> {
    target.inner.command_buffers.as_ref().ok_or_else(|| ClError::Call {
        space: target.space().to_string(),
        call,
        code: "cl_khr_command_buffer is not offered here".into(),
    })
}

impl Recording {
    /// Records `launches` of `kernels` on `target` (which must have command buffers), each after the one before
    /// (rule 4), and finalizes it.
    pub(crate) fn record(target: &Target, kernels: &[std::sync::Mutex<Kernel>], launches: Vec<Bound>) -> Result<Self> {
        let fns = entries(target, "clCreateCommandBufferKHR")?;
        let queue = target.inner.queue.get();
        let mut code = CL_SUCCESS;
        // SAFETY: one valid queue, no properties, and a place for the error code.
        let buffer = unsafe { (fns.create)(1, &queue, std::ptr::null(), &mut code) };
        if code != CL_SUCCESS || buffer.is_null() {
            return Err(failed(target, "clCreateCommandBufferKHR", code));
        }
        let recording = Recording { buffer, target: target.clone(), launches, pending: Default::default() };
        let mut previous: Option<cl_sync_point_khr> = None;
        for l in &recording.launches {
            let kernel = kernels[l.kernel].lock().unwrap_or_else(|p| p.into_inner());
            target.set_buffer_args(&kernel, &l.args)?;
            let mut point: cl_sync_point_khr = 0;
            let local = l.local.as_ref().map_or(std::ptr::null(), |v| v.as_ptr());
            let wait = previous.as_ref().map_or(std::ptr::null(), |p| p as *const cl_sync_point_khr);
            // SAFETY: the buffer is recording; the kernel's arguments are all set (above, under its mutex, and
            // captured by this call); `global` (and `local`, when given) hold `global.len()` sizes; the wait list
            // holds `previous.is_some()` sync points of this buffer.
            let code = unsafe {
                (fns.nd_range)(
                    recording.buffer,
                    std::ptr::null_mut(),
                    std::ptr::null(),
                    kernel.get(),
                    l.global.len() as u32,
                    std::ptr::null(),
                    l.global.as_ptr(),
                    local,
                    u32::from(previous.is_some()),
                    wait,
                    &mut point,
                    std::ptr::null_mut(),
                )
            };
            if code != CL_SUCCESS {
                return Err(failed(target, "clCommandNDRangeKernelKHR", code));
            }
            previous = Some(point);
        }
        // SAFETY: a recording buffer, finalized once.
        let code = unsafe { (fns.finalize)(recording.buffer) };
        if code != CL_SUCCESS {
            return Err(failed(target, "clFinalizeCommandBufferKHR", code));
        }
        Ok(recording)
    }

    /// Enqueues the recording on its target's queue, once its previous enqueue is done (rule 7); returns its event.
    pub(crate) fn enqueue(&self) -> Result<Arc<Event>> {
        let target = &self.target;
        let mut pending = self.pending.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(e) = pending.take() {
            e.wait().map_err(|e| failed(target, "clWaitForEvents", e.0))?;
        }
        let fns = entries(target, "clEnqueueCommandBufferKHR")?;
        let mut queue = target.inner.queue.get();
        let mut event: *mut c_void = std::ptr::null_mut();
        // SAFETY: a finalized buffer recorded for this queue, no wait list, and a place for the event.
        let code = unsafe { (fns.enqueue)(1, &mut queue, self.buffer, 0, std::ptr::null(), &mut event) };
        if code != CL_SUCCESS || event.is_null() {
            return Err(failed(target, "clEnqueueCommandBufferKHR", code));
        }
        let event = Arc::new(Event::new(event));
        *pending = Some(Arc::clone(&event));
        Ok(event)
    }
}
