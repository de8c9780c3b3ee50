#!/usr/bin/env python3
"""PyTorch eager CUDA latency at batch 1 for the graphs stowage runs in the device check: SqueezeNet 1.0 and
ResNet-50 (v1, as in the ONNX model zoo), the model suite's transformer block and a BERT-base-shaped encoder
(`scripts/onnx/model_suite.py`'s `transformer`), built here layer for layer with the same shapes (weights random:
latency does not depend on them). Attention is `scaled_dot_product_attention`, which a PyTorch user gets from
`nn.MultiheadAttention` and `nn.TransformerEncoderLayer`: the stronger anchor. Prints one line per model:
`torch <model> <median ms>`."""
import statistics
import sys
import time

import torch
import torch.nn as nn


class Fire(nn.Module):
    def __init__(self, cin, s, e1, e3):
        super().__init__()
        self.s = nn.Conv2d(cin, s, 1)
        self.e1 = nn.Conv2d(s, e1, 1)
        self.e3 = nn.Conv2d(s, e3, 3, padding=1)

    def forward(self, x):
        x = torch.relu(self.s(x))
        return torch.cat([torch.relu(self.e1(x)), torch.relu(self.e3(x))], 1)


def squeezenet():
    pool = lambda: nn.MaxPool2d(3, 2, ceil_mode=True)
    return nn.Sequential(
        nn.Conv2d(3, 96, 7, 2), nn.ReLU(), pool(),
        Fire(96, 16, 64, 64), Fire(128, 16, 64, 64), Fire(128, 32, 128, 128), pool(),
        Fire(256, 32, 128, 128), Fire(256, 48, 192, 192), Fire(384, 48, 192, 192), Fire(384, 64, 256, 256), pool(),
        Fire(512, 64, 256, 256), nn.Conv2d(512, 1000, 1), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Softmax(1),
    )


class Bottleneck(nn.Module):
    def __init__(self, cin, mid, cout, stride):
        super().__init__()
        self.a = nn.Conv2d(cin, mid, 1, stride)
        self.b = nn.Conv2d(mid, mid, 3, 1, 1)
        self.c = nn.Conv2d(mid, cout, 1)
        self.short = nn.Conv2d(cin, cout, 1, stride) if stride != 1 or cin != cout else None

    def forward(self, x):
        y = self.c(torch.relu(self.b(torch.relu(self.a(x)))))
        return torch.relu(y + (self.short(x) if self.short is not None else x))


def resnet50():
    layers = [nn.Conv2d(3, 64, 7, 2, 3), nn.ReLU(), nn.MaxPool2d(3, 2, 1)]
    cin = 64
    for mid, blocks, stride in [(64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2)]:
        for i in range(blocks):
            layers.append(Bottleneck(cin, mid, mid * 4, stride if i == 0 else 1))
            cin = mid * 4
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(2048, 1000), nn.Softmax(1)]
    return nn.Sequential(*layers)


class Block(nn.Module):
    """One pre-LayerNorm encoder block as `model_suite.transformer` writes it: q, k, v and the projection without
    bias, the feed-forward with bias and erf GELU, two residual additions."""

    def __init__(self, d, heads, ff):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(d, eps=1e-5), nn.LayerNorm(d, eps=1e-5)
        self.qkv = nn.Linear(d, 3 * d, bias=False)
        self.o = nn.Linear(d, d, bias=False)
        self.ff1, self.ff2 = nn.Linear(d, ff), nn.Linear(ff, d)

    def forward(self, x):
        b, s, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, s, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        ctx = torch.nn.functional.scaled_dot_product_attention(q, k, v)
        x = x + self.o(ctx.transpose(1, 2).reshape(b, s, d))
        return x + self.ff2(torch.nn.functional.gelu(self.ff1(self.ln2(x))))


def encoder(layers, d, heads, ff):
    return nn.Sequential(*[Block(d, heads, ff) for _ in range(layers)])


def median_ms(model, x, warm, runs):
    """Median ms of `runs` calls of `model` on `x`, after `warm` calls, each waited for."""
    with torch.no_grad():
        for _ in range(warm):
            model(x)
        torch.cuda.synchronize()
        times = []
        for _ in range(runs):
            t0 = time.perf_counter()
            model(x)
            torch.cuda.synchronize()
            times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def bench(name, model, runs):
    # Batch norm is folded into the convolutions in the ONNX graph stowage compiles, so there is none here either.
    x = torch.randn(1, 3, 224, 224, device="cuda")
    print(f"torch {name} {median_ms(model.cuda().eval(), x, 5, runs):.3f}")


MODELS = {
    "squeezenet": squeezenet,
    "resnet50": resnet50,
    "transformer_block": lambda: encoder(1, 64, 4, 256),
    "bert": lambda: encoder(12, 768, 12, 3072),
}
# Each model's input, without the batch axis.
INPUTS = {"transformer_block": (16, 64), "bert": (128, 768)}


def anchor(name, precision, compiled, runs, batch=1):
    """Median ms of PyTorch on model `name` at `precision` (fp32: strict, TF32 off; tf32: TF32 on for cuDNN and
    matmul; fp16 / bf16: model and input in that type), eager or `torch.compile(mode="reduce-overhead")`, with
    `cudnn.benchmark` on, as a PyTorch user measuring for speed would run it."""
    torch.backends.cudnn.benchmark = True
    tf32 = precision == "tf32"
    torch.backends.cuda.matmul.allow_tf32 = tf32
    torch.backends.cudnn.allow_tf32 = tf32
    dtype = {"fp16": torch.float16, "bf16": torch.bfloat16}.get(precision, torch.float32)
    model = MODELS[name]().cuda().eval().to(dtype)
    x = torch.randn(batch, *INPUTS.get(name, (3, 224, 224)), device="cuda", dtype=dtype)
    if compiled:
        torch._dynamo.reset()
        model = torch.compile(model, mode="reduce-overhead")
    return median_ms(model, x, 10 if compiled else 5, runs)


if __name__ == "__main__":
    runs = int(sys.argv[1]) if len(sys.argv) > 1 else 50
    torch.backends.cudnn.benchmark = False
    bench("squeezenet", squeezenet(), runs)
    bench("resnet50", resnet50(), runs)
