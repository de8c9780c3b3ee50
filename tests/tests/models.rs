//! The model suite: the light model-zoo graphs (ConstantOfShape weights, reference outputs from the onnx package),
//! their seeded random-weight variants, an MLP and a transformer encoder block (references from onnxruntime), run
//! through `stowage run`'s code on the CPU and on OpenCL (both paths), compared with rtol 1e-3, atol 1e-4.
//! Written by scripts/onnx/light_models.py and scripts/onnx/model_suite.py.

use std::path::Path;

use stowage_cli::session::{self, Planning, RunOptions};
use stowage_compiler::onnx;
use stowage_compiler::plan::Precision;

/// Tolerances: rtol 1e-3, atol 1e-4, except where written down here with the reason.
fn tolerance(name: &str) -> (f64, f64) {
    match name {
        // The onnx package's own test runner checks light DenseNet-121 at rtol 2e-3: its 121 layers of constant
        // weights accumulate more rounding than the others.
        "light/densenet121" => (2e-3, 1e-4),
        _ => (1e-3, 1e-4),
    }
}

fn run_model(dir: &Path, name: &str, target: &str, threads: usize) -> Result<(), String> {
    run_at(dir, name, target, Precision::Fp32, threads)
}

fn run_at(dir: &Path, name: &str, target: &str, precision: Precision, threads: usize) -> Result<(), String> {
    let data = dir.join("test_data_set_0");
    let model = dir.join("model.onnx");
    let proto = onnx::decode(&std::fs::read(&model).map_err(|e| e.to_string())?).map_err(|e| e.to_string())?;
    let graph = proto.graph.as_ref().ok_or("no graph")?;
    let inits: Vec<&str> = graph.initializer.iter().map(|t| t.name()).collect();
    let mut inputs = Vec::new();
    for (k, vi) in graph.input.iter().filter(|i| !inits.contains(&i.name())).enumerate() {
        inputs.push((vi.name().to_string(), onnx::read_tensor(data.join(format!("input_{k}.pb")))?));
    }
    let planning = Planning { precision: Some(precision), ..Planning::default() };
    let options = RunOptions { target: target.into(), planning, threads, ..stowage_cli::run_options() };
    let outcome = session::run(&model, inputs, &options)?;
    let computed = outcome.plan.precisions.first().map(|p| p.computed);
    let (rtol, atol) = tolerance(name);
    for (k, (out, got)) in outcome.outputs.iter().enumerate() {
        let want = onnx::read_tensor(data.join(format!("output_{k}.pb")))?;
        // TF32 keeps 10 bits of each product operand's mantissa: outputs within 1 % of themselves or 0.2 % of
        // the output's largest magnitude, where fp32 is held to the reference's tolerance.
        // fp16 stores every value with 11 bits of mantissa, bf16 with 8 (sums in fp32 inside each kernel): within
        // 0.5 % and 3 % of the output's largest magnitude.
        let scale = || {
            stowage_compiler::consts::to_f64s(&want)
                .map(|w| w.iter().fold(0f64, |m, v| m.max(v.abs())).max(1e-3))
                .map_err(|e| e.to_string())
        };
        let (rtol, atol) = match computed {
            Some(Precision::Tf32) => (1e-2, 2e-3 * scale()?),
            Some(Precision::Fp16) => (1e-2, 5e-3 * scale()?),
            Some(Precision::Bf16) => (5e-2, 3e-2 * scale()?),
            _ => (rtol, atol),
        };
        stowage_tests::compare(got, &want, rtol, atol).map_err(|e| format!("output '{out}': {e}"))?;
    }
    // The plan's memory: every arena within 1.10 × the most bytes alive at once.
    let mut memory = String::new();
    for a in &outcome.plan.arenas {
        let ratio = a.peak_bytes as f64 / a.lower_bound_bytes.max(1) as f64;
        if ratio > 1.10 {
            return Err(format!(
                "{}: planned peak {} bytes is {ratio:.3} × the lower bound {}",
                a.space, a.peak_bytes, a.lower_bound_bytes
            ));
        }
        memory.push_str(&format!("  {} peak {:>9} bytes {ratio:.3}× bound", a.space, a.peak_bytes));
        // Every executor takes its values from the arena at the plan's offsets: what it measures is what was
        // planned.
        let measured = outcome.peaks.iter().find(|(s, _)| *s == a.space).map_or(0, |p| p.1);
        if measured != a.peak_bytes {
            return Err(format!("{}: measured peak {measured} bytes, planned {}", a.space, a.peak_bytes));
        }
    }
    println!(
        "{name:<28} {target:<16} {threads}t {} ok  compile {:>7.1} ms  run {:>8.2} ms{memory}",
        precision, outcome.compile_ms, outcome.run_median_ms
    );
    Ok(())
}

#[test]
fn every_model_matches_its_reference() {
    check("every_model_matches_its_reference", "cpu", 1);
}

/// On two threads (a program's first run takes its pool, `inline.rs`): the kernels' parallel paths, each thread
/// writing its band of an output in place.
#[test]
fn every_model_matches_on_two_threads() {
    check("every_model_matches_on_two_threads", "cpu", 2);
}

/// The whole suite on the OpenCL device (PoCL in CI), unified path: inputs imported or uploaded once, outputs read
/// back once.
#[test]
fn every_model_matches_on_opencl() {
    check("every_model_matches_on_opencl", "opencl", 1);
}

/// And through the discrete path.
#[test]
fn every_model_matches_on_opencl_discrete() {
    check("every_model_matches_on_opencl_discrete", "opencl:discrete", 1);
}

/// Models of the suite at `--precision tf32` on the first OpenCL device: on a device with tensor cores (the H200,
/// through the `device` tool: `scripts/device/check.sh` runs this binary) their products run on them and match the
/// fp32 references within TF32's tolerance; on one without (PoCL in CI) the plan says fp32 and the references hold
/// as at fp32. A convolution net with random weights, the MLP and the transformer block: few programs for PoCL to
/// build (SqueezeNet's are the model suite's), and what the H200 check carries.
#[test]
fn models_match_at_tf32_on_opencl() {
    let root = stowage_tests::generated("onnx-models", "model_suite.py");
    let cores =
        stowage_opencl::Target::open("opencl").map(|t| t.info().tensor_cores()).unwrap_or_else(|e| panic!("{e}"));
    let mut failed = Vec::new();
    for name in ["random/squeezenet", "mlp", "transformer_block"] {
        let dir = root.join(name);
        if let Err(e) = run_at(&dir, name, "opencl", Precision::Tf32, 1) {
            failed.push(format!("{name}: {e}"));
        }
    }
    assert!(failed.is_empty(), "at tf32 (tensor cores: {cores}):\n{}", failed.join("\n"));
}

/// Models of the suite at `--precision fp16` and `bf16` on the first OpenCL device (PoCL in CI, the H200 through
/// the `device` tool): every value stored in the type between one cast in and one cast out (`passes::storage`),
/// every kernel reading and writing it, outputs within the type's tolerance of the fp32 references.
#[test]
fn models_match_at_fp16_and_bf16_on_opencl() {
    let root = stowage_tests::generated("onnx-models", "model_suite.py");
    let mut failed = Vec::new();
    for precision in [Precision::Fp16, Precision::Bf16] {
        for name in ["random/squeezenet", "mlp", "transformer_block"] {
            if let Err(e) = run_at(&root.join(name), name, "opencl", precision, 1) {
                failed.push(format!("{name} at {precision}: {e}"));
            }
        }
    }
    assert!(failed.is_empty(), "{}", failed.join("\n"));
}

/// A model with a node that has no half-precision form (a tree ensemble reads f32 or f64) is refused at fp16
/// naming the node, not planned with an f32 island.
#[test]
fn a_node_without_half_precision_is_named() {
    let root = stowage_tests::generated("sklearn-models", "sklearn_models.py");
    let model = root.join("binary_tree_mixed_none/model.onnx");
    let planning = Planning { precision: Some(Precision::Fp16), ..Planning::default() };
    let mut config = stowage_cli::run_options().config;
    config.input_shapes.insert("x".into(), vec![4, 1]);
    let options = RunOptions { target: "opencl".into(), planning, config, ..stowage_cli::run_options() };
    let err = session::plan_only(&model, &options).err().expect("refused").to_string();
    assert!(
        err.contains("--precision fp16: node 'TreeEnsembleClassifier_0::treeensemble1' (TreeEnsemble) cannot take f16 values: input 0 has datum type f16, expected f32 or f64"),
        "{err}"
    );
}

fn check(test: &str, target: &str, threads: usize) {
    let root = stowage_tests::generated("onnx-models", "model_suite.py");
    let mut names = Vec::new();
    for group in ["light", "random"] {
        let mut found: Vec<String> = std::fs::read_dir(root.join(group))
            .unwrap_or_else(|e| panic!("{}/{group}: {e}", root.display()))
            .map(|e| format!("{group}/{}", e.expect("entry").file_name().to_string_lossy()))
            .collect();
        found.sort();
        names.extend(found);
    }
    names.extend(["mlp".to_string(), "transformer_block".to_string()]);
    for required in ["resnet50", "squeezenet", "vgg19", "densenet121", "inception_v1"] {
        for group in ["light", "random"] {
            assert!(names.contains(&format!("{group}/{required}")), "{group}/{required} is missing");
        }
    }
    // Both variants of an architecture (light and random weights) run one after the other in one process: their
    // programs are the same, so the second loads the first's from PoCL's kernel cache. The architectures are
    // spread over two processes (PoCL builds one program at a time in each; `stowage_tests::across_processes`).
    let mut groups: Vec<Vec<&String>> = Vec::new();
    for name in &names {
        let arch = name.rsplit('/').next().unwrap_or(name);
        match groups.iter_mut().find(|g| g[0].rsplit('/').next() == Some(arch)) {
            Some(g) => g.push(name),
            None => groups.push(vec![name]),
        }
    }
    // The OpenCL tests run at once and share what PoCL compiles: the discrete path walks the suite from the other
    // end, so that each program is mostly compiled once, by whichever test meets it first (the kernels of both
    // paths are the same).
    if target.ends_with(":discrete") {
        groups.reverse();
    }
    let results = stowage_tests::across_processes(test, &groups, |group| {
        let failed: Vec<String> = group
            .iter()
            .filter_map(|name| run_model(&root.join(name), name, target, threads).err().map(|e| format!("{name}: {e}")))
            .collect();
        if failed.is_empty() {
            Ok(())
        } else {
            Err(failed.join("\n"))
        }
    });
    let failures: Vec<String> = results.into_iter().filter_map(Result::err).collect();
    assert!(failures.is_empty(), "{target}: models that do not match:\n{}", failures.join("\n"));
}

#[allow(dead_code)] // the builder serves several suites; each uses part of it
#[path = "../../compiler/tests/common/build.rs"]
mod build;

/// `ConvTranspose` by its definition: `full[n, g·Mg + m, i·s + t] += x[n, g·Cg + c, i] · w[g·Cg + c, m, t]` over
/// 1 to 3 spatial axes (dilation 1), then the output cropped from the begin pads, the bias added.
#[allow(clippy::too_many_arguments)]
fn conv_transpose_reference(
    x: &[f32],
    xs: &[usize],
    w: &[f32],
    ws: &[usize],
    bias: Option<&[f32]>,
    strides: &[usize],
    begin: &[usize],
    out: &[usize],
    group: usize,
) -> Vec<f32> {
    let (n, c, r) = (xs[0], xs[1], xs.len() - 2);
    let (cg, mg) = (c / group, ws[1]);
    let m = mg * group;
    let sp = |s: &[usize]| s.iter().product::<usize>();
    let (insp, ksp, osp) = (sp(&xs[2..]), sp(&ws[2..]), sp(out));
    let unravel = |mut i: usize, dims: &[usize]| {
        let mut v = vec![0; dims.len()];
        for a in (0..dims.len()).rev() {
            v[a] = i % dims[a];
            i /= dims[a];
        }
        v
    };
    let mut y = vec![0f32; n * m * osp];
    for b in 0..n {
        for ci in 0..c {
            let g = ci / cg;
            for mi in 0..mg {
                let oc = g * mg + mi;
                for i in 0..insp {
                    let iv = unravel(i, &xs[2..]);
                    let xv = x[(b * c + ci) * insp + i];
                    for t in 0..ksp {
                        let tv = unravel(t, &ws[2..]);
                        let mut at = 0usize;
                        let mut inside = true;
                        for a in 0..r {
                            let u = (iv[a] * strides[a] + tv[a]) as isize - begin[a] as isize;
                            inside &= u >= 0 && (u as usize) < out[a];
                            at = at * out[a] + u.max(0) as usize;
                        }
                        if inside {
                            y[(b * m + oc) * osp + at] += xv * w[(ci * mg + mi) * ksp + t];
                        }
                    }
                }
            }
        }
    }
    if let Some(bias) = bias {
        for (k, v) in y.iter_mut().enumerate() {
            *v += bias[(k / osp) % m];
        }
    }
    y
}

#[test]
fn strided_conv_transposes_match_their_definition() {
    use build::{floats, int, ints, model, node, value};
    // (x shape, w shape, strides, pads, output_padding, group, bias): groups, uneven strides, kernels longer and
    // shorter than the stride, crops, 1-D and 3-D (`compiler/src/onnx/conv_phases.rs`).
    type Case = (Vec<usize>, Vec<usize>, Vec<usize>, Vec<usize>, Vec<usize>, usize, bool);
    let cases: Vec<Case> = vec![
        (vec![2, 4, 5, 4], vec![4, 3, 3, 4], vec![2, 3], vec![1, 0, 2, 1], vec![1, 0], 2, true),
        (vec![1, 3, 7, 6], vec![3, 1, 4, 4], vec![2, 2], vec![1, 1, 1, 1], vec![0, 0], 3, true),
        (vec![1, 2, 8, 8], vec![2, 2, 2, 2], vec![2, 2], vec![0, 0, 0, 0], vec![0, 0], 1, false),
        (vec![2, 2, 6], vec![2, 2, 5], vec![3], vec![2, 1], vec![2], 1, true),
        (vec![1, 2, 3, 4, 3], vec![2, 1, 3, 3, 2], vec![2, 1, 2], vec![0, 1, 0, 1, 0, 0], vec![1, 0, 0], 2, true),
    ];
    let fill = |len: usize, seed: usize| -> Vec<f32> {
        (0..len).map(|i| (((i + seed) * 2_654_435_761) % 1000) as f32 / 500.0 - 1.0).collect()
    };
    for (k, (xs, ws, strides, pads, op, group, with_bias)) in cases.into_iter().enumerate() {
        let r = xs.len() - 2;
        let m = ws[1] * group;
        let begin: Vec<usize> = pads[..r].to_vec();
        let out: Vec<usize> =
            (0..r).map(|a| strides[a] * (xs[a + 2] - 1) + op[a] + ws[a + 2] - pads[a] - pads[r + a]).collect();
        let (x, w, b) = (fill(xs.iter().product(), k), fill(ws.iter().product(), 7 + k), fill(m, 13 + k));
        let i64s = |v: &[usize]| v.iter().map(|&d| d as i64).collect::<Vec<_>>();
        let attrs = vec![
            ints("strides", &i64s(&strides)),
            ints("pads", &i64s(&pads)),
            ints("output_padding", &i64s(&op)),
            int("group", group as i64),
        ];
        let mut inputs = vec!["x", "w"];
        let mut inits = vec![floats("w", &i64s(&ws), &w)];
        if with_bias {
            inputs.push("b");
            inits.push(floats("b", &[m as i64], &b));
        }
        let mut ys = vec![xs[0], m];
        ys.extend(&out);
        let nodes = vec![node("ConvTranspose", &inputs, &["y"], attrs)];
        let proto = model(17, nodes, vec![value("x", &i64s(&xs))], vec![value("y", &i64s(&ys))], inits);
        let xt = stowage_runtime::Tensor::from_slice(&xs, &x).unwrap();
        let options = RunOptions { target: "cpu".into(), ..stowage_cli::run_options() };
        let outcome = session::run_bytes(
            &build::bytes(&proto),
            Path::new("ct.onnx"),
            vec![("x".into(), xt)],
            &options,
            std::time::Instant::now(),
        )
        .unwrap_or_else(|e| panic!("case {k}: {e}"));
        let got = outcome.outputs[0].1.to_vec::<f32>().unwrap();
        assert_eq!(outcome.outputs[0].1.shape(), ys.as_slice(), "case {k}");
        // The phase form: no Pad spreading the input, the phases interleaved by a Transpose.
        let ops: Vec<&str> = outcome.steps.iter().map(|s| s.1).collect();
        assert!(!ops.contains(&"Pad") && ops.contains(&"Transpose"), "case {k}: {ops:?}");
        let want =
            conv_transpose_reference(&x, &xs, &w, &ws, with_bias.then_some(&b[..]), &strides, &begin, &out, group);
        for (i, (g, e)) in got.iter().zip(&want).enumerate() {
            assert!((g - e).abs() <= 1e-4 + 1e-4 * e.abs(), "case {k} element {i}: {g} against {e}");
        }
    }
}
