//! A term a product adds as it stores its result: `y = act(Σ + bias + r)`, `r` being a residual connection's other
//! input, laid out as the whole output the product writes. ResNet's blocks end `Conv → Add(·, r) → Relu`; as
//! separate steps the addition reads the convolution's output back and writes it again (a quarter of ResNet-50's
//! 3.6 % in `Fused` steps was that). The rules:
//!
//! 1. **Element for element.** A [`Residual`] is made from the whole destination and the term, of equal lengths: the
//!    term of destination element `i` is `r[i]`. Kernels write through sub-slices, bands and tile pointers of the
//!    destination; each finds its terms from the address it writes, `(address − base) / 4`, so no offset has to be
//!    carried through the products' splits into rows, columns and blocks.
//! 2. **Checked.** Every lookup asserts that the whole tile it reads (`rows` rows of `cols` at stride `ld`) lies
//!    inside the term, which by rule 1 is where the destination is.
//! 3. **Added last, in the unfused order.** A kernel adds the term to the finished sum (the bias and any earlier
//!    block of K already in it) and applies the activation after: `(conv + bias) + r`, the value the separate
//!    `Add` computed, so a fused step gives the bits of the steps it replaces. Only the last block of K adds it.
//!
//! Tests: `terms_follow_the_destination_address` and `a_tile_past_the_term_panics` here; rule 3 through every
//! convolution path in `conv/tests.rs` (`residual_in_the_epilogue_gives_the_unfused_bits`).

use std::mem::size_of;

/// A term added to a product's destination element for element (rule 1).
#[derive(Clone, Copy, Debug)]
pub struct Residual<'a> {
    /// The address of the destination's element 0.
    base: usize,
    term: &'a [f32],
}

impl<'a> Residual<'a> {
    /// The term `term` of the destination `dst` (rule 1).
    ///
    /// # Panics
    /// When the lengths differ.
    pub fn new(dst: &[f32], term: &'a [f32]) -> Residual<'a> {
        assert_eq!(dst.len(), term.len(), "residual: a term of {} for a destination of {}", term.len(), dst.len());
        Residual { base: dst.as_ptr() as usize, term }
    }

    /// The term of the destination element at `at`, valid for `rows` rows of `cols` at stride `ld` (rule 2).
    ///
    /// # Panics
    /// When the tile is not inside the term.
    pub fn tile(&self, at: *const f32, rows: usize, cols: usize, ld: usize) -> *const f32 {
        let off = self.offset(at);
        let end = if rows == 0 || cols == 0 { off } else { (rows - 1) * ld + cols + off };
        assert!(end <= self.term.len(), "residual: a {rows}x{cols} tile at {off} past {}", self.term.len());
        self.term.as_ptr().wrapping_add(off)
    }

    /// The terms of the `len` destination elements from `at` (rule 2).
    ///
    /// # Panics
    /// When they are not inside the term.
    pub fn slice(&self, at: *const f32, len: usize) -> &'a [f32] {
        let off = self.offset(at);
        &self.term[off..off + len]
    }

    /// The index of the destination element at `at`.
    fn offset(&self, at: *const f32) -> usize {
        let bytes = (at as usize).checked_sub(self.base).expect("residual: an address before the destination");
        assert!(bytes.is_multiple_of(size_of::<f32>()), "residual: an address between elements");
        bytes / size_of::<f32>()
    }
}

#[cfg(test)]
mod tests {
    use super::Residual;

    #[test]
    fn terms_follow_the_destination_address() {
        let mut dst = vec![0f32; 40];
        let term: Vec<f32> = (0..40).map(|i| i as f32).collect();
        let r = Residual::new(&dst, &term);
        // Row 2 of a 4 × 10 matrix, from column 3: what a band's tile writes.
        let at = dst[23..].as_mut_ptr();
        assert_eq!(r.slice(at, 4), [23.0, 24.0, 25.0, 26.0]);
        // SAFETY: the tile's first element is inside `term` (checked by `tile`).
        assert_eq!(unsafe { *r.tile(at, 2, 7, 10) }, 23.0);
    }

    #[test]
    #[should_panic(expected = "past")]
    fn a_tile_past_the_term_panics() {
        let dst = vec![0f32; 40];
        let term = vec![1f32; 40];
        Residual::new(&dst, &term).tile(dst[23..].as_ptr(), 2, 8, 10);
    }
}
