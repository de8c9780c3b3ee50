//! Gemm canonicalisation: `Add(MatMul(A, B), C)` with 2-D `A` and `B`, and `Add(Gemm(A, B), C)` with a Gemm that has
//! no C, become one `Gemm(A, B, C)` with `beta = 1`, when C broadcasts to the product's shape and the product has
//! no other user. Backends then see one op for a dense layer, bias included.

use crate::infer::broadcast;
use crate::ir::{Binary, Edit, Gemm, Graph, Op, ValueDef};

/// Fuses every eligible product + Add pair.
pub fn run(g: &mut Graph) -> usize {
    let mut fused = 0;
    // Use counts as they stand after each fusion, kept up to date rather than counted again per node.
    let mut edit = Edit::new(g);
    for add in g.order().to_vec() {
        let node = g.node(add);
        if !matches!(node.op, Op::Binary(Binary::Add)) {
            continue;
        }
        let (Some(l), Some(r), Some(Some(out))) = (node.inputs[0], node.inputs[1], node.outputs.first().copied())
        else {
            continue;
        };
        // Whichever operand is a product with a single use; the other is C.
        let pick = [(l, r), (r, l)].into_iter().find_map(|(p, c)| {
            let mm = g.producer(p)?;
            let gemm = match &g.node(mm).op {
                Op::MatMul => Gemm { alpha: 1.0, beta: 1.0, trans_a: false, trans_b: false },
                Op::Gemm(gm) if g.node(mm).inputs.len() == 2 => Gemm { beta: 1.0, ..*gm },
                _ => return None,
            };
            let prod = g.ty(p);
            let ok = edit.uses(p) == 1
                && prod.rank() == 2
                && g.node(mm).inputs.iter().flatten().all(|&v| g.ty(v).rank() == 2)
                && g.ty(c).dt == prod.dt
                && broadcast(&g.ty(c).shape, &prod.shape).is_ok_and(|s| s == prod.shape);
            ok.then_some((mm, gemm, c))
        });
        let Some((mm, gemm, c)) = pick else { continue };
        let (a, b) = (g.node(mm).inputs[0], g.node(mm).inputs[1]);
        let name = g.node(add).name.clone();
        let ty = g.ty(out).clone();
        let out_name = g.value(out).name.clone();
        let fused_node =
            edit.insert_before(g, add, name, Op::Gemm(gemm), vec![a, b, Some(c)], vec![Some((out_name, ty))]);
        let Some(Some(new_out)) = g.node(fused_node).outputs.first().copied() else { continue };
        edit.replace_uses(g, out, new_out);
        edit.remove(g, add);
        edit.remove(g, mm);
        debug_assert!(matches!(g.value(new_out).def, ValueDef::Node(..)));
        fused += 1;
    }
    edit.finish(g);
    fused
}
