"""Trained models of the real-model suite quantized by onnxruntime's own quantizer, through onnxruntime and `stowage run`.

Each model is quantized three ways (dynamic: ConvInteger, MatMulInteger, DynamicQuantizeLinear; static QDQ:
QuantizeLinear/DequantizeLinear pairs; static QOperator: QLinearConv, QLinearMatMul and onnxruntime's com.microsoft
QLinear ops), calibrated on the suite's own input, then run by both; it prints, per model and form, the ops that
matter and the worst difference relative to onnxruntime's largest output, or why stowage refused it.

    PY=$(scripts/onnx/env -q)
    cargo build --release
    "$PY" scripts/onnx/real_models.py >/dev/null
    "$PY" scripts/onnx/quantized_vs_ort.py orientation ppocr_cls magika
"""
import subprocess
import sys
import tempfile
from pathlib import Path
import numpy as np
import onnx
import onnxruntime as ort
from onnx import numpy_helper
from onnxruntime.quantization import quantize_dynamic, quantize_static, QuantFormat, QuantType, CalibrationDataReader

REPO = Path(__file__).resolve().parents[2]
ROOT = REPO / "target" / "real-models"
STOWAGE = str(REPO / "target" / "release" / "stowage")

def inputs_of(d):
    ins = {}
    m = onnx.load(d / "model.onnx", load_external_data=False)
    names = [i.name for i in m.graph.input if i.name not in {t.name for t in m.graph.initializer}]
    for k, n in enumerate(names):
        t = onnx.TensorProto(); t.ParseFromString((d / "test_data_set_0" / f"input_{k}.pb").read_bytes())
        ins[n] = numpy_helper.to_array(t)
    return ins

class Reader(CalibrationDataReader):
    def __init__(self, feeds): self.feeds = iter([feeds])
    def get_next(self): return next(self.feeds, None)

def run(model, feeds, tmp):
    sess = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"])
    want = sess.run(None, feeds)
    args = [STOWAGE, "run", str(model), "--output-dir", str(tmp / "out")]
    for k, (n, v) in enumerate(feeds.items()):
        p = tmp / f"in{k}.pb"; p.write_bytes(numpy_helper.from_array(v, n).SerializeToString())
        args += ["--input", f"{n}={p}", "--input-shape", f"{n}={','.join(map(str, v.shape))}"]
    r = subprocess.run(args, capture_output=True, text=True)
    if r.returncode != 0:
        return f"stowage failed: {r.stderr.strip()[:300]}"
    outs = sorted((tmp / "out").glob("*.pb"), key=lambda p: int(p.stem.split("_")[-1]))
    worst = 0.0
    for k, w in enumerate(want):
        if k >= len(outs):
            return f"stowage wrote {len(outs)} outputs, onnxruntime made {len(want)}"
        t = onnx.TensorProto()
        t.ParseFromString(outs[k].read_bytes())
        g = numpy_helper.to_array(t)
        if g.shape != w.shape: return f"output {k}: shape {g.shape} vs {w.shape}"
        d = np.abs(g.astype(np.float64) - w.astype(np.float64))
        scale = max(1e-6, float(np.abs(w).max()))
        worst = max(worst, float(d.max()) / scale)
    return f"ok, worst |diff| / max|ort| = {worst:.2e}"

for name in sys.argv[1:]:
    d = ROOT / name
    feeds = inputs_of(d)
    with tempfile.TemporaryDirectory() as t:
        tmp = Path(t)
        for kind in ["dynamic", "qdq", "qoperator"]:
            q = tmp / f"{kind}.onnx"
            try:
                if kind == "dynamic":
                    quantize_dynamic(str(d / "model.onnx"), str(q), weight_type=QuantType.QUInt8)
                else:
                    fmt = QuantFormat.QDQ if kind == "qdq" else QuantFormat.QOperator
                    quantize_static(str(d / "model.onnx"), str(q), Reader(feeds), quant_format=fmt)
            except Exception as e:
                print(f"{name} {kind}: onnxruntime's quantizer failed: {str(e)[:120]}"); continue
            ops = sorted({n.op_type for n in onnx.load(q).graph.node if 'quantize' in n.op_type.lower() or 'Integer' in n.op_type or n.op_type.startswith('QLinear')})
            print(f"{name} {kind} ({', '.join(ops)}): {run(q, feeds, tmp)}", flush=True)
