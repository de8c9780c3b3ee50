//! `Tensor`: a datum type, a shape, a layout, and a shared storage.

use std::fmt;
use std::ops::Range;
use std::sync::Arc;

use bytemuck::Pod;

use crate::layout::{element_count, element_offsets, row_major_dims, Dims, LayoutKind};
use crate::map::{MapRead, MapWrite};
use crate::storage::{ExternalStorage, PlainStorage, TensorStorage};
use crate::{Datum, DatumType, DeviceBuffer, Layout, LazyHost, LedgerTag, MemorySpace, MoveKind, Result, RuntimeError};

const UNNAMED: &str = "<unnamed>";

/// A tensor: datum type, shape, layout and storage.
///
/// The storage is shared: views ([`slice`](Self::slice), [`reshape`](Self::reshape),
/// [`permute`](Self::permute)) and clones of a tensor share it, and a write through one of
/// them copies it first ([`as_slice_mut`](Self::as_slice_mut)). `'a` is how long borrowed
/// caller memory ([`ExternalStorage::borrowed`]) lives; owned tensors are `Tensor<'static>`.
#[derive(Clone)]
pub struct Tensor<'a> {
    dt: DatumType,
    shape: Dims,
    layout: Layout,
    storage: Arc<dyn TensorStorage + 'a>,
    name: Option<Arc<str>>,
}

/// What a consumer (a kernel, a device import) needs of host memory to read it in place.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LayoutNeed {
    /// Base alignment of the first element, in bytes.
    pub alignment: usize,
    /// The element placements it reads.
    pub accepts: Accepts,
}

/// Element placements a consumer reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Accepts {
    /// Packed row-major only.
    RowMajor,
    /// Packed column-major only.
    ColumnMajor,
    /// Row-major, with any row pitch on `axis` that is a multiple of `pitch_multiple` bytes.
    PaddedRows {
        /// The axis that may carry padding.
        axis: usize,
        /// What the pitch must be a multiple of.
        pitch_multiple: usize,
    },
}

impl<'a> Tensor<'a> {
    /// A tensor over `storage` with an explicit layout. Fails when the storage is shorter
    /// than the layout needs, or the layout does not fit the shape.
    pub fn from_storage(
        dt: DatumType,
        shape: &[usize],
        layout: Layout,
        storage: impl TensorStorage + 'a,
    ) -> Result<Self> {
        Self::from_shared(dt, shape, layout, Arc::new(storage))
    }

    /// A packed row-major tensor over a boxed storage.
    pub fn from_boxed(dt: DatumType, shape: &[usize], storage: Box<dyn TensorStorage + 'a>) -> Result<Self> {
        let layout = Layout::row_major(dt, shape)?;
        Self::from_shared(dt, shape, layout, Arc::from(storage))
    }

    fn from_shared(
        dt: DatumType,
        shape: &[usize],
        layout: Layout,
        storage: Arc<dyn TensorStorage + 'a>,
    ) -> Result<Self> {
        let need = layout.span_bytes(dt, shape)?;
        let have = storage.byte_len();
        if need > have {
            return Err(RuntimeError::ByteLength {
                tensor: UNNAMED.into(),
                dt,
                shape: shape.to_vec(),
                expected: need,
                found: have,
            });
        }
        Ok(Tensor { dt, shape: Dims::from_slice(shape), layout, storage, name: None })
    }

    /// Caller memory as a tensor of `dt` and `shape` placed as `layout`, used in place.
    /// On error the storage is dropped, so a raw storage's release callback still runs once.
    pub fn external(dt: DatumType, shape: &[usize], layout: Layout, storage: ExternalStorage<'a>) -> Result<Self> {
        Self::from_storage(dt, shape, layout, storage)
    }

    /// Name the tensor (errors and ledger entries use it).
    pub fn with_name(mut self, name: impl Into<Arc<str>>) -> Self {
        self.name = Some(name.into());
        self
    }

    /// The name, if any.
    pub fn name(&self) -> Option<&str> {
        self.name.as_deref()
    }

    /// The name, or `<unnamed>`.
    pub fn name_or_unnamed(&self) -> &str {
        self.name.as_deref().unwrap_or(UNNAMED)
    }

    /// The datum type.
    pub fn dt(&self) -> DatumType {
        self.dt
    }

    /// The shape.
    pub fn shape(&self) -> &[usize] {
        &self.shape
    }

    /// The number of elements.
    pub fn len(&self) -> usize {
        // Checked at construction: the span fits in usize, so the count does.
        element_count(&self.shape).unwrap_or(0)
    }

    /// True when the tensor has no elements.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The layout.
    pub fn layout(&self) -> &Layout {
        &self.layout
    }

    /// What the layout is (row-major, column-major, padded rows, strided).
    pub fn layout_kind(&self) -> LayoutKind {
        self.layout.kind(self.dt, &self.shape)
    }

    /// True when the elements are packed in row-major order.
    pub fn is_row_major(&self) -> bool {
        self.layout_kind() == LayoutKind::RowMajor
    }

    /// The storage.
    pub fn storage(&self) -> &(dyn TensorStorage + 'a) {
        &*self.storage
    }

    /// The storage itself, shared: a backend that uses the bytes in place (a unified-memory device importing a
    /// host buffer) holds this, so the bytes cannot be freed while it does; a later write through a tensor copies
    /// first (copy-on-write), so it never reaches the shared bytes.
    pub fn shared_storage(&self) -> Arc<dyn TensorStorage + 'a> {
        Arc::clone(&self.storage)
    }

    /// The memory space the bytes are in now.
    pub fn space(&self) -> MemorySpace {
        self.storage.space()
    }

    /// The cheap predicate: true when the bytes are readable on the host now. Never transfers.
    pub fn is_host_readable(&self) -> bool {
        self.storage.host_bytes().is_some()
    }

    /// True when this tensor covers its whole storage from its first byte.
    pub fn is_whole_storage(&self) -> bool {
        self.layout.offset() == 0
            && self.layout.span_bytes(self.dt, &self.shape).is_ok_and(|span| span == self.storage.byte_len())
    }

    /// True when two tensors share one storage (views of each other, or clones).
    pub fn shares_storage_with(&self, other: &Tensor<'_>) -> bool {
        std::ptr::addr_eq(Arc::as_ptr(&self.storage), Arc::as_ptr(&other.storage))
    }

    /// The lazy host storage over a device buffer of type `D`, if this tensor has one.
    pub fn lazy<D: DeviceBuffer>(&self) -> Option<&LazyHost<D>> {
        self.storage.as_any()?.downcast_ref::<LazyHost<D>>()
    }

    /// The device buffer still backing this tensor, if it is a lazy host tensor over a `D`
    /// that no host write has detached.
    pub fn device_buffer<D: DeviceBuffer>(&self) -> Option<&D> {
        self.lazy::<D>()?.device()
    }

    fn check_dt(&self, expected: DatumType) -> Result<()> {
        if self.dt == expected {
            Ok(())
        } else {
            Err(RuntimeError::DatumType { tensor: self.name_or_unnamed().into(), expected, found: self.dt })
        }
    }

    fn check_row_major(&self, op: &'static str) -> Result<()> {
        if self.is_row_major() {
            Ok(())
        } else {
            Err(RuntimeError::NotContiguous {
                tensor: self.name_or_unnamed().into(),
                op,
                layout: self.layout_kind().to_string(),
            })
        }
    }

    fn byte_range(&self) -> Range<usize> {
        let start = self.layout.offset();
        start..start + self.len() * self.dt.size_of()
    }

    fn cast_error(&self, err: bytemuck::checked::CheckedCastError, bytes: &[u8], alignment: usize) -> RuntimeError {
        match err {
            bytemuck::checked::CheckedCastError::InvalidBitPattern => {
                RuntimeError::InvalidBits { tensor: self.name_or_unnamed().into(), dt: self.dt }
            }
            _ => RuntimeError::Misaligned {
                tensor: self.name_or_unnamed().into(),
                alignment,
                address: bytes.as_ptr() as usize,
            },
        }
    }

    /// The elements as a slice, bringing the bytes to the host first if they are on a
    /// device (once). Needs packed row-major elements of type `T`.
    pub fn as_slice<T: Datum>(&self) -> Result<&[T]> {
        self.check_dt(T::DATUM_TYPE)?;
        self.check_row_major("as_slice")?;
        let bytes = self.storage.materialize()?.get(self.byte_range()).ok_or_else(|| self.short_storage())?;
        bytemuck::checked::try_cast_slice(bytes).map_err(|e| self.cast_error(e, bytes, std::mem::align_of::<T>()))
    }

    /// Make the storage this tensor's own, copying it if a view or clone shares it.
    fn unique_storage(&mut self) -> Result<&mut (dyn TensorStorage + 'a)> {
        if Arc::get_mut(&mut self.storage).is_none() {
            self.storage = Arc::from(self.storage.deep_clone()?);
        }
        let name = self.name_or_unnamed().to_string();
        Arc::get_mut(&mut self.storage)
            .ok_or(RuntimeError::Boundary { tensor: name, reason: "storage still shared after copy-on-write".into() })
    }

    /// The elements as a mutable slice. Detaches from any device buffer and copies out of
    /// storage shared with other tensors first, so the write reaches nobody else.
    pub fn as_slice_mut<T: Datum>(&mut self) -> Result<&mut [T]> {
        self.check_dt(T::DATUM_TYPE)?;
        self.check_row_major("as_slice_mut")?;
        let range = self.byte_range();
        let name = self.name_or_unnamed().to_string();
        let dt = self.dt;
        let bytes = &mut self.unique_storage()?.host_bytes_mut()?[range];
        let address = bytes.as_ptr() as usize;
        bytemuck::checked::try_cast_slice_mut(bytes).map_err(|e| match e {
            bytemuck::checked::CheckedCastError::InvalidBitPattern => RuntimeError::InvalidBits { tensor: name, dt },
            _ => RuntimeError::Misaligned { tensor: name, alignment: std::mem::align_of::<T>(), address },
        })
    }

    /// The bytes of this view's elements, writable (as [`Tensor::as_slice_mut`]: detached, copied out of shared
    /// storage first). For packed row-major views of types where every bit pattern is a value: `bool` is refused
    /// (only 0 and 1 are), so that no write through bytes can make an invalid tensor.
    pub fn as_bytes_mut(&mut self) -> Result<&mut [u8]> {
        if self.dt == DatumType::Bool {
            return Err(RuntimeError::InvalidBits { tensor: self.name_or_unnamed().into(), dt: self.dt });
        }
        self.check_row_major("as_bytes_mut")?;
        let range = self.byte_range();
        Ok(&mut self.unique_storage()?.host_bytes_mut()?[range])
    }

    /// The bytes of this view's elements on the host, for packed row-major views (an error otherwise).
    /// Brings device bytes to the host first where the storage lives on a device.
    pub fn as_bytes(&self) -> Result<&[u8]> {
        self.check_row_major("upload")?;
        self.storage.materialize()?.get(self.byte_range()).ok_or_else(|| self.short_storage())
    }

    fn short_storage(&self) -> RuntimeError {
        RuntimeError::ByteLength {
            tensor: self.name_or_unnamed().into(),
            dt: self.dt,
            shape: self.shape.to_vec(),
            expected: self.layout.span_bytes(self.dt, &self.shape).unwrap_or(usize::MAX),
            found: self.storage.byte_len(),
        }
    }

    /// The elements in row-major index order, whatever the layout.
    pub fn to_vec<T: Datum>(&self) -> Result<Vec<T>> {
        self.check_dt(T::DATUM_TYPE)?;
        // Packed and aligned: one copy of the whole slice.
        if self.is_row_major() {
            if let Ok(s) = self.as_slice::<T>() {
                return Ok(s.to_vec());
            }
        }
        let bytes = self.storage.materialize()?.get(self.layout.offset()..).ok_or_else(|| self.short_storage())?;
        let size = self.dt.size_of();
        element_offsets(&self.shape, self.layout.strides(), size)
            .map(|at| {
                let element = bytes.get(at..at + size).ok_or_else(|| self.short_storage())?;
                bytemuck::checked::try_pod_read_unaligned(element)
                    .map_err(|e| self.cast_error(e, bytes, std::mem::align_of::<T>()))
            })
            .collect()
    }

    fn check_map_type<T: Datum>(&self) -> Result<()> {
        // A bool tensor maps as u8: its bytes are 0 or 1.
        if self.dt == DatumType::Bool && T::DATUM_TYPE == DatumType::U8 {
            return Ok(());
        }
        self.check_dt(T::DATUM_TYPE)
    }

    /// Map for reading: a guard that derefs to `[T]`. Brings device bytes to the host once
    /// (on unified memory, a share of the allocation).
    pub fn map_read<T: Datum + Pod>(&self) -> Result<MapRead<'_, T>> {
        self.check_map_type::<T>()?;
        self.check_row_major("map_read")?;
        MapRead::host(self.as_bytes()?, self.name_or_unnamed())
    }

    /// Map for writing: a guard that derefs to `[T]` mutably. Like
    /// [`as_slice_mut`](Self::as_slice_mut), it detaches from device buffers and shared storage.
    pub fn map_write<T: Datum + Pod>(&mut self) -> Result<MapWrite<'_, T>> {
        self.check_map_type::<T>()?;
        self.check_row_major("map_write")?;
        let range = self.byte_range();
        let name = self.name_or_unnamed().to_string();
        MapWrite::host(&mut self.unique_storage()?.host_bytes_mut()?[range], &name)
    }

    /// An independent tensor with the same contents, sharing bytes until one side writes.
    pub fn deep_clone(&self) -> Result<Tensor<'static>> {
        Ok(Tensor {
            dt: self.dt,
            shape: self.shape.clone(),
            layout: self.layout.clone(),
            storage: Arc::from(self.storage.deep_clone()?),
            name: self.name.clone(),
        })
    }

    /// A packed row-major copy on the host (a relayout when the layout is another).
    pub fn to_row_major(&self) -> Result<Tensor<'static>> {
        self.relaid(Layout::row_major(self.dt, &self.shape)?, 0)
    }

    /// Writes the elements, packed row-major, into `dst` (exactly as long): one pass over the tensor's layout, so a
    /// strided tensor is packed on its way into memory someone else owns (a device's staging buffer).
    pub fn write_row_major(&self, dst: &mut [u8]) -> Result<()> {
        let size = self.dt.size_of();
        if dst.len() != self.len() * size {
            return Err(RuntimeError::ByteLength {
                tensor: self.name_or_unnamed().into(),
                dt: self.dt,
                shape: self.shape.to_vec(),
                expected: self.len() * size,
                found: dst.len(),
            });
        }
        if self.is_row_major() {
            dst.copy_from_slice(self.as_bytes()?);
            return Ok(());
        }
        let src = self.storage.materialize()?.get(self.layout.offset()..).ok_or_else(|| self.short_storage())?;
        let from = element_offsets(&self.shape, self.layout.strides(), size);
        for (f, d) in from.zip(dst.chunks_exact_mut(size.max(1))) {
            d.copy_from_slice(src.get(f..f + size).ok_or_else(|| self.short_storage())?);
        }
        Ok(())
    }

    /// A copy of the elements in `layout`, in host memory aligned to `alignment`: how a caller builds memory of a
    /// given layout (a camera frame's padded rows) from packed data.
    pub fn to_layout(&self, layout: Layout, alignment: usize) -> Result<Tensor<'static>> {
        self.relaid(layout, alignment)
    }

    /// A copy with `layout`, in host memory aligned to `alignment`.
    fn relaid(&self, layout: Layout, alignment: usize) -> Result<Tensor<'static>> {
        let size = self.dt.size_of();
        let span = layout.span_bytes(self.dt, &self.shape)?;
        let mut plain = PlainStorage::zeroed_aligned(span, alignment.max(crate::layout::HOST_ALIGNMENT))
            .map_err(|e| self.named(e))?;
        let src = self.storage.materialize()?.get(self.layout.offset()..).ok_or_else(|| self.short_storage())?;
        let dst = plain.as_bytes_mut();
        if layout.offset() == 0 && self.is_row_major() && layout.is_row_major(self.dt, &self.shape) {
            // Packed row-major into packed row-major: one copy.
            let bytes = self.as_bytes()?;
            dst.get_mut(..bytes.len()).ok_or_else(|| self.short_storage())?.copy_from_slice(bytes);
        } else {
            let from = element_offsets(&self.shape, self.layout.strides(), size);
            let to = element_offsets(&self.shape, layout.strides(), size);
            for (f, t) in from.zip(to) {
                let element = src.get(f..f + size).ok_or_else(|| self.short_storage())?;
                dst[t..t + size].copy_from_slice(element);
            }
        }
        let tensor = Tensor::from_storage(
            self.dt,
            &self.shape,
            layout.with_alignment(alignment.max(crate::layout::HOST_ALIGNMENT)),
            plain,
        )?;
        Ok(match &self.name {
            Some(name) => tensor.with_name(name.clone()),
            None => tensor,
        })
    }

    fn named(&self, err: RuntimeError) -> RuntimeError {
        match err {
            RuntimeError::OutOfMemory { bytes, .. } => {
                RuntimeError::OutOfMemory { tensor: self.name_or_unnamed().into(), bytes }
            }
            other => other,
        }
    }

    fn view_error(&self, op: &'static str, reason: String) -> RuntimeError {
        RuntimeError::View { tensor: self.name_or_unnamed().into(), op, reason }
    }

    /// The view of indices `range` along `axis`, sharing storage. For bytes still on a
    /// device, the storage is sliced on the device and stays lazy.
    pub fn slice(&self, axis: usize, range: Range<usize>) -> Result<Tensor<'a>> {
        let Some(&dim) = self.shape.get(axis) else {
            return Err(self.view_error("slice", format!("axis {axis} is out of range for rank {}", self.shape.len())));
        };
        if range.start > range.end || range.end > dim {
            return Err(self.view_error("slice", format!("range {range:?} does not fit axis {axis} of length {dim}")));
        }
        let mut shape = self.shape.clone();
        shape[axis] = range.len();
        let size = self.dt.size_of();
        let offset = if range.is_empty() {
            self.layout.offset()
        } else {
            range
                .start
                .checked_mul(self.layout.strides()[axis])
                .and_then(|e| e.checked_mul(size))
                .and_then(|b| b.checked_add(self.layout.offset()))
                .ok_or_else(|| self.view_error("slice", format!("offset of {range:?} on axis {axis} overflows")))?
        };
        let layout = self.layout.clone().with_offset(offset);
        let span = layout.span_bytes(self.dt, &shape)?;
        if span > self.storage.byte_len() {
            return Err(self.view_error("slice", format!("range {range:?} reaches past the storage")));
        }
        let mut view = Tensor { shape, layout, ..self.clone() };
        if span > offset {
            if let Some(sliced) = self.storage.slice(offset..span)? {
                view.storage = Arc::from(sliced);
                view.layout = view.layout.with_offset(0);
            }
        }
        Ok(view)
    }

    /// The same elements with another shape, sharing storage. Needs packed row-major elements.
    pub fn reshape(&self, shape: &[usize]) -> Result<Tensor<'a>> {
        if element_count(shape) != Some(self.len()) {
            return Err(
                self.view_error("reshape", format!("{:?} has a different element count than {:?}", shape, self.shape))
            );
        }
        if !self.is_row_major() {
            return Err(self.view_error(
                "reshape",
                format!("a {} layout cannot be reshaped without a copy (use to_row_major)", self.layout_kind()),
            ));
        }
        let strides = row_major_dims(shape).ok_or_else(|| self.view_error("reshape", "shape overflows".into()))?;
        let layout = self.layout.clone().with_strides(strides);
        Ok(Tensor { shape: Dims::from_slice(shape), layout, ..self.clone() })
    }

    /// The view with axes reordered: axis `i` of the result is axis `axes[i]` of this one.
    pub fn permute(&self, axes: &[usize]) -> Result<Tensor<'a>> {
        let mut seen = vec![false; self.shape.len()];
        let valid = axes.len() == self.shape.len()
            && axes.iter().all(|&a| a < seen.len() && !std::mem::replace(&mut seen[a], true));
        if !valid {
            return Err(
                self.view_error("permute", format!("{axes:?} is not a permutation of the {} axes", self.shape.len()))
            );
        }
        let shape = axes.iter().map(|&a| self.shape[a]).collect();
        let strides = axes.iter().map(|&a| self.layout.strides()[a]).collect();
        let layout = self.layout.clone().with_strides(strides);
        Ok(Tensor { shape, layout, ..self.clone() })
    }

    /// This tensor in a form `need` reads in place: itself (shared, no copy) when it already
    /// fits, else exactly one copy, recorded in `tag`'s ledger with the reason.
    pub fn conform(&self, need: &LayoutNeed, tag: &LedgerTag) -> Result<Tensor<'a>> {
        let bytes = self.storage.materialize()?;
        let address = bytes.as_ptr() as usize + self.layout.offset();
        let alignment = need.alignment.max(1);
        let mut reasons = Vec::new();
        if !address.is_multiple_of(alignment) {
            reasons.push(format!("misaligned by {} bytes for {alignment}-byte alignment", address % alignment));
        }
        let kind = self.layout_kind();
        let size = self.dt.size_of();
        let target = match need.accepts {
            Accepts::RowMajor => {
                if kind != LayoutKind::RowMajor {
                    reasons.push(format!("{kind} where row-major is needed"));
                }
                Layout::row_major(self.dt, &self.shape)?
            }
            Accepts::ColumnMajor => {
                if kind != LayoutKind::ColumnMajor {
                    reasons.push(format!("{kind} where column-major is needed"));
                }
                Layout::column_major(self.dt, &self.shape)?
            }
            Accepts::PaddedRows { axis, pitch_multiple } => {
                let multiple = pitch_multiple.max(1);
                let packed_row = element_count(self.shape.get(axis + 1..).unwrap_or(&[]))
                    .and_then(|n| n.checked_mul(size))
                    .unwrap_or(0);
                match kind {
                    LayoutKind::PaddedRows { axis: a, pitch } if a == axis && pitch.is_multiple_of(multiple) => {}
                    LayoutKind::RowMajor if packed_row.is_multiple_of(multiple) => {}
                    LayoutKind::PaddedRows { axis: a, pitch } if a == axis => {
                        reasons.push(format!("row pitch {pitch} bytes is not a multiple of {multiple}"))
                    }
                    LayoutKind::RowMajor => {
                        reasons.push(format!("packed rows of {packed_row} bytes are not a multiple of {multiple}"))
                    }
                    other => reasons.push(format!("{other} where rows padded on axis {axis} are needed")),
                }
                Layout::padded(self.dt, &self.shape, axis, packed_row.next_multiple_of(multiple))?
            }
        };
        if reasons.is_empty() {
            return Ok(self.clone());
        }
        let copy = self.relaid(target, alignment)?;
        let reason = reasons.join("; ");
        tag.record(MoveKind::Relayout, &MemorySpace::HOST, &MemorySpace::HOST, copy.len() * size, || reason.into());
        Ok(copy)
    }
}

impl Tensor<'static> {
    /// A packed row-major tensor owning a copy of `data`.
    pub fn from_slice<T: Datum>(shape: &[usize], data: &[T]) -> Result<Self> {
        Self::from_bytes(T::DATUM_TYPE, shape, bytemuck::cast_slice(data))
    }

    /// A packed row-major tensor owning `data`.
    pub fn from_vec<T: Datum>(shape: &[usize], data: Vec<T>) -> Result<Self> {
        Self::from_slice(shape, &data)
    }

    /// A packed row-major tensor owning a copy of `bytes`, which must be exactly as long as
    /// `shape` of `dt` needs.
    pub fn from_bytes(dt: DatumType, shape: &[usize], bytes: &[u8]) -> Result<Self> {
        let layout = Self::layout_of_bytes(dt, shape, bytes)?;
        Self::from_storage(dt, shape, layout, PlainStorage::copy_from(bytes)?)
    }

    /// A packed row-major tensor over the bytes `range` of `owner`, not copied (`SharedBytes`): checked as
    /// [`Tensor::from_bytes`] checks its bytes, read in place by [`Tensor::bytes_in_place`] and copied into aligned
    /// memory on its first aligned read.
    pub fn from_shared_bytes(dt: DatumType, shape: &[usize], owner: crate::Owner, range: Range<usize>) -> Result<Self> {
        let storage = crate::SharedBytes::new(owner, range)?;
        let layout = Self::layout_of_bytes(dt, shape, storage.in_place())?;
        Self::from_storage(dt, shape, layout, storage)
    }

    /// The packed row-major layout of `shape` of `dt` over `bytes`, checked: exactly as many bytes as it needs, and
    /// each element a valid one of `dt` (booleans 0 or 1, small types in range).
    fn layout_of_bytes(dt: DatumType, shape: &[usize], bytes: &[u8]) -> Result<Layout> {
        let layout = Layout::row_major(dt, shape)?;
        let need = layout.span_bytes(dt, shape)?;
        if need != bytes.len() {
            return Err(RuntimeError::ByteLength {
                tensor: UNNAMED.into(),
                dt,
                shape: shape.to_vec(),
                expected: need,
                found: bytes.len(),
            });
        }
        if (dt == DatumType::Bool && bytes.iter().any(|&b| b > 1)) || !crate::small_types::valid(dt, bytes) {
            return Err(RuntimeError::InvalidBits { tensor: UNNAMED.into(), dt });
        }
        Ok(layout)
    }

    /// The bytes of a packed row-major tensor over [`crate::SharedBytes`] where they are (at any alignment: read them as
    /// little-endian bytes), without the aligned copy; `None` for any other tensor, whose bytes
    /// [`Tensor::as_bytes`] gives.
    pub fn bytes_in_place(&self) -> Option<&[u8]> {
        let shared = self.storage.as_any()?.downcast_ref::<crate::SharedBytes>()?;
        if !self.is_row_major() {
            return None;
        }
        shared.in_place().get(self.byte_range())
    }

    /// This tensor, holding no other allocation's bytes: one over [`crate::SharedBytes`] (a model file's weights)
    /// becomes one over its own copy (`storage/shared.rs`, rule 6); any other is a clone. What a compiled program
    /// keeps of its constants, so that the model file's mapping is neither read nor held once the compile is over.
    pub fn owned(&self) -> Result<Tensor<'static>> {
        let Some(shared) = self.storage.as_any().and_then(|a| a.downcast_ref::<crate::SharedBytes>()) else {
            return Ok(self.clone());
        };
        let storage: Arc<dyn TensorStorage> = Arc::new(PlainStorage::copy_from(shared.in_place())?);
        Ok(Tensor { storage, ..self.clone() })
    }

    /// A packed row-major tensor of zeros.
    pub fn zeros(dt: DatumType, shape: &[usize]) -> Result<Self> {
        let layout = Layout::row_major(dt, shape)?;
        let plain = PlainStorage::zeroed(layout.span_bytes(dt, shape)?)?;
        Self::from_storage(dt, shape, layout, plain)
    }
}

impl fmt::Debug for Tensor<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Tensor")
            .field("name", &self.name)
            .field("dt", &self.dt)
            .field("shape", &self.shape)
            .field("layout", &self.layout)
            .field("storage", &self.storage)
            .finish()
    }
}

impl fmt::Display for Tensor<'_> {
    /// `x: f32[2, 3] row-major, lazy on test:discrete, 24 bytes`. Never reads device bytes.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}{:?} {}, {}", self.name_or_unnamed(), self.dt, self.shape, self.layout_kind(), self.storage)
    }
}
