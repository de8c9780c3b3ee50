//! A fused elementwise chain: a small SSA program over f32, evaluated element by element (how its inputs are
//! addressed, broadcast and cast is the kernel's business: [`crate::loops`]). Fusion builds chains from runs of
//! elementwise IR nodes (`stowage_compiler::fuse`); the CPU's JIT compiles each to one machine-code loop, the OpenCL
//! backend to one OpenCL C kernel.

use crate::func::{binary_scalar, native_binary, native_unary, unary_scalar, BinaryFn, UnaryFn};

/// One instruction; operands are indices of earlier instructions.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Inst {
    /// Element `i` of input `k` (or its only element, for a scalar input).
    Input(usize),
    /// A constant.
    Const(f32),
    /// A one-operand function.
    Unary(UnaryFn, usize),
    /// A two-operand function.
    Binary(BinaryFn, usize, usize),
}

/// A chain: instructions in order; the last one is the result.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Chain {
    /// The program.
    pub insts: Vec<Inst>,
}

impl Chain {
    /// True if every instruction has a native vector form (no call to a math function).
    pub fn vectorizable(&self) -> bool {
        self.insts.iter().all(|i| match i {
            Inst::Input(_) | Inst::Const(_) => true,
            Inst::Unary(f, _) => native_unary(*f),
            Inst::Binary(f, _, _) => native_binary(*f),
        })
    }

    /// Evaluates the chain on one element (the reference the JIT is tested against).
    pub fn eval(&self, inputs: &[f32]) -> f32 {
        let mut v: Vec<f32> = Vec::with_capacity(self.insts.len());
        for inst in &self.insts {
            let x = match *inst {
                Inst::Input(k) => inputs[k],
                Inst::Const(c) => c,
                Inst::Unary(f, a) => unary_scalar(f, v[a]),
                Inst::Binary(f, a, b) => binary_scalar(f, v[a], v[b]),
            };
            v.push(x);
        }
        v.last().copied().unwrap_or(0.0)
    }
}
