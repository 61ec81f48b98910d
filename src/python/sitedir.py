# SPDX-License-Identifier: MIT
"""Where this interpreter finds packages installed under PREFIX (src/python/python.cmake,
tests/deploy/install.py): `python sitedir.py PREFIX` prints three lines,

  1. its site directory relative to PREFIX when that directory lies under PREFIX, else
     "-": Debian's python3 and PREFIX /usr/local: lib/python3.11/dist-packages
     (the default scheme, posix_local); PREFIX /usr: lib/python3/dist-packages
     (deb_system, where Debian's own packages go); a pyenv Python and its own prefix:
     lib/python3.X/site-packages;
  2. the site directory of the posix_prefix scheme under PREFIX, relative (what
     `pip install --prefix PREFIX` uses elsewhere);
  3. its own site directory, absolute (sysconfig's platlib).
"""
import os
import sys
import sysconfig


def main():
    prefix = os.path.normpath(os.path.abspath(sys.argv[1]))
    own = sysconfig.get_paths()["platlib"]
    site = own
    if prefix == os.path.normpath(sys.base_prefix) and "deb_system" in sysconfig.get_scheme_names():
        site = sysconfig.get_path("platlib", "deb_system")
    site = os.path.normpath(site)
    under = os.path.commonpath([site, prefix]) == prefix and site != prefix
    pp = sysconfig.get_path("platlib", "posix_prefix", vars={"base": prefix, "platbase": prefix})
    print(os.path.relpath(site, prefix) if under else "-")
    print(os.path.relpath(pp, prefix))
    print(own)


if __name__ == "__main__":
    main()
