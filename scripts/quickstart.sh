#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The README's first command: installs the packages leakguard needs (only those: the
# test command installs what the tests need), builds leakguard, installs it into
# /usr/local (cmake --install: the binary, its libraries, the man page, the Python
# module) and runs the installed leakguard on the bundled leaky example so you see a
# real leak report.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh --build
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build -j"$(nproc)" >/dev/null
cmake --install build >/dev/null
prefix=$(sed -n 's/^CMAKE_INSTALL_PREFIX:PATH=//p' build/CMakeCache.txt)
echo "leakguard built in build/ and installed into $prefix: $prefix/bin/leakguard, man leakguard," >&2
echo "import leakguard (uninstall: xargs rm -f < build/install_manifest.txt)." >&2
echo "Running: leakguard run --force -o /tmp/leakguard-example.db -- build/examples/leaky 6" >&2
"$prefix/bin/leakguard" run --force -o /tmp/leakguard-example.db -- build/examples/leaky 6
