#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Byte-identical reports across a change that should change nothing (issue #33): every
# recorded fixture (tests/fixtures/*/ *.db.xz) rendered in every format by two builds'
# leakguard, compared byte for byte.
#
#   scripts/compare-reports.sh OLD_BUILD [NEW_BUILD]     (NEW_BUILD default: build)
#
# OLD_BUILD: a build of the commit before the change (e.g. a clone of it built with
# cmake). Prints each database and format that differs; exit 1 when any does.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
old=${1:?usage: compare-reports.sh OLD_BUILD [NEW_BUILD]}
new=${2:-$ROOT/build}
for b in "$old" "$new"; do
  [ -x "$b/bin/leakguard" ] || { echo "compare-reports.sh: no $b/bin/leakguard" >&2; exit 2; }
done
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
n=0 diffs=0
for xz in "$ROOT"/tests/fixtures/*/*.db.xz; do
  db=$tmp/$(basename "$(dirname "$xz")")-$(basename "$xz" .xz)
  xz -dc "$xz" >"$db"
  n=$((n + 1))
  for fmt in text json folded pprof html pool-profile; do
    "$old/bin/leakguard" report -f "$fmt" -o "$tmp/old" "$db" >/dev/null 2>&1 || true
    "$new/bin/leakguard" report -f "$fmt" -o "$tmp/new" "$db" >/dev/null 2>&1 || true
    if ! cmp -s "$tmp/old" "$tmp/new"; then
      echo "differs: $(basename "$db") $fmt"
      diffs=$((diffs + 1))
    fi
    rm -f "$tmp/old" "$tmp/new"
  done
done
echo "compare-reports.sh: $n databases x 6 formats, $diffs differ"
[ "$diffs" -eq 0 ]
