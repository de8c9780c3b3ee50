//! Powers by a constant 2 as products: `Pow(x, 2)` becomes `Mul(x, x)`. Exporters write a squared magnitude, a
//! variance or an L2 norm as `Pow(x, 2.0)` (PyTorch's `x ** 2`, openWakeWord's mel spectrogram); a backend computes a
//! general power through the math library one element at a time, where a product is one vector instruction. The
//! rules:
//!
//! 1. **Exactly 2.** The exponent is a constant of one element whose value is 2 (any numeric type); other exponents
//!    are left alone (`x^0.5` is not `sqrt(x)` at −0 and −∞).
//! 2. **Same values.** `x` is a float and the node's output has `x`'s type and shape (the exponent broadcasts to
//!    nothing wider), so the product is the same value, NaN and infinities included: x² is exact before rounding,
//!    and both round it once (`powf` to within its error, the product correctly).
//! 3. **In place.** The node keeps its name and its output; only its op and its second input change, so readers and
//!    graph outputs are untouched, and an exponent nobody else reads is left to dead-code elimination.
//!
//! Tests: `compiler/tests/passes.rs` (`a_square_is_a_product`).

use crate::ir::{Binary, Edit, Graph, Op};

/// Rewrites every `Pow(x, 2)` of a float `x` as `Mul(x, x)`; returns how many.
pub fn run(g: &mut Graph) -> usize {
    let mut count = 0;
    let mut edit = Edit::new(g);
    for n in g.order().to_vec() {
        if !matches!(g.node(n).op, Op::Binary(Binary::Pow)) {
            continue;
        }
        let [Some(x), Some(e)] = g.node(n).inputs[..] else { continue };
        let Some(Some(y)) = g.node(n).outputs.first().copied() else { continue };
        let two = g.const_value(e).filter(|c| c.len() == 1).and_then(|c| crate::consts::to_f64s(c).ok());
        if two.as_deref() != Some(&[2.0]) || !g.ty(x).dt.is_float() || g.ty(y) != g.ty(x) {
            continue;
        }
        g.node_mut(n).op = Op::Binary(Binary::Mul);
        edit.set_inputs(g, n, vec![Some(x), Some(x)]);
        count += 1;
    }
    edit.finish(g);
    count
}
