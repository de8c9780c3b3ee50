//! Cranelift-generated kernels for fused elementwise chains.
//!
//! Each [`Chain`] becomes one function `fn(inputs: *const *const f32, out: *mut f32, n: usize)` that walks the
//! elements once: a loop over 4-lane `f32x4` vectors when every instruction has a native vector form (add, mul,
//! min/max, sqrt, floor, the ReLU family…), then a scalar loop for the tail, which calls out to Rust for
//! transcendental functions (exp, tanh, sigmoid…). All chains of a program live in one [`JitCode`] module, kept alive
//! by the steps that call into it. Cranelift's x86 backend has 128-bit vectors only, so this is for the fused
//! model-specific glue; products and convolutions run in `kernels::gemm`. erf (and the erf GELU) is compiled as a
//! rational approximation, so chains holding it vectorise.

mod chain;

use std::sync::Arc;

use cranelift_codegen::ir::condcodes::IntCC;
use cranelift_codegen::ir::{types, AbiParam, InstBuilder, MemFlagsData, Type, Value};
use cranelift_codegen::settings::{self, Configurable};
use cranelift_frontend::{FunctionBuilder, FunctionBuilderContext};
use cranelift_jit::{JITBuilder, JITModule};
use cranelift_module::{FuncId, Linkage, Module};

pub use chain::{binary_scalar, fusable_binary, fusable_unary, unary_scalar, Chain, Inst};

use crate::error::{CpuError, Result};
use crate::kernels::elementwise::{BinaryFn, UnaryFn};

/// The signature of a compiled chain.
type ChainFn = unsafe extern "C" fn(*const *const f32, *mut f32, usize);

extern "C" fn math_exp(x: f32) -> f32 {
    x.exp()
}
extern "C" fn math_log(x: f32) -> f32 {
    x.ln()
}
extern "C" fn math_tanh(x: f32) -> f32 {
    x.tanh()
}
extern "C" fn math_sin(x: f32) -> f32 {
    x.sin()
}
extern "C" fn math_cos(x: f32) -> f32 {
    x.cos()
}
extern "C" fn math_sigmoid(x: f32) -> f32 {
    unary_scalar(UnaryFn::Sigmoid, x)
}
extern "C" fn math_softplus(x: f32) -> f32 {
    unary_scalar(UnaryFn::Softplus, x)
}
extern "C" fn math_gelu_tanh(x: f32) -> f32 {
    unary_scalar(UnaryFn::Gelu(true), x)
}
extern "C" fn math_pow(x: f32, y: f32) -> f32 {
    x.powf(y)
}

const MATH1: &[(&str, extern "C" fn(f32) -> f32)] = &[
    ("stowage_exp", math_exp),
    ("stowage_log", math_log),
    ("stowage_tanh", math_tanh),
    ("stowage_sin", math_sin),
    ("stowage_cos", math_cos),
    ("stowage_sigmoid", math_sigmoid),
    ("stowage_softplus", math_softplus),
    ("stowage_gelu_tanh", math_gelu_tanh),
];

fn math_name(f: UnaryFn) -> Option<&'static str> {
    Some(match f {
        UnaryFn::Exp => "stowage_exp",
        UnaryFn::Log => "stowage_log",
        UnaryFn::Tanh => "stowage_tanh",
        UnaryFn::Sin => "stowage_sin",
        UnaryFn::Cos => "stowage_cos",
        UnaryFn::Sigmoid => "stowage_sigmoid",
        UnaryFn::Softplus => "stowage_softplus",
        UnaryFn::Gelu(true) => "stowage_gelu_tanh",
        _ => return None,
    })
}

fn jit_err(e: impl std::fmt::Display) -> CpuError {
    CpuError::NotImplemented(format!("Cranelift: {e}"))
}

/// Compiles chains into one JIT module.
pub struct Jit {
    module: JITModule,
    fctx: FunctionBuilderContext,
    funcs: Vec<FuncId>,
    math: Vec<(&'static str, FuncId)>,
    pow: FuncId,
}

impl Jit {
    /// A JIT for the host CPU, optimising for speed.
    pub fn new() -> Result<Jit> {
        let mut flags = settings::builder();
        flags.set("opt_level", "speed").map_err(jit_err)?;
        let isa = cranelift_native::builder().map_err(jit_err)?.finish(settings::Flags::new(flags)).map_err(jit_err)?;
        let mut builder = JITBuilder::with_isa(isa, cranelift_module::default_libcall_names());
        for (name, f) in MATH1 {
            builder.symbol(*name, *f as *const u8);
        }
        builder.symbol("stowage_pow", math_pow as extern "C" fn(f32, f32) -> f32 as *const u8);
        let mut module = JITModule::new(builder);
        let mut sig1 = module.make_signature();
        sig1.params.push(AbiParam::new(types::F32));
        sig1.returns.push(AbiParam::new(types::F32));
        let mut math = Vec::new();
        for (name, _) in MATH1 {
            math.push((*name, module.declare_function(name, Linkage::Import, &sig1).map_err(jit_err)?));
        }
        let mut sig2 = sig1.clone();
        sig2.params.push(AbiParam::new(types::F32));
        let pow = module.declare_function("stowage_pow", Linkage::Import, &sig2).map_err(jit_err)?;
        Ok(Jit { module, fctx: FunctionBuilderContext::new(), funcs: Vec::new(), math, pow })
    }

    /// Compiles a chain; returns its index in the finished module.
    pub fn add(&mut self, chain: &Chain) -> Result<usize> {
        let ptr = self.module.target_config().pointer_type();
        let mut ctx = self.module.make_context();
        ctx.func.signature.params.extend([AbiParam::new(ptr), AbiParam::new(ptr), AbiParam::new(ptr)]);
        let id = self
            .module
            .declare_function(&format!("chain{}", self.funcs.len()), Linkage::Local, &ctx.func.signature)
            .map_err(jit_err)?;
        let math: Vec<(&'static str, cranelift_codegen::ir::FuncRef)> =
            self.math.iter().map(|(n, f)| (*n, self.module.declare_func_in_func(*f, &mut ctx.func))).collect();
        let pow = self.module.declare_func_in_func(self.pow, &mut ctx.func);
        {
            let mut b = FunctionBuilder::new(&mut ctx.func, &mut self.fctx);
            let entry = b.create_block();
            b.append_block_params_for_function_params(entry);
            b.switch_to_block(entry);
            let (inputs, out, n) = {
                let p = b.block_params(entry);
                (p[0], p[1], p[2])
            };
            let flags = MemFlagsData::new().with_notrap();
            let bases: Vec<Value> = (0..chain.scalar_inputs.len())
                .map(|k| b.ins().load(ptr, flags, inputs, (k * std::mem::size_of::<usize>()) as i32))
                .collect();
            let scalars: Vec<Option<Value>> = chain
                .scalar_inputs
                .iter()
                .zip(&bases)
                .map(|(&s, &base)| s.then(|| b.ins().load(types::F32, flags, base, 0)))
                .collect();
            let i = b.declare_var(ptr);
            let zero = b.ins().iconst(ptr, 0);
            b.def_var(i, zero);
            let (vhead, vbody, shead, sbody, exit) =
                (b.create_block(), b.create_block(), b.create_block(), b.create_block(), b.create_block());
            let vector = chain.vectorizable();
            b.ins().jump(if vector { vhead } else { shead }, &[]);
            for (lanes, head, body, next) in [(4i64, vhead, vbody, shead), (1, shead, sbody, exit)] {
                if lanes == 4 && !vector {
                    continue;
                }
                let ty = if lanes == 4 { types::F32X4 } else { types::F32 };
                b.switch_to_block(head);
                let iv = b.use_var(i);
                let end = b.ins().iadd_imm_s(iv, lanes);
                let fits = b.ins().icmp(IntCC::UnsignedLessThanOrEqual, end, n);
                b.ins().brif(fits, body, &[], next, &[]);
                b.switch_to_block(body);
                let iv = b.use_var(i);
                let offset = b.ins().ishl_imm_s(iv, 2);
                let loads: Vec<Value> = bases
                    .iter()
                    .zip(&scalars)
                    .map(|(&base, scalar)| match scalar {
                        Some(s) if lanes == 4 => b.ins().splat(ty, *s),
                        Some(s) => *s,
                        None => {
                            let addr = b.ins().iadd(base, offset);
                            b.ins().load(ty, flags, addr, 0)
                        }
                    })
                    .collect();
                let result = emit(&mut b, chain, ty, &loads, &math, pow)?;
                let addr = b.ins().iadd(out, offset);
                b.ins().store(flags, result, addr, 0);
                let next_i = b.ins().iadd_imm_s(iv, lanes);
                b.def_var(i, next_i);
                b.ins().jump(head, &[]);
            }
            b.switch_to_block(exit);
            b.ins().return_(&[]);
            b.seal_all_blocks();
            let config = self.module.isa().frontend_config();
            b.finalize(config);
        }
        self.module.define_function(id, &mut ctx).map_err(jit_err)?;
        self.module.clear_context(&mut ctx);
        self.funcs.push(id);
        Ok(self.funcs.len() - 1)
    }

    /// Finalises the module: machine code for every chain added.
    pub fn finish(mut self) -> Result<Arc<JitCode>> {
        self.module.finalize_definitions().map_err(jit_err)?;
        let fns = self
            .funcs
            .iter()
            .map(|&id| {
                let p = self.module.get_finalized_function(id);
                // SAFETY: `p` is the entry of a function defined above with the signature (ptr, ptr, ptr) and the
                // host's default calling convention, which is what `ChainFn` is on this target.
                unsafe { std::mem::transmute::<*const u8, ChainFn>(p) }
            })
            .collect();
        Ok(Arc::new(JitCode { module: Some(self.module), fns }))
    }
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
fn emit(
    b: &mut FunctionBuilder<'_>,
    chain: &Chain,
    ty: Type,
    loads: &[Value],
    math: &[(&'static str, cranelift_codegen::ir::FuncRef)],
    pow: cranelift_codegen::ir::FuncRef,
) -> Result<Value> {
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
                    UnaryFn::HardSwish => {
                        let h = hard_sigmoid(b, ty, x, 1.0 / 6.0, 0.5);
                        b.ins().fmul(x, h)
                    }
                    other => {
                        let name = math_name(other).ok_or_else(|| jit_err(format!("{other:?} cannot be fused")))?;
                        let f = math.iter().find(|(n, _)| *n == name).map(|(_, f)| *f).ok_or_else(|| jit_err(name))?;
                        if ty != types::F32 {
                            return Err(jit_err("a math call in a vector loop"));
                        }
                        let call = b.ins().call(f, &[x]);
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
                        let call = b.ins().call(pow, &[x, y]);
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
    let (lo, hi) = (splat_const(b, ty, -4.0), splat_const(b, ty, 4.0));
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
    let p = horner(b, &chain::ERF_P);
    let p = b.ins().fmul(p, x);
    let q = horner(b, &chain::ERF_Q);
    b.ins().fdiv(p, q)
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

/// Finalised machine code for a program's chains. Dropping the last handle frees the code.
pub struct JitCode {
    module: Option<JITModule>,
    fns: Vec<ChainFn>,
}

// SAFETY: after `finish` the module is never changed again; it only owns the executable memory that `fns` point
// into, which any thread may call (the generated functions touch only the memory they are given).
unsafe impl Send for JitCode {}
// SAFETY: as above: shared access only calls the immutable, finished code.
unsafe impl Sync for JitCode {}

impl Drop for JitCode {
    fn drop(&mut self) {
        if let Some(module) = self.module.take() {
            // SAFETY: `self` is being dropped, so no `JitCode` handle remains and no function pointer from `fns`
            // can be called again.
            unsafe { module.free_memory() };
        }
    }
}

impl JitCode {
    /// Runs chain `index` over `n` elements: `inputs[k]` points at `n` f32 (or at one, for a scalar input).
    pub fn call(&self, index: usize, inputs: &[&[f32]], scalar: &[bool], out: &mut [f32]) -> Result<()> {
        let f = *self.fns.get(index).ok_or_else(|| jit_err(format!("no chain {index}")))?;
        let n = out.len();
        for (x, &s) in inputs.iter().zip(scalar) {
            let need = if s { 1 } else { n };
            if x.len() < need {
                return Err(jit_err(format!("an input of {} elements for {need}", x.len())));
            }
        }
        let ptrs: Vec<*const f32> = inputs.iter().map(|x| x.as_ptr()).collect();
        // SAFETY: every non-scalar input holds at least `n` elements and every scalar one at least one (checked
        // above), `out` holds `n`, and the generated code reads `inputs[k][0..n]` (or `[0]`) and writes `out[0..n]`
        // only.
        unsafe { f(ptrs.as_ptr(), out.as_mut_ptr(), n) };
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(chain: Chain, inputs: &[Vec<f32>]) {
        let mut jit = Jit::new().expect("jit");
        let idx = jit.add(&chain).expect("compiles");
        let code = jit.finish().expect("finishes");
        let n = inputs.iter().map(Vec::len).max().unwrap_or(0);
        let mut out = vec![0.0f32; n];
        let slices: Vec<&[f32]> = inputs.iter().map(Vec::as_slice).collect();
        code.call(idx, &slices, &chain.scalar_inputs, &mut out).expect("runs");
        for i in 0..n {
            let xs: Vec<f32> =
                inputs.iter().zip(&chain.scalar_inputs).map(|(x, &s)| if s { x[0] } else { x[i] }).collect();
            let want = chain.eval(&xs);
            assert!(
                out[i] == want
                    || (out[i] - want).abs() <= 1e-6 * want.abs().max(1.0)
                    || (out[i].is_nan() && want.is_nan()),
                "element {i}: got {}, want {want}",
                out[i]
            );
        }
    }

    fn data(n: usize, seed: f32) -> Vec<f32> {
        (0..n).map(|i| (i as f32 * 0.37 + seed).sin() * 3.0).collect()
    }

    #[test]
    fn a_vector_chain_with_a_scalar_input_and_a_tail() {
        // relu(a * b + s) - leaky(a)
        let chain = Chain {
            insts: vec![
                Inst::Input(0),
                Inst::Input(1),
                Inst::Input(2),
                Inst::Binary(BinaryFn::Mul, 0, 1),
                Inst::Binary(BinaryFn::Add, 3, 2),
                Inst::Unary(UnaryFn::Relu, 4),
                Inst::Unary(UnaryFn::LeakyRelu(0.1), 0),
                Inst::Binary(BinaryFn::Sub, 5, 6),
            ],
            scalar_inputs: vec![false, false, true],
        };
        assert!(chain.vectorizable());
        check(chain, &[data(37, 0.0), data(37, 1.0), vec![0.5]]);
    }

    #[test]
    fn a_chain_that_calls_math_functions() {
        // erf-GELU written out: x * 0.5 * (1 + erf(x / sqrt 2)), then sigmoid and tanh and a hard-swish.
        let chain = Chain {
            insts: vec![
                Inst::Input(0),
                Inst::Const(std::f32::consts::SQRT_2),
                Inst::Binary(BinaryFn::Div, 0, 1),
                Inst::Unary(UnaryFn::Erf, 2),
                Inst::Const(1.0),
                Inst::Binary(BinaryFn::Add, 3, 4),
                Inst::Binary(BinaryFn::Mul, 0, 5),
                Inst::Const(0.5),
                Inst::Binary(BinaryFn::Mul, 6, 7),
                Inst::Unary(UnaryFn::Sigmoid, 8),
                Inst::Unary(UnaryFn::Tanh, 9),
                Inst::Unary(UnaryFn::HardSwish, 10),
                Inst::Binary(BinaryFn::Pow, 11, 4),
            ],
            scalar_inputs: vec![false],
        };
        assert!(!chain.vectorizable());
        check(chain, &[data(19, 0.3)]);
    }

    #[test]
    fn nan_and_infinities_pass_through() {
        let chain = Chain {
            insts: vec![
                Inst::Input(0),
                Inst::Unary(UnaryFn::Relu, 0),
                Inst::Input(1),
                Inst::Binary(BinaryFn::Max, 1, 2),
            ],
            scalar_inputs: vec![false, false],
        };
        let a = vec![f32::NAN, f32::INFINITY, -f32::INFINITY, -1.0, 2.0, 0.0, f32::NAN, 3.0];
        let b = vec![0.0, 1.0, f32::NAN, -5.0, 1.0, -0.0, 1.0, f32::INFINITY];
        check(chain, &[a, b]);
    }

    #[test]
    fn a_short_call_writes_nothing_past_the_end() {
        let chain = Chain { insts: vec![Inst::Input(0), Inst::Unary(UnaryFn::Neg, 0)], scalar_inputs: vec![false] };
        let mut jit = Jit::new().expect("jit");
        let idx = jit.add(&chain).expect("compiles");
        let code = jit.finish().expect("finishes");
        let x = data(7, 0.0);
        let mut out = [9.0f32; 8];
        code.call(idx, &[&x[..5]], &[false], &mut out[..5]).expect("runs");
        assert_eq!(out[5..], [9.0, 9.0, 9.0]);
        assert!(code.call(idx, &[&x[..3]], &[false], &mut out[..5]).is_err(), "a short input is refused");
    }
}
