//! [`ClBuffer`]: the OpenCL target's storage, declared with `#[derive(TensorStorage)]`; the derive generates the
//! runtime's `DeviceBuffer` (lazy host tensors at the model boundary, outputs handed back as inputs, typed map guards,
//! the ledger) from the backend functions in [`raw`].
//!
//! Two paths, chosen when the target is opened ([`Mode`]):
//! - **unified**: every buffer is host memory the device uses in place (`CL_MEM_USE_HOST_PTR`), allocated at the
//!   device's base alignment; a caller's tensor that already meets it is imported without a copy
//!   ([`ClBuffer::import`], which holds the tensor's storage so it cannot be freed while imported); reading a
//!   result shares the allocation;
//! - **discrete**: device memory; uploads go through one pinned staging buffer (`CL_MEM_ALLOC_HOST_PTR`), kept
//!   and grown across runs; reads are one download.
//!
//! Every buffer records the event of the last command that writes it: `wait` waits for exactly that work, not for
//! the whole queue, and a mapping names it as the event it waits for (on the target's one in-order queue, a map also
//! follows every command enqueued before it).

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

use opencl3::event::Event;
use opencl3::memory::{
    Buffer, ClMem as _, CL_MAP_READ, CL_MAP_WRITE, CL_MEM_ALLOC_HOST_PTR, CL_MEM_READ_ONLY, CL_MEM_READ_WRITE,
    CL_MEM_USE_HOST_PTR,
};
use opencl3::types::{cl_event, CL_BLOCKING};
use stowage_runtime::{DatumType, MapMode, MemorySpace, PlainStorage, TensorStorage};

use crate::device::{Mode, Target};
use crate::error::code_name;

/// A value's storage on an OpenCL target.
#[derive(Clone, stowage_runtime::TensorStorage)]
#[storage(
    space = device,
    name = "opencl",
    alignment = 64,
    mappable = copy,
    bandwidth_gbps = 20,
    latency_us = 10,
    context = Target,
    allocate = raw::allocate,
    upload = raw::upload,
    upload_with = raw::upload_with,
    download = raw::download,
    wait = raw::wait,
    copy = raw::copy,
    slice = raw::slice,
    map = raw::map,
    unmap = raw::unmap,
    is_on = raw::is_on,
    space_of = raw::space
)]
pub struct ClBuffer {
    #[storage(buffer)]
    raw: raw::RawCl,
    #[storage(dtype)]
    dt: DatumType,
    #[storage(shape)]
    shape: Vec<usize>,
}

/// The discrete path's pinned staging buffer.
pub struct Staging {
    mem: Buffer<u8>,
    len: usize,
    /// Its bytes have been written once (OpenCL leaves new memory uninitialised; a Rust slice over it must not be).
    initialised: bool,
}

impl ClBuffer {
    /// Uses a caller's host tensor in place on a unified-memory target: no copy. `Err(reason)` when that cannot be
    /// (a discrete target, bytes not on the host, not packed row-major, a view of part of its storage, or an
    /// address not at the device's base alignment); the caller then uploads, giving that reason. The buffer holds
    /// the tensor's storage, so the host bytes live as long as the device may read them.
    pub fn import(target: &Target, t: &stowage_runtime::Tensor<'static>) -> crate::Result<Result<ClBuffer, String>> {
        Self::import_with(target, t, CL_MEM_READ_WRITE)
    }

    /// [`ClBuffer::import`] for a constant, which kernels only read: the device takes the memory read-only (in
    /// built code it is the executable's image).
    pub fn import_constant(
        target: &Target,
        t: &stowage_runtime::Tensor<'static>,
    ) -> crate::Result<Result<ClBuffer, String>> {
        Self::import_with(target, t, CL_MEM_READ_ONLY)
    }

    fn import_with(
        target: &Target,
        t: &stowage_runtime::Tensor<'static>,
        flags: u64,
    ) -> crate::Result<Result<ClBuffer, String>> {
        let align = target.inner.info.base_align.max(1);
        let space = target.space();
        let refused = |why: String| Ok(Err(why));
        if target.mode() != Mode::Unified {
            return refused(format!("{space} is used through the discrete path: inputs are copied"));
        }
        let Some(bytes) = t.storage().host_bytes() else {
            return refused("the input is not in host memory".into());
        };
        let address = bytes.as_ptr() as usize + t.layout().offset();
        if bytes.is_empty() || !address.is_multiple_of(align) {
            return refused(format!(
                "the input's address is not at {space}'s {align}-byte alignment (it is {} bytes past it)",
                address % align
            ));
        }
        if !t.is_row_major() || !t.is_whole_storage() {
            return refused(format!("the input is a {} view, not a whole packed buffer", t.layout_kind()));
        }
        let storage = t.shared_storage();
        let raw = raw::RawCl::over_host(target, Backing::Imported(storage), flags)?;
        Ok(Ok(ClBuffer { raw, dt: t.dt(), shape: t.shape().to_vec() }))
    }

    /// The same device memory seen with another shape of as many elements (a Reshape on the device).
    pub fn with_shape(&self, shape: &[usize]) -> ClBuffer {
        ClBuffer { raw: self.raw.clone(), dt: self.dt, shape: shape.to_vec() }
    }

    /// The datum type.
    pub fn dt(&self) -> DatumType {
        self.dt
    }

    /// The shape.
    pub fn shape(&self) -> &[usize] {
        &self.shape
    }

    /// The OpenCL memory object, for kernel arguments.
    pub fn mem(&self) -> &Buffer<u8> {
        &self.raw.0.mem
    }

    /// A host tensor of any layout, packed into device memory in one copy (through the staging buffer on the
    /// discrete path).
    pub fn upload_packed(target: &Target, t: &stowage_runtime::Tensor<'_>) -> crate::Result<ClBuffer> {
        let len = t.len() * t.dt().size_of();
        let up = raw::upload_with(target, len, |dst| t.write_row_major(dst))
            .map_err(|e| crate::ClError::Transfer { value: t.name_or_unnamed().to_string(), message: e.to_string() })?;
        Ok(ClBuffer { raw: up.value, dt: t.dt(), shape: t.shape().to_vec() })
    }

    /// True when this buffer uses a caller's host memory in place.
    pub fn is_imported(&self) -> bool {
        matches!(self.raw.0.host, Some(Backing::Imported(_)))
    }

    /// Records `event` as the last command writing this buffer (a kernel that produces it, perhaps with others).
    pub fn written_by_shared(&self, event: Arc<Event>) {
        self.raw.accessed(&event);
        *self.raw.0.last_write.lock().unwrap_or_else(|p| p.into_inner()) = Some(event);
    }

    /// Records `event` as a command reading this buffer.
    pub fn read_by(&self, event: &Arc<Event>) {
        self.raw.accessed(event);
    }

    /// `bytes` (its whole length) written into this buffer after the work queued before (discrete memory through
    /// the pinned staging buffer, unified memory through a map): one upload, for the caller to record.
    pub(crate) fn write_from_host(&self, bytes: &[u8]) -> stowage_runtime::Result<()> {
        if bytes.len() != self.byte_len() {
            return Err(stowage_runtime::RuntimeError::ByteLength {
                tensor: "<unnamed>".into(),
                dt: self.dt,
                shape: self.shape.clone(),
                expected: self.byte_len(),
                found: bytes.len(),
            });
        }
        if self.raw.0.host.is_some() {
            return raw::map_write(&self.raw, bytes);
        }
        raw::stage_into(&self.raw, bytes.len(), |dst| {
            dst.copy_from_slice(bytes);
            Ok(())
        })
    }

    /// Bytes.
    pub fn byte_len(&self) -> usize {
        self.raw.0.len
    }

    /// True when no command writing this buffer is still queued or running.
    pub fn is_idle(&self) -> bool {
        let last = self.raw.0.last_write.lock().unwrap_or_else(|p| p.into_inner());
        last.as_ref().is_none_or(|e| e.command_execution_status().is_ok_and(|s| s.0 == opencl3::event::CL_COMPLETE))
    }

    /// The buffer's bytes read now, outside the runtime's accounting (for tests and debugging: the runtime's own
    /// reads go through `LazyHost`, which records them).
    pub fn read_now(&self) -> crate::Result<Vec<u8>> {
        let bytes = raw::download(&self.raw).map_err(|e| crate::ClError::Transfer {
            value: "a buffer read for inspection".into(),
            message: e.to_string(),
        })?;
        Ok(bytes.value.as_bytes().to_vec())
    }

    /// Where the host sees this buffer's memory on unified memory (`None` on the discrete path).
    pub fn host_address(&self) -> Option<usize> {
        match &self.raw.0.host {
            Some(Backing::Own(host)) => Some(host.as_bytes().as_ptr() as usize),
            Some(Backing::Imported(t)) => t.host_bytes().map(|b| b.as_ptr() as usize),
            None => None,
        }
    }

    /// True when nothing but this handle uses the buffer: no other handle shares its memory, and on unified memory
    /// no host tensor shares the host allocation (a read output shares it, `LazyHost` rule 4). Such a buffer may be
    /// written for another value.
    pub(crate) fn is_reclaimable(&self) -> bool {
        self.is_unique()
            && match &self.raw.0.host {
                None => true,
                Some(Backing::Own(host)) => Arc::strong_count(host) == 1,
                Some(Backing::Imported(_)) => false,
            }
    }

    /// True when no other handle shares this buffer's memory.
    pub fn is_unique(&self) -> bool {
        Arc::strong_count(&self.raw.0) == 1
    }

    /// The same memory holding a `dt` value of `shape` (of the same byte length), for reuse.
    pub(crate) fn retyped(self, dt: DatumType, shape: &[usize]) -> ClBuffer {
        ClBuffer { raw: self.raw, dt, shape: shape.to_vec() }
    }

    /// `bytes` bytes of this buffer from `offset`, as a buffer of its own holding a `dt` value of `shape`: a
    /// planned place in the session's arena. The offset must be at the device's base alignment.
    pub fn region(&self, offset: usize, bytes: usize, dt: DatumType, shape: &[usize]) -> crate::Result<ClBuffer> {
        let raw = self.raw.region(offset, bytes).map_err(|e| crate::ClError::Transfer {
            value: "a region of the session's arena".into(),
            message: e.to_string(),
        })?;
        Ok(ClBuffer { raw, dt, shape: shape.to_vec() })
    }

    /// The allocation a kernel reaches this buffer through and its byte offset there (`codegen::offsets`).
    pub(crate) fn kernel_arg(&self) -> (&Buffer<u8>, u64) {
        self.raw.kernel_arg()
    }

    /// [`ClBuffer::kernel_arg`] by the allocation's process-unique id instead of its `cl_mem`.
    pub(crate) fn kernel_key(&self) -> (u64, u64) {
        self.raw.kernel_key()
    }

    /// This allocation's process-unique id (never reused, unlike a freed `cl_mem`'s address).
    pub(crate) fn id(&self) -> u64 {
        self.raw.0.id
    }

    /// True when both are the same device memory.
    pub fn same_memory(&self, other: &ClBuffer) -> bool {
        Arc::ptr_eq(&self.raw.0, &other.raw.0)
    }
}

/// Host memory a unified-memory buffer uses in place.
pub(crate) enum Backing {
    /// Allocated by the backend; downloads share it.
    Own(Arc<PlainStorage>),
    /// A caller's tensor storage, imported.
    Imported(Arc<dyn TensorStorage>),
}

mod dlpack;
mod external;
pub use dlpack::{export_dlpack, import_dlpack};
pub mod raw;

// SAFETY: the mapping is a pointer into a mapped region that stays valid (and is only reached through this
// mapping) until unmapped; OpenCL allows the host to use it from any thread.
unsafe impl Send for raw::ClMapping<'_> {}
