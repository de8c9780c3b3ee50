//! What a generated kernel computes: a loop nest over a static iteration space, operands addressed through byte
//! strides, and a body that is either a fused f32 [`Chain`] or a copy.
//!
//! Strides carry every layout the planner can choose: broadcasting is a stride of 0, padded rows are a row stride
//! larger than the row, column-major operands and transposes are permuted strides. So one generator serves fused
//! elementwise chains with their broadcasting and dtype casts, and relayout copies.

use crate::chain::{Chain, Inst};
use crate::{KirError, Result};

/// How the elements of an operand are stored. A chain reads any of them as f32 (a cast on load) and writes f32; a
/// copy moves the bits of elements of 1, 2, 4 or 8 bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Elem {
    /// 32-bit float.
    F32,
    /// 64-bit float (narrowed to f32 on load).
    F64,
    /// Unsigned 8-bit integer (camera pixels).
    U8,
    /// Signed 8-bit integer.
    I8,
    /// Unsigned 16-bit integer.
    U16,
    /// Signed 16-bit integer.
    I16,
    /// Signed 32-bit integer.
    I32,
    /// Signed 64-bit integer.
    I64,
    /// Bits of an element of this many bytes (1, 2, 4 or 8), for copies of any datum type.
    Bits(usize),
    /// IEEE half precision, read as f32 and written rounded to nearest even: the operands and results of chains in
    /// a plan that stores values in f16 (OpenCL's; the CPU's JIT refuses them).
    F16,
    /// bfloat16 (the upper half of an f32), as [`Elem::F16`].
    BF16,
}

impl Elem {
    /// Bytes per element.
    pub fn size(self) -> usize {
        match self {
            Elem::U8 | Elem::I8 => 1,
            Elem::U16 | Elem::I16 | Elem::F16 | Elem::BF16 => 2,
            Elem::F32 | Elem::I32 => 4,
            Elem::F64 | Elem::I64 => 8,
            Elem::Bits(n) => n,
        }
    }

    /// True if a chain's vector loop can load it four lanes at a time.
    pub fn vector_load(self) -> bool {
        matches!(self, Elem::F32 | Elem::U8 | Elem::I8 | Elem::U16 | Elem::I16 | Elem::I32)
    }

    /// True for the half-width floats ([`Elem::F16`], [`Elem::BF16`]).
    pub fn is_half(self) -> bool {
        matches!(self, Elem::F16 | Elem::BF16)
    }

    /// The element a chain stores a value of `dt` in when the chain computes over `dt` ([`Elem::of`], and f16 and
    /// bf16 as themselves).
    pub fn stored(dt: stowage_runtime::DatumType) -> Option<Elem> {
        match dt {
            stowage_runtime::DatumType::F16 => Some(Elem::F16),
            stowage_runtime::DatumType::BF16 => Some(Elem::BF16),
            _ => Elem::of(dt, false),
        }
    }

    /// The element of a datum type, for chains (numbers that convert to f32) and for copies (any type).
    pub fn of(dt: stowage_runtime::DatumType, copy: bool) -> Option<Elem> {
        use stowage_runtime::DatumType as D;
        if copy {
            return matches!(dt.size_of(), 1 | 2 | 4 | 8).then(|| Elem::Bits(dt.size_of()));
        }
        Some(match dt {
            D::F32 => Elem::F32,
            D::F64 => Elem::F64,
            D::U8 | D::Bool => Elem::U8,
            D::I8 => Elem::I8,
            D::U16 => Elem::U16,
            D::I16 => Elem::I16,
            D::I32 => Elem::I32,
            D::I64 => Elem::I64,
            _ => return None,
        })
    }
}

/// One operand: its element and its byte stride along each axis of the iteration space.
#[derive(Clone, Debug, PartialEq)]
pub struct Operand {
    /// Element type.
    pub elem: Elem,
    /// Byte step per axis (0: broadcast along it).
    pub strides: Vec<usize>,
}

/// What the innermost loop does per element.
#[derive(Clone, Debug, PartialEq)]
pub enum Body {
    /// Evaluate the chain on the inputs (read as f32); the output is f32.
    Chain(Chain),
    /// Copy the one input's element to the output (same element size): a relayout.
    Copy,
}

/// A kernel: `out[i] = body(inputs[i])` for every index `i` of `dims`.
#[derive(Clone, Debug, PartialEq)]
pub struct Loops {
    /// The iteration space (the output's shape, after [`Loops::simplify`]).
    pub dims: Vec<usize>,
    /// Inputs, in the chain's `Inst::Input` order.
    pub inputs: Vec<Operand>,
    /// The output.
    pub output: Operand,
    /// The body.
    pub body: Body,
}

/// Element strides that read a packed tensor of `shape` at the indices of `out` (0 along broadcast axes).
pub fn strides_for(shape: &[usize], out: &[usize]) -> Vec<usize> {
    let mut st = vec![0; out.len()];
    let pad = out.len() - shape.len();
    let mut acc = 1;
    for a in (0..shape.len()).rev() {
        if shape[a] != 1 {
            st[a + pad] = acc;
        }
        acc *= shape[a];
    }
    st
}

/// Byte strides of a packed row-major `shape` of `size`-byte elements, broadcast (right-aligned) to `out`.
pub fn broadcast_strides(shape: &[usize], out: &[usize], size: usize) -> Vec<usize> {
    strides_for(shape, out).into_iter().map(|s| s * size).collect()
}

/// Byte strides of a packed row-major `shape`.
pub fn packed_strides(shape: &[usize], size: usize) -> Vec<usize> {
    let mut st = vec![0; shape.len()];
    let mut acc = size;
    for a in (0..shape.len()).rev() {
        st[a] = acc;
        acc *= shape[a];
    }
    st
}

impl Loops {
    /// A stable 64-bit key of the kernel this spec compiles to (FNV-1a of its debug form): how a built executable
    /// finds the kernel it linked in for a spec its lowering makes again.
    pub fn key(&self) -> u64 {
        format!("{self:?}").bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| (h ^ b as u64).wrapping_mul(0x100_0000_01b3))
    }

    /// A fused chain over `out` (packed f32 output); each input is packed row-major and broadcasts to `out`.
    pub fn elementwise(out: &[usize], inputs: &[(Elem, &[usize])], chain: Chain) -> Loops {
        let strided: Vec<(Elem, Vec<usize>)> =
            inputs.iter().map(|&(elem, shape)| (elem, broadcast_strides(shape, out, elem.size()))).collect();
        Loops::elementwise_strided(out, &strided, chain)
    }

    /// [`Loops::elementwise`] with each input's byte strides over `out` given (a caller's layout, a broadcast).
    pub fn elementwise_strided(out: &[usize], inputs: &[(Elem, Vec<usize>)], chain: Chain) -> Loops {
        Loops::elementwise_into(out, inputs, chain, Elem::F32)
    }

    /// [`Loops::elementwise_strided`] writing its packed result as `output` (f32, or f16 and bf16 for chains of a
    /// half-precision plan).
    pub fn elementwise_into(out: &[usize], inputs: &[(Elem, Vec<usize>)], chain: Chain, output: Elem) -> Loops {
        Loops {
            dims: out.to_vec(),
            inputs: inputs.iter().map(|(elem, strides)| Operand { elem: *elem, strides: strides.clone() }).collect(),
            output: Operand { elem: output, strides: packed_strides(out, output.size()) },
            body: Body::Chain(chain),
        }
        .simplify()
    }

    /// A copy of `shape` from `src` strides to `dst` strides (bytes), elements of `size` bytes.
    pub fn relayout(shape: &[usize], size: usize, src: Vec<usize>, dst: Vec<usize>) -> Loops {
        Loops {
            dims: shape.to_vec(),
            inputs: vec![Operand { elem: Elem::Bits(size), strides: src }],
            output: Operand { elem: Elem::Bits(size), strides: dst },
            body: Body::Copy,
        }
        .simplify()
    }

    /// The copy a Transpose is: a packed row-major `shape` permuted by `perm` into a packed result.
    pub fn transpose(shape: &[usize], perm: &[usize], size: usize) -> Loops {
        let src = packed_strides(shape, size);
        let out: Vec<usize> = perm.iter().map(|&p| shape[p]).collect();
        Loops::relayout(&out, size, perm.iter().map(|&p| src[p]).collect(), packed_strides(&out, size))
    }

    /// The same kernel over fewer axes: axes of extent 1 dropped, and neighbours merged where every operand steps
    /// through them as through one axis. Always at least one axis.
    pub fn simplify(mut self) -> Loops {
        let mut ops: Vec<&mut Operand> = self.inputs.iter_mut().chain(std::iter::once(&mut self.output)).collect();
        let mut dims = Vec::new();
        let mut strides: Vec<Vec<usize>> = vec![Vec::new(); ops.len()];
        for (a, &d) in self.dims.iter().enumerate() {
            if d == 1 {
                continue;
            }
            let merge = !dims.is_empty()
                && ops
                    .iter()
                    .zip(&strides)
                    .all(|(o, s): (&&mut Operand, &Vec<usize>)| s.last().copied() == Some(o.strides[a] * d));
            if merge {
                *dims.last_mut().expect("merged onto an axis") *= d;
                for (o, s) in ops.iter().zip(strides.iter_mut()) {
                    *s.last_mut().expect("an axis") = o.strides[a];
                }
            } else {
                dims.push(d);
                for (o, s) in ops.iter().zip(strides.iter_mut()) {
                    s.push(o.strides[a]);
                }
            }
        }
        if dims.is_empty() || self.dims.contains(&0) {
            let empty = self.dims.contains(&0);
            dims = vec![if empty { 0 } else { 1 }];
            strides.iter_mut().for_each(|s| *s = vec![0]);
        }
        for (o, s) in ops.iter_mut().zip(strides) {
            o.strides = s;
        }
        self.dims = dims;
        self
    }

    /// The kernel with at least two axes, so that the outermost one can be split into bands for threads while
    /// the innermost stays whole: one axis of `d` becomes `[d / 1024, 1024]` when 1024 divides it and there are
    /// at least 8 such rows, else `[1, d]`.
    pub fn banded(mut self) -> Loops {
        if self.dims.len() != 1 {
            return self;
        }
        let d = self.dims[0];
        let row = if d.is_multiple_of(1024) && d >= 8 * 1024 { 1024 } else { d.max(1) };
        self.dims = vec![d / row, row];
        for o in self.inputs.iter_mut().chain(std::iter::once(&mut self.output)) {
            o.strides = vec![o.strides[0] * row, o.strides[0]];
        }
        self
    }

    /// Bytes an operand spans: one past its last byte (0 for an empty iteration space).
    pub fn extent(&self, op: &Operand) -> usize {
        if self.dims.contains(&0) {
            return 0;
        }
        self.dims.iter().zip(&op.strides).map(|(&d, &s)| (d - 1) * s).sum::<usize>() + op.elem.size()
    }

    /// Checks what the generator relies on: strides per axis, a chain's inputs, a copy's element sizes, and an
    /// output that no two indices share (so bands of the outer axis can be written in parallel).
    pub fn check(&self) -> Result<()> {
        let bad = |m: String| Err(KirError::Invalid(m));
        let rank = self.dims.len();
        if rank == 0 || self.inputs.iter().chain([&self.output]).any(|o| o.strides.len() != rank) {
            return bad(format!("operands must have one stride per axis of {:?}", self.dims));
        }
        match &self.body {
            Body::Chain(chain) => {
                let written = matches!(self.output.elem, Elem::F32 | Elem::F16 | Elem::BF16);
                if !written || self.inputs.iter().any(|o| matches!(o.elem, Elem::Bits(_))) {
                    return bad("a chain reads numbers and writes f32, f16 or bf16".into());
                }
                let used = chain.insts.iter().filter_map(|i| match i {
                    Inst::Input(k) => Some(*k),
                    _ => None,
                });
                if chain.insts.is_empty() || used.clone().any(|k| k >= self.inputs.len()) {
                    return bad(format!(
                        "a chain of {} instructions over {} inputs",
                        chain.insts.len(),
                        self.inputs.len()
                    ));
                }
            }
            Body::Copy => {
                let sizes_ok = self.inputs.len() == 1
                    && self.inputs[0].elem.size() == self.output.elem.size()
                    && matches!(self.output.elem.size(), 1 | 2 | 4 | 8);
                if !sizes_ok {
                    return bad("a copy moves one input of the output's element size (1, 2, 4 or 8 bytes)".into());
                }
            }
        }
        // No two indices write the same bytes: taken from the smallest stride up, each axis steps past all of
        // the smaller ones.
        let mut axes: Vec<(usize, usize)> =
            self.dims.iter().zip(&self.output.strides).map(|(&d, &s)| (s, d)).filter(|&(_, d)| d > 1).collect();
        axes.sort_unstable();
        let mut span = self.output.elem.size();
        for (s, d) in axes {
            if s < span {
                return bad(format!("output strides {:?} overlap", self.output.strides));
            }
            span += s * (d - 1);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn broadcasting_and_packed_axes_merge() {
        // A per-channel scale [C, 1, 1] over [1, C, H, W]: two axes, channels and pixels.
        let l =
            Loops::elementwise(&[1, 8, 5, 6], &[(Elem::F32, &[1, 8, 5, 6]), (Elem::F32, &[8, 1, 1])], Chain::default());
        assert_eq!(l.dims, [8, 30]);
        assert_eq!(l.inputs[0].strides, [120, 4]);
        assert_eq!(l.inputs[1].strides, [4, 0]);
        assert_eq!(l.output.strides, [120, 4]);
        // Same shapes everywhere: one axis.
        let l = Loops::elementwise(&[2, 3, 4], &[(Elem::U8, &[2, 3, 4])], Chain::default());
        assert_eq!((l.dims.as_slice(), l.inputs[0].strides.as_slice()), (&[24][..], &[1][..]));
    }

    #[test]
    fn a_transpose_keeps_its_axes_and_checks() {
        let l = Loops::transpose(&[2, 3, 4], &[0, 2, 1], 4);
        assert_eq!(l.dims, [2, 4, 3]);
        assert_eq!(l.inputs[0].strides, [48, 4, 16]);
        assert_eq!(l.output.strides, [48, 12, 4]);
        l.check().expect("a valid copy");
        assert_eq!(l.extent(&l.inputs[0]), 96);
    }

    #[test]
    fn overlapping_outputs_are_refused() {
        let l = Loops::relayout(&[4, 4], 4, vec![16, 4], vec![4, 4]);
        assert!(l.check().is_err());
    }
}
