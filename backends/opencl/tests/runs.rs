//! Many runs of one program. Buffers of dead values are reused by later steps and runs, without changing a result
//! and without growing. A device lost in the middle of a run (simulated: `Target::lose_device_after`, since PoCL
//! cannot lose its device on demand) fails the run with one error naming the node, the call and the code; every
//! buffer of the failed run is released; and a target opened afresh (a new context) runs the same graph correctly.

use stowage_compiler::ir::{Graph, Op, Unary, ValueType};
use stowage_opencl::Target;
use stowage_runtime::{DatumType, Ledger, Tensor};

/// x[64,64] → MatMul(x, x) → Softmax → Tanh: three launches, none fused with another.
fn graph() -> Graph {
    let mut g = Graph::new("three launches");
    let ty = ValueType::new(DatumType::F32, [64, 64]);
    let x = g.add_input("x", ty.clone());
    let m = g.add_node("product", Op::MatMul, vec![Some(x), Some(x)], vec![Some(("m".into(), ty.clone()))]);
    let m = g.node(m).outputs[0].expect("m");
    let softmax = Op::Softmax { kind: stowage_compiler::ir::SoftmaxKind::Softmax, axis: -1, flatten: false };
    let s = g.add_node("normalise", softmax, vec![Some(m)], vec![Some(("s".into(), ty.clone()))]);
    let s = g.node(s).outputs[0].expect("s");
    let t = g.add_node("squash", Op::Unary(Unary::Tanh), vec![Some(s)], vec![Some(("y".into(), ty))]);
    g.add_output("y", g.node(t).outputs[0].expect("y"));
    g
}

fn input() -> Tensor<'static> {
    input_from(0)
}

fn input_from(seed: usize) -> Tensor<'static> {
    let data: Vec<f32> = (0..64 * 64).map(|i| ((i + seed) % 17) as f32 / 17.0).collect();
    Tensor::from_slice(&[64, 64], &data).expect("input")
}

#[test]
fn buffers_are_reused_across_runs_and_every_result_stays_right() {
    for name in ["opencl", "opencl:discrete"] {
        let g = graph();
        let target = Target::open(name).unwrap_or_else(|e| panic!("{e}"));
        let program = stowage_opencl::lower(&g, &target, &Ledger::off()).expect("lowers");
        let mut live = Vec::new();
        for seed in 0..4 {
            let got =
                program.run(vec![input_from(seed)], &Ledger::off()).expect("runs")[0].to_vec::<f32>().expect("reads");
            // The same graph on a program of its own, on a target of its own: nothing reused.
            let other = Target::open(name).unwrap_or_else(|e| panic!("{e}"));
            let fresh = stowage_opencl::lower(&g, &other, &Ledger::off()).expect("lowers");
            let want =
                fresh.run(vec![input_from(seed)], &Ledger::off()).expect("runs")[0].to_vec::<f32>().expect("reads");
            assert_eq!(got, want, "{name}: run {seed}");
            live.push(target.live_buffers());
        }
        // The dead values' buffers stay with the program for the next run (without reuse, nothing would be
        // live between runs), and their number does not grow.
        assert!(live[0] > 0, "{name}: no buffer kept for reuse");
        assert!(live.windows(2).all(|w| w[1] <= w[0]), "{name}: buffers grow from run to run: {live:?}");
    }
}

#[test]
fn a_device_lost_mid_run_is_an_error_and_a_fresh_target_works() {
    for name in ["opencl", "opencl:discrete"] {
        let g = graph();
        let target = Target::open(name).unwrap_or_else(|e| panic!("{e}"));
        let program = stowage_opencl::lower(&g, &target, &Ledger::off()).expect("lowers");
        let want = program.run(vec![input()], &Ledger::recording()).expect("runs")[0].to_vec::<f32>().expect("reads");
        let before = target.live_buffers();
        // The second launch of the next run finds the device gone.
        target.lose_device_after(1);
        let err = program.run(vec![input()], &Ledger::recording()).expect_err("a lost device fails the run");
        let text = err.to_string();
        assert!(text.contains("node 'normalise'") && text.contains("clEnqueueNDRangeKernel"), "{name}: {text}");
        assert!(text.contains("CL_DEVICE_NOT_AVAILABLE"), "{name}: {text}");
        assert!(target.live_buffers() <= before, "{name}: the failed run's buffers are released");
        // Every later launch on the lost device fails too.
        assert!(program.run(vec![input()], &Ledger::off()).is_err());
        drop(program);
        assert_eq!(target.live_buffers(), 0, "{name}: nothing leaks");
        // A new context on the device runs the graph again, with the same result.
        let fresh = Target::open(name).unwrap_or_else(|e| panic!("{e}"));
        let program = stowage_opencl::lower(&g, &fresh, &Ledger::off()).expect("lowers again");
        let got = program.run(vec![input()], &Ledger::recording()).expect("runs")[0].to_vec::<f32>().expect("reads");
        assert_eq!(got, want, "{name}");
    }
}
