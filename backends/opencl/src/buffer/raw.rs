//! The backend functions the derive calls.

use std::mem::ManuallyDrop;
use std::ops::{Deref, DerefMut, Range};
use std::sync::atomic::AtomicU64;

use stowage_runtime::{Result, RuntimeError, Transferred};

use super::*;

/// One OpenCL allocation.
pub struct ClMem {
    pub(super) target: Target,
    /// Released in `Drop`: a region's is handed to its parent instead (see `retired`).
    pub(super) mem: ManuallyDrop<Buffer<u8>>,
    pub(super) len: usize,
    pub(super) host: Option<Backing>,
    pub(super) last_write: Mutex<Option<Arc<Event>>>,
    /// The last command that reads or writes this buffer: host memory the device uses in place is freed only
    /// after it (the queue runs on while the executor drops values it no longer needs).
    pub(super) last_access: Mutex<Option<Arc<Event>>>,
    /// The allocation this one is a region of (a sub-buffer of the session's arena), kept alive by it, and the
    /// region's place in the order regions were made.
    pub(super) parent: Option<(RawCl, u64)>,
    /// A region's byte offset in its parent (0 for an allocation of its own).
    pub(super) offset: usize,
    /// The regions of this allocation that nothing uses any more, with the order they were made in: released
    /// together with it, the last made first. NVIDIA's OpenCL (565 on the H200) crashes when a sub-buffer is
    /// released after an older one that overlaps it, once kernels have used both (`tests/regions.rs`); releasing
    /// in the reverse of the order they were made in is safe there and everywhere.
    pub(super) retired: Mutex<Vec<(u64, Buffer<u8>)>>,
    /// What else must live as long as the memory: a DLPack producer's managed tensor (`buffer/dlpack.rs`), whose
    /// deleter runs when this is dropped, after the memory object's release.
    pub(super) keep: Mutex<Option<Box<dyn std::any::Any + Send>>>,
    /// Unique in the process and never reused (a freed `cl_mem`'s address may be): what a run's bound launches are
    /// compared by (`replay.rs`, rule 2) and a program knows its own allocations by.
    pub(super) id: u64,
}

/// The next [`ClMem::id`].
static NEXT_ID: AtomicU64 = AtomicU64::new(0);

/// The order regions are made in, across every allocation.
static NEXT_REGION: AtomicU64 = AtomicU64::new(0);

impl Drop for ClMem {
    fn drop(&mut self) {
        // Host memory the device reads in place, and memory a DLPack producer frees with its deleter (`keep`),
        // outlive the last command on them.
        let kept = self.keep.get_mut().unwrap_or_else(|p| p.into_inner()).is_some();
        if kept || self.host.is_some() || self.parent.as_ref().is_some_and(|p| p.0 .0.host.is_some()) {
            let pending = self.last_access.get_mut().unwrap_or_else(|p| p.into_inner()).take();
            if let Some(e) = pending {
                // A failed wait means the device is gone; its work on this memory is over either way.
                let _ = e.wait();
            }
        }
        self.target.inner.live.fetch_sub(1, Ordering::SeqCst);
        // SAFETY: `mem` is taken or dropped once, here, and never used after.
        let mem = unsafe { ManuallyDrop::take(&mut self.mem) };
        match &self.parent {
            Some((parent, made)) => parent.0.retired.lock().unwrap_or_else(|p| p.into_inner()).push((*made, mem)),
            None => {
                let mut retired = std::mem::take(self.retired.get_mut().unwrap_or_else(|p| p.into_inner()));
                retired.sort_by_key(|r| std::cmp::Reverse(r.0));
                drop(retired);
                drop(mem);
            }
        }
    }
}

/// A shared handle to an allocation (cloning shares it, like retaining a `cl_mem`).
#[derive(Clone)]
pub struct RawCl(pub(super) Arc<ClMem>);

impl std::fmt::Debug for RawCl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} bytes on {}", self.0.len, self.0.target.space())
    }
}

fn device_err(target: &Target, op: &'static str, bytes: usize, message: String) -> RuntimeError {
    RuntimeError::Device { space: target.space().clone(), op, tensor: "<buffer>".into(), bytes, message }
}

fn cl_err<'a>(
    target: &'a Target,
    op: &'static str,
    bytes: usize,
) -> impl Fn(opencl3::error_codes::ClError) -> RuntimeError + 'a {
    move |e| device_err(target, op, bytes, code_name(e.0))
}

pub(super) fn new_mem(target: &Target, flags: u64, len: usize, host: *mut u8) -> Result<Buffer<u8>> {
    let info = &target.inner.info;
    if len as u64 > info.max_alloc {
        return Err(RuntimeError::OutOfMemory {
            tensor: format!("a buffer on {} (its largest allocation is {} bytes)", target.space(), info.max_alloc),
            bytes: len,
        });
    }
    // SAFETY: `host` is null, or points at `len` bytes that the caller keeps alive (and unmoved) as long as the
    // buffer: `ClMem::host` holds their owner.
    unsafe { Buffer::<u8>::create(&target.inner.context, flags, len.max(1), host.cast()) }.map_err(|e| {
        RuntimeError::OutOfMemory { tensor: format!("a buffer on {} ({})", target.space(), code_name(e.0)), bytes: len }
    })
}

impl RawCl {
    pub(super) fn wrap(target: &Target, mem: Buffer<u8>, len: usize, host: Option<Backing>) -> RawCl {
        target.inner.live.fetch_add(1, Ordering::SeqCst);
        let (last_write, last_access) = (Mutex::new(None), Mutex::new(None));
        let (mem, parent, retired) = (ManuallyDrop::new(mem), None, Mutex::new(Vec::new()));
        let offset = 0;
        RawCl(Arc::new(ClMem {
            target: target.clone(),
            mem,
            len,
            host,
            last_write,
            last_access,
            parent,
            offset,
            retired,
            keep: Mutex::new(None),
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
        }))
    }

    /// `len` bytes of this allocation from `offset` as an allocation of their own (`clCreateSubBuffer`), which
    /// keeps this one alive. `offset` must be a multiple of the device's base address alignment.
    pub(super) fn region(&self, offset: usize, len: usize) -> Result<RawCl> {
        let cx = &self.0.target;
        let align = cx.inner.info.base_align.max(1);
        let fits = offset.checked_add(len).is_some_and(|end| end <= self.0.len);
        if !fits || !offset.is_multiple_of(align) || len == 0 {
            let reason = format!(
                "bytes {offset}..{} of a {}-byte buffer, at {align}-byte alignment",
                offset.saturating_add(len),
                self.0.len
            );
            return Err(RuntimeError::Layout { tensor: "<arena region>".into(), reason });
        }
        // SAFETY: the region lies inside this allocation at the device's base alignment (checked above), and
        // the new object holds this one (`parent`), so its memory outlives the region.
        let mem = unsafe { self.0.mem.create_sub_buffer(CL_MEM_READ_WRITE, offset, len) }.map_err(cl_err(
            cx,
            "clCreateSubBuffer",
            len,
        ))?;
        cx.inner.live.fetch_add(1, Ordering::SeqCst);
        let (last_write, last_access) = (Mutex::new(None), Mutex::new(None));
        let parent = Some((self.clone(), NEXT_REGION.fetch_add(1, Ordering::SeqCst)));
        let (mem, retired) = (ManuallyDrop::new(mem), Mutex::new(Vec::new()));
        let host = None;
        let keep = Mutex::new(None);
        let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
        let mem =
            ClMem { target: cx.clone(), mem, len, host, last_write, last_access, parent, offset, retired, keep, id };
        Ok(RawCl(Arc::new(mem)))
    }

    /// [`RawCl::kernel_arg`]'s allocation by its [`ClMem::id`], and the byte offset in it.
    pub(crate) fn kernel_key(&self) -> (u64, u64) {
        match &self.0.parent {
            Some((parent, _)) => {
                let (id, base) = parent.kernel_key();
                (id, base + self.0.offset as u64)
            }
            None => (self.0.id, 0),
        }
    }

    /// The allocation a kernel reaches this one through and the byte offset in it: the root of its regions
    /// (`codegen::offsets`, rule 2), so that no sub-buffer is ever a kernel's argument.
    pub(crate) fn kernel_arg(&self) -> (&Buffer<u8>, u64) {
        match &self.0.parent {
            Some((parent, _)) => {
                let (mem, base) = parent.kernel_arg();
                (mem, base + self.0.offset as u64)
            }
            None => (&self.0.mem, 0),
        }
    }

    /// A buffer over host memory the device uses in place (unified memory).
    pub(super) fn over_host(target: &Target, host: Backing, flags: u64) -> crate::Result<RawCl> {
        let (ptr, len) = match &host {
            Backing::Own(p) => (p.as_bytes().as_ptr(), p.len()),
            Backing::Imported(s) => {
                let b = s.host_bytes().unwrap_or_default();
                (b.as_ptr(), b.len())
            }
        };
        let mem = new_mem(target, flags | CL_MEM_USE_HOST_PTR, len, ptr.cast_mut()).map_err(|e| {
            crate::ClError::OutOfMemory {
                space: target.space().to_string(),
                buffer: "an imported input".into(),
                bytes: len,
                code: e.to_string(),
            }
        })?;
        Ok(RawCl::wrap(target, mem, len, Some(host)))
    }

    fn events(&self) -> Vec<cl_event> {
        self.0.last_write.lock().unwrap_or_else(|p| p.into_inner()).as_ref().map(|e| e.get()).into_iter().collect()
    }

    pub(super) fn set_write(&self, e: Event) {
        let e = Arc::new(e);
        self.accessed(&e);
        *self.0.last_write.lock().unwrap_or_else(|p| p.into_inner()) = Some(e);
    }

    pub(super) fn accessed(&self, e: &Arc<Event>) {
        *self.0.last_access.lock().unwrap_or_else(|p| p.into_inner()) = Some(Arc::clone(e));
    }
}

pub fn allocate(cx: &Target, len: usize) -> Result<RawCl> {
    match cx.mode() {
        Mode::Unified => {
            let host = Arc::new(PlainStorage::zeroed_aligned(len, cx.inner.info.base_align.max(64))?);
            RawCl::over_host(cx, Backing::Own(host), CL_MEM_READ_WRITE).map_err(RuntimeError::from)
        }
        Mode::Discrete => {
            let mem = new_mem(cx, CL_MEM_READ_WRITE, len, std::ptr::null_mut())?;
            Ok(RawCl::wrap(cx, mem, len, None))
        }
    }
}

pub fn upload(cx: &Target, bytes: &[u8]) -> Result<Transferred<RawCl>> {
    upload_with(cx, bytes.len(), |dst| {
        dst.copy_from_slice(bytes);
        Ok(())
    })
}

/// One upload of `len` bytes that `fill` writes straight into device-visible memory (the pinned staging
/// buffer, or the unified buffer's host memory): how a strided tensor is packed and uploaded in one copy.
pub fn upload_with(
    cx: &Target,
    len: usize,
    fill: impl FnOnce(&mut [u8]) -> stowage_runtime::Result<()>,
) -> Result<Transferred<RawCl>> {
    match cx.mode() {
        Mode::Unified => {
            // One copy into device-visible host memory.
            let mut host = PlainStorage::zeroed_aligned(len, cx.inner.info.base_align.max(64))?;
            fill(host.as_bytes_mut())?;
            let raw = RawCl::over_host(cx, Backing::Own(Arc::new(host)), CL_MEM_READ_WRITE)?;
            Ok(Transferred { value: raw, copied: true })
        }
        Mode::Discrete => {
            let dst = allocate(cx, len)?;
            stage_into(&dst, len, fill)?;
            Ok(Transferred { value: dst, copied: true })
        }
    }
}

/// `len` bytes that `fill` writes into the pinned staging buffer, copied into `dst` (discrete memory of at least
/// `len` bytes) after the work before it on the queue.
pub fn stage_into(dst: &RawCl, len: usize, fill: impl FnOnce(&mut [u8]) -> stowage_runtime::Result<()>) -> Result<()> {
    if len == 0 {
        return Ok(());
    }
    let cx = &dst.0.target;
    let q = &cx.inner.queue;
    let mut staging = cx.inner.staging.lock().unwrap_or_else(|p| p.into_inner());
    if staging.as_ref().is_none_or(|s| s.len < len) {
        let mem = new_mem(cx, CL_MEM_READ_WRITE | CL_MEM_ALLOC_HOST_PTR, len, std::ptr::null_mut())?;
        *staging = Some(Staging { mem, len, initialised: false });
    }
    let stage = staging.as_mut().expect("staging buffer made above");
    let mut ptr = std::ptr::null_mut();
    // SAFETY: a blocking map of `len` bytes of a buffer at least that long; the in-order queue finishes the
    // previous copy out of the staging buffer before this map.
    let map = unsafe { q.enqueue_map_buffer(&stage.mem, CL_BLOCKING, CL_MAP_WRITE, 0, len, &mut ptr, &[]) };
    map.map_err(cl_err(cx, "upload (map staging)", len))?;
    if !stage.initialised {
        // SAFETY: the map succeeded: `ptr` points at `len` writable bytes (all of a new staging buffer).
        unsafe { std::ptr::write_bytes(ptr.cast::<u8>(), 0, len) };
        stage.initialised = true;
    }
    // SAFETY: the map succeeded: `ptr` points at `len` writable, initialised bytes (zeroed above when the buffer
    // was new, written by earlier uploads since), which nothing else touches until the unmap below. `fill` is the
    // runtime's own packing or copying, which returns errors instead of panicking.
    let mapped = unsafe { std::slice::from_raw_parts_mut(ptr.cast::<u8>(), len) };
    let filled = fill(mapped);
    // SAFETY: `ptr` is the pointer this map returned; `mapped` is not used after this.
    unsafe { q.enqueue_unmap_mem_object(stage.mem.get(), ptr, &[]) }.map_err(cl_err(
        cx,
        "upload (unmap staging)",
        len,
    ))?;
    filled?;
    let copy = copy_bytes(cx, stage.mem.get(), dst.0.mem.get(), len, &[]).map_err(cl_err(cx, "upload (copy)", len))?;
    dst.set_write(copy);
    Ok(())
}

pub fn download(buffer: &RawCl) -> Result<Transferred<Arc<PlainStorage>>> {
    let m = &buffer.0;
    let cx = &m.target;
    if let Some(Backing::Own(host)) = &m.host {
        // Unified: after the writing work and a map (which makes the device's writes visible), the host
        // reads the allocation itself.
        sync_host(buffer, CL_MAP_READ)?;
        return Ok(Transferred { value: Arc::clone(host), copied: false });
    }
    let mut copy = PlainStorage::zeroed(m.len)?;
    if m.len > 0 {
        let events = buffer.events();
        // SAFETY: a blocking read of `len` bytes into a host slice of that length, after the writing work.
        unsafe { cx.inner.queue.enqueue_read_buffer(&m.mem, CL_BLOCKING, 0, copy.as_bytes_mut(), &events) }
            .map_err(cl_err(cx, "download", m.len))?;
    }
    Ok(Transferred { value: Arc::new(copy), copied: true })
}

/// Maps and unmaps a unified buffer, blocking, after its writing work: the device's writes are then in the
/// host memory it uses.
fn sync_host(buffer: &RawCl, flags: u64) -> Result<()> {
    let m = &buffer.0;
    if m.len == 0 {
        return Ok(());
    }
    let q = &m.target.inner.queue;
    let mut ptr = std::ptr::null_mut();
    let events = buffer.events();
    // SAFETY: a blocking map of the whole buffer, unmapped just below; nothing is read through `ptr`.
    unsafe { q.enqueue_map_buffer(&m.mem, CL_BLOCKING, flags, 0, m.len, &mut ptr, &events) }
        .map_err(cl_err(&m.target, "map", m.len))?;
    // SAFETY: `ptr` is what this map returned.
    let unmap =
        unsafe { q.enqueue_unmap_mem_object(m.mem.get(), ptr, &[]) }.map_err(cl_err(&m.target, "unmap", m.len))?;
    unmap.wait().map_err(cl_err(&m.target, "unmap", m.len))
}

/// `bytes` written over the start of `dst` through a blocking map for writing (after the work queued before it,
/// which the in-order queue finishes first): on unified memory, the host memory the device uses.
pub fn map_write(dst: &RawCl, bytes: &[u8]) -> Result<()> {
    let m = &dst.0;
    let len = bytes.len().min(m.len);
    if len == 0 {
        return Ok(());
    }
    let q = &m.target.inner.queue;
    let mut ptr = std::ptr::null_mut();
    // SAFETY: a blocking map of `len` bytes of the buffer for writing, unmapped below.
    unsafe { q.enqueue_map_buffer(&m.mem, CL_BLOCKING, CL_MAP_WRITE, 0, len, &mut ptr, &[]) }.map_err(cl_err(
        &m.target,
        "upload (map)",
        len,
    ))?;
    // SAFETY: the map succeeded: `ptr` points at `len` writable bytes that nothing else touches until the unmap.
    unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), ptr.cast::<u8>(), len) };
    // SAFETY: `ptr` is what this map returned, and is not used after.
    let unmap = unsafe { q.enqueue_unmap_mem_object(m.mem.get(), ptr, &[]) }.map_err(cl_err(
        &m.target,
        "upload (unmap)",
        len,
    ))?;
    dst.set_write(unmap);
    Ok(())
}

pub fn wait(buffer: &RawCl) -> Result<()> {
    let pending = buffer.0.last_write.lock().unwrap_or_else(|p| p.into_inner()).take();
    if let Some(e) = pending {
        e.wait().map_err(cl_err(&buffer.0.target, "wait", buffer.0.len))?;
    }
    Ok(())
}

pub fn copy(src: &RawCl, dst: &RawCl) -> Result<()> {
    let cx = &dst.0.target;
    let len = src.0.len.min(dst.0.len);
    if len == 0 {
        return Ok(());
    }
    let mut events = src.events();
    events.extend(dst.events());
    let e = copy_bytes(cx, src.0.mem.get(), dst.0.mem.get(), len, &events).map_err(cl_err(cx, "copy", len))?;
    dst.set_write(e);
    if let Some(e) = dst.0.last_write.lock().unwrap_or_else(|p| p.into_inner()).as_ref() {
        src.accessed(e);
    }
    Ok(())
}

/// A byte range of `buffer` as a buffer of its own, copied on the device after the work writing it: a slice
/// of a lazy output stays on the device, and reading it later moves only its bytes.
pub fn slice(buffer: &RawCl, bytes: Range<usize>) -> Result<Option<RawCl>> {
    let cx = &buffer.0.target;
    if bytes.start > bytes.end || bytes.end > buffer.0.len {
        return Err(RuntimeError::Layout {
            tensor: "<unnamed>".into(),
            reason: format!("slice {bytes:?} of a {}-byte OpenCL buffer", buffer.0.len),
        });
    }
    let len = bytes.len();
    let dst = allocate(cx, len)?;
    if len > 0 {
        let events = buffer.events();
        let e = copy_range(cx, buffer.0.mem.get(), bytes.start, dst.0.mem.get(), len, &events).map_err(cl_err(
            cx,
            "slice (copy)",
            len,
        ))?;
        dst.set_write(e);
        if let Some(e) = dst.0.last_write.lock().unwrap_or_else(|p| p.into_inner()).as_ref() {
            buffer.accessed(e);
        }
    }
    Ok(Some(dst))
}

/// `len` bytes from the start of `src` to the start of `dst`, after `events`.
fn copy_bytes(
    cx: &Target,
    src: opencl3::types::cl_mem,
    dst: opencl3::types::cl_mem,
    len: usize,
    events: &[cl_event],
) -> std::result::Result<Event, opencl3::error_codes::ClError> {
    copy_range(cx, src, 0, dst, len, events)
}

/// `len` bytes from `src` at `offset` to the start of `dst`, after `events`.
fn copy_range(
    cx: &Target,
    src: opencl3::types::cl_mem,
    offset: usize,
    dst: opencl3::types::cl_mem,
    len: usize,
    events: &[cl_event],
) -> std::result::Result<Event, opencl3::error_codes::ClError> {
    let wait = if events.is_empty() { std::ptr::null() } else { events.as_ptr() };
    // SAFETY: both buffers are live memory objects of this target's context, `src` holding `offset + len` bytes
    // and `dst` at least `len` (the callers check), and `wait` holds `events.len()` events.
    let e = unsafe {
        opencl3::command_queue::enqueue_copy_buffer(
            cx.inner.queue.get(),
            src,
            dst,
            offset,
            0,
            len,
            events.len() as u32,
            wait,
        )
    }?;
    Ok(Event::new(e))
}

pub fn is_on(buffer: &RawCl, cx: &Target) -> bool {
    buffer.0.target.inner.id == cx.inner.id
}

pub fn space(buffer: &RawCl) -> MemorySpace {
    buffer.0.target.space().clone()
}

/// A host view of a buffer, open until [`unmap`].
pub struct ClMapping<'b> {
    buffer: &'b RawCl,
    ptr: *mut u8,
    len: usize,
}

impl Deref for ClMapping<'_> {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        if self.len == 0 {
            return &[];
        }
        // SAFETY: `ptr` is the mapped region of `len` bytes, valid until the unmap that consumes this mapping.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }
}

impl DerefMut for ClMapping<'_> {
    fn deref_mut(&mut self) -> &mut [u8] {
        if self.len == 0 {
            return &mut [];
        }
        // SAFETY: as above; `&mut self` makes this the only view of the region.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) }
    }
}

pub fn map(buffer: &RawCl, mode: MapMode) -> Result<Transferred<ClMapping<'_>>> {
    let m = &buffer.0;
    let cx = &m.target;
    if mode == MapMode::Write {
        let shared = match &m.host {
            Some(Backing::Own(host)) => Arc::strong_count(host) > 1,
            Some(Backing::Imported(_)) => true,
            None => false,
        };
        if shared {
            return Err(device_err(cx, "map", m.len, "the buffer's memory is shared with a host tensor".into()));
        }
    }
    let copied = cx.mode() == Mode::Discrete;
    if m.len == 0 {
        return Ok(Transferred { value: ClMapping { buffer, ptr: std::ptr::null_mut(), len: 0 }, copied });
    }
    let flags = if mode == MapMode::Write { CL_MAP_WRITE | CL_MAP_READ } else { CL_MAP_READ };
    let mut ptr = std::ptr::null_mut();
    let events = buffer.events();
    // SAFETY: a blocking map of the whole buffer after exactly the work that writes it; the mapping is closed
    // by `unmap`, which the derive's guard always calls.
    unsafe { cx.inner.queue.enqueue_map_buffer(&m.mem, CL_BLOCKING, flags, 0, m.len, &mut ptr, &events) }
        .map_err(cl_err(cx, "map", m.len))?;
    Ok(Transferred { value: ClMapping { buffer, ptr: ptr.cast(), len: m.len }, copied })
}

pub fn unmap(buffer: &RawCl, mapping: ClMapping<'_>) -> Result<()> {
    debug_assert!(std::ptr::eq(buffer, mapping.buffer));
    if mapping.len == 0 {
        return Ok(());
    }
    let m = &buffer.0;
    // SAFETY: `mapping.ptr` is what the map of this buffer returned, and the mapping is consumed here.
    let e = unsafe { m.target.inner.queue.enqueue_unmap_mem_object(m.mem.get(), mapping.ptr.cast(), &[]) }
        .map_err(cl_err(&m.target, "unmap", m.len))?;
    // Kernels reading the buffer next wait for the writes to reach the device.
    buffer.set_write(e);
    Ok(())
}
