//! Import, the passes, the verifier and planning stay linear (or n log n) in graph length: a chain of 200,000
//! nodes goes through all of them in seconds. Speed is not asserted (the project's tests never time
//! themselves); each stage's time is printed, and `STOWAGE_CHAIN_SIZES=2000,20000,200000 cargo test --release
//! -p stowage-compiler --test long_chain -- --nocapture chain_stages` gives the figures in `docs/compiler.md`.

mod common;

use std::time::{Duration, Instant};

use common::{build, chain};
use stowage_compiler::ir::{verify::verify, Graph, NodeId};
use stowage_compiler::onnx::{self, ImportConfig};
use stowage_compiler::plan::{self, Accepts, Backend, PlanOptions, TargetSpec};
use stowage_compiler::Context;
use stowage_runtime::{MapSupport, MemoryKind, StorageDescriptor};

/// A made-up target with a kernel for every op but those it lacks.
struct Fake {
    spec: TargetSpec,
    lacks: &'static [&'static str],
}

impl Backend for Fake {
    fn spec(&self) -> &TargetSpec {
        &self.spec
    }
    fn supports(&self, graph: &Graph, node: NodeId) -> Result<(), String> {
        let op = graph.node(node).op.name();
        if self.lacks.contains(&op) {
            Err(format!("no kernel for {op}"))
        } else {
            Ok(())
        }
    }
    fn accepts(&self, _: &Graph, _: NodeId, _: usize) -> Accepts {
        Accepts::PACKED
    }
}

/// The host, without the ops it lacks.
fn cpu(lacks: &'static [&'static str]) -> Fake {
    let spec = TargetSpec {
        name: "cpu".into(),
        space: "host".into(),
        memory: StorageDescriptor::HOST,
        gflops: 100.0,
        launch_us: 0.5,
    };
    Fake { spec, lacks }
}

/// A discrete device without Neg.
fn gpu() -> Fake {
    let memory = StorageDescriptor {
        name: "gpu",
        kind: MemoryKind::Device,
        alignment: 256,
        map: MapSupport::Copy,
        import_alignment: None,
        bandwidth_gbps: 20.0,
        latency_us: 10.0,
        staged: true,
        packs_on_upload: true,
        ..StorageDescriptor::HOST
    };
    let spec = TargetSpec { name: "gpu".into(), space: "gpu:0".into(), memory, gflops: 50_000.0, launch_us: 0.1 };
    Fake { spec, lacks: &["Neg"] }
}

/// Each stage of the pipeline on a chain of `n` nodes, timed, with what it produced checked.
fn stages(n: usize) -> Vec<(String, Duration)> {
    let bytes = build::bytes(&chain::model(n));
    let mut times = Vec::new();
    let start = Instant::now();
    let graph = onnx::load_bytes(&bytes, &ImportConfig::new()).unwrap_or_else(|e| panic!("{e}"));
    times.push(("import".to_string(), start.elapsed()));
    assert_eq!(graph.order().len(), n, "every node of the chain is imported");
    let mut cx = Context::new(graph);
    cx.set_verify(false);
    cx.optimize().unwrap_or_else(|e| panic!("{e}"));
    times.extend(cx.timings().iter().map(|t| (format!("pass {}", t.pass), t.duration)));
    assert!(cx.timings().iter().all(|t| t.changes == 0), "nothing in the chain is rewritten");
    let start = Instant::now();
    verify(&cx.graph).unwrap_or_else(|e| panic!("{e}"));
    times.push(("verify".to_string(), start.elapsed()));

    let start = Instant::now();
    let p = plan::plan(&cx.graph, &[&cpu(&[])], &PlanOptions::default()).unwrap_or_else(|e| panic!("{e}"));
    times.push(("plan cpu".to_string(), start.elapsed()));
    assert_eq!(p.nodes.len(), n);
    assert!(p.copies.is_empty(), "one host target copies nothing");
    // Each value lives until the next node reads it, the output outside the arena: n - 1 buffers at two
    // offsets, taking turns down the chain.
    let arena = &p.arenas[0];
    assert_eq!(arena.buffers.len(), n - 1);
    assert_eq!(arena.peak_bytes, 2 * arena.buffers[0].bytes, "{:?}", &arena.buffers[..4]);

    // Relu only on the device, Neg only on the host: a download and an upload every three nodes.
    let start = Instant::now();
    let p =
        plan::plan(&cx.graph, &[&gpu(), &cpu(&["Relu"])], &PlanOptions::default()).unwrap_or_else(|e| panic!("{e}"));
    times.push(("plan gpu,cpu".to_string(), start.elapsed()));
    let g = &cx.graph;
    for placed in &p.nodes {
        match g.node(placed.node).op.name() {
            "Relu" => assert_eq!(placed.target, 0, "Relu runs on the device"),
            "Neg" => assert_eq!(placed.target, 1, "Neg runs on the host"),
            _ => {}
        }
    }
    let negs = (0..n).filter(|i| i % 3 == 1).count();
    assert!(p.copies.len() >= 2 * negs.saturating_sub(1), "{} copies for {negs} Negs", p.copies.len());
    let total: Duration = times.iter().map(|t| t.1).sum();
    times.push(("total".to_string(), total));
    times
}

fn print(n: usize, times: &[(String, Duration)]) {
    println!("chain of {n} nodes:");
    for (stage, t) in times {
        println!("  {stage:<28} {:>10.1} ms", t.as_secs_f64() * 1e3);
    }
}

#[test]
fn a_chain_of_200000_nodes_imports_optimises_and_plans() {
    let n = 200_000;
    let times = stages(n);
    print(n, &times);
}

#[test]
fn chain_stages() {
    let sizes = std::env::var("STOWAGE_CHAIN_SIZES").unwrap_or_else(|_| "2000".into());
    for n in sizes.split(',').map(|s| s.trim().parse::<usize>().expect("STOWAGE_CHAIN_SIZES: numbers, comma-separated"))
    {
        let times = stages(n);
        print(n, &times);
    }
}
