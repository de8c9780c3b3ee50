//! `DeformConv` (2-D) as the reference computes it, in ops ([`super::expand`]): every tap of every output position
//! samples the input bilinearly at its place plus its learned offset, and the samples are convolved as im2col
//! columns. The rules:
//! 1. **Places.** Tap `(a, b)` of output `(i, j)` sits at `(i·stride − pad + a·dilation, j·stride − pad + b·dilation)`
//!    (a constant), plus its offset from `offset` (`[N, offset_group·kh·kw·2, oh, ow]`, y before x).
//! 2. **Sampling** is `GridSample` (bilinear, zeros outside, `align_corners`) over each offset group's channels,
//!    the places normalised by `H − 1` and `W − 1`; `mask` (`[N, offset_group·kh·kw, oh, ow]`, default 1)
//!    scales the samples.
//! 3. **The product** is one batched `MatMul` of the weights, per group, with the columns, plus the bias.
//! 4. Shapes that disagree (channels and groups, the offset's or mask's shape against the output's), inputs of
//!    another rank, and an input one pixel high or wide (its places cannot be normalised) are errors naming the input.

use super::expand::{int, ints, string, Ex};
use crate::error::ImportErrorKind as E;

/// The op types this file expands.
pub const DEFORM_OPS: &[&str] = &["DeformConv"];

fn pair(ex: &Ex<'_, '_>, name: &str, default: [i64; 2]) -> Result<[i64; 2], E> {
    match ex.attrs().ints(name).map_err(|e| ex.attr_err(e))? {
        None => Ok(default),
        Some(v) if v.len() == 2 && v.iter().all(|&x| x >= 1) => Ok([v[0], v[1]]),
        Some(v) => Err(ex.attr_fail(name, format!("is {v:?}: two positive values for a 2-D DeformConv"))),
    }
}

/// Expands `DeformConv`; its output.
pub(super) fn expand(ex: &mut Ex<'_, '_>) -> Result<Vec<Option<String>>, E> {
    let (x, w, off) = (ex.input(0)?, ex.input(1)?, ex.input(2)?);
    let (bias, mask) = (ex.optional(3), ex.optional(4));
    let (xt, wt, ot) = (ex.ty(&x)?, ex.ty(&w)?, ex.ty(&off)?);
    if xt.rank() != 4 || wt.rank() != 4 || ot.rank() != 4 || !xt.dt.is_float() {
        return Err(ex.fail(format!("X is {xt}, W {wt}, offset {ot}: a 2-D DeformConv takes float tensors of rank 4")));
    }
    let (n, c, h, wd) = (xt.shape[0] as i64, xt.shape[1] as i64, xt.shape[2] as i64, xt.shape[3] as i64);
    let (m, cg) = (wt.shape[0] as i64, wt.shape[1] as i64);
    let group = ex.attrs().int_or("group", 1).map_err(|e| ex.attr_err(e))?;
    let og = ex.attrs().int_or("offset_group", 1).map_err(|e| ex.attr_err(e))?;
    if group < 1 || og < 1 || cg * group != c || m % group != 0 || c % og != 0 {
        return Err(ex.fail(format!(
            "X is {xt} and W {wt} with group {group} and offset_group {og}: X's channels must be W's times group, \
             W's outputs a multiple of group, and X's channels a multiple of offset_group"
        )));
    }
    let k = pair(ex, "kernel_shape", [wt.shape[2] as i64, wt.shape[3] as i64])?;
    if k != [wt.shape[2] as i64, wt.shape[3] as i64] {
        return Err(ex.attr_fail("kernel_shape", format!("is {k:?}, but W is {wt}")));
    }
    let s = pair(ex, "strides", [1, 1])?;
    let d = pair(ex, "dilations", [1, 1])?;
    let pads = ex.attrs().ints("pads").map_err(|e| ex.attr_err(e))?.unwrap_or(vec![0; 4]);
    if pads.len() != 4 || pads.iter().any(|&p| p < 0) {
        return Err(ex.attr_fail("pads", format!("is {pads:?}: four non-negative values")));
    }
    // In i128: attributes near i64::MAX must give a wrong shape, not an overflow.
    let out = |i: usize| {
        let span = i128::from(xt.shape[2 + i] as i64) + i128::from(pads[i]) + i128::from(pads[i + 2]);
        (span - (i128::from(k[i]) - 1) * i128::from(d[i]) - 1).div_euclid(i128::from(s[i])) + 1
    };
    let (oh, ow) = (out(0), out(1));
    let taps = k[0] * k[1];
    let wanted = [i128::from(n), i128::from(og) * i128::from(taps) * 2, oh, ow];
    if oh < 1 || ow < 1 || ot.shape.iter().zip(wanted).any(|(&have, want)| have as i128 != want) {
        return Err(ex.fail(format!(
            "offset is {ot}: this DeformConv needs [{n}, {}, {oh}, {ow}] (offset_group · kh · kw · 2 by the output)",
            og * taps * 2
        )));
    }
    // Now the offset's own extents.
    let (oh, ow) = (oh as i64, ow as i64);
    if h < 2 || wd < 2 {
        return Err(ex.fail(format!("X is {xt}: DeformConv samples need at least 2 rows and 2 columns")));
    }
    // Rule 1: the taps' places without offsets, [1, 1, kh, kw, 2, oh, ow], normalised afterwards.
    let mut base = Vec::with_capacity((taps * 2 * oh * ow) as usize);
    for a in 0..k[0] {
        for b in 0..k[1] {
            for axis in 0..2 {
                for i in 0..oh {
                    for j in 0..ow {
                        base.push(if axis == 0 {
                            i as f64 * s[0] as f64 - pads[0] as f64 + a as f64 * d[0] as f64
                        } else {
                            j as f64 * s[1] as f64 - pads[1] as f64 + b as f64 * d[1] as f64
                        });
                    }
                }
            }
        }
    }
    let dims = [1, 1, k[0] as usize, k[1] as usize, 2, oh as usize, ow as usize];
    let base = crate::consts::from_f64s(xt.dt, &dims, &base).map_err(|e| ex.fail(e.to_string()))?;
    let base = ex.constant("places", base);
    let shape = ex.ints(&[n, og, k[0], k[1], 2, oh, ow])?;
    let off = ex.op("Reshape", &[&off, &shape], vec![])?;
    let places = ex.op("Add", &[&off, &base], vec![])?;
    // Rule 2: normalised, (x, y) last, one grid per offset group: [N·og, kh·kw·oh, ow, 2].
    let scale: Vec<f64> = vec![2.0 / (h - 1) as f64, 2.0 / (wd - 1) as f64];
    let scale = crate::consts::from_f64s(xt.dt, &[2, 1, 1], &scale).map_err(|e| ex.fail(e.to_string()))?;
    let scale = ex.constant("scale", scale);
    let one = ex.scalar(xt.dt, 1.0)?;
    let places = ex.op("Mul", &[&places, &scale], vec![])?;
    let places = ex.op("Sub", &[&places, &one], vec![])?;
    let xy = ex.ints(&[1, 0])?;
    let places = ex.op("Gather", &[&places, &xy], vec![int("axis", 4)])?;
    let places = ex.op("Transpose", &[&places], vec![ints("perm", vec![0, 1, 2, 3, 5, 6, 4])])?;
    let grid_shape = ex.ints(&[n * og, taps * oh, ow, 2])?;
    let grid = ex.op("Reshape", &[&places, &grid_shape], vec![])?;
    let x_shape = ex.ints(&[n * og, c / og, h, wd])?;
    let xg = ex.op("Reshape", &[&x, &x_shape], vec![])?;
    let sampling = vec![string("mode", "bilinear"), string("padding_mode", "zeros"), int("align_corners", 1)];
    let sampled = ex.op("GridSample", &[&xg, &grid], sampling)?;
    let sampled_shape = ex.ints(&[n, og, c / og, taps, oh, ow])?;
    let mut cols = ex.op("Reshape", &[&sampled, &sampled_shape], vec![])?;
    if let Some(mask) = mask {
        let mt = ex.ty(&mask)?;
        if mt.shape != [n as usize, (og * taps) as usize, oh as usize, ow as usize] {
            return Err(ex.fail(format!("mask is {mt}: this DeformConv needs [{n}, {}, {oh}, {ow}]", og * taps)));
        }
        let mask_shape = ex.ints(&[n, og, 1, taps, oh, ow])?;
        let mask = ex.op("Reshape", &[&mask, &mask_shape], vec![])?;
        cols = ex.op("Mul", &[&cols, &mask], vec![])?;
    }
    // Rule 3: [N, group, C/group·kh·kw, oh·ow] against W as [1, group, M/group, C/group·kh·kw].
    let cols_shape = ex.ints(&[n, group, cg * taps, oh * ow])?;
    let cols = ex.op("Reshape", &[&cols, &cols_shape], vec![])?;
    let w_shape = ex.ints(&[1, group, m / group, cg * taps])?;
    let wm = ex.op("Reshape", &[&w, &w_shape], vec![])?;
    let y = ex.op("MatMul", &[&wm, &cols], vec![])?;
    let y_shape = ex.ints(&[n, m, oh, ow])?;
    let mut y = ex.op("Reshape", &[&y, &y_shape], vec![])?;
    if let Some(b) = bias {
        let b_shape = ex.ints(&[m, 1, 1])?;
        let b = ex.op("Reshape", &[&b, &b_shape], vec![])?;
        y = ex.op("Add", &[&y, &b], vec![])?;
    }
    Ok(vec![Some(y)])
}
