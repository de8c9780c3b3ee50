//! Which layouts each CPU kernel reads in place, as data for the planner, and the CPU target as the planner sees it
//! ([`CpuTarget`]). A value in a layout its consumer's kernel does not accept needs a relayout step first.
//!
//! Two kinds of acceptance differ in when the layout must be known ([`Accepts::at_lowering`]):
//! - read at run time: the kernel reads the strides of the tensor it is handed (the f32/f64 2-D MatMul through
//!   `gemm_strided`), so any accepted layout works without recompiling;
//! - fixed at lowering: the kernel is generated with the operands' strides as immediates (fused elementwise
//!   chains, casts, Transpose); lowering takes graph inputs' layouts from the plan
//!   ([`crate::LowerOptions::input_strides`]). A tensor of another layout reaching such a kernel at run time is
//!   packed first (a counted relayout).
//!
//! Every other kernel reads packed row-major input only and every kernel writes packed row-major output.

use stowage_compiler::ir::{Graph, NodeId, Op};
use stowage_compiler::plan::{Accepts, Backend, BlockRole, Granted, Precision, TargetSpec};
use stowage_runtime::{DatumType, LayoutSupport};

const ALL: &[LayoutSupport] = &[LayoutSupport::RowMajor, LayoutSupport::PaddedRows, LayoutSupport::ColumnMajor];

/// What the CPU kernel of `op` accepts for its inputs, given their ranks.
pub fn accepts(op: &Op, input_ranks: &[usize]) -> Accepts {
    match op {
        Op::Unary(_) | Op::Binary(_) | Op::Variadic(_) | Op::Clip | Op::Cast { .. } | Op::Transpose { .. } => {
            Accepts { layouts: ALL, at_lowering: true }
        }
        Op::MatMul if input_ranks == [2, 2] => Accepts { layouts: ALL, at_lowering: false },
        _ => Accepts::PACKED,
    }
}

/// The CPU as a planning target: host memory, every op of the IR.
pub struct CpuTarget {
    spec: TargetSpec,
}

impl CpuTarget {
    /// The CPU with `threads` kernel threads.
    pub fn new(threads: usize) -> CpuTarget {
        CpuTarget {
            spec: TargetSpec {
                name: "cpu".into(),
                space: "host".into(),
                memory: crate::HostBuffer::DESCRIPTOR,
                // About what the AVX-512 product sustains on one core here (docs/performance.md).
                gflops: 100.0 * threads.max(1) as f64,
                launch_us: 0.5,
            },
        }
    }
}

impl Backend for CpuTarget {
    fn spec(&self) -> &TargetSpec {
        &self.spec
    }

    fn supports(&self, _graph: &Graph, _node: NodeId) -> Result<(), String> {
        Ok(())
    }

    /// As [`accepts`], where lowering really makes the kernel that reads strides: an elementwise node only when
    /// it joins a generated chain ([`crate::lower::fuse::fusable`]), a Transpose unless of bools, a 2-D product
    /// of f32 or f64 (the strided product). Anything else reads packed rows.
    fn accepts(&self, graph: &Graph, node: NodeId, _input: usize) -> Accepts {
        let n = graph.node(node);
        let ranks: Vec<usize> = n.inputs.iter().flatten().map(|&v| graph.ty(v).rank()).collect();
        let dts: Vec<DatumType> = n.inputs.iter().flatten().map(|&v| graph.ty(v).dt).collect();
        match n.op {
            Op::Transpose { .. } if !dts.contains(&DatumType::Bool) => accepts(&n.op, &ranks),
            Op::MatMul if dts.iter().all(|d| matches!(d, DatumType::F32 | DatumType::F64)) => accepts(&n.op, &ranks),
            Op::Unary(_) | Op::Binary(_) | Op::Variadic(_) | Op::Clip | Op::Cast { .. }
                if crate::lower::fuse::fusable(graph, node) =>
            {
                accepts(&n.op, &ranks)
            }
            _ => Accepts::PACKED,
        }
    }

    /// With AVX-512F, in blocks of 16 channels (`kernels/blocked.rs`): an f32 2-D convolution of one group with
    /// constant weights (`conv_blocks.rs`) reads and writes either layout, a depthwise one (one output channel per
    /// input channel, `depthwise_blocks.rs`) keeps its input's, a 2-D MaxPool (without indices) or
    /// AveragePool keeps its input's, so does an inference BatchNormalization, a global pool reads either; elementwise steps on f32 values of one shape
    /// (and single elements, and per-channel operands where the step joins a generated chain) and a Concat along
    /// the channels keep theirs.
    fn channel_blocks(&self, graph: &Graph, node: NodeId) -> Option<(usize, BlockRole)> {
        channel_blocks(graph, node).filter(|_| crate::kernels::conv_blocks::available())
    }

    /// fp32 as asked; tf32 computed in fp32 (x86 has no TF32 arithmetic: the result is at least as exact as
    /// asked, and the plan shows it); fp16 and bf16 refused: the CPU's kernels store fp32.
    fn precision(&self, asked: Precision) -> Result<Granted, String> {
        match asked {
            Precision::Fp32 => Ok(Granted::as_asked(asked, "fp32 arithmetic")),
            Precision::Tf32 => Ok(Granted {
                asked,
                computed: Precision::Fp32,
                how: "the CPU has no TF32 arithmetic: products in fp32".into(),
            }),
            Precision::Fp16 | Precision::Bf16 => Err(format!("its kernels store fp32, not {asked}")),
        }
    }
}

/// [`CpuTarget::channel_blocks`] whatever the CPU (`STOWAGE_BLOCKED=off` turns them off: for measuring).
pub fn channel_blocks(graph: &Graph, node: NodeId) -> Option<(usize, BlockRole)> {
    use stowage_compiler::ir::{PoolKind, ValueDef};
    const BLOCK: usize = crate::kernels::blocked::BLOCK;
    if std::env::var_os("STOWAGE_BLOCKED").is_some_and(|v| v == "off") {
        return None;
    }
    let n = graph.node(node);
    let ty = |k: usize| n.inputs.get(k).copied().flatten().map(|v| graph.ty(v));
    let out = n.outputs.first().copied().flatten().map(|v| graph.ty(v))?;
    let f32_4d = |t: &stowage_compiler::ir::ValueType| t.dt == DatumType::F32 && t.shape.len() == 4;
    if !f32_4d(out) || !ty(0).is_some_and(f32_4d) {
        return None;
    }
    let role = match &n.op {
        Op::Conv(c) => {
            let w = n.inputs.get(1).copied().flatten()?;
            let constant =
                matches!(&graph.value(w).def, ValueDef::Const(t) if crate::kernels::weights::Weights::of(t).is_some());
            let bias_const =
                n.inputs.get(2).copied().flatten().is_none_or(|b| matches!(graph.value(b).def, ValueDef::Const(_)));
            let two_d = c.window.kernel.len() == 2;
            let channels = ty(0)?.shape[1];
            if !(constant && bias_const && two_d) {
                return None;
            }
            if c.group == 1 {
                BlockRole::Either
            } else if c.group == channels && out.shape[1] == channels {
                // Depthwise, one output channel per input channel (`depthwise_blocks.rs`).
                BlockRole::Same
            } else {
                return None;
            }
        }
        Op::Pool(p) => {
            let indices = n.outputs.get(1).copied().flatten().is_some();
            let two_d = p.window.kernel.len() == 2 && p.window.pads.len() == 4;
            (two_d && !indices && matches!(p.kind, PoolKind::Max | PoolKind::Average { .. }))
                .then_some(BlockRole::Same)?
        }
        Op::BatchNorm { training: false, .. }
            if n.outputs.len() == 1 && (1..5).all(|k| ty(k).is_some_and(|t| t.dt == DatumType::F32)) =>
        {
            BlockRole::Same
        }
        Op::GlobalPool(_) => BlockRole::Reads,
        Op::Concat { axis: 1 } if (0..n.inputs.len()).all(|k| ty(k).is_some_and(f32_4d)) => BlockRole::Along,
        Op::Unary(_) | Op::Binary(_) | Op::Variadic(_) | Op::Clip => {
            // A per-channel operand only where the node joins a generated chain, which reads it through the
            // blocks' strides (`lower/blocks.rs`, `chain`); a kernel of the node alone broadcasts by the packed
            // layout.
            let chained = stowage_compiler::lowering::fuse::fusable(graph, node);
            let fits = |k: usize| {
                ty(k).is_some_and(|t| {
                    let per_channel = chained && per_channel(&t.shape, &out.shape);
                    t.dt == DatumType::F32
                        && (t.shape == out.shape || t.shape.iter().product::<usize>() == 1 || per_channel)
                })
            };
            (0..n.inputs.len()).all(|k| n.inputs[k].is_none() || fits(k)).then_some(BlockRole::Along)?
        }
        _ => return None,
    };
    Some((BLOCK, role))
}

/// True when an operand of `shape` broadcasts to the 4-D `out` with one value per channel (or one for all
/// channels) of each batch item or of all: `[C, 1, 1]`, `[1, C, 1, 1]`, `[N, C, 1, 1]`, `[N, 1, 1, 1]`.
pub fn per_channel(shape: &[usize], out: &[usize]) -> bool {
    let Some(skip) = out.len().checked_sub(shape.len()).filter(|_| out.len() == 4) else { return false };
    let dim = |a: usize| a.checked_sub(skip).map_or(1, |i| shape[i]);
    dim(2) == 1 && dim(3) == 1 && (dim(1) == 1 || dim(1) == out[1]) && (dim(0) == 1 || dim(0) == out[0])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_kernels_take_every_layout_and_products_read_strides() {
        let chain = accepts(&Op::cast(stowage_runtime::DatumType::F32), &[4]);
        assert_eq!((chain.layouts.len(), chain.at_lowering), (3, true));
        assert!(!accepts(&Op::MatMul, &[2, 2]).at_lowering);
        assert_eq!(accepts(&Op::MatMul, &[3, 2]), Accepts::PACKED);
        assert_eq!(accepts(&Op::Concat { axis: 0 }, &[2, 2]), Accepts::PACKED);
    }

    #[test]
    fn per_channel_operands_are_one_value_per_channel_and_batch_item() {
        let out = [2, 32, 7, 7];
        for shape in [&[32, 1, 1][..], &[1, 32, 1, 1], &[2, 32, 1, 1], &[2, 1, 1, 1], &[1], &[1, 1]] {
            assert!(per_channel(shape, &out), "{shape:?}");
        }
        for shape in [&[32][..], &[1, 1, 7], &[1, 32, 7, 1], &[3, 32, 1, 1], &[1, 16, 1, 1], &[1, 1, 1, 1, 1]] {
            assert!(!per_channel(shape, &out), "{shape:?}");
        }
        assert!(!per_channel(&[32, 1, 1], &[32, 7, 7]), "a value of three axes is not in blocks");
    }
}
