//! Built code of a model compiled in stages (`stages.rs`, rule 5; docs/building.md, "Models compiled in stages"):
//! where a run would cut the model, the build cuts it too, compiles the part before the innermost cut ahead of time
//! as any built model, and embeds the model for the parts a run compiles. The rules:
//!
//! 1. **Cut as a run cuts.** The build prepares the model as built code holds it ([`prepare_build`]), a top-level
//!    `If` whose condition comes at run time cut at as a run cuts it (`ImportConfig::branch_at_run_time`); where its
//!    import stops at a top-level node for a value known only at run time, the model is cut there
//!    (`stowage_compiler::onnx::split`) and the part before is prepared again, until one prepares. The cuts are
//!    kept outermost first, the positions a run finds again in the same parts ([`RunOptions::built_cuts`]).
//! 2. **Refused as a run refuses**, with the import's line and why (`stages::refuse_cut`: `--state`,
//!    `--input-device`; a part of one node that needs such a value, unless it is a `Loop`, which a run iterates:
//!    that is cut from an empty first part, which passes the model's first input through); and where built code
//!    would take or give a sequence or an optional (a model's input or output; the first part's outputs are
//!    checked when its graph is written out): it takes and gives tensors only. Sequences that live inside the
//!    later parts cross their cuts as at any run (`crossing.rs`).
//! 3. **The model embedded is what the later parts read.** Every initializer no later part reads (the first
//!    part's weights, which its built graph holds) is left out of the embedded model, and so are graph inputs
//!    that named them (IR < 4), so a backbone's weights are in the executable once.

use std::borrow::Cow;
use std::collections::HashSet;
use std::path::Path;

use prost::Message;
use stowage_compiler::onnx::proto::ValueInfoProto;
use stowage_compiler::onnx::{self, split};

use crate::error::DriverError;
use crate::pipeline::{prepare_build, Prepared, RunOptions};

/// What the built code of a model compiled in stages carries beside its first part.
pub(crate) struct Staged {
    /// The cuts, outermost first (rule 1).
    pub cuts: Vec<usize>,
    /// The model, less what only the first part reads (rule 3), as ONNX.
    pub model: Vec<u8>,
    /// Each cut's node and op type, outermost first.
    pub nodes: Vec<(String, String)>,
    /// The model's outputs, in order.
    pub outputs: Vec<String>,
}

impl Staged {
    /// One line per cut, innermost (the first to run) first.
    pub fn lines(&self) -> Vec<String> {
        self.nodes
            .iter()
            .rev()
            .map(|(name, op)| {
                format!(
                    "node '{name}' ({op}) needs a value known only at run time: it and what follows it compile \
                     when a run reaches them"
                )
            })
            .collect()
    }
}

/// What a build compiles from: the first part prepared, that part as ONNX, and what the built code carries for the
/// parts after it (`None` for a model compiled whole).
pub(crate) type Ready<'a> = (Prepared, Cow<'a, [u8]>, Option<Staged>);

/// Prepares `bytes` (the model `model` names) for a build: the whole model, or the part before the innermost cut
/// and what the built code carries for the rest (rules 1 to 3). Also the model the first part is, as ONNX.
pub(crate) fn prepare<'a>(
    bytes: &'a [u8],
    model: &Path,
    options: &RunOptions,
    prefix: &str,
) -> Result<Ready<'a>, String> {
    let mut part = Cow::Borrowed(bytes);
    let (mut cuts, mut nodes, mut later_reads) = (Vec::new(), Vec::new(), HashSet::new());
    let prepared = loop {
        let (index, message) = match prepare_build(&part, model, options, prefix) {
            Ok(prepared) => break prepared,
            Err(DriverError::AtRunTime { index, message }) => (index, message),
            Err(e) => return Err(e.into()),
        };
        let proto = onnx::decode_within(&part, options.config.value_limit())
            .map_err(|e| format!("{}: {e}", model.display()))?;
        crate::stages::refuse_cut(options, message.clone())?;
        // Built code and typed modules take and give tensors only: a sequence may live inside the later parts,
        // not at the model's edges (and the first part's, checked when its graph is written out).
        let edges = proto.graph.iter().flat_map(|g| g.output.iter().chain(&g.input));
        if let Some(v) = edges.into_iter().find(|v| onnx::structure::is_structured(v.r#type.as_ref())) {
            return Err(format!(
                "{message}; '{}' is a sequence or an optional, and built code takes and gives tensors only: run \
                 the model with stowage run",
                v.name()
            ));
        }
        // A part of one node is not cut by a run: a Loop is iterated (here: cut from an empty first part, which
        // comes to the same), anything else is the import's error.
        let nodes_in = proto.graph.as_ref().map_or(&[][..], |g| g.node.as_slice());
        let iterated = nodes_in.len() == 1 && crate::loops::LoopRun::of(&proto, options, model)?.is_some();
        let Some(cut) = split::split(&proto, index).filter(|_| nodes_in.len() > 1 || iterated) else {
            return Err(message);
        };
        let node = &nodes_in[index];
        nodes.push((onnx::node_name(node, index), node.op_type().to_string()));
        cuts.push(index);
        for p in std::iter::once(&cut.node).chain(&cut.after) {
            later_reads.extend(p.model.graph.iter().flat_map(|g| &g.initializer).map(|t| t.name().to_string()));
        }
        let mut before = cut.before;
        if let Some(g) = before.graph.as_mut().filter(|g| g.node.is_empty() && g.output.is_empty()) {
            // Nothing runs before the node: the first part passes an input through, as a model must make something.
            let Some(first) = g.input.iter().find(|i| !g.initializer.iter().any(|t| t.name() == i.name())) else {
                return Err(format!(
                    "{message}; nothing comes before it to build ahead of time and the model has no inputs: run it \
                     with stowage run"
                ));
            };
            g.output.push(ValueInfoProto { name: first.name.clone(), ..Default::default() });
        }
        part = Cow::Owned(before.encode_to_vec());
    };
    if cuts.is_empty() {
        return Ok((prepared, part, None));
    }
    // Rule 3: the embedded model keeps what the later parts read.
    let mut proto =
        onnx::decode_within(bytes, options.config.value_limit()).map_err(|e| format!("{}: {e}", model.display()))?;
    let outputs = proto.graph.iter().flat_map(|g| &g.output).map(|o| o.name().to_string()).collect();
    if let Some(g) = proto.graph.as_mut() {
        let dropped: HashSet<String> =
            g.initializer.iter().map(|t| t.name().to_string()).filter(|n| !later_reads.contains(n)).collect();
        g.initializer.retain(|t| !dropped.contains(t.name()));
        g.input.retain(|i| !dropped.contains(i.name()));
    }
    Ok((prepared, part, Some(Staged { cuts, model: proto.encode_to_vec(), nodes, outputs })))
}
