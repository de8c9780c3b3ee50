//! `DFT` and `STFT` imported as one product with a constant matrix of cosines and sines ([`super::expand`]), so a
//! transform runs on the fast product kernels. The rules:
//! 1. **One product per transform.** The transformed axis and the real/imaginary axis are moved last, the rest
//!    flattened into rows, and the rows multiplied by a matrix `W` of shape `[parts · n, 2 · bins]` (`[parts · n,
//!    n_out]` for a real inverse), made at compile time in f64 and rounded once to the input's type. A direct
//!    transform costs `n · bins` multiply-adds per row where an FFT costs `n log n`; the lengths models use (frames of
//!    a few hundred samples) keep it below a convolution layer's cost.
//! 2. **Lengths as numpy's.** `dft_length` truncates the signal or pads it with zeros; `onesided` keeps the first
//!    `⌊n/2⌋ + 1` bins; an inverse divides by `n`; an inverse with `onesided` (opset 20) takes a half spectrum and
//!    gives a real signal of length `dft_length`, `2 · (bins − 1)` by default, as `numpy.fft.irfft` does.
//! 3. **Static lengths.** `dft_length`, `axis` (an input from opset 20), `STFT`'s `frame_step` and `frame_length`
//!    set the output's shape, so they must be known at compile time ([`super::functions::static_inputs`]); the
//!    window may be any value. The matrix is checked against the size limit before it is made.
//! 4. **STFT frames** are gathered with constant indices (`frames = 1 + (length − frame_length) / frame_step`),
//!    multiplied by the window, and transformed as rule 1 along the frame's axis.

use stowage_runtime::DatumType;

use super::expand::{int, ints, Ex};
use crate::consts;
use crate::error::ImportErrorKind as E;
use crate::ir::ValueType;

/// The op types this file expands.
pub const SPECTRAL_OPS: &[&str] = &["DFT", "STFT"];

/// Expands the op of `ex`; its outputs.
pub(super) fn expand(ex: &mut Ex<'_, '_>) -> Result<Vec<Option<String>>, E> {
    Ok(vec![Some(match ex.node.op_type() {
        "DFT" => dft_node(ex)?,
        "STFT" => stft(ex)?,
        other => return Err(ex.fail(format!("'{other}' has no expansion"))),
    })])
}

/// The one integer of constant input `i` (rule 3), if given.
fn const_int(ex: &Ex<'_, '_>, i: usize, what: &str) -> Result<Option<i64>, E> {
    let Some(v) = ex.optional(i) else { return Ok(None) };
    let t = ex.value(&v).ok_or_else(|| {
        ex.needs_value(format!("{what} sets the output's shape and must be known at compile time (--input-value)"))
    })?;
    match consts::to_i64s(t).map_err(|e| ex.fail(e.to_string()))?.as_slice() {
        [k] => Ok(Some(*k)),
        other => Err(ex.fail(format!("{what} must have one element, found {}", other.len()))),
    }
}

/// An error unless a value of type `ty`, made by the expansion as `what`, is within the size limit.
fn check_limit(ex: &Ex<'_, '_>, what: &str, ty: &ValueType) -> Result<(), E> {
    match ty.byte_len() {
        Some(b) if b <= ex.limit() => Ok(()),
        bytes => Err(E::TooLarge {
            what: format!("node '{}' ({}): {what}", ex.name, ex.node.op_type()),
            ty: ty.to_string(),
            bytes: bytes.unwrap_or(usize::MAX),
            limit: ex.limit(),
        }),
    }
}

/// A transform: its direction, and whether the spectrum is one-sided.
#[derive(Clone, Copy)]
struct Transform {
    inverse: bool,
    onesided: bool,
}

fn dft_node(ex: &mut Ex<'_, '_>) -> Result<String, E> {
    let x = ex.input(0)?;
    let xt = ex.ty(&x)?;
    let a = ex.attrs();
    let err = |e| ex.attr_err(e);
    let t = Transform {
        inverse: a.int_or("inverse", 0).map_err(err)? != 0,
        onesided: a.int_or("onesided", 0).map_err(err)? != 0,
    };
    let axis =
        if ex.opset() >= 20 { const_int(ex, 2, "axis")?.unwrap_or(-2) } else { a.int_or("axis", 1).map_err(err)? };
    let length = const_int(ex, 1, "dft_length")?;
    dft(ex, &x, &xt, axis, length, t)
}

/// The transform of `x` (of type `xt`: `[…, n at axis, …, 1 or 2]`) along `axis` (rules 1, 2).
fn dft(
    ex: &mut Ex<'_, '_>,
    x: &str,
    xt: &ValueType,
    axis: i64,
    length: Option<i64>,
    t: Transform,
) -> Result<String, E> {
    let r = xt.rank();
    let parts = xt.shape.last().copied().unwrap_or(0);
    if r < 2 || !(parts == 1 || parts == 2) || !xt.dt.is_float() {
        return Err(
            ex.fail(format!("input is {xt}: it must be a float tensor whose last axis is 1 (real) or 2 (complex)"))
        );
    }
    // The signal axis: any but the last.
    let a = if axis < 0 { axis + r as i64 } else { axis };
    if !(0..r as i64 - 1).contains(&a) {
        return Err(ex.fail(format!("axis is {axis}: it must name an axis of {xt} other than the last")));
    }
    let a = a as usize;
    let n_in = xt.shape[a];
    let real_out = t.inverse && t.onesided;
    let n = match length {
        Some(k) if k > 0 => k as usize,
        Some(k) => return Err(ex.fail(format!("dft_length is {k}: it must be positive"))),
        None if real_out => 2 * n_in.saturating_sub(1),
        None => n_in,
    };
    if n == 0 {
        return Err(ex.fail(format!("the transform along axis {a} of {xt} has length 0")));
    }
    let bins = if t.onesided && !t.inverse { n / 2 + 1 } else { n };
    let (rows_in, cols) = (parts * n_in, if real_out { n } else { 2 * bins });
    // Checked before it is made, in f64 (the larger of the matrix's two forms).
    let wt = ValueType::new(DatumType::F64, vec![rows_in, cols]);
    check_limit(ex, "its transform matrix", &wt)?;
    let wt = ValueType::new(xt.dt, vec![rows_in, cols]);
    let w = matrix(n_in, parts, n, t);
    let w = consts::from_f64s(xt.dt, &wt.shape, &w).map_err(|e| ex.fail(e.to_string()))?;
    let w = ex.constant("dft", w);
    // [others…, parts, n_in] → [rows, parts · n_in] · W → [others…, parts_out, bins].
    let others: Vec<usize> = (0..r - 1).filter(|&i| i != a).collect();
    let mut perm: Vec<i64> = others.iter().map(|&i| i as i64).collect();
    perm.extend([r as i64 - 1, a as i64]);
    let moved = ex.op("Transpose", &[x], vec![ints("perm", perm)])?;
    let rows: usize = others.iter().map(|&i| xt.shape[i]).product();
    let flat = ex.ints(&[rows as i64, rows_in as i64])?;
    let flat = ex.op("Reshape", &[&moved, &flat], vec![])?;
    let y = ex.op("MatMul", &[&flat, &w], vec![])?;
    let (parts_out, len_out) = if real_out { (1, n) } else { (2, bins) };
    let mut shape: Vec<i64> = others.iter().map(|&i| xt.shape[i] as i64).collect();
    shape.extend([parts_out as i64, len_out as i64]);
    let shape = ex.ints(&shape)?;
    let y = ex.op("Reshape", &[&y, &shape], vec![])?;
    // Back: the bins where the signal axis was, the parts last.
    let k = others.len();
    let back: Vec<i64> = (0..r)
        .map(|p| {
            if p == a {
                k as i64 + 1
            } else if p == r - 1 {
                k as i64
            } else {
                others.iter().position(|&o| o == p).map_or(0, |i| i as i64)
            }
        })
        .collect();
    ex.op("Transpose", &[&y], vec![ints("perm", back)])
}

/// The transform matrix of rule 1, row-major `[parts · n_in, columns]`, rows by (part, sample), columns by (part
/// out, bin).
fn matrix(n_in: usize, parts: usize, n: usize, t: Transform) -> Vec<f64> {
    let tau = std::f64::consts::TAU;
    let nf = n as f64;
    let angle = |k: usize, s: usize| tau * ((k * s) % n) as f64 / nf;
    if t.inverse && t.onesided {
        // A half spectrum to a real signal: bin k (below ⌊n/2⌋ + 1) counts twice but for DC and an even n's last.
        let half = n / 2 + 1;
        let mut w = vec![0.0; parts * n_in * n];
        for k in 0..n_in.min(half) {
            let c = if k == 0 || (n.is_multiple_of(2) && k == n / 2) { 1.0 } else { 2.0 } / nf;
            for s in 0..n {
                let (sin, cos) = angle(k, s).sin_cos();
                w[k * n + s] = c * cos;
                if parts == 2 {
                    w[(n_in + k) * n + s] = -c * sin;
                }
            }
        }
        return w;
    }
    let bins = if t.onesided && !t.inverse { n / 2 + 1 } else { n };
    let (sign, scale) = if t.inverse { (1.0, 1.0 / nf) } else { (-1.0, 1.0) };
    let cols = 2 * bins;
    let mut w = vec![0.0; parts * n_in * cols];
    // y = Σ_s x_s · e^{sign·iθ}: re += xr·cos − xi·sign·sin, im += xr·sign·sin + xi·cos.
    for s in 0..n_in.min(n) {
        for k in 0..bins {
            let (sin, cos) = angle(k, s).sin_cos();
            let sin = sign * sin;
            w[s * cols + k] = scale * cos;
            w[s * cols + bins + k] = scale * sin;
            if parts == 2 {
                w[(n_in + s) * cols + k] = -scale * sin;
                w[(n_in + s) * cols + bins + k] = scale * cos;
            }
        }
    }
    w
}

/// `STFT(signal, frame_step, window?, frame_length?)` (rule 4).
fn stft(ex: &mut Ex<'_, '_>) -> Result<String, E> {
    let x = ex.input(0)?;
    let xt = ex.ty(&x)?;
    if xt.rank() != 3 {
        return Err(ex.fail(format!("signal is {xt}: it must be [batch, length, 1 or 2]")));
    }
    let step = const_int(ex, 1, "frame_step")?.ok_or_else(|| ex.fail("input 1 (frame_step) is required"))?;
    let window = ex.optional(2);
    let wlen = window.as_ref().map(|w| ex.ty(w)).transpose()?;
    let frame = match (const_int(ex, 3, "frame_length")?, &wlen) {
        (Some(f), _) => f,
        (None, Some(w)) if w.rank() == 1 => w.shape[0] as i64,
        (None, Some(w)) => return Err(ex.fail(format!("window is {w}: it must be 1-D"))),
        (None, None) => return Err(ex.fail("needs a window or a frame_length")),
    };
    let len = xt.shape[1] as i64;
    if step <= 0 || frame <= 0 || frame > len {
        return Err(ex.fail(format!(
            "frame_step {step} and frame_length {frame} must be positive, the frame at most the signal's {len}"
        )));
    }
    if let Some(w) = wlen.as_ref().filter(|w| w.shape != [frame as usize]) {
        return Err(ex.fail(format!("window is {w}: it must have frame_length ({frame}) elements")));
    }
    let onesided = ex.attrs().int_or("onesided", 1).map_err(|e| ex.attr_err(e))? != 0;
    let frames = 1 + (len - frame) / step;
    check_limit(ex, "its frame indices", &ValueType::new(DatumType::I64, vec![frames as usize, frame as usize]))?;
    let idx: Vec<i64> = (0..frames).flat_map(|f| (0..frame).map(move |s| f * step + s)).collect();
    let idx = consts::from_i64s(DatumType::I64, &[frames as usize, frame as usize], &idx)
        .map_err(|e| ex.fail(e.to_string()))?;
    let idx = ex.constant("frames", idx);
    // [batch, frames, frame, parts]
    let framed = ex.op("Gather", &[&x, &idx], vec![int("axis", 1)])?;
    let framed = match window {
        Some(w) => {
            let shape = ex.ints(&[1, 1, frame, 1])?;
            let w = ex.op("Reshape", &[&w, &shape], vec![])?;
            ex.op("Mul", &[&framed, &w], vec![])?
        }
        None => framed,
    };
    let ft = ex.ty(&framed)?;
    dft(ex, &framed, &ft, 2, None, Transform { inverse: false, onesided })
}
