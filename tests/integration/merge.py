#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""`leakguard merge -o OUT A.db B.db ...`: two ranks of a job recorded on their own
(late_leak: rank 0 healthy, rank 1 leaking), their hosts set to node-a and node-b in
the databases (as two machines would have recorded them; the test runs on one), merged
into one database whose report says the leak is on node-b, rank 1, with every process's
bytes as recorded. A merged database merges again; GPU tables are carried over; bad
input is refused in one line with nothing written."""
import json
import os
import shutil
import sqlite3

import lgtest


def set_host(db, host, note=None):
    con = sqlite3.connect(db)
    con.execute("UPDATE processes SET host = ?", (host,))
    con.execute("UPDATE labels SET value = ? WHERE key = 'host'", (host,))
    if note:  # a GPU table, as a process that used CUDA has (docs/cuda.md)
        con.execute("CREATE TABLE IF NOT EXISTS cuda_notes(proc INTEGER, note TEXT, PRIMARY KEY(proc, note))")
        con.execute("INSERT INTO cuda_notes SELECT proc, ? FROM processes", (note,))
    con.commit()
    con.close()


def q(db, sql, args=()):
    con = sqlite3.connect(db)
    try:
        return con.execute(sql, args).fetchall()
    finally:
        con.close()


def main():
    a = lgtest.parse_args()
    t = lgtest.Test("merge", a)
    site = t.site("late_leak.c")
    prog = t.bin("late_leak") if t.live else "late_leak"
    runs = []
    for rank, start, host in ((0, "100", "node-a"), (1, "1", "node-b")):
        env = dict(os.environ, RANK=str(rank), WORLD_SIZE="2", LOCAL_RANK="0")
        p = t.fx.run(host, lambda: t.lg_run([prog, "--seconds", "5", "--start", start], db=t.path("%s.db" % host),
                                             env=env))
        t.check(p.returncode == 0, "recorded rank %d" % rank, stderr=p.stderr[-2000:])
        set_host(p.db, host, note="cuMemImportFromShareableHandle: untracked" if rank == 1 else None)
        runs.append(p.db)
    out = t.path("job.db")
    p = t.run([a.leakguard, "merge", "-o", out] + runs)
    t.check(p.returncode == 0 and p.stderr == "", "merge: exit 0, quiet", exit=p.returncode, stderr=p.stderr)
    rep = t.report_json(out)
    hosts = sorted((r.get("host"), r.get("rank")) for r in rep["runs"])
    t.check(hosts == [("node-a", 0), ("node-b", 1)], "two processes, node-a rank 0 and node-b rank 1", runs=hosts)
    leaks = rep.get("leaks") or []
    t.check(len(leaks) == 1 and leaks[0].get("host") == "node-b" and leaks[0].get("process_rank") == 1,
            "one leak, on node-b, rank 1", leaks=leaks)
    t.check(rep["suspects"] and site.func_matches(rep["suspects"][0]["frames"][0]["function"])
            and rep["suspects"][0]["frames"][0]["line"] == site.line, "rank 1's suspect is the LEAK-SITE line",
            suspect=rep["suspects"][0] if rep["suspects"] else None)
    want = sorted(r for db in runs for r in q(db, "SELECT pid, final_live_bytes, peak_live_bytes FROM processes"))
    got = sorted(q(out, "SELECT pid, final_live_bytes, peak_live_bytes FROM processes"))
    t.check(got == want, "every process's pid and bytes as recorded", merged=got, inputs=want)
    n_in = sum(q(db, "SELECT count(*) FROM samples")[0][0] for db in runs)
    t.check(q(out, "SELECT count(*) FROM samples")[0][0] == n_in, "every sample row copied")
    src = sorted(v for (v,) in q(out, "SELECT value FROM labels WHERE key = 'source'"))
    t.check(src == sorted(runs), "each process has a source label with its file", labels=src)
    notes = q(out, "SELECT p.host, n.note FROM cuda_notes n JOIN processes p ON p.proc = n.proc")
    t.check(notes == [("node-b", "cuMemImportFromShareableHandle: untracked")],
            "the GPU table's rows follow their process", notes=notes)
    txt = t.run([a.leakguard, "report", out])
    t.check("pid %d on node-b (rank 1)" % leaks[0]["pid"] in txt.stdout if leaks else False,
            "text: the leak line names the host and the rank", stdout=txt.stdout[:3000])

    # a merged database merges again (with a copy of rank 0's file: another file)
    copy = t.path("node-c.db")
    shutil.copyfile(runs[0], copy)
    set_host(copy, "node-c")
    out2 = t.path("job2.db")
    p = t.run([a.leakguard, "merge", "-o", out2, out, copy])
    t.check(p.returncode == 0, "merge of a merged database and another", stderr=p.stderr)
    procs = q(out2, "SELECT proc, host FROM processes ORDER BY proc")
    t.check([h for _, h in procs] == ["node-a", "node-b", "node-c"] and len({pr for pr, _ in procs}) == 3,
            "three processes, renumbered", processes=procs)
    rep2 = t.report_json(out2)
    t.check(len(rep2.get("leaks") or []) == 1 and rep2["leaks"][0].get("host") == "node-b",
            "still one leak, on node-b", leaks=rep2.get("leaks"))

    # bad input: one line, status 2, nothing written
    damaged = lgtest.bad_databases(t, runs[1])
    future, trunc, foreign, text = (damaged[k] for k in ("future", "truncated", "foreign", "text"))
    bad = t.path("bad-out.db")
    cases = [("an input given twice", ["-o", bad, runs[0], runs[0]], "twice", True),
             ("the output among the inputs", ["-o", runs[0], runs[0], runs[1]], "itself", False),
             ("an output that exists", ["-o", out, runs[0]], "exists", False),
             ("a schema from the future", ["-o", bad, runs[0], future], "schema", True),
             ("a truncated database", ["-o", bad, runs[0], trunc], None, True),
             ("an SQLite database that is not leakguard's", ["-o", bad, runs[0], foreign], "not a leakguard", True),
             ("a text file", ["-o", bad, runs[0], text], "not a leakguard", True),
             ("a missing database", ["-o", bad, runs[0], t.path("missing.db")], None, True),
             ("no output", [runs[0], runs[1]], "-o", True),
             ("no input", ["-o", bad], None, True)]
    for what, argv, mention, check_absent in cases:
        p = t.run([a.leakguard, "merge"] + argv)
        lgtest.one_line_error(t, p, what, expect_rc=2, mention=[mention] if mention else None)
        if check_absent:
            t.check(not os.path.exists(bad), "%s: no output file" % what)
    t.check(q(runs[0], "SELECT count(*) FROM processes")[0][0] == 1, "the inputs are unchanged")
    t.check(json.dumps(t.report_json(out)["leaks"]) == json.dumps(leaks), "the existing output is unchanged")
    t.finish()


if __name__ == "__main__":
    main()
