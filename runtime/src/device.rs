//! What a backend's device buffer offers the runtime.
//!
//! A backend implements [`DeviceBuffer`] for its buffer handle (an OpenCL `cl_mem`, a
//! test device's allocation); everything generic is written once, here and in
//! [`crate::lazy`]: lazy readback at the model boundary, handing outputs back as inputs,
//! typed map guards, and recording every transfer in the ledger. Backends only say
//! *whether* an operation copied; the runtime records it.

use std::fmt;
use std::ops::{Deref, DerefMut, Range};
use std::sync::Arc;

use bytemuck::Pod;

use crate::map::{MapRead, MapWrite};
use crate::{DatumType, Ledger, LedgerTag, MemorySpace, MoveKind, PlainStorage, Result, StorageDescriptor, Tensor};

/// A result, and whether producing it copied bytes between memory spaces.
#[derive(Debug)]
pub struct Transferred<T> {
    /// The result.
    pub value: T,
    /// True when bytes were copied; false when memory was shared (unified memory).
    pub copied: bool,
}

/// A host view of device memory open for reading. Dropping it unmaps.
pub trait ReadMapping: Deref<Target = [u8]> {}
impl<T: Deref<Target = [u8]>> ReadMapping for T {}

/// A host view of device memory open for writing. Dropping it unmaps and makes the device
/// see the writes; [`WriteMapping::unmap`] does the same and reports failure.
pub trait WriteMapping: DerefMut<Target = [u8]> {
    /// Publish the writes to the device and close the mapping.
    fn unmap(self: Box<Self>) -> Result<()>;
}

/// A backend's device buffer: a cheap, shareable handle to device memory holding a
/// tensor's elements.
///
/// Cloning shares the buffer (like retaining a `cl_mem`), it never copies device memory.
/// Backends do not write this impl by hand: `#[derive(TensorStorage)]` generates it from
/// the descriptor on the buffer type.
pub trait DeviceBuffer: Clone + Send + Sync + fmt::Debug + 'static {
    /// What an upload goes through (a device context and queue).
    type Context: ?Sized;

    /// The memory this buffer type lives in, for the planner.
    const DESCRIPTOR: StorageDescriptor;

    /// The memory space this buffer lives in.
    fn space(&self) -> MemorySpace;

    /// Length in bytes.
    fn byte_len(&self) -> usize;

    /// True for a view into a run's scratch memory, whose contents are only good until the
    /// next run: such a buffer is copied out at the model boundary, never wrapped lazily.
    fn is_run_scoped(&self) -> bool;

    /// Block until the work queued on this buffer is done.
    fn wait(&self) -> Result<()>;

    /// The bytes on the host. On unified memory this shares the allocation
    /// (`copied: false`); otherwise it is one download.
    fn download(&self) -> Result<Transferred<Arc<PlainStorage>>>;

    /// A new buffer on the device of `cx` holding `bytes`: packed row-major `shape` of `dt`.
    fn upload(cx: &Self::Context, dt: DatumType, shape: &[usize], bytes: &[u8]) -> Result<Transferred<Self>>;

    /// A new buffer on the device of `cx` holding packed row-major `shape` of `dt`, `len` bytes that `fill`
    /// writes. With the backend's `upload_with` ([`StorageDescriptor::packs_on_upload`]) `fill` writes straight
    /// into device memory or its staging, so a strided host tensor is packed in the one copy of its upload;
    /// without it, `fill` writes a host buffer that is then uploaded.
    fn upload_with(
        cx: &Self::Context,
        dt: DatumType,
        shape: &[usize],
        len: usize,
        fill: &mut dyn FnMut(&mut [u8]) -> Result<()>,
    ) -> Result<Transferred<Self>>;

    /// True when this buffer lives on the device of `cx`, so it can be used there as is.
    fn is_on(&self, cx: &Self::Context) -> bool;

    /// A buffer for a byte range of this one, made on the device, if the backend can. The
    /// range covers whole elements; the result is flat (one axis).
    fn slice(&self, bytes: Range<usize>) -> Result<Option<Self>>;

    /// Map for reading, after the pending work writing this buffer is done.
    fn map_read_bytes(&self) -> Result<Transferred<Box<dyn ReadMapping + '_>>>;

    /// Map for writing, after the pending work on this buffer is done.
    fn map_write_bytes(&mut self) -> Result<Transferred<Box<dyn WriteMapping + '_>>>;

    /// Map for reading, typed. Records the download in `tag`'s ledger when the mapping is a
    /// copy (a discrete device); on unified memory it is a pointer.
    fn map_read<T: Pod>(&self, tag: &LedgerTag) -> Result<MapRead<'_, T>> {
        let mapped = self.map_read_bytes()?;
        if mapped.copied {
            tag.record(MoveKind::Download, &self.space(), &MemorySpace::HOST, self.byte_len(), || {
                "mapped for reading".into()
            });
        }
        MapRead::new(mapped.value, &tag.value)
    }

    /// Map for writing, typed. The writes reach the device when the guard is dropped or
    /// unmapped; on a discrete device that is an upload, recorded in `tag`'s ledger.
    fn map_write<T: Pod>(&mut self, tag: &LedgerTag) -> Result<MapWrite<'_, T>> {
        let space = self.space();
        let bytes = self.byte_len();
        let mapped = self.map_write_bytes()?;
        if mapped.copied {
            tag.record(MoveKind::Download, &space, &MemorySpace::HOST, bytes, || "mapped for writing".into());
        }
        let publish = mapped.copied.then(|| (tag.clone(), space));
        MapWrite::new(mapped.value, publish)
    }
}

/// The device buffer to hand a kernel on the device of `cx` for `input`.
///
/// An output of an earlier run on the same device (a lazy host tensor still backed by its
/// device buffer, not written on the host) is used as is: no readback, no upload. Anything
/// else is uploaded once, recorded in `ledger` under the tensor's name: a strided tensor is
/// packed as it is uploaded where the backend can (`upload_with`), else packed on the host
/// first (a relayout, recorded too), as the plan says.
pub fn device_input<D: DeviceBuffer>(input: &Tensor<'_>, cx: &D::Context, ledger: &Ledger) -> Result<D> {
    let tag = LedgerTag::new(ledger, input.name_or_unnamed());
    let packed = input.is_row_major();
    if let Some(buffer) = input.device_buffer::<D>() {
        // Only a whole, packed tensor is its buffer as is; a transposed or sliced view is not.
        if packed && buffer.is_on(cx) && input.is_whole_storage() {
            return Ok(buffer.clone());
        }
    }
    if !packed && D::DESCRIPTOR.packs_on_upload {
        let len = input.len() * input.dt().size_of();
        let uploaded = D::upload_with(cx, input.dt(), input.shape(), len, &mut |dst| input.write_row_major(dst))?;
        if uploaded.copied {
            tag.record(MoveKind::Upload, &MemorySpace::HOST, &uploaded.value.space(), len, || {
                format!("{} input, packed as it is uploaded", input.layout_kind()).into()
            });
        }
        return Ok(uploaded.value);
    }
    let relaid;
    let bytes = if packed {
        input.as_bytes()?
    } else {
        relaid = input.to_row_major()?;
        tag.record(
            MoveKind::Relayout,
            &MemorySpace::HOST,
            &MemorySpace::HOST,
            relaid.len() * input.dt().size_of(),
            || format!("{} input packed row-major for upload", input.layout_kind()).into(),
        );
        relaid.as_bytes()?
    };
    let uploaded = D::upload(cx, input.dt(), input.shape(), bytes)?;
    if uploaded.copied {
        tag.record(MoveKind::Upload, &MemorySpace::HOST, &uploaded.value.space(), bytes.len(), || {
            "input is in host memory".into()
        });
    }
    Ok(uploaded.value)
}

/// [`device_input`] for kernels compiled for element `strides` (a plan that says the device holds the caller's
/// layout, as `InputAccess::Held`): the bytes `input`'s elements span, padding included, uploaded as they are in
/// one copy into a flat buffer of that many elements, which those kernels index with the strides. An input in
/// other strides than the kernels were compiled for, or not in host memory, is an error naming it: those kernels
/// would read it wrong. Packed strides are [`device_input`]'s case.
pub fn device_input_as_held<D: DeviceBuffer>(
    input: &Tensor<'_>,
    strides: &[usize],
    cx: &D::Context,
    ledger: &Ledger,
) -> Result<D> {
    let (dt, layout) = (input.dt(), input.layout());
    let refuse = |reason: String| crate::RuntimeError::Layout { tensor: input.name_or_unnamed().into(), reason };
    if layout.strides() != strides {
        return Err(refuse(format!(
            "its element strides are {:?}; the kernels reading it were compiled for {strides:?}",
            layout.strides()
        )));
    }
    if input.is_row_major() {
        return device_input(input, cx, ledger);
    }
    let host = input.storage().host_bytes().ok_or_else(|| {
        refuse("it is not in host memory, and the device takes it only as the caller lays it out there".into())
    })?;
    let (start, end) = (layout.offset(), layout.span_bytes(dt, input.shape())?);
    let bytes = host
        .get(start..end)
        .ok_or_else(|| refuse(format!("its layout spans bytes {start}..{end} of a {}-byte storage", host.len())))?;
    let uploaded = D::upload(cx, dt, &[bytes.len() / dt.size_of()], bytes)?;
    if uploaded.copied {
        let tag = LedgerTag::new(ledger, input.name_or_unnamed());
        tag.record(MoveKind::Upload, &MemorySpace::HOST, &uploaded.value.space(), bytes.len(), || {
            format!("{} input, uploaded as it is held", input.layout_kind()).into()
        });
    }
    Ok(uploaded.value)
}
