#!/bin/sh
# SPDX-License-Identifier: MIT
# record.sh - records the labelled real-program series in tools/classify-data/recorded.
#
# Runs tools/classify/scenarios/shapes.c (lgc-scn-shapes) in each mode under
# `leakguard run`, and extracts the main process's snapshots (time s, live bytes,
# rss bytes) from the run's SQLite database:
#   sqlite3 DB "select t_ns/1e9, live_bytes, rss_bytes from snapshots where proc=1 order by seq"
# Usage: tools/classify/record.sh BUILD_DIR [OUT_DIR]
#   BUILD_DIR holds bin/leakguard and bin/lgc-scn-shapes (root build, or the root build
#   for leakguard and any build with tools/classify.cmake for the scenario program:
#   set LEAKGUARD=path/to/leakguard and SHAPES=path/to/lgc-scn-shapes to mix them).
set -eu
build=${1:?usage: record.sh BUILD_DIR [OUT_DIR]}
out=${2:-$(dirname "$0")/../classify-data/recorded}
lg=${LEAKGUARD:-$build/bin/leakguard}
shapes=${SHAPES:-$build/bin/lgc-scn-shapes}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$out"
labels="$out/labels.csv"
echo "file,label,mode,ticks,tick_ms,seed,interval_s" > "$labels"

# mode label ticks tick_ms seed interval
while read -r mode label ticks ms seed iv; do
  for v in 1 2 3; do
    t=$((ticks * (v + 1) / 2)); s=$((seed + v))
    name="$mode-$v.csv"
    "$lg" run -q -i "$iv" -o "$tmp/run.db" -- "$shapes" "$mode" "$t" "$ms" "$s" >/dev/null
    { echo "time,value,rss"
      sqlite3 -csv "$tmp/run.db" \
        "select t_ns/1e9, live_bytes, rss_bytes from snapshots where proc=1 order by seq"
    } > "$out/$name"
    rm -f "$tmp"/run.db*
    echo "$name,$label,$mode,$t,$ms,$s,$iv" >> "$labels"
    echo "recorded $name ($(($(wc -l < "$out/$name") - 1)) samples)"
  done
done <<'LIST'
stable stable 80 25 10 0.05
linear linear-leak 80 25 20 0.05
late-linear linear-leak 90 25 30 0.05
linear-churn linear-leak 100 25 40 0.05
accel accelerating-leak 80 25 50 0.05
step step-leak 90 25 60 0.05
plateau plateau 90 25 70 0.05
sawtooth sawtooth 90 25 80 0.05
frag fragmentation 80 25 90 0.05
LIST
