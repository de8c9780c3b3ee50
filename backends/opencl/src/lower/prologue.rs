//! Transposed operands read in place: `Transpose → MatMul`, the heads of an attention split out of its projections
//! (`[b, s, h, d] → [b, h, s, d]`, and K's `→ [b, h, d, s]`), runs as the product reading the transpose's input
//! through the permuted strides, instead of a copy launch and a product that reads the copy.
//!
//! The rules, each checked by [`transposed_operands`]:
//! 1. the reader is a MatMul of f32, f16 or bf16 operands of rank 2 or more (so no operand is promoted from 1-D);
//! 2. the operand is made by a Transpose with a known permutation, whose output only that MatMul reads (once) and is
//!    no graph output;
//! 3. the Transpose is not already absorbed elsewhere.
//!
//! The product's step reads the transpose's input; the transpose has no step. Where the product cannot be
//! lowered, its absorbed transposes are refused with it.

use std::collections::{HashMap, HashSet};

use stowage_compiler::ir::{Graph, NodeId, Op, ValueDef, ValueId};
use stowage_runtime::DatumType;

/// A MatMul operand read through a transpose's permutation.
#[derive(Clone, Debug)]
pub(super) struct Transposed {
    /// The Transpose absorbed.
    pub node: NodeId,
    /// Its input: what the product reads.
    pub source: ValueId,
    /// Its permutation.
    pub perm: Vec<usize>,
}

/// Per MatMul, its operands (0: A, 1: B) read through a transpose; `taken`: nodes absorbed elsewhere.
pub(super) fn transposed_operands(graph: &Graph, taken: &HashSet<NodeId>) -> HashMap<NodeId, [Option<Transposed>; 2]> {
    let uses = graph.use_counts();
    let outputs: HashSet<ValueId> = graph.outputs().iter().map(|o| o.value).collect();
    let mut found = HashMap::new();
    for &n in graph.order() {
        let node = graph.node(n);
        // Rule 1.
        let [Some(a), Some(b)] = node.inputs.as_slice() else { continue };
        let float = |v: ValueId| matches!(graph.ty(v).dt, DatumType::F32 | DatumType::F16 | DatumType::BF16);
        let operand_ok = |v: ValueId| float(v) && graph.ty(v).rank() >= 2;
        if !matches!(node.op, Op::MatMul) || !operand_ok(*a) || !operand_ok(*b) || a == b {
            continue;
        }
        let mut pair: [Option<Transposed>; 2] = [None, None];
        for (slot, &v) in pair.iter_mut().zip([a, b]) {
            // Rule 2.
            let ValueDef::Node(t, 0) = graph.value(v).def else { continue };
            let Op::Transpose { perm: Some(perm) } = &graph.node(t).op else { continue };
            let Some(Some(source)) = graph.node(t).inputs.first().copied() else { continue };
            if uses[v] != 1 || outputs.contains(&v) || taken.contains(&t) || perm.len() != graph.ty(v).rank() {
                continue;
            }
            *slot = Some(Transposed { node: t, source, perm: perm.clone() });
        }
        if pair.iter().any(Option::is_some) {
            found.insert(n, pair);
        }
    }
    found
}

/// The element strides of a transpose's output by `perm` over its packed input of `shape`, per output axis.
pub(super) fn view_strides(shape: &[usize], perm: &[usize]) -> Vec<usize> {
    let mut packed = vec![1usize; shape.len()];
    for a in (0..shape.len().saturating_sub(1)).rev() {
        packed[a] = packed[a + 1] * shape[a + 1];
    }
    perm.iter().map(|&p| packed[p]).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_transposed_view_steps_through_its_source() {
        // [2, 3, 4] seen as [4, 2, 3]: axis 0 steps 1 element, axis 1 steps 12, axis 2 steps 4.
        assert_eq!(view_strides(&[2, 3, 4], &[2, 0, 1]), [1, 12, 4]);
        assert_eq!(view_strides(&[5, 7], &[1, 0]), [1, 7]);
    }
}
