#!/bin/sh
# SPDX-License-Identifier: MIT
# record.sh - records the labelled real-program series in tools/classify-data/recorded
# (docs/classifier.md, "Recorded series"). Every series comes from a real program run
# under `leakguard run`; its label is what the program does (its ground truth), never
# what the classifier says.
#
# Part 1, shapes: tools/classify/scenarios/shapes.c (lgc-scn-shapes) in each of its 9
# modes, 6 runs per mode (different lengths, tick lengths, recorder intervals, seeds).
# Part 2, scenarios: the project's scenario programs (tests/scenarios, ground truth in
# tests/scenarios/README.md), 3 runs each (different --seed, --seconds, -i), giving
#   - the process curve: select t_ns/1e9, live_bytes, rss_bytes from snapshots
#     where proc=1 order by seq
#   - per-site curves (time, live bytes; no rss), carried forward over snapshots.seq
#     from the delta-encoded table samples (docs/schema.md): for leak programs the
#     planted site (the stack through the `/* LEAK-SITE */` line with the largest
#     peak), for controls the two largest sites (by peak) that changed in at least 8
#     snapshots.
# Teardown: lru_leak, cxx_sessions, lru_bounded and startup_tables free their data
# when main returns, so their last snapshot drops. That sample is KEPT (the detector
# and the report see it too) and the series is labelled by what the program does
# while it runs; the generator models such a final drop for every class.
# churn_leak's process curve is not recorded: its leak (~1 request in 70) is buried
# in a drifting working set many times larger, so the shape of the process curve is
# not known from the program; its leak site is recorded.
#
# Column `set` of labels.csv: `dev` series (shapes runs 1-3, scenario run 1) were
# inspected while the generator was being improved; `holdout` series (shapes runs
# 4-6, scenario runs 2-3) were first only evaluated, but their misses were then looked
# at (and two generator changes tried on them), so they are "seen" too; `test` series
# (shapes runs 7-8, scenario runs 4-5) were recorded after the previous round's
# generator, features and training settings were frozen and evaluated once with that
# model; the next round was built knowing that score and its misses, so `test` counts
# as seen now. `test2` series (shapes runs 9-10, scenario runs 6-7, new seeds; run 10
# and scenario run 7 sample at the default-like 1 s, long enough runs for >= 16
# snapshots) were recorded after the second round's model was frozen (commit 1d94058)
# and evaluated once: the blind set of that round (87.88 %, bench/CLASSIFIER_RESULTS.md);
# its misses were analysed for round 3, so `test2` counts as seen now. `test3` series
# (shapes runs 11-12, scenario runs 8-9, new seeds; run 12 and scenario run 9 at the
# default-like 1 s) were recorded after the third round's model was frozen and
# evaluated once. Their lengths and intervals were drawn at random (Python
# random.Random(20261129): shapes x2 ticks of 25 ms at 0.1 s; x8 ticks of 23 ms at
# 1 s; scenarios 5 s at 0.15 s; 17 s at 1 s), not chosen; their misses were analysed for
# round 4, so `test3` counts as seen now. `test4` series (shapes runs 13-14, scenario
# runs 10-11, new seeds) were recorded before round 4 changed anything, kept outside
# the repository and not looked at until its model was frozen (d2b8e79); then
# evaluated once (96.88 %, bench/CLASSIFIER_RESULTS.md). Lengths and intervals
# drawn with Python random.Random(20261130): shapes x2 ticks of 16 ms at 0.1 s; x9
# ticks of 24 ms at 1 s; scenarios 4 s at 0.2 s; 17 s at 1 s. `test5` series (shapes
# runs 15-16, scenario runs 12-13, new seeds) were recorded before a fifth round was
# tried and kept unread; that round scored lower on the validation split and the seen
# sets and was dropped without looking at test5, which was then evaluated once with
# the committed round-4 model (98.44 %). Lengths and intervals drawn with Python
# random.Random(20261131): shapes x3 ticks of 30 ms at 0.05 s; x10 ticks of 22 ms at
# 1 s; scenarios 5 s at 0.2 s; 17 s at 1 s.
#
# Usage: tools/classify/record.sh BUILD_DIR [OUT_DIR] [all|shapes|scenarios|test|test2|test3|test4|test5]
#   all = shapes + scenarios + test + test2 + test3 + test4 + test5; shapes = shapes runs 1-6;
#   scenarios = scenario runs 1-3; test = shapes runs 7-8 and scenario runs 4-5; test2 =
#   shapes runs 9-10 and scenario runs 6-7; test3 = shapes runs 11-12 and scenario runs
#   8-9; test4 = shapes runs 13-14 and scenario runs 10-11; test5 = shapes runs 15-16
#   and scenario runs 12-13.
#   A part replaces its rows.
#   BUILD_DIR holds bin/leakguard, bin/lgc-scn-shapes and tests/scenarios/* (the root
#   build). Override with LEAKGUARD=, SHAPES=, SCENARIOS=DIR. Needs sqlite3.
#   Recording everything takes about 44 minutes (test2 alone 8, test3 7, test4 8, test5 8). Runs are not
#   bit-reproducible (they are timed real programs), but every parameter and seed is
#   fixed here.
set -eu
build=${1:?usage: record.sh BUILD_DIR [OUT_DIR] [all|shapes|scenarios|test|test2|test3|test4|test5]}
out=${2:-$(dirname "$0")/../classify-data/recorded}
part=${3:-all}
src=$(cd "$(dirname "$0")/../.." && pwd)
lg=${LEAKGUARD:-$build/bin/leakguard}
shapes=${SHAPES:-$build/bin/lgc-scn-shapes}
scn=${SCENARIOS:-$build/tests/scenarios}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$out"
labels="$out/labels.csv"
if [ "$part" = all ] || [ ! -f "$labels" ]; then
  echo "file,label,kind,program,args,interval_s,set" > "$labels"
else # re-recording one part: keep the other parts' rows
  case $part in
    shapes) grep -v -e ',shapes,.*,dev$' -e ',shapes,.*,holdout$' "$labels" > "$tmp/l" || true ;;
    scenarios) grep -v -e ',process,.*,dev$' -e ',process,.*,holdout$' \
                 -e ',site,.*,dev$' -e ',site,.*,holdout$' "$labels" > "$tmp/l" || true ;;
    test) grep -v ',test$' "$labels" > "$tmp/l" || true ;;
    test2) grep -v ',test2$' "$labels" > "$tmp/l" || true ;;
    test3) grep -v ',test3$' "$labels" > "$tmp/l" || true ;;
    test4) grep -v ',test4$' "$labels" > "$tmp/l" || true ;;
    test5) grep -v ',test5$' "$labels" > "$tmp/l" || true ;;
    *) echo "record.sh: unknown part '$part'" >&2; exit 2 ;;
  esac
  cp "$tmp/l" "$labels"
fi
case $part in
  all) shape_runs="1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16"; scn_runs="1 2 3 4 5 6 7 8 9 10 11 12 13" ;;
  shapes) shape_runs="1 2 3 4 5 6"; scn_runs="" ;;
  scenarios) shape_runs=""; scn_runs="1 2 3" ;;
  test) shape_runs="7 8"; scn_runs="4 5" ;;
  test2) shape_runs="9 10"; scn_runs="6 7" ;;
  test3) shape_runs="11 12"; scn_runs="8 9" ;;
  test4) shape_runs="13 14"; scn_runs="10 11" ;;
  test5) shape_runs="15 16"; scn_runs="12 13" ;;
esac

q() { sqlite3 -csv "$tmp/run.db" "$1"; }

# process curve of proc 1 -> $1
proc_csv() {
  { echo "time,value,rss"
    q "select t_ns/1e9, live_bytes, rss_bytes from snapshots where proc=1 order by seq"
  } > "$1"
}

# live bytes of site $1 at every snapshot of proc 1 (0 before its first row) -> $2
site_csv() {
  { echo "time,value"
    q "select s.t_ns/1e9, coalesce((select x.live_bytes from samples x where x.proc=1
         and x.stack=$1 and x.seq<=s.seq order by x.seq desc limit 1), 0)
       from snapshots s where s.proc=1 order by s.seq"
  } > "$2"
}

add() { # file label kind program args interval set
  echo "$1,$2,$3,$4,$5,$6,$7" >> "$labels"
  echo "recorded $1 ($2, $(($(wc -l < "$out/$1") - 1)) samples)"
}

if [ -n "$shape_runs" ]; then
  # mode label base_ticks seed; run v: ticks, tick ms, interval below
  while read -r mode label ticks seed; do
    for v in $shape_runs; do
      case $v in
        1|2|3) t=$((ticks * (v + 1) / 2)); ms=25; iv=0.05; set=dev ;;
        4) t=$ticks; ms=40; iv=0.1; set=holdout ;;
        5) t=$((ticks * 2)); ms=12; iv=0.05; set=holdout ;;
        6) t=$((ticks * 4)); ms=25; iv=0.1; set=holdout ;;
        7) t=$((ticks * 3)); ms=20; iv=0.05; set=test ;;
        8) t=$((ticks * 2)); ms=30; iv=0.1; set=test ;;
        9) t=$((ticks * 5 / 2)); ms=15; iv=0.1; set=test2 ;;
        10) t=$((ticks * 8)); ms=25; iv=1; set=test2 ;; # 16-20 s: default-like 1 s
        11) t=$((ticks * 2)); ms=25; iv=0.1; set=test3 ;;
        12) t=$((ticks * 8)); ms=23; iv=1; set=test3 ;; # 15-18 s: default-like 1 s
        13) t=$((ticks * 2)); ms=16; iv=0.1; set=test4 ;;
        14) t=$((ticks * 9)); ms=24; iv=1; set=test4 ;; # 17-22 s: default-like 1 s
        15) t=$((ticks * 3)); ms=30; iv=0.05; set=test5 ;;
        16) t=$((ticks * 10)); ms=22; iv=1; set=test5 ;; # 18-22 s: default-like 1 s
      esac
      s=$((seed + v)); name="$mode-$v.csv"
      "$lg" run -q -i "$iv" -o "$tmp/run.db" -- "$shapes" "$mode" "$t" "$ms" "$s" >/dev/null
      proc_csv "$out/$name"
      rm -f "$tmp"/run.db*
      add "$name" "$label" shapes lgc-scn-shapes "$mode $t $ms $s" "$iv" "$set"
    done
  done <<'LIST'
stable stable 80 10
linear linear-leak 80 20
late-linear linear-leak 90 30
linear-churn linear-leak 100 40
accel accelerating-leak 80 50
step step-leak 90 60
plateau plateau 90 70
sawtooth sawtooth 90 80
frag fragmentation 80 90
LIST
fi

if [ -n "$scn_runs" ]; then
  # program label leak_source(- for controls) process(1 = record the process curve)
  while read -r prog label leaksrc doproc; do
    for r in $scn_runs; do
      case $r in
        1) secs=6; iv=0.1; set=dev ;;
        2) secs=4; iv=0.05; set=holdout ;;
        3) secs=9; iv=0.2; set=holdout ;;
        4) secs=7; iv=0.1; set=test ;;
        5) secs=5; iv=0.15; set=test ;;
        6) secs=8; iv=0.1; set=test2 ;;
        7) secs=16; iv=1; set=test2 ;; # default-like 1 s, >= 16 snapshots
        8) secs=5; iv=0.15; set=test3 ;;
        9) secs=17; iv=1; set=test3 ;; # default-like 1 s
        10) secs=4; iv=0.2; set=test4 ;;
        11) secs=17; iv=1; set=test4 ;; # default-like 1 s
        12) secs=5; iv=0.2; set=test5 ;;
        13) secs=17; iv=1; set=test5 ;; # default-like 1 s
      esac
      seed=$((1000 * r + 17))
      args="--seconds $secs --seed $seed"
      # shellcheck disable=SC2086
      "$lg" run -q -i "$iv" -o "$tmp/run.db" -- "$scn/$prog" $args >/dev/null 2>&1
      base="scn-$prog-$r"
      if [ "$doproc" = 1 ]; then
        proc_csv "$out/$base-proc.csv"
        add "$base-proc.csv" "$label" process "$prog" "$args" "$iv" "$set"
      fi
      if [ "$leaksrc" != - ]; then
        line=$(grep -n 'LEAK-SITE \*/' "$src/tests/scenarios/$leaksrc" | cut -d: -f1)
        stacks=$(q "select s.stack from samples s where s.proc=1 and s.stack in
                      (select stack from frames where proc=1 and line=$line and
                       (file like '%/$leaksrc' or file='$leaksrc'))
                    group by s.stack order by max(s.live_bytes) desc limit 1")
      else
        stacks=$(q "select stack from samples where proc=1 group by stack
                    having count(*) >= 8 order by max(live_bytes) desc limit 2")
      fi
      k=0
      for st in $stacks; do
        k=$((k + 1))
        site_csv "$st" "$out/$base-site$k.csv"
        add "$base-site$k.csv" "$label" site "$prog" "$args" "$iv" "$set"
      done
      rm -f "$tmp"/run.db*
    done
  done <<'LIST'
churn_leak linear-leak churn_leak.c 0
lru_leak linear-leak lru_leak.c 1
mt_shlib linear-leak codec.c 1
cxx_sessions linear-leak cxx_sessions.cpp 1
config_reload step-leak config_reload.c 1
cxx_cycle linear-leak cxx_cycle.cpp 1
dlopen_late linear-leak plugin.c 1
lru_bounded plateau - 1
sawtooth sawtooth - 1
startup_tables plateau - 1
cxx_queue sawtooth - 1
LIST
fi
