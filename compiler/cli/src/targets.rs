//! The targets of a `--target` list, opened for one graph: what the planner reads through
//! [`stowage_compiler::plan::Backend`], and what lowering needs (the OpenCL device).

use stowage_compiler::ir::Graph;
use stowage_compiler::plan::Backend;
use stowage_cpu::CpuTarget;
use stowage_opencl::{PlanTarget, Target};

/// One opened target.
pub enum Opened {
    /// The CPU.
    Cpu(CpuTarget),
    /// An OpenCL device, and the planner's view of it for this graph.
    OpenCl(Target, PlanTarget),
}

/// Checks a target list without opening anything: known names, none twice.
pub fn check(list: &str) -> Result<Vec<String>, String> {
    let names: Vec<String> = list.split(',').map(|t| t.trim().to_string()).collect();
    for (k, t) in names.iter().enumerate() {
        if t != "cpu" && stowage_opencl::parse_target(t).is_err() {
            return Err(format!("unknown target '{t}' (`stowage targets` lists them)"));
        }
        if names[..k].contains(t) {
            return Err(format!("target '{t}' is listed twice in '{list}'"));
        }
    }
    Ok(names)
}

/// Opens every target of `list` for `graph`, with `threads` CPU threads.
pub fn open(list: &str, threads: usize, graph: &Graph) -> Result<Vec<Opened>, String> {
    let mut opened = Vec::new();
    for name in check(list)? {
        if name == "cpu" {
            opened.push(Opened::Cpu(CpuTarget::new(threads)));
            continue;
        }
        let device = Target::open(&name).map_err(|e| e.to_string())?;
        let view = PlanTarget::new(&name, device.info(), device.mode(), graph).map_err(|e| e.to_string())?;
        let space = device.space().name().to_string();
        if opened.iter().any(|o| matches!(o, Opened::OpenCl(t, _) if t.space().name() == space)) {
            return Err(format!("targets of '{list}': two of them are the same device ({space})"));
        }
        opened.push(Opened::OpenCl(device, view));
    }
    Ok(opened)
}

/// The planner's view of each opened target, in order.
pub fn backends(opened: &[Opened]) -> Vec<&dyn Backend> {
    opened
        .iter()
        .map(|o| match o {
            Opened::Cpu(c) => c as &dyn Backend,
            Opened::OpenCl(_, p) => p as &dyn Backend,
        })
        .collect()
}
