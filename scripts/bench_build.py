#!/usr/bin/env python3
"""Built executables against onnxruntime, per model: time to the first result, peak RSS, and the executable's size.

- stowage: `stowage build MODEL -o EXE` (not timed), then the executable run as a process on the model's input,
  writing its outputs; the time is the process's wall time from spawn to exit, its peak RSS the process's.
- onnxruntime: a Python process imports onnxruntime and numpy and reads the input (not timed), then creates the
  session (one thread) and runs once (timed). Its peak RSS is reported whole, and above what the process held
  before creating the session (the interpreter and the imports, about 60 MB): the executable's figure lies
  between the two comparisons.

Each figure is the median of --rounds runs, stowage and onnxruntime alternating. Needs the release binary and the
model suite (scripts/bench-build makes both).

    PY=$(scripts/onnx/env -q)
    "$PY" scripts/bench_build.py [--rounds N] [--markdown FILE] [MODEL ...]
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MODELS = ROOT / "target" / "onnx-models"
STOWAGE = ROOT / "target" / "release" / "stowage"
DEFAULT = ["random/resnet50", "random/squeezenet", "random/vgg19", "random/densenet121", "random/inception_v1",
           "random/shufflenet", "mlp", "transformer_block"]

ORT_CHILD = r"""
import json, resource, sys, time
import numpy as np, onnx, onnxruntime as ort
from onnx import numpy_helper
model, inputs = sys.argv[1], sys.argv[2:]
feeds = {}
for path in inputs:
    t = onnx.load_tensor(path)
    feeds[t.name] = numpy_helper.to_array(t)
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
t0 = time.perf_counter()
o = ort.SessionOptions()
o.intra_op_num_threads = 1
s = ort.InferenceSession(model, o, providers=["CPUExecutionProvider"])
s.run(None, feeds)
ms = (time.perf_counter() - t0) * 1e3
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps({"ms": ms, "peak_kb": peak, "before_kb": before}))
"""


def inputs(d):
    out, k = [], 0
    while (d / "test_data_set_0" / f"input_{k}.pb").exists():
        out.append(str(d / "test_data_set_0" / f"input_{k}.pb"))
        k += 1
    return out


def run_exe(exe, ins, out_dir):
    args = [str(exe)] + [f"--input={i}" for i in ins] + ["--output-dir", str(out_dir)]
    t0 = time.perf_counter()
    p = subprocess.Popen(args, stdout=subprocess.DEVNULL)
    _, status, usage = os.wait4(p.pid, 0)
    ms = (time.perf_counter() - t0) * 1e3
    if os.waitstatus_to_exitcode(status) != 0:
        sys.exit(f"{exe} failed")
    return ms, usage.ru_maxrss


def run_ort(model, ins):
    # The input files carry their inputs' names. Nothing large is loaded in this process: a child's peak RSS counts
    # the parent's pages between fork and exec.
    out = subprocess.run([sys.executable, "-c", ORT_CHILD, str(model)] + ins, check=True, capture_output=True,
                         text=True)
    r = json.loads(out.stdout.strip().splitlines()[-1])
    return r["ms"], r["peak_kb"], r["peak_kb"] - r["before_kb"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--markdown")
    ap.add_argument("models", nargs="*")
    a = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in a.models or DEFAULT:
            d = MODELS / name
            exe = Path(tmp) / name.replace("/", "_")
            subprocess.run([str(STOWAGE), "build", str(d / "model.onnx"), "-o", str(exe)], check=True,
                           stdout=subprocess.DEVNULL)
            ins = inputs(d)
            s_ms, s_kb, o_ms, o_kb, o_above = [], [], [], [], []
            for r in range(a.rounds):
                ms, kb = run_exe(exe, ins, Path(tmp) / f"out{r}")
                s_ms.append(ms)
                s_kb.append(kb)
                ms, kb, above = run_ort(d / "model.onnx", ins)
                o_ms.append(ms)
                o_kb.append(kb)
                o_above.append(above)
            med = statistics.median
            row = (name, med(s_ms), med(o_ms), med(s_kb) / 1024, med(o_kb) / 1024, med(o_above) / 1024,
                   exe.stat().st_size / 2**20)
            rows.append(row)
            print(f"{name:22} first result {row[1]:8.1f} ms vs ort {row[2]:8.1f} ms ({row[1] / row[2]:.2f}x)  "
                  f"peak RSS {row[3]:7.1f} MB vs ort {row[4]:7.1f} MB ({row[5]:7.1f} MB above imports)  "
                  f"exe {row[6]:6.1f} MB", flush=True)
            exe.unlink()
    if a.markdown:
        lines = ["| model | first result, exe | session + first run, ort | ratio | peak RSS, exe | peak RSS, ort "
                 "(above imports) | ratio to ort above imports | exe size |",
                 "|---|---|---|---|---|---|---|---|"]
        for n, sm, om, sk, ok, oa, size in rows:
            lines.append(f"| {n} | {sm:.1f} ms | {om:.1f} ms | {sm / om:.2f} | {sk:.0f} MB | {ok:.0f} MB ({oa:.0f} MB)"
                         f" | {sk / oa:.2f} | {size:.1f} MB |")
        Path(a.markdown).write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
