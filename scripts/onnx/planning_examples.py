"""The planner's example models for docs/planning.md: a camera pipeline and a model with an op the OpenCL backend
lacks (a product in double precision). Writes target/planning-examples/{camera,mixed}.onnx; scripts/plan-pictures draws their plans."""

import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

out = os.path.join(os.path.dirname(__file__), "..", "..", "target", "planning-examples")
os.makedirs(out, exist_ok=True)
rng = np.random.default_rng(0)


def const(name, shape, scale=0.2):
    return numpy_helper.from_array((rng.standard_normal(shape) * scale).astype(np.float32), name)


camera = helper.make_graph(
    [
        helper.make_node("Cast", ["frame"], ["f"], to=TensorProto.FLOAT, name="cast"),
        helper.make_node("Sub", ["f", "mean"], ["c"], name="sub_mean"),
        helper.make_node("Div", ["c", "std"], ["n"], name="div_std"),
        helper.make_node("Transpose", ["n"], ["nchw"], perm=[0, 3, 1, 2], name="to_nchw"),
        helper.make_node("Conv", ["nchw", "w"], ["y"], pads=[1, 1, 1, 1], name="conv"),
    ],
    "camera",
    [helper.make_tensor_value_info("frame", TensorProto.UINT8, [1, 480, 640, 3])],
    [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 480, 640])],
    [
        numpy_helper.from_array(np.array([124.0, 117.0, 104.0], np.float32), "mean"),
        numpy_helper.from_array(np.array([58.0, 57.0, 57.5], np.float32), "std"),
        const("w", [8, 3, 3, 3]),
    ],
)

mixed = helper.make_graph(
    [
        helper.make_node("MatMul", ["x", "w1"], ["h"], name="dense1"),
        helper.make_node("Relu", ["h"], ["r"], name="relu1"),
        helper.make_node("Cast", ["r"], ["r64"], to=TensorProto.DOUBLE, name="to_f64"),
        helper.make_node("MatMul", ["r64", "w64"], ["p64"], name="dense_f64"),
        helper.make_node("Cast", ["p64"], ["p"], to=TensorProto.FLOAT, name="to_f32"),
        helper.make_node("MatMul", ["p", "w3"], ["y"], name="dense3"),
    ],
    "mixed",
    [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 256])],
    [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 10])],
    [
        const("w1", [256, 256], 0.05),
        numpy_helper.from_array((rng.standard_normal([256, 256]) * 0.05).astype(np.float64), "w64"),
        const("w3", [256, 10], 0.05),
    ],
)

inputs = {
    "camera": numpy_helper.from_array(rng.integers(0, 256, [1, 480, 640, 3]).astype(np.uint8), "frame"),
    "mixed": numpy_helper.from_array(rng.standard_normal([1, 256]).astype(np.float32), "x"),
}
for name, graph in [("camera", camera), ("mixed", mixed)]:
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.checker.check_model(model)
    onnx.save(model, os.path.join(out, f"{name}.onnx"))
    with open(os.path.join(out, f"{name}_input.pb"), "wb") as f:
        f.write(inputs[name].SerializeToString())
print(f"wrote {out}", file=sys.stderr)
