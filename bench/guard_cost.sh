#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The guard's own cost: CPU and memory of `leakguard guard` watching N processes
# (default 100) at 10 Hz for S seconds (default 30), two ways: N --pid arguments, and
# one memory cgroup holding the N processes (root; skipped otherwise). Writes
# bench/GUARD_RESULTS.md.
#   bench/guard_cost.sh [BUILD_DIR] [N] [SECONDS]
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
BUILD=${1:-$HERE/../build}
N=${2:-100}
SECS=${3:-30}
LG=$BUILD/bin/leakguard
OUT=$HERE/GUARD_RESULTS.md
TMP=$(mktemp -d /tmp/lgguard-bench-XXXX)
PIDS=()
CG=""
cleanup() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  if [ -n "$CG" ] && [ -d "$CG" ]; then rmdir "$CG" 2>/dev/null || true; fi
  rm -rf "$TMP"
}
trap cleanup EXIT
[ -x "$LG" ] || { echo "guard_cost: build first ($LG missing)" >&2; exit 1; }
cc -O2 -o "$TMP/guard_idle" "$HERE/guard_idle.c"
TCK=$(getconf CLK_TCK)

# measure PID: prints "cpu_percent max_rss_kib" over SECS seconds
measure() {
  local pid=$1
  sleep 2 # past start-up
  local a b
  a=$(awk '{print $14+$15}' /proc/$pid/stat)
  local t0; t0=$(date +%s.%N)
  sleep "$SECS"
  b=$(awk '{print $14+$15}' /proc/$pid/stat)
  local t1; t1=$(date +%s.%N)
  local hwm rss
  hwm=$(awk '/VmHWM/{print $2}' /proc/$pid/status)
  rss=$(awk '/VmRSS/{print $2}' /proc/$pid/status)
  echo "$(echo "($b - $a) / $TCK / ($t1 - $t0) * 100" | bc -l) $rss $hwm"
}

start_procs() { # $1: cgroup.procs file or ""
  PIDS=()
  for ((i = 0; i < N; i++)); do
    if [ -n "$1" ]; then
      sh -c "echo \$\$ > $1 && exec $TMP/guard_idle 2" &
    else
      "$TMP/guard_idle" 2 &
    fi
    PIDS+=($!)
  done
  sleep 1
}

ticks() { grep -c . "$1" 2>/dev/null || echo 0; }

results=()
# --- N --pid arguments
start_procs ""
args=()
for p in "${PIDS[@]}"; do args+=(--pid "$p"); done
"$LG" guard "${args[@]}" --log "$TMP/ev1.jsonl" 2>"$TMP/err1" &
G=$!
read -r cpu rss hwm < <(measure $G)
kill $G; wait $G || true
results+=("| $N × \`--pid\` (RSS from /proc/PID/statm) | $(printf %.2f "$cpu") % | $rss KiB | $hwm KiB |")
for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
wait 2>/dev/null || true

# --- PSS instead of RSS (smaps_rollup)
start_procs ""
args=()
for p in "${PIDS[@]}"; do args+=(--pid "$p"); done
printf '[guard]\nmemory = pss\n' > "$TMP/pss.ini"
"$LG" guard "${args[@]}" --config "$TMP/pss.ini" --log "$TMP/ev2.jsonl" 2>"$TMP/err2" &
G=$!
read -r cpu rss hwm < <(measure $G)
kill $G; wait $G || true
results+=("| $N × \`--pid\`, \`memory = pss\` (smaps_rollup) | $(printf %.2f "$cpu") % | $rss KiB | $hwm KiB |")
for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
wait 2>/dev/null || true

# --- one memory cgroup with N processes
if [ "$(id -u)" = 0 ] && CG=$(mktemp -d /sys/fs/cgroup/memory/leakguard-bench-XXXX 2>/dev/null); then
  echo $((4 << 30)) > "$CG/memory.limit_in_bytes"
  start_procs "$CG/cgroup.procs"
  "$LG" guard --cgroup "$CG" --log "$TMP/ev3.jsonl" 2>"$TMP/err3" &
  G=$!
  read -r cpu rss hwm < <(measure $G)
  kill $G; wait $G || true
  results+=("| \`--cgroup\` (v1) holding $N processes | $(printf %.2f "$cpu") % | $rss KiB | $hwm KiB |")
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  sleep 0.5
  rmdir "$CG" && CG=""
fi

{
  echo "# The guard's own cost"
  echo
  echo "\`leakguard guard\` at the default 10 Hz (interval 100 ms) watching $N idle processes"
  echo "(2 MiB each) for ${SECS} s; CPU = (utime + stime) of the guard over the wall time, one"
  echo "core = 100 %. Measured by \`bench/guard_cost.sh\` on $(nproc) cores, $(uname -r),"
  echo "$(date -u +%Y-%m-%d)."
  echo
  echo "| watching | CPU | RSS | peak RSS |"
  echo "|---|---|---|---|"
  printf '%s\n' "${results[@]}"
  echo
  echo "Per tick the guard reads each process's statm (or smaps_rollup), the cgroup's"
  echo "cgroup.procs, usage, limit, stat (and events, pressure on v2), /proc/meminfo and PSI;"
  echo "once a second it lists /proc/PID/fd of the watched processes to find recorder"
  echo "regions. Per-process state is ~400 bytes."
} > "$OUT"
cat "$OUT"
