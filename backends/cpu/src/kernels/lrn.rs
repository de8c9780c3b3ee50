//! ONNX `LRN`, local response normalisation across channels (AlexNet, GoogLeNet):
//! `y = x / (bias + alpha / size · Σ x²)^beta`, the sum over the channels `c − ⌊(size − 1) / 2⌋ ..= c + ⌈(size −
//! 1) / 2⌉` that exist.
//!
//! It was one thread and a `powf` per element: the suite's Inception v1 spent 9 of its 54 ms in its two LRNs. The
//! rules:
//!
//! 1. **Each output channel is a row of its own**: its window's squares summed in channel order (the reference's
//!    order), then divided; rows split over threads from [`PARALLEL_MIN`] elements, and the f32 loops compiled for
//!    AVX-512F where the CPU has it, so that the sums and the divisions run 16 lanes wide.
//! 2. **The power without `powf` where the exponent allows**: `beta` 0.75 (every model that uses LRN: ONNX's default
//!    and Caffe's) is `√s · √√s`, 0.5 is `√s`, 1 is `s`; square roots are correctly rounded, so `s^0.75` is within
//!    two units in the last place of the exact power. Any other `beta` takes `powf`.
//!
//! Tests: `lrn_by_hand` (rules 1 and 2 on each exponent), `rows_on_threads_match_one_thread` here; the ONNX node
//! tests `test_lrn` and `test_lrn_default` in the conformance run.

use rayon::prelude::*;

use super::gemm::Float;

/// Elements from which [`lrn`] splits its rows over threads (rule 1).
pub const PARALLEL_MIN: usize = 16_384;

/// The power `s^beta` a row divides by (rule 2).
#[derive(Clone, Copy)]
enum Power<T> {
    One,
    Half,
    ThreeQuarters,
    Any(T),
}

/// What every row needs.
struct Params<T> {
    c: usize,
    inner: usize,
    before: usize,
    after: usize,
    coef: T,
    bias: T,
    power: Power<T>,
}

impl<T: Float> Params<T> {
    fn new(c: usize, inner: usize, size: usize, alpha: f32, beta: f32, bias: f32) -> Params<T> {
        let power = match beta {
            1.0 => Power::One,
            0.5 => Power::Half,
            0.75 => Power::ThreeQuarters,
            b => Power::Any(T::from_f32(b)),
        };
        Params {
            c,
            inner,
            before: (size - 1) / 2,
            after: size / 2, // ⌈(size − 1) / 2⌉
            coef: T::from_f64(alpha as f64 / size as f64),
            bias: T::from_f32(bias),
            power,
        }
    }
}

/// ONNX `LRN` over `x` (`[N, C, …]`, channels on axis 1) into `y`, on up to `threads` threads.
///
/// # Panics
/// On inconsistent shapes or slice lengths, or `size` 0.
#[allow(clippy::too_many_arguments)]
pub fn lrn<T: Float>(
    x: &[T],
    x_shape: &[usize],
    size: usize,
    alpha: f32,
    beta: f32,
    bias: f32,
    y: &mut [T],
    threads: usize,
) {
    assert!(x_shape.len() >= 2, "lrn: input must have rank ≥ 2, got {x_shape:?}");
    assert!(size >= 1, "lrn: size must be ≥ 1");
    let (n, c, inner) = (x_shape[0], x_shape[1], x_shape[2..].iter().product::<usize>());
    assert_eq!(x.len(), n * c * inner, "lrn: X length");
    assert_eq!(y.len(), x.len(), "lrn: Y length");
    if x.is_empty() {
        return;
    }
    let rows = n * c;
    let per = if threads > 1 && x.len() >= PARALLEL_MIN { rows.div_ceil(threads) } else { rows };
    let part = |r0: usize, yp: &mut [T]| {
        #[cfg(target_arch = "x86_64")]
        if std::any::TypeId::of::<T>() == std::any::TypeId::of::<f32>() && super::sgemm512::available() {
            // SAFETY: `T` is f32 (its TypeId, just compared), so these are the same slices retyped.
            let (x, yp) = unsafe { (&*(x as *const [T] as *const [f32]), &mut *(yp as *mut [T] as *mut [f32])) };
            let p = Params::<f32>::new(c, inner, size, alpha, beta, bias);
            // SAFETY: AVX-512F is available (checked just above).
            unsafe { lrn_avx512(x, &p, r0, yp) };
            return;
        }
        lrn_rows(x, &Params::<T>::new(c, inner, size, alpha, beta, bias), r0, yp);
    };
    if per < rows {
        y.par_chunks_mut(per * inner).enumerate().for_each(|(i, yp)| part(i * per, yp));
    } else {
        part(0, y);
    }
}

/// [`lrn_rows`] for f32 with its loops compiled for AVX-512F (rule 1).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
fn lrn_avx512(x: &[f32], p: &Params<f32>, r0: usize, y: &mut [f32]) {
    lrn_rows(x, p, r0, y);
}

/// Rows `r0 ..` (row = image · C + channel) of the output, `y` holding whole rows.
#[inline(always)]
fn lrn_rows<T: Float>(x: &[T], p: &Params<T>, r0: usize, y: &mut [T]) {
    let inner = p.inner;
    let mut acc = vec![T::ZERO; inner];
    for (i, yr) in y.chunks_mut(inner).enumerate() {
        let (image, ch) = ((r0 + i) / p.c, (r0 + i) % p.c);
        let xb = &x[image * p.c * inner..][..p.c * inner];
        acc.fill(T::ZERO);
        for k in ch.saturating_sub(p.before)..(ch + p.after + 1).min(p.c) {
            for (a, &v) in acc.iter_mut().zip(&xb[k * inner..][..inner]) {
                *a += v * v;
            }
        }
        let (coef, bias) = (p.coef, p.bias);
        let terms = yr.iter_mut().zip(&xb[ch * inner..][..inner]).zip(&acc);
        match p.power {
            Power::One => terms.for_each(|((y, &x), &a)| *y = x / (bias + coef * a)),
            Power::Half => terms.for_each(|((y, &x), &a)| *y = x / (bias + coef * a).sqrt()),
            Power::ThreeQuarters => terms.for_each(|((y, &x), &a)| {
                let root = (bias + coef * a).sqrt();
                *y = x / (root * root.sqrt());
            }),
            Power::Any(beta) => terms.for_each(|((y, &x), &a)| *y = x / (bias + coef * a).powf(beta)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::lrn;

    fn close(got: &[f32], want: &[f32], tol: f32) {
        for (i, (g, w)) in got.iter().zip(want).enumerate() {
            assert!((g - w).abs() <= tol * w.abs().max(1.0), "[{i}]: {g} vs {w}");
        }
    }

    /// The reference's arithmetic in f64, with `powf`.
    fn reference(x: &[f32], shape: &[usize], size: usize, alpha: f32, beta: f32, bias: f32) -> Vec<f32> {
        let (c, inner) = (shape[1], shape[2..].iter().product::<usize>());
        let (before, after) = ((size - 1) / 2, size / 2);
        (0..x.len())
            .map(|at| {
                let (image, ch, i) = (at / (c * inner), at / inner % c, at % inner);
                let sum: f64 = (ch.saturating_sub(before)..(ch + after + 1).min(c))
                    .map(|k| f64::from(x[(image * c + k) * inner + i]).powi(2))
                    .sum();
                let s = f64::from(bias) + f64::from(alpha) / size as f64 * sum;
                (f64::from(x[at]) / s.powf(f64::from(beta))) as f32
            })
            .collect()
    }

    #[test]
    fn lrn_by_hand() {
        // [1, 3, 1, 1], size 2: window for channel c is [c, c + 1].
        let x = [1.0f32, 2.0, 3.0];
        let mut y = [0.0; 3];
        lrn(&x, &[1, 3, 1, 1], 2, 2.0, 1.0, 1.0, &mut y, 1);
        // divisors: 1 + 1·(1 + 4) = 6, 1 + (4 + 9) = 14, 1 + 9 = 10.
        close(&y, &[1.0 / 6.0, 2.0 / 14.0, 3.0 / 10.0], 1e-6);
        // size 3: window [c − 1, c + 1]; beta 0.5, alpha 3 (coefficient 1).
        lrn(&x, &[1, 3, 1, 1], 3, 3.0, 0.5, 2.0, &mut y, 1);
        close(&y, &[1.0 / 7.0f32.sqrt(), 2.0 / 16.0f32.sqrt(), 3.0 / 15.0f32.sqrt()], 1e-6);
        // Each exponent's path, 0.75 by square roots and 0.6 by `powf`, against f64 on 7 channels of 40.
        let shape = [2, 7, 5, 8];
        let x: Vec<f32> = (0..2 * 7 * 40).map(|i| ((i * 37 % 101) as f32 - 50.0) / 9.0).collect();
        for beta in [0.75, 0.6, 0.5, 1.0] {
            let mut y = vec![0.0; x.len()];
            lrn(&x, &shape, 5, 1e-2, beta, 1.5, &mut y, 1);
            close(&y, &reference(&x, &shape, 5, 1e-2, beta, 1.5), 2e-6);
        }
    }

    #[test]
    fn rows_on_threads_match_one_thread() {
        let shape = [1, 64, 24, 24];
        let x: Vec<f32> = (0..64 * 576).map(|i| ((i * 53 % 97) as f32 - 48.0) / 7.0).collect();
        assert!(x.len() >= super::PARALLEL_MIN);
        let (mut one, mut two) = (vec![0.0; x.len()], vec![0.0; x.len()]);
        lrn(&x, &shape, 5, 1e-4, 0.75, 1.0, &mut one, 1);
        lrn(&x, &shape, 5, 1e-4, 0.75, 1.0, &mut two, 3);
        assert_eq!(one, two);
    }
}
