//! stowage's runtime: tensors whose storage knows where its bytes are.
//!
//! A [`Tensor`] is a datum type, a shape, a [`Layout`] (strides that may carry row padding,
//! row- or column-major, a base alignment) and a shared [`TensorStorage`]. Storages are an
//! open trait: host bytes ([`PlainStorage`]), caller memory used in place
//! ([`ExternalStorage`]), and bytes still on a device ([`LazyHost`] over a backend's
//! [`DeviceBuffer`]). Every byte the runtime moves between memory spaces or layouts is an
//! entry in a [`Ledger`], so that a plan's predicted copies can be checked against what ran.
//!
//! ```
//! use stowage_runtime::{Tensor, ExternalStorage, Layout, DatumType, Ledger, LedgerTag, LayoutNeed, Accepts};
//!
//! // A caller's 2x3 frame, borrowed without a copy.
//! let frame: Vec<f32> = vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0];
//! let bytes: &[u8] = bytemuck::cast_slice(&frame);
//! let layout = Layout::row_major(DatumType::F32, &[2, 3])?.with_alignment(4);
//! let input = Tensor::external(DatumType::F32, &[2, 3], layout, ExternalStorage::borrowed(bytes))?
//!     .with_name("frame");
//!
//! // A consumer that reads 4-byte aligned row-major f32 takes it as it is: no copy.
//! let ledger = Ledger::recording();
//! let need = LayoutNeed { alignment: 4, accepts: Accepts::RowMajor };
//! let ready = input.conform(&need, &LedgerTag::new(&ledger, "frame"))?;
//! assert!(ready.shares_storage_with(&input));
//! assert!(ledger.entries().is_empty());
//! assert_eq!(ready.permute(&[1, 0])?.to_vec::<f32>()?, [1.0, 4.0, 2.0, 5.0, 3.0, 6.0]);
//! # Ok::<(), stowage_runtime::RuntimeError>(())
//! ```

mod datum;
#[doc(hidden)]
pub mod derive_support;
mod descriptor;
mod device;
mod dlpack;
mod error;
mod layout;
pub mod lazy;
mod ledger;
pub mod map;
#[cfg(feature = "rules")]
pub mod rules;
pub mod small_types;
mod space;
mod storage;
pub mod strings;
mod tensor;

pub use datum::{Datum, DatumType};
pub use descriptor::{LayoutSupport, MapMode, MapSupport, StorageDescriptor};
pub use device::{device_input, device_input_as_held, DeviceBuffer, ReadMapping, Transferred, WriteMapping};
pub use dlpack::{
    check as check_dlpack, datum_type, dlpack_type, export as export_dlpack, Checked as CheckedDlpack, DlpackTensor,
};
pub use error::{Result, RuntimeError};
pub use layout::{Layout, LayoutKind, HOST_ALIGNMENT};
pub use lazy::LazyHost;
pub use ledger::{Ledger, LedgerTag, Move, MoveKind};
pub use map::{MapRead, MapWrite};
pub use space::{MemoryKind, MemorySpace};
pub use storage::{ExternalStorage, Owner, PlainStorage, Release, SharedBytes, TensorStorage};
pub use tensor::{Accepts, LayoutNeed, Tensor};

/// `#[derive(TensorStorage)]`: a backend's storage from the descriptor on its buffer type.
pub use stowage_macros::TensorStorage;

/// Re-exported so that backends and tests use the same version.
pub use bytemuck;
/// The DLPack ABI crate, for backends that export and import device tensors.
pub use dlpark;
/// Re-exported so that backends and tests use the same version.
pub use half;
