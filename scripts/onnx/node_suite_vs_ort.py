"""The ONNX node suite through stowage and through onnxruntime, side by side in one run, with one comparison.

Every case gen_node_tests.py wrote runs through `stowage run` (the release binary, on `--target`) and through an
onnxruntime CPU session; each result is compared with the case's reference outputs within the case's own rtol/atol
(NaN equal to NaN, shapes and element types exact; sequences item by item, optionals by presence, then value).
`--plain` keeps to the cases whose inputs and outputs are plain numeric tensors. It prints
the passes per op type (the first op type of the case that is not a plain building block) and the totals, and
with --failures the cases stowage fails that onnxruntime passes.

    PY=$(scripts/onnx/env -q)
    cargo build --release
    "$PY" scripts/onnx/node_suite_vs_ort.py [--target cpu] [--ops Mod,Trilu] [--failures]
"""

from __future__ import annotations

import argparse
import collections
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from onnx import numpy_helper

ROOT = Path(__file__).resolve().parents[2]
CASES = ROOT / "target" / "onnx-node-tests"
STOWAGE = ROOT / "target" / "release" / "stowage"


def load(path: Path) -> np.ndarray:
    t = onnx.TensorProto()
    t.ParseFromString(path.read_bytes())
    return numpy_helper.to_array(t)


def read_value(path: Path, tp: onnx.TypeProto | None):
    """A value file as the model declares it: a tensor, a sequence (a list) or an optional (None when empty)."""
    which = tp.WhichOneof("value") if tp is not None else "tensor_type"
    if which == "sequence_type":
        seq = onnx.SequenceProto()
        seq.ParseFromString(path.read_bytes())
        return numpy_helper.to_list(seq)
    if which == "optional_type":
        opt = onnx.OptionalProto()
        opt.ParseFromString(path.read_bytes())
        return numpy_helper.to_optional(opt)
    return load(path)


def same(g, w, rtol: float, atol: float) -> str | None:
    """None when value g matches w, else why not."""
    if w is None or g is None:
        return None if g is None and w is None else f"{'a value' if g is not None else 'none'}, expected the other"
    if isinstance(w, list):
        if not isinstance(g, list) or len(g) != len(w):
            return f"{len(g) if isinstance(g, list) else 'not a'} sequence items, expected {len(w)}"
        for i, (a, b) in enumerate(zip(g, w)):
            why = same(a, b, rtol, atol)
            if why:
                return f"item {i}: {why}"
        return None
    g = np.asarray(g)
    if g.shape != w.shape or g.dtype != w.dtype:
        return f"{g.dtype}{list(g.shape)}, expected {w.dtype}{list(w.shape)}"
    # ml_dtypes' floats (bfloat16, float8, float4) have kind 'V': compared as floats too, NaN equal to NaN.
    if w.dtype.kind in "fc" or w.dtype.name.startswith(("bfloat16", "float8", "float4")):
        g64, w64 = g.astype(np.float64), w.astype(np.float64)
        if not np.allclose(g64, w64, rtol=rtol, atol=atol, equal_nan=True):
            return f"values differ beyond rtol {rtol}, atol {atol}"
    elif not np.array_equal(g, w):
        return "values differ"
    return None


def matches(got: list, want: list, rtol: float, atol: float) -> str | None:
    """None when every output matches, else why not."""
    if len(got) != len(want):
        return f"{len(got)} outputs, expected {len(want)}"
    for k, (g, w) in enumerate(zip(got, want)):
        why = same(g, w, rtol, atol)
        if why:
            return f"output {k}: {why}"
    return None


def declared(d: Path) -> tuple[dict, list]:
    """The model's input types by name, and its output types in order."""
    g = onnx.load(str(d / "model.onnx"), load_external_data=False).graph
    return {i.name: i.type for i in g.input}, [o.type for o in g.output]


def references(case: dict, d: Path) -> list:
    outs = declared(d)[1]
    return [read_value(d / "test_data_set_0" / f"output_{k}.pb", outs[k] if k < len(outs) else None)
            for k in range(len(case["outputs"]))]


def run_stowage(case: dict, d: Path, target: str) -> str | None:
    with tempfile.TemporaryDirectory() as out:
        args = [str(STOWAGE), "run", str(d / "model.onnx"), "--target", target, "--output-dir", out]
        for k, i in enumerate(case["inputs"]):
            args += ["--input", f"{i['name']}={d / 'test_data_set_0' / f'input_{k}.pb'}"]
        r = subprocess.run(args, capture_output=True, text=True, timeout=600)
        if r.returncode != 0:
            lines = r.stderr.strip().splitlines()
            return lines[-1] if lines else f"exit {r.returncode}"
        outs = declared(d)[1]
        got = [read_value(Path(out) / f"output_{k}.pb", outs[k] if k < len(outs) else None)
               for k in range(len(case["outputs"]))]
    return matches(got, references(case, d), case["rtol"], case["atol"])


def run_ort(case: dict, d: Path) -> str | None:
    try:
        opts = ort.SessionOptions()
        opts.log_severity_level = 4
        sess = ort.InferenceSession(str(d / "model.onnx"), opts, providers=["CPUExecutionProvider"])
        ins = declared(d)[0]
        feeds = {i["name"]: read_value(d / "test_data_set_0" / f"input_{k}.pb", ins.get(i["name"]))
                 for k, i in enumerate(case["inputs"])}
        names = [o.name for o in sess.get_outputs()]
        got = sess.run(names, feeds)
    except Exception as e:  # noqa: BLE001 - any failure of onnxruntime is a failed case, with its message
        return str(e).splitlines()[0] if str(e) else type(e).__name__
    return matches(got, references(case, d), case["rtol"], case["atol"])


def family(case: dict) -> str:
    """The op type a case is about: its last op (the node tests' `_expanded` graphs end in their function's last
    op, so they are named after the case instead)."""
    name = case["name"]
    if name.endswith("_expanded") or name.endswith("_expanded_ver18") or "_expanded_" in name:
        return "(expanded functions)"
    return case["ops"][-1] if case["ops"] else "(none)"


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--target", default="cpu")
    ap.add_argument("--ops", default="", help="only cases using one of these op types (comma-separated)")
    ap.add_argument("--failures", action="store_true", help="list the cases stowage fails and onnxruntime passes")
    ap.add_argument("--plain", action="store_true", help="only cases of plain numeric tensors (as before 2026-12-05)")
    args = ap.parse_args()
    if not STOWAGE.exists():
        sys.exit(f"{STOWAGE} is missing: run cargo build --release")
    index = json.loads((CASES / "index.json").read_text())
    only = {o for o in args.ops.split(",") if o}
    per = collections.defaultdict(lambda: [0, 0, 0])
    lost = []
    for case in index:
        if (args.plain and not case.get("plain_tensors")) or (only and not only & set(case["ops"])):
            continue
        d = CASES / case["name"]
        s, o = run_stowage(case, d, args.target), run_ort(case, d)
        row = per[family(case)]
        row[0] += 1
        row[1] += s is None
        row[2] += o is None
        if s is not None and o is None:
            lost.append(f"{case['name']}: {s}")
    total = [sum(r[i] for r in per.values()) for i in range(3)]
    print(f"{'op type':<36} {'cases':>6} {'stowage':>8} {'ort':>6}")
    for fam, (n, s, o) in sorted(per.items()):
        mark = "  <" if s < o else ""
        print(f"{fam:<36} {n:>6} {s:>8} {o:>6}{mark}")
    print(f"{'total':<36} {total[0]:>6} {total[1]:>8} {total[2]:>6}")
    print(f"stowage ({args.target}) passes {total[1]} of {total[0]}, onnxruntime {total[2]}")
    if args.failures:
        print("\ncases stowage fails and onnxruntime passes:")
        print("\n".join(lost))
    return 0


if __name__ == "__main__":
    sys.exit(main())
