//! Showing a plan: a stable text form (for people and snapshots) and Graphviz `dot` (nodes coloured by target,
//! copies as red edges labelled with bytes and reason).

use std::fmt::Write;

use crate::ir::{Graph, ValueDef};

use super::{Plan, When};

/// The plan as text: targets, nodes, inputs, copies, memory. Stable: the same plan prints the same text.
pub fn text(plan: &Plan) -> String {
    let mut s = String::new();
    let names: Vec<&str> = plan.targets.iter().map(|t| t.name.as_str()).collect();
    let _ = writeln!(s, "plan '{}' for {}", plan.graph, names.join(","));
    s.push_str("targets:\n");
    for (i, t) in plan.targets.iter().enumerate() {
        let m = &t.memory;
        let memory = match (t.is_host(), m.import_alignment) {
            (true, _) => format!("host memory, {}-byte aligned", m.alignment),
            (false, Some(a)) => format!(
                "memory {} ({:?}), {}-byte aligned, imports host memory in place at {a}-byte alignment",
                t.space, m.kind, m.alignment
            ),
            (false, None) => {
                format!("memory {} ({:?}), {}-byte aligned, reached through copies", t.space, m.kind, m.alignment)
            }
        };
        let _ = writeln!(s, "  {}: {memory}; ~{:.0} GFLOP/s", t.name, t.gflops);
        // fp32 as the default: nothing said, so plans made without --precision print as they did.
        match plan.precisions.get(i) {
            Some(p) if p.asked != super::Precision::Fp32 || p.computed != super::Precision::Fp32 => {
                let _ = writeln!(s, "    precision: {}", p.describe());
            }
            _ => {}
        }
    }
    s.push_str("nodes:\n");
    let width = plan.node_names.iter().map(|(n, _)| n.len()).max().unwrap_or(0);
    for (p, (name, op)) in plan.nodes.iter().zip(&plan.node_names) {
        let _ = writeln!(s, "  {name:<width$} {op:<18} {}: {}", plan.targets[p.target].name, p.reason);
    }
    s.push_str("inputs:\n");
    for super::PlanInput { name, layout, access, device } in &plan.inputs {
        let reads: Vec<String> = access
            .iter()
            .map(|(space, a)| {
                format!(
                    "{space} {}",
                    match a {
                        super::InputAccess::InPlace => "reads it in place",
                        super::InputAccess::Copied => "reads a copy",
                        super::InputAccess::Held => "reads an upload of it as it is held",
                    }
                )
            })
            .collect();
        let lives = device.as_ref().map_or(String::new(), |d| format!(" on {d} (--input-device)"));
        let _ = writeln!(
            s,
            "  {name}: {}{lives}; {}",
            layout.describe(),
            if reads.is_empty() { "unused".to_string() } else { reads.join(", ") }
        );
    }
    for (o, i) in &plan.states {
        let _ = writeln!(s, "  state: output '{o}' is the next run's '{i}'; it stays where it is made");
    }
    let per_run: Vec<_> = plan.run_copies().collect();
    let bytes: usize = per_run.iter().map(|c| c.bytes).sum();
    let _ = writeln!(s, "copies: {} per run, {bytes} bytes", per_run.len());
    for c in &per_run {
        let _ = writeln!(s, "  {c}");
    }
    let setup: Vec<_> = plan.copies.iter().filter(|c| c.when == When::Setup).collect();
    if !setup.is_empty() {
        let bytes: usize = setup.iter().map(|c| c.bytes).sum();
        let _ = writeln!(s, "  and {} constants uploaded once at setup, {bytes} bytes", setup.len());
    }
    if !plan.blocked.is_empty() {
        let mut widths: Vec<usize> = plan.blocked.iter().map(|b| b.block).collect();
        widths.sort_unstable();
        widths.dedup();
        let names: Vec<&str> = plan.blocked.iter().map(|b| b.value.as_str()).collect();
        let _ = writeln!(
            s,
            "layouts: {} values in channel blocks of {} (converted by the kernels at each chain's ends, no copy): {}",
            names.len(),
            widths.iter().map(|w| w.to_string()).collect::<Vec<_>>().join(", "),
            names.join(", ")
        );
    }
    s.push_str("memory:\n");
    for a in &plan.arenas {
        let ratio = if a.lower_bound_bytes > 0 { a.peak_bytes as f64 / a.lower_bound_bytes as f64 } else { 1.0 };
        let _ = writeln!(
            s,
            "  {}: peak {} bytes, lower bound {} bytes ({ratio:.3}×), {} buffers, {}-byte aligned",
            a.space,
            a.peak_bytes,
            a.lower_bound_bytes,
            a.buffers.len(),
            a.alignment
        );
        if !a.outside.is_empty() {
            let bytes: usize = a.outside.iter().map(|o| o.1).sum();
            let names: Vec<&str> = a.outside.iter().map(|o| o.0.as_str()).collect();
            let _ = writeln!(
                s,
                "    outside the arena, made on each run: {bytes} bytes in {} buffer{} (outputs, values handed across and arriving copies: {})",
                a.outside.len(),
                if a.outside.len() == 1 { "" } else { "s" },
                names.join(", ")
            );
        }
        for (name, bytes) in &a.persistent {
            let _ = writeln!(s, "    {name}: {bytes} bytes kept across runs, outside the arena");
        }
        let joined: Vec<String> = a
            .buffers
            .iter()
            .flat_map(|b| &b.joins)
            .map(|(output, parts)| format!("{output} = {}", parts.join(" ++ ")))
            .collect();
        if !joined.is_empty() {
            let _ = writeln!(
                s,
                "    joined in place, no copy: {} output{} written by {} inputs' producers: {}",
                joined.len(),
                if joined.len() == 1 { "" } else { "s" },
                if joined.len() == 1 { "its" } else { "their" },
                joined.join(", ")
            );
        }
    }
    s
}

/// Graphviz colours for targets, in list order.
const COLOURS: &[&str] = &["lightblue", "palegreen", "khaki", "plum", "lightsalmon"];

/// The plan as Graphviz `dot`: one box per node, filled with its target's colour; values as edges; each copy a red
/// edge (or a red note on the edge, for copies of graph inputs) labelled with bytes and reason.
pub fn dot(plan: &Plan, graph: &Graph) -> String {
    let esc = |t: &str| t.replace('\\', "\\\\").replace('"', "\\\"");
    let mut s = String::from(
        "digraph plan {\n  rankdir=TB;\n  fontname=\"sans\";\n  node [shape=box, style=filled, fontname=\"sans\"];\n  edge [fontname=\"sans\", fontsize=10];\n",
    );
    let _ = writeln!(s, "  label=\"{}\";", esc(&format!("plan '{}'", plan.graph)));
    s.push_str("  subgraph cluster_legend { label=\"targets\"; style=dashed;\n");
    for (i, t) in plan.targets.iter().enumerate() {
        let _ = writeln!(s, "    legend{i} [label=\"{}\", fillcolor={}];", esc(&t.name), COLOURS[i % COLOURS.len()]);
    }
    s.push_str("  }\n");
    for &v in graph.inputs() {
        let name = &graph.value(v).name;
        // An input the caller holds on a device (`--input-device`) is drawn there, in its target's colour.
        let home = plan.inputs.iter().find(|i| i.name == *name).and_then(|i| i.device.as_ref());
        let target = home.and_then(|d| plan.targets.iter().position(|t| t.space == *d));
        let (label, fill) = match (home, target) {
            (Some(d), Some(t)) => (format!("{}\\non {d}", esc(name)), COLOURS[t % COLOURS.len()]),
            _ => (esc(name), "white"),
        };
        let _ = writeln!(s, "  \"v{}\" [label=\"{label}\", shape=ellipse, fillcolor={fill}];", v.as_u32());
    }
    for (p, (name, op)) in plan.nodes.iter().zip(&plan.node_names) {
        let colour = COLOURS[p.target % COLOURS.len()];
        let _ = writeln!(s, "  \"n{}\" [label=\"{}\\n{}\", fillcolor={colour}];", p.node.as_u32(), esc(name), op);
    }
    for p in &plan.nodes {
        for v in graph.node(p.node).inputs.iter().flatten() {
            let from = match graph.value(*v).def {
                ValueDef::Const(_) => continue,
                ValueDef::Input(_) => format!("v{}", v.as_u32()),
                ValueDef::Node(n, _) => format!("n{}", n.as_u32()),
            };
            let space = &plan.targets[p.target].space;
            let copy = plan.copies.iter().find(|c| c.id == *v && &c.to == space && c.when != When::Setup);
            match copy {
                Some(c) => {
                    let label = format!("{} {} bytes\\n{}", c.kind, c.bytes, esc(&c.reason));
                    let _ = writeln!(
                        s,
                        "  \"{from}\" -> \"n{}\" [color=red, fontcolor=red, penwidth=2, label=\"{label}\"];",
                        p.node.as_u32()
                    );
                }
                None => {
                    let _ = writeln!(s, "  \"{from}\" -> \"n{}\";", p.node.as_u32());
                }
            }
        }
    }
    for o in graph.outputs() {
        let _ = writeln!(s, "  \"out_{}\" [label=\"{}\", shape=ellipse, fillcolor=white];", esc(&o.name), esc(&o.name));
        let from = match graph.value(o.value).def {
            ValueDef::Node(n, _) => format!("n{}", n.as_u32()),
            _ => format!("v{}", o.value.as_u32()),
        };
        match plan.copies.iter().find(|c| c.id == o.value && c.when == When::WhenRead) {
            Some(c) => {
                let _ = writeln!(
                    s,
                    "  \"{from}\" -> \"out_{}\" [color=red, fontcolor=red, label=\"download {} bytes\\nwhen read\"];",
                    esc(&o.name),
                    c.bytes
                );
            }
            None => {
                let _ = writeln!(s, "  \"{from}\" -> \"out_{}\";", esc(&o.name));
            }
        }
    }
    s.push_str("}\n");
    s
}
