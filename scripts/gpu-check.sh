#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
#
# gpu-check.sh - leakguard's GPU memory capture on a real GPU (issue #9, item 8).
#
#   scripts/gpu-check.sh [--build DIR] [--out FILE] [--keep]
#
# Needs an NVIDIA driver (libcuda.so.1; libnvidia-ml.so.1 for the NVML checks), cmake,
# gcc and python3; the CUDA toolkit (nvcc: NVCC, PATH or /usr/local/cuda/bin) for the
# runtime and Unified Memory checks. Builds leakguard into DIR (default build-gpu)
# unless it is already built there, builds the programs of tests/cuda/gpu: gpu_prog
# with nvcc (static cudart, nvcc's default; shared cudart), gpu_driver with gcc (driver
# API, -lcuda), touch.ptx (nvcc --ptx), then checks, each under `leakguard run`:
#   - leaks (cudaMalloc, cudaMallocAsync, cuMemAlloc_v2 kept per step): verdict leak,
#     the suspect's site (its file:line, for Python its Python line) is the marked
#     line, space device, device 0; controls (a ring of in-flight buffers): no leak;
#     for the static runtime, the shared runtime and the driver API
#   - exact: blocks and bytes of device, pinned and managed memory at their lines, as
#     the program knows them (the most each site held: the runtime frees everything
#     at exit)
#   - NVML vs recorded (driver API and runtime): NVML's figure for the process is at
#     least what was recorded; the untracked bytes (contexts, modules, caches)
#   - cost: 100 000 cudaMalloc/cudaFree pairs bare and recorded; cuMemAlloc/cuMemFree
#     and cuMemAllocAsync/cuMemFreeAsync pairs through bench/cuda_cost.sh (DRIVER_DIR
#     set to the driver's directory)
#   - Unified Memory counters (--cuda-um) of a managed buffer a kernel touches, next
#     to its site (runtime: a <<<>>> launch; driver API: cuLaunchKernel of touch.ptx)
#   - PyTorch when a CUDA torch is installed: the caching allocator and
#     PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync (leak at the Python line; see
#     tests/cuda/gpu/torch_leak.py for why that line), a control, and the report's
#     torch.cuda.memory_allocated/reserved per device
# No check stops the others: each ends as "pass", "fail" (with why) or "skipped" (with
# why: no GPU, no toolkit, no torch, a failed build, the time budget). Progress goes
# to stderr, one JSON summary to stdout (and --out FILE). Exit 0 when no check failed,
# 1 otherwise (2 only for bad arguments).
#
# On the tests' stand-in driver (LG_GPU_CHECK_LIBCUDA=<build>/tests/cuda/driver/
# libcuda.so.1; ctest -R cuda_gpu_check): the driver-API checks run, with the stand-in
# NVML and CUPTI of the tests; what needs a GPU (the CUDA runtime's allocations,
# torch) is "skipped: no GPU". Budget: under 8 minutes on one GPU (LG_GPU_BUDGET=420
# seconds of checks after the build; LG_GPU_SECONDS=4 per leak run; every run has a
# timeout).
set -uo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD=$ROOT/build-gpu
OUT=""
KEEP=0
while (($#)); do
  case $1 in
    --build) BUILD=$2; shift 2 ;;
    --out) OUT=$2; shift 2 ;;
    --keep) KEEP=1; shift ;;
    -h | --help) sed -n '3,44p' "$0"; exit 0 ;;
    *) echo "gpu-check: unknown argument $1" >&2; exit 2 ;;
  esac
done
SECS=${LG_GPU_SECONDS:-4}
BUDGET=${LG_GPU_BUDGET:-420}
SRC=$ROOT/tests/cuda/gpu
WORK=$(mktemp -d /tmp/lg-gpu-check-XXXXXX)
CHECKS=$WORK/checks.jsonl
: >"$CHECKS"
T0=$SECONDS
cleanup() { if ((KEEP)); then echo "gpu-check: files kept in $WORK" >&2; else rm -rf "$WORK"; fi; }
trap cleanup EXIT

log() { echo "gpu-check [$((SECONDS - T0))s]: $*" >&2; }

# record NAME STATUS(pass|fail|skipped) DETAIL (JSON, or plain text)
record() {
  python3 - "$1" "$2" "$3" >>"$CHECKS" <<'PY' || echo "{\"name\": \"$1\", \"status\": \"fail\", \"ok\": false, \"detail\": \"unrecordable detail\"}" >>"$CHECKS"
import json, sys
try:
    d = json.loads(sys.argv[3])
except ValueError:
    d = sys.argv[3]
st = sys.argv[2]
print(json.dumps({"name": sys.argv[1], "status": st, "ok": None if st == "skipped" else st == "pass", "detail": d}))
PY
  case $2 in
    pass) log "ok   $1" ;;
    skipped) log "skip $1: $3" ;;
    *) log "FAIL $1: $3" ;;
  esac
}
skip() { record "$1" skipped "$2"; }

# judge NAME DETAIL_JSON: pass when DETAIL's "ok" is true
judge() {
  local st
  st=$(python3 -c 'import json,sys
try: print("pass" if json.loads(sys.argv[1]).get("ok") is True else "fail")
except Exception: print("fail")' "$2")
  record "$1" "$st" "$2"
}

# Time left for checks: 0 when the budget is spent.
left() { echo $((BUDGET - (SECONDS - T_CHECKS))); }
T_CHECKS=$SECONDS
# budget NAME SECONDS_NEEDED: 0 when there is time, else records a skip and returns 1
budget() {
  if (($(left) < $2)); then
    skip "$1" "time budget: $(left)s left of ${BUDGET}s, this check needs about $2s"
    return 1
  fi
}

finish() {
  python3 - "$CHECKS" "$WORK/facts.json" "$((SECONDS - T0))" >"$WORK/summary.json" <<'PY'
import json, sys
checks = []
for l in open(sys.argv[1]):
    try:
        checks.append(json.loads(l))
    except ValueError:
        pass
try:
    facts = json.load(open(sys.argv[2]))
except (OSError, ValueError):
    facts = {}
out = dict(facts, elapsed_s=int(sys.argv[3]), passed=sum(c["status"] == "pass" for c in checks),
           failed=sum(c["status"] == "fail" for c in checks),
           skipped=sum(c["status"] == "skipped" for c in checks), checks=checks)
print(json.dumps(out, indent=2))
PY
  cat "$WORK/summary.json"
  [[ -z $OUT ]] || cp "$WORK/summary.json" "$OUT"
  python3 -c 'import json,sys; sys.exit(0 if json.load(open(sys.argv[1]))["failed"] == 0 else 1)' "$WORK/summary.json"
  exit $?
}

# ------------------------------------------------------------------ the machine
# LG_GPU_CHECK_LIBCUDA: another libcuda.so.1 (the tests' stand-in driver, to test
# this script itself without a GPU).
LIBCUDA=${LG_GPU_CHECK_LIBCUDA:-$(ldconfig -p 2>/dev/null | awk '/libcuda\.so\.1 .*x86-64/ {print $NF; exit}')}
DRIVER_DIR=""
STANDIN=0
if [[ -n $LIBCUDA ]]; then
  LIBCUDA=$(readlink -f "$LIBCUDA")
  DRIVER_DIR=$(dirname "$LIBCUDA")
  # not grep -q: it stops reading at the first match, nm then dies of SIGPIPE, and
  # pipefail makes the whole test fail (seen once the stand-in had more symbols)
  nm -D "$LIBCUDA" 2>/dev/null | grep ' standin_calls$' >/dev/null && STANDIN=1
fi
if [[ -n ${LG_GPU_CHECK_LIBCUDA:-} ]]; then
  LD_LIBRARY_PATH=$DRIVER_DIR${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  export LD_LIBRARY_PATH
fi
NVCC=${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
[[ -x $NVCC ]] || NVCC=""
CUDA_HOME=""
[[ -z $NVCC ]] || CUDA_HOME=$(cd "$(dirname "$NVCC")/.." && pwd)
GPU=none
if ((!STANDIN)) && [[ -n $LIBCUDA ]]; then
  GPU=$(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader -i 0 2>/dev/null || echo "unknown")
fi
HAVE_GPU=0
((STANDIN)) || [[ -z $LIBCUDA ]] || HAVE_GPU=1
NOGPU="no GPU"
((STANDIN)) && NOGPU="no GPU (the tests' stand-in driver: the CUDA runtime cannot allocate on it)"
[[ -n $LIBCUDA ]] || NOGPU="no GPU: no NVIDIA driver (libcuda.so.1 not found by ldconfig -p)"
python3 -c 'import json,sys; json.dump({"gpu": sys.argv[1], "nvcc": sys.argv[2], "libcuda": sys.argv[3],
  "standin": sys.argv[4] == "1", "host": sys.argv[5]}, open(sys.argv[6], "w"))' \
  "$GPU" "$([[ -n $NVCC ]] && "$NVCC" --version 2>/dev/null | tail -1)" "$LIBCUDA" "$STANDIN" "$(uname -n)" \
  "$WORK/facts.json"
log "GPU: $GPU; driver ${LIBCUDA:-none}; toolkit ${CUDA_HOME:-none}"

# The stand-in's companions: NVML fed by the stand-in driver, CUPTI for --cuda-um.
if ((STANDIN)); then
  export LEAKGUARD_NVML=$BUILD/tests/libfake_nvml.so LEAKGUARD_FAKE_NVML=$WORK/nvml.txt
  export LG_STANDIN_NVML_FILE=$WORK/nvml.txt LG_STANDIN_CTX_OVERHEAD=$((300 << 20))
  export LEAKGUARD_CUPTI=$BUILD/tests/cuda/cupti/libcupti.so
fi

# ------------------------------------------------------------------ build
LG=$BUILD/bin/leakguard
if [[ ! -x $LG || ! -e $BUILD/lib/libleakguard.so ]]; then
  log "building leakguard in $BUILD"
  { cmake -S "$ROOT" -B "$BUILD" -DCMAKE_BUILD_TYPE=RelWithDebInfo &&
    timeout 300 cmake --build "$BUILD" -j"$(nproc)"; } >"$WORK/cmake.log" 2>&1
fi
if [[ -x $LG && -e $BUILD/lib/libleakguard.so ]]; then
  record "build: leakguard" pass "{\"build\": \"$BUILD\"}"
else
  record "build: leakguard" fail "$(tail -20 "$WORK/cmake.log" 2>/dev/null)"
  finish
fi
T_CHECKS=$SECONDS

# build_prog NAME COMMAND...: records the build; 0 when built
build_prog() {
  local name=$1
  shift
  if timeout 180 "$@" >"$WORK/build-$name.log" 2>&1; then
    record "build: $name" pass "{}"
  else
    record "build: $name" fail "$(tail -8 "$WORK/build-$name.log")"
    return 1
  fi
}

ARCH=()
((HAVE_GPU)) && ARCH=(-arch=native)
HAVE_STATIC=0 HAVE_SHARED=0 HAVE_DRIVER=0 HAVE_PTX=0
if [[ -n $NVCC ]]; then
  log "nvcc ${ARCH[*]:-(default arch)}: gpu_prog (static and shared cudart), touch.ptx"
  # the three nvcc builds in parallel (each takes a while)
  (build_prog "gpu_prog (static cudart)" "$NVCC" "${ARCH[@]}" -g -O2 -cudart static -o "$WORK/gpu_prog_static" \
    "$SRC/gpu_prog.cu") &
  (build_prog "gpu_prog (shared cudart)" "$NVCC" "${ARCH[@]}" -g -O2 -cudart shared \
    -Xlinker "-rpath=$CUDA_HOME/lib64" -o "$WORK/gpu_prog_shared" "$SRC/gpu_prog.cu") &
  (build_prog "touch.ptx" "$NVCC" "${ARCH[@]}" --ptx -o "$WORK/touch.ptx" "$SRC/touch.cu") &
  wait
  [[ -x $WORK/gpu_prog_static ]] && HAVE_STATIC=1
  [[ -x $WORK/gpu_prog_shared ]] && HAVE_SHARED=1
  [[ -s $WORK/touch.ptx ]] && HAVE_PTX=1
else
  skip "build: gpu_prog" "no CUDA toolkit: nvcc not found (set NVCC)"
fi
if [[ -n $LIBCUDA ]]; then
  build_prog "gpu_driver (gcc, -lcuda)" gcc -O2 -g -o "$WORK/gpu_driver" "$SRC/gpu_driver.c" "$LIBCUDA" -ldl &&
    HAVE_DRIVER=1
else
  skip "build: gpu_driver" "$NOGPU"
fi

# ------------------------------------------------------------------ helpers
# lgrun DB ARGS... : leakguard run into $WORK/DB (stdout/stderr in $WORK/DB.out/.err)
lgrun() {
  local db=$1
  shift
  timeout -k 10 $((SECS * 4 + 60)) "$LG" run --quiet --force --interval 0.2 --output "$WORK/$db" "$@" \
    >"$WORK/$db.out" 2>"$WORK/$db.err"
}
runfail() { echo "run failed (exit $1): $(tail -4 "$WORK/$2.err" | tr '\n' ' ')"; }

# verdict NAME DB SOURCE MARKER EXPECT(leak|no-leak): the rank-1 suspect's site is the
# marked line (the suspect's "site": for a Python program the Python line), device
verdict() {
  local detail
  detail=$(python3 - "$LG" "$WORK/$2" "$3" "$4" "$5" 2>&1 <<'PY' || echo '{"ok": false, "error": "evaluation failed"}'
import json, os, re, subprocess, sys
lg, db, src, marker, expect = sys.argv[1:]
p = subprocess.run([lg, "report", db, "--format", "json"], capture_output=True, text=True, timeout=120)
try:
    rep = json.loads(p.stdout)
except ValueError:
    print(json.dumps({"ok": False, "error": "no JSON report", "stderr": p.stderr[-500:]}))
    sys.exit(0)
pat = re.compile(r"(/\*\s*%s\s*\*/|#\s*%s(\s|$))" % (re.escape(marker), re.escape(marker)))
line = next((i + 1 for i, l in enumerate(open(src)) if pat.search(l)), None)
d = {"verdict": rep.get("verdict"), "expect": expect, "marker_line": line,
     "suspects": len(rep.get("suspects") or [])}
ok = rep.get("verdict") == expect and line is not None
if expect == "leak" and rep.get("suspects"):
    s = rep["suspects"][0]
    site = s.get("site") or {}
    d.update(rank1_site="%s:%s %s" % (os.path.basename(site.get("file") or ""), site.get("line"), site.get("function")),
             space=s.get("space"), device=s.get("device"), growth_bytes_per_s=s.get("growth_bytes_per_s"),
             time_to_oom_s=s.get("time_to_oom_s"), live_bytes=s.get("live_bytes"),
             frames=["%s (%s:%s)" % (f.get("function"), os.path.basename(f.get("file") or ""), f.get("line"))
                     for f in (s.get("frames") or [])[:6]])
    ok = ok and os.path.basename(site.get("file") or "") == os.path.basename(src) and site.get("line") == line \
        and s.get("space") == "device" and s.get("device") == 0
elif expect == "no-leak" and rep.get("suspects"):
    d["suspect_sites"] = [(s.get("site") or {}).get("function") for s in rep["suspects"][:3]]
g = (rep.get("gpus") or [{}])[0]
d["gpu"] = {k: g.get(k) for k in ("device_bytes", "peak_device_bytes", "total_bytes", "contexts_created")}
d["cuda_notes"] = rep.get("cuda_notes")
print(json.dumps({"ok": ok, **d}))
PY
)
  judge "$1" "$detail"
}

# exact NAME DB SOURCE PROGRAM_OUT "MARKER:SPACE:BYTES_KEY:BLOCKS_KEY ...": for each
# marked line, the most its stacks held at once (max over snapshots; the runtime
# frees everything at exit) against what the program printed
exact() {
  local detail
  detail=$(python3 - "$WORK/$2" "$3" "$WORK/$4" "$5" 2>&1 <<'PY' || echo '{"ok": false, "error": "evaluation failed"}'
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
        SELECT st.space, c.device, max(s.live_bytes), max(s.live_blocks) FROM samples s
        JOIN stacks st ON st.proc=s.proc AND st.stack=s.stack
        LEFT JOIN cuda_stacks c ON c.proc=s.proc AND c.stack=s.stack
        WHERE EXISTS (SELECT 1 FROM frames f WHERE f.proc=s.proc AND f.stack=s.stack AND f.line=? AND f.file LIKE ?)
        GROUP BY s.proc, s.stack""", (line, "%" + os.path.basename(src))).fetchall()
    got = dict(space=sorted({r[0] for r in rows}), device=sorted({r[1] for r in rows}),
               bytes=sum(r[2] for r in rows), blocks=sum(r[3] for r in rows))
    want = dict(space=[space], device=[0], bytes=int(kv.get(bkey, -1)), blocks=int(kv.get(nkey, -1)))
    res[marker] = dict(got=got, want=want)
    ok = ok and got == want
print(json.dumps({"ok": ok, "sites": res}))
PY
)
  judge "$1" "$detail"
}

# leakcheck NAME DB SOURCE MARKER EXPECT -- COMMAND...
leakcheck() {
  local name=$1 db=$2 src=$3 marker=$4 expect=$5 rc
  shift 6
  budget "$name" $((SECS + 15)) || return 0
  lgrun "$db" -- "$@"
  rc=$?
  if ((rc == 0)); then verdict "$name" "$db" "$src" "$marker" "$expect"; else record "$name" fail "$(runfail $rc "$db")"; fi
}

# exactcheck NAME DB SOURCE SPECS -- COMMAND...
exactcheck() {
  local name=$1 db=$2 src=$3 specs=$4 rc
  shift 5
  budget "$name" 20 || return 0
  lgrun "$db" -- "$@"
  rc=$?
  if ((rc == 0)); then exact "$name" "$db" "$src" "$db.out" "$specs"; else record "$name" fail "$(runfail $rc "$db")"; fi
}

# nvmlcheck NAME DB: NVML's figure for the process >= recorded; the untracked bytes
nvmlcheck() {
  local detail
  if [[ ! -e $WORK/$2 ]]; then
    skip "$1" "no database: its run did not take place"
    return
  fi
  detail=$("$LG" report "$WORK/$2" --format json 2>/dev/null | python3 -c '
import json, sys
r = json.load(sys.stdin)
g = (r.get("gpus") or [{}])[0]
n = g.get("nvml") or {}
ok = bool(n) and n.get("process_bytes", 0) >= (g.get("device_bytes") or 0) and n.get("untracked_bytes", -1) >= 0 \
    and (g.get("peak_device_bytes") or 0) > 0
print(json.dumps({"ok": ok, "recorded_device_bytes": g.get("device_bytes"), "peak_device_bytes": g.get("peak_device_bytes"),
                  "nvml_process_bytes": n.get("process_bytes"), "untracked_bytes": n.get("untracked_bytes"),
                  "device_used_bytes": n.get("device_used_bytes"), "device_total_bytes": g.get("total_bytes"),
                  "nvml_status": r.get("nvml")}))' 2>&1) || detail='{"ok": false, "error": "no report"}'
  judge "$1" "$detail"
}

# umcheck NAME DB SITE_SUBSTRING: CUPTI's counters next to the managed site
umcheck() {
  local detail
  detail=$("$LG" report "$WORK/$2" --format json 2>/dev/null | python3 -c '
import json, sys
r = json.load(sys.stdin)
um = r.get("unified_memory") or []
ok = any(sys.argv[1] in u.get("site", "") and u.get("gpu_page_faults", 0) + u.get("cpu_page_faults", 0) > 0
         and u.get("bytes_to_device", 0) > 0 for u in um)
print(json.dumps({"ok": ok, "unified_memory": um, "cuda_notes": r.get("cuda_notes")}))' "$3" 2>&1) ||
    detail='{"ok": false, "error": "no report of the managed run"}'
  judge "$1" "$detail"
}

# ------------------------------------------------------------------ leaks, controls, exact
CU=$SRC/gpu_prog.cu
for v in static shared; do
  have=$HAVE_STATIC
  [[ $v == shared ]] && have=$HAVE_SHARED
  P=$WORK/gpu_prog_$v
  names=("cudart-$v: cudaMalloc leak at rank 1" "cudart-$v: cudaMallocAsync leak at rank 1"
    "cudart-$v: ring of buffers, no leak" "cudart-$v: exact device, pinned, managed")
  if ((!HAVE_GPU)); then
    for n in "${names[@]}"; do skip "$n" "$NOGPU"; done
    continue
  elif ((!have)); then
    for n in "${names[@]}"; do skip "$n" "gpu_prog ($v cudart) was not built"; done
    continue
  fi
  leakcheck "${names[0]}" "$v-leak.db" "$CU" LEAK:sync leak -- "$P" leak "$SECS"
  leakcheck "${names[1]}" "$v-async.db" "$CU" LEAK:async leak -- "$P" async "$SECS"
  leakcheck "${names[2]}" "$v-control.db" "$CU" LEAK:sync no-leak -- "$P" control "$SECS"
  exactcheck "${names[3]}" "$v-exact.db" "$CU" \
    "KEEP:exact:device:exact_bytes:exact_blocks KEEP:pinned:pinned:pinned_bytes:pinned_blocks KEEP:managed:managed:managed_bytes:managed_blocks" \
    -- "$P" exact
done
D=$SRC/gpu_driver.c
dnames=("driver API: cuMemAlloc_v2 leak at rank 1" "driver API: no leak" "driver API: exact device, pinned, managed")
if ((HAVE_DRIVER)); then
  leakcheck "${dnames[0]}" driver-leak.db "$D" LEAK:driver leak -- "$WORK/gpu_driver" leak "$SECS"
  leakcheck "${dnames[1]}" driver-control.db "$D" LEAK:driver no-leak -- "$WORK/gpu_driver" control "$SECS"
  exactcheck "${dnames[2]}" driver-exact.db "$D" \
    "KEEP:driver:device:exact_bytes:exact_blocks KEEP:driver_pinned:pinned:pinned_bytes:pinned_blocks KEEP:driver_managed:managed:managed_bytes:managed_blocks" \
    -- "$WORK/gpu_driver" exact
else
  for n in "${dnames[@]}"; do skip "$n" "gpu_driver was not built"; done
fi

# ------------------------------------------------------------------ NVML vs recorded
if ((HAVE_DRIVER)); then nvmlcheck "NVML timeline (driver API): process >= recorded, untracked named" driver-exact.db
else skip "NVML timeline (driver API): process >= recorded, untracked named" "gpu_driver was not built"; fi
if ((HAVE_GPU && HAVE_STATIC)); then nvmlcheck "NVML timeline (cudart): process >= recorded, untracked named" static-exact.db
else skip "NVML timeline (cudart): process >= recorded, untracked named" "$( ((HAVE_GPU)) && echo "gpu_prog was not built" || echo "$NOGPU")"; fi

# ------------------------------------------------------------------ cost
name="cost (cudart): 100 000 cudaMalloc/cudaFree pairs, recorded <= 1 us more than bare"
if ((!HAVE_GPU)); then skip "$name" "$NOGPU"
elif ((!HAVE_STATIC)); then skip "$name" "gpu_prog was not built"
elif budget "$name" 60; then
  bare=$(timeout 120 "$WORK/gpu_prog_static" pairs 100000 2>"$WORK/pairs-bare.err" | sed -n 's/.*ns_per_pair=\([0-9.]*\).*/\1/p')
  lgrun pairs.db -- "$WORK/gpu_prog_static" pairs 100000
  rec=$(sed -n 's/.*ns_per_pair=\([0-9.]*\).*/\1/p' "$WORK/pairs.db.out")
  judge "$name" "$(python3 -c 'import json,sys
b, r = float(sys.argv[1] or 0), float(sys.argv[2] or 0)
print(json.dumps({"ok": b > 0 and r > 0 and r - b <= 1000, "bare_ns_per_pair": b, "recorded_ns_per_pair": r,
                  "difference_ns": round(r - b, 1)}))' "${bare:-0}" "${rec:-0}")"
fi
name="cost (driver API, bench/cuda_cost.sh): cuMemAlloc/cuMemFree and async pairs, recorded <= 1 us more than bare"
if ((!HAVE_DRIVER)); then skip "$name" "no driver"
elif [[ ! -x $BUILD/bench/cuda_cost ]]; then skip "$name" "bench/cuda_cost not built in $BUILD"
elif budget "$name" 90; then
  # DRIVER_DIR: the directory of the driver under test (bench/cuda_cost.sh's header)
  # (the stand-in's NVML file is written at every call: not while timing)
  if env -u LG_STANDIN_NVML_FILE DRIVER_DIR="$DRIVER_DIR" REPS=3 PAIRS="${LG_GPU_PAIRS:-20000}" timeout 240 \
    "$ROOT/bench/cuda_cost.sh" "$BUILD" >"$WORK/cuda_cost.md" 2>"$WORK/cuda_cost.err"; then
    # On the stand-in the figures are reported, not judged: its calls cost nanoseconds,
    # so the ratio is the CI machine's load (it failed beside the flake hunt at +1 035 ns
    # with load 11); timing belongs in benchmarks. On a GPU the budget is judged.
    judge "$name" "$(python3 - "$WORK/cuda_cost.md" "$STANDIN" <<'PY'
import json, re, sys
rows = {}
for l in open(sys.argv[1]):
    m = re.match(r"\|\s*(bare|preload|recorded)\s*\|\s*([\d.]+)\s*\|\s*([+-]?[\d.]+) ns\s*\|\s*([\d.]+)\s*\|\s*([+-]?[\d.]+) ns", l)
    if m:
        rows[m.group(1)] = dict(sync_ns=float(m.group(2)), sync_vs_bare_ns=float(m.group(3)),
                                async_ns=float(m.group(4)), async_vs_bare_ns=float(m.group(5)))
r = rows.get("recorded", {})
judged = sys.argv[2] != "1"
within = bool(r) and r["sync_vs_bare_ns"] <= 1000 and r["async_vs_bare_ns"] <= 1000
ok = len(rows) == 3 and (within or not judged)
print(json.dumps({"ok": ok, "judged": judged, "within_budget": within, "modes": rows,
                  "table": open(sys.argv[1]).read()}))
PY
)"
  else
    record "$name" fail "bench/cuda_cost.sh failed: $(tail -4 "$WORK/cuda_cost.err" | tr '\n' ' ')"
  fi
fi

# ------------------------------------------------------------------ Unified Memory counters
name="Unified Memory (driver API): page faults and migrations next to the managed site"
if ! "$LG" run --help 2>&1 | grep -- --cuda-um >/dev/null; then skip "$name" "leakguard run has no --cuda-um"
elif ((!HAVE_DRIVER)); then skip "$name" "gpu_driver was not built"
elif ((!HAVE_PTX)) && ((HAVE_GPU)); then skip "$name" "touch.ptx was not built (no nvcc)"
elif budget "$name" 30; then
  ptx=$WORK/touch.ptx
  [[ -s $ptx ]] || { echo "// stand-in: any file" >"$ptx"; }
  lgrun um-driver.db --cuda-um -- "$WORK/gpu_driver" managed "$ptx"
  rc=$?
  if ((rc == 0)); then umcheck "$name" um-driver.db "um_buffer"; else record "$name" fail "$(runfail $rc um-driver.db)"; fi
fi
name="Unified Memory (cudart): page faults and migrations next to the managed site"
if ((!HAVE_GPU)); then skip "$name" "$NOGPU"
elif ((!HAVE_STATIC)); then skip "$name" "gpu_prog was not built"
elif budget "$name" 30; then
  lgrun um.db --cuda-um -- "$WORK/gpu_prog_static" managed
  rc=$?
  if ((rc == 0)); then umcheck "$name" um.db "gpu_prog.cu"; else record "$name" fail "$(runfail $rc um.db)"; fi
fi

# ------------------------------------------------------------------ PyTorch
T=$SRC/torch_leak.py
tnames=("torch (caching allocator): leak at the Python line" "torch backend:cudaMallocAsync: leak at the Python line"
  "torch: no leak" "torch: report shows torch.cuda.memory_allocated/reserved per device")
if ((!HAVE_GPU)); then
  for n in "${tnames[@]}"; do skip "$n" "$NOGPU"; done
elif ! timeout 120 python3 -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)' >/dev/null 2>&1; then
  for n in "${tnames[@]}"; do skip "$n" "no CUDA torch installed (python3 -c 'import torch')"; done
else
  leakcheck "${tnames[0]}" torch-leak.db "$T" LEAK:torch leak -- python3 "$T" leak "$SECS"
  leakcheck "${tnames[1]}" torch-async.db "$T" LEAK:torch leak -- \
    env PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync python3 "$T" leak "$SECS"
  leakcheck "${tnames[2]}" torch-control.db "$T" LEAK:torch no-leak -- python3 "$T" control "$SECS"
  if [[ -e $WORK/torch-leak.db ]]; then
    judge "${tnames[3]}" "$("$LG" report "$WORK/torch-leak.db" --format json 2>/dev/null | python3 -c '
import json, re, sys
r = json.load(sys.stdin)
g = next((g for g in (r.get("gpus") or []) if g.get("device") == 0), {})
t = {k: g.get(k) for k in ("torch_allocated_bytes", "torch_reserved_bytes", "torch_peak_reserved_bytes")}
out = open(sys.argv[1]).read()
m = re.search(r"allocated=(\d+) reserved=(\d+)", out)
end = [int(x) for x in m.groups()] if m else None
# the figures read at exit are the program last ones (it prints them just before)
ok = t["torch_allocated_bytes"] is not None and end is not None and t["torch_allocated_bytes"] == end[0] \
    and t["torch_reserved_bytes"] == end[1] and end[1] >= end[0] > 0
print(json.dumps({"ok": ok, "report": t, "program_end": end}))' "$WORK/torch-leak.db.out" 2>&1)"
  else
    skip "${tnames[3]}" "no database of the torch leak run"
  fi
fi

# ------------------------------------------------------------------ liblgpool (issue #16)
# The generational pool (docs/pool.md) through its pluggable-allocator ABI on the
# driver (also on the stand-in), then as torch's CUDAPluggableAllocator for a short
# training run (GPU and a CUDA torch >= 2.0 only).
POOLLIB=$BUILD/lib/liblgpool.so
PCHK=$ROOT/tests/pool/gpu_pool_check.py
name="liblgpool: reuse on the stream, trims to zero (driver)"
if [[ ! -e $POOLLIB ]]; then skip "$name" "liblgpool.so was not built"
elif [[ -z $LIBCUDA ]]; then skip "$name" "$NOGPU"
elif budget "$name" 30; then
  judge "$name" "$(timeout 60 python3 "$PCHK" "$POOLLIB" abi 2>&1 | tail -1)"
fi
name="liblgpool: torch CUDAPluggableAllocator training"
if [[ ! -e $POOLLIB ]]; then skip "$name" "liblgpool.so was not built"
elif ((!HAVE_GPU)); then skip "$name" "$NOGPU"
elif ! timeout 120 python3 -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)' >/dev/null 2>&1; then
  skip "$name" "no CUDA torch installed (python3 -c 'import torch')"
elif budget "$name" 90; then
  judge "$name" "$(timeout 120 python3 "$PCHK" "$POOLLIB" torch 2>&1 | tail -1)"
fi

finish
