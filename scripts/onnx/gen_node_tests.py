#!/usr/bin/env python3
"""Writes ONNX's own node test cases (onnx.backend.test.case.node) to disk.

Each case becomes OUT/<case name>/model.onnx plus test_data_set_0/input_N.pb and
output_N.pb, named after the graph's inputs and outputs (the layout of ONNX's
backend test data). Tensors are TensorProto files; sequences, optionals and maps
are written as SequenceProto / OptionalProto / MapProto. OUT/index.json lists,
for each case: its op types, opsets, the kind, dtype and shape of each input and
output, and whether all of them are plain (non-string) tensors.

    PY=$(scripts/onnx/env -q)
    "$PY" scripts/onnx/gen_node_tests.py [OUT]      # OUT defaults to target/onnx-node-tests
"""

import json
import shutil
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, numpy_helper

ROOT = Path(__file__).resolve().parents[2]


def op_types(graph, acc):
    """Adds the op types of graph's nodes, and of its subgraphs', to acc."""
    for node in graph.node:
        acc.add(node.op_type if node.domain in ("", "ai.onnx") else f"{node.domain}:{node.op_type}")
        for attr in node.attribute:
            for g in [attr.g] if attr.HasField("g") else attr.graphs:
                op_types(g, acc)
    return acc


def describe(value, tp):
    """Kind, dtype and shape of one test value, whose declared type is tp (a TypeProto)."""
    which = tp.WhichOneof("value")
    if which == "tensor_type":
        a = numpy_helper.to_array(value) if isinstance(value, TensorProto) else np.asarray(value)
        string = tp.tensor_type.elem_type == TensorProto.STRING
        return {"kind": "tensor", "dtype": "str" if string else a.dtype.name, "shape": list(a.shape)}
    if which == "sequence_type":
        return {"kind": "sequence", "elems": [describe(v, tp.sequence_type.elem_type) for v in value]}
    if which == "optional_type":
        inner = None if value is None else describe(value, tp.optional_type.elem_type)
        return {"kind": "optional", "value": inner}
    return {"kind": which.removesuffix("_type") if which else "unknown"}


def serialize(value, vi):
    """The protobuf bytes of one test value for graph input/output vi (a ValueInfoProto)."""
    which = vi.type.WhichOneof("value")
    if which == "tensor_type":
        if isinstance(value, TensorProto):
            t = TensorProto()
            t.CopyFrom(value)
            t.name = vi.name
        else:
            t = numpy_helper.from_array(np.asarray(value), vi.name)
        return t.SerializeToString()
    if which == "sequence_type":
        return numpy_helper.from_list(value, vi.name).SerializeToString()
    if which == "optional_type":
        return numpy_helper.from_optional(value, vi.name).SerializeToString()
    if which == "map_type":
        return numpy_helper.from_dict(value, vi.name).SerializeToString()
    raise ValueError(f"unsupported type {which} for {vi.name}")


def write_case(case, out):
    model = case.model
    d = out / case.name
    d.mkdir(parents=True)
    (d / "model.onnx").write_bytes(model.SerializeToString())
    entry = {
        "name": case.name,
        "ops": sorted(op_types(model.graph, set())),
        "opset": next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), None),
        "opsets": {o.domain or "ai.onnx": o.version for o in model.opset_import},
        "rtol": case.rtol,
        "atol": case.atol,
        "data_sets": len(case.data_sets),
        "errors": [],
    }
    for k, (inputs, outputs) in enumerate(case.data_sets):
        ds = d / f"test_data_set_{k}"
        ds.mkdir()
        for prefix, values, infos in (("input", inputs, model.graph.input), ("output", outputs, model.graph.output)):
            descs = []
            for j, (value, vi) in enumerate(zip(values, infos)):
                desc = {"name": vi.name, **describe(value, vi.type)}
                try:
                    (ds / f"{prefix}_{j}.pb").write_bytes(serialize(value, vi))
                except Exception as e:  # recorded in the index, not fatal
                    entry["errors"].append(f"{prefix}_{j}: {type(e).__name__}: {e}")
                descs.append(desc)
            if k == 0:
                entry[prefix + "s"] = descs
    entry["plain_tensors"] = all(
        x["kind"] == "tensor" and x["dtype"] != "str" for x in entry["inputs"] + entry["outputs"]
    )
    return entry


def main():
    out = Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "target" / "onnx-node-tests"
    if out.exists():
        if any(out.iterdir()) and not (out / "index.json").exists():
            sys.exit(f"{out} exists and holds no index.json: not overwriting it")
        shutil.rmtree(out)
    out.mkdir(parents=True)

    start = time.monotonic()
    with warnings.catch_warnings():  # the case modules warn about deliberate overflows etc.
        warnings.simplefilter("ignore")
        from onnx.backend.test.case.node import collect_testcases

        cases = collect_testcases()
    collected = time.monotonic() - start
    index = [write_case(c, out) for c in sorted(cases, key=lambda c: c.name)]
    (out / "index.json").write_text(json.dumps(index, indent=1) + "\n")

    plain = sum(e["plain_tensors"] for e in index)
    failed = [e["name"] for e in index if e["errors"]]
    print(
        f"onnx {onnx.__version__}: wrote {len(index)} node test cases to {out} "
        f"({plain} plain-tensor, {len(index) - plain} other; collected in {collected:.1f}s, "
        f"total {time.monotonic() - start:.1f}s)"
    )
    if failed:
        print(f"{len(failed)} cases with values that could not be written: {', '.join(failed)}")


if __name__ == "__main__":
    main()
