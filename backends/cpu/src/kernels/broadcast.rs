//! Multidirectional (numpy) broadcasting over packed row-major inputs.

pub use stowage_kir::strides_for;

/// The rows of `out` with every input's offsets: axes of one element are dropped and neighbouring axes merged
/// where every input walks them as one (so that rows are as long as the broadcast allows), then `row(offsets,
/// steps, len)` is called for each row in row-major order, where input `k`'s elements of the row are at
/// `offsets[k] + j * steps[k]` for `j < len` (`steps[k]` is 0 where input `k` is broadcast along the row).
pub fn for_each_row(out: &[usize], shapes: &[&[usize]], mut row: impl FnMut(&[usize], &[usize], usize)) {
    if out.contains(&0) {
        return;
    }
    let strides: Vec<Vec<usize>> = shapes.iter().map(|s| strides_for(s, out)).collect();
    // (extent, stride of each input) per kept axis, outermost first.
    let mut axes: Vec<(usize, Vec<usize>)> = Vec::with_capacity(out.len());
    for a in 0..out.len() {
        if out[a] == 1 {
            continue;
        }
        let st: Vec<usize> = strides.iter().map(|s| s[a]).collect();
        if let Some((n, prev)) = axes.last_mut() {
            if prev.iter().zip(&st).all(|(&p, &q)| p == q * out[a]) {
                *n *= out[a];
                *prev = st;
                continue;
            }
        }
        axes.push((out[a], st));
    }
    let (len, steps) = axes.pop().unwrap_or((1, vec![0; shapes.len()]));
    let mut offsets = vec![0usize; shapes.len()];
    let mut idx = vec![0usize; axes.len()];
    loop {
        row(&offsets, &steps, len);
        let mut a = axes.len();
        loop {
            if a == 0 {
                return;
            }
            a -= 1;
            idx[a] += 1;
            for (o, st) in offsets.iter_mut().zip(&axes[a].1) {
                *o += st;
            }
            if idx[a] < axes[a].0 {
                break;
            }
            for (o, st) in offsets.iter_mut().zip(&axes[a].1) {
                *o -= st * axes[a].0;
            }
            idx[a] = 0;
        }
    }
}

/// Calls `f(i, offsets)` for every output index `i` in row-major order, where `offsets[k]` is the element offset
/// into input `k` (of shape `shapes[k]`) broadcast to `out`.
pub fn for_each_offset(out: &[usize], shapes: &[&[usize]], mut f: impl FnMut(usize, &[usize])) {
    let mut i = 0;
    let mut at = vec![0usize; shapes.len()];
    for_each_row(out, shapes, |offsets, steps, len| {
        for j in 0..len {
            for ((a, &o), &s) in at.iter_mut().zip(offsets).zip(steps) {
                *a = o + j * s;
            }
            f(i, &at);
            i += 1;
        }
    });
}

/// `f(a, b)` over `a` and `b` broadcast to `out`, a row at a time: a row where both inputs advance, or one is
/// broadcast along it, is one tight loop, written into its place in the output (made once, at its full length:
/// growing it element by element kept the loops from vectorising, magika's one-hot `Equal` of 2048 × 257 took
/// 0.31 ms).
pub fn zip<A: Copy, B: Copy, O: Copy + Default>(
    a: &[A],
    ash: &[usize],
    b: &[B],
    bsh: &[usize],
    out: &[usize],
    f: impl Fn(A, B) -> O,
) -> Vec<O> {
    let count: usize = out.iter().product();
    let mut r = vec![O::default(); count];
    zip_into(a, ash, b, bsh, out, &mut r, f);
    r
}

/// [`zip`] into `r`, the output's packed elements (the step's own buffer: no vector made and copied).
///
/// # Panics
/// When `r` is shorter than `out`'s elements.
pub fn zip_into<A: Copy, B: Copy, O: Copy>(
    a: &[A],
    ash: &[usize],
    b: &[B],
    bsh: &[usize],
    out: &[usize],
    r: &mut [O],
    f: impl Fn(A, B) -> O,
) {
    let mut at = 0;
    for_each_row(out, &[ash, bsh], |o, st, n| {
        let dst = &mut r[at..at + n];
        at += n;
        match (st[0], st[1]) {
            (1, 1) => {
                for ((d, &x), &y) in dst.iter_mut().zip(&a[o[0]..o[0] + n]).zip(&b[o[1]..o[1] + n]) {
                    *d = f(x, y);
                }
            }
            (1, 0) => {
                let y = b[o[1]];
                for (d, &x) in dst.iter_mut().zip(&a[o[0]..o[0] + n]) {
                    *d = f(x, y);
                }
            }
            (0, 1) => {
                let x = a[o[0]];
                for (d, &y) in dst.iter_mut().zip(&b[o[1]..o[1] + n]) {
                    *d = f(x, y);
                }
            }
            (sa, sb) => {
                for (j, d) in dst.iter_mut().enumerate() {
                    *d = f(a[o[0] + j * sa], b[o[1] + j * sb]);
                }
            }
        }
    });
}

/// `src` (of `shape`) broadcast to `out`, materialised.
pub fn expand<T: Copy>(src: &[T], shape: &[usize], out: &[usize]) -> Vec<T> {
    if shape == out {
        return src.to_vec();
    }
    let count: usize = out.iter().product();
    let mut r = Vec::with_capacity(count);
    for_each_row(out, &[shape], |o, st, n| match st[0] {
        0 => r.extend(std::iter::repeat_n(src[o[0]], n)),
        1 => r.extend_from_slice(&src[o[0]..o[0] + n]),
        s => r.extend((0..n).map(|j| src[o[0] + j * s])),
    });
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn broadcasting_a_row_and_a_column() {
        let r = zip(&[1, 2, 3], &[1, 3], &[10, 20], &[2, 1], &[2, 3], |a, b| a + b);
        assert_eq!(r, [11, 12, 13, 21, 22, 23]);
        assert_eq!(expand(&[1, 2], &[2], &[2, 2]), [1, 2, 1, 2]);
        assert_eq!(expand(&[7], &[], &[3]), [7, 7, 7]);
    }

    #[test]
    fn rows_merge_the_axes_every_input_walks_as_one() {
        let mut rows = Vec::new();
        for_each_row(&[2, 3, 4], &[&[2, 3, 4], &[4]], |o, st, n| rows.push((o.to_vec(), st.to_vec(), n)));
        // The first two axes merge (both inputs walk them as one); the last is a row where both advance.
        assert_eq!(rows.len(), 6);
        assert_eq!(rows[1], (vec![4, 0], vec![1, 1], 4));
        rows.clear();
        // A column broadcast along rows: the row steps only the second input.
        for_each_row(&[3, 5], &[&[3, 1], &[1, 5]], |o, st, n| rows.push((o.to_vec(), st.to_vec(), n)));
        assert_eq!(rows, [(vec![0, 0], vec![0, 1], 5), (vec![1, 0], vec![0, 1], 5), (vec![2, 0], vec![0, 1], 5)]);
        // Axes of one element are dropped, a scalar output is one row of one, an empty one no row.
        rows.clear();
        for_each_row(&[1, 4, 1], &[&[4, 1]], |o, st, n| rows.push((o.to_vec(), st.to_vec(), n)));
        assert_eq!(rows, [(vec![0], vec![1], 4)]);
        rows.clear();
        for_each_row(&[], &[&[]], |o, st, n| rows.push((o.to_vec(), st.to_vec(), n)));
        assert_eq!(rows, [(vec![0], vec![0], 1)]);
        assert_eq!(zip(&[1u8], &[], &[2u8], &[], &[0, 3], |a, b| a + b), Vec::<u8>::new());
    }

    #[test]
    fn zip_matches_elementwise_offsets_on_mixed_broadcasts() {
        let (ash, bsh, out) = ([2usize, 1, 3], [4usize, 1], [2usize, 4, 3]);
        let a: Vec<i32> = (0..6).collect();
        let b: Vec<i32> = (0..4).map(|v| 10 * v).collect();
        let mut want = Vec::new();
        for i in 0..2 {
            for bj in &b {
                for k in 0..3 {
                    want.push(a[i * 3 + k] + bj);
                }
            }
        }
        assert_eq!(zip(&a, &ash, &b, &bsh, &out, |x, y| x + y), want);
        let mut seen = Vec::new();
        for_each_offset(&out, &[&ash, &bsh], |i, o| seen.push((i, a[o[0]] + b[o[1]])));
        assert_eq!(seen.iter().map(|p| p.1).collect::<Vec<_>>(), want);
        assert!(seen.iter().enumerate().all(|(k, p)| p.0 == k));
    }
}
