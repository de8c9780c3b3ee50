//! `stowage plan`: the plan as text, JSON (the report's planning keys), Graphviz dot, or SVG through Graphviz.

use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};

use crate::pipeline::{self as session, RunOptions};
use stowage_compiler::plan::{self, Plan, When};

use crate::staging::Staging;

/// The formats of `stowage plan`.
#[derive(Clone, Copy, Debug)]
#[cfg_attr(feature = "cli", derive(clap::ValueEnum))]
pub enum PlanFormat {
    /// Stable text: targets, nodes with where and why, inputs, copies, memory.
    Text,
    /// The JSON of the run report's planning keys, and the placements.
    Json,
    /// Graphviz: nodes coloured by target, copies as red edges labelled with bytes and reason.
    Dot,
    /// The dot form drawn by Graphviz (`dot -Tsvg`).
    Svg,
}

/// The whole command: plan `model` and show it in `format`, to `output` or stdout.
pub fn plan(model: &Path, format: PlanFormat, output: Option<&Path>, options: &RunOptions) -> Result<String, String> {
    // A model `stowage run` compiles in stages: the part that runs first, and a line per cut.
    let (cx, plan, cuts) = session::plan_first_part(model, options)?;
    let text = match format {
        PlanFormat::Text => {
            let staged: String = cuts.iter().map(|c| format!("staged: {c}\n")).collect();
            plan::show::text(&plan) + &staged
        }
        PlanFormat::Json => {
            let mut j = json(&plan);
            if !cuts.is_empty() {
                j["stages"] = cuts.into();
            }
            serde_json::to_string_pretty(&j).map_err(|e| e.to_string())? + "\n"
        }
        PlanFormat::Dot => plan::show::dot(&plan, &cx.graph),
        PlanFormat::Svg => svg(&plan::show::dot(&plan, &cx.graph))?,
    };
    match output {
        None => Ok(text),
        Some(path) => {
            let mut staging = Staging::default();
            staging.stage(path, format!("{}: cannot write it", path.display()), text.as_bytes())?;
            staging.commit()?;
            Ok(String::new())
        }
    }
}

/// The copies of a plan as the report lists them.
pub fn copies_json(plan: &Plan) -> Vec<serde_json::Value> {
    plan.run_copies()
        .map(|c| {
            serde_json::json!({
                "value": c.value,
                "kind": c.kind.to_string(),
                "from": c.from,
                "to": c.to,
                "bytes": c.bytes,
                "reason": c.reason,
                "per_run": c.when == When::EveryRun,
                "when": c.when.to_string(),
            })
        })
        .collect()
}

/// Peak and lower-bound bytes per space, as the report keys them.
pub fn peaks_json(plan: &Plan) -> (serde_json::Value, serde_json::Value) {
    let mut peak = serde_json::Map::new();
    let mut bound = serde_json::Map::new();
    for a in &plan.arenas {
        peak.insert(a.space.clone(), a.peak_bytes.into());
        bound.insert(a.space.clone(), a.lower_bound_bytes.into());
    }
    (peak.into(), bound.into())
}

/// Per target, the precision asked and computed, and how ([`stowage_compiler::plan::precision`]).
pub fn precision_json(plan: &Plan) -> serde_json::Value {
    plan.targets
        .iter()
        .zip(&plan.precisions)
        .map(|(t, p)| {
            serde_json::json!({"target": t.name, "asked": p.asked.word(), "computed": p.computed.word(), "how": p.how})
        })
        .collect::<Vec<_>>()
        .into()
}

/// The plan as JSON.
pub fn json(plan: &Plan) -> serde_json::Value {
    let (peak, bound) = peaks_json(plan);
    let nodes: Vec<serde_json::Value> = plan
        .nodes
        .iter()
        .zip(&plan.node_names)
        .map(|(p, (name, op))| serde_json::json!({"node": name, "op": op, "target": plan.targets[p.target].name, "reason": p.reason}))
        .collect();
    let setup: Vec<serde_json::Value> = plan
        .copies
        .iter()
        .filter(|c| c.when == When::Setup)
        .map(|c| serde_json::json!({"value": c.value, "to": c.to, "bytes": c.bytes}))
        .collect();
    serde_json::json!({
        "graph": plan.graph,
        "target": plan.targets.iter().map(|t| t.name.clone()).collect::<Vec<_>>().join(","),
        "planned_copies": copies_json(plan),
        "precision": precision_json(plan),
        "planned_setup_copies": setup,
        "bytes_per_run": plan.run_copies().map(|c| c.bytes).sum::<usize>(),
        "peak_bytes": peak,
        "peak_lower_bound_bytes": bound,
        "placement": nodes,
        "inputs": plan.inputs.iter().map(|i| serde_json::json!({
            "input": i.name,
            "layout": i.layout.describe(),
            "lives_on": i.device.as_deref().unwrap_or("host"),
            "read": i.access.iter().map(|(space, a)| serde_json::json!({"space": space, "in_place": *a == plan::InputAccess::InPlace, "as_held": *a == plan::InputAccess::Held})).collect::<Vec<_>>(),
        })).collect::<Vec<_>>(),
        "states": plan.states.iter().map(|(o, i)| serde_json::json!({"output": o, "input": i})).collect::<Vec<_>>(),
    })
}

/// Draws `dot` with Graphviz.
fn svg(dot: &str) -> Result<String, String> {
    let mut child = Command::new("dot")
        .arg("-Tsvg")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("--format svg needs Graphviz's `dot` (scripts/setup installs it): {e}"))?;
    child.stdin.take().ok_or("dot: no stdin")?.write_all(dot.as_bytes()).map_err(|e| format!("dot: {e}"))?;
    let out = child.wait_with_output().map_err(|e| format!("dot: {e}"))?;
    if !out.status.success() {
        return Err(format!("dot -Tsvg failed: {}", String::from_utf8_lossy(&out.stderr).trim()));
    }
    String::from_utf8(out.stdout).map_err(|e| format!("dot: {e}"))
}
