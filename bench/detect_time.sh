#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Time to detection by leak rate (issue #10): the late_leak scenario starts leaking at
# START seconds; for each rate, how long after that the live analysis flagged the leak
# (the report's detected_after_s minus START), on a quiet machine and beside two busy
# processes (--hog). Usage: bench/detect_time.sh BUILD [--hog] [REPS]
set -euo pipefail
build=${1:-build}
hog=0
[ "${2:-}" = "--hog" ] && hog=1
reps=${3:-3}
lg=$build/bin/leakguard
scen=$build/tests/scenarios/late_leak
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"; [ -n "${hogs:-}" ] && kill $hogs 2>/dev/null || true' EXIT
hogs=""
if [ $hog = 1 ]; then
  for _ in 1 2; do python3 -c 'while True: pass' & hogs="$hogs $!"; done
fi
start=8
echo "rate      size   detected after start (s), $reps runs   (hog=$hog)"
# rate = requests/s x block size: 16 KiB/s .. 16 MiB/s
for spec in "50 320" "100 1024" "200 4096" "200 16384" "250 65536"; do
  set -- $spec
  rps=$1 size=$2
  out=""
  for r in $(seq "$reps"); do
    "$lg" run -q -o "$tmp/d.db" -- "$scen" --seconds $((start + 8)) --start $start --rate $rps --size $size >/dev/null
    d=$("$lg" report "$tmp/d.db" --format json | python3 -c '
import json,sys
d=json.load(sys.stdin); l=d["leaks"]
print("%.2f" % (l[0]["detected_after_s"] - '"$start"') if l and l[0]["detected_after_s"] is not None else "none")')
    out="$out $d"
  done
  printf "%8s/s %6s %s\n" "$(numfmt --to=iec $((rps * size)))" "$size" "$out"
done
