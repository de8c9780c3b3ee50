"""stowage against onnxruntime node by node, one model, side by side in one run.

    PY=$(scripts/onnx/env -q); "$PY" scripts/bench_nodes.py target/real-models/orientation [THREADS]

onnxruntime's profile (`enable_profiling`, its nodes' kernel times, the median of the last 60) against stowage's
`STOWAGE_PROFILE=all` (each step's fastest over three processes of 20 runs, in the pool), matched by node: a node
onnxruntime fused or renamed (its `_nchwc` copies, a fused node named by its output) is charged to the stowage step
that computes it (the producer of its first input, followed back). Prints the steps where stowage loses most
(`TOP=25` by default). Run `cargo build --release` first.
"""
import collections
import glob
import json
import os
import re
import subprocess
import sys

import numpy as np
import onnx
import onnxruntime as ort
from onnx import numpy_helper, load_tensor
d = sys.argv[1]; threads = int(sys.argv[2]) if len(sys.argv) > 2 else 1
model = f"{d}/model.onnx"
ins = sorted(glob.glob(f"{d}/test_data_set_0/input_*.pb"))
so = ort.SessionOptions(); so.intra_op_num_threads = threads; so.inter_op_num_threads = 1
so.enable_profiling = True; so.log_severity_level = 3
sess = ort.InferenceSession(model, so, providers=["CPUExecutionProvider"])
feeds = {}
for i, p in zip(sess.get_inputs(), ins):
    feeds[i.name] = numpy_helper.to_array(load_tensor(p))
ortt = collections.defaultdict(list)
ours = collections.defaultdict(list)
types = {}
for rnd in range(3):
    for _ in range(20): sess.run(None, feeds)
    args = ["target/release/stowage", "run", model, "--threads", str(threads), "--repeat", "20"]
    for p in ins: args += ["--input", p]
    out = subprocess.run(args, env=dict(os.environ, STOWAGE_PROFILE="all", STOWAGE_CPU_WAY="pool"), capture_output=True, text=True)
    for l in (out.stdout + out.stderr).splitlines():
        m = re.match(r"profile step (\S+)\s+(\S+)\s+([0-9.]+) ms", l)
        if m: ours[m.group(1)].append(float(m.group(3))); types[m.group(1)] = m.group(2)
prof = sess.end_profiling()
ev = json.load(open(prof)); os.remove(prof)
per = collections.defaultdict(list)
for e in ev:
    if e.get("cat") == "Node" and e["name"].endswith("_kernel_time"):
        per[e["name"][:-len("_kernel_time")]].append(e["dur"] / 1000)
# ORT fuses nodes: its names are of the kept node

g = onnx.load(model, load_external_data=False).graph
producer = {}
byname = {}
for i, n in enumerate(g.node):
    nm = n.name or f"n{i}"
    byname[nm] = n
    for o in n.output: producer[o] = nm
our_med = {k: min(v) for k, v in ours.items()}
def owner(nm, depth=0):
    if nm in our_med or depth > 6: return nm
    n = byname.get(nm)
    if n is None and nm in producer: return owner(producer[nm], depth + 1)
    if n is None:
        base = re.sub(r"(_nchwc|_token_\d+)$", "", nm)
        if base != nm: return owner(base, depth + 1)
        return nm
    for i in n.input:
        if i in producer: return owner(producer[i], depth + 1)
    return nm
ort_med = collections.defaultdict(float)
for k, v in per.items(): ort_med[owner(k)] += float(np.median(v[-60:]))
rows = []
for k, v in our_med.items():
    o = ort_med.get(k)
    rows.append((v - (o or 0), k, types[k], v, o))
print("ours total %.3f  ort total %.3f" % (sum(our_med.values()), sum(ort_med.values())))
unmatched = {k: v for k, v in ort_med.items() if k not in our_med}
print("ort nodes not among ours: %.3f ms over %d" % (sum(unmatched.values()), len(unmatched)), sorted(unmatched.items(), key=lambda x: -x[1])[:8])
for diff, k, t, v, o in sorted(rows, reverse=True)[:int(os.environ.get("TOP", "25"))]:
    print(f"{k:<40} {t:<18} ours {v:7.3f}  ort {o if o is not None else float('nan'):7.3f}  diff {diff:7.3f}")
