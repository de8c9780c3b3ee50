//! Products of packed weights with at most [`MAX_COLUMNS`] columns: a 1×1 convolution over a 1×1 image (a
//! classifier head, a squeeze-and-excitation block), or a product of weights with a vector.
//!
//! The blocked product's tile is 32 columns wide, so one column used 1/32 of its multiply-adds and the weights
//! streamed at about 5 GB/s (MobileNetV3's 1280 × 512 head took 0.49 ms). Here each 12-row panel of the weights
//! is read once, a row of 12 weights per step of K in one register, times each column's value broadcast: the
//! product runs at the speed the weights arrive from memory.

use super::sgemm512::{Epilogue, PackedA, KC, PANEL_ROWS as MR};

/// The most columns this kernel takes; wider products take the blocked kernel.
pub const MAX_COLUMNS: usize = 4;

/// `dst[i·dst_rs + j] = epilogue((read_dst ? dst : 0) + Σₗ a[row0 + i, l] · b[l·b_rs + j·b_cs])` for the `m` rows
/// from `row0` (a multiple of 12) and `n ≤` [`MAX_COLUMNS`] columns; the epilogue's bias is indexed from row
/// `row0`. The caller (`sgemm512::sgemm_packed`) has checked the extents and AVX-512F.
#[allow(clippy::too_many_arguments)]
pub(crate) fn narrow(
    a: &PackedA,
    row0: usize,
    m: usize,
    n: usize,
    dst: &mut [f32],
    dst_rs: usize,
    read_dst: bool,
    b: &[f32],
    (b_rs, b_cs): (usize, usize),
    epilogue: Epilogue<'_>,
) {
    assert!((1..=MAX_COLUMNS).contains(&n) && row0.is_multiple_of(MR), "narrow product: {n} columns from row {row0}");
    let k = a.cols();
    assert!(k == 0 || (k - 1) * b_rs + (n - 1) * b_cs < b.len(), "narrow product: right operand too short");
    assert!(m == 0 || (m - 1) * dst_rs + n <= dst.len(), "narrow product: destination too short");
    // The column's values, gathered once (`b` may be strided).
    let cols: Vec<[f32; MAX_COLUMNS]> =
        (0..k).map(|l| std::array::from_fn(|j| if j < n { b[l * b_rs + j * b_cs] } else { 0.0 })).collect();
    for q in 0..m.div_ceil(MR) {
        let sums = panel_sums(a, row0 / MR + q, &cols, n);
        for (i, row) in sums.iter().enumerate().take(MR.min(m - q * MR)) {
            let r = q * MR + i;
            let bias = epilogue.bias.map_or(0.0, |bias| bias[r]);
            let out = &mut dst[r * dst_rs..][..n];
            // The row's residual terms (`residual.rs`), added after the bias, before the activation.
            let term = epilogue.residual.map(|t| t.slice(out.as_ptr(), n));
            for (j, (o, &v)) in out.iter_mut().zip(row).enumerate() {
                let v = if read_dst { *o + v } else { v + bias };
                *o = epilogue.act.scalar(term.map_or(v, |t| v + t[j]));
            }
        }
    }
}

/// `sums[i][j] = Σₗ panel[l][i] · cols[l][j]` for panel `q` (12 rows) over the whole of K.
fn panel_sums(a: &PackedA, q: usize, cols: &[[f32; MAX_COLUMNS]], n: usize) -> [[f32; MAX_COLUMNS]; MR] {
    #[cfg(target_arch = "x86_64")]
    if super::sgemm512::available() {
        // SAFETY: AVX-512F is available; the kernel reads the panel through bounds-checked slices.
        return unsafe { panel_sums_avx512(a, q, cols, n) };
    }
    let mut sums = [[0f32; MAX_COLUMNS]; MR];
    let k = a.cols();
    for pc in (0..k).step_by(KC) {
        let kc = KC.min(k - pc);
        let panel = a.panel(pc, kc, q);
        for (l, col) in cols[pc..pc + kc].iter().enumerate() {
            for (i, row) in sums.iter_mut().enumerate() {
                for j in 0..n {
                    row[j] += panel[l * MR + i] * col[j];
                }
            }
        }
    }
    sums
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
fn panel_sums_avx512(a: &PackedA, q: usize, cols: &[[f32; MAX_COLUMNS]], n: usize) -> [[f32; MAX_COLUMNS]; MR] {
    use std::arch::x86_64::*;
    // Two sums per column (even and odd steps of K), so that consecutive multiply-adds do not wait on each other.
    let mut acc = [[_mm512_setzero_ps(); 2]; MAX_COLUMNS];
    let k = a.cols();
    let rows: __mmask16 = (1 << MR) - 1;
    for pc in (0..k).step_by(KC) {
        let kc = KC.min(k - pc);
        let panel = a.panel(pc, kc, q);
        for (l, col) in cols[pc..pc + kc].iter().enumerate() {
            let w = &panel[l * MR..][..MR];
            // SAFETY: the mask reads the 12 floats of `w`, no more.
            let w = unsafe { _mm512_maskz_loadu_ps(rows, w.as_ptr()) };
            for (j, acc) in acc.iter_mut().enumerate().take(n) {
                acc[l % 2] = _mm512_fmadd_ps(w, _mm512_set1_ps(col[j]), acc[l % 2]);
            }
        }
    }
    let mut sums = [[0f32; MAX_COLUMNS]; MR];
    for (j, acc) in acc.iter().enumerate().take(n) {
        let mut lanes = [0f32; 16];
        // SAFETY: `lanes` holds 16 floats.
        unsafe { _mm512_storeu_ps(lanes.as_mut_ptr(), _mm512_add_ps(acc[0], acc[1])) };
        for (row, &v) in sums.iter_mut().zip(&lanes) {
            row[j] = v;
        }
    }
    sums
}

#[cfg(test)]
mod tests {
    use super::super::act::Act;
    use super::super::sgemm512::{Epilogue, PackedA};

    #[test]
    fn narrow_products_match_the_sums() {
        // 30 rows (a partial last panel), K over two blocks, 1 to 4 columns, strided B, bias and ReLU, and rows
        // read from the destination.
        let (m, k) = (30, 300);
        let a: Vec<f32> = (0..m * k).map(|i| ((i * 7 % 13) as f32 - 6.0) / 7.0).collect();
        let bias: Vec<f32> = (0..m).map(|i| i as f32 / 10.0 - 1.0).collect();
        for (packed, n) in [PackedA::new(m, k, &a, (k, 1)), PackedA::by_panels(m, k, &a, (k, 1))]
            .iter()
            .flat_map(|p| (1..=4).map(move |n| (p, n)))
        {
            let b: Vec<f32> = (0..k * 5).map(|i| ((i * 5 % 11) as f32 - 5.0) / 5.0).collect();
            let leaky = Act::LeakyRelu { alpha: 0.25 };
            for (read, act) in [(false, Act::None), (false, Act::Relu), (true, Act::None), (false, leaky)] {
                let mut dst = vec![0.5f32; m * 6];
                let epilogue = Epilogue { bias: (!read).then_some(&bias[..]), act, residual: None };
                super::narrow(packed, 0, m, n, &mut dst, 6, read, &b, (5, 1), epilogue);
                for i in 0..m {
                    for j in 0..n {
                        let s: f64 = (0..k).map(|l| f64::from(a[i * k + l]) * f64::from(b[l * 5 + j])).sum();
                        let want = if read { 0.5 + s } else { s + f64::from(bias[i]) };
                        let want = act.apply(want);
                        let got = f64::from(dst[i * 6 + j]);
                        assert!((got - want).abs() <= 1e-4 * (1.0 + want.abs()), "n {n} [{i}, {j}]: {got} vs {want}");
                    }
                    assert_eq!(dst[i * 6 + 5], 0.5, "columns past n are not written");
                }
            }
        }
    }
}
