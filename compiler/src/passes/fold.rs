//! Constant folding: a node whose inputs are all constants (any input, for Shape) is evaluated at compile time
//! and its outputs become constants. This is how the `ConstantOfShape` weights of model-zoo graphs become plain
//! weights. Results over [`MAX_FOLD_BYTES`] stay in the graph, computed at run time.

use crate::eval::fold_node;
use crate::ir::{Edit, Graph};

/// Largest result folded, in bytes (1 GiB).
pub const MAX_FOLD_BYTES: usize = 1 << 30;

/// Folds every foldable node, in order (so chains fold in one run).
pub fn run(g: &mut Graph) -> usize {
    let mut folded = 0;
    let mut edit = Edit::new(g);
    for n in g.order().to_vec() {
        let node = g.node(n);
        let outs: Vec<_> = node.outputs.iter().flatten().copied().collect();
        let types: Vec<_> = node.outputs.iter().map(|o| o.map(|v| g.ty(v).clone())).collect();
        if types.iter().flatten().any(|t| t.byte_len().is_none_or(|b| b > MAX_FOLD_BYTES)) || outs.is_empty() {
            continue;
        }
        // Outputs nobody asked for still need a type for evaluation: take the first output's shape.
        let Some(full) = types.iter().cloned().collect::<Option<Vec<_>>>() else { continue };
        let Some(tensors) = fold_node(g, &node.op, &node.inputs, &full) else { continue };
        for (v, t) in node.outputs.clone().into_iter().zip(tensors) {
            if let Some(v) = v {
                g.make_const(v, t);
            }
        }
        edit.remove(g, n);
        folded += 1;
    }
    edit.finish(g);
    folded
}
