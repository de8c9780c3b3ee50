//! `Einsum` imported as transposes, reshapes, sums and batched `MatMul`s ([`super::expand`]), so a contraction runs
//! on the fast product kernels. The rules:
//! 1. **The equation** is ONNX's (numpy's): terms of letters, `...` for broadcast axes, an optional `->` output;
//!    spaces are ignored. Without `->` the output is the broadcast axes, then the letters that occur once, in
//!    alphabetical (ASCII) order. A letter's axes must agree in length; broadcast axes line up from the right and
//!    may be 1 where another operand's are longer. A term whose letter count disagrees with its operand's rank, a
//!    letter of the output found in no input, and a character that is not a letter are errors naming the equation.
//! 2. **Diagonals first.** A letter repeated in one term takes the diagonal: the operand times an identity along the
//!    two axes, summed over the second.
//! 3. **Sums as early as possible.** A letter that no other operand and not the output has is summed out of its
//!    operand before any product (`ReduceSum`), so products never carry an axis that is summed anyway.
//! 4. **Products left to right.** Each next operand meets the running result in one `MatMul`: the letters both have
//!    and that are still needed (by a later operand or the output) are its batch axes, the letters both have and that
//!    are not needed are contracted, and the rest are its rows and columns, each side transposed and reshaped to
//!    `[batch…, rows, contracted]` and `[batch…, contracted, columns]`.
//! 5. **The output** is the running result transposed to the output's letter order.

use std::collections::BTreeSet;

use super::expand::{int, ints, Ex};
use crate::consts;
use crate::error::ImportErrorKind as E;

/// The op types this file expands.
pub const EINSUM_OPS: &[&str] = &["Einsum"];

/// A broadcast (`...`) axis's label: `ELLIPSIS + k`, `k` counted from the right.
const ELLIPSIS: u32 = 1 << 20;

/// One operand in progress: the value's name, its axes' labels and lengths.
struct Term {
    v: String,
    labels: Vec<u32>,
    dims: Vec<usize>,
}

/// Expands the `Einsum` node of `ex`; its outputs.
pub(super) fn expand(ex: &mut Ex<'_, '_>) -> Result<Vec<Option<String>>, E> {
    let eq = ex.attrs().string("equation").map_err(|e| ex.attr_err(e))?;
    let eq = eq.ok_or_else(|| ex.attr_fail("equation", "is required"))?;
    let text: String = eq.chars().filter(|c| !c.is_whitespace()).collect();
    let (lhs, rhs) = match text.split_once("->") {
        Some((l, r)) => (l, Some(r)),
        None => (text.as_str(), None),
    };
    let written: Vec<&str> = lhs.split(',').collect();
    let n_in = ex.node.input.len();
    if written.len() != n_in {
        return Err(bad(ex, &eq, format!("{} terms for {n_in} inputs", written.len())));
    }
    let mut terms = Vec::with_capacity(n_in);
    let mut broadcast = 0usize;
    for (i, w) in written.iter().enumerate() {
        let v = ex.input(i)?;
        let t = ex.ty(&v)?;
        let labels =
            labels_of(w, t.rank()).map_err(|m| bad(ex, &eq, format!("term {i} ('{w}') for an input of {t}: {m}")))?;
        broadcast = broadcast.max(labels.iter().filter(|&&l| l >= ELLIPSIS).count());
        terms.push(Term { v, labels, dims: t.shape.clone() });
    }
    let out: Vec<u32> = match rhs {
        Some(r) => labels_of(r, r.replace("...", "").len() + if r.contains("...") { broadcast } else { 0 })
            .map_err(|m| bad(ex, &eq, format!("the output: {m}")))?,
        None => {
            let mut once = BTreeSet::new();
            for l in terms.iter().flat_map(|t| &t.labels).filter(|&&l| l < ELLIPSIS) {
                if terms.iter().flat_map(|t| &t.labels).filter(|&m| m == l).count() == 1 {
                    once.insert(*l);
                }
            }
            (0..broadcast as u32).rev().map(|k| ELLIPSIS + k).chain(once).collect()
        }
    };
    // Lengths agree per letter (broadcast axes may be 1 against a longer one).
    let mut lengths = std::collections::BTreeMap::<u32, usize>::new();
    for t in &terms {
        for (&l, &d) in t.labels.iter().zip(&t.dims) {
            let e = lengths.entry(l).or_insert(d);
            if *e != d && !(l >= ELLIPSIS && (*e == 1 || d == 1)) {
                return Err(bad(ex, &eq, format!("'{}' has length {e} in one place and {d} in another", name(l))));
            }
            *e = (*e).max(d);
        }
    }
    if let Some(&l) = out.iter().find(|l| !lengths.contains_key(l)) {
        return Err(bad(ex, &eq, format!("the output's '{}' is in no input", name(l))));
    }
    // Rule 2: diagonals.
    for t in &mut terms {
        diagonals(ex, t)?;
    }
    // Rule 3: sums of letters only one operand has.
    for i in 0..terms.len() {
        let keep: BTreeSet<u32> = terms
            .iter()
            .enumerate()
            .filter(|&(j, _)| j != i)
            .flat_map(|(_, t)| t.labels.iter().copied())
            .chain(out.iter().copied())
            .collect();
        sum_out(ex, &mut terms[i], &keep)?;
    }
    // Rule 4: products.
    let mut rest = terms.into_iter();
    let mut cur = rest.next().ok_or_else(|| bad(ex, &eq, "no operands".into()))?;
    let rest: Vec<Term> = rest.collect();
    for (i, t) in rest.iter().enumerate() {
        let later: BTreeSet<u32> =
            rest[i + 1..].iter().flat_map(|t| t.labels.iter().copied()).chain(out.iter().copied()).collect();
        cur = product(ex, cur, t, &later).map_err(|e| match e {
            Ok(m) => bad(ex, &eq, m),
            Err(e) => e,
        })?;
    }
    // Rule 5: the output's order.
    let keep: BTreeSet<u32> = out.iter().copied().collect();
    sum_out(ex, &mut cur, &keep)?;
    let perm: Vec<i64> = out.iter().map(|l| cur.labels.iter().position(|m| m == l).map_or(0, |p| p as i64)).collect();
    let y = if perm.iter().enumerate().all(|(i, &p)| i as i64 == p) {
        ex.op("Identity", &[&cur.v], vec![])?
    } else {
        ex.op("Transpose", &[&cur.v], vec![ints("perm", perm)])?
    };
    Ok(vec![Some(y)])
}

/// An error about the equation `eq`.
fn bad(ex: &Ex<'_, '_>, eq: &str, m: String) -> E {
    ex.attr_fail("equation", format!("'{eq}': {m}"))
}

/// A label as the equation writes it.
fn name(l: u32) -> String {
    if l >= ELLIPSIS {
        "...".into()
    } else {
        char::from_u32(l).map_or_else(|| "?".into(), String::from)
    }
}

/// The labels of term `w` for an operand of rank `rank`.
fn labels_of(w: &str, rank: usize) -> Result<Vec<u32>, String> {
    let (before, after) = match w.split_once("...") {
        Some((b, a)) => (b, Some(a)),
        None => (w, None),
    };
    let letters = |s: &str| -> Result<Vec<u32>, String> {
        s.chars()
            .map(|c| if c.is_ascii_alphabetic() { Ok(c as u32) } else { Err(format!("'{c}' is not a letter")) })
            .collect()
    };
    let mut labels = letters(before)?;
    match after {
        None if labels.len() != rank => Err(format!("{} letters for {rank} axes", labels.len())),
        None => Ok(labels),
        Some(a) => {
            let tail = letters(a)?;
            let fixed = labels.len() + tail.len();
            let Some(e) = rank.checked_sub(fixed) else {
                return Err(format!("{fixed} letters for {rank} axes"));
            };
            labels.extend((0..e as u32).rev().map(|k| ELLIPSIS + k));
            labels.extend(tail);
            Ok(labels)
        }
    }
}

/// Takes the diagonal of every letter repeated in `t` (rule 2).
fn diagonals(ex: &mut Ex<'_, '_>, t: &mut Term) -> Result<(), E> {
    while let Some((p, q)) = (0..t.labels.len())
        .find_map(|p| t.labels[p + 1..].iter().position(|&l| l == t.labels[p]).map(|d| (p, p + 1 + d)))
    {
        let n = t.dims[p];
        let dt = ex.ty(&t.v)?.dt;
        let mut shape = vec![1usize; t.dims.len()];
        shape[p] = n;
        shape[q] = n;
        let eye: Vec<f64> = (0..n * n).map(|i| if i / n == i % n { 1.0 } else { 0.0 }).collect();
        let eye = consts::from_f64s(dt, &shape, &eye).map_err(|e| ex.fail(e.to_string()))?;
        let eye = ex.constant("eye", eye);
        let masked = ex.op("Mul", &[&t.v, &eye], vec![])?;
        let axis = ex.ints(&[q as i64])?;
        t.v = ex.op("ReduceSum", &[&masked, &axis], vec![int("keepdims", 0)])?;
        t.labels.remove(q);
        t.dims.remove(q);
    }
    Ok(())
}

/// Sums `t` over its letters not in `keep` (rule 3).
fn sum_out(ex: &mut Ex<'_, '_>, t: &mut Term, keep: &BTreeSet<u32>) -> Result<(), E> {
    let axes: Vec<i64> = (0..t.labels.len()).filter(|&i| !keep.contains(&t.labels[i])).map(|i| i as i64).collect();
    if axes.is_empty() {
        return Ok(());
    }
    let a = ex.ints(&axes)?;
    t.v = ex.op("ReduceSum", &[&t.v, &a], vec![int("keepdims", 0)])?;
    let kept: Vec<usize> = (0..t.labels.len()).filter(|&i| keep.contains(&t.labels[i])).collect();
    t.labels = kept.iter().map(|&i| t.labels[i]).collect();
    t.dims = kept.iter().map(|&i| t.dims[i]).collect();
    Ok(())
}

/// `t` transposed to `order` and reshaped to `shape`.
fn arrange(ex: &mut Ex<'_, '_>, t: &Term, order: &[u32], shape: &[i64]) -> Result<String, E> {
    let perm: Vec<i64> = order.iter().map(|l| t.labels.iter().position(|m| m == l).map_or(0, |p| p as i64)).collect();
    let moved = if perm.iter().enumerate().all(|(i, &p)| i as i64 == p) {
        t.v.clone()
    } else {
        ex.op("Transpose", &[&t.v], vec![ints("perm", perm)])?
    };
    let dims: Vec<i64> =
        order.iter().map(|l| t.labels.iter().position(|m| m == l).map_or(1, |p| t.dims[p] as i64)).collect();
    if dims == shape {
        return Ok(moved);
    }
    let shape = ex.ints(shape)?;
    ex.op("Reshape", &[&moved, &shape], vec![])
}

/// The product of the running result `a` and the next operand `b` (rule 4); `later`: the letters still needed.
/// `Err(Ok(message))` is a fault of the equation.
fn product(ex: &mut Ex<'_, '_>, a: Term, b: &Term, later: &BTreeSet<u32>) -> Result<Term, Result<String, E>> {
    let has = |t: &Term, l: u32| t.labels.contains(&l);
    let dim = |t: &Term, l: u32| t.labels.iter().position(|&m| m == l).map_or(1, |p| t.dims[p]);
    let batch: Vec<u32> = a.labels.iter().copied().filter(|&l| has(b, l) && later.contains(&l)).collect();
    let contracted: Vec<u32> = a.labels.iter().copied().filter(|&l| has(b, l) && !later.contains(&l)).collect();
    let rows: Vec<u32> = a.labels.iter().copied().filter(|&l| !has(b, l)).collect();
    let cols: Vec<u32> = b.labels.iter().copied().filter(|&l| !has(&a, l)).collect();
    if let Some(&l) = contracted.iter().find(|&&l| dim(&a, l) != dim(b, l)) {
        return Err(Ok(format!("'{}' is summed but broadcast ({} against {})", name(l), dim(&a, l), dim(b, l))));
    }
    let prod = |t: &Term, ls: &[u32]| ls.iter().map(|&l| dim(t, l) as i64).product::<i64>();
    let k = prod(&a, &contracted);
    let (m, n) = (prod(&a, &rows), prod(b, &cols));
    let batch_of = |t: &Term| batch.iter().map(|&l| dim(t, l) as i64).collect::<Vec<_>>();
    let order_a: Vec<u32> = batch.iter().chain(&rows).chain(&contracted).copied().collect();
    let order_b: Vec<u32> = batch.iter().chain(&contracted).chain(&cols).copied().collect();
    let sa: Vec<i64> = batch_of(&a).into_iter().chain([m, k]).collect();
    let sb: Vec<i64> = batch_of(b).into_iter().chain([k, n]).collect();
    let xa = arrange(ex, &a, &order_a, &sa).map_err(Err)?;
    let xb = arrange(ex, b, &order_b, &sb).map_err(Err)?;
    let y = ex.op("MatMul", &[&xa, &xb], vec![]).map_err(Err)?;
    let labels: Vec<u32> = batch.iter().chain(&rows).chain(&cols).copied().collect();
    let dims: Vec<usize> = batch
        .iter()
        .map(|&l| dim(&a, l).max(dim(b, l)))
        .chain(rows.iter().map(|&l| dim(&a, l)))
        .chain(cols.iter().map(|&l| dim(b, l)))
        .collect();
    let v = if ex.ty(&y).map_err(Err)?.shape == dims {
        y
    } else {
        let shape = ex.ints(&dims.iter().map(|&d| d as i64).collect::<Vec<_>>()).map_err(Err)?;
        ex.op("Reshape", &[&y, &shape], vec![]).map_err(Err)?
    };
    Ok(Term { v, labels, dims })
}
