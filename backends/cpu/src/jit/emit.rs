//! Cranelift IR for a [`Loops`] kernel: the loop nest, loads that convert to f32, the chain's instructions, and
//! stores. The outermost axis runs over `[begin, end)`, given at the call, so that threads can take bands of it.
//!
//! The innermost axis is a loop of `f32x4` vectors when the body allows (a chain whose instructions all have a
//! native vector form, reading contiguous or broadcast inputs whose elements load four lanes at a time, into a
//! contiguous f32 output), then a scalar loop for the rest; a contiguous copy moves 16 bytes at a time. Inputs
//! broadcast along the innermost axis are loaded once per row.

use cranelift_codegen::ir::condcodes::IntCC;
use cranelift_codegen::ir::Endianness;
use cranelift_codegen::ir::{types, InstBuilder, MemFlagsData, SigRef, Type, Value};
use cranelift_frontend::FunctionBuilder;

use super::{jit_err, math_name};
use crate::error::Result;
use crate::kernels::elementwise::{BinaryFn, UnaryFn};
use stowage_kir::func as chain;
use stowage_kir::{Body, Chain, Elem, Inst, Loops};

/// The functions a chain may call, by address: the kernel reads them from its argument array, after the inputs'
/// addresses, so that its code imports no symbol and links anywhere.
pub(super) struct Callees {
    /// One-argument math functions by name, and their addresses.
    pub math: Vec<(&'static str, Value)>,
    /// The address of `pow`.
    pub pow: Value,
    /// `fn(f32) -> f32`.
    pub sig1: SigRef,
    /// `fn(f32, f32) -> f32`.
    pub sig2: SigRef,
}

fn flags() -> MemFlagsData {
    MemFlagsData::new().with_notrap()
}

/// Emits `for i in (start..end).step_by(step) { body(b, i) }` and leaves the builder after the loop.
fn counted(
    b: &mut FunctionBuilder<'_>,
    ptr: Type,
    start: Value,
    end: Value,
    step: i64,
    body: &mut dyn FnMut(&mut FunctionBuilder<'_>, Value) -> Result<()>,
) -> Result<()> {
    let (head, block, exit) = (b.create_block(), b.create_block(), b.create_block());
    let i = b.declare_var(ptr);
    b.def_var(i, start);
    b.ins().jump(head, &[]);
    b.switch_to_block(head);
    let iv = b.use_var(i);
    let more = b.ins().icmp(IntCC::UnsignedLessThan, iv, end);
    b.ins().brif(more, block, &[], exit, &[]);
    b.switch_to_block(block);
    let iv = b.use_var(i);
    body(b, iv)?;
    let next = b.ins().iadd_imm_s(iv, step);
    b.def_var(i, next);
    b.ins().jump(head, &[]);
    b.switch_to_block(exit);
    Ok(())
}

/// `base + i·stride`.
fn offset(b: &mut FunctionBuilder<'_>, base: Value, i: Value, stride: usize) -> Value {
    match stride {
        0 => base,
        _ => {
            let step = b.ins().imul_imm_s(i, stride as i64);
            b.ins().iadd(base, step)
        }
    }
}

/// Emits the function body: `params` are (inputs, out, begin, end).
pub(super) fn body(
    b: &mut FunctionBuilder<'_>,
    ptr: Type,
    spec: &Loops,
    params: [Value; 4],
    callees: &Callees,
) -> Result<()> {
    let [inputs, out, begin, end] = params;
    let bases: Vec<Value> = (0..spec.inputs.len())
        .map(|k| b.ins().load(ptr, flags(), inputs, (k * std::mem::size_of::<usize>()) as i32))
        .collect();
    let mut bases = bases;
    bases.push(out);
    level(b, ptr, spec, 0, &bases, Some((begin, end)), callees)
}

/// The loop over axis `axis`, with each operand's address at the start of that axis (outputs last).
fn level(
    b: &mut FunctionBuilder<'_>,
    ptr: Type,
    spec: &Loops,
    axis: usize,
    bases: &[Value],
    range: Option<(Value, Value)>,
    callees: &Callees,
) -> Result<()> {
    let ops: Vec<&stowage_kir::Operand> = spec.inputs.iter().chain([&spec.output]).collect();
    let last = spec.dims.len() - 1;
    if axis == last {
        // `Loops::banded` gives every kernel an outer axis, so the band never splits the innermost one.
        return inner(b, ptr, spec, bases, callees);
    }
    let (start, end) = match range {
        Some(r) => r,
        None => (b.ins().iconst(ptr, 0), b.ins().iconst(ptr, spec.dims[axis] as i64)),
    };
    counted(b, ptr, start, end, 1, &mut |b, i| {
        let here: Vec<Value> = bases.iter().zip(&ops).map(|(&base, o)| offset(b, base, i, o.strides[axis])).collect();
        level(b, ptr, spec, axis + 1, &here, None, callees)
    })
}

/// One element (or four, for `ty` = F32X4) at the given addresses: load, compute, store.
fn element(b: &mut FunctionBuilder<'_>, spec: &Loops, addrs: &[Value], ty: Type, callees: &Callees) -> Result<()> {
    let (out, ins) = addrs.split_last().expect("the output address");
    match &spec.body {
        Body::Copy => {
            let t = bits_type(spec.output.elem.size());
            let v = b.ins().load(t, flags(), ins[0], 0);
            b.ins().store(flags(), v, *out, 0);
        }
        Body::Chain(chain) => {
            let loads: Vec<Value> = ins.iter().zip(&spec.inputs).map(|(&a, o)| load_f32(b, o.elem, a, ty)).collect();
            let r = emit(b, chain, ty, &loads, callees)?;
            b.ins().store(flags(), r, *out, 0);
        }
    }
    Ok(())
}

fn bits_type(size: usize) -> Type {
    match size {
        1 => types::I8,
        2 => types::I16,
        4 => types::I32,
        _ => types::I64,
    }
}

/// Loads one element (`ty` = F32) or four (`ty` = F32X4) of `elem` at `addr`, as f32.
fn load_f32(b: &mut FunctionBuilder<'_>, elem: Elem, addr: Value, ty: Type) -> Value {
    let f = flags();
    if ty == types::F32 {
        let int = match elem {
            Elem::F32 => return b.ins().load(types::F32, f, addr, 0),
            Elem::F64 => {
                let d = b.ins().load(types::F64, f, addr, 0);
                return b.ins().fdemote(types::F32, d);
            }
            Elem::U8 | Elem::Bits(1) => b.ins().uload8(types::I32, f, addr, 0),
            Elem::I8 => b.ins().sload8(types::I32, f, addr, 0),
            Elem::U16 => b.ins().uload16(types::I32, f, addr, 0),
            Elem::I16 => b.ins().sload16(types::I32, f, addr, 0),
            Elem::I64 => b.ins().load(types::I64, f, addr, 0),
            Elem::I32 | Elem::Bits(_) => b.ins().load(types::I32, f, addr, 0),
            Elem::F16 | Elem::BF16 => {
                unreachable!("{elem:?} operands are refused by `cpu_operands` (checked by the caller)")
            }
        };
        return b.ins().fcvt_from_sint(types::F32, int);
    }
    let lanes = match elem {
        Elem::F32 => return b.ins().load(types::F32X4, f, addr, 0),
        Elem::I32 => b.ins().load(types::I32X4, f, addr, 0),
        Elem::U16 => b.ins().uload16x4(f, addr, 0),
        Elem::I16 => b.ins().sload16x4(f, addr, 0),
        Elem::U8 | Elem::I8 => {
            // Four bytes into the low lanes of a vector, then widened twice: 8 → 16 → 32 bits.
            let word = b.ins().load(types::I32, f, addr, 0);
            let v = b.ins().scalar_to_vector(types::I32X4, word);
            let bytes = b.ins().bitcast(types::I8X16, MemFlagsData::new().with_endianness(Endianness::Little), v);
            if elem == Elem::U8 {
                let h = b.ins().uwiden_low(bytes);
                b.ins().uwiden_low(h)
            } else {
                let h = b.ins().swiden_low(bytes);
                b.ins().swiden_low(h)
            }
        }
        other => unreachable!("{other:?} has no vector load (checked by the caller)"),
    };
    b.ins().fcvt_from_sint(types::F32X4, lanes)
}

/// The innermost axis.
fn inner(b: &mut FunctionBuilder<'_>, ptr: Type, spec: &Loops, bases: &[Value], callees: &Callees) -> Result<()> {
    let axis = spec.dims.len() - 1;
    let d = spec.dims[axis];
    let ops: Vec<&stowage_kir::Operand> = spec.inputs.iter().chain([&spec.output]).collect();
    let strides: Vec<usize> = ops.iter().map(|o| o.strides[axis]).collect();
    match &spec.body {
        Body::Copy => {
            let size = spec.output.elem.size();
            let mut done = 0;
            if strides.iter().all(|&s| s == size) {
                // Contiguous on both sides: 16 bytes at a time.
                let chunks = d * size / 16;
                if chunks > 0 {
                    let (zero, end) = (b.ins().iconst(ptr, 0), b.ins().iconst(ptr, (chunks * 16) as i64));
                    counted(b, ptr, zero, end, 16, &mut |b, i| {
                        let src = b.ins().iadd(bases[0], i);
                        let v = b.ins().load(types::I8X16, flags(), src, 0);
                        let dst = b.ins().iadd(bases[1], i);
                        b.ins().store(flags(), v, dst, 0);
                        Ok(())
                    })?;
                }
                done = chunks * 16 / size;
            }
            copy_tail(b, ptr, spec, bases, &strides, done, d, callees)
        }
        Body::Chain(chain) => {
            // Inputs broadcast along this axis are loaded once for the row (and splatted for the vector loop).
            let mut hoisted: Vec<Option<Value>> = vec![None; spec.inputs.len()];
            for (k, o) in spec.inputs.iter().enumerate() {
                if strides[k] == 0 {
                    hoisted[k] = Some(load_f32(b, o.elem, bases[k], types::F32));
                }
            }
            let vector = chain.vectorizable()
                && d >= 4
                && strides[spec.inputs.len()] == 4
                && spec
                    .inputs
                    .iter()
                    .zip(&strides)
                    .all(|(o, &s)| s == 0 || (s == o.elem.size() && o.elem.vector_load()));
            let mut done = 0;
            if vector {
                let splats: Vec<Option<Value>> =
                    hoisted.iter().map(|h| h.map(|v| b.ins().splat(types::F32X4, v))).collect();
                let vend = d / 4 * 4;
                let (zero, end) = (b.ins().iconst(ptr, 0), b.ins().iconst(ptr, vend as i64));
                counted(b, ptr, zero, end, 4, &mut |b, i| {
                    let mut loads = Vec::with_capacity(spec.inputs.len());
                    for (k, o) in spec.inputs.iter().enumerate() {
                        loads.push(match splats[k] {
                            Some(v) => v,
                            None => {
                                let a = offset(b, bases[k], i, o.elem.size());
                                load_f32(b, o.elem, a, types::F32X4)
                            }
                        });
                    }
                    let r = emit(b, chain, types::F32X4, &loads, callees)?;
                    let a = offset(b, bases[spec.inputs.len()], i, 4);
                    b.ins().store(flags(), r, a, 0);
                    Ok(())
                })?;
                done = vend;
            }
            scalar_chain(b, ptr, spec, chain, bases, &strides, &hoisted, done, d, callees)
        }
    }
}

/// Elements `from..d` of the innermost axis of a copy, one at a time.
#[allow(clippy::too_many_arguments)]
fn copy_tail(
    b: &mut FunctionBuilder<'_>,
    ptr: Type,
    spec: &Loops,
    bases: &[Value],
    strides: &[usize],
    from: usize,
    d: usize,
    callees: &Callees,
) -> Result<()> {
    if from >= d {
        return Ok(());
    }
    let (start, end) = (b.ins().iconst(ptr, from as i64), b.ins().iconst(ptr, d as i64));
    counted(b, ptr, start, end, 1, &mut |b, i| {
        let here: Vec<Value> = bases.iter().zip(strides).map(|(&base, &s)| offset(b, base, i, s)).collect();
        element(b, spec, &here, types::F32, callees)
    })
}

/// Elements `from..d` of the innermost axis of a chain, one at a time, with hoisted broadcast inputs.
#[allow(clippy::too_many_arguments)]
fn scalar_chain(
    b: &mut FunctionBuilder<'_>,
    ptr: Type,
    spec: &Loops,
    chain: &Chain,
    bases: &[Value],
    strides: &[usize],
    hoisted: &[Option<Value>],
    from: usize,
    d: usize,
    callees: &Callees,
) -> Result<()> {
    if from >= d {
        return Ok(());
    }
    let (start, end) = (b.ins().iconst(ptr, from as i64), b.ins().iconst(ptr, d as i64));
    counted(b, ptr, start, end, 1, &mut |b, i| {
        let mut loads = Vec::with_capacity(spec.inputs.len());
        for (k, o) in spec.inputs.iter().enumerate() {
            loads.push(match hoisted[k] {
                Some(v) => v,
                None => {
                    let a = offset(b, bases[k], i, strides[k]);
                    load_f32(b, o.elem, a, types::F32)
                }
            });
        }
        let r = emit(b, chain, types::F32, &loads, callees)?;
        let a = offset(b, bases[spec.inputs.len()], i, strides[spec.inputs.len()]);
        b.ins().store(flags(), r, a, 0);
        Ok(())
    })
}

fn splat_const(b: &mut FunctionBuilder<'_>, ty: Type, c: f32) -> Value {
    let v = b.ins().f32const(c);
    if ty == types::F32 {
        v
    } else {
        b.ins().splat(ty, v)
    }
}

/// Emits the chain's instructions over values of `ty` (F32 or F32X4); returns the result.
fn emit(b: &mut FunctionBuilder<'_>, chain: &Chain, ty: Type, loads: &[Value], callees: &Callees) -> Result<Value> {
    let mut v: Vec<Value> = Vec::with_capacity(chain.insts.len());
    for inst in &chain.insts {
        let x = match *inst {
            Inst::Input(k) => loads[k],
            Inst::Const(c) => splat_const(b, ty, c),
            Inst::Unary(f, a) => {
                let x = v[a];
                match f {
                    UnaryFn::Abs => b.ins().fabs(x),
                    UnaryFn::Neg => b.ins().fneg(x),
                    UnaryFn::Relu => {
                        let z = splat_const(b, ty, 0.0);
                        b.ins().fmax(x, z)
                    }
                    UnaryFn::Sqrt => b.ins().sqrt(x),
                    UnaryFn::Floor => b.ins().floor(x),
                    UnaryFn::Ceil => b.ins().ceil(x),
                    UnaryFn::Round => b.ins().nearest(x),
                    UnaryFn::Reciprocal => {
                        let one = splat_const(b, ty, 1.0);
                        b.ins().fdiv(one, x)
                    }
                    UnaryFn::LeakyRelu(alpha) => {
                        let z = splat_const(b, ty, 0.0);
                        let a = splat_const(b, ty, alpha);
                        let pos = b.ins().fmax(x, z);
                        let neg = b.ins().fmin(x, z);
                        let scaled = b.ins().fmul(neg, a);
                        b.ins().fadd(pos, scaled)
                    }
                    UnaryFn::HardSigmoid(alpha, beta) => hard_sigmoid(b, ty, x, alpha, beta),
                    UnaryFn::Erf => erf(b, ty, x),
                    UnaryFn::Gelu(false) => {
                        let s = splat_const(b, ty, std::f32::consts::FRAC_1_SQRT_2);
                        let scaled = b.ins().fmul(x, s);
                        let e = erf(b, ty, scaled);
                        let one = splat_const(b, ty, 1.0);
                        let half = splat_const(b, ty, 0.5);
                        let t = b.ins().fadd(e, one);
                        let t = b.ins().fmul(t, x);
                        b.ins().fmul(t, half)
                    }
                    UnaryFn::Tanh => tanh(b, ty, x),
                    UnaryFn::Exp => exp(b, ty, x),
                    UnaryFn::Sigmoid => {
                        let neg = b.ins().fneg(x);
                        let e = exp(b, ty, neg);
                        let one = splat_const(b, ty, 1.0);
                        let d = b.ins().fadd(one, e);
                        b.ins().fdiv(one, d)
                    }
                    UnaryFn::Gelu(true) => {
                        // x · 0.5 · (1 + tanh(√(2/π) · (x + 0.044715 x³))), in the order `unary_scalar` takes.
                        let c = splat_const(b, ty, (2.0f32 / std::f32::consts::PI).sqrt());
                        let k = splat_const(b, ty, 0.044715);
                        let x2 = b.ins().fmul(k, x);
                        let x3 = b.ins().fmul(x2, x);
                        let x3 = b.ins().fmul(x3, x);
                        let inner = b.ins().fadd(x, x3);
                        let inner = b.ins().fmul(c, inner);
                        let t = tanh(b, ty, inner);
                        let one = splat_const(b, ty, 1.0);
                        let half = splat_const(b, ty, 0.5);
                        let t = b.ins().fadd(one, t);
                        let hx = b.ins().fmul(half, x);
                        b.ins().fmul(hx, t)
                    }
                    UnaryFn::HardSwish => {
                        let h = hard_sigmoid(b, ty, x, 1.0 / 6.0, 0.5);
                        b.ins().fmul(x, h)
                    }
                    other => {
                        let name = math_name(other).ok_or_else(|| jit_err(format!("{other:?} cannot be fused")))?;
                        let f = callees
                            .math
                            .iter()
                            .find(|(n, _)| *n == name)
                            .map(|(_, f)| *f)
                            .ok_or_else(|| jit_err(name))?;
                        if ty != types::F32 {
                            return Err(jit_err("a math call in a vector loop"));
                        }
                        let call = b.ins().call_indirect(callees.sig1, f, &[x]);
                        b.inst_results(call)[0]
                    }
                }
            }
            Inst::Binary(f, l, r) => {
                let (x, y) = (v[l], v[r]);
                match f {
                    BinaryFn::Add => b.ins().fadd(x, y),
                    BinaryFn::Sub => b.ins().fsub(x, y),
                    BinaryFn::Mul => b.ins().fmul(x, y),
                    BinaryFn::Div => b.ins().fdiv(x, y),
                    BinaryFn::Max => b.ins().fmax(x, y),
                    BinaryFn::Min => b.ins().fmin(x, y),
                    BinaryFn::PRelu => {
                        let z = splat_const(b, ty, 0.0);
                        let pos = b.ins().fmax(x, z);
                        let neg = b.ins().fmin(x, z);
                        let scaled = b.ins().fmul(neg, y);
                        b.ins().fadd(pos, scaled)
                    }
                    BinaryFn::Pow if ty == types::F32 => {
                        let call = b.ins().call_indirect(callees.sig2, callees.pow, &[x, y]);
                        b.inst_results(call)[0]
                    }
                    other => return Err(jit_err(format!("{other:?} cannot be fused here"))),
                }
            }
        };
        v.push(x);
    }
    v.last().copied().ok_or_else(|| jit_err("an empty chain"))
}

/// erf as `x·P(x²) / Q(x²)` on x clamped to [-4, 4] (see `chain::ERF_P`): only native instructions.
fn erf(b: &mut FunctionBuilder<'_>, ty: Type, x: Value) -> Value {
    rational(b, ty, x, 4.0, &chain::ERF_P, &chain::ERF_Q)
}

/// tanh as `x·P(x²) / Q(x²)` on x clamped to ±`chain::TANH_CLAMP` (see `chain::TANH_P`): only native
/// instructions. NaN passes through (`fmax` and `fmin` return NaN when either side is).
fn tanh(b: &mut FunctionBuilder<'_>, ty: Type, x: Value) -> Value {
    rational(b, ty, x, chain::TANH_CLAMP, &chain::TANH_P, &chain::TANH_Q)
}

/// e^x exactly as `chain::exp_f32` computes it (the same operations in the same order): only native
/// instructions, the scaling by `2^n` built in the exponent bits.
fn exp(b: &mut FunctionBuilder<'_>, ty: Type, x: Value) -> Value {
    let ity = if ty == types::F32 { types::I32 } else { types::I32X4 };
    let (lo, hi) = (splat_const(b, ty, chain::EXP_LO), splat_const(b, ty, chain::EXP_HI));
    let x = b.ins().fmax(x, lo);
    let x = b.ins().fmin(x, hi);
    // round(x·log₂e), ties to even: the integer `exp_f32` gets by adding and subtracting `EXP_SHIFT`.
    let log2e = splat_const(b, ty, std::f32::consts::LOG2_E);
    let n = b.ins().fmul(x, log2e);
    let n = b.ins().nearest(n);
    let (c1, c2) = (splat_const(b, ty, chain::EXP_LN2_HI), splat_const(b, ty, chain::EXP_LN2_LO));
    let t = b.ins().fmul(n, c1);
    let r = b.ins().fsub(x, t);
    let t = b.ins().fmul(n, c2);
    let r = b.ins().fsub(r, t);
    let mut p = splat_const(b, ty, chain::EXP_P[0]);
    for &c in &chain::EXP_P[1..] {
        let m = b.ins().fmul(p, r);
        let k = splat_const(b, ty, c);
        p = b.ins().fadd(m, k);
    }
    let r2 = b.ins().fmul(r, r);
    let e = b.ins().fmul(p, r2);
    let e = b.ins().fadd(e, r);
    let one = splat_const(b, ty, 1.0);
    let e = b.ins().fadd(e, one);
    // n is integral and within ±151 here, so the conversion is exact; NaN converts to 0 and stays NaN in `e`.
    // Shift amounts are scalars for vectors too; the bias is splatted.
    let n = b.ins().fcvt_to_sint_sat(ity, n);
    let little = MemFlagsData::new().with_endianness(Endianness::Little);
    let (one_bit, exp_bits) = (b.ins().iconst(types::I32, 1), b.ins().iconst(types::I32, 23));
    let bias = b.ins().iconst(types::I32, 127);
    let bias = if ity == types::I32 { bias } else { b.ins().splat(ity, bias) };
    let half = b.ins().sshr(n, one_bit);
    let rest = b.ins().isub(n, half);
    let scale = |b: &mut FunctionBuilder<'_>, k: Value| {
        let k = b.ins().iadd(k, bias);
        let k = b.ins().ishl(k, exp_bits);
        b.ins().bitcast(ty, little, k)
    };
    let s1 = scale(b, half);
    let s2 = scale(b, rest);
    let e = b.ins().fmul(e, s1);
    b.ins().fmul(e, s2)
}

/// `x·P(x²) / Q(x²)` on x clamped to `[-clamp, clamp]`, the coefficients in x², highest power first.
fn rational(b: &mut FunctionBuilder<'_>, ty: Type, x: Value, clamp: f32, p: &[f32], q: &[f32]) -> Value {
    let (lo, hi) = (splat_const(b, ty, -clamp), splat_const(b, ty, clamp));
    let x = b.ins().fmax(x, lo);
    let x = b.ins().fmin(x, hi);
    let x2 = b.ins().fmul(x, x);
    let horner = |b: &mut FunctionBuilder<'_>, coeffs: &[f32]| {
        let mut acc = splat_const(b, ty, coeffs[0]);
        for &c in &coeffs[1..] {
            let m = b.ins().fmul(acc, x2);
            let k = splat_const(b, ty, c);
            acc = b.ins().fadd(m, k);
        }
        acc
    };
    let num = horner(b, p);
    let num = b.ins().fmul(num, x);
    let den = horner(b, q);
    b.ins().fdiv(num, den)
}

fn hard_sigmoid(b: &mut FunctionBuilder<'_>, ty: Type, x: Value, alpha: f32, beta: f32) -> Value {
    let a = splat_const(b, ty, alpha);
    let c = splat_const(b, ty, beta);
    let z = splat_const(b, ty, 0.0);
    let one = splat_const(b, ty, 1.0);
    let t = b.ins().fmul(x, a);
    let t = b.ins().fadd(t, c);
    let t = b.ins().fmax(t, z);
    b.ins().fmin(t, one)
}
