#!/bin/bash
# TF32 on the pipelined kernel (STOWAGE_OPENCL_MMA_KERNEL=pipe) against the tiled one: correctness, ResNet-50 and
# SqueezeNet at tf32 and fp16 with each kernel, BERT at tf32 against torch.compile. Staged by scripts/device/stage-pipe.
cd "$(dirname "$0")/../.."
tar xzf target/device-g3/stage.tgz && . scripts/device/env.sh
S=target/device-precision
echo "== tensor_cores (pipe for all)"; STOWAGE_OPENCL_MMA_KERNEL=pipe timeout 120 $S/tests/tensor_cores 2>&1 | grep -E "^test |panicked|result" | head
echo "== models (pipe for all)"; STOWAGE_OPENCL_MMA_KERNEL=pipe STOWAGE_WORKSPACE=$PWD/$S/ws timeout 120 $S/tests/models models_match_at_tf32 --nocapture 2>&1 | grep -E "^test |panicked" | head
for m in light_resnet50 light_squeezenet; do d=$S/models/$m; for p in tf32 fp16; do for k in tiles pipe; do
  r=$( ( export STOWAGE_OPENCL_MMA_KERNEL=$k; for i in 1 2 3; do timeout 30 $S/stowage run $d/model.onnx --input $d/test_data_set_0/input_0.pb --target opencl --precision $p --repeat 100 2>&1 | grep -o "median run [0-9.]* ms" | grep -o "[0-9.]* ms"; done ) | tr '\n' ' ')
  echo "$m $p $k: $r"; done; done; done
STOWAGE_OPENCL_MMA_KERNEL=pipe timeout 150 python3 scripts/device/precision.py $S --precisions tf32 --runs 50 --models bert 2>&1 | grep -v -i warn | grep -E "stowage|torch"
rm -rf $OUT/stowage-cache
