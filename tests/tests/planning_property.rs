//! A property of the planner: a random small graph, with every node pinned at random to OpenCL (the discrete path,
//! on PoCL) or the CPU and its inputs in random caller layouts, computes what the CPU alone computes from packed
//! inputs. Placements, copies between the spaces and layouts in place or relaid all take part.

#[allow(dead_code)] // the builder serves several suites; each uses part of it
#[path = "../../compiler/tests/common/build.rs"]
mod build;

use std::path::Path;
use std::time::Instant;

use build::{int, ints, model, node, value};
use proptest::prelude::*;
use stowage_cli::session::{self, Planning, RunOptions};
use stowage_runtime::{DatumType, Layout, Tensor};

/// One step of a random graph: an op and which earlier values (by index in the pool) it reads.
#[derive(Clone, Debug)]
enum Step {
    Unary(&'static str, usize),
    Binary(&'static str, usize, usize),
    Transpose(usize),
    MatMul(usize, usize),
    Softmax(usize),
    Concat(usize, usize),
}

fn step() -> impl Strategy<Value = Step> {
    let unary = prop::sample::select(vec!["Relu", "Neg", "Tanh", "Sigmoid", "Abs"]);
    let binary = prop::sample::select(vec!["Add", "Mul", "Sub", "Max"]);
    prop_oneof![
        (unary, any::<usize>()).prop_map(|(op, a)| Step::Unary(op, a)),
        (binary, any::<usize>(), any::<usize>()).prop_map(|(op, a, b)| Step::Binary(op, a, b)),
        any::<usize>().prop_map(Step::Transpose),
        (any::<usize>(), any::<usize>()).prop_map(|(a, b)| Step::MatMul(a, b)),
        any::<usize>().prop_map(Step::Softmax),
        (any::<usize>(), any::<usize>()).prop_map(|(a, b)| Step::Concat(a, b)),
    ]
}

/// The model the steps describe (steps that do not fit the pool's shapes are skipped), and its node names.
fn build_model(steps: &[Step]) -> (Vec<u8>, Vec<String>) {
    let mut pool: Vec<(String, Vec<usize>)> = vec![("a".into(), vec![4, 6]), ("b".into(), vec![4, 6])];
    let mut used = vec![false; 2];
    let mut nodes = Vec::new();
    let pick = |pool: &[(String, Vec<usize>)], i: usize, shape: Option<&[usize]>| -> Option<usize> {
        let fits: Vec<usize> = (0..pool.len()).filter(|&k| shape.is_none_or(|s| pool[k].1 == s)).collect();
        (!fits.is_empty()).then(|| fits[i % fits.len()])
    };
    for s in steps {
        let name = format!("v{}", pool.len());
        let (op, ins, shape, attrs) = match *s {
            Step::Unary(op, a) => {
                let a = pick(&pool, a, None).expect("pool");
                (op, vec![a], pool[a].1.clone(), vec![])
            }
            Step::Binary(op, a, b) => {
                let a = pick(&pool, a, None).expect("pool");
                let b = pick(&pool, b, Some(&pool[a].1.clone())).expect("a itself fits");
                (op, vec![a, b], pool[a].1.clone(), vec![])
            }
            Step::Transpose(a) => {
                let a = pick(&pool, a, None).expect("pool");
                let shape = vec![pool[a].1[1], pool[a].1[0]];
                ("Transpose", vec![a], shape, vec![ints("perm", &[1, 0])])
            }
            Step::MatMul(a, b) => {
                let a = pick(&pool, a, None).expect("pool");
                let Some(b) = (0..pool.len()).map(|k| (b + k) % pool.len()).find(|&k| pool[k].1[0] == pool[a].1[1])
                else {
                    continue;
                };
                ("MatMul", vec![a, b], vec![pool[a].1[0], pool[b].1[1]], vec![])
            }
            Step::Softmax(a) => {
                let a = pick(&pool, a, None).expect("pool");
                ("Softmax", vec![a], pool[a].1.clone(), vec![int("axis", -1)])
            }
            Step::Concat(a, b) => {
                let a = pick(&pool, a, None).expect("pool");
                let b = pick(&pool, b, Some(&pool[a].1.clone())).expect("a itself fits");
                if pool[a].1[0] > 16 {
                    continue;
                }
                ("Concat", vec![a, b], vec![pool[a].1[0] * 2, pool[a].1[1]], vec![int("axis", 0)])
            }
        };
        let inputs: Vec<&str> = ins.iter().map(|&k| pool[k].0.as_str()).collect();
        nodes.push(node(op, &inputs, &[&name], attrs));
        for k in ins {
            used[k] = true;
        }
        pool.push((name, shape));
        used.push(false);
    }
    // Every value nobody reads is an output, so no node is dead.
    let outputs: Vec<_> = (2..pool.len())
        .filter(|&k| !used[k])
        .map(|k| {
            let dims: Vec<i64> = pool[k].1.iter().map(|&d| d as i64).collect();
            value(&pool[k].0, &dims)
        })
        .collect();
    let names = nodes.iter().map(|n| n.name.clone().unwrap_or_default()).collect();
    let m = model(17, nodes, vec![value("a", &[4, 6]), value("b", &[4, 6])], outputs, vec![]);
    (build::bytes(&m), names)
}

fn input(seed: u32, column_major: bool) -> Tensor<'static> {
    let data: Vec<f32> =
        (0..24u32).map(|i| ((i.wrapping_mul(2_654_435_761) ^ seed) % 1000) as f32 / 500.0 - 1.0).collect();
    let t = Tensor::from_slice(&[4, 6], &data).expect("tensor");
    if column_major {
        t.to_layout(Layout::column_major(DatumType::F32, &[4, 6]).expect("layout"), 64).expect("relaid")
    } else {
        t
    }
}

fn run(
    bytes: &[u8],
    target: &str,
    inputs: Vec<(String, Tensor<'static>)>,
    planning: Planning,
) -> Result<Vec<Tensor<'static>>, String> {
    let options = RunOptions { target: target.into(), planning, ..stowage_cli::run_options() };
    let o = session::run_bytes(bytes, Path::new("random.onnx"), inputs, &options, Instant::now())?;
    Ok(o.outputs.into_iter().map(|(_, t)| t).collect())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    #[test]
    fn any_placement_and_layout_computes_what_the_cpu_computes(
        steps in prop::collection::vec(step(), 1..7),
        pins in prop::collection::vec(any::<bool>(), 7),
        layouts in (any::<bool>(), any::<bool>()),
        seed in any::<u32>(),
    ) {
        let (bytes, names) = build_model(&steps);
        prop_assume!(!names.is_empty());
        let packed = vec![("a".to_string(), input(seed, false)), ("b".to_string(), input(seed ^ 7, false))];
        let want = run(&bytes, "cpu", packed, Planning::default()).map_err(TestCaseError::fail)?;
        let pins: Vec<(String, String)> = names
            .iter()
            .zip(&pins)
            .map(|(n, &gpu)| (n.clone(), if gpu { "opencl:discrete" } else { "cpu" }.to_string()))
            .collect();
        let given = vec![("a".to_string(), input(seed, layouts.0)), ("b".to_string(), input(seed ^ 7, layouts.1))];
        let planning = Planning { pins: pins.clone(), ..Planning::default() };
        let got = run(&bytes, "opencl:discrete,cpu", given, planning).map_err(TestCaseError::fail)?;
        prop_assert_eq!(got.len(), want.len());
        for (g, w) in got.iter().zip(&want) {
            stowage_tests::compare(g, w, 1e-5, 1e-6).map_err(|e| TestCaseError::fail(format!("{e}; pins {pins:?}")))?;
        }
    }
}
