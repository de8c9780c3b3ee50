//! `#[derive(TensorStorage)]`: a backend's storage generated from its memory descriptor.
//!
//! A backend author writes the buffer type and describes its memory in a `#[storage(…)]`
//! attribute; the derive writes the rest: the `DeviceBuffer` impl (device and unified
//! memory) or the `TensorStorage` impl (host memory), the lazy-host glue (`into_tensor`,
//! `from_tensor`), map guards around the backend's map/unmap, `Debug`/`Display` that never
//! read device bytes, and `const DESCRIPTOR` for the planner. Every key is documented in
//! `docs/descriptor.md`.
//!
//! The macro runs in three visible steps: [`ast`] parses the input into a borrowed form
//! that keeps every span, [`check`] validates it (all errors at once, each at its own
//! attribute), and [`expand`] writes the code. On error it still emits a stub beside the
//! errors, so the user sees only the real ones.

mod ast;
mod attr;
mod check;
mod ctxt;
mod expand;
#[cfg(test)]
mod tests;

use proc_macro::TokenStream;
use syn::{parse_macro_input, DeriveInput};

/// Derive a backend storage from its `#[storage(…)]` descriptor. See the crate docs.
#[proc_macro_derive(TensorStorage, attributes(storage))]
pub fn derive_tensor_storage(input: TokenStream) -> TokenStream {
    let input = parse_macro_input!(input as DeriveInput);
    expand::derive(&input).into()
}
