//! `RotaryEmbedding` (opset 23) imported as its body ([`super::expand`]): the first `rotary_embedding_dim` features
//! of each head are rotated in pairs by the angles of the cos and sin caches, the rest pass through.
//! 1. **Pairs.** Halves (`x[:d/2]` with `x[d/2:]`) by default, neighbours (`x[0::2]` with `x[1::2]`) when
//!    `interleaved`; the rotated pairs are written back in the same arrangement.
//! 2. **Layouts.** A 4-D input is `[batch, heads, sequence, head]` and a 3-D one `[batch, sequence, heads · head]`
//!    with `num_heads`; the caches are `[positions, d/2]` read at `position_ids` (`Gather`), or `[batch, sequence,
//!    d/2]` without them, and broadcast over the heads where they lie (no transpose of the input).
//! 3. **Shapes** that disagree (a cache whose last axis is not `d/2`, an odd `d`, a hidden size `num_heads` does not
//!    divide) are errors naming the input.

use super::expand::{int, Ex};
use crate::error::ImportErrorKind as E;

/// The op types this file expands.
pub const ROTARY_OPS: &[&str] = &["RotaryEmbedding"];

/// Expands the op of `ex`; its outputs.
pub(super) fn expand(ex: &mut Ex<'_, '_>) -> Result<Vec<Option<String>>, E> {
    let (x, cos, sin, pos) = (ex.input(0)?, ex.input(1)?, ex.input(2)?, ex.optional(3));
    let xt = ex.ty(&x)?;
    let a = ex.attrs();
    let err = |e| ex.attr_err(e);
    let interleaved = a.int_or("interleaved", 0).map_err(err)? != 0;
    let dim = a.int_or("rotary_embedding_dim", 0).map_err(err)?;
    let heads = a.int_or("num_heads", 0).map_err(err)?;
    // [b, h, s, d] with the caches unsqueezed at 1, or [b, s, n, d] (from 3-D) at 2.
    let (input, head, cache_axis) = match xt.rank() {
        4 => (x.clone(), xt.shape[3] as i64, 1),
        3 => {
            let hidden = xt.shape[2] as i64;
            if heads <= 0 || hidden % heads != 0 {
                return Err(ex.attr_fail("num_heads", format!("is {heads}: it must divide input {xt}'s last axis")));
            }
            let shape = ex.ints(&[xt.shape[0] as i64, xt.shape[1] as i64, heads, hidden / heads])?;
            (ex.op("Reshape", &[&x, &shape], vec![])?, hidden / heads, 2)
        }
        _ => return Err(ex.fail(format!("input is {xt}: it must have 3 or 4 axes"))),
    };
    let d = if dim == 0 { head } else { dim };
    if d <= 0 || d > head || d % 2 != 0 {
        return Err(
            ex.attr_fail("rotary_embedding_dim", format!("is {d}: it must be even and at most the head's {head}"))
        );
    }
    let half = d / 2;
    let cache = |ex: &mut Ex<'_, '_>, c: &str, what: &str| -> Result<String, E> {
        let ct = ex.ty(c)?;
        if ct.shape.last().copied() != Some(half as usize) {
            return Err(ex.fail(format!("{what} is {ct}: its last axis must be rotary_embedding_dim / 2 = {half}")));
        }
        let c = match &pos {
            Some(p) => ex.op("Gather", &[c, p], vec![int("axis", 0)])?,
            None => c.to_string(),
        };
        let at = ex.ints(&[cache_axis])?;
        ex.op("Unsqueeze", &[&c, &at], vec![])
    };
    let (cos, sin) = (cache(ex, &cos, "cos_cache")?, cache(ex, &sin, "sin_cache")?);
    let last = ex.ints(&[3])?;
    let slice = |ex: &mut Ex<'_, '_>, v: &str, from: i64, to: i64, step: i64| -> Result<String, E> {
        let (s, e, st) = (ex.ints(&[from])?, ex.ints(&[to])?, ex.ints(&[step])?);
        ex.op("Slice", &[v, &s, &e, &last, &st], vec![])
    };
    let (x1, x2) = if interleaved {
        (slice(ex, &input, 0, d, 2)?, slice(ex, &input, 1, d, 2)?)
    } else {
        (slice(ex, &input, 0, half, 1)?, slice(ex, &input, half, d, 1)?)
    };
    let (c1, s2) = (ex.op("Mul", &[&cos, &x1], vec![])?, ex.op("Mul", &[&sin, &x2], vec![])?);
    let real = ex.op("Sub", &[&c1, &s2], vec![])?;
    let (s1, c2) = (ex.op("Mul", &[&sin, &x1], vec![])?, ex.op("Mul", &[&cos, &x2], vec![])?);
    let imag = ex.op("Add", &[&s1, &c2], vec![])?;
    let rotated = if interleaved {
        let at = ex.ints(&[4])?;
        let (r, i) = (ex.op("Unsqueeze", &[&real, &at], vec![])?, ex.op("Unsqueeze", &[&imag, &at], vec![])?);
        let pairs = ex.op("Concat", &[&r, &i], vec![int("axis", 4)])?;
        let it = ex.ty(&input)?;
        let shape = ex.ints(&[it.shape[0] as i64, it.shape[1] as i64, it.shape[2] as i64, d])?;
        ex.op("Reshape", &[&pairs, &shape], vec![])?
    } else {
        ex.op("Concat", &[&real, &imag], vec![int("axis", 3)])?
    };
    let y = if d < head {
        let rest = slice(ex, &input, d, head, 1)?;
        ex.op("Concat", &[&rotated, &rest], vec![int("axis", 3)])?
    } else {
        rotated
    };
    if xt.rank() == 3 {
        let shape = ex.ints(&xt.shape.iter().map(|&s| s as i64).collect::<Vec<_>>())?;
        return Ok(vec![Some(ex.op("Reshape", &[&y, &shape], vec![])?)]);
    }
    Ok(vec![Some(y)])
}
