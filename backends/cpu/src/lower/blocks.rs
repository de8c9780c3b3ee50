//! The kernels of nodes whose values the plan holds in channel blocks (`stowage_compiler::plan::blocked`,
//! `kernels/blocked.rs`): a convolution into or out of blocks (`conv_blocks.rs`), a depthwise one in blocks
//! (`depthwise_blocks.rs`), pools and BatchNormalization in blocks, global pools from blocks. A blocked value's tensor has its channels
//! padded to whole blocks (`Blocks::padded_shape`), so its bytes are the plan's. A generated chain whose result is
//! in blocks runs over the blocks ([`chain`]): the plan blocks elementwise steps only with whole blocks, over
//! values of one shape, single elements and per-channel operands, which the chain reads through strides. Concats
//! need nothing here: along the channels, whole blocks are the packed kernel's runs.

use std::collections::HashMap;

use stowage_compiler::ir::{self, Graph, Op, PoolKind, ValueDef, ValueId};
use stowage_runtime::DatumType;

use super::{arg, one};
use crate::error::{CpuError, Result};
use crate::kernels::act::Act;
use crate::kernels::blocked::{self, Blocks, Pooling};
use crate::kernels::conv_blocks::{self, Form};
use crate::kernels::conv_lanes::LanePack;
use crate::kernels::depthwise::Plane;
use crate::kernels::depthwise_blocks::{self, DepthwisePack};
use crate::kernels::pool::PoolParams;
use crate::kernels::weights::{Floats, Weights};
use crate::program::Kernel;

/// The form of `v` under `blocked` (value names in channel blocks).
pub(super) fn form(graph: &Graph, blocked: &HashMap<String, usize>, v: Option<ValueId>) -> Form {
    match v {
        Some(v) if blocked.contains_key(&graph.value(v).name) => Form::Blocked,
        _ => Form::Plain,
    }
}

/// The kernel of `node` where its data input (`input`) or the value its step writes (`written`) is in blocks, with
/// the step's name; `None` where neither is (the packed kernels run). `act` and `residual` are the epilogue a
/// convolution's step runs (`lower/mod.rs`). With `force` (the `cpu:blocks` target), every convolution and pool the
/// CPU takes in blocks runs in blocks, its packed input put into blocks and its output out of them around it.
pub(super) fn kernel(
    graph: &Graph,
    id: ir::NodeId,
    written: Option<ValueId>,
    blocked: &HashMap<String, usize>,
    (act, residual): (Act, bool),
    force: bool,
) -> Option<Result<Kernel>> {
    let node = graph.node(id);
    if matches!(node.op, Op::Unary(_) | Op::Binary(_) | Op::Variadic(_) | Op::Clip)
        && form(graph, blocked, written) == Form::Blocked
    {
        // Outside a generated chain an elementwise kernel broadcasts by the packed layout: only inputs of the
        // output's shape (or single elements) are right there.
        let out = &graph.ty(written?).shape;
        let broadcast = node.inputs.iter().flatten().any(|&v| {
            let s = &graph.ty(v).shape;
            s != out && s.iter().product::<usize>() != 1
        });
        return broadcast.then(|| {
            Err(CpuError::NotImplemented(format!(
                "node '{}' ({}): a broadcast operand in channel blocks outside a generated chain",
                node.name,
                node.op.name()
            )))
        });
    }
    if !matches!(node.op, Op::Conv(_) | Op::Pool(_) | Op::GlobalPool(_) | Op::BatchNorm { .. }) {
        return None;
    }
    let x = node.inputs.first().copied().flatten();
    let (from, to) = (form(graph, blocked, x), form(graph, blocked, written));
    let forced = force && forceable(graph, id) && conv_blocks::available();
    if (from, to) == (Form::Plain, Form::Plain) && !forced {
        return None;
    }
    // The layouts the kernel works in: the values', or blocks where forced.
    let inner = if forced {
        (Form::Blocked, if matches!(node.op, Op::GlobalPool(_)) { Form::Plain } else { Form::Blocked })
    } else {
        (from, to)
    };
    let x = x?;
    let xs = graph.ty(x).shape.clone();
    let out = graph.ty(node.outputs.first().copied().flatten()?).shape.clone();
    let (Some(xb), Some(yb)) = (Blocks::of(&xs), Blocks::of(&out)) else {
        return Some(Err(CpuError::NotImplemented(format!("node '{}': channel blocks of a value not 4-D", node.name))));
    };
    let k = match &node.op {
        Op::Conv(c) if c.group > 1 && inner == (Form::Blocked, Form::Blocked) => {
            depthwise(graph, node, c, (xb, yb), act, residual)
        }
        Op::Conv(c) if c.group == 1 => conv(graph, node, c, (xb, yb), inner, act, residual),
        Op::Pool(p) if inner == (Form::Blocked, Form::Blocked) => {
            let (w, kind) = (p.window.clone(), p.kind);
            let k: Kernel = Box::new(move |a, cx| {
                let x = arg(a, 0)?.as_slice::<f32>()?;
                let p = PoolParams { kernel: &w.kernel, strides: &w.strides, dilations: &w.dilations, pads: &w.pads };
                let kind = match kind {
                    PoolKind::Max => Pooling::Max,
                    PoolKind::Average { count_include_pad } => Pooling::Average(count_include_pad),
                };
                let mut y = crate::storage::output_for_overwrite(DatumType::F32, &yb.padded_shape())?;
                blocked::pool(x, xb, &p, kind, y.as_slice_mut::<f32>()?, (yb.h, yb.w), cx.threads);
                one(y)
            });
            Ok(k)
        }
        Op::BatchNorm { epsilon, training: false, .. } if inner == (Form::Blocked, Form::Blocked) => {
            let eps = *epsilon;
            let k: Kernel = Box::new(move |a, cx| {
                let x = arg(a, 0)?.as_slice::<f32>()?;
                let p = [1, 2, 3, 4].map(|i| arg(a, i).and_then(|t| Ok(t.as_slice::<f32>()?)));
                let [s, b, m, v] = p;
                let mut y = crate::storage::output_for_overwrite(DatumType::F32, &yb.padded_shape())?;
                blocked::batch_norm(x, xb, [s?, b?, m?, v?], eps, y.as_slice_mut::<f32>()?, cx.threads);
                one(y)
            });
            Ok(k)
        }
        Op::GlobalPool(kind) if inner == (Form::Blocked, Form::Plain) => {
            let max = *kind == PoolKind::Max;
            let k: Kernel = Box::new(move |a, _| {
                let x = arg(a, 0)?.as_slice::<f32>()?;
                let mut y = crate::storage::output_for_overwrite(DatumType::F32, &out)?;
                blocked::global_pool(x, xb, max, y.as_slice_mut::<f32>()?);
                one(y)
            });
            Ok(k)
        }
        _ => Err(CpuError::NotImplemented(format!(
            "node '{}' ({}): no kernel from {from:?} to {to:?} channels",
            node.name,
            node.op.name()
        ))),
    };
    Some(k.map(|k| if forced { around(k, (from, to), inner, (xb, yb), residual) } else { k }))
}

/// The loops of the generated chain rooted at `root` (`planned`) where its result is in channel blocks, over the
/// blocks themselves, `[N, ⌈C/16⌉, H, W, 16]`: an operand of the result's shape is in blocks too (the plan ties
/// them, `plan::blocked`'s `Along`), one of one value per channel (`layouts::per_channel`, a BatchNormalization's
/// scale and shift, a squeeze-excitation's scales) is read through a stride of 0 along the plane and its own
/// channel stride along the block's lanes (packed, or the caller's where it is a graph input in `strided`'s byte
/// strides; in blocks of whole blocks its bytes are the packed ones, its plane being one element), a single
/// element steps 0. `None` where the result is packed.
pub(super) fn chain(
    graph: &Graph,
    root: ir::NodeId,
    planned: &stowage_compiler::lowering::fuse::Planned,
    blocked: &HashMap<String, usize>,
    strided: &HashMap<ValueId, Vec<usize>>,
) -> Option<Result<stowage_kir::Loops>> {
    use stowage_kir::{packed_strides, Body, Elem, Loops};
    let node = graph.node(root);
    let out = node.outputs.first().copied().flatten()?;
    let width = *blocked.get(&graph.value(out).name)?;
    let refuse = |what: String| {
        Some(Err(CpuError::NotImplemented(format!(
            "node '{}' ({}): {what} in channel blocks",
            node.name,
            node.op.name()
        ))))
    };
    let shape = &graph.ty(out).shape;
    let (Some(y), Body::Chain(body)) = (Blocks::of(shape), &planned.loops.body) else {
        return refuse("a chain not over a 4-D value".into());
    };
    if width != blocked::BLOCK {
        return refuse(format!("blocks of {width} channels"));
    }
    let dims = [y.n, y.groups(), y.h, y.w, blocked::BLOCK];
    let mut operands = Vec::with_capacity(planned.inputs.len());
    for &v in &planned.inputs {
        let (t, name) = (graph.ty(v), &graph.value(v).name);
        let strides = if t.dt != DatumType::F32 {
            return refuse(format!("operand '{name}' of {:?}", t.dt));
        } else if t.shape == *shape {
            if !blocked.contains_key(name) {
                return refuse(format!("operand '{name}' packed beside a result"));
            }
            packed_strides(&dims, 4)
        } else if t.shape.iter().product::<usize>() == 1 {
            vec![0; 5]
        } else if crate::layouts::per_channel(&t.shape, shape) {
            // Its own byte strides, axes right-aligned to [N, C, H, W] (an absent axis is one of extent 1).
            let own = strided.get(&v).cloned().unwrap_or_else(|| packed_strides(&t.shape, 4));
            let at = |a: usize| (a + t.shape.len()).checked_sub(4).map_or((1, 0), |i| (t.shape[i], own[i]));
            let ((n, n_stride), (c, c_stride)) = (at(0), at(1));
            if blocked.contains_key(name) && !c.is_multiple_of(blocked::BLOCK) {
                return refuse(format!("per-channel operand '{name}' in padded blocks"));
            }
            let lane = if c == 1 { 0 } else { c_stride };
            vec![if n == 1 { 0 } else { n_stride }, lane * blocked::BLOCK, 0, 0, lane]
        } else {
            return refuse(format!("operand '{name}' of shape {:?} broadcast", t.shape));
        };
        operands.push((Elem::F32, strides));
    }
    Some(Ok(Loops::elementwise_into(&dims, &operands, body.clone(), Elem::F32)))
}

/// `k`, which works in the layouts `inner`, between values in the layouts `outer`: inputs 0 (and 3, a residual term
/// laid out as the output) put into blocks, the output taken out of them, as `k` needs (the `cpu:blocks` target).
fn around(k: Kernel, outer: (Form, Form), inner: (Form, Form), (xb, yb): (Blocks, Blocks), residual: bool) -> Kernel {
    if outer == inner {
        return k;
    }
    let into =
        |t: &stowage_runtime::Tensor<'static>, b: Blocks, threads: usize| -> Result<stowage_runtime::Tensor<'static>> {
            let mut y = crate::storage::output_for_overwrite(DatumType::F32, &b.padded_shape())?;
            blocked::to_blocks(t.as_slice::<f32>()?, b, y.as_slice_mut::<f32>()?, threads);
            Ok(y)
        };
    Box::new(move |a, cx| {
        let mut args: Vec<Option<&stowage_runtime::Tensor<'static>>> = a.to_vec();
        let x = (outer.0 != inner.0).then(|| into(arg(a, 0)?, xb, cx.threads)).transpose()?;
        if let Some(x) = &x {
            args[0] = Some(x);
        }
        let r = (residual && outer.1 != inner.1).then(|| into(arg(a, 3)?, yb, cx.threads)).transpose()?;
        if let Some(r) = &r {
            args[3] = Some(r);
        }
        let mut outs = k(&args, cx)?;
        if outer.1 != inner.1 {
            let shape = [yb.n, yb.c, yb.h, yb.w];
            let mut y = crate::storage::output_for_overwrite(DatumType::F32, &shape)?;
            blocked::from_blocks(outs[0].as_slice::<f32>()?, yb, y.as_slice_mut::<f32>()?, cx.threads);
            outs[0] = y;
        }
        Ok(outs)
    })
}

/// True where `cpu:blocks` runs node `id` in blocks: where the planner could give it blocks, and a convolution of
/// the same forms whose weights or bias are not constants (the ONNX node cases pass them as inputs), packed on
/// each run.
fn forceable(graph: &Graph, id: ir::NodeId) -> bool {
    if crate::layouts::channel_blocks(graph, id).is_some() {
        return true;
    }
    let node = graph.node(id);
    let Op::Conv(c) = &node.op else { return false };
    let ty = |v: Option<ValueId>| v.map(|v| graph.ty(v));
    let (Some(x), Some(w), Some(y)) = (
        ty(node.inputs.first().copied().flatten()),
        ty(node.inputs.get(1).copied().flatten()),
        ty(node.outputs.first().copied().flatten()),
    ) else {
        return false;
    };
    let f32_4d = |t: &ir::ValueType| t.dt == DatumType::F32 && t.shape.len() == 4;
    let depthwise = c.group == x.shape.get(1).copied().unwrap_or(0) && y.shape.get(1) == x.shape.get(1);
    f32_4d(x) && f32_4d(w) && f32_4d(y) && c.window.kernel.len() == 2 && (c.group == 1 || depthwise)
}

/// Where a convolution's weights or bias come from: constants packed once when lowered, or the step's input,
/// packed on each run (`cpu:blocks` on a node case).
enum Given<T> {
    Packed(T),
    Input(usize),
    Absent,
}

impl<T> Given<T> {
    /// The packed form, or `pack` of the step's input `a[k]` as floats.
    fn get(
        &self,
        a: &[Option<&stowage_runtime::Tensor<'static>>],
        pack: impl FnOnce(&[f32]) -> T,
    ) -> Result<Option<Held<'_, T>>> {
        Ok(match self {
            Given::Packed(p) => Some(Held::Borrowed(p)),
            Given::Input(k) => Some(Held::Owned(pack(arg(a, *k)?.to_vec::<f32>()?.as_slice()))),
            Given::Absent => None,
        })
    }
}

/// A packed operand for one run: the lowering's, or one packed for the run.
enum Held<'a, T> {
    Borrowed(&'a T),
    Owned(T),
}

impl<T> std::ops::Deref for Held<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        match self {
            Held::Borrowed(t) => t,
            Held::Owned(t) => t,
        }
    }
}

/// A depthwise convolution in blocks (`depthwise_blocks.rs`).
fn depthwise(
    graph: &Graph,
    node: &ir::NodeData,
    c: &ir::Conv,
    (xb, yb): (Blocks, Blocks),
    act: Act,
    residual: bool,
) -> Result<Kernel> {
    let (weights, bias, plane) = operands(graph, node, c, (xb, yb))?;
    let taps = plane.kh * plane.kw;
    let channels = xb.c;
    let pack = match weights {
        Some(w) => Given::Packed(DepthwisePack::new(channels, taps, |i| w.at(i))),
        None => Given::Input(1),
    };
    Ok(Box::new(move |a, cx| {
        let x = arg(a, 0)?.as_slice::<f32>()?;
        let r = if residual { Some(arg(a, 3)?.as_slice::<f32>()?) } else { None };
        let pack = pack.get(a, |w| DepthwisePack::new(channels, taps, |i| w.get(i).copied().unwrap_or(0.0)))?;
        let pack = pack.ok_or_else(|| CpuError::NotImplemented("a convolution without weights".into()))?;
        let bias = bias.get(a, |b| b.to_vec())?;
        let mut y = crate::storage::output_for_overwrite(DatumType::F32, &yb.padded_shape())?;
        let ys = y.as_slice_mut::<f32>()?;
        depthwise_blocks::conv2d(x, xb.n, &plane, &pack, bias.as_deref().map(|b| &b[..]), act, r, ys, cx.threads);
        one(y)
    }))
}

/// A convolution between the two forms (`conv_blocks.rs`).
fn conv(
    graph: &Graph,
    node: &ir::NodeData,
    c: &ir::Conv,
    (xb, yb): (Blocks, Blocks),
    (from, to): (Form, Form),
    act: Act,
    residual: bool,
) -> Result<Kernel> {
    let (weights, bias, plane) = operands(graph, node, c, (xb, yb))?;
    let (m, k) = (yb.c, xb.c * plane.kh * plane.kw);
    let pack = match weights {
        Some(w) => Given::Packed(LanePack::new(m, k, w)),
        None => Given::Input(1),
    };
    let out_shape = if to == Form::Blocked { yb.padded_shape() } else { vec![yb.n, yb.c, yb.h, yb.w] };
    Ok(Box::new(move |a, cx| {
        let x = arg(a, 0)?.as_slice::<f32>()?;
        // A residual term laid out as the output, input 3 (`lower/mod.rs`, `shapes`).
        let r = if residual { Some(arg(a, 3)?.as_slice::<f32>()?) } else { None };
        let pack = pack.get(a, |w| LanePack::new(m, k, w))?;
        let pack = pack.ok_or_else(|| CpuError::NotImplemented("a convolution without weights".into()))?;
        let bias = bias.get(a, |b| b.to_vec())?;
        let mut y = crate::storage::output_for_overwrite(DatumType::F32, &out_shape)?;
        let ys = y.as_slice_mut::<f32>()?;
        let b = bias.as_deref().map(|b| &b[..]);
        conv_blocks::conv2d(x, (xb.n, xb.c), &plane, from, &pack, b, act, r, ys, to, cx.threads);
        one(y)
    }))
}

/// A convolution's weights where they are constants (read in place where the model file holds them,
/// `kernels::weights`: exactly as many as their type says), its bias, and its plane. Weights or a bias given as
/// inputs (the `cpu:blocks` target on a node case) are checked against the plane when read.
fn operands<'g>(
    graph: &'g Graph,
    node: &ir::NodeData,
    c: &ir::Conv,
    (xb, yb): (Blocks, Blocks),
) -> Result<(Option<Weights<'g>>, Given<Vec<f32>>, Plane)> {
    let bad = |m: &str| CpuError::NotImplemented(format!("node '{}': {m}", node.name));
    let w = node.inputs.get(1).copied().flatten().ok_or_else(|| bad("no weights"))?;
    let ws = &graph.ty(w).shape;
    let per_channel = if c.group == 1 { xb.c } else { 1 };
    let win = &c.window;
    if ws.len() != 4 || ws[0] != yb.c || ws[1] != per_channel || ws[2..] != win.kernel[..] {
        return Err(bad("weights of another shape than the convolution's"));
    }
    let weights = match &graph.value(w).def {
        ValueDef::Const(t) => {
            let weights = Weights::of(t).ok_or_else(|| bad("weights not f32"))?;
            if weights.len() != ws.iter().product::<usize>() {
                return Err(bad("weights of another shape than their type's"));
            }
            Some(weights)
        }
        _ => None,
    };
    let bias = match node.inputs.get(2).copied().flatten() {
        Some(b) if graph.ty(b).shape.iter().product::<usize>() != yb.c => {
            return Err(bad("a bias not of one per output channel"))
        }
        Some(b) => match &graph.value(b).def {
            ValueDef::Const(t) => Given::Packed(t.to_vec::<f32>()?),
            _ => Given::Input(2),
        },
        None => Given::Absent,
    };
    let at = |v: &[usize], i: usize| v.get(i).copied().unwrap_or(1);
    let plane = Plane {
        ih: xb.h,
        iw: xb.w,
        oh: yb.h,
        ow: yb.w,
        kh: win.kernel[0],
        kw: win.kernel[1],
        stride: (at(&win.strides, 0), at(&win.strides, 1)),
        dilation: (at(&win.dilations, 0), at(&win.dilations, 1)),
        pad: (win.pads.first().copied().unwrap_or(0), win.pads.get(1).copied().unwrap_or(0)),
    };
    Ok((weights, bias, plane))
}

#[cfg(test)]
mod tests {
    use std::collections::{HashMap, HashSet};

    use stowage_compiler::ir::{Binary, Graph, Op, Unary, ValueType};
    use stowage_compiler::lowering::fuse;
    use stowage_runtime::DatumType;

    use crate::kernels::blocked::{from_blocks, to_blocks, Blocks};

    /// `relu(x · s + t)` over blocks of two batch items: `s` one value per item and channel, given in a caller's
    /// layout (channels outermost), `t` one per channel, packed. The chain's loops over the blocks give the values
    /// the packed definition gives, with `s` read through its own strides.
    #[test]
    fn a_chain_over_blocks_reads_per_channel_operands_through_their_strides() {
        let (n, c, h, w) = (2, 32, 2, 3);
        let f32s = |shape: &[usize]| ValueType::new(DatumType::F32, shape);
        let mut g = Graph::new("chain");
        let x = g.add_input("x", f32s(&[n, c, h, w]));
        let s = g.add_input("s", f32s(&[n, c, 1, 1]));
        let t = g.add_input("t", f32s(&[c, 1, 1]));
        let node = |g: &mut Graph, name: &str, op: Op, ins: Vec<_>| {
            let id = g.add_node(
                name,
                op,
                ins.into_iter().map(Some).collect(),
                vec![Some((name.into(), f32s(&[n, c, h, w])))],
            );
            (id, g.node(id).outputs[0].expect("output"))
        };
        let (_, m) = node(&mut g, "m", Op::Binary(Binary::Mul), vec![x, s]);
        let (_, a) = node(&mut g, "a", Op::Binary(Binary::Add), vec![m, t]);
        let (relu, r) = node(&mut g, "r", Op::Unary(Unary::Relu), vec![a]);
        g.add_output("r", r);
        // `s[i, ch]` at element ch·2 + i: byte strides [4, 8, 256, 256].
        let strided: HashMap<_, _> = [(s, vec![4, 8, 256, 256])].into_iter().collect();
        let planned = fuse::plan_with(&g, &HashSet::new(), &strided);
        let blocked: HashMap<String, usize> = ["x", "m", "a", "r"].iter().map(|v| (v.to_string(), 16)).collect();
        let loops = super::chain(&g, relu, &planned[&relu], &blocked, &strided).expect("in blocks").expect("loops");
        let b = Blocks { n, c, h, w };
        let xs: Vec<f32> = (0..n * c * h * w).map(|i| ((i * 13 % 29) as f32 - 14.0) / 3.0).collect();
        let ss: Vec<f32> = (0..n * c).map(|i| 0.5 + (i % 7) as f32 / 4.0).collect();
        let ts: Vec<f32> = (0..c).map(|ch| ch as f32 / 8.0 - 2.0).collect();
        let mut xb = vec![0.0; b.len()];
        to_blocks(&xs, b, &mut xb, 1);
        let mut jit = crate::jit::Jit::new(None).expect("jit");
        let k = jit.add(&loops).expect("compiles");
        let code = jit.finish().expect("finishes");
        // The inputs in the chain's order.
        let by_value = |v| match v {
            v if v == x => bytemuck::cast_slice::<f32, u8>(&xb),
            v if v == s => bytemuck::cast_slice(&ss),
            _ => bytemuck::cast_slice(&ts),
        };
        let ins: Vec<&[u8]> = planned[&relu].inputs.iter().map(|&v| by_value(v)).collect();
        let mut yb = vec![f32::NAN; b.len()];
        code.call(k, &ins, bytemuck::cast_slice_mut(&mut yb), 1).expect("runs");
        let mut y = vec![0.0; xs.len()];
        from_blocks(&yb, b, &mut y, 1);
        for (e, &got) in y.iter().enumerate() {
            let (i, ch) = (e / (c * h * w), e / (h * w) % c);
            let want = (xs[e] * ss[ch * 2 + i] + ts[ch]).max(0.0);
            assert_eq!(got, want, "element {e} (item {i}, channel {ch})");
        }
    }
}
