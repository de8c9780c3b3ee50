//! Identity and Dropout removal: both copy their input at inference (Dropout unless its `training_mode` input is
//! true). Users of the output read the input instead; a Dropout mask that is used becomes a constant of `true`s.

use stowage_runtime::Tensor;

use crate::ir::{Edit, Graph, Op};

/// Removes every Identity and inference-mode Dropout node.
pub fn run(g: &mut Graph) -> usize {
    let mut removed = 0;
    let mut edit = Edit::new(g);
    for n in g.order().to_vec() {
        let node = g.node(n);
        let training = |v: Option<&Option<crate::ir::ValueId>>| {
            v.copied()
                .flatten()
                .is_some_and(|v| g.const_value(v).and_then(|t| crate::consts::to_i64s(t).ok()) != Some(vec![0]))
        };
        match node.op {
            Op::Identity => {}
            Op::Dropout { .. } if !training(node.inputs.get(2)) => {}
            _ => continue,
        }
        let (Some(input), outputs) = (node.inputs[0], node.outputs.clone()) else { continue };
        if let Some(Some(mask)) = outputs.get(1) {
            let Ok(ones) =
                Tensor::from_vec(&g.ty(*mask).shape.clone(), vec![true; g.ty(*mask).element_count().unwrap_or(0)])
            else {
                continue;
            };
            g.make_const(*mask, ones);
        }
        if let Some(Some(out)) = outputs.first() {
            edit.replace_uses(g, *out, input);
        }
        edit.remove(g, n);
        removed += 1;
    }
    edit.finish(g);
    removed
}
