//! `LazyHost<D>`: a device tensor that crosses the model boundary as a host tensor.
//!
//! The contract, rule by rule (each has a test named after it in `tests/lazy_host.rs`):
//! 1. a device tensor crossing the model boundary is a host tensor in datum type and shape,
//!    with no bytes copied;
//! 2. it waits for the producing work when it is wrapped, on the thread that queued it,
//!    not when read (a reader may be another thread, whose queue is empty);
//! 3. the first read materializes, once, however many threads read at the same time; later
//!    reads reuse it; the cheap predicate ([`TensorStorage::host_bytes`]) never reads back;
//! 4. on unified memory, materializing shares the host allocation instead of copying;
//! 5. a host-side write detaches the device buffer first, and copies out of memory still
//!    shared: nothing aliases device memory after;
//! 6. `deep_clone` shares what was materialized, and the two stay independent;
//! 7. slicing an unmaterialized tensor slices on the device and stays lazy;
//! 8. passed as an input to the next run, the device buffer is used as is
//!    ([`crate::device_input`]): no readback, no upload;
//! 9. only owned device tensors are wrapped; a run-scoped view is copied out at the
//!    boundary ([`LazyHost::at_boundary`]).

use std::any::Any;
use std::fmt;
use std::ops::Range;
use std::sync::Arc;

use once_cell::sync::OnceCell;

use crate::storage::TensorStorage;
use crate::{DatumType, DeviceBuffer, LedgerTag, MemorySpace, MoveKind, PlainStorage, Result, RuntimeError, Tensor};

/// Host storage for bytes that are still on a device (see the module docs for its rules).
pub struct LazyHost<D: DeviceBuffer> {
    /// Dropped on the first host write: from then on this is plain host memory.
    device: Option<D>,
    /// The host bytes, once read. Shared with the device allocation on unified memory and
    /// with deep clones; a write copies out of the `Arc` when it is shared.
    host: OnceCell<Arc<PlainStorage>>,
    tag: LedgerTag,
}

impl<D: DeviceBuffer> LazyHost<D> {
    /// Wrap an owned device buffer whose bytes are to be read later. Waits for the work
    /// producing them first, on this thread (rule 2). A run-scoped view is refused (rule 9):
    /// use [`LazyHost::at_boundary`], which copies it out.
    pub fn new(device: D, tag: LedgerTag) -> Result<Self> {
        if device.is_run_scoped() {
            return Err(RuntimeError::Boundary {
                tensor: tag.value.to_string(),
                reason: "a run-scoped device view cannot be held lazily: its memory is reused by the next run".into(),
            });
        }
        device.wait()?;
        Ok(LazyHost { device: Some(device), host: OnceCell::new(), tag })
    }

    /// The tensor a device output becomes at the model boundary: lazy when the buffer is
    /// owned, copied out now when it is a run-scoped view (rule 9).
    pub fn at_boundary(device: D, dt: DatumType, shape: &[usize], tag: LedgerTag) -> Result<Tensor<'static>> {
        let name = tag.value.clone();
        let storage: Box<dyn TensorStorage> = if device.is_run_scoped() {
            device.wait()?;
            let fetched = device.download()?;
            // A share of run-scoped memory would change under us: own a copy.
            let plain = Arc::try_unwrap(fetched.value).or_else(|shared| PlainStorage::copy_from(shared.as_bytes()))?;
            tag.record(MoveKind::Download, &device.space(), &MemorySpace::HOST, plain.len(), || {
                "run-scoped device view copied out at the model boundary".into()
            });
            Box::new(plain)
        } else {
            Box::new(LazyHost::new(device, tag)?)
        };
        Tensor::from_boxed(dt, shape, storage).map(|t| t.with_name(name))
    }

    /// The device buffer still backing this storage, unless a host write detached it.
    pub fn device(&self) -> Option<&D> {
        self.device.as_ref()
    }

    /// True once the bytes have been brought to the host.
    pub fn is_materialized(&self) -> bool {
        self.host.get().is_some()
    }

    fn materialize_shared(&self) -> Result<&Arc<PlainStorage>> {
        self.host.get_or_try_init(|| {
            let Some(device) = &self.device else {
                // Only a host write drops the device, and it materializes first.
                return Err(RuntimeError::Boundary {
                    tensor: self.tag.value.to_string(),
                    reason: "lazy host storage lost both its device buffer and its host bytes".into(),
                });
            };
            let fetched = device.download()?;
            if fetched.copied {
                self.tag.record(MoveKind::Download, &device.space(), &MemorySpace::HOST, device.byte_len(), || {
                    "first host read of a lazy device tensor".into()
                });
            }
            Ok(fetched.value)
        })
    }
}

impl<D: DeviceBuffer> fmt::Debug for LazyHost<D> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LazyHost")
            .field("value", &self.tag.value)
            .field("device", &self.device)
            .field("materialized", &self.is_materialized())
            .finish()
    }
}

impl<D: DeviceBuffer> fmt::Display for LazyHost<D> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (&self.device, self.is_materialized()) {
            (Some(d), false) => write!(f, "lazy on {}, {} bytes", d.space(), d.byte_len()),
            (Some(d), true) => write!(f, "lazy on {}, materialized, {} bytes", d.space(), d.byte_len()),
            (None, _) => write!(f, "host (detached from its device), {} bytes", self.byte_len()),
        }
    }
}

impl<D: DeviceBuffer> TensorStorage for LazyHost<D> {
    fn byte_len(&self) -> usize {
        match (&self.device, self.host.get()) {
            (Some(d), _) => d.byte_len(),
            (None, Some(h)) => h.len(),
            (None, None) => 0,
        }
    }

    fn space(&self) -> MemorySpace {
        match (&self.device, self.is_materialized()) {
            (Some(d), false) => d.space(),
            _ => MemorySpace::HOST,
        }
    }

    fn host_bytes(&self) -> Option<&[u8]> {
        // The cheap predicate: what is here now, never a readback.
        self.host.get().map(|h| h.as_bytes())
    }

    fn materialize(&self) -> Result<&[u8]> {
        Ok(self.materialize_shared()?.as_bytes())
    }

    fn host_bytes_mut(&mut self) -> Result<&mut [u8]> {
        self.materialize_shared()?;
        // Detach first: once the device handle is gone, the host bytes are shared only if a
        // deep clone or the unified allocation of another handle still holds them, and
        // exactly then `make_mut` copies them out.
        drop(self.device.take());
        let Some(host) = self.host.get_mut() else {
            return Err(RuntimeError::Boundary {
                tensor: self.tag.value.to_string(),
                reason: "lazy host storage lost its host bytes".into(),
            });
        };
        if Arc::strong_count(host) > 1 {
            let bytes = host.len();
            self.tag.record(MoveKind::CopyOnWrite, &MemorySpace::HOST, &MemorySpace::HOST, bytes, || {
                "host write to bytes shared with a device buffer or a clone".into()
            });
        }
        Ok(Arc::make_mut(host).as_bytes_mut())
    }

    fn into_plain(self: Box<Self>) -> Result<PlainStorage> {
        let me = *self;
        me.materialize_shared()?;
        let LazyHost { device, host, .. } = me;
        drop(device);
        match host.into_inner() {
            Some(host) => Arc::try_unwrap(host).or_else(|shared| PlainStorage::copy_from(shared.as_bytes())),
            None => PlainStorage::zeroed(0),
        }
    }

    fn deep_clone(&self) -> Result<Box<dyn TensorStorage>> {
        let host = OnceCell::new();
        if let Some(h) = self.host.get() {
            let _ = host.set(Arc::clone(h));
        }
        Ok(Box::new(LazyHost { device: self.device.clone(), host, tag: self.tag.clone() }))
    }

    fn slice(&self, bytes: Range<usize>) -> Result<Option<Box<dyn TensorStorage>>> {
        if self.is_materialized() {
            return Ok(None);
        }
        let Some(device) = &self.device else { return Ok(None) };
        let Some(sliced) = device.slice(bytes)? else { return Ok(None) };
        Ok(Some(Box::new(LazyHost { device: Some(sliced), host: OnceCell::new(), tag: self.tag.clone() })))
    }

    fn as_any(&self) -> Option<&dyn Any> {
        Some(self)
    }
}
