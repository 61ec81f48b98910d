#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""The man page (docs/leakguard.1) documents every command that `leakguard --help` lists,
in its SYNOPSIS, and every long option that a command's --help lists, in that command's
section, so that it cannot fall behind the CLI again (it once had no `guard`,
`run --guard*` or `--metrics`).

  manpage.py --leakguard BIN --man docs/leakguard.1
"""
import argparse
import re
import subprocess
import sys

# each command's options are documented in its section of the man page
COMMANDS = {"run": "OPTIONS (run)", "report": "OPTIONS (report)", "diff": "DIFF", "merge": "MERGE",
            "classify": "CLASSIFY", "guard": "GUARD", "attach": "ATTACH"}


def section(man, title):
    m = re.search(r"^\.SH %s\n(.*?)(?=^\.SH )" % re.escape(title), man, re.M | re.S)
    return m.group(1) if m else ""


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--leakguard", required=True)
    ap.add_argument("--man", required=True)
    a = ap.parse_args()
    with open(a.man) as f:
        man = f.read().replace("\\-", "-").replace("\\fB", "").replace("\\fR", "").replace("\\fI", "")
    top = subprocess.run([a.leakguard, "--help"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         universal_newlines=True).stdout
    listed = re.findall(r"^  ([a-z]+) ", top.split("commands:", 1)[-1].split("\n\n", 1)[0], re.M)
    missing = []
    if sorted(listed) != sorted(COMMANDS):
        missing.append("leakguard --help lists commands %s, this test knows %s" % (listed, list(COMMANDS)))
    n = 0
    for cmd, title in COMMANDS.items():
        if not re.search(r"^\.B leakguard %s$" % cmd, section(man, "SYNOPSIS"), re.M):
            missing.append("the SYNOPSIS has no 'leakguard %s'" % cmd)
        sec = section(man, title)
        if not sec:
            missing.append("no section %s" % title)
        h = subprocess.run([a.leakguard, cmd, "--help"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           universal_newlines=True).stdout
        opts = sorted(set(re.findall(r"(?<![\w-])--[a-z][a-z-]*", h)) - {"--help"})
        if not opts and cmd != "merge":
            missing.append("leakguard %s --help lists no options" % cmd)
        for o in opts:
            n += 1
            if not re.search(r"(?<![\w-])%s(?![\w-])" % re.escape(o), sec):
                missing.append("leakguard %s %s (in %s)" % (cmd, o, title))
    for m in missing:
        print("  FAIL not in the man page: " + m)
    print("%d commands, %d options: %s" % (len(COMMANDS), n, "%d missing" % len(missing) if missing else "all documented"))
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main())
