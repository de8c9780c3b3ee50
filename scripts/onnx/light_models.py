#!/usr/bin/env python3
"""Copies the "light" model-zoo graphs shipped in the onnx wheel to OUT.

The wheel's onnx/backend/test/data/light/ holds light_<name>.onnx (a zoo model
whose weights are ConstantOfShape fills, so it is small) and
light_<name>_output_0.pb (its expected output). No input is shipped: ONNX's test
runner feeds arange(n)/n in the input's shape, so this script writes that too.
Each model gets the layout of the node tests:
OUT/<name>/model.onnx and OUT/<name>/test_data_set_0/{input_0,output_0}.pb.
With --check, each model is also run on onnxruntime and compared to output_0.

    PY=$(scripts/onnx/env -q)
    "$PY" scripts/onnx/light_models.py [--check] [OUT]   # OUT defaults to target/onnx-models/light
"""

import shutil
import sys
from pathlib import Path

import numpy as np
import onnx
from onnx import numpy_helper

ROOT = Path(__file__).resolve().parents[2]
SRC = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"
RTOL = {"densenet121": 2e-3}  # as in onnx.backend.test.case.model; others 1e-3, atol 1e-7


def runner_input(vi):
    """The input ONNX's backend runner feeds a light model (generate_dummy_data, random=False)."""
    shape = tuple(d.dim_value if d.HasField("dim_value") else 1 for d in vi.type.tensor_type.shape.dim)
    n = int(np.prod(shape))
    return (np.arange(n).reshape(shape) / n).astype(np.float32)


def check(model_path, feeds, expected, rtol):
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.log_severity_level = 3  # quiet the warnings about unused initializers
    sess = ort.InferenceSession(str(model_path), opts, providers=["CPUExecutionProvider"])
    got = sess.run(None, feeds)
    for g, want in zip(got, expected):
        np.testing.assert_allclose(g, want, rtol=rtol, atol=1e-7)
    return "ok"


def main():
    args = [a for a in sys.argv[1:] if a != "--check"]
    do_check = "--check" in sys.argv[1:]
    out = Path(args[0]) if args else ROOT / "target" / "onnx-models" / "light"
    if not SRC.is_dir():
        sys.exit(f"onnx {onnx.__version__} ships no {SRC}")

    print(f"onnx {onnx.__version__}: light models from {SRC} -> {out}")
    for src in sorted(SRC.glob("light_*.onnx")):
        name = src.stem.removeprefix("light_")
        d = out / name
        shutil.rmtree(d, ignore_errors=True)
        (d / "test_data_set_0").mkdir(parents=True)
        shutil.copyfile(src, d / "model.onnx")

        model = onnx.load(src)
        graph = model.graph
        inits = {i.name for i in graph.initializer}
        feeds = {vi.name: runner_input(vi) for vi in graph.input if vi.name not in inits}
        for j, (k, v) in enumerate(feeds.items()):
            (d / "test_data_set_0" / f"input_{j}.pb").write_bytes(numpy_helper.from_array(v, k).SerializeToString())
        expected = []
        for j, vi in enumerate(graph.output):
            t = onnx.load_tensor(str(SRC / f"{src.stem}_output_{j}.pb"))
            t.name = vi.name  # the shipped files have no name
            (d / "test_data_set_0" / f"output_{j}.pb").write_bytes(t.SerializeToString())
            expected.append(numpy_helper.to_array(t))

        shapes = " ".join(f"{k}{list(v.shape)}" for k, v in feeds.items())
        opset = next(o.version for o in model.opset_import if o.domain in ("", "ai.onnx"))
        line = f"  {name:<13} {src.stat().st_size:>7} bytes  opset {opset:<2} {len(graph.node):>4} nodes  input {shapes}"
        if do_check:
            line += "  onnxruntime: " + check(d / "model.onnx", feeds, expected, RTOL.get(name, 1e-3))
        print(line)


if __name__ == "__main__":
    main()
