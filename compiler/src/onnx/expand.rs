//! Ops imported as small graphs of ops stowage already has: the comparisons ONNX defines as functions
//! (`GreaterOrEqual`, `LessOrEqual`; the other function ops are in [`super::functions`]), the recurrent layers (`LSTM`, `GRU`, `RNN`) unrolled over their static sequence,
//! and `ConvTranspose` as a convolution over the zero-upsampled input.
//!
//! An expansion writes ONNX nodes and imports them with the same [`add_node`] as the model's own, so each one is
//! type-checked, size-checked and folded like any other, and every backend runs the result with the kernels it
//! has: the recurrent layers' input projections are one product over the whole sequence and each step's recurrent
//! product is a `MatMul`, so they run on the fast product kernels. The rules:
//! 1. **Same semantics, NaN included.** `GreaterOrEqual` is `Or(Greater, Equal)` (the body ONNX gives it), so a NaN
//!    compares false both ways; the recurrent equations and the transposed convolution's output size are the
//!    operator's, checked by the node suite's cases (`tests/tests/conformance.rs`).
//! 2. **Fixed opset.** The nodes written are read at [`OPSET`], whatever the model's opset, so their forms (Split's
//!    `num_outputs`, inputs for axes and pads) are the ones written here.
//! 3. **Names stay inside.** Values an expansion makes are named `NODE::kindN`, never a name already in scope, and
//!    are taken out of scope when the expansion ends (as a branch's are, [`super::branch`] rule 4); errors in them
//!    name the original node as their prefix.
//! 4. **Bounded.** A recurrent layer unrolls at most [`MAX_STEPS`] steps over all directions, a `Scan` or `Loop`
//!    at most [`MAX_STEPS`] iterations, and all the unrolling of a model, nesting included, writes at most
//!    [`MAX_UNROLLED`] nodes (counted before each level is written, [`Ex::spend`]); past either is an error naming
//!    the node, never a graph of unbounded size. Constants an expansion makes are checked against the size limit
//!    before they are allocated. A `sequence_lens` known only at run time masks
//!    each step (`Where`) in forward layers; a reverse direction needs it constant and whole.
//! 5. **Whole where a target runs it whole.** An op type the run's targets execute as one kernel
//!    ([`super::ImportConfig::whole`]: the CPU's f32 `LSTM`) is imported as one IR node ([`Ex::whole`]) after the
//!    same checks of its attributes and inputs; it is unrolled for every other target list, so a target without
//!    the kernel never meets it.

use stowage_runtime::{DatumType, Tensor};

use super::attrs::Attrs;
use super::import::{add_node, At};
use super::proto::{attribute_proto::AttributeType, AttributeProto, NodeProto};
use super::scope::{Composite, Scope};
use crate::consts;
use crate::error::ImportErrorKind as E;
use crate::ir::{Graph, Op, ValueId, ValueType};

/// The op types imported as expansions.
pub const EXPANDED_OPS: &[&str] =
    &["ConvTranspose", "GRU", "GreaterOrEqual", "LSTM", "LessOrEqual", "Loop", "RNN", "Scan"];

/// Whether `op` is imported as an expansion (here, or as an ONNX function in [`super::functions`]).
pub fn is_expanded(op: &str) -> bool {
    EXPANDED_OPS.contains(&op)
        || super::functions::FUNCTION_OPS.contains(&op)
        || super::masks::MASK_OPS.contains(&op)
        || super::norms::NORM_OPS.contains(&op)
        || super::losses::LOSS_OPS.contains(&op)
        || super::attention::ATTENTION_OPS.contains(&op)
        || super::lp_pool::LP_POOL_OPS.contains(&op)
        || super::windows::WINDOW_OPS.contains(&op)
        || super::quant::QUANT_OPS.contains(&op)
        || super::einsum::EINSUM_OPS.contains(&op)
        || super::spectral::SPECTRAL_OPS.contains(&op)
        || super::images::IMAGE_OPS.contains(&op)
        || super::rotary::ROTARY_OPS.contains(&op)
        || super::movement::MOVEMENT_OPS.contains(&op)
        || super::state::STATE_OPS.contains(&op)
        || super::linear_attention::LINEAR_ATTENTION_OPS.contains(&op)
        || super::tfidf::TFIDF_OPS.contains(&op)
        || super::deform_conv::DEFORM_OPS.contains(&op)
        || super::selection::SELECTION_OPS.contains(&op)
        || super::sequences::SEQUENCE_OPS.contains(&op)
        || super::text::TEXT_OPS.contains(&op)
}

/// The opset the written nodes are read at (rule 2).
const OPSET: i64 = 18;

/// The most steps (sequence length × directions) a recurrent layer is unrolled to, and the most iterations of a
/// `Scan` or `Loop` (rule 4).
pub const MAX_STEPS: usize = 4096;

/// The most nodes unrolling writes in one model, all levels of nesting together (rule 4): 262,144, which import in
/// a few seconds.
pub const MAX_UNROLLED: usize = 1 << 18;

/// Imports `node`, named `name`, whose op type is one of [`EXPANDED_OPS`].
pub(super) fn expand(graph: &mut Graph, names: &mut Scope, node: &NodeProto, name: &str, at: At<'_>) -> Result<(), E> {
    let mut ex = Ex { graph, names, node, name, at, made: Vec::new(), count: 0 };
    let outputs = match node.op_type() {
        // `import::add_node` sends only the ops of `ml::ML_OPS` here from that domain.
        _ if node.domain() == super::ml::ML_DOMAIN => super::ml::expand(&mut ex)?,
        _ if node.domain() == super::flex_attention::PREVIEW_DOMAIN => super::flex_attention::expand(&mut ex)?,
        "GreaterOrEqual" | "LessOrEqual" => {
            let strict = if node.op_type() == "GreaterOrEqual" { "Greater" } else { "Less" };
            let (a, b) = (ex.input(0)?, ex.input(1)?);
            let lt = ex.op(strict, &[&a, &b], vec![])?;
            let eq = ex.op("Equal", &[&a, &b], vec![])?;
            vec![Some(ex.op("Or", &[&lt, &eq], vec![])?)]
        }
        "LSTM" | "GRU" | "RNN" => super::rnn::expand(&mut ex)?,
        "ConvTranspose" => super::conv_transpose::expand(&mut ex)?,
        "Scan" | "Loop" if at.depth >= super::branch::MAX_DEPTH => {
            return Err(ex.fail(format!("its subgraphs nest more than {} deep", super::branch::MAX_DEPTH)))
        }
        "Scan" => super::unroll::scan(&mut ex)?,
        "Loop" => super::unroll::r#loop(&mut ex)?,
        op if super::functions::FUNCTION_OPS.contains(&op) => super::functions::expand(&mut ex)?,
        op if super::masks::MASK_OPS.contains(&op) => super::masks::expand(&mut ex)?,
        op if super::norms::NORM_OPS.contains(&op) => super::norms::expand(&mut ex)?,
        op if super::losses::LOSS_OPS.contains(&op) => super::losses::expand(&mut ex)?,
        op if super::attention::ATTENTION_OPS.contains(&op) => super::attention::expand(&mut ex)?,
        op if super::lp_pool::LP_POOL_OPS.contains(&op) => super::lp_pool::expand(&mut ex)?,
        op if super::windows::WINDOW_OPS.contains(&op) => super::windows::expand(&mut ex)?,
        op if super::quant::QUANT_OPS.contains(&op) => super::quant::expand(&mut ex)?,
        op if super::einsum::EINSUM_OPS.contains(&op) => super::einsum::expand(&mut ex)?,
        op if super::spectral::SPECTRAL_OPS.contains(&op) => super::spectral::expand(&mut ex)?,
        op if super::images::IMAGE_OPS.contains(&op) => super::images::expand(&mut ex)?,
        op if super::rotary::ROTARY_OPS.contains(&op) => super::rotary::expand(&mut ex)?,
        op if super::movement::MOVEMENT_OPS.contains(&op) => super::movement::expand(&mut ex)?,
        op if super::state::STATE_OPS.contains(&op) => super::state::expand(&mut ex)?,
        op if super::linear_attention::LINEAR_ATTENTION_OPS.contains(&op) => super::linear_attention::expand(&mut ex)?,
        op if super::selection::SELECTION_OPS.contains(&op) => super::selection::expand(&mut ex)?,
        "SequenceMap" if at.depth >= super::branch::MAX_DEPTH => {
            return Err(ex.fail(format!("its subgraphs nest more than {} deep", super::branch::MAX_DEPTH)))
        }
        op if super::sequences::SEQUENCE_OPS.contains(&op) => super::sequences::expand(&mut ex)?,
        op if super::tfidf::TFIDF_OPS.contains(&op) => super::tfidf::expand(&mut ex)?,
        op if super::text::TEXT_OPS.contains(&op) => super::text::expand(&mut ex)?,
        op if super::deform_conv::DEFORM_OPS.contains(&op) => super::deform_conv::expand(&mut ex)?,
        // Reached only for the training domain's nodes (`import::add_node` checks the domain).
        op if super::training::TRAINING_OPS.contains(&op) => super::training::expand(&mut ex)?,
        other => return Err(ex.fail(format!("'{other}' has no expansion"))),
    };
    ex.finish(outputs)
}

/// An expansion in progress: the scope it writes into and the names it made.
pub(super) struct Ex<'a, 'g> {
    graph: &'g mut Graph,
    names: &'g mut Scope,
    pub node: &'a NodeProto,
    pub name: &'a str,
    pub(super) at: At<'a>,
    made: Vec<String>,
    count: usize,
}

impl Ex<'_, '_> {
    /// The node's attributes.
    pub fn attrs(&self) -> Attrs<'_> {
        Attrs(self.node)
    }

    /// An error about the node.
    pub fn fail(&self, message: impl Into<String>) -> E {
        E::Node { node: self.name.into(), op: self.node.op_type().into(), message: message.into() }
    }

    /// An error about a value the node needs at compile time that is known only at run time
    /// ([`E::NeedsValue`]).
    pub fn needs_value(&self, message: impl Into<String>) -> E {
        E::NeedsValue { node: self.name.into(), op: self.node.op_type().into(), message: message.into() }
    }

    /// An error about one of its attributes.
    pub fn attr_fail(&self, attr: &str, message: impl Into<String>) -> E {
        E::Attribute {
            node: self.name.into(),
            op: self.node.op_type().into(),
            attr: attr.into(),
            message: message.into(),
        }
    }

    /// The attribute error `e` as the node's.
    pub fn attr_err(&self, e: super::attrs::AttrError) -> E {
        self.attr_fail(&e.attr, e.message)
    }

    /// ONNX input `i`'s name, required.
    pub fn input(&self, i: usize) -> Result<String, E> {
        self.optional(i).ok_or_else(|| self.fail(format!("input {i} is required")))
    }

    /// ONNX input `i`'s name, if given.
    pub fn optional(&self, i: usize) -> Option<String> {
        self.node.input.get(i).filter(|s| !s.is_empty()).cloned()
    }

    /// Counts `nodes` more written by unrolling against [`MAX_UNROLLED`] (rule 4), before they are written.
    pub fn spend(&self, nodes: usize) -> Result<(), E> {
        let total = self.at.unrolled.get().saturating_add(nodes);
        if total > MAX_UNROLLED {
            return Err(self.fail(format!(
                "unrolling it would write {total} nodes in the model, more than stowage writes ({MAX_UNROLLED})"
            )));
        }
        self.at.unrolled.set(total);
        Ok(())
    }

    /// Whether the run's targets execute this node's op type whole ([`super::ImportConfig::whole`]).
    pub fn keeps_whole(&self) -> bool {
        self.at.whole.contains(self.node.op_type())
    }

    /// Imports the node as one IR node of `op` over the values named `inputs` (`None`: omitted), with `n` outputs
    /// named inside the expansion (rule 3), the node keeping its own name.
    pub fn whole(&mut self, op: Op, inputs: &[Option<String>], n: usize) -> Result<Vec<Option<String>>, E> {
        let mut ids = Vec::with_capacity(inputs.len());
        for i in inputs {
            ids.push(match i {
                None => None,
                Some(v) => Some(*self.names.get(v).ok_or_else(|| self.undefined(v))?),
            });
        }
        let hint = self.node.op_type().to_ascii_lowercase();
        let outputs: Vec<String> =
            (0..n).map(|k| if self.optional_output(k) { self.fresh(&hint) } else { String::new() }).collect();
        let (name, op_type, limit) = (self.name.to_string(), self.node.op_type().to_string(), self.at.limit);
        super::import::add_op(self.graph, self.names, &name, &op_type, op, ids, &outputs, limit)?;
        Ok(outputs.into_iter().map(|o| (!o.is_empty()).then_some(o)).collect())
    }

    /// Imports one IR node of `op` (an op with no ONNX spelling) over the values named `inputs`, inside the
    /// expansion: its one output gets a fresh name (rule 3), the node a name derived from the expanded node's.
    pub fn ir_op(&mut self, op: Op, inputs: &[&str]) -> Result<String, E> {
        let mut ids = Vec::with_capacity(inputs.len());
        for v in inputs {
            ids.push(Some(*self.names.get(*v).ok_or_else(|| self.undefined(v))?));
        }
        let out = self.fresh(&op.name().to_ascii_lowercase());
        let (op_type, limit) = (self.node.op_type().to_string(), self.at.limit);
        super::import::add_op(self.graph, self.names, &out, &op_type, op, ids, std::slice::from_ref(&out), limit)?;
        Ok(out)
    }

    /// The graph and the names in scope, to read (a subgraph imported as a graph of its own reads its outer
    /// values' types and constants).
    pub fn scope(&self) -> (&Graph, &Scope) {
        (self.graph, self.names)
    }

    /// The most bytes one value may have (the import's size limit).
    pub fn limit(&self) -> usize {
        self.at.limit
    }

    /// The model's default-domain opset (the node's own, not [`OPSET`]).
    pub fn opset(&self) -> i64 {
        self.at.opset
    }

    /// Whether ONNX output `k` is asked for.
    pub fn optional_output(&self, k: usize) -> bool {
        self.node.output.get(k).is_some_and(|s| !s.is_empty())
    }

    /// The type of the value named `v` in scope.
    pub fn ty(&self, v: &str) -> Result<ValueType, E> {
        let id = self.names.get(v).ok_or_else(|| self.undefined(v))?;
        Ok(self.graph.ty(*id).clone())
    }

    /// The error for a name that names no tensor: a sequence or an optional where a tensor is wanted, or nothing.
    pub fn undefined(&self, v: &str) -> E {
        match self.names.composite(v) {
            Some(c) => self.fail(format!("reads '{v}', which is {}, where it takes a tensor", c.what())),
            None => self.fail(format!("reads '{v}', which nothing defines")),
        }
    }

    /// What the name `v` names in scope: a tensor, a sequence or an optional of graph values.
    pub fn bound(&self, v: &str) -> Result<Composite, E> {
        self.names.bound(v).ok_or_else(|| self.fail(format!("reads '{v}', which nothing defines")))
    }

    /// The type of graph value `v`.
    pub fn value_type(&self, v: ValueId) -> &ValueType {
        self.graph.ty(v)
    }

    /// A fresh name in scope (rule 3) for `value`, a tensor, sequence or optional of graph values.
    pub fn name_bound(&mut self, hint: &str, value: Composite) -> String {
        let n = self.fresh(hint);
        self.names.bind(n.clone(), value);
        n
    }

    /// The constant value named `v`, if it is one.
    pub fn value(&self, v: &str) -> Option<&Tensor<'static>> {
        self.names.get(v).and_then(|id| self.graph.const_value(*id))
    }

    /// A name for a value of the expansion, not in scope (rule 3); it leaves scope when the expansion ends.
    pub fn fresh_name(&mut self, hint: &str) -> String {
        self.fresh(hint)
    }

    /// Names `name` (made by [`Ex::fresh_name`]) the value `v` names.
    pub fn bind(&mut self, name: &str, v: &str) -> Result<(), E> {
        let value = self.bound(v)?;
        self.names.bind(name.into(), value);
        Ok(())
    }

    /// Imports `nodes`, written with names from [`Ex::fresh_name`], in dependency order, one level deeper (a
    /// subgraph's nodes: read at the model's opset).
    pub fn import_nodes(&mut self, nodes: &[NodeProto]) -> Result<(), E> {
        let inner = At { depth: self.at.depth + 1, ..self.at };
        for i in super::import::topological_order(nodes, self.names)? {
            add_node(self.graph, self.names, &nodes[i], i, inner)?;
        }
        Ok(())
    }

    /// An initializer of a subgraph, decoded within the size limit.
    pub fn decode(&self, init: &super::proto::TensorProto) -> Result<Tensor<'static>, E> {
        super::tensor::decode_within(init, self.at.dir, self.at.limit)
            .map_err(|e| self.fail(format!("initializer '{}' of its body: {e}", init.name())))
    }

    fn fresh(&mut self, hint: &str) -> String {
        loop {
            self.count += 1;
            let n = format!("{}::{hint}{}", self.name, self.count);
            if !self.names.contains_key(&n) {
                self.made.push(n.clone());
                return n;
            }
        }
    }

    /// A constant in scope.
    pub fn constant(&mut self, hint: &str, t: Tensor<'static>) -> String {
        let n = self.fresh(hint);
        let v = self.graph.add_const(n.as_str(), t);
        self.names.insert(n.clone(), v);
        n
    }

    /// A 1-D int64 constant.
    pub fn ints(&mut self, v: &[i64]) -> Result<String, E> {
        let t = Tensor::from_vec(&[v.len()], v.to_vec()).map_err(|e| self.fail(e.to_string()))?;
        Ok(self.constant("ints", t))
    }

    /// A scalar of type `dt`.
    pub fn scalar(&mut self, dt: DatumType, x: f64) -> Result<String, E> {
        let t = consts::from_f64s(dt, &[], &[x]).map_err(|e| self.fail(e.to_string()))?;
        Ok(self.constant("scalar", t))
    }

    /// Zeros of `dt` and `shape`, within the size limit (checked before they are made).
    pub fn zeros(&mut self, dt: DatumType, shape: &[usize]) -> Result<String, E> {
        let ty = ValueType::new(dt, shape.to_vec());
        match ty.byte_len() {
            Some(b) if b <= self.at.limit => {}
            bytes => {
                return Err(E::TooLarge {
                    what: format!("node '{}' ({}): its zero state", self.name, self.node.op_type()),
                    ty: ty.to_string(),
                    bytes: bytes.unwrap_or(usize::MAX),
                    limit: self.at.limit,
                })
            }
        }
        let t = Tensor::zeros(dt, shape).map_err(|e| self.fail(e.to_string()))?;
        Ok(self.constant("zeros", t))
    }

    /// Imports one node of the expansion with one output, and names the output.
    pub fn op(&mut self, op_type: &str, inputs: &[&str], attrs: Vec<AttributeProto>) -> Result<String, E> {
        Ok(self.op_n(op_type, inputs, 1, attrs)?.remove(0))
    }

    /// Imports one node of the expansion with `n` outputs.
    pub fn op_n(
        &mut self,
        op_type: &str,
        inputs: &[&str],
        n: usize,
        attrs: Vec<AttributeProto>,
    ) -> Result<Vec<String>, E> {
        let hint = op_type.to_ascii_lowercase();
        let output: Vec<String> = (0..n).map(|_| self.fresh(&hint)).collect();
        let proto = NodeProto {
            input: inputs.iter().map(|s| s.to_string()).collect(),
            output: output.clone(),
            name: Some(format!("{}::{op_type}{}", self.name, self.count)),
            op_type: Some(op_type.into()),
            attribute: attrs,
            ..Default::default()
        };
        add_node(self.graph, self.names, &proto, 0, At { opset: OPSET, ..self.at })?;
        Ok(output)
    }

    /// Ends the expansion: the node's outputs name `outputs` (an omitted one may be `None`), and the names the
    /// expansion made leave scope (rule 3).
    fn finish(self, outputs: Vec<Option<String>>) -> Result<(), E> {
        let values: Vec<Option<Composite>> =
            outputs.iter().map(|o| o.as_ref().and_then(|o| self.names.bound(o))).collect();
        for m in &self.made {
            self.names.remove(m);
        }
        for (k, out) in self.node.output.iter().enumerate() {
            if out.is_empty() {
                continue;
            }
            let v = values.get(k).cloned().flatten().ok_or_else(|| E::Node {
                node: self.name.into(),
                op: self.node.op_type().into(),
                message: format!("has an output {k} ('{out}'), the op makes {}", values.len()),
            })?;
            if self.names.bind(out.clone(), v) {
                return Err(E::Duplicate { name: out.clone() });
            }
        }
        Ok(())
    }
}

/// An int attribute for a written node.
pub(super) fn int(name: &str, v: i64) -> AttributeProto {
    AttributeProto {
        name: Some(name.into()),
        r#type: Some(AttributeType::Int as i32),
        i: Some(v),
        ..Default::default()
    }
}

/// An ints attribute for a written node.
pub(super) fn ints(name: &str, v: Vec<i64>) -> AttributeProto {
    AttributeProto { name: Some(name.into()), r#type: Some(AttributeType::Ints as i32), ints: v, ..Default::default() }
}

/// A float attribute for a written node.
pub(super) fn float(name: &str, v: f32) -> AttributeProto {
    AttributeProto {
        name: Some(name.into()),
        r#type: Some(AttributeType::Float as i32),
        f: Some(v),
        ..Default::default()
    }
}

/// A string attribute for a written node.
pub(super) fn string(name: &str, v: &str) -> AttributeProto {
    AttributeProto {
        name: Some(name.into()),
        r#type: Some(AttributeType::String as i32),
        s: Some(v.as_bytes().to_vec()),
        ..Default::default()
    }
}
