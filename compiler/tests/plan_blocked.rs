//! The channel-blocks pass (`plan/blocked.rs`) on hand-made graphs: a made-up host target whose kernels take
//! blocks by the role their node's name gives (`conv…` either layout, `pool…` its input's, `relu…`/`cat…` along,
//! `gap…` reads either and writes packed, anything else packed only).

use stowage_compiler::ir::{Graph, NodeId, Op, Unary, ValueId, ValueType};
use stowage_compiler::plan::{self, Accepts, Backend, BlockRole, PlanOptions, TargetSpec};
use stowage_runtime::{DatumType, StorageDescriptor};

struct Blocks {
    spec: TargetSpec,
    /// Whether it takes blocks at all.
    takes: bool,
}

fn host(name: &str, takes: bool) -> Blocks {
    let spec = TargetSpec {
        name: name.into(),
        space: "host".into(),
        memory: StorageDescriptor::HOST,
        gflops: 100.0,
        launch_us: 0.5,
    };
    Blocks { spec, takes }
}

impl Backend for Blocks {
    fn spec(&self) -> &TargetSpec {
        &self.spec
    }
    fn supports(&self, _: &Graph, _: NodeId) -> Result<(), String> {
        Ok(())
    }
    fn accepts(&self, _: &Graph, _: NodeId, _: usize) -> Accepts {
        Accepts::PACKED
    }
    fn channel_blocks(&self, graph: &Graph, node: NodeId) -> Option<(usize, BlockRole)> {
        let name = graph.node(node).name.as_str();
        let role = [
            ("conv", BlockRole::Either),
            ("pool", BlockRole::Same),
            ("relu", BlockRole::Along),
            ("cat", BlockRole::Along),
            ("gap", BlockRole::Reads),
        ]
        .into_iter()
        .find(|(p, _)| name.starts_with(p))?
        .1;
        self.takes.then_some((16, role))
    }
}

fn f32s(shape: &[usize]) -> ValueType {
    ValueType::new(DatumType::F32, shape)
}

/// `name` (any op: the roles go by name) from `inputs` to one value `name` of `shape`.
fn node(g: &mut Graph, name: &str, inputs: &[ValueId], shape: &[usize]) -> ValueId {
    let n = g.add_node(
        name,
        Op::Unary(Unary::Relu),
        inputs.iter().map(|&v| Some(v)).collect(),
        vec![Some((name.into(), f32s(shape)))],
    );
    g.node(n).outputs[0].expect("an output")
}

/// x[1,3,8,8] → conv0 [1,c,8,8] → relu0 → pool0 [1,c,4,4] → conv1 [1,32,4,4] → gap0 [1,32,1,1] → y, and what
/// reads relu0 besides (`extra`: a node of that name).
fn chain(c: usize, relu: bool, extra: Option<&str>) -> Graph {
    let mut g = Graph::new("chain");
    let x = g.add_input("x", f32s(&[1, 3, 8, 8]));
    let mut v = node(&mut g, "conv0", &[x], &[1, c, 8, 8]);
    if relu {
        v = node(&mut g, "relu0", &[v], &[1, c, 8, 8]);
    }
    if let Some(e) = extra {
        let side = node(&mut g, e, &[v], &[1, c, 8, 8]);
        g.add_output("side", side);
    }
    let p = node(&mut g, "pool0", &[v], &[1, c, 4, 4]);
    let c1 = node(&mut g, "conv1", &[p], &[1, 32, 4, 4]);
    let y = node(&mut g, "gap0", &[c1], &[1, 32, 1, 1]);
    g.add_output("y", y);
    g
}

fn blocked(g: &Graph, targets: &[&dyn Backend]) -> Vec<String> {
    let p = plan::plan(g, targets, &PlanOptions::default()).expect("plans");
    p.blocked.iter().map(|b| b.value.clone()).collect()
}

/// Rules 1 and 3: a chain from the first convolution's output to the global pool's input is blocked; the graph's
/// input and output, and the global pool's packed output, are not; no copy is planned.
#[test]
fn a_convolution_chain_is_blocked_between_its_ends() {
    let g = chain(32, true, None);
    let t = host("cpu", true);
    let p = plan::plan(&g, &[&t], &PlanOptions::default()).expect("plans");
    let names: Vec<&str> = p.blocked.iter().map(|b| b.value.as_str()).collect();
    assert_eq!(names, ["conv0", "relu0", "pool0", "conv1"]);
    assert!(p.copies.is_empty(), "{:?}", p.copies);
    assert!(p.blocked.iter().all(|b| b.block == 16));
    let text = plan::show::text(&p);
    assert!(text.contains("layouts: 4 values in channel blocks of 16"), "{text}");
    // A target that takes no blocks: none.
    assert!(blocked(&g, &[&host("cpu", false)]).is_empty());
}

/// Rule 2 and 3: a reader that takes packed values only un-blocks its value's whole group (the convolution's
/// output, the elementwise step's and the pool's), and nothing else.
#[test]
fn a_reader_without_blocks_unblocks_its_group_only() {
    let g = chain(32, true, Some("other"));
    assert_eq!(blocked(&g, &[&host("cpu", true)]), ["conv1"]);
}

/// Rule 4: channels not a multiple of the block are padded, their bytes the padded ones in the memory plan, but
/// not where an elementwise step walks them.
#[test]
fn padded_channels_only_without_elementwise_steps() {
    let t = host("cpu", true);
    let g = chain(20, false, None);
    let p = plan::plan(&g, &[&t], &PlanOptions::default()).expect("plans");
    let got: Vec<(&str, usize)> = p.blocked.iter().map(|b| (b.value.as_str(), b.bytes)).collect();
    // 20 channels padded to 32: 32·8·8·4 and 32·4·4·4 bytes.
    assert_eq!(got, [("conv0", 8192), ("pool0", 2048), ("conv1", 2048)]);
    let arena = &p.arenas[0];
    let conv0 = arena.buffers.iter().find(|b| b.values.iter().any(|v| v == "conv0")).expect("conv0 in the arena");
    assert!(conv0.bytes >= 8192, "{conv0:?}");
    let with_relu = chain(20, true, None);
    assert_eq!(blocked(&with_relu, &[&t]), ["conv1"]);
}

/// Rule 3: a value read on another target is not blocked; a written plan keeps the layouts (rule 6 of
/// `serial.rs`), and drops them where the target opened takes no blocks.
#[test]
fn layouts_cross_neither_targets_nor_machines() {
    let g = chain(32, true, None);
    let (a, b) = (host("cpu", true), host("other", true));
    let mut options = PlanOptions::default();
    options.pins.insert("pool0".into(), "other".into());
    let p = plan::plan(&g, &[&a, &b], &options).expect("plans");
    let names: Vec<&str> = p.blocked.iter().map(|b| b.value.as_str()).collect();
    assert_eq!(names, ["conv1"], "conv0, relu0 and pool0 are read across targets");
    let single = plan::plan(&g, &[&a], &PlanOptions::default()).expect("plans");
    let bytes = plan::serial::encode(&single);
    let back = plan::serial::decode(&bytes, &g, &[&a]).expect("reads back");
    assert_eq!(back.blocked, single.blocked);
    let elsewhere = plan::serial::decode(&bytes, &g, &[&host("cpu", false)]).expect("reads back");
    assert!(elsewhere.blocked.is_empty());
}

/// Rule 3: a value made in one segment of a target and read in a later segment of the same target (another target
/// runs between) crosses programs, and stays packed.
#[test]
fn values_between_segments_stay_packed() {
    let mut g = Graph::new("segments");
    let x = g.add_input("x", f32s(&[1, 3, 8, 8]));
    let v = node(&mut g, "conv0", &[x], &[1, 24, 8, 8]);
    let side = node(&mut g, "mid", &[x], &[1, 3, 8, 8]);
    g.add_output("side", side);
    let p = node(&mut g, "pool0", &[v], &[1, 24, 4, 4]);
    let c1 = node(&mut g, "conv1", &[p], &[1, 32, 4, 4]);
    let y = node(&mut g, "gap0", &[c1], &[1, 32, 1, 1]);
    g.add_output("y", y);
    let (a, b) = (host("cpu", true), host("other", true));
    let alone = plan::plan(&g, &[&a], &PlanOptions::default()).expect("plans");
    let names: Vec<&str> = alone.blocked.iter().map(|b| b.value.as_str()).collect();
    assert_eq!(names, ["conv0", "pool0", "conv1"]);
    let mut options = PlanOptions::default();
    options.pins.insert("mid".into(), "other".into());
    let split = plan::plan(&g, &[&a, &b], &options).expect("plans");
    let names: Vec<&str> = split.blocked.iter().map(|b| b.value.as_str()).collect();
    assert_eq!(names, ["conv1"], "conv0's output is read in the next cpu segment");
}
