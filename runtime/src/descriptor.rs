//! Storage descriptors: what a backend's memory is, as plain data the compiler plans with.
//!
//! `#[derive(TensorStorage)]` writes one of these as `const DESCRIPTOR` from the attributes
//! on the backend's buffer type (see `docs/descriptor.md`).

use crate::MemoryKind;

/// An element placement a storage can hold.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum LayoutSupport {
    /// Packed, last axis fastest.
    RowMajor,
    /// Packed, first axis fastest.
    ColumnMajor,
    /// Row-major with rows padded to [`StorageDescriptor::row_pitch_alignment`].
    PaddedRows,
}

/// Whether and how the host may map a storage.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum MapSupport {
    /// Not mappable: bytes reach the host only by download.
    No,
    /// Mapping is a pointer into the memory itself (unified memory).
    Pointer,
    /// Mapping copies through a host staging buffer (a discrete device).
    Copy,
}

/// Reading or writing, for a backend's map function.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum MapMode {
    /// The host reads.
    Read,
    /// The host writes; the device sees the writes at unmap.
    Write,
}

/// A backend storage's memory, as the planner sees it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct StorageDescriptor {
    /// The memory space's name (`host`, `opencl`, `test`).
    pub name: &'static str,
    /// How the host reaches it.
    pub kind: MemoryKind,
    /// Base alignment of every buffer, in bytes.
    pub alignment: usize,
    /// What row pitches are rounded up to, in bytes (1: rows are never padded).
    pub row_pitch_alignment: usize,
    /// The element placements it holds.
    pub layouts: &'static [LayoutSupport],
    /// Whether and how the host may map it.
    pub map: MapSupport,
    /// Host memory with this alignment is imported in place, without a copy (`None`: never).
    pub import_alignment: Option<usize>,
    /// Host↔device transfer bandwidth, GB/s, for the cost model (infinite for host memory).
    pub bandwidth_gbps: f64,
    /// Latency of one transfer, µs, for the cost model.
    pub latency_us: f64,
    /// True when a byte range can be viewed on the device without a copy.
    pub can_slice: bool,
    /// True when transfers pass through a pinned host staging buffer the backend keeps (`staging = pinned`), so
    /// plans say so in a copy's reason; false when they go straight to the device, or for host memory.
    pub staged: bool,
    /// True when an upload writes a host tensor of any layout straight into device memory (or the staging it goes
    /// through), packed row-major as it goes: one copy (`upload_with = …`). False when a strided tensor is packed
    /// on the host first: a relayout, then the upload, both planned and recorded.
    pub packs_on_upload: bool,
}

impl StorageDescriptor {
    /// Plain host memory, 64-byte aligned.
    pub const HOST: StorageDescriptor = StorageDescriptor {
        name: "host",
        kind: MemoryKind::Host,
        alignment: crate::HOST_ALIGNMENT,
        row_pitch_alignment: 1,
        layouts: &[LayoutSupport::RowMajor, LayoutSupport::ColumnMajor, LayoutSupport::PaddedRows],
        map: MapSupport::Pointer,
        import_alignment: Some(1),
        bandwidth_gbps: f64::INFINITY,
        latency_us: 0.0,
        can_slice: true,
        staged: false,
        packs_on_upload: false,
    };

    /// True when the storage holds `layout`.
    pub fn holds(&self, layout: LayoutSupport) -> bool {
        self.layouts.contains(&layout)
    }

    /// Estimated time to move `bytes` across, in µs.
    pub fn transfer_us(&self, bytes: usize) -> f64 {
        self.latency_us + bytes as f64 / (self.bandwidth_gbps * 1e3)
    }
}
