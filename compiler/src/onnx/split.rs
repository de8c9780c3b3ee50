//! A model cut around one of its nodes ([`split`]): what the driver does when a node needs, to be compiled, a value
//! known only at run time (`ImportErrorKind::AtRunTime`; docs/compiler.md, "Values whose shape is known only at run
//! time"). The part before runs first, then the node is compiled with the values it needs in hand, then what
//! follows it is compiled for the shapes that came out. The rules:
//!
//! 1. **Parts.** The *node* part is the node alone. The *after* part is every node that reads, as an input or
//!    from one of its subgraphs, a value the node makes or a value another node of the after part makes. The
//!    *before* part is every other node, in the file's order. So no node of the before part reads the node or the
//!    after part, and the three run in that order.
//! 2. **Inputs.** The before part keeps the model's graph inputs as declared (a caller gives the same inputs). The
//!    node and after parts take as inputs the names their nodes read that no node of theirs makes and no
//!    initializer defines, each once, in first-use order: graph inputs, or values an earlier part makes. They are
//!    declared without a type: the driver types them from the tensors it has at run time ([`Part::typed`]).
//! 3. **Initializers** go to each part whose nodes read them, by name (in subgraphs too), and to the before part
//!    when they are outputs of the model.
//! 4. **Outputs.** The before part's outputs are the model's outputs that the node and after parts do not make (a
//!    node's, an initializer, a graph input), then every value the node and after parts read from it; the node
//!    part's are its outputs that are named; the after part's are the model's outputs it makes.
//! 5. **The rest of the model** (opset imports, IR version, producer, metadata) is the same in each part, so
//!    external data is found beside the model as before. Unnamed nodes are named `OpType_N` first (N: their
//!    position in the model), as the import calls them, so a node has one name in every part.

use std::collections::HashSet;

use stowage_runtime::DatumType;

use super::structure::{Kind, Structure};

use super::proto::tensor_shape_proto::{dimension, Dimension};
use super::proto::{type_proto, GraphProto, ModelProto, NodeProto, TensorShapeProto, TypeProto, ValueInfoProto};

/// A model cut around one node (rule 1).
#[derive(Clone, Debug)]
pub struct Split {
    /// The nodes that run before it, with the model's inputs (rules 2 and 4).
    pub before: ModelProto,
    /// The node alone.
    pub node: Part,
    /// The nodes that depend on it; `None` when none do.
    pub after: Option<Part>,
    /// The model's outputs, in order.
    pub outputs: Vec<String>,
}

/// A part whose inputs are typed at run time (rule 2).
#[derive(Clone, Debug)]
pub struct Part {
    /// The part, its graph inputs empty.
    pub model: ModelProto,
    /// The names it reads from earlier parts or the model's inputs, in order.
    pub inputs: Vec<String>,
}

impl Part {
    /// The part as a model whose input `k` is `types[k]` (datum type and shape).
    pub fn typed(&self, types: &[(DatumType, Vec<usize>)]) -> ModelProto {
        let forms: Vec<Structure<(DatumType, Vec<usize>)>> = types.iter().cloned().map(Structure::Tensor).collect();
        self.typed_as(&forms)
    }

    /// The part as a model whose input `k` is of the form `forms[k]`: a tensor of that datum type and shape, or a
    /// sequence or an optional (declared with their items' element type; the importer takes their form from
    /// `ImportConfig::input_structures`, `structure` rule 1).
    pub fn typed_as(&self, forms: &[Structure<(DatumType, Vec<usize>)>]) -> ModelProto {
        let mut model = self.model.clone();
        if let Some(g) = model.graph.as_mut() {
            g.input = self
                .inputs
                .iter()
                .zip(forms)
                .map(|(n, form)| match form {
                    Structure::Tensor((dt, shape)) => value_info(n, *dt, shape),
                    other => ValueInfoProto {
                        name: Some(n.clone()),
                        r#type: Some(structure_type(other)),
                        ..Default::default()
                    },
                })
                .collect();
        }
        model
    }
}

/// The ONNX type of a value of form `form`: a tensor of its datum type (no shape), a sequence of them, or an
/// optional of either.
fn structure_type(form: &Structure<(DatumType, Vec<usize>)>) -> TypeProto {
    let tensor = |dt: DatumType| TypeProto {
        value: Some(type_proto::Value::TensorType(type_proto::Tensor {
            elem_type: Some(super::tensor::onnx_type(dt) as i32),
            shape: None,
        })),
        ..Default::default()
    };
    let value = match form {
        Structure::Tensor((dt, _)) => return tensor(*dt),
        Structure::Sequence { elem, .. } => {
            type_proto::Value::SequenceType(Box::new(type_proto::Sequence { elem_type: Some(Box::new(tensor(*elem))) }))
        }
        Structure::Optional { kind, value } => {
            let held = match (value, kind) {
                (Some(v), _) => structure_type(v),
                (None, Kind::Tensor) => tensor(DatumType::F32),
                (None, Kind::Sequence) => TypeProto {
                    value: Some(type_proto::Value::SequenceType(Box::new(type_proto::Sequence { elem_type: None }))),
                    ..Default::default()
                },
            };
            type_proto::Value::OptionalType(Box::new(type_proto::Optional { elem_type: Some(Box::new(held)) }))
        }
    };
    TypeProto { value: Some(value), ..Default::default() }
}

/// Cuts `model` around its top-level node `index` (rules 1 to 5); `None` when there is no such node or no graph.
pub fn split(model: &ModelProto, index: usize) -> Option<Split> {
    // Unnamed nodes are named as the import names them (`OpType_N`, N their position in this model), so a node is
    // called the same in every part.
    let mut named = model.clone();
    for (i, n) in named.graph.as_mut()?.node.iter_mut().enumerate() {
        if n.name().is_empty() {
            n.name = Some(super::node_name(n, i));
        }
    }
    let model = &named;
    let g = model.graph.as_ref()?;
    let cut = g.node.get(index)?;
    // Rule 1: the values the node makes taint their readers, and theirs, until nothing changes (the file's order
    // need not be topological).
    let mut tainted: HashSet<&str> = cut.output.iter().map(String::as_str).filter(|o| !o.is_empty()).collect();
    let mut after = vec![false; g.node.len()];
    loop {
        let mut changed = false;
        for (i, n) in g.node.iter().enumerate() {
            if i == index || after[i] || !reads(n).iter().any(|r| tainted.contains(r)) {
                continue;
            }
            after[i] = true;
            tainted.extend(n.output.iter().map(String::as_str).filter(|o| !o.is_empty()));
            changed = true;
        }
        if !changed {
            break;
        }
    }
    let before_nodes: Vec<&NodeProto> =
        (0..g.node.len()).filter(|&i| i != index && !after[i]).map(|i| &g.node[i]).collect();
    let after_nodes: Vec<&NodeProto> = (0..g.node.len()).filter(|&i| after[i]).map(|i| &g.node[i]).collect();
    let node_part = part(model, g, &[cut], cut.output.iter().filter(|o| !o.is_empty()).cloned().collect());
    let outputs: Vec<String> = g.output.iter().map(|o| o.name().to_string()).collect();
    let after_part = (!after_nodes.is_empty()).then(|| {
        let made: HashSet<&str> = after_nodes.iter().flat_map(|n| n.output.iter().map(String::as_str)).collect();
        part(model, g, &after_nodes, outputs.iter().filter(|o| made.contains(o.as_str())).cloned().collect())
    });
    // Rule 4: the before part makes what the others read from it and the model's outputs they do not make.
    let later_made: HashSet<&str> = std::iter::once(cut)
        .chain(after_nodes.iter().copied())
        .flat_map(|n| n.output.iter().map(String::as_str))
        .collect();
    let inputs: HashSet<&str> = g.input.iter().map(|i| i.name()).collect();
    let mut before_outputs: Vec<String> =
        outputs.iter().filter(|o| !later_made.contains(o.as_str())).cloned().collect();
    for p in std::iter::once(&node_part).chain(after_part.as_ref()) {
        for name in &p.inputs {
            if !later_made.contains(name.as_str()) && !inputs.contains(name.as_str()) && !before_outputs.contains(name)
            {
                before_outputs.push(name.clone());
            }
        }
    }
    // Rule 3: the initializers the before part's nodes read, and those that are its outputs.
    let read: HashSet<&str> =
        before_nodes.iter().flat_map(|n| reads(n)).chain(before_outputs.iter().map(String::as_str)).collect();
    let initializers = g.initializer.iter().filter(|t| read.contains(t.name())).cloned().collect();
    let mut before = model.clone();
    if let Some(bg) = before.graph.as_mut() {
        // An initializer listed as a graph input (IR < 4) that the part no longer holds is not an input either.
        let dropped: HashSet<&str> = g.initializer.iter().map(|t| t.name()).filter(|n| !read.contains(n)).collect();
        bg.input.retain(|i| !dropped.contains(i.name()));
        bg.initializer = initializers;
        bg.node = before_nodes.into_iter().cloned().collect();
        bg.output =
            before_outputs.iter().map(|n| ValueInfoProto { name: Some(n.clone()), ..Default::default() }).collect();
        bg.value_info.clear();
    }
    Some(Split { before, node: node_part, after: after_part, outputs })
}

/// The part of `model` made of `nodes`, with the initializers they read and `outputs` (rules 2, 3 and 5).
fn part(model: &ModelProto, g: &GraphProto, nodes: &[&NodeProto], outputs: Vec<String>) -> Part {
    let made: HashSet<&str> = nodes.iter().flat_map(|n| n.output.iter().map(String::as_str)).collect();
    let initializers: HashSet<&str> = g.initializer.iter().map(|t| t.name()).collect();
    let mut inputs: Vec<String> = Vec::new();
    let mut read_inits: HashSet<&str> = HashSet::new();
    for n in nodes {
        for r in reads(n) {
            if r.is_empty() || made.contains(r) {
                continue;
            }
            if initializers.contains(r) {
                read_inits.insert(r);
            } else if !inputs.iter().any(|i| i == r) {
                inputs.push(r.to_string());
            }
        }
    }
    // A model output that is also an input of the part passes through it.
    let mut part_model = ModelProto { graph: None, ..model.clone() };
    part_model.graph = Some(GraphProto {
        name: g.name.clone(),
        node: nodes.iter().map(|n| (*n).clone()).collect(),
        initializer: g.initializer.iter().filter(|t| read_inits.contains(t.name())).cloned().collect(),
        output: outputs.into_iter().map(|n| ValueInfoProto { name: Some(n), ..Default::default() }).collect(),
        ..Default::default()
    });
    Part { model: part_model, inputs }
}

impl Part {
    /// The inputs of the part whose values set shapes (`value_inputs` of the part with its inputs declared).
    pub fn value_inputs(&self) -> Vec<String> {
        let mut declared = self.model.clone();
        if let Some(g) = declared.graph.as_mut() {
            g.input =
                self.inputs.iter().map(|n| ValueInfoProto { name: Some(n.clone()), ..Default::default() }).collect();
        }
        super::value_inputs(&declared)
    }
}

/// The names `node` reads: its inputs, then what its subgraphs read from around it.
fn reads(node: &NodeProto) -> Vec<&str> {
    let mut r: Vec<&str> = node.input.iter().map(String::as_str).filter(|s| !s.is_empty()).collect();
    r.extend(super::branch::outer_inputs(node));
    r
}

/// A graph input or output named `name` of type `dt[shape]`.
pub fn value_info(name: &str, dt: DatumType, shape: &[usize]) -> ValueInfoProto {
    let dims =
        shape.iter().map(|&d| Dimension { value: Some(dimension::Value::DimValue(d as i64)), ..Default::default() });
    let tensor = type_proto::Tensor {
        elem_type: Some(super::tensor::onnx_type(dt) as i32),
        shape: Some(TensorShapeProto { dim: dims.collect() }),
    };
    ValueInfoProto {
        name: Some(name.to_string()),
        r#type: Some(TypeProto { value: Some(type_proto::Value::TensorType(tensor)), ..Default::default() }),
        ..Default::default()
    }
}
