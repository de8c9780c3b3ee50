//! What `stowage build` prepares ahead of time: the optimised graph, its plan, the memory path it takes, and the
//! object code of the kernels its targets compile ahead of time.

use std::path::Path;

use stowage_compiler::plan::{self, Plan};
use stowage_compiler::Context;

use crate::backend::{KindSource, ObjectCode, OpenedTarget};
use crate::compile::{compile, make_plan, place_constants, store_precision};
use crate::error::{DriverError, Result};
use crate::options::RunOptions;
use crate::progress::Progress;
use crate::targets;

/// What `stowage build` compiles ahead of time: the optimised graph, its plan, and the kernels the targets'
/// lowering will ask for at start-up.
pub struct Prepared {
    /// The optimised graph.
    pub cx: Context,
    /// Its plan.
    pub plan: Plan,
    /// Kernels compiled ahead of time, with symbols starting with the prefix asked for (`None`: no target compiles
    /// any ahead of time).
    pub object: Option<ObjectCode>,
    /// The memory path the plan takes, in words (see [`memory_path`]).
    pub path: String,
    /// The target list that reaches the same devices the other way (a unified device's staging path), whose plan
    /// the built code carries too; `None` when every target used has one way only.
    pub alternative: Option<String>,
    /// Where generated code finds the kind of each target of the list, in order, each once.
    pub kinds: Vec<KindSource>,
}

/// The memory path a plan over `opened` takes, in words (host only, or each used target's path), and the target
/// list that takes the other path where a used target has one.
pub(crate) fn memory_path(opened: &[Box<dyn OpenedTarget>], plan: &Plan, list: &str) -> (String, Option<String>) {
    let mut words = Vec::new();
    let mut alternative = false;
    let mut names: Vec<String> = list.split(',').map(|t| t.trim().to_string()).collect();
    for (i, o) in opened.iter().enumerate() {
        let Some(path) = o.path() else { continue };
        if !plan.uses(i) {
            continue;
        }
        words.push(path.built);
        if let (Some(other), Some(name)) = (path.alternative, names.get_mut(i)) {
            *name = other;
            alternative = true;
        }
    }
    if words.is_empty() {
        words.push("host memory only".to_string());
    }
    (words.join("; "), alternative.then(|| names.join(",")))
}

/// Imports, optimises and plans `model` as a built executable will at start-up (inputs page-aligned, in their
/// declared layouts), and compiles what its targets compile ahead of time, with symbols starting with `prefix`.
pub fn prepare_build(bytes: &[u8], model: &Path, options: &RunOptions, prefix: &str) -> Result<Prepared> {
    let progress = Progress::start(model);
    let mut cx = compile(&prost::bytes::Bytes::copy_from_slice(bytes), model, &[], options, &progress, false)?;
    progress.phase("planning");
    let opened = targets::open(&options.registry, &options.target, &options.open_options(), &cx.graph)?;
    // Planned as built code holds it: constants where the image puts them.
    store_precision(&mut cx, &opened, options).map_err(|e| in_model(model, e))?;
    place_constants(&mut cx.graph, &opened)?;
    let plan = make_plan(&cx.graph, &opened, &[], options).map_err(|e| in_model(model, e))?;
    let segments = plan::segments(&cx.graph, &plan);
    let mut object: Option<ObjectCode> = None;
    for (i, target) in opened.iter().enumerate() {
        let own: Vec<&plan::Segment> = segments.iter().filter(|s| s.target == i).collect();
        if own.is_empty() {
            continue;
        }
        let code = target.compile_ahead(&own, &cx.graph, &plan, prefix).map_err(|e| DriverError::Lower {
            model: model.display().to_string(),
            backend: target.kind(),
            message: e.to_string(),
        })?;
        let Some(code) = code else { continue };
        if object.is_some() {
            return Err(DriverError::Plan(format!(
                "{}: two targets of '{}' compile kernels ahead of time; a build links one object file",
                model.display(),
                options.target
            )));
        }
        object = Some(code);
    }
    progress.finish();
    let (path, alternative) = memory_path(&opened, &plan, &options.target);
    let mut kinds: Vec<KindSource> = Vec::new();
    for name in targets::check(&options.registry, &options.target)? {
        let source = options.registry.kind_of(&name)?.source();
        if !kinds.contains(&source) {
            kinds.push(source);
        }
    }
    Ok(Prepared { cx, plan, object, path, alternative, kinds })
}

/// A planning error (the options, the plan, or an input against its declared layout), prefixed with the model's path.
pub(crate) fn in_model(model: &Path, e: DriverError) -> DriverError {
    match e {
        DriverError::Plan(m) => DriverError::Plan(format!("{}: {m}", model.display())),
        DriverError::Input(m) => DriverError::Input(format!("{}: {m}", model.display())),
        other => other,
    }
}
