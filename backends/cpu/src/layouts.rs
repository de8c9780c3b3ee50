//! Which layouts each CPU kernel reads in place, as data for the planner: a value in a layout its consumer's
//! kernel does not accept needs a relayout step first (a generated copy, [`crate::jit::Loops::relayout`]).
//!
//! Two kinds of acceptance differ in when the layout must be known:
//! - [`Bound::AtRun`]: the kernel reads the strides of the tensor it is handed (the f32/f64 2-D MatMul through
//!   `gemm_strided`), so any accepted layout works without recompiling;
//! - [`Bound::AtLowering`]: the kernel is generated with the operands' strides as immediates (fused elementwise
//!   chains, casts, Transpose), so the layout must be fixed when the program is lowered. Lowering compiles packed
//!   row-major strides today; the planner passes the layouts it assigns. A tensor of another layout reaching such a
//!   kernel at run time is packed first (a counted relayout).
//!
//! Every other kernel reads packed row-major input only and every kernel writes packed row-major output.

use stowage_compiler::ir::Op;
use stowage_runtime::LayoutSupport;

/// When a kernel's accepted layouts must be fixed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Bound {
    /// The kernel reads the strides of each tensor at run time.
    AtRun,
    /// The strides are compiled into the kernel at lowering.
    AtLowering,
}

/// The layouts a kernel reads in place, for every data input of one node.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Accepts {
    /// Layouts read in place.
    pub layouts: &'static [LayoutSupport],
    /// When they must be known.
    pub bound: Bound,
}

const ALL: &[LayoutSupport] = &[LayoutSupport::RowMajor, LayoutSupport::PaddedRows, LayoutSupport::ColumnMajor];
const PACKED: Accepts = Accepts { layouts: &[LayoutSupport::RowMajor], bound: Bound::AtRun };

/// What the CPU kernel of `op` accepts for its inputs, given their ranks.
pub fn accepts(op: &Op, input_ranks: &[usize]) -> Accepts {
    match op {
        Op::Unary(_) | Op::Binary(_) | Op::Variadic(_) | Op::Clip | Op::Cast { .. } | Op::Transpose { .. } => {
            Accepts { layouts: ALL, bound: Bound::AtLowering }
        }
        Op::MatMul if input_ranks == [2, 2] => Accepts { layouts: ALL, bound: Bound::AtRun },
        _ => PACKED,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_kernels_take_every_layout_and_products_read_strides() {
        let chain = accepts(&Op::Cast { to: stowage_runtime::DatumType::F32 }, &[4]);
        assert_eq!((chain.layouts.len(), chain.bound), (3, Bound::AtLowering));
        assert_eq!(accepts(&Op::MatMul, &[2, 2]).bound, Bound::AtRun);
        assert_eq!(accepts(&Op::MatMul, &[3, 2]), PACKED);
        assert_eq!(accepts(&Op::Concat { axis: 0 }, &[2, 2]), PACKED);
    }
}
