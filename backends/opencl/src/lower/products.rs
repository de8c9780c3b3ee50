//! Products: MatMul and Gemm as `codegen::Gemm` descriptions, and convolutions as im2col plus a batched product.

use stowage_compiler::ir::{self, Op};

use super::node::{Lowered, NodeCx};
use super::{launch, Builder};
use crate::codegen::MMA_TILE;
use crate::codegen::{self, Gemm, Window, GEMV_GROUP};
use crate::error::Result;
use crate::exec::{ArgRef, Launch, StepKind};

/// Whether a product of `m` rows over `k` runs on tensor cores, in a plan at tf32, fp16 or bf16 on a device that
/// has them (TF32 for f32 operands, f16 or bf16 for those): their kernel's tile is 64 rows and a
/// fragment 8 of K, so a product with fewer (a depthwise convolution: one row per group; a batch-1 vector product;
/// SqueezeNet's squeeze convolutions of 16 to 64 channels; the transformer block's products of 16 rows) would compute
/// mostly padding there, and runs in fp32 in the tiled kernel instead (more exact than asked, never less). With the
/// threshold at 16 rows, the transformer block ran slower at TF32 than in fp32 on the H200 (0.180 against 0.133 ms),
/// and SqueezeNet too (0.50–0.75 against 0.43–0.51 ms over a session's calls).
/// f32 operands go to them only in a tf32 plan: an fp16 plan's f32 values (rule 4 of `passes::storage`) keep fp32
/// products.
fn on_tensor_cores(b: &Builder<'_>, elem: &str, m: usize, k: usize) -> bool {
    b.tensor_cores && (elem != "float" || b.tf32) && m >= MMA_TILE && k >= 8
}

/// MatMul and Gemm (f32, f16, bf16), the bias in the epilogue.
pub(super) fn matmul(b: &mut Builder<'_>, cx: &NodeCx<'_>) -> Result<Lowered> {
    let out_ty = &cx.out_ty;
    let elem = cx.float_storage(out_ty.dt)?;
    let (a, bt) = (cx.in_ty(0).unwrap_or_else(|| out_ty.clone()), cx.in_ty(1).unwrap_or_else(|| out_ty.clone()));
    let g = match &cx.node.op {
        Op::Gemm(g) => gemm_of(g, &a.shape, &bt.shape, cx.in_ty(2).map(|c| c.shape), &out_ty.shape),
        _ => matmul_of(&a.shape, &bt.shape, &out_ty.shape),
    }
    .ok_or_else(|| cx.unsupported("operand shapes this kernel does not take"))?;
    let g = Gemm {
        a: cx.views[0].as_ref().map_or(g.a, |st| through_view(&a.shape, st, g.batch.len())),
        b: cx.views[1].as_ref().map_or(g.b, |st| through_view(&bt.shape, st, g.batch.len())),
        ..g
    };
    let tensor_cores = on_tensor_cores(b, elem, g.m, g.k);
    let g = Gemm { min_groups: b.min_groups, elem, tensor_cores, chain: cx.chain.clone(), ptx: b.ptx, ..g };
    let bias = if g.bias.is_some() { Some(cx.arg(2)?) } else { None };
    let mut scratch = Vec::new();
    let terms = Terms { bias, residual: None, chain: chain_args(cx) };
    let launches = product(b, &g, cx.arg(0)?, cx.arg(1)?, cx.out, terms, &mut scratch);
    let op = match (&cx.node.op, g.chain.is_some()) {
        (ir::Op::Gemm(_), true) => "Gemm+Fused",
        (_, true) => "MatMul+Fused",
        (op, false) => op.name(),
    };
    Ok((op, StepKind::Launches { outs: vec![cx.out], scratch, launches }))
}

/// A MatMul operand of `shape` read through a view's element `strides` (`prologue.rs`), as `matmul_of` lays out
/// operands: `batch` batch strides aligned right (0 on axes of extent 1, which broadcast), then row and column.
fn through_view(shape: &[usize], strides: &[usize], batch: usize) -> codegen::Strides {
    let r = shape.len();
    let mut st = vec![0; batch];
    for i in 0..r - 2 {
        if shape[i] != 1 {
            st[i + batch - (r - 2)] = strides[i];
        }
    }
    (st, strides[r - 2], strides[r - 1])
}

/// The arguments of a chain in the epilogue: the node's inputs from 4 on (`epilogue.rs`).
fn chain_args(cx: &NodeCx<'_>) -> Vec<ArgRef> {
    cx.ins.iter().skip(4).flatten().map(|&s| ArgRef::Slot(s)).collect()
}

/// Conv (f32, f16, bf16: read as float, summed in float), with the ReLU that reads it alone in the epilogue.
pub(super) fn convolution(b: &mut Builder<'_>, cx: &NodeCx<'_>, c: &ir::Conv) -> Result<Lowered> {
    let elem = cx.float_storage(cx.out_ty.dt)?;
    let (x, w) = (cx.input(0, "input")?, cx.input(1, "weights")?);
    let (launches, scratch) = conv(b, c, &x.shape, &w.shape, &cx.out_ty.shape, cx, elem)
        .ok_or_else(|| cx.unsupported("this convolution's shape"))?;
    let op = match (cx.residual, cx.relu, cx.chain.is_some()) {
        (true, true, _) => "Conv+Add+Relu",
        (true, false, _) => "Conv+Add",
        (false, true, _) => "Conv+Relu",
        (false, false, true) => "Conv+Fused",
        (false, false, false) => "Conv",
    };
    Ok((op, StepKind::Launches { outs: vec![cx.out], scratch, launches }))
}

pub(super) fn window(w: &ir::Window, x: &[usize], y: &[usize]) -> Window {
    let s = x.len().saturating_sub(2);
    let at = |v: &[usize], i: usize, d: usize| v.get(i).copied().unwrap_or(d);
    Window {
        input: x[2..].to_vec(),
        output: y[2..].to_vec(),
        kernel: w.kernel.clone(),
        strides: (0..s).map(|i| at(&w.strides, i, 1).max(1)).collect(),
        dilations: (0..s).map(|i| at(&w.dilations, i, 1).max(1)).collect(),
        pads: (0..2 * s).map(|i| at(&w.pads, i, 0)).collect(),
    }
}

/// The product of a MatMul (numpy broadcasting; 1-D operands promoted).
pub(super) fn matmul_of(a: &[usize], b: &[usize], y: &[usize]) -> Option<Gemm> {
    let (a2, b2) =
        (if a.len() == 1 { vec![1, a[0]] } else { a.to_vec() }, if b.len() == 1 { vec![b[0], 1] } else { b.to_vec() });
    let (m, k, n) = (a2[a2.len() - 2], a2[a2.len() - 1], b2[b2.len() - 1]);
    if b2[b2.len() - 2] != k {
        return None;
    }
    let (ab, bb) = (&a2[..a2.len() - 2], &b2[..b2.len() - 2]);
    let rank = ab.len().max(bb.len());
    let batch: Vec<usize> = (0..rank)
        .map(|i| {
            let da = (i + ab.len()).checked_sub(rank).map_or(1, |j| ab[j]);
            let db = (i + bb.len()).checked_sub(rank).map_or(1, |j| bb[j]);
            da.max(db)
        })
        .collect();
    let strides = |sh: &[usize], rows: usize, cols: usize| -> Vec<usize> {
        let mut st = vec![0; rank];
        let mut acc = rows * cols;
        for i in (0..sh.len()).rev() {
            if sh[i] != 1 {
                st[i + rank - sh.len()] = acc;
            }
            acc *= sh[i];
        }
        st
    };
    let yn: usize = y.iter().product();
    if yn != batch.iter().product::<usize>() * m * n {
        return None;
    }
    Some(Gemm {
        m,
        n,
        k,
        a: (strides(ab, m, k), k, 1),
        b: (strides(bb, k, n), n, 1),
        c: (strides(&batch, m, n), n, 1),
        batch,
        alpha: 1.0,
        bias: None,
        relu: false,
        min_groups: 1,
        ptx: false,
        im2col: None,
        elem: "float",
        tensor_cores: false,
        residual: None,
        chain: None,
    })
}

/// ONNX Gemm: `alpha · A' · B' + beta · C`, C broadcast to `[m, n]`.
pub(super) fn gemm_of(g: &ir::Gemm, a: &[usize], b: &[usize], c: Option<Vec<usize>>, y: &[usize]) -> Option<Gemm> {
    let ([ar, ac], [br, bc]) = (<[usize; 2]>::try_from(a).ok()?, <[usize; 2]>::try_from(b).ok()?);
    let (m, k) = if g.trans_a { (ac, ar) } else { (ar, ac) };
    let (k2, n) = if g.trans_b { (bc, br) } else { (br, bc) };
    if k != k2 || y != [m, n] {
        return None;
    }
    let bias = match c {
        None => None,
        Some(cs) => {
            let (cr, cc) = match cs.as_slice() {
                [] => (1, 1),
                [x] => (1, *x),
                [r, c] => (*r, *c),
                _ => return None,
            };
            let rs = if cr == 1 { 0 } else { cc };
            let cs_ = if cc == 1 { 0 } else { 1 };
            Some(((vec![], rs, cs_), g.beta))
        }
    };
    Some(Gemm {
        m,
        n,
        k,
        batch: vec![],
        a: (vec![], if g.trans_a { 1 } else { ac }, if g.trans_a { ac } else { 1 }),
        b: (vec![], if g.trans_b { 1 } else { bc }, if g.trans_b { bc } else { 1 }),
        c: (vec![], n, 1),
        alpha: g.alpha,
        bias,
        relu: false,
        min_groups: 1,
        ptx: false,
        im2col: None,
        elem: "float",
        tensor_cores: false,
        residual: None,
        chain: None,
    })
}

/// A convolution as im2col + a product batched over (batch item, group), with the bias, a residual term (input 3,
/// of the output's shape), the ReLU or a chain (inputs 4 on) in the product's epilogue, as `cx` says; a pointwise
/// one reads the input directly.
pub(super) fn conv(
    b: &mut Builder<'_>,
    c: &ir::Conv,
    x: &[usize],
    w: &[usize],
    y: &[usize],
    cx: &NodeCx<'_>,
    elem: &'static str,
) -> Option<(Vec<Launch>, Vec<usize>)> {
    let (ins, out, relu, residual) = (&cx.ins, cx.out, cx.relu, cx.residual);
    let (nb, ch, m) = (*x.first()?, *x.get(1)?, *w.first()?);
    let g = c.group.max(1);
    let (cg, mg) = (ch / g, m / g);
    let geo = window(&c.window, x, y);
    let kk: usize = w[2..].iter().product();
    let kdim = cg * kk;
    let p: usize = y[2..].iter().product();
    let pin: usize = x[2..].iter().product();
    let pointwise = kk == 1 && geo.strides.iter().all(|&s| s == 1) && geo.pads.iter().all(|&v| v == 0);
    let bias = ins.get(2).copied().flatten();
    let added = if residual { Some(ins.get(3).copied().flatten()?) } else { None };
    let gemm = Gemm {
        m: mg,
        n: p,
        k: kdim,
        batch: vec![nb, g],
        a: (vec![0, mg * kdim], kdim, 1),
        b: if pointwise { (vec![ch * pin, cg * pin], pin, 1) } else { (vec![g * kdim * p, kdim * p], p, 1) },
        c: (vec![m * p, mg * p], p, 1),
        alpha: 1.0,
        bias: bias.map(|_| ((vec![0, mg], 1, 0), 1.0)),
        residual: added.map(|_| (vec![m * p, mg * p], p, 1)),
        relu,
        min_groups: b.min_groups,
        ptx: b.ptx,
        elem,
        tensor_cores: on_tensor_cores(b, elem, mg, kdim),
        chain: cx.chain.clone(),
        // On a GPU the unfolding is computed as the product loads it: no im2col launch or buffer.
        im2col: (b.implicit_conv && !pointwise).then(|| (geo.clone(), ch, g)),
    };
    let mut launches = Vec::new();
    let mut scratch = Vec::new();
    let src = if pointwise || gemm.im2col.is_some() {
        ArgRef::Slot(ins[0]?)
    } else {
        let k = b.kernel(|name| codegen::im2col(name, &geo, ch, g, elem));
        scratch.push(nb * g * kdim * p * if elem == "float" { 4 } else { 2 });
        launches.push(launch(
            k,
            vec![ArgRef::Slot(ins[0]?), ArgRef::Scratch(0)],
            vec![p, kdim, nb * g],
            None,
            vec![ArgRef::Scratch(0)],
        ));
        ArgRef::Scratch(0)
    };
    let terms = Terms { bias: bias.map(ArgRef::Slot), residual: added.map(ArgRef::Slot), chain: chain_args(cx) };
    launches.extend(product(b, &gemm, ArgRef::Slot(ins[1]?), src, out, terms, &mut scratch));
    Some((launches, scratch))
}

/// The terms a product's epilogue reads besides its result, as kernel arguments (in this order).
pub(super) struct Terms {
    /// The added term scaled by `beta` (`Gemm::bias`).
    pub bias: Option<ArgRef>,
    /// The residual term (`Gemm::residual`).
    pub residual: Option<ArgRef>,
    /// The inputs of a chain in the epilogue other than the product (`Gemm::chain`).
    pub chain: Vec<ArgRef>,
}

/// The launch of product `g` of `a` and `src` into slot `out` (with the epilogue's `terms`). A product split along
/// K ([`codegen::division`]) takes the program's tile counters, and a scratch buffer appended to `scratch` for its
/// partial products, or the program's accumulators where the device takes PTX (`codegen::gemm::split_tail`).
pub(super) fn product(
    b: &mut Builder<'_>,
    g: &Gemm,
    a: ArgRef,
    src: ArgRef,
    out: usize,
    terms: Terms,
    scratch: &mut Vec<usize>,
) -> Vec<Launch> {
    let bias = || terms.bias.into_iter().chain(terms.residual).chain(terms.chain.iter().copied());
    let batch: usize = g.batch.iter().product();
    // A product of one row has too little to multiply to fill a tensor core's fragment: the gemv takes it.
    if g.m == 1 && g.im2col.is_none() && b.gemv {
        let k = b.kernel(|name| codegen::gemv(name, g));
        b.notes[k] = format!("gemv n{} k{} batch{:?}", g.n, g.k, g.batch);
        let args = [a, src, ArgRef::Slot(out)].into_iter().chain(bias()).collect();
        let (global, local) = (vec![g.n * GEMV_GROUP, 1, batch], Some(vec![GEMV_GROUP, 1, 1]));
        return vec![launch(k, args, global, local, vec![ArgRef::Slot(out)])];
    }
    let d = codegen::division(g);
    let k = b.gemm_kernel(g);
    let local = Some(d.local(g));
    if d.splits == 1 {
        let args = [a, src, ArgRef::Slot(out)].into_iter().chain(bias()).collect();
        return vec![launch(k, args, d.global(g), local, vec![ArgRef::Slot(out)])];
    }
    // The partial products: slices in scratch, or added up in the program's accumulators where the device takes PTX.
    let partial = if g.ptx {
        b.accumulators = b.accumulators.max(batch * g.m * g.n);
        ArgRef::Accumulators
    } else {
        scratch.push(d.scratch_bytes(g));
        ArgRef::Scratch(scratch.len() - 1)
    };
    b.counters = b.counters.max(d.tiles(g));
    let args = [a, src, partial, ArgRef::Counters, ArgRef::Slot(out)].into_iter().chain(bias()).collect();
    vec![launch(k, args, d.global(g), local, vec![ArgRef::Slot(out)])]
}
