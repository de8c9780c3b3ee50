//! Elementwise chains in a product's epilogue: `MatMul | Gemm | Conv → chain`, a bias `Add`, a scale, a GELU or
//! SiLU after a product, runs as the product with the chain applied as each output is stored, instead of a
//! product and then a launch that reads the product's output back.
//!
//! The rules, each checked by [`chain_epilogues`]:
//! 1. the product is a MatMul, Gemm or Conv with one output (f32, or f16 or bf16 in a plan storing them), is no
//!    graph output, and has no epilogue already
//!    (no ReLU or residual addition of its own);
//! 2. every reader of the product's output is a member of one chain (`stowage_compiler::lowering::fuse`), whose
//!    output has the product's shape and type, is packed, and reads the product at the output's own strides (no
//!    broadcast);
//! 3. each other input of the chain exists when the product runs: a graph input, a constant, or made by a node
//!    before it in the graph's order;
//! 4. the chain stays one kernel's arguments: at most [`MAX_INPUTS`] inputs.
//!
//! The step is written at the product, reads the chain's other inputs there, and writes the chain's output: the
//! plan's memory pass sees the same through `memory_steps`. Where the product cannot be lowered, each member of
//! its chain is refused with it.

use std::collections::{HashMap, HashSet};

use stowage_compiler::ir::{Graph, NodeId, Op, ValueDef, ValueId};
use stowage_compiler::lowering::fuse::Planned;
use stowage_kir::{packed_strides, Body, Elem};
use stowage_runtime::DatumType;

use crate::codegen::Epilogue;

/// The most inputs a chain in an epilogue may have besides the product.
pub(super) const MAX_INPUTS: usize = 8;

/// A chain a product runs in its epilogue.
#[derive(Clone, Debug)]
pub(super) struct Absorbed {
    /// The chain's root: its output is the step's.
    pub root: NodeId,
    /// The chain's inputs other than the product, in the kernel's argument order.
    pub others: Vec<ValueId>,
    /// What the kernel computes.
    pub epilogue: Epilogue,
}

/// The chains of `planned` that products run in their epilogues, by product; `taken`: products with an epilogue
/// of their own (rule 1).
pub(super) fn chain_epilogues(
    graph: &Graph,
    planned: &HashMap<NodeId, Planned>,
    taken: &HashSet<NodeId>,
) -> HashMap<NodeId, Absorbed> {
    let outputs: HashSet<ValueId> = graph.outputs().iter().map(|o| o.value).collect();
    let position: HashMap<NodeId, usize> = graph.order().iter().enumerate().map(|(i, &n)| (n, i)).collect();
    let mut readers: HashMap<ValueId, Vec<NodeId>> = HashMap::new();
    for &n in graph.order() {
        for &v in graph.node(n).inputs.iter().flatten() {
            readers.entry(v).or_default().push(n);
        }
    }
    let mut found = HashMap::new();
    for (&root, p) in planned {
        let Some(Some(out)) = graph.node(root).outputs.first().copied() else { continue };
        let l = &p.loops;
        // Rule 2: the chain's output as the product's, packed, of the product's float type.
        let Body::Chain(_) = &l.body else { continue };
        let dt = graph.ty(out).dt;
        let Some(elem) = Elem::stored(dt).filter(|_| matches!(dt, DatumType::F32 | DatumType::F16 | DatumType::BF16))
        else {
            continue;
        };
        if l.output.elem != elem
            || l.output.strides != packed_strides(&l.dims, elem.size())
            || p.inputs.len() > MAX_INPUTS + 1
        {
            continue;
        }
        let members: HashSet<NodeId> = p.members.iter().copied().collect();
        for (k, &v) in p.inputs.iter().enumerate() {
            let ValueDef::Node(product, 0) = graph.value(v).def else { continue };
            // Rule 1.
            let node = graph.node(product);
            let is_product = matches!(node.op, Op::MatMul | Op::Gemm(_) | Op::Conv(_));
            if !is_product
                || taken.contains(&product)
                || found.contains_key(&product)
                || outputs.contains(&v)
                || node.outputs.iter().skip(1).any(Option::is_some)
                || graph.ty(v).dt != dt
                || graph.ty(v).shape != graph.ty(out).shape
            {
                continue;
            }
            // Rule 2: read by the chain alone, element for element.
            let alone = readers.get(&v).is_some_and(|r| r.iter().all(|n| members.contains(n)));
            if !alone || l.inputs[k].elem != elem || l.inputs[k].strides != l.output.strides {
                continue;
            }
            // Rule 3.
            let ready = p.inputs.iter().enumerate().filter(|(j, _)| *j != k).all(|(_, &o)| match graph.value(o).def {
                ValueDef::Node(n, _) => position[&n] < position[&product],
                ValueDef::Input(_) | ValueDef::Const(_) => true,
            });
            if !ready {
                continue;
            }
            let others = p.inputs.iter().enumerate().filter(|(j, _)| *j != k).map(|(_, &o)| o).collect();
            found.insert(product, Absorbed { root, others, epilogue: Epilogue { loops: l.clone(), product: k } });
            break;
        }
    }
    found
}
