//! A `Loop` iterated at run time: the part of a model compiled in stages (`stages.rs`) that is one `Loop` the
//! import could not unroll (its condition computed by its body, no trip count, or more iterations than
//! `expand::MAX_STEPS`). The rules:
//!
//! 1. **The body is a model.** Its inputs are the body's own (iteration number, condition, carried values), then
//!    the values it reads from around the loop; the initializers it reads from around it are its own. It is
//!    compiled for the tensors of an iteration, as any later part is (`stages.rs` rule 2: the values of those that
//!    set shapes, the shapes of the others), and each version is kept, so a body whose shapes do not change
//!    compiles once.
//! 2. **Iterations.** With trip count M (none: no bound) and condition c (none: true), iteration i runs while
//!    `i < M` and c; the body's condition output is the next c where the loop has a condition input and is ignored
//!    otherwise (as the ONNX spec and the unrolled form do). Reading c is one download per iteration where the body
//!    leaves it on a device (in the ledger). At most [`MAX_ITERATIONS`] run: a larger trip count is refused at
//!    once, a loop still going then is stopped, each an error naming the node.
//! 3. **Carried values stay where they are made.** The body adopts the devices the earlier parts and its own
//!    earlier versions opened, and an iteration's carried outputs are the next iteration's inputs as they are: a
//!    value a device made is found there (no copy per iteration). Values the body reads from around the loop are
//!    passed each iteration as they are (a host value is uploaded each time by a device that needs it).
//! 4. **Scan outputs** are each iteration's values stacked along a new first axis, on the host (each read as it
//!    is made, the stack bounded by the size limit on one value); they must agree in type and shape. A loop that
//!    runs no iteration and has scan outputs is an error naming the node (their shape is unknown), as in the
//!    unrolled form. Errors in an iteration name the node and the iteration.
//! 5. **Only top-level loops that end.** A loop nested in another node's subgraph is not iterated here: where a
//!    target runs `Loop` whole (the CPU) it is kept in the IR with its body as a subgraph
//!    (`stowage_compiler::ir::subgraph`, rule 6), and otherwise keeps the import's error; so does one with neither
//!    a trip count nor a condition.

use std::path::Path;
use std::rc::Rc;
use std::sync::Mutex;
use std::time::Instant;

use prost::Message;
use stowage_compiler::onnx::proto::{GraphProto, ModelProto};
use stowage_compiler::onnx::split::value_info;
use stowage_compiler::onnx::{self};
use stowage_runtime::{DatumType, Ledger, Tensor};

use crate::error::{DriverError, Result};
use crate::options::RunOptions;
use crate::stages::{key_of, later_options, Ran, Stage, Versions};

/// The most iterations a loop runs (rule 2): a trip count above it is refused before the first, and a loop still
/// going when it is reached stops with an error naming it.
pub const MAX_ITERATIONS: i64 = stowage_compiler::ir::subgraph::MAX_ITERATIONS;

/// A `Loop` iterated at run time.
pub(crate) struct LoopRun {
    /// The node's name.
    name: String,
    /// Its inputs by name: trip count and condition ("" when absent), then the carried values.
    inputs: Vec<String>,
    /// Its outputs' names.
    outputs: Vec<String>,
    /// The part's outputs, in order (some of the node's).
    part_outputs: Vec<String>,
    /// Iterations in the last run.
    iterations: Mutex<i64>,
    /// Values the part holds rather than takes: its fixed inputs and the initializers the node reads directly.
    held: Vec<(String, Tensor<'static>)>,
    /// The body as a model whose inputs are untyped (rule 1), and the outer names it reads, in order.
    body: ModelProto,
    outer: Vec<String>,
    /// The body model's inputs: the body's own, then `outer`.
    names: Vec<String>,
    /// The body's inputs whose values set its shapes.
    values: Vec<String>,
    versions: Versions,
    /// The devices earlier versions of the body opened, which later versions adopt (rule 3).
    adopted: Mutex<crate::backend::Adopted>,
    /// The shapes the body declares for its iteration number and condition (`[]` or `[1]`).
    counter_shapes: (Vec<usize>, Vec<usize>),
}

impl LoopRun {
    /// The loop of `part` (a model of one `Loop` node), when it is one; its fixed inputs are in `options`.
    pub(crate) fn of(part: &ModelProto, options: &RunOptions, model: &Path) -> Result<Option<LoopRun>> {
        let Some(g) = part.graph.as_ref() else { return Ok(None) };
        let [node] = g.node.as_slice() else { return Ok(None) };
        if node.op_type() != "Loop" {
            return Ok(None);
        }
        let name = onnx::node_name(node, 0);
        let fail = |m: String| DriverError::Model(format!("{}: node '{name}' (Loop): {m}", model.display()));
        let body = node
            .attribute
            .iter()
            .find(|a| a.name() == "body")
            .and_then(|a| a.g.as_ref())
            .ok_or_else(|| fail("its body is missing".into()))?;
        let carried = node.input.len().saturating_sub(2);
        if body.input.len() != carried + 2 || body.output.len() < carried + 1 {
            return Err(fail(format!(
                "its body takes {} inputs and makes {} outputs; with {carried} carried values it must take {} and \
                 make at least {}",
                body.input.len(),
                body.output.len(),
                carried + 2,
                carried + 1
            )));
        }
        let mut held: Vec<(String, Tensor<'static>)> =
            options.config.input_values.iter().map(|(n, t)| (n.clone(), t.clone())).collect();
        for t in g.initializer.iter().filter(|t| node.input.iter().any(|i| i == t.name())) {
            let v = onnx::tensor::decode(t, model.parent()).map_err(|e| fail(format!("'{}': {e}", t.name())))?;
            held.push((t.name().to_string(), v));
        }
        // Rule 1: what the body reads from around the loop: initializers become its own, the rest its inputs.
        let mut outer = Vec::new();
        let mut inits = body.initializer.clone();
        for n in onnx::outer_inputs(node) {
            match g.initializer.iter().find(|t| t.name() == n) {
                Some(t) => inits.push(t.clone()),
                None => outer.push(n.to_string()),
            }
        }
        let graph = GraphProto {
            name: Some(format!("{name}::body")),
            node: body.node.clone(),
            initializer: inits,
            output: body.output.clone(),
            ..Default::default()
        };
        let body_model = ModelProto { graph: Some(graph), ..part.clone() };
        let mut names: Vec<String> = body.input.iter().map(|i| i.name().to_string()).collect();
        names.extend(outer.iter().cloned());
        let mut untyped = body_model.clone();
        if let Some(g) = untyped.graph.as_mut() {
            g.input = names.iter().map(|n| value_info(n, DatumType::F32, &[])).collect();
        }
        let values = onnx::value_inputs(&untyped);
        Ok(Some(LoopRun {
            name,
            inputs: node.input.clone(),
            outputs: node.output.clone(),
            part_outputs: g.output.iter().map(|o| o.name().to_string()).collect(),
            iterations: Mutex::default(),
            held,
            body: body_model,
            outer,
            names,
            values,
            versions: Versions::default(),
            adopted: Mutex::default(),
            counter_shapes: (
                stowage_compiler::onnx::scalar_shape(&body.input[0]),
                stowage_compiler::onnx::scalar_shape(&body.input[1]),
            ),
        }))
    }

    /// The body's version the last iteration ran.
    pub(crate) fn last_stage(&self) -> Option<Rc<Stage>> {
        self.versions.last()
    }

    /// Runs the loop on `args` (its part's inputs by name), rules 2 to 4.
    pub(crate) fn run(
        &self,
        args: &[(String, Tensor<'static>)],
        model: &Path,
        options: &RunOptions,
        ledger: &Ledger,
    ) -> Result<Ran> {
        let fail =
            |m: String| DriverError::Run { backend: "driver", message: format!("node '{}' (Loop): {m}", self.name) };
        let find = |n: &str| -> Result<Tensor<'static>> {
            let found = args.iter().chain(&self.held).find(|(m, _)| m == n).map(|(_, t)| t.clone());
            found.ok_or_else(|| fail(format!("its input '{n}' was not made")))
        };
        let read = |n: &str, t: &Tensor<'static>| -> Result<Vec<u8>> {
            let packed = t.to_row_major().map_err(|e| fail(format!("'{n}': {e}")))?;
            Ok(packed.as_bytes().map_err(|e| fail(format!("'{n}': {e}")))?.to_vec())
        };
        let trips = match self.inputs.first().filter(|n| !n.is_empty()) {
            Some(n) => {
                let t = find(n)?;
                let v = t.to_vec::<i64>().map_err(|e| fail(format!("its trip count '{n}': {e}")))?;
                match v.as_slice() {
                    [m] => *m,
                    _ => return Err(fail(format!("its trip count '{n}' has {} elements, not one", v.len()))),
                }
            }
            None => i64::MAX,
        };
        let conditioned = self.inputs.get(1).is_some_and(|n| !n.is_empty());
        if trips > MAX_ITERATIONS && !conditioned {
            return Err(fail(format!(
                "a trip count of {trips} is more than the {MAX_ITERATIONS} iterations stowage runs"
            )));
        }
        let mut go = match self.inputs.get(1).filter(|n| !n.is_empty()) {
            Some(n) => read(n, &find(n)?)?.iter().any(|&b| b != 0),
            None => true,
        };
        let mut carried: Vec<Tensor<'static>> = self.inputs.iter().skip(2).map(|n| find(n)).collect::<Result<_>>()?;
        let outer: Vec<Tensor<'static>> = self.outer.iter().map(|n| find(n)).collect::<Result<_>>()?;
        let scans = self.body.graph.as_ref().map_or(0, |g| g.output.len()) - carried.len() - 1;
        let mut scanned: Vec<Vec<Tensor<'static>>> = vec![Vec::new(); scans];
        let mut peaks: Vec<(String, usize)> = Vec::new();
        let body_names = &self.names;
        let mut it: i64 = 0;
        let (it_shape, cond_shape) = (&self.counter_shapes.0, &self.counter_shapes.1);
        let mut cond = Tensor::from_vec(cond_shape, vec![go]).map_err(|e| fail(e.to_string()))?;
        let limit = options.config.value_limit();
        let mut scanned_bytes: Vec<Vec<u8>> = vec![Vec::new(); scans];
        while it < trips && go {
            if it == MAX_ITERATIONS {
                return Err(fail(format!("still going after {MAX_ITERATIONS} iterations, the most stowage runs")));
            }
            let counter = Tensor::from_vec(it_shape, vec![it]).map_err(|e| fail(e.to_string()))?;
            let mut inputs = vec![counter, cond.clone()];
            inputs.extend(carried.iter().cloned());
            inputs.extend(outer.iter().cloned());
            let named: Vec<(String, Tensor<'static>)> = body_names.iter().cloned().zip(inputs).collect();
            let in_iteration = |e: DriverError| fail(format!("iteration {it}: {e}"));
            let stage = self.version(&named, model, options)?;
            let (outs, p) = stage.run(&named, model, &later_options(options), ledger).map_err(in_iteration)?;
            // Iterations run one after another in the body's arenas: the peak is the largest.
            for (space, bytes) in p {
                match peaks.iter_mut().find(|(s, _): &&mut (String, usize)| *s == space) {
                    Some(e) => e.1 = e.1.max(bytes),
                    None => peaks.push((space, bytes)),
                }
            }
            let mut outs = outs.into_iter().map(|(_, t)| t);
            cond = outs.next().ok_or_else(|| fail("its body made no condition".into()))?;
            if conditioned {
                go = read("condition", &cond)?.iter().any(|&b| b != 0);
            }
            carried = outs.by_ref().take(carried.len()).collect();
            // Rule 4: each scan value read as it comes, the stack bounded by the size limit.
            for (j, t) in outs.enumerate() {
                scanned_bytes[j].extend(read("scan output", &t)?);
                if scanned_bytes[j].len() > limit {
                    return Err(fail(format!(
                        "scan output {j} passes {limit} bytes in iteration {it}: more than the limit on one value \
                         (raise it with --max-value-bytes)"
                    )));
                }
                scanned[j].push(t);
            }
            it += 1;
        }
        let mut results: Vec<(String, Tensor<'static>)> = self.outputs.iter().cloned().zip(carried).collect();
        for (j, parts) in scanned.into_iter().enumerate() {
            let name = self.outputs.get(results.len()).cloned().unwrap_or_default();
            let first = parts.first().ok_or_else(|| {
                fail("it ran no iteration and has scan outputs (of unknown shape): not supported".into())
            })?;
            let (dt, shape) = (first.dt(), first.shape().to_vec());
            for (k, t) in parts.iter().enumerate() {
                if t.dt() != dt || t.shape() != shape.as_slice() {
                    return Err(fail(format!(
                        "scan output {j} is {dt}{shape:?} in iteration 0 and {}{:?} in iteration {k}",
                        t.dt(),
                        t.shape()
                    )));
                }
            }
            let bytes = std::mem::take(&mut scanned_bytes[j]);
            let mut stacked = vec![parts.len()];
            stacked.extend(shape);
            let t = Tensor::from_bytes(dt, &stacked, &bytes).map_err(|e| fail(e.to_string()))?;
            results.push((name, t));
        }
        *self.iterations.lock().unwrap_or_else(|p| p.into_inner()) = it;
        let ordered = self
            .part_outputs
            .iter()
            .map(|o| {
                // A part's output may be one of its inputs or held values, passed through.
                let found = results.iter().chain(args).chain(&self.held).find(|(n, _)| n == o).cloned();
                found.ok_or_else(|| fail(format!("'{o}' is none of its outputs")))
            })
            .collect::<Result<_>>()?;
        Ok((ordered, peaks))
    }

    /// The line `stowage run` shows for the loop.
    pub(crate) fn line(&self) -> String {
        let iterations = *self.iterations.lock().unwrap_or_else(|p| p.into_inner());
        let versions = self.versions.compiled();
        format!(
            "node '{}' (Loop) is iterated at run time: {iterations} iteration{} in the last run, {versions} version{} \
             of its body compiled",
            self.name,
            if iterations == 1 { "" } else { "s" },
            if versions == 1 { "" } else { "s" }
        )
    }

    /// The body compiled for `named`, or the version kept for them (rule 1).
    fn version(&self, named: &[(String, Tensor<'static>)], model: &Path, options: &RunOptions) -> Result<Rc<Stage>> {
        let key = key_of(named, |n, _| self.values.iter().any(|v| v == n))?;
        self.versions.get(key, || {
            let mut body = self.body.clone();
            if let Some(g) = body.graph.as_mut() {
                g.input = named.iter().map(|(n, t)| value_info(n, t.dt(), t.shape())).collect();
            }
            let mut options = later_options(options);
            options.adopted.0.extend(self.adopted.lock().unwrap_or_else(|p| p.into_inner()).0.iter().cloned());
            let stage =
                Stage::new(&prost::bytes::Bytes::from(body.encode_to_vec()), model, named, &options, Instant::now())
                    .map_err(|e| {
                        DriverError::Model(format!(
                            "{e} (compiling, at run time, the body of node '{}' (Loop))",
                            self.name
                        ))
                    })?;
            // Rule 3: later versions adopt the devices this one opened.
            let mut adopted = RunOptions { adopted: Default::default(), ..options.clone() };
            stage.adopt_into(&mut adopted);
            self.adopted.lock().unwrap_or_else(|p| p.into_inner()).0.extend(adopted.adopted.0);
            Ok(stage)
        })
    }
}
