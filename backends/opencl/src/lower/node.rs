//! One node as its op family's lowering sees it: the slots it reads and writes, its output's type, and the checks
//! every family makes, each failing with [`ClError::Unsupported`] naming the node (what the planner is told).

use stowage_compiler::ir::{Graph, NodeData, ValueType};
use stowage_runtime::DatumType;

use super::launch;
use crate::codegen;
use crate::error::{ClError, Result};
use crate::exec::{ArgRef, StepKind};

/// What a family's lowering gives back: the step's op name and its work.
pub(super) type Lowered = (&'static str, StepKind);

/// The node being lowered.
pub(super) struct NodeCx<'g> {
    pub graph: &'g Graph,
    pub node: &'g NodeData,
    /// Slots of the node's inputs by position (a fused chain's: the chain's inputs).
    pub ins: Vec<Option<usize>>,
    /// The slot of the value the step writes: the first output (a Conv+Relu's: the ReLU's output).
    pub out: usize,
    /// That value's type.
    pub out_ty: ValueType,
    /// A ReLU that runs in the product's epilogue (after the residual term, where there is one).
    pub relu: bool,
    /// A residual term added in a convolution's epilogue: its input 3 (`stowage_compiler::lowering::residual`).
    pub residual: bool,
    /// An elementwise chain in a product's epilogue, its other inputs from input 4 on (`epilogue.rs`).
    pub chain: Option<crate::codegen::Epilogue>,
    /// A MatMul's operands (A, B) read through a transpose: the element strides of the operand's view over the
    /// transpose's input, which is then the input's slot (`prologue.rs`).
    pub views: [Option<Vec<usize>>; 2],
}

impl NodeCx<'_> {
    /// The error for what this backend has no kernel for here.
    pub fn unsupported(&self, reason: impl Into<String>) -> ClError {
        ClError::Unsupported { node: self.node.name.clone(), op: self.node.op.name(), reason: reason.into() }
    }

    /// The type of the node's input `i`, if present.
    pub fn in_ty(&self, i: usize) -> Option<ValueType> {
        self.node.inputs.get(i).copied().flatten().map(|v| self.graph.ty(v).clone())
    }

    /// The type of input `i`, which the op needs (`what` names it in the error).
    pub fn input(&self, i: usize, what: &str) -> Result<ValueType> {
        self.in_ty(i).ok_or_else(|| self.unsupported(format!("no {what}")))
    }

    /// Input `i` as a kernel argument.
    pub fn arg(&self, i: usize) -> Result<ArgRef> {
        self.ins
            .get(i)
            .copied()
            .flatten()
            .map(ArgRef::Slot)
            .ok_or_else(|| self.unsupported(format!("input {i} is missing")))
    }

    /// The output as a kernel argument.
    pub fn out_arg(&self) -> ArgRef {
        ArgRef::Slot(self.out)
    }

    /// The OpenCL storage type of `dt`'s elements, or a refusal naming the type.
    pub fn storage(&self, dt: DatumType) -> Result<&'static str> {
        codegen::dt_storage(dt).ok_or_else(|| self.unsupported(format!("{dt} data")))
    }

    /// The storage type of a product's or softmax's data: they read f16 and bf16 as float and sum in float; f64
    /// would need its own kernels.
    pub fn float_storage(&self, dt: DatumType) -> Result<&'static str> {
        match dt {
            DatumType::F32 | DatumType::F16 | DatumType::BF16 => Ok(codegen::dt_storage(dt).unwrap_or("float")),
            _ => Err(self.unsupported(format!("{dt} data (f32, f16 and bf16 only here)"))),
        }
    }

    /// Refuses elements a copy kernel does not move (other than 1, 2, 4 or 8 bytes).
    pub fn copyable(&self, size: usize) -> Result<()> {
        if matches!(size, 1 | 2 | 4 | 8) {
            Ok(())
        } else {
            Err(self.unsupported(format!("{size}-byte elements")))
        }
    }

    /// Input `i` as integers, when present; it must be a constant.
    pub fn const_ints(&self, i: usize) -> Result<Option<Vec<i64>>> {
        let Some(v) = self.node.inputs.get(i).copied().flatten() else { return Ok(None) };
        let t = self.graph.const_value(v).ok_or_else(|| self.unsupported(format!("run-time input {i}")))?;
        stowage_compiler::consts::to_i64s(t).map(Some).map_err(|e| self.unsupported(e.to_string()))
    }

    /// One launch of kernel `k` over `global` work items that writes the output alone.
    pub fn single(&self, op: &'static str, k: usize, args: Vec<ArgRef>, global: Vec<usize>) -> Lowered {
        let l = launch(k, args, global, None, vec![self.out_arg()]);
        (op, StepKind::Launches { outs: vec![self.out], scratch: vec![], launches: vec![l] })
    }

    /// [`NodeCx::single`] over every output element, reading input 0.
    pub fn unary_launch(&self, op: &'static str, k: usize) -> Result<Lowered> {
        let total: usize = self.out_ty.shape.iter().product();
        Ok(self.single(op, k, vec![self.arg(0)?, self.out_arg()], vec![total]))
    }
}
