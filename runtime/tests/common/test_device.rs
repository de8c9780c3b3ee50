//! A test-only device: its bytes live in an allocation of their own, every transfer is
//! counted, and it runs as unified memory (materializing shares the allocation) or as a
//! discrete device (every transfer is a copy). Work is "queued" on a background thread, so
//! that waiting is observable.

use std::ops::{Deref, DerefMut, Range};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::ThreadId;
use std::time::Duration;

use stowage_runtime::{
    DeviceBuffer, MemoryKind, MemorySpace, PlainStorage, ReadMapping, Result, Transferred, WriteMapping,
};

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

impl TestContext {
    pub fn new(mode: Mode) -> Self {
        TestContext { mode, id: NEXT_DEVICE.fetch_add(1, Ordering::SeqCst), counters: Arc::default() }
    }

    pub fn mode(&self) -> Mode {
        self.mode
    }

    fn buffer(&self, plain: PlainStorage, run_scoped: bool) -> TestBuffer {
        let len = plain.len();
        TestBuffer {
            inner: Arc::new(Inner {
                mode: self.mode,
                device: self.id,
                memory: Mutex::new(Arc::new(plain)),
                pending: (Mutex::new(0), Condvar::new()),
                counters: self.counters.clone(),
            }),
            range: 0..len,
            run_scoped,
        }
    }

    /// An owned buffer of `bytes.len()` zero bytes that a kernel, still running, fills with
    /// `bytes` (no transfer is counted: the device computed them).
    pub fn produce(&self, bytes: Vec<u8>) -> TestBuffer {
        let buffer = self.buffer(PlainStorage::zeroed(bytes.len()).unwrap(), false);
        buffer.queue_write(bytes, Duration::from_millis(20));
        buffer
    }

    /// A view into this run's scratch memory holding `bytes`, good only until the next run.
    pub fn run_scoped(&self, bytes: &[u8]) -> TestBuffer {
        self.buffer(PlainStorage::copy_from(bytes).unwrap(), true)
    }
}

#[derive(Debug)]
struct Inner {
    mode: Mode,
    device: usize,
    /// The device's memory. On unified memory, downloads share this very allocation.
    memory: Mutex<Arc<PlainStorage>>,
    /// Work queued and not finished.
    pending: (Mutex<usize>, Condvar),
    counters: Arc<Counters>,
}

/// A buffer on the test device (a shared handle; a slice is a sub-buffer).
#[derive(Clone, Debug)]
pub struct TestBuffer {
    inner: Arc<Inner>,
    range: Range<usize>,
    run_scoped: bool,
}

impl TestBuffer {
    /// Queue a kernel that writes `bytes` into this buffer after `delay`.
    pub fn queue_write(&self, bytes: Vec<u8>, delay: Duration) {
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

    /// Queued work not finished yet.
    pub fn pending(&self) -> usize {
        *self.inner.pending.0.lock().unwrap()
    }

    /// The device's bytes, read without a transfer (the test's own window into the device).
    pub fn peek(&self) -> Vec<u8> {
        self.inner.memory.lock().unwrap().as_bytes()[self.range.clone()].to_vec()
    }

    /// The address of the device allocation (on unified memory, what the host shares).
    pub fn address(&self) -> usize {
        self.inner.memory.lock().unwrap().address() + self.range.start
    }

    /// True when both handles are the same device buffer.
    pub fn same_buffer(&self, other: &TestBuffer) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner) && self.range == other.range
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

/// A unified read mapping: a share of the device allocation itself.
struct SharedRead {
    memory: Arc<PlainStorage>,
    range: Range<usize>,
}

impl Deref for SharedRead {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.memory.as_bytes()[self.range.clone()]
    }
}

/// A unified write mapping: the device allocation itself, held exclusively.
struct UnifiedWrite<'m> {
    memory: MutexGuard<'m, Arc<PlainStorage>>,
    range: Range<usize>,
    counters: &'m Counters,
}

impl Deref for UnifiedWrite<'_> {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.memory.as_bytes()[self.range.clone()]
    }
}

impl DerefMut for UnifiedWrite<'_> {
    fn deref_mut(&mut self) -> &mut [u8] {
        // Copy-on-write: bytes a host tensor still shares are left to it.
        &mut Arc::make_mut(&mut self.memory).as_bytes_mut()[self.range.clone()]
    }
}

impl WriteMapping for UnifiedWrite<'_> {
    fn unmap(self: Box<Self>) -> Result<()> {
        Ok(())
    }
}

impl Drop for UnifiedWrite<'_> {
    fn drop(&mut self) {
        self.counters.unmaps.fetch_add(1, Ordering::SeqCst);
    }
}

/// A discrete write mapping: a host staging copy, written back at unmap.
struct StagedWrite<'b> {
    staging: Vec<u8>,
    buffer: &'b TestBuffer,
    published: bool,
}

impl Deref for StagedWrite<'_> {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.staging
    }
}

impl DerefMut for StagedWrite<'_> {
    fn deref_mut(&mut self) -> &mut [u8] {
        &mut self.staging
    }
}

impl StagedWrite<'_> {
    fn publish(&mut self) {
        if std::mem::replace(&mut self.published, true) {
            return;
        }
        let inner = &self.buffer.inner;
        let mut memory = inner.memory.lock().unwrap();
        Arc::make_mut(&mut memory).as_bytes_mut()[self.buffer.range.clone()].copy_from_slice(&self.staging);
        inner.counters.uploads.fetch_add(1, Ordering::SeqCst);
        inner.counters.upload_bytes.fetch_add(self.staging.len(), Ordering::SeqCst);
        inner.counters.unmaps.fetch_add(1, Ordering::SeqCst);
    }
}

impl WriteMapping for StagedWrite<'_> {
    fn unmap(mut self: Box<Self>) -> Result<()> {
        self.publish();
        Ok(())
    }
}

impl Drop for StagedWrite<'_> {
    fn drop(&mut self) {
        self.publish();
    }
}

impl DeviceBuffer for TestBuffer {
    type Context = TestContext;

    fn space(&self) -> MemorySpace {
        match self.inner.mode {
            Mode::Unified => MemorySpace::device("test:unified", MemoryKind::Unified),
            Mode::Discrete => MemorySpace::device("test:discrete", MemoryKind::Device),
        }
    }

    fn byte_len(&self) -> usize {
        self.range.len()
    }

    fn is_run_scoped(&self) -> bool {
        self.run_scoped
    }

    fn wait(&self) -> Result<()> {
        self.inner.counters.waits.lock().unwrap().push(std::thread::current().id());
        self.block_until_idle();
        Ok(())
    }

    fn download(&self) -> Result<Transferred<Arc<PlainStorage>>> {
        let memory = self.inner.memory.lock().unwrap();
        if self.inner.mode == Mode::Unified && self.range == (0..memory.len()) {
            return Ok(Transferred { value: Arc::clone(&memory), copied: false });
        }
        let copy = PlainStorage::copy_from(&memory.as_bytes()[self.range.clone()])?;
        drop(memory);
        self.count_download();
        Ok(Transferred { value: Arc::new(copy), copied: true })
    }

    fn upload(cx: &TestContext, bytes: &[u8]) -> Result<Transferred<Self>> {
        cx.counters.uploads.fetch_add(1, Ordering::SeqCst);
        cx.counters.upload_bytes.fetch_add(bytes.len(), Ordering::SeqCst);
        Ok(Transferred { value: cx.buffer(PlainStorage::copy_from(bytes)?, false), copied: true })
    }

    fn is_on(&self, cx: &TestContext) -> bool {
        self.inner.device == cx.id
    }

    fn slice(&self, bytes: Range<usize>) -> Result<Option<Self>> {
        if self.inner.mode == Mode::Unified {
            // Unified memory: viewing the shared allocation is already free.
            return Ok(None);
        }
        let range = self.range.start + bytes.start..self.range.start + bytes.end;
        Ok(Some(TestBuffer { inner: self.inner.clone(), range, run_scoped: self.run_scoped }))
    }

    fn map_read_bytes(&self) -> Result<Transferred<Box<dyn ReadMapping + '_>>> {
        self.block_until_idle();
        self.inner.counters.maps.fetch_add(1, Ordering::SeqCst);
        let memory = self.inner.memory.lock().unwrap().clone();
        if self.inner.mode == Mode::Unified {
            return Ok(Transferred {
                value: Box::new(SharedRead { memory, range: self.range.clone() }),
                copied: false,
            });
        }
        self.count_download();
        let staging = memory.as_bytes()[self.range.clone()].to_vec();
        Ok(Transferred { value: Box::new(staging), copied: true })
    }

    fn map_write_bytes(&mut self) -> Result<Transferred<Box<dyn WriteMapping + '_>>> {
        self.block_until_idle();
        self.inner.counters.maps.fetch_add(1, Ordering::SeqCst);
        if self.inner.mode == Mode::Unified {
            let memory = self.inner.memory.lock().unwrap();
            let mapping = UnifiedWrite { memory, range: self.range.clone(), counters: &self.inner.counters };
            return Ok(Transferred { value: Box::new(mapping), copied: false });
        }
        self.count_download();
        let staging = self.peek();
        Ok(Transferred { value: Box::new(StagedWrite { staging, buffer: self, published: false }), copied: true })
    }
}
