//! The light model-zoo graphs of the onnx wheel (written to target/onnx-models/light by
//! scripts/onnx/light_models.py) import, fold and verify; SqueezeNet's and ResNet-50's IR is kept as a snapshot.

mod common;

use std::path::Path;

use stowage_compiler::ir::Op;
use stowage_compiler::onnx::ImportConfig;
use stowage_compiler::Context;

fn compile(dir: &Path) -> Context {
    let path = dir.join("model.onnx");
    let mut cx = Context::import(&path, &ImportConfig::new()).unwrap_or_else(|e| panic!("{e}"));
    cx.set_verify(true);
    cx.optimize().unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    cx
}

#[test]
fn every_light_model_imports_folds_and_verifies() {
    let root = common::generated("onnx-models/light", "light_models.py");
    let mut names: Vec<String> = std::fs::read_dir(&root)
        .expect("light models folder")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    for required in ["resnet50", "squeezenet", "vgg19", "densenet121", "inception_v1"] {
        assert!(names.iter().any(|n| n == required), "{required} is missing from {}", root.display());
    }
    for name in &names {
        let cx = compile(&root.join(name));
        let g = &cx.graph;
        let ops: Vec<&str> = g.order().iter().map(|&n| g.node(n).op.name()).collect();
        assert!(!ops.is_empty(), "{name}: no nodes left");
        assert!(
            !g.order()
                .iter()
                .any(|&n| matches!(g.node(n).op, Op::ConstantOfShape { .. } | Op::Identity | Op::Dropout { .. })),
            "{name}: ConstantOfShape, Identity or Dropout left after the passes: {ops:?}"
        );
        assert!(g.const_bytes() > 1 << 20, "{name}: weights were not folded into constants");
        assert_eq!(g.outputs().len(), 1, "{name}");
        let out = g.ty(g.outputs()[0].value);
        assert_eq!(out.element_count(), Some(1000), "{name}: output {out}");
    }
}

fn snapshot(name: &str) {
    let root = common::generated("onnx-models/light", "light_models.py");
    let cx = compile(&root.join(name));
    insta::assert_snapshot!(name, cx.print());
}

#[test]
fn squeezenet_ir() {
    snapshot("squeezenet");
}

#[test]
fn resnet50_ir() {
    snapshot("resnet50");
}

/// A compiled graph written out and read back (what a built executable starts from) prints the same IR, verifies,
/// and holds the same constants; a truncated or corrupt one is an error.
#[test]
fn compiled_graphs_round_trip_through_their_serial_form() {
    let root = common::generated("onnx-models/light", "light_models.py");
    for name in ["squeezenet", "resnet50", "inception_v1"] {
        let cx = compile(&root.join(name));
        let encoded = stowage_compiler::ir::serial::encode(&cx.graph).expect("encodes");
        let back = stowage_compiler::ir::serial::decode(&encoded.graph, &encoded.constants).expect("decodes");
        assert_eq!(stowage_compiler::ir::print::print(&back), stowage_compiler::ir::print::print(&cx.graph), "{name}");
        stowage_compiler::ir::verify::verify(&back).unwrap_or_else(|e| panic!("{name}: {e}"));
        for &n in back.order() {
            for v in back.node(n).inputs.iter().flatten() {
                if let Some(t) = back.const_value(*v) {
                    let want = cx.graph.const_value(*v).expect("a constant there too");
                    assert_eq!(t.as_bytes().ok(), want.as_bytes().ok(), "{name}: constant {}", back.value(*v).name);
                }
            }
        }
        let short = &encoded.graph[..encoded.graph.len() / 2];
        assert!(stowage_compiler::ir::serial::decode(short, &encoded.constants).is_err(), "{name}: truncated");
        let few = &encoded.constants[..encoded.constants.len() / 2];
        let err = stowage_compiler::ir::serial::decode(&encoded.graph, few).map(|_| ()).unwrap_err();
        assert!(err.contains("outside the constants"), "{name}: {err}");
    }
}
