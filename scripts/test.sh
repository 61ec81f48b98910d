#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The README's second command (and what CI runs): installs what is needed, builds
# leakguard twice (release, and ASan+UBSan for the collector, tools and unit tests),
# and runs the whole test suite in both.
set -euo pipefail
cd "$(dirname "$0")/.."

# Files tests keep for people to look at (the html test's screenshot, docs/html.md).
# CI keeps only this script's output, so its last lines say where they are and how big,
# whether the tests passed or not. Cleared first: a file listed was made by this run.
artifacts=(build/test-artifacts build-asan/test-artifacts)
rm -rf "${artifacts[@]}"
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
trap list_artifacts EXIT

scripts/deps.sh
scripts/format.sh --check   # .clang-format, before anything is built
jobs=$(nproc)
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build -j"$jobs"
# Tests measure growth over wall-clock time: run them one at a time.
ctest --test-dir build --output-on-failure
cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=Debug -DLG_SANITIZE=ON >/dev/null
cmake --build build-asan -j"$jobs"
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  ctest --test-dir build-asan --output-on-failure
