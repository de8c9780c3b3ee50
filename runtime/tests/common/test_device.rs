//! A test-only device, written with `#[derive(TensorStorage)]`: its bytes live in an
//! allocation of their own, every transfer is counted, and it runs as unified memory
//! (materializing shares the allocation) or as a discrete device (every transfer is a
//! copy). Work is "queued" on a background thread, so that waiting is observable.
//!
//! The backend functions are in `raw`; the storage itself is one struct with attributes.

use std::ops::Range;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::ThreadId;
use std::time::Duration;

use stowage_runtime::{DatumType, PlainStorage, TensorStorage};

/// How the test device reaches host memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Device memory is host memory.
    Unified,
    /// Every transfer is a copy.
    Discrete,
}

/// What the device did, counted by the device itself (independently of the ledger).
#[derive(Debug, Default)]
pub struct Counters {
    pub uploads: AtomicUsize,
    pub upload_bytes: AtomicUsize,
    pub downloads: AtomicUsize,
    pub download_bytes: AtomicUsize,
    pub maps: AtomicUsize,
    pub unmaps: AtomicUsize,
    pub waits: Mutex<Vec<ThreadId>>,
}

impl Counters {
    pub fn uploads(&self) -> usize {
        self.uploads.load(Ordering::SeqCst)
    }
    pub fn downloads(&self) -> usize {
        self.downloads.load(Ordering::SeqCst)
    }
    pub fn download_bytes(&self) -> usize {
        self.download_bytes.load(Ordering::SeqCst)
    }
    pub fn waiting_threads(&self) -> Vec<ThreadId> {
        self.waits.lock().unwrap().clone()
    }
}

static NEXT_DEVICE: AtomicUsize = AtomicUsize::new(0);

/// A test device.
#[derive(Clone, Debug)]
pub struct TestContext {
    mode: Mode,
    id: usize,
    pub counters: Arc<Counters>,
}

/// A buffer on the test device: the whole backend-facing storage is this declaration.
#[derive(Clone, TensorStorage)]
#[storage(
    space = device,
    name = "test",
    alignment = 64,
    mappable = copy,
    bandwidth_gbps = 16,
    latency_us = 5,
    context = TestContext,
    allocate = raw::allocate,
    upload = raw::upload,
    download = raw::download,
    wait = raw::wait,
    copy = raw::copy,
    slice = raw::slice,
    map = raw::map,
    unmap = raw::unmap,
    is_on = raw::is_on,
    space_of = raw::space
)]
pub struct TestBuffer {
    #[storage(buffer)]
    raw: raw::RawBuffer,
    #[storage(dtype)]
    dt: DatumType,
    #[storage(shape)]
    shape: Vec<usize>,
    #[storage(run_scoped)]
    run_scoped: bool,
}

impl TestContext {
    pub fn new(mode: Mode) -> Self {
        TestContext { mode, id: NEXT_DEVICE.fetch_add(1, Ordering::SeqCst), counters: Arc::default() }
    }

    pub fn mode(&self) -> Mode {
        self.mode
    }

    /// An owned f32 buffer that a kernel, still running, fills with `values` (no transfer
    /// is counted: the device computed them).
    pub fn produce(&self, shape: &[usize], values: &[f32]) -> TestBuffer {
        let buffer = TestBuffer::allocate(self, DatumType::F32, shape).unwrap();
        buffer.queue_write(stowage_runtime::bytemuck::cast_slice(values).to_vec(), Duration::from_millis(20));
        buffer
    }

    /// A view into this run's scratch memory holding `values`, good only until the next run.
    pub fn run_scoped(&self, values: &[f32]) -> TestBuffer {
        let mut buffer = self.produce(&[values.len()], values);
        buffer.run_scoped = true;
        buffer
    }
}

impl TestBuffer {
    /// Queue a kernel that writes `bytes` into this buffer after `delay`.
    pub fn queue_write(&self, bytes: Vec<u8>, delay: Duration) {
        self.raw.queue_write(bytes, delay);
    }

    /// Queued work not finished yet.
    pub fn pending(&self) -> usize {
        *self.raw.inner.pending.0.lock().unwrap()
    }

    /// The device's bytes, read without a transfer (the test's own window into the device).
    pub fn peek(&self) -> Vec<u8> {
        self.raw.peek()
    }

    /// The address of the device allocation (on unified memory, what the host shares).
    pub fn address(&self) -> usize {
        self.raw.inner.memory.lock().unwrap().address() + self.raw.range.start
    }

    /// True when both handles are the same device buffer.
    pub fn same_buffer(&self, other: &TestBuffer) -> bool {
        Arc::ptr_eq(&self.raw.inner, &other.raw.inner) && self.raw.range == other.raw.range
    }
}

/// The test device's backend functions, as a backend crate would write them.
pub mod raw {
    use std::ops::{Deref, DerefMut};
    use std::sync::MutexGuard;

    use stowage_runtime::{MapMode, MemoryKind, MemorySpace, Result, Transferred};

    use super::*;

    #[derive(Debug)]
    pub(super) struct Inner {
        mode: Mode,
        device: usize,
        /// The device's memory. On unified memory, downloads share this very allocation.
        pub(super) memory: Mutex<Arc<PlainStorage>>,
        /// Work queued and not finished.
        pub(super) pending: (Mutex<usize>, Condvar),
        counters: Arc<Counters>,
    }

    /// A device allocation, or a sub-buffer of one.
    #[derive(Clone, Debug)]
    pub struct RawBuffer {
        pub(super) inner: Arc<Inner>,
        pub(super) range: Range<usize>,
    }

    impl RawBuffer {
        pub(super) fn queue_write(&self, bytes: Vec<u8>, delay: Duration) {
            *self.inner.pending.0.lock().unwrap() += 1;
            let inner = self.inner.clone();
            let start = self.range.start;
            std::thread::spawn(move || {
                std::thread::sleep(delay);
                {
                    let mut memory = inner.memory.lock().unwrap();
                    Arc::make_mut(&mut memory).as_bytes_mut()[start..start + bytes.len()].copy_from_slice(&bytes);
                }
                let (count, done) = &inner.pending;
                *count.lock().unwrap() -= 1;
                done.notify_all();
            });
        }

        pub(super) fn peek(&self) -> Vec<u8> {
            self.inner.memory.lock().unwrap().as_bytes()[self.range.clone()].to_vec()
        }

        fn block_until_idle(&self) {
            let (count, done) = &self.inner.pending;
            let mut count = count.lock().unwrap();
            while *count > 0 {
                count = done.wait(count).unwrap();
            }
        }

        fn count_download(&self) {
            self.inner.counters.downloads.fetch_add(1, Ordering::SeqCst);
            self.inner.counters.download_bytes.fetch_add(self.range.len(), Ordering::SeqCst);
        }
    }

    pub fn allocate(cx: &TestContext, len: usize) -> Result<RawBuffer> {
        let inner = Inner {
            mode: cx.mode,
            device: cx.id,
            memory: Mutex::new(Arc::new(PlainStorage::zeroed(len)?)),
            pending: (Mutex::new(0), Condvar::new()),
            counters: cx.counters.clone(),
        };
        Ok(RawBuffer { inner: Arc::new(inner), range: 0..len })
    }

    pub fn upload(cx: &TestContext, bytes: &[u8]) -> Result<Transferred<RawBuffer>> {
        let buffer = allocate(cx, bytes.len())?;
        Arc::make_mut(&mut buffer.inner.memory.lock().unwrap()).as_bytes_mut().copy_from_slice(bytes);
        cx.counters.uploads.fetch_add(1, Ordering::SeqCst);
        cx.counters.upload_bytes.fetch_add(bytes.len(), Ordering::SeqCst);
        Ok(Transferred { value: buffer, copied: true })
    }

    pub fn download(buffer: &RawBuffer) -> Result<Transferred<Arc<PlainStorage>>> {
        let memory = buffer.inner.memory.lock().unwrap();
        if buffer.inner.mode == Mode::Unified && buffer.range == (0..memory.len()) {
            return Ok(Transferred { value: Arc::clone(&memory), copied: false });
        }
        let copy = PlainStorage::copy_from(&memory.as_bytes()[buffer.range.clone()])?;
        drop(memory);
        buffer.count_download();
        Ok(Transferred { value: Arc::new(copy), copied: true })
    }

    pub fn wait(buffer: &RawBuffer) -> Result<()> {
        buffer.inner.counters.waits.lock().unwrap().push(std::thread::current().id());
        buffer.block_until_idle();
        Ok(())
    }

    pub fn copy(src: &RawBuffer, dst: &RawBuffer) -> Result<()> {
        let bytes = src.peek();
        let mut memory = dst.inner.memory.lock().unwrap();
        Arc::make_mut(&mut memory).as_bytes_mut()[dst.range.clone()].copy_from_slice(&bytes);
        Ok(())
    }

    pub fn slice(buffer: &RawBuffer, bytes: Range<usize>) -> Result<Option<RawBuffer>> {
        if buffer.inner.mode == Mode::Unified {
            // Unified memory: viewing the shared allocation is already free.
            return Ok(None);
        }
        let range = buffer.range.start + bytes.start..buffer.range.start + bytes.end;
        Ok(Some(RawBuffer { inner: buffer.inner.clone(), range }))
    }

    pub fn is_on(buffer: &RawBuffer, cx: &TestContext) -> bool {
        buffer.inner.device == cx.id
    }

    pub fn space(buffer: &RawBuffer) -> MemorySpace {
        match buffer.inner.mode {
            Mode::Unified => MemorySpace::device("test:unified", MemoryKind::Unified),
            Mode::Discrete => MemorySpace::device("test:discrete", MemoryKind::Device),
        }
    }

    /// A mapping of the test device.
    pub enum TestMapping<'b> {
        /// Unified, reading: a share of the device allocation itself.
        Shared { memory: Arc<PlainStorage>, range: Range<usize> },
        /// Unified, writing: the device allocation itself, held exclusively.
        Locked { memory: MutexGuard<'b, Arc<PlainStorage>>, range: Range<usize> },
        /// Discrete: a host staging copy, written back at unmap when mapped for writing.
        Staged { bytes: Vec<u8>, mode: MapMode },
    }

    impl Deref for TestMapping<'_> {
        type Target = [u8];
        fn deref(&self) -> &[u8] {
            match self {
                TestMapping::Shared { memory, range } => &memory.as_bytes()[range.clone()],
                TestMapping::Locked { memory, range } => &memory.as_bytes()[range.clone()],
                TestMapping::Staged { bytes, .. } => bytes,
            }
        }
    }

    impl DerefMut for TestMapping<'_> {
        fn deref_mut(&mut self) -> &mut [u8] {
            match self {
                // Copy-on-write: bytes a host tensor still shares are left to it.
                TestMapping::Shared { memory, range } => &mut Arc::make_mut(memory).as_bytes_mut()[range.clone()],
                TestMapping::Locked { memory, range } => &mut Arc::make_mut(memory).as_bytes_mut()[range.clone()],
                TestMapping::Staged { bytes, .. } => bytes,
            }
        }
    }

    pub fn map(buffer: &RawBuffer, mode: MapMode) -> Result<Transferred<TestMapping<'_>>> {
        buffer.block_until_idle();
        buffer.inner.counters.maps.fetch_add(1, Ordering::SeqCst);
        let range = buffer.range.clone();
        if buffer.inner.mode == Mode::Unified {
            let mapping = match mode {
                MapMode::Read => TestMapping::Shared { memory: buffer.inner.memory.lock().unwrap().clone(), range },
                MapMode::Write => TestMapping::Locked { memory: buffer.inner.memory.lock().unwrap(), range },
            };
            return Ok(Transferred { value: mapping, copied: false });
        }
        buffer.count_download();
        Ok(Transferred { value: TestMapping::Staged { bytes: buffer.peek(), mode }, copied: true })
    }

    pub fn unmap(buffer: &RawBuffer, mapping: TestMapping<'_>) -> Result<()> {
        let counters = &buffer.inner.counters;
        counters.unmaps.fetch_add(1, Ordering::SeqCst);
        if let TestMapping::Staged { bytes, mode: MapMode::Write } = mapping {
            let mut memory = buffer.inner.memory.lock().unwrap();
            Arc::make_mut(&mut memory).as_bytes_mut()[buffer.range.clone()].copy_from_slice(&bytes);
            counters.uploads.fetch_add(1, Ordering::SeqCst);
            counters.upload_bytes.fetch_add(bytes.len(), Ordering::SeqCst);
        }
        Ok(())
    }
}
