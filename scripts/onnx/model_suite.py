#!/usr/bin/env python3
"""Writes the model suite: models with seeded inputs and onnxruntime reference outputs.

For each light model-zoo graph of the onnx wheel (already copied by light_models.py to
target/onnx-models/light), a "random" variant replaces every ConstantOfShape weight with a seeded random
initializer of the same shape, scaled so activations stay finite (He-normal weights, BatchNorm statistics near
identity), since constant weights make every channel compute the same thing. Two models are built with the onnx
helper: an MLP (784-512-256-10) and a transformer encoder block (LayerNormalization, MatMul, Softmax, erf GELU,
Transpose, Reshape). Each gets OUT/<name>/model.onnx and test_data_set_0/{input_N,output_N}.pb, the output from
onnxruntime on a seeded input.

    PY=$(scripts/onnx/env -q)
    "$PY" scripts/onnx/model_suite.py [OUT]      # OUT defaults to target/onnx-models
"""

import shutil
import sys
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

ROOT = Path(__file__).resolve().parents[2]
SEED = 20261129


def consumers(graph):
    """name -> list of (node, input index) reading it."""
    use = {}
    for node in graph.node:
        for i, name in enumerate(node.input):
            use.setdefault(name, []).append((node, i))
    return use


def random_weight(rng, shape, uses):
    """A seeded tensor for a weight of `shape`, by what reads it."""
    node, index = uses[0] if uses else (None, None)
    op = node.op_type if node is not None else ""
    if op == "BatchNormalization":
        c = shape[0]
        return {
            1: 1.0 + 0.1 * rng.standard_normal(c),
            2: 0.1 * rng.standard_normal(c),
            3: 0.1 * rng.standard_normal(c),
            4: rng.uniform(0.5, 1.5, c),
        }[index].astype(np.float32)
    if len(shape) <= 1:
        return (0.01 * rng.standard_normal(shape)).astype(np.float32)
    if op == "Gemm" and index == 1:
        trans_b = any(a.name == "transB" and a.i == 1 for a in node.attribute)
        fan_in = shape[1] if trans_b else shape[0]
    elif op == "MatMul":
        fan_in = shape[0]
    else:
        fan_in = int(np.prod(shape[1:]))
    return (rng.standard_normal(shape) * np.sqrt(2.0 / max(fan_in, 1))).astype(np.float32)


def randomize(model, rng):
    """Replaces ConstantOfShape weights with seeded initializers."""
    graph = model.graph
    inits = {t.name: t for t in graph.initializer}
    use = consumers(graph)
    keep = []
    for node in graph.node:
        if node.op_type == "ConstantOfShape" and node.input[0] in inits:
            shape = tuple(int(d) for d in numpy_helper.to_array(inits[node.input[0]]))
            value = random_weight(rng, shape, use.get(node.output[0], []))
            graph.initializer.append(numpy_helper.from_array(value, node.output[0]))
        else:
            keep.append(node)
    del graph.node[:]
    graph.node.extend(keep)
    used = {i for n in graph.node for i in n.input}
    live = [t for t in graph.initializer if t.name in used or t.name in {o.name for o in graph.output}]
    del graph.initializer[:]
    graph.initializer.extend(live)
    # IR versions before 4 list every initializer as a graph input too.
    names = {t.name for t in graph.initializer}
    runtime_inputs = [i for i in graph.input if i.name not in names and i.name in used]
    if model.ir_version < 4:
        runtime_inputs = [i for i in graph.input if i.name in used and not i.name.endswith("__SHAPE")]
        known = {i.name for i in runtime_inputs}
        for t in graph.initializer:
            if t.name not in known:
                runtime_inputs.append(helper.make_tensor_value_info(t.name, t.data_type, list(t.dims)))
    del graph.input[:]
    graph.input.extend(runtime_inputs)
    return model


def mlp(rng):
    dims = [784, 512, 256, 10]
    nodes, inits = [], []
    x = "x"
    for i in range(3):
        w, b = f"w{i}", f"b{i}"
        inits.append(numpy_helper.from_array((rng.standard_normal((dims[i], dims[i + 1])) * np.sqrt(2 / dims[i])).astype(np.float32), w))
        inits.append(numpy_helper.from_array((0.01 * rng.standard_normal(dims[i + 1])).astype(np.float32), b))
        nodes.append(helper.make_node("MatMul", [x, w], [f"mm{i}"]))
        nodes.append(helper.make_node("Add", [f"mm{i}", b], [f"h{i}" if i < 2 else "logits"]))
        if i < 2:
            nodes.append(helper.make_node("Relu", [f"h{i}"], [f"r{i}"]))
            x = f"r{i}"
    graph = helper.make_graph(
        nodes, "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 784])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, 10])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def transformer(rng, seq=16, d=64, heads=4, ff=256, layers=1, name="transformer_block"):
    """A pre-LayerNorm encoder of `layers` blocks (one: the suite's transformer block; twelve of 768 wide, 12 heads,
    3072 inner, sequence 128: a BERT-base-shaped encoder, scripts/device/bert.py), as exporters write one: MatMul,
    Reshape and Transpose for the heads, Softmax, GELU written out with Erf."""
    hd = d // heads
    inits = []

    def weight(name, shape, scale=None):
        s = scale if scale is not None else np.sqrt(1.0 / shape[0])
        inits.append(numpy_helper.from_array((rng.standard_normal(shape) * s).astype(np.float32), name))
        return name

    def const(name, array):
        inits.append(numpy_helper.from_array(np.asarray(array), name))
        return name

    nodes = []
    for layer in range(layers):
        # One block's names, as the single block has always had them; later blocks' prefixed.
        pre = f"l{layer}_" if layers > 1 else ""
        x = "x" if layer == 0 else f"l{layer - 1}_y"
        y = "y" if layer == layers - 1 else f"{pre}y"

        def n(op, ins, outs, **attrs):
            rename = lambda v: {"x": x, "y": y}.get(v, pre + v)
            nodes.append(helper.make_node(op, [rename(v) for v in ins], [rename(v) for v in outs], **attrs))

        def w(name, shape, scale=None):
            return weight(pre + name, shape, scale)[len(pre):]

        def c(name, array):
            return const(pre + name, array)[len(pre):]

        n("LayerNormalization", ["x", w("ln1_g", [d], 0.1), w("ln1_b", [d], 0.1)], ["ln1"], axis=-1, epsilon=1e-5)
        for p in "qkv":
            n("MatMul", ["ln1", w(f"w{p}", [d, d])], [f"{p}0"])
            n("Reshape", [f"{p}0", c(f"shape_{p}", np.array([1, seq, heads, hd], np.int64))], [f"{p}1"])
            perm = [0, 2, 3, 1] if p == "k" else [0, 2, 1, 3]
            n("Transpose", [f"{p}1"], [f"{p}"], perm=perm)
        n("MatMul", ["q", "k"], ["scores0"])
        n("Div", ["scores0", c("sqrt_d", np.array(np.sqrt(hd), np.float32))], ["scores"])
        n("Softmax", ["scores"], ["attn"], axis=-1)
        n("MatMul", ["attn", "v"], ["ctx0"])
        n("Transpose", ["ctx0"], ["ctx1"], perm=[0, 2, 1, 3])
        n("Reshape", ["ctx1", c("shape_ctx", np.array([1, seq, d], np.int64))], ["ctx"])
        n("MatMul", ["ctx", w("wo", [d, d])], ["proj"])
        n("Add", ["x", "proj"], ["res1"])
        n("LayerNormalization", ["res1", w("ln2_g", [d], 0.1), w("ln2_b", [d], 0.1)], ["ln2"], axis=-1, epsilon=1e-5)
        n("MatMul", ["ln2", w("w1", [d, ff])], ["ff0"])
        n("Add", ["ff0", w("b1", [ff], 0.01)], ["ff1"])
        # GELU written out with Erf, as exporters do: 0.5 * x * (1 + erf(x / sqrt(2))).
        n("Div", ["ff1", c("sqrt2", np.array(np.sqrt(2.0), np.float32))], ["g0"])
        n("Erf", ["g0"], ["g1"])
        n("Add", ["g1", c("one", np.array(1.0, np.float32))], ["g2"])
        n("Mul", ["ff1", "g2"], ["g3"])
        n("Mul", ["g3", c("half", np.array(0.5, np.float32))], ["gelu"])
        n("MatMul", ["gelu", w("w2", [ff, d])], ["ff2"])
        n("Add", ["ff2", w("b2", [d], 0.01)], ["ff3"])
        n("Add", ["res1", "ff3"], ["y"])
    graph = helper.make_graph(
        nodes, name, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, seq, d])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, seq, d])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def write(out, name, model, rng):
    import onnxruntime as ort

    d = out / name
    shutil.rmtree(d, ignore_errors=True)
    (d / "test_data_set_0").mkdir(parents=True)
    onnx.checker.check_model(model)
    onnx.save(model, d / "model.onnx")
    inits = {t.name for t in model.graph.initializer}
    feeds = {}
    for j, vi in enumerate(i for i in model.graph.input if i.name not in inits):
        shape = [x.dim_value or 1 for x in vi.type.tensor_type.shape.dim]
        feeds[vi.name] = rng.standard_normal(shape).astype(np.float32)
        (d / "test_data_set_0" / f"input_{j}.pb").write_bytes(numpy_helper.from_array(feeds[vi.name], vi.name).SerializeToString())
    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    sess = ort.InferenceSession(str(d / "model.onnx"), opts, providers=["CPUExecutionProvider"])
    for j, (vi, value) in enumerate(zip(model.graph.output, sess.run(None, feeds))):
        assert np.all(np.isfinite(value)), f"{name}: non-finite reference output"
        (d / "test_data_set_0" / f"output_{j}.pb").write_bytes(numpy_helper.from_array(value, vi.name).SerializeToString())
    print(f"  {name:<22} {len(model.graph.node):>4} nodes")


def main():
    out = Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "target" / "onnx-models"
    light = out / "light"
    if not light.is_dir():
        sys.exit(f"{light} is missing: run scripts/onnx/light_models.py first")
    rng = np.random.default_rng(SEED)
    print(f"model suite -> {out}")
    for src in sorted(light.glob("*/model.onnx")):
        write(out / "random", src.parent.name, randomize(onnx.load(src), rng), rng)
    write(out, "mlp", mlp(rng), rng)
    write(out, "transformer_block", transformer(rng), rng)


if __name__ == "__main__":
    main()
