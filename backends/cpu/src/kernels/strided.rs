//! Copies between byte lattices: element `i` of a `shape` is read at `src_base + Σ i[a]·src_steps[a]` and written at
//! `dst_base + Σ i[a]·dst_steps[a]` (byte steps; a source step may be zero, a broadcast, or negative, a reversed
//! slice). Transpose, Slice, Split, Expand, Tile and constant Pad are each one such copy, written straight into the
//! output's storage.
//!
//! Axes of one element are dropped and neighbouring axes merged where both lattices walk them as one, so that the
//! innermost loop is as long as the data allows; it is then a `memcpy` where both sides are contiguous, a fill
//! where the source is broadcast, and a loop of fixed-size words otherwise.

/// One side of a copy: its bytes' base offset and its step along each axis.
#[derive(Clone, Debug)]
pub struct Side {
    /// Byte offset of element 0.
    pub base: isize,
    /// Byte step along each axis of the copy's shape.
    pub steps: Vec<isize>,
}

impl Side {
    /// A packed row-major `shape` of `size`-byte elements.
    pub fn packed(shape: &[usize], size: usize) -> Side {
        let mut steps = vec![0isize; shape.len()];
        let mut acc = size as isize;
        for a in (0..shape.len()).rev() {
            steps[a] = acc;
            acc *= shape[a] as isize;
        }
        Side { base: 0, steps }
    }
}

/// Copies every element of `shape` (`size` bytes each) from `src` to `dst` as `from` and `to` place them. The
/// offsets must lie within the slices (checked as the bytes are taken: an offset outside panics, never reads out
/// of bounds).
pub fn copy(dst: &mut [u8], to: &Side, src: &[u8], from: &Side, shape: &[usize], size: usize) {
    if shape.contains(&0) || size == 0 {
        return;
    }
    // (extent, destination step, source step) per kept axis, outermost first.
    let mut axes: Vec<(usize, isize, isize)> = Vec::with_capacity(shape.len());
    for (a, &n) in shape.iter().enumerate() {
        if n == 1 {
            continue;
        }
        let (d, s) = (to.steps[a], from.steps[a]);
        if let Some(last) = axes.last_mut() {
            if last.1 == d * n as isize && last.2 == s * n as isize {
                *last = (last.0 * n, d, s);
                continue;
            }
        }
        axes.push((n, d, s));
    }
    let (len, dstep, sstep) = axes.pop().unwrap_or((1, size as isize, 0));
    let (mut d, mut s) = (to.base, from.base);
    let mut idx = vec![0usize; axes.len()];
    loop {
        row(dst, d, dstep, src, s, sstep, len, size);
        let mut a = axes.len();
        loop {
            if a == 0 {
                return;
            }
            a -= 1;
            let (n, da, sa) = axes[a];
            idx[a] += 1;
            d += da;
            s += sa;
            if idx[a] < n {
                break;
            }
            d -= da * n as isize;
            s -= sa * n as isize;
            idx[a] = 0;
        }
    }
}

/// One row of `len` elements.
#[allow(clippy::too_many_arguments)]
fn row(dst: &mut [u8], d: isize, dstep: isize, src: &[u8], s: isize, sstep: isize, len: usize, size: usize) {
    let at = |o: isize| usize::try_from(o).expect("a lattice offset within its bytes");
    let w = size as isize;
    if dstep == w && sstep == w {
        let (d, s) = (at(d), at(s));
        dst[d..d + len * size].copy_from_slice(&src[s..s + len * size]);
        return;
    }
    match size {
        1 => words::<1>(dst, d, dstep, src, s, sstep, len),
        2 => words::<2>(dst, d, dstep, src, s, sstep, len),
        4 => words::<4>(dst, d, dstep, src, s, sstep, len),
        8 => words::<8>(dst, d, dstep, src, s, sstep, len),
        _ => {
            for j in 0..len as isize {
                let (d, s) = (at(d + j * dstep), at(s + j * sstep));
                dst[d..d + size].copy_from_slice(&src[s..s + size]);
            }
        }
    }
}

/// A row of `S`-byte elements, each moved as one word.
fn words<const S: usize>(dst: &mut [u8], d: isize, dstep: isize, src: &[u8], s: isize, sstep: isize, len: usize) {
    let at = |o: isize| usize::try_from(o).expect("a lattice offset within its bytes");
    if dstep == S as isize {
        let d = at(d);
        let out = &mut dst[d..d + len * S];
        if sstep == 0 {
            let s = at(s);
            let word: [u8; S] = src[s..s + S].try_into().expect("S bytes");
            for e in out.chunks_exact_mut(S) {
                e.copy_from_slice(&word);
            }
            return;
        }
        for (j, e) in out.chunks_exact_mut(S).enumerate() {
            let s = at(s + j as isize * sstep);
            e.copy_from_slice(&src[s..s + S]);
        }
        return;
    }
    for j in 0..len as isize {
        let (d, s) = (at(d + j * dstep), at(s + j * sstep));
        dst[d..d + S].copy_from_slice(&src[s..s + S]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The copy element by element, as the lattices define it.
    fn naive(dst: &mut [u8], to: &Side, src: &[u8], from: &Side, shape: &[usize], size: usize) {
        let count: usize = shape.iter().product();
        let mut idx = vec![0usize; shape.len()];
        for _ in 0..count {
            let d = to.base + idx.iter().zip(&to.steps).map(|(&i, &s)| i as isize * s).sum::<isize>();
            let s = from.base + idx.iter().zip(&from.steps).map(|(&i, &s)| i as isize * s).sum::<isize>();
            dst[d as usize..d as usize + size].copy_from_slice(&src[s as usize..s as usize + size]);
            for a in (0..shape.len()).rev() {
                idx[a] += 1;
                if idx[a] < shape[a] {
                    break;
                }
                idx[a] = 0;
            }
        }
    }

    #[test]
    fn every_kind_of_row_matches_the_element_by_element_copy() {
        let src: Vec<u8> = (0..=255).cycle().take(4096).collect();
        for size in [1usize, 2, 3, 4, 8] {
            let e = size as isize;
            let cases: Vec<(Vec<usize>, Side)> = vec![
                // Contiguous: one memcpy.
                (vec![2, 3, 4], Side::packed(&[2, 3, 4], size)),
                // A transpose.
                (vec![4, 3, 2], Side { base: 0, steps: vec![e, 4 * e, 12 * e] }),
                // A reversed, strided slice with an offset.
                (vec![3, 5], Side { base: 40 * e, steps: vec![-10 * e, 2 * e] }),
                // A broadcast row and a broadcast column.
                (vec![3, 4], Side { base: 0, steps: vec![0, e] }),
                (vec![3, 4], Side { base: 2 * e, steps: vec![e, 0] }),
                // Axes of one, and a scalar.
                (vec![1, 6, 1], Side { base: 0, steps: vec![99, e, 99] }),
                (vec![], Side { base: 5 * e, steps: vec![] }),
            ];
            for (shape, from) in cases {
                let count: usize = shape.iter().product();
                let to = Side::packed(&shape, size);
                let (mut got, mut want) = (vec![0u8; count * size], vec![0u8; count * size]);
                copy(&mut got, &to, &src, &from, &shape, size);
                naive(&mut want, &to, &src, &from, &shape, size);
                assert_eq!(got, want, "{shape:?} {from:?} of {size}-byte elements");
            }
        }
    }

    #[test]
    fn a_strided_destination_is_written_only_where_it_points() {
        // A 2×3 block into the middle of a 4×5 (constant Pad's interior).
        let src: Vec<u8> = (1..=6).collect();
        let mut dst = vec![0u8; 20];
        let to = Side { base: 6, steps: vec![5, 1] };
        copy(&mut dst, &to, &src, &Side::packed(&[2, 3], 1), &[2, 3], 1);
        assert_eq!(dst, [0, 0, 0, 0, 0, 0, 1, 2, 3, 0, 0, 4, 5, 6, 0, 0, 0, 0, 0, 0]);
        // Nothing to copy: untouched.
        copy(&mut dst, &to, &src, &Side::packed(&[0, 3], 1), &[0, 3], 1);
        assert_eq!(dst[6], 1);
    }
}
