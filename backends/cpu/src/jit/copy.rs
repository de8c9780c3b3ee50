//! Copies (relayouts, Transposes) in Rust loops instead of Cranelift code.
//!
//! Cranelift's copy moved one element per iteration with a multiply per operand for its address: about 1.7 ns an
//! element, so ppocr_det's interleave of its ConvTranspose phases (`[24, 2, 2, 80, 80]` → `[24, 80, 2, 80, 2]`,
//! 614 400 elements) took 1.0 ms of a 19 ms run in either loop order. Here the rows of the innermost axis are
//! loops compiled by rustc with pointer increments, runs contiguous on both sides are `memcpy`s, and the axes
//! outside step by additions. The copy is the same (each output element written once, from the same input
//! element), so the tests that run every relayout through the JIT (`relayouts_of_every_element_size`) cover it.

use stowage_kir::{Body, Loops};

/// A copy kernel run as Rust loops (see the module doc).
#[derive(Debug)]
pub struct Copy {
    dims: Vec<usize>,
    /// Byte strides per axis of the input, then of the output.
    src: Vec<usize>,
    dst: Vec<usize>,
    size: usize,
}

impl Copy {
    /// The loop form of `spec` (banded: at least two axes) when it is a copy of 1-, 2-, 4- or 8-byte elements.
    pub fn new(spec: &Loops) -> Option<Copy> {
        let size = spec.output.elem.size();
        let ([input], Body::Copy) = (spec.inputs.as_slice(), &spec.body) else { return None };
        (matches!(size, 1 | 2 | 4 | 8) && spec.dims.len() >= 2).then(|| Copy {
            dims: spec.dims.clone(),
            src: input.strides.clone(),
            dst: spec.output.strides.clone(),
            size,
        })
    }

    /// Rows `begin..end` of the outermost axis.
    ///
    /// # Safety
    /// `inputs` points at the input's address; it and `out` span at least what the strides reach over rows
    /// `begin..end` (`Loops::extent`); rows of other calls running at the same time write other bytes, and the
    /// output does not overlap the input.
    pub unsafe fn run(&self, inputs: *const *const u8, out: *mut u8, begin: usize, end: usize) {
        // SAFETY: the caller gives the input's address first; the rest of the contract is `rows`'.
        unsafe {
            let src = *inputs;
            match self.size {
                1 => self.rows::<u8>(src, out, begin, end),
                2 => self.rows::<u16>(src, out, begin, end),
                4 => self.rows::<u32>(src, out, begin, end),
                _ => self.rows::<u64>(src, out, begin, end),
            }
        }
    }

    /// Every innermost row of outer rows `begin..end`, elements of type `T` (the element size).
    ///
    /// # Safety
    /// As [`Copy::run`]'s.
    unsafe fn rows<T: std::marker::Copy>(&self, src: *const u8, out: *mut u8, begin: usize, end: usize) {
        let rank = self.dims.len();
        let (len, s_step, d_step) = (self.dims[rank - 1], self.src[rank - 1], self.dst[rank - 1]);
        let contiguous = s_step == self.size && d_step == self.size;
        // The middle axes (1 .. rank − 1) counted through for each outer row.
        let mut idx = vec![0usize; rank - 1];
        for row in begin..end {
            idx.iter_mut().for_each(|i| *i = 0);
            let (mut s, mut d) = (src.wrapping_add(row * self.src[0]), out.wrapping_add(row * self.dst[0]));
            loop {
                if contiguous {
                    // SAFETY: the row's `len` elements lie within both operands (the caller's contract), which do
                    // not overlap.
                    unsafe { std::ptr::copy_nonoverlapping(s, d, len * self.size) };
                } else {
                    let (mut p, mut q) = (s, d);
                    for _ in 0..len {
                        // SAFETY: element j of the row lies within both operands (the caller's contract).
                        unsafe { q.cast::<T>().write_unaligned(p.cast::<T>().read_unaligned()) };
                        p = p.wrapping_add(s_step);
                        q = q.wrapping_add(d_step);
                    }
                }
                // The next row of the middle axes; done with this outer row when they wrap.
                let mut a = rank - 2;
                loop {
                    if a == 0 {
                        break;
                    }
                    idx[a] += 1;
                    s = s.wrapping_add(self.src[a]);
                    d = d.wrapping_add(self.dst[a]);
                    if idx[a] < self.dims[a] {
                        break;
                    }
                    s = s.wrapping_sub(self.src[a] * self.dims[a]);
                    d = d.wrapping_sub(self.dst[a] * self.dims[a]);
                    idx[a] = 0;
                    a -= 1;
                }
                if a == 0 {
                    break;
                }
            }
        }
    }
}
