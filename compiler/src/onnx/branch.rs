//! `If` at import: a condition known when the model is imported selects a branch, whose nodes are imported in the
//! `If`'s place, so the other branch leaves no trace in the graph, the plan or the report.
//!
//! Trained models carry `If`s that exporters wrote for shape checks and options (a sample-rate switch, a guard on a
//! dimension): their conditions are constants, shape computations (folded as they are imported: `Shape`, `Gather`,
//! `Equal`…) or inputs a caller fixes with `--input-value`. The rules:
//! 1. **Outer values are explicit.** A node's subgraphs read values of the scopes around them by name;
//!    [`outer_inputs`] lists those names, and the importer's dependency order counts them as the node's inputs, so
//!    an `If` comes after every value its branches read, wherever the file puts it.
//! 2. **A condition known at import takes one branch; one known only at run time takes both.** A folded condition
//!    imports only the branch it selects. Otherwise both branches are imported and each output is
//!    `Where(condition, then, else)` (nodes `IF::selectK`): both branches run on every run, so a caller who knows
//!    the condition fixes it with `--input-value` to run one. Branches whose outputs differ in type cannot be
//!    selected this way: an error naming the node, the output and both types. With
//!    `ImportConfig::branch_at_run_time` (the driver's runs), a top-level `If` asks for its condition instead
//!    (`ImportErrorKind::NeedsValue`): the model is compiled in stages and only the branch taken runs
//!    (`driver/src/stages.rs`); nested `If`s still take both. Where a target of the run executes an `If` whole
//!    (`ImportConfig::whole` holds "If": the CPU), the node is kept as an `Op::If` with both branches as
//!    subgraphs (`ir/subgraph.rs`), and only the branch taken runs, wherever it is nested. Where every target
//!    does (`ImportConfig::keep_top_level_if`: a run on the CPU alone), a top-level `If` is kept so too rather
//!    than cut at, when its branches import as they are and agree in type: the branch taken runs inside the
//!    run's program, with no stage between (openWakeWord's verifier behind its threshold: 27.5 → 23.7 µs a run);
//!    one that cannot be kept (branches that differ in shape, a branch that needs a value of the run) is cut at.
//! 3. **Branches agree.** Both branches are present, take no inputs, and make as many outputs as the node has;
//!    otherwise an error names the node and the branch.
//! 4. **The branch's names stay in the branch.** Its initializers and node outputs are visible to its own nodes and
//!    to branches nested in it, not after it; a name that shadows an outer one is an error (ONNX forbids it). The
//!    `If`'s outputs are the branch's output values.
//! 5. **Nesting is bounded** by [`MAX_DEPTH`], checked before each level: a deep model is an error, not a stack
//!    overflow.

use std::collections::HashSet;

use super::import::At;
use super::proto::{GraphProto, NodeProto};
use stowage_runtime::{DatumType, Tensor};

use super::scope::{Composite, Scope};
use super::structure::Structure;
use crate::error::ImportErrorKind as E;
use crate::ir::{Graph, ValueId, ValueType};

/// How deep subgraphs may nest.
pub const MAX_DEPTH: usize = crate::ir::subgraph::MAX_DEPTH;

/// The graphs a node's attributes hold.
fn subgraphs(node: &NodeProto) -> impl Iterator<Item = &GraphProto> {
    node.attribute.iter().flat_map(|a| a.g.iter().chain(&a.graphs))
}

/// The names `node`'s subgraphs read from the scopes around the node (rule 1), each once, in first-use order.
/// Nesting past [`MAX_DEPTH`] is not walked (importing the node fails on its depth, rule 5).
pub fn outer_inputs(node: &NodeProto) -> Vec<&str> {
    let mut out = Vec::new();
    let mut seen = HashSet::new();
    for g in subgraphs(node) {
        free_names(g, 0, &mut seen, &mut out);
    }
    out
}

/// Adds to `out` the names `g`'s nodes (and their subgraphs) read that `g` does not define.
fn free_names<'g>(g: &'g GraphProto, depth: usize, seen: &mut HashSet<&'g str>, out: &mut Vec<&'g str>) {
    if depth > MAX_DEPTH {
        return;
    }
    let defined: HashSet<&str> = g
        .input
        .iter()
        .map(|i| i.name())
        .chain(g.initializer.iter().map(|t| t.name()))
        .chain(g.node.iter().flat_map(|n| n.output.iter().map(String::as_str)))
        .collect();
    for o in g.output.iter().map(|o| o.name()) {
        if !o.is_empty() && !defined.contains(o) && seen.insert(o) {
            out.push(o);
        }
    }
    for n in &g.node {
        let mut inner = Vec::new();
        let mut inner_seen = HashSet::new();
        for sub in subgraphs(n) {
            free_names(sub, depth + 1, &mut inner_seen, &mut inner);
        }
        for name in n.input.iter().map(String::as_str).chain(inner) {
            if !name.is_empty() && !defined.contains(name) && seen.insert(name) {
                out.push(name);
            }
        }
    }
}

/// Imports `node`, an `If` named `name`, as the branch its condition selects (rules 2 to 5). The branch's names
/// are added to `names` while it is imported and taken out after (rule 4): no copy of the scope is made, so a model
/// of many `If`s imports in time linear in its nodes.
pub(super) fn inline_if(
    graph: &mut Graph,
    names: &mut Scope,
    node: &NodeProto,
    name: &str,
    at: At<'_>,
) -> Result<(), E> {
    let At { depth, .. } = at;
    let fail = |message: String| E::Node { node: name.into(), op: "If".into(), message };
    if depth >= MAX_DEPTH {
        return Err(fail(format!("its subgraphs nest more than {MAX_DEPTH} deep")));
    }
    let branch = |attr: &str| {
        node.attribute.iter().find(|a| a.name() == attr).and_then(|a| a.g.as_ref()).ok_or_else(|| E::Attribute {
            node: name.into(),
            op: "If".into(),
            attr: attr.into(),
            message: "is missing (an If needs both branches as graphs)".into(),
        })
    };
    let (then, otherwise) = (branch("then_branch")?, branch("else_branch")?);
    for (attr, g) in [("then_branch", then), ("else_branch", otherwise)] {
        if g.output.len() != node.output.len() || !g.input.is_empty() {
            return Err(fail(format!(
                "its {attr} takes {} inputs and makes {} outputs; an If's branches take none and make as many as \
                 the node has ({})",
                g.input.len(),
                g.output.len(),
                node.output.len()
            )));
        }
    }
    let cond_name = node.input.first().map(String::as_str).unwrap_or_default();
    let cond = names.get(cond_name).copied().ok_or_else(|| fail("has no condition input".into()))?;
    let inner = At { depth: depth + 1, ..at };
    let outputs = match graph.const_value(cond) {
        Some(value) => {
            let taken = match value.as_bytes() {
                Ok([b]) if value.len() == 1 => *b != 0,
                _ => {
                    return Err(fail(format!(
                        "its condition '{cond_name}' is {}{:?}, not one bool",
                        value.dt(),
                        value.shape()
                    )))
                }
            };
            let (g, which) = if taken { (then, "then") } else { (otherwise, "else") };
            import_branch(graph, names, g, which, inner, &fail)?
        }
        // Rule 2: a top-level If the driver compiles in stages waits for its condition, unless every target runs
        // it whole and it can be kept so. Kept only where keeping it fails on nothing: any error of its branches
        // (one that needs a value of the run, branches that disagree) leaves it to the stages, as before.
        None if at.branch_at_run_time && depth == 0 => {
            if at.keep_top_level_if && at.whole.contains("If") {
                if let Ok(Some(outputs)) = keep(graph, names, node, (then, otherwise), name, inner, &fail) {
                    return bind(names, node, outputs);
                }
            }
            return Err(E::NeedsValue {
                node: name.into(),
                op: "If".into(),
                message: format!(
                    "its condition '{cond_name}' is known only at run time: fix it with --input-value to take one \
                     branch"
                ),
            });
        }
        // `ir/subgraph.rs`: a target that runs an If whole takes both branches as subgraphs.
        None if at.whole.contains("If") => match keep(graph, names, node, (then, otherwise), name, inner, &fail)? {
            Some(outputs) => outputs,
            None => select(graph, names, (then, otherwise), (cond_name, cond), name, inner, &fail)?,
        },
        None => select(graph, names, (then, otherwise), (cond_name, cond), name, inner, &fail)?,
    };
    bind(names, node, outputs)
}

/// Binds the `If`'s output names to the values (or forms) that make them.
fn bind(names: &mut Scope, node: &NodeProto, outputs: Vec<Composite>) -> Result<(), E> {
    for (out, v) in node.output.iter().zip(outputs) {
        if !out.is_empty() && names.bind(out.clone(), v) {
            return Err(E::Duplicate { name: out.clone() });
        }
    }
    Ok(())
}

/// Imports branch `g` (`which`: "then" or "else") in scope and returns its output values; its own names leave
/// scope after (rule 4).
fn import_branch(
    graph: &mut Graph,
    names: &mut Scope,
    g: &GraphProto,
    which: &str,
    at: At<'_>,
    fail: &dyn Fn(String) -> E,
) -> Result<Vec<Composite>, E> {
    for init in &g.initializer {
        let t = super::tensor::decode_within(init, at.dir, at.limit)
            .map_err(|e| fail(format!("initializer '{}' of its branch: {e}", init.name())))?;
        if names.insert(init.name().into(), graph.add_const(init.name(), t)).is_some() {
            return Err(E::Duplicate { name: init.name().into() });
        }
    }
    for i in super::import::topological_order(&g.node, names)? {
        super::import::add_node(graph, names, &g.node[i], i, at)?;
    }
    let mut outputs = Vec::with_capacity(g.output.len());
    for vi in &g.output {
        let v = names.bound(vi.name()).ok_or_else(|| {
            let what = if which == "body" { "body".to_string() } else { format!("{which}_branch") };
            fail(format!("the output '{}' of its {what} is defined by nothing in it", vi.name()))
        })?;
        outputs.push(v);
    }
    // The branch's own names end with it (topological_order refused any that an outer name already had).
    for defined in
        g.initializer.iter().map(|t| t.name()).chain(g.node.iter().flat_map(|n| n.output.iter().map(String::as_str)))
    {
        names.remove(defined);
    }
    Ok(outputs)
}

/// Imports `g`, a subgraph of a node of `graph`, as a graph of its own named `name` (`ir/subgraph.rs`, rule 1):
/// its inputs are `own` (its own inputs, named and typed), then each of `outer`, the values it reads from around
/// the node that are not constants (those are copied in as constants). `None` where it makes a sequence or an
/// optional. `which` names it in errors ("then", "body").
#[allow(clippy::too_many_arguments)]
pub(super) fn subgraph(
    graph: &Graph,
    g: &GraphProto,
    name: &str,
    own: &[(String, crate::ir::ValueType)],
    outer: &[(&str, ValueId)],
    which: &str,
    at: At<'_>,
    fail: &dyn Fn(String) -> E,
) -> Result<Option<Graph>, E> {
    let mut sub = Graph::new(name);
    sub.metadata.opset = graph.metadata.opset;
    let mut scope = Scope::default();
    for (read, ty) in own {
        let v = sub.add_input(read.as_str(), ty.clone());
        scope.insert(read.clone(), v);
    }
    for &(read, v) in outer {
        let inner = match graph.const_value(v) {
            Some(t) => sub.add_const(read, t.clone()),
            None => sub.add_input(read, graph.ty(v).clone()),
        };
        scope.insert(read.to_string(), inner);
    }
    let made = import_branch(&mut sub, &mut scope, g, which, at, fail)?;
    for (vi, out) in g.output.iter().zip(made) {
        match out {
            Structure::Tensor(v) => sub.add_output(vi.name(), v),
            _ => return Ok(None),
        }
    }
    Ok(Some(sub))
}

/// Branches selected at run time must make the same types (rule 2): otherwise the condition is needed
/// (`NeedsValue`, so that a driver that can fix it, or what the branches read, tries again).
fn agree(then: &[ValueType], otherwise: &[ValueType], name: &str, cond_name: &str) -> Result<(), E> {
    match then.iter().zip(otherwise).enumerate().find(|(_, (a, b))| a != b) {
        None => Ok(()),
        Some((k, (ta, tb))) => Err(E::NeedsValue {
            node: name.into(),
            op: "If".into(),
            message: format!(
                "its condition '{cond_name}' is known only at run time, and its branches make different types for \
                 output {k} ({ta} and {tb}): stowage selects between branches at run time only when they agree \
                 (fix the condition with --input-value to take one branch)"
            ),
        }),
    }
}

/// A condition known only at run time where a target runs an `If` whole (rule 2): the node as an
/// [`Op::If`](crate::ir::Op::If) with both branches imported as graphs of their own (`ir/subgraph.rs`): the values
/// they read from around the node are its inputs after the condition (constants are copied in, rule 1 there).
/// `None` where a branch reads a sequence or an optional from around it, or makes one: those take the `Where` form.
fn keep(
    graph: &mut Graph,
    names: &mut Scope,
    node: &NodeProto,
    (then, otherwise): (&GraphProto, &GraphProto),
    name: &str,
    at: At<'_>,
    fail: &dyn Fn(String) -> E,
) -> Result<Option<Vec<Composite>>, E> {
    let cond = node.input.first().and_then(|c| names.get(c.as_str()).copied());
    let mut inputs = vec![cond];
    let mut outer: Vec<(&str, ValueId)> = Vec::new();
    for read in outer_inputs(node) {
        match names.bound(read) {
            Some(Structure::Tensor(v)) => outer.push((read, v)),
            Some(_) => return Ok(None),
            // Not in scope: the branch's import names it (an undefined input).
            None => {}
        }
    }
    let mut branches = Vec::with_capacity(2);
    for (which, g) in [("then", then), ("else", otherwise)] {
        match subgraph(graph, g, &format!("{name}::{which}"), &[], &outer, which, at, fail)? {
            Some(sub) => branches.push(sub),
            None => return Ok(None),
        }
    }
    inputs.extend(outer.iter().filter(|(_, v)| graph.const_value(*v).is_none()).map(|&(_, v)| Some(v)));
    let otherwise = branches.pop().expect("two branches");
    let then = branches.pop().expect("two branches");
    let types = |g: &Graph| g.outputs().iter().map(|o| g.ty(o.value).clone()).collect::<Vec<_>>();
    let cond_name = node.input.first().map(String::as_str).unwrap_or_default();
    agree(&types(&then), &types(&otherwise), name, cond_name)?;
    let op = crate::ir::Op::If(Box::new(crate::ir::Branches { then, otherwise }));
    // The outputs under their own names, taken out of scope again: `inline_if` binds them.
    let outs = &node.output;
    if let Some(o) = outs.iter().find(|o| !o.is_empty() && names.contains_key(o)) {
        return Err(E::Duplicate { name: o.clone() });
    }
    super::import::add_op(graph, names, name, "If", op, inputs, outs, at.limit)?;
    let cond = cond.ok_or_else(|| fail("has no condition input".into()))?;
    Ok(Some(outs.iter().map(|o| Structure::Tensor(names.remove(o).unwrap_or(cond))).collect()))
}

/// A condition known only at run time (rule 2): both branches are imported and each output is
/// `Where(condition, then, else)`, named `IF::selectK`. The branches' outputs must agree in type.
fn select(
    graph: &mut Graph,
    names: &mut Scope,
    (then, otherwise): (&GraphProto, &GraphProto),
    (cond_name, cond): (&str, ValueId),
    name: &str,
    at: At<'_>,
    fail: &dyn Fn(String) -> E,
) -> Result<Vec<Composite>, E> {
    let cond_ty = graph.ty(cond).clone();
    if cond_ty.dt != DatumType::Bool || cond_ty.element_count() != Some(1) {
        return Err(fail(format!("its condition '{cond_name}' is {cond_ty}, not one bool")));
    }
    let tensors = |outputs: Vec<Composite>, which: &str| {
        outputs
            .into_iter()
            .enumerate()
            .map(|(k, c)| match c {
                Structure::Tensor(v) => Ok(v),
                other => Err(E::NeedsValue {
                    node: name.into(),
                    op: "If".into(),
                    message: format!(
                        "its condition '{cond_name}' is known only at run time, and its {which} branch's output {k} \
                         is {}: stowage selects between branches at run time only for tensors (fix the condition \
                         with --input-value to take one branch)",
                        other.what()
                    ),
                }),
            })
            .collect::<Result<Vec<ValueId>, E>>()
    };
    let t = tensors(import_branch(graph, names, then, "then", at, fail)?, "then")?;
    let e = tensors(import_branch(graph, names, otherwise, "else", at, fail)?, "else")?;
    let types = |vs: &[ValueId]| vs.iter().map(|&v| graph.ty(v).clone()).collect::<Vec<_>>();
    agree(&types(&t), &types(&e), name, cond_name)?;
    // Temporary names for the selection's inputs, taken out of scope after.
    let mut temp: Vec<String> = Vec::new();
    let bind = |names: &mut Scope, temp: &mut Vec<String>, base: String, v: ValueId| {
        if names.contains_key(&base) {
            return Err(E::Duplicate { name: base });
        }
        names.insert(base.clone(), v);
        temp.push(base.clone());
        Ok(base)
    };
    // The condition as a scalar, so that Where keeps each branch's shape (a [1] condition would broadcast a
    // scalar output to [1]).
    let one = bind(names, &mut temp, format!("{name}::condition"), cond)?;
    let empty = Tensor::from_vec(&[0], Vec::<i64>::new()).map_err(|e| fail(e.to_string()))?;
    let empty = graph.add_const(format!("{name}::scalar"), empty);
    let shape = bind(names, &mut temp, format!("{name}::scalar"), empty)?;
    let scalar = format!("{name}::scalar_condition");
    if names.contains_key(&scalar) {
        return Err(E::Duplicate { name: scalar });
    }
    let reshape = NodeProto {
        input: vec![one, shape],
        output: vec![scalar.clone()],
        name: Some(scalar.clone()),
        op_type: Some("Reshape".into()),
        ..Default::default()
    };
    super::import::add_node(graph, names, &reshape, 0, At { opset: 18, ..at })?;
    temp.push(scalar.clone());
    let mut outputs = Vec::with_capacity(t.len());
    for (k, (a, b)) in t.into_iter().zip(e).enumerate() {
        let ta = bind(names, &mut temp, format!("{name}::then{k}"), a)?;
        let tb = bind(names, &mut temp, format!("{name}::else{k}"), b)?;
        let out = format!("{name}::select{k}");
        if names.contains_key(&out) {
            return Err(E::Duplicate { name: out });
        }
        let proto = NodeProto {
            input: vec![scalar.clone(), ta, tb],
            output: vec![out.clone()],
            name: Some(out.clone()),
            op_type: Some("Where".into()),
            ..Default::default()
        };
        super::import::add_node(graph, names, &proto, 0, At { opset: 18, ..at })?;
        outputs.push(Structure::Tensor(names.remove(&out).ok_or_else(|| fail(format!("'{out}' was not made")))?));
    }
    for n in temp {
        names.remove(&n);
    }
    Ok(outputs)
}
