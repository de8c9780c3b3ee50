//! Cranelift-generated kernels: fused elementwise chains with their broadcasting and dtype casts, and relayout
//! copies, all described as a [`Loops`] (the kernel-level IR's loop nest over byte-strided operands,
//! `stowage_kir`) and compiled by `emit.rs`.
//!
//! Each kernel becomes one function `fn(inputs: *const *const u8, out: *mut u8, begin: usize, end: usize)` over
//! the band `[begin, end)` of its outermost axis, with every extent and stride an immediate (shapes are static). The
//! innermost axis runs as 4-lane `f32x4` vectors where the body allows, then a scalar loop, which calls out to
//! Rust for transcendental functions (exp, log, sigmoid…). All kernels of a program live in one [`JitCode`]
//! module, kept alive by the steps that call into it. Cranelift's x86 backend has 128-bit vectors only, so this is
//! for the model-specific glue; products and convolutions run in `kernels::gemm`. exp, sigmoid, erf and tanh (and
//! both GELUs) are compiled from native instructions (a range reduction and polynomial, rational approximations), so
//! chains holding them vectorise. On a CPU with AVX2 or AVX-512, chains run a tile at a time at that width instead
//! (`wide.rs`, the same arithmetic bit for bit; `linear.rs`, in registers, where the chain is linear and the CPU
//! has AVX-512) and are not compiled; copies run as Rust loops (`copy.rs`), Cranelift's copy code serving built
//! executables and the tests.

mod copy;
mod emit;
mod linear;
pub mod wide;

use std::sync::Arc;

use cranelift_codegen::ir::{types, AbiParam, InstBuilder};
use cranelift_codegen::settings::{self, Configurable};
use cranelift_frontend::{FunctionBuilder, FunctionBuilderContext};
use cranelift_jit::{JITBuilder, JITModule};
use cranelift_module::{FuncId, Linkage, Module};

pub use stowage_kir::{
    binary_scalar, broadcast_strides, fusable_binary, fusable_unary, packed_strides, unary_scalar, Body, Chain, Elem,
    Inst, Loops, Operand,
};

use crate::error::{CpuError, Result};
use crate::kernels::elementwise::UnaryFn;

/// The signature of a compiled kernel: (inputs, output, first row, end row).
pub type KernelFn = unsafe extern "C" fn(*const *const u8, *mut u8, usize, usize);

/// What a call must provide: bytes per input, bytes of output, rows of the outermost axis, elements in all.
#[derive(Clone, Debug)]
struct Extents {
    inputs: Vec<usize>,
    output: usize,
    rows: usize,
    elements: usize,
}

extern "C" fn math_exp(x: f32) -> f32 {
    unary_scalar(UnaryFn::Exp, x)
}
extern "C" fn math_log(x: f32) -> f32 {
    x.ln()
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
extern "C" fn math_pow(x: f32, y: f32) -> f32 {
    x.powf(y)
}

const MATH1: &[(&str, extern "C" fn(f32) -> f32)] = &[
    ("stowage_exp", math_exp),
    ("stowage_log", math_log),
    ("stowage_sin", math_sin),
    ("stowage_cos", math_cos),
    ("stowage_sigmoid", math_sigmoid),
    ("stowage_softplus", math_softplus),
];

pub(crate) fn math_name(f: UnaryFn) -> Option<&'static str> {
    Some(match f {
        UnaryFn::Exp => "stowage_exp",
        UnaryFn::Log => "stowage_log",
        UnaryFn::Sin => "stowage_sin",
        UnaryFn::Cos => "stowage_cos",
        UnaryFn::Sigmoid => "stowage_sigmoid",
        UnaryFn::Softplus => "stowage_softplus",
        _ => return None,
    })
}

pub(crate) fn jit_err(e: impl std::fmt::Display) -> CpuError {
    CpuError::NotImplemented(format!("Cranelift: {e}"))
}

/// The functions kernels call, and their addresses in this process, in the order a kernel reads them after its
/// inputs' addresses.
pub fn math_symbols() -> Vec<(&'static str, *const u8)> {
    let mut out: Vec<(&'static str, *const u8)> = MATH1.iter().map(|(n, f)| (*n, *f as *const u8)).collect();
    out.push(("stowage_pow", math_pow as extern "C" fn(f32, f32) -> f32 as *const u8));
    out
}

/// A kernel compiled ahead of time into a built executable: the key of the [`Loops`] it was compiled from
/// ([`Loops::key`]) and its entry.
#[derive(Clone, Copy, Debug)]
pub struct Precompiled {
    /// [`Loops::key`] of its spec.
    pub key: u64,
    /// Its entry point.
    pub entry: KernelFn,
}

/// A Cranelift ISA for the host, optimising for speed; position-independent for object code.
fn host_isa(pic: bool) -> Result<cranelift_codegen::isa::OwnedTargetIsa> {
    let mut flags = settings::builder();
    flags.set("opt_level", "speed").map_err(jit_err)?;
    if pic {
        flags.set("is_pic", "true").map_err(jit_err)?;
    }
    cranelift_native::builder().map_err(jit_err)?.finish(settings::Flags::new(flags)).map_err(jit_err)
}

/// Defines the kernel of `spec` (already banded) in `module` as `name`. Its math functions are called through the
/// addresses that follow the inputs' in its first argument ([`math_symbols`]'s order).
fn define<M: Module>(
    module: &mut M,
    fctx: &mut FunctionBuilderContext,
    name: &str,
    linkage: Linkage,
    spec: &Loops,
) -> Result<FuncId> {
    let ptr = module.target_config().pointer_type();
    let mut ctx = module.make_context();
    ctx.func.signature.params.extend([AbiParam::new(ptr); 4]);
    let id = module.declare_function(name, linkage, &ctx.func.signature).map_err(jit_err)?;
    let mut sig1 = module.make_signature();
    sig1.params.push(AbiParam::new(types::F32));
    sig1.returns.push(AbiParam::new(types::F32));
    let mut sig2 = sig1.clone();
    sig2.params.push(AbiParam::new(types::F32));
    {
        let mut b = FunctionBuilder::new(&mut ctx.func, fctx);
        let entry = b.create_block();
        b.append_block_params_for_function_params(entry);
        b.switch_to_block(entry);
        let p = b.block_params(entry);
        let params = [p[0], p[1], p[2], p[3]];
        let word = std::mem::size_of::<usize>();
        let first = spec.inputs.len() * word;
        let address = |b: &mut FunctionBuilder<'_>, k: usize| {
            b.ins().load(
                ptr,
                cranelift_codegen::ir::MemFlagsData::new().with_notrap(),
                params[0],
                (first + k * word) as i32,
            )
        };
        let math = MATH1.iter().enumerate().map(|(k, (n, _))| (*n, address(&mut b, k))).collect();
        let pow = address(&mut b, MATH1.len());
        let callees = emit::Callees { math, pow, sig1: b.import_signature(sig1), sig2: b.import_signature(sig2) };
        emit::body(&mut b, ptr, spec, params, &callees)?;
        b.ins().return_(&[]);
        b.seal_all_blocks();
        let config = module.isa().frontend_config();
        b.finalize(config);
    }
    module.define_function(id, &mut ctx).map_err(jit_err)?;
    module.clear_context(&mut ctx);
    Ok(id)
}

fn extents_of(spec: &Loops) -> Extents {
    Extents {
        inputs: spec.inputs.iter().map(|o| spec.extent(o)).collect(),
        output: spec.extent(&spec.output),
        rows: spec.dims[0],
        elements: spec.dims.iter().product(),
    }
}

/// Kernels compiled into a relocatable object for a built executable (`stowage build`).
pub struct Object {
    /// The object file's bytes (ELF on Linux).
    pub bytes: Vec<u8>,
    /// Per kernel, in the order given: its exported symbol and [`Loops::key`].
    pub symbols: Vec<(String, u64)>,
}

/// Refuses loops with f16 or bf16 operands: OpenCL generates chains over them (plans that store values in half
/// precision); the CPU's kernels store f32, and its generated code loads f32, f64 and integers.
fn cpu_operands(spec: &Loops) -> std::result::Result<(), stowage_kir::KirError> {
    match spec.inputs.iter().chain([&spec.output]).find(|o| o.elem.is_half()) {
        Some(o) => Err(stowage_kir::KirError::Invalid(format!(
            "{:?} operands: the CPU's generated loops take f32, f64 and integers",
            o.elem
        ))),
        None => Ok(()),
    }
}

/// Output axes at most this long, read through a stride, give the innermost loop of a copy to an axis that reads
/// its input contiguously ([`generation_order`]).
const SHORT_INNER: usize = 4;

/// The loop nest a kernel is generated as: `spec`'s, except that a copy whose output's innermost axis is short
/// ([`SHORT_INNER`]) and read through a stride, while a longer axis reads the input contiguously, runs that axis
/// innermost instead. A strided ConvTranspose's interleaving of its phases, a DepthToSpace or a pixel shuffle
/// then reads its input in runs and writes each output row in a few interleaved passes while the row is in L1,
/// instead of reading one element per cache line (ppocr_det's `[24, 2, 2, 80, 80]` → `[24, 80, 2, 80, 2]`: 1.03
/// → 0.17 ms at one thread). Any order is the same copy: every output element is written once. Then banded.
fn generation_order(spec: &Loops) -> Loops {
    let mut spec = spec.clone();
    let rank = spec.dims.len();
    if let (Body::Copy, [input]) = (&spec.body, spec.inputs.as_slice()) {
        let size = spec.output.elem.size();
        let inner = rank - 1;
        let unit = (0..inner).find(|&a| input.strides[a] == size && spec.dims[a] > spec.dims[inner]);
        if let (true, Some(a)) = (spec.dims[inner] <= SHORT_INNER && input.strides[inner] != size, unit) {
            let order: Vec<usize> = (0..rank).filter(|&i| i != a).chain([a]).collect();
            spec.dims = order.iter().map(|&i| spec.dims[i]).collect();
            for o in spec.inputs.iter_mut().chain([&mut spec.output]) {
                o.strides = order.iter().map(|&i| o.strides[i]).collect();
            }
        }
    }
    spec.banded()
}

/// Compiles `specs` into one object file, kernel `k` exported as `{prefix}{k}`. It imports no symbol (math
/// functions come by address at the call), so it links into any executable or library.
pub fn compile_object(specs: &[Loops], prefix: &str) -> Result<Object> {
    use cranelift_object::{ObjectBuilder, ObjectModule};
    let builder = ObjectBuilder::new(host_isa(true)?, "stowage_kernels", cranelift_module::default_libcall_names())
        .map_err(jit_err)?;
    let mut module = ObjectModule::new(builder);
    let mut fctx = FunctionBuilderContext::new();
    let mut symbols = Vec::new();
    for (k, spec) in specs.iter().enumerate() {
        spec.check()?;
        cpu_operands(spec)?;
        let banded = generation_order(spec);
        let name = format!("{prefix}{k}");
        define(&mut module, &mut fctx, &name, Linkage::Export, &banded)?;
        symbols.push((name, spec.key()));
    }
    let bytes = module.finish().emit().map_err(jit_err)?;
    Ok(Object { bytes, symbols })
}

/// Where a [`Jit`]'s kernels come from. One lives per program being lowered, so its size does not matter.
#[allow(clippy::large_enum_variant)]
enum Source {
    /// Compiled now (`None`: a kernel that runs as Rust code, [`wide::Wide`] or [`copy::Copy`]).
    Compile { module: JITModule, fctx: FunctionBuilderContext, funcs: Vec<(Option<FuncId>, Option<Entry>, Extents)> },
    /// Linked in ahead of time (a built executable's or module's table, [`Jit::new`]).
    Linked { table: &'static [Precompiled], fns: Vec<(Entry, Extents)> },
}

/// How one kernel runs.
enum Entry {
    /// Machine code from Cranelift.
    Code(KernelFn),
    /// A chain a tile at a time ([`wide::Wide`]).
    Wide(wide::Wide),
    /// A copy in Rust loops ([`copy::Copy`]).
    Copy(copy::Copy),
}

impl Entry {
    /// Rows `begin..end` of the kernel's outermost axis.
    ///
    /// # Safety
    /// `ptrs` holds each input's address, then the math functions' ([`math_symbols`]); every input and `out` span
    /// what the kernel's strides reach over those rows; other bands running at the same time are other rows.
    unsafe fn invoke(&self, ptrs: *const *const u8, out: *mut u8, begin: usize, end: usize) {
        // SAFETY: the caller's contract is every entry's (a `Wide` or a `Copy` reads only the inputs' addresses).
        unsafe {
            match self {
                Entry::Code(f) => f(ptrs, out, begin, end),
                Entry::Wide(w) => w.run(ptrs, out, begin, end),
                Entry::Copy(c) => c.run(ptrs, out, begin, end),
            }
        }
    }
}

/// Compiles chains into one JIT module, or, in a built executable, finds them among the kernels linked in.
pub struct Jit {
    source: Source,
    /// Whether chains may run as [`wide::Wide`] (where the CPU allows) and copies as [`copy::Copy`].
    wide: bool,
}

impl Jit {
    /// A JIT for the host CPU, optimising for speed; given `linked`, the table of a built executable's or
    /// module's kernels, a lookup in it instead (a spec not in the table is an error, not a compile). The table
    /// belongs to the program being lowered: two models in one process each find their own.
    pub fn new(linked: Option<&'static [Precompiled]>) -> Result<Jit> {
        Jit::with_wide(linked, true)
    }

    /// [`Jit::new`]; with `wide` false, chains and copies are compiled by Cranelift on every CPU (the tests cover
    /// both).
    pub fn with_wide(linked: Option<&'static [Precompiled]>, wide: bool) -> Result<Jit> {
        if let Some(table) = linked {
            return Ok(Jit { source: Source::Linked { table, fns: Vec::new() }, wide });
        }
        let builder = JITBuilder::with_isa(host_isa(false)?, cranelift_module::default_libcall_names());
        let module = JITModule::new(builder);
        Ok(Jit { source: Source::Compile { module, fctx: FunctionBuilderContext::new(), funcs: Vec::new() }, wide })
    }

    /// Compiles a kernel; returns its index in the finished module.
    pub fn add(&mut self, spec: &Loops) -> Result<usize> {
        spec.check()?;
        cpu_operands(spec)?;
        let key = spec.key();
        let spec = generation_order(spec);
        let extents = extents_of(&spec);
        let host = match self.wide {
            true => wide::Wide::new(&spec).map(Entry::Wide).or_else(|| copy::Copy::new(&spec).map(Entry::Copy)),
            false => None,
        };
        match &mut self.source {
            Source::Compile { module, fctx, funcs } => {
                let id = match host {
                    Some(_) => None,
                    None => Some(define(module, fctx, &format!("kernel{}", funcs.len()), Linkage::Local, &spec)?),
                };
                funcs.push((id, host, extents));
                Ok(funcs.len() - 1)
            }
            Source::Linked { fns, .. } if host.is_some() => {
                fns.push((host.expect("checked"), extents));
                Ok(fns.len() - 1)
            }
            Source::Linked { table, fns } => {
                let found = table.iter().find(|p| p.key == key).ok_or_else(|| {
                    jit_err(format!(
                        "kernel {key:016x} is not among the {} linked into this executable: it was built for other \
                         shapes or layouts",
                        table.len()
                    ))
                })?;
                fns.push((Entry::Code(found.entry), extents));
                Ok(fns.len() - 1)
            }
        }
    }

    /// Finalises the module: machine code for every kernel added.
    pub fn finish(self) -> Result<Arc<JitCode>> {
        match self.source {
            Source::Linked { fns, .. } => Ok(Arc::new(JitCode { module: None, fns })),
            Source::Compile { mut module, funcs, .. } => {
                module.finalize_definitions().map_err(jit_err)?;
                let fns = funcs
                    .into_iter()
                    .map(|(id, host, extents)| match (id, host) {
                        (Some(id), _) => {
                            let p = module.get_finalized_function(id);
                            // SAFETY: `p` is the entry of a function defined above with the signature (ptr, ptr,
                            // ptr, ptr) and the host's default calling convention, which is what `KernelFn` is.
                            (Entry::Code(unsafe { std::mem::transmute::<*const u8, KernelFn>(p) }), extents)
                        }
                        (None, Some(entry)) => (entry, extents),
                        (None, None) => unreachable!("a kernel is either compiled or Rust code"),
                    })
                    .collect();
                Ok(Arc::new(JitCode { module: Some(module), fns }))
            }
        }
    }
}

/// Finalised machine code for a program's chains. Dropping the last handle frees the code.
pub struct JitCode {
    module: Option<JITModule>,
    fns: Vec<(Entry, Extents)>,
}

/// A pointer that may cross to another thread: the bands threads write are disjoint (`Loops::check`).
#[derive(Clone, Copy)]
struct SendPtr(*mut u8);
// SAFETY: only used to hand the output to the threads of one call, each writing its own band.
unsafe impl Send for SendPtr {}
// SAFETY: as above.
unsafe impl Sync for SendPtr {}

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

/// Kernels with fewer elements than this run on one thread.
const PARALLEL_MIN_ELEMENTS: usize = 1 << 15;

impl JitCode {
    /// Runs kernel `index`: `inputs[k]` holds input `k`'s bytes and `out` the output's, each at least as long as
    /// the kernel's strides reach. With `threads > 1` and enough elements, bands of the outermost axis run on the
    /// current rayon pool.
    pub fn call(&self, index: usize, inputs: &[&[u8]], out: &mut [u8], threads: usize) -> Result<()> {
        let (f, ext) = self.fns.get(index).ok_or_else(|| jit_err(format!("no kernel {index}")))?;
        if inputs.len() != ext.inputs.len() {
            return Err(jit_err(format!("{} inputs for a kernel of {}", inputs.len(), ext.inputs.len())));
        }
        for (k, (x, &need)) in inputs.iter().zip(&ext.inputs).enumerate() {
            if x.len() < need {
                return Err(jit_err(format!("input {k} has {} bytes where the kernel reads {need}", x.len())));
            }
        }
        if out.len() < ext.output {
            return Err(jit_err(format!("an output of {} bytes where the kernel writes {}", out.len(), ext.output)));
        }
        // The inputs' addresses, then the math functions'.
        let mut ptrs: smallvec::SmallVec<[*const u8; 16]> = smallvec::SmallVec::new();
        ptrs.extend(inputs.iter().map(|x| x.as_ptr()));
        ptrs.extend(MATH1.iter().map(|(_, f)| *f as *const u8));
        ptrs.push(math_pow as extern "C" fn(f32, f32) -> f32 as *const u8);
        let rows = ext.rows;
        let bands = if threads > 1 && ext.elements >= PARALLEL_MIN_ELEMENTS { threads.min(rows) } else { 1 };
        if bands <= 1 {
            // SAFETY: every input and the output are at least as long as the kernel's strides reach over all
            // `rows` (checked above against the extents computed when it was compiled), and the code touches
            // nothing else.
            unsafe { f.invoke(ptrs.as_ptr(), out.as_mut_ptr(), 0, rows) };
            return Ok(());
        }
        let out = SendPtr(out.as_mut_ptr());
        let per = rows.div_ceil(bands);
        let addr = ptrs.as_ptr() as usize;
        rayon::scope(|s| {
            for band in 0..bands {
                let (begin, end) = (band * per, ((band + 1) * per).min(rows));
                s.spawn(move |_| {
                    let out = out;
                    // SAFETY: as for one band; bands of the outermost axis write disjoint bytes of the output
                    // (`Loops::check` refuses overlapping output strides), and the inputs are only read. `addr`
                    // is `ptrs`, alive for the whole scope.
                    unsafe { f.invoke(addr as *const *const u8, out.0, begin, end) };
                });
            }
        });
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::elementwise::BinaryFn;

    fn compile(spec: &Loops) -> (Arc<JitCode>, usize) {
        compile_as(spec, false)
    }

    /// With `tiles`, chains run as [`wide::Wide`] where the CPU has AVX2 or AVX-512.
    fn compile_as(spec: &Loops, tiles: bool) -> (Arc<JitCode>, usize) {
        let mut jit = Jit::with_wide(None, tiles).expect("jit");
        let idx = jit.add(spec).expect("compiles");
        (jit.finish().expect("finishes"), idx)
    }

    /// Runs `chain` over `out` with packed inputs broadcast to it, on 1 and 2 threads, against `Chain::eval`.
    /// Runs the chain both ways (Cranelift's code, and tiles where the CPU has AVX2 or AVX-512) against
    /// [`Chain::eval`].
    fn check(chain: Chain, out: &[usize], inputs: &[(Vec<usize>, Vec<f32>)]) {
        check_as(chain.clone(), out, inputs, false);
        check_as(chain, out, inputs, true);
    }

    fn check_as(chain: Chain, out: &[usize], inputs: &[(Vec<usize>, Vec<f32>)], wide: bool) {
        let shapes: Vec<(Elem, &[usize])> = inputs.iter().map(|(s, _)| (Elem::F32, s.as_slice())).collect();
        let spec = Loops::elementwise(out, &shapes, chain.clone());
        let (code, idx) = compile_as(&spec, wide);
        let n: usize = out.iter().product();
        let bytes: Vec<&[u8]> = inputs.iter().map(|(_, v)| bytemuck::cast_slice(v.as_slice())).collect();
        let strides: Vec<Vec<usize>> =
            inputs.iter().map(|(s, _)| crate::kernels::broadcast::strides_for(s, out)).collect();
        for threads in [1, 2] {
            let mut got = vec![0.0f32; n];
            let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build().expect("pool");
            pool.install(|| code.call(idx, &bytes, bytemuck::cast_slice_mut(&mut got), threads)).expect("runs");
            for (i, &g) in got.iter().enumerate() {
                let xs: Vec<f32> = inputs
                    .iter()
                    .zip(&strides)
                    .map(|((_, v), st)| {
                        let (mut rest, mut off) = (i, 0);
                        for a in (0..out.len()).rev() {
                            off += (rest % out[a]) * st[a];
                            rest /= out[a];
                        }
                        v[off]
                    })
                    .collect();
                let want = chain.eval(&xs);
                assert!(
                    g == want || (g - want).abs() <= 1e-6 * want.abs().max(1.0) || (g.is_nan() && want.is_nan()),
                    "element {i}: got {g}, want {want} (tiles: {wide}, threads: {threads})"
                );
            }
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
        };
        assert!(chain.vectorizable());
        check(chain, &[37], &[(vec![37], data(37, 0.0)), (vec![37], data(37, 1.0)), (vec![], vec![0.5])]);
    }

    #[test]
    fn broadcast_inputs_of_every_kind() {
        // x * scale[c] + bias[w] - y[n, 1, h, w] over [2, 3, 5, 7], large enough for two threads.
        let chain = Chain {
            insts: vec![
                Inst::Input(0),
                Inst::Input(1),
                Inst::Binary(BinaryFn::Mul, 0, 1),
                Inst::Input(2),
                Inst::Binary(BinaryFn::Add, 2, 3),
                Inst::Input(3),
                Inst::Binary(BinaryFn::Sub, 4, 5),
            ],
        };
        let out = [2, 3, 50, 70];
        check(
            chain.clone(),
            &out,
            &[
                (out.to_vec(), data(2 * 3 * 50 * 70, 0.1)),
                (vec![3, 1, 1], data(3, 0.2)),
                (vec![70], data(70, 0.3)),
                (vec![2, 1, 50, 70], data(2 * 50 * 70, 0.4)),
            ],
        );
        // An odd inner axis (scalar tail after the vectors).
        check(
            chain,
            &[3, 6],
            &[(vec![3, 6], data(18, 0.0)), (vec![3, 1], data(3, 1.0)), (vec![6], data(6, 2.0)), (vec![1], vec![0.25])],
        );
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
        };
        assert!(!chain.vectorizable());
        check(chain, &[19], &[(vec![19], data(19, 0.3))]);
    }

    #[test]
    fn exp_and_sigmoid_vectorise_and_match_the_reference() {
        // sigmoid(x) * x + exp(x), over an odd length, through overflow, underflow, infinities and NaN.
        let chain = Chain {
            insts: vec![
                Inst::Input(0),
                Inst::Unary(UnaryFn::Sigmoid, 0),
                Inst::Binary(BinaryFn::Mul, 1, 0),
                Inst::Unary(UnaryFn::Exp, 0),
                Inst::Binary(BinaryFn::Add, 2, 3),
            ],
        };
        assert!(chain.vectorizable());
        let mut x: Vec<f32> = (0..401).map(|i| (i as f32 - 200.0) * 0.55).collect();
        x.extend([f32::NAN, f32::INFINITY, -f32::INFINITY, 88.7, 88.73, -87.4, -103.5, 0.0, -0.0]);
        check(chain, &[x.len()], &[(vec![x.len()], x)]);
    }

    #[test]
    fn tanh_and_both_gelus_vectorise() {
        // tanh(x) + gelu_tanh(x) - gelu_erf(x), over an odd length (vectors, then the scalar tail).
        let chain = Chain {
            insts: vec![
                Inst::Input(0),
                Inst::Unary(UnaryFn::Tanh, 0),
                Inst::Unary(UnaryFn::Gelu(true), 0),
                Inst::Binary(BinaryFn::Add, 1, 2),
                Inst::Unary(UnaryFn::Gelu(false), 0),
                Inst::Binary(BinaryFn::Sub, 3, 4),
            ],
        };
        assert!(chain.vectorizable());
        let mut x: Vec<f32> = (0..203).map(|i| (i as f32 - 101.0) * 0.1).collect();
        x.extend([f32::NAN, f32::INFINITY, -f32::INFINITY, 30.0, -30.0]);
        check(chain, &[x.len()], &[(vec![x.len()], x)]);
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
        };
        let a = vec![f32::NAN, f32::INFINITY, -f32::INFINITY, -1.0, 2.0, 0.0, f32::NAN, 3.0];
        let b = vec![0.0, 1.0, f32::NAN, -5.0, 1.0, -0.0, 1.0, f32::INFINITY];
        check(chain, &[8], &[(vec![8], a), (vec![8], b)]);
    }

    #[test]
    fn integer_inputs_are_cast_on_load() {
        // (pixel - 128) / 64 + i16 + i32 over u8 [2, 3, 9] with the others broadcast: casts in the vector loop
        // and the tail.
        let chain = Chain {
            insts: vec![
                Inst::Input(0),
                Inst::Const(128.0),
                Inst::Binary(BinaryFn::Sub, 0, 1),
                Inst::Const(64.0),
                Inst::Binary(BinaryFn::Div, 2, 3),
                Inst::Input(1),
                Inst::Binary(BinaryFn::Add, 4, 5),
                Inst::Input(2),
                Inst::Binary(BinaryFn::Add, 6, 7),
                Inst::Input(3),
                Inst::Binary(BinaryFn::Add, 8, 9),
                Inst::Input(4),
                Inst::Binary(BinaryFn::Add, 10, 11),
            ],
        };
        let out = [2usize, 3, 9];
        let px: Vec<u8> = (0..54).map(|i| (i * 37 % 256) as u8).collect();
        let small: Vec<i16> = (0..9).map(|i| i * 1000 - 4000).collect();
        let wide: Vec<i32> = vec![-70000, 3, 123456];
        let signed: Vec<i8> = (0..54).map(|i| (i * 11 % 256) as u8 as i8).collect();
        let ints: Vec<i32> = (0..54).map(|i| i * 99_991 - 2_000_000).collect();
        let spec = Loops::elementwise(
            &out,
            &[(Elem::U8, &out), (Elem::I16, &[9]), (Elem::I32, &[3, 1]), (Elem::I8, &out), (Elem::I32, &out)],
            chain.clone(),
        );
        for tiles in [false, true] {
            let (code, idx) = compile_as(&spec, tiles);
            let mut got = vec![0f32; 54];
            let inputs: [&[u8]; 5] = [
                &px,
                bytemuck::cast_slice(&small),
                bytemuck::cast_slice(&wide),
                bytemuck::cast_slice(&signed),
                bytemuck::cast_slice(&ints),
            ];
            code.call(idx, &inputs, bytemuck::cast_slice_mut(&mut got), 1).expect("runs");
            for i in 0..54 {
                let loads =
                    [px[i] as f32, small[i % 9] as f32, wide[i / 9 % 3] as f32, signed[i] as f32, ints[i] as f32];
                let want = chain.eval(&loads);
                assert_eq!(got[i], want, "element {i} (tiles: {tiles})");
            }
        }
    }

    #[test]
    fn padded_rows_and_column_major_inputs_are_read_in_place() {
        // out[r, c] = a[r, c] + b[r, c]: `a` with rows padded to 8 floats, `b` column-major.
        let (rows, cols) = (5usize, 6usize);
        let a: Vec<f32> = (0..rows * 8).map(|i| i as f32).collect();
        let b: Vec<f32> = (0..rows * cols).map(|i| (i * 100) as f32).collect();
        let spec = Loops {
            dims: vec![rows, cols],
            inputs: vec![
                Operand { elem: Elem::F32, strides: vec![32, 4] },
                Operand { elem: Elem::F32, strides: vec![4, 4 * rows] },
            ],
            output: Operand { elem: Elem::F32, strides: packed_strides(&[rows, cols], 4) },
            body: Body::Chain(Chain { insts: vec![Inst::Input(0), Inst::Input(1), Inst::Binary(BinaryFn::Add, 0, 1)] }),
        };
        for tiles in [false, true] {
            let (code, idx) = compile_as(&spec, tiles);
            let mut got = vec![0f32; rows * cols];
            let inputs = [bytemuck::cast_slice(&a), bytemuck::cast_slice(&b)];
            code.call(idx, &inputs, bytemuck::cast_slice_mut(&mut got), 1).expect("runs");
            for r in 0..rows {
                for c in 0..cols {
                    assert_eq!(got[r * cols + c], a[r * 8 + c] + b[c * rows + r], "[{r}, {c}] (tiles: {tiles})");
                }
            }
        }
    }

    #[test]
    fn relayouts_of_every_element_size() {
        // Each copy as Cranelift code and as Rust loops (`copy.rs`).
        for rust in [false, true] {
            // A transpose [3, 4, 5] → [5, 3, 4] for 1, 2, 4 and 8-byte elements, and a padded → packed copy.
            for size in [1usize, 2, 4, 8] {
                let shape = [3usize, 4, 5];
                let n: usize = shape.iter().product();
                let src: Vec<u8> = (0..n * size).map(|i| (i * 7 % 251) as u8).collect();
                let (code, idx) = compile_as(&Loops::transpose(&shape, &[2, 0, 1], size), rust);
                let mut got = vec![0u8; n * size];
                code.call(idx, &[&src], &mut got, 1).expect("runs");
                for (o, chunk) in got.chunks(size).enumerate() {
                    let (i2, i0, i1) = (o / 12, o / 4 % 3, o % 4);
                    let s = (i0 * 20 + i1 * 5 + i2) * size;
                    assert_eq!(chunk, &src[s..s + size], "size {size}, element {o} (Rust: {rust})");
                }
            }
            // Rows of 37 bytes padded to 64, into a packed [9, 37] (the 16-byte loop and its tail).
            let src: Vec<u8> = (0..9 * 64).map(|i| (i % 253) as u8).collect();
            let (code, idx) = compile_as(&Loops::relayout(&[9, 37], 1, vec![64, 1], vec![37, 1]), rust);
            let mut got = vec![0u8; 9 * 37 + 3];
            code.call(idx, &[&src], &mut got, 1).expect("runs");
            for r in 0..9 {
                assert_eq!(got[r * 37..r * 37 + 37], src[r * 64..r * 64 + 37], "row {r} (Rust: {rust})");
            }
            assert_eq!(got[9 * 37..], [0, 0, 0], "nothing written past the end");
            // A strided ConvTranspose's interleave of its phases, [c, i, j, y, x] → [c, y, i, x, j], on two
            // threads: its innermost loop runs along x (`generation_order`).
            let shape = [4usize, 2, 2, 9, 40];
            let n: usize = shape.iter().product();
            let src: Vec<f32> = (0..n).map(|i| i as f32).collect();
            let (code, idx) = compile_as(&Loops::transpose(&shape, &[0, 3, 1, 4, 2], 4), rust);
            let mut got = vec![0f32; n];
            let pool = rayon::ThreadPoolBuilder::new().num_threads(2).build().expect("pool");
            pool.install(|| code.call(idx, &[bytemuck::cast_slice(&src)], bytemuck::cast_slice_mut(&mut got), 2))
                .expect("runs");
            for (o, &g) in got.iter().enumerate() {
                let (c, y, i, x, j) = (o / 1440, o / 160 % 9, o / 80 % 2, o / 2 % 40, o % 2);
                assert_eq!(g, src[(((c * 2 + i) * 2 + j) * 9 + y) * 40 + x], "element {o} (Rust: {rust})");
            }
        }
    }

    #[test]
    fn chains_run_as_tiles_exactly_where_the_cpu_has_wide_vectors() {
        let chain = Chain { insts: vec![Inst::Input(0), Inst::Unary(UnaryFn::Exp, 0)] };
        let spec = Loops::elementwise(&[5], &[(Elem::F32, &[5])], chain);
        let (code, _) = compile_as(&spec, true);
        let wide = std::arch::is_x86_feature_detected!("avx2") || std::arch::is_x86_feature_detected!("avx512f");
        assert_eq!(matches!(code.fns[0].0, Entry::Wide(_)), wide);
        let (code, _) = compile_as(&spec, false);
        assert!(matches!(code.fns[0].0, Entry::Code(_)));
        // Copies run as Rust loops on every CPU, or as Cranelift code when asked.
        let (code, _) = compile_as(&Loops::transpose(&[3, 4], &[1, 0], 4), true);
        assert!(matches!(code.fns[0].0, Entry::Copy(_)));
        let (code, _) = compile_as(&Loops::transpose(&[3, 4], &[1, 0], 4), false);
        assert!(matches!(code.fns[0].0, Entry::Code(_)));
    }

    #[test]
    fn short_buffers_are_refused() {
        let chain = Chain { insts: vec![Inst::Input(0), Inst::Unary(UnaryFn::Neg, 0)] };
        let (code, idx) = compile(&Loops::elementwise(&[5], &[(Elem::F32, &[5])], chain));
        let x = data(5, 0.0);
        let mut out = [9.0f32; 5];
        let short: &[f32] = &x[..3];
        assert!(code.call(idx, &[bytemuck::cast_slice(short)], bytemuck::cast_slice_mut(&mut out), 1).is_err());
        assert!(code.call(idx, &[bytemuck::cast_slice(&x)], bytemuck::cast_slice_mut(&mut out[..4]), 1).is_err());
        assert!(code.call(idx, &[], bytemuck::cast_slice_mut(&mut out), 1).is_err(), "a missing input");
        assert_eq!(out, [9.0; 5], "nothing written");
    }
}
