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
use stowage_compiler::plan::{Accepts, Backend, Granted, Precision, TargetSpec};
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
}
