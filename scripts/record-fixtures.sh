#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Records the fixtures (tests/fixtures/NAME/: the databases the `fixture_*` tests judge)
# again, from live runs of the release build: each fixture test runs live, one at a time,
# with LG_FIXTURE_RECORD=1, and writes its fixture only when all its checks pass.
#
#   scripts/record-fixtures.sh                 every fixture
#   scripts/record-fixtures.sh lru_leak http   these (names without the fixture_ prefix)
#
# Record on an otherwise idle machine (the _hog fixtures start their own CPU hogs), from
# a build of the commit the fixtures are to come from: fixture.json says which.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${LG_BUILD:-build}
[ -d "$build" ] || cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$build" -j"$(nproc)" >/dev/null
regex='^fixture_'
if [ $# -gt 0 ]; then
  regex="^fixture_($(IFS='|'; echo "$*"))\$"
fi
LG_FIXTURE_RECORD=1 ctest --test-dir "$build" -R "$regex" --output-on-failure
