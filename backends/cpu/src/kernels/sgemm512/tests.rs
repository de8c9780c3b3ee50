fn naive(m: usize, n: usize, k: usize, a: &[f32], b: &[f32], ts: bool) -> Vec<f32> {
    let mut c = vec![0f32; m * n];
    for i in 0..m {
        for j in 0..n {
            let mut s = 0f64;
            for l in 0..k {
                let bv = if ts { b[j * k + l] } else { b[l * n + j] };
                s += f64::from(a[i * k + l]) * f64::from(bv);
            }
            c[i * n + j] = s as f32;
        }
    }
    c
}

/// Through `gemm_strided`, which takes this kernel on one thread where the CPU has AVX-512F.
#[test]
fn matches_a_naive_product_on_odd_sizes() {
    for &(m, n, k, ts) in
        &[(1, 1, 1, false), (13, 33, 7, false), (25, 70, 300, true), (96, 64, 257, false), (12, 32, 16, true)]
    {
        let a: Vec<f32> = (0..m * k).map(|i| ((i * 7 % 13) as f32 - 6.0) / 7.0).collect();
        let b: Vec<f32> = (0..k * n).map(|i| ((i * 5 % 11) as f32 - 5.0) / 5.0).collect();
        let mut c = vec![1.0f32; m * n];
        let bs = if ts { (1, k) } else { (n, 1) };
        super::super::gemm::gemm_strided(m, n, k, &mut c, n, true, 0.5, &a, k, 1, &b, bs.0, bs.1, 2.0, 1);
        let want = naive(m, n, k, &a, &b, ts);
        for (i, (&got, &w)) in c.iter().zip(&want).enumerate() {
            let expect = 0.5 + 2.0 * w;
            assert!((got - expect).abs() <= 1e-4 * expect.abs().max(1.0), "{m}x{n}x{k} [{i}]: {got} vs {expect}");
        }
    }
    // Row bands on two threads (at least 48 rows each).
    let (m, n, k) = (100, 70, 300);
    let a: Vec<f32> = (0..m * k).map(|i| ((i * 7 % 13) as f32 - 6.0) / 7.0).collect();
    let b: Vec<f32> = (0..k * n).map(|i| ((i * 5 % 11) as f32 - 5.0) / 5.0).collect();
    let mut c = vec![0f32; m * n];
    super::super::gemm::gemm_strided(m, n, k, &mut c, n, false, 0.0, &a, k, 1, &b, n, 1, 1.0, 2);
    for (i, (&got, &w)) in c.iter().zip(&naive(m, n, k, &a, &b, false)).enumerate() {
        assert!((got - w).abs() <= 1e-4 * w.abs().max(1.0), "two threads [{i}]: {got} vs {w}");
    }
}

/// Packed weights of many rows against a transposed right operand of few columns (a classifier): rows run
/// outermost, and B's three blocks of K are packed once each and read by every block of rows.
#[test]
fn packed_rows_outer_over_blocks_of_k() {
    // Packed operands exist only where AVX-512F runs: not under valgrind (scripts/valgrind-runtime), which
    // hides it; CI's machines have it.
    if !super::available() {
        return;
    }
    let (m, n, k) = (200, 20, 2 * super::KC + 37);
    assert!(m > n && k * n * 4 <= super::B_IN_L2);
    let a: Vec<f32> = (0..m * k).map(|i| ((i * 7 % 13) as f32 - 6.0) / 7.0).collect();
    let b: Vec<f32> = (0..k * n).map(|i| ((i * 5 % 11) as f32 - 5.0) / 5.0).collect();
    let packed = super::PackedA::new(m, k, &a, (k, 1));
    let mut c = vec![0f32; m * n];
    super::super::gemm::gemm_packed(&packed, n, &mut c, n, false, &b, 1, k, 1, super::Epilogue::default());
    for (i, (&got, &w)) in c.iter().zip(&naive(m, n, k, &a, &b, true)).enumerate() {
        assert!((got - w).abs() <= 1e-4 * w.abs().max(1.0), "[{i}]: {got} vs {w}");
    }
}
