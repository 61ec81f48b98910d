#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The README's second command (and what CI runs): installs what is needed, builds
# leakguard twice (release, and ASan+UBSan for the collector, tools and unit tests),
# and runs the whole test suite in both.
set -euo pipefail
cd "$(dirname "$0")/.."
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
