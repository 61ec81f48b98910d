# SPDX-License-Identifier: MIT
"""Finds a CPython interpreter of a given minor version at run time (issue #12).

  find("3.12") -> (executable, "3.12.1 (pyenv)")   or   (None, why it is absent)

Looked for, in order: $LG_PYTHON_3_12 (an executable), pyenv's newest 3.12.x
(`pyenv versions --bare`, `pyenv prefix`), /usr/bin/python3.12, /usr/local/bin/python3.12.
Used by the per-version tests (a missing interpreter makes them skip, saying which) and
by bench/py_frames.sh. Runs on Python 3.6+.
"""
import os
import re
import shutil
import subprocess
import sys


def _pyenv():
    for cand in (shutil.which("pyenv"),
                 os.path.join(os.environ.get("PYENV_ROOT", ""), "bin", "pyenv"),
                 os.path.expanduser("~/.pyenv/bin/pyenv")):
        if cand and os.access(cand, os.X_OK):
            return cand
    return None


def _version_of(exe):
    try:
        out = subprocess.run([exe, "-c", "import sys;print('%d.%d.%d' % sys.version_info[:3])"],
                             stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                             universal_newlines=True, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


def find(minor):
    """minor: "3.X". Returns (exe, description) or (None, reason)."""
    env = "LG_PYTHON_" + minor.replace(".", "_")
    tried = []
    if os.environ.get(env):
        exe = os.environ[env]
        v = _version_of(exe)
        if v and v.startswith(minor + "."):
            return exe, "%s (%s)" % (v, env)
        tried.append("%s=%s is not a CPython %s" % (env, exe, minor))
    pyenv = _pyenv()
    if pyenv:
        try:
            vs = subprocess.run([pyenv, "versions", "--bare", "--skip-aliases"],
                                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                universal_newlines=True, timeout=60).stdout.split()
        except (OSError, subprocess.SubprocessError):
            vs = []
        pat = re.compile(r"^%s\.(\d+)$" % re.escape(minor))
        found = sorted((int(m.group(1)), v) for v in vs for m in [pat.match(v)] if m)
        for _, v in reversed(found):
            prefix = subprocess.run([pyenv, "prefix", v], stdout=subprocess.PIPE,
                                    stderr=subprocess.DEVNULL, universal_newlines=True,
                                    timeout=60).stdout.strip()
            exe = os.path.join(prefix, "bin", "python" + minor)
            if prefix and _version_of(exe):
                return exe, "%s (pyenv)" % v
        tried.append("pyenv lists no %s.x" % minor)
    else:
        tried.append("no pyenv")
    for d in ("/usr/bin", "/usr/local/bin"):
        exe = os.path.join(d, "python" + minor)
        v = _version_of(exe) if os.access(exe, os.X_OK) else None
        if v:
            return exe, v
    tried.append("no python%s in /usr/bin or /usr/local/bin" % minor)
    return None, "CPython %s not found (%s; set %s)" % (minor, ", ".join(tried), env)


def ext_suffix(exe):
    """The interpreter's extension-module suffix (its ABI tag), or None."""
    out = subprocess.run([exe, "-c", "import sysconfig;print(sysconfig.get_config_var('EXT_SUFFIX'))"],
                         stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                         universal_newlines=True, timeout=60)
    return out.stdout.strip() or None if out.returncode == 0 else None


if __name__ == "__main__":
    if sys.argv[1:2] == ["--no-headers"]:
        # A test of CPython 3.X that could not be built (its headers were not found when
        # the build was configured): skipped if the interpreter is absent too, failed if
        # it is here.
        m = sys.argv[2]
        exe, how = find(m)
        if not exe:
            print("SKIP: " + how)
            sys.exit(77)
        print("FAILED: CPython %s is here (%s) but its headers were not found when the build was "
              "configured (src/python/interpreters.cmake): install them and reconfigure" % (m, exe))
        sys.exit(1)
    for m in sys.argv[1:] or ["3.9", "3.10", "3.11", "3.12", "3.13"]:
        print(m, *find(m))


def check_script_args(description=None, extra=None):
    """The per-version check scripts' command line (--leakguard, --pydir, --python 3.X,
    and what extra(parser) adds): (args, python). python is None when that CPython is
    absent (SKIP printed: exit 77)."""
    import argparse
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("--leakguard", required=True)
    ap.add_argument("--pydir", required=True)
    ap.add_argument("--python", help="CPython minor version (3.X), found at run time")
    if extra:
        extra(ap)
    a = ap.parse_args()
    if not a.python:
        return a, "/usr/bin/python3"
    python, how = find(a.python)
    print(("CPython %s: %s" % (how, python)) if python else ("SKIP: " + how), flush=True)
    return a, python


def script_case(prefix, pydir, main_text):
    """A temporary directory (mkdtemp prefix) holding main.py = main_text, and the
    environment the per-version check scripts run it in: leakguard's module first on the
    path, no bytecode written, PYTHONMALLOC left to leakguard. (tmp, script, env)"""
    import os
    import tempfile
    tmp = tempfile.mkdtemp(prefix=prefix)
    script = os.path.join(tmp, "main.py")
    with open(script, "w") as f:
        f.write(main_text)
    env = dict(os.environ, PYTHONPATH=os.path.abspath(pydir), PYTHONDONTWRITEBYTECODE="1")
    env.pop("PYTHONMALLOC", None)
    return tmp, script, env


class Checks:
    """check(cond, what, **values): prints ok/FAIL, and on FAIL the values; .fails lists
    what failed; .finish(where) prints the verdict and returns the exit status."""

    def __init__(self, limit=2000):
        self.fails, self.limit = [], limit

    def check(self, cond, what, **vals):
        import json
        print(("  ok   " if cond else "  FAIL ") + what, flush=True)
        if not cond:
            for k, v in vals.items():
                print("         %s = %s" % (k, json.dumps(v, default=str)[:self.limit]))
            self.fails.append(what)
        return cond

    def finish(self, where):
        if self.fails:
            print("FAILED: %d check(s): %s (files in %s)" % (len(self.fails), "; ".join(self.fails), where),
                  flush=True)
            return 1
        print("ok", flush=True)
        return 0
