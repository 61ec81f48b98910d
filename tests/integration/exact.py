#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Exactness test: the recorder's live bytes at exit equal what the program knows
it leaked.

The scenario (stress, sigalrm or lifecycle) is run twice under `leakguard run`:
with --leak 0 (baseline: only the C runtime's own leftovers, e.g. the stdout
buffer, are live at exit) and with --leak 1 (the program prints leaked_bytes=B
leaked_blocks=N). Then, exactly:
    final_live_bytes(leak 1) - final_live_bytes(leak 0) == B
    last snapshot live_blocks(leak 1) - (leak 0)        == N
and both runs exit 0 with no dropped records. Scenario-specific checks:
  stress     8 threads, millions of allocations (all allocation functions)
  sigalrm    the SIGALRM handler really ran at a high rate (no deadlock: the
             run must finish)
  mmap_regions  anonymous mmap regions split by munmap holes, trimmed, replaced by
             MAP_FIXED mappings, moved and resized by mremap, several unmapped by one
             call (the runs' live bytes include the mmap space)
  lifecycle  the baseline's live bytes at exit are ~0 (allocations made before
             main and freed after exit are accounted for), and its peak shows the
             constructor's allocations
Variants of the stress run:
  --under LIB    another allocator (e.g. jemalloc) is preloaded after libleakguard.so,
                 so the recorder must head every block (the word in front of a
                 foreign allocator's block means nothing); MALLOC_CONF=stats_print
                 proves jemalloc really served the blocks; --no-mmap leaves its own
                 arena mappings out. The exact checks above must all hold.
  --sample B     sampled mode: most blocks carry no header, recorded ones do, and
                 realloc moves blocks between the two kinds. Live bytes are then an
                 estimate: leak - baseline must be within SAMPLE_TOLERANCE of what the
                 program leaked (the statistical error here is ~2 %); blocks are not
                 compared. Mixing the two kinds wrongly crashes glibc or leaves the
                 counts far off.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import lgtest  # noqa: E402

RUNTIME_SLACK = 16 * 1024  # what the C runtime may keep at exit (stdio buffer 4 KiB, thread DTVs)
SAMPLE_TOLERANCE = 0.15


def extra(ap):
    ap.add_argument("--scenario", required=True, choices=("stress", "sigalrm", "lifecycle", "mmap_regions"))
    ap.add_argument("--arg", action="append", default=[])
    ap.add_argument("--under", help="allocator library preloaded after libleakguard.so")
    ap.add_argument("--sample", type=int, default=0, help="run with --sample B")


def one_run(t, exe, leak, args, opts):
    db = t.path("leak%d.db" % leak)
    extra, kw = [], {}
    if opts.sample:
        extra += ["--sample", str(opts.sample)]
    if opts.under:
        extra += ["--no-mmap"]
        env = dict(os.environ)
        env["LD_PRELOAD"] = opts.under
        env["MALLOC_CONF"] = "stats_print:true"
        kw["env"] = env
    p = t.lg_run([exe, "--leak", str(leak)] + args, db=db, extra=extra, timeout=110, **kw)
    if opts.under:
        t.check("jemalloc statistics" in p.stderr,
                "leak=%d: the target's blocks came from %s (its exit statistics)" % (leak, opts.under),
                stderr=p.stderr[-1500:])
    kv = lgtest.parse_kv(p.stdout, os.path.basename(exe) + ":")
    t.check(p.returncode == 0, "leak=%d: run exits 0 (the target's status)" % leak,
            exit=p.returncode, stderr=p.stderr[-2000:], stdout=p.stdout[-1500:])
    t.check(kv is not None and "leaked_bytes" in kv,
            "leak=%d: the program printed its leaked bytes" % leak, stdout=p.stdout[-1500:])
    if not os.path.exists(db):
        t.fatal("leak=%d: database written" % leak, db=db)
    rep = t.report_json(db)
    runs = rep["runs"]
    t.check(len(runs) == 1, "leak=%d: one recorded process" % leak, runs=runs)
    if not runs or kv is None:
        t.finish()
    run = runs[0]
    t.check(run.get("dropped_records") == 0, "leak=%d: no dropped records" % leak, run=run)
    t.check(run.get("exit_status") == 0 and not run.get("signal"),
            "leak=%d: runs[0] exit_status 0" % leak, run=run)
    # Blocks (and a cross-check of bytes) from the database's last snapshot.
    blocks = None
    try:
        procs = lgtest.db_query(db, "SELECT proc FROM processes WHERE pid=?", (run["pid"],))
        snap = lgtest.last_snapshot(db, procs[0][0]) if procs else None
        t.check(snap is not None, "leak=%d: database has snapshots for the process" % leak,
                procs=procs)
        if snap:
            t.check(snap[0] == run.get("final_live_bytes"),
                    "leak=%d: last snapshot live_bytes == runs[0].final_live_bytes" % leak,
                    snapshot=snap[0], json=run.get("final_live_bytes"))
            blocks = snap[1]
    except Exception as e:  # noqa: BLE001 - report any schema problem as a failure
        t.check(False, "leak=%d: database has processes/snapshots tables" % leak, error=str(e))
    return dict(kv=kv, run=run, blocks=blocks, report=rep, stdout=p.stdout)


def main():
    args = lgtest.parse_args(extra)
    t = lgtest.Test("exact-%s" % args.scenario, args)
    exe = t.bin(args.scenario)
    if args.under and not os.path.exists(args.under):
        t.fatal("allocator library installed (scripts/deps.sh installs libjemalloc2)", under=args.under)
    base = one_run(t, exe, 0, args.arg, args)
    leak = one_run(t, exe, 1, args.arg, args)
    lb, ln = int(leak["kv"]["leaked_bytes"]), int(leak["kv"]["leaked_blocks"])
    t.check(int(base["kv"]["leaked_bytes"]) == 0, "baseline run leaks nothing (program says)",
            kv=base["kv"])
    t.check(lb > 0 and ln > 0, "leak run leaks something (program says)", kv=leak["kv"])
    f0, f1 = base["run"].get("final_live_bytes"), leak["run"].get("final_live_bytes")
    if args.sample:
        t.check(isinstance(f0, int) and isinstance(f1, int)
                and abs((f1 - f0) - lb) <= SAMPLE_TOLERANCE * lb,
                "sampled: final live bytes, leak run - baseline, within %d %% of the bytes leaked"
                % int(SAMPLE_TOLERANCE * 100),
                leak_run=f1, baseline=f0, program_leaked=lb)
        t.check(base["run"].get("sample_bytes") == args.sample, "runs[0].sample_bytes is set",
                run=base["run"])
    else:
        # jemalloc links libstdc++, whose exception pool (71 KiB) lives for the run.
        slack = RUNTIME_SLACK + (96 * 1024 if args.under else 0)
        t.check(isinstance(f0, int) and 0 <= f0 <= slack,
                "baseline final live bytes are only the runtime's leftovers (0..%d)" % slack,
                final_live_bytes=f0)
        t.check(isinstance(f0, int) and isinstance(f1, int) and f1 - f0 == lb,
                "final live bytes: leak run - baseline == bytes the program leaked",
                leak_run=f1, baseline=f0, difference=(f1 - f0) if isinstance(f0, int) and isinstance(f1, int) else None,
                program_leaked=lb)
        if base["blocks"] is not None and leak["blocks"] is not None:
            t.check(leak["blocks"] - base["blocks"] == ln,
                    "live blocks at exit: leak run - baseline == blocks the program leaked",
                    leak_run=leak["blocks"], baseline=base["blocks"],
                    difference=leak["blocks"] - base["blocks"], program_leaked=ln)

    if args.scenario == "stress":
        allocs = int(leak["kv"].get("allocs", 0)) + int(leak["kv"].get("reallocs", 0))
        t.check(allocs >= 1000000, "stress made millions of allocation calls", allocs=allocs)
        t.check(leak["run"].get("peak_live_bytes", 0) >= f1, "peak >= final", run=leak["run"])
    elif args.scenario == "sigalrm":
        for r in (base, leak):
            n = int(r["kv"].get("signals", 0))
            t.check(n >= 2000, "SIGALRM handler ran at a high rate (>= 2000 times)", signals=n)
    elif args.scenario == "lifecycle":
        # The constructor keeps 100000 + 77777 bytes live during the whole of main.
        peak = base["run"].get("peak_live_bytes")
        t.check(isinstance(peak, int) and peak >= 177777,
                "peak live bytes include the constructor's allocations (>= 177777)", peak=peak)
    t.finish()


if __name__ == "__main__":
    main()
