#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The README's second command (and what CI runs): installs what is needed, builds
# leakguard twice (release, and ASan+UBSan for the collector, tools and unit tests),
# runs the whole test suite on the release build and, on the sanitized one, the tests
# where the sanitizers find bugs. Prints each phase's time and the slowest tests last.
#
# Tests run in parallel (ctest -j$(nproc)): every test must pass beside load anyway (a
# verdict must not depend on a quiet machine); the few that need the machine alone
# say why with RUN_SERIAL. LG_TEST_JOBS overrides the parallelism.
set -euo pipefail
cd "$(dirname "$0")/.."

# Files tests keep for people to look at (the html test's screenshot, docs/html.md).
# CI keeps only this script's output, so its last lines say where they are and how big,
# whether the tests passed or not. Cleared first: a file listed was made by this run.
artifacts=(build/test-artifacts build-asan/test-artifacts)
rm -rf "${artifacts[@]}"
times=build/test-times
rm -rf "$times"
mkdir -p "$times"
phases=()
started=$SECONDS
list_artifacts() {
  local n=0 d f
  for d in "${artifacts[@]}"; do
    [ -d "$d" ] || continue
    for f in "$d"/*; do
      [ -f "$f" ] || continue
      printf 'test artifact: %s (%s bytes)\n' "$PWD/$f" "$(stat -c %s "$f")"
      n=$((n + 1))
    done
  done
  [ "$n" -gt 0 ] || echo "test artifacts: none (no test that keeps one ran to its end)"
}
summary() {
  local rc=$?
  list_artifacts
  echo "== time by phase"
  printf '   %s\n' "${phases[@]}"
  printf '   %-34s %5d s\n' "total" $((SECONDS - started))
  python3 scripts/test-times.py "$times"/*.xml || true
  exit "$rc"
}
trap summary EXIT
# phase NAME COMMAND...: runs it, keeps its duration for the summary
phase() {
  local name=$1 t0=$SECONDS
  shift
  echo "== $name"
  local rc=0
  "$@" || rc=$?
  phases+=("$(printf '%-34s %5d s%s' "$name" $((SECONDS - t0)) "$([ $rc = 0 ] || echo "  FAILED (exit $rc)")")")
  return $rc
}

jobs=${LG_TEST_JOBS:-$(nproc)}
configure() { cmake -S . -B "$1" "${@:2}" >/dev/null && cmake --build "$1" -j"$jobs"; }

phase "packages (scripts/deps.sh)" scripts/deps.sh
phase "format check" scripts/format.sh --check # .clang-format, before anything is built
phase "build: release" configure build -DCMAKE_BUILD_TYPE=RelWithDebInfo
# The alloc-fail passes run in the sanitized phase only: there they also find leaks
# and overflows, here they would only repeat.
phase "tests: release (all but alloc-fail)" \
  ctest --test-dir build -j"$jobs" --output-on-failure -LE '^alloc-fail$' --output-junit "$PWD/$times/release.xml"
phase "build: ASan+UBSan" configure build-asan -DCMAKE_BUILD_TYPE=Debug -DLG_SANITIZE=ON
# Sanitizers where they find bugs: every unit test (alloc-fail included), the fuzz
# regressions, the torture and fault suites, the analysis and every report format on
# the recorded fixtures, and a chosen handful of live runs (label `asan`).
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
phase "tests: ASan+UBSan (sanitized subset)" \
  ctest --test-dir build-asan -j"$jobs" --output-on-failure -L '^(unit|fuzz-regress|torture|faults|fixture|asan)$' \
  --output-junit "$PWD/$times/asan.xml"
