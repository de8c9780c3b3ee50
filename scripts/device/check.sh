#!/usr/bin/env bash
# The OpenCL backend on the device tool's GPU, in one command (nothing is built there): registers NVIDIA's OpenCL
# (DESIGN.md "Targets"), lists the targets, runs the carried models on `opencl` and checks every output against its
# reference, shows the ledger of one run, then times stowage against PyTorch eager CUDA at batch 1. The precision
# checks have their own stage and command: scripts/device/stage-precision, scripts/device/precision.sh.
# Run from the repository root with the staging folder made by scripts/device/stage:
#   scripts/device/check.sh target/device [TARGET]     (TARGET: opencl, the GPU where there is one)
set -uo pipefail
STAGE=${1:-target/device}
TARGET=${2:-opencl}
BIN=$STAGE/stowage
. "$(dirname "$0")/env.sh"
command -v clinfo >/dev/null && clinfo -l
"$BIN" targets
status=0
# Correctness and the plan's memory: the executor runs in the plan's arena, so each measured peak is the planned one.
for dir in "$STAGE"/models/*/; do
  name=$(basename "$dir")
  out=$(mktemp -d)
  if "$BIN" run "$dir/model.onnx" --input "$dir/test_data_set_0/input_0.pb" --target "$TARGET" --output-dir "$out" \
      --report "$out/report.json" > "$out/log" 2>&1; then
    printf '%-22s %s\n' "$name" "$(python3 scripts/device/pbcmp.py "$out/output_0.pb" "$dir/test_data_set_0/output_0.pb")" || status=1
    # The executor runs in the plan's arena: the measured peak of each space is the planned one.
    python3 -c "import json,sys; r=json.load(open(sys.argv[1])); p, m = r['peak_bytes'], r['measured_peak_bytes']; print('  peak', ', '.join(f'{s}: planned {p[s]}, measured {m.get(s)}' for s in p)); sys.exit(any(m.get(s) != p[s] for s in p))" "$out/report.json" || status=1
  else
    printf '%-22s FAILED: %s\n' "$name" "$(tail -1 "$out/log")"; status=1
  fi
done
echo "--- one run of squeezenet on $TARGET, its ledger (the output written as a file is the one read):"
"$BIN" run "$STAGE/models/random_squeezenet/model.onnx" --input "$STAGE/models/random_squeezenet/test_data_set_0/input_0.pb" --target "$TARGET" --output-dir "$(mktemp -d)"
echo "--- the planner on this device: where each node of the examples goes, and the copies planned and made"
ex=$STAGE/examples
"$BIN" plan "$ex/mixed.onnx" --target "$TARGET,cpu"
for run in "mixed $TARGET,cpu" "camera $TARGET" "camera cpu"; do
  set -- $run
  rep=$(mktemp)
  "$BIN" run "$ex/$1.onnx" --input "$ex/$1_input.pb" --target "$2" --input-layout "$( [ "$1" = camera ] && echo frame=nhwc,row-pitch=2048 || echo x=row-major)" --repeat 5 --report "$rep" | tail -1 | sed "s/^/$1 on $2: /"
  python3 -c "import json,sys; r=json.load(open(sys.argv[1])); print('  planned per run:', [(c['kind'], c['value'], c['bytes']) for c in r['planned_copies']]); print('  performed over 5 runs:', len(r['performed_copies']), 'copies,', r['bytes_moved'], 'bytes'); print('  placement:', sorted({(p['op'], p['target']) for p in r['placement']}))" "$rep"
done
echo "--- the camera frame already on the device (--input-device): placed once, then no copy per run"
rep=$(mktemp)
"$BIN" run "$ex/camera.onnx" --input "$ex/camera_input.pb" --target "$TARGET" --input-device frame=opencl:0 --repeat 20 --report "$rep" | tail -1
python3 -c "import json,sys; r=json.load(open(sys.argv[1])); print('  placed before the runs:', [(c['kind'], c['value'], c['bytes']) for c in r['placed_inputs']]); print('  performed over 20 runs:', len(r['performed_copies']), 'copies'); sys.exit(len(r['performed_copies']) > 1)" "$rep" || status=1
echo "--- executables built on PoCL for opencl: the plan each picks on this device, and the output"
built_check() {
  local exe=$1 input=$2 ref=$3 out
  out=$(mktemp -d)
  if "$exe" --input "$input" --output-dir "$out" --report "$out/report.json" --repeat 3 > "$out/log" 2>&1; then
    python3 -c "import json,sys; r=json.load(open(sys.argv[1])); print('  built path taken:', r['built_path']); print('  performed over 3 runs:', [(c['kind'], c['value'], c['bytes']) for c in r['performed_copies']])" "$out/report.json"
    if [ -n "$ref" ]; then printf '  output: %s\n' "$(python3 scripts/device/pbcmp.py "$out/output_0.pb" "$ref")"; fi
  else
    echo "  FAILED: $(tail -1 "$out/log")"; return 1
  fi
}
echo "squeezenet:"; built_check "$STAGE/built/squeezenet" "$STAGE/models/random_squeezenet/test_data_set_0/input_0.pb" "$STAGE/models/random_squeezenet/test_data_set_0/output_0.pb" || status=1
echo "camera:"; built_check "$STAGE/built/camera" "$ex/camera_input.pb" "" || status=1
echo "--- batch-1 latency, stowage (median of 50 runs) against PyTorch eager CUDA (median of 50):"
for m in squeezenet resnet50; do
  d=$STAGE/models/light_$m
  "$BIN" run "$d/model.onnx" --input "$d/test_data_set_0/input_0.pb" --target "$TARGET" --repeat 50 | tail -1 | sed "s/^/stowage $m: /"
done
python3 scripts/device/torch_bench.py 50 || echo "torch bench failed"
echo "--- where ResNet-50's device time goes (STOWAGE_OPENCL_PROFILE=1, mean of 20 runs, the slowest steps first):"
d=$STAGE/models/light_resnet50
STOWAGE_OPENCL_PROFILE=1 "$BIN" run "$d/model.onnx" --input "$d/test_data_set_0/input_0.pb" --target "$TARGET" --repeat 20 2>&1 \
  | grep -A15 "^device time"
exit $status
