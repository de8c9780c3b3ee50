//! Lowering of the neural-network ops to the kernels in `kernels::{conv, pool, norm, gemm, reduce, resize}`.
//! Those kernels are generic over f32 and f64; f16 and bf16 run them in f32, converting at the step's edges.

use std::borrow::Cow;

use stowage_compiler::ir::{self, Graph, Op, PoolKind, ValueId};
use stowage_compiler::lowering::resize_spec;
use stowage_runtime::{DatumType, Tensor};

use super::{arg, const_ints, one, out_shape};
use crate::error::{CpuError, Result};
use crate::kernels::cast::cast;
use crate::kernels::gemm::Float;
use crate::kernels::{conv, gemm, grid_sample, norm, pool, reduce, resize, topk};
use crate::numeric;
use crate::program::Kernel;

/// Wraps an f32 kernel so that f16/bf16 inputs and outputs are converted around it.
fn via_f32(dt: DatumType, k: Kernel) -> Kernel {
    if !matches!(dt, DatumType::F16 | DatumType::BF16) {
        return k;
    }
    Box::new(move |a, cx| {
        let wide: Vec<Option<Tensor<'static>>> = a
            .iter()
            .map(|t| t.map(|t| if t.dt() == dt { cast(t, DatumType::F32) } else { Ok(t.clone()) }).transpose())
            .collect::<Result<_>>()?;
        let args: Vec<Option<&Tensor<'static>>> = wide.iter().map(Option::as_ref).collect();
        k(&args, cx)?.into_iter().map(|t| if t.dt() == DatumType::F32 { cast(&t, dt) } else { Ok(t) }).collect()
    })
}

/// The elements of a tensor: borrowed when it is packed and aligned (always, for what kernels produce and for
/// constants), copied otherwise.
fn floats<'t, T: Float + stowage_runtime::Datum>(t: &'t Tensor<'_>) -> Result<Cow<'t, [T]>> {
    match t.as_slice::<T>() {
        Ok(s) => Ok(Cow::Borrowed(s)),
        Err(_) => Ok(Cow::Owned(t.to_vec::<T>()?)),
    }
}

/// A 2-D host tensor in a layout other than packed row-major, as its elements from the first one with a row and a
/// column stride in elements (padded rows, column-major, a transposed view; the runtime's strides are in elements): what a product reads in place.
/// `None` for packed row-major tensors (read as slices) and for what strides cannot express in elements.
fn matrix_view<'t, T: Float + stowage_runtime::Datum + bytemuck::Pod>(
    t: &'t Tensor<'_>,
) -> Option<(&'t [T], usize, usize)> {
    let size = std::mem::size_of::<T>();
    let strides = t.layout().strides();
    if t.shape().len() != 2 || t.dt() != T::DATUM_TYPE {
        return None;
    }
    let bytes = t.storage().host_bytes()?.get(t.layout().offset()..)?;
    let elems: &[T] = bytemuck::try_cast_slice(&bytes[..bytes.len() / size * size]).ok()?;
    Some((elems, strides[0], strides[1]))
}

/// A Gemm or MatMul that runs as [`crate::kernels::few_rows::FewRows`]: f32, few rows, constant weights (and a
/// constant bias of one value per output column, or none).
pub(super) struct FewRowsPlan<'g> {
    w: &'g Tensor<'static>,
    w_strides: (usize, usize),
    k: usize,
    n: usize,
    alpha: f32,
    bias: Option<Vec<f32>>,
    /// Rows of `op(A)` and their element strides, for `A` packed row-major.
    rows: usize,
    a_strides: (usize, usize),
    /// `op(A)` is `A` transposed (Gemm's `transA`).
    a_trans: bool,
}

/// The [`FewRowsPlan`] of a node, if it has one: a MatMul's constant weights of any size. With the transposed
/// form (`yᵀ = Wᵀ · op(A)ᵀ`, before `few_rows.rs` put the outputs in the lanes) only weights over 512 KiB took
/// it: below, the product kernel reading them in place was faster (the transformer block's 16-row products 6–8 µs
/// against 12). In the lanes: the transformer block 0.0487 → 0.0407 ms a run (its feed-forward products 0.012 /
/// 0.008 → 0.006 ms each), the MLP 0.042 → 0.031 (`stowage run … --threads 1 --repeat 3000 --report`, old and
/// new binaries in turn).
pub(super) fn few_rows_plan<'g>(
    graph: &'g Graph,
    op: &Op,
    inputs: &[Option<ValueId>],
    out: &[usize],
) -> Option<FewRowsPlan<'g>> {
    let input = |i: usize| inputs.get(i).copied().flatten();
    let (a, w) = (graph.ty(input(0)?), graph.const_value(input(1)?)?);
    if a.dt != DatumType::F32 || w.dt() != DatumType::F32 || w.shape().len() != 2 || !w.is_row_major() {
        return None;
    }
    let (b0, b1) = (w.shape()[0], w.shape()[1]);
    let plan = match op {
        Op::Gemm(g) if a.shape.len() == 2 => {
            let (a0, a1) = (a.shape[0], a.shape[1]);
            let (rows, k, a_strides) = if g.trans_a { (a1, a0, (1, a1)) } else { (a0, a1, (a1, 1)) };
            let (n, w_strides) = if g.trans_b { (b0, (1, b1)) } else { (b1, (b1, 1)) };
            let bias = match input(2) {
                None => None,
                Some(c) => {
                    let c = graph.const_value(c)?;
                    let v = c.to_vec::<f32>().ok()?;
                    let per_column = matches!(c.shape(), [] | [1]) || c.shape() == [n] || c.shape() == [1, n];
                    if !per_column {
                        return None;
                    }
                    Some((0..n).map(|i| g.beta * v[if v.len() == 1 { 0 } else { i }]).collect())
                }
            };
            FewRowsPlan { w, w_strides, k, n, alpha: g.alpha, bias, rows, a_strides, a_trans: g.trans_a }
        }
        Op::MatMul if a.shape.len() >= 2 && a.shape[a.shape.len() - 1] == b0 => {
            let rows = a.shape[..a.shape.len() - 1].iter().product();
            let (k, n) = (b0, b1);
            FewRowsPlan { w, w_strides: (n, 1), k, n, alpha: 1.0, bias: None, rows, a_strides: (k, 1), a_trans: false }
        }
        _ => return None,
    };
    let fits = plan.rows * plan.n == out.iter().product::<usize>() && out.last() == Some(&plan.n);
    let rows = crate::kernels::few_rows::MIN_ROWS..=crate::kernels::few_rows::MAX_ROWS;
    // `FewRows::new` packs no fewer outputs than rows (a panel's worth): then there is no plan, and no packed
    // bytes are counted for it.
    let outputs = plan.n >= crate::kernels::few_rows::MIN_ROWS;
    (fits && rows.contains(&plan.rows) && outputs && plan.k > 0).then_some(plan)
}

impl FewRowsPlan<'_> {
    /// Whether [`few_rows_kernel`] packs this plan (on a CPU with AVX-512F): f32 weights, which every plan has.
    pub(super) fn packs(&self) -> bool {
        crate::kernels::weights::Weights::of(self.w).is_some()
    }
}

/// The step of a [`FewRowsPlan`], its weights packed now; `None` where they do not pack on this CPU.
fn few_rows_kernel(plan: FewRowsPlan<'_>, out: Vec<usize>) -> Option<Kernel> {
    // Read in place where the model file holds them (`kernels::weights`).
    let w = crate::kernels::weights::Weights::of(plan.w)?;
    let packed = crate::kernels::few_rows::FewRows::new(w, plan.w_strides, plan.k, plan.n, plan.alpha, plan.bias)?;
    let (rows, a_strides, a_trans) = (plan.rows, plan.a_strides, plan.a_trans);
    Some(Box::new(move |a, cx| {
        let xa = arg(a, 0)?;
        let mut yt = crate::storage::output(DatumType::F32, &out)?;
        let y = yt.as_slice_mut::<f32>()?;
        // A matrix in another layout (`layouts.rs`: MatMul reads strided operands in place) is read through its
        // strides; anything else as packed elements.
        match matrix_view::<f32>(xa).filter(|_| !xa.is_row_major()) {
            Some((x, r, c)) => packed.run(rows, x, if a_trans { (c, r) } else { (r, c) }, y, cx.threads),
            None => packed.run(rows, &floats::<f32>(xa)?, a_strides, y, cx.threads),
        }
        one(yt)
    }))
}

/// Bytes a [`FewRowsPlan`]'s step holds besides the constants (outputs padded to whole blocks of 64, and the bias).
pub(super) fn few_rows_bytes(plan: &FewRowsPlan<'_>) -> usize {
    let block = crate::kernels::conv_lanes::BLOCK;
    (plan.n.div_ceil(block) * block * plan.k + plan.bias.as_ref().map_or(0, Vec::len)) * 4
}

/// Mean and (population) variance per channel (axis 1) over the batch and spatial axes, in f64.
fn batch_statistics<T: Float>(x: &[T], shape: &[usize]) -> (Vec<f64>, Vec<f64>) {
    let (n, c) = (shape[0], shape[1]);
    let inner: usize = shape[2..].iter().product();
    let count = (n * inner).max(1) as f64;
    let mut mean = vec![0f64; c];
    let mut var = vec![0f64; c];
    for ch in 0..c {
        let values = (0..n).flat_map(|b| x[(b * c + ch) * inner..(b * c + ch + 1) * inner].iter().map(|v| v.to_f64()));
        let m = values.clone().sum::<f64>() / count;
        mean[ch] = m;
        var[ch] = values.map(|v| (v - m) * (v - m)).sum::<f64>() / count;
    }
    (mean, var)
}

/// Runs `$body` with `$T` = f32 or f64 for a float datum type (f16/bf16 arrive as f32, see [`via_f32`]).
macro_rules! float {
    ($dt:expr, $T:ident => $body:expr) => {
        match $dt {
            DatumType::F64 => {
                type $T = f64;
                $body
            }
            _ => {
                type $T = f32;
                $body
            }
        }
    };
}

/// The type ordering ops (ArgMax, TopK) compare `dt` in: f32 for the half floats (exact), else `dt` itself.
fn compared_type(dt: DatumType) -> DatumType {
    if matches!(dt, DatumType::F16 | DatumType::BF16) {
        DatumType::F32
    } else {
        dt
    }
}

/// `x` in `dt`: itself, or cast to it.
fn compared<'t>(x: &'t Tensor<'static>, dt: DatumType) -> Result<Cow<'t, Tensor<'static>>> {
    Ok(if x.dt() == dt { Cow::Borrowed(x) } else { Cow::Owned(cast(x, dt)?) })
}

/// True when a Conv node's weights are packed into its kernel when lowered (constant f32 weights of a shape
/// `PackedWeights` takes): then the step does not read its weight input and the program need not keep it.
pub(super) fn packs_weights(graph: &Graph, c: &ir::Conv, inputs: &[Option<ValueId>], dt: DatumType) -> bool {
    let Some(w) = inputs.get(1).copied().flatten() else { return false };
    // Asked without reading them aligned (a copy, for weights still in the model file's bytes).
    let is_f32_const =
        matches!(&graph.value(w).def, ir::ValueDef::Const(t) if crate::kernels::weights::Weights::of(t).is_some());
    dt == DatumType::F32 && is_f32_const && conv::PackedWeights::applies(&graph.ty(w).shape, c.group)
}

/// A Conv's kernel; with `act`, the activation that is its output's only reader runs inside it (on f32, in the product's
/// registers when the weights are packed).
pub(super) fn conv_kernel(
    graph: &Graph,
    c: &ir::Conv,
    inputs: &[Option<ValueId>],
    out: Vec<usize>,
    dt: DatumType,
    act: crate::kernels::act::Act,
    residual: bool,
) -> Result<Kernel> {
    let in_shape = |i: usize| inputs.get(i).copied().flatten().map(|v| graph.ty(v).shape.clone()).unwrap_or_default();
    let wide = if matches!(dt, DatumType::F16 | DatumType::BF16) { DatumType::F32 } else { dt };
    let (xs, ws) = (in_shape(0), in_shape(1));
    let (w, g) = (c.window.clone(), c.group);
    // Constant f32 weights are packed for the product kernel once, here.
    let packed = match inputs.get(1).copied().flatten().map(|v| &graph.value(v).def) {
        Some(ir::ValueDef::Const(t)) if packs_weights(graph, c, inputs, dt) => {
            let p = conv::ConvParams {
                kernel: &w.kernel,
                strides: &w.strides,
                dilations: &w.dilations,
                pads: &w.pads,
                group: g,
            };
            // Read in place where the model file holds them and `conv_lanes.rs` takes them (`kernels::weights`),
            // else aligned.
            use crate::kernels::weights::Weights;
            let pack = |w: Weights<'_>| conv::PackedWeights::for_output(w, &ws, &p, &out);
            let packed = Weights::of(t)
                .and_then(pack)
                .or_else(|| t.as_slice::<f32>().ok().and_then(|wt| pack(Weights::Slice(wt))));
            Some(packed.ok_or_else(|| CpuError::NotImplemented("conv weights that cannot be packed".into()))?)
        }
        _ => None,
    };
    let k: Kernel = Box::new(move |a, cx| {
        float!(wide, T => {
            let x = floats::<T>(arg(a, 0)?)?;
            // Packed weights are all the step keeps (the program drops the constant, see `packs_weights`).
            let wt = if packed.is_some() { Cow::Borrowed(&[][..]) } else { floats::<T>(arg(a, 1)?)? };
            let b = a.get(2).copied().flatten().map(floats::<T>).transpose()?;
            // A residual term of the output's shape, input 3 (`lower/mod.rs`, `shapes`).
            let r = if residual { Some(floats::<T>(arg(a, 3)?)?) } else { None };
            // Every path of `conv_packed` writes every output element.
            let mut yt = crate::storage::output_for_overwrite(<T as stowage_runtime::Datum>::DATUM_TYPE, &out)?;
            let y = yt.as_slice_mut::<T>()?;
            let p = conv::ConvParams { kernel: &w.kernel, strides: &w.strides, dilations: &w.dilations, pads: &w.pads, group: g };
            let post = conv::Post { packed: packed.as_ref(), act, residual: r.as_deref() };
            conv::conv_packed(&x, &xs, &wt, &ws, b.as_deref(), &p, y, &out, cx.threads, post);
            one(yt)
        })
    });
    Ok(via_f32(dt, k))
}

pub(super) fn kernel(
    graph: &Graph,
    op: &Op,
    inputs: &[Option<ValueId>],
    outputs: &[Option<ValueId>],
    out: Vec<usize>,
    dt: DatumType,
) -> Result<Kernel> {
    let in_shape = |i: usize| inputs.get(i).copied().flatten().map(|v| graph.ty(v).shape.clone()).unwrap_or_default();
    let in_dt = inputs.first().copied().flatten().map(|v| graph.ty(v).dt).unwrap_or(dt);
    let wide = if matches!(dt, DatumType::F16 | DatumType::BF16) { DatumType::F32 } else { dt };
    if let Some(plan) = few_rows_plan(graph, op, inputs, &out) {
        if let Some(k) = few_rows_kernel(plan, out.clone()) {
            return Ok(k);
        }
    }
    let k: Kernel = match op {
        Op::Conv(c) => return conv_kernel(graph, c, inputs, out, dt, Default::default(), false),
        Op::Pool(p) => {
            let xs = in_shape(0);
            let (w, kind, col) = (p.window.clone(), p.kind, p.column_major_indices);
            let want_indices = outputs.get(1).copied().flatten().is_some();
            Box::new(move |a, cx| {
                let pp =
                    pool::PoolParams { kernel: &w.kernel, strides: &w.strides, dilations: &w.dilations, pads: &w.pads };
                match kind {
                    // MaxPool only compares, so it runs on every numeric type as is.
                    PoolKind::Max if wide == DatumType::F32 && !want_indices => {
                        let x = floats::<f32>(arg(a, 0)?)?;
                        let mut y = crate::storage::output_for_overwrite(DatumType::F32, &out)?;
                        pool::max_pool_f32(&x, &xs, &pp, y.as_slice_mut::<f32>()?, &out, cx.threads);
                        one(y)
                    }
                    PoolKind::Max => numeric!(wide, T => {
                        let x = arg(a, 0)?.to_vec::<T>()?;
                        let mut y = vec![T::default(); out.iter().product()];
                        let mut idx = want_indices.then(|| vec![0i64; y.len()]);
                        pool::max_pool(&x, &xs, &pp, &mut y, &out, idx.as_deref_mut(), col, cx.threads);
                        let mut r = vec![crate::storage::tensor_from_vec(&out, y)?];
                        if let Some(idx) = idx {
                            r.push(crate::storage::tensor_from_vec(&out, idx)?);
                        }
                        Ok(r)
                    }, else Err(CpuError::Unsupported { op: "MaxPool", dt: wide })),
                    PoolKind::Average { count_include_pad } if wide == DatumType::F32 => {
                        let x = floats::<f32>(arg(a, 0)?)?;
                        let mut y = crate::storage::output_for_overwrite(DatumType::F32, &out)?;
                        let ys = y.as_slice_mut::<f32>()?;
                        pool::average_pool_f32(&x, &xs, &pp, count_include_pad, ys, &out, cx.threads);
                        one(y)
                    }
                    PoolKind::Average { count_include_pad } => float!(wide, T => {
                        let x = floats::<T>(arg(a, 0)?)?;
                        let mut y = vec![T::zero(); out.iter().product()];
                        pool::average_pool(&x, &xs, &pp, count_include_pad, &mut y, &out, cx.threads);
                        one(crate::storage::tensor_from_vec(&out, y)?)
                    }),
                }
            })
        }
        Op::GlobalPool(kind) => {
            let xs = in_shape(0);
            let max = *kind == PoolKind::Max;
            Box::new(move |a, cx| {
                float!(wide, T => {
                    let x = floats::<T>(arg(a, 0)?)?;
                    let mut y = vec![T::zero(); out.iter().product()];
                    pool::global_pool(&x, &xs, max, &mut y, cx.threads);
                    one(crate::storage::tensor_from_vec(&out, y)?)
                })
            })
        }
        Op::Lrn { size, alpha, beta, bias } => {
            let (xs, size, alpha, beta, bias) = (in_shape(0), *size, *alpha, *beta, *bias);
            Box::new(move |a, cx| {
                float!(wide, T => {
                    let x = floats::<T>(arg(a, 0)?)?;
                    let mut y = vec![T::zero(); x.len()];
                    crate::kernels::lrn::lrn(&x, &xs, size, alpha, beta, bias, &mut y, cx.threads);
                    one(crate::storage::tensor_from_vec(&out, y)?)
                })
            })
        }
        Op::BatchNorm { epsilon, momentum, training: true } => {
            let (xs, eps, momentum) = (in_shape(0), *epsilon, *momentum);
            let extra = outputs.len().min(3);
            Box::new(move |a, _| {
                float!(wide, T => {
                    let x = floats::<T>(arg(a, 0)?)?;
                    let p: Vec<Cow<'_, [T]>> = (1..5).map(|i| floats::<T>(arg(a, i)?)).collect::<Result<_>>()?;
                    let (mean, var) = batch_statistics(&x, &xs);
                    let mut y = vec![T::zero(); x.len()];
                    let (bm, bv): (Vec<T>, Vec<T>) = (mean.iter().map(|&m| T::from_f64(m)).collect(), var.iter().map(|&v| T::from_f64(v)).collect());
                    norm::batch_norm(&x, &xs, &p[0], &p[1], &bm, &bv, eps, &mut y);
                    let mut r = vec![crate::storage::tensor_from_vec(&out, y)?];
                    let m = f64::from(momentum);
                    let blend = |running: &[T], batch: &[f64]| -> Vec<T> {
                        running.iter().zip(batch).map(|(&r, &b)| T::from_f64(r.to_f64() * m + b * (1.0 - m))).collect()
                    };
                    if extra > 1 {
                        r.push(crate::storage::tensor_from_vec(&[xs[1]], blend(&p[2], &mean))?);
                    }
                    if extra > 2 {
                        r.push(crate::storage::tensor_from_vec(&[xs[1]], blend(&p[3], &var))?);
                    }
                    Ok(r)
                })
            })
        }
        Op::BatchNorm { epsilon, .. } => {
            let (xs, eps) = (in_shape(0), *epsilon);
            Box::new(move |a, _| {
                float!(wide, T => {
                    let x = floats::<T>(arg(a, 0)?)?;
                    let p: Vec<Cow<'_, [T]>> = (1..5).map(|i| floats::<T>(arg(a, i)?)).collect::<Result<_>>()?;
                    let mut y = vec![T::zero(); x.len()];
                    norm::batch_norm(&x, &xs, &p[0], &p[1], &p[2], &p[3], eps, &mut y);
                    one(crate::storage::tensor_from_vec(&out, y)?)
                })
            })
        }
        Op::LayerNorm { axis, epsilon, stash } => {
            if *stash != DatumType::F32 {
                return Err(CpuError::NotImplemented(format!("LayerNormalization with stash_type {stash}")));
            }
            let (xs, ss, bs, axis, eps) = (in_shape(0), in_shape(1), in_shape(2), *axis as usize, *epsilon);
            let stats: Vec<Option<Vec<usize>>> =
                (1..3).map(|i| outputs.get(i).copied().flatten().map(|v| graph.ty(v).shape.clone())).collect();
            Box::new(move |a, _| {
                float!(wide, T => {
                    let x = floats::<T>(arg(a, 0)?)?;
                    let s = floats::<T>(arg(a, 1)?)?;
                    let b = a.get(2).copied().flatten().map(floats::<T>).transpose()?;
                    let rows: usize = xs[..axis].iter().product();
                    let mut y = vec![T::zero(); x.len()];
                    let mut mean = stats[0].as_ref().map(|_| vec![0f32; rows]);
                    let mut inv = stats[1].as_ref().map(|_| vec![0f32; rows]);
                    norm::layer_norm(&x, &xs, axis, &s, &ss, b.as_deref().map(|b| (b, bs.as_slice())), eps, &mut y, mean.as_deref_mut(), inv.as_deref_mut());
                    let mut r = vec![crate::storage::tensor_from_vec(&out, y)?];
                    for (shape, v) in stats.iter().zip([mean, inv]) {
                        if let (Some(shape), Some(v)) = (shape, v) {
                            r.push(crate::storage::tensor_from_vec(shape, v)?);
                        }
                    }
                    Ok(r)
                })
            })
        }
        Op::Gemm(g) => {
            let (asz, bsz, csz) = (in_shape(0), in_shape(1), in_shape(2));
            let g = *g;
            Box::new(move |a, cx| {
                float!(wide, T => {
                    let x = floats::<T>(arg(a, 0)?)?;
                    let w = floats::<T>(arg(a, 1)?)?;
                    let c = a.get(2).copied().flatten().map(floats::<T>).transpose()?;
                    let mut yt = crate::storage::output(<T as stowage_runtime::Datum>::DATUM_TYPE, &out)?;
                    let y = yt.as_slice_mut::<T>()?;
                    gemm::gemm(&x, [asz[0], asz[1]], g.trans_a, &w, [bsz[0], bsz[1]], g.trans_b,
                        c.as_deref().map(|c| (c, csz.as_slice())), T::from_f64(f64::from(g.alpha)), T::from_f64(f64::from(g.beta)), y, cx.threads);
                    one(yt)
                })
            })
        }
        Op::MatMul => {
            if !in_dt.is_float() {
                return Err(CpuError::Unsupported { op: "MatMul", dt: in_dt });
            }
            let (asz, bsz) = (in_shape(0), in_shape(1));
            Box::new(move |a, cx| {
                float!(wide, T => {
                    let (xa, wa) = (arg(a, 0)?, arg(a, 1)?);
                    let mut yt = crate::storage::output(<T as stowage_runtime::Datum>::DATUM_TYPE, &out)?;
                    let y = yt.as_slice_mut::<T>()?;
                    // Two matrices, in any of the layouts `layouts.rs` lists, are read in place through their strides.
                    if let (Some((x, xr, xc)), Some((w, wr, wc))) = (matrix_view::<T>(xa), matrix_view::<T>(wa)) {
                        let (m, k, n) = (asz[0], asz[1], bsz[1]);
                        gemm::gemm_strided(m, n, k, y, n, false, T::ZERO, x, xr, xc, w, wr, wc, T::ONE, cx.threads);
                        return one(yt);
                    }
                    let (x, w) = (floats::<T>(xa)?, floats::<T>(wa)?);
                    gemm::matmul(&x, &asz, &w, &bsz, y, &out, cx.threads);
                    one(yt)
                })
            })
        }
        Op::Softmax { kind, axis, flatten } => {
            let (xs, axis, flatten, log) =
                (in_shape(0), *axis as usize, *flatten, *kind == ir::SoftmaxKind::LogSoftmax);
            Box::new(move |a, cx| {
                float!(wide, T => {
                    let x = floats::<T>(arg(a, 0)?)?;
                    let mut yt = crate::storage::output(<T as stowage_runtime::Datum>::DATUM_TYPE, &out)?;
                    norm::softmax(&x, &xs, axis, flatten, log, yt.as_slice_mut::<T>()?, cx.threads);
                    one(yt)
                })
            })
        }
        Op::Reduce { kind, noop_with_empty_axes, .. } => {
            let xs = in_shape(0);
            let axes = const_ints(graph, inputs.get(1).copied().flatten())?.unwrap_or_default();
            let mut axes: Vec<usize> =
                axes.iter().map(|&a| if a < 0 { (a + xs.len() as i64) as usize } else { a as usize }).collect();
            if axes.is_empty() {
                if *noop_with_empty_axes {
                    return Ok(Box::new(move |a, _| one(arg(a, 0)?.reshape(&out)?)));
                }
                axes = (0..xs.len()).collect();
            }
            axes.sort_unstable();
            axes.dedup();
            let kind = match kind {
                ir::Reduce::Max => reduce::ReduceKind::Max,
                ir::Reduce::Mean => reduce::ReduceKind::Mean,
                ir::Reduce::Min => reduce::ReduceKind::Min,
                ir::Reduce::Sum => reduce::ReduceKind::Sum,
                ir::Reduce::Prod => reduce::ReduceKind::Prod,
            };
            // Max and Min of bools are Or and And: reduce them as u8.
            let rdt = if wide == DatumType::Bool { DatumType::U8 } else { wide };
            let as_bool = wide == DatumType::Bool;
            Box::new(move |a, _| {
                let x = arg(a, 0)?;
                let widened;
                let x = if as_bool {
                    widened = cast(x, DatumType::U8)?;
                    &widened
                } else {
                    x
                };
                if as_bool {
                    let r = numeric!(rdt, T => {
                        let v = x.to_vec::<T>()?;
                        let mut y = vec![T::default(); out.iter().product()];
                        reduce::reduce(&v, &xs, &axes, kind, &mut y);
                        crate::storage::tensor_from_vec(&out, y)?
                    }, else return Err(CpuError::Unsupported { op: "reduction", dt: rdt }));
                    return one(cast(&r, DatumType::Bool)?);
                }
                numeric!(rdt, T => {
                    let v = x.to_vec::<T>()?;
                    let mut y = vec![T::default(); out.iter().product()];
                    reduce::reduce(&v, &xs, &axes, kind, &mut y);
                    one(crate::storage::tensor_from_vec(&out, y)?)
                }, else Err(CpuError::Unsupported { op: "reduction", dt: rdt }))
            })
        }
        Op::ArgMax { axis, select_last_index, min, .. } => {
            let (xs, axis, last, min) = (in_shape(0), *axis as usize, *select_last_index, *min);
            let xdt = compared_type(in_dt);
            Box::new(move |a, _| {
                let x = compared(arg(a, 0)?, xdt)?;
                numeric!(xdt, T => {
                    let v = x.to_vec::<T>()?;
                    let mut y = vec![0i64; out.iter().product()];
                    if min {
                        reduce::argmin(&v, &xs, axis, last, &mut y);
                    } else {
                        reduce::argmax(&v, &xs, axis, last, &mut y);
                    }
                    one(crate::storage::tensor_from_vec(&out, y)?)
                }, else Err(CpuError::Unsupported { op: "ArgMax", dt: xdt }))
            })
        }
        Op::TopK { axis, largest } => {
            let (xs, axis, largest) = (in_shape(0), *axis as usize, *largest);
            let k = out.get(axis).copied().unwrap_or(0);
            // Half floats are compared as f32 and their values written back in their own type.
            let xdt = compared_type(in_dt);
            Box::new(move |a, _| {
                let x = compared(arg(a, 0)?, xdt)?;
                numeric!(xdt, T => {
                    let v = x.to_vec::<T>()?;
                    let n = out.iter().product();
                    let (mut y, mut idx) = (vec![T::default(); n], vec![0i64; n]);
                    topk::top_k(&v, &xs, axis, k, largest, &mut y, &mut idx);
                    let mut y = crate::storage::tensor_from_vec(&out, y)?;
                    if xdt != in_dt {
                        y = cast(&y, in_dt)?;
                    }
                    Ok(vec![y, crate::storage::tensor_from_vec(&out, idx)?])
                }, else Err(CpuError::Unsupported { op: "TopK", dt: xdt }))
            })
        }
        Op::GridSample { mode, padding, align_corners } => {
            let (xs, gs) = (in_shape(0), in_shape(1));
            let how = grid_sample::Sampling { mode: *mode, padding: *padding, align: *align_corners };
            Box::new(move |a, _| {
                float!(wide, T => {
                    let (x, g) = (floats::<T>(arg(a, 0)?)?, floats::<T>(arg(a, 1)?)?);
                    let mut y = vec![T::zero(); out.iter().product()];
                    grid_sample::grid_sample(&x, &xs, &g, &gs, how, &mut y);
                    one(crate::storage::tensor_from_vec(&out, y)?)
                })
            })
        }
        Op::Det => {
            let n = in_shape(0).last().copied().unwrap_or(0);
            Box::new(move |a, _| {
                let x = stowage_compiler::consts::to_f64s(arg(a, 0)?)?;
                let d = crate::kernels::det::det(&x, n, out.iter().product());
                float!(wide, T => one(crate::storage::tensor_from_vec(&out, d.into_iter().map(|v| v as T).collect::<Vec<T>>())?))
            })
        }
        Op::RoiAlign { max, half_pixel, out: bins, sampling_ratio, spatial_scale } => {
            let xs = in_shape(0);
            let shape = [xs[0], xs[1], xs[2], xs[3]];
            let how = crate::kernels::roi_align::RoiPooling {
                max: *max,
                half_pixel: *half_pixel,
                out: *bins,
                sampling_ratio: *sampling_ratio,
                spatial_scale: f64::from(*spatial_scale),
            };
            Box::new(move |a, _| {
                let x = stowage_compiler::consts::to_f64s(arg(a, 0)?)?;
                let rois = stowage_compiler::consts::to_f64s(arg(a, 1)?)?;
                let batch = stowage_compiler::consts::to_i64s(arg(a, 2)?)?;
                let mut y = vec![0.0; out.iter().product()];
                crate::kernels::roi_align::roi_align(&x, shape, &rois, &batch, how, &mut y)
                    .map_err(|message| CpuError::Input { input: "batch_indices or rois".into(), message })?;
                float!(wide, T => one(crate::storage::tensor_from_vec(&out, y.into_iter().map(|v| v as T).collect::<Vec<T>>())?))
            })
        }
        Op::Resize(r) => {
            let xs = in_shape(0);
            let spec = resize_spec(graph, r, inputs, xs.len())?;
            Box::new(move |a, cx| {
                float!(wide, T => {
                    let x = floats::<T>(arg(a, 0)?)?;
                    let mut y = vec![T::zero(); out.iter().product()];
                    resize::resize_on(&x, &xs, &spec.params(), &mut y, &out, cx.threads);
                    one(crate::storage::tensor_from_vec(&out, y)?)
                })
            })
        }
        other => return Err(CpuError::NotImplemented(format!("{} has no CPU kernel", other.name()))),
    };
    let _ = out_shape;
    Ok(via_f32(dt, k))
}

#[cfg(test)]
mod tests {
    use stowage_compiler::ir::{Gemm, Graph, Op, ValueType};
    use stowage_runtime::{DatumType, Layout, PlainStorage, Tensor};

    fn values(n: usize, seed: usize) -> Vec<f32> {
        (0..n).map(|i| ((i * 7 + seed * 3) % 17) as f32 * 0.25 - 2.0).collect()
    }

    #[test]
    fn products_of_few_rows_against_constant_weights_match_the_definition() {
        // Gemm (transB, alpha, beta, a bias per column) and a batched MatMul, 20 rows of op(A): FewRows where the
        // CPU packs, the product kernel elsewhere; both against the sums written out.
        let (m, k, n) = (20usize, 33usize, 29usize);
        let (av, wv, cv) = (values(m * k, 1), values(n * k, 2), values(n, 3));
        let mut g = Graph::new("few");
        let a = g.add_input("a", ValueType::new(DatumType::F32, vec![m, k]));
        let w = g.add_const("w", Tensor::from_slice(&[n, k], &wv).unwrap());
        let c = g.add_const("c", Tensor::from_slice(&[n], &cv).unwrap());
        let gemm = Gemm { alpha: 0.5, beta: 2.0, trans_a: false, trans_b: true };
        let y = ValueType::new(DatumType::F32, vec![m, n]);
        let node = g.add_node("gemm", Op::Gemm(gemm), vec![Some(a), Some(w), Some(c)], vec![Some(("y".into(), y))]);
        let y = g.node(node).outputs[0].unwrap();
        g.add_output("y", y);
        let program = super::super::lower(&g, 2).expect("lowers");
        let want: Vec<f32> = (0..m * n)
            .map(|e| {
                let (j, i) = (e / n, e % n);
                0.5 * (0..k).map(|l| av[j * k + l] * wv[i * k + l]).sum::<f32>() + 2.0 * cv[i]
            })
            .collect();
        let close = |got: Vec<f32>| {
            for (g, w) in got.iter().zip(&want) {
                assert!((g - w).abs() <= 1e-4 * (1.0 + w.abs()), "{g} vs {w}");
            }
        };
        let out = program.run(vec![Tensor::from_slice(&[m, k], &av).unwrap()]).expect("runs");
        close(out.outputs[0].to_vec::<f32>().unwrap());
        // The same A column-major, read through its strides.
        let layout = Layout::column_major(DatumType::F32, &[m, k]).unwrap();
        let mut bytes = vec![0u8; layout.span_bytes(DatumType::F32, &[m, k]).unwrap()];
        for (e, v) in av.iter().enumerate() {
            let at = ((e / k) * layout.strides()[0] + (e % k) * layout.strides()[1]) * 4;
            bytes[at..at + 4].copy_from_slice(&v.to_ne_bytes());
        }
        let a_cm = Tensor::from_storage(DatumType::F32, &[m, k], layout, PlainStorage::copy_from(&bytes).unwrap());
        close(program.run(vec![a_cm.unwrap()]).expect("runs").outputs[0].to_vec::<f32>().unwrap());

        // MatMul [2, 10, k] × constant [k, n]: 20 rows in one product, its weights packed with the outputs in the
        // lanes whatever their size.
        for n in [n, 4000] {
            let wv = values(n * k, 2);
            let mut g = Graph::new("few");
            let a = g.add_input("a", ValueType::new(DatumType::F32, vec![2, m / 2, k]));
            let w = g.add_const("w", Tensor::from_slice(&[k, n], &wv).unwrap());
            let y = ValueType::new(DatumType::F32, vec![2, m / 2, n]);
            let node = g.add_node("mm", Op::MatMul, vec![Some(a), Some(w)], vec![Some(("y".into(), y))]);
            let y = g.node(node).outputs[0].unwrap();
            g.add_output("y", y);
            let program = super::super::lower(&g, 1).expect("lowers");
            let got = program.run(vec![Tensor::from_slice(&[2, m / 2, k], &av).unwrap()]).expect("runs");
            let want: Vec<f32> =
                (0..m * n).map(|e| (0..k).map(|l| av[(e / n) * k + l] * wv[l * n + e % n]).sum::<f32>()).collect();
            for (g, w) in got.outputs[0].to_vec::<f32>().unwrap().iter().zip(&want) {
                assert!((g - w).abs() <= 1e-4 * (1.0 + w.abs()), "{g} vs {w}");
            }
            let packed = crate::kernels::sgemm512::available();
            assert_eq!(program.const_bytes() > k * n * 4, packed, "the packed weights are counted with the constants");
        }
    }
}
