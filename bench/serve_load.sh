#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# serve_load.sh - load test of examples/serve with its leak bug on, in a memory cgroup
# with a limit, with and without leakguard's guard/breaker (issue #3).
#
#   bench/serve_load.sh [--build DIR] [--seconds S] [--limit BYTES] [--conns N]
#                       [--mode all|noguard|guard|breaker-off|guard-cgroup|guard-cgroup-off] [--serve-args "..."]
#
#   noguard      examples/serve --leak alone: nothing publishes a level, the KV store
#                grows until the cgroup's OOM killer kills the server.
#   guard        leakguard run --guard-config G -- examples/serve --leak, all of it in
#                the cgroup (G: the policy below, no kill): the guard grades the
#                cgroup's memory, the server sheds (503 + Retry-After), shrinks its
#                batch and evicts its store; expected: no crash, every answer 200/503.
#                Needs `leakguard run --guard` (skipped with a note when absent).
#   breaker-off  the same under the guard, but serve --no-breaker (ignores the API).
#   guard-cgroup leakguard guard --cgroup CG (outside the cgroup; policy: publish the
#                level, SIGUSR1 at emergency, never kill) + leakguard run -- serve --leak
#                inside it. guard-cgroup-off: the same with serve --no-breaker.
#
# Load: wrk (Debian package) on loopback only, bounded by --seconds (default 30) and an
# outer timeout. Per run it prints one line:
#   RESULT mode=... exit=... oom_kills=... served_200=... shed_503=... other=... errors=... max_mib=...
# Root only (creates a cgroup). cgroup v1 (memory.limit_in_bytes, max_usage_in_bytes)
# or v2 (memory.max, memory.peak / sampled memory.current). Every process started
# here is killed and the cgroup removed at the end.
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/.." && pwd)
BUILD=$ROOT/build
SECONDS_RUN=30
LIMIT=$((512 * 1024 * 1024))
CONNS=32
MODE=all
SERVE_ARGS="--threads 4 --batch 16 --kv-block 2 --work-us 1000"
PORT_BASE=18400

while (($#)); do
  case "$1" in
    --build) BUILD=$(cd "$2" && pwd); shift 2 ;;
    --seconds) SECONDS_RUN=$2; shift 2 ;;
    --limit) LIMIT=$(numfmt --from=iec "$2"); shift 2 ;;
    --conns) CONNS=$2; shift 2 ;;
    --mode) MODE=$2; shift 2 ;;
    --serve-args) SERVE_ARGS=$2; shift 2 ;;
    -h|--help) sed -n '3,26p' "$0"; exit 0 ;;
    *) echo "serve_load: unknown option $1" >&2; exit 2 ;;
  esac
done

SERVE=$BUILD/examples/serve
LEAKGUARD=$BUILD/bin/leakguard
[ -x "$SERVE" ] || { echo "serve_load: $SERVE not built (cmake --build $BUILD --target serve)" >&2; exit 2; }
command -v wrk >/dev/null || { echo "serve_load: wrk not installed (apt-get install wrk)" >&2; exit 2; }
[ "$(id -u)" -eq 0 ] || { echo "serve_load: needs root (memory cgroup)" >&2; exit 2; }

TMP=$(mktemp -d /tmp/lg-serve-load.XXXXXX)
PIDS=()
CG=""

# ------------------------------------------------------------------ cgroup
if [ -f /sys/fs/cgroup/cgroup.controllers ]; then
  CGV=2
  CGBASE=/sys/fs/cgroup$(awk -F: '$1=="0"{print $3}' /proc/self/cgroup)
else
  CGV=1
  CGBASE=/sys/fs/cgroup/memory$(awk -F: '$2 ~ /(^|,)memory(,|$)/{print $3}' /proc/self/cgroup)
fi

cg_make() { # name -> sets CG
  CG=$CGBASE/$1
  mkdir "$CG"
  if [ $CGV = 1 ]; then
    echo "$LIMIT" > "$CG/memory.limit_in_bytes"
    [ -f "$CG/memory.memsw.limit_in_bytes" ] && echo "$LIMIT" > "$CG/memory.memsw.limit_in_bytes" || true
  else
    echo "$LIMIT" > "$CG/memory.max"
    echo 0 > "$CG/memory.swap.max" 2>/dev/null || true
  fi
}

cg_max_bytes() {
  if [ $CGV = 1 ]; then cat "$CG/memory.max_usage_in_bytes"
  elif [ -f "$CG/memory.peak" ]; then cat "$CG/memory.peak"
  else cat "$TMP/peak" 2>/dev/null || echo 0; fi
}

cg_oom_kills() {
  if [ $CGV = 1 ]; then awk '$1=="oom_kill"{print $2}' "$CG/memory.oom_control"
  else awk '$1=="oom_kill"{print $2}' "$CG/memory.events"; fi
}

cg_remove() {
  [ -n "$CG" ] && [ -d "$CG" ] || return 0
  for _ in $(seq 50); do
    [ -n "$(cat "$CG/cgroup.procs" 2>/dev/null)" ] || break
    while read -r p; do kill -KILL "$p" 2>/dev/null || true; done < "$CG/cgroup.procs"
    sleep 0.1
  done
  rmdir "$CG" 2>/dev/null || true
  CG=""
}

cleanup() {
  for p in "${PIDS[@]}"; do kill -KILL "$p" 2>/dev/null || true; done
  cg_remove
  rm -rf "$TMP"
}
trap cleanup EXIT

cat > "$TMP/status.lua" <<'EOF'
-- counts answers by status across wrk's threads
local threads = {}
function setup(thread) table.insert(threads, thread) end
function init(args) ok = 0; shed = 0; other = 0; retry = 0 end
function response(status, headers, body)
  if status == 200 then ok = ok + 1
  elseif status == 503 then
    shed = shed + 1
    if headers["Retry-After"] then retry = retry + 1 end
  else other = other + 1 end
end
function done(summary, latency, requests)
  local o, s, x, r = 0, 0, 0, 0
  for _, t in ipairs(threads) do
    o = o + t:get("ok"); s = s + t:get("shed"); x = x + t:get("other"); r = r + t:get("retry")
  end
  local e = summary.errors
  io.write(string.format("WRK ok=%d shed=%d other=%d retry_after=%d connect=%d read=%d write=%d timeout=%d requests=%d\n",
    o, s, x, r, e.connect, e.read, e.write, e.timeout, summary.requests))
end
EOF

# The guard's policy for the server: publish the level (breaker API), at emergency also
# SIGUSR1 (serve halves its KV store); no kill: the server is expected to survive.
cat > "$TMP/guard.ini" <<'EOF'
[guard]
interval = 100ms
[breaker]
actions = log, publish
[emergency]
actions = log, publish, signal
signal = SIGUSR1
signal_target = all
repeat = 2s
EOF

INCG=$TMP/incg.sh
printf '#!/bin/bash\necho $$ > "$LG_SERVE_CG/cgroup.procs" && exec "$@"\n' > "$INCG"
chmod +x "$INCG"

wait_port() { # port pid
  for _ in $(seq 200); do
    kill -0 "$2" 2>/dev/null || return 1
    (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0
    sleep 0.05
  done
  return 1
}

# run_one MODE NAME COMMAND...: starts COMMAND inside a fresh cgroup, loads it, reports.
run_one() {
  local mode=$1 port=$2; shift 2
  cg_make "lg-serve-$mode-$$"
  local log=$TMP/$mode.log
  # COMMAND runs outside the cgroup; only the server enters it ($INCG wraps it), so a
  # collector (leakguard run) is neither charged nor signalled with the server.
  # (the subshell keeps bash's "Killed" notice out of the output; pid = COMMAND's)
  export LG_SERVE_CG=$CG
  ( bash -c 'echo $$ > "$0"; exec "$@"' "$TMP/$mode.pid" "$@" > "$log" 2>&1; exit $? ) 2>/dev/null &
  local sub=$!
  PIDS+=("$sub")
  for _ in $(seq 100); do [ -s "$TMP/$mode.pid" ] && break; sleep 0.02; done
  local pid
  pid=$(cat "$TMP/$mode.pid")
  PIDS+=("$pid")
  if ! wait_port "$port" "$pid"; then
    echo "serve_load: [$mode] server did not come up:" >&2; cat "$log" >&2; cg_remove; return 1
  fi
  if [ -n "${WITH_GUARD:-}" ]; then # leakguard guard watching the cgroup, outside it
    "$LEAKGUARD" guard --cgroup "$CG" --config "$TMP/guard.ini" --log "$TMP/$mode.guard.jsonl" \
      --duration $((SECONDS_RUN + 20)) --metrics "127.0.0.1:$((port + 100))" > "$TMP/$mode.guard.out" 2>&1 &
    PIDS+=("$!")
    GUARD_PID=$!
  fi
  if [ $CGV = 2 ] && [ ! -f "$CG/memory.peak" ]; then
    (m=0; while [ -d "$CG" ]; do c=$(cat "$CG/memory.current" 2>/dev/null || echo 0); ((c > m)) && m=$c && echo $m > "$TMP/peak"; sleep 0.1; done) &
    PIDS+=("$!")
  fi
  local t0=$SECONDS
  (while kill -0 "$pid" 2>/dev/null; do sleep 0.1; done; echo $((SECONDS - t0)) > "$TMP/$mode.died") &
  PIDS+=("$!")
  timeout $((SECONDS_RUN + 30)) wrk -t2 -c"$CONNS" -d"${SECONDS_RUN}s" --timeout 5s -s "$TMP/status.lua" \
    "http://127.0.0.1:$port/infer?prompt=the%20quick%20brown%20fox%20jumps%20over" > "$TMP/$mode.wrk" 2>&1 || true
  local alive=1
  kill -0 "$pid" 2>/dev/null || alive=0
  local stats=""
  if ((alive)); then
    stats=$(timeout 5 bash -c "exec 3<>/dev/tcp/127.0.0.1/$port; printf 'GET /stats HTTP/1.0\r\n\r\n' >&3; tail -n1 <&3" 2>/dev/null || true)
    kill -TERM "$pid" 2>/dev/null || true
  fi
  local rc=0
  for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  kill -KILL "$pid" 2>/dev/null || true
  wait "$sub" 2>/dev/null || rc=$?
  local max oom
  max=$(cg_max_bytes); oom=$(cg_oom_kills)
  local levels="-"
  if [ -n "${WITH_GUARD:-}" ]; then
    kill -TERM "$GUARD_PID" 2>/dev/null || true
    sleep 0.3
    levels=$(grep -o '"level":"[a-z]*"' "$TMP/$mode.guard.jsonl" 2>/dev/null | sort | uniq -c | awk '{printf "%s%s=%s", (NR>1?",":""), substr($2,10,length($2)-10), $1}')
    echo "guard events: $(wc -l < "$TMP/$mode.guard.jsonl") lines; actions: $(grep -o '"action":"[a-z_]*"' "$TMP/$mode.guard.jsonl" | sort | uniq -c | tr -s ' ' | tr '\n' ';')" >&2
    cp "$TMP/$mode.guard.jsonl" "${KEEP_DIR:-$TMP}/" 2>/dev/null || true
  fi
  local w
  w=$(grep '^WRK' "$TMP/$mode.wrk" || echo "WRK ok=? shed=? other=? retry_after=? connect=? read=? write=? timeout=? requests=?")
  echo "---- [$mode] $*" >&2
  tail -n 25 "$log" >&2
  grep -E 'Requests/sec|Latency' "$TMP/$mode.wrk" >&2 || true
  [ -n "$stats" ] && echo "stats before stop: $stats" >&2
  # shellcheck disable=SC2086
  set -- $w
  echo "RESULT mode=$mode exit=$rc alive_at_end=$alive oom_kills=$oom served_200=${2#ok=} shed_503=${3#shed=}" \
       "other=${4#other=} retry_after=${5#retry_after=} errors=${6#connect=}/${7#read=}/${8#write=}/${9#timeout=}" \
       "max_mib=$((max / 1048576)) limit_mib=$((LIMIT / 1048576)) seconds=$((SECONDS - t0))" \
       "died_after_s=$( ((alive)) && echo - || cat "$TMP/$mode.died" 2>/dev/null || echo '?')" \
       "guard_level_events=$levels"
  cg_remove
}

echo "serve_load: cgroup v$CGV under $CGBASE, limit $((LIMIT / 1048576)) MiB, wrk -c$CONNS ${SECONDS_RUN}s, serve $SERVE_ARGS --leak" >&2
has_guard=0
[ -x "$LEAKGUARD" ] && "$LEAKGUARD" run --help 2>&1 | grep -q -- '--guard' && has_guard=1

port=$PORT_BASE
# shellcheck disable=SC2086
case "$MODE" in all|noguard)
  run_one noguard $port "$INCG" "$SERVE" --port $port $SERVE_ARGS --leak
  port=$((port + 1)) ;;
esac
case "$MODE" in all|guard|breaker-off)
  if ((has_guard)); then
    if [ "$MODE" != breaker-off ]; then
      # shellcheck disable=SC2086
      run_one guard $port "$INCG" "$LEAKGUARD" run --guard-config "$TMP/guard.ini" -q -o "$TMP/guard.db" -- "$SERVE" --port $port $SERVE_ARGS --leak
      port=$((port + 1))
    fi
    if [ "$MODE" != guard ]; then
      # shellcheck disable=SC2086
      run_one breaker-off $port "$INCG" "$LEAKGUARD" run --guard-config "$TMP/guard.ini" -q -o "$TMP/off.db" -- "$SERVE" --port $port $SERVE_ARGS --leak --no-breaker
    fi
  else
    echo "serve_load: $LEAKGUARD run has no --guard yet: guard runs skipped" >&2
  fi ;;
esac
# leakguard guard --cgroup (outside the cgroup) + leakguard run -- serve --leak (inside)
case "$MODE" in all|guard-cgroup|guard-cgroup-off)
  if [ -x "$LEAKGUARD" ] && "$LEAKGUARD" guard --help >/dev/null 2>&1; then
    if [ "$MODE" != guard-cgroup-off ]; then
      # shellcheck disable=SC2086
      WITH_GUARD=1 run_one guard-cgroup $port "$LEAKGUARD" run -q -o "$TMP/gc.db" -- "$INCG" "$SERVE" --port $port $SERVE_ARGS --leak
      port=$((port + 1))
    fi
    if [ "$MODE" != guard-cgroup ]; then
      # shellcheck disable=SC2086
      WITH_GUARD=1 run_one guard-cgroup-off $port "$LEAKGUARD" run -q -o "$TMP/gco.db" -- "$INCG" "$SERVE" --port $port $SERVE_ARGS --leak --no-breaker
    fi
  else
    echo "serve_load: no leakguard guard: guard-cgroup runs skipped" >&2
  fi ;;
esac
