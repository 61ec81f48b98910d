#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# isolate_serve.sh - throughput and latency of examples/serve isolated against in-process,
# under the same wrk load (issue #15, docs/isolate.md):
#   inproc    the request's work in the server's thread
#   isolated  --isolate: each request's work in a copy-on-write fork under the seccomp
#             filter (lg_isolate_call: one fork per request)
#   pool      --isolate-pool N: the same in children forked ahead (lg_isolate_pool)
#   reuse     --isolate-pool N --isolate-reuse 16: each pooled child serves 16 requests
#
#   bench/isolate_serve.sh [--build DIR] [--seconds S] [--conns N] [--rounds R] [--pool N]
#
# Each round runs the three modes one after the other, each
# on a fresh server warmed with 50 requests, with `wrk -t2 -cN -dS --latency` on
# loopback. Prints one line per run and, at the end, the median of the rounds:
#   RESULT mode=inproc|isolated|pool|reuse rps=... p50_ms=... p99_ms=... non2xx=...
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
BUILD=$(cd "$HERE/.." && pwd)/build
SECS=10
CONNS=8
ROUNDS=3
POOL=8
while (($#)); do
  case "$1" in
  --build) BUILD=$(cd "$2" && pwd); shift 2 ;;
  --seconds) SECS=$2; shift 2 ;;
  --conns) CONNS=$2; shift 2 ;;
  --rounds) ROUNDS=$2; shift 2 ;;
  --pool) POOL=$2; shift 2 ;;
  *) echo "isolate_serve.sh: unknown argument '$1'" >&2; exit 2 ;;
  esac
done
SERVE=$BUILD/examples/serve
[[ -x $SERVE ]] || { echo "isolate_serve.sh: no $SERVE (build first)" >&2; exit 2; }
command -v wrk >/dev/null || { echo "isolate_serve.sh: wrk is not installed (apt-get install wrk)" >&2; exit 2; }
PORT=18530
PIDS=()
trap 'for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done' EXIT

to_ms() { # wrk's "1.23ms" / "456.00us" / "1.02s" -> ms
  awk -v v="$1" 'BEGIN { n = v + 0; if (v ~ /us$/) n /= 1000; else if (v ~ /ms$/) n += 0; else if (v ~ /s$/) n *= 1000; printf "%.3f", n }'
}

one() { # mode extra-args
  local mode=$1; shift
  PORT=$((PORT + 1))
  "$SERVE" --port "$PORT" "$@" >/dev/null 2>&1 &
  local pid=$!
  PIDS+=("$pid")
  for _ in $(seq 100); do curl -sf "http://127.0.0.1:$PORT/healthz" >/dev/null 2>&1 && break; sleep 0.05; done
  for _ in $(seq 50); do curl -sf "http://127.0.0.1:$PORT/infer?prompt=warm" >/dev/null; done
  local out
  out=$(wrk -t2 -c"$CONNS" -d"${SECS}s" --latency "http://127.0.0.1:$PORT/infer?prompt=hello")
  kill "$pid"; wait "$pid" 2>/dev/null || true
  local rps p50 p99 non2xx
  rps=$(awk '/^Requests\/sec/ {print $2}' <<<"$out")
  p50=$(to_ms "$(awk '$1 == "50%" {print $2}' <<<"$out")")
  p99=$(to_ms "$(awk '$1 == "99%" {print $2}' <<<"$out")")
  non2xx=$(awk '/Non-2xx/ {print $NF}' <<<"$out"); non2xx=${non2xx:-0}
  echo "RESULT mode=$mode rps=$rps p50_ms=$p50 p99_ms=$p99 non2xx=$non2xx"
}

res=()
for r in $(seq "$ROUNDS"); do
  res+=("$(one inproc)")
  echo "${res[-1]}"
  res+=("$(one isolated --isolate)")
  echo "${res[-1]}"
  res+=("$(one pool --isolate-pool "$POOL")")
  echo "${res[-1]}"
  res+=("$(one reuse --isolate-pool "$POOL" --isolate-reuse 16)")
  echo "${res[-1]}"
done
median() { # mode key: the median of the rounds (mawk has no arrays of arrays)
  printf '%s\n' "${res[@]}" | grep "mode=$1 " | tr ' ' '\n' | grep "^$2=" | cut -d= -f2 | sort -g |
    awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }'
}
for mode in inproc isolated pool reuse; do
  echo "MEDIAN mode=$mode rps=$(median $mode rps) p50_ms=$(median $mode p50_ms) p99_ms=$(median $mode p99_ms)"
done
