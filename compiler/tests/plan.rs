//! The planner's passes on hand-made graphs and made-up targets: placement and its reasons, one copy per value and
//! destination, arenas against their lower bound with views and in-place nodes, the copy budget.

use stowage_compiler::ir::{Binary, Graph, NodeId, Op, Unary, ValueId, ValueType};
use stowage_compiler::plan::{self, Accepts, Backend, CopyKind, PlanError, PlanOptions, TargetSpec, When};
use stowage_runtime::{DatumType, MapSupport, MemoryKind, StorageDescriptor};

/// A made-up target: host or a discrete device, with a kernel for every op but those it lists.
struct Fake {
    spec: TargetSpec,
    lacks: Vec<&'static str>,
    /// What every kernel reads in place.
    reads: Accepts,
}

fn cpu() -> Fake {
    let spec = TargetSpec {
        name: "cpu".into(),
        space: "host".into(),
        memory: StorageDescriptor::HOST,
        gflops: 100.0,
        launch_us: 0.5,
    };
    Fake { spec, lacks: vec![], reads: Accepts::PACKED }
}

fn gpu(lacks: Vec<&'static str>) -> Fake {
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
    Fake {
        spec: TargetSpec { name: "gpu".into(), space: "gpu:0".into(), memory, gflops: 50_000.0, launch_us: 5.0 },
        lacks,
        reads: Accepts::PACKED,
    }
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
        self.reads
    }
    /// Its Relu and Exp kernels write over their input; its Concat joins its inputs (the tests' are along an
    /// axis with none of extent over 1 before it).
    fn kernel_steps(&self, segment: &Graph, _: &[plan::PlanInput]) -> Vec<plan::KernelStep> {
        let mut steps = plan::one_step_per_node(segment);
        for (s, &n) in steps.iter_mut().zip(segment.order()) {
            s.in_place = matches!(segment.node(n).op, Op::Unary(Unary::Relu | Unary::Exp));
            s.joins = matches!(segment.node(n).op, Op::Concat { .. });
        }
        steps
    }
}

fn f32s(shape: &[usize]) -> ValueType {
    ValueType::new(DatumType::F32, shape)
}

/// x[1,1024] → Relu → Exp → Relu → y, each 4096 bytes.
fn chain() -> (Graph, Vec<ValueId>) {
    let mut g = Graph::new("chain");
    let x = g.add_input("x", f32s(&[1, 1024]));
    let mut v = x;
    let mut values = vec![x];
    for (i, u) in [Unary::Relu, Unary::Exp, Unary::Relu].into_iter().enumerate() {
        let n =
            g.add_node(format!("n{i}"), Op::Unary(u), vec![Some(v)], vec![Some((format!("v{i}"), f32s(&[1, 1024])))]);
        v = g.node(n).outputs[0].expect("output");
        values.push(v);
    }
    g.add_output("y", v);
    (g, values)
}

#[test]
fn a_node_goes_to_the_first_target_with_a_kernel_and_says_why() {
    let (g, _) = chain();
    let (gpu, cpu) = (gpu(vec!["Exp"]), cpu());
    let p = plan::plan(&g, &[&gpu, &cpu], &PlanOptions::default()).expect("plans");
    let placed: Vec<(&str, &str)> =
        p.nodes.iter().map(|n| (g.node(n.node).name.as_str(), p.targets[n.target].name.as_str())).collect();
    assert_eq!(placed, [("n0", "gpu"), ("n1", "cpu"), ("n2", "gpu")]);
    assert!(p.nodes[1].reason.contains("gpu: no kernel for Exp"), "{}", p.nodes[1].reason);
    // Copies: the input up, n0's result down for Exp, Exp's result up again; the output down only when read.
    let kinds: Vec<(CopyKind, &str, When)> = p.copies.iter().map(|c| (c.kind, c.value.as_str(), c.when)).collect();
    assert_eq!(
        kinds,
        [
            (CopyKind::Upload, "x", When::EveryRun),
            (CopyKind::Download, "v0", When::EveryRun),
            (CopyKind::Upload, "v1", When::EveryRun)
        ]
    );
    let read = plan::plan(&g, &[&gpu, &cpu], &PlanOptions { read_outputs: true, ..Default::default() }).expect("plans");
    assert_eq!(read.copies.last().map(|c| (c.kind, c.when)), Some((CopyKind::Download, When::WhenRead)));
}

#[test]
fn no_target_for_a_node_names_the_node_and_every_refusal() {
    let (g, _) = chain();
    let gpu = gpu(vec!["Exp"]);
    let err = plan::plan(&g, &[&gpu], &PlanOptions::default()).expect_err("refused");
    assert!(matches!(err, PlanError::NoTarget { .. }));
    assert_eq!(err.to_string(), "node 'n1' (Exp): no target can run it (gpu: no kernel for Exp)");
}

#[test]
fn a_value_read_twice_on_a_device_is_uploaded_once() {
    let mut g = Graph::new("twice");
    let x = g.add_input("x", f32s(&[256]));
    let a = g.add_node("a", Op::Unary(Unary::Relu), vec![Some(x)], vec![Some(("a".into(), f32s(&[256])))]);
    let b = g.add_node("b", Op::Unary(Unary::Neg), vec![Some(x)], vec![Some(("b".into(), f32s(&[256])))]);
    let (a, b) = (g.node(a).outputs[0].expect("a"), g.node(b).outputs[0].expect("b"));
    let s = g.add_node("s", Op::Binary(Binary::Add), vec![Some(a), Some(b)], vec![Some(("s".into(), f32s(&[256])))]);
    g.add_output("s", g.node(s).outputs[0].expect("s"));
    let gpu = gpu(vec![]);
    let p = plan::plan(&g, &[&gpu], &PlanOptions::default()).expect("plans");
    assert_eq!(p.run_copies().count(), 1, "{:?}", p.copies);
    // Device arena: a and b, alive together. The upload of x (made by its transfer) and the output s (handed to
    // the caller) are made outside it.
    let arena = &p.arenas[0];
    assert_eq!((arena.lower_bound_bytes, arena.peak_bytes), (2 * 1024, 2 * 1024), "{arena:?}");
    let shared: Vec<&[String]> = arena.buffers.iter().map(|b| b.values.as_slice()).collect();
    assert_eq!(shared, [["a"], ["b"]]);
    assert_eq!(arena.outside, [("s".to_string(), 1024), ("x".to_string(), 1024)]);
}

#[test]
fn arenas_reuse_memory_of_dead_values_and_views_share_their_input() {
    // x[1,1024] → Relu a → Exp b → Reshape r[1024] → Relu c → Neg out.
    let mut g = Graph::new("views");
    let x = g.add_input("x", f32s(&[1, 1024]));
    let mut v = x;
    for (name, op, shape) in [
        ("a", Op::Unary(Unary::Relu), &[1, 1024][..]),
        ("b", Op::Unary(Unary::Exp), &[1, 1024]),
        ("r", Op::Reshape { allowzero: false }, &[1024]),
        ("c", Op::Unary(Unary::Relu), &[1024]),
        ("out", Op::Unary(Unary::Neg), &[1024]),
    ] {
        let n = g.add_node(name, op, vec![Some(v)], vec![Some((name.into(), f32s(shape)))]);
        v = g.node(n).outputs[0].expect("output");
    }
    g.add_output("out", v);
    let cpu = cpu();
    let p = plan::plan(&g, &[&cpu], &PlanOptions::default()).expect("plans");
    let arena = &p.arenas[0];
    // a is written over by b and c (each writes over its dead input), r is a view of b: one 4096-byte buffer
    // serves the chain. Neg writes its own, and as the output it is made outside the arena.
    assert_eq!(arena.peak_bytes, 4096, "{arena:?}");
    assert_eq!(arena.lower_bound_bytes, 4096);
    assert_eq!(arena.buffers.len(), 1);
    assert_eq!(arena.buffers[0].values, ["a", "b", "r", "c"]);
    assert_eq!(arena.outside, [("out".to_string(), 4096)]);
    assert_eq!(arena.buffer_of("a").map(|b| b.offset), Some(0));
    assert!(arena.buffer_of("b").is_none(), "b shares a's buffer, which a allocates");
}

/// A backend whose steps are not its nodes: a fused chain is one step writing only its result, so its inner
/// values get no buffer, and it reads its inputs where it runs.
#[test]
fn arenas_follow_the_steps_a_backend_runs() {
    struct Fused(Fake);
    impl Backend for Fused {
        fn spec(&self) -> &TargetSpec {
            self.0.spec()
        }
        fn supports(&self, graph: &Graph, node: NodeId) -> Result<(), String> {
            self.0.supports(graph, node)
        }
        fn accepts(&self, graph: &Graph, node: NodeId, input: usize) -> Accepts {
            self.0.accepts(graph, node, input)
        }
        fn kernel_steps(&self, segment: &Graph, _: &[plan::PlanInput]) -> Vec<plan::KernelStep> {
            // The chain x → v0 → v1 → v2 as one step.
            vec![plan::KernelStep {
                node: "n2".into(),
                reads: vec!["x".into()],
                writes: vec![segment.value(segment.outputs()[0].value).name.clone()],
                view: false,
                in_place: false,
                joins: false,
            }]
        }
    }
    let (g, _) = chain();
    let fused = Fused(cpu());
    let p = plan::plan(&g, &[&fused], &PlanOptions::default()).expect("plans");
    let arena = &p.arenas[0];
    assert!(arena.buffers.is_empty(), "v0 and v1 are never made, v2 is the output: {arena:?}");
    assert_eq!((arena.peak_bytes, arena.outside.len()), (0, 1));
}

#[test]
fn a_copy_budget_fails_planning_naming_the_copies() {
    let (g, _) = chain();
    let (gpu, cpu) = (gpu(vec!["Exp"]), cpu());
    let options = PlanOptions::default().copy_budget(Some(2), None);
    let err = plan::plan(&g, &[&gpu, &cpu], &options).expect_err("over budget").to_string();
    assert!(err.starts_with("the plan needs 3 copies of 12288 bytes per run, over the budget of 2 copies"), "{err}");
    assert!(err.contains("upload 'x' host → gpu:0, 4096 bytes") && err.contains("download 'v0'"), "{err}");
    assert!(plan::plan(&g, &[&gpu, &cpu], &PlanOptions::default().copy_budget(Some(3), Some(12288))).is_ok());
}

#[test]
fn a_fed_back_state_is_uploaded_on_the_first_run_and_kept_outside_the_arena() {
    let mut g = Graph::new("state");
    let s = g.add_input("s", f32s(&[64]));
    let n = g.add_node("t", Op::Unary(Unary::Tanh), vec![Some(s)], vec![Some(("s_next".into(), f32s(&[64])))]);
    g.add_output("s_next", g.node(n).outputs[0].expect("out"));
    let gpu = gpu(vec![]);
    let p = plan::plan(&g, &[&gpu], &PlanOptions::default().state("s_next", "s")).expect("plans");
    assert_eq!(p.copies.len(), 1);
    assert_eq!((p.copies[0].value.as_str(), p.copies[0].when), ("s", When::FirstRun));
    assert_eq!(p.arenas[0].persistent, [("s_next".to_string(), 256)]);
    let err = plan::plan(&g, &[&gpu], &PlanOptions::default().state("s_next", "x")).expect_err("no such input");
    assert!(err.to_string().contains("--state s_next=x: the model has no run-time input 'x'"), "{err}");
}

#[test]
fn a_device_result_read_by_two_host_nodes_and_the_caller_is_downloaded_once() {
    // x → n0 (gpu) → v0, read by n1 and n2 on the cpu (the gpu lacks Exp and Neg) and returned to the caller.
    let mut g = Graph::new("fan-out");
    let x = g.add_input("x", f32s(&[1024]));
    let n0 = g.add_node("n0", Op::Unary(Unary::Relu), vec![Some(x)], vec![Some(("v0".into(), f32s(&[1024])))]);
    let v0 = g.node(n0).outputs[0].expect("v0");
    for (name, u) in [("n1", Unary::Exp), ("n2", Unary::Neg)] {
        let n = g.add_node(name, Op::Unary(u), vec![Some(v0)], vec![Some((format!("{name}_out"), f32s(&[1024])))]);
        g.add_output(format!("{name}_out"), g.node(n).outputs[0].expect("out"));
    }
    g.add_output("v0", v0);
    let (gpu, cpu) = (gpu(vec!["Exp", "Neg"]), cpu());
    let options = PlanOptions { read_outputs: true, ..Default::default() };
    let p = plan::plan(&g, &[&gpu, &cpu], &options).expect("plans");
    let downloads: Vec<_> = p.copies.iter().filter(|c| c.kind == CopyKind::Download).collect();
    assert_eq!(downloads.len(), 1, "{downloads:?}");
    assert_eq!(
        (downloads[0].value.as_str(), downloads[0].to.as_str(), downloads[0].when),
        ("v0", "host", When::EveryRun)
    );
}

#[test]
fn a_row_pitch_on_an_axis_of_one_moves_to_the_next_axis_out() {
    use stowage_compiler::plan::InputLayout;
    // [2, 3, 1, 4] f32 with 64-byte rows: the row axis (2) has one index, so axis 1 steps by the pitch.
    let l = InputLayout::parse("row-pitch=64", 4).expect("parses");
    let shape = [2, 3, 1, 4];
    let strides = l.strides(DatumType::F32, &shape);
    let simple = l.simplified(&shape);
    assert_eq!(simple.strides(DatumType::F32, &shape)[..2], strides[..2]);
    assert_eq!(simple.row_pitch, Some(64));
    // A pitch with no axis of more than one index outside it is no padding at all.
    let flat = InputLayout::parse("row-pitch=64", 2).expect("parses").simplified(&[1, 4]);
    assert_eq!(flat.row_pitch, None);
    // A pitch too large for an address is an error, not an overflow.
    let huge = InputLayout::parse("row-pitch=9223372036854775808", 3).expect("parses");
    assert!(huge.check(DatumType::F32, &[2, 3, 4]).expect_err("refused").contains("more memory than an address"));
}

/// The plan of `chain` placed across a device and the host (Exp on the host), with the outputs read.
fn mixed_plan(g: &Graph) -> (plan::Plan, Fake, Fake) {
    let (gpu, cpu) = (gpu(vec!["Exp"]), cpu());
    let p = plan::plan(g, &[&gpu, &cpu], &PlanOptions { read_outputs: true, ..Default::default() }).expect("plans");
    (p, gpu, cpu)
}

#[test]
fn a_written_plan_reads_back_as_it_was() {
    let (g, _) = chain();
    let (p, gpu, cpu) = mixed_plan(&g);
    let back = plan::serial::decode(&plan::serial::encode(&p), &g, &[&gpu, &cpu]).expect("reads back");
    assert_eq!(format!("{back:?}"), format!("{p:?}"));
    assert_eq!(plan::show::text(&back), plan::show::text(&p));
}

#[test]
fn garbage_is_refused() {
    let (g, _) = chain();
    let (p, gpu, cpu) = mixed_plan(&g);
    let bytes = plan::serial::encode(&p);
    for bad in [&b"not a plan"[..], &bytes[..bytes.len() / 2], &[]] {
        let err = plan::serial::decode(bad, &g, &[&gpu, &cpu]).expect_err("refused");
        assert!(matches!(err, plan::PlanReadError::Format(_)), "{err}");
    }
}

#[test]
fn another_target_is_refused() {
    let (g, _) = chain();
    let (p, device, cpu) = mixed_plan(&g);
    let bytes = plan::serial::encode(&p);
    // The device now unified instead of discrete: another memory path, another plan.
    let mut unified = gpu(vec!["Exp"]);
    unified.spec.memory.kind = MemoryKind::Unified;
    unified.spec.memory.staged = false;
    let err = plan::serial::decode(&bytes, &g, &[&unified, &cpu]).expect_err("refused");
    assert!(matches!(err, plan::PlanReadError::Targets(_)), "{err}");
    assert!(err.to_string().contains("'gpu' is unified memory in space gpu:0"), "{err}");
    let err = plan::serial::decode(&bytes, &g, &[&cpu]).expect_err("refused");
    assert_eq!(err.to_string(), "it was made for 2 targets, 1 are open");
    // Another device of the same kind (other bandwidth, other name) takes the plan, with its own descriptor.
    let mut other = gpu(vec!["Exp"]);
    other.spec.name = "gpu:discrete".into();
    other.spec.memory.bandwidth_gbps = 64.0;
    let back = plan::serial::decode(&bytes, &g, &[&other, &cpu]).expect("same memory path");
    assert!(plan::serial::decode(&bytes, &g, &[&device, &cpu]).is_ok());
    assert_eq!(back.targets[0].memory.bandwidth_gbps, 64.0);
}

#[test]
fn another_graph_is_refused() {
    let (g, _) = chain();
    let (p, gpu, cpu) = mixed_plan(&g);
    let bytes = plan::serial::encode(&p);
    let mut renamed = Graph::new("chain");
    let x = renamed.add_input("x", f32s(&[1, 1024]));
    let n =
        renamed.add_node("other", Op::Unary(Unary::Relu), vec![Some(x)], vec![Some(("v0".into(), f32s(&[1, 1024])))]);
    renamed.add_output("y", renamed.node(n).outputs[0].expect("output"));
    let err = plan::serial::decode(&bytes, &renamed, &[&gpu, &cpu]).expect_err("refused");
    assert!(matches!(err, plan::PlanReadError::Graph(_)), "{err}");
    assert!(err.to_string().contains("its node 'n0' is not node 0 here"), "{err}");
}

#[test]
fn a_unified_device_is_asked_what_its_kernels_read_before_it_imports_a_caller_layout() {
    use stowage_compiler::plan::{InputAccess, InputLayout};
    use stowage_runtime::LayoutSupport;
    // x[4, 256] in rows padded to 2048 bytes → Relu → y, on a unified device that imports at 64 bytes.
    let mut g = Graph::new("padded");
    let x = g.add_input("x", f32s(&[4, 256]));
    let n = g.add_node("n0", Op::Unary(Unary::Relu), vec![Some(x)], vec![Some(("y".into(), f32s(&[4, 256])))]);
    g.add_output("y", g.node(n).outputs[0].expect("output"));
    let layout = InputLayout { alignment: 4096, ..InputLayout::parse("row-pitch=2048", 2).expect("parses") };
    let options = PlanOptions::default().input_layout("x", layout);
    let padded = &[LayoutSupport::RowMajor, LayoutSupport::PaddedRows];
    let device = |holds: &'static [LayoutSupport], reads: Accepts| {
        let mut d = gpu(vec![]);
        d.spec.memory.kind = MemoryKind::Unified;
        d.spec.memory.import_alignment = Some(64);
        d.spec.memory.staged = false;
        d.spec.memory.layouts = holds;
        d.reads = reads;
        d
    };
    let access = |p: &plan::Plan| p.inputs[0].access.clone();
    // Memory that holds padded rows, and a kernel that reads them: imported in place.
    let reads_padded = Accepts { layouts: padded, at_lowering: true };
    let p = plan::plan(&g, &[&device(padded, reads_padded)], &options).expect("plans");
    assert_eq!(access(&p), [("gpu:0".to_string(), InputAccess::InPlace)]);
    assert!(p.copies.is_empty(), "{:?}", p.copies);
    // The same memory, a kernel that reads packed rows only: one upload, naming the kernel.
    let p = plan::plan(&g, &[&device(padded, Accepts::PACKED)], &options).expect("plans");
    assert_eq!(access(&p), [("gpu:0".to_string(), InputAccess::Copied)]);
    assert!(p.copies[0].reason.contains("where n0 (Relu) reads packed row-major"), "{}", p.copies[0].reason);
    // Memory that holds packed rows only: one upload, saying so.
    let p = plan::plan(&g, &[&device(&[LayoutSupport::RowMajor], reads_padded)], &options).expect("plans");
    assert!(p.copies[0].reason.contains("gpu:0 imports packed row-major host memory only"), "{}", p.copies[0].reason);
}

#[test]
fn a_strided_input_to_a_discrete_device_is_packed_as_it_uploads_or_relaid_first() {
    use stowage_compiler::plan::InputLayout;
    // x[4, 256] in rows padded to 2048 bytes → Relu → y, on a discrete device.
    let mut g = Graph::new("padded");
    let x = g.add_input("x", f32s(&[4, 256]));
    let n = g.add_node("n0", Op::Unary(Unary::Relu), vec![Some(x)], vec![Some(("y".into(), f32s(&[4, 256])))]);
    g.add_output("y", g.node(n).outputs[0].expect("output"));
    let layout = InputLayout::parse("row-pitch=2048", 2).expect("parses");
    let options = PlanOptions::default().input_layout("x", layout);
    // A backend with `upload_with`: one upload, which packs.
    let p = plan::plan(&g, &[&gpu(vec![])], &options).expect("plans");
    assert_eq!(p.copies.len(), 1, "{:?}", p.copies);
    assert_eq!(p.copies[0].kind, CopyKind::Upload);
    assert!(p.copies[0].reason.contains("packed as it goes (the caller's "), "{}", p.copies[0].reason);
    // Without: packed on the host first, then uploaded; both planned, in that order.
    let mut plain = gpu(vec![]);
    plain.spec.memory.packs_on_upload = false;
    let p = plan::plan(&g, &[&plain], &options).expect("plans");
    let kinds: Vec<(CopyKind, &str, &str)> =
        p.copies.iter().map(|c| (c.kind, c.from.as_str(), c.to.as_str())).collect();
    assert_eq!(kinds, [(CopyKind::Relayout, "host", "host"), (CopyKind::Upload, "host", "gpu:0")]);
    assert!(p.copies[0].reason.contains("no `upload_with`"), "{}", p.copies[0].reason);
    // A packed input is one upload either way.
    let p = plan::plan(&g, &[&plain], &PlanOptions::default()).expect("plans");
    assert_eq!(p.copies.len(), 1, "{:?}", p.copies);
    // Memory that holds padded rows at a pitch of 256, and a kernel compiled for them: the caller's bytes
    // uploaded as they are (three rows of 2048 bytes and the last one's 1024), read as held.
    use stowage_runtime::LayoutSupport;
    let mut holding = gpu(vec![]);
    holding.spec.memory.layouts = &[LayoutSupport::RowMajor, LayoutSupport::PaddedRows];
    holding.spec.memory.row_pitch_alignment = 256;
    holding.reads = Accepts { layouts: &[LayoutSupport::RowMajor, LayoutSupport::PaddedRows], at_lowering: true };
    let p = plan::plan(&g, &[&holding], &options).expect("plans");
    assert_eq!(p.inputs[0].access, [("gpu:0".to_string(), plan::InputAccess::Held)]);
    assert_eq!((p.copies.len(), p.copies[0].kind, p.copies[0].bytes), (1, CopyKind::Upload, 3 * 2048 + 1024));
    // A pitch off the device's row pitch alignment is not held: packed as it goes.
    let odd = PlanOptions::default().input_layout("x", InputLayout::parse("row-pitch=1088", 2).expect("parses"));
    let p = plan::plan(&g, &[&holding], &odd).expect("plans");
    assert_eq!(p.inputs[0].access, [("gpu:0".to_string(), plan::InputAccess::Copied)]);
    assert_eq!(p.copies[0].bytes, 4 * 1024);
}

#[test]
fn a_view_in_another_space_keeps_the_value_it_views_alive_to_its_own_readers() {
    // x → Relu (gpu) → v0 → Flatten (cpu: a view of the lazy device tensor) → f → Exp (gpu) → y. The Exp reads
    // f, which is v0's device memory: v0 must live until the Exp, not die at the Flatten.
    let mut g = Graph::new("viewed");
    let x = g.add_input("x", f32s(&[1, 1024]));
    let relu = g.add_node("n0", Op::Unary(Unary::Relu), vec![Some(x)], vec![Some(("v0".into(), f32s(&[1, 1024])))]);
    let v0 = g.node(relu).outputs[0].expect("output");
    let flat = g.add_node("n1", Op::Flatten { axis: 1 }, vec![Some(v0)], vec![Some(("f".into(), f32s(&[1, 1024])))]);
    let f = g.node(flat).outputs[0].expect("output");
    let exp = g.add_node("n2", Op::Unary(Unary::Exp), vec![Some(f)], vec![Some(("e".into(), f32s(&[1, 1024])))]);
    let e = g.node(exp).outputs[0].expect("output");
    let last = g.add_node("n3", Op::Unary(Unary::Abs), vec![Some(e)], vec![Some(("y".into(), f32s(&[1, 1024])))]);
    g.add_output("y", g.node(last).outputs[0].expect("output"));
    let mut device = gpu(vec!["Flatten"]);
    device.spec.memory.kind = MemoryKind::Device;
    let p = plan::plan(&g, &[&device, &cpu()], &PlanOptions::default()).expect("plans");
    let arena = p.arenas.iter().find(|a| a.space == "gpu:0").expect("a device arena");
    let v0 = arena.buffer_of("v0").expect("v0 in the arena");
    let e = arena.buffer_of("e").expect("e in the arena");
    assert!(v0.live.1 >= e.live.0, "v0 {:?} dies before the Exp that reads its view runs {:?}", v0.live, e.live);
    let overlap = v0.offset < e.offset + e.bytes && e.offset < v0.offset + v0.bytes;
    assert!(!overlap, "the Exp writes over the memory it reads: v0 {v0:?}, e {e:?}");
}

/// x[1,64] → Neg a[1,64], Neg b[1,192] → Concat(inputs) c[1,…] → Neg out, with `extra` values among the
/// Concat's inputs and `a` also an output when `a_out`.
fn join(inputs: &[&str], a_out: bool) -> Graph {
    let mut g = Graph::new("join");
    let x = g.add_input("x", f32s(&[1, 64]));
    let mut named = vec![("x", x)];
    for (name, width) in [("a", 64), ("b", 192)] {
        let n = g.add_node(name, Op::Unary(Unary::Neg), vec![Some(x)], vec![Some((name.into(), f32s(&[1, width])))]);
        named.push((name, g.node(n).outputs[0].expect("output")));
    }
    let value = |name: &str| named.iter().find(|(n, _)| *n == name).expect("named").1;
    let width: usize = inputs.iter().map(|&i| g.ty(value(i)).shape[1]).sum();
    let reads = inputs.iter().map(|&i| Some(value(i))).collect();
    let c = g.add_node("c", Op::Concat { axis: 1 }, reads, vec![Some(("c".into(), f32s(&[1, width])))]);
    let c = g.node(c).outputs[0].expect("c");
    let out = g.add_node("out", Op::Unary(Unary::Neg), vec![Some(c)], vec![Some(("out".into(), f32s(&[1, width])))]);
    g.add_output("out", g.node(out).outputs[0].expect("out"));
    if a_out {
        g.add_output("a", value("a"));
    }
    g
}

#[test]
fn a_join_of_a_join_holds_what_the_first_held() {
    // c = a ++ b, read by a Neg as well; e = c ++ d: DenseNet's growing concatenation. All four sit in e's buffer
    // where e has them, and neither join copies.
    let mut g = Graph::new("joins");
    let x = g.add_input("x", f32s(&[1, 64]));
    let neg = |g: &mut Graph, name: &str, from: ValueId, width: usize| {
        let n = g.add_node(name, Op::Unary(Unary::Neg), vec![Some(from)], vec![Some((name.into(), f32s(&[1, width])))]);
        g.node(n).outputs[0].expect("output")
    };
    let (a, b) = (neg(&mut g, "a", x, 64), neg(&mut g, "b", x, 192));
    let c = g.add_node("c", Op::Concat { axis: 1 }, vec![Some(a), Some(b)], vec![Some(("c".into(), f32s(&[1, 256])))]);
    let c = g.node(c).outputs[0].expect("c");
    let r = neg(&mut g, "r", c, 256);
    let d = neg(&mut g, "d", r, 64);
    let e = g.add_node("e", Op::Concat { axis: 1 }, vec![Some(c), Some(d)], vec![Some(("e".into(), f32s(&[1, 320])))]);
    let e = g.node(e).outputs[0].expect("e");
    let out = neg(&mut g, "out", e, 320);
    g.add_output("out", out);
    let p = plan::plan(&g, &[&cpu()], &PlanOptions::default()).expect("plans");
    let arena = &p.arenas[0];
    let held = arena.buffer_of("e").expect("e in the arena");
    let at = |v: &str| held.inside.iter().find(|(n, _)| n == v).map(|(_, at)| *at);
    assert_eq!([at("c"), at("a"), at("b"), at("d")], [Some(0), Some(0), Some(256), Some(1024)], "{held:?}");
    let joins: Vec<(&str, Vec<&str>)> =
        held.joins.iter().map(|(j, parts)| (j.as_str(), parts.iter().map(String::as_str).collect())).collect();
    assert_eq!(joins, [("c", vec!["a", "b"]), ("e", vec!["c", "d"])]);
    assert!(plan::show::text(&p).contains("2 outputs written by their inputs' producers: c = a ++ b, e = c ++ d"));
}

#[test]
fn a_join_holds_its_inputs_where_its_output_has_them() {
    let cpu = cpu();
    let p = plan::plan(&join(&["a", "b"], false), &[&cpu], &PlanOptions::default()).expect("plans");
    let arena = &p.arenas[0];
    // a and b are written where c has them: one buffer of c's 1024 bytes from a's step on, where three buffers
    // (a, b, then c copied from them) held 2048 bytes at the Concat.
    assert_eq!(arena.buffers.len(), 1, "{arena:?}");
    let c = &arena.buffers[0];
    assert_eq!((c.values.as_slice(), c.bytes, c.live.0), (&["c".to_string()][..], 1024, 0));
    assert_eq!(c.inside, [("a".to_string(), 0), ("b".to_string(), 256)]);
    assert_eq!((arena.peak_bytes, arena.lower_bound_bytes), (1024, 1024));
    assert!(plan::show::text(&p)
        .contains("joined in place, no copy: 1 output written by its inputs' producers: c = a ++ b"));
    // None inside when an input is read twice by the join, is a graph input (not made in the arena), or is an
    // output of the graph: all or none, so a and b keep buffers of their own.
    for (inputs, a_out) in [(&["a", "a", "b"][..], false), (&["a", "x", "b"][..], false), (&["a", "b"][..], true)] {
        let p = plan::plan(&join(inputs, a_out), &[&cpu], &PlanOptions::default()).expect("plans");
        let arena = &p.arenas[0];
        assert!(arena.buffers.iter().all(|b| b.inside.is_empty()), "{inputs:?}, a an output: {a_out}: {arena:?}");
    }
}
