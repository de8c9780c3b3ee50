//! From model bytes to an optimised graph and its plan: import specialised on the given inputs (or the graph
//! compiled into built code), the inputs checked against the model, and planning over the opened targets.

use std::path::Path;
use stowage_compiler::ir::Graph;
use stowage_compiler::onnx::proto::tensor_shape_proto::dimension;
use stowage_compiler::onnx::proto::{type_proto, ValueInfoProto};
use stowage_compiler::onnx::{self};
use stowage_compiler::plan::{self, InputLayout, Plan, Precision};
use stowage_compiler::Context;
use stowage_runtime::Tensor;

use crate::backend::OpenedTarget;
use crate::error::{DriverError, Result};
use crate::options::{BuiltGraph, RunOptions, INPUT_ALIGNMENT};
use crate::progress::Progress;
use crate::targets;

/// Imports `model` specialised on `inputs` (see [`run`]) and optimises it.
pub(crate) fn compile(
    bytes: &prost::bytes::Bytes,
    model: &Path,
    inputs: &[(String, Tensor<'static>)],
    options: &RunOptions,
    progress: &Progress,
    running: bool,
) -> Result<Context> {
    targets::check(&options.registry, &options.target)?;
    let proto = onnx::decode_shared(bytes, options.config.value_limit())
        .map_err(|e| DriverError::Model(format!("{}: {e}", model.display())))?;
    let graph = proto
        .graph
        .as_ref()
        .ok_or_else(|| DriverError::Model(format!("{}: not an ONNX model: it has no graph", model.display())))?;
    let initializers: Vec<&str> = graph.initializer.iter().map(|t| t.name()).collect();
    let declared: Vec<&ValueInfoProto> = graph.input.iter().filter(|i| !initializers.contains(&i.name())).collect();
    // A sequence or an optional is given as its tensors, under their flat names (`onnx::structure`, rule 2), with
    // its form in the options.
    let mut flat_names: Vec<String> = Vec::new();
    for vi in &declared {
        if !onnx::structure::is_structured(vi.r#type.as_ref()) {
            flat_names.push(vi.name().to_string());
        } else if let Some(form) = options.config.input_structures.get(vi.name()) {
            flat_names.extend(form.flat_names(vi.name()).leaves().into_iter().cloned());
        } else if running {
            return Err(DriverError::Input(format!(
                "input '{}' is a sequence or an optional: give its value as a SequenceProto or OptionalProto file",
                vi.name()
            )));
        }
    }
    let wanted: Vec<&str> = flat_names.iter().map(String::as_str).collect();
    for (k, (name, _)) in inputs.iter().enumerate() {
        if !wanted.contains(&name.as_str()) {
            return Err(DriverError::Input(format!(
                "input '{name}': the model has no such input (its inputs: {})",
                wanted.join(", ")
            )));
        }
        if inputs[..k].iter().any(|(n, _)| n == name) {
            return Err(DriverError::Input(format!("input '{name}' is given twice")));
        }
        if options.config.input_values.contains_key(name) {
            return Err(DriverError::Input(format!(
                "input '{name}' is given twice: as an input and as a fixed value (--input-value)"
            )));
        }
    }
    // An input whose value is fixed by the caller is folded: it is not needed at run time.
    let mut needed = wanted.iter().filter(|w| !options.config.input_values.contains_key(**w));
    if let Some(missing) = needed.find(|w| running && !inputs.iter().any(|(n, _)| n == *w)) {
        return Err(DriverError::Input(format!(
            "input '{missing}' is missing (the model's inputs: {})",
            wanted.join(", ")
        )));
    }
    // Types are checked here, before compiling, so that a wrong input is reported as such (not as a fixed value
    // that does not fit, for a shape-setting input) and without waiting for the compilation.
    for vi in &declared {
        if let Some((_, t)) = inputs.iter().find(|(n, _)| n == vi.name()) {
            check_input(vi, options.config.input_shapes.get(vi.name()), t)?;
        }
    }
    let mut config = options.config.clone();
    // Ops some target of the list runs whole are imported whole (the planner puts them there). Not an If's
    // branches or a Loop's or Scan's body at a half precision: storing floats in 16 bits retypes the graph, not its
    // subgraphs (`passes/storage.rs`), so those take their other forms (`Where`, a cut, the import's error).
    let half = |p: &Precision| matches!(p, Precision::Fp16 | Precision::Bf16);
    let halved = options.planning.precision.as_ref().is_some_and(half)
        || options.planning.target_precisions.iter().any(|(_, p)| half(p));
    // A top-level `If` is kept whole, not cut at, where every target runs it whole (`onnx/branch.rs`, rule 2).
    let mut every_runs_if = !halved;
    for name in targets::check(&options.registry, &options.target)? {
        let ops = options.registry.kind_of(&name)?.whole_ops().iter();
        every_runs_if &= ops.clone().any(|op| *op == "If");
        config
            .whole
            .extend(ops.filter(|op| !(halved && matches!(**op, "If" | "Loop" | "Scan"))).map(|s| s.to_string()));
    }
    config.keep_top_level_if = every_runs_if;
    let value_inputs = onnx::value_inputs(&proto);
    for (name, t) in inputs {
        if !declared.iter().any(|vi| vi.name() == name) {
            // An item of a sequence or optional input: its shape is fixed by the input's form.
            continue;
        }
        if value_inputs.contains(name) {
            // Specialise on the values of shape-setting inputs: they become constants of this compilation.
            // Owned: the compiled code must not hold a caller's memory past the run (a typed module's input).
            let owned = t.deep_clone().map_err(|e| DriverError::Input(format!("input '{name}': {e}")))?;
            config.input_values.insert(name.clone(), owned);
        } else {
            // And on the shapes of the others: symbolic dimensions take those of the given tensors.
            config.input_shapes.entry(name.clone()).or_insert_with(|| t.shape().to_vec());
        }
    }
    progress.phase("importing");
    let graph = onnx::import(&proto, model.parent(), &config).map_err(|e| {
        let index = match *e.kind {
            stowage_compiler::ImportErrorKind::AtRunTime { index, .. } => Some(index),
            _ => None,
        };
        let message = stowage_compiler::ImportError { path: Some(model.to_path_buf()), kind: e.kind }.to_string();
        match index {
            Some(index) => DriverError::AtRunTime { index, message },
            None => DriverError::Model(message),
        }
    })?;
    // The graph holds its own copies of the initializers now.
    drop(proto);
    let mut cx = Context::new(graph);
    progress.phase("folding constants and optimising");
    cx.optimize().map_err(|e| DriverError::Model(e.to_string()))?;
    Ok(cx)
}

/// The compiled-in graph of built code, after checking the given inputs against its inputs' types.
pub(crate) fn built_graph(built: &BuiltGraph, inputs: &[(String, Tensor<'static>)]) -> Result<Context> {
    let graph =
        stowage_compiler::ir::serial::decode_static(built.graph, built.constants).map_err(DriverError::Built)?;
    for (name, t) in inputs {
        let Some(&v) = graph.inputs().iter().find(|&&v| graph.value(v).name == *name) else {
            let names: Vec<&str> = graph.inputs().iter().map(|&v| graph.value(v).name.as_str()).collect();
            return Err(DriverError::Input(format!(
                "input '{name}': the model has no such input (its inputs: {})",
                names.join(", ")
            )));
        };
        let ty = graph.ty(v);
        if ty.dt != t.dt() || ty.shape != t.shape() {
            return Err(DriverError::Input(format!(
                "input '{name}': the model takes {}{:?}, the given tensor is {}{:?}",
                ty.dt,
                ty.shape,
                t.dt(),
                t.shape()
            )));
        }
    }
    Ok(Context::new(graph))
}

/// Stores the graph's f32 values in f16 or bf16 when the plan asks every target for fp16 or bf16
/// ([`plan::precision::storage`], rule 5; [`stowage_compiler::passes::storage`]): before planning, so that the
/// planner sizes and copies the values as they are stored. Built code's graph was stored when it was built.
pub(crate) fn store_precision(cx: &mut Context, opened: &[Box<dyn OpenedTarget>], options: &RunOptions) -> Result<()> {
    let plan_options = options.planning.plan_options(&cx.graph)?;
    let backends = targets::backends(opened);
    let plan_error = |e: plan::PlanError| DriverError::Plan(e.to_string());
    let asked = plan::precision::resolve(&backends, plan_options.precision, &plan_options.target_precisions)
        .map_err(plan_error)?;
    let granted = plan::precision::grant(&backends, &asked).map_err(plan_error)?;
    if let Some(dt) = plan::precision::storage(&backends, &granted).map_err(plan_error)? {
        cx.store_floats_in(dt).map_err(|e| DriverError::Plan(e.to_string()))?;
    }
    Ok(())
}

/// Lays the constants out where a unified device among `opened` imports them in place
/// ([`stowage_compiler::ir::serial::align_constants`], as built code's image does), so that a plan reads them in
/// place there whatever addresses the allocator gave; nothing to do for other targets.
pub(crate) fn place_constants(graph: &mut Graph, opened: &[Box<dyn OpenedTarget>]) -> Result<()> {
    let unified = opened.iter().any(|o| {
        let m = &o.spec().memory;
        m.kind == stowage_runtime::MemoryKind::Unified && m.import_alignment.is_some()
    });
    if unified {
        stowage_compiler::ir::serial::align_constants(graph).map_err(DriverError::Model)?;
    }
    Ok(())
}

/// The plan for `graph` on `opened`, with the caller's planning options and the layouts of the given inputs.
pub(crate) fn make_plan(
    graph: &Graph,
    opened: &[Box<dyn OpenedTarget>],
    inputs: &[(String, Tensor<'static>)],
    options: &RunOptions,
) -> Result<Plan> {
    let mut plan_options = options.planning.plan_options(graph)?;
    plan_options.read_outputs = options.read_outputs;
    if inputs.is_empty() {
        // Planning alone: inputs not described are assumed where `stowage run` puts them.
        for &v in graph.inputs() {
            let name = &graph.value(v).name;
            if !plan_options.input_layouts.contains_key(name) {
                let layout = InputLayout { alignment: INPUT_ALIGNMENT, ..InputLayout::packed(graph.ty(v).rank()) };
                plan_options.input_layouts.insert(name.clone(), layout);
            }
        }
    }
    for (name, target) in &options.planning.input_devices {
        let home = opened.iter().find(|o| o.spec().name == *target || o.spec().space == *target).ok_or_else(|| {
            let names: Vec<&str> = opened.iter().map(|o| o.spec().name.as_str()).collect();
            DriverError::Plan(format!(
                "--input-device {name}={target}: '{target}' is none of the targets ({})",
                names.join(", ")
            ))
        })?;
        if home.spec().is_host() {
            return Err(DriverError::Plan(format!(
                "--input-device {name}={target}: '{target}' is host memory, where inputs are unless said otherwise"
            )));
        }
        plan_options.input_devices.insert(name.clone(), home.spec().space.clone());
    }
    for (name, t) in inputs {
        if !graph.inputs().iter().any(|&v| graph.value(v).name == *name) {
            continue; // folded: a shape-setting input's value is a constant of this compilation
        }
        // A tensor a device holds (a caller's buffer, an earlier run's output) is planned where it is; a state
        // input is fed back where its output is made, whatever its first value is.
        let state = options.planning.states.iter().any(|(_, i)| i == name);
        if let Some(home) = opened.iter().find(|o| !o.spec().is_host() && o.holds(t)).filter(|_| !state) {
            let space = &home.spec().space;
            if let Some(declared) = plan_options.input_devices.get(name).filter(|d| *d != space) {
                return Err(DriverError::Input(format!(
                    "input '{name}': --input-device says it lives on {declared}, the tensor given is held on {space}"
                )));
            }
            let actual = strides_layout(t, INPUT_ALIGNMENT);
            if let Some(declared) = plan_options.input_layouts.get(name) {
                same_strides(name, declared, &actual, t)?;
            }
            plan_options.input_devices.insert(name.clone(), space.clone());
            plan_options.input_layouts.insert(name.clone(), actual);
            continue;
        }
        // Declared on a device but given elsewhere: `stowage run` puts it there before the runs (`Session::place`),
        // in the layout declared for it.
        if plan_options.input_devices.contains_key(name) {
            continue;
        }
        let Some(mut actual) = layout_of(t) else { continue };
        if let Some(declared) = plan_options.input_layouts.get(name) {
            same_strides(name, declared, &actual, t)?;
            // The alignment declared is what the caller promises: an address that happens to be more aligned
            // this time does not change the plan (built code's plan and a run's agree, whatever the allocator).
            actual.alignment = actual.alignment.min(declared.alignment.max(1));
        }
        plan_options.input_layouts.insert(name.clone(), actual);
    }
    let plan =
        plan::plan(graph, &targets::backends(opened), &plan_options).map_err(|e| DriverError::Plan(e.to_string()))?;
    // Each arena is one allocation a model makes stowage do: under the one limit, like every value in it.
    let limit = options.config.value_limit();
    if let Some(a) = plan.arenas.iter().find(|a| a.peak_bytes > limit) {
        return Err(DriverError::Plan(format!(
            "the plan's arena on {} would be {} bytes: more than the {limit}-byte limit on one allocation (raise it \
             with --max-value-bytes)",
            a.space, a.peak_bytes
        )));
    }
    Ok(plan)
}

/// Checks that the tensor `t` given for input `name` steps through memory as its `--input-layout` says (axes of
/// extent 1 are never stepped: their strides do not matter).
fn same_strides(name: &str, declared: &InputLayout, actual: &InputLayout, t: &Tensor<'static>) -> Result<()> {
    let (a, b) = (declared.strides(t.dt(), t.shape()), actual.strides(t.dt(), t.shape()));
    if t.shape().iter().zip(a.iter().zip(&b)).any(|(&d, (x, y))| d > 1 && x != y) {
        return Err(DriverError::Input(format!(
            "input '{name}': --input-layout says {}, the tensor given is {}",
            declared.describe(),
            actual.describe()
        )));
    }
    Ok(())
}

/// The layout and alignment of a tensor in host memory, as the planner describes caller memory (`None`: the
/// bytes are not on the host, as for a fed-back device output).
pub fn layout_of(t: &Tensor<'_>) -> Option<InputLayout> {
    let bytes = t.storage().host_bytes()?;
    let address = bytes.as_ptr() as usize + t.layout().offset();
    let alignment = if address == 0 { 4096 } else { (1usize << address.trailing_zeros()).min(4096) };
    Some(strides_layout(t, alignment))
}

/// The layout `t`'s strides describe, its base address taken to be `alignment`-aligned.
fn strides_layout(t: &Tensor<'_>, alignment: usize) -> InputLayout {
    let (strides, shape) = (t.layout().strides(), t.shape());
    let rank = shape.len();
    let mut order: Vec<usize> = (0..rank).collect();
    order.sort_by(|&a, &b| strides[b].cmp(&strides[a]).then(a.cmp(&b)));
    // Packed from the innermost axis out, up to the first axis whose step is larger: that step is the row pitch.
    let mut layout = InputLayout { order: order.clone(), alignment, ..InputLayout::packed(rank) };
    let mut packed = 1;
    for k in (0..rank).rev() {
        let axis = order[k];
        if shape[axis] > 1 && strides[axis] != packed && layout.row_pitch.is_none() {
            layout.row_pitch = Some(strides[axis] * t.dt().size_of());
            layout.row_axis = k;
            packed = strides[axis];
        }
        packed *= shape[axis].max(1);
    }
    // What an order and a pitch cannot say (slices along several axes, broadcasts) is kept as the strides.
    let described = layout.strides(t.dt(), shape);
    if shape.iter().zip(described.iter().zip(strides)).any(|(&d, (x, y))| d > 1 && x != y) {
        layout.strided = Some(strides.to_vec());
    }
    layout.view = !t.is_whole_storage();
    layout
}

/// Checks a given input against the model's declaration of it (or its `--input-shape`): datum type, rank and every
/// fixed dimension. A declaration stowage cannot read is left to the importer to explain.
fn check_input(vi: &ValueInfoProto, fixed: Option<&Vec<usize>>, t: &Tensor<'static>) -> Result<()> {
    let Some(type_proto::Value::TensorType(tt)) = vi.r#type.as_ref().and_then(|t| t.value.as_ref()) else {
        return Ok(());
    };
    let Ok(dt) = onnx::tensor::datum_type(tt.elem_type()) else { return Ok(()) };
    // Each dimension: its size when fixed, else its symbol.
    let dims: Option<Vec<Result<usize, String>>> = match fixed {
        Some(shape) => Some(shape.iter().map(|&d| Ok(d)).collect()),
        None => tt.shape.as_ref().map(|s| {
            s.dim
                .iter()
                .map(|d| match &d.value {
                    Some(dimension::Value::DimValue(v)) if *v >= 0 => Ok(*v as usize),
                    Some(dimension::Value::DimParam(p)) if !p.is_empty() => Err(p.clone()),
                    _ => Err("?".to_string()),
                })
                .collect()
        }),
    };
    let shape_fits = dims.as_ref().is_none_or(|dims| {
        dims.len() == t.shape().len() && dims.iter().zip(t.shape()).all(|(d, g)| d.as_ref().is_err() || d == &Ok(*g))
    });
    if dt == t.dt() && shape_fits {
        return Ok(());
    }
    let expected = match &dims {
        Some(dims) => {
            let dims: Vec<String> =
                dims.iter().map(|d| d.as_ref().map_or_else(Clone::clone, usize::to_string)).collect();
            format!("{dt}[{}]", dims.join(", "))
        }
        None => format!("{dt} (of any shape)"),
    };
    let by = if fixed.is_some() { " (as fixed by --input-shape)" } else { "" };
    Err(DriverError::Input(format!(
        "input '{}': the model takes {expected}{by}, the given tensor is {}{:?}",
        vi.name(),
        t.dt(),
        t.shape()
    )))
}
