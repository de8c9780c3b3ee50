//! The targets of a `--target` list, checked against a [`Registry`] and opened for one graph.

use stowage_compiler::ir::Graph;
use stowage_compiler::plan::Backend;
use stowage_runtime::{MemoryKind, StorageDescriptor};

use crate::backend::{OpenOptions, OpenedTarget, Registry};
use crate::error::{DriverError, Result};

/// Checks a target list without opening anything: names some registered kind answers to, none twice.
pub fn check(registry: &Registry, list: &str) -> Result<Vec<String>> {
    let names: Vec<String> = list.split(',').map(|t| t.trim().to_string()).collect();
    for (k, t) in names.iter().enumerate() {
        registry.kind_of(t)?;
        if names[..k].contains(t) {
            return Err(DriverError::TargetTwice { name: t.clone(), list: list.to_string() });
        }
    }
    Ok(names)
}

/// Opens every target of `list` for `graph`, with `threads` kernel threads. Two targets of one memory space (one
/// device reached twice) are an error, and so is a target whose space is not named for its storage descriptor;
/// more than [`crate::flags::MAX_THREADS`] threads are refused before any target is opened (or thread started).
pub fn open(
    registry: &Registry,
    list: &str,
    options: &OpenOptions,
    graph: &Graph,
) -> Result<Vec<Box<dyn OpenedTarget>>> {
    let (max, threads) = (crate::flags::MAX_THREADS, options.threads);
    if threads > max as usize {
        return Err(DriverError::TooManyThreads { threads, max });
    }
    let mut opened: Vec<Box<dyn OpenedTarget>> = Vec::new();
    for name in check(registry, list)? {
        let target = registry
            .kind_of(&name)?
            .open(&name, options, graph)
            .map_err(|e| DriverError::Open { target: name.clone(), message: e.to_string() })?;
        let spec = target.spec();
        if !space_fits(&spec.space, &spec.memory) {
            return Err(DriverError::SpaceMismatch {
                target: name,
                space: spec.space.clone(),
                descriptor: format!("{} ({:?})", spec.memory.name, spec.memory.kind),
            });
        }
        if opened.iter().any(|o| o.spec().space == spec.space) {
            return Err(DriverError::SameDevice { list: list.to_string(), space: spec.space.clone() });
        }
        opened.push(target);
    }
    Ok(opened)
}

/// The planner's view of each opened target, in order.
pub fn backends(opened: &[Box<dyn OpenedTarget>]) -> Vec<&dyn Backend> {
    opened.iter().map(|o| o.as_ref() as &dyn Backend).collect()
}

/// True when a target's memory space fits its storage descriptor: host memory is the space `host`; any other is
/// the storage's name, alone or with a device (`opencl` → `opencl:0`).
fn space_fits(space: &str, memory: &StorageDescriptor) -> bool {
    if memory.kind == MemoryKind::Host {
        return space == "host";
    }
    space.strip_prefix(memory.name).is_some_and(|rest| rest.is_empty() || rest.starts_with(':'))
}
