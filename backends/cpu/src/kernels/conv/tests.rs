//! Tests of `conv.rs`: every path against a direct evaluation of the definition.

use super::*;

/// The activations the cases take in turn (`act.rs`), over the values' range of about ±1.
const ACTS: [Act; 7] = [
    Act::Relu,
    Act::HardSwish,
    Act::Clip { lo: -0.25, hi: 0.5 },
    Act::HardSigmoid { alpha: 0.7, beta: 0.4 },
    Act::LeakyRelu { alpha: 0.3 },
    Act::Sigmoid,
    Act::Silu,
];

fn values(n: usize, seed: u64) -> Vec<f32> {
    let mut s = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
    (0..n)
        .map(|_| {
            s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            ((s >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
        })
        .collect()
}

/// Direct N-D convolution, written independently of the im2col path.
#[allow(clippy::too_many_arguments)]
fn naive(
    x: &[f32],
    xs: &[usize],
    w: &[f32],
    ws: &[usize],
    bias: Option<&[f32]>,
    strides: &[usize],
    dil: &[usize],
    pads: &[usize],
    group: usize,
    ys: &[usize],
) -> Vec<f32> {
    let s = xs.len() - 2;
    let (nb, c, m) = (xs[0], xs[1], ws[0]);
    let (cg, mg) = (c / group, m / group);
    let p_out: usize = ys[2..].iter().product();
    let kk: usize = ws[2..].iter().product();
    let p_in: usize = xs[2..].iter().product();
    let mut y = vec![0.0; nb * m * p_out];
    for n in 0..nb {
        for mo in 0..m {
            let gi = mo / mg;
            for po in 0..p_out {
                let mut o = vec![0; s];
                let mut r = po;
                for d in (0..s).rev() {
                    o[d] = r % ys[2 + d];
                    r /= ys[2 + d];
                }
                let mut acc = bias.map_or(0.0, |b| b[mo] as f64);
                for ci in 0..cg {
                    for kp in 0..kk {
                        let mut k = vec![0; s];
                        let mut r = kp;
                        for d in (0..s).rev() {
                            k[d] = r % ws[2 + d];
                            r /= ws[2 + d];
                        }
                        let mut idx = 0usize;
                        let mut ok = true;
                        for d in 0..s {
                            let i = (o[d] * strides[d] + k[d] * dil[d]) as isize - pads[d] as isize;
                            if i < 0 || i >= xs[2 + d] as isize {
                                ok = false;
                            }
                            idx = idx * xs[2 + d] + i.max(0) as usize;
                        }
                        if ok {
                            let xv = x[(n * c + gi * cg + ci) * p_in + idx];
                            let wv = w[(mo * cg + ci) * kk + kp];
                            acc += xv as f64 * wv as f64;
                        }
                    }
                }
                y[(n * m + mo) * p_out + po] = acc as f32;
            }
        }
    }
    y
}

fn close(a: &[f32], b: &[f32]) {
    assert_eq!(a.len(), b.len());
    for (i, (x, y)) in a.iter().zip(b).enumerate() {
        assert!((x - y).abs() <= 1e-4 * (1.0 + y.abs()), "at {i}: {x} vs {y}");
    }
}

#[test]
fn conv_3x3_by_hand() {
    // 1×1×3×3 input 0..9, 3×3 kernel of ones, pad 1: each output sums its 3×3 neighbourhood.
    let x: Vec<f32> = (0..9).map(|v| v as f32).collect();
    let w = vec![1.0f32; 9];
    let p = ConvParams { kernel: &[3, 3], strides: &[1, 1], dilations: &[1, 1], pads: &[1, 1, 1, 1], group: 1 };
    let mut y = vec![0.0; 9];
    conv(&x, &[1, 1, 3, 3], &w, &[1, 1, 3, 3], None, &p, &mut y, &[1, 1, 3, 3], 1);
    assert_eq!(y, [8.0, 15.0, 12.0, 21.0, 36.0, 27.0, 20.0, 33.0, 24.0]);
    // No padding, bias 0.5: one output.
    let p = ConvParams { kernel: &[], strides: &[], dilations: &[], pads: &[], group: 1 };
    let mut y = vec![0.0; 1];
    conv(&x, &[1, 1, 3, 3], &w, &[1, 1, 3, 3], Some(&[0.5]), &p, &mut y, &[1, 1, 1, 1], 1);
    assert_eq!(y, [36.5]);
}

#[test]
fn conv_matches_direct() {
    struct Case {
        xs: Vec<usize>,
        ws: Vec<usize>,
        strides: Vec<usize>,
        dil: Vec<usize>,
        pads: Vec<usize>,
        group: usize,
    }
    let cases = [
        // 2-D, strided, asymmetric padding.
        Case {
            xs: vec![2, 3, 7, 6],
            ws: vec![4, 3, 3, 2],
            strides: vec![2, 1],
            dil: vec![1, 1],
            pads: vec![1, 0, 2, 1],
            group: 1,
        },
        // 2-D, dilated, grouped.
        Case {
            xs: vec![1, 4, 8, 8],
            ws: vec![6, 2, 3, 3],
            strides: vec![1, 2],
            dil: vec![2, 1],
            pads: vec![2, 1, 2, 1],
            group: 2,
        },
        // Depthwise.
        Case {
            xs: vec![2, 3, 5, 5],
            ws: vec![3, 1, 3, 3],
            strides: vec![1, 1],
            dil: vec![1, 1],
            pads: vec![1, 1, 1, 1],
            group: 3,
        },
        // Depthwise (the direct kernel, `depthwise.rs`): 5×5 strided with uneven padding, a channel multiplier
        // of 2 with dilation, 1-D, and enough planes for two threads.
        Case {
            xs: vec![1, 4, 9, 8],
            ws: vec![4, 1, 5, 5],
            strides: vec![2, 2],
            dil: vec![1, 1],
            pads: vec![2, 1, 2, 3],
            group: 4,
        },
        Case {
            xs: vec![2, 3, 7, 7],
            ws: vec![6, 1, 3, 3],
            strides: vec![1, 2],
            dil: vec![2, 1],
            pads: vec![2, 1, 2, 1],
            group: 3,
        },
        Case { xs: vec![1, 2, 11], ws: vec![2, 1, 3], strides: vec![1], dil: vec![1], pads: vec![1, 1], group: 2 },
        // Column strides of 3, 4 (each split into phases by its own loop) and 5 (the general loop), with begin
        // padding wider than one phase's share and planes reused across channels.
        Case {
            xs: vec![2, 3, 10, 23],
            ws: vec![3, 1, 3, 3],
            strides: vec![1, 3],
            dil: vec![1, 1],
            pads: vec![1, 2, 1, 0],
            group: 3,
        },
        Case {
            xs: vec![1, 4, 6, 37],
            ws: vec![4, 1, 2, 5],
            strides: vec![2, 4],
            dil: vec![1, 2],
            pads: vec![0, 5, 1, 3],
            group: 4,
        },
        Case {
            xs: vec![1, 2, 5, 31],
            ws: vec![2, 1, 1, 3],
            strides: vec![1, 5],
            dil: vec![1, 1],
            pads: vec![0, 1, 0, 2],
            group: 2,
        },
        // Column stride 2 over rows wide enough for the phases' 32-column permutes (`split2_avx512`), with begin
        // padding 0, 1 and 3 (a channel multiplier of 2 keeps them on `depthwise.rs`, not the lanes kernel).
        Case {
            xs: vec![1, 2, 9, 77],
            ws: vec![4, 1, 3, 3],
            strides: vec![2, 2],
            dil: vec![1, 1],
            pads: vec![1, 1, 1, 2],
            group: 2,
        },
        Case {
            xs: vec![1, 2, 5, 100],
            ws: vec![4, 1, 3, 5],
            strides: vec![1, 2],
            dil: vec![1, 1],
            pads: vec![0, 3, 1, 0],
            group: 2,
        },
        Case { xs: vec![1, 2, 70], ws: vec![4, 1, 3], strides: vec![2], dil: vec![1], pads: vec![0, 1], group: 2 },
        // 3×3 at row stride 1 (`sum_rows_avx512`, each input row loaded once for the block's output rows): blocks
        // of 2 rows × 4 and × 3 vectors and of 4 rows × 2, padding rows at both ends, a last block past the
        // output, a column dilation of 2, and uneven padding.
        Case {
            xs: vec![1, 3, 11, 70],
            ws: vec![6, 1, 3, 3],
            strides: vec![1, 1],
            dil: vec![1, 1],
            pads: vec![1, 1, 1, 1],
            group: 3,
        },
        Case {
            xs: vec![2, 2, 7, 40],
            ws: vec![4, 1, 3, 3],
            strides: vec![1, 2],
            dil: vec![1, 2],
            pads: vec![2, 2, 0, 2],
            group: 2,
        },
        Case {
            xs: vec![1, 2, 9, 20],
            ws: vec![4, 1, 3, 3],
            strides: vec![1, 1],
            dil: vec![1, 1],
            pads: vec![0, 1, 2, 1],
            group: 2,
        },
        // One input channel read by many outputs through a long window (an STFT's filters): a product, not the
        // direct kernel.
        Case { xs: vec![1, 1, 600], ws: vec![20, 1, 64], strides: vec![32], dil: vec![1], pads: vec![0, 0], group: 1 },
        // The same over a batch of three short signals (17 positions each), and a batch of small 2-D images with
        // padding: every image's columns unfolded side by side, one product (`MERGE_BELOW`).
        Case { xs: vec![3, 1, 600], ws: vec![20, 1, 64], strides: vec![32], dil: vec![1], pads: vec![0, 0], group: 1 },
        Case { xs: vec![2, 3, 9], ws: vec![4, 3, 3], strides: vec![2], dil: vec![2], pads: vec![2, 1], group: 1 },
        Case {
            xs: vec![4, 5, 6, 5],
            ws: vec![7, 5, 3, 3],
            strides: vec![1, 1],
            dil: vec![1, 1],
            pads: vec![1, 1, 1, 1],
            group: 1,
        },
        Case {
            xs: vec![1, 16, 40, 40],
            ws: vec![16, 1, 3, 3],
            strides: vec![1, 1],
            dil: vec![1, 1],
            pads: vec![1, 1, 1, 1],
            group: 16,
        },
        // A sequence as [C, L, 1] with a [K, 1] kernel (magika's), and a unit axis in the middle of 3-D.
        Case {
            xs: vec![1, 4, 9, 1],
            ws: vec![14, 4, 3, 1],
            strides: vec![1, 1],
            dil: vec![1, 1],
            pads: vec![1, 0, 1, 0],
            group: 1,
        },
        Case {
            xs: vec![1, 2, 5, 1, 6],
            ws: vec![3, 2, 2, 1, 3],
            strides: vec![2, 3, 1],
            dil: vec![1, 1, 2],
            pads: vec![0, 0, 1, 1, 0, 1],
            group: 1,
        },
        // Pointwise.
        Case {
            xs: vec![2, 5, 3, 4],
            ws: vec![3, 5, 1, 1],
            strides: vec![1, 1],
            dil: vec![1, 1],
            pads: vec![0, 0, 0, 0],
            group: 1,
        },
        // 1-x1 with stride (not pointwise).
        Case {
            xs: vec![1, 2, 5, 5],
            ws: vec![3, 2, 1, 1],
            strides: vec![2, 2],
            dil: vec![1, 1],
            pads: vec![0, 0, 0, 0],
            group: 1,
        },
        // Grouped with 13 output channels per group and a 3×3 window: packed weights where AVX-512F runs.
        Case {
            xs: vec![1, 4, 9, 7],
            ws: vec![26, 2, 3, 3],
            strides: vec![1, 1],
            dil: vec![1, 1],
            pads: vec![1, 1, 1, 1],
            group: 2,
        },
        // Pointwise with 50 output channels (several row panels, bands on two threads).
        Case {
            xs: vec![2, 3, 6, 6],
            ws: vec![200, 3, 1, 1],
            strides: vec![1, 1],
            dil: vec![1, 1],
            pads: vec![0, 0, 0, 0],
            group: 1,
        },
        // 1-D.
        Case { xs: vec![2, 2, 9], ws: vec![3, 2, 4], strides: vec![2], dil: vec![2], pads: vec![3, 1], group: 1 },
        // Packed, with at most four output positions: unfolded and multiplied by the narrow product (an STFT's
        // frames of a short signal, a 3×3 stride-2 convolution down to 2×2).
        Case { xs: vec![1, 1, 300], ws: vec![24, 1, 64], strides: vec![80], dil: vec![1], pads: vec![0, 0], group: 1 },
        Case {
            xs: vec![1, 16, 4, 4],
            ws: vec![12, 16, 3, 3],
            strides: vec![2, 2],
            dil: vec![1, 1],
            pads: vec![1, 1, 1, 1],
            group: 1,
        },
        // Packed 1-D and 2-D with 32 or more weights per output channel: read in place (`shifted.rs`).
        Case { xs: vec![1, 8, 30], ws: vec![12, 8, 5], strides: vec![2], dil: vec![1], pads: vec![2, 1], group: 1 },
        Case {
            xs: vec![2, 4, 11, 9],
            ws: vec![16, 4, 3, 3],
            strides: vec![2, 1],
            dil: vec![1, 2],
            pads: vec![1, 0, 0, 2],
            group: 1,
        },
        // Grouped, and a stride with a dilation on the same axis, read in place.
        Case {
            xs: vec![1, 8, 13, 12],
            ws: vec![24, 4, 3, 3],
            strides: vec![2, 2],
            dil: vec![2, 1],
            pads: vec![2, 1, 1, 1],
            group: 2,
        },
        // 3-D.
        Case {
            xs: vec![1, 2, 4, 5, 3],
            ws: vec![2, 2, 2, 3, 2],
            strides: vec![1, 2, 1],
            dil: vec![1, 1, 2],
            pads: vec![0, 1, 1, 1, 0, 1],
            group: 1,
        },
    ];
    let mut packed_runs = 0;
    for (ci, case) in cases.iter().enumerate() {
        let s = case.xs.len() - 2;
        let mut ys = vec![case.xs[0], case.ws[0]];
        for d in 0..s {
            let span = case.dil[d] * (case.ws[2 + d] - 1) + 1;
            ys.push((case.xs[2 + d] + case.pads[d] + case.pads[s + d] - span) / case.strides[d] + 1);
        }
        let x = values(case.xs.iter().product(), 10 + ci as u64);
        let w = values(case.ws.iter().product(), 20 + ci as u64);
        let b = values(case.ws[0], 30 + ci as u64);
        let want = naive(&x, &case.xs, &w, &case.ws, Some(&b), &case.strides, &case.dil, &case.pads, case.group, &ys);
        let act = ACTS[ci % ACTS.len()];
        let p = ConvParams {
            kernel: &case.ws[2..],
            strides: &case.strides,
            dilations: &case.dil,
            pads: &case.pads,
            group: case.group,
        };
        for threads in [1, 2] {
            let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build().unwrap();
            let mut y = vec![f32::NAN; want.len()];
            pool.install(|| conv(&x, &case.xs, &w, &case.ws, Some(&b), &p, &mut y, &ys, threads));
            close(&y, &want);
            // The same with the weights packed ahead of time, where that applies.
            if let Some(packed) = PackedWeights::new(&w, &case.ws, case.group) {
                packed_runs += 1;
                assert_eq!(packed.bytes(), PackedWeights::bytes_for(&case.ws, case.group));
                let mut y = vec![f32::NAN; want.len()];
                let (xs, ws) = (&case.xs, &case.ws);
                let post = Post { packed: Some(&packed), act: Act::None, residual: None };
                pool.install(|| conv_packed(&x, xs, &w, ws, Some(&b), &p, &mut y, &ys, threads, post));
                close(&y, &want);
                // And with an activation in the product's epilogue (each case another).
                let post = Post { packed: Some(&packed), act, residual: None };
                pool.install(|| conv_packed(&x, xs, &w, ws, Some(&b), &p, &mut y, &ys, threads, post));
                close(&y, &want.iter().map(|&v| act.scalar(v)).collect::<Vec<_>>());
            }
        }
        // The activation after the plain product (or in the depthwise kernel's registers).
        let mut y = vec![f32::NAN; want.len()];
        conv_packed(
            &x,
            &case.xs,
            &w,
            &case.ws,
            Some(&b),
            &p,
            &mut y,
            &ys,
            1,
            Post { packed: None, act, residual: None },
        );
        close(&y, &want.iter().map(|&v| act.scalar(v)).collect::<Vec<_>>());
        // f64 and no bias.
        let want = naive(&x, &case.xs, &w, &case.ws, None, &case.strides, &case.dil, &case.pads, case.group, &ys);
        let x64: Vec<f64> = x.iter().map(|&v| v as f64).collect();
        let w64: Vec<f64> = w.iter().map(|&v| v as f64).collect();
        let mut y = vec![f64::NAN; want.len()];
        conv(&x64, &case.xs, &w64, &case.ws, None, &p, &mut y, &ys, 1);
        close(&y.iter().map(|&v| v as f32).collect::<Vec<_>>(), &want);
    }
    if crate::kernels::sgemm512::available() {
        assert_eq!(packed_runs, 10 * 2, "the ten cases with 12 or more channels per group run packed");
    }
}

#[test]
fn conv_tiles_columns() {
    // Enough columns × rows to need several im2col tiles.
    let xs = [1, 8, 200, 200];
    let ws = [2, 8, 3, 3];
    let x = values(xs.iter().product(), 1);
    let w = values(ws.iter().product(), 2);
    let p = ConvParams { kernel: &[3, 3], strides: &[1, 1], dilations: &[1, 1], pads: &[1, 1, 1, 1], group: 1 };
    let ys = [1, 2, 200, 200];
    let want = naive(&x, &xs, &w, &ws, None, &[1, 1], &[1, 1], &[1, 1, 1, 1], 1, &ys);
    let pool = rayon::ThreadPoolBuilder::new().num_threads(2).build().unwrap();
    for threads in [1, 2] {
        // Two threads take a range of columns each (several tiles apiece).
        let mut y = vec![0.0; ys.iter().product()];
        pool.install(|| conv(&x, &xs, &w, &ws, None, &p, &mut y, &ys, threads));
        close(&y, &want);
    }
    // Packed weights, a bias and the ReLU over column ranges, strided.
    let (xs, ws, ys) = ([1, 8, 41, 43], [16, 8, 3, 3], [1, 16, 21, 22]);
    let x = values(xs.iter().product(), 3);
    let w = values(ws.iter().product(), 4);
    let b = values(16, 5);
    let p = ConvParams { kernel: &[3, 3], strides: &[2, 2], dilations: &[1, 1], pads: &[1, 1, 1, 1], group: 1 };
    let want: Vec<f32> = naive(&x, &xs, &w, &ws, Some(&b), &[2, 2], &[1, 1], &[1, 1, 1, 1], 1, &ys)
        .into_iter()
        .map(|v| v.max(0.0))
        .collect();
    let packed = PackedWeights::new(&w, &ws, 1);
    for packed in [None, packed.as_ref()] {
        let mut y = vec![f32::NAN; want.len()];
        let post = Post { packed, act: Act::Relu, residual: None };
        pool.install(|| conv_packed(&x, &xs, &w, &ws, Some(&b), &p, &mut y, &ys, 2, post));
        close(&y, &want);
    }
}

/// Bands of output columns written in place by each thread (`cols.rs`): a packed unfolded product (fewer than 32
/// weights per channel, so not read in place), a pointwise one with few rows (the product splits its columns), and
/// a 3-D one; two threads give the one-thread bytes, and both the reference within rounding.
#[test]
fn packed_products_split_by_columns_write_in_place() {
    let pool = rayon::ThreadPoolBuilder::new().num_threads(2).build().unwrap();
    // (input shape, weight shape, strides, pads)
    type Case<'a> = (&'a [usize], &'a [usize], &'a [usize], &'a [usize]);
    let cases: [Case<'_>; 3] = [
        (&[1, 3, 47, 45], &[16, 3, 3, 3], &[2, 2], &[0, 1, 1, 0]),
        (&[1, 20, 15, 17], &[16, 20, 1, 1], &[1, 1], &[0, 0, 0, 0]),
        (&[1, 2, 6, 9, 11], &[13, 2, 1, 2, 2], &[1, 1, 1], &[0, 0, 1, 0, 1, 0]),
    ];
    for (ci, (xs, ws, strides, pads)) in cases.into_iter().enumerate() {
        let s = xs.len() - 2;
        let dil = vec![1; s];
        let mut ys = vec![xs[0], ws[0]];
        for d in 0..s {
            ys.push((xs[2 + d] + pads[d] + pads[s + d] - ws[2 + d]) / strides[d] + 1);
        }
        assert!(ys[2..].iter().product::<usize>() >= 2 * 64, "case {ci}: enough columns for two bands");
        let x = values(xs.iter().product(), 40 + ci as u64);
        let w = values(ws.iter().product(), 50 + ci as u64);
        let b = values(ws[0], 60 + ci as u64);
        let want: Vec<f32> =
            naive(&x, xs, &w, ws, Some(&b), strides, &dil, pads, 1, &ys).into_iter().map(|v| v.max(0.0)).collect();
        let Some(packed) = PackedWeights::new(&w, ws, 1) else { continue };
        let p = ConvParams { kernel: &ws[2..], strides, dilations: &dil, pads, group: 1 };
        let post = Post { packed: Some(&packed), act: Act::Relu, residual: None };
        let mut runs = Vec::new();
        for threads in [1, 2] {
            let mut y = vec![f32::NAN; want.len()];
            pool.install(|| conv_packed(&x, xs, &w, ws, Some(&b), &p, &mut y, &ys, threads, post));
            close(&y, &want);
            runs.push(y);
        }
        let bits = |y: &[f32]| y.iter().map(|v| v.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&runs[0]), bits(&runs[1]), "case {ci}: two threads, other bytes");
    }
}

/// A residual term in the epilogue (`residual.rs`, rule 3): every path of `conv_packed` gives the bits of the bare
/// convolution followed by the addition and the activation, on one thread and two. Paths: a pointwise product
/// (rows split, then columns; bands of rows over several blocks of K; two images; two groups), one over more than
/// a block of K, one of a single position (`narrow.rs`), 3×3 read in
/// place at strides 1 and 2 (tiles straight to the output and through the scratch), an unfolded product of few
/// weights per channel, several small images unfolded together, weights not packed, and a depthwise convolution
/// (the last three by a pass after).
#[test]
fn residual_in_the_epilogue_gives_the_unfused_bits() {
    // (input shape, weight shape, strides, pads, group)
    type Case<'a> = (&'a [usize], &'a [usize], &'a [usize], &'a [usize], usize);
    let cases: [Case<'_>; 17] = [
        (&[1, 20, 15, 17], &[24, 20, 1, 1], &[1, 1], &[0, 0, 0, 0], 1),
        // ResNet-50's last block ends: 120 rows in two bands on two threads, three blocks of K run rows outermost.
        (&[1, 600, 7, 7], &[120, 600, 1, 1], &[1, 1], &[0, 0, 0, 0], 1),
        // Two images, and two groups of packed weights: blocks that do not start at the output's first element.
        (&[2, 16, 9, 11], &[24, 16, 1, 1], &[1, 1], &[0, 0, 0, 0], 1),
        (&[1, 32, 8, 10], &[24, 16, 3, 3], &[1, 1], &[1, 1, 1, 1], 2),
        (&[1, 16, 9, 11], &[64, 16, 1, 1], &[1, 1], &[0, 0, 0, 0], 1),
        (&[1, 300, 6, 7], &[12, 300, 1, 1], &[1, 1], &[0, 0, 0, 0], 1),
        (&[1, 40, 1, 1], &[30, 40, 1, 1], &[1, 1], &[0, 0, 0, 0], 1),
        (&[1, 8, 19, 37], &[16, 8, 3, 3], &[1, 1], &[1, 1, 1, 1], 1),
        (&[1, 12, 23, 29], &[24, 12, 3, 3], &[2, 2], &[1, 1, 1, 1], 1),
        (&[1, 2, 30, 33], &[13, 2, 1, 2], &[1, 1], &[0, 0, 0, 1], 1),
        (&[3, 4, 5, 6], &[12, 4, 3, 3], &[1, 1], &[0, 0, 0, 0], 1),
        (&[1, 6, 10, 12], &[5, 6, 3, 3], &[1, 1], &[1, 1, 1, 1], 1),
        (&[1, 16, 12, 14], &[16, 1, 3, 3], &[1, 1], &[1, 1, 1, 1], 16),
        // A 1×1 stride-2 projection (ResNet's shortcuts): no dropped columns, tiles stored across output rows.
        (&[1, 24, 22, 18], &[36, 24, 1, 1], &[2, 2], &[0, 0, 0, 0], 1),
        // Four output positions: unfolded, then the narrow product.
        (&[1, 16, 4, 4], &[12, 16, 3, 3], &[2, 2], &[1, 1, 1, 1], 1),
        // Small planes (`conv_lanes.rs` when packed for their output): two images, two groups.
        (&[2, 16, 13, 13], &[64, 16, 3, 3], &[1, 1], &[1, 1, 1, 1], 1),
        (&[1, 64, 7, 7], &[128, 32, 3, 3], &[1, 1], &[1, 1, 1, 1], 2),
    ];
    let pool = rayon::ThreadPoolBuilder::new().num_threads(2).build().unwrap();
    let bits = |y: &[f32]| y.iter().map(|v| v.to_bits()).collect::<Vec<_>>();
    let mut lanes = 0;
    for (ci, (xs, ws, strides, pads, group)) in cases.into_iter().enumerate() {
        let s = xs.len() - 2;
        let dil = vec![1; s];
        let mut ys = vec![xs[0], ws[0]];
        for d in 0..s {
            ys.push((xs[2 + d] + pads[d] + pads[s + d] - ws[2 + d]) / strides[d] + 1);
        }
        let x = values(xs.iter().product(), 70 + ci as u64);
        let w = values(ws.iter().product(), 80 + ci as u64);
        let b = values(ws[0], 90 + ci as u64);
        let r = values(ys.iter().product(), 100 + ci as u64);
        let act = ACTS[ci % ACTS.len()];
        let p = ConvParams { kernel: &ws[2..], strides, dilations: &dil, pads, group };
        // Packed as `PackedWeights::new` packs (the panels), and as a program packs them for this output (the
        // channel lanes for the second case, 600 → 120 pointwise at 7², and the last two).
        for packed in [PackedWeights::new(&w, ws, group), PackedWeights::for_output(Weights::Slice(&w), ws, &p, &ys)] {
            lanes += usize::from(packed.as_ref().is_some_and(|p| p.lanes.is_some()));
            for threads in [1, 2] {
                let run = |post: Post<'_, f32>| {
                    let mut y = vec![f32::NAN; r.len()];
                    pool.install(|| conv_packed(&x, xs, &w, ws, Some(&b), &p, &mut y, &ys, threads, post));
                    y
                };
                let bare = run(Post { packed: packed.as_ref(), act: Act::None, residual: None });
                let want: Vec<f32> = bare.iter().zip(&r).map(|(&v, &t)| act.scalar(v + t)).collect();
                let fused = run(Post { packed: packed.as_ref(), act, residual: Some(&r) });
                assert_eq!(bits(&fused), bits(&want), "case {ci}, {threads} thread(s), {act:?}");
            }
        }
    }
    assert!(!crate::kernels::sgemm512::available() || lanes == 3, "{lanes} cases in the channel lanes");
}

/// Weights packed for their output (`PackedWeights::for_output`): convolutions `conv_lanes.rs` takes (batches of
/// two, two groups, a unit axis dropped, with and without a bias) match the definition and hold the bytes
/// `bytes_for_output` says.
#[test]
fn weights_packed_for_their_output_take_the_lanes_where_wanted() {
    if !crate::kernels::sgemm512::available() {
        return;
    }
    // (input shape, weight shape, group, pads): SqueezeNet's 13², two groups of 64 outputs at 7², a 1-D
    // convolution written as 2-D with a unit axis.
    type Case = ([usize; 4], [usize; 4], usize, [usize; 4]);
    let cases: [Case; 3] = [
        ([2, 16, 13, 13], [64, 16, 3, 3], 1, [1, 1, 1, 1]),
        ([1, 32, 7, 7], [128, 16, 3, 3], 2, [1, 1, 1, 1]),
        ([1, 64, 1, 30], [64, 64, 1, 9], 1, [0, 4, 0, 4]),
    ];
    for (ci, (xs, ws, group, pads)) in cases.iter().enumerate() {
        let ys: Vec<usize> = vec![xs[0], ws[0], xs[2], xs[3]];
        let p = ConvParams { kernel: &ws[2..], strides: &[1, 1], dilations: &[1, 1], pads, group: *group };
        let (x, w, b) =
            (values(xs.iter().product(), 40 + ci as u64), values(ws.iter().product(), 50), values(ws[0], 60));
        let packed = PackedWeights::for_output(Weights::Slice(&w), ws, &p, &ys).expect("packed");
        assert!(packed.lanes.is_some(), "case {ci}: packed with the channels in lanes");
        assert_eq!(packed.bytes(), PackedWeights::bytes_for_output(ws, &p, &ys));
        for bias in [None, Some(&b[..])] {
            let want = naive(&x, xs, &w, ws, bias, &[1, 1], &[1, 1], pads, *group, &ys);
            for threads in [1, 2] {
                let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build().unwrap();
                let mut y = vec![f32::NAN; want.len()];
                let post = Post { packed: Some(&packed), act: Act::None, residual: None };
                pool.install(|| conv_packed(&x, xs, &[], ws, bias, &p, &mut y, &ys, threads, post));
                close(&y, &want);
            }
        }
    }
}
