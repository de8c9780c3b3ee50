//! Device memory from outside: a caller's OpenCL context, buffers and events taken in place, and results handed
//! out as OpenCL buffers. The contract, rule by rule (each with its test in `tests/external.rs`):
//! 1. **A caller's context** is a target: [`Target::from_raw`] opens one in it, on the caller's device, with a
//!    queue of its own; the context is retained while the target lives and released once after.
//! 2. **A caller's buffer** is retained when wrapped ([`ClBuffer::from_raw`]) and released once, when its last
//!    handle is dropped: the caller may release its own reference at any time after wrapping.
//! 3. **It is checked** when wrapped: a buffer of another context, or too small for the datum type, shape and row
//!    pitch it is said to hold, is an error naming it, and nothing is retained.
//! 4. **The producer's event** (`ready`) orders it on the device: the target's queue waits for it with a marker.
//!    Made an input tensor ([`ClBuffer::input`]), the buffer is waited for on the host, as every device tensor
//!    crossing into the host's hands is (`LazyHost` rule 2): `ready` must complete without stowage's help.
//! 5. **As an input** ([`ClBuffer::input`]) it is a tensor over the device memory, packed or in padded rows: used
//!    as is where it is packed, relaid once on the device otherwise ([`ClBuffer::packed_on_device`], a
//!    `clEnqueueCopyBufferRect` and a copy of the last row, recorded as one relayout). Another target's buffer is read to the host and
//!    written (a download and an upload, both counted), as the planner counts a value crossing devices.
//! 6. **Outputs are handed out** as they are: [`ClBuffer::of`] finds the buffer behind a run's output tensor, with
//!    its memory object ([`ClBuffer::raw_mem`]); a run's outputs are complete when the run returns (so
//!    [`ClBuffer::raw_ready`] is then `None`). The tensor keeps the buffer alive, and nothing is downloaded unless
//!    its bytes are read on the host.

use opencl3::context::Context;
use opencl3::memory::{ClMem as _, CL_MEM_READ_WRITE};
use opencl3::types::CL_BLOCKING;
use opencl3::types::{cl_command_queue, cl_context, cl_device_id, cl_event, cl_mem};
use stowage_runtime::{DatumType, Layout, LazyHost, Ledger, LedgerTag, MoveKind, Tensor};

use super::{raw, ClBuffer};
use crate::device::{Mode, Target};
use crate::error::{code_name, ClError, Result};

fn refused(what: &str, message: String) -> ClError {
    ClError::External { what: what.to_string(), message }
}

impl Target {
    /// Opens a target in a caller's `context` on its `device` (rule 1), taking the device's memory as the device
    /// reports it (`discrete` forces the staging path, as `opencl:N:discrete` does). The device must be one the
    /// ICD loader lists: its index names the target's memory space (`opencl:N`).
    ///
    /// # Safety
    /// `context` and `device` are valid OpenCL handles, the device one of the context's.
    pub unsafe fn from_raw(context: cl_context, device: cl_device_id, discrete: bool) -> Result<Target> {
        let what = "the caller's OpenCL context";
        if context.is_null() || device.is_null() {
            return Err(refused(what, "a null context or device handle".into()));
        }
        let (device, info) = crate::devices()?
            .into_iter()
            .find(|(d, _)| d.id() == device)
            .ok_or_else(|| refused(what, "its device is none of those the OpenCL ICD loader lists".into()))?;
        // SAFETY: `context` is a valid context (the caller's promise); the reference taken here is the one the
        // `Context` releases when the target is dropped.
        unsafe { opencl3::context::context::retain_context(context) }
            .map_err(|e| refused(what, format!("clRetainContext failed: {}", code_name(e))))?;
        let context = Context::new(context, &[device.id()]);
        let mode = if info.unified && !discrete { Mode::Unified } else { Mode::Discrete };
        Target::assemble(device, info, mode, context)
    }

    /// The target's OpenCL context, for a caller that makes buffers and kernels beside stowage's. Valid while the
    /// target lives; retain it to keep it longer.
    pub fn raw_context(&self) -> cl_context {
        self.inner.context.get()
    }

    /// The target's in-order queue: work a caller enqueues there runs in order with stowage's.
    pub fn raw_queue(&self) -> cl_command_queue {
        self.inner.queue.get()
    }

    /// The target's device.
    pub fn raw_device(&self) -> cl_device_id {
        self.inner.device.id()
    }
}

impl ClBuffer {
    /// A caller's buffer `mem`, holding `dt` elements of `shape` at its start as `layout` places them (packed
    /// row-major, or padded rows: [`Layout::padded`]), as a buffer of `target` (rules 2 to 4). `ready`, when given, is
    /// the event of the command that writes it: the target's queue waits for it. `name` names it in errors.
    ///
    /// # Safety
    /// `mem` is a valid buffer object, and `ready` a valid event, for the duration of the call.
    pub unsafe fn from_raw(
        target: &Target,
        name: &str,
        mem: cl_mem,
        dt: DatumType,
        shape: &[usize],
        layout: &Layout,
        ready: Option<cl_event>,
    ) -> Result<ClBuffer> {
        let what = format!("input '{name}'");
        if mem.is_null() {
            return Err(refused(&what, "a null cl_mem".into()));
        }
        let need = layout.span_bytes(dt, shape).map_err(|e| refused(&what, e.to_string()))?;
        let info = |e: i32| refused(&what, format!("clGetMemObjectInfo failed: {}", code_name(e)));
        // Checked before anything is retained (rule 3).
        let context = opencl3::memory::get_mem_object_info(mem, opencl3::memory::CL_MEM_CONTEXT).map_err(info)?.to_ptr()
            as cl_context;
        if context != target.raw_context() {
            return Err(refused(
                &what,
                format!(
                    "its cl_mem belongs to another OpenCL context than {}'s: open the target in its context \
                     (Target::from_raw) or copy it into this one",
                    target.space()
                ),
            ));
        }
        let size = opencl3::memory::get_mem_object_info(mem, opencl3::memory::CL_MEM_SIZE).map_err(info)?.to_size();
        if size < need {
            return Err(refused(
                &what,
                format!("its cl_mem holds {size} bytes; {dt}{shape:?} as {} needs {need}", layout.kind(dt, shape)),
            ));
        }
        // SAFETY: `mem` is valid; the reference taken here is the one the `Buffer` releases (rule 2).
        unsafe { opencl3::memory::retain_mem_object(mem) }
            .map_err(|e| refused(&what, format!("clRetainMemObject failed: {}", code_name(e))))?;
        let buffer = opencl3::memory::Buffer::<u8>::new(mem);
        // The bytes it holds for stowage: a larger buffer's tail is not the tensor's.
        let raw = raw::RawCl::wrap(target, buffer, need, None);
        if let Some(event) = ready {
            // SAFETY: `event` is a valid event of this context (the caller's promise); the marker only waits on it.
            let marker = unsafe { target.inner.queue.enqueue_marker_with_wait_list(&[event]) }
                .map_err(|e| refused(&what, format!("waiting for its ready event failed: {}", code_name(e.0))))?;
            raw.set_write(marker);
        }
        let packed = layout.is_row_major(dt, shape) && layout.offset() == 0;
        let flat = if packed { shape.to_vec() } else { vec![need.div_ceil(dt.size_of())] };
        Ok(ClBuffer { raw, dt, shape: flat })
    }

    /// This buffer as the input tensor `name` of `shape`, in the layout it was wrapped with (rule 5). The tensor
    /// is lazy: read on the host, it is downloaded once.
    pub fn input(self, name: &str, shape: &[usize], layout: &Layout) -> Result<Tensor<'static>> {
        let what = format!("input '{name}'");
        let layout = layout.clone();
        let dt = self.dt;
        let tag = LedgerTag::new(&Ledger::off(), name);
        let fail = |e: stowage_runtime::RuntimeError| refused(&what, e.to_string());
        let lazy = LazyHost::new(self, tag).map_err(fail)?;
        Ok(Tensor::from_storage(dt, shape, layout, lazy).map_err(fail)?.with_name(name))
    }

    /// The buffer behind `tensor` (an output of a run on OpenCL, a caller's buffer wrapped as an input), while no
    /// host write has detached it (rule 6).
    pub fn of<'t>(tensor: &'t Tensor<'_>) -> Option<&'t ClBuffer> {
        tensor.device_buffer::<ClBuffer>()
    }

    /// The OpenCL memory object, valid while this buffer (or the tensor holding it) lives; retain it to keep it
    /// longer. Its bytes start at [`ClBuffer::raw_offset`] (an arena region's memory object is its arena's).
    pub fn raw_mem(&self) -> cl_mem {
        self.kernel_arg().0.get()
    }

    /// Where this buffer's bytes start in [`ClBuffer::raw_mem`].
    pub fn raw_offset(&self) -> usize {
        self.kernel_arg().1 as usize
    }

    /// The event of the last command that writes this buffer (`None` when none is pending or recorded, as for a
    /// run's outputs, which are complete when the run returns): a caller's queue waits for it before reading the
    /// memory. Valid until the buffer's next command; retain it to keep it longer.
    pub fn raw_ready(&self) -> Option<cl_event> {
        self.raw.0.last_write.lock().unwrap_or_else(|p| p.into_inner()).as_ref().map(|e| e.get())
    }

    /// `bytes` written into memory of the device's own (never host memory it shares, even on unified memory), as a
    /// flat buffer of `dt`: what a caller's buffer is, for `stowage run --input-device` to stand in for one.
    pub fn in_device_memory(target: &Target, dt: DatumType, bytes: &[u8]) -> Result<ClBuffer> {
        let fail = |e: stowage_runtime::RuntimeError| ClError::Transfer {
            value: "a placed input".into(),
            message: e.to_string(),
        };
        let mut mem = raw::new_mem(target, CL_MEM_READ_WRITE, bytes.len(), std::ptr::null_mut()).map_err(fail)?;
        if !bytes.is_empty() {
            // SAFETY: a blocking write of `bytes` into a buffer of at least that length.
            unsafe { target.inner.queue.enqueue_write_buffer(&mut mem, CL_BLOCKING, 0, bytes, &[]) }
                .map_err(|e| ClError::Transfer { value: "a placed input".into(), message: code_name(e.0) })?;
        }
        let raw = raw::RawCl::wrap(target, mem, bytes.len(), None);
        Ok(ClBuffer { raw, dt, shape: vec![bytes.len() / dt.size_of().max(1)] })
    }

    /// True when this buffer is memory of `target` (made by it, or a caller's wrapped for it).
    pub fn is_of(&self, target: &Target) -> bool {
        raw::is_on(&self.raw, target)
    }

    /// `tensor`'s elements, held in this buffer in padded rows (or any layout whose rows are evenly spaced),
    /// packed into a new buffer on the device (`clEnqueueCopyBufferRect` for all rows but the last, which is
    /// copied on its own), recorded in `ledger` as one relayout within the device's memory (rule 5). `None` when the layout is not rows at one pitch.
    pub fn packed_on_device(&self, tensor: &Tensor<'_>, ledger: &Ledger) -> Result<Option<ClBuffer>> {
        let (dt, shape, layout) = (tensor.dt(), tensor.shape(), tensor.layout());
        let Some((rows, row_bytes, pitch)) = rows_of(dt, shape, layout) else { return Ok(None) };
        let target = &self.raw.0.target;
        let name = tensor.name_or_unnamed();
        let len = rows * row_bytes;
        let mut out = ClBuffer::allocate(target, dt, shape)
            .map_err(|e| ClError::Transfer { value: name.to_string(), message: e.to_string() })?;
        if len > 0 {
            let (src, base) = self.kernel_arg();
            let (dst, dst_base) = out.kernel_arg();
            let (queue, src, dst) = (target.inner.queue.get(), src.get(), dst.get());
            let (src_at, dst_at) = (base as usize + layout.offset(), dst_base as usize);
            let fail = |e: i32| ClError::Transfer { value: name.to_string(), message: code_name(e) };
            // All rows but the last as one rectangle, the last on its own: a rectangle's bounds are checked as
            // whole pitches (NVIDIA's driver refuses one whose last pitch runs past a buffer that ends with its
            // last row's bytes), and the buffer may end there.
            let full = rows - 1;
            if full > 0 {
                let (src_origin, dst_origin, region) = ([src_at, 0, 0], [dst_at, 0, 0], [row_bytes, full, 1]);
                // SAFETY: `full` rows of `row_bytes`, `pitch` apart from the source's first byte and packed in the
                // destination, lie inside both buffers (the source's span was checked when the tensor was made
                // over it; the destination holds `rows * row_bytes`); the queue is in order, after their writers.
                let e = unsafe {
                    opencl3::command_queue::enqueue_copy_buffer_rect(
                        queue,
                        src,
                        dst,
                        src_origin.as_ptr(),
                        dst_origin.as_ptr(),
                        region.as_ptr(),
                        pitch,
                        full * pitch,
                        row_bytes,
                        full * row_bytes,
                        0,
                        std::ptr::null(),
                    )
                }
                .map_err(fail)?;
                drop(opencl3::event::Event::new(e));
            }
            // SAFETY: the last row: `row_bytes` from `full` pitches into the source and `full` rows into the
            // destination, inside both, as above.
            let e = unsafe {
                opencl3::command_queue::enqueue_copy_buffer(
                    queue,
                    src,
                    dst,
                    src_at + full * pitch,
                    dst_at + full * row_bytes,
                    row_bytes,
                    0,
                    std::ptr::null(),
                )
            }
            .map_err(fail)?;
            // The copies write `out` and read this buffer (the last completes after the first on the in-order
            // queue): both wait for it before their memory goes.
            let event = std::sync::Arc::new(opencl3::event::Event::new(e));
            self.raw.accessed(&event);
            out.written_by_shared(event);
        }
        let tag = LedgerTag::new(ledger, name);
        tag.record(MoveKind::Relayout, target.space(), target.space(), len, || {
            format!("the caller's {} on {} packed on the device", tensor.layout_kind(), target.space()).into()
        });
        out = out.with_shape(shape);
        Ok(Some(out))
    }
}

/// `(rows, bytes per row, pitch)` when `layout` holds `shape` as evenly spaced packed rows: the innermost axes
/// packed up to one whose step is the pitch, the outer ones packed over that pitch.
fn rows_of(dt: DatumType, shape: &[usize], layout: &Layout) -> Option<(usize, usize, usize)> {
    let strides = layout.strides();
    let size = dt.size_of();
    let mut k = shape.len();
    let mut packed = 1;
    // The packed innermost axes form a row.
    while k > 0 && (shape[k - 1] == 1 || strides[k - 1] == packed) {
        packed *= shape[k - 1];
        k -= 1;
    }
    if k == 0 {
        return Some((1, packed * size, packed * size));
    }
    let pitch = strides[k - 1];
    let row = packed;
    let mut rows = shape[k - 1];
    let mut step = pitch * shape[k - 1];
    for j in (0..k - 1).rev() {
        if shape[j] != 1 && strides[j] != step {
            return None;
        }
        rows *= shape[j];
        step *= shape[j];
    }
    (pitch >= row).then_some((rows, row * size, pitch * size))
}
