//! DLPack in and out, for host tensors: another framework's tensor used in place as a stowage [`Tensor`], and a
//! stowage tensor handed to another framework without a copy. The ABI (the C structs, the versioned and legacy
//! managed tensors, their deleters) is the `dlpark` crate's: it is made for exactly this, keeps the struct layouts
//! and version checks in one place, and pulls in nothing else. Device tensors cross through their backend
//! (`stowage_opencl::dlpack` for OpenCL memory), which knows what a device's data pointer is.
//!
//! The contract, each rule with its test in `tests/dlpack.rs`:
//! 1. **Export is in place**: the managed tensor points at the storage's bytes, with the layout's byte offset and
//!    element strides (padded rows, column-major and views cross as they are), flagged read-only (stowage's
//!    storages are shared: a consumer that writes must copy).
//! 2. **An export keeps its storage alive**: the managed tensor owns a handle to the tensor; its deleter, run once
//!    by the consumer, drops it. The stowage tensor can be dropped first.
//! 3. **Only bytes on the host export here**: a lazy device tensor not read yet is an error naming it (read it, or
//!    export it through its backend); nothing is downloaded behind the caller's back.
//! 4. **Import is in place**: a CPU tensor's bytes become the storage of a [`Tensor`] ([`ExternalStorage`]), its
//!    strides and byte offset its layout; the managed tensor's deleter runs once, when the last stowage tensor
//!    sharing it is dropped, or at once when the import is refused.
//! 5. **Import checks** the device (CPU only here), the datum type (stowage's, one lane), the strides
//!    (non-negative), and the span against the size limit: each an error naming the tensor, never a crash.

use std::ffi::c_void;
use std::ptr::NonNull;

use dlpark::ffi::{DLDataType, DLDataTypeCode, DLDevice, DLDeviceType, DLManagedTensorVersioned};
use dlpark::metadata::Dynamic;
use dlpark::{DlpackFlags, Managed, ManagedTensorBase};

use crate::{DatumType, ExternalStorage, Layout, Result, RuntimeError, Tensor};

/// A managed DLPack tensor of the current version, as [`Tensor::to_dlpack`] makes it.
pub type DlpackTensor = Managed<DLManagedTensorVersioned>;

fn refused(tensor: &str, reason: impl Into<String>) -> RuntimeError {
    RuntimeError::Dlpack { tensor: tensor.to_string(), reason: reason.into() }
}

/// The DLPack type of `dt`, or `None` for the 4- and 2-bit types (DLPack packs them, stowage holds one per byte:
/// `small_types`, rule 1, so their bytes are not a DLPack tensor's) and for strings (handles into this process's
/// table, meaningless to another framework).
pub fn dlpack_type(dt: DatumType) -> Option<DLDataType> {
    let (code, bits) = match dt {
        DatumType::Bool => (DLDataTypeCode::BOOL, 8),
        DatumType::U8 => (DLDataTypeCode::UINT, 8),
        DatumType::U16 => (DLDataTypeCode::UINT, 16),
        DatumType::U32 => (DLDataTypeCode::UINT, 32),
        DatumType::U64 => (DLDataTypeCode::UINT, 64),
        DatumType::I8 => (DLDataTypeCode::INT, 8),
        DatumType::I16 => (DLDataTypeCode::INT, 16),
        DatumType::I32 => (DLDataTypeCode::INT, 32),
        DatumType::I64 => (DLDataTypeCode::INT, 64),
        DatumType::F16 => (DLDataTypeCode::FLOAT, 16),
        DatumType::BF16 => (DLDataTypeCode::BFLOAT, 16),
        DatumType::F32 => (DLDataTypeCode::FLOAT, 32),
        DatumType::F64 => (DLDataTypeCode::FLOAT, 64),
        DatumType::F8E4M3FN => (DLDataTypeCode::FLOAT8_E4M3FN, 8),
        DatumType::F8E4M3FNUZ => (DLDataTypeCode::FLOAT8_E4M3FNUZ, 8),
        DatumType::F8E5M2 => (DLDataTypeCode::FLOAT8_E5M2, 8),
        DatumType::F8E5M2FNUZ => (DLDataTypeCode::FLOAT8_E5M2FNUZ, 8),
        DatumType::F8E8M0 => (DLDataTypeCode::FLOAT8_E8M0FNU, 8),
        DatumType::F4E2M1 | DatumType::I4 | DatumType::U4 | DatumType::I2 | DatumType::U2 | DatumType::Str => {
            return None
        }
    };
    Some(DLDataType::new(code, bits, 1))
}

/// The stowage datum type of a DLPack type, when there is one.
pub fn datum_type(t: DLDataType) -> Option<DatumType> {
    DatumType::ALL.into_iter().find(|&dt| dlpack_type(dt) == Some(t))
}

/// The parts of a managed DLPack tensor that make a stowage tensor, checked (rule 5): datum type, shape, element
/// strides, byte offset, and the bytes from the data pointer to the end of the span. `device` is what the
/// caller takes (a backend passes its own device type).
pub struct Checked {
    /// The datum type.
    pub dt: DatumType,
    /// The shape.
    pub shape: Vec<usize>,
    /// The layout: element strides and the byte offset from the data pointer.
    pub layout: Layout,
    /// Bytes from the data pointer to the end of the last element.
    pub span: usize,
    /// The data pointer (a host address, or a device's handle such as a `cl_mem`).
    pub data: *mut c_void,
    /// The device.
    pub device: DLDevice,
}

/// Reads and checks `managed`'s descriptor (rule 5), for a consumer on `device_type`, with at most `limit` bytes.
pub fn check<M: ManagedTensorBase>(
    managed: &Managed<M>,
    name: &str,
    device_type: DLDeviceType,
    limit: usize,
) -> Result<Checked> {
    let view = managed.validate().map_err(|e| refused(name, format!("its descriptor is not valid: {e}")))?;
    let device = view.device();
    if device.device_type != device_type {
        return Err(refused(
            name,
            format!(
                "it is on device type {} (id {}); this import takes {}",
                device.device_type.0, device.device_id, device_type.0
            ),
        ));
    }
    let dt = datum_type(view.dtype()).ok_or_else(|| {
        let t = view.dtype();
        refused(name, format!("its type (code {}, {} bits, {} lanes) is none of stowage's", t.code.0, t.bits, t.lanes))
    })?;
    let strides = view.strides_or_compact().map_err(|e| refused(name, format!("its strides: {e}")))?;
    let mut shape = Vec::with_capacity(view.ndim());
    let mut elements = Vec::with_capacity(view.ndim());
    for (k, (&d, &s)) in view.shape().iter().zip(strides.iter()).enumerate() {
        let d = usize::try_from(d).map_err(|_| refused(name, format!("dimension {k} is {d}")))?;
        let s = usize::try_from(s)
            .map_err(|_| refused(name, format!("axis {k} has stride {s}: negative strides are not supported")))?;
        shape.push(d);
        elements.push(s);
    }
    let offset = usize::try_from(view.byte_offset()).map_err(|_| refused(name, "its byte offset is too large"))?;
    let layout = Layout::strided(elements, offset);
    let span = layout.span_bytes(dt, &shape).map_err(|e| refused(name, e.to_string()))?;
    if span > limit {
        return Err(refused(name, format!("it spans {span} bytes, over the {limit}-byte limit")));
    }
    let data = view.data_ptr().cast_mut();
    if data.is_null() && span > 0 {
        return Err(refused(name, "its data pointer is null"));
    }
    Ok(Checked { dt, shape, layout, span, data, device })
}

/// `tensor`'s datum type, shape and element strides with `data`, `device` and `byte_offset` as a managed DLPack
/// tensor, flagged read-only, holding a handle to `tensor` until its deleter runs (rules 1 and 2). Backends
/// export their device tensors through it.
///
/// # Safety
/// `data` and `byte_offset`, with the tensor's strides, describe memory on `device` that the tensor's storage
/// keeps alive and unmoved.
pub unsafe fn export(
    tensor: &Tensor<'static>,
    data: *mut c_void,
    device: DLDevice,
    byte_offset: usize,
) -> Result<DlpackTensor> {
    let name = tensor.name_or_unnamed();
    let dtype = dlpack_type(tensor.dt()).ok_or_else(|| {
        refused(
            name,
            format!("{} is held one element per byte; DLPack packs it (cast it to i8, u8 or f32)", tensor.dt()),
        )
    })?;
    let as_i64 = |v: usize| i64::try_from(v).map_err(|_| refused(name, format!("{v} does not fit DLPack's i64")));
    let shape = tensor.shape().iter().map(|&d| as_i64(d)).collect::<Result<Vec<_>>>()?;
    let strides = tensor.layout().strides().iter().map(|&s| as_i64(s)).collect::<Result<Vec<_>>>()?;
    let fail = |e: &dyn std::fmt::Display| refused(name, e.to_string());
    let mut made = Dynamic::new(shape, strides).initialize(Box::new(tensor.clone())).map_err(|e| fail(&e))?;
    made.set_data(data).set_dtype(dtype).set_device(device);
    made.set_byte_offset(byte_offset as u64);
    made.set_flags(DlpackFlags::READ_ONLY).map_err(|e| fail(&e))?;
    // SAFETY: the caller's promise: the descriptor is the tensor's memory, which the owner keeps alive.
    Ok(unsafe { made.finish() })
}

impl Tensor<'static> {
    /// This tensor as a managed DLPack tensor on the CPU, in place (rules 1 to 3).
    pub fn to_dlpack(&self) -> Result<DlpackTensor> {
        let name = self.name_or_unnamed().to_string();
        let bytes = self.storage().host_bytes().ok_or_else(|| {
            refused(
                &name,
                format!(
                    "its bytes are in {} memory, not read yet: read it, or export it through its backend",
                    self.space().name()
                ),
            )
        })?;
        let data = bytes.as_ptr().cast_mut().cast::<c_void>();
        // SAFETY: the data pointer, strides and offset describe the storage's bytes, which the export's handle to
        // this tensor keeps alive and unmoved until the deleter drops it.
        unsafe { export(self, data, DLDevice::CPU, self.layout().offset()) }
    }

    /// A managed DLPack tensor on the CPU as a tensor named `name`, in place (rules 4 and 5); at most `limit`
    /// bytes.
    pub fn from_dlpack<M: ManagedTensorBase + 'static>(
        managed: Managed<M>,
        name: &str,
        limit: usize,
    ) -> Result<Tensor<'static>>
    where
        Managed<M>: Send,
    {
        let c = check(&managed, name, DLDeviceType::CPU, limit)?;
        let ptr = NonNull::new(c.data.cast::<u8>()).unwrap_or(NonNull::dangling());
        let len = if c.data.is_null() { 0 } else { c.span };
        // SAFETY: a valid DLPack tensor's `span` bytes from its data pointer are allocated and readable until its
        // deleter runs, which the release callback does, once, after the last reader (rule 4).
        let storage = unsafe { ExternalStorage::from_raw_parts(ptr, len, Box::new(move || drop(managed))) };
        Ok(Tensor::external(c.dt, &c.shape, c.layout, storage)?.with_name(name))
    }
}
