#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Bad input gets a clear one-line error ("leakguard: ...") and a non-zero exit,
never a crash.

  --case cli      usage errors (exit 2), commands that do not exist (127) or cannot
                  be executed (126), unwritable output paths (98), `report` (text
                  and JSON) on files that are not leakguard databases, on truncated
                  ones, missing ones, one from a future schema, with bad options (2)
  --case preload  targets LD_PRELOAD cannot work on: a statically linked program
                  and a setuid program (126, the message says why)
"""
import os
import shutil
import sqlite3
import stat
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import lgtest  # noqa: E402
from lgtest import one_line_error  # noqa: E402


def extra(ap):
    ap.add_argument("--case", choices=("cli", "preload"), required=True)


def lg(t, *argv, timeout=60):
    return t.run([t.args.leakguard] + list(argv), timeout=timeout)


def case_cli(t):
    a = t.args
    ok_target = [t.bin("sawtooth"), "--seconds", "0.3"]
    db = t.path("x.db")

    # --- usage errors: exit 2
    # No arguments at all: the usage text (several lines) is fine, with exit 2.
    p = lg(t)
    t.check(p.returncode == 2 and p.stderr.strip(), "no arguments: usage on stderr, exit 2",
            exit=p.returncode, stderr=p.stderr[-1000:])
    usage = [
        ("unknown subcommand", ["frobnicate"]),
        ("run without a command", ["run", "--output", db]),
        ("run with an unknown option", ["run", "--no-such-option", "--"] + ok_target),
        ("--interval 0", ["run", "--interval", "0", "--output", db, "--"] + ok_target),
        ("--interval 0.01 (below 0.05)", ["run", "--interval", "0.01", "--output", db, "--"] + ok_target),
        ("--interval 3601", ["run", "--interval", "3601", "--output", db, "--"] + ok_target),
        ("--interval -1", ["run", "--interval", "-1", "--output", db, "--"] + ok_target),
        ("--interval abc", ["run", "--interval", "abc", "--output", db, "--"] + ok_target),
        ("--interval nan", ["run", "--interval", "nan", "--output", db, "--"] + ok_target),
        ("--interval without a value", ["run", "--interval"]),
        ("--depth 0", ["run", "--depth", "0", "--output", db, "--"] + ok_target),
        ("--depth 257", ["run", "--depth", "257", "--output", db, "--"] + ok_target),
        ("--depth 12x", ["run", "--depth", "12x", "--output", db, "--"] + ok_target),
        ("--sample -5", ["run", "--sample", "-5", "--output", db, "--"] + ok_target),
        ("--sample junk", ["run", "--sample", "junk", "--output", db, "--"] + ok_target),
        ("--limit junk", ["run", "--limit", "junk", "--output", db, "--"] + ok_target),
        ("--limit -1", ["run", "--limit", "-1", "--output", db, "--"] + ok_target),
        ("--lazy junk", ["run", "--lazy", "junk", "--output", db, "--"] + ok_target),
        ("--lazy 1M (no time)", ["run", "--lazy", "1M", "--output", db, "--"] + ok_target),
        ("--lazy 0,0.1", ["run", "--lazy", "0,0.1", "--output", db, "--"] + ok_target),
        ("--lazy 1M,0", ["run", "--lazy", "1M,0", "--output", db, "--"] + ok_target),
        ("report without a file", ["report"]),
    ]
    for what, argv in usage:
        p = lg(t, *argv)
        one_line_error(t, p, what, expect_rc=2)
    t.check(not os.path.exists(db), "no database is created by rejected command lines",
            db=db)

    # --- commands that do not exist / cannot run
    p = lg(t, "run", "--output", db, "--", "/nonexistent/dir/prog")
    one_line_error(t, p, "run on a missing path", expect_rc=127)
    p = lg(t, "run", "--output", db, "--", "leakguard-no-such-command-xyz")
    one_line_error(t, p, "run on a command not in PATH", expect_rc=127)
    notexec = t.path("notexec.sh")
    with open(notexec, "w") as f:
        f.write("#!/bin/sh\necho hi\n")
    os.chmod(notexec, 0o644)
    p = lg(t, "run", "--output", db, "--", notexec)
    one_line_error(t, p, "run on a file without execute permission", expect_rc=126)
    p = lg(t, "run", "--output", db, "--", t.tmp)
    one_line_error(t, p, "run on a directory", expect_rc=126)

    # --- unwritable output paths: exit 2 (the user's to fix), and the target is not started
    marker = t.path("target-ran")
    target = ["/bin/sh", "-c", "touch %s" % marker]
    os.mkdir(t.path("adir"))
    for what, out in (("--output in a missing directory", "/nonexistent/dir/out.db"),
                      ("--output is a directory", t.path("adir")),
                      ("--output under /proc", "/proc/leakguard-test.db")):
        p = lg(t, "run", "--quiet", "--output", out, "--", *target)
        one_line_error(t, p, what, expect_rc=2)
    t.check(not os.path.exists(marker), "the target is not started when the output is unwritable")

    # --- report on bad databases: exit 2
    good = t.path("good.db")
    p = t.lg_run(ok_target, db=good)
    if p.returncode != 0 or not os.path.exists(good):
        t.check(False, "a short run for the report cases works", exit=p.returncode,
                stderr=p.stderr[-1000:])
    empty = t.path("empty.db")
    open(empty, "w").close()
    cases = [("report on an empty file", empty), ("report on a directory", t.path("adir"))]
    if os.path.exists(good):
        # the damaged databases every command is tested with (lgtest.bad_databases)
        bad = lgtest.bad_databases(t, good)
        cases += [("report on a text file", bad["text"]),
                  ("report on a SQLite file that is not leakguard's", bad["foreign"]),
                  ("report on a missing file", bad["missing"]),
                  ("report on a database truncated to a third", bad["truncated"]),
                  ("report on a schema from the future (99)", bad["future"])]
        size = os.path.getsize(good)
        for frac in (0.5, 0.1):
            tr = t.path("truncated-%d.db" % int(frac * 100))
            with open(good, "rb") as src, open(tr, "wb") as dst:
                dst.write(src.read(max(1, int(size * frac))))
            cases.append(("report on a database truncated to %d%% (%d of %d bytes)"
                          % (int(frac * 100), int(size * frac), size), tr))
        garbage = t.path("garbage-header.db")
        with open(good, "rb") as src, open(garbage, "wb") as dst:
            data = bytearray(src.read())
            for i in range(100, len(data), 97):  # keep the header, corrupt the pages
                data[i] ^= 0x5A
            dst.write(data)
        cases.append(("report on a database with corrupted pages", garbage))
        # counters no recorder writes (issue #31: two INT64_MIN added overflowed in the
        # report, UBSan): refused, naming what is wrong; by diff and folded too
        for name, value in (("min", -(1 << 63)), ("max", (1 << 63) - 1)):
            crafted = t.path("crafted-%s.db" % name)
            shutil.copyfile(good, crafted)
            con = sqlite3.connect(crafted)
            con.execute("UPDATE samples SET live_bytes = ?", (value,))
            con.commit()
            con.close()
            cases.append(("report on a database whose live bytes are INT64_%s" % name.upper(), crafted))
    for what, path in cases:
        for fmt in ("text", "json", "folded"):
            p = lg(t, "report", path, "--format", fmt)
            one_line_error(t, p, "%s (--format %s)" % (what, fmt), expect_rc=2,
                           mention=["schema version 99"] if "future" in what else
                           ["impossible counters"] if "INT64" in what else None)
            t.check(p.stdout == "", "%s (--format %s): nothing on stdout" % (what, fmt), stdout=p.stdout[:300])
            t.check("not an error" not in p.stderr, "%s (--format %s): the error says what is wrong" % (what, fmt),
                    stderr=p.stderr)
        if "INT64" in what:
            p = lg(t, "diff", good, path)
            one_line_error(t, p, "diff with %s" % what[10:], expect_rc=2, mention=["impossible counters"])
    if os.path.exists(good):
        for what, argv in (("report --format xml", ["report", good, "--format", "xml"]),
                           ("report --top -1", ["report", good, "--top", "-1"]),
                           ("report --top abc", ["report", good, "--top", "abc"])):
            p = lg(t, *argv)
            one_line_error(t, p, what, expect_rc=2)
        p = lg(t, "report", good, "--format", "json")
        t.check(p.returncode == 0, "the intact database still reports fine", exit=p.returncode,
                stderr=p.stderr[-1000:])


def case_preload(t):
    db = t.path("x.db")
    static = os.path.join(t.args.bin, "static_hello")
    if os.path.exists(static):
        p = lg(t, "run", "--quiet", "--output", db, "--", static)
        one_line_error(t, p, "statically linked target", expect_rc=126,
                       mention=("static",))
    else:
        print("  SKIP static target: %s not built (no static libc)" % static)

    # A setuid program owned by another user: the loader ignores LD_PRELOAD there.
    src = t.bin("sawtooth")
    suid_dir = t.path("suid")
    os.mkdir(suid_dir)
    os.chmod(suid_dir, 0o755)
    os.chmod(t.tmp, 0o755)
    suid = os.path.join(suid_dir, "sawtooth-suid")
    shutil.copy(src, suid)
    try:
        os.chown(suid, 65534, 65534)  # nobody
        os.chmod(suid, 0o4755)
    except PermissionError:
        os.chmod(suid, 0o4755)  # not root: setuid to ourselves still sets the bit
    st = os.stat(suid)
    if not st.st_mode & stat.S_ISUID:
        print("  SKIP setuid target: cannot set the setuid bit here")
        return
    p = lg(t, "run", "--quiet", "--output", db, "--", suid, "--seconds", "0.2")
    one_line_error(t, p, "setuid target", expect_rc=126,
                   mention=("setuid", "set-user", "suid", "setgid", "set-group"))
    sgid = os.path.join(suid_dir, "sawtooth-sgid")
    shutil.copy(src, sgid)
    os.chmod(sgid, 0o2755)
    try:
        os.chown(sgid, 0, 65534)
        os.chmod(sgid, 0o2755)
    except PermissionError:
        pass
    p = lg(t, "run", "--quiet", "--output", db, "--", sgid, "--seconds", "0.2")
    one_line_error(t, p, "setgid target", expect_rc=126,
                   mention=("setuid", "set-user", "suid", "setgid", "set-group"))


def main():
    args = lgtest.parse_args(extra)
    t = lgtest.Test("bad-input-%s" % args.case, args)
    if args.case == "cli":
        case_cli(t)
    else:
        case_preload(t)
    t.finish()


if __name__ == "__main__":
    main()
