#!/usr/bin/env python3
"""Writes the exported-model suite: scikit-learn models trained here on fixed data and exported by skl2onnx, the
way a user of scikit-learn brings a model to an ONNX runtime (the `ai.onnx.ml` tree ensembles, linear models and
transforms, in pipelines), each with inputs from its held-out data and onnxruntime's outputs on them, in the
node-test layout: OUT/<name>/model.onnx and OUT/<name>/test_data_set_0/{input_N,output_N}.pb. OUT/manifest.json
lists every model with its kind and inputs, in the real-model suite's format (every one runs in CI: they are small).

    PY=$(scripts/onnx/env -q)
    "$PY" scripts/onnx/sklearn_models.py [OUT]      # OUT defaults to target/sklearn-models

Labels are int64, or strings (the `*_names` models: iris's class names), and probabilities a tensor
(`zipmap=False`): ZipMap's sequences of maps are what stowage does not take yet. A few hand-built models join them: one-column binary classifiers under each post-transform
(`binary_*`), whose two output columns and labels follow onnxruntime's own conventions rather than a spec, and
`Normalizer` on rows of every sign (`normalizer_*`).
"""

import json
import shutil
import sys
from pathlib import Path

import numpy as np
import onnxruntime as ort
from onnx import numpy_helper
from skl2onnx import to_onnx
from sklearn.datasets import load_iris, make_classification, make_regression
from sklearn.ensemble import (
    ExtraTreesRegressor,
    GradientBoostingClassifier,
    GradientBoostingRegressor,
    RandomForestClassifier,
    RandomForestRegressor,
)
from sklearn.linear_model import LinearRegression, LogisticRegression, Ridge
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import Binarizer, MinMaxScaler, Normalizer, StandardScaler
from sklearn.tree import DecisionTreeClassifier, DecisionTreeRegressor

ROOT = Path(__file__).resolve().parents[2]
SEED = 20261205


def data():
    iris = load_iris()
    xc, yc = make_classification(n_samples=400, n_features=12, n_informative=6, random_state=SEED % 1000)
    xr, yr = make_regression(n_samples=400, n_features=10, n_targets=1, noise=0.5, random_state=SEED % 1000)
    xm, ym = make_regression(n_samples=300, n_features=6, n_targets=3, noise=0.5, random_state=7)
    return {
        "iris": (iris.data.astype(np.float32), iris.target),
        "iris_names": (iris.data.astype(np.float32), iris.target_names[iris.target]),
        "binary": (xc.astype(np.float32), yc),
        "regression": (xr.astype(np.float32), yr),
        "multi": (xm.astype(np.float32), ym),
    }


def suite():
    s = SEED % 1000
    return [
        ("decision_tree_iris", "iris", DecisionTreeClassifier(max_depth=5, random_state=s)),
        ("random_forest_iris", "iris", RandomForestClassifier(n_estimators=20, max_depth=6, random_state=s)),
        ("gradient_boosting_binary", "binary", GradientBoostingClassifier(n_estimators=30, random_state=s)),
        ("gradient_boosting_iris", "iris", GradientBoostingClassifier(n_estimators=20, random_state=s)),
        ("random_forest_regression", "regression", RandomForestRegressor(n_estimators=15, max_depth=8, random_state=s)),
        ("gradient_boosting_regression", "regression", GradientBoostingRegressor(n_estimators=40, random_state=s)),
        ("extra_trees_three_targets", "multi", ExtraTreesRegressor(n_estimators=10, max_depth=6, random_state=s)),
        ("decision_tree_regression", "regression", DecisionTreeRegressor(max_depth=6, random_state=s)),
        ("logistic_iris", "iris", make_pipeline(StandardScaler(), LogisticRegression(max_iter=500))),
        ("random_forest_iris_names", "iris_names", RandomForestClassifier(n_estimators=10, max_depth=5, random_state=s)),
        ("logistic_iris_names", "iris_names", make_pipeline(StandardScaler(), LogisticRegression(max_iter=500))),
        ("logistic_binary", "binary", make_pipeline(MinMaxScaler(), LogisticRegression(max_iter=500))),
        ("linear_regression", "regression", LinearRegression()),
        ("normalized_ridge", "regression", make_pipeline(Normalizer(norm="l2"), Ridge(alpha=0.5))),
        ("binarized_forest", "binary", make_pipeline(Binarizer(threshold=0.1), RandomForestClassifier(n_estimators=8, random_state=s))),
    ]


def hand_built():
    """(name, model, input): binary classifiers with one column of scores, whose second column and label onnxruntime
    writes its own way, and normalizers."""
    from onnx import TensorProto, helper

    def model(node, n):
        g = helper.make_graph(
            [node], "binary", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [None, 1])],
            [helper.make_tensor_value_info("label", TensorProto.INT64, [None]),
             helper.make_tensor_value_info("scores", TensorProto.FLOAT, [None, 2])])
        return helper.make_model(g, opset_imports=[helper.make_opsetid("", 18), helper.make_opsetid("ai.onnx.ml", 3)])

    x = np.array([[-2.0], [-0.4], [0.0], [0.2], [0.45], [0.9], [3.0]], np.float32)
    out = []
    for post in ["NONE", "LOGISTIC", "SOFTMAX", "SOFTMAX_ZERO"]:
        n = helper.make_node("LinearClassifier", ["x"], ["label", "scores"], domain="ai.onnx.ml", coefficients=[1.5],
                             intercepts=[-0.1], classlabels_ints=[3, 7], post_transform=post)
        out.append((f"binary_linear_{post.lower()}", model(n, 1), x))
        for sign, weights in [("positive", [0.3, 0.8]), ("mixed", [-0.3, 0.2])]:
            n = helper.make_node(
                "TreeEnsembleClassifier", ["x"], ["label", "scores"], domain="ai.onnx.ml",
                nodes_treeids=[0, 0, 0], nodes_nodeids=[0, 1, 2], nodes_featureids=[0, 0, 0],
                nodes_modes=["BRANCH_LEQ", "LEAF", "LEAF"], nodes_values=[0.3, 0, 0], nodes_truenodeids=[1, 0, 0],
                nodes_falsenodeids=[2, 0, 0], class_treeids=[0, 0], class_nodeids=[1, 2], class_ids=[0, 0],
                class_weights=weights, base_values=[0.05], classlabels_int64s=[3, 7], post_transform=post)
            out.append((f"binary_tree_{sign}_{post.lower()}", model(n, 1), x))
    # Normalizer on rows whose largest value is negative, zero or positive (onnxruntime divides by the signed max).
    rows = np.array([[-4.0, 2.0, 1.0], [-3.0, -1.0, -2.0], [0.0, 0.0, 0.0], [1.0, -5.0, 0.5]], np.float32)
    for norm in ["MAX", "L1", "L2"]:
        n = helper.make_node("Normalizer", ["x"], ["y"], domain="ai.onnx.ml", norm=norm)
        g = helper.make_graph([n], "normalizer", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [None, 3])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [None, 3])])
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18), helper.make_opsetid("ai.onnx.ml", 1)])
        out.append((f"normalizer_{norm.lower()}", m, rows))
    return out


def main():
    out = Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "target" / "sklearn-models"
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    sets = data()
    manifest = []
    for name, dataset, model in suite():
        x, y = sets[dataset]
        train, test = x[:-40], x[-40:].copy()
        model.fit(train, y[:-40])
        options = {id(model): {"zipmap": False}} if hasattr(model, "predict_proba") else None
        onx = to_onnx(model, train[:1], options=options, target_opset={"": 18, "ai.onnx.ml": 3})
        d = out / name
        (d / "test_data_set_0").mkdir(parents=True)
        (d / "model.onnx").write_bytes(onx.SerializeToString())
        session = ort.InferenceSession(onx.SerializeToString(), providers=["CPUExecutionProvider"])
        input_name = session.get_inputs()[0].name
        (d / "test_data_set_0" / "input_0.pb").write_bytes(
            numpy_helper.from_array(test, input_name).SerializeToString())
        for k, value in enumerate(session.run(None, {input_name: test})):
            (d / "test_data_set_0" / f"output_{k}.pb").write_bytes(
                numpy_helper.from_array(np.asarray(value), session.get_outputs()[k].name).SerializeToString())
        ops = sorted({f"{n.domain}:{n.op_type}" if n.domain else n.op_type for n in onx.graph.node})
        manifest.append({"name": name, "kind": type(model).__name__, "dataset": dataset, "ops": ops,
                         "inputs": [input_name], "ci": True})
        print(f"{name:<32} {' '.join(ops)}")
    for name, onx, test in hand_built():
        d = out / name
        (d / "test_data_set_0").mkdir(parents=True)
        (d / "model.onnx").write_bytes(onx.SerializeToString())
        session = ort.InferenceSession(onx.SerializeToString(), providers=["CPUExecutionProvider"])
        (d / "test_data_set_0" / "input_0.pb").write_bytes(numpy_helper.from_array(test, "x").SerializeToString())
        for k, value in enumerate(session.run(None, {"x": test})):
            (d / "test_data_set_0" / f"output_{k}.pb").write_bytes(
                numpy_helper.from_array(np.asarray(value), session.get_outputs()[k].name).SerializeToString())
        manifest.append({"name": name, "kind": "hand-built", "dataset": "", "ops": [onx.graph.node[0].op_type],
                         "inputs": ["x"], "ci": True})
        print(f"{name:<32} ai.onnx.ml:{onx.graph.node[0].op_type}")
    (out / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")


if __name__ == "__main__":
    main()
