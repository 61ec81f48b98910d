#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
#
# run_recorder.sh - the recorder benchmark of issue #2 (not a test). Prints markdown.
#
#   bench/run_recorder.sh [BUILD_DIR]          (default: <repo>/build-bench)
#
# 1. churn (4 threads, 16 B-4 KiB, 1024-slot working set per thread, fixed op count):
#    bare, leakguard full, leakguard --sample 524288, heaptrack, valgrind (memcheck),
#    plus "preload only" (libleakguard.so without a collector: every call passed through,
#    no header, nothing recorded);
#    REPS repetitions, interleaved (rep 1 of every tool, then rep 2, ...); median wall
#    time, CPU time and peak RSS, each as a ratio to bare. Each round also runs
#    churn --ops 1 under every tool: the fixed start/exit cost of the tool.
# 2. a realistic program: tests/scenarios/churn_leak --seconds 5 (paced at its normal
#    request rate, so wall time is fixed by design: compare CPU time).
# 3. recorder memory per live block: churn --live N --size 64, RSS under leakguard
#    minus bare (the shared region's pages count in the target's RSS as RssShmem) / N.
# 4. micro benchmarks: micro_transport (pipe vs shared memory), micro_unwind (stack
#    walkers; recorder cost per allocation on a stack-cache hit and a forced miss).
#
# Environment: REPS (5), SLOW_REPS (heaptrack/valgrind repetitions, default 3),
#   OPS (allocations per churn thread, 8000000), THREADS (4), REAL_REPS (3),
#   REAL_SECONDS (5), LIVE (1000000), SKIP_SLOW=1 (no heaptrack/valgrind),
#   OUT (also write the markdown to this file).
# Needs the Debian packages time, heaptrack, valgrind (installed if missing, as root).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD=${1:-$ROOT/build-bench}

missing=()
for p in time heaptrack valgrind; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "installing: ${missing[*]}" >&2
  apt-get install -y "${missing[@]}" >&2
fi

cmake -S "$ROOT" -B "$BUILD" -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$BUILD" -j2 --target leakguard leakguard-cli churn micro_transport micro_unwind \
  churn_leak >/dev/null

exec /usr/bin/python3 - "$BUILD" <<'PY'
import os, re, shutil, statistics, subprocess, sys, tempfile, time

B = sys.argv[1]
LG = f"{B}/bin/leakguard"
LIB = f"{B}/lib/libleakguard.so"
CHURN = f"{B}/bench/churn"
REAL = f"{B}/tests/scenarios/churn_leak"
MT = f"{B}/bench/micro_transport"
MU = f"{B}/bench/micro_unwind"
env_i = lambda k, d: int(os.environ.get(k, d))
REPS = env_i("REPS", 5)
SLOW_REPS = env_i("SLOW_REPS", 3)
OPS = env_i("OPS", 8000000)
THREADS = env_i("THREADS", 4)
REAL_REPS = env_i("REAL_REPS", 3)
REAL_SECONDS = env_i("REAL_SECONDS", 5)
LIVE = env_i("LIVE", 1000000)
SKIP_SLOW = os.environ.get("SKIP_SLOW") == "1"
TMP = tempfile.mkdtemp(prefix="lg-recbench-")
out_lines = []

def emit(s=""):
    print(s, flush=True)
    out_lines.append(s)

def sh(cmd):
    return subprocess.run(cmd, shell=True, capture_output=True, text=True).stdout.strip()

def loadavg():
    return open("/proc/loadavg").read().split()[:3]

# ---------------------------------------------------------------- tools
def tool_prefix(tool):
    """argv prefix and environment for one tool; files go to TMP and are removed."""
    db = f"{TMP}/run.db"
    if tool == "bare":
        return [], {}
    if tool == "preload only":
        return [], {"LD_PRELOAD": LIB}
    if tool == "leakguard full":
        return [LG, "run", "-q", "--force", "-o", db, "--"], {}
    if tool == "leakguard --sample 524288":
        return [LG, "run", "-q", "--force", "--sample", "524288", "-o", db, "--"], {}
    if tool == "heaptrack":
        return ["heaptrack", "-o", f"{TMP}/ht"], {}
    if tool == "valgrind":
        return ["valgrind", "-q"], {}
    raise ValueError(tool)

def cleanup():
    for f in os.listdir(TMP):
        if f.startswith(("run.db", "ht")):
            os.unlink(os.path.join(TMP, f))

def is_target(pid, exe):
    try:
        e = os.readlink(f"/proc/{pid}/exe")
    except OSError:
        return False
    return e == exe or os.path.basename(e).startswith("memcheck-")

def hwm(pid):
    try:
        for line in open(f"/proc/{pid}/status"):
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0

def cpu_ticks(pid):
    try:
        f = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
        return int(f[11]) + int(f[12])  # utime + stime
    except (OSError, IndexError, ValueError):
        return 0

TICK = os.sysconf("SC_CLK_TCK")

def run(tool, argv, poll_exe=None):
    """Runs argv under tool via /usr/bin/time. Returns wall (s), cpu (user+sys of the
    whole process tree), tree_rss (kB, largest single process), target_hwm (kB, polled
    VmHWM of the target's process when poll_exe is given), output."""
    pre, extra = tool_prefix(tool)
    cleanup()
    tf = f"{TMP}/time.txt"
    env = dict(os.environ, **extra)
    cmd = ["/usr/bin/time", "-f", "%e %U %S %M", "-o", tf] + pre + argv
    t0 = time.monotonic()
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    peak = 0
    ticks = {}
    if poll_exe:
        # Poll the target's peak RSS (VmHWM is monotonic) and CPU time every 20 ms.
        while p.poll() is None:
            for d in os.listdir("/proc"):
                if d.isdigit() and is_target(d, poll_exe):
                    peak = max(peak, hwm(d))
                    ticks[d] = max(ticks.get(d, 0), cpu_ticks(d))
            time.sleep(0.02)
    out, _ = p.communicate()
    wall = time.monotonic() - t0
    if p.returncode != 0:
        sys.exit(f"run failed ({p.returncode}): {' '.join(cmd)}\n{out[-3000:]}")
    e, u, s, m = open(tf).read().split()[-4:]
    cleanup()
    return {"wall": wall, "cpu": float(u) + float(s), "tree_rss": int(m), "target_hwm": peak,
            "target_cpu": sum(ticks.values()) / TICK, "out": out}

def kv(out, prefix):
    for line in out.splitlines():
        if line.startswith(prefix):
            return dict(x.split("=", 1) for x in line.split()[1:] if "=" in x)
    sys.exit(f"no '{prefix}' line in:\n{out[-3000:]}")

med = statistics.median

# ---------------------------------------------------------------- machine
emit("## Machine")
emit()
emit("```")
emit(f"$ nproc\n{sh('nproc')}")
emit(f"$ lscpu | head -n 14\n{sh('lscpu | head -n 14')}")
emit(f"$ uname -r\n{sh('uname -r')}")
emit(f"$ free -g | head -2\n{sh('free -g | head -2')}")
htv = sh("dpkg-query -W -f='${Version}' heaptrack")
emit(f"heaptrack {htv}, valgrind {sh('valgrind --version')}, "
     f"glibc {sh('ldd --version | head -1')}")
emit(f"load average at start: {' '.join(loadavg())}")
emit("```")
emit()

# ---------------------------------------------------------------- 1. churn
tools = ["bare", "preload only", "leakguard full", "leakguard --sample 524288"]
if not SKIP_SLOW:
    tools += ["heaptrack", "valgrind"]
churn = [CHURN, "--threads", str(THREADS), "--ops", str(OPS), "--ws", "1024", "--seed", "1"]
empty = [CHURN, "--threads", str(THREADS), "--ops", "1", "--ws", "1024", "--seed", "1"]
res = {t: [] for t in tools}
fixed = {t: [] for t in tools}
loads = []
for rep in range(max(REPS, SLOW_REPS)):
    for t in tools:
        slow = t in ("heaptrack", "valgrind")
        if rep >= (SLOW_REPS if slow else REPS):
            continue
        r = run(t, churn)
        r["kv"] = kv(r["out"], "churn:")
        res[t].append(r)
        fixed[t].append(run(t, empty)["wall"])
        print(f"  churn rep {rep + 1} {t}: wall {r['wall']:.2f}s", file=sys.stderr, flush=True)
    loads.append(loadavg()[0])

emit(f"## Churn: {THREADS} threads x {OPS} allocations, 16 B-4 KiB, 1024 live slots per thread")
emit()
emit(f"`{' '.join(c.replace(B, 'build-bench') for c in churn)}`; medians of {REPS} runs "
     f"({SLOW_REPS} for heaptrack and valgrind), interleaved; 1-min load average after each round: {' '.join(loads)}")
emit()
emit("| tool | runs | wall s | wall / bare | fixed s (--ops 1) | (wall - fixed) / (bare - fixed) | allocs/s (churn's own timer) | timer / bare | CPU s (all processes) | CPU / bare | target peak RSS MB | RSS / bare | largest process RSS MB |")
emit("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
base = res["bare"]
bw, bc, bh = med([r["wall"] for r in base]), med([r["cpu"] for r in base]), med([int(r["kv"]["VmHWM_kB"]) for r in base])
bf = med(fixed["bare"])
baps = med([float(r["kv"]["allocs_per_s"]) for r in base])
for t in tools:
    rs = res[t]
    w, c = med([r["wall"] for r in rs]), med([r["cpu"] for r in rs])
    h = med([int(r["kv"]["VmHWM_kB"]) for r in rs])
    aps = med([float(r["kv"]["allocs_per_s"]) for r in rs])
    tr = med([r["tree_rss"] for r in rs])
    f = med(fixed[t])
    emit(f"| {t} | {len(rs)} | {w:.2f} | **{w / bw:.2f}x** | {f:.2f} | {(w - f) / (bw - bf):.2f}x | {aps / 1e6:.1f} M | "
         f"{baps / aps:.2f}x | {c:.2f} | {c / bc:.2f}x | {h / 1024:.1f} | **{h / bh:.2f}x** | {tr / 1024:.1f} |")
emit()
emit("Wall times of every run (s):")
emit()
for t in tools:
    emit(f"- {t}: " + " ".join(f"{r['wall']:.2f}" for r in res[t]))
emit()

# ---------------------------------------------------------------- 2. realistic
rtools = [t for t in tools if t != "preload only"]
real = [REAL, "--seconds", str(REAL_SECONDS)]
rres = {t: [] for t in rtools}
for rep in range(REAL_REPS):
    for t in rtools:
        r = run(t, real, poll_exe=os.path.realpath(REAL))
        r["kv"] = kv(r["out"], "churn_leak:")
        rres[t].append(r)
        print(f"  real rep {rep + 1} {t}: cpu {r['cpu']:.2f}s", file=sys.stderr, flush=True)
emit(f"## Realistic program: churn_leak --seconds {REAL_SECONDS} (default rate 20000 requests/s, paced)")
emit()
emit(f"`build-bench/tests/scenarios/churn_leak --seconds {REAL_SECONDS}`; medians of {REAL_REPS} interleaved runs. "
     "The program is paced, so its wall time is ~fixed: the cost shows in CPU time "
     "(target CPU: utime+stime of the target process, polled every 20 ms, 10 ms ticks; all processes: "
     "/usr/bin/time of the tool, i.e. target + collector / heaptrack_interpret). Target peak RSS: "
     "the target process's VmHWM, polled every 20 ms.")
emit()
emit("| tool | wall s | wall / bare | requests done | target CPU s | target CPU / bare | CPU s (all processes) | all CPU / bare | target peak RSS MB | RSS / bare |")
emit("|---|---|---|---|---|---|---|---|---|---|")
rb = rres["bare"]
rbw, rbc, rbh = med([r["wall"] for r in rb]), med([r["cpu"] for r in rb]), med([r["target_hwm"] for r in rb])
rbq = med([int(r["kv"]["requests"]) for r in rb])
rbt = med([r["target_cpu"] for r in rb])
for t in rtools:
    rs = rres[t]
    w, c, h = med([r["wall"] for r in rs]), med([r["cpu"] for r in rs]), med([r["target_hwm"] for r in rs])
    q = med([int(r["kv"]["requests"]) for r in rs])
    tc = med([r["target_cpu"] for r in rs])
    emit(f"| {t} | {w:.2f} | {w / rbw:.2f}x | {q} | {tc:.2f} | **{tc / rbt:.2f}x** | {c:.2f} | {c / rbc:.2f}x | "
         f"{h / 1024:.1f} | **{h / rbh:.2f}x** |")
emit()

# ---------------------------------------------------------------- 3. memory per live block
mtools = ["bare", "leakguard full", "leakguard --sample 524288"]
live = [CHURN, "--live", str(LIVE), "--size", "64"]
mres = {t: [] for t in mtools}
for rep in range(3):
    for t in mtools:
        r = run(t, live)
        mres[t].append(kv(r["out"], "churn:"))
emit(f"## Recorder memory per live block: {LIVE} live blocks of 64 B")
emit()
emit(f"`build-bench/bench/churn --live {LIVE} --size 64` (allocates and fills the blocks, then reads "
     "/proc/self/status); medians of 3 runs. VmRSS includes the shared region (RssShmem).")
emit()
emit("| tool | VmRSS MB | RssAnon MB | RssShmem kB | bytes per live block over bare |")
emit("|---|---|---|---|---|")
mb = med([int(k["VmRSS_kB"]) for k in mres["bare"]])
for t in mtools:
    ks = mres[t]
    v = med([int(k["VmRSS_kB"]) for k in ks])
    a = med([int(k["RssAnon_kB"]) for k in ks])
    s = med([int(k["RssShmem_kB"]) for k in ks])
    emit(f"| {t} | {v / 1024:.1f} | {a / 1024:.1f} | {s} | {'-' if t == 'bare' else f'**{(v - mb) * 1024 / LIVE:.1f}**'} |")
emit()

# ---------------------------------------------------------------- 4. micro benchmarks
emit("## Transport: 32-byte record per allocation (micro_transport)")
emit()
emit("Producer CPU ns per record (wall ns per record in brackets: first thread start to last thread end / "
     "all records). The reader is a separate process; 2 cores, so 4 threads share them.")
emit()
emit("| threads | pipe, write(2) per record | pipe, batched 4 KiB | shared memory, per-thread shard | shared memory, atomic add (one table) |")
emit("|---|---|---|---|---|")
for th, n in ((1, 2000000), (4, 1000000)):
    rows = {}
    for rep in range(3):
        o = subprocess.run([MT, "--threads", str(th), "--records", str(n)], capture_output=True, text=True, check=True).stdout
        for line in o.splitlines():
            d = dict(x.split("=", 1) for x in line.split()[1:])
            rows.setdefault(d["mode"], []).append((float(d["cpu_ns_per_record"]), float(d["wall_ns_per_record"])))
    cells = []
    for m in ("pipe-1", "pipe-4k", "shm-plain", "shm-atomic"):
        cells.append(f"{med([c for c, w in rows[m]]):.1f} ({med([w for c, w in rows[m]]):.1f})")
    emit(f"| {th} | " + " | ".join(cells) + " |")
emit()

emit("## Stack capture (micro_unwind)")
emit()
walk = {}
for rep in range(3):
    o = subprocess.run([MU, "--walk", "--depth", "4,16,48", "--iters", "20000"], capture_output=True, text=True, check=True).stdout
    for line in o.splitlines():
        d = dict(x.split("=", 1) for x in line.split()[2:])
        cell = walk.setdefault(int(d["depth"]), {})
        v = (float(d["ns_per_walk"]), int(d["frames"]))
        cell[d["method"]] = min(cell.get(d["method"], v), v)
emit("In-process stack walks, no recorder: ns per walk, best of 3 runs (frames found). The D nested frames "
     "have frame pointers; main, libc and the thread start do not (Debian default).")
emit()
methods = ["libunwind-step", "unw_backtrace", "glibc-backtrace", "frame-pointer"]
emit("| nested frames | " + " | ".join(methods) + " |")
emit("|---|" + "---|" * len(methods))
for d in sorted(walk):
    emit(f"| {d} | " + " | ".join(f"{walk[d][m][0]:.0f} ({walk[d][m][1]})" for m in methods) + " |")
emit()
def alloc_rows(o, r):
    for line in o.splitlines():
        if line.startswith("micro_unwind: alloc"):
            d = dict(x.split("=", 1) for x in line.split()[2:])
            v = (float(d["hit_ns_per_pair"]), float(d["miss_ns_per_pair"]))
            old = r.get(int(d["depth"]), v)
            r[int(d["depth"])] = (min(old[0], v[0]), min(old[1], v[1]))
ab, al = {}, {}
for rep in range(3):
    alloc_rows(subprocess.run([MU, "--alloc", "--depth", "4,16,48", "--iters", "200000"], capture_output=True, text=True,
                              check=True).stdout, ab)
    alloc_rows(subprocess.run([LG, "run", "-q", "--force", "-o", f"{TMP}/run.db", "--", MU, "--alloc", "--depth", "4,16,48", "--iters",
                               "20000"], capture_output=True, text=True, check=True).stdout, al)
    cleanup()
emit("Recorder cost per allocation (malloc(32)+free pair from D nested frames, best of 3 runs; leakguard full "
     "mode minus bare):")
emit()
emit("| nested frames | bare ns/pair | leakguard, cache hit ns/pair | hit cost ns | leakguard, forced miss ns/pair | miss cost ns |")
emit("|---|---|---|---|---|---|")
for d in sorted(ab):
    b = ab[d][0]
    emit(f"| {d} | {b:.1f} | {al[d][0]:.1f} | {al[d][0] - b:.1f} | {al[d][1]:.0f} | {al[d][1] - ab[d][1]:.0f} |")
emit()
emit(f"load average at end: {' '.join(loadavg())}")

if os.environ.get("OUT"):
    open(os.environ["OUT"], "w").write("\n".join(out_lines) + "\n")
shutil.rmtree(TMP, ignore_errors=True)
PY
