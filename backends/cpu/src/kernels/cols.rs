//! Bands of columns of a row-major matrix, each written by one thread straight into place.
//!
//! A product or convolution split over threads by output columns (output positions) has each thread write the
//! same columns of every row: the bands interleave in memory, so they cannot be `&mut` slices of their own. They
//! used to be computed into a buffer per thread and copied into place after: an allocation and a pass over the
//! output per call, and the copy read each band from the core that computed it. A [`Cols`] is a band that one
//! thread owns; the rules that make it sound:
//!
//! 1. **Made from a `&mut`.** [`Cols::whole`] takes the matrix's slice mutably for the band's lifetime and checks
//!    that every row of the band lies inside it (`(rows − 1)·stride + width ≤ len`) and that rows do not overlap
//!    (`width ≤ stride` when there is more than one row).
//! 2. **Split, never copied.** A `Cols` is neither `Clone` nor `Copy`; [`Cols::split`] consumes it and returns
//!    bands of disjoint column ranges, and [`Cols::narrow`] lends a sub-band for as long as the band is borrowed
//!    mutably. So at any time each element has at most one band that can write it, as with `split_at_mut`.
//! 3. **Every access is checked against the band.** [`Cols::row`] and [`Cols::tile`] assert that the rows and
//!    columns asked for are inside the band; a tile's pointer is valid for those rows and columns at the band's
//!    row stride while the band stays borrowed.
//!
//! Tests: `bands_are_disjoint_and_cover_the_matrix` and `a_tile_outside_its_band_panics` here; the products and
//! convolutions that write through bands are checked against one-thread results in `gemm.rs` and `conv/tests.rs`.

use std::marker::PhantomData;

/// Columns `c0 .. c0 + width` of `rows` rows of a row-major matrix with row stride `rs`, owned by one thread.
pub struct Cols<'a, T> {
    /// Element (0, c0) of the band.
    ptr: *mut T,
    rs: usize,
    rows: usize,
    width: usize,
    /// The band's first column in the matrix it was split from.
    c0: usize,
    _owns: PhantomData<&'a mut [T]>,
}

// SAFETY: a band is the only handle that can reach its elements (rules 1 and 2), so sending it to another thread
// is sending a `&mut` to them; `T: Send` as for `&mut [T]`.
unsafe impl<T: Send> Send for Cols<'_, T> {}

impl<'a, T> Cols<'a, T> {
    /// The first `width` columns of `rows` rows of `dst`, row `i` starting at `i·rs` (rule 1).
    ///
    /// # Panics
    /// When a row would end past `dst`, or rows would overlap.
    pub fn whole(dst: &'a mut [T], rows: usize, rs: usize, width: usize) -> Cols<'a, T> {
        if rows > 0 && width > 0 {
            let end = (rows - 1).checked_mul(rs).and_then(|v| v.checked_add(width));
            assert!(
                end.is_some_and(|e| e <= dst.len()),
                "cols: {rows} rows of {width} at stride {rs} past {}",
                dst.len()
            );
            assert!(rows == 1 || width <= rs, "cols: rows of {width} at stride {rs} overlap");
        }
        Cols { ptr: dst.as_mut_ptr(), rs, rows, width, c0: 0, _owns: PhantomData }
    }

    /// Rows.
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// Columns.
    pub fn width(&self) -> usize {
        self.width
    }

    /// The row stride.
    pub fn stride(&self) -> usize {
        self.rs
    }

    /// This band's first column in the matrix [`Cols::whole`] took.
    pub fn first_column(&self) -> usize {
        self.c0
    }

    /// Splits into bands of at most `per` columns each (the last may be narrower), in order (rule 2).
    pub fn split(self, per: usize) -> Vec<Cols<'a, T>> {
        let per = per.max(1);
        (0..self.width)
            .step_by(per)
            .map(|j| Cols {
                // In bounds: j < width, so the offset is inside row 0 of the band (rule 1).
                ptr: self.ptr.wrapping_add(j),
                rs: self.rs,
                rows: self.rows,
                width: per.min(self.width - j),
                c0: self.c0 + j,
                _owns: PhantomData,
            })
            .collect()
    }

    /// Columns `j .. j + width` of this band, lent while it is borrowed (rule 2).
    ///
    /// # Panics
    /// When the columns are not inside the band.
    pub fn narrow(&mut self, j: usize, width: usize) -> Cols<'_, T> {
        assert!(j.checked_add(width).is_some_and(|e| e <= self.width), "cols: {j}+{width} of {}", self.width);
        Cols { ptr: self.ptr.wrapping_add(j), rs: self.rs, rows: self.rows, width, c0: self.c0 + j, _owns: PhantomData }
    }

    /// Row `i` of the band (rule 3).
    ///
    /// # Panics
    /// When `i` is not a row of the band.
    pub fn row(&mut self, i: usize) -> &mut [T] {
        assert!(i < self.rows, "cols: row {i} of {}", self.rows);
        // SAFETY: row i of the band is `width` elements inside the matrix (rule 1) that only this band can reach
        // (rule 2), and the returned slice borrows the band mutably.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.wrapping_add(i * self.rs), self.width) }
    }

    /// The address of element `(r0, j0)` of a `rows × cols` tile inside the band, valid for those rows at
    /// [`Cols::stride`] while the band is borrowed (rule 3).
    ///
    /// # Panics
    /// When the tile is not inside the band.
    pub fn tile(&mut self, (r0, j0): (usize, usize), rows: usize, cols: usize) -> *mut T {
        assert!(
            r0.checked_add(rows).is_some_and(|e| e <= self.rows)
                && j0.checked_add(cols).is_some_and(|e| e <= self.width),
            "cols: a {rows}x{cols} tile at ({r0}, {j0}) of a {}x{} band",
            self.rows,
            self.width
        );
        self.ptr.wrapping_add(r0 * self.rs + j0)
    }
}

#[cfg(test)]
mod tests {
    use super::Cols;

    #[test]
    fn bands_are_disjoint_and_cover_the_matrix() {
        let (rows, rs, width) = (3, 10, 9);
        let mut m = vec![0u32; (rows - 1) * rs + width];
        let bands = Cols::whole(&mut m, rows, rs, width).split(4);
        assert_eq!(bands.iter().map(|b| (b.first_column(), b.width())).collect::<Vec<_>>(), [(0, 4), (4, 4), (8, 1)]);
        std::thread::scope(|s| {
            for mut band in bands {
                s.spawn(move || {
                    for i in 0..band.rows() {
                        let c0 = band.first_column();
                        for (j, v) in band.row(i).iter_mut().enumerate() {
                            *v += (100 * i + c0 + j) as u32 + 1;
                        }
                    }
                });
            }
        });
        for i in 0..rows {
            for j in 0..rs {
                let at = i * rs + j;
                if at < m.len() {
                    let want = if j < width { (100 * i + j) as u32 + 1 } else { 0 };
                    assert_eq!(m[at], want, "({i}, {j})");
                }
            }
        }
        let mut band = Cols::whole(&mut m, rows, rs, width);
        let mut sub = band.narrow(2, 3);
        assert_eq!((sub.first_column(), sub.row(1)[0]), (2, 103));
    }

    #[test]
    #[should_panic(expected = "tile")]
    fn a_tile_outside_its_band_panics() {
        let mut m = vec![0f32; 40];
        let mut bands = Cols::whole(&mut m, 4, 10, 10).split(5);
        bands[0].tile((0, 3), 4, 3);
    }

    #[test]
    #[should_panic(expected = "past")]
    fn a_band_past_its_slice_panics() {
        let mut m = vec![0f32; 39];
        Cols::whole(&mut m, 4, 10, 10);
    }
}
