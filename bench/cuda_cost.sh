#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
#
# cuda_cost.sh - cost of a recorded cuMemAlloc/cuMemFree pair (issue #9). Not a test.
#
#   bench/cuda_cost.sh [BUILD_DIR]        (default: <repo>/build)
#
# Runs bench/cuda_cost (100 000 pairs per pass, best of 3 passes per run) REPS times
# each, interleaved: bare (the stand-in driver alone), preload only (libleakguard.so
# without a collector: every call passed through) and recorded (`leakguard run`, every
# allocation recorded with its stack, a verified stack-cache hit). Prints the medians
# and the difference to bare in markdown. On a GPU machine set DRIVER_DIR to the
# directory of the real libcuda.so.1 (scripts/gpu-check.sh does).
# Environment: REPS (7), PAIRS (100000), DRIVER_DIR.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD=${1:-$ROOT/build}
REPS=${REPS:-7}
PAIRS=${PAIRS:-100000}
DRIVER_DIR=${DRIVER_DIR:-$BUILD/tests/cuda/driver}
EXE=$BUILD/bench/cuda_cost
LG=$BUILD/bin/leakguard
LIB=$BUILD/lib/libleakguard.so
for f in "$EXE" "$LG" "$LIB"; do
  [[ -e $f ]] || { echo "cuda_cost.sh: $f missing (build first: cmake --build $BUILD)" >&2; exit 2; }
done
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

field() { sed -n "s/.* $1=\([0-9.]*\).*/\1/p"; }
median() { sort -g | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }

for ((r = 1; r <= REPS; r++)); do
  LD_LIBRARY_PATH=$DRIVER_DIR "$EXE" "$PAIRS" >>"$tmp/bare"
  LD_LIBRARY_PATH=$DRIVER_DIR LD_PRELOAD=$LIB "$EXE" "$PAIRS" >>"$tmp/preload"
  LD_LIBRARY_PATH=$DRIVER_DIR "$LG" run -q --force -o "$tmp/run.db" -- "$EXE" "$PAIRS" >>"$tmp/recorded"
done

echo "| mode | cuMemAlloc_v2+cuMemFree_v2 ns/pair | vs bare | cuMemAllocAsync+cuMemFreeAsync ns/pair | vs bare |"
echo "|---|---|---|---|---|"
bs=$(field sync_ns <"$tmp/bare" | median)
ba=$(field async_ns <"$tmp/bare" | median)
for m in bare preload recorded; do
  s=$(field sync_ns <"$tmp/$m" | median)
  a=$(field async_ns <"$tmp/$m" | median)
  awk -v m="$m" -v s="$s" -v a="$a" -v bs="$bs" -v ba="$ba" \
    'BEGIN { printf "| %s | %.0f | %+.0f ns | %.0f | %+.0f ns |\n", m, s, s - bs, a, a - ba }'
done
echo
echo "median of $REPS runs each (interleaved), $PAIRS pairs per pass, best of 3 passes; load $(cut -d' ' -f1-3 /proc/loadavg)"
