# SPDX-License-Identifier: MIT
"""A lazily started Python that turns its garbage collector off (issue #35 item 2): an
exec'd interpreter starts lazily, and its sitecustomize sets the leakguard module up
from a gc callback once the program has run 0.1 s. A program that calls gc.disable()
(a training loop's habit) never runs that callback: the module must be set up when it
turns collection off, or its leak would have no holder.

`leakguard run -- bash -c 'exec /usr/bin/python3 gc_off.py'`: the interpreter is not
the started command's first image (bash is), so it starts lazily; the script disables
the gc first thing and leaks into a list for a second. Checks: the interpreter's run
began to record lazily, its leak is found at the script's line, and it is held by
`__main__.keep` (named at exit by the module: it was set up).

  lazy_gc_off.py --leakguard PATH [--python PATH]
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

from lazy_checks import Checks, held_by, leaks_at, main_run, suspects_brief

SCRIPT = """\
import gc
gc.disable()
import time
keep = []
t0 = time.monotonic()
while time.monotonic() - t0 < 1.0:
    keep.append([0] * 2000)  # LEAK-SITE
    time.sleep(0.002)
print("gc off leak done", len(keep), gc.isenabled())
"""


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--leakguard", required=True)
    ap.add_argument("--python", default="/usr/bin/python3")
    a = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="lgtest-gcoff-")
    check = Checks()

    script = os.path.join(tmp, "gc_off.py")
    with open(script, "w") as f:
        f.write(SCRIPT)
    line = next(i for i, x in enumerate(SCRIPT.splitlines(), 1) if "LEAK-SITE" in x)
    db = os.path.join(tmp, "gcoff.db")
    p = subprocess.run([a.leakguard, "run", "-q", "-o", db, "--", "bash", "-c", "exec %s %s" % (a.python, script)],
                       cwd=tmp, stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True, timeout=120)
    check(p.returncode == 0 and "gc off leak done" in p.stdout and p.stdout.strip().endswith("False"),
          "run exits 0, the script ran to its end with the gc off", rc=p.returncode, stdout=p.stdout[-500:],
          stderr=p.stderr[-2000:])
    if p.returncode != 0:
        return 1
    rep = json.loads(subprocess.run([a.leakguard, "report", "--format", "json", db], stdout=subprocess.PIPE,
                                    universal_newlines=True, check=True).stdout)
    main = main_run(rep)
    check("gc_off.py" in str(main.get("command")) and main.get("lazy") == "began",
          "the interpreter's run began to record lazily", main=main)
    hits = leaks_at(rep, "gc_off.py", line)
    check(len(hits) >= 1, "the leak is found at gc_off.py:%d" % line,
          suspects=suspects_brief(rep))
    held = held_by(hits, "__main__.keep (list)")
    check(len(held) >= 1, "the leak is held by __main__.keep (the module was set up with the gc off)",
          holders=[s.get("holders") for s in hits])
    return check.finish(tmp)


if __name__ == "__main__":
    sys.exit(main())
