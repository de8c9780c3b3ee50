//! Constant f32 weights as the packers read them: a slice, or the model file's little-endian bytes where they are.
//!
//! The import leaves a large weight in the buffer the model was decoded from (`stowage_runtime::SharedBytes`, at
//! whatever alignment the file put it): a packer that reads it through [`Floats`] makes the packed copy straight
//! from the file's pages, where reading it as `&[f32]` would first copy it into aligned memory. Fresh memory is
//! what a compile pays for most on this machine (a page fault per 4 KiB: ddddocr's 54 MB of weights cost ~27 ms
//! to copy, 2026-12-07).

use stowage_runtime::Tensor;

/// f32 elements read one at a time: what the packers take.
pub trait Floats: Copy {
    /// Elements.
    fn len(self) -> usize;
    /// True when there are none.
    fn is_empty(self) -> bool {
        self.len() == 0
    }
    /// Element `i`.
    ///
    /// # Panics
    /// If `i` is out of range.
    fn at(self, i: usize) -> f32;
    /// Elements `start..start + len`.
    ///
    /// # Panics
    /// If they are out of range.
    fn part(self, start: usize, len: usize) -> Self;
}

impl Floats for &[f32] {
    fn len(self) -> usize {
        <[f32]>::len(self)
    }
    #[inline(always)]
    fn at(self, i: usize) -> f32 {
        self[i]
    }
    fn part(self, start: usize, len: usize) -> Self {
        &self[start..][..len]
    }
}

/// A constant's f32 weights: aligned in a slice, or in place in little-endian bytes at any alignment.
#[derive(Clone, Copy, Debug)]
pub enum Weights<'a> {
    /// Aligned floats.
    Slice(&'a [f32]),
    /// Four little-endian bytes an element, at any alignment.
    Bytes(&'a [u8]),
}

impl<'a> Weights<'a> {
    /// `t`'s f32 elements: in place where the model file still holds them ([`Tensor::bytes_in_place`]), else
    /// through [`Tensor::as_slice`]; `None` for a tensor of another type or layout.
    pub fn of(t: &'a Tensor<'static>) -> Option<Weights<'a>> {
        if t.dt() != stowage_runtime::DatumType::F32 {
            return None;
        }
        match t.bytes_in_place() {
            Some(bytes) => Some(Weights::Bytes(bytes)),
            None => t.as_slice::<f32>().ok().map(Weights::Slice),
        }
    }

    /// The elements as an aligned slice, when they are one.
    pub fn slice(self) -> Option<&'a [f32]> {
        match self {
            Weights::Slice(s) => Some(s),
            Weights::Bytes(_) => None,
        }
    }
}

impl Floats for Weights<'_> {
    fn len(self) -> usize {
        match self {
            Weights::Slice(s) => s.len(),
            Weights::Bytes(b) => b.len() / 4,
        }
    }
    #[inline(always)]
    fn at(self, i: usize) -> f32 {
        match self {
            Weights::Slice(s) => s[i],
            Weights::Bytes(b) => f32::from_le_bytes(b[4 * i..4 * i + 4].try_into().expect("four bytes")),
        }
    }
    fn part(self, start: usize, len: usize) -> Self {
        match self {
            Weights::Slice(s) => Weights::Slice(&s[start..][..len]),
            Weights::Bytes(b) => Weights::Bytes(&b[4 * start..][..4 * len]),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Bytes at an odd address read as the floats they hold, parts included, and a slice as itself.
    #[test]
    fn bytes_at_any_alignment_read_as_their_floats() {
        let values: Vec<f32> = (0..37).map(|i| i as f32 * 0.5 - 3.0).collect();
        let mut bytes = vec![0u8; 1];
        bytes.extend(values.iter().flat_map(|v| v.to_le_bytes()));
        let w = Weights::Bytes(&bytes[1..]);
        assert_eq!(w.len(), 37);
        assert!((0..37).all(|i| w.at(i) == values[i]));
        let p = w.part(5, 10);
        assert!((0..10).all(|i| p.at(i) == values[5 + i]) && p.len() == 10);
        let s = Weights::Slice(&values);
        assert!((0..37).all(|i| s.at(i) == values[i]) && s.slice().is_some() && w.slice().is_none());
    }
}
