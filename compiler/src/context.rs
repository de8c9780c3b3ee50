//! The pipeline as plain code: each pass is a method, run in order, timed, and followed by the verifier when
//! verification is on (debug builds and tests, or [`Context::set_verify`]).

use std::fmt;
use std::path::Path;
use std::time::{Duration, Instant};

use crate::error::ImportError;
use crate::ir::verify::{verify, VerifierError};
use crate::ir::{print, Graph};
use crate::onnx::{self, ImportConfig};
use crate::passes;

/// A compile error: the model's fault ([`ImportError`]) or a bug ([`VerifierError`]).
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The model or the options are wrong; the message names the file, node, input or attribute.
    #[error(transparent)]
    Import(#[from] ImportError),
    /// The graph cannot be stored in the precision asked (`--precision fp16`): the message names the node.
    #[error(transparent)]
    Storage(#[from] passes::storage::StorageError),
    /// A pass broke an invariant: a bug in stowage.
    #[error("after {pass}: {source}")]
    Verifier {
        /// The pass that ran last.
        pass: &'static str,
        /// The broken invariant.
        source: VerifierError,
    },
}

/// How long one pass took and how much it changed.
#[derive(Clone, Debug)]
pub struct PassTiming {
    /// Pass name.
    pub pass: &'static str,
    /// Wall time, verifier excluded.
    pub duration: Duration,
    /// Rewrites the pass made (nodes folded, removed or fused).
    pub changes: usize,
}

impl fmt::Display for PassTiming {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "pass {:<24} {:>9.3} ms  {} changes", self.pass, self.duration.as_secs_f64() * 1e3, self.changes)
    }
}

/// A graph on its way through the pipeline.
pub struct Context {
    /// The graph as the last pass left it.
    pub graph: Graph,
    verify: bool,
    timings: Vec<PassTiming>,
}

impl Context {
    /// Imports an ONNX model (timed as the pass `import`) and verifies it.
    pub fn import(path: impl AsRef<Path>, config: &ImportConfig) -> Result<Context, Error> {
        let start = Instant::now();
        let graph = onnx::load(path, config)?;
        let mut cx = Context::new(graph);
        cx.timings.push(PassTiming { pass: "import", duration: start.elapsed(), changes: cx.graph.order().len() });
        cx.check("import")?;
        Ok(cx)
    }

    /// Wraps a graph already built.
    pub fn new(graph: Graph) -> Context {
        Context { graph, verify: cfg!(debug_assertions), timings: Vec::new() }
    }

    /// Turns the verifier between passes on or off (on by default in debug builds).
    pub fn set_verify(&mut self, on: bool) -> &mut Self {
        self.verify = on;
        self
    }

    /// One line per pass run so far.
    pub fn timings(&self) -> &[PassTiming] {
        &self.timings
    }

    /// The graph's text form.
    pub fn print(&self) -> String {
        print::print(&self.graph)
    }

    /// The import-time passes, in order.
    pub fn optimize(&mut self) -> Result<(), Error> {
        self.fold_constants()?;
        self.remove_identities()?;
        self.fold_batchnorm()?;
        self.recognize_activations()?;
        self.recognize_layer_norms()?;
        self.square_powers()?;
        self.canonicalize_gemm()?;
        self.eliminate_dead_code()
    }

    /// Evaluates nodes whose inputs are all constants ([`passes::fold`]).
    pub fn fold_constants(&mut self) -> Result<(), Error> {
        self.run("fold_constants", passes::fold::run)
    }

    /// Removes Identity and inference-mode Dropout ([`passes::identity`]).
    pub fn remove_identities(&mut self) -> Result<(), Error> {
        self.run("remove_identities", passes::identity::run)
    }

    /// Folds BatchNormalization into the Conv before it ([`passes::batchnorm`]).
    pub fn fold_batchnorm(&mut self) -> Result<(), Error> {
        self.run("fold_batchnorm", passes::batchnorm::run)
    }

    /// Rewrites activations spelled out in several ops as the one op ([`passes::activations`]).
    pub fn recognize_activations(&mut self) -> Result<(), Error> {
        self.run("recognize_activations", passes::activations::run)
    }

    /// Rewrites layer normalisations spelled out in several ops as one node ([`passes::layer_norm`]).
    pub fn recognize_layer_norms(&mut self) -> Result<(), Error> {
        self.run("recognize_layer_norms", passes::layer_norm::run)
    }

    /// Rewrites `Pow(x, 2)` as `Mul(x, x)` ([`passes::powers`]).
    pub fn square_powers(&mut self) -> Result<(), Error> {
        self.run("square_powers", passes::powers::run)
    }

    /// Turns MatMul + Add (and Gemm without C + Add) into one Gemm ([`passes::gemm`]).
    pub fn canonicalize_gemm(&mut self) -> Result<(), Error> {
        self.run("canonicalize_gemm", passes::gemm::run)
    }

    /// Removes nodes no output depends on ([`passes::dce`]).
    pub fn eliminate_dead_code(&mut self) -> Result<(), Error> {
        self.run("eliminate_dead_code", passes::dce::run)
    }

    /// Stores every f32 value in `dt` (f16 or bf16) for a plan at `--precision fp16` or `bf16`
    /// ([`passes::storage`]), then verifies the graph whatever the verifier setting: the rewrite touches every
    /// value's type.
    pub fn store_floats_in(&mut self, dt: stowage_runtime::DatumType) -> Result<passes::storage::Stored, Error> {
        let start = Instant::now();
        let stored = passes::storage::run(&mut self.graph, dt)?;
        self.timings.push(PassTiming { pass: "store_floats", duration: start.elapsed(), changes: stored.retyped });
        verify(&self.graph).map_err(|source| Error::Verifier { pass: "store_floats", source })?;
        Ok(stored)
    }

    /// Runs `f` on the graph and inside every subgraph (`ir/subgraph.rs`, rule 3).
    fn run(&mut self, pass: &'static str, f: impl Fn(&mut Graph) -> usize) -> Result<(), Error> {
        let start = Instant::now();
        let mut changes = 0;
        crate::ir::subgraph::for_each_mut(&mut self.graph, &mut |g| changes += f(g));
        changes += f(&mut self.graph);
        self.timings.push(PassTiming { pass, duration: start.elapsed(), changes });
        self.check(pass)
    }

    fn check(&self, pass: &'static str) -> Result<(), Error> {
        if self.verify {
            verify(&self.graph).map_err(|source| Error::Verifier { pass, source })?;
        }
        Ok(())
    }
}
