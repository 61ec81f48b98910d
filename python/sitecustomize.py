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
    _leakguard_watch(leakguard)


def _leakguard_watch(lg):
    """A daemon thread that does, while the program runs, what the collector asks:
    have the main thread explain who holds a site that began to grow (explain-PID.json:
    the collector writes it when a site is flagged and when its memory doubled), and tell the collector
    the process's rank once torch.distributed knows it (labels-PID.json). Restarted in
    forked children. It sleeps 0.1 s between looks at one file (a stat)."""
    import json
    import threading
    import time

    d = os.environ["LEAKGUARD_DIR"]
    state = {"seq": 0, "mtime": None, "labeled": False}

    def labels():
        dist = sys.modules.get("torch.distributed")
        try:
            if dist is None or not dist.is_available() or not dist.is_initialized():
                return
            doc = {"rank": dist.get_rank(), "world_size": dist.get_world_size()}
        except Exception:
            return
        if os.environ.get("LOCAL_RANK", "").isdigit():
            doc["local_rank"] = int(os.environ["LOCAL_RANK"])
        pid = os.getpid()
        tmp = os.path.join(d, ".labels-%d.tmp" % pid)
        with open(tmp, "w") as f:
            json.dump(doc, f)
        os.rename(tmp, os.path.join(d, "labels-%d.json" % pid))
        state["labeled"] = True

    def look():
        path = os.path.join(d, "explain-%d.json" % os.getpid())
        try:
            st = os.stat(path)
        except OSError:
            return
        if st.st_mtime_ns == state["mtime"]:
            return
        state["mtime"] = st.st_mtime_ns
        try:
            with open(path) as f:
                req = json.load(f)
        except (OSError, ValueError):
            return
        if req.get("seq", 0) <= state["seq"]:
            return
        state["seq"] = req["seq"]
        # in the main thread, between two bytecodes: not here, while the main thread
        # may be inside torch's C++ code working on the objects the walk reads
        lg._explain_soon(req.get("stacks") or None)

    def loop():
        # this thread's own allocations (stat results, exceptions, JSON) are leakguard's,
        # not the program's: never recorded (a report once named them a leak)
        pause = getattr(lg, "_pause_this_thread", None)
        if pause:
            pause()
        while True:
            time.sleep(0.1)
            try:
                look()
                if not state["labeled"]:
                    labels()
            except Exception:  # never break the program over a diagnostic
                pass

    def start():
        t = threading.Thread(target=loop, name="leakguard-watch", daemon=True)
        t.start()

    def after_fork():
        state.update(seq=0, mtime=None, labeled=False)
        start()

    start()
    os.register_at_fork(after_in_child=after_fork)


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
