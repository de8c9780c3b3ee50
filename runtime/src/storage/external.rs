//! Caller-owned memory used in place: a camera frame, an mmap, another framework's buffer.

use std::any::Any;
use std::fmt;
use std::ops::Range;
use std::ptr::NonNull;
use std::sync::Mutex;

use super::{PlainStorage, TensorStorage};
use crate::{MemorySpace, Result};

/// What runs when the runtime is done with caller memory: once, whatever happened.
pub type Release = Box<dyn FnOnce() + Send>;

enum Source<'a> {
    Borrowed(&'a [u8]),
    Raw {
        ptr: NonNull<u8>,
        len: usize,
    },
    /// Copied out after a host write: the caller's memory is never written.
    Owned(PlainStorage),
}

/// Caller-owned host memory, read in place.
///
/// The safe constructor [`ExternalStorage::borrowed`] borrows a slice for `'a`; the tensor
/// holding it cannot outlive the borrow. [`ExternalStorage::from_raw_parts`] takes a
/// pointer, a length and a release callback for memory whose lifetime the borrow checker
/// cannot see; the callback runs exactly once, when the last tensor sharing the storage is
/// dropped (on error paths too). The caller's bytes are never written: a host write copies
/// them out first, and releases the caller's memory then.
pub struct ExternalStorage<'a> {
    source: Source<'a>,
    release: Mutex<Option<Release>>,
}

// SAFETY: `Source::Raw` is only built by `from_raw_parts`, whose contract makes the memory
// readable from any thread and unchanged until release; the other variants are Send + Sync.
unsafe impl Send for ExternalStorage<'_> {}
// SAFETY: as for Send; shared access only ever reads the bytes.
unsafe impl Sync for ExternalStorage<'_> {}

impl<'a> ExternalStorage<'a> {
    /// Borrow `bytes` for `'a`, without a copy.
    pub fn borrowed(bytes: &'a [u8]) -> Self {
        ExternalStorage { source: Source::Borrowed(bytes), release: Mutex::new(None) }
    }

    /// Use `len` bytes at `ptr` without a copy; `release` runs exactly once, when the
    /// runtime no longer needs them.
    ///
    /// # Safety
    /// Until `release` is called, the `len` bytes at `ptr` must stay allocated, readable
    /// from any thread, and unchanged by anyone.
    pub unsafe fn from_raw_parts(ptr: NonNull<u8>, len: usize, release: Release) -> ExternalStorage<'static> {
        ExternalStorage { source: Source::Raw { ptr, len }, release: Mutex::new(Some(release)) }
    }

    /// The bytes, in place.
    pub fn as_bytes(&self) -> &[u8] {
        match &self.source {
            Source::Borrowed(bytes) => bytes,
            // SAFETY: the contract of `from_raw_parts` keeps these bytes valid and unchanged
            // until release, which happens only in `detach` (after this variant is replaced)
            // or in drop.
            Source::Raw { ptr, len } => unsafe { std::slice::from_raw_parts(ptr.as_ptr(), *len) },
            Source::Owned(plain) => plain.as_bytes(),
        }
    }

    /// True while the bytes are still the caller's memory (no host write has copied them out).
    pub fn is_in_place(&self) -> bool {
        !matches!(self.source, Source::Owned(_))
    }

    fn run_release(&mut self) {
        let release = self.release.get_mut().unwrap_or_else(std::sync::PoisonError::into_inner).take();
        if let Some(release) = release {
            release();
        }
    }
}

impl Drop for ExternalStorage<'_> {
    fn drop(&mut self) {
        self.run_release();
    }
}

impl fmt::Debug for ExternalStorage<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let bytes = self.as_bytes();
        let state = if self.is_in_place() { "in place" } else { "copied out" };
        write!(f, "ExternalStorage({} bytes at {:#x}, {state})", bytes.len(), bytes.as_ptr() as usize)
    }
}

impl fmt::Display for ExternalStorage<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "caller memory, {} bytes", self.as_bytes().len())
    }
}

impl TensorStorage for ExternalStorage<'_> {
    fn byte_len(&self) -> usize {
        self.as_bytes().len()
    }

    fn space(&self) -> MemorySpace {
        MemorySpace::HOST
    }

    fn host_bytes(&self) -> Option<&[u8]> {
        Some(self.as_bytes())
    }

    fn materialize(&self) -> Result<&[u8]> {
        Ok(self.as_bytes())
    }

    fn host_bytes_mut(&mut self) -> Result<&mut [u8]> {
        if self.is_in_place() {
            let owned = PlainStorage::copy_from(self.as_bytes())?;
            self.source = Source::Owned(owned);
            self.run_release();
        }
        match &mut self.source {
            Source::Owned(plain) => Ok(plain.as_bytes_mut()),
            Source::Borrowed(_) | Source::Raw { .. } => unreachable!("copied out just above"),
        }
    }

    fn into_plain(self: Box<Self>) -> Result<PlainStorage> {
        PlainStorage::copy_from(self.as_bytes())
    }

    fn deep_clone(&self) -> Result<Box<dyn TensorStorage>> {
        Ok(Box::new(PlainStorage::copy_from(self.as_bytes())?))
    }

    fn slice(&self, _bytes: Range<usize>) -> Result<Option<Box<dyn TensorStorage>>> {
        Ok(None)
    }

    fn as_any(&self) -> Option<&dyn Any> {
        None
    }
}
