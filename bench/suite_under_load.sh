#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The flake hunt (issue #30): the whole suite, RUNS times, at -jJOBS beside HOGS busy
# processes, as CI runs it (the release phase, then the ASan+UBSan subset). Not a
# test: it reports every test that ever failed, with the run it failed in, and keeps
# each failed test's output for the write-up (a flaky test is a defect to explain,
# not to retry).
#
#   bench/suite_under_load.sh [RUNS] [JOBS] [HOGS]     (default 5 2 2)
#
# Needs both builds (scripts/test.sh makes them: build/, build-asan/). Output under
# build/suite-under-load/: run-N-{release,asan}.log, and summary.txt.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
RUNS=${1:-5}
JOBS=${2:-2}
HOGS=${3:-2}
for d in build build-asan; do
  [ -d "$d" ] || { echo "suite_under_load.sh: $d missing (run scripts/test.sh first)" >&2; exit 2; }
done
out=build/suite-under-load
rm -rf "$out"
mkdir -p "$out"
hogs=()
stop_hogs() { [ ${#hogs[@]} -eq 0 ] || kill "${hogs[@]}" 2>/dev/null || true; }
trap stop_hogs EXIT
for _ in $(seq "$HOGS"); do
  (while :; do :; done) &
  hogs+=($!)
done
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
summary=$out/summary.txt
printf 'suite beside %d CPU hogs at -j%d, %d runs, %s, %d CPUs\n' "$HOGS" "$JOBS" "$RUNS" "$(git describe --always --dirty)" \
  "$(nproc)" | tee "$summary"
fails=0
for r in $(seq "$RUNS"); do
  for phase in release asan; do
    log=$out/run-$r-$phase.log
    t0=$SECONDS
    if [ $phase = release ]; then
      ctest --test-dir build -j"$JOBS" --output-on-failure -LE '^alloc-fail$' >"$log" 2>&1 || true
    else
      ctest --test-dir build-asan -j"$JOBS" --output-on-failure \
        -L '^(unit|fuzz-regress|torture|faults|fixture|asan)$' >"$log" 2>&1 || true
    fi
    failed=$(sed -n 's/^[[:space:]]*[0-9]* - \([^ ]*\) (.*)$/\1/p' "$log" | tr '\n' ' ')
    n=$(grep -c ' Test *#' "$log" || true)
    printf 'run %d %-7s %4d s  %3d tests  failed: %s\n' "$r" "$phase" $((SECONDS - t0)) "$n" "${failed:-none}" |
      tee -a "$summary"
    [ -z "$failed" ] || fails=$((fails + 1))
  done
done
echo "phases with a failure: $fails of $((2 * RUNS))" | tee -a "$summary"
