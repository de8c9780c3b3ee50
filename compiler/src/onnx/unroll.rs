//! `Scan` and `Loop` unrolled at import ([`super::expand`]), when the number of iterations is known: a `Scan`'s
//! from its scan inputs' static length, a `Loop`'s from a constant trip count (an input given at run time is fixed
//! by `stowage run`, which lists it among the inputs that set shapes) and a condition that folds to true in every
//! iteration. The body is imported once per iteration with its names made unique (`NODE::itK::NAME`), its state
//! inputs bound to the previous iteration's values, so state stays where it is: no copy per iteration. Scan inputs
//! are taken along their axes (`Gather`), scan outputs stacked along theirs (`Unsqueeze`, `Concat`); opset 8's
//! `Scan`, with its batch axis, runs the body per batch element and stacks the results back. At most
//! [`MAX_STEPS`] iterations; a trip count or condition known only at run time, a body of the wrong signature and
//! nesting past [`super::branch::MAX_DEPTH`] are one-line errors naming the node, except where a target runs the
//! op whole: a loop or scan not unrolled is then kept as one node with its body (`iterated.rs`).

use std::collections::HashMap;

use super::expand::{int, Ex, MAX_STEPS};
use super::proto::{GraphProto, NodeProto};
use crate::error::ImportErrorKind as E;

fn body<'a>(ex: &Ex<'a, '_>) -> Result<&'a GraphProto, E> {
    ex.node
        .attribute
        .iter()
        .find(|a| a.name() == "body")
        .and_then(|a| a.g.as_ref())
        .ok_or_else(|| ex.attr_fail("body", "is missing (a graph is required)"))
}

/// Imports one iteration of `g`, its inputs bound to `inputs` (names in scope); returns the names of its outputs.
pub(super) fn iteration(
    ex: &mut Ex<'_, '_>,
    g: &GraphProto,
    it: usize,
    inputs: &[String],
    inits: &HashMap<String, String>,
) -> Result<Vec<String>, E> {
    let mut map: HashMap<String, String> = inits.clone();
    for (vi, v) in g.input.iter().zip(inputs) {
        let fresh = ex.fresh_name(&format!("it{it}::{}", vi.name()));
        ex.bind(&fresh, v)?;
        map.insert(vi.name().into(), fresh);
    }
    for n in &g.node {
        for o in n.output.iter().filter(|o| !o.is_empty()) {
            let fresh = ex.fresh_name(&format!("it{it}::{o}"));
            map.insert(o.clone(), fresh);
        }
    }
    let renamed: Vec<NodeProto> = g
        .node
        .iter()
        .enumerate()
        .map(|(k, n)| {
            let mut n = n.clone();
            rename(&mut n, &map);
            n.name = Some(format!(
                "{}::it{it}::{}",
                ex.name,
                if n.name().is_empty() { format!("{}_{k}", n.op_type()) } else { n.name().to_string() }
            ));
            n
        })
        .collect();
    ex.import_nodes(&renamed)?;
    Ok(g.output.iter().map(|o| map.get(o.name()).cloned().unwrap_or_else(|| o.name().to_string())).collect())
}

/// Renames the body names of `map` wherever `n` reads or writes them, in its subgraphs too (ONNX names are unique
/// across nesting, so a nested graph never defines one of them again).
fn rename(n: &mut NodeProto, map: &HashMap<String, String>) {
    for s in n.input.iter_mut().chain(n.output.iter_mut()) {
        if let Some(r) = map.get(s.as_str()) {
            *s = r.clone();
        }
    }
    for a in &mut n.attribute {
        for g in a.g.iter_mut().chain(a.graphs.iter_mut()) {
            for inner in &mut g.node {
                rename(inner, map);
            }
            // A nested graph's output may be a body value itself (a branch passing it through).
            for o in &mut g.output {
                if let Some(r) = o.name.as_ref().and_then(|n| map.get(n.as_str())) {
                    o.name = Some(r.clone());
                }
            }
        }
    }
}

/// The body's initializers as constants in scope, by their names in the body.
pub(super) fn initializers(ex: &mut Ex<'_, '_>, g: &GraphProto) -> Result<HashMap<String, String>, E> {
    let mut map = HashMap::new();
    for init in &g.initializer {
        let t = ex.decode(init)?;
        let c = ex.constant(init.name(), t);
        map.insert(init.name().to_string(), c);
    }
    Ok(map)
}

fn stack(ex: &mut Ex<'_, '_>, parts: &[String], axis: i64) -> Result<String, E> {
    let ax = ex.ints(&[axis])?;
    let mut each = Vec::with_capacity(parts.len());
    for p in parts {
        each.push(ex.op("Unsqueeze", &[p, &ax], vec![])?);
    }
    if each.len() == 1 {
        return Ok(each.remove(0));
    }
    let refs: Vec<&str> = each.iter().map(String::as_str).collect();
    ex.op("Concat", &refs, vec![int("axis", axis)])
}

fn axis_list(ex: &Ex<'_, '_>, attr: &str, count: usize) -> Result<Vec<i64>, E> {
    match ex.attrs().ints(attr).map_err(|e| ex.attr_err(e))? {
        None => Ok(vec![0; count]),
        Some(v) if v.len() == count => Ok(v),
        Some(v) => Err(ex.attr_fail(attr, format!("has {} values for {count} scan values", v.len()))),
    }
}

/// Expands the `Scan` of `ex` (opset 9 on); its outputs.
pub(super) fn scan(ex: &mut Ex<'_, '_>) -> Result<Vec<Option<String>>, E> {
    if ex.opset() < 9 {
        return scan_8(ex);
    }
    let g = body(ex)?;
    let m = ex.attrs().count_or("num_scan_inputs", 0).map_err(|e| ex.attr_err(e))?;
    let given: Vec<String> = ex.node.input.clone();
    if m == 0 || m > given.len() {
        return Err(ex.attr_fail("num_scan_inputs", format!("must be 1 to the node's {} inputs", given.len())));
    }
    let n = given.len() - m;
    let k = g
        .output
        .len()
        .checked_sub(n)
        .ok_or_else(|| ex.fail(format!("its body makes {} outputs, fewer than its {n} states", g.output.len())))?;
    if g.input.len() != n + m {
        return Err(ex.fail(format!(
            "its body takes {} inputs; with {n} states and {m} scan inputs it must take {}",
            g.input.len(),
            n + m
        )));
    }
    let in_axes = axis_list(ex, "scan_input_axes", m)?;
    let in_dirs = axis_list(ex, "scan_input_directions", m)?;
    let out_axes = axis_list(ex, "scan_output_axes", k)?;
    let out_dirs = axis_list(ex, "scan_output_directions", k)?;
    for (attr, dirs) in [("scan_input_directions", &in_dirs), ("scan_output_directions", &out_dirs)] {
        if dirs.iter().any(|&d| d != 0 && d != 1) {
            return Err(ex.attr_fail(attr, format!("{dirs:?} must hold 0 (forward) or 1 (reverse)")));
        }
    }
    let mut steps = None;
    let mut scans = Vec::with_capacity(m);
    for (j, name) in given[n..].iter().enumerate() {
        let t = ex.ty(name)?;
        let r = t.rank() as i64;
        let a = if in_axes[j] < 0 { in_axes[j] + r } else { in_axes[j] };
        if !(0..r).contains(&a) {
            return Err(
                ex.attr_fail("scan_input_axes", format!("axis {} is out of range for scan input {t}", in_axes[j]))
            );
        }
        let len = t.shape[a as usize];
        if steps.is_some_and(|s| s != len) {
            return Err(ex.fail(format!(
                "its scan inputs differ in length along their axes ({len} and {})",
                steps.unwrap_or(0)
            )));
        }
        steps = Some(len);
        scans.push((name.clone(), a));
    }
    let steps = steps.unwrap_or(0);
    // Where a target runs a Scan whole, one too long to unroll is kept as one node with its body (`iterated.rs`).
    let kept_or = |ex: &mut Ex<'_, '_>, e: E| -> Result<Vec<Option<String>>, E> {
        let dirs = (in_dirs.as_slice(), out_axes.as_slice(), out_dirs.as_slice());
        match super::iterated::keep_scan(ex, g, n, &scans, dirs)? {
            Some(outputs) => Ok(outputs),
            None => Err(e),
        }
    };
    if steps == 0 || steps > MAX_STEPS {
        let e = ex.fail(format!("a scan of {steps} iterations is not unrolled (stowage unrolls 1 to {MAX_STEPS})"));
        return if steps == 0 { Err(e) } else { kept_or(ex, e) };
    }
    if let Err(e) = ex.spend(steps.saturating_mul(g.node.len() + m + k)) {
        return kept_or(ex, e);
    }
    let inits = initializers(ex, g)?;
    let mut states: Vec<String> = given[..n].to_vec();
    let mut outs: Vec<Vec<String>> = vec![Vec::new(); k];
    for it in 0..steps {
        let mut inputs = states.clone();
        for (j, (name, a)) in scans.iter().enumerate() {
            let t = if in_dirs[j] == 1 { steps - 1 - it } else { it };
            let at = ex.constant(
                "index",
                stowage_runtime::Tensor::from_vec(&[], vec![t as i64]).map_err(|e| ex.fail(e.to_string()))?,
            );
            inputs.push(ex.op("Gather", &[name, &at], vec![int("axis", *a)])?);
        }
        let produced = iteration(ex, g, it, &inputs, &inits)?;
        states = produced[..n].to_vec();
        for (j, v) in produced[n..].iter().enumerate() {
            outs[j].push(v.clone());
        }
    }
    let mut result: Vec<Option<String>> = states.into_iter().map(Some).collect();
    for (j, mut parts) in outs.into_iter().enumerate() {
        if out_dirs[j] == 1 {
            parts.reverse();
        }
        let rank = ex.ty(&parts[0])?.rank() as i64 + 1;
        let a = if out_axes[j] < 0 { out_axes[j] + rank } else { out_axes[j] };
        result.push(Some(stack(ex, &parts, a)?));
    }
    Ok(result)
}

/// A scalar int64 constant.
fn index(ex: &mut Ex<'_, '_>, i: usize) -> Result<String, E> {
    let t = stowage_runtime::Tensor::from_vec(&[], vec![i as i64]).map_err(|e| ex.fail(e.to_string()))?;
    Ok(ex.constant("index", t))
}

/// `Scan` of opset 8: `sequence_lens`, then states `[batch, …]` and scan inputs `[batch, steps, …]`, the body run
/// for each batch element over its steps (scan inputs along axis 1, `directions` per scan input); final states
/// `[batch, …]`, scan outputs `[batch, steps, …]`. Lengths shorter than the scan inputs are refused by name.
fn scan_8(ex: &mut Ex<'_, '_>) -> Result<Vec<Option<String>>, E> {
    let g = body(ex)?;
    let m = ex.attrs().count_or("num_scan_inputs", 0).map_err(|e| ex.attr_err(e))?;
    let given: Vec<String> = ex.node.input.clone();
    if m == 0 || m + 1 > given.len() {
        return Err(ex.attr_fail(
            "num_scan_inputs",
            format!("must be 1 to the node's {} inputs after sequence_lens", given.len().saturating_sub(1)),
        ));
    }
    let n = given.len() - 1 - m;
    let k = g.output.len().checked_sub(n).filter(|_| g.input.len() == n + m).ok_or_else(|| {
        ex.fail(format!(
            "its body takes {} inputs and makes {} outputs; with {n} states and {m} scan inputs it must take {}",
            g.input.len(),
            g.output.len(),
            n + m
        ))
    })?;
    let dirs = axis_list(ex, "directions", m)?;
    if dirs.iter().any(|&d| d != 0 && d != 1) {
        return Err(ex.attr_fail("directions", format!("{dirs:?} must hold 0 (forward) or 1 (reverse)")));
    }
    let first = ex.ty(&given[1 + n])?;
    if first.rank() < 2 {
        return Err(ex.fail(format!("scan input '{}' is {first}: opset 8 scans [batch, steps, …]", given[1 + n])));
    }
    let (batch, steps) = (first.shape[0], first.shape[1]);
    if batch == 0 {
        return Err(ex.fail(format!("scan input '{}' is {first}: a batch of 0 elements", given[1 + n])));
    }
    for (k, name) in given[1..].iter().enumerate() {
        let t = ex.ty(name)?;
        if t.shape.first() != Some(&batch) {
            return Err(
                ex.fail(format!("'{name}' is {t}: every state and scan input has the batch axis ({batch}) first"))
            );
        }
        if k >= n && t.shape.get(1) != Some(&steps) {
            return Err(ex.fail(format!("scan input '{name}' is {t}: every scan input has {steps} steps along axis 1")));
        }
    }
    if let Some(lens) = ex.optional(0) {
        let full = ex
            .value(&lens)
            .and_then(|t| crate::consts::to_i64s(t).ok())
            .is_some_and(|v| v.len() == batch && v.iter().all(|&l| l == steps as i64));
        if !full {
            return Err(ex.fail(format!(
                "sequence_lens '{lens}' is not {steps} for each of the {batch} batch elements (known at import): \
                 shorter sequences are not supported"
            )));
        }
    }
    if steps == 0 || steps.saturating_mul(batch) > MAX_STEPS {
        return Err(ex.fail(format!(
            "a scan of {batch} × {steps} iterations is not unrolled (stowage unrolls 1 to {MAX_STEPS})"
        )));
    }
    ex.spend(batch.saturating_mul(steps).saturating_mul(g.node.len() + m + k))?;
    let inits = initializers(ex, g)?;
    let mut finals: Vec<Vec<String>> = vec![Vec::new(); n];
    let mut outs: Vec<Vec<String>> = vec![Vec::new(); k];
    for b in 0..batch {
        let at = index(ex, b)?;
        let mut states = Vec::with_capacity(n);
        for name in &given[1..1 + n] {
            states.push(ex.op("Gather", &[name, &at], vec![int("axis", 0)])?);
        }
        let mut rows = Vec::with_capacity(m);
        for name in &given[1 + n..] {
            rows.push(ex.op("Gather", &[name, &at], vec![int("axis", 0)])?);
        }
        let mut parts: Vec<Vec<String>> = vec![Vec::new(); k];
        for it in 0..steps {
            let mut inputs = states.clone();
            for (j, row) in rows.iter().enumerate() {
                let t = index(ex, if dirs[j] == 1 { steps - 1 - it } else { it })?;
                inputs.push(ex.op("Gather", &[row, &t], vec![int("axis", 0)])?);
            }
            let produced = iteration(ex, g, b * steps + it, &inputs, &inits)?;
            states = produced[..n].to_vec();
            for (j, v) in produced[n..].iter().enumerate() {
                parts[j].push(v.clone());
            }
        }
        for (j, s) in states.into_iter().enumerate() {
            finals[j].push(s);
        }
        for (j, p) in parts.into_iter().enumerate() {
            outs[j].push(stack(ex, &p, 0)?);
        }
    }
    let mut result = Vec::with_capacity(n + k);
    for parts in finals.iter().chain(&outs) {
        result.push(Some(stack(ex, parts, 0)?));
    }
    Ok(result)
}

/// Expands the `Loop` of `ex`; its outputs.
pub(super) fn r#loop(ex: &mut Ex<'_, '_>) -> Result<Vec<Option<String>>, E> {
    let g = body(ex)?;
    let carried: Vec<String> = ex.node.input.iter().skip(2).cloned().collect();
    let n = carried.len();
    if g.input.len() != n + 2 || g.output.len() < n + 1 {
        return Err(ex.fail(format!("its body takes {} inputs and makes {} outputs; with {n} carried values it must take {} and make at least {}", g.input.len(), g.output.len(), n + 2, n + 1)));
    }
    // Where a target runs a Loop whole, one not unrolled is kept as one node with its body (`iterated.rs`);
    // otherwise `e`, the import's error.
    let kept_or = |ex: &mut Ex<'_, '_>, e: E| -> Result<Vec<Option<String>>, E> {
        match super::iterated::keep(ex, g, &carried)? {
            Some(outputs) => Ok(outputs),
            None => Err(e),
        }
    };
    let trip = ex.optional(0);
    let trips = match &trip {
        None => None,
        Some(t) => match ex.value(t).and_then(|v| crate::consts::to_i64s(v).ok()).filter(|v| v.len() == 1) {
            Some(v) => Some(v[0]),
            None => {
                let e = ex.needs_value(format!("its trip count '{t}' is known only at run time: stowage unrolls a Loop whose trip count is known when the model is imported (fix it with --input-value, one int64)"));
                return kept_or(ex, e);
            }
        },
    };
    let truth =
        |ex: &Ex<'_, '_>, v: &str| ex.value(v).and_then(|t| t.as_bytes().ok().map(|b| b.iter().any(|&x| x != 0)));
    if let Some(c) = ex.optional(1) {
        if truth(ex, &c).is_none() {
            let e = ex.needs_value(format!("its condition '{c}' is known only at run time: fix it with --input-value"));
            return kept_or(ex, e);
        }
    }
    // Loops that are not unrolled are iterated at run time when the driver compiles in stages (`needs_value`).
    // Only a top-level Loop is iterated (a nested one would stop its holder again), and only one that ends.
    let iterated = |ex: &mut Ex<'_, '_>, m: String| -> Result<Vec<Option<String>>, E> {
        let e = if ex.at.depth == 0 { ex.needs_value(m) } else { ex.fail(m) };
        kept_or(ex, e)
    };
    let trips = match trips {
        Some(t) => t,
        None if ex.optional(1).is_none() => {
            return Err(ex.fail("it has neither a trip count nor a condition: it would never end"))
        }
        None => return iterated(ex, "it has no trip count: stowage unrolls only Loops of a known trip count, and iterates the others when it runs them".into()),
    };
    let initially = ex.optional(1).map(|c| truth(ex, &c) == Some(true)).unwrap_or(true);
    if !(0..=MAX_STEPS as i64).contains(&trips) {
        return iterated(ex, format!(
            "a loop of {trips} iterations is not unrolled (stowage unrolls 0 to {MAX_STEPS}, and iterates the others when it runs them)"
        ));
    }
    // A loop too large to unroll within the model's budget is kept whole where a target runs it so.
    if let Err(e) = ex.spend((trips as usize).saturating_mul(g.node.len() + 1)) {
        return kept_or(ex, e);
    }
    let inits = initializers(ex, g)?;
    let mut states = carried.clone();
    // Without a condition input the body's condition output is ignored (the loop runs its trip count).
    let conditioned = ex.optional(1).is_some();
    let mut outs: Vec<Vec<String>> = vec![Vec::new(); g.output.len() - n - 1];
    let mut go = initially;
    let mut cond = match ex.optional(1) {
        Some(c) => c,
        None => {
            ex.constant("cond", stowage_runtime::Tensor::from_vec(&[], vec![true]).map_err(|e| ex.fail(e.to_string()))?)
        }
    };
    for it in 0..trips as usize {
        if !go {
            break;
        }
        let i = ex.constant(
            "iteration",
            stowage_runtime::Tensor::from_vec(&[], vec![it as i64]).map_err(|e| ex.fail(e.to_string()))?,
        );
        let mut inputs = vec![i, cond.clone()];
        inputs.extend(states.iter().cloned());
        let produced = iteration(ex, g, it, &inputs, &inits)?;
        cond = produced[0].clone();
        if conditioned {
            go = match truth(ex, &cond) {
                Some(go) => go,
                // The iterations imported so far are dead once the loop is kept whole (`dce` removes them).
                None => return iterated(ex, format!("the condition its body computes in iteration {it} is known only at run time: a loop that ends on data is not unrolled (stowage iterates it when it runs it)")),
            };
        }
        states = produced[1..=n].to_vec();
        for (j, v) in produced[n + 1..].iter().enumerate() {
            outs[j].push(v.clone());
        }
    }
    let mut result: Vec<Option<String>> = states.into_iter().map(Some).collect();
    for parts in outs {
        if parts.is_empty() {
            return Err(
                ex.fail("a loop that runs no iteration and has scan outputs (of unknown shape) is not supported")
            );
        }
        result.push(Some(stack(ex, &parts, 0)?));
    }
    Ok(result)
}
