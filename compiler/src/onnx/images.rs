//! Image ops imported as the data movement and convolutions stowage has ([`super::expand`]): `CenterCropPad` as a
//! `Slice` then a `Pad`, `Col2Im` as a transposed convolution, `AffineGrid` as one product with a constant grid, and
//! `MaxUnpool` as a scatter. The rules:
//! 1. **Centre as the reference.** An axis longer than its target is cropped from `⌊(d − s) / 2⌋`; one shorter is
//!    padded with zeros, `⌊(s − d) / 2⌋` before and the rest after.
//! 2. **Col2Im is a transposed convolution.** Its columns `[N, C · ∏block, L]` are the input of a `ConvTranspose` with
//!    `C` groups, one input channel per block position and a one-hot kernel for each, with `Col2Im`'s strides,
//!    dilations and pads; `output_padding` makes up what the floor of the forward size lost, so the image is exactly
//!    `image_shape`. Overlapping blocks add, as they must.
//! 3. **Static shapes.** `CenterCropPad`'s `shape`, `Col2Im`'s `image_shape` and `block_shape`, `AffineGrid`'s
//!    `size` and `MaxUnpool`'s `output_shape` set the output's shape: they must be known at compile time
//!    ([`super::functions::static_inputs`]). A column count `L` that disagrees with the image, block, strides,
//!    dilations and pads is an error naming all of them.
//! 4. **AffineGrid** is `theta · [x, y, (z,) 1]` over a constant grid of the output's normalised pixel centres
//!    (`−1 + 2i / (d − 1)` with `align_corners`, else `−1 + (2i + 1) / d`), made in f64 and rounded once.
//! 5. **MaxUnpool** writes each value at its index (a flat index into the unpooled tensor, as `MaxPool` gives it)
//!    in zeros of the size the pooling undoes (`ScatterElements` over the flattened tensor), then pads at the end of
//!    each spatial axis up to `output_shape` when that is given.
//! 6. **Upsample** (opsets 7 to 9) is the `Resize` it was replaced by: its scales (an attribute before opset 9, an
//!    input from 9), `nearest` or `linear`, with the `asymmetric` coordinates and `floor` rounding it always had.

use super::expand::{int, ints, Ex};
use crate::consts;
use crate::error::ImportErrorKind as E;

/// The op types this file expands.
pub const IMAGE_OPS: &[&str] = &["AffineGrid", "CenterCropPad", "Col2Im", "MaxUnpool", "Upsample"];

/// Expands the op of `ex`; its outputs.
pub(super) fn expand(ex: &mut Ex<'_, '_>) -> Result<Vec<Option<String>>, E> {
    Ok(vec![Some(match ex.node.op_type() {
        "CenterCropPad" => center_crop_pad(ex)?,
        "Col2Im" => col2im(ex)?,
        "AffineGrid" => affine_grid(ex)?,
        "MaxUnpool" => max_unpool(ex)?,
        "Upsample" => upsample(ex)?,
        other => return Err(ex.fail(format!("'{other}' has no expansion"))),
    })])
}

/// The integers of constant input `i`, named `what` (rule 3).
fn const_ints(ex: &Ex<'_, '_>, i: usize, what: &str) -> Result<Vec<i64>, E> {
    let v = ex.input(i)?;
    let t = ex.value(&v).ok_or_else(|| {
        ex.needs_value(format!("{what} sets the output's shape and must be known at compile time (--input-value)"))
    })?;
    consts::to_i64s(t).map_err(|e| ex.fail(format!("{what}: {e}")))
}

/// `CenterCropPad(x, shape)` along `axes` (all by default) (rule 1).
fn center_crop_pad(ex: &mut Ex<'_, '_>) -> Result<String, E> {
    let x = ex.input(0)?;
    let xt = ex.ty(&x)?;
    let shape = const_ints(ex, 1, "shape")?;
    let r = xt.rank() as i64;
    let axes = match ex.attrs().ints("axes").map_err(|e| ex.attr_err(e))? {
        Some(a) => a,
        None => (0..r).collect(),
    };
    if axes.len() != shape.len() {
        return Err(ex.fail(format!("shape has {} elements for {} axes", shape.len(), axes.len())));
    }
    let (mut starts, mut ends, mut sliced) = (vec![], vec![], vec![]);
    let mut pads = vec![0i64; 2 * xt.rank()];
    for (&a, &s) in axes.iter().zip(&shape) {
        if !(-r..r).contains(&a) {
            return Err(ex.attr_fail("axes", format!("{a} is not an axis of {xt}")));
        }
        let a = if a < 0 { a + r } else { a } as usize;
        let d = xt.shape[a] as i64;
        if s < 0 {
            return Err(ex.fail(format!("shape asks for {s} along axis {a}")));
        }
        if s < d {
            let start = (d - s) / 2;
            starts.push(start);
            ends.push(start + s);
            sliced.push(a as i64);
        } else if s > d {
            pads[a] = (s - d) / 2;
            pads[a + xt.rank()] = s - d - (s - d) / 2;
        }
    }
    let mut y = x;
    if !sliced.is_empty() {
        let (st, en, ax) = (ex.ints(&starts)?, ex.ints(&ends)?, ex.ints(&sliced)?);
        y = ex.op("Slice", &[&y, &st, &en, &ax], vec![])?;
    }
    if pads.iter().any(|&p| p != 0) {
        let p = ex.ints(&pads)?;
        y = ex.op("Pad", &[&y, &p], vec![])?;
    }
    ex.op("Identity", &[&y], vec![])
}

/// `Col2Im(columns, image_shape, block_shape)` (rule 2).
fn col2im(ex: &mut Ex<'_, '_>) -> Result<String, E> {
    let x = ex.input(0)?;
    let xt = ex.ty(&x)?;
    let image = const_ints(ex, 1, "image_shape")?;
    let block = const_ints(ex, 2, "block_shape")?;
    let k = block.len();
    let a = ex.attrs();
    let err = |e| ex.attr_err(e);
    let strides = a.ints("strides").map_err(err)?.unwrap_or_else(|| vec![1; k]);
    let dilations = a.ints("dilations").map_err(err)?.unwrap_or_else(|| vec![1; k]);
    let pads = a.ints("pads").map_err(err)?.unwrap_or_else(|| vec![0; 2 * k]);
    if image.len() != k || strides.len() != k || dilations.len() != k || pads.len() != 2 * k || k == 0 {
        return Err(ex.fail(format!(
            "image_shape {image:?}, block_shape {block:?}, strides {strides:?}, dilations {dilations:?} and pads \
             {pads:?} disagree in their number of axes"
        )));
    }
    if block.iter().chain(&strides).chain(&dilations).any(|&v| v <= 0) || pads.iter().any(|&p| p < 0) {
        return Err(ex.fail("block_shape, strides and dilations must be positive, pads not negative"));
    }
    let cells: i64 = block.iter().product();
    if xt.rank() != 3 || xt.shape[1] as i64 % cells != 0 {
        return Err(ex.fail(format!("input is {xt}: it must be [N, C · {cells}, L] for blocks of {block:?}")));
    }
    let (n, c) = (xt.shape[0] as i64, xt.shape[1] as i64 / cells);
    // Blocks per axis, as the forward (im2col) computes them, and what the floor lost.
    let mut counts = Vec::with_capacity(k);
    let mut extra = Vec::with_capacity(k);
    for i in 0..k {
        // In i128: attributes near i64's ends neither overflow nor wrap.
        let wide = |v: i64| i128::from(v);
        let span = wide(dilations[i]) * (wide(block[i]) - 1) + 1;
        let room = wide(image[i]) + wide(pads[i]) + wide(pads[i + k]) - span;
        if room < 0 {
            return Err(ex.fail(format!("a block of {block:?} does not fit image_shape {image:?} with pads {pads:?}")));
        }
        let count = room / wide(strides[i]) + 1;
        let (Ok(c), Ok(e)) = (i64::try_from(count), i64::try_from(room - (count - 1) * wide(strides[i]))) else {
            return Err(ex.fail(format!("image_shape {image:?} with pads {pads:?} is too large")));
        };
        extra.push(e);
        counts.push(c);
    }
    let blocks = counts.iter().try_fold(1i64, |acc, &c| acc.checked_mul(c));
    if blocks != Some(xt.shape[2] as i64) {
        let blocks = blocks.map_or_else(|| "more than 2^63".to_string(), |b| b.to_string());
        return Err(ex.fail(format!(
            "input has {} columns, but image_shape {image:?}, block_shape {block:?}, strides {strides:?}, dilations \
             {dilations:?} and pads {pads:?} make {blocks}",
            xt.shape[2]
        )));
    }
    let mut shape = vec![n, c * cells];
    shape.extend(&counts);
    let shape = ex.ints(&shape)?;
    let grid = ex.op("Reshape", &[&x, &shape], vec![])?;
    // One-hot kernels: input channel (c, j) puts its value at block position j of output channel c.
    let kernel: Vec<usize> = block.iter().map(|&b| b as usize).collect();
    let cells = cells as usize;
    let mut wshape = vec![c as usize * cells, 1];
    wshape.extend(&kernel);
    let w: Vec<f64> =
        (0..c as usize * cells * cells).map(|i| if i / cells % cells == i % cells { 1.0 } else { 0.0 }).collect();
    let w = consts::from_f64s(xt.dt, &wshape, &w).map_err(|e| ex.fail(e.to_string()))?;
    let w = ex.constant("onehot", w);
    let attrs = vec![
        ints("strides", strides),
        ints("dilations", dilations),
        ints("pads", pads),
        ints("output_padding", extra),
        int("group", c),
    ];
    ex.op("ConvTranspose", &[&grid, &w], attrs)
}

/// `AffineGrid(theta, size)` (rule 4).
fn affine_grid(ex: &mut Ex<'_, '_>) -> Result<String, E> {
    let theta = ex.input(0)?;
    let tt = ex.ty(&theta)?;
    let size = const_ints(ex, 1, "size")?;
    let align = ex.attrs().int_or("align_corners", 0).map_err(|e| ex.attr_err(e))? != 0;
    let r = size.len().saturating_sub(2);
    if !(r == 2 || r == 3) || size.iter().any(|&d| d <= 0) {
        return Err(ex.fail(format!("size is {size:?}: it must be [N, C, H, W] or [N, C, D, H, W] of positive sizes")));
    }
    if tt.shape != [size[0] as usize, r, r + 1] || !tt.dt.is_float() {
        return Err(ex.fail(format!("theta is {tt}: it must be a float tensor [{}, {r}, {}]", size[0], r + 1)));
    }
    let dims: Vec<usize> = size[2..].iter().map(|&d| d as usize).collect();
    // The grid is made in f64: checked against the size limit before it is.
    let grid = crate::ir::ValueType::new(stowage_runtime::DatumType::F64, [vec![r + 1], dims.clone()].concat());
    match grid.byte_len() {
        Some(b) if b <= ex.limit() => {}
        bytes => {
            return Err(E::TooLarge {
                what: format!("node '{}' (AffineGrid): its grid", ex.name),
                ty: grid.to_string(),
                bytes: bytes.unwrap_or(usize::MAX),
                limit: ex.limit(),
            })
        }
    }
    let points: usize = dims.iter().product();
    let at = |i: usize, d: usize| -> f64 {
        if align {
            if d == 1 {
                -1.0
            } else {
                -1.0 + 2.0 * i as f64 / (d - 1) as f64
            }
        } else {
            -1.0 + (2 * i + 1) as f64 / d as f64
        }
    };
    // [r + 1, points]: row j is the coordinate along the j-th innermost axis (x first), the last row ones.
    let mut base = vec![0.0; (r + 1) * points];
    for p in 0..points {
        let mut rest = p;
        for (axis, &d) in dims.iter().enumerate().rev() {
            let row = dims.len() - 1 - axis;
            base[row * points + p] = at(rest % d, d);
            rest /= d;
        }
        base[r * points + p] = 1.0;
    }
    let base = consts::from_f64s(tt.dt, &[r + 1, points], &base).map_err(|e| ex.fail(e.to_string()))?;
    let base = ex.constant("grid", base);
    let g = ex.op("MatMul", &[&theta, &base], vec![])?;
    let g = ex.op("Transpose", &[&g], vec![ints("perm", vec![0, 2, 1])])?;
    let mut shape = vec![size[0]];
    shape.extend(&size[2..]);
    shape.push(r as i64);
    let shape = ex.ints(&shape)?;
    ex.op("Reshape", &[&g, &shape], vec![])
}

/// `MaxUnpool(X, I, output_shape?)` (rule 5).
fn max_unpool(ex: &mut Ex<'_, '_>) -> Result<String, E> {
    let (x, idx) = (ex.input(0)?, ex.input(1)?);
    let (xt, it) = (ex.ty(&x)?, ex.ty(&idx)?);
    if it.shape != xt.shape || xt.rank() < 3 {
        return Err(ex.fail(format!("I is {it}: it must have X's shape, {xt}, with spatial axes")));
    }
    let r = xt.rank() - 2;
    let a = ex.attrs();
    let err = |e| ex.attr_err(e);
    let kernel = a.ints("kernel_shape").map_err(err)?.ok_or_else(|| ex.attr_fail("kernel_shape", "is required"))?;
    let strides = a.ints("strides").map_err(err)?.unwrap_or_else(|| vec![1; r]);
    let pads = a.ints("pads").map_err(err)?.unwrap_or_else(|| vec![0; 2 * r]);
    if kernel.len() != r || strides.len() != r || pads.len() != 2 * r {
        return Err(ex.fail(format!(
            "kernel_shape {kernel:?}, strides {strides:?} and pads {pads:?} must give {r} spatial axes"
        )));
    }
    let mut shape: Vec<i64> = xt.shape[..2].iter().map(|&d| d as i64).collect();
    for i in 0..r {
        let wide = |v: i64| i128::from(v);
        let d = (xt.shape[i + 2] as i128 - 1) * wide(strides[i]) - wide(pads[i]) - wide(pads[i + r]) + wide(kernel[i]);
        let Ok(d) = i64::try_from(d) else {
            return Err(ex.fail(format!("the unpooled axis {} would have {d} elements", i + 2)));
        };
        if d <= 0 {
            return Err(ex.fail(format!("the unpooled axis {} would have {d} elements", i + 2)));
        }
        shape.push(d);
    }
    let total = shape.iter().try_fold(1usize, |acc, &d| acc.checked_mul(d as usize)).unwrap_or(usize::MAX);
    let zeros = ex.zeros(xt.dt, &[total])?;
    let flat = ex.ints(&[-1])?;
    let (xf, jf) = (ex.op("Reshape", &[&x, &flat], vec![])?, ex.op("Reshape", &[&idx, &flat], vec![])?);
    let y = ex.op("ScatterElements", &[&zeros, &jf, &xf], vec![int("axis", 0)])?;
    let dims = ex.ints(&shape)?;
    let y = ex.op("Reshape", &[&y, &dims], vec![])?;
    let Some(_) = ex.optional(2) else { return Ok(y) };
    let want = const_ints(ex, 2, "output_shape")?;
    if want.len() != shape.len() || want.iter().zip(&shape).any(|(w, s)| w < s) || want[..2] != shape[..2] {
        return Err(ex.fail(format!("output_shape {want:?} must be at least the unpooled shape {shape:?}")));
    }
    let mut p = vec![0i64; 2 * shape.len()];
    for i in 0..shape.len() {
        p[shape.len() + i] = want[i] - shape[i];
    }
    let p = ex.ints(&p)?;
    ex.op("Pad", &[&y, &p], vec![])
}

/// `Upsample(X, scales)` as `Resize` (rule 6).
fn upsample(ex: &mut Ex<'_, '_>) -> Result<String, E> {
    let x = ex.input(0)?;
    let a = ex.attrs();
    let err = |e| ex.attr_err(e);
    let mode = a.string("mode").map_err(err)?.unwrap_or_else(|| "nearest".into());
    if mode != "nearest" && mode != "linear" && mode != "bilinear" {
        return Err(ex.attr_fail("mode", format!("must be 'nearest' or 'linear', found '{mode}'")));
    }
    let scales = match ex.optional(1) {
        Some(s) => s,
        None => {
            let v = a.floats("scales").map_err(err)?.ok_or_else(|| ex.attr_fail("scales", "is required"))?;
            let t = stowage_runtime::Tensor::from_vec(&[v.len()], v).map_err(|e| ex.fail(e.to_string()))?;
            ex.constant("scales", t)
        }
    };
    let mode = if mode == "nearest" { "nearest" } else { "linear" };
    let attrs = vec![
        super::expand::string("mode", mode),
        super::expand::string("coordinate_transformation_mode", "asymmetric"),
        super::expand::string("nearest_mode", "floor"),
    ];
    ex.op("Resize", &[&x, "", &scales], attrs)
}
