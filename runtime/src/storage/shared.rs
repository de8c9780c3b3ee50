//! Host bytes shared with their owner (a model file's mapping), copied into aligned memory only when a reader
//! needs them aligned.
//!
//! The contract, rule by rule (each has a test below named after it):
//! 1. made without copying: the storage holds its owner and a range of it;
//! 2. [`SharedBytes::in_place`] gives the bytes where they are, at whatever alignment, and never copies: a reader
//!    that takes unaligned little-endian bytes (a backend packing weights) reads the model file's pages;
//! 3. every other read ([`TensorStorage::host_bytes`], [`TensorStorage::materialize`]) gets a 64-byte aligned copy,
//!    made once on the first such read, however many threads ask, and kept: what the storage gives is what a
//!    [`PlainStorage`] of the same bytes gives;
//! 4. a write copies first and writes the copy; the owner's bytes are never written, and from the first write on
//!    every read, [`SharedBytes::in_place`] included, is of the copy;
//! 5. slices and deep clones share the owner, not a copy (once written: the copy's bytes, copied);
//! 6. [`crate::Tensor::owned`] makes a tensor that no longer holds the owner: what a compiled program keeps, so that
//!    a model file's mapping is neither read nor held once its compile is over.
//!
//! `host_bytes` is the one place a host storage does work in what is otherwise the cheap predicate: the work is a
//! copy within host memory, never a transfer, and happens once.

use std::any::Any;
use std::fmt;
use std::ops::Range;
use std::sync::Arc;

use once_cell::sync::OnceCell;

use super::{PlainStorage, TensorStorage};
use crate::{MemorySpace, Result, RuntimeError};

/// Bytes another allocation owns: a model file's mapping, a decoded message's buffer.
pub type Owner = Arc<dyn AsRef<[u8]> + Send + Sync>;

/// Host bytes read in place from their owner, or from an aligned copy made on the first aligned read (see the
/// module docs for the rules).
pub struct SharedBytes {
    owner: Owner,
    range: Range<usize>,
    aligned: OnceCell<PlainStorage>,
    /// Set by the first write: the copy is the bytes from then on (rule 4).
    written: bool,
}

impl SharedBytes {
    /// The bytes `range` of `owner`, not copied (rule 1). Fails when the range is not inside.
    pub fn new(owner: Owner, range: Range<usize>) -> Result<Self> {
        let len = (*owner).as_ref().len();
        if range.start > range.end || range.end > len {
            return Err(RuntimeError::Layout {
                tensor: "<unnamed>".into(),
                reason: format!("bytes {range:?} of an owner of {len}"),
            });
        }
        Ok(SharedBytes { owner, range, aligned: OnceCell::new(), written: false })
    }

    /// The bytes where they are, at their owner's alignment (rule 2); once written, the copy's (rule 4).
    pub fn in_place(&self) -> &[u8] {
        match self.aligned.get().filter(|_| self.written) {
            Some(copy) => copy.as_bytes(),
            None => &(*self.owner).as_ref()[self.range.clone()],
        }
    }

    /// Whether the aligned copy has been made (rule 3).
    pub fn is_copied(&self) -> bool {
        self.aligned.get().is_some()
    }

    fn aligned(&self) -> Result<&PlainStorage> {
        self.aligned.get_or_try_init(|| PlainStorage::copy_from(&(*self.owner).as_ref()[self.range.clone()]))
    }
}

impl fmt::Debug for SharedBytes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SharedBytes({} bytes, {})", self.range.len(), if self.is_copied() { "copied" } else { "in place" })
    }
}

impl fmt::Display for SharedBytes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "host, {} bytes shared with their owner", self.range.len())
    }
}

impl TensorStorage for SharedBytes {
    fn byte_len(&self) -> usize {
        self.range.len()
    }

    fn space(&self) -> MemorySpace {
        MemorySpace::HOST
    }

    fn host_bytes(&self) -> Option<&[u8]> {
        self.aligned().ok().map(PlainStorage::as_bytes)
    }

    fn materialize(&self) -> Result<&[u8]> {
        self.aligned().map(PlainStorage::as_bytes)
    }

    fn host_bytes_mut(&mut self) -> Result<&mut [u8]> {
        self.aligned()?;
        self.written = true;
        let copy = self.aligned.get_mut().expect("made above");
        Ok(copy.as_bytes_mut())
    }

    fn into_plain(self: Box<Self>) -> Result<PlainStorage> {
        match self.aligned.into_inner() {
            Some(copy) => Ok(copy),
            None => PlainStorage::copy_from(&(*self.owner).as_ref()[self.range]),
        }
    }

    fn deep_clone(&self) -> Result<Box<dyn TensorStorage>> {
        if self.written {
            return Ok(Box::new(PlainStorage::copy_from(self.in_place())?));
        }
        Ok(Box::new(SharedBytes::new(self.owner.clone(), self.range.clone())?))
    }

    fn slice(&self, bytes: Range<usize>) -> Result<Option<Box<dyn TensorStorage>>> {
        // Past the end, or written (the copy is viewed as any host bytes are): the caller keeps a view.
        if self.written || bytes.start > bytes.end || bytes.end > self.range.len() {
            return Ok(None);
        }
        let range = self.range.start + bytes.start..self.range.start + bytes.end;
        Ok(Some(Box::new(SharedBytes::new(self.owner.clone(), range)?)))
    }

    fn as_any(&self) -> Option<&dyn Any> {
        Some(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An owner whose bytes start one byte past a 64-byte boundary, as a weight's often do inside a model file.
    fn owner(len: usize) -> (Owner, usize) {
        let mut v = vec![0u8; len + 128];
        let skew = (v.as_ptr() as usize).wrapping_neg() % 64 + 1;
        for (i, b) in v[skew..skew + len].iter_mut().enumerate() {
            *b = (i * 13 + 5) as u8;
        }
        (Arc::new(v), skew)
    }

    #[test]
    fn made_without_copying() {
        let (o, skew) = owner(100);
        let s = SharedBytes::new(o.clone(), skew..skew + 100).expect("inside");
        assert_eq!(s.in_place().as_ptr(), (*o).as_ref()[skew..].as_ptr());
        assert!(!s.is_copied());
        assert!(SharedBytes::new(o.clone(), 0..1000).is_err(), "past the owner");
    }

    #[test]
    fn in_place_reads_never_copy() {
        let (o, skew) = owner(64);
        let s = SharedBytes::new(o.clone(), skew..skew + 64).expect("inside");
        assert_eq!(s.in_place(), &(*o).as_ref()[skew..skew + 64]);
        assert_eq!(s.in_place().as_ptr() as usize % 64, 1, "unaligned, as owned");
        assert!(!s.is_copied());
    }

    #[test]
    fn aligned_reads_copy_once() {
        let (o, skew) = owner(200);
        let s = SharedBytes::new(o.clone(), skew..skew + 200).expect("inside");
        let threads: Vec<usize> = std::thread::scope(|scope| {
            let handles: Vec<_> =
                (0..4).map(|_| scope.spawn(|| s.materialize().expect("copies").as_ptr() as usize)).collect();
            handles.into_iter().map(|h| h.join().expect("joins")).collect()
        });
        assert!(threads.iter().all(|&a| a == threads[0] && a % 64 == 0), "one aligned copy: {threads:?}");
        assert_eq!(s.host_bytes().expect("host").as_ptr() as usize, threads[0]);
        assert_eq!(s.host_bytes().expect("host"), s.in_place());
        assert!(s.is_copied());
    }

    #[test]
    fn writes_go_to_the_copy() {
        let (o, skew) = owner(8);
        let mut s = SharedBytes::new(o.clone(), skew..skew + 8).expect("inside");
        let before = (*o).as_ref()[skew];
        let after = before.wrapping_add(1);
        s.host_bytes_mut().expect("writable")[0] = after;
        assert_eq!((*o).as_ref()[skew], before, "the owner is not written");
        assert_eq!(s.materialize().expect("reads")[0], after);
        assert_eq!(s.in_place()[0], after, "in place reads the copy once written");
        assert_eq!(s.deep_clone().expect("clones").materialize().expect("reads")[0], after);
        assert!(s.slice(0..4).expect("answers").is_none(), "a written storage is viewed, not re-sliced");
        assert_eq!(Box::new(s).into_plain().expect("plain").as_bytes()[0], after);
    }

    #[test]
    fn slices_and_clones_share_the_owner() {
        let (o, skew) = owner(100);
        let s = SharedBytes::new(o.clone(), skew..skew + 100).expect("inside");
        s.materialize().expect("copies");
        let part = s.slice(10..30).expect("slices").expect("a storage");
        let part = part.as_any().and_then(|a| a.downcast_ref::<SharedBytes>()).expect("shared");
        assert_eq!(part.in_place().as_ptr(), s.in_place()[10..].as_ptr());
        assert!(!part.is_copied());
        let clone = s.deep_clone().expect("clones");
        let clone = clone.as_any().and_then(|a| a.downcast_ref::<SharedBytes>()).expect("shared");
        assert_eq!(clone.in_place().as_ptr(), s.in_place().as_ptr());
        assert!(s.slice(90..110).expect("answers").is_none(), "past the end: viewed by the caller");
    }
}
