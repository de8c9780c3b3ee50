//! `If` with its branches as subgraphs (`stowage_compiler::ir::subgraph`): each branch is lowered to a program of
//! its own when the node is, with the node's options; a run reads the condition and runs the branch it selects,
//! on the thread and pool the step runs on, so the branch not taken costs nothing. The branch's inputs are the
//! node's inputs after the condition, shared with the caller (no byte is copied); its outputs are the node's.
//! Its generated kernels are compiled when it is lowered, in built code too (they are not among the linked ones).

use stowage_compiler::ir::Branches;
use stowage_runtime::Tensor;

use super::{arg, lower_with, LowerOptions};
use crate::error::{CpuError, Result};
use crate::program::Kernel;

/// The kernel of an `If` whose branches are `b`.
pub(super) fn kernel(b: &Branches, options: &LowerOptions) -> Result<Kernel> {
    let options = LowerOptions { input_strides: Default::default(), linked: None, ..options.clone() };
    let then = lower_with(&b.then, &options)?;
    let otherwise = lower_with(&b.otherwise, &options)?;
    Ok(Box::new(move |a, ctx| {
        let cond = arg(a, 0)?.to_vec::<bool>()?;
        let taken = match cond.as_slice() {
            [c] => *c,
            _ => return Err(CpuError::NotImplemented(format!("a condition of {} elements", cond.len()))),
        };
        let branch = if taken { &then } else { &otherwise };
        let inputs = a[1..]
            .iter()
            .map(|t| t.cloned().ok_or_else(|| CpuError::NotImplemented("an If input omitted".into())))
            .collect::<Result<Vec<Tensor<'static>>>>()?;
        Ok(branch.run_within(inputs, ctx.threads)?.outputs)
    }))
}
