#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""dlopen: dlopen_late loads libscenplugin.so after 1 s and leaks from a function
in it; the rank-1 suspect must be that function, file:line, in that module.

With --unload the plugin is dlclose()d before the program ends: the site must
still be reported with its symbols (they have to be resolved while the module is
mapped, or from the module file). With --relative the program runs in the plugin's
directory and loads it as dlopen("./libscenplugin.so"): the loader names the module by
that relative path, and the site must still be named (issue #31).
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import lgtest  # noqa: E402


def extra(ap):
    ap.add_argument("--unload", action="store_true")
    ap.add_argument("--relative", action="store_true")
    ap.add_argument("--seconds", default="5")


def main():
    args = lgtest.parse_args(extra)
    t = lgtest.Test("dlopen%s" % ("-unload" if args.unload else "-relative" if args.relative else ""), args)
    exe = t.bin("dlopen_late")
    t.bin("libscenplugin.so")
    site = t.site("plugin.c")
    targ = [exe, "--seconds", args.seconds, "--load-after", "1"]
    if args.unload:
        targ += ["--unload-after", str(float(args.seconds) - 1.6)]
    kw = {}
    if args.relative:
        targ += ["--plugin", "./libscenplugin.so"]
        kw["cwd"] = args.bin
    p = t.lg_run(targ, extra=["--fail-on-leak"], **kw)
    t.check(p.returncode == 97, "`run --fail-on-leak` exits 97", exit=p.returncode,
            stderr=p.stderr[-2000:], stdout=p.stdout[-2000:])
    t.check("loaded" in p.stdout and (not args.unload or "unloaded" in p.stdout),
            "the plugin was loaded%s" % (" and unloaded" if args.unload else ""),
            stdout=p.stdout[-2000:])
    rep = t.report_json(p.db)
    t.check(rep["verdict"] == "leak", "verdict is leak", verdict=rep["verdict"])
    if not rep["suspects"]:
        t.finish()
    top = rep["suspects"][0]
    t.check_site(top, site, "rank-1 suspect is %s in the plugin" % site.describe())
    f0 = (top.get("frames") or [{}])[0]
    t.check("libscenplugin.so" in str(f0.get("module")), "frames[0].module is the plugin",
            module=f0.get("module"))
    t.check(len(rep["runs"]) == 1 and top.get("pid") == rep["runs"][0].get("pid"),
            "suspect is in the target's pid", runs=rep["runs"], pid=top.get("pid"))
    t.finish()


if __name__ == "__main__":
    main()
