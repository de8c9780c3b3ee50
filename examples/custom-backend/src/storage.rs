//! The simulated device's memory: [`SimBuffer`], one struct with `#[derive(TensorStorage)]`, and the backend
//! functions the derive calls (`raw`). Device memory is host memory kept behind the backend: nothing outside reads
//! it but through a download, which the runtime counts in the ledger.

use std::ops::Range;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, RwLock};

use stowage_runtime::{DatumType, PlainStorage, TensorStorage};

/// Alignment of every buffer, and what rows are padded to, in bytes.
pub const ALIGNMENT: usize = 256;

static NEXT_DEVICE: AtomicUsize = AtomicUsize::new(0);

/// One simulated device: what allocations and uploads go through. Cheap to clone (shared).
#[derive(Clone, Debug)]
pub struct SimDevice {
    inner: Arc<DeviceState>,
}

#[derive(Debug)]
struct DeviceState {
    id: usize,
    /// Allocations alive now.
    live: AtomicUsize,
    /// Kernel launches left before a launch fails (`usize::MAX`: never).
    fail_after: AtomicUsize,
    /// Ops the device tells the planner it runs without having a kernel for them (a backend with a bug).
    claimed: RwLock<Vec<&'static str>>,
}

impl SimDevice {
    /// A new device.
    pub fn new() -> SimDevice {
        let state = DeviceState {
            id: NEXT_DEVICE.fetch_add(1, Ordering::Relaxed),
            live: AtomicUsize::new(0),
            fail_after: AtomicUsize::new(usize::MAX),
            claimed: RwLock::new(Vec::new()),
        };
        SimDevice { inner: Arc::new(state) }
    }

    /// Device allocations alive now (what a failed run must leave as it found).
    pub fn live_buffers(&self) -> usize {
        self.inner.live.load(Ordering::SeqCst)
    }

    /// Makes the kernel launch after the next `launches` fail, as a device lost mid-run would.
    pub fn fail_after(&self, launches: usize) {
        self.inner.fail_after.store(launches, Ordering::SeqCst);
    }

    /// Makes the device tell the planner it runs `op`, which it has no kernel for: lowering then refuses what the
    /// planner gave it, as a backend with a bug would.
    pub fn claim(&self, op: &'static str) {
        self.inner.claimed.write().unwrap_or_else(|p| p.into_inner()).push(op);
    }

    /// True when the device claims `op` without a kernel for it.
    pub(crate) fn claims(&self, op: &str) -> bool {
        self.inner.claimed.read().unwrap_or_else(|p| p.into_inner()).contains(&op)
    }

    /// Counts a kernel launch; `false` when this one fails.
    pub(crate) fn launch(&self) -> bool {
        let left = self.inner.fail_after.load(Ordering::SeqCst);
        if left == usize::MAX {
            return true;
        }
        if left == 0 {
            return false;
        }
        self.inner.fail_after.store(left - 1, Ordering::SeqCst);
        true
    }
}

impl Default for SimDevice {
    fn default() -> Self {
        SimDevice::new()
    }
}

/// A buffer on the simulated device.
#[derive(Clone, TensorStorage)]
#[storage(
    space = device,
    name = "sim",
    alignment = 256,
    row_pitch_alignment = 256,
    layouts(row_major, padded_rows),
    bandwidth_gbps = 16,
    latency_us = 10,
    context = SimDevice,
    allocate = raw::allocate,
    upload = raw::upload,
    upload_with = raw::upload_with,
    download = raw::download,
    wait = raw::wait,
    copy = raw::copy,
    slice = raw::slice,
    is_on = raw::is_on
)]
pub struct SimBuffer {
    #[storage(buffer)]
    mem: raw::Memory,
    #[storage(dtype)]
    dt: DatumType,
    #[storage(shape)]
    shape: Vec<usize>,
}

impl SimBuffer {
    /// Its shape.
    pub fn shape(&self) -> &[usize] {
        &self.shape
    }

    /// An f32 buffer of `shape` that the device itself filled with `values` (as a kernel writes its output): no
    /// transfer. What the rule kit's harness calls a buffer produced on the device.
    pub fn written(device: &SimDevice, shape: &[usize], values: &[f32]) -> stowage_runtime::Result<SimBuffer> {
        let buffer = SimBuffer::allocate(device, DatumType::F32, shape)?;
        buffer.write_f32(|y| y.copy_from_slice(values));
        Ok(buffer)
    }

    /// The buffer's bytes, read on the device (by a kernel, or a test's own window): no transfer.
    pub fn device_bytes(&self) -> Vec<u8> {
        self.mem.read(|b| b.to_vec())
    }

    /// Reads the buffer's elements on the device, as a kernel does.
    pub(crate) fn read_f32<R>(&self, f: impl FnOnce(&[f32]) -> R) -> R {
        self.mem.read(|b| f(stowage_runtime::bytemuck::cast_slice(b)))
    }

    /// Writes the buffer's elements on the device, as a kernel does.
    pub(crate) fn write_f32(&self, f: impl FnOnce(&mut [f32])) {
        self.mem.write(|b| f(stowage_runtime::bytemuck::cast_slice_mut(b)))
    }

    /// Where the device keeps the bytes (for tests: never a host tensor's address).
    pub fn device_address(&self) -> usize {
        self.mem.read(|b| b.as_ptr() as usize)
    }

    /// True when both are the same device memory.
    pub fn same_memory(&self, other: &SimBuffer) -> bool {
        Arc::ptr_eq(&self.mem.alloc, &other.mem.alloc) && self.mem.range == other.mem.range
    }

    /// The device it lives on.
    pub fn device_id(&self) -> usize {
        self.mem.alloc.device.id
    }
}

/// The backend functions `#[derive(TensorStorage)]` calls, as a backend crate writes them.
pub mod raw {
    use super::*;
    use stowage_runtime::{Result, Transferred};

    /// One device allocation; freed (and uncounted) when its last handle goes.
    #[derive(Debug)]
    pub struct Allocation {
        pub(super) device: Arc<DeviceState>,
        bytes: RwLock<PlainStorage>,
    }

    impl Drop for Allocation {
        fn drop(&mut self) {
            self.device.live.fetch_sub(1, Ordering::SeqCst);
        }
    }

    /// A handle to device memory: an allocation and the byte range of it this buffer is.
    #[derive(Clone, Debug)]
    pub struct Memory {
        pub(super) alloc: Arc<Allocation>,
        pub(super) range: Range<usize>,
    }

    impl Memory {
        pub(super) fn read<R>(&self, f: impl FnOnce(&[u8]) -> R) -> R {
            let bytes = self.alloc.bytes.read().unwrap_or_else(|p| p.into_inner());
            f(&bytes.as_bytes()[self.range.clone()])
        }

        pub(super) fn write(&self, f: impl FnOnce(&mut [u8])) {
            let mut bytes = self.alloc.bytes.write().unwrap_or_else(|p| p.into_inner());
            f(&mut bytes.as_bytes_mut()[self.range.clone()])
        }
    }

    /// A zeroed allocation of `len` bytes at the device's alignment.
    pub fn allocate(cx: &SimDevice, len: usize) -> Result<Memory> {
        let bytes = PlainStorage::zeroed_aligned(len, ALIGNMENT)?;
        cx.inner.live.fetch_add(1, Ordering::SeqCst);
        let alloc = Arc::new(Allocation { device: cx.inner.clone(), bytes: RwLock::new(bytes) });
        Ok(Memory { alloc, range: 0..len })
    }

    /// Host bytes into a new allocation: always a copy (the device stages nothing).
    pub fn upload(cx: &SimDevice, bytes: &[u8]) -> Result<Transferred<Memory>> {
        let memory = allocate(cx, bytes.len())?;
        memory.write(|b| b.copy_from_slice(bytes));
        Ok(Transferred { value: memory, copied: true })
    }

    /// `len` bytes that `fill` writes straight into a new allocation: a strided host tensor is packed as it is
    /// uploaded, in one copy.
    pub fn upload_with(
        cx: &SimDevice,
        len: usize,
        fill: impl FnOnce(&mut [u8]) -> Result<()>,
    ) -> Result<Transferred<Memory>> {
        let memory = allocate(cx, len)?;
        let mut filled = Ok(());
        memory.write(|b| filled = fill(b));
        filled?;
        Ok(Transferred { value: memory, copied: true })
    }

    /// The buffer's bytes into host memory: always a copy.
    pub fn download(memory: &Memory) -> Result<Transferred<Arc<PlainStorage>>> {
        let copy = memory.read(PlainStorage::copy_from)?;
        Ok(Transferred { value: Arc::new(copy), copied: true })
    }

    /// Kernels run to completion when launched: there is never work to wait for.
    pub fn wait(_memory: &Memory) -> Result<()> {
        Ok(())
    }

    /// Device to device.
    pub fn copy(src: &Memory, dst: &Memory) -> Result<()> {
        let bytes = src.read(|b| b.to_vec());
        dst.write(|b| b.copy_from_slice(&bytes));
        Ok(())
    }

    /// A view of a byte range of the same allocation.
    pub fn slice(memory: &Memory, bytes: Range<usize>) -> Result<Option<Memory>> {
        let range = memory.range.start + bytes.start..memory.range.start + bytes.end;
        Ok(Some(Memory { alloc: memory.alloc.clone(), range }))
    }

    /// True when the memory belongs to `cx`'s device.
    pub fn is_on(memory: &Memory, cx: &SimDevice) -> bool {
        Arc::ptr_eq(&memory.alloc.device, &cx.inner)
    }
}
