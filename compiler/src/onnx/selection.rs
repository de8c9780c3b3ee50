//! `NonMaxSuppression` and `Unique`, whose outputs' shapes depend on their inputs' values, folded at import: their
//! inputs must be known at compile time (constants, shape computations, or inputs given with `--input-value`:
//! `value_inputs` lists them), and their outputs are constants ([`super::expand`]). Values whose shape is known only
//! at run time are the design in docs/compiler.md; until it is built the error names the node and the input.
//! 1. **NonMaxSuppression** is the specification's greedy selection, per batch and class: the boxes scoring above
//!    `score_threshold` (all when it is absent), best first (equal scores: the lower index first), each kept unless
//!    its IoU with a box already kept is above `iou_threshold`, at most `max_output_boxes_per_class` (absent or
//!    negative: none); corners in either order (`center_point_box` 0) or centre and size (1). The output is
//!    `[selected, 3]` of (batch, class, box), in that order.
//! 2. **Unique** of the whole input (flattened) or of its slices along `axis`: the distinct elements or slices,
//!    sorted (ascending, element by element) or in the order they first occur; the first occurrence of each, the
//!    index of each input element or slice among them, and their counts. `Y` is a `Gather` of the first occurrences,
//!    folded like the rest.

use std::cmp::Ordering;

use stowage_runtime::Tensor;

use super::expand::{int, Ex};
use crate::consts;
use crate::error::ImportErrorKind as E;

/// The op types this file folds.
pub const SELECTION_OPS: &[&str] = &["NonMaxSuppression", "Unique"];

/// Folds the op of `ex`; its outputs.
pub(super) fn expand(ex: &mut Ex<'_, '_>) -> Result<Vec<Option<String>>, E> {
    match ex.node.op_type() {
        "NonMaxSuppression" => Ok(vec![Some(nms(ex)?)]),
        "Unique" => unique(ex),
        other => Err(ex.fail(format!("'{other}' has no expansion"))),
    }
}

/// A known input's elements as f64, and its shape.
type Known = (Vec<f64>, Vec<usize>);

/// The values of input `i` (named `what`) as f64, which must be known at compile time; `None` when omitted.
fn known(ex: &Ex<'_, '_>, i: usize, what: &str) -> Result<Option<Known>, E> {
    let Some(v) = ex.optional(i) else { return Ok(None) };
    let t = ex.value(&v).ok_or_else(|| {
        ex.needs_value(format!(
            "its output's shape depends on the values of {what} ('{v}'), which are known only at run time: give them \
             with --input-value"
        ))
    })?;
    let values = if t.dt().is_float() {
        consts::to_f64s(t)
    } else {
        consts::to_i64s(t).map(|v| v.iter().map(|&x| x as f64).collect())
    };
    Ok(Some((values.map_err(|e| ex.fail(e.to_string()))?, t.shape().to_vec())))
}

/// One box as (x min, x max, y min, y max).
fn corners(b: &[f64], centred: bool) -> (f64, f64, f64, f64) {
    if centred {
        let (w, h) = (b[2] / 2.0, b[3] / 2.0);
        (b[0] - w, b[0] + w, b[1] - h, b[1] + h)
    } else {
        (b[1].min(b[3]), b[1].max(b[3]), b[0].min(b[2]), b[0].max(b[2]))
    }
}

/// Whether box `a` suppresses box `b` (IoU above `threshold`).
fn overlaps(a: &[f64], b: &[f64], centred: bool, threshold: f64) -> bool {
    let (ax0, ax1, ay0, ay1) = corners(a, centred);
    let (bx0, bx1, by0, by1) = corners(b, centred);
    let (ix0, ix1, iy0, iy1) = (ax0.max(bx0), ax1.min(bx1), ay0.max(by0), ay1.min(by1));
    if ix1 <= ix0 || iy1 <= iy0 {
        return false;
    }
    let inter = (ix1 - ix0) * (iy1 - iy0);
    let (area_a, area_b) = ((ax1 - ax0) * (ay1 - ay0), (bx1 - bx0) * (by1 - by0));
    let union = area_a + area_b - inter;
    if inter <= 0.0 || area_a <= 0.0 || area_b <= 0.0 || union <= 0.0 {
        return false;
    }
    inter / union > threshold
}

/// `NonMaxSuppression(boxes, scores, max_output_boxes_per_class?, iou_threshold?, score_threshold?)` (rule 1).
fn nms(ex: &mut Ex<'_, '_>) -> Result<String, E> {
    let (boxes, bs) = known(ex, 0, "boxes")?.ok_or_else(|| ex.fail("input 0 (boxes) is required"))?;
    let (scores, ss) = known(ex, 1, "scores")?.ok_or_else(|| ex.fail("input 1 (scores) is required"))?;
    let first = |i, what| -> Result<Option<f64>, E> { Ok(known(ex, i, what)?.and_then(|(v, _)| v.first().copied())) };
    let most = first(2, "max_output_boxes_per_class")?.unwrap_or(0.0).max(0.0) as usize;
    let iou = first(3, "iou_threshold")?.unwrap_or(0.0);
    let floor = first(4, "score_threshold")?;
    let centred = ex.attrs().int_or("center_point_box", 0).map_err(|e| ex.attr_err(e))? != 0;
    if bs.len() != 3 || bs[2] != 4 || ss.len() != 3 || ss[0] != bs[0] || ss[2] != bs[1] {
        return Err(ex.fail(format!(
            "boxes {bs:?} and scores {ss:?} must be [batches, boxes, 4] and [batches, classes, boxes]"
        )));
    }
    let (batches, classes, n) = (bs[0], ss[1], bs[1]);
    let mut out = Vec::new();
    for b in 0..batches {
        let bx = |i: usize| &boxes[(b * n + i) * 4..][..4];
        for c in 0..classes {
            let sc = &scores[(b * classes + c) * n..][..n];
            let mut order: Vec<usize> = (0..n).filter(|&i| floor.is_none_or(|f| sc[i] > f)).collect();
            order.sort_by(|&i, &j| sc[j].partial_cmp(&sc[i]).unwrap_or(Ordering::Equal).then(i.cmp(&j)));
            let mut kept: Vec<usize> = Vec::new();
            for i in order {
                if kept.len() >= most {
                    break;
                }
                if !kept.iter().any(|&k| overlaps(bx(i), bx(k), centred, iou)) {
                    kept.push(i);
                    out.extend([b as i64, c as i64, i as i64]);
                }
            }
        }
    }
    let t = Tensor::from_vec(&[out.len() / 3, 3], out).map_err(|e| ex.fail(e.to_string()))?;
    Ok(ex.constant("selected", t))
}

/// The first occurrences, the inverse indices and the counts of the `len` slices of `values` (`[outer, len, inner]`)
/// compared element by element with `cmp` (rule 2).
fn distinct<T: Copy>(
    values: &[T],
    [outer, len, inner]: [usize; 3],
    sorted: bool,
    cmp: impl Fn(&T, &T) -> Ordering,
) -> (Vec<i64>, Vec<i64>, Vec<i64>) {
    let at = |k: usize, j: usize| values[((j / inner) * len + k) * inner + j % inner];
    let width = outer * inner;
    let order = |a: usize, b: usize| {
        (0..width).map(|j| cmp(&at(a, j), &at(b, j))).find(|o| o.is_ne()).unwrap_or(Ordering::Equal)
    };
    let mut firsts: Vec<usize> = Vec::new();
    let mut inverse = vec![0usize; len];
    for (k, inv) in inverse.iter_mut().enumerate() {
        match firsts.iter().position(|&f| order(f, k).is_eq()) {
            Some(p) => *inv = p,
            None => {
                *inv = firsts.len();
                firsts.push(k);
            }
        }
    }
    if sorted {
        let mut by: Vec<usize> = (0..firsts.len()).collect();
        by.sort_by(|&a, &b| order(firsts[a], firsts[b]));
        let mut rank = vec![0usize; by.len()];
        for (r, &p) in by.iter().enumerate() {
            rank[p] = r;
        }
        firsts = by.iter().map(|&p| firsts[p]).collect();
        inverse.iter_mut().for_each(|i| *i = rank[*i]);
    }
    let mut counts = vec![0i64; firsts.len()];
    for &i in &inverse {
        counts[i] += 1;
    }
    (firsts.iter().map(|&f| f as i64).collect(), inverse.iter().map(|&i| i as i64).collect(), counts)
}

/// `Unique(X)` (rule 2): Y, indices, inverse_indices, counts.
fn unique(ex: &mut Ex<'_, '_>) -> Result<Vec<Option<String>>, E> {
    let x = ex.input(0)?;
    let t = ex.value(&x).cloned().ok_or_else(|| {
        ex.needs_value(format!(
            "its output's shape depends on the values of X ('{x}'), which are known only at run time: give them with \
             --input-value"
        ))
    })?;
    let shape = t.shape().to_vec();
    let sorted = ex.attrs().int_or("sorted", 1).map_err(|e| ex.attr_err(e))? != 0;
    let axis = ex.attrs().int("axis").map_err(|e| ex.attr_err(e))?;
    let r = shape.len() as i64;
    let axis = match axis {
        Some(a) if (-r..r).contains(&a) => Some((if a < 0 { a + r } else { a }) as usize),
        Some(a) => return Err(ex.attr_fail("axis", format!("is {a}: it must be in [-{r}, {r}) for X of {shape:?}"))),
        None => None,
    };
    // Slices along `axis`, or single elements of the flattened input.
    let dims = match axis {
        Some(a) => [shape[..a].iter().product(), shape[a], shape[a + 1..].iter().product()],
        None => [1, t.len(), 1],
    };
    let fail = |e: stowage_runtime::RuntimeError| ex.fail(e.to_string());
    let (firsts, inverse, counts) = if t.dt().is_float() {
        distinct(&consts::to_f64s(&t).map_err(fail)?, dims, sorted, f64::total_cmp)
    } else {
        distinct(&consts::to_i64s(&t).map_err(fail)?, dims, sorted, i64::cmp)
    };
    let idx = ex.ints(&firsts)?;
    let source = match axis {
        Some(_) => x,
        None => {
            let flat = ex.ints(&[-1])?;
            ex.op("Reshape", &[&x, &flat], vec![])?
        }
    };
    let y = ex.op("Gather", &[&source, &idx], vec![int("axis", axis.unwrap_or(0) as i64)])?;
    let (inv, cnt) = (ex.ints(&inverse)?, ex.ints(&counts)?);
    Ok(vec![Some(y), Some(idx), Some(inv), Some(cnt)])
}
