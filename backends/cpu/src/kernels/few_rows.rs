//! Products of few rows against constant weights: `y[m, n] = op(A)[m, k] · W[k, n] + bias[n]` with `m` small (a
//! batch of one, a sequence of 20 columns of a text line) and `W` a model's constant (a classifier, a recurrent
//! layer's input weights).
//!
//! The product kernel packs its right operand on every call: for such shapes that is a pass over all of `W` (a
//! transposed `W`, as `Gemm` with `transB` stores it, read across its rows) for only `m` rows of work.
//! Computed as `yᵀ = Wᵀ · op(A)ᵀ` instead, the weights are the left operand, packed once when the model is lowered
//! ([`super::sgemm512::PackedA`]), the bias is the product's per-row epilogue, and `op(A)` is read in place
//! through its strides; `yᵀ` (`n × m`, small) is transposed into `y` after. f32 on AVX-512F, like every packed
//! operand.

use super::gemm::{gemm_packed, pack_lhs, Epilogue, PackedA};

/// Rows of `op(A)` from which [`FewRows`] is used: below a panel (12) the product kernel does without packing
/// (dot products or AXPYs over the rows of `W`, which stream it once), and here `op(A)ᵀ` would fill a fraction
/// of the kernel's 16 columns (a vector times a matrix: 0.03 ms became 0.16 on the suite's MLP).
pub const MIN_ROWS: usize = super::sgemm512::PANEL_ROWS;
/// Rows up to which it is used: beyond them packing `W` per call costs less than 1/64 of the product.
pub const MAX_ROWS: usize = 64;

/// Constant weights packed for products of few rows (see the module doc).
pub struct FewRows {
    wt: PackedA,
    bias: Option<Vec<f32>>,
}

impl FewRows {
    /// Packs `alpha · W` (`k × n`, element `(l, i)` at `w[l·w_rs + i·w_cs]`) and `bias` (`n` values, already
    /// scaled); `None` where packing does not apply (no AVX-512F, fewer than a panel of outputs) or a length is
    /// inconsistent.
    pub fn new(
        w: &[f32],
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
        // Wᵀ (n × k): element (i, l) is W's (l, i).
        let wt = if alpha == 1.0 {
            pack_lhs(n, k, w, (w_cs, w_rs), false)?
        } else {
            let scaled: Vec<f32> = (0..n * k).map(|e| alpha * w[(e % k) * w_rs + (e / k) * w_cs]).collect();
            pack_lhs(n, k, &scaled, (k, 1), false)?
        };
        Some(FewRows { wt, bias })
    }

    /// Bytes held (the packed weights and the bias).
    pub fn bytes(&self) -> usize {
        self.wt.bytes() + self.bias.as_ref().map_or(0, |b| b.len() * 4)
    }

    /// `y = op(A) · (alpha·W) + bias`, `op(A)` being `m × k` with element `(j, l)` at `a[j·a_rs + l·a_cs]`, `y`
    /// packed `m × n`.
    ///
    /// # Panics
    /// On lengths that do not match.
    pub fn run(&self, m: usize, a: &[f32], (a_rs, a_cs): (usize, usize), y: &mut [f32], threads: usize) {
        let (n, k) = (self.wt.rows(), self.wt.cols());
        assert_eq!(y.len(), m * n, "few_rows: Y length");
        if m == 0 {
            return;
        }
        assert!((m - 1) * a_rs + (k - 1) * a_cs < a.len(), "few_rows: A too short");
        // yᵀ (n × m) = Wᵀ · op(A)ᵀ, op(A)ᵀ (k × m) having element (l, j) at a[l·a_cs + j·a_rs].
        let mut yt = vec![0f32; n * m];
        let epilogue = Epilogue { bias: self.bias.as_deref(), act: super::act::Act::None, residual: None };
        gemm_packed(&self.wt, m, &mut yt, m, false, a, a_cs, a_rs, threads, epilogue);
        for (j, row) in y.chunks_exact_mut(n).enumerate() {
            for (i, v) in row.iter_mut().enumerate() {
                *v = yt[i * m + j];
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_the_product_for_both_weight_layouts() {
        if !super::super::sgemm512::available() {
            return assert!(FewRows::new(&[1.0; 12 * 3], (12, 1), 3, 12, 1.0, None).is_none());
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
        for (weights, strides) in [(&w, (n, 1)), (&wt, (1, k))] {
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
        let p = FewRows::new(&w, (n, 1), k, n, 1.0, None).expect("packs");
        let mut y = vec![0.0; m * n];
        p.run(m, &at, (1, m), &mut y, 1);
        for (g, w) in y.iter().zip(want(1.0, false)) {
            assert!((g - w).abs() <= 1e-3 * (1.0 + w.abs()), "{g} vs {w}");
        }
    }
}
