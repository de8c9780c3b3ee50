//! The OpenCL backend as the planner sees it ([`stowage_compiler::plan::Backend`]): its memory from the device's
//! descriptor, a throughput estimate from its compute units and clock, and the nodes it has kernels for, found by
//! translating the graph to OpenCL C without building it.

use std::collections::HashMap;

use stowage_compiler::ir::{Graph, NodeId};
use stowage_compiler::plan::{Accepts, Backend, Granted, Precision, TargetSpec};

use crate::device::{DeviceInfo, Mode};
use crate::error::Result;

/// One OpenCL target for one graph.
pub struct PlanTarget {
    spec: TargetSpec,
    refused: HashMap<NodeId, String>,
    info: DeviceInfo,
}

impl PlanTarget {
    /// The target `name` (as the caller wrote it) on the device `info` taken in `mode`, for `graph`.
    pub fn new(name: &str, info: &DeviceInfo, mode: Mode, graph: &Graph) -> Result<PlanTarget> {
        let refused = crate::lower::unsupported_nodes(graph, info)?.into_iter().collect();
        let spec = TargetSpec {
            name: name.to_string(),
            space: format!("opencl:{}", info.index),
            memory: crate::device::descriptor_for(info, mode),
            gflops: info.gflops(),
            launch_us: if info.gpu { 5.0 } else { 20.0 },
        };
        Ok(PlanTarget { spec, refused, info: info.clone() })
    }
}

impl Backend for PlanTarget {
    fn spec(&self) -> &TargetSpec {
        &self.spec
    }

    fn supports(&self, _graph: &Graph, node: NodeId) -> std::result::Result<(), String> {
        match self.refused.get(&node) {
            Some(reason) => Err(format!("no kernel ({reason})")),
            None => Ok(()),
        }
    }

    /// Kernels here are generated for packed row-major operands.
    fn accepts(&self, _graph: &Graph, _node: NodeId, _input: usize) -> Accepts {
        Accepts::PACKED
    }

    /// What the device grants ([`crate::precision_on`]): tf32 on tensor cores, else fp32 shown.
    fn precision(&self, asked: Precision) -> std::result::Result<Granted, String> {
        crate::lower::precision_on(&self.info, asked)
    }
}
