//! map/unmap: typed host views of a buffer, as RAII guards.
//!
//! `map_read` and `map_write` (on a [`crate::Tensor`] or a [`crate::DeviceBuffer`]) return
//! guards that deref to typed slices. A mapping waits for the pending device work on its
//! buffer before it is handed out; dropping a write mapping publishes the writes to the
//! device. The borrow checker rules out the misuse: a write mapping borrows its buffer
//! mutably, so nothing else can map or write it meanwhile, and a slice taken from a guard
//! borrows the guard, so it cannot be used after the unmap.
//!
//! Guards are for the plain-old-data element types; a `bool` tensor is mapped as `u8`.

use std::marker::PhantomData;
use std::ops::{Deref, DerefMut};

use bytemuck::Pod;

use crate::device::{ReadMapping, WriteMapping};
use crate::{LedgerTag, MemorySpace, MoveKind, Result, RuntimeError};

enum ReadBytes<'b> {
    Host(&'b [u8]),
    Device(Box<dyn ReadMapping + 'b>),
}

impl ReadBytes<'_> {
    fn bytes(&self) -> &[u8] {
        match self {
            ReadBytes::Host(bytes) => bytes,
            ReadBytes::Device(mapping) => mapping,
        }
    }
}

fn check<T: Pod>(bytes: &[u8], name: &str) -> Result<()> {
    match bytemuck::try_cast_slice::<u8, T>(bytes) {
        Ok(_) => Ok(()),
        Err(bytemuck::PodCastError::TargetAlignmentGreaterAndInputNotAligned) => Err(RuntimeError::Misaligned {
            tensor: name.to_string(),
            alignment: std::mem::align_of::<T>(),
            address: bytes.as_ptr() as usize,
        }),
        Err(_) => Err(RuntimeError::View {
            tensor: name.to_string(),
            op: "map",
            reason: format!(
                "{} bytes are not a whole number of {}-byte elements",
                bytes.len(),
                std::mem::size_of::<T>()
            ),
        }),
    }
}

/// A mapping open for reading; derefs to `[T]`. Dropping it unmaps.
pub struct MapRead<'b, T: Pod> {
    bytes: ReadBytes<'b>,
    _elements: PhantomData<&'b [T]>,
}

impl<'b, T: Pod> MapRead<'b, T> {
    pub(crate) fn new(mapping: Box<dyn ReadMapping + 'b>, name: &str) -> Result<Self> {
        check::<T>(&mapping, name)?;
        Ok(MapRead { bytes: ReadBytes::Device(mapping), _elements: PhantomData })
    }

    pub(crate) fn host(bytes: &'b [u8], name: &str) -> Result<Self> {
        check::<T>(bytes, name)?;
        Ok(MapRead { bytes: ReadBytes::Host(bytes), _elements: PhantomData })
    }

    /// Close the mapping now (the same as dropping it).
    pub fn unmap(self) {}
}

impl<T: Pod> Deref for MapRead<'_, T> {
    type Target = [T];
    fn deref(&self) -> &[T] {
        // Length and alignment were checked when the mapping was opened, and the bytes
        // cannot move or change size while it is open.
        bytemuck::cast_slice(self.bytes.bytes())
    }
}

enum WriteBytes<'b> {
    Host(&'b mut [u8]),
    Device(Option<Box<dyn WriteMapping + 'b>>),
}

/// A mapping open for writing; derefs to `[T]` mutably. Dropping it (or
/// [`MapWrite::unmap`], which also reports failure) makes the device see the writes.
pub struct MapWrite<'b, T: Pod> {
    bytes: WriteBytes<'b>,
    /// For a staged (copied) mapping: the ledger and space the publishing upload is recorded in.
    publish: Option<(LedgerTag, MemorySpace)>,
    _elements: PhantomData<&'b mut [T]>,
}

impl<'b, T: Pod> MapWrite<'b, T> {
    pub(crate) fn new(mapping: Box<dyn WriteMapping + 'b>, publish: Option<(LedgerTag, MemorySpace)>) -> Result<Self> {
        let name = publish.as_ref().map_or("<device buffer>", |(tag, _)| &*tag.value);
        check::<T>(&mapping, name)?;
        Ok(MapWrite { bytes: WriteBytes::Device(Some(mapping)), publish, _elements: PhantomData })
    }

    pub(crate) fn host(bytes: &'b mut [u8], name: &str) -> Result<Self> {
        check::<T>(bytes, name)?;
        Ok(MapWrite { bytes: WriteBytes::Host(bytes), publish: None, _elements: PhantomData })
    }

    /// Publish the writes to the device and close the mapping, reporting a failure that a
    /// drop would have to swallow.
    pub fn unmap(mut self) -> Result<()> {
        self.publish_now()
    }

    fn publish_now(&mut self) -> Result<()> {
        let WriteBytes::Device(mapping) = &mut self.bytes else { return Ok(()) };
        let Some(mapping) = mapping.take() else { return Ok(()) };
        let bytes = mapping.len();
        mapping.unmap()?;
        if let Some((tag, space)) = &self.publish {
            tag.record(MoveKind::Upload, &MemorySpace::HOST, space, bytes, || "write mapping published".into());
        }
        Ok(())
    }
}

impl<T: Pod> Drop for MapWrite<'_, T> {
    fn drop(&mut self) {
        // A failure here has nobody to report to; `unmap` is the way to see it.
        let _ = self.publish_now();
    }
}

impl<T: Pod> Deref for MapWrite<'_, T> {
    type Target = [T];
    fn deref(&self) -> &[T] {
        match &self.bytes {
            WriteBytes::Host(bytes) => bytemuck::cast_slice(bytes),
            WriteBytes::Device(Some(mapping)) => bytemuck::cast_slice(mapping),
            WriteBytes::Device(None) => &[],
        }
    }
}

impl<T: Pod> DerefMut for MapWrite<'_, T> {
    fn deref_mut(&mut self) -> &mut [T] {
        match &mut self.bytes {
            WriteBytes::Host(bytes) => bytemuck::cast_slice_mut(bytes),
            WriteBytes::Device(Some(mapping)) => bytemuck::cast_slice_mut(mapping),
            WriteBytes::Device(None) => &mut [],
        }
    }
}

impl<T: Pod + std::fmt::Debug> std::fmt::Debug for MapRead<'_, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("MapRead").field(&&**self).finish()
    }
}

impl<T: Pod + std::fmt::Debug> std::fmt::Debug for MapWrite<'_, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("MapWrite").field(&&**self).finish()
    }
}
