//! `If` with its branches as subgraphs (`ir/subgraph.rs`): where a target runs an `If` whole
//! (`ImportConfig::whole` holds "If"), a condition known only at run time keeps both branches as graphs of their
//! own, whose inputs are the values they read from around the node; the verifier checks them, the text form
//! prints them, the passes run inside them, and built code writes them out and reads them back.

mod common;

use common::build::{self, graph_attr, node, value};
use stowage_compiler::ir::print::print;
use stowage_compiler::ir::verify::verify;
use stowage_compiler::ir::{serial, Graph, Op};
use stowage_compiler::onnx::proto::tensor_proto::DataType;
use stowage_compiler::onnx::proto::{GraphProto, NodeProto};
use stowage_compiler::onnx::{self, ImportConfig};
use stowage_compiler::Context;

fn branch(nodes: Vec<NodeProto>, outputs: &[(&str, &[i64])]) -> GraphProto {
    GraphProto {
        name: Some("branch".into()),
        node: nodes,
        output: outputs.iter().map(|(o, dims)| value(o, dims)).collect(),
        ..Default::default()
    }
}

fn if_node(name: &str, cond: &str, out: &str, then: GraphProto, otherwise: GraphProto) -> NodeProto {
    NodeProto {
        name: Some(name.into()),
        ..node("If", &[cond], &[out], vec![graph_attr("then_branch", then), graph_attr("else_branch", otherwise)])
    }
}

/// `y = If(cond) { Identity(Relu(x)) * w } else { Neg(x) }` over x[2,3], `cond` a graph input, `w` an outer
/// initializer.
fn if_model() -> Vec<u8> {
    let then = branch(
        vec![
            node("Relu", &["x"], &["r"], vec![]),
            node("Identity", &["r"], &["i"], vec![]),
            node("Mul", &["i", "w"], &["t"], vec![]),
        ],
        &[("t", &[2, 3])],
    );
    let otherwise = branch(vec![node("Neg", &["x"], &["e"], vec![])], &[("e", &[2, 3])]);
    let inputs = vec![value("x", &[2, 3]), build::typed_value("cond", DataType::Bool, &[])];
    let inits = vec![build::floats("w", &[3], &[1.0, 2.0, 3.0])];
    let iff = if_node("guard", "cond", "y", then, otherwise);
    build::bytes(&build::model(16, vec![iff], inputs, vec![value("y", &[2, 3])], inits))
}

fn kept() -> ImportConfig {
    ImportConfig::new().keep_whole("If")
}

fn the_if(g: &Graph) -> &stowage_compiler::ir::Branches {
    let n = g.order().iter().find(|&&n| matches!(g.node(n).op, Op::If(_))).expect("an If node");
    match &g.node(*n).op {
        Op::If(b) => b,
        _ => unreachable!(),
    }
}

#[test]
fn a_run_time_condition_keeps_both_branches_as_subgraphs_with_outer_values_explicit() {
    let g = onnx::load_bytes(&if_model(), &kept()).expect("imports");
    verify(&g).expect("verifies");
    // One node in the model's graph: the If, reading the condition and x (w, a constant, is copied in).
    assert_eq!(g.order().len(), 1, "{}", print(&g));
    let n = g.order()[0];
    assert_eq!(g.node(n).inputs.len(), 2, "{}", print(&g));
    let b = the_if(&g);
    assert_eq!(b.then.inputs().len(), 1);
    assert!(b.then.values().any(|(_, v)| v.name == "w" && matches!(v.def, stowage_compiler::ir::ValueDef::Const(_))));
    let text = print(&g);
    assert!(text.contains("= If(") && text.contains("    then:\n") && text.contains("    else:\n"), "{text}");
    assert!(text.contains("Relu") && text.contains("Neg") && !text.contains("Where"), "{text}");
    // Without a target that runs If whole, the same model takes the Where form.
    let selected = print(&onnx::load_bytes(&if_model(), &ImportConfig::new()).expect("imports"));
    assert!(selected.contains("Where") && !selected.contains("then:"), "{selected}");
}

#[test]
fn the_passes_run_inside_the_branches() {
    let mut cx = Context::new(onnx::load_bytes(&if_model(), &kept()).expect("imports"));
    assert!(print(&the_if(&cx.graph).then).contains("Identity"));
    cx.optimize().expect("optimizes");
    let then = print(&the_if(&cx.graph).then);
    assert!(!then.contains("Identity") && then.contains("Relu"), "{then}");
    let removed = cx.timings().iter().find(|t| t.pass == "remove_identities").expect("ran");
    assert_eq!(removed.changes, 1);
}

#[test]
fn the_verifier_checks_each_branch() {
    let mut g = onnx::load_bytes(&if_model(), &kept()).expect("imports");
    let n = g.order()[0];
    let Op::If(b) = &mut g.node_mut(n).op else { panic!("an If") };
    let relu = b.then.order()[0];
    b.then.node_mut(relu).inputs.push(None);
    let e = verify(&g).expect_err("broken").to_string();
    assert!(e.contains("\"guard\" then: ") && e.contains("Relu takes 1 to 1 inputs"), "{e}");
}

#[test]
fn built_code_writes_the_branches_out_and_reads_them_back() {
    let g = onnx::load_bytes(&if_model(), &kept()).expect("imports");
    let encoded = serial::encode(&g).expect("written");
    let back = serial::decode(&encoded.graph, &encoded.constants).expect("read");
    verify(&back).expect("verifies");
    assert_eq!(print(&back), print(&g));
}

#[test]
fn branches_that_disagree_and_nesting_past_the_bound_are_refused() {
    // Branches of different types, the condition known only at run time.
    let then = branch(vec![node("Relu", &["x"], &["t"], vec![])], &[("t", &[2, 3])]);
    let otherwise = branch(vec![node("ReduceSum", &["x"], &["e"], vec![build::int("keepdims", 0)])], &[("e", &[])]);
    let inputs = vec![value("x", &[2, 3]), build::typed_value("cond", DataType::Bool, &[])];
    let m = build::model(16, vec![if_node("guard", "cond", "y", then, otherwise)], inputs, vec![], vec![]);
    let e = onnx::load_bytes(&build::bytes(&m), &kept()).expect_err("refused").to_string();
    assert!(e.contains("node 'guard' (If)") && e.contains("different types for output 0"), "{e}");
    assert!(!e.contains('\n'), "{e}");

    // Ifs on a run-time condition nested `levels` deep, each the then_branch of the one around it.
    let nested = |levels: usize| {
        let mut body = node("Relu", &["x"], &["y"], vec![]);
        for level in 0..levels {
            let otherwise = branch(vec![node("Neg", &["x"], &["y"], vec![])], &[("y", &[2, 3])]);
            body = if_node(&format!("level{level}"), "c", "y", branch(vec![body], &[("y", &[2, 3])]), otherwise);
        }
        let inputs = vec![value("x", &[2, 3]), build::typed_value("c", DataType::Bool, &[])];
        build::bytes(&build::model(16, vec![body], inputs, vec![value("y", &[2, 3])], vec![]))
    };
    let g = onnx::load_bytes(&nested(16), &kept()).expect("16 deep imports");
    verify(&g).expect("verifies");
    assert_eq!(print(&g).matches("then:").count(), 16);
    let e = onnx::load_bytes(&nested(17), &kept()).expect_err("refused").to_string();
    assert!(e.contains("(If)") && e.contains("nest more than 16 deep"), "{e}");
}

/// `y = Loop(trip, cond, x) { s * 2 while max(s * 2) < limit }`, `trip` and `cond` graph inputs or absent, the
/// body reading `limit` (a graph input) from around it; `grow` makes the body concatenate instead (a carried value
/// whose shape changes).
fn loop_model(grow: bool) -> Vec<u8> {
    let bool_value = |n: &str| build::typed_value(n, DataType::Bool, &[]);
    let step = if grow {
        node("Concat", &["s", "s"], &["next"], vec![build::int("axis", 0)])
    } else {
        node("Mul", &["s", "two"], &["next"], vec![])
    };
    let body = GraphProto {
        name: Some("body".into()),
        node: vec![
            step,
            node("ReduceMax", &["next"], &["top"], vec![build::int("keepdims", 0)]),
            node("Less", &["top", "limit"], &["more"], vec![]),
        ],
        input: vec![build::typed_value("i", DataType::Int64, &[]), bool_value("c"), value("s", &[3])],
        output: vec![bool_value("more"), value("next", &[3])],
        initializer: vec![build::floats("two", &[], &[2.0])],
        ..Default::default()
    };
    let attrs = vec![graph_attr("body", body)];
    let looped = NodeProto { name: Some("double".into()), ..node("Loop", &["", "go", "x"], &["y"], attrs) };
    let inputs = vec![value("x", &[3]), value("limit", &[]), bool_value("go")];
    build::bytes(&build::model(16, vec![looped], inputs, vec![value("y", &[3])], vec![]))
}

#[test]
fn a_loop_the_import_cannot_unroll_keeps_its_body_as_a_subgraph() {
    let g = onnx::load_bytes(&loop_model(false), &ImportConfig::new().keep_whole("Loop")).expect("imports");
    verify(&g).expect("verifies");
    assert_eq!(g.order().len(), 1);
    let node = g.node(g.order()[0]);
    let Op::Loop(l) = &node.op else { panic!("a Loop: {}", print(&g)) };
    // No trip count, the condition, the carried value, then `limit`, read from around it; `two` is the body's own.
    assert_eq!(node.inputs.len(), 4);
    assert!(node.inputs[0].is_none());
    assert_eq!(l.carried, 1);
    let names: Vec<&str> = l.body.inputs().iter().map(|&v| l.body.value(v).name.as_str()).collect();
    assert_eq!(names, ["i", "c", "s", "limit"]);
    let text = print(&g);
    assert!(text.contains("= Loop(_, ") && text.contains("    body:\n") && text.contains("Less"), "{text}");
    // Written out and read back.
    let encoded = serial::encode(&g).expect("written");
    let back = serial::decode(&encoded.graph, &encoded.constants).expect("read");
    assert_eq!(print(&back), text);
    // The passes run inside the body too (its Mul by a constant two stays; nothing to remove), and it verifies.
    let mut cx = Context::new(g);
    cx.optimize().expect("optimizes");
    assert!(print(&cx.graph).contains("body:"));
}

#[test]
fn a_loop_whose_carried_value_changes_shape_keeps_the_imports_error() {
    let e = onnx::load_bytes(&loop_model(true), &ImportConfig::new().keep_whole("Loop")).expect_err("refused");
    let e = e.to_string();
    assert!(e.contains("node 'double' (Loop)") && e.contains("condition 'go' is known only at run time"), "{e}");
    // Without a target that runs a Loop whole, the same error for the loop that could be kept.
    let e = onnx::load_bytes(&loop_model(false), &ImportConfig::new()).expect_err("refused").to_string();
    assert!(e.contains("node 'double' (Loop)") && e.contains("condition 'go' is known only at run time"), "{e}");
}

/// `s, ys = Scan(s0, x)` over `steps` rows of x[steps, 2]: `s += row`, `ys` the sums stacked.
fn scan_model(steps: i64) -> Vec<u8> {
    let body = GraphProto {
        name: Some("body".into()),
        node: vec![node("Add", &["s_in", "row"], &["s_out"], vec![]), node("Identity", &["s_out"], &["y"], vec![])],
        input: vec![value("s_in", &[2]), value("row", &[2])],
        output: vec![value("s_out", &[2]), value("y", &[2])],
        ..Default::default()
    };
    let attrs = vec![graph_attr("body", body), build::int("num_scan_inputs", 1)];
    let scan = NodeProto { name: Some("running".into()), ..node("Scan", &["s0", "x"], &["s", "ys"], attrs) };
    let inputs = vec![value("s0", &[2]), value("x", &[steps, 2])];
    build::bytes(&build::model(16, vec![scan], inputs, vec![value("s", &[2]), value("ys", &[steps, 2])], vec![]))
}

#[test]
fn a_scan_too_long_to_unroll_keeps_its_body_as_a_subgraph() {
    let g = onnx::load_bytes(&scan_model(5000), &ImportConfig::new().keep_whole("Scan")).expect("imports");
    verify(&g).expect("verifies");
    assert_eq!(g.order().len(), 1);
    let Op::Scan(sc) = &g.node(g.order()[0]).op else { panic!("a Scan: {}", print(&g)) };
    assert_eq!((sc.states, sc.inputs.as_slice(), sc.outputs.as_slice()), (1, &[(0, false)][..], &[(0, false)][..]));
    let text = print(&g);
    assert!(text.contains("f32[5000,2] = Scan(") && text.contains("{states=1 inputs=[0] outputs=[0]}"), "{text}");
    let encoded = serial::encode(&g).expect("written");
    let back = serial::decode(&encoded.graph, &encoded.constants).expect("read");
    assert_eq!(print(&back), text);
    // The passes run inside its body: the Identity goes.
    let mut cx = Context::new(g);
    cx.optimize().expect("optimizes");
    assert!(!print(&cx.graph).contains("Identity"), "{}", print(&cx.graph));
    // Short enough, it unrolls; without a target that runs it whole, a long one is refused by name.
    let short = onnx::load_bytes(&scan_model(3), &ImportConfig::new().keep_whole("Scan")).expect("imports");
    assert!(!print(&short).contains("Scan("), "{}", print(&short));
    let e = onnx::load_bytes(&scan_model(5000), &ImportConfig::new()).expect_err("refused").to_string();
    assert!(e.contains("node 'running' (Scan)") && e.contains("a scan of 5000 iterations is not unrolled"), "{e}");
}
