#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The README's first command: installs what is needed, builds leakguard, and runs
# it on the bundled leaky example so you see a real leak report.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build -j"$(nproc)" >/dev/null
echo "leakguard built in build/ (binary: build/bin/leakguard)." >&2
echo "Running: build/bin/leakguard run --force -o /tmp/leakguard-example.db -- build/examples/leaky 6" >&2
build/bin/leakguard run --force -o /tmp/leakguard-example.db -- build/examples/leaky 6
