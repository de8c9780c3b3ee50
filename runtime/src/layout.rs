//! Layouts: how a tensor's elements are placed in its storage.
//!
//! A [`Layout`] is a list of element strides (one per axis), the byte offset of the first
//! element, and the base alignment the bytes are promised to have. Row padding is a
//! stride larger than the packed one; column-major is strides in the other order; both are
//! recognised by [`Layout::kind`], which is what kernels and the planner match on.

use std::fmt;

use crate::{DatumType, Result, RuntimeError};

/// Per-axis extents or strides, held inline up to rank 6 so that making a tensor (every step of a run makes
/// one per output) allocates nothing for them.
pub type Dims = smallvec::SmallVec<[usize; 6]>;

/// Default base alignment of host storage, in bytes.
pub const HOST_ALIGNMENT: usize = 64;

/// How a tensor's elements are placed.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Layout {
    strides: Dims,
    offset: usize,
    alignment: usize,
}

/// What a layout is, in the terms kernels and the planner use.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum LayoutKind {
    /// Packed, last axis fastest.
    RowMajor,
    /// Packed, first axis fastest.
    ColumnMajor,
    /// Row-major with padding after each row: axes after `axis` are packed, and
    /// consecutive indices of `axis` are `pitch` bytes apart.
    PaddedRows {
        /// The axis whose stride carries the padding.
        axis: usize,
        /// Bytes from one row to the next.
        pitch: usize,
    },
    /// Anything else (a transposed or sliced view).
    Strided,
}

impl fmt::Display for LayoutKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LayoutKind::RowMajor => f.write_str("row-major"),
            LayoutKind::ColumnMajor => f.write_str("column-major"),
            LayoutKind::PaddedRows { axis, pitch } => write!(f, "padded rows (pitch {pitch} bytes on axis {axis})"),
            LayoutKind::Strided => f.write_str("strided"),
        }
    }
}

/// Element strides of a packed row-major tensor of `shape`, or `None` on overflow.
pub fn row_major_strides(shape: &[usize]) -> Option<Vec<usize>> {
    row_major_dims(shape).map(|d| d.into_vec())
}

/// [`row_major_strides`], inline.
pub(crate) fn row_major_dims(shape: &[usize]) -> Option<Dims> {
    let mut strides: Dims = smallvec::smallvec![0; shape.len()];
    let mut acc = 1usize;
    for (stride, &dim) in strides.iter_mut().zip(shape).rev() {
        *stride = acc;
        acc = acc.checked_mul(dim.max(1))?;
    }
    Some(strides)
}

/// True when `strides` are [`row_major_strides`] of `shape` on every axis longer than 1 (the axes that move an
/// element), and those strides exist (no overflow).
fn packed_row_major(strides: &[usize], shape: &[usize]) -> bool {
    let mut acc = 1usize;
    for (&stride, &dim) in strides.iter().zip(shape).rev() {
        if dim > 1 && stride != acc {
            return false;
        }
        match acc.checked_mul(dim.max(1)) {
            Some(next) => acc = next,
            None => return false,
        }
    }
    true
}

/// Number of elements of `shape`, or `None` on overflow.
pub fn element_count(shape: &[usize]) -> Option<usize> {
    shape.iter().try_fold(1usize, |acc, &d| acc.checked_mul(d))
}

fn too_large(dt: DatumType, shape: &[usize]) -> RuntimeError {
    RuntimeError::TooLarge { tensor: "<unnamed>".into(), dt, shape: shape.to_vec() }
}

impl Layout {
    /// Packed row-major strides for `shape`, host alignment.
    pub fn row_major(dt: DatumType, shape: &[usize]) -> Result<Self> {
        let strides = row_major_dims(shape).ok_or_else(|| too_large(dt, shape))?;
        let layout = Layout { strides, offset: 0, alignment: HOST_ALIGNMENT };
        layout.span_bytes(dt, shape)?;
        Ok(layout)
    }

    /// Packed column-major strides for `shape` (first axis fastest), host alignment.
    pub fn column_major(dt: DatumType, shape: &[usize]) -> Result<Self> {
        let mut strides: Dims = smallvec::smallvec![0; shape.len()];
        let mut acc = 1usize;
        for (stride, &dim) in strides.iter_mut().zip(shape) {
            *stride = acc;
            acc = acc.checked_mul(dim.max(1)).ok_or_else(|| too_large(dt, shape))?;
        }
        let layout = Layout { strides, offset: 0, alignment: HOST_ALIGNMENT };
        layout.span_bytes(dt, shape)?;
        Ok(layout)
    }

    /// Row-major with `pitch` bytes from one index of `axis` to the next (the axes after
    /// `axis` packed): a `[1, 480, 640, 3]` NHWC frame with 2048-byte rows is
    /// `Layout::padded(U8, &[1, 480, 640, 3], 1, 2048)`.
    pub fn padded(dt: DatumType, shape: &[usize], axis: usize, pitch: usize) -> Result<Self> {
        let bad = |reason: String| RuntimeError::Layout { tensor: "<unnamed>".into(), reason };
        if axis >= shape.len() {
            return Err(bad(format!("row axis {axis} is out of range for rank {}", shape.len())));
        }
        let size = dt.size_of();
        if !pitch.is_multiple_of(size) {
            return Err(bad(format!("row pitch {pitch} bytes is not a multiple of the {size}-byte {dt} element")));
        }
        let inner = row_major_strides(&shape[axis..]).ok_or_else(|| too_large(dt, shape))?;
        let row_elems = element_count(&shape[axis + 1..]).ok_or_else(|| too_large(dt, shape))?;
        let row_bytes = row_elems.checked_mul(size).ok_or_else(|| too_large(dt, shape))?;
        if pitch < row_bytes {
            return Err(bad(format!("row pitch {pitch} bytes is shorter than a row of {row_bytes} bytes")));
        }
        let mut strides: Dims = smallvec::smallvec![0; shape.len()];
        strides[axis + 1..].copy_from_slice(&inner[1..]);
        let mut acc = pitch / size;
        for i in (0..=axis).rev() {
            strides[i] = acc;
            acc = acc.checked_mul(shape[i].max(1)).ok_or_else(|| too_large(dt, shape))?;
        }
        let layout = Layout { strides, offset: 0, alignment: HOST_ALIGNMENT };
        layout.span_bytes(dt, shape)?;
        Ok(layout)
    }

    /// Any strides, the first element `offset` bytes into the storage.
    pub fn strided(strides: Vec<usize>, offset: usize) -> Self {
        Layout { strides: Dims::from_vec(strides), offset, alignment: HOST_ALIGNMENT }
    }

    /// The same layout with another promised base alignment.
    pub fn with_alignment(mut self, alignment: usize) -> Self {
        self.alignment = alignment;
        self
    }

    /// Element strides, one per axis.
    pub fn strides(&self) -> &[usize] {
        &self.strides
    }

    /// Byte offset of the first element in the storage.
    pub fn offset(&self) -> usize {
        self.offset
    }

    /// Promised base alignment in bytes.
    pub fn alignment(&self) -> usize {
        self.alignment
    }

    pub(crate) fn with_offset(mut self, offset: usize) -> Self {
        self.offset = offset;
        self
    }

    pub(crate) fn with_strides(mut self, strides: Dims) -> Self {
        self.strides = strides;
        self
    }

    /// Bytes from the first element to one past the last, plus the offset: how long the
    /// storage must be. Zero-sized shapes need only the offset. Checked: an overflow is an
    /// error, never a wrap.
    pub fn span_bytes(&self, dt: DatumType, shape: &[usize]) -> Result<usize> {
        if self.strides.len() != shape.len() {
            return Err(RuntimeError::Layout {
                tensor: "<unnamed>".into(),
                reason: format!("{} strides for a rank-{} shape", self.strides.len(), shape.len()),
            });
        }
        if shape.contains(&0) {
            return Ok(self.offset);
        }
        let last = shape
            .iter()
            .zip(&self.strides)
            .try_fold(0usize, |acc, (&d, &s)| (d - 1).checked_mul(s).and_then(|x| acc.checked_add(x)));
        last.and_then(|l| l.checked_add(1))
            .and_then(|n| n.checked_mul(dt.size_of()))
            .and_then(|b| b.checked_add(self.offset))
            .ok_or_else(|| too_large(dt, shape))
    }

    /// What this layout is for `shape` with elements of `dt`.
    pub fn kind(&self, dt: DatumType, shape: &[usize]) -> LayoutKind {
        if self.strides.len() != shape.len() {
            return LayoutKind::Strided;
        }
        if packed_row_major(&self.strides, shape) {
            // The common case, decided without allocating (the checks below build stride lists).
            return LayoutKind::RowMajor;
        }
        let significant = |strides: &[usize]| -> Vec<(usize, usize)> {
            shape.iter().zip(strides).enumerate().filter(|(_, (&d, _))| d > 1).map(|(i, (_, &s))| (i, s)).collect()
        };
        let ours = significant(&self.strides);
        if row_major_strides(shape).is_some_and(|rm| significant(&rm) == ours) {
            return LayoutKind::RowMajor;
        }
        if let Ok(cm) = Layout::column_major(dt, shape) {
            if significant(&cm.strides) == ours {
                return LayoutKind::ColumnMajor;
            }
        }
        // Padded rows: exactly one axis whose stride exceeds the packed one, with the axes
        // after it packed and the axes before it packed over the padded rows.
        for axis in 0..shape.len() {
            let Some(pitch) = self.strides[axis].checked_mul(dt.size_of()) else { continue };
            if let Ok(p) = Layout::padded(dt, shape, axis, pitch) {
                if significant(&p.strides) == ours {
                    return LayoutKind::PaddedRows { axis, pitch };
                }
            }
        }
        LayoutKind::Strided
    }

    /// True when the elements are packed in row-major order.
    pub fn is_row_major(&self, dt: DatumType, shape: &[usize]) -> bool {
        self.kind(dt, shape) == LayoutKind::RowMajor
    }
}

/// Byte offsets (from the first element) of every element of `shape`, in row-major index order.
pub(crate) fn element_offsets<'s>(
    shape: &'s [usize],
    strides: &'s [usize],
    size: usize,
) -> impl Iterator<Item = usize> + 's {
    let count = element_count(shape).unwrap_or(0);
    let mut index = vec![0usize; shape.len()];
    let mut offset = 0usize;
    (0..count).map(move |i| {
        if i > 0 {
            for axis in (0..shape.len()).rev() {
                index[axis] += 1;
                offset += strides[axis] * size;
                if index[axis] < shape[axis] {
                    break;
                }
                offset -= strides[axis] * size * shape[axis];
                index[axis] = 0;
            }
        }
        offset
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use DatumType::*;

    #[test]
    fn kinds_are_recognised() {
        let shape = [2, 3, 4];
        assert_eq!(Layout::row_major(F32, &shape).unwrap().kind(F32, &shape), LayoutKind::RowMajor);
        assert_eq!(Layout::column_major(F32, &shape).unwrap().kind(F32, &shape), LayoutKind::ColumnMajor);
        let frame = [1, 480, 640, 3];
        let padded = Layout::padded(U8, &frame, 1, 2048).unwrap();
        assert_eq!(padded.strides(), &[2048 * 480, 2048, 3, 1]);
        assert_eq!(padded.kind(U8, &frame), LayoutKind::PaddedRows { axis: 1, pitch: 2048 });
        assert_eq!(padded.span_bytes(U8, &frame).unwrap(), 2048 * 479 + 640 * 3);
    }

    #[test]
    fn sizes_never_overflow() {
        let huge = [usize::MAX / 2, 4];
        assert!(matches!(Layout::row_major(F32, &huge), Err(RuntimeError::TooLarge { .. })));
        assert!(matches!(Layout::padded(F32, &[3, 4], 0, 6), Err(RuntimeError::Layout { .. })));
        assert_eq!(Layout::row_major(F32, &[0, 5]).unwrap().span_bytes(F32, &[0, 5]).unwrap(), 0);
        assert_eq!(Layout::strided(vec![1], 0).kind(F32, &[2, 3]), LayoutKind::Strided);
        assert_eq!(Layout::strided(vec![1, usize::MAX], 0).kind(F32, &[0, 2]), LayoutKind::Strided);
    }

    #[test]
    fn offsets_follow_strides() {
        let offsets: Vec<_> = element_offsets(&[2, 3], &[1, 2], 4).collect();
        assert_eq!(offsets, vec![0, 8, 16, 4, 12, 20]);
        assert_eq!(element_offsets(&[], &[], 4).collect::<Vec<_>>(), vec![0]);
        assert_eq!(element_offsets(&[0, 3], &[3, 1], 4).count(), 0);
    }
}
