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
        for seed in 0..8 {
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
        // The dead values' buffers and the outputs the caller dropped stay with the program for the next run
        // (without reuse, nothing would be live between runs), and never number more than a run needs at once:
        // the input's upload (on unified memory an input is used in place when the host allocation happens to be
        // at the device's alignment, so some runs need none), the product, the softmax, and the output.
        assert!(live[0] > 0, "{name}: no buffer kept for reuse");
        assert!(live.iter().all(|&l| l <= 4), "{name}: buffers grow from run to run: {live:?}");
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

/// Asked to, where the device offers `cl_khr_command_buffer` (PoCL does), a run bound as the run before it is
/// recorded once and replayed from then on (`replay.rs`, rules 2, 3 and 5): new input values in the same buffers, outputs the
/// caller dropped taken back, every result equal to a fresh program's. An output the caller keeps makes the next
/// run bind another buffer, which is launched kernel by kernel, and its kept value is left as it was.
#[test]
fn repeated_runs_replay_one_recorded_command_buffer() {
    let g = graph();
    let target = Target::open("opencl:discrete").unwrap_or_else(|e| panic!("{e}"));
    assert!(!target.replays(), "replay is off unless asked");
    assert!(target.replay_runs(true), "PoCL offers cl_khr_command_buffer");
    let program = stowage_opencl::lower(&g, &target, &Ledger::off()).expect("lowers");
    let want = |seed: usize| {
        let other = Target::open("opencl:discrete").unwrap_or_else(|e| panic!("{e}"));
        let fresh = stowage_opencl::lower(&g, &other, &Ledger::off()).expect("lowers");
        fresh.run(vec![input_from(seed)], &Ledger::off()).expect("runs")[0].to_vec::<f32>().expect("reads")
    };
    for seed in 0..5 {
        let ledger = Ledger::recording();
        let got = program.run(vec![input_from(seed)], &ledger).expect("runs")[0].to_vec::<f32>().expect("reads");
        assert_eq!(got, want(seed), "run {seed}");
        // Replayed or not, a run uploads its input once and downloads the output read.
        assert_eq!(ledger.entries().len(), 2, "run {seed}: {:?}", ledger.entries());
    }
    // Run 0 binds fresh buffers, run 1 pooled ones (the same ones where the pool's order happens to give them),
    // run 2 binds as run 1 did at the latest: recorded, then replayed.
    let replayed = program.replayed_runs();
    assert!((3..=4).contains(&replayed), "{replayed} runs replayed of 5");
    let kept = program.run(vec![input_from(7)], &Ledger::off()).expect("runs");
    let other = program.run(vec![input_from(8)], &Ledger::off()).expect("runs");
    assert_eq!(kept[0].to_vec::<f32>().expect("reads"), want(7));
    assert_eq!(other[0].to_vec::<f32>().expect("reads"), want(8));
}

/// A value and its alias (a Flatten's output shares the product's buffer) die together: their one buffer goes back
/// to the pool, so a repeated run binds it again and is replayed (`replay.rs`, rule 5), with every result right.
#[test]
fn an_aliased_value_goes_back_to_the_pool_and_its_runs_replay() {
    let mut g = Graph::new("alias");
    let ty = ValueType::new(DatumType::F32, [64, 64]);
    let flat = ValueType::new(DatumType::F32, [1, 4096]);
    let x = g.add_input("x", ty.clone());
    let m = g.add_node("product", Op::MatMul, vec![Some(x), Some(x)], vec![Some(("m".into(), ty))]);
    let m = g.node(m).outputs[0].expect("m");
    let f = g.add_node("flat", Op::Flatten { axis: 0 }, vec![Some(m)], vec![Some(("f".into(), flat.clone()))]);
    let f = g.node(f).outputs[0].expect("f");
    let t = g.add_node("squash", Op::Unary(Unary::Tanh), vec![Some(f)], vec![Some(("y".into(), flat))]);
    g.add_output("y", g.node(t).outputs[0].expect("y"));
    let target = Target::open("opencl:discrete").unwrap_or_else(|e| panic!("{e}"));
    assert!(target.replay_runs(true), "PoCL offers cl_khr_command_buffer");
    let program = stowage_opencl::lower(&g, &target, &Ledger::off()).expect("lowers");
    for seed in 0..5 {
        let got = program.run(vec![input_from(seed)], &Ledger::off()).expect("runs")[0].to_vec::<f32>().expect("reads");
        let other = Target::open("opencl:discrete").unwrap_or_else(|e| panic!("{e}"));
        let fresh = stowage_opencl::lower(&g, &other, &Ledger::off()).expect("lowers");
        let want = fresh.run(vec![input_from(seed)], &Ledger::off()).expect("runs")[0].to_vec::<f32>().expect("reads");
        assert_eq!(got, want, "run {seed}");
    }
    let replayed = program.replayed_runs();
    assert!((3..=4).contains(&replayed), "{replayed} runs replayed of 5");
}
