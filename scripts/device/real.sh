#!/usr/bin/env bash
# The real-model suite's CI models (scripts/onnx/real_models.py; staged by scripts/device/stage) on the device
# tool's GPU, placed op by op on `opencl,cpu`: every output checked against onnxruntime's, and the latency with
# where it ran. Run from the repository root:
#   scripts/device/real.sh target/device [TARGET]     (TARGET: opencl,cpu)
set -uo pipefail
STAGE=${1:-target/device}
TARGET=${2:-opencl,cpu}
BIN=$STAGE/stowage
. "$(dirname "$0")/env.sh"
status=0
for dir in "$STAGE"/real/*/; do
  name=$(basename "$dir")
  out=$(mktemp -d)
  args=()
  for f in $(ls "$dir/test_data_set_0"/input_*.pb | sort -V); do args+=(--input "$f"); done
  if "$BIN" run "$dir/model.onnx" "${args[@]}" --target "$TARGET" --output-dir "$out" --repeat 20 > "$out/log" 2>&1; then
    line="$(tail -1 "$out/log" | sed 's/, peak.*//')"
    for ref in "$dir"/test_data_set_0/output_*.pb; do
      k=$(basename "$ref")
      printf '%-20s %-12s %s  %s\n' "$name" "$k" "$(python3 scripts/device/pbcmp.py "$out/$k" "$ref")" "$line" || status=1
    done
  else
    printf '%-20s FAILED: %s\n' "$name" "$(tail -1 "$out/log")"; status=1
  fi
done
exit $status
