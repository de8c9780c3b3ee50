//! Strings: ONNX's `string` element type ([`DatumType::Str`](crate::DatumType::Str)).
//!
//! A string tensor holds one 4-byte handle per element into this process's string table, so that every kernel that
//! moves bytes (Reshape, Transpose, Gather, Concat, Slice, Where, …) moves strings unchanged, on any backend, and
//! the arenas plan them like any other 4-byte type. The rules:
//! 1. **Interned**: one string, one handle, for the life of the process ([`intern`]); equal strings have equal
//!    handles, so `Equal` of two string tensors is `Equal` of their handles. The table only grows: a program that
//!    feeds unbounded distinct text keeps it all (documented in docs/runtime.md).
//! 2. **Zero is the empty string**: the table's first entry is `""`, so a zeroed buffer reads as empty strings.
//! 3. **UTF-8 only**: strings come in through [`intern_bytes`], which refuses bytes that are not UTF-8 (ONNX asks
//!    for UTF-8; the caller names the tensor or attribute).
//! 4. **Handles stay in the process**: they mean nothing elsewhere, so strings cross into files only as text
//!    ([`resolve`]), never as handles (DLPack refuses them; built code refuses string values).
//!
//! The table is `lasso`'s `ThreadedRodeo`, an interner made for lookups from many threads at once.

use lasso::{Key, Spur, ThreadedRodeo};

use crate::{DatumType, Result, RuntimeError, Tensor};
use once_cell::sync::Lazy;

static TABLE: Lazy<ThreadedRodeo<Spur>> = Lazy::new(|| {
    let table = ThreadedRodeo::new();
    // Rule 2: the first entry, handle 0.
    table.get_or_intern_static("");
    table
});

/// The handle of `s` (rule 1).
pub fn intern(s: &str) -> u32 {
    let key = TABLE.get_or_intern(s);
    // `Spur` keys count from 0 and fit in a u32 by construction.
    key.into_usize() as u32
}

/// The handle of `bytes`, or where they stop being UTF-8 (rule 3).
pub fn intern_bytes(bytes: &[u8]) -> Result<u32, std::str::Utf8Error> {
    Ok(intern(std::str::from_utf8(bytes)?))
}

/// The string of a handle; `None` for a handle the table never gave out (bytes that were never a string).
pub fn resolve(handle: u32) -> Option<&'static str> {
    let table: &'static ThreadedRodeo<Spur> = &TABLE;
    table.try_resolve(&Spur::try_from_usize(handle as usize)?)
}

/// The strings of `handles`; a handle the table never gave out reads as the empty string.
pub fn resolve_all(handles: &[u32]) -> Vec<&'static str> {
    handles.iter().map(|&h| resolve(h).unwrap_or("")).collect()
}

/// The handles of a string tensor, in row-major order.
pub fn handles(t: &Tensor<'_>) -> Result<Vec<u32>> {
    if t.dt() != DatumType::Str {
        return Err(RuntimeError::DatumType {
            tensor: t.name_or_unnamed().to_string(),
            expected: DatumType::Str,
            found: t.dt(),
        });
    }
    let mut bytes = vec![0u8; t.len() * 4];
    t.write_row_major(&mut bytes)?;
    Ok(bytes.chunks_exact(4).map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect())
}

/// A string tensor of `shape` holding `handles`.
pub fn tensor(shape: &[usize], handles: &[u32]) -> Result<Tensor<'static>> {
    let bytes: Vec<u8> = handles.iter().flat_map(|h| h.to_le_bytes()).collect();
    Tensor::from_bytes(DatumType::Str, shape, &bytes)
}

/// A string tensor of `shape` holding `texts`, interned.
pub fn tensor_of<S: AsRef<str>>(shape: &[usize], texts: &[S]) -> Result<Tensor<'static>> {
    tensor(shape, &texts.iter().map(|s| intern(s.as_ref())).collect::<Vec<_>>())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_string_one_handle_and_zero_is_empty() {
        assert_eq!(intern(""), 0);
        assert_eq!(resolve(0), Some(""));
        let a = intern("stowage");
        assert_eq!(intern(&String::from("stowage")), a);
        assert_ne!(intern("Stowage"), a);
        assert_eq!(resolve(a), Some("stowage"));
        assert_eq!(resolve_all(&[a, 0]), ["stowage", ""]);
        let t = tensor_of(&[2], &["stowage", ""]).unwrap();
        assert_eq!(handles(&t).unwrap(), [a, 0]);
        assert!(handles(&Tensor::from_vec(&[1], vec![1u32]).unwrap()).is_err());
    }

    #[test]
    fn bytes_that_are_not_utf8_are_refused() {
        assert!(intern_bytes(b"caf\xc3\xa9").is_ok());
        assert!(intern_bytes(b"caf\xe9").is_err());
        assert_eq!(resolve(u32::MAX), None);
    }
}
