#!/usr/bin/env python3
"""Runs stowage and onnxruntime side by side on the model suite and the real-model suite (`real/NAME`, from
scripts/onnx/real_models.py) and prints, per model, both median latencies and
the ratio stowage / onnxruntime, at 1 thread and at all cores; also compile time (stowage: import to runnable)
against onnxruntime's session creation.

Runs alternate: each round runs stowage (`stowage run --repeat W+K --report`: the first W = 9 runs are its
warm-up, where a program on several threads tries its two ways of running (`backends/cpu/src/inline.rs`), and the
figure is the median of the K after them, from the report's `timings_ms.runs`) and then onnxruntime (one warm-up
run per session, then K runs in-process; stowage starts PAUSE after onnxruntime's last run, once its spinning
workers have slept), so both see the same machine state; the figure per model is the median
over rounds. Needs the release binary (cargo build --release) and the model suite (scripts/test writes it).

    PY=$(scripts/onnx/env -q)
    "$PY" scripts/bench.py [--rounds N] [--repeat K] [--threads 1,2] [--markdown FILE] [--stowage BIN] [MODEL ...]

`--stowage BIN` times another build of stowage (an earlier commit's, to compare) instead of target/release/stowage.
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

import numpy as np
import onnx
import onnxruntime as ort
from onnx import numpy_helper

ROOT = Path(__file__).resolve().parents[1]
MODELS = ROOT / "target" / "onnx-models"
STOWAGE = ROOT / "target" / "release" / "stowage"
REAL = ROOT / "target" / "real-models"
DEFAULT = ["random/resnet50", "random/squeezenet", "random/vgg19", "random/densenet121", "random/inception_v1",
           "mlp", "transformer_block"]


def model_dir(name):
    return REAL / name.removeprefix("real/") if name.startswith("real/") else MODELS / name


def real_models():
    manifest = REAL / "manifest.json"
    return [f"real/{e['name']}" for e in json.loads(manifest.read_text())] if manifest.exists() else []


def inputs_of(d):
    model = onnx.load(d / "model.onnx", load_external_data=False)
    inits = {t.name for t in model.graph.initializer}
    names = [i.name for i in model.graph.input if i.name not in inits]
    feeds = {}
    for k, name in enumerate(names):
        feeds[name] = numpy_helper.to_array(onnx.load_tensor(str(d / "test_data_set_0" / f"input_{k}.pb")))
    return feeds


# Runs before the timed ones: a program on several threads spends its first six to nine trying both ways
# (inline.rs, rule 2 and its second look).
WARMUP = 9

# Seconds between onnxruntime's last run and stowage's start. onnxruntime's workers keep spinning for some
# milliseconds after a run (its intra-op pool's spin-wait), in this process, on the cores stowage's run is about
# to use: without the pause a two-thread stowage run of openWakeWord's melspectrogram took 0.22–0.27 ms a run in
# its pool, with it 0.14–0.16, as alone (2026-12-07). stowage's process has ended before onnxruntime runs, so
# nothing of it spins then.
PAUSE = 0.05


def stowage_run(d, feeds, threads, repeat):
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "report.json"
        args = [str(STOWAGE), "run", str(d / "model.onnx"), "--threads", str(threads), "--repeat",
                str(WARMUP + repeat), "--report", str(report)]
        for k in range(len(feeds)):
            args += ["--input", str(d / "test_data_set_0" / f"input_{k}.pb")]
        subprocess.run(args, check=True, stdout=subprocess.DEVNULL)
        t = json.loads(report.read_text())["timings_ms"]
        return statistics.median(t["runs"][WARMUP:]), t["compile"]


def ort_session(d, threads):
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1
    opts.log_severity_level = 3
    start = time.perf_counter()
    sess = ort.InferenceSession(str(d / "model.onnx"), opts, providers=["CPUExecutionProvider"])
    return sess, (time.perf_counter() - start) * 1e3


def ort_run(sess, feeds, repeat):
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        sess.run(None, feeds)
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--threads", default=f"1,{os.cpu_count()}")
    ap.add_argument("--markdown")
    ap.add_argument("--stowage", type=Path, help="the stowage binary to time (default: target/release/stowage)")
    ap.add_argument("models", nargs="*")
    a = ap.parse_args()
    global STOWAGE
    STOWAGE = a.stowage.resolve() if a.stowage else STOWAGE
    if not STOWAGE.exists():
        sys.exit(f"{STOWAGE} is missing: cargo build --release")
    models = a.models or DEFAULT + real_models()
    threads = sorted({int(t) for t in a.threads.split(",")})
    rows = []
    for name in models:
        d = model_dir(name)
        feeds = inputs_of(d)
        for t in threads:
            sess, ort_compile = ort_session(d, t)
            ort_run(sess, feeds, 1)  # warm-up
            st, ot, sc = [], [], []
            for _ in range(a.rounds):
                time.sleep(PAUSE)
                run, compile_ms = stowage_run(d, feeds, t, a.repeat)
                st.append(run)
                sc.append(compile_ms)
                ot.append(ort_run(sess, feeds, a.repeat))
            s_med, o_med = statistics.median(st), statistics.median(ot)
            rows.append((name, t, s_med, o_med, s_med / o_med, statistics.median(sc), ort_compile))
            print(f"{name:<22} threads {t}  stowage {s_med:9.2f} ms  onnxruntime {o_med:9.2f} ms  ratio {s_med / o_med:5.2f}"
                  f"   compile {statistics.median(sc):8.1f} ms vs session {ort_compile:8.1f} ms", flush=True)
    for t in threads:
        ratios = [r for _, tt, _, _, r, _, _ in rows if tt == t]
        print(f"median ratio stowage / onnxruntime at {t} thread(s) over {len(ratios)} models: "
              f"{statistics.median(ratios):.2f}")
    if a.markdown:
        lines = ["| model | threads | stowage ms | onnxruntime ms | ratio | stowage compile ms | ort session ms |",
                 "|---|---|---|---|---|---|---|"]
        lines += [f"| {m} | {t} | {s:.2f} | {o:.2f} | {r:.2f} | {c:.1f} | {oc:.1f} |" for m, t, s, o, r, c, oc in rows]
        Path(a.markdown).write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
