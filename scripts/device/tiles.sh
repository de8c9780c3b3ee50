#!/usr/bin/env bash
# The tensor-core kernel's tiles side by side on the device's GPU, in one command (nothing is built there), from the
# folder scripts/device/stage-precision makes (with models/light_resnet50b8 from scripts/onnx/batched.py):
#   scripts/device/tiles.sh target/device-precision      (ANCHORS=0 leaves part 3 out)
# 1. every product form at tf32, fp16 and bf16 against the CPU in fp32 (tests/tests/tensor_cores.rs);
# 2. ResNet-50 at batch 8 and 1, stowage alone, with every product at 64 × 64 (STOWAGE_OPENCL_MMA_TILE=64), as
#    `division` chooses, and at 128 × 128 wherever the kernel allows (=128), at tf32, and at fp16 in the same kernel
#    (STOWAGE_OPENCL_MMA_KERNEL=tiles) beside the pipelined one;
# 3. scripts/device/precision.py at batch 8 and 1: stowage as chosen against PyTorch eager and torch.compile.
set -uo pipefail
S=${1:-target/device-precision}
. "$(dirname "$0")/env.sh"
status=0
"$S/tests/tensor_cores" 2>&1 | grep -E "^test |panicked|result" || status=1
median() {
  local d=$1 p=$2 out
  shift 2
  out=$(mktemp -d)
  if env "$@" "$S/stowage" run "$d/model.onnx" --input "$d/test_data_set_0/input_0.pb" --target opencl --repeat 50 \
      --precision "$p" \
      --output-dir "$out" --report "$out/r.json" > "$out/log" 2>&1; then
    python3 -c "import json,sys; print(f\"{json.load(open(sys.argv[1]))['timings_ms']['run_median']:.3f} ms\", end='')" "$out/r.json"
    printf ', output %s\n' "$(python3 scripts/device/pbcmp.py "$out/output_0.pb" "$d/test_data_set_0/output_0.pb")"
  else
    echo "FAILED: $(tail -1 "$out/log")"; status=1
  fi
}
for b in 8 1; do
  d=$S/models/light_resnet50$([ "$b" = 1 ] || echo "b$b")
  for p in tf32 fp16; do
    kernels="default"; [ "$p" = fp16 ] && kernels="default tiles"
    for k in $kernels; do
      for t in 64 chosen 128; do
        printf 'resnet50 batch %s %s kernel %-7s tile %-6s ' "$b" "$p" "$k" "$t"
        median "$d" "$p" STOWAGE_OPENCL_MMA_TILE=$t STOWAGE_OPENCL_MMA_KERNEL=$k
      done
    done
  done
done
[ "${ANCHORS:-1}" = 0 ] && exit $status   # ANCHORS=0: stowage alone, parts 1 and 2
for b in 8 1; do
  python3 scripts/device/precision.py "$S" --precisions fp32,tf32,fp16 --runs 50 --models resnet50 --batch $b 2>&1 \
    | grep -v -i warn || status=1
done
exit $status
