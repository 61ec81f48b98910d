# SPDX-License-Identifier: MIT
"""Control: a program that only imports (every CPython 3.9-3.13): the standard library's
big packages, one after the other, for the whole run, then exits. Memory grows all the
time, in hundreds of sites, and is freed at exit: the shape of a leak that stopped, but
a module's start-up, made once (docs/detection.md, "Start-up")."""
import importlib
import time

from _common import SECONDS, process_age

MODULES = ["json", "decimal", "email.mime.multipart", "http.server", "xml.dom.minidom", "asyncio",
           "unittest", "argparse", "logging.handlers", "sqlite3", "csv", "tarfile", "zipfile",
           "concurrent.futures", "multiprocessing.pool", "urllib.request", "xmlrpc.server",
           "html.parser", "pydoc", "difflib", "statistics", "fractions", "configparser", "imaplib",
           "smtplib", "ftplib", "pickletools", "inspect", "dataclasses", "typing", "ctypes",
           "ssl", "uuid", "ipaddress", "calendar", "gettext", "locale", "shelve", "dbm",
           "wsgiref.simple_server", "tkinter", "turtle", "idlelib", "lib2to3", "distutils",
           "ensurepip", "venv", "zoneinfo", "graphlib", "tomllib"]

end = time.monotonic() + max(SECONDS, process_age())
for name in MODULES:
    try:
        importlib.import_module(name)
    except Exception:  # absent in this version or build (tkinter, distutils, tomllib)
        pass
    time.sleep(max(0.0, (end - time.monotonic()) / 20))
