//! Owned, aligned host bytes.

use std::any::Any;
use std::fmt;
use std::ops::Range;

use bytemuck::{Pod, Zeroable};

use super::TensorStorage;
use crate::layout::HOST_ALIGNMENT;
use crate::{MemorySpace, Result, RuntimeError};

/// The unit of allocation: 64 bytes, 64-byte aligned. Allocating `Vec<Chunk>` gives
/// aligned memory without `unsafe`, and `bytemuck` views it as bytes.
#[derive(Clone, Copy, Pod, Zeroable)]
#[repr(C, align(64))]
struct Chunk([u8; HOST_ALIGNMENT]);

/// Owned host bytes, 64-byte aligned by default (more on request; clones keep it).
pub struct PlainStorage {
    chunks: Vec<Chunk>,
    /// Byte offset of the first byte within `chunks` (non-zero only for alignments over 64).
    start: usize,
    len: usize,
    alignment: usize,
}

impl Clone for PlainStorage {
    fn clone(&self) -> Self {
        // Cloning the chunks moves the bytes: lay them out again at the same alignment.
        let mut copy = PlainStorage { chunks: self.chunks.clone(), start: 0, len: self.len, alignment: self.alignment };
        if self.alignment > HOST_ALIGNMENT {
            let base = copy.chunks.as_ptr() as usize;
            copy.start = base.next_multiple_of(self.alignment) - base;
            let (from, to) = (self.start, copy.start);
            bytemuck::cast_slice_mut::<Chunk, u8>(&mut copy.chunks).copy_within(from..from + self.len, to);
        }
        copy
    }
}

impl PlainStorage {
    /// `len` zero bytes, 64-byte aligned.
    pub fn zeroed(len: usize) -> Result<Self> {
        Self::zeroed_aligned(len, HOST_ALIGNMENT)
    }

    /// `len` zero bytes whose first byte is aligned to `alignment` (a power of two).
    pub fn zeroed_aligned(len: usize, alignment: usize) -> Result<Self> {
        let alignment = alignment.max(1);
        if !alignment.is_power_of_two() {
            return Err(RuntimeError::Layout {
                tensor: "<unnamed>".into(),
                reason: format!("alignment {alignment} is not a power of two"),
            });
        }
        let extra = alignment.saturating_sub(HOST_ALIGNMENT);
        let oom = || RuntimeError::OutOfMemory { tensor: "<unnamed>".into(), bytes: len };
        let total = len.checked_add(extra).ok_or_else(oom)?;
        let count = total.div_ceil(HOST_ALIGNMENT);
        let mut chunks = Vec::new();
        chunks.try_reserve_exact(count).map_err(|_| oom())?;
        chunks.resize(count, Chunk([0; HOST_ALIGNMENT]));
        let base = chunks.as_ptr() as usize;
        let start = base.next_multiple_of(alignment) - base;
        Ok(PlainStorage { chunks, start, len, alignment })
    }

    /// A 64-byte aligned copy of `bytes`.
    ///
    /// The chunks are filled from `bytes` as they are made, not zeroed first: each fresh page is written once (a
    /// model's weights, copied at import: zeroing them first took two thirds of the copy's time, 2026-12-07).
    pub fn copy_from(bytes: &[u8]) -> Result<Self> {
        let oom = || RuntimeError::OutOfMemory { tensor: "<unnamed>".into(), bytes: bytes.len() };
        let mut chunks = Vec::new();
        chunks.try_reserve_exact(bytes.len().div_ceil(HOST_ALIGNMENT)).map_err(|_| oom())?;
        let whole = bytes.chunks_exact(HOST_ALIGNMENT);
        let rest = whole.remainder();
        chunks.extend(whole.map(|c| Chunk(c.try_into().expect("chunks_exact gives whole chunks"))));
        if !rest.is_empty() {
            let mut last = Chunk([0; HOST_ALIGNMENT]);
            last.0[..rest.len()].copy_from_slice(rest);
            chunks.push(last);
        }
        Ok(PlainStorage { chunks, start: 0, len: bytes.len(), alignment: HOST_ALIGNMENT })
    }

    /// The bytes.
    pub fn as_bytes(&self) -> &[u8] {
        &bytemuck::cast_slice(&self.chunks)[self.start..self.start + self.len]
    }

    /// The bytes, writable.
    pub fn as_bytes_mut(&mut self) -> &mut [u8] {
        let (start, len) = (self.start, self.len);
        &mut bytemuck::cast_slice_mut(&mut self.chunks)[start..start + len]
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when there are no bytes.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The address of the first byte (for alignment checks and zero-copy proofs).
    pub fn address(&self) -> usize {
        self.as_bytes().as_ptr() as usize
    }
}

impl fmt::Debug for PlainStorage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "PlainStorage({} bytes at {:#x})", self.len, self.address())
    }
}

impl fmt::Display for PlainStorage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "host, {} bytes", self.len)
    }
}

impl TensorStorage for PlainStorage {
    fn byte_len(&self) -> usize {
        self.len
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
        Ok(self.as_bytes_mut())
    }

    fn into_plain(self: Box<Self>) -> Result<PlainStorage> {
        Ok(*self)
    }

    fn deep_clone(&self) -> Result<Box<dyn TensorStorage>> {
        Ok(Box::new(PlainStorage::copy_from(self.as_bytes())?))
    }

    fn slice(&self, _bytes: Range<usize>) -> Result<Option<Box<dyn TensorStorage>>> {
        // Host bytes are cheapest to view in place.
        Ok(None)
    }

    fn as_any(&self) -> Option<&dyn Any> {
        Some(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aligned_as_asked() {
        for alignment in [1, 64, 128, 4096] {
            let p = PlainStorage::zeroed_aligned(100, alignment).unwrap();
            assert_eq!(p.address() % alignment, 0);
            assert_eq!(p.len(), 100);
        }
        assert!(PlainStorage::zeroed_aligned(1, 48).is_err());
    }

    #[test]
    fn copies_hold_the_bytes_aligned_whatever_their_length() {
        let bytes: Vec<u8> = (0..200u32).map(|i| (i * 7 + 3) as u8).collect();
        for len in [0, 1, 63, 64, 65, 128, 200] {
            let p = PlainStorage::copy_from(&bytes[..len]).unwrap();
            assert_eq!((p.len(), p.as_bytes()), (len, &bytes[..len]), "{len} bytes");
            assert_eq!(p.address() % HOST_ALIGNMENT, 0);
            assert_eq!(p.chunks.len(), len.div_ceil(HOST_ALIGNMENT));
        }
    }

    #[test]
    fn clones_keep_their_alignment_and_bytes() {
        let mut p = PlainStorage::zeroed_aligned(100, 4096).unwrap();
        p.as_bytes_mut()[99] = 7;
        for _ in 0..4 {
            let c = p.clone();
            assert_eq!(c.address() % 4096, 0);
            assert_eq!(c.as_bytes(), p.as_bytes());
        }
    }

    #[test]
    fn huge_allocations_fail_cleanly() {
        let err = PlainStorage::zeroed(usize::MAX - 10).unwrap_err();
        assert!(matches!(err, RuntimeError::OutOfMemory { .. }), "{err}");
        let err = PlainStorage::zeroed(1 << 60).unwrap_err();
        assert!(matches!(err, RuntimeError::OutOfMemory { .. }), "{err}");
    }
}
