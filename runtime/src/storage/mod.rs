//! Storages: where a tensor's bytes are, and how they get to the host.
//!
//! [`TensorStorage`] is an open, object-safe trait: a backend adds its own storage without
//! touching this crate. The runtime ships the host ones: [`PlainStorage`] (owned, aligned
//! host bytes), [`ExternalStorage`] (caller-owned memory used without a copy) and [`SharedBytes`]
//! (bytes another allocation owns, a model file's weights, copied only when read aligned); the lazy
//! host storage over any device buffer is in [`crate::lazy`].

mod external;
mod plain;
mod shared;

use std::any::Any;
use std::fmt;
use std::ops::Range;

pub use external::{ExternalStorage, Release};
pub use plain::PlainStorage;
pub use shared::{Owner, SharedBytes};

use crate::{MemorySpace, Result};

/// The bytes behind a tensor, wherever they are.
///
/// Rules every implementation keeps:
/// - [`host_bytes`](Self::host_bytes) is the cheap predicate: it says what is readable on
///   the host *now* and never transfers anything;
/// - [`materialize`](Self::materialize) brings the bytes to the host at most once, however
///   many threads ask at the same time, and records the transfer in the ledger;
/// - [`host_bytes_mut`](Self::host_bytes_mut) detaches from any device buffer first, so
///   that nothing aliases device memory after a host write;
/// - [`slice`](Self::slice) stays on the device when it can.
pub trait TensorStorage: Send + Sync + fmt::Debug + fmt::Display {
    /// Length in bytes.
    fn byte_len(&self) -> usize;

    /// The memory space the authoritative bytes are in now.
    fn space(&self) -> MemorySpace;

    /// The bytes, if they are plain host bytes readable now. Never transfers.
    fn host_bytes(&self) -> Option<&[u8]>;

    /// The bytes on the host, transferring them first if they are elsewhere (once).
    fn materialize(&self) -> Result<&[u8]>;

    /// Writable host bytes. Detaches from any device buffer, copying out of memory that is
    /// shared with anyone else first.
    fn host_bytes_mut(&mut self) -> Result<&mut [u8]>;

    /// Owned, aligned host bytes, transferring or copying as needed.
    fn into_plain(self: Box<Self>) -> Result<PlainStorage>;

    /// An independent storage with the same contents. Shares whatever can be shared until
    /// one side writes.
    fn deep_clone(&self) -> Result<Box<dyn TensorStorage>>;

    /// A storage for the byte range `bytes` of this one, if it can be made without bringing
    /// device bytes to the host (`None`: the caller keeps a view of this storage instead).
    fn slice(&self, bytes: Range<usize>) -> Result<Option<Box<dyn TensorStorage>>>;

    /// This storage as `Any`, for storages that are `'static` (so that a backend can take
    /// its own buffer back out of a tensor). Borrowing storages answer `None`.
    fn as_any(&self) -> Option<&dyn Any>;
}
