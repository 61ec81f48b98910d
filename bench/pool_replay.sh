#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# liblgpool's trace replay (issue #16; BENCHMARKS.md "Generational pool").
#   bench/pool_replay.sh [BUILD_DIR]     (default: build; LG_POOL_STEPS=30)
# Runs bench/pool_train.py (PyTorch on CPU, Debian's /usr/bin/python3) twice under the
# tracer bench/pool_trace.c, with address randomisation off (setarch -R) so that both
# runs have the same native stacks: the first run is the profile (site -> generation),
# the second the trace replayed against no cache, one PyTorch-like pool, and the
# generational pool. Twice: sites keyed by native stack, then by Python line
# (LGTRACE_KEY=python, the key liblgpool's site profile takes under PyTorch).
set -euo pipefail
cd "$(dirname "$0")/.."
B=${1:-build}
cmake --build "$B" -j2 --target pool_replay pool_trace >/dev/null
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
for key in native python; do
  for run in profile trace; do
    LGTRACE_KEY=$key LGTRACE_OUT="$T/$key-$run.txt" LD_PRELOAD="$PWD/$B/bench/libpool_trace.so" \
      setarch "$(uname -m)" -R /usr/bin/python3 bench/pool_train.py >/dev/null
  done
  echo "== sites keyed by $key"
  "$B/bench/pool_replay" "$T/$key-trace.txt" "$T/$key-profile.txt"
done
