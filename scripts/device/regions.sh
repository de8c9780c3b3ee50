#!/usr/bin/env bash
# The sub-buffer patterns of backends/opencl/tests/regions.rs on the device tool's GPU, each in a process of its
# own (a driver that crashes on one pattern names it). The test binary is built here and carried:
#   cp "$(cargo test -p stowage-opencl --test regions --no-run --message-format=json | …)" target/device/regions
set -uo pipefail
. "$(dirname "$0")/env.sh"
BIN=${1:-target/device/regions}
for t in $("$BIN" --list 2>/dev/null | sed -n 's/: test$//p'); do
  "$BIN" --exact "$t" -q > /tmp/regions.log 2>&1
  echo "$t: rc=$?"
done
