//! Lowering of the whole recurrent layer ([`ir::Lstm`]) to [`recurrent::lstm`]: weights that are constants (every
//! trained model's) are sliced per direction and packed once here; weights that are graph inputs (the node
//! suite's) are prepared at each run the same way.

use std::borrow::Cow;
use std::sync::Arc;

use stowage_compiler::consts;
use stowage_compiler::ir::recurrent::lstm_input as at;
use stowage_compiler::ir::{self, Graph, ValueId};
use stowage_runtime::{DatumType, Tensor};

use super::arg;
use crate::error::{CpuError, Result};
use crate::kernels::recurrent::{self, Direction, Outputs, Shape};
use crate::kernels::weights::Weights;
use crate::program::Kernel;

/// The f32 elements of `t`, borrowed when it is packed row-major.
fn floats<'a>(t: &'a Tensor<'_>) -> Result<Cow<'a, [f32]>> {
    match t.as_slice::<f32>() {
        Ok(s) => Ok(Cow::Borrowed(s)),
        Err(_) => Ok(Cow::Owned(t.to_vec::<f32>()?)),
    }
}

/// Every direction of `layer`, from `W`, `R`, and `B` and `P` where given.
fn directions(
    layer: &ir::Lstm,
    input: usize,
    w: Weights<'_>,
    r: Weights<'_>,
    b: Option<&[f32]>,
    p: Option<&[f32]>,
) -> Vec<Direction> {
    let acts = &layer.activations;
    (0..layer.dirs())
        .map(|d| {
            let own = [acts[3 * d], acts[3 * d + 1], acts[3 * d + 2]];
            Direction::new(d, layer.hidden, input, w, r, b, p, layer.reverse[d], own)
        })
        .collect()
}

/// The kernel of an [`ir::Lstm`] node over `inputs`.
pub(super) fn lstm(graph: &Graph, layer: &ir::Lstm, inputs: &[Option<ValueId>]) -> Result<Kernel> {
    let given = |i: usize| inputs.get(i).copied().flatten();
    let x = given(at::X).ok_or_else(|| CpuError::NotImplemented("LSTM without X".into()))?;
    let x_shape = &graph.ty(x).shape;
    let (steps, batch, input) =
        layer.dims(x_shape).ok_or_else(|| CpuError::NotImplemented(format!("LSTM over X of shape {x_shape:?}")))?;
    let shape = Shape {
        steps,
        batch,
        input,
        hidden: layer.hidden,
        batch_major: layer.batch_major,
        clip: layer.clip,
        input_forget: layer.input_forget,
    };
    let y_shape: Vec<usize> = if layer.batch_major {
        vec![batch, steps, layer.dirs(), layer.hidden]
    } else {
        vec![steps, layer.dirs(), batch, layer.hidden]
    };
    let state_shape = layer.state_shape(batch);
    // The weights packed once when all of them are constants.
    let constant = |i: usize| given(i).map(|v| graph.const_value(v));
    let fixed = match (constant(at::W), constant(at::R), constant(at::B), constant(at::P)) {
        (Some(Some(w)), Some(Some(r)), b, p) if b.is_none_or(|b| b.is_some()) && p.is_none_or(|p| p.is_some()) => {
            let (b, p) = (b.flatten().map(floats).transpose()?, p.flatten().map(floats).transpose()?);
            // W and R read in place where the model file holds them (`kernels::weights`), else as floats.
            let (w_floats, r_floats);
            let w = match Weights::of(w) {
                Some(w) => w,
                None => Weights::Slice({
                    w_floats = floats(w)?;
                    &w_floats
                }),
            };
            let r = match Weights::of(r) {
                Some(r) => r,
                None => Weights::Slice({
                    r_floats = floats(r)?;
                    &r_floats
                }),
            };
            Some(Arc::new(directions(layer, input, w, r, b.as_deref(), p.as_deref())))
        }
        _ => None,
    };
    let layer = layer.clone();
    Ok(Box::new(move |a, ctx| {
        let optional = |i: usize| a.get(i).copied().flatten();
        let prepared;
        let dirs: &[Direction] = match &fixed {
            Some(d) => d,
            None => {
                let (w, r) = (floats(arg(a, at::W)?)?, floats(arg(a, at::R)?)?);
                let b = optional(at::B).map(floats).transpose()?;
                let p = optional(at::P).map(floats).transpose()?;
                prepared =
                    directions(&layer, input, Weights::Slice(&w), Weights::Slice(&r), b.as_deref(), p.as_deref());
                &prepared
            }
        };
        let lens = match optional(at::LENS) {
            None => None,
            Some(t) => {
                let lens = consts::to_i64s(t)?;
                if let Some(bad) = lens.iter().find(|&&n| !(0..=steps as i64).contains(&n)) {
                    return Err(CpuError::NotImplemented(format!(
                        "sequence_lens holds {bad}: each length must be 0 to {steps}, the sequence's steps"
                    )));
                }
                Some(lens.into_iter().map(|n| n as usize).collect::<Vec<_>>())
            }
        };
        let x = floats(arg(a, at::X)?)?;
        let h0 = optional(at::H0).map(floats).transpose()?;
        let c0 = optional(at::C0).map(floats).transpose()?;
        let mut y = crate::storage::output(DatumType::F32, &y_shape)?;
        let mut h = crate::storage::output(DatumType::F32, &state_shape)?;
        let mut c = crate::storage::output(DatumType::F32, &state_shape)?;
        let out = Outputs { y: y.as_slice_mut::<f32>()?, h: h.as_slice_mut::<f32>()?, c: c.as_slice_mut::<f32>()? };
        recurrent::lstm(shape, dirs, &x, lens.as_deref(), h0.as_deref(), c0.as_deref(), out, ctx.threads);
        Ok(vec![y, h, c])
    }))
}

#[cfg(test)]
mod tests {
    use stowage_compiler::ir::{Activation, Graph, Lstm, Op, ValueType};
    use stowage_runtime::{DatumType, Tensor};

    /// A reverse LSTM over X [4, 2, 3] with hidden 5, its weights constants or graph inputs, and sequence_lens
    /// an input.
    fn graph(constant: bool) -> Graph {
        let f = |s: &[usize]| ValueType::new(DatumType::F32, s.to_vec());
        let mut g = Graph::new("lstm");
        let x = g.add_input("x", f(&[4, 2, 3]));
        let vals =
            |n: usize, seed: usize| (0..n).map(|i| ((i * 7 + seed) % 11) as f32 / 10.0 - 0.5).collect::<Vec<_>>();
        let mut weights = Vec::new();
        for (name, shape, seed) in [("w", vec![1, 20, 3], 1), ("r", vec![1, 20, 5], 2), ("b", vec![1, 40], 3)] {
            let n = shape.iter().product();
            weights.push(if constant {
                g.add_const(name, Tensor::from_slice(&shape, &vals(n, seed)).unwrap())
            } else {
                g.add_input(name, f(&shape))
            });
        }
        let lens = g.add_input("lens", ValueType::new(DatumType::I32, vec![2]));
        let layer = Lstm {
            hidden: 5,
            reverse: vec![true],
            activations: vec![Activation::Sigmoid, Activation::Tanh, Activation::Tanh],
            clip: Some(3.0),
            input_forget: false,
            batch_major: false,
        };
        let inputs = vec![Some(x), Some(weights[0]), Some(weights[1]), Some(weights[2]), Some(lens)];
        let outs = vec![Some(("y".into(), f(&[4, 1, 2, 5]))), Some(("h".into(), f(&[1, 2, 5]))), None];
        let n = g.add_node("rnn", Op::Lstm(layer), inputs, outs);
        let (y, h) = (g.node(n).outputs[0].unwrap(), g.node(n).outputs[1].unwrap());
        g.add_output("y", y);
        g.add_output("h", h);
        g
    }

    #[test]
    fn constant_and_input_weights_agree_and_bad_lengths_are_refused() {
        let x: Vec<f32> = (0..24).map(|i| (i % 5) as f32 / 4.0 - 0.5).collect();
        let x = || Tensor::from_slice(&[4, 2, 3], &x).unwrap();
        let lens = |a: i32, b: i32| Tensor::from_slice(&[2], &[a, b]).unwrap();
        let fixed = super::super::lower(&graph(true), 1).expect("lowers");
        let got = fixed.run(vec![x(), lens(4, 2)]).expect("runs").outputs;
        let vals =
            |n: usize, seed: usize| (0..n).map(|i| ((i * 7 + seed) % 11) as f32 / 10.0 - 0.5).collect::<Vec<_>>();
        let given = super::super::lower(&graph(false), 1).expect("lowers");
        let (w, r, b) = (vals(60, 1), vals(100, 2), vals(40, 3));
        let inputs = vec![
            x(),
            Tensor::from_slice(&[1, 20, 3], &w).unwrap(),
            Tensor::from_slice(&[1, 20, 5], &r).unwrap(),
            Tensor::from_slice(&[1, 40], &b).unwrap(),
            lens(4, 2),
        ];
        let again = given.run(inputs).expect("runs").outputs;
        for (a, b) in got.iter().zip(&again) {
            assert_eq!(a.to_vec::<f32>().unwrap(), b.to_vec::<f32>().unwrap());
        }
        // The second batch element has 2 steps: its Y is zero from step 2 on.
        let y = got[0].to_vec::<f32>().unwrap();
        assert!(y[(2 * 2 + 1) * 5..][..5].iter().all(|&v| v == 0.0) && y[5..10].iter().any(|&v| v != 0.0));
        let err = fixed.run(vec![x(), lens(4, 9)]).map(|_| ()).expect_err("a length past the sequence");
        assert!(err.to_string().contains("sequence_lens holds 9"), "{err}");
    }
}
