#!/usr/bin/env python3
"""stowage against PyTorch at each precision, in one call on the device (issue 20's measure): for each model,
stowage on the GPU at fp32 and at each precision asked (median of the runs, from its report), its output against the
fp32 one and the reference, then PyTorch eager and `torch.compile(mode="reduce-overhead")` at the same precision,
and the ratios side by side.

    python3 scripts/device/precision.py STAGE [--precisions fp32,tf32] [--runs 50] [--models squeezenet,resnet50]

STAGE is the folder scripts/device/stage makes (the stowage binary, models/light_*). Run after `. env.sh`."""
import argparse
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(__file__))
from pbcmp import floats  # noqa: E402
import torch_bench  # noqa: E402


def stowage(stage, model, precision, runs):
    d = f"{stage}/models/light_{model}"
    out = tempfile.mkdtemp()
    args = [f"{stage}/stowage", "run", f"{d}/model.onnx", "--input", f"{d}/test_data_set_0/input_0.pb",
            "--target", "opencl", "--repeat", str(runs), "--output-dir", out, "--report", f"{out}/r.json",
            "--precision", precision]
    done = subprocess.run(args, capture_output=True, text=True)
    if done.returncode != 0:
        return None, None, done.stderr.strip().splitlines()[-1]
    report = json.load(open(f"{out}/r.json"))
    granted = report["precision"][0]
    how = f"{granted['computed']} ({granted['how']})"
    return report["timings_ms"]["run_median"], floats(f"{out}/output_0.pb"), how


def difference(got, want):
    scale = max((abs(w) for w in want), default=1.0) or 1.0
    return max((abs(g - w) for g, w in zip(got, want)), default=0.0) / scale


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("stage")
    ap.add_argument("--precisions", default="fp32,tf32")
    ap.add_argument("--models", default="squeezenet,resnet50")
    ap.add_argument("--runs", type=int, default=50)
    a = ap.parse_args()
    rows = []
    for model in a.models.split(","):
        ref = floats(f"{a.stage}/models/light_{model}/test_data_set_0/output_0.pb")
        fp32 = None
        for precision in a.precisions.split(","):
            ms, out, how = stowage(a.stage, model, precision, a.runs)
            if ms is None:
                print(f"stowage {model} {precision}: FAILED: {how}", flush=True)
                continue
            if precision == "fp32":
                fp32 = out
            vs32 = f"{difference(out, fp32):.1e}" if fp32 is not None else "-"
            print(f"stowage {model} {precision}: {ms:.3f} ms, {how}; max |diff| / max |fp32| {vs32}, "
                  f"against the reference {difference(out, ref):.1e}", flush=True)
            eager = torch_bench.anchor(model, precision, False, a.runs)
            compiled = torch_bench.anchor(model, precision, True, a.runs)
            print(f"torch   {model} {precision}: eager {eager:.3f} ms, compile {compiled:.3f} ms", flush=True)
            rows.append((model, precision, ms, eager, compiled))
    print("\n| model | precision | stowage | eager | compile | stowage/eager | stowage/compile |")
    print("|---|---|---|---|---|---|---|")
    for model, precision, ms, eager, compiled in rows:
        print(f"| {model} | {precision} | {ms:.3f} | {eager:.3f} | {compiled:.3f} | {ms / eager:.2f} | {ms / compiled:.2f} |")


if __name__ == "__main__":
    main()
