//! The CPU target's memory: host bytes, 64-byte aligned, with rows padded to 64 bytes where a layout asks for it.
//! Written with the runtime's `#[derive(TensorStorage)]` like every backend's storage; its `DESCRIPTOR` is what the
//! planner reads for the `cpu` target. Every value a CPU program computes lives in one of these.

use stowage_runtime::{DatumType, Layout, PlainStorage, Result, Tensor, TensorStorage};

use crate::arena::{ArenaSlice, Fill, HostArena};

/// Aligned host bytes, as the byte buffer the derive reads and writes: the runtime's `PlainStorage`, or a region
/// of the session's arena where the plan put the value (`crate::arena`).
pub enum Bytes {
    /// Bytes of its own.
    Own(PlainStorage),
    /// A region of the arena.
    Arena(ArenaSlice),
}

/// A clone is bytes of its own: a region of the arena has one owner.
impl Clone for Bytes {
    fn clone(&self) -> Self {
        match self {
            Bytes::Own(p) => Bytes::Own(p.clone()),
            Bytes::Arena(a) => {
                let mut own = PlainStorage::zeroed_aligned(a.as_ref().len(), HostBuffer::DESCRIPTOR.alignment)
                    .unwrap_or_else(|_| std::alloc::handle_alloc_error(std::alloc::Layout::new::<u8>()));
                own.as_bytes_mut().copy_from_slice(a.as_ref());
                Bytes::Own(own)
            }
        }
    }
}

impl AsRef<[u8]> for Bytes {
    fn as_ref(&self) -> &[u8] {
        match self {
            Bytes::Own(p) => p.as_bytes(),
            Bytes::Arena(a) => a.as_ref(),
        }
    }
}

impl AsMut<[u8]> for Bytes {
    fn as_mut(&mut self) -> &mut [u8] {
        match self {
            Bytes::Own(p) => p.as_bytes_mut(),
            Bytes::Arena(a) => a.as_mut(),
        }
    }
}

/// A CPU value's storage: bytes, datum type and shape. Buffers are 128-byte aligned: two cache lines, and the
/// base alignment at which unified OpenCL devices (PoCL, integrated GPUs) import host memory in place, so a CPU
/// result passes to such a device with no copy when the planner places its reader there.
#[derive(Clone, TensorStorage)]
#[storage(
    space = host,
    name = "cpu",
    alignment = 128,
    row_pitch_alignment = 64,
    layouts(row_major, column_major, padded_rows)
)]
pub struct HostBuffer {
    #[storage(buffer)]
    bytes: Bytes,
    #[storage(dtype)]
    dt: DatumType,
    #[storage(shape)]
    shape: Vec<usize>,
}

/// Bytes from one row of `shape` (its last axis) to the next when rows are padded to the storage's row pitch
/// alignment.
pub fn padded_pitch(dt: DatumType, shape: &[usize]) -> usize {
    let row = shape.last().copied().unwrap_or(1) * dt.size_of();
    row.next_multiple_of(HostBuffer::DESCRIPTOR.row_pitch_alignment)
}

impl HostBuffer {
    /// Zeroed packed row-major storage for a `dt` tensor of `shape`: the region the running step was offered for
    /// it in the arena, or bytes of its own.
    pub fn zeroed(dt: DatumType, shape: &[usize]) -> Result<HostBuffer> {
        HostBuffer::made(dt, shape, Fill::Zero)
    }

    /// As [`HostBuffer::zeroed`], for a caller that writes every element before anything reads one: an offered
    /// region of the arena is not zeroed first (`arena.rs`, rule 2), so its bytes are an earlier value's until
    /// then (0xFF in debug builds).
    pub fn for_overwrite(dt: DatumType, shape: &[usize]) -> Result<HostBuffer> {
        HostBuffer::made(dt, shape, Fill::Overwrite)
    }

    /// As [`HostBuffer::for_overwrite`], for a join (Concat) whose inputs may already be in an offered region:
    /// its bytes are kept as they are, poison or not (`arena.rs`, rule 2). The caller writes every element that
    /// is not an input found in place ([`HostBuffer::region`]).
    pub fn joined(dt: DatumType, shape: &[usize]) -> Result<HostBuffer> {
        HostBuffer::made(dt, shape, Fill::Keep)
    }

    fn made(dt: DatumType, shape: &[usize], fill: Fill) -> Result<HostBuffer> {
        let bytes = Layout::row_major(dt, shape)?.span_bytes(dt, shape)?;
        let bytes = match crate::arena::take(bytes, fill) {
            Some(region) => Bytes::Arena(region),
            None => Bytes::Own(PlainStorage::zeroed_aligned(bytes, HostBuffer::DESCRIPTOR.alignment)?),
        };
        Ok(HostBuffer { bytes, dt, shape: shape.to_vec() })
    }

    /// The arena it is a region of and its offset there, when it is one.
    pub fn region(&self) -> Option<(&std::sync::Arc<HostArena>, usize)> {
        match &self.bytes {
            Bytes::Arena(a) => Some((a.arena(), a.offset())),
            _ => None,
        }
    }

    /// Its offset in `arena`, when it is a region of it.
    pub fn arena_offset(&self, arena: &std::sync::Arc<HostArena>) -> Option<usize> {
        match &self.bytes {
            Bytes::Arena(a) if a.is_in(arena) => Some(a.offset()),
            _ => None,
        }
    }

    /// A zeroed tensor of `shape` whose rows (last axis) start every [`padded_pitch`] bytes, for kernels that
    /// want aligned rows.
    pub fn padded_tensor(dt: DatumType, shape: &[usize]) -> Result<Tensor<'static>> {
        let axis = shape.len().saturating_sub(2);
        let layout = if shape.len() < 2 {
            Layout::row_major(dt, shape)?
        } else {
            Layout::padded(dt, shape, axis, padded_pitch(dt, shape))?
        };
        let bytes = layout.span_bytes(dt, shape)?;
        let buf = HostBuffer {
            bytes: Bytes::Own(PlainStorage::zeroed_aligned(bytes, HostBuffer::DESCRIPTOR.alignment)?),
            dt,
            shape: shape.to_vec(),
        };
        Tensor::from_storage(dt, shape, layout, buf)
    }
}

/// A zeroed packed row-major `dt` tensor of `shape` in CPU storage: what kernels write their results into.
pub fn output(dt: DatumType, shape: &[usize]) -> Result<Tensor<'static>> {
    HostBuffer::zeroed(dt, shape)?.into_tensor()
}

/// [`output`] for a kernel that writes every element of it ([`HostBuffer::for_overwrite`]).
pub fn output_for_overwrite(dt: DatumType, shape: &[usize]) -> Result<Tensor<'static>> {
    HostBuffer::for_overwrite(dt, shape)?.into_tensor()
}

/// A packed row-major tensor in CPU storage holding `data`.
pub fn tensor_from_vec<T: stowage_runtime::Datum>(shape: &[usize], data: Vec<T>) -> Result<Tensor<'static>> {
    tensor_from(shape, &data)
}

/// A packed row-major `dt` tensor in CPU storage holding `bytes`, which must be exactly as long as the shape needs
/// (and, for bool, hold only 0 and 1).
pub fn tensor_from_bytes(dt: DatumType, shape: &[usize], bytes: &[u8]) -> Result<Tensor<'static>> {
    // Every byte looked at, no early exit: the loop vectorises.
    if dt == DatumType::Bool && bytes.iter().fold(0u8, |seen, &b| seen | (b & !1)) != 0 {
        return Err(stowage_runtime::RuntimeError::InvalidBits { tensor: "<unnamed>".into(), dt });
    }
    checked_bytes(dt, shape, bytes)
}

/// [`tensor_from_bytes`] for bytes known to be values of `dt`.
fn checked_bytes(dt: DatumType, shape: &[usize], bytes: &[u8]) -> Result<Tensor<'static>> {
    // Every byte is written below: the arena's region need not be zeroed first.
    let mut buf = HostBuffer::for_overwrite(dt, shape)?;
    let dst = buf.host_bytes_mut()?;
    if dst.len() != bytes.len() {
        return Err(stowage_runtime::RuntimeError::ByteLength {
            tensor: "<unnamed>".into(),
            dt,
            shape: shape.to_vec(),
            expected: dst.len(),
            found: bytes.len(),
        });
    }
    dst.copy_from_slice(bytes);
    buf.into_tensor()
}

/// A packed row-major `dt` tensor of `shape` in CPU storage (the step's region of the arena where it has one),
/// zeroed, then written by `fill`. Kernels that move elements write their output this way, with no buffer between.
pub fn tensor_filled(dt: DatumType, shape: &[usize], fill: impl FnOnce(&mut [u8])) -> Result<Tensor<'static>> {
    let mut buf = HostBuffer::zeroed(dt, shape)?;
    fill(buf.host_bytes_mut()?);
    buf.into_tensor()
}

/// A packed row-major tensor in CPU storage holding a copy of `data`.
pub fn tensor_from<T: stowage_runtime::Datum>(shape: &[usize], data: &[T]) -> Result<Tensor<'static>> {
    // Typed elements are values of their type (a `bool` is 0 or 1): nothing to check. Magika's one-hot `Equal`
    // (526k bools) spent 0.2 ms in that check, the zeroing and the copy.
    checked_bytes(T::DATUM_TYPE, shape, stowage_runtime::bytemuck::cast_slice(data))
}

#[cfg(test)]
mod tests {
    use super::*;
    use stowage_runtime::{LayoutKind, LayoutSupport, MemoryKind};

    #[test]
    fn the_descriptor_is_host_memory_with_padded_rows() {
        let d = HostBuffer::DESCRIPTOR;
        assert_eq!((d.name, d.kind, d.alignment, d.row_pitch_alignment), ("cpu", MemoryKind::Host, 128, 64));
        assert!(d.holds(LayoutSupport::PaddedRows) && d.holds(LayoutSupport::ColumnMajor));
    }

    #[test]
    fn buffers_are_aligned_and_padded_rows_start_on_64_bytes() {
        let t = output(DatumType::F32, &[3, 5]).unwrap();
        assert_eq!(t.storage().host_bytes().unwrap().as_ptr() as usize % 64, 0);
        assert!(t.storage().as_any().unwrap().downcast_ref::<HostBuffer>().is_some(), "CPU storage");
        let p = HostBuffer::padded_tensor(DatumType::F32, &[2, 3, 5]).unwrap();
        assert_eq!(p.layout_kind(), LayoutKind::PaddedRows { axis: 1, pitch: 64 });
        assert_eq!(p.storage().byte_len(), 6 * 64 - 64 + 20);
        let v = tensor_from(&[2, 2], &[1.0f32, 2.0, 3.0, 4.0]).unwrap();
        assert_eq!(v.to_vec::<f32>().unwrap(), [1.0, 2.0, 3.0, 4.0]);
        assert!(tensor_from(&[3], &[1.0f32]).is_err(), "a short slice");
    }
}
