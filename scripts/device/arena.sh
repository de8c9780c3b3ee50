#!/usr/bin/env bash
# Latency of the carried models on the GPU with the executor in the plan's arena (STOWAGE_OPENCL_ARENA=1) and with
# a buffer per value (=0), alternating in one command so that both see the same machine minute by minute. Each
# line: the model, then the median of 50 runs for each mode, three rounds.
#   scripts/device/arena.sh target/device [TARGET]
set -uo pipefail
STAGE=${1:-target/device}
TARGET=${2:-opencl}
BIN=$STAGE/stowage
. "$(dirname "$0")/env.sh"
median() { "$BIN" run "$1/model.onnx" --input "$1/test_data_set_0/input_0.pb" --target "$TARGET" --repeat 50 2>&1 |
  tail -1 | grep -o 'median run [0-9.]* ms' | head -1 | sed 's/median run //'; }
for dir in "$STAGE"/models/*/; do
  line="$(basename "$dir"):"
  for round in 1 2 3; do
    a=$(STOWAGE_OPENCL_ARENA=1 median "$dir"); p=$(STOWAGE_OPENCL_ARENA=0 median "$dir")
    line="$line  arena ${a:-?} / pool ${p:-?}"
  done
  echo "$line"
done
