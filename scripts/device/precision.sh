#!/usr/bin/env bash
# Each precision on the device's GPU, in one command (nothing is built there), from the folder that
# scripts/device/stage-precision makes:
#   scripts/device/precision.sh target/device-precision
# 1. the tests that need tensor cores: every product form at tf32, fp16 and bf16 against the CPU in fp32
#    (tests/tests/tensor_cores.rs) and the model suite's tolerances at tf32, fp16 and bf16 (tests/tests/models.rs);
# 2. stowage at each precision against PyTorch eager and torch.compile(mode="reduce-overhead"), side by side
#    (scripts/device/precision.py);
# 3. where ResNet-50's device time goes at tf32 and at fp16.
set -uo pipefail
S=${1:-target/device-precision}
. "$(dirname "$0")/env.sh"
status=0
"$S/tests/tensor_cores" 2>&1 | grep -E "^test |panicked|result" || status=1
STOWAGE_WORKSPACE=$PWD/$S/ws "$S/tests/models" models_match_at_ --nocapture 2>&1 | grep -E "ok  compile|^test |panicked|output" || status=1
python3 scripts/device/precision.py "$S" --precisions ${PRECISIONS:-fp32,tf32,fp16,bf16} --runs 100 --models squeezenet,resnet50,transformer_block,bert 2>&1 | grep -v -i warn || status=1
d=$S/models/light_resnet50
for p in tf32 fp16; do
  echo "--- ResNet-50 at $p, device time per step:"
  STOWAGE_OPENCL_PROFILE=1 "$S/stowage" run "$d/model.onnx" --input "$d/test_data_set_0/input_0.pb" --target opencl --precision $p --repeat 20 2>&1 \
    | grep -A12 "^device time"
done
exit $status
