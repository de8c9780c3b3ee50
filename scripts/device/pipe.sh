#!/bin/bash
# The pipelined tensor-core kernel (STOWAGE_OPENCL_MMA_KERNEL=pipe, codegen/pipe.rs) against the default one, in
# one command on the device machine, from what scripts/device/stage-pipe stages: the product kernels alone
# (gemm_speed, TF32, f16, bf16), every product form and the model suite at each precision against the CPU
# (tests/tests/tensor_cores.rs, tests/tests/models.rs), and whole models with each kernel.
#   bash scripts/device/pipe.sh   (run with the device tool, carry target/device-g3)
cd "$(dirname "$0")/../.."
tar xzf target/device-g3/stage.tgz && . scripts/device/env.sh

D=target/device-g3; S=target/device-precision
nvidia-smi --query-gpu=name --format=csv,noheader
SH="100,200,72 128,3072,768 128,768,768 64,3136,576 1024,1024,1024 4096,4096,4096"
echo "== pipe"; STOWAGE_OPENCL_MMA_KERNEL=pipe MODES=tf32,fp16,bf16 RUNS=30 PTX_DIR=$OUT timeout 90 $D/gemm_speed $SH 2>&1 | cut -c1-400 | head -40
echo "== main"; MODES=tf32,fp16 RUNS=30 timeout 60 $D/gemm_speed $SH 2>&1 | tail -13
echo "== pipe stages 2/3"; for st in 2 3; do STOWAGE_OPENCL_MMA_STAGES=$st STOWAGE_OPENCL_MMA_KERNEL=pipe MODES=tf32,fp16 RUNS=30 timeout 40 $D/gemm_speed 128,3072,768 64,3136,576 4096,4096,4096 2>&1 | tail -6; done
echo "== tensor_cores (pipe)"; STOWAGE_OPENCL_MMA_KERNEL=pipe timeout 150 $S/tests/tensor_cores 2>&1 | grep -E "^test |panicked|result|left|right|max" | head -30
echo "== models (pipe)"; STOWAGE_OPENCL_MMA_KERNEL=pipe STOWAGE_WORKSPACE=$PWD/$S/ws timeout 150 $S/tests/models models_match_at_ --nocapture 2>&1 | grep -E "ok  compile|^test |panicked|output" | head -30
echo "== whole models"
for m in light_resnet50 light_squeezenet; do d=$S/models/$m; for p in tf32 fp16; do for k in main pipe; do
  r=$( ( [ $k = pipe ] && export STOWAGE_OPENCL_MMA_KERNEL=pipe; timeout 40 $S/stowage run $d/model.onnx --input $d/test_data_set_0/input_0.pb --target opencl --precision $p --repeat 50 2>&1 ) | grep -iE "median|error" | head -2 | tr '\n' ' ')
  echo "$m $p $k: $r"; done; done; done
(cd $OUT && (command -v /usr/local/cuda/bin/ptxas >/dev/null && for f in *tf32.ptx *fp16.ptx; do /usr/local/cuda/bin/ptxas -arch=sm_90 -v $f -o /dev/null 2>&1 | grep -E "registers|spill" | head -2 | sed "s/^/$f: /"; done | head -20) ; tar czf ptx.tgz *.ptx *.cl 2>/dev/null; rm -rf *.ptx *.cl)
echo "== anchors with the pipelined kernel"
STOWAGE_OPENCL_MMA_KERNEL=pipe timeout ${ANCHOR_S:-200} python3 scripts/device/precision.py $S --precisions tf32,fp16 --runs 50 --models resnet50,bert 2>&1 | grep -v -i warn | tail -20
rm -rf $OUT/stowage-cache
