//! DLPack for OpenCL memory: a tensor on an OpenCL device crosses as a managed DLPack tensor on device type
//! `OPENCL` whose data pointer is its `cl_mem` (DLPack's convention), in place both ways. The runtime's
//! `dlpack.rs` holds the host side and the checks; the rules here:
//! 1. **Export** ([`export_dlpack`]) hands out the buffer behind a run's output (or a wrapped input) with its byte
//!    offset and strides, after the work that writes it is done; the managed tensor holds the tensor, so the
//!    memory stays alive until the consumer's deleter runs.
//! 2. **Import** ([`import_dlpack`]) takes an `OPENCL` tensor of the target's device and context in place
//!    ([`ClBuffer::from_raw`]: retained, checked); the managed tensor is kept with the buffer and its deleter runs
//!    once, when the last stowage handle is dropped, or at once when the import is refused.
//! 3. A host (`CPU`) DLPack tensor goes through `Tensor::from_dlpack` instead; any other device is an error
//!    naming the tensor.

use stowage_runtime::dlpark::ffi::{DLDevice, DLDeviceType};
use stowage_runtime::dlpark::{Managed, ManagedTensorBase};
use stowage_runtime::{DlpackTensor, Tensor};

use super::ClBuffer;
use crate::device::Target;
use crate::error::{ClError, Result};

fn refused(name: &str, message: impl Into<String>) -> ClError {
    ClError::External { what: format!("DLPack tensor {name}"), message: message.into() }
}

/// `tensor`, held in OpenCL memory, as a managed DLPack tensor on its device (rule 1).
pub fn export_dlpack(tensor: &Tensor<'static>) -> Result<DlpackTensor> {
    let name = tensor.name_or_unnamed().to_string();
    let buffer = ClBuffer::of(tensor).ok_or_else(|| {
        refused(
            &name,
            format!("it is in {} memory, not OpenCL's: export it with Tensor::to_dlpack", tensor.space().name()),
        )
    })?;
    buffer.wait_done().map_err(|e| refused(&name, e.to_string()))?;
    let device = DLDevice { device_type: DLDeviceType::OPENCL, device_id: buffer.device_index() as i32 };
    let offset = buffer.raw_offset() + tensor.layout().offset();
    // SAFETY: the data pointer is the buffer's memory object, which the export's handle to the tensor (and so to
    // the buffer) keeps retained until the deleter drops it; offset and strides describe the tensor there.
    unsafe { stowage_runtime::export_dlpack(tensor, buffer.raw_mem().cast(), device, offset) }.map_err(|e| match e {
        stowage_runtime::RuntimeError::Dlpack { reason, .. } => refused(&name, reason),
        other => refused(&name, other.to_string()),
    })
}

/// A managed DLPack tensor on `target`'s OpenCL device as the input tensor `name`, in place (rule 2); at most
/// `limit` bytes.
pub fn import_dlpack<M: ManagedTensorBase + 'static>(
    target: &Target,
    managed: Managed<M>,
    name: &str,
    limit: usize,
) -> Result<Tensor<'static>>
where
    Managed<M>: Send,
{
    let c = stowage_runtime::check_dlpack(&managed, name, DLDeviceType::OPENCL, limit)
        .map_err(|e| ClError::External { what: format!("DLPack tensor {name}"), message: e.to_string() })?;
    if c.device.device_id != target.info().index as i32 {
        return Err(refused(
            name,
            format!("it is on OpenCL device {}; the target is {}", c.device.device_id, target.space()),
        ));
    }
    // SAFETY: a valid DLPack tensor on an OpenCL device has a memory object as its data pointer, valid until its
    // deleter runs; `from_raw` retains it and checks its context and size before anything else.
    let buffer = unsafe { ClBuffer::from_raw(target, name, c.data.cast(), c.dt, &c.shape, &c.layout, None) }?;
    *buffer.raw.0.keep.lock().unwrap_or_else(|p| p.into_inner()) = Some(Box::new(managed));
    buffer.input(name, &c.shape, &c.layout)
}

impl ClBuffer {
    /// Waits for the work that writes this buffer.
    fn wait_done(&self) -> stowage_runtime::Result<()> {
        super::raw::wait(&self.raw)
    }

    /// The index of its device (`opencl:N`).
    fn device_index(&self) -> usize {
        self.raw.0.target.info().index
    }
}
