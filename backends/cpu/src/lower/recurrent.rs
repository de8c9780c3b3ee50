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
    w: &[f32],
    r: &[f32],
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
            Some(Arc::new(directions(layer, input, &floats(w)?, &floats(r)?, b.as_deref(), p.as_deref())))
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
                prepared = directions(&layer, input, &w, &r, b.as_deref(), p.as_deref());
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
