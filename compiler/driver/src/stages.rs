//! Models compiled in stages: what runs a model with a node that needs, to be compiled, a value known only at run
//! time (a `NonZero`, `NonMaxSuppression` or `Unique` of computed data, a `TopK` whose `K` is computed, a `Loop`
//! whose trip count is, a `ConstantOfShape` of a computed shape, a top-level `If` whose condition is computed:
//! docs/compiler.md, "Values whose shape is known only at run time"). The rules:
//!
//! 1. **Cut.** When importing a model stops at top-level node N for such a value (`DriverError::AtRunTime`), the
//!    model is cut around N (`stowage_compiler::onnx::split`): the part before N is compiled now, as any model is
//!    (and cut again if it stops too); N alone, and the part after it, are compiled at run time. (Where every
//!    target runs an `If` whole, as on the CPU alone, a top-level `If` whose branches agree is kept as one node
//!    instead, and only one that cannot be kept is cut at: `onnx/branch.rs`, rule 2.)
//! 2. **Specialised, then kept.** A later part is compiled for the tensors it is given: the values of those that
//!    set shapes (`Part::value_inputs`; for N, the value it needed, and when N has subgraphs whose shapes hang on
//!    what they read from around N, those values too, up to [`MAX_FIXED_ELEMENTS`] each: tried once without, then
//!    kept so), the shapes of the others. Each
//!    compiled part is kept under that key, the [`MAX_KEPT`] last used, so a part whose shapes recur is compiled
//!    once ("lowered once per distinct shape and kept"). A part of one node that stops again is an error: the
//!    import's own line, naming the node.
//! 3. **Planned per part, on the same devices.** Each compiled part is a [`Session`]: planned over the same
//!    targets, its copies in the same ledger. A later part adopts the devices the parts before it opened
//!    (`OpenedTarget::shared`), so a value one part leaves on a device is an input the next finds there: planned
//!    where it lives, not moved. Only what a part needs on the host moves: the values that set its shapes (read for
//!    its key, one download each where they live on a device) and what its plan places on the host. The report
//!    lists the copies planned by every part that ran, in order.
//! 4. **Not with everything.** `--state` and `--input-device` are refused with a staged model (and a top-level
//!    `If` with a run-time condition is then not cut at: on the CPU it is an `Op::If` with its branches as
//!    subgraphs, elsewhere its `Where` form). Sequences and optionals cross the cuts as their tensors and forms
//!    (`crossing.rs`).
//! 5. **Built ahead where it can be.** `stowage build` and typed modules cut where a run would, at build time
//!    (`build/staged.rs`), and compile the part before the innermost cut ahead of time, as any built model; the
//!    built code carries the cuts ([`RunOptions::built_cuts`]) and the model less the weights only that part reads,
//!    and at run time cuts there again without trying to compile first: the first part runs as built, the later
//!    parts compile as the runs reach them (rules 2 and 3), with the JIT, never with the built graph, plan or
//!    kernels. A part of one `Loop`, which a run iterates, is cut from an empty first part.
//! 6. **Branches counted.** A cut at an `If` counts the runs that took each branch (its condition read from the
//!    values the node part is given, as its key is), and its line says so: `the then branch 3 times, the else
//!    branch once`.
//! 7. **Both branches planned.** A cut at an `If` compiles the branch a run does not take too, for the same inputs,
//!    and its line gives each branch's planned copies: `branches.rs` has the rule in full.

use std::path::Path;
use std::rc::Rc;
use std::sync::Mutex;
use std::time::Instant;

use prost::Message;
use stowage_compiler::onnx::split::{self, Part};
use stowage_compiler::onnx::structure::Structure;
use stowage_compiler::onnx::{self};
use stowage_runtime::{DatumType, Ledger, Tensor};

use crate::crossing::{self, Forms};
use crate::error::{DriverError, Result};
use crate::loops::LoopRun;
use crate::options::RunOptions;
use crate::session::Session;

mod branches;
pub(crate) use branches::taken;

/// How many compiled versions of one later part are kept (rule 2).
pub const MAX_KEPT: usize = 8;

/// The most elements of a value a node's subgraphs read from around it that is fixed as a value (rule 2): shapes,
/// sizes and indices are small; a feature map is not fixed, only its shape.
pub const MAX_FIXED_ELEMENTS: usize = 4096;

/// A model compiled whole, or cut around a node (rule 1).
pub(crate) enum Stage {
    /// Compiled whole.
    Whole(Box<Session>),
    /// Cut.
    Cut(Box<Cut>),
    /// A `Loop` iterated at run time (`loops.rs`).
    Loop(Box<LoopRun>),
}

/// A model cut around one node.
pub(crate) struct Cut {
    /// The part before the node (`None`: nothing runs before it).
    before: Option<Stage>,
    /// The node's name and op type.
    node: (String, String),
    /// The node alone, and the part after it.
    later: Vec<Later>,
    /// The model's outputs, in order.
    outputs: Vec<String>,
    /// In built code (rule 5): the precision the build asked of each target, which the parts compiled at run time
    /// are asked too (the built options carry none: the built plan holds them).
    asked: Vec<(String, stowage_compiler::plan::Precision)>,
    /// For a cut at an `If` (rules 6 and 7): which branch each run took, and both branches' planned copies.
    branches: branches::Branches,
}

/// A part compiled at run time for the tensors it is given (rule 2).
struct Later {
    part: Part,
    /// The part's inputs that set shapes: their values are part of the key.
    values: Vec<String>,
    /// What a node's subgraphs read from around it (`onnx::value_inputs` does not look inside subgraphs): fixed
    /// as values, and part of the key, once compiling without them stopped for a value (`fix_outer`).
    outer: Vec<String>,
    fix_outer: Mutex<bool>,
    versions: Versions,
}

/// What a run of a stage gives: the outputs by name, and the peak bytes per memory space.
pub(crate) type Ran = (Vec<(String, Tensor<'static>)>, Vec<(String, usize)>);

/// Each input's datum type and shape, and its bytes when it sets shapes.
pub(crate) type Key = Vec<(DatumType, Vec<usize>, Option<Vec<u8>>)>;

impl Stage {
    /// Compiles `bytes` (the model `model` names) for `inputs` as [`Session::new`] does, cutting it where a node
    /// needs a value known only at run time (rule 1); a part of one node is not cut again (a `Loop` is iterated,
    /// `loops.rs`; anything else is the import's error).
    pub(crate) fn new(
        bytes: &prost::bytes::Bytes,
        model: &Path,
        inputs: &[(String, Tensor<'static>)],
        options: &RunOptions,
        start: Instant,
    ) -> Result<Stage> {
        // Rule 5: built code cuts where its build did, and compiles nothing before.
        let built = options.built_cuts.split_first();
        let (index, message) = match built {
            Some((&index, _)) => (index, String::new()),
            None => match Session::shared(bytes, model, inputs, options, start) {
                Ok(s) => return Ok(Stage::Whole(Box::new(s))),
                Err(DriverError::AtRunTime { index, message }) if options.built_graph.is_none() => (index, message),
                Err(e) => return Err(e),
            },
        };
        // Decoded with copies: the parts cut from it live as long as the stage (`Later`, `LoopRun`), and must not
        // hold the model file's mapping (`outcome::map_model`) or a whole copy of the model.
        let proto = onnx::decode_within(bytes, options.config.value_limit())
            .map_err(|e| DriverError::Model(format!("{}: {e}", model.display())))?;
        let nodes = proto.graph.as_ref().map_or(0, |g| g.node.len());
        if let Some((_, rest)) = built {
            let cut = split::split(&proto, index).ok_or_else(|| {
                DriverError::Built(format!("the cut built in at node {index} does not fit the model built in"))
            })?;
            return Stage::cut(
                cut,
                &proto,
                index,
                model,
                inputs,
                &RunOptions { built_cuts: rest, ..options.clone() },
                start,
            );
        }
        refuse_cut(options, message.clone())?;
        if nodes == 1 {
            // A Loop the import could not unroll is iterated (`loops.rs`).
            if let Some(l) = LoopRun::of(&proto, options, model)? {
                return Ok(Stage::Loop(Box::new(l)));
            }
        }
        let Some(cut) = split::split(&proto, index).filter(|_| nodes > 1) else {
            return Err(DriverError::AtRunTime { index, message });
        };
        Stage::cut(cut, &proto, index, model, inputs, options, start)
    }

    /// The stage of `proto` cut at its node `index` as `cut` says (rule 1): the part before compiled now (in built
    /// code, the built graph when no cut is left, rule 5), the node and the part after as the runs reach them.
    fn cut(
        cut: split::Split,
        proto: &onnx::proto::ModelProto,
        index: usize,
        model: &Path,
        inputs: &[(String, Tensor<'static>)],
        options: &RunOptions,
        start: Instant,
    ) -> Result<Stage> {
        // Rule 3: a part's outputs are read by the parts after it, so their downloads are planned.
        let options = &RunOptions { read_outputs: true, ..options.clone() };
        let node = &proto.graph.as_ref().expect("split has a graph").node[index];
        let node = (onnx::node_name(node, index), node.op_type().to_string());
        let before = match cut.before.graph.as_ref() {
            _ if options.built_graph.is_some() => {
                Some(Stage::new(&prost::bytes::Bytes::from(cut.before.encode_to_vec()), model, inputs, options, start)?)
            }
            Some(g) if !g.node.is_empty() || !g.output.is_empty() => {
                Some(Stage::new(&prost::bytes::Bytes::from(cut.before.encode_to_vec()), model, inputs, options, start)?)
            }
            _ => None,
        };
        let later = std::iter::once(cut.node).chain(cut.after).map(Later::new).collect();
        // Rule 5: the precision asked at build time, as the first part's plan records it, target by target.
        let asked = match before.as_ref().and_then(Stage::first_plan) {
            Some(plan) if options.built_graph.is_some() => {
                let names = options.target.split(',').map(|t| t.trim().to_string());
                names.zip(plan.precisions.iter().map(|g| g.asked)).collect()
            }
            _ => Vec::new(),
        };
        let branches = branches::Branches::default();
        Ok(Stage::Cut(Box::new(Cut { before, node, later, outputs: cut.outputs, asked, branches })))
    }

    /// Runs once on `inputs` (by name; extra ones are ignored), recording copies in `ledger`; the outputs by name,
    /// and the peak bytes per memory space, added up over the parts (each holds its own arenas).
    pub(crate) fn run(
        &self,
        inputs: &[(String, Tensor<'static>)],
        model: &Path,
        options: &RunOptions,
        ledger: &Ledger,
    ) -> Result<Ran> {
        let cut = match self {
            Stage::Whole(s) => {
                let graph = &s.cx.graph;
                let given: Vec<(String, Tensor<'static>)> = inputs
                    .iter()
                    .filter(|(n, _)| graph.inputs().iter().any(|&v| graph.value(v).name == *n))
                    .cloned()
                    .collect();
                let ran = s.run(&given, ledger)?;
                let names = graph.outputs().iter().map(|o| o.name.clone());
                return Ok((names.zip(ran.outputs).collect(), ran.peaks));
            }
            Stage::Cut(c) => c,
            Stage::Loop(l) => return l.run(inputs, model, options, ledger),
        };
        let mut values: Vec<(String, Tensor<'static>)> = inputs.to_vec();
        // Inputs the caller fixed (`--input-value`) are inputs of the later parts like any other.
        for (n, t) in &options.config.input_values {
            values.push((n.clone(), t.clone()));
        }
        // Sequences and optionals cross the cuts as their tensors and forms (`crossing.rs`).
        let mut forms = crossing::input_forms(&options.config.input_structures);
        let mut peaks: Vec<(String, usize)> = Vec::new();
        // Rule 3: the later parts adopt the devices of the parts before them.
        let mut options = options.clone();
        if let Some(b) = &cut.before {
            let (outs, p) = b.run(inputs, model, &options, ledger)?;
            add_peaks(&mut peaks, p);
            values.extend(outs);
            forms.extend(b.forms());
            b.adopt_into(&mut options);
        }
        if !cut.asked.is_empty() {
            options.planning.target_precisions.clone_from(&cut.asked);
        }
        let branch = cut.branch(&values);
        if let Some(then) = branch {
            cut.count(then);
        }
        for (i, later) in cut.later.iter().enumerate() {
            let (outs, p) = later.run(&values, &forms, model, &options, ledger, &cut.node)?;
            if let (0, Some(then)) = (i, branch) {
                cut.plan_both(then, &values, &forms, model, &options);
            }
            add_peaks(&mut peaks, p);
            values.extend(outs);
            if let Some(stage) = later.last_stage() {
                forms.extend(stage.forms());
                stage.adopt_into(&mut options);
            }
        }
        Ok((crossing::outputs(&values, &forms, &cut.outputs)?.0, peaks))
    }

    /// The forms of the sequences and optionals among this stage's outputs, as its last run made them
    /// (`crossing.rs`, rule 1).
    pub(crate) fn forms(&self) -> Forms {
        match self {
            Stage::Whole(s) => crossing::structured(&s.cx.graph.metadata.structured_outputs),
            Stage::Loop(_) => Vec::new(),
            Stage::Cut(c) => {
                let mut forms: Forms = c.before.as_ref().map(Stage::forms).unwrap_or_default();
                forms.extend(c.later.iter().filter_map(Later::last_stage).flat_map(|s| s.forms()));
                forms.retain(|(n, _)| c.outputs.contains(n));
                forms
            }
        }
    }

    /// Every model output's form, in order, when one is a sequence or an optional (none otherwise), as the last
    /// run made them, or as the caller gave them (`inputs`: an input passed through; `crossing.rs`, rule 3).
    pub(crate) fn output_forms(&self, inputs: &Forms) -> Forms {
        let mut forms = inputs.clone();
        forms.extend(self.forms());
        match self {
            Stage::Cut(c) if c.outputs.iter().any(|o| forms.iter().any(|(n, _)| n == o)) => c
                .outputs
                .iter()
                .map(|o| match forms.iter().find(|(n, _)| n == o) {
                    Some(f) => f.clone(),
                    None => (o.clone(), Structure::Tensor(o.clone())),
                })
                .collect(),
            Stage::Whole(s) => s.cx.graph.metadata.structured_outputs.clone(),
            _ => Vec::new(),
        }
    }

    /// The plan of the part that runs first: the session compiled before any run.
    pub(crate) fn first_plan(&self) -> Option<&stowage_compiler::plan::Plan> {
        match self {
            Stage::Whole(s) => Some(&s.plan),
            Stage::Cut(c) => c.before.as_ref()?.first_plan(),
            Stage::Loop(_) => None,
        }
    }

    /// Adds the targets the last run's sessions opened to those `options` adopts (rule 3).
    pub(crate) fn adopt_into(&self, options: &mut RunOptions) {
        self.each_session(&mut |s| options.adopted.0.extend(s.opened.iter().filter_map(|o| o.shared())));
    }

    /// Calls `f` on each session the last run used, in the order they ran.
    pub(crate) fn each_session(&self, f: &mut dyn FnMut(&Session)) {
        match self {
            Stage::Whole(s) => f(s),
            Stage::Loop(l) => {
                if let Some(body) = l.last_stage() {
                    body.each_session(f);
                }
            }
            Stage::Cut(c) => {
                if let Some(b) = &c.before {
                    b.each_session(f);
                }
                for later in &c.later {
                    if let Some(stage) = later.last_stage() {
                        stage.each_session(f);
                    }
                }
            }
        }
    }

    /// One line per cut, in the order the cuts run: the node, and how many versions of its parts were compiled.
    pub(crate) fn cuts(&self) -> Vec<String> {
        let c = match self {
            Stage::Cut(c) => c,
            Stage::Loop(l) => {
                let mut lines = vec![l.line()];
                lines.extend(l.last_stage().map(|s| s.cuts()).unwrap_or_default());
                return lines;
            }
            Stage::Whole(_) => return Vec::new(),
        };
        let mut lines = c.before.as_ref().map(Stage::cuts).unwrap_or_default();
        let compiled: Vec<String> = c.later.iter().map(|l| l.versions.compiled().to_string()).collect();
        lines.push(format!(
            "node '{}' ({}) needs a value known only at run time: it and what follows it were compiled at run time \
             ({} version{} of the node, {} of the rest)",
            c.node.0,
            c.node.1,
            compiled[0],
            if compiled[0] == "1" { "" } else { "s" },
            compiled.get(1).map_or("none", String::as_str)
        ));
        if c.node.1 == "If" {
            if let Some(last) = lines.last_mut() {
                last.push_str(&c.branch_words());
            }
        }
        for l in &c.later {
            if let Some(stage) = l.last_stage() {
                lines.extend(stage.cuts());
            }
        }
        lines
    }
}

impl Later {
    fn new(part: Part) -> Later {
        let values = part.value_inputs();
        let mut outer = Vec::new();
        if let Some([node]) = part.model.graph.as_ref().map(|g| g.node.as_slice()) {
            for name in onnx::outer_inputs(node) {
                if part.inputs.iter().any(|i| i == name) && !values.iter().any(|v| v == name) {
                    outer.push(name.to_string());
                }
            }
        }
        Later { part, values, outer, fix_outer: Mutex::default(), versions: Versions::default() }
    }

    /// Whether the outer value `n` is fixed as a value once `fix_outer` is set: those small enough to set shapes
    /// ([`MAX_FIXED_ELEMENTS`]), not whole activations.
    fn fixes(&self, n: &str, t: &Tensor<'static>) -> bool {
        self.outer.iter().any(|o| o == n) && t.len() <= MAX_FIXED_ELEMENTS
    }

    /// The version the last run used.
    fn last_stage(&self) -> Option<Rc<Stage>> {
        self.versions.last()
    }

    /// Runs the part on its inputs from `values` (sequences and optionals among them as `forms` says), compiling
    /// it for them first unless a version for them is kept.
    fn run(
        &self,
        values: &[(String, Tensor<'static>)],
        forms: &Forms,
        model: &Path,
        options: &RunOptions,
        ledger: &Ledger,
        node: &(String, String),
    ) -> Result<Ran> {
        let Keyed { args, typed, key, options, fix_outer } = self.keyed(values, forms, options)?;
        let compile = || self.compile(&args, &typed, model, &options, node, fix_outer);
        let stage = match self.versions.get(key, compile) {
            // Rule 2: the subgraphs' shapes hang on what they read from around the node.
            Err(DriverError::AtRunTime { .. }) if !fix_outer && !self.outer.is_empty() => {
                *self.fix_outer.lock().unwrap_or_else(|p| p.into_inner()) = true;
                return self.run(values, forms, model, &options, ledger, node);
            }
            stage => stage?,
        };
        stage.run(&args, model, &options, ledger)
    }

    /// The part's inputs from `values` (sequences and optionals among them as `forms` says), their key, and the
    /// options to compile and run it with (rule 2).
    fn keyed(&self, values: &[(String, Tensor<'static>)], forms: &Forms, options: &RunOptions) -> Result<Keyed> {
        let gathered = crossing::gather(values, forms, &self.part.inputs)?;
        let fix_outer = *self.fix_outer.lock().unwrap_or_else(|p| p.into_inner());
        let mut key = crossing::key_entries(&gathered.structures);
        let sets = |n: &str, t: &Tensor<'static>| self.values.iter().any(|v| v == n) || (fix_outer && self.fixes(n, t));
        key.extend(key_of(&gathered.args, sets)?);
        let mut options = later_options(options);
        options.config.input_structures = gathered.structures;
        Ok(Keyed { args: gathered.args, typed: gathered.typed, key, options, fix_outer })
    }

    /// The part compiled for `args`, its inputs declared as `typed` (rule 2), with `options` made for it
    /// ([`later_options`] and the forms of its structured inputs).
    fn compile(
        &self,
        args: &[(String, Tensor<'static>)],
        typed: &[Structure<(DatumType, Vec<usize>)>],
        model: &Path,
        options: &RunOptions,
        node: &(String, String),
        fix_outer: bool,
    ) -> Result<Stage> {
        let bytes = prost::bytes::Bytes::from(self.part.typed_as(typed).encode_to_vec());
        let mut options = options.clone();
        let mut given = Vec::with_capacity(args.len());
        for (n, t) in args {
            if fix_outer && self.fixes(n, t) {
                // Owned: a kept version must not hold a caller's memory past the run (a typed module's input).
                let owned = t.deep_clone().map_err(|e| DriverError::Input(format!("value '{n}': {e}")))?;
                options.config.input_values.insert(n.clone(), owned);
            } else {
                given.push((n.clone(), t.clone()));
            }
        }
        Stage::new(&bytes, model, &given, &options, Instant::now()).map_err(|e| match e {
            e @ DriverError::AtRunTime { .. } if !fix_outer && !self.outer.is_empty() => e,
            DriverError::Model(m)
            | DriverError::Plan(m)
            | DriverError::Input(m)
            | DriverError::AtRunTime { message: m, .. } => DriverError::Model(format!(
                "{m} (compiling, at run time, node '{}' ({}) and what follows it)",
                node.0, node.1
            )),
            e => e,
        })
    }
}

/// A part's inputs for one run, their key and its options ([`Later::keyed`]).
struct Keyed {
    args: Vec<(String, Tensor<'static>)>,
    typed: Vec<Structure<(DatumType, Vec<usize>)>>,
    key: Key,
    options: RunOptions,
    fix_outer: bool,
}

/// Rule 4: whether a model may be cut where its import stopped (`message`): not with `--state` or
/// `--input-device`.
pub(crate) fn refuse_cut(options: &RunOptions, message: String) -> Result<()> {
    if !options.planning.states.is_empty() || !options.planning.input_devices.is_empty() {
        return Err(DriverError::Plan(format!(
            "{message}; --state and --input-device are not taken by a model compiled in stages"
        )));
    }
    Ok(())
}

/// The options a later part is compiled and run with: the caller's, less what names the model's inputs (their
/// fixed values are the part's inputs, rule 2).
pub(crate) fn later_options(options: &RunOptions) -> RunOptions {
    let mut o = options.clone();
    // Rule 3: what a part makes is read by the parts after it (or the caller).
    o.read_outputs = true;
    // Rule 5: a later part is compiled at run time, with none of what built code carries for its first part.
    o.built_graph = None;
    o.built_plans.clear();
    o.linked = None;
    o.built_cuts = &[];
    o.config.input_values.clear();
    o.config.input_shapes.clear();
    o.config.input_structures.clear();
    o.planning.input_layouts.clear();
    o.planning.input_devices.clear();
    o.planning.states.clear();
    o
}

/// Compiled versions of a part by key (rule 2): at most [`MAX_KEPT`], the most recently used last, and the key the
/// last run used.
#[derive(Default)]
pub(crate) struct Versions {
    kept: Mutex<Vec<(Key, Rc<Stage>)>>,
    last: Mutex<Option<Key>>,
    compiled: Mutex<usize>,
}

impl Versions {
    /// The version for `key`, made by `compile` unless one is kept (an error keeps nothing); it is the last used.
    pub(crate) fn get(&self, key: Key, compile: impl FnOnce() -> Result<Stage>) -> Result<Rc<Stage>> {
        let kept = self.kept.lock().unwrap_or_else(|p| p.into_inner()).iter().position(|(k, _)| *k == key);
        let stage = match kept {
            Some(i) => {
                let mut kept = self.kept.lock().unwrap_or_else(|p| p.into_inner());
                let entry = kept.remove(i);
                let stage = entry.1.clone();
                kept.push(entry);
                stage
            }
            None => {
                let stage = Rc::new(compile()?);
                let mut kept = self.kept.lock().unwrap_or_else(|p| p.into_inner());
                if kept.len() == MAX_KEPT {
                    kept.remove(0);
                }
                kept.push((key.clone(), stage.clone()));
                *self.compiled.lock().unwrap_or_else(|p| p.into_inner()) += 1;
                stage
            }
        };
        *self.last.lock().unwrap_or_else(|p| p.into_inner()) = Some(key);
        Ok(stage)
    }

    /// The version for `key`, made by `compile` and kept unless one is, without changing which version the last
    /// run used (it does count as recently used, for which is dropped first).
    pub(crate) fn ensure(&self, key: Key, compile: impl FnOnce() -> Result<Stage>) -> Result<Rc<Stage>> {
        let last = self.last.lock().unwrap_or_else(|p| p.into_inner()).clone();
        let stage = self.get(key, compile);
        *self.last.lock().unwrap_or_else(|p| p.into_inner()) = last;
        stage
    }

    /// The version the last run used.
    pub(crate) fn last(&self) -> Option<Rc<Stage>> {
        let last = self.last.lock().ok()?.clone()?;
        self.kept.lock().ok()?.iter().find(|(k, _)| *k == last).map(|(_, s)| s.clone())
    }

    /// How many versions were compiled.
    pub(crate) fn compiled(&self) -> usize {
        *self.compiled.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// The key of `named` (rule 2): each one's type and shape, and the bytes of those `sets_shape` picks (read on the
/// host: one download where one lives on a device).
pub(crate) fn key_of(
    named: &[(String, Tensor<'static>)],
    sets_shape: impl Fn(&str, &Tensor<'static>) -> bool,
) -> Result<Key> {
    named
        .iter()
        .map(|(n, t)| {
            let bytes = if sets_shape(n, t) {
                let packed = t.to_row_major().map_err(|e| DriverError::Input(format!("value '{n}': {e}")))?;
                Some(packed.as_bytes().map_err(|e| DriverError::Input(format!("value '{n}': {e}")))?.to_vec())
            } else {
                None
            };
            Ok((t.dt(), t.shape().to_vec(), bytes))
        })
        .collect()
}

pub(crate) fn add_peaks(peaks: &mut Vec<(String, usize)>, more: Vec<(String, usize)>) {
    for (space, bytes) in more {
        match peaks.iter_mut().find(|(s, _)| *s == space) {
            Some(e) => e.1 += bytes,
            None => peaks.push((space, bytes)),
        }
    }
}
