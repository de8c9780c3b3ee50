//! `#[derive(TensorStorage)]`: a backend's storage generated from its memory descriptor.
//!
//! Empty until the derive issue lands; see `docs/` and ARCHITECTURE.md.
