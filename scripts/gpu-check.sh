#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
#
# gpu-check.sh - leakguard's GPU memory capture on a real GPU (issue #9, item 8).
#
#   scripts/gpu-check.sh [--build DIR] [--out FILE] [--keep]
#
# Needs an NVIDIA driver (libcuda.so.1, libnvidia-ml.so.1), the CUDA toolkit (nvcc;
# NVCC or /usr/local/cuda/bin/nvcc), cmake and python3. Builds leakguard into DIR
# (default build-gpu) unless it is already built there, builds the GPU programs of
# tests/cuda/gpu with nvcc (static cudart, nvcc's default; shared cudart) and gcc
# (driver API, -lcuda), then checks, under `leakguard run`:
#   - leaks (cudaMalloc, cudaMallocAsync, cuMemAlloc_v2 kept per step): verdict leak,
#     the marked line at rank 1, space device, device 0; controls (a ring of
#     in-flight buffers): no leak; for each of static cudart, shared cudart, driver API
#   - exact: sites, blocks and bytes of device, pinned and managed memory as the
#     program knows them
#   - NVML vs recorded: the report's untracked bytes (contexts, modules, caches)
#   - cost: 100 000 cudaMalloc/cudaFree pairs timed bare and recorded
#   - Unified Memory counters of a managed buffer (--cuda-um), when built in
#   - PyTorch's CUDA path when a CUDA torch is installed (caching allocator and
#     PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync): the Python line at rank 1
# Progress goes to stderr; one JSON summary to stdout (and --out FILE). Exit 0 when
# every check passed, 1 otherwise, 2 when the machine has no GPU or no toolkit.
# Budget: under 8 minutes on one GPU (most of it the build; LG_GPU_SECONDS=4 per run).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD=$ROOT/build-gpu
OUT=""
KEEP=0
while (($#)); do
  case $1 in
    --build) BUILD=$2; shift 2 ;;
    --out) OUT=$2; shift 2 ;;
    --keep) KEEP=1; shift ;;
    -h | --help) sed -n '3,27p' "$0"; exit 0 ;;
    *) echo "gpu-check: unknown argument $1" >&2; exit 2 ;;
  esac
done
SECS=${LG_GPU_SECONDS:-4}
SRC=$ROOT/tests/cuda/gpu
WORK=$(mktemp -d /tmp/lg-gpu-check-XXXXXX)
CHECKS=$WORK/checks.jsonl
: >"$CHECKS"
T0=$SECONDS
cleanup() { if ((KEEP)); then echo "gpu-check: files kept in $WORK" >&2; else rm -rf "$WORK"; fi; }
trap cleanup EXIT

log() { echo "gpu-check [$((SECONDS - T0))s]: $*" >&2; }

# record NAME OK(0|1) DETAIL (JSON, or plain text)
record() {
  python3 - "$1" "$2" "$3" >>"$CHECKS" <<'PY'
import json, sys
try:
    d = json.loads(sys.argv[3])
except ValueError:
    d = sys.argv[3]
print(json.dumps({"name": sys.argv[1], "ok": sys.argv[2] == "1", "detail": d}))
PY
  if [[ $2 == 1 ]]; then log "ok   $1"; else log "FAIL $1: $3"; fi
}

summary() {
  python3 - "$CHECKS" "$WORK/facts.json" "$((SECONDS - T0))" <<'PY'
import json, sys
checks = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
try:
    facts = json.load(open(sys.argv[2]))
except (OSError, ValueError):
    facts = {}
out = dict(facts, elapsed_s=int(sys.argv[3]), passed=sum(c["ok"] for c in checks),
           failed=sum(not c["ok"] for c in checks), checks=checks)
print(json.dumps(out, indent=2))
PY
}

finish() {
  local s
  s=$(summary)
  echo "$s"
  [[ -z $OUT ]] || echo "$s" >"$OUT"
  python3 -c 'import json,sys; sys.exit(0 if json.loads(sys.stdin.read())["failed"] == 0 else 1)' <<<"$s"
}

# ------------------------------------------------------------------ the machine
# LG_GPU_CHECK_LIBCUDA: another libcuda.so.1 (to test this script itself on the tests'
# stand-in driver, where only the driver-API checks can pass).
LIBCUDA=${LG_GPU_CHECK_LIBCUDA:-$(ldconfig -p | awk '/libcuda\.so\.1 .*x86-64/ {print $NF; exit}')}
if [[ -n ${LG_GPU_CHECK_LIBCUDA:-} ]]; then
  LD_LIBRARY_PATH=$(dirname "$LIBCUDA")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  export LD_LIBRARY_PATH
fi
NVCC=${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
if [[ -z $LIBCUDA ]]; then
  echo '{"error": "no NVIDIA driver: libcuda.so.1 not found (ldconfig -p)"}'
  exit 2
fi
if [[ ! -x $NVCC ]]; then
  echo '{"error": "no CUDA toolkit: nvcc not found (set NVCC)"}'
  exit 2
fi
CUDA_HOME=$(cd "$(dirname "$NVCC")/.." && pwd)
GPU=$(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader -i 0 2>/dev/null || echo "unknown")
python3 -c 'import json,sys; json.dump({"gpu": sys.argv[1], "nvcc": sys.argv[2], "libcuda": sys.argv[3]}, open(sys.argv[4], "w"))' \
  "$GPU" "$("$NVCC" --version | tail -1)" "$LIBCUDA" "$WORK/facts.json"
log "GPU: $GPU; driver $LIBCUDA; toolkit $CUDA_HOME"

# ------------------------------------------------------------------ build
if [[ ! -x $BUILD/bin/leakguard || ! -e $BUILD/lib/libleakguard.so ]]; then
  log "building leakguard in $BUILD"
  cmake -S "$ROOT" -B "$BUILD" -DCMAKE_BUILD_TYPE=RelWithDebInfo >"$WORK/cmake.log" 2>&1
  cmake --build "$BUILD" -j"$(nproc)" >>"$WORK/cmake.log" 2>&1 || { tail -30 "$WORK/cmake.log" >&2; exit 2; }
fi
LG=$BUILD/bin/leakguard
ARCH=(-arch=native)
"$NVCC" "${ARCH[@]}" -o "$WORK/probe" "$SRC/gpu_prog.cu" >/dev/null 2>&1 || ARCH=()
log "nvcc ${ARCH[*]:-(default arch)}: gpu_prog static and shared cudart; gcc: gpu_driver"
"$NVCC" "${ARCH[@]}" -g -O2 -cudart static -o "$WORK/gpu_prog_static" "$SRC/gpu_prog.cu"
"$NVCC" "${ARCH[@]}" -g -O2 -cudart shared -Xlinker "-rpath=$CUDA_HOME/lib64" -o "$WORK/gpu_prog_shared" \
  "$SRC/gpu_prog.cu"
gcc -O2 -g -o "$WORK/gpu_driver" "$SRC/gpu_driver.c" "$LIBCUDA" -ldl

# ------------------------------------------------------------------ helpers
# lgrun DB ARGS... : leakguard run into $WORK/DB (stdout/stderr in $WORK/DB.out/.err)
lgrun() {
  local db=$1
  shift
  "$LG" run --quiet --interval 0.2 --output "$WORK/$db" "$@" >"$WORK/$db.out" 2>"$WORK/$db.err"
}

# verdict NAME DB SOURCE MARKER EXPECT(leak|no-leak): rank 1 at the marked line, device
verdict() {
  local detail ok
  detail=$(python3 - "$LG" "$WORK/$2" "$3" "$4" "$5" <<'PY' || echo '{"ok": false, "error": "evaluation failed"}'
import json, os, subprocess, sys
lg, db, src, marker, expect = sys.argv[1:]
rep = json.loads(subprocess.run([lg, "report", db, "--format", "json"], capture_output=True, text=True).stdout)
line = next(i + 1 for i, l in enumerate(open(src)) if ("/* %s */" % marker) in l or l.rstrip().endswith("# " + marker))
d = {"verdict": rep["verdict"], "expect": expect, "marker_line": line}
ok = rep["verdict"] == expect
if expect == "leak" and rep["suspects"]:
    s = rep["suspects"][0]
    f0 = s["frames"][0] if s["frames"] else {}
    d.update(rank1_file=os.path.basename(f0.get("file") or ""), rank1_line=f0.get("line"),
             space=s.get("space"), device=s.get("device"), growth_bytes_per_s=s.get("growth_bytes_per_s"),
             time_to_oom_s=s.get("time_to_oom_s"))
    ok = ok and d["rank1_file"] == os.path.basename(src) and d["rank1_line"] == line and \
        s.get("space") == "device" and s.get("device") == 0
print(json.dumps({"ok": ok, **d}))
PY
)
  ok=$(python3 -c 'import json,sys; print(1 if json.loads(sys.argv[1])["ok"] else 0)' "$detail")
  record "$1" "$ok" "$detail"
}

# exact NAME DB SOURCE PROGRAM_OUT "MARKER:SPACE:BYTES_KEY:BLOCKS_KEY ..."
exact() {
  local detail ok
  detail=$(python3 - "$WORK/$2" "$3" "$WORK/$4" "$5" <<'PY' || echo '{"ok": false, "error": "evaluation failed"}'
import json, os, re, sqlite3, sys
db, src, outf, specs = sys.argv[1:]
kv = dict(re.findall(r"(\w+)=(\d+)", open(outf).read()))
con = sqlite3.connect(db)
lines = open(src).read().split("\n")
res, ok = {}, True
for spec in specs.split():
    marker, space, bkey, nkey = spec.rsplit(":", 3)
    line = next(i + 1 for i, l in enumerate(lines) if ("/* %s */" % marker) in l)
    rows = con.execute("""
        SELECT st.space, c.device, s.live_bytes, s.live_blocks FROM samples s
        JOIN stacks st ON st.proc=s.proc AND st.stack=s.stack
        LEFT JOIN cuda_stacks c ON c.proc=s.proc AND c.stack=s.stack
        JOIN frames f ON f.proc=s.proc AND f.stack=s.stack AND f.line=? AND f.file LIKE ?
        WHERE s.seq=(SELECT max(seq) FROM samples x WHERE x.proc=s.proc AND x.stack=s.stack)
        GROUP BY s.proc, s.stack""", (line, "%" + os.path.basename(src))).fetchall()
    got = dict(space=sorted({r[0] for r in rows}), device=sorted({r[1] for r in rows}),
               bytes=sum(r[2] for r in rows), blocks=sum(r[3] for r in rows))
    want = dict(space=[space], device=[0], bytes=int(kv.get(bkey, -1)), blocks=int(kv.get(nkey, -1)))
    res[marker] = dict(got=got, want=want)
    ok = ok and got == want
print(json.dumps({"ok": ok, "sites": res}))
PY
)
  ok=$(python3 -c 'import json,sys; print(1 if json.loads(sys.argv[1])["ok"] else 0)' "$detail")
  record "$1" "$ok" "$detail"
}

# leakcheck NAME DB SOURCE MARKER EXPECT -- COMMAND...
leakcheck() {
  local name=$1 db=$2 src=$3 marker=$4 expect=$5
  shift 6
  if lgrun "$db" -- "$@"; then
    verdict "$name" "$db" "$src" "$marker" "$expect"
  else
    record "$name" 0 "run failed: $(tail -3 "$WORK/$db.err")"
  fi
}

# exactcheck NAME DB SOURCE SPECS -- COMMAND...
exactcheck() {
  local name=$1 db=$2 src=$3 specs=$4
  shift 5
  if lgrun "$db" -- "$@"; then
    exact "$name" "$db" "$src" "$db.out" "$specs"
  else
    record "$name" 0 "run failed: $(tail -3 "$WORK/$db.err")"
  fi
}

# ------------------------------------------------------------------ leaks and controls
CU=$SRC/gpu_prog.cu
for v in static shared; do
  P=$WORK/gpu_prog_$v
  leakcheck "cudart-$v: cudaMalloc leak at rank 1" "$v-leak.db" "$CU" LEAK:sync leak -- "$P" leak "$SECS"
  leakcheck "cudart-$v: cudaMallocAsync leak at rank 1" "$v-async.db" "$CU" LEAK:async leak -- "$P" async "$SECS"
  leakcheck "cudart-$v: ring of buffers, no leak" "$v-control.db" "$CU" LEAK:sync no-leak -- "$P" control "$SECS"
  exactcheck "cudart-$v: exact device, pinned, managed" "$v-exact.db" "$CU" \
    "KEEP:exact:device:exact_bytes:exact_blocks KEEP:pinned:pinned:pinned_bytes:pinned_blocks KEEP:managed:managed:managed_bytes:managed_blocks" \
    -- "$P" exact
done
D=$SRC/gpu_driver.c
leakcheck "driver API: cuMemAlloc_v2 leak at rank 1" driver-leak.db "$D" LEAK:driver leak -- \
  "$WORK/gpu_driver" leak "$SECS"
leakcheck "driver API: no leak" driver-control.db "$D" LEAK:driver no-leak -- "$WORK/gpu_driver" control "$SECS"
exactcheck "driver API: exact" driver-exact.db "$D" "KEEP:driver:device:exact_bytes:exact_blocks" -- \
  "$WORK/gpu_driver" exact

# ------------------------------------------------------------------ NVML vs recorded
detail=$("$LG" report "$WORK/static-exact.db" --format json | python3 -c '
import json, sys
r = json.load(sys.stdin)
g = (r.get("gpus") or [{}])[0]
n = g.get("nvml") or {}
ok = bool(n) and n.get("process_bytes", 0) >= g.get("device_bytes", 1) and n.get("untracked_bytes", -1) >= 0
print(json.dumps({"ok": ok, "recorded_device_bytes": g.get("device_bytes"), "nvml_process_bytes": n.get("process_bytes"),
                  "untracked_bytes": n.get("untracked_bytes"), "device_total_bytes": g.get("total_bytes"),
                  "nvml_status": r.get("nvml")}))') || detail='{"ok": false, "error": "no report of the exact run"}'
record "NVML timeline: process >= recorded, untracked named" \
  "$(python3 -c 'import json,sys; print(1 if json.loads(sys.argv[1])["ok"] else 0)' "$detail")" "$detail"

# ------------------------------------------------------------------ cost
bare=$("$WORK/gpu_prog_static" pairs 100000 | sed -n 's/.*ns_per_pair=\([0-9.]*\).*/\1/p') || bare=0
lgrun pairs.db -- "$WORK/gpu_prog_static" pairs 100000 || true
rec=$(sed -n 's/.*ns_per_pair=\([0-9.]*\).*/\1/p' "$WORK/pairs.db.out") || rec=0
detail=$(python3 -c 'import json,sys; b,r=float(sys.argv[1] or 0),float(sys.argv[2] or 0); print(json.dumps({"ok": b > 0 and r > 0 and r - b <= 1000, "bare_ns_per_pair": b, "recorded_ns_per_pair": r, "difference_ns": round(r - b, 1)}))' \
  "$bare" "$rec")
record "cost: cudaMalloc/cudaFree pair recorded <= 1 us more than bare" \
  "$(python3 -c 'import json,sys; print(1 if json.loads(sys.argv[1])["ok"] else 0)' "$detail")" "$detail"

# ------------------------------------------------------------------ Unified Memory counters
if "$LG" run --help | grep -q -- --cuda-um; then
  lgrun um.db --cuda-um -- "$WORK/gpu_prog_static" managed || true
  detail=$("$LG" report "$WORK/um.db" --format json | python3 -c '
import json, sys
r = json.load(sys.stdin)
um = r.get("unified_memory") or []
ok = any("gpu_prog.cu" in u.get("site", "") and u.get("gpu_page_faults", 0) + u.get("cpu_page_faults", 0) > 0
         and u.get("bytes_to_device", 0) > 0 for u in um)
print(json.dumps({"ok": ok, "unified_memory": um, "cuda_notes": r.get("cuda_notes")}))') ||
    detail='{"ok": false, "error": "no report of the managed run"}'
  record "Unified Memory: page faults and migrations next to the managed site" \
    "$(python3 -c 'import json,sys; print(1 if json.loads(sys.argv[1])["ok"] else 0)' "$detail")" "$detail"
else
  record "Unified Memory counters (--cuda-um)" 0 "not built: leakguard run has no --cuda-um"
fi

# ------------------------------------------------------------------ PyTorch
if python3 -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)' >/dev/null 2>&1; then
  T=$SRC/torch_leak.py
  leakcheck "torch (caching allocator): leak at rank 1" torch-leak.db "$T" LEAK:torch leak -- \
    python3 "$T" leak "$SECS"
  leakcheck "torch backend:cudaMallocAsync: leak at rank 1" torch-async.db "$T" LEAK:torch leak -- \
    env PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync python3 "$T" leak "$SECS"
  leakcheck "torch: no leak" torch-control.db "$T" LEAK:torch no-leak -- python3 "$T" control "$SECS"
else
  log "no CUDA torch installed: the PyTorch checks are left out"
fi

finish
