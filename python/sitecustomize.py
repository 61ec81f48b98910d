# SPDX-License-Identifier: MIT
"""leakguard's sitecustomize: `leakguard run` puts this directory first on PYTHONPATH.

When the program runs under the recorder (LEAKGUARD_DIR is set), import the leakguard
module so that the live objects holding the top suspects' memory are explained at
interpreter exit (holders-<pid>-<n>.json), even for scripts that never import
leakguard. Then run whatever sitecustomize this one shadows (Debian ships one).
"""
import os
import sys


def _leakguard_setup():
    if not os.environ.get("LEAKGUARD_DIR"):
        return
    try:
        import leakguard  # registers the explain-at-exit hook under the recorder
    except ImportError as e:
        if not (3, 9) <= sys.version_info[:2] <= (3, 13) or "t" in getattr(sys, "abiflags", ""):
            return  # the recorder already said, in one line, that it cannot read this Python
        sys.stderr.write(
            "leakguard: no leakguard module for Python %d.%d here (%s): allocations are "
            "recorded with Python lines, without holders; build leakguard with this "
            "interpreter's headers installed\n" % (sys.version_info[:2] + (e,)))
        return
    except Exception as e:  # never break the program over a diagnostic
        sys.stderr.write("leakguard: %s\n" % e)
        return
    try:
        leakguard._install_atexit()
    except Exception:
        pass


def _chain_next_sitecustomize():
    here = os.path.dirname(os.path.realpath(__file__))
    rest = [p for p in sys.path if os.path.realpath(p or os.curdir) != here]
    try:
        import importlib.machinery
        import importlib.util
        spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
        if spec is None or spec.loader is None:
            return
        if spec.origin and os.path.realpath(spec.origin) == os.path.realpath(__file__):
            return
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
    except Exception as e:
        sys.stderr.write("leakguard: the next sitecustomize failed: %r\n" % (e,))


_leakguard_setup()
_chain_next_sitecustomize()
del _leakguard_setup, _chain_next_sitecustomize
