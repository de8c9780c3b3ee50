//! The ops with subgraphs (`stowage_compiler::ir::subgraph`): each subgraph is lowered to a program of its own
//! when the node is, with the node's options, and runs on the thread and pool the step runs on; its inputs are
//! shared with the caller (no byte is copied). While it runs, the regions of the arena offered to the step's
//! outputs are withheld from it (`arena::withhold`); the step then writes its outputs there, one copy of each per
//! run (not per iteration). The subgraph's own values are neither planned nor counted in the measured peak (as a
//! kernel's scratch is not); its constants count among the program's. Its generated kernels are compiled when it
//! is lowered, in built code too (they are not among the linked ones).
//! - `If`: a run reads the condition and runs the branch it selects, so the branch not taken costs nothing; the
//!   branch's inputs are the node's inputs after the condition, its outputs the node's.
//! - `Loop`: the body runs while the iteration number is below the trip count (where given) and the condition
//!   holds (where given: the body's condition output is the next one; otherwise the loop does not end on it, but
//!   the body still reads it as its condition input, as the unrolled and iterated forms pass it), at most
//!   `MAX_ITERATIONS` times (then an error naming the iteration); each iteration's carried outputs are the next
//!   one's inputs as they are, and the last ones are the node's outputs.
//! - `Scan`: step t gives the body the states and slice t of each scan input along its axis (from the end where
//!   it is reversed), copied into a packed buffer of its own; each scan output is collected in place: made once,
//!   after the first step, in the region the plan gave it, and each step's slice is written there (one copy per
//!   element, the step's own buffer dropped at once), so no step's output outlives its step.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use stowage_compiler::ir::subgraph::MAX_ITERATIONS;
use stowage_compiler::ir::{Branches, LoopBody, ScanBody};
use stowage_runtime::{Tensor, TensorStorage};

use super::{arg, lower_with, LowerOptions};
use crate::error::{CpuError, Result};
use crate::program::Kernel;

/// How many times each branch of an `If` ran: then, else.
#[derive(Clone, Debug, Default)]
pub struct Taken(Arc<[AtomicU64; 2]>);

impl Taken {
    /// The counts, then first.
    pub fn counts(&self) -> [u64; 2] {
        [self.0[0].load(Ordering::Relaxed), self.0[1].load(Ordering::Relaxed)]
    }
}

/// Every `If` a subgraph's program counts (its own nested ones).
type Counted = Vec<(String, Taken)>;

/// The kernel of the `If` named `name` whose branches are `b`, with what it counts: its own branches, then those
/// of the `If`s inside them; and the bytes of constants its programs hold.
pub(super) fn branches(name: &str, b: &Branches, options: &LowerOptions) -> Result<(Kernel, Counted, usize)> {
    let options = LowerOptions {
        input_strides: Default::default(),
        blocked: Default::default(),
        linked: None,
        ..options.clone()
    };
    let then = lower_with(&b.then, &options)?;
    let otherwise = lower_with(&b.otherwise, &options)?;
    let taken = Taken::default();
    let mut counted = vec![(name.to_string(), taken.clone())];
    counted.extend(then.branches.iter().chain(&otherwise.branches).cloned());
    let consts = then.const_bytes() + otherwise.const_bytes();
    let kernel: Kernel = Box::new(move |a, ctx| {
        let cond = scalar::<bool>(arg(a, 0)?, "condition")?;
        taken_count(&taken, cond);
        let branch = if cond { &then } else { &otherwise };
        let inputs = a[1..]
            .iter()
            .map(|t| t.cloned().ok_or_else(|| CpuError::NotImplemented("an If input omitted".into())))
            .collect::<Result<Vec<Tensor<'static>>>>()?;
        let outputs = {
            let _withheld = crate::arena::withhold();
            branch.run_within(inputs, ctx.threads)?.outputs
        };
        placed(outputs)
    });
    Ok((kernel, counted, consts))
}

/// Counts a run of the then branch (`cond`) or the else branch.
fn taken_count(taken: &Taken, cond: bool) {
    taken.0[usize::from(!cond)].fetch_add(1, Ordering::Relaxed);
}

/// The one element of a condition or trip count `t`.
fn scalar<T: stowage_runtime::Datum + Copy>(t: &Tensor<'static>, what: &str) -> Result<T> {
    match t.to_vec::<T>()?.as_slice() {
        [x] => Ok(*x),
        other => Err(CpuError::NotImplemented(format!("a {what} of {} elements", other.len()))),
    }
}

/// The kernel of a `Loop` whose body is `l`, with what the body's `If`s count and the bytes of constants the
/// body's program holds.
pub(super) fn body(l: &LoopBody, options: &LowerOptions) -> Result<(Kernel, Counted, usize)> {
    let options = LowerOptions {
        input_strides: Default::default(),
        blocked: Default::default(),
        linked: None,
        ..options.clone()
    };
    let body = lower_with(&l.body, &options)?;
    let counted = body.branches.clone();
    let carried = l.carried;
    // The iteration number's and the condition's shapes: scalars, or [1] where the body declares them so.
    let consts = body.const_bytes();
    let counters: Vec<Vec<usize>> = body.inputs().iter().take(2).map(|b| b.shape.clone()).collect();
    let kernel: Kernel = Box::new(move |a, ctx| {
        let trips = a.first().copied().flatten().map(|t| scalar::<i64>(t, "trip count")).transpose()?;
        let conditioned = a.get(1).copied().flatten().is_some();
        // The body's condition input: the node's (true where it has none), then the body's own output of the
        // iteration before, whether or not the loop ends on it (as unrolled and iterated loops pass it).
        let mut cond = a.get(1).copied().flatten().map(|c| scalar::<bool>(c, "condition")).transpose()?.unwrap_or(true);
        let mut go = cond;
        let given = |k: usize| given(a, k, "Loop");
        let mut state = (2..2 + carried).map(given).collect::<Result<Vec<_>>>()?;
        let outer = (2 + carried..a.len()).map(given).collect::<Result<Vec<_>>>()?;
        let mut i = 0i64;
        let withheld = crate::arena::withhold();
        while go && trips.is_none_or(|m| i < m) {
            if i >= MAX_ITERATIONS {
                return Err(CpuError::NotImplemented(format!(
                    "the loop is still going after {MAX_ITERATIONS} iterations, the most stowage runs"
                )));
            }
            let mut inputs = Vec::with_capacity(2 + state.len() + outer.len());
            inputs.push(crate::storage::tensor_from_vec(&counters[0], vec![i])?);
            inputs.push(crate::storage::tensor_from_vec(&counters[1], vec![cond])?);
            inputs.append(&mut state);
            inputs.extend(outer.iter().cloned());
            let mut out = body.run_within(inputs, ctx.threads).map_err(|e| in_step(e, "Loop", i))?.outputs.into_iter();
            let next = out.next().ok_or_else(|| CpuError::NotImplemented("a body without outputs".into()))?;
            cond = scalar::<bool>(&next, "condition")?;
            go = !conditioned || cond;
            state = out.collect();
            i += 1;
        }
        drop(withheld);
        placed(state)
    });
    Ok((kernel, counted, consts))
}

/// The kernel of a `Scan` whose body is `sc`, with what the body's `If`s count and the bytes of constants the
/// body's program holds.
pub(super) fn scan(sc: &ScanBody, options: &LowerOptions) -> Result<(Kernel, Counted, usize)> {
    let options = LowerOptions {
        input_strides: Default::default(),
        blocked: Default::default(),
        linked: None,
        ..options.clone()
    };
    let body = lower_with(&sc.body, &options)?;
    let (counted, consts) = (body.branches.clone(), body.const_bytes());
    let sc = sc.clone();
    let kernel: Kernel = Box::new(move |a, ctx| {
        let (n, m) = (sc.states, sc.inputs.len());
        let given = |k: usize| given(a, k, "Scan");
        let mut states = (0..n).map(given).collect::<Result<Vec<_>>>()?;
        let scanned = (n..n + m).map(|k| packed(given(k)?)).collect::<Result<Vec<_>>>()?;
        let outer = (n + m..a.len()).map(given).collect::<Result<Vec<_>>>()?;
        let steps = match (scanned.first(), sc.inputs.first()) {
            (Some(t), Some(&(axis, _))) => t.shape()[axis],
            _ => 0,
        };
        let mut collected: Vec<Collected> = Vec::with_capacity(sc.outputs.len());
        let mut withheld = Some(crate::arena::withhold());
        for t in 0..steps {
            let mut inputs = Vec::with_capacity(a.len());
            inputs.append(&mut states);
            for (x, &(axis, reverse)) in scanned.iter().zip(&sc.inputs) {
                inputs.push(slice(x, axis, if reverse { steps - 1 - t } else { t })?);
            }
            inputs.extend(outer.iter().cloned());
            let out = body.run_within(inputs, ctx.threads).map_err(|e| in_step(e, "Scan", t as i64))?.outputs;
            let mut out = out.into_iter();
            states = out.by_ref().take(n).collect();
            let ys: Vec<Tensor<'static>> = out.collect();
            if t == 0 {
                // The scan outputs take their regions (outputs n.. of the step) once their slices' shapes are
                // known; the states take theirs (0..n) in order at the end.
                drop(withheld.take());
                for (j, (y, &(axis, _))) in ys.iter().zip(&sc.outputs).enumerate() {
                    crate::arena::seek(n + j);
                    collected.push(Collected::new(y, axis, steps)?);
                }
                crate::arena::seek(0);
                withheld = Some(crate::arena::withhold());
            }
            for ((c, y), &(_, reverse)) in collected.iter_mut().zip(ys).zip(&sc.outputs) {
                c.write(&y, if reverse { steps - 1 - t } else { t })?;
            }
        }
        drop(withheld);
        if steps == 0 && !sc.outputs.is_empty() {
            return Err(CpuError::NotImplemented("a Scan of no steps".into()));
        }
        let mut outputs = placed(states)?;
        for c in collected {
            outputs.push(c.buf.into_tensor()?);
        }
        Ok(outputs)
    });
    Ok((kernel, counted, consts))
}

/// Slice `t` of packed `x` along `axis`, that axis removed, packed.
fn slice(x: &Tensor<'static>, axis: usize, t: usize) -> Result<Tensor<'static>> {
    let shape = x.shape();
    let size = x.dt().size_of();
    let outer: usize = shape[..axis].iter().product();
    let inner = shape[axis + 1..].iter().product::<usize>() * size;
    let bytes = x.as_bytes()?;
    let mut out = Vec::with_capacity(outer * inner);
    for o in 0..outer {
        let at = (o * shape[axis] + t) * inner;
        out.extend_from_slice(&bytes[at..at + inner]);
    }
    let mut rest = shape.to_vec();
    rest.remove(axis);
    Ok(crate::storage::tensor_from_bytes(x.dt(), &rest, &out)?)
}

/// A scan output being collected: each step's slice written once into its place along `axis` (rule of the
/// module docs), in the region the plan gave the output where the step was offered one.
struct Collected {
    buf: crate::storage::HostBuffer,
    /// The first step's slice's shape (every step's must be the same).
    part: Vec<usize>,
    /// Steps along the axis, and bytes of each slice's rows before and from the axis.
    steps: usize,
    outer: usize,
    inner: usize,
}

impl Collected {
    /// Room for `steps` slices shaped as `first`, stacked along a new `axis`.
    fn new(first: &Tensor<'static>, axis: usize, steps: usize) -> Result<Collected> {
        let part = first.shape().to_vec();
        let outer: usize = part[..axis].iter().product();
        let inner = part[axis..].iter().product::<usize>() * first.dt().size_of();
        let mut full = part.clone();
        full.insert(axis, steps);
        let buf = crate::storage::HostBuffer::for_overwrite(first.dt(), &full)?;
        Ok(Collected { buf, part, steps, outer, inner })
    }

    /// Writes step slice `y` at place `at` along the axis.
    fn write(&mut self, y: &Tensor<'static>, at: usize) -> Result<()> {
        if y.shape() != self.part.as_slice() {
            return Err(CpuError::NotImplemented(format!(
                "a scan output of shape {:?} where the first step's was {:?}",
                y.shape(),
                self.part
            )));
        }
        let y = packed(y.clone())?;
        let src = y.as_bytes()?;
        let dst = self.buf.host_bytes_mut()?;
        for o in 0..self.outer {
            let to = (o * self.steps + at) * self.inner;
            dst[to..to + self.inner].copy_from_slice(&src[o * self.inner..(o + 1) * self.inner]);
        }
        Ok(())
    }
}

/// Input `k` of the `op` step whose inputs are `a`, shared (an omitted one is an error).
fn given(a: &[Option<&Tensor<'static>>], k: usize, op: &str) -> Result<Tensor<'static>> {
    a.get(k)
        .copied()
        .flatten()
        .cloned()
        .ok_or_else(|| CpuError::NotImplemented(format!("the {op}'s input {k} omitted")))
}

/// `outputs` written where the step's outputs are offered (its planned regions; memory of their own otherwise).
fn placed(outputs: Vec<Tensor<'static>>) -> Result<Vec<Tensor<'static>>> {
    outputs
        .iter()
        .map(|t| {
            let p = packed(t.clone())?;
            Ok(crate::storage::tensor_from_bytes(p.dt(), p.shape(), p.as_bytes()?)?)
        })
        .collect()
}

/// `e`, in iteration `i` of a `Loop` or step `i` of a `Scan` (`op`).
fn in_step(e: CpuError, op: &'static str, i: i64) -> CpuError {
    let what = if op == "Scan" { "step" } else { "iteration" };
    CpuError::Step { node: format!("{what} {i}"), op, source: Box::new(e) }
}

/// `t` packed row-major: itself where it is (no copy), else a packed copy.
fn packed(t: Tensor<'static>) -> Result<Tensor<'static>> {
    Ok(if t.is_row_major() { t } else { t.to_row_major()? })
}
