# SPDX-License-Identifier: MIT
"""Shared by shim_check.py and lazy_gc_off.py (issue #35: interpreters that start
lazily): a list of named checks, and a script's leak found at its line with its
holders."""
import shutil


class Checks:
    """check(cond, what, **shown_on_failure); .fails lists the failed ones."""

    def __init__(self):
        self.fails = []

    def __call__(self, cond, what, **kv):
        print("%s: %s" % ("ok" if cond else "FAIL", what))
        if not cond:
            for k, v in kv.items():
                print("    %s = %s" % (k, str(v)[:3000]))
            self.fails.append(what)

    def finish(self, tmp):
        """The exit status: 1 with tmp kept for a look, else 0 with tmp removed."""
        if self.fails:
            print("FAILED: %d checks (kept %s)" % (len(self.fails), tmp))
            return 1
        shutil.rmtree(tmp, ignore_errors=True)
        print("PASS")
        return 0


def main_run(rep):
    """The JSON report's run named main_run (the process that did the work), or {}."""
    mi = rep.get("main_run")
    return rep["runs"][mi] if isinstance(mi, int) else {}


def leaks_at(rep, fname, line):
    """The JSON report's leaking suspects whose first frame is fname:line."""
    return [s for s in rep.get("suspects", []) if s.get("leak") and
            any(fr.get("file", "").endswith(fname) and fr.get("line") == line for fr in (s.get("frames") or [])[:1])]


def held_by(hits, first):
    """The holders of hits whose chain starts with first (e.g. "__main__.keep (list)")."""
    return [h for s in hits for h in (s.get("holders") or []) if (h.get("chain") or [""])[0] == first]


def suspects_brief(rep):
    return [(s.get("leak"), (s.get("frames") or [{}])[:1]) for s in rep.get("suspects", [])][:5]
