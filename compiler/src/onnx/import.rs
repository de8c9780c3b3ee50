//! Builds the IR graph from a decoded model: initializers and inputs first, then nodes in dependency order, each
//! type-checked by shape inference as it is added. Small results computed from constants (shape arithmetic) are
//! folded on the spot, so that a later Reshape or Slice sees its shape input as a constant.

use std::collections::{BTreeSet, HashMap};
use std::path::Path;

use super::attrs::Attrs;
use super::ops::{self, ParseError, Parsed, Slot};
use super::proto::{type_proto, ModelProto, NodeProto, ValueInfoProto};
use super::scope::Scope;
use super::tensor::TensorError;
use super::{ImportConfig, MAX_OPSET, MIN_OPSET};
use crate::error::ImportErrorKind as E;
use crate::eval;
use crate::infer::{self, Fact};
use crate::ir::{Graph, Metadata, Op, ValueId, ValueType};

/// Results with at most this many elements are folded during import (shape arithmetic); larger ones are left
/// to the constant-folding pass.
const FOLD_AT_IMPORT: usize = 4096;

fn is_default_domain(domain: &str) -> bool {
    domain.is_empty() || domain == "ai.onnx"
}

/// The domains besides the default one, with the versions stowage imports and their op types.
const OTHER_DOMAINS: [(&str, (i64, i64), &[&str]); 3] = [
    (super::flex_attention::PREVIEW_DOMAIN, (1, 1), super::flex_attention::PREVIEW_OPS),
    (super::training::TRAINING_DOMAIN, (1, 1), super::training::TRAINING_OPS),
    (super::ml::ML_DOMAIN, super::ml::ML_VERSIONS, super::ml::ML_OPS),
];

/// Whether `op` of `domain` is an op of a domain besides the default one that stowage imports
/// (`ai.onnx.preview.training`, `ai.onnx.ml`, `ai.onnx.preview`).
pub fn is_other_domain_op(domain: &str, op: &str) -> bool {
    OTHER_DOMAINS.iter().any(|(d, _, ops)| *d == domain && ops.contains(&op))
}

fn default_opset(model: &ModelProto) -> Result<i64, E> {
    for (domain, (min, max), _) in OTHER_DOMAINS {
        for o in model.opset_import.iter().filter(|o| o.domain() == domain) {
            if !(min..=max).contains(&o.version()) {
                return Err(E::Opset { domain: domain.into(), version: o.version(), min, max });
            }
        }
    }
    let version = model.opset_import.iter().find(|o| is_default_domain(o.domain())).map(|o| o.version());
    // A model of another domain's ops alone imports no default opset: their expansions are written at their own
    // (rule 2 of `expand.rs`), so any will do.
    let only_training = model.opset_import.iter().any(|o| OTHER_DOMAINS.iter().any(|(d, ..)| *d == o.domain()));
    let version = match version {
        Some(v) => v,
        None if only_training => MAX_OPSET,
        None => return Err(E::NotAModel("it imports no opset of the default domain (ai.onnx)".into())),
    };
    if !(MIN_OPSET..=MAX_OPSET).contains(&version) {
        return Err(E::Opset { domain: "ai.onnx".into(), version, min: MIN_OPSET, max: MAX_OPSET });
    }
    Ok(version)
}

pub(super) fn import(model: &ModelProto, dir: Option<&Path>, config: &ImportConfig) -> Result<Graph, E> {
    let g = model.graph.as_ref().ok_or_else(|| E::NotAModel("it has no graph".into()))?;
    if g.node.is_empty() && g.output.is_empty() {
        return Err(E::NotAModel("its graph has no nodes and no outputs".into()));
    }
    let opset = default_opset(model)?;
    let mut graph = Graph::new(g.name());
    graph.metadata = metadata(model, opset);
    let mut names = Scope::default();

    for init in &g.initializer {
        let name = || init.name().to_string();
        let t = super::tensor::decode_within(init, dir, config.value_limit()).map_err(|e| match e {
            TensorError::External(source) => E::ExternalData { name: name(), source },
            TensorError::Data(message) => E::Initializer { name: name(), message },
            TensorError::TooLarge { dt, shape, bytes, limit } => E::TooLarge {
                what: format!("initializer '{}'", name()),
                ty: ValueType::new(dt, shape).to_string(),
                bytes,
                limit,
            },
        })?;
        if names.insert(init.name().into(), graph.add_const(init.name(), t)).is_some() {
            return Err(E::Duplicate { name: init.name().into() });
        }
    }
    for key in config.input_shapes.keys().chain(config.input_values.keys()) {
        if !g.input.iter().any(|i| i.name() == key) {
            let known: Vec<&str> = g.input.iter().map(|i| i.name()).filter(|n| !names.contains_key(n)).collect();
            return Err(E::Option(format!("the model has no input '{key}' (its inputs: {})", known.join(", "))));
        }
    }
    for key in config.input_structures.keys() {
        if !g.input.iter().any(|i| i.name() == key) {
            return Err(E::Option(format!("the model has no input '{key}'")));
        }
    }
    for vi in &g.input {
        if names.contains_key(vi.name()) {
            continue; // An initializer listed as an input (IR < 4): it stays a constant.
        }
        if super::structure::is_structured(vi.r#type.as_ref()) {
            let value = structured_input(&mut graph, vi, config)?;
            if names.bind(vi.name().into(), value) {
                return Err(E::Duplicate { name: vi.name().into() });
            }
            continue;
        }
        let ty = input_type(vi, config)?;
        let v = match config.input_values.get(vi.name()) {
            Some(t) => {
                check_size(&format!("input '{}'", vi.name()), &ty, config.value_limit())?;
                if t.dt() != ty.dt || t.shape() != ty.shape.as_slice() {
                    return Err(E::Input {
                        input: vi.name().into(),
                        message: format!("the fixed value is {}{:?}, the model declares {ty}", t.dt(), t.shape()),
                    });
                }
                graph.metadata.assumed_inputs.push(vi.name().into());
                graph.add_const(vi.name(), t.clone())
            }
            None => {
                check_size(&format!("input '{}'", vi.name()), &ty, config.value_limit())?;
                graph.add_input(vi.name(), ty)
            }
        };
        if names.insert(vi.name().into(), v).is_some() {
            return Err(E::Duplicate { name: vi.name().into() });
        }
    }

    unsupported(&g.node)?;
    let unrolled = std::cell::Cell::new(0);
    for i in topological_order(&g.node, &names)? {
        let at = At {
            opset,
            limit: config.value_limit(),
            dir,
            depth: 0,
            unrolled: &unrolled,
            whole: &config.whole,
            branch_at_run_time: config.branch_at_run_time,
            keep_top_level_if: config.keep_top_level_if,
        };
        // A value known only at run time that a node needs now: the driver cuts the graph before this node.
        add_node(&mut graph, &mut names, &g.node[i], i, at).map_err(|e| match e {
            E::AtRunTime { .. } => e,
            e if e.needs_value() => E::AtRunTime { index: i, source: Box::new(e) },
            e => e,
        })?;
    }
    let mut forms = Vec::with_capacity(g.output.len());
    for out in &g.output {
        let value = names.bound(out.name()).ok_or_else(|| E::Output { output: out.name().into() })?;
        let flat = value.flat_names(out.name());
        for (name, &v) in flat.leaves().into_iter().zip(value.leaves()) {
            graph.add_output(name.as_str(), v);
        }
        forms.push((out.name().to_string(), flat));
    }
    // Structure rule 2: the outputs are put back together as the metadata says, when any is not a tensor.
    if forms.iter().any(|(_, f)| !matches!(f, super::structure::Structure::Tensor(_))) {
        graph.metadata.structured_outputs = forms;
    }
    Ok(graph)
}

/// A graph input declared as a sequence or an optional: the form the caller's value has
/// ([`ImportConfig::input_structures`]), its tensors graph inputs of their flat names (`structure`, rules 1 and 2).
fn structured_input(
    graph: &mut Graph,
    vi: &ValueInfoProto,
    config: &ImportConfig,
) -> Result<super::structure::Structure<ValueId>, E> {
    use super::structure::{self, Kind, Structure};
    let name = vi.name();
    let err = |message: String| E::Input { input: name.into(), message };
    let optional =
        matches!(vi.r#type.as_ref().and_then(|t| t.value.as_ref()), Some(type_proto::Value::OptionalType(_)));
    let declared = if optional { "an optional" } else { "a sequence" };
    let form = config.input_structures.get(name).ok_or_else(|| {
        err(format!(
            "it is {declared}: give its value (a {} file) so that its form is known when the model is compiled",
            if optional { "OptionalProto" } else { "SequenceProto" }
        ))
    })?;
    if form.what() != declared {
        return Err(err(format!("the given value is {}, the model declares {declared}", form.what())));
    }
    if let Some(dt) = structure::declared_elem(vi.r#type.as_ref()) {
        let elems = match form {
            Structure::Sequence { elem, .. } => vec![*elem],
            other => other.leaves().iter().map(|t| t.dt).collect(),
        };
        if let Some(bad) = elems.iter().find(|&&e| e != dt) {
            return Err(err(format!("the given value holds {bad} tensors, the model declares {dt}")));
        }
    }
    if let (Some(kind), Structure::Optional { value: Some(v), .. }) =
        (structure::declared_kind(vi.r#type.as_ref()), form)
    {
        let held = if matches!(**v, Structure::Tensor(_)) { Kind::Tensor } else { Kind::Sequence };
        if held != kind {
            return Err(err(format!("the given optional holds {}, the model declares one of {kind:?}", v.what())));
        }
    }
    let flat = form.flat_names(name);
    let mut ids = Vec::new();
    for (n, ty) in flat.leaves().into_iter().zip(form.leaves()) {
        check_size(&format!("input '{n}'"), ty, config.value_limit())?;
        ids.push(graph.add_input(n.as_str(), ty.clone()));
    }
    // `flat` and `form` have the same leaves, one input each.
    let mut next = ids.into_iter();
    form.try_map(&mut |_| next.next().ok_or_else(|| err("its form and its tensors disagree".into())))
}

fn metadata(model: &ModelProto, opset: i64) -> Metadata {
    let mut props: Vec<(String, String)> = Vec::new();
    for (k, v) in [("doc_string", model.doc_string()), ("domain", model.domain())] {
        if !v.is_empty() {
            props.push((k.into(), v.into()));
        }
    }
    if let Some(v) = model.model_version {
        props.push(("model_version".into(), v.to_string()));
    }
    props.extend(model.metadata_props.iter().map(|p| (p.key().to_string(), p.value().to_string())));
    Metadata {
        opset,
        producer: format!("{} {}", model.producer_name(), model.producer_version()).trim().to_string(),
        props,
        assumed_inputs: Vec::new(),
        structured_outputs: Vec::new(),
    }
}

/// The static type of a graph input: declared dims, with symbolic ones fixed by `--input-shape`.
fn input_type(vi: &ValueInfoProto, config: &ImportConfig) -> Result<ValueType, E> {
    let name = vi.name();
    let err = |message: String| E::Input { input: name.into(), message };
    let Some(type_proto::Value::TensorType(tt)) = vi.r#type.as_ref().and_then(|t| t.value.as_ref()) else {
        return Err(err("only tensor inputs are supported (not sequences, maps or optionals)".into()));
    };
    let dt = super::tensor::datum_type(tt.elem_type()).map_err(err)?;
    let declared: Option<Vec<Option<usize>>> = tt.shape.as_ref().map(|s| {
        s.dim
            .iter()
            .map(|d| match d.value {
                Some(super::proto::tensor_shape_proto::dimension::Value::DimValue(v)) if v >= 0 => Some(v as usize),
                _ => None,
            })
            .collect()
    });
    if let Some(given) =
        config.input_shapes.get(name).map(|s| s.as_slice()).or_else(|| config.input_values.get(name).map(|t| t.shape()))
    {
        if let Some(declared) = &declared {
            let fits =
                declared.len() == given.len() && declared.iter().zip(given).all(|(d, g)| d.is_none_or(|d| d == *g));
            if !fits {
                return Err(err(format!(
                    "the given shape {given:?} does not fit the declared shape {}",
                    dims_text(vi)
                )));
            }
        }
        return Ok(ValueType::new(dt, given.to_vec()));
    }
    let declared = declared.ok_or_else(|| err("the model gives no shape: fix it with --input-shape".into()))?;
    let shape = declared
        .iter()
        .enumerate()
        .map(|(i, d)| {
            d.ok_or_else(|| {
                err(format!(
                    "dimension {i} ({}) is symbolic: fix it with --input-shape {name}=… (shape {})",
                    symbol(vi, i),
                    dims_text(vi)
                ))
            })
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok(ValueType::new(dt, shape))
}

fn symbol(vi: &ValueInfoProto, i: usize) -> String {
    use super::proto::tensor_shape_proto::dimension::Value;
    let dim = vi.r#type.as_ref().and_then(|t| match &t.value {
        Some(type_proto::Value::TensorType(tt)) => tt.shape.as_ref().and_then(|s| s.dim.get(i).cloned()),
        _ => None,
    });
    match dim.and_then(|d| d.value) {
        Some(Value::DimParam(p)) if !p.is_empty() => format!("'{p}'"),
        _ => "unnamed".into(),
    }
}

fn dims_text(vi: &ValueInfoProto) -> String {
    use super::proto::tensor_shape_proto::dimension::Value;
    let Some(type_proto::Value::TensorType(tt)) = vi.r#type.as_ref().and_then(|t| t.value.as_ref()) else {
        return "?".into();
    };
    let dims: Vec<String> = tt
        .shape
        .iter()
        .flat_map(|s| &s.dim)
        .map(|d| match &d.value {
            Some(Value::DimValue(v)) => v.to_string(),
            Some(Value::DimParam(p)) if !p.is_empty() => p.clone(),
            _ => "?".into(),
        })
        .collect();
    format!("[{}]", dims.join(","))
}

/// The name a node is known by: its own, or `OpType_N` for an unnamed one (N: its position in the file).
pub fn node_name(node: &NodeProto, index: usize) -> String {
    if node.name().is_empty() {
        format!("{}_{index}", node.op_type())
    } else {
        node.name().to_string()
    }
}

/// Node indices in an order where every node comes after the producers of its inputs (the file's order where
/// it already is one). Names nobody defines and cycles are errors.
/// The values a node's subgraphs read from outside them count as its inputs (`branch` rule 1).
pub(super) fn topological_order(nodes: &[NodeProto], known: &Scope) -> Result<Vec<usize>, E> {
    let mut producer: HashMap<&str, usize> = HashMap::new();
    for (i, n) in nodes.iter().enumerate() {
        for o in n.output.iter().filter(|o| !o.is_empty()) {
            if known.contains_key(o.as_str()) || producer.insert(o, i).is_some() {
                return Err(E::Duplicate { name: o.clone() });
            }
        }
    }
    let mut waiting = vec![0usize; nodes.len()];
    let mut users: Vec<Vec<usize>> = vec![Vec::new(); nodes.len()];
    for (i, n) in nodes.iter().enumerate() {
        let outer = super::branch::outer_inputs(n);
        for input in n.input.iter().map(String::as_str).chain(outer).filter(|s| !s.is_empty()) {
            if known.contains_key(input) {
                continue;
            }
            match producer.get(input) {
                Some(&p) => {
                    waiting[i] += 1;
                    users[p].push(i);
                }
                None => return Err(E::Undefined { node: node_name(n, i), input: input.to_string() }),
            }
        }
    }
    let mut ready: BTreeSet<usize> = (0..nodes.len()).filter(|&i| waiting[i] == 0).collect();
    let mut order = Vec::with_capacity(nodes.len());
    while let Some(i) = ready.pop_first() {
        order.push(i);
        for &u in &users[i] {
            waiting[u] -= 1;
            if waiting[u] == 0 {
                ready.insert(u);
            }
        }
    }
    if let Some(stuck) = (0..nodes.len()).find(|&i| waiting[i] > 0) {
        return Err(E::Cycle { node: node_name(&nodes[stuck], stuck) });
    }
    Ok(order)
}

/// Where a node is imported: the model's opset, the limit on one value, the model's folder (for external data),
/// the subgraph nesting depth (0 in the model's graph), the nodes unrolling has written so far in the whole
/// model (bounded by [`super::expand::MAX_UNROLLED`], nesting included), and the op types kept whole.
#[derive(Clone, Copy)]
pub(super) struct At<'a> {
    pub opset: i64,
    pub limit: usize,
    pub dir: Option<&'a Path>,
    pub depth: usize,
    pub unrolled: &'a std::cell::Cell<usize>,
    /// The op types kept whole ([`super::ImportConfig::whole`]).
    pub whole: &'a std::collections::BTreeSet<String>,
    /// [`super::ImportConfig::branch_at_run_time`].
    pub branch_at_run_time: bool,
    /// [`super::ImportConfig::keep_top_level_if`].
    pub keep_top_level_if: bool,
}

/// Imports one node: an `If` as its branch ([`super::branch`]), any other op as itself.
pub(super) fn add_node(
    graph: &mut Graph,
    names: &mut Scope,
    node: &NodeProto,
    index: usize,
    at: At<'_>,
) -> Result<(), E> {
    let At { opset, limit, .. } = at;
    let name = node_name(node, index);
    let op_type = node.op_type();
    if is_other_domain_op(node.domain(), op_type) {
        return super::expand::expand(graph, names, node, &name, at);
    }
    if !is_default_domain(node.domain()) {
        return Err(E::UnknownOp { node: name, op: op_type.into(), domain: node.domain().into() });
    }
    // A node with subgraphs (If, Loop, Scan) is imported at the model's opset, so that its bodies' nodes are
    // rewritten too; its own form did not change at opset 7.
    let has_subgraphs = node.attribute.iter().any(|a| a.g.is_some() || !a.graphs.is_empty());
    if at.opset < super::legacy::MODERN && !has_subgraphs {
        // Opsets 1 to 6: the node in its opset-7 form (`legacy`), with what it needs imported first.
        let rank = |v: &str| names.get(v).map(|&id| graph.ty(id).rank());
        let ints =
            |v: &str| names.get(v).and_then(|&id| graph.const_value(id)).and_then(|t| crate::consts::to_i64s(t).ok());
        let modern = super::legacy::modernize(node, &name, at.opset, &rank, &ints)?;
        let at7 = At { opset: super::legacy::MODERN, ..at };
        for b in &modern.before {
            add_node(graph, names, b, index, at7)?;
        }
        add_node(graph, names, &modern.node, index, at7)?;
        // The helper names leave scope (rule 3).
        for o in modern.before.iter().flat_map(|b| &b.output) {
            names.remove(o);
        }
        return Ok(());
    }
    if op_type == "If" {
        return super::branch::inline_if(graph, names, node, &name, at);
    }
    if super::expand::is_expanded(op_type) {
        return super::expand::expand(graph, names, node, &name, at);
    }
    // Sequences and optionals live at import (`structure`, rule 1): Identity names the same one; other ops take
    // tensors.
    if let Some((k, input, c)) = node.input.iter().enumerate().find_map(|(k, s)| names.composite(s).map(|c| (k, s, c)))
    {
        if op_type == "Identity" && node.output.len() == 1 {
            let value = c.clone();
            if names.bind(node.output[0].clone(), value) {
                return Err(E::Duplicate { name: node.output[0].clone() });
            }
            return Ok(());
        }
        return Err(E::Node {
            node: name,
            op: op_type.into(),
            message: format!("its input {k} ('{input}') is {}; {op_type} takes tensors", c.what()),
        });
    }
    let onnx_inputs: Vec<Option<ValueId>> =
        node.input.iter().map(|s| if s.is_empty() { None } else { names.get(s.as_str()).copied() }).collect();
    let input_types: Vec<Option<&ValueType>> = onnx_inputs.iter().map(|v| v.map(|v| graph.ty(v))).collect();
    let parsed = ops::parse(op_type, &Attrs(node), opset, &input_types).map_err(|e| match e {
        ParseError::Unknown => E::UnknownOp { node: name.clone(), op: op_type.into(), domain: "ai.onnx".into() },
        ParseError::Attr(a) => {
            E::Attribute { node: name.clone(), op: op_type.into(), attr: a.attr, message: a.message }
        }
        ParseError::Other(message) => E::Node { node: name.clone(), op: op_type.into(), message },
    })?;
    let (op, slots) = match parsed {
        Parsed::Constant(t) => {
            let out = node.output.first().filter(|o| !o.is_empty()).ok_or_else(|| E::Node {
                node: name.clone(),
                op: op_type.into(),
                message: "has no output".into(),
            })?;
            names.insert(out.clone(), graph.add_const(out.as_str(), t));
            return Ok(());
        }
        Parsed::Op(op, slots) => (op, slots),
    };
    let inputs: Vec<Option<ValueId>> = slots
        .into_iter()
        .enumerate()
        .map(|(i, slot)| match slot {
            Slot::Onnx(k) => onnx_inputs.get(k).copied().flatten(),
            Slot::Const(t) => Some(graph.add_const(format!("{name}.{i}"), t)),
        })
        .collect();
    add_op(graph, names, &name, op_type, op, inputs, &node.output, limit)
}

/// Adds the node `name` (of ONNX type `op_type`) as `op` over `inputs`, its outputs named `output` (an empty name:
/// not asked for): types inferred, sizes checked, folded when small and constant.
#[allow(clippy::too_many_arguments)]
pub(super) fn add_op(
    graph: &mut Graph,
    names: &mut Scope,
    name: &str,
    op_type: &str,
    mut op: Op,
    mut inputs: Vec<Option<ValueId>>,
    output: &[String],
    limit: usize,
) -> Result<(), E> {
    let name = name.to_string();
    while inputs.last() == Some(&None) {
        inputs.pop();
    }
    let n_outputs = output.len();
    let types = {
        let facts: Vec<Option<Fact<'_>>> =
            inputs.iter().map(|v| v.map(|v| Fact { ty: graph.ty(v), value: graph.const_value(v) })).collect();
        infer::infer(&mut op, &facts, n_outputs).map_err(|source| E::Infer {
            node: name.clone(),
            op: op_type.into(),
            source,
        })?
    };
    if types.len() < n_outputs.min(1) {
        return Err(E::Node { node: name, op: op_type.into(), message: "has no output".into() });
    }
    if n_outputs > types.len() {
        return Err(E::Node {
            node: name,
            op: op_type.into(),
            message: format!("has {n_outputs} outputs, the op makes at most {}", types.len()),
        });
    }
    // Before anything of these sizes is made: folded here, or later, or computed by a kernel.
    for (o, t) in output.iter().zip(&types) {
        check_size(&format!("node '{name}' ({op_type}): output '{o}'"), t, limit)?;
    }
    let outputs: Vec<Option<(String, ValueType)>> =
        output.iter().zip(&types).map(|(o, t)| (!o.is_empty()).then(|| (o.clone(), t.clone()))).collect();
    let small = types.iter().all(|t| t.element_count().is_some_and(|n| n <= FOLD_AT_IMPORT));
    let folded = small.then(|| eval::fold_node(graph, &op, &inputs, &types)).flatten();
    match folded {
        Some(tensors) => {
            for (o, t) in outputs.iter().zip(tensors) {
                if let Some((out_name, _)) = o {
                    names.insert(out_name.clone(), graph.add_const(out_name.as_str(), t));
                }
            }
        }
        None => {
            let n = graph.add_node(name, op, inputs, outputs);
            for (o, v) in output.iter().zip(graph.node(n).outputs.clone()) {
                if let Some(v) = v {
                    names.insert(o.clone(), v);
                }
            }
        }
    }
    Ok(())
}

/// Every op type of `nodes` stowage does not know, at once ([`E::Unsupported`]), so that a user sees the whole list
/// rather than one op per attempt. Subgraphs are checked when they are imported: a branch folded away may hold ops
/// stowage does not run.
pub(super) fn unsupported(nodes: &[NodeProto]) -> Result<(), E> {
    let ops = unsupported_ops(nodes);
    if ops.is_empty() {
        Ok(())
    } else {
        Err(E::Unsupported { ops })
    }
}

/// The op types of `nodes` stowage does not know, each with its count and first node, in first-use order.
pub fn unsupported_ops(nodes: &[NodeProto]) -> Vec<crate::error::UnsupportedOp> {
    let mut ops: Vec<crate::error::UnsupportedOp> = Vec::new();
    for (i, n) in nodes.iter().enumerate() {
        let known = (is_default_domain(n.domain()) && super::SUPPORTED_OPS.contains(&n.op_type()))
            || is_other_domain_op(n.domain(), n.op_type());
        if known {
            continue;
        }
        let domain = if is_default_domain(n.domain()) { "ai.onnx" } else { n.domain() };
        match ops.iter_mut().find(|o| o.op == n.op_type() && o.domain == domain) {
            Some(o) => o.nodes += 1,
            None => ops.push(crate::error::UnsupportedOp {
                op: n.op_type().into(),
                domain: domain.into(),
                nodes: 1,
                first: node_name(n, i),
            }),
        }
    }
    ops
}

/// `ty`'s bytes against `limit`, naming `what` makes it.
fn check_size(what: &str, ty: &ValueType, limit: usize) -> Result<(), E> {
    match ty.byte_len() {
        Some(bytes) if bytes <= limit => Ok(()),
        bytes => Err(E::TooLarge { what: what.into(), ty: ty.to_string(), bytes: bytes.unwrap_or(usize::MAX), limit }),
    }
}

/// Graph inputs whose values set a shape (Reshape's shape, Resize's sizes, reduction axes…), directly or through
/// the nodes that compute such a value: a static compiler needs them fixed with [`ImportConfig::input_value`].
/// In graph input order.
pub fn value_inputs(model: &ModelProto) -> Vec<String> {
    let (Some(g), Ok(opset)) = (model.graph.as_ref(), default_opset(model)) else { return Vec::new() };
    let mut producer: HashMap<&str, &NodeProto> = HashMap::new();
    for node in &g.node {
        for o in &node.output {
            producer.insert(o, node);
        }
    }
    let mut stack: Vec<&str> = Vec::new();
    for node in g.node.iter().filter(|n| is_default_domain(n.domain())) {
        // An If's condition selects a branch at import (`branch`); a Loop's trip count and condition unroll it
        // (`unroll`).
        if node.op_type() == "If" {
            stack.extend(node.input.first().map(String::as_str));
            continue;
        }
        if node.op_type() == "Loop" {
            stack.extend(node.input.iter().take(2).map(String::as_str));
            continue;
        }
        let positions = super::sequences::static_inputs(node.op_type());
        if !positions.is_empty() {
            stack.extend(positions.iter().filter_map(|&i| node.input.get(i)).map(String::as_str));
            continue;
        }
        // Stop words decide how many strings a StringNormalizer keeps (`text.rs`, rule 2).
        if node.op_type() == "StringNormalizer"
            && Attrs(node).strings("stopwords").is_ok_and(|w| w.is_some_and(|w| !w.is_empty()))
        {
            stack.extend(node.input.first().map(String::as_str));
            continue;
        }
        let expanded = super::functions::static_inputs(node.op_type(), opset);
        if !expanded.is_empty() {
            stack.extend(expanded.iter().filter_map(|&i| node.input.get(i)).map(String::as_str));
            continue;
        }
        let types: Vec<Option<&ValueType>> = vec![None; node.input.len()];
        let Ok(Parsed::Op(op, slots)) = ops::parse(node.op_type(), &Attrs(node), opset, &types) else { continue };
        for &i in op.static_inputs() {
            if let Some(Slot::Onnx(k)) = slots.get(i) {
                stack.extend(node.input.get(*k).map(String::as_str));
            }
        }
    }
    // A value computed from others needs them too, except through Shape and Size, which read only a shape.
    let mut needed: BTreeSet<&str> = BTreeSet::new();
    while let Some(name) = stack.pop() {
        if name.is_empty() || !needed.insert(name) {
            continue;
        }
        if let Some(node) = producer.get(name).filter(|n| !matches!(n.op_type(), "Shape" | "Size")) {
            stack.extend(node.input.iter().map(String::as_str));
        }
    }
    let initializers: BTreeSet<&str> = g.initializer.iter().map(|t| t.name()).collect();
    g.input
        .iter()
        .map(|i| i.name())
        .filter(|n| needed.contains(n) && !initializers.contains(n))
        .map(String::from)
        .collect()
}
