//! `ConvTranspose` as a convolution ([`super::expand`]): the input upsampled by its strides with zeros between
//! elements (`Reshape`, `Pad`, `Reshape`), cropped or padded by `dilation × (kernel − 1) − pad` on each side
//! (`output_padding` at the end), and convolved at stride 1 with the weights' groups swapped to
//! `[M, C / group, k…]` and every spatial axis reversed (`Reshape`, `Transpose`, `Slice` with step −1: folded at
//! import for constant weights). The output size is the operator's,
//! `stride × (in − 1) + output_padding + dilation × (kernel − 1) + 1 − pad_begin − pad_end`; `output_shape` and
//! `auto_pad` set the pads as onnxruntime does and the node suite's cases expect (`SAME_LOWER` puts the odd one at
//! the start, `SAME_UPPER` and `output_shape` at the end; `output_shape` overrides `pads`).
//!
//! The convolution reads the zeros it inserted: `stride²` more multiply-adds than a direct transposed kernel on
//! 2-D inputs. A strided, undilated one is one convolution per phase of its strides instead (`conv_phases.rs`);
//! this form takes the rest: strides of 1 (a plain convolution, no zero inserted), dilations, and outputs that
//! reach past the phase form's (a large `output_padding` or `output_shape`).

use super::expand::{int, ints, Ex};
use crate::error::ImportErrorKind as E;

fn list(ex: &Ex<'_, '_>, attr: &str, len: usize, default: i64) -> Result<Vec<i64>, E> {
    match ex.attrs().ints(attr).map_err(|e| ex.attr_err(e))? {
        None => Ok(vec![default; len]),
        Some(v) if v.len() == len => Ok(v),
        Some(v) => Err(ex.attr_fail(attr, format!("has {} values, the input has {len} spatial axes", v.len()))),
    }
}

/// Expands the `ConvTranspose` of `ex`; its output `[Y]`.
pub(super) fn expand(ex: &mut Ex<'_, '_>) -> Result<Vec<Option<String>>, E> {
    let (x, w) = (ex.input(0)?, ex.input(1)?);
    let (xt, wt) = (ex.ty(&x)?, ex.ty(&w)?);
    if xt.rank() < 3 || wt.rank() != xt.rank() {
        return Err(ex.fail(format!("X is {xt} and W is {wt}: both need the same rank, at least 3")));
    }
    let r = xt.rank() - 2;
    let a = ex.attrs();
    let group = a.int_or("group", 1).map_err(|e| ex.attr_err(e))?;
    let c = xt.shape[1];
    if group < 1 || c % group as usize != 0 || wt.shape[0] != c {
        return Err(ex.fail(format!("X is {xt} and W is {wt}: W needs X's {c} channels first, in group {group}")));
    }
    let g = group as usize;
    let m = wt.shape[1].checked_mul(g).ok_or_else(|| ex.fail(format!("W is {wt}: its output channels overflow")))?;
    let kernel: Vec<i64> = wt.shape[2..].iter().map(|&k| k as i64).collect();
    if let Some(k) = a.ints("kernel_shape").map_err(|e| ex.attr_err(e))? {
        if k != kernel {
            return Err(ex.attr_fail("kernel_shape", format!("is {k:?}, W's kernel is {kernel:?}")));
        }
    }
    let strides = list(ex, "strides", r, 1)?;
    let dilations = list(ex, "dilations", r, 1)?;
    let out_pad = list(ex, "output_padding", r, 0)?;
    for (attr, v, min) in [("strides", &strides, 1), ("dilations", &dilations, 1), ("output_padding", &out_pad, 0)] {
        if v.iter().any(|&s| s < min || s > i64::from(i32::MAX)) {
            return Err(ex.attr_fail(attr, format!("{v:?} must be {min} to 2^31-1")));
        }
    }
    let auto_pad = a.string("auto_pad").map_err(|e| ex.attr_err(e))?.unwrap_or_else(|| "NOTSET".into());
    let input: Vec<i64> = xt.shape[2..].iter().map(|&d| d as i64).collect();
    // The full output size of each axis, in i128 (strides and dilations up to 2^31 − 1 times sizes up to 2^63),
    // bounded so that what is computed from it below fits an i64.
    let wide = |v: i128| i64::try_from(v).ok().filter(|&v| v <= i64::from(i32::MAX) * 1024);
    let mut full = Vec::with_capacity(r);
    for i in 0..r {
        let (s, d, k, o) = (strides[i] as i128, dilations[i] as i128, kernel[i] as i128, out_pad[i] as i128);
        let v = wide(s * (input[i] as i128 - 1) + o + (k - 1) * d + 1).filter(|_| input[i] >= 1).ok_or_else(|| {
            ex.fail(format!("X is {xt} and W is {wt}: the output's size along spatial axis {i} is out of range"))
        })?;
        full.push(v);
    }
    let output_shape = a.ints("output_shape").map_err(|e| ex.attr_err(e))?;
    let (mut begin, mut end) = (vec![0i64; r], vec![0i64; r]);
    let wanted = match (&output_shape, auto_pad.as_str()) {
        (Some(o), _) => Some(if o.len() == r + 2 { o[2..].to_vec() } else { o.clone() }),
        (None, "SAME_UPPER" | "SAME_LOWER") => Some((0..r).map(|i| input[i] * strides[i]).collect()),
        (None, "NOTSET" | "" | "VALID") => None,
        (None, other) => return Err(ex.attr_fail("auto_pad", format!("unknown value '{other}'"))),
    };
    match wanted {
        Some(o) if o.len() != r || o.iter().any(|&d| d < 1) => {
            return Err(ex.attr_fail("output_shape", format!("{o:?} must give {r} positive sizes")))
        }
        Some(o) => {
            for i in 0..r {
                let total = full[i] - o[i];
                if total < 0 {
                    end[i] = total; // a larger output: the extra positions see only zeros (and the bias)
                } else if auto_pad == "SAME_LOWER" {
                    (begin[i], end[i]) = (total - total / 2, total / 2);
                } else {
                    (begin[i], end[i]) = (total / 2, total - total / 2);
                }
            }
        }
        None if auto_pad == "VALID" => {}
        None => {
            let pads = list(ex, "pads", 2 * r, 0)?;
            if pads.iter().any(|&p| !(0..=i64::from(i32::MAX)).contains(&p)) {
                return Err(ex.attr_fail("pads", format!("{pads:?} must be 0 to 2^31-1")));
            }
            (begin, end) = (pads[..r].to_vec(), pads[r..].to_vec());
        }
    }
    for i in 0..r {
        if full[i] - begin[i] - end[i] < 1 {
            return Err(ex.fail(format!("its output would have no element along spatial axis {i}")));
        }
    }

    let n = xt.shape[0] as i64;
    // Strided, undilated: the phase form, which reads no inserted zero (`conv_phases.rs`).
    let out: Vec<i64> = (0..r).map(|i| full[i] - begin[i] - end[i]).collect();
    let bias = ex.optional(2);
    let geo = super::conv_phases::Geometry {
        x: &x,
        w: &w,
        bias: bias.as_deref(),
        n,
        c: c as i64,
        m: m as i64,
        group,
        input: &input,
        kernel: &kernel,
        strides: &strides,
        dilations: &dilations,
        begin: &begin,
        out: &out,
    };
    if geo.applies() {
        return super::conv_phases::expand(ex, &geo);
    }

    // Zeros between the input's elements: [N, C, d1, 1, d2, 1…] padded to [N, C, d1, s1, d2, s2…].
    let mut up = x.clone();
    let mut len = input.clone();
    if strides.iter().any(|&s| s > 1) {
        let mut split = vec![n, c as i64];
        let mut pads_end = vec![0i64, 0];
        for i in 0..r {
            split.extend([input[i], 1]);
            pads_end.extend([0, strides[i] - 1]);
        }
        let shape = ex.ints(&split)?;
        let spread = ex.op("Reshape", &[&up, &shape], vec![])?;
        let mut pads = vec![0i64; split.len()];
        pads.extend(pads_end);
        let pads = ex.ints(&pads)?;
        let padded = ex.op("Pad", &[&spread, &pads], vec![])?;
        len = (0..r).map(|i| input[i] * strides[i]).collect();
        let mut merged = vec![n, c as i64];
        merged.extend(&len);
        let shape = ex.ints(&merged)?;
        up = ex.op("Reshape", &[&padded, &shape], vec![])?;
    }
    // The convolution's pads: the kernel's reach less the transposed pads, less the zeros after the last element.
    let lo: Vec<i64> = (0..r).map(|i| dilations[i] * (kernel[i] - 1) - begin[i]).collect();
    let hi: Vec<i64> =
        (0..r).map(|i| dilations[i] * (kernel[i] - 1) - end[i] + out_pad[i] - (strides[i] - 1)).collect();
    if lo.iter().chain(&hi).any(|&p| p < 0) {
        let starts: Vec<i64> = lo.iter().map(|&p| (-p).max(0)).collect();
        let ends: Vec<i64> = (0..r).map(|i| len[i] - (-hi[i]).max(0)).collect();
        let axes: Vec<i64> = (2..2 + r as i64).collect();
        let (s, e, a) = (ex.ints(&starts)?, ex.ints(&ends)?, ex.ints(&axes)?);
        up = ex.op("Slice", &[&up, &s, &e, &a], vec![])?;
    }
    let conv_pads: Vec<i64> = lo.iter().chain(&hi).map(|&p| p.max(0)).collect();

    // Weights [C, M/g, k…] to [M, C/g, k…], every spatial axis reversed.
    let mut grouped = vec![g as i64, (c / g) as i64, (m / g) as i64];
    grouped.extend(&kernel);
    let shape = ex.ints(&grouped)?;
    let wg = ex.op("Reshape", &[&w, &shape], vec![])?;
    let mut perm = vec![0i64, 2, 1];
    perm.extend(3..3 + r as i64);
    let wp = ex.op("Transpose", &[&wg], vec![ints("perm", perm)])?;
    let mut flat = vec![m as i64, (c / g) as i64];
    flat.extend(&kernel);
    let shape = ex.ints(&flat)?;
    let wf = ex.op("Reshape", &[&wp, &shape], vec![])?;
    let (s, e) = (ex.ints(&vec![-1; r])?, ex.ints(&vec![i64::MIN; r])?);
    let (axes, steps) = (ex.ints(&(2..2 + r as i64).collect::<Vec<_>>())?, ex.ints(&vec![-1; r])?);
    let flipped = ex.op("Slice", &[&wf, &s, &e, &axes, &steps], vec![])?;

    let mut inputs = vec![up.as_str(), flipped.as_str()];
    if let Some(b) = &bias {
        inputs.push(b);
    }
    let y = ex.op(
        "Conv",
        &inputs,
        vec![
            ints("kernel_shape", kernel.clone()),
            ints("dilations", dilations),
            ints("pads", conv_pads),
            ints("strides", vec![1; r]),
            int("group", group),
        ],
    )?;
    Ok(vec![Some(y)])
}
