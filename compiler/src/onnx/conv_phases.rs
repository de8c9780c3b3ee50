//! A strided `ConvTranspose` as one convolution over the input as it is, one group of output channels per phase
//! of the strides (the sub-pixel form), then the phases interleaved and the result cropped: no zero is inserted
//! into the input and no multiply-add reads one. The rules:
//!
//! 1. **Phases.** Along an axis of stride `s` and kernel `k` (dilation 1), the full output position `u = i·s + t`
//!    (input position `i`, tap `t`) has phase `u mod s`, and the taps that reach it are `t = ph + j·s`: so
//!    `full[q·s + ph] = Σ_j x[q − j] · w[ph + j·s]` for `j < J = ⌈k / s⌉` (taps past `k` weigh 0). Each phase is
//!    a correlation of `x` with that sub-kernel reversed, padded by `J − 1` on both sides: `q < in + J − 1`.
//! 2. **One convolution.** The sub-kernels of every phase are the output channels of one stride-1 convolution:
//!    channel `c·S + phase` (`S` the product of the strides, phases in row-major order of the axes) holds output
//!    channel `c`'s sub-kernel, with the groups as they were (`W` `[C, M/g, k…]` padded with zeros to `J·s` taps
//!    (a `Concat`), reshaped
//!    `[g, C/g, M/g, J₁, s₁, …]`, transposed to `[g, M/g, s₁…, C/g, J₁…]`, reversed along the `J` axes): folded at
//!    import for constant weights, run as ops otherwise. The bias is repeated per phase.
//! 3. **Interleaved, then cropped.** `[N, M·S, Q₁…]` is reshaped to `[N, M, s₁…, Q₁…]`, transposed to
//!    `[N, M, Q₁, s₁, …]` and reshaped to `[N, M, Q₁·s₁, …]`: the full output, whose positions past the operator's
//!    full size are the bias alone, as the operator's are. The output is its slice from the begin pads.
//! 4. **Where it applies.** Every dilation 1, some stride above 1, `M·S` output channels within 2^31 − 1, and an
//!    output (with its `output_padding` or a larger `output_shape`) that ends within the interleaved length on
//!    every axis; otherwise `conv_transpose.rs` takes the node.
//!
//! Tests: the node suite's ConvTranspose cases (strides, pads, `output_shape`, `auto_pad`, groups, 1-D and 3-D)
//! and the real-model suite's PP-OCR detector (two 2 × 2 ConvTransposes of stride 2).

use super::expand::{int, ints, Ex};
use crate::error::ImportErrorKind as E;

/// What [`expand`] needs of the node, resolved by `conv_transpose.rs`.
pub(super) struct Geometry<'a> {
    pub x: &'a str,
    pub w: &'a str,
    pub bias: Option<&'a str>,
    /// N, C, M (output channels), groups.
    pub n: i64,
    pub c: i64,
    pub m: i64,
    pub group: i64,
    pub input: &'a [i64],
    pub kernel: &'a [i64],
    pub strides: &'a [i64],
    pub dilations: &'a [i64],
    /// Crop at the start of each axis, and the output's size.
    pub begin: &'a [i64],
    pub out: &'a [i64],
}

impl Geometry<'_> {
    /// Taps per phase along each axis (rule 1).
    fn taps(&self) -> Vec<i64> {
        self.kernel.iter().zip(self.strides).map(|(&k, &s)| (k + s - 1) / s).collect()
    }

    /// `S`, the number of phases, and the convolution's `M·S` output channels, when both fit an i32 (rule 4).
    fn phases(&self) -> Option<(i64, i64)> {
        let s = self.strides.iter().try_fold(1i64, |a, &s| a.checked_mul(s))?;
        let channels = self.m.checked_mul(s)?;
        (channels <= i64::from(i32::MAX)).then_some((s, channels))
    }

    /// Whether rule 4 lets this form take the node.
    pub fn applies(&self) -> bool {
        let taps = self.taps();
        self.phases().is_some()
            && self.dilations.iter().all(|&d| d == 1)
            && self.strides.iter().any(|&s| s > 1)
            && (0..self.input.len()).all(|i| {
                let len = self.strides[i].checked_mul(self.input[i] + taps[i] - 1);
                len.is_some_and(|len| self.begin[i] + self.out[i] <= len)
            })
    }
}

/// The node's output, `[Y]`, in the phase form (rules 1 to 3); the caller checked [`Geometry::applies`].
pub(super) fn expand(ex: &mut Ex<'_, '_>, geo: &Geometry<'_>) -> Result<Vec<Option<String>>, E> {
    let r = geo.input.len();
    let taps = geo.taps();
    let (phases, _) = geo.phases().ok_or_else(|| ex.fail("its phases overflow (a caller skipped `applies`)"))?;
    let (g, cg, mg) = (geo.group, geo.c / geo.group, geo.m / geo.group);
    // Rule 2: the weights, [C, M/g, k…] → [M·S, C/g, J…]: first zeros after the last tap up to J·s taps (a
    // Concat, which folds with constant weights).
    let dt = ex.ty(geo.w)?.dt;
    let mut w = geo.w.to_string();
    let mut shape: Vec<usize> = [geo.c, mg].iter().chain(geo.kernel).map(|&d| d as usize).collect();
    for i in 0..r {
        let pad = (taps[i] * geo.strides[i] - geo.kernel[i]) as usize;
        if pad > 0 {
            let mut zeros = shape.clone();
            zeros[2 + i] = pad;
            let z = ex.zeros(dt, &zeros)?;
            w = ex.op("Concat", &[&w, &z], vec![int("axis", 2 + i as i64)])?;
            shape[2 + i] += pad;
        }
    }
    let mut split = vec![g, cg, mg];
    for (&j, &s) in taps.iter().zip(geo.strides) {
        split.extend([j, s]);
    }
    let shape = ex.ints(&split)?;
    let w = ex.op("Reshape", &[&w, &shape], vec![])?;
    let mut perm = vec![0i64, 2];
    perm.extend((0..r as i64).map(|i| 4 + 2 * i));
    perm.push(1);
    perm.extend((0..r as i64).map(|i| 3 + 2 * i));
    let w = ex.op("Transpose", &[&w], vec![ints("perm", perm)])?;
    let mut flat = vec![geo.m * phases, cg];
    flat.extend(&taps);
    let shape = ex.ints(&flat)?;
    let mut w = ex.op("Reshape", &[&w, &shape], vec![])?;
    if taps.iter().any(|&j| j > 1) {
        let (s, e) = (ex.ints(&vec![-1; r])?, ex.ints(&vec![i64::MIN; r])?);
        let (axes, steps) = (ex.ints(&(2..2 + r as i64).collect::<Vec<_>>())?, ex.ints(&vec![-1; r])?);
        w = ex.op("Slice", &[&w, &s, &e, &axes, &steps], vec![])?;
    }
    let mut inputs = vec![geo.x.to_string(), w];
    if let Some(b) = geo.bias {
        let (column, wide, flat) = (ex.ints(&[geo.m, 1])?, ex.ints(&[geo.m, phases])?, ex.ints(&[geo.m * phases])?);
        let b = ex.op("Reshape", &[b, &column], vec![])?;
        let b = ex.op("Expand", &[&b, &wide], vec![])?;
        inputs.push(ex.op("Reshape", &[&b, &flat], vec![])?);
    }
    let conv_pads: Vec<i64> = taps.iter().chain(&taps).map(|&j| j - 1).collect();
    let refs: Vec<&str> = inputs.iter().map(String::as_str).collect();
    let z = ex.op(
        "Conv",
        &refs,
        vec![ints("kernel_shape", taps.clone()), ints("pads", conv_pads), ints("strides", vec![1; r]), int("group", g)],
    )?;
    // Rule 3: the phases interleaved, then cropped.
    let q: Vec<i64> = (0..r).map(|i| geo.input[i] + taps[i] - 1).collect();
    let mut split = vec![geo.n, geo.m];
    split.extend(geo.strides);
    split.extend(&q);
    let shape = ex.ints(&split)?;
    let z = ex.op("Reshape", &[&z, &shape], vec![])?;
    let mut perm = vec![0i64, 1];
    for i in 0..r as i64 {
        perm.extend([2 + r as i64 + i, 2 + i]);
    }
    let z = ex.op("Transpose", &[&z], vec![ints("perm", perm)])?;
    let len: Vec<i64> = (0..r).map(|i| q[i] * geo.strides[i]).collect();
    let mut merged = vec![geo.n, geo.m];
    merged.extend(&len);
    let shape = ex.ints(&merged)?;
    let mut y = ex.op("Reshape", &[&z, &shape], vec![])?;
    if (0..r).any(|i| geo.begin[i] != 0 || geo.out[i] != len[i]) {
        let ends: Vec<i64> = (0..r).map(|i| geo.begin[i] + geo.out[i]).collect();
        let axes: Vec<i64> = (2..2 + r as i64).collect();
        let (s, e, a) = (ex.ints(geo.begin)?, ex.ints(&ends)?, ex.ints(&axes)?);
        y = ex.op("Slice", &[&y, &s, &e, &a], vec![])?;
    }
    Ok(vec![Some(y)])
}
