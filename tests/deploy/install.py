#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""A clean install, as a package build or a container image makes one (issue #35): the
build installed with `cmake --install` into a temporary directory, then used from there
alone, with neither PATH, MANPATH, PYTHONPATH nor a LEAKGUARD_ variable pointing to the
build tree.

1. DESTDIR=TMP/root cmake --install BUILD: every file where the layout says (bin/,
   LIBDIR/ with the preload library, the attach agent, liblgpool and
   libleakguard_isolate, LIBDIR/leakguard/python with every module and the exit hook,
   the man page, the header, /usr/bin/python3's module in its site directory).
2. The installed `leakguard --version` runs and says the project's version.
3. `man -M ROOT/share/man leakguard` finds the installed page (man -w names it) and
   formats it.
4. The installed binary preloads the installed library (not the build tree's, not one
   in the configured prefix): `leakguard run -- cat /proc/self/maps`.
5. It records the bundled example (examples/leaky) and the report names its leak site,
   examples/leaky.c:28, as the README shows.
6. /usr/bin/python3 imports leakguard from the installed site directory alone
   (PYTHONPATH = that directory, computed by CMake as the install rule is), at the
   build's version, and leakguard.run_isolated works outside `leakguard run`.
7. `leakguard run -- python3` from the installed binary: inside the run the module
   comes from LIBDIR/leakguard/python (the run's directory, first on PYTHONPATH, wins
   over the site copy of the same install, also on PYTHONPATH), and the report on the
   bundled examples/leaky.py names its leaking line.
8. `cmake --install BUILD --prefix /opt/leakguard` (under another DESTDIR): another
   prefix, the same relative layout; its binary finds its own library.
Nothing is written outside TMP but the install manifest in BUILD (install_manifest_
Unspecified.txt: the install runs the default component so that install_manifest.txt,
which a real install's uninstall reads, is left alone), removed again when this made it.

  install.py --cmake CMAKE --source SRC --build BUILD --prefix /usr/local --bindir bin --libdir lib
             --mandir share/man --includedir include --pysite lib/python3.11/dist-packages
             --pysuffix .cpython-311-x86_64-linux-gnu.so --pysuffixes S1;S2
             --version 0.1.0 --example BUILD/examples/leaky [--keep]
"""
import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time

PYTHON = "/usr/bin/python3"
checks = 0


def log(msg):
    print("install: " + msg, flush=True)


def fail(msg):
    log("FAIL: " + msg)
    raise SystemExit(1)


def check(cond, msg):
    global checks
    checks += 1
    if not cond:
        fail(msg)
    log("ok: " + msg)


def run(cmd, env, cwd, timeout=60, **kw):
    t0 = time.monotonic()
    p = subprocess.run(cmd, env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       universal_newlines=True, timeout=timeout, **kw)
    log("%s: exit %d in %.1fs" % (" ".join(cmd[:4]), p.returncode, time.monotonic() - t0))
    return p


def clean_env(tmp, bindir):
    """The environment of a fresh login on a machine with only the install: the
    installed bindir first on a system PATH, nothing about the build."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("LEAKGUARD_", "PYTHON", "LD_", "MAN")) and k not in ("PATH", "HOME")}
    env.update(PATH=bindir + ":/usr/local/bin:/usr/bin:/bin", HOME=tmp, LC_ALL="C.UTF-8", TERM="dumb")
    return env


ISOLATED_PY = """\
import leakguard


def square(x):
    return x * x


print("file:", leakguard.__file__)
print("version:", leakguard.__version__)
print("isolated:", leakguard.run_isolated(square, 7, max_rss="200M", timeout=20))
"""


def install(a, tmp, destdir, prefix=None):
    """cmake --install BUILD into DESTDIR (and PREFIX): the root of the install."""
    cmd = [a.cmake, "--install", a.build, "--component", "Unspecified"] + (["--prefix", prefix] if prefix else [])
    p = run(cmd, dict(os.environ, DESTDIR=destdir), tmp, timeout=120)
    check(p.returncode == 0, "DESTDIR=%s cmake %s%s" % (destdir, " ".join(cmd[1:]), "" if p.returncode == 0
                                                  else ":\n" + p.stdout[-3000:]))
    for ln in p.stdout.splitlines():
        for k in ("-- Installing: ", "-- Up-to-date: "):
            if ln.startswith(k) and not ln[len(k):].startswith(destdir + "/"):
                fail("a file installed outside DESTDIR: " + ln)
    return destdir + (prefix or a.prefix)


def check_layout(a, root, suffixes):
    libdir = os.path.join(root, a.libdir)
    pydir = os.path.join(libdir, "leakguard", "python")
    files = [os.path.join(root, a.bindir, "leakguard"),
             os.path.join(libdir, "libleakguard.so"),
             os.path.join(libdir, "libleakguard-agent.so"),
             os.path.join(libdir, "liblgpool.so"),
             os.path.join(libdir, "libleakguard_isolate.so"),
             os.path.join(root, a.mandir, "man1", "leakguard.1"),
             os.path.join(root, a.includedir, "leakguard.h")]
    if suffixes:
        files.append(os.path.join(pydir, "sitecustomize.py"))
        files += [os.path.join(pydir, "leakguard" + s) for s in suffixes]
        # the hook's bytecode per interpreter (`run` sets PYTHONDONTWRITEBYTECODE)
        files += [os.path.join(pydir, "__pycache__", "sitecustomize.%s.pyc" % "-".join(s.lstrip(".").split("-")[:2]))
                  for s in suffixes]
        if a.pysite:
            files.append(os.path.join(root, a.pysite, "leakguard" + a.pysuffix))
    missing = [f[len(root):] for f in files if not os.path.isfile(f)]
    check(not missing, "installed under %s: %s%s" % (
        root, ", ".join(f[len(root) + 1:] for f in files), "; missing: " + ", ".join(missing) if missing else ""))


def check_man(env, tmp, root, a):
    mroot = os.path.join(root, a.mandir)
    menv = dict(env, MANPAGER="cat", PAGER="cat", MANWIDTH="80")
    p = run(["man", "-w", "-M", mroot, "leakguard"], menv, tmp)
    page = os.path.realpath(os.path.join(mroot, "man1", "leakguard.1"))
    check(p.returncode == 0 and os.path.realpath(p.stdout.strip()) == page,
          "man -w -M %s leakguard names the installed page (%r)" % (mroot, p.stdout.strip()))
    p = run(["man", "-M", mroot, "leakguard"], menv, tmp)
    check(p.returncode == 0 and "leakguard run" in p.stdout and "SYNOPSIS" in p.stdout,
          "man -M %s leakguard formats the page (%d lines)" % (mroot, p.stdout.count("\n")))


def check_preload(env, tmp, root, a, name):
    """The libleakguard.so that `leakguard run` preloads into a program is the install's."""
    leakguard = os.path.join(root, a.bindir, "leakguard")
    p = run([leakguard, "run", "--force", "-o", os.path.join(tmp, name + ".db"), "--", "cat", "/proc/self/maps"],
            env, tmp)
    libs = sorted({ln.split()[-1] for ln in p.stdout.splitlines() if ln.endswith("/libleakguard.so")})
    want = os.path.realpath(os.path.join(root, a.libdir, "libleakguard.so"))
    check(p.returncode == 0 and libs == [want],
          "the installed binary preloads the installed library %s (mapped: %s)" % (want, libs or "none"))


def check_c_leak(env, tmp, a):
    p = run(["leakguard", "run", "--force", "-o", os.path.join(tmp, "leaky.db"), "--", a.example, "3"], env, tmp)
    # the source's path as its debug information says (absolute: the build's), its line exact
    src = os.path.join(a.source, "examples", "leaky.c")
    site = "allocated at cache_put (%s:28)" % src
    ok = p.returncode == 0 and "leakguard report: LEAK" in p.stdout and site in p.stdout
    check(ok, "leakguard run -- examples/leaky 3: a LEAK %s%s" % (site, "" if ok else ":\n" + p.stdout[-3000:]))


def check_import(env, tmp, root, a):
    """import leakguard with PYTHONPATH = the installed site directory and nothing else."""
    script = os.path.join(tmp, "isolated.py")
    with open(script, "w") as f:
        f.write(ISOLATED_PY)
    site_dir = os.path.join(root, a.pysite)
    p = run([PYTHON, script], dict(env, PYTHONPATH=site_dir), tmp)
    out = dict(ln.split(": ", 1) for ln in p.stdout.splitlines() if ": " in ln)
    check(p.returncode == 0 and os.path.dirname(out.get("file", "")) == site_dir,
          "%s imports leakguard from the installed site directory %s (%s)%s"
          % (PYTHON, a.pysite, out.get("file"), "" if p.returncode == 0 else ":\n" + p.stdout[-3000:]))
    check(out.get("version") == a.version, "its leakguard.__version__ is %s (%s)" % (a.version, out.get("version")))
    check(out.get("isolated") == "49", "leakguard.run_isolated(square, 7) = 49 outside leakguard run (%s)"
          % out.get("isolated"))


def check_python_run(env, tmp, root, a):
    """python3 under the installed `leakguard run`, with the site copy on PYTHONPATH too:
    the run's own directory comes first; the bundled examples/leaky.py's leak is found."""
    pydir = os.path.join(root, a.libdir, "leakguard", "python")
    penv = dict(env, PYTHONPATH=os.path.join(root, a.pysite)) if a.pysite else env
    p = run(["leakguard", "run", "--force", "-o", os.path.join(tmp, "probe.db"), "--", PYTHON, "-c",
             "import leakguard; print('module: ' + leakguard.__file__)"], penv, tmp)
    mod = [ln.split(": ", 1)[1] for ln in p.stdout.splitlines() if ln.startswith("module: ")]
    ok = p.returncode == 0 and mod and os.path.dirname(mod[0]) == pydir
    check(ok, "under the installed leakguard run, python3 imports leakguard from %s (%s)%s"
          % (pydir[len(root) + 1:], mod[0] if mod else "no module line", "" if ok else ":\n" + p.stdout[-3000:]))
    p = run(["leakguard", "run", "--force", "-o", os.path.join(tmp, "pyc.db"), "--", PYTHON, "-v", "-c", "pass"],
            penv, tmp)
    want = "# code object from '%s/__pycache__/sitecustomize." % pydir
    ok = p.returncode == 0 and any(ln.startswith(want) for ln in p.stdout.splitlines())
    check(ok, "its sitecustomize is loaded from the installed bytecode, not compiled again%s"
          % ("" if ok else ":\n" + "\n".join(ln for ln in p.stdout.splitlines() if "sitecustomize" in ln)[-2000:]))
    script = os.path.join(a.source, "examples", "leaky.py")
    with open(script) as f:
        line = [i for i, ln in enumerate(f, 1) if "cache[key] = bytearray(size)" in ln][0]
    p = run(["leakguard", "run", "--force", "-o", os.path.join(tmp, "py.db"), "--", PYTHON, script, "3"], penv, tmp)
    want = "allocated at cache_put (%s:%d)" % (script, line)
    ok = p.returncode == 0 and "leakguard report: LEAK" in p.stdout and want in p.stdout
    check(ok, "leakguard run -- python3 examples/leaky.py 3: a LEAK %s%s" % (want, "" if ok else ":\n" + p.stdout[-3000:]))


def main():
    ap = argparse.ArgumentParser()
    for o in ("cmake", "source", "build", "prefix", "bindir", "libdir", "mandir", "includedir", "version", "example"):
        ap.add_argument("--" + o, required=True)
    ap.add_argument("--pysite", default="")
    ap.add_argument("--pysuffix", default="")
    ap.add_argument("--pysuffixes", default="")
    ap.add_argument("--keep", action="store_true")
    a = ap.parse_args()
    if not shutil.which("man"):
        fail("man is not installed (Debian package man-db; scripts/deps.sh installs it)")
    suffixes = [s for s in a.pysuffixes.split(";") if s]
    manifest = os.path.join(a.build, "install_manifest_Unspecified.txt")
    had_manifest = os.path.exists(manifest)
    tmp = tempfile.mkdtemp(prefix="lg-install-")
    try:
        root = install(a, tmp, os.path.join(tmp, "root"))  # 1
        check_layout(a, root, suffixes)
        env = clean_env(tmp, os.path.join(root, a.bindir))
        p = run(["leakguard", "--version"], env, tmp)  # 2
        check(p.returncode == 0 and p.stdout.strip() == "leakguard " + a.version,
              "the installed leakguard --version says 'leakguard %s' (%r)" % (a.version, p.stdout.strip()))
        check_man(env, tmp, root, a)  # 3
        check_preload(env, tmp, root, a, "maps")  # 4
        check_c_leak(env, tmp, a)  # 5
        if not suffixes:
            log("skipped 6 and 7: the build has no Python module (LG_PYTHON=OFF, or no python3-dev)")
        elif not a.pysite:
            log("skipped 6: no site directory for %s under %s" % (PYTHON, a.prefix))
        else:
            check_import(env, tmp, root, a)  # 6
        if suffixes:
            check_python_run(env, tmp, root, a)  # 7
        # 8: another prefix, under a DESTDIR still (with LG_PYTHON_INSTALL_OWN_SITE a site
        # directory is absolute, outside any prefix)
        root = install(a, tmp, os.path.join(tmp, "root2"), "/opt/leakguard")
        check_layout(a, root, suffixes)
        check_preload(clean_env(tmp, os.path.join(root, a.bindir)), tmp, root, a, "maps2")
    finally:
        if not had_manifest and os.path.exists(manifest):
            os.unlink(manifest)
        if a.keep:
            log("kept " + tmp)
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    log("%d checks passed" % checks)
    return 0


if __name__ == "__main__":
    sys.exit(main())
