//! Products of few rows against constant weights: `y[m, n] = op(A)[m, k] · W[k, n] + bias[n]` with `m` small (a
//! batch of one, a sequence of 20 columns of a text line) and `W` a model's constant (a classifier, a recurrent
//! layer's input weights).
//!
//! The product kernel packs its right operand on every call: for such shapes that is a pass over all of `W` (a
//! transposed `W`, as `Gemm` with `transB` stores it, read across its rows) for only `m` rows of work.
//! Here the weights are packed once when the model is lowered, with the outputs in the vector lanes
//! ([`super::conv_lanes::LanePack`]: 64 outputs' weights of one step of K in one 256-byte run), and the product is
//! `conv_lanes::product`: tiles of 6 rows of `op(A)` (read in place through its strides, each element broadcast)
//! × 64 outputs, the bias added in registers and each row stored straight into `y`. The form before
//! (`yᵀ = Wᵀ · op(A)ᵀ` on the product kernel, then `yᵀ` transposed) put the rows in a tile of 32 columns: 20 rows
//! (ddddocr's classifier) used five eighths of it, and 32 rows took less time than 20
//! (`examples/few_rows_speed`: 20 × 1024 × 8210 5.79 ms, 32 rows 5.36, one thread). f32 on AVX-512F, like every
//! packed operand.

use super::conv_lanes::{self, LanePack};

/// Rows of `op(A)` (and outputs) from which [`FewRows`] is used: below a panel (12) the product kernel does without
/// packing (dot products or AXPYs over the rows of `W`, which stream it once). In the transposed form this was 16
/// columns' worth of work for one row (a vector times a matrix: 0.03 ms became 0.16 on the suite's MLP); in the
/// lanes 1 to 11 rows did no better than the product kernel (hey_jarvis 0.0277 → 0.0296 ms a run, the rest even).
pub const MIN_ROWS: usize = super::sgemm512::PANEL_ROWS;
/// Rows up to which it is used: beyond them packing `W` per call costs less than 1/64 of the product.
pub const MAX_ROWS: usize = 64;

/// Constant weights packed for products of few rows (see the module doc).
pub struct FewRows {
    w: LanePack,
    bias: Option<Vec<f32>>,
}

impl FewRows {
    /// Packs `alpha · W` (`k × n`, element `(l, i)` at `w[l·w_rs + i·w_cs]`) and `bias` (`n` values, already
    /// scaled); `None` where packing does not apply (no AVX-512F, fewer than a panel of outputs) or a length is
    /// inconsistent.
    pub fn new<W: super::weights::Floats>(
        w: W,
        (w_rs, w_cs): (usize, usize),
        k: usize,
        n: usize,
        alpha: f32,
        bias: Option<Vec<f32>>,
    ) -> Option<FewRows> {
        if bias.as_ref().is_some_and(|b| b.len() != n) || k == 0 || n == 0 {
            return None;
        }
        let last = (k - 1).checked_mul(w_rs)?.checked_add((n - 1).checked_mul(w_cs)?)?;
        if last >= w.len() {
            return None;
        }
        if n < MIN_ROWS || !super::sgemm512::available() {
            return None;
        }
        // Wᵀ (n × k): element (i, l) is W's (l, i).
        Some(FewRows { w: LanePack::strided(n, k, w, (w_cs, w_rs), alpha), bias })
    }

    /// Bytes held (the packed weights and the bias).
    pub fn bytes(&self) -> usize {
        self.w.bytes() + self.bias.as_ref().map_or(0, |b| b.len() * 4)
    }

    /// `y = op(A) · (alpha·W) + bias`, `op(A)` being `m × k` with element `(j, l)` at `a[j·a_rs + l·a_cs]`, `y`
    /// packed `m × n`.
    ///
    /// # Panics
    /// On lengths that do not match.
    pub fn run(&self, m: usize, a: &[f32], (a_rs, a_cs): (usize, usize), y: &mut [f32], threads: usize) {
        let (n, k) = (self.w.rows(), self.w.cols());
        assert_eq!(y.len(), m * n, "few_rows: Y length");
        if m == 0 {
            return;
        }
        assert!((m - 1) * a_rs + (k - 1) * a_cs < a.len(), "few_rows: A too short");
        conv_lanes::product(a, (a_rs, a_cs), m, &self.w, self.bias.as_deref(), y, threads);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::weights::Weights;

    #[test]
    fn matches_the_product_for_both_weight_layouts() {
        if !super::super::sgemm512::available() {
            return assert!(FewRows::new(&[1.0; 12 * 3][..], (12, 1), 3, 12, 1.0, None).is_none());
        }
        let (m, k, n) = (5usize, 37usize, 29usize);
        let a: Vec<f32> = (0..m * k).map(|i| ((i * 7) % 11) as f32 - 5.0).collect();
        let w: Vec<f32> = (0..k * n).map(|i| ((i * 5) % 13) as f32 * 0.25 - 1.5).collect();
        let bias: Vec<f32> = (0..n).map(|i| i as f32 * 0.5).collect();
        let want = |alpha: f32, bias: bool| -> Vec<f32> {
            (0..m * n)
                .map(|e| {
                    let (j, i) = (e / n, e % n);
                    let s: f64 = (0..k).map(|l| f64::from(a[j * k + l]) * f64::from(w[l * n + i])).sum();
                    (f64::from(alpha) * s) as f32 + if bias { i as f32 * 0.5 } else { 0.0 }
                })
                .collect()
        };
        let wt: Vec<f32> = (0..n * k).map(|e| w[(e % k) * n + e / k]).collect();
        // And W as a model file's little-endian bytes, one past an aligned address (`weights.rs`).
        let bytes: Vec<u8> = std::iter::once(0).chain(w.iter().flat_map(|v| v.to_le_bytes())).collect();
        let forms =
            [(Weights::Slice(&w), (n, 1)), (Weights::Slice(&wt), (1, k)), (Weights::Bytes(&bytes[1..]), (n, 1))];
        for (weights, strides) in forms {
            for (alpha, with_bias) in [(1.0, false), (0.5, true)] {
                let p = FewRows::new(weights, strides, k, n, alpha, with_bias.then(|| bias.clone())).expect("packs");
                for threads in [1, 2] {
                    let mut y = vec![f32::NAN; m * n];
                    p.run(m, &a, (k, 1), &mut y, threads);
                    for (g, w) in y.iter().zip(want(alpha, with_bias)) {
                        assert!((g - w).abs() <= 1e-3 * (1.0 + w.abs()), "{g} vs {w}");
                    }
                }
            }
        }
        // A transposed left operand (Gemm's transA) is read through its strides.
        let at: Vec<f32> = (0..k * m).map(|e| a[(e % m) * k + e / m]).collect();
        let p = FewRows::new(&w[..], (n, 1), k, n, 1.0, None).expect("packs");
        let mut y = vec![0.0; m * n];
        p.run(m, &at, (1, m), &mut y, 1);
        for (g, w) in y.iter().zip(want(1.0, false)) {
            assert!((g - w).abs() <= 1e-3 * (1.0 + w.abs()), "{g} vs {w}");
        }
    }

    /// Every tile height (1 to 6 rows, a short last tile) and a last block of outputs of 1 to 64 lanes (masked
    /// stores), against the definition in f64; rows of `y` past the product keep their values.
    #[test]
    fn every_tile_height_and_block_width_matches_the_definition() {
        if !super::super::sgemm512::available() {
            return;
        }
        let k = 19;
        for n in [12, 64, 70, 130] {
            let w: Vec<f32> = (0..k * n).map(|i| ((i * 5) % 13) as f32 * 0.25 - 1.5).collect();
            let bias: Vec<f32> = (0..n).map(|i| i as f32 * 0.5).collect();
            let p = FewRows::new(&w[..], (n, 1), k, n, 1.0, Some(bias.clone())).expect("packs");
            for m in [1, 5, 6, 7, 13, 20] {
                let a: Vec<f32> = (0..m * k).map(|i| ((i * 7) % 11) as f32 - 5.0).collect();
                let mut y = vec![f32::NAN; m * n + 3];
                p.run(m, &a, (k, 1), &mut y[..m * n], 2);
                for (e, &g) in y[..m * n].iter().enumerate() {
                    let (j, i) = (e / n, e % n);
                    let s: f64 = (0..k).map(|l| f64::from(a[j * k + l]) * f64::from(w[l * n + i])).sum();
                    let want = s as f32 + bias[i];
                    assert!((g - want).abs() <= 1e-3 * (1.0 + want.abs()), "m {m}, n {n}, [{j}, {i}]: {g} vs {want}");
                }
                assert!(y[m * n..].iter().all(|v| v.is_nan()), "m {m}, n {n}: written past the product");
            }
        }
    }
}
