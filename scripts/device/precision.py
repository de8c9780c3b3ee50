#!/usr/bin/env python3
"""stowage against PyTorch at each precision, in one call on the device (issue 20's measure): for each model,
stowage on the GPU at fp32 and at each precision asked (median of the runs, from its report), its output against the
fp32 one and the reference, then PyTorch eager and `torch.compile(mode="reduce-overhead")` at the same precision,
and the ratios side by side.

    python3 scripts/device/precision.py STAGE [--precisions fp32,tf32] [--runs 50]
        [--models squeezenet,resnet50,transformer_block,bert] [--batch 8]

STAGE is the folder scripts/device/stage-precision makes (the stowage binary, models/light_*, the transformer
block). The BERT-base-shaped encoder (12 blocks of 768, 12 heads, 3072 inner, sequence 128: 85 M weights, too
large to carry) is written on the device by `model_suite.transformer`, with onnxruntime's output as its reference,
under STAGE/generated. `--batch N` (N > 1) runs STAGE/models/light_MODELbN, written here by
`scripts/onnx/batched.py`, and PyTorch at batch N. Run after `. env.sh`."""
import argparse
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(__file__))
from pbcmp import floats  # noqa: E402
import torch_bench  # noqa: E402


def model_dir(stage, model, batch=1):
    """Where `model`'s model.onnx and test_data_set_0 are (the BERT-shaped encoder written first if need be)."""
    if batch > 1:
        return f"{stage}/models/light_{model}b{batch}"
    if model == "bert":
        d = f"{stage}/generated/bert"
        if not os.path.exists(f"{d}/test_data_set_0/output_0.pb"):
            sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "onnx"))
            import numpy as np
            from pathlib import Path
            import model_suite

            rng = np.random.default_rng(model_suite.SEED)
            encoder = model_suite.transformer(rng, seq=128, d=768, heads=12, ff=3072, layers=12, name="bert_encoder")
            # onnxruntime on the device reads IR versions up to 13; opset 17 needs 8.
            encoder.ir_version = min(encoder.ir_version, 10)
            model_suite.write(Path(f"{stage}/generated"), "bert", encoder, rng)
        return d
    light = f"{stage}/models/light_{model}"
    return light if os.path.exists(light) else f"{stage}/models/{model}"


def stowage(stage, model, precision, runs, batch=1):
    d = model_dir(stage, model, batch)
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
    ap.add_argument("--models", default="squeezenet,resnet50,transformer_block,bert")
    ap.add_argument("--runs", type=int, default=50)
    ap.add_argument("--batch", type=int, default=1)
    a = ap.parse_args()
    rows = []
    for model in a.models.split(","):
        ref = floats(f"{model_dir(a.stage, model, a.batch)}/test_data_set_0/output_0.pb")
        fp32 = None
        for precision in a.precisions.split(","):
            ms, out, how = stowage(a.stage, model, precision, a.runs, a.batch)
            if ms is None:
                print(f"stowage {model} {precision}: FAILED: {how}", flush=True)
                continue
            if precision == "fp32":
                fp32 = out
            vs32 = f"{difference(out, fp32):.1e}" if fp32 is not None else "-"
            print(f"stowage {model} {precision}: {ms:.3f} ms, {how}; max |diff| / max |fp32| {vs32}, "
                  f"against the reference {difference(out, ref):.1e}", flush=True)
            eager = torch_bench.anchor(model, precision, False, a.runs, a.batch)
            compiled = torch_bench.anchor(model, precision, True, a.runs, a.batch)
            print(f"torch   {model} {precision}: eager {eager:.3f} ms, compile {compiled:.3f} ms", flush=True)
            rows.append((model, precision, ms, eager, compiled))
    print(f"\nbatch {a.batch}\n| model | precision | stowage | eager | compile | stowage/eager | stowage/compile |")
    print("|---|---|---|---|---|---|---|")
    for model, precision, ms, eager, compiled in rows:
        print(f"| {model} | {precision} | {ms:.3f} | {eager:.3f} | {compiled:.3f} | {ms / eager:.2f} | {ms / compiled:.2f} |")


if __name__ == "__main__":
    main()
