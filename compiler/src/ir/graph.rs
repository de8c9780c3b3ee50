//! The graph: values and nodes in dense maps, live nodes in a topological order.

use cranelift_entity::PrimaryMap;
use stowage_runtime::Tensor;

use super::{NodeId, Op, ValueId, ValueType};

/// Where a value comes from.
#[derive(Clone, Debug)]
pub enum ValueDef {
    /// The graph's input number `.0`, given by the caller at run time.
    Input(usize),
    /// A constant: a weight, a folded expression, or an input whose value the caller fixed.
    Const(Tensor<'static>),
    /// Output number `.1` of a node.
    Node(NodeId, usize),
}

/// One value.
#[derive(Clone, Debug)]
pub struct ValueData {
    /// The ONNX name, kept for errors and printing (unique within the graph, or empty).
    pub name: String,
    /// Static type.
    pub ty: ValueType,
    /// Definition.
    pub def: ValueDef,
}

/// One node.
#[derive(Clone, Debug)]
pub struct NodeData {
    /// The ONNX node name, or a made-up `OpType_N` when the model gave none.
    pub name: String,
    /// The op and its attributes.
    pub op: Op,
    /// Inputs in the op's order; `None` for an omitted optional input.
    pub inputs: Vec<Option<ValueId>>,
    /// Outputs in the op's order; `None` for an optional output nobody asked for.
    pub outputs: Vec<Option<ValueId>>,
}

/// A named graph output.
#[derive(Clone, Debug)]
pub struct GraphOutput {
    /// The name callers see (the ONNX graph output's name).
    pub name: String,
    /// The value it holds.
    pub value: ValueId,
}

/// Model-level facts kept from the ONNX file.
#[derive(Clone, Debug, Default)]
pub struct Metadata {
    /// Default-domain opset the model was written for.
    pub opset: i64,
    /// `producer_name` and `producer_version`.
    pub producer: String,
    /// `doc_string`, `domain`, `model_version`, and `metadata_props` as key/value pairs.
    pub props: Vec<(String, String)>,
    /// Inputs whose values the caller fixed at compile time (`--input-value`): a run with other values must re-plan.
    pub assumed_inputs: Vec<String>,
    /// Every model output in order with its flat names, when some output is a sequence or an optional
    /// (`onnx::structure`, rule 2); empty when every output is a tensor (the graph's outputs are the model's).
    pub structured_outputs: Vec<(String, crate::onnx::structure::Structure<String>)>,
}

/// A dataflow graph with static types.
#[derive(Clone, Debug, Default)]
pub struct Graph {
    /// Graph name.
    pub name: String,
    /// Model facts.
    pub metadata: Metadata,
    values: PrimaryMap<ValueId, ValueData>,
    nodes: PrimaryMap<NodeId, NodeData>,
    order: Vec<NodeId>,
    inputs: Vec<ValueId>,
    outputs: Vec<GraphOutput>,
}

impl Graph {
    /// A graph from its parts, as [`super::serial`] reads it back.
    pub(crate) fn from_parts(
        name: String,
        metadata: Metadata,
        values: PrimaryMap<ValueId, ValueData>,
        nodes: PrimaryMap<NodeId, NodeData>,
        order: Vec<NodeId>,
        inputs: Vec<ValueId>,
        outputs: Vec<GraphOutput>,
    ) -> Graph {
        Graph { name, metadata, values, nodes, order, inputs, outputs }
    }

    /// Nodes, order, inputs and outputs, as [`super::serial`] writes them.
    #[allow(clippy::type_complexity)]
    pub(crate) fn parts(&self) -> (&PrimaryMap<NodeId, NodeData>, &[NodeId], &[ValueId], &[GraphOutput]) {
        (&self.nodes, &self.order, &self.inputs, &self.outputs)
    }

    /// An empty graph.
    pub fn new(name: impl Into<String>) -> Self {
        Graph { name: name.into(), ..Graph::default() }
    }

    /// Adds a run-time input.
    pub fn add_input(&mut self, name: impl Into<String>, ty: ValueType) -> ValueId {
        let v = self.values.push(ValueData { name: name.into(), ty, def: ValueDef::Input(self.inputs.len()) });
        self.inputs.push(v);
        v
    }

    /// Adds a constant. Its type is the tensor's.
    pub fn add_const(&mut self, name: impl Into<String>, tensor: Tensor<'static>) -> ValueId {
        let ty = ValueType::new(tensor.dt(), tensor.shape());
        self.values.push(ValueData { name: name.into(), ty, def: ValueDef::Const(tensor) })
    }

    /// Appends a node after every live node, with outputs of the given names and types (`None`: not produced).
    pub fn add_node(
        &mut self,
        name: impl Into<String>,
        op: Op,
        inputs: Vec<Option<ValueId>>,
        outputs: Vec<Option<(String, ValueType)>>,
    ) -> NodeId {
        let node = self.nodes.push(NodeData { name: name.into(), op, inputs, outputs: Vec::new() });
        let outs = outputs
            .into_iter()
            .enumerate()
            .map(|(i, o)| o.map(|(name, ty)| self.values.push(ValueData { name, ty, def: ValueDef::Node(node, i) })))
            .collect();
        self.nodes[node].outputs = outs;
        self.order.push(node);
        node
    }

    /// Declares a graph output.
    pub fn add_output(&mut self, name: impl Into<String>, value: ValueId) {
        self.outputs.push(GraphOutput { name: name.into(), value });
    }

    /// The value's data.
    pub fn value(&self, v: ValueId) -> &ValueData {
        &self.values[v]
    }

    /// The value's type.
    pub fn ty(&self, v: ValueId) -> &ValueType {
        &self.values[v].ty
    }

    /// The constant's tensor, if the value is a constant.
    pub fn const_value(&self, v: ValueId) -> Option<&Tensor<'static>> {
        match &self.values[v].def {
            ValueDef::Const(t) => Some(t),
            _ => None,
        }
    }

    /// The node's data.
    pub fn node(&self, n: NodeId) -> &NodeData {
        &self.nodes[n]
    }

    /// The node's data, mutably. Changing inputs or the op does not re-infer types: the verifier will notice.
    pub fn node_mut(&mut self, n: NodeId) -> &mut NodeData {
        &mut self.nodes[n]
    }

    /// Live nodes in execution (topological) order.
    pub fn order(&self) -> &[NodeId] {
        &self.order
    }

    /// Graph inputs in order.
    pub fn inputs(&self) -> &[ValueId] {
        &self.inputs
    }

    /// Graph outputs in order.
    pub fn outputs(&self) -> &[GraphOutput] {
        &self.outputs
    }

    /// Every value ever created (including dead ones), for iteration by id.
    pub fn values(&self) -> impl Iterator<Item = (ValueId, &ValueData)> {
        self.values.iter()
    }

    /// Number of values ever created.
    pub fn value_count(&self) -> usize {
        self.values.len()
    }

    /// Number of nodes ever created.
    pub fn node_count(&self) -> usize {
        self.nodes.len()
    }

    /// The node producing `v`, if any.
    pub fn producer(&self, v: ValueId) -> Option<NodeId> {
        match self.values[v].def {
            ValueDef::Node(n, _) => Some(n),
            _ => None,
        }
    }

    /// Removes a node from the live order. Its outputs must have no remaining users. This walks the order: a pass
    /// that removes many nodes uses [`super::Edit`].
    pub fn remove_node(&mut self, n: NodeId) {
        self.order.retain(|&m| m != n);
    }

    /// Keeps only the live nodes for which `keep` is true, in order.
    pub fn retain_nodes(&mut self, mut keep: impl FnMut(NodeId) -> bool) {
        self.order.retain(|&n| keep(n));
    }

    /// A value to change in place (its type or name), by a pass that keeps the graph's invariants itself
    /// ([`crate::passes::storage`] retypes every value it stores in half precision).
    pub(crate) fn value_mut(&mut self, v: ValueId) -> &mut ValueData {
        &mut self.values[v]
    }

    /// Turns a node output into a constant holding `tensor` and detaches it from the node.
    /// The caller removes the node once all its outputs are folded.
    pub fn make_const(&mut self, v: ValueId, tensor: Tensor<'static>) {
        let data = &mut self.values[v];
        data.ty = ValueType::new(tensor.dt(), tensor.shape());
        data.def = ValueDef::Const(tensor);
    }

    /// Drops the data of every constant that is not a graph output, keeping its type, and returns the bytes
    /// released: for a graph whose constants now live elsewhere (lowered into a backend's programs, packed or
    /// uploaded). Those constants read as empty afterwards; nothing may fold or lower the graph again. A constant
    /// output is kept, owned (`Tensor::owned`: not holding the model file's bytes).
    pub fn release_constant_data(&mut self) -> usize {
        let outputs: std::collections::HashSet<ValueId> = self.outputs.iter().map(|o| o.value).collect();
        let mut released = 0;
        for (v, data) in self.values.iter_mut() {
            let ValueDef::Const(t) = &mut data.def else { continue };
            if outputs.contains(&v) {
                if let Ok(owned) = t.owned() {
                    *t = owned;
                }
            } else if let Ok(empty) = Tensor::zeros(t.dt(), &[0]) {
                released += t.len() * t.dt().size_of();
                *t = empty;
            }
        }
        released
    }

    /// Replaces the live order (by [`super::Edit::finish`]).
    pub(crate) fn set_order(&mut self, order: Vec<NodeId>) {
        self.order = order;
    }

    /// Makes graph output number `i` hold `v` (by [`super::Edit`]).
    pub(crate) fn set_output_value(&mut self, i: usize, v: ValueId) {
        self.outputs[i].value = v;
    }

    /// Makes every user of `old` (node inputs and graph outputs) use `new` instead. This walks every live node: a
    /// pass that redirects many values uses [`super::Edit`].
    pub fn replace_uses(&mut self, old: ValueId, new: ValueId) {
        for &n in &self.order {
            for input in self.nodes[n].inputs.iter_mut().flatten() {
                if *input == old {
                    *input = new;
                }
            }
        }
        for out in &mut self.outputs {
            if out.value == old {
                out.value = new;
            }
        }
    }

    /// Number of uses of each value by live nodes and graph outputs, indexed by value.
    pub fn use_counts(&self) -> cranelift_entity::SecondaryMap<ValueId, u32> {
        let mut counts = cranelift_entity::SecondaryMap::with_capacity(self.values.len());
        for &n in &self.order {
            for &v in self.nodes[n].inputs.iter().flatten() {
                counts[v] += 1;
            }
        }
        for out in &self.outputs {
            counts[out.value] += 1;
        }
        counts
    }

    /// Inserts `node` (already created with [`Graph::add_node`], thus last) right before `before` in the order.
    /// This walks the order: a pass that inserts many nodes uses [`super::Edit`].
    pub fn move_before(&mut self, node: NodeId, before: NodeId) {
        self.order.retain(|&m| m != node);
        let at = self.order.iter().position(|&m| m == before).unwrap_or(self.order.len());
        self.order.insert(at, node);
    }

    /// Total bytes held by constants that live nodes or outputs use.
    pub fn const_bytes(&self) -> usize {
        let uses = self.use_counts();
        self.values
            .iter()
            .filter(|(v, d)| uses[*v] > 0 && matches!(d.def, ValueDef::Const(_)))
            .filter_map(|(_, d)| d.ty.byte_len())
            .sum()
    }
}
