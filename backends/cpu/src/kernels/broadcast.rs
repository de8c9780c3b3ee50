//! Multidirectional (numpy) broadcasting over packed row-major inputs.

pub use stowage_kir::strides_for;

/// Calls `f(i, offsets)` for every output index `i` in row-major order, where `offsets[k]` is the element offset
/// into input `k` (of shape `shapes[k]`) broadcast to `out`.
pub fn for_each_offset(out: &[usize], shapes: &[&[usize]], mut f: impl FnMut(usize, &[usize])) {
    let count: usize = out.iter().product();
    if count == 0 {
        return;
    }
    let strides: Vec<Vec<usize>> = shapes.iter().map(|s| strides_for(s, out)).collect();
    let mut offsets = vec![0usize; shapes.len()];
    let mut idx = vec![0usize; out.len()];
    for i in 0..count {
        f(i, &offsets);
        for a in (0..out.len()).rev() {
            idx[a] += 1;
            for (o, st) in offsets.iter_mut().zip(&strides) {
                *o += st[a];
            }
            if idx[a] < out[a] {
                break;
            }
            for (o, st) in offsets.iter_mut().zip(&strides) {
                *o -= st[a] * out[a];
            }
            idx[a] = 0;
        }
    }
}

/// `f(a, b)` over `a` and `b` broadcast to `out`.
pub fn zip<A: Copy, B: Copy, O>(
    a: &[A],
    ash: &[usize],
    b: &[B],
    bsh: &[usize],
    out: &[usize],
    f: impl Fn(A, B) -> O,
) -> Vec<O> {
    let count: usize = out.iter().product();
    if ash == out && bsh == out {
        return a.iter().zip(b).map(|(&x, &y)| f(x, y)).collect();
    }
    if ash == out && b.len() == 1 {
        let y = b[0];
        return a.iter().map(|&x| f(x, y)).collect();
    }
    if bsh == out && a.len() == 1 {
        let x = a[0];
        return b.iter().map(|&y| f(x, y)).collect();
    }
    let mut r = Vec::with_capacity(count);
    for_each_offset(out, &[ash, bsh], |_, o| r.push(f(a[o[0]], b[o[1]])));
    r
}

/// `src` (of `shape`) broadcast to `out`, materialised.
pub fn expand<T: Copy>(src: &[T], shape: &[usize], out: &[usize]) -> Vec<T> {
    if shape == out {
        return src.to_vec();
    }
    let count: usize = out.iter().product();
    let mut r = Vec::with_capacity(count);
    for_each_offset(out, &[shape], |_, o| r.push(src[o[0]]));
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
}
