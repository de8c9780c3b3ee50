//! Chains evaluated a tile at a time in the host's widest vectors.
//!
//! Cranelift's x86 backend has 128-bit vectors only, so a generated chain computes four lanes at a time; on a CPU
//! with AVX2 or AVX-512 that leaves two or four times the arithmetic on the table where a chain is compute-bound
//! (a SiLU, a softmax's exponential, a GELU). [`Wide`] runs the same [`Loops`] chain instead: along the innermost
//! axis, [`TILE`] elements at a time, each instruction is one loop over the tile, compiled by rustc for AVX-512
//! or AVX2 (`#[target_feature]`, picked when the kernel is made) and vectorised at that width. Inputs that are
//! contiguous f32 are read in place, broadcast inputs are one value for the tile, and other element types or
//! strides are gathered into the tile and converted as the generated code converts them.
//!
//! The arithmetic is `stowage_kir::func`'s scalar definitions, element by element (no contraction into FMA), so
//! results are bit for bit those of [`Chain::eval`]. What it addresses is what the generated kernel would:
//! [`super::JitCode::call`] checks the operands' lengths against the same extents before either runs.

use smallvec::{smallvec, SmallVec};
use stowage_kir::{binary_scalar, unary_scalar, BinaryFn, Body, Chain, Elem, Inst, Loops, Operand, UnaryFn};

use super::linear::{Leaf, Linear};

/// Elements of the innermost axis evaluated together: each instruction's tile stays in L1. A multiple of
/// [`LANES`], so that a tile of a row of blocks starts at a block's first lane.
pub const TILE: usize = 256;

/// Channels in a block (`kernels/blocked.rs`), the period of a per-channel operand's row in [`lanes`].
const LANES: usize = 16;
const _: () = assert!(TILE.is_multiple_of(LANES));

/// The vector extension a [`Wide`] kernel was made for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Isa {
    Avx512,
    Avx2,
}

impl Isa {
    fn detect() -> Option<Isa> {
        #[cfg(target_arch = "x86_64")]
        {
            if std::arch::is_x86_feature_detected!("avx512f") {
                return Some(Isa::Avx512);
            }
            if std::arch::is_x86_feature_detected!("avx2") {
                return Some(Isa::Avx2);
            }
        }
        None
    }
}

/// A chain kernel run a tile at a time (see the module doc).
#[derive(Debug)]
pub struct Wide {
    isa: Isa,
    dims: Vec<usize>,
    /// Byte strides per axis of each input, then of the output.
    strides: Vec<Vec<usize>>,
    elems: Vec<Elem>,
    chain: Chain,
    /// The chain in registers, where it is linear and the CPU has AVX-512 (`linear.rs`).
    linear: Option<Linear>,
    /// Per input: 16 f32 repeated along the row ([`lanes`]).
    lanes: Vec<bool>,
}

/// Dims, byte strides per operand (the output last), and which inputs are lanes: [`lanes`]' merged loops.
type Merged = (Vec<usize>, Vec<Vec<usize>>, Vec<bool>);

/// A chain over values in channel blocks with a per-channel operand (`lower/blocks.rs`, `chain`): loops whose
/// innermost axis is a block's 16 lanes, the output and every input contiguous across the last two axes, a
/// constant along both, or 16 f32 the same at every step of the second-last (a per-channel operand). As they
/// are, the rows would be 16 elements long; merged, a row is the whole plane of a block and the per-channel
/// operand repeats every 16 elements: a [`Leaf::Lanes`] in registers, a tile filled with its pattern otherwise
/// (with three axes or more: the outermost is not merged). Returns the merged dims and strides (a lanes
/// operand's innermost stride is 4, never stepped) and which inputs are lanes; `None` where the loops are not so.
fn lanes(spec: &Loops) -> Option<Merged> {
    let rank = spec.dims.len();
    let last_two = |o: &Operand| (o.strides[rank - 2], o.strides[rank - 1]);
    // The outermost axis stays as it is: the caller splits it into bands for threads.
    if rank < 3 || spec.dims[rank - 1] != LANES || last_two(&spec.output) != (4 * LANES, 4) {
        return None;
    }
    let mut lanes = Vec::with_capacity(spec.inputs.len());
    for o in &spec.inputs {
        lanes.push(match last_two(o) {
            (0, 0) => false,
            (64, 4) if o.elem == Elem::F32 => false,
            (0, 4) if o.elem == Elem::F32 => true,
            _ => return None,
        });
    }
    if !lanes.contains(&true) {
        return None;
    }
    let mut dims = spec.dims[..rank - 1].to_vec();
    dims[rank - 2] *= LANES;
    let strides = spec
        .inputs
        .iter()
        .chain([&spec.output])
        .map(|o| {
            let mut s = o.strides[..rank - 1].to_vec();
            s[rank - 2] = o.strides[rank - 1];
            s
        })
        .collect();
    Some((dims, strides, lanes))
}

/// An instruction's value over one tile.
#[derive(Clone, Copy)]
enum Val {
    /// The same number in every lane.
    Splat(f32),
    /// `len` numbers from here (an input read in place, or a tile of the scratch).
    Tile(*const f32),
}

impl Wide {
    /// The tile form of `spec` (already banded: rank ≥ 2 when it came from one axis), when the CPU has AVX2 or
    /// AVX-512 and `spec` is a chain.
    pub fn new(spec: &Loops) -> Option<Wide> {
        let Body::Chain(chain) = &spec.body else { return None };
        if spec.output.elem != Elem::F32 || spec.dims.is_empty() {
            return None;
        }
        let isa = Isa::detect()?;
        let inner = |o: &Operand| o.strides[spec.dims.len() - 1];
        let leaf = |k: usize| {
            let o = &spec.inputs[k];
            match inner(o) {
                0 => Some(Leaf::Row(k)),
                4 if o.elem == Elem::F32 => Some(Leaf::Tile(k)),
                _ => None,
            }
        };
        let strides = spec.inputs.iter().chain([&spec.output]).map(|o| o.strides.clone()).collect();
        let elems = spec.inputs.iter().map(|o| o.elem).collect();
        if let Some((dims, strides, lanes)) = lanes(spec) {
            let leaf = |k: usize| match (lanes[k], strides[k][dims.len() - 1]) {
                (true, _) => Some(Leaf::Lanes(k)),
                (false, 0) => Some(Leaf::Row(k)),
                (false, _) => Some(Leaf::Tile(k)),
            };
            let linear = (isa == Isa::Avx512).then(|| Linear::new(chain, leaf)).flatten();
            return Some(Wide { isa, linear, dims, strides, elems, lanes, chain: chain.clone() });
        }
        let linear = (isa == Isa::Avx512 && inner(&spec.output) == 4).then(|| Linear::new(chain, leaf)).flatten();
        let lanes = vec![false; spec.inputs.len()];
        Some(Wide { isa, linear, dims: spec.dims.clone(), strides, elems, lanes, chain: chain.clone() })
    }

    /// Rows `begin..end` of the outermost axis.
    ///
    /// # Safety
    /// `inputs` points at one address per input, and each input and `out` span at least what the strides reach
    /// over rows `begin..end` (`Loops::extent`); rows of other calls running at the same time write other bytes.
    pub unsafe fn run(&self, inputs: *const *const u8, out: *mut u8, begin: usize, end: usize) {
        // SAFETY: `isa` was detected on this CPU when `self` was made; the caller's contract is `rows`'.
        unsafe {
            match self.isa {
                Isa::Avx512 => self.rows_avx512(inputs, out, begin, end),
                Isa::Avx2 => self.rows_avx2(inputs, out, begin, end),
            }
        }
    }

    #[cfg_attr(target_arch = "x86_64", target_feature(enable = "avx512f,avx512vl,avx512dq,avx512bw"))]
    unsafe fn rows_avx512(&self, inputs: *const *const u8, out: *mut u8, begin: usize, end: usize) {
        // SAFETY: the caller's contract is `rows`'.
        unsafe { self.rows(inputs, out, begin, end) }
    }

    #[cfg_attr(target_arch = "x86_64", target_feature(enable = "avx2"))]
    unsafe fn rows_avx2(&self, inputs: *const *const u8, out: *mut u8, begin: usize, end: usize) {
        // SAFETY: the caller's contract is `rows`'.
        unsafe { self.rows(inputs, out, begin, end) }
    }

    /// Every innermost row of outer rows `begin..end`, tile by tile. Inlined into the `target_feature` wrappers,
    /// so that its loops are compiled for their extension.
    #[inline(always)]
    unsafe fn rows(&self, inputs: *const *const u8, out: *mut u8, begin: usize, end: usize) {
        let rank = self.dims.len();
        let n_in = self.elems.len();
        let inner = self.dims[rank - 1];
        // The tiles' scratch (none for a chain in registers).
        let tiles = if self.linear.is_some() { 0 } else { self.chain.insts.len() };
        let mut scratch: SmallVec<[f32; 256]> = smallvec![0f32; tiles * TILE.min(inner.max(1))];
        let mut vals: SmallVec<[Val; 16]> = smallvec![Val::Splat(0.0); self.chain.insts.len()];
        // SAFETY: the caller gives one address per input.
        let bases: SmallVec<[*const u8; 8]> = (0..n_in).map(|k| unsafe { *inputs.add(k) }).collect();
        if let (Some(linear), 2) = (&self.linear, rank) {
            // SAFETY: the caller's contract is `linear_rows`'.
            return unsafe { self.linear_rows(linear, &bases, out, begin, end) };
        }
        let mut idx: SmallVec<[usize; 8]> = smallvec![0usize; rank.saturating_sub(1)];
        let mut in_rows: SmallVec<[*const u8; 8]> = smallvec![std::ptr::null(); n_in];
        let mut tile_rows: SmallVec<[*const f32; 8]> = smallvec![std::ptr::null(); n_in];
        let mut row_values: SmallVec<[f32; 8]> = smallvec![0.0; n_in];
        for row in begin..end {
            idx.iter_mut().for_each(|i| *i = 0);
            if let Some(first) = idx.first_mut() {
                *first = row;
            }
            // The middle axes (1 .. rank-1) counted through, the outermost fixed at `row`.
            loop {
                let offset = |k: usize| idx.iter().zip(&self.strides[k]).map(|(i, s)| i * s).sum::<usize>();
                for (k, r) in in_rows.iter_mut().enumerate() {
                    *r = bases[k].wrapping_add(offset(k));
                }
                let out_row = out.wrapping_add(offset(n_in));
                if let (Some(linear), true) = (&self.linear, inner > 0) {
                    // Rule 4 of `linear.rs`: each input's first element of the row, its value where it is one per row.
                    for k in 0..n_in {
                        if self.strides[k][rank - 1] == 0 {
                            // SAFETY: element 0 of the row is within the input's extent (the caller's contract).
                            row_values[k] = unsafe { load(self.elems[k], in_rows[k]) };
                        }
                        tile_rows[k] = in_rows[k].cast();
                    }
                    // SAFETY: this CPU has AVX-512F (`linear` is only made then); the tile leaves' inputs and the
                    // output are contiguous f32 along the row, each within its extent for `inner` elements, a lanes
                    // leaf's 16 f32 within its extent (`lanes` checked its strides over the 16; the caller's
                    // contract), and the output is a buffer of its own.
                    unsafe { linear.row(&tile_rows, &row_values, out_row.cast(), inner) };
                }
                let mut t0 = if self.linear.is_some() { inner } else { 0 };
                while t0 < inner {
                    let len = TILE.min(inner - t0);
                    // SAFETY: elements t0 .. t0+len of this row lie within what the strides reach (the caller's
                    // contract), and `scratch` holds a tile per instruction.
                    unsafe { self.tile(&in_rows, out_row, t0, len, &mut scratch, &mut vals) };
                    t0 += len;
                }
                let mut d = rank - 2;
                loop {
                    if d == 0 {
                        break;
                    }
                    idx[d] += 1;
                    if idx[d] < self.dims[d] {
                        break;
                    }
                    idx[d] = 0;
                    d -= 1;
                }
                if d == 0 {
                    break;
                }
            }
        }
    }

    /// Rows `begin..end` of a two-axis chain in registers (`linear.rs`), each operand's row found by one multiply.
    ///
    /// # Safety
    /// As [`Wide::run`]'s; `linear` is `self.linear` and the dims have two axes.
    #[inline(always)]
    unsafe fn linear_rows(&self, linear: &Linear, bases: &[*const u8], out: *mut u8, begin: usize, end: usize) {
        let (n_in, inner) = (bases.len(), self.dims[1]);
        if inner == 0 {
            // No element: nothing to read, not even a row's value.
            return;
        }
        let mut tile_rows: SmallVec<[*const f32; 8]> = smallvec![std::ptr::null(); n_in];
        let mut row_values: SmallVec<[f32; 8]> = smallvec![0.0; n_in];
        for row in begin..end {
            for k in 0..n_in {
                let p = bases[k].wrapping_add(row * self.strides[k][0]);
                if self.strides[k][1] == 0 {
                    // SAFETY: element 0 of the row is within the input's extent (the caller's contract).
                    row_values[k] = unsafe { load(self.elems[k], p) };
                }
                tile_rows[k] = p.cast();
            }
            let out_row = out.wrapping_add(row * self.strides[n_in][0]).cast();
            // SAFETY: this CPU has AVX-512F (`linear` is only made then); the tile leaves' inputs and the output are
            // contiguous f32 along the row, each within its extent for `inner` elements, a lanes leaf's 16 f32
            // within its extent (`lanes` checked its strides over the 16; the caller's contract), and the output
            // is a buffer of its own.
            unsafe { linear.row(&tile_rows, &row_values, out_row, inner) };
        }
    }

    /// Elements `t0 .. t0+len` of one innermost row.
    #[inline(always)]
    unsafe fn tile(
        &self,
        in_rows: &[*const u8],
        out_row: *mut u8,
        t0: usize,
        len: usize,
        scratch: &mut [f32],
        vals: &mut [Val],
    ) {
        let rank = self.dims.len();
        let n_in = in_rows.len();
        let base = scratch.as_mut_ptr();
        // SAFETY: tile values point at `len` readable elements: an input row in place (within its extent, the
        // caller's contract) or a tile of the scratch.
        let view = |v: *const f32| unsafe { std::slice::from_raw_parts(v, len) };
        for (i, inst) in self.chain.insts.iter().enumerate() {
            // SAFETY: tile `i` of the scratch is `len` ≤ its size elements, and no earlier value points into it.
            let dst = unsafe { std::slice::from_raw_parts_mut(base.add(i * len.max(1)), len) };
            vals[i] = match *inst {
                Inst::Input(k) => {
                    let (s, elem) = (self.strides[k][rank - 1], self.elems[k]);
                    let at = |j: usize| in_rows[k].wrapping_add((t0 + j) * s);
                    if self.lanes[k] {
                        // The row's 16 values repeated; `t0` is a multiple of 16 (`TILE`).
                        let pattern = in_rows[k].cast::<f32>();
                        for (j, d) in dst.iter_mut().enumerate() {
                            // SAFETY: the 16 f32 of a lanes input are within its extent (the caller's contract).
                            *d = unsafe { pattern.add(j % LANES).read_unaligned() };
                        }
                        Val::Tile(dst.as_ptr())
                    } else if s == 0 {
                        // SAFETY: element t0 of the row is within the input's extent (the caller's contract).
                        Val::Splat(unsafe { load(elem, at(0)) })
                    } else if elem == Elem::F32 && s == 4 && (at(0) as usize).is_multiple_of(4) {
                        Val::Tile(at(0) as *const f32)
                    } else if s == elem.size()
                        // SAFETY: elements t0 .. t0+len of the row, consecutive here, are within the input's extent.
                        && unsafe { contiguous(elem, at(0), dst) }
                    {
                        Val::Tile(dst.as_ptr())
                    } else {
                        for (j, d) in dst.iter_mut().enumerate() {
                            // SAFETY: element t0 + j < t0 + len of the row is within the input's extent.
                            *d = unsafe { load(elem, at(j)) };
                        }
                        Val::Tile(dst.as_ptr())
                    }
                }
                Inst::Const(c) => Val::Splat(c),
                Inst::Unary(f, a) => match vals[a] {
                    Val::Splat(x) => Val::Splat(unary_scalar(f, x)),
                    Val::Tile(x) => {
                        unary(f, view(x), dst);
                        Val::Tile(dst.as_ptr())
                    }
                },
                Inst::Binary(f, a, b) => match (vals[a], vals[b]) {
                    (Val::Splat(x), Val::Splat(y)) => Val::Splat(binary_scalar(f, x, y)),
                    (x, y) => {
                        binary(f, x, y, len, dst);
                        Val::Tile(dst.as_ptr())
                    }
                },
            };
        }
        // Elements t0 .. t0+len of the output row are within its extent and this call's to write; no tile value
        // points into the output (`Loops` addresses it as a buffer of its own).
        let s = self.strides[n_in][rank - 1];
        let at = |j: usize| out_row.wrapping_add((t0 + j) * s) as *mut f32;
        match vals.last().copied().unwrap_or(Val::Splat(0.0)) {
            // SAFETY: see above.
            Val::Splat(v) => (0..len).for_each(|j| unsafe { at(j).write_unaligned(v) }),
            Val::Tile(src) if s == 4 && (at(0) as usize).is_multiple_of(4) => {
                // SAFETY: see above; the output row is aligned for f32 here.
                unsafe { std::slice::from_raw_parts_mut(at(0), len) }.copy_from_slice(view(src));
            }
            // SAFETY: see above.
            Val::Tile(src) => view(src).iter().enumerate().for_each(|(j, &v)| unsafe { at(j).write_unaligned(v) }),
        }
    }
}

/// `dst.len()` consecutive elements of `elem` from `p` converted into `dst` as [`load`] converts them, one loop per
/// type so that each vectorises (a u8 or bool input gathered through `load`'s match took 1.6 ns an element, three
/// times an f32 input's whole chain); false, writing nothing, for a type without such a loop.
///
/// # Safety
/// `p` is readable for `dst.len()` elements of `elem`.
#[inline(always)]
unsafe fn contiguous(elem: Elem, p: *const u8, dst: &mut [f32]) -> bool {
    let n = dst.len();
    // SAFETY: the caller's contract; the slices are read as bytes (alignment 1) or unaligned below.
    unsafe {
        match elem {
            Elem::U8 | Elem::Bits(1) => {
                let src = std::slice::from_raw_parts(p, n);
                dst.iter_mut().zip(src).for_each(|(d, &b)| *d = f32::from(b));
            }
            Elem::I8 => {
                let src = std::slice::from_raw_parts(p.cast::<i8>(), n);
                dst.iter_mut().zip(src).for_each(|(d, &b)| *d = f32::from(b));
            }
            Elem::I32 | Elem::Bits(4) => {
                for (j, d) in dst.iter_mut().enumerate() {
                    *d = p.cast::<i32>().add(j).read_unaligned() as f32;
                }
            }
            _ => return false,
        }
    }
    true
}

/// One element of `elem` at `p`, as f32, converted as the generated code converts it (integers through a signed
/// conversion, f64 narrowed, a 1-byte `Bits` as u8 and wider ones as their low 32 bits).
///
/// # Safety
/// `p` is readable for `elem.size()` bytes.
#[inline(always)]
unsafe fn load(elem: Elem, p: *const u8) -> f32 {
    // SAFETY: the caller's contract; every read is unaligned-safe.
    unsafe {
        match elem {
            Elem::F32 => p.cast::<f32>().read_unaligned(),
            Elem::F64 => p.cast::<f64>().read_unaligned() as f32,
            Elem::U8 | Elem::Bits(1) => f32::from(p.read()),
            Elem::I8 => f32::from(p.cast::<i8>().read()),
            Elem::U16 => f32::from(p.cast::<u16>().read_unaligned()),
            Elem::I16 => f32::from(p.cast::<i16>().read_unaligned()),
            Elem::I32 | Elem::Bits(_) => p.cast::<i32>().read_unaligned() as f32,
            Elem::I64 => p.cast::<i64>().read_unaligned() as f32,
            Elem::F16 => half::f16::from_bits(p.cast::<u16>().read_unaligned()).to_f32(),
            Elem::BF16 => half::bf16::from_bits(p.cast::<u16>().read_unaligned()).to_f32(),
        }
    }
}

#[inline(always)]
fn map(x: &[f32], out: &mut [f32], f: impl Fn(f32) -> f32) {
    for (o, &v) in out.iter_mut().zip(x) {
        *o = f(v);
    }
}

/// `out = f(x)`, one loop per function so that each vectorises on its own.
#[inline(always)]
fn unary(f: UnaryFn, x: &[f32], out: &mut [f32]) {
    use UnaryFn as U;
    match f {
        U::Abs => map(x, out, |v| unary_scalar(U::Abs, v)),
        U::Ceil => map(x, out, |v| unary_scalar(U::Ceil, v)),
        U::Erf => map(x, out, |v| unary_scalar(U::Erf, v)),
        U::Exp => map(x, out, |v| unary_scalar(U::Exp, v)),
        U::Floor => map(x, out, |v| unary_scalar(U::Floor, v)),
        U::Round => map(x, out, |v| unary_scalar(U::Round, v)),
        U::Neg => map(x, out, |v| unary_scalar(U::Neg, v)),
        U::Reciprocal => map(x, out, |v| unary_scalar(U::Reciprocal, v)),
        U::Relu => map(x, out, |v| unary_scalar(U::Relu, v)),
        U::Sigmoid => map(x, out, |v| unary_scalar(U::Sigmoid, v)),
        U::Sqrt => map(x, out, |v| unary_scalar(U::Sqrt, v)),
        U::Tanh => map(x, out, |v| unary_scalar(U::Tanh, v)),
        U::LeakyRelu(a) => map(x, out, |v| unary_scalar(U::LeakyRelu(a), v)),
        U::HardSigmoid(a, b) => map(x, out, |v| unary_scalar(U::HardSigmoid(a, b), v)),
        U::HardSwish => map(x, out, |v| unary_scalar(U::HardSwish, v)),
        U::Gelu(t) => map(x, out, |v| unary_scalar(U::Gelu(t), v)),
        // Library calls, one element at a time.
        other => map(x, out, |v| unary_scalar(other, v)),
    }
}

#[inline(always)]
fn zip(x: Val, y: Val, len: usize, out: &mut [f32], f: impl Fn(f32, f32) -> f32) {
    // SAFETY: a tile value points at `len` readable elements (see `Wide::tile`).
    let view = |p: *const f32| unsafe { std::slice::from_raw_parts(p, len) };
    match (x, y) {
        (Val::Tile(a), Val::Tile(b)) => {
            for ((o, &a), &b) in out.iter_mut().zip(view(a)).zip(view(b)) {
                *o = f(a, b);
            }
        }
        (Val::Tile(a), Val::Splat(b)) => map(view(a), out, |a| f(a, b)),
        (Val::Splat(a), Val::Tile(b)) => map(view(b), out, |b| f(a, b)),
        (Val::Splat(a), Val::Splat(b)) => out.fill(f(a, b)),
    }
}

/// `out = f(x, y)`, one loop per function.
#[inline(always)]
fn binary(f: BinaryFn, x: Val, y: Val, len: usize, out: &mut [f32]) {
    use BinaryFn as B;
    match f {
        B::Add => zip(x, y, len, out, |a, b| binary_scalar(B::Add, a, b)),
        B::Sub => zip(x, y, len, out, |a, b| binary_scalar(B::Sub, a, b)),
        B::Mul => zip(x, y, len, out, |a, b| binary_scalar(B::Mul, a, b)),
        B::Div => zip(x, y, len, out, |a, b| binary_scalar(B::Div, a, b)),
        B::Max => zip(x, y, len, out, |a, b| binary_scalar(B::Max, a, b)),
        B::Min => zip(x, y, len, out, |a, b| binary_scalar(B::Min, a, b)),
        B::PRelu => zip(x, y, len, out, |a, b| binary_scalar(B::PRelu, a, b)),
        other => zip(x, y, len, out, |a, b| binary_scalar(other, a, b)),
    }
}

#[cfg(test)]
mod tests {
    use stowage_kir::{packed_strides, BinaryFn, Chain, Elem, Inst, Loops, UnaryFn};

    use super::super::{Entry, Jit};

    /// A BatchNormalization's scale and shift over a value in channel blocks `[1, 3, 5, 7, 16]`, one f32 per channel
    /// each, then a ReLU (linear: in registers with AVX-512) or a SiLU (the shifted value read twice: tiles). The
    /// rows are merged into planes of blocks, and every element is `Chain::eval`'s, as Cranelift's code (rows of
    /// 16) computes it too.
    #[test]
    fn per_channel_operands_of_blocks_run_a_plane_per_row() {
        let dims = [1, 3, 5, 7, 16];
        let x: Vec<f32> = (0..3 * 5 * 7 * 16).map(|i| ((i * 37 % 101) as f32 - 50.0) / 7.0).collect();
        let scale: Vec<f32> = (0..48).map(|c| 0.5 + c as f32 / 16.0).collect();
        let shift: Vec<f32> = (0..48).map(|c| c as f32 / 3.0 - 8.0).collect();
        let affine = vec![
            Inst::Input(0),
            Inst::Input(1),
            Inst::Binary(BinaryFn::Mul, 0, 1),
            Inst::Input(2),
            Inst::Binary(BinaryFn::Add, 2, 3),
        ];
        let relu = [affine.clone(), vec![Inst::Unary(UnaryFn::Relu, 4)]].concat();
        let silu = [affine, vec![Inst::Unary(UnaryFn::Sigmoid, 4), Inst::Binary(BinaryFn::Mul, 4, 5)]].concat();
        let lanes = vec![0, 64, 0, 0, 4];
        let operands = [(Elem::F32, packed_strides(&dims, 4)), (Elem::F32, lanes.clone()), (Elem::F32, lanes)];
        for (insts, linear) in [(relu, true), (silu, false)] {
            let chain = Chain { insts };
            let spec = Loops::elementwise_into(&dims, &operands, chain.clone(), Elem::F32);
            let expected: Vec<f32> = (0..x.len())
                .map(|i| {
                    let c = i / (5 * 7 * 16) * 16 + i % 16;
                    chain.eval(&[x[i], scale[c], shift[c]])
                })
                .collect();
            for wide in [false, true] {
                let mut jit = Jit::with_wide(None, wide).expect("jit");
                let k = jit.add(&spec).expect("compiles");
                let code = jit.finish().expect("finishes");
                if wide && std::arch::is_x86_feature_detected!("avx2") {
                    let Entry::Wide(w) = &code.fns[k].0 else { panic!("not tiles") };
                    assert_eq!(w.dims, [3, 5 * 7 * 16], "rows are planes of blocks");
                    let avx512 = std::arch::is_x86_feature_detected!("avx512f");
                    assert_eq!(w.linear.is_some(), linear && avx512, "in registers where linear");
                }
                let ins: Vec<&[u8]> = [&x, &scale, &shift].iter().map(|v| bytemuck::cast_slice(v.as_slice())).collect();
                for threads in [1, 2] {
                    let mut y = vec![f32::NAN; x.len()];
                    code.call(k, &ins, bytemuck::cast_slice_mut(&mut y), threads).expect("runs");
                    assert_eq!(y, expected, "tiles: {wide}, linear: {linear}, threads: {threads}");
                }
            }
        }
    }
}
