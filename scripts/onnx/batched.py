#!/usr/bin/env python3
"""A batch-N copy of a model of the suite whose graph fixes batch 1 (issue 20 measures ResNet-50 at batch 8 too):
the first graph input's batch axis set to N, each `Reshape` whose constant target starts with 1 given -1 there
instead, a random input of batch N and onnxruntime's output as the reference.

    "$(scripts/onnx/env -q)" scripts/onnx/batched.py target/onnx-models/light/resnet50 8 OUT_DIR

OUT_DIR gets model.onnx and test_data_set_0/{input_0,output_0}.pb, as the suite's models have."""
import os
import sys

import numpy as np
import onnx
import onnxruntime as ort
from onnx import numpy_helper


def main():
    src, n, out = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    model = onnx.load(f"{src}/model.onnx")
    first = model.graph.input[0]
    first.type.tensor_type.shape.dim[0].dim_value = n
    inits = {i.name: i for i in model.graph.initializer}
    for node in model.graph.node:
        if node.op_type == "Reshape" and len(node.input) > 1 and node.input[1] in inits:
            target = numpy_helper.to_array(inits[node.input[1]]).copy()
            if target.size and target[0] == 1:
                target[0] = -1
                inits[node.input[1]].CopyFrom(numpy_helper.from_array(target, node.input[1]))
    for value in model.graph.output:
        value.type.tensor_type.shape.dim[0].dim_value = n
    os.makedirs(f"{out}/test_data_set_0", exist_ok=True)
    onnx.save(model, f"{out}/model.onnx")
    dims = [d.dim_value for d in first.type.tensor_type.shape.dim]
    x = np.random.default_rng(8).standard_normal(dims).astype(np.float32)
    y = ort.InferenceSession(f"{out}/model.onnx", providers=["CPUExecutionProvider"]).run(None, {first.name: x})[0]
    with open(f"{out}/test_data_set_0/input_0.pb", "wb") as f:
        f.write(numpy_helper.from_array(x, first.name).SerializeToString())
    with open(f"{out}/test_data_set_0/output_0.pb", "wb") as f:
        f.write(numpy_helper.from_array(y, model.graph.output[0].name).SerializeToString())
    print(f"{out}: input {dims}, output {list(y.shape)}")


if __name__ == "__main__":
    main()
