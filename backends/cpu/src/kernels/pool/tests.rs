//! Tests of `pool.rs`: the fast paths against the general pools, ceil mode, indices, padding, NaN, divisors.

use super::*;

#[test]
fn the_f32_fast_path_matches_the_general_max_pool() {
    // (H, W, kernel, stride, pads [top, left, bottom, right]): SqueezeNet's 3/2, ceil-mode-like windows past the
    // edge, padding, windows of 2 and 5.
    let cases: [(usize, usize, usize, usize, [usize; 4]); 8] = [
        (111, 111, 3, 2, [0, 0, 0, 0]),
        (14, 13, 3, 2, [0, 0, 1, 1]),
        (9, 10, 3, 2, [1, 1, 1, 1]),
        (8, 8, 2, 2, [0, 0, 0, 0]),
        (12, 11, 5, 3, [2, 1, 2, 2]),
        (7, 7, 3, 1, [1, 1, 1, 1]),
        // Kernels wider than the row: no window lies inside it.
        (1, 1, 3, 2, [0, 0, 2, 2]),
        (2, 2, 4, 2, [0, 0, 2, 2]),
    ];
    // Two planes (two threads split the rows) and five (two threads take ranges of planes).
    for ((h, w, k, st, pads), planes) in cases.into_iter().flat_map(|c| [(c, 2), (c, 5)]) {
        let oh = (h + pads[0] + pads[2] - k) / st + 1;
        let ow = (w + pads[1] + pads[3] - k) / st + 1;
        let mut x: Vec<f32> = (0..planes * h * w).map(|i| ((i * 37 % 101) as f32 - 50.0) * 0.25).collect();
        // NaN in a few places, a whole first row of the second plane among them: NaN loses to numbers.
        for i in (0..x.len()).step_by(29).chain(h * w..h * w + w) {
            x[i] = f32::NAN;
        }
        let p = PoolParams { kernel: &[k, k], strides: &[st, st], dilations: &[1, 1], pads: &pads };
        let (xs, ys) = ([1, planes, h, w], [1, planes, oh, ow]);
        let mut want = vec![0.0; planes * oh * ow];
        max_pool(&x, &xs, &p, &mut want, &ys, None, false, 1);
        for threads in [1, 2] {
            let mut got = vec![f32::NAN; want.len()];
            max_pool_f32(&x, &xs, &p, &mut got, &ys, threads);
            let same = got.iter().zip(&want).all(|(a, b)| a == b || (a.is_nan() && b.is_nan()));
            assert!(same, "{planes} planes of {h}x{w}, kernel {k} stride {st} pads {pads:?}, {threads} threads");
        }
    }
}

#[test]
fn max_pool_ceil_mode_with_indices() {
    // 1×1×4×4, kernel 3, stride 2, ceil_mode: 2×2 output, last windows run past the input.
    let x: Vec<f32> = (1..=16).map(|v| v as f32).collect();
    let p = PoolParams { kernel: &[3, 3], strides: &[2, 2], dilations: &[1, 1], pads: &[0, 0, 0, 0] };
    let mut y = vec![0.0; 4];
    let mut ind = vec![0i64; 4];
    max_pool(&x, &[1, 1, 4, 4], &p, &mut y, &[1, 1, 2, 2], Some(&mut ind), false, 1);
    assert_eq!(y, [11.0, 12.0, 15.0, 16.0]);
    assert_eq!(ind, [10, 11, 14, 15]);
    // Column-major indices: (h, w) -> h + w·4.
    let mut ind = vec![0i64; 4];
    max_pool(&x, &[1, 1, 4, 4], &p, &mut y, &[1, 1, 2, 2], Some(&mut ind), true, 1);
    assert_eq!(ind, [2 + 2 * 4, 2 + 3 * 4, 3 + 2 * 4, 3 + 3 * 4]);
}

#[test]
fn max_pool_padding_dilation_and_batches() {
    // Negative inputs with padding: padded positions never win.
    let x: Vec<f32> = (0..18).map(|v| -(v as f32) - 1.0).collect(); // [2 channels, 3×3]
    let p = PoolParams { kernel: &[2, 2], strides: &[1, 1], dilations: &[1, 1], pads: &[1, 1, 0, 0] };
    let mut y = vec![0.0; 18];
    let mut ind = vec![0i64; 18];
    max_pool(&x, &[1, 2, 3, 3], &p, &mut y, &[1, 2, 3, 3], Some(&mut ind), false, 2);
    // Window at (0,0) covers only x[0,0]; window (1,1) covers (0,0),(0,1),(1,0),(1,1) -> -1.
    assert_eq!(&y[..9], &[-1.0, -1.0, -2.0, -1.0, -1.0, -2.0, -4.0, -4.0, -5.0]);
    assert_eq!(&ind[..9], &[0, 0, 1, 0, 0, 1, 3, 3, 4]);
    assert_eq!(y[9], -10.0);
    assert_eq!(ind[9], 9);
    // Dilation 2 on a 1-D row: windows {0, 2}, {1, 3}, {2, 4}.
    let x = [3.0f64, 1.0, 2.0, 5.0, 4.0];
    let p = PoolParams { kernel: &[2], strides: &[1], dilations: &[2], pads: &[0, 0] };
    let mut y = [0.0; 3];
    max_pool(&x, &[1, 1, 5], &p, &mut y, &[1, 1, 3], None, false, 1);
    assert_eq!(y, [3.0, 5.0, 4.0]);
    // Integers, 3-D, ties keep the first.
    let x = [1i8, 7, 7, 2, 0, 7, 1, 1];
    let p = PoolParams { kernel: &[2, 2, 2], strides: &[], dilations: &[], pads: &[] };
    let mut y = [0i8; 1];
    let mut ind = [0i64; 1];
    max_pool(&x, &[1, 1, 2, 2, 2], &p, &mut y, &[1, 1, 1, 1, 1], Some(&mut ind), false, 1);
    assert_eq!((y[0], ind[0]), (7, 1));
}

#[test]
fn max_pool_nan_loses() {
    let x = [f32::NAN, 1.0, f32::NAN, f32::NAN];
    let p = PoolParams { kernel: &[2], strides: &[2], dilations: &[], pads: &[] };
    let mut y = [0.0; 2];
    max_pool(&x, &[1, 1, 4], &p, &mut y, &[1, 1, 2], None, false, 1);
    assert_eq!(y[0], 1.0);
    assert!(y[1].is_nan());
}

#[test]
fn average_pool_divisors() {
    let x: Vec<f32> = (1..=16).map(|v| v as f32).collect();
    // ONNX test_averagepool_2d_ceil.
    let p = PoolParams { kernel: &[3, 3], strides: &[2, 2], dilations: &[], pads: &[0, 0, 0, 0] };
    let mut y = vec![0.0; 4];
    average_pool(&x, &[1, 1, 4, 4], &p, false, &mut y, &[1, 1, 2, 2], 1);
    assert_eq!(y, [6.0, 7.5, 12.0, 13.5]);
    // Same with count_include_pad: no padding, so the ceil-mode overhang is still not counted.
    average_pool(&x, &[1, 1, 4, 4], &p, true, &mut y, &[1, 1, 2, 2], 1);
    assert_eq!(y, [6.0, 7.5, 12.0, 13.5]);
    // ONNX test_averagepool_2d_ceil_last_window_starts_on_pad: pads 1, kernel 3, stride 3, count pads.
    let x = [0.8580f32, 0.0786, 0.2692, 0.1537];
    let p = PoolParams { kernel: &[3, 3], strides: &[3, 3], dilations: &[], pads: &[1, 1, 1, 1] };
    let mut y = [0.0; 1];
    average_pool(&x, &[1, 1, 2, 2], &p, true, &mut y, &[1, 1, 1, 1], 1);
    assert!((y[0] - 0.1511).abs() < 1e-4, "{}", y[0]);
    // 1-D, pads 1 each side, kernel 3, stride 1 on [1, 2, 3].
    let x = [1.0f32, 2.0, 3.0];
    let p = PoolParams { kernel: &[3], strides: &[1], dilations: &[], pads: &[1, 1] };
    let mut y = [0.0; 3];
    average_pool(&x, &[1, 1, 3], &p, false, &mut y, &[1, 1, 3], 1);
    assert_eq!(y, [1.5, 2.0, 2.5]);
    average_pool(&x, &[1, 1, 3], &p, true, &mut y, &[1, 1, 3], 2);
    assert_eq!(y[..2], [1.0, 2.0]);
    assert!((y[2] - 5.0 / 3.0).abs() < 1e-6);
    // ceil_mode with begin padding: x len 5, kernel 3, stride 2, pads [1, 0] -> 3 outputs; the last window
    // covers x[3], x[4] and one tap past the padded extent, which is not counted.
    let x = [1.0f32, 2.0, 3.0, 4.0, 5.0];
    let p = PoolParams { kernel: &[3], strides: &[2], dilations: &[], pads: &[1, 0] };
    let mut y = [0.0; 3];
    average_pool(&x, &[1, 1, 5], &p, true, &mut y, &[1, 1, 3], 1);
    assert_eq!(y, [1.0, 3.0, 4.5]);
    average_pool(&x, &[1, 1, 5], &p, false, &mut y, &[1, 1, 3], 1);
    assert_eq!(y, [1.5, 3.0, 4.5]);
}

#[test]
fn global_pools() {
    let x = [1.0f32, 5.0, 3.0, -1.0, -2.0, -3.0];
    let mut y = [0.0; 2];
    global_pool(&x, &[1, 2, 3], true, &mut y, 1);
    assert_eq!(y, [5.0, -1.0]);
    global_pool(&x, &[1, 2, 3], false, &mut y, 1);
    assert_eq!(y, [3.0, -2.0]);
    let x = [1.0f32, f32::NAN, 3.0];
    let mut y = [0.0; 1];
    global_pool(&x, &[1, 1, 3], true, &mut y, 1);
    assert!(y[0].is_nan());
    // Planes longer than the lanes, on one and two threads, against a serial scan; a NaN late in a plane.
    let (channels, size) = (6, 40_003);
    let mut x: Vec<f32> = (0..channels * size).map(|i| ((i * 7919) % 10_007) as f32 * 0.01 - 50.0).collect();
    x[4 * size + 39_000] = f32::NAN;
    let pool = rayon::ThreadPoolBuilder::new().num_threads(2).build().unwrap();
    for threads in [1, 2] {
        for max in [true, false] {
            let mut y = vec![0f32; channels];
            pool.install(|| global_pool(&x, &[1, channels, size], max, &mut y, threads));
            for c in 0..channels {
                let xc = &x[c * size..][..size];
                let want = if max {
                    xc.iter()
                        .copied()
                        .find(|v| v.is_nan())
                        .unwrap_or_else(|| xc.iter().copied().fold(f32::MIN, f32::max))
                } else {
                    (xc.iter().map(|&v| v as f64).sum::<f64>() / size as f64) as f32
                };
                assert!(
                    y[c] == want || (y[c].is_nan() && want.is_nan()),
                    "channel {c} (max {max}): {} against {want}",
                    y[c]
                );
            }
        }
    }
}
