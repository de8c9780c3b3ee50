//! `Det`: the determinant of each `n × n` matrix of a batch, by LU decomposition with partial pivoting in f64 (one
//! rounding to the output type at the end), as onnxruntime and numpy compute it. A singular matrix gives 0.

/// The determinants of the `count` row-major `n × n` matrices of `x` (an empty matrix's is 1).
pub fn det(x: &[f64], n: usize, count: usize) -> Vec<f64> {
    if n == 0 {
        return vec![1.0; count];
    }
    let mut a = vec![0.0; n * n];
    x.chunks_exact(n * n)
        .map(|m| {
            a.copy_from_slice(m);
            let mut d = 1.0;
            for k in 0..n {
                let pivot = (k..n).max_by(|&i, &j| a[i * n + k].abs().total_cmp(&a[j * n + k].abs())).unwrap_or(k);
                if a[pivot * n + k] == 0.0 {
                    return 0.0;
                }
                if pivot != k {
                    for c in 0..n {
                        a.swap(k * n + c, pivot * n + c);
                    }
                    d = -d;
                }
                let p = a[k * n + k];
                d *= p;
                for i in k + 1..n {
                    let f = a[i * n + k] / p;
                    for c in k + 1..n {
                        a[i * n + c] -= f * a[k * n + c];
                    }
                }
            }
            d
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::det;

    #[test]
    fn determinants_with_pivoting_and_of_singular_matrices() {
        assert_eq!(det(&[2.0, 1.0, 4.0, 3.0], 2, 1), [2.0]);
        // A zero first pivot needs a row swap, which flips the sign.
        assert_eq!(det(&[0.0, 1.0, 1.0, 0.0], 2, 1), [-1.0]);
        assert_eq!(det(&[1.0, 2.0, 2.0, 4.0, 0.0, 0.0, 0.0, 5.0], 2, 2), [0.0, 0.0]);
        let d = det(&[6.0, 1.0, 1.0, 4.0, -2.0, 5.0, 2.0, 8.0, 7.0], 3, 1);
        assert!((d[0] - -306.0).abs() < 1e-9, "{d:?}");
        assert_eq!(det(&[], 0, 3), [1.0; 3]);
    }
}
