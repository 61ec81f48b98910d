#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Circles of calls between files (issue #33): in each library and program of a build,
file A calls a function that file B defines and B, directly or through others, one of
A's. Such files cannot be read, tested or moved one without the other; the rule is
that none exist.

  scripts/file-circles.py [BUILD_DIR]     (default: build)

For every target's object files (BUILD/**/CMakeFiles/T.dir/src/**.o: leakguard's own
sources; tests, benchmarks and tools are not looked at) it reads the global functions
each file defines and the symbols it leaves undefined (readelf; see symbols() for what
is not a call between files), draws an edge A -> B when
A calls (or takes the address of) one B defines, and prints the strongly connected components of more than one
file. Exit 0 when there are none, 1 when there are, 2 on a usage error. A target built
from the same sources as one already seen (the Python module, once per interpreter)
is looked at once.
"""
import os
import subprocess
import sys


def symbols(objs, shared):
    """{obj: (functions defined, symbols undefined)}, read with one readelf call. Shared
    variables (a library's global state) are not calls and make no edge. In a shared
    library the functions it exports (default visibility: the C library's functions it
    interposes, dlsym, mmap..., and its public API) are its interface, not a file's: a
    call to one goes to whichever definition the process has first, and makes no edge."""
    out = subprocess.run(["readelf", "-Ws"] + objs, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                         text=True).stdout
    res = {o: (set(), set()) for o in objs}
    cur = objs[0] if len(objs) == 1 else None
    for line in out.splitlines():
        if line.startswith("File: "):
            cur = line[6:].strip()
            continue
        f = line.split()
        # Num: Value Size Type Bind Vis Ndx Name
        if cur not in res or len(f) < 8 or not f[0].endswith(":"):
            continue
        kind, bind, vis, ndx, name = f[3], f[4], f[5], f[6], f[7]
        if bind == "LOCAL":
            continue
        if ndx == "UND":
            res[cur][1].add(name)
        elif kind in ("FUNC", "IFUNC") and not (shared and vis == "DEFAULT"):
            res[cur][0].add(name)
    return res


def circles(graph):
    """Strongly connected components of more than one node (Tarjan, iterative)."""
    index, low, on, stack, out = {}, {}, set(), [], []
    counter = [0]
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter[0]
        counter[0] += 1
        stack.append(root)
        on.add(root)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = counter[0]
                    counter[0] += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(graph[w]))))
                elif w in on:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    out.append(sorted(comp))
    return out


def main():
    if len(sys.argv) > 2 or (len(sys.argv) == 2 and sys.argv[1].startswith("-")):
        print(__doc__.strip(), file=sys.stderr)
        return 2
    build = sys.argv[1] if len(sys.argv) == 2 else "build"
    targets = {}  # target dir -> {source path: object}
    for dirpath, dirnames, filenames in os.walk(build):
        dirnames.sort()
        if not dirpath.endswith(".dir") or os.path.basename(os.path.dirname(dirpath)) != "CMakeFiles":
            continue
        objs = {}
        for d, _, fs in os.walk(dirpath):
            for f in fs:
                if f.endswith(".o"):
                    src = os.path.relpath(os.path.join(d, f), dirpath)[:-2]
                    if src.startswith("src/"):
                        objs[src] = os.path.join(d, f)
        if len(objs) > 1:
            targets[dirpath] = objs
    if not targets:
        print("file-circles.py: no object files of src/ under %s (build it first)" % build, file=sys.stderr)
        return 2
    seen, found = set(), 0
    for t in sorted(targets):
        objs = targets[t]
        key = tuple(sorted(objs))
        if key in seen:
            continue
        seen.add(key)
        link = os.path.join(t, "link.txt")
        shared = os.path.exists(link) and " -shared " in open(link).read()
        syms = symbols(sorted(objs.values()), shared)
        owner = {}
        for src, o in objs.items():
            for s in syms[o][0]:
                owner.setdefault(s, src)
        graph = {src: set() for src in objs}
        for src, o in objs.items():
            for s in syms[o][1]:
                d = owner.get(s)
                if d and d != src:
                    graph[src].add(d)
        name = os.path.basename(t)[:-4]
        for comp in circles(graph):
            found += 1
            print("%s: %s" % (name, " <-> ".join(comp)))
            for a in comp:
                uses = sorted(b for b in graph[a] if b in comp)
                for b in uses:
                    why = sorted(syms[objs[a]][1] & syms[objs[b]][0])
                    print("    %s -> %s: %s" % (a, b, " ".join(why[:6]) + (" ..." if len(why) > 6 else "")))
    if found:
        print("file-circles.py: %d circle%s between files" % (found, "" if found == 1 else "s"))
        return 1
    print("file-circles.py: no circle between files in %d targets" % len(seen))
    return 0


if __name__ == "__main__":
    sys.exit(main())
