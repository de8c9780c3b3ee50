#!/usr/bin/env python3
"""cuBLAS's time for the products that backends/opencl/examples/gemm_speed.rs times (issue 20's anchor for the
product kernels alone): `torch.matmul` of an m × k by a k × n matrix, in fp32 (TF32 off), TF32 and fp16, timed with
CUDA events around graphs of 20 products (median of the runs after warm-up), in microseconds and TFLOP/s.

    python3 scripts/device/matmul_anchor.py 128,3072,768 128,768,3072 [--runs 100]"""
import argparse

import torch


def timed(a, b, runs):
    """Median microseconds of one product, from CUDA graphs of 20 products each (events around a single launch
    would also time the host's launch of it, which takes longer than the small products themselves)."""
    per = 20
    for _ in range(10):
        torch.matmul(a, b)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(per):
            torch.matmul(a, b)
    graph.replay()
    torch.cuda.synchronize()
    times = []
    for _ in range(runs):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        # A replay queued ahead keeps the GPU busy while the timed one is submitted, so the start event fires as
        # the first timed product begins, not while the host launches it.
        graph.replay()
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1000.0 / per)
    times.sort()
    return times[len(times) // 2]


def main():
    p = argparse.ArgumentParser()
    p.add_argument("shapes", nargs="+")
    p.add_argument("--runs", type=int, default=100)
    args = p.parse_args()
    print(f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}")
    for shape in args.shapes:
        m, n, k = (int(d) for d in shape.split(","))
        for mode, dtype, tf32 in [("fp32", torch.float32, False), ("tf32", torch.float32, True), ("fp16", torch.float16, True)]:
            torch.backends.cuda.matmul.allow_tf32 = tf32
            a = torch.randn(m, k, device="cuda", dtype=dtype)
            b = torch.randn(k, n, device="cuda", dtype=dtype)
            us = timed(a, b, args.runs)
            print(f"{m:>5} x {n:>5} x {k:>5} {mode:<5} {us:>9.1f} us  {2 * m * n * k / us / 1e6:>6.1f} TFLOP/s  [cuBLAS]")


if __name__ == "__main__":
    main()
