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
    # The one name not taken from the module (it decides whether to import it): the
    # module's ENV_DIR, which python_*module tests against this line.
    if not os.environ.get("LEAKGUARD_DIR"):
        return
    try:
        import leakguard  # registers the explain-at-exit hook under the recorder
    except ImportError as e:
        _leakguard_wrap_pymalloc()
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
    _leakguard_watch(leakguard, os.environ[leakguard.ENV_DIR])
    try:
        _leakguard_auto_steps(leakguard)
    except Exception:  # never break the program over a convenience
        pass


def _leakguard_auto_steps(lg):
    """Steps without code changes (docs/python.md): a program that never calls
    leakguard.step() gets a step each time its first optimizer steps
    (torch.optim.Optimizer.step), so growth per step and the step of out-of-memory come
    out of the box. Patched when torch.optim.optimizer is imported (a finder at the
    front of sys.meta_path that only answers for that name); each optimizer class's step
    is wrapped at its first instance, as torch wraps it for its profiler. The program's
    first own leakguard.step() ends the count (its steps are the ones it means);
    `leakguard run --steps off` leaves all of this out."""
    if os.environ.get(lg.ENV_STEPS, "auto") == "off":
        return
    import functools

    state = {"user": False, "first": None, "depth": 0}
    count = lg.step

    @functools.wraps(count)
    def step(*a, **k):
        state["user"] = True
        return count(*a, **k)

    lg.step = step

    def wrap_class(cls):
        fn = cls.step
        if getattr(fn, "_leakguard_step", False):
            return

        @functools.wraps(fn)
        def opt_step(self, *a, **k):
            state["depth"] += 1  # a subclass's step calling its base's counts once
            try:
                return fn(self, *a, **k)
            finally:
                state["depth"] -= 1
                if not state["depth"] and not state["user"]:
                    if state["first"] is None:
                        state["first"] = id(self)  # not self: that would keep it alive
                    if state["first"] == id(self):
                        count()

        opt_step._leakguard_step = True
        cls.step = opt_step

    def patch(mod):
        opt = getattr(mod, "Optimizer", None)
        if opt is None or getattr(opt, "_leakguard_init", False):
            return
        init = opt.__init__

        @functools.wraps(init)
        def __init__(self, *a, **k):
            init(self, *a, **k)
            try:
                wrap_class(type(self))
            except Exception:
                pass

        opt.__init__ = __init__
        opt._leakguard_init = True

    external = sys.modules.get("_frozen_importlib_external")
    if external is None:
        return

    class OptimizerFinder:
        @staticmethod
        def find_spec(name, path=None, target=None):
            if name != "torch.optim.optimizer":
                return None
            spec = external.PathFinder.find_spec(name, path)
            loader = getattr(spec, "loader", None)
            if loader is None or not hasattr(loader, "exec_module"):
                return spec
            run = loader.exec_module

            def exec_module(module):
                run(module)
                try:
                    patch(module)
                except Exception:
                    pass

            loader.exec_module = exec_module
            return spec

    sys.meta_path.insert(0, OptimizerFinder)
    loaded = sys.modules.get("torch.optim.optimizer")  # a lazy start's set-up comes late
    if loaded is not None:
        patch(loaded)


def _leakguard_wrap_pymalloc():
    """Without the module (which does it at its import), a sampled recording still
    counts pymalloc's objects: the recorder wraps CPython's allocator (lg_python_wrap,
    src/capture/preload.c), called through ctypes.PyDLL, which keeps the GIL. In full
    mode, or with PYTHONMALLOC set by the user, the recorder leaves it as it is."""
    try:
        import ctypes
        ctypes.PyDLL(None).lg_python_wrap()
    except Exception:
        pass


def _leakguard_attach(pydir, rundir, agent):
    """`leakguard attach` runs this in a running Python process (docs/attach.md): the
    agent it loaded has the main thread call it between two bytecodes, under the GIL,
    with this file loaded as `_leakguard_site`. Imports the module from the CLI's module
    directory, points it at the agent and the collector's directory (the environment of
    a running process cannot be changed), then as under `leakguard run`: holders at
    exit, and the watcher for the collector's requests. A second attach starts over."""
    sys.path.insert(0, pydir)
    try:
        import leakguard
    finally:
        sys.path.remove(pydir)
    if not leakguard._attach(rundir, agent):
        raise RuntimeError("the agent is loaded but not recording")
    leakguard._install_atexit()
    leakguard._watch_stop()  # an earlier attach's watcher, ended at its detach
    _leakguard_watch(leakguard, rundir)


def _leakguard_watch(lg, d):
    """What the collector asks while the program runs: have the main thread explain who
    holds a site that began to grow (explain-PID.json: the collector writes it when a
    site is flagged and when its memory doubled), and tell the collector the process's
    rank once torch.distributed knows it (labels-PID.json). The watcher is a native
    thread of the leakguard module (src/python/watch.c) that never takes the GIL: it
    stats the file every 0.1 s and has the main thread call look() or labels() between
    two bytecodes. (A Python daemon thread here could hang CPython 3.9 at exit.)
    json is imported when a request comes: not in every program's start-up."""
    state = {"seq": 0}

    def labels():
        dist = sys.modules.get("torch.distributed")
        try:
            if dist is None or not dist.is_available() or not dist.is_initialized():
                return False
            doc = {"rank": dist.get_rank(), "world_size": dist.get_world_size()}
        except Exception:
            return False
        if os.environ.get("LOCAL_RANK", "").isdigit():
            doc["local_rank"] = int(os.environ["LOCAL_RANK"])
        pid = os.getpid()
        tmp = os.path.join(d, lg.FILE_LABELS_TMP % pid)
        import json

        with open(tmp, "w") as f:
            json.dump(doc, f)
        os.rename(tmp, os.path.join(d, lg.FILE_LABELS % pid))
        return True

    def look():
        path = os.path.join(d, lg.FILE_EXPLAIN % os.getpid())
        import json

        try:
            with open(path) as f:
                req = json.load(f)
        except (OSError, ValueError):
            return
        # each seq is served once: the collector writes a request again (same seq) when
        # it got no answer, in case this watcher missed the file's change
        if req.get("seq", 0) <= state["seq"]:
            return
        state["seq"] = req["seq"]
        # answers with a holders file naming the request, also when the walk fails
        lg.explain(req.get("stacks") or None, 64, -1, 0, True, _request=req["seq"])

    def after_fork():
        lg._watch_state["seq"] = 0
        lg._watch_after_fork()

    lg._watch_state = state
    lg._watch(look, labels)
    if not getattr(lg, "_watch_hooks", False):  # once, though attach may come again
        import atexit
        lg._watch_hooks = True
        atexit.register(lg._watch_stop)
        os.register_at_fork(after_in_child=after_fork)


def _leakguard_lazy_s():
    """The lazy start's seconds when this image starts lazily, else 0 (docs/design.md
    "Lazy start"): every image but the started command's first one, whose exec turned
    LEAKGUARD_FIRST to 0, unless `--lazy off`."""
    if not os.environ.get("LEAKGUARD_DIR") or os.environ.get("LEAKGUARD_FIRST") != "0":
        return 0
    ms = os.environ.get("LEAKGUARD_LAZY", "0").partition(",")[2]
    return int(ms) / 1000.0 if ms.isdigit() else 0


def _leakguard_defer(after, setup):
    """A lazily started interpreter (an exec'd `python3`, a wrapper's helper): the
    module waits as the recorder does, until the program has run `after` seconds, looked
    at each time the garbage collector finishes (an allocating program runs it every few
    hundred new container objects). One that ends before never imports the module (~6 ms
    and a native thread of every short `python3 -c` a wrapper runs); one that lives on
    gets it all: pymalloc wrapped, holders at exit, the watcher, the steps. gc.disable()
    and gc.set_threshold(0) set it up at once."""
    import gc
    import time

    t0 = time.monotonic()
    disable, set_threshold = gc.disable, gc.set_threshold

    def go():
        try:
            gc.callbacks.remove(ready)
        except ValueError:
            return  # already set up
        if gc.disable is off:
            gc.disable = disable
        if gc.set_threshold is threshold:
            gc.set_threshold = set_threshold
        setup()

    def ready(phase, info):
        if phase == "stop" and time.monotonic() - t0 >= after:
            go()

    # A program that turns automatic collection off (a training loop's habit) would
    # never reach the callback: it is set up when it does, however early (such a
    # program means to run long).
    def off():
        disable()
        go()

    def threshold(*args):
        set_threshold(*args)
        if args and args[0] == 0:
            go()

    gc.callbacks.append(ready)
    gc.disable, gc.set_threshold = off, threshold


def _chain_next_sitecustomize():
    here = os.path.dirname(os.path.realpath(__file__))
    rest = [p for p in sys.path if os.path.realpath(p or os.curdir) != here]
    try:
        # importlib.machinery and importlib.util are these two frozen modules, loaded at
        # every start-up; importing the public names costs 15 more modules (recorded).
        bootstrap = sys.modules.get("_frozen_importlib")
        external = sys.modules.get("_frozen_importlib_external")
        if bootstrap is None or external is None:
            import importlib.machinery as external
            import importlib.util as bootstrap
        spec = external.PathFinder.find_spec("sitecustomize", rest)
        if spec is None or spec.loader is None:
            return
        if spec.origin and os.path.realpath(spec.origin) == os.path.realpath(__file__):
            return
        mod = bootstrap.module_from_spec(spec)
        spec.loader.exec_module(mod)
    except Exception as e:
        sys.stderr.write("leakguard: the next sitecustomize failed: %r\n" % (e,))


if __name__ == "sitecustomize":  # not when `leakguard attach` loads it as _leakguard_site
    if _leakguard_lazy_s():
        _leakguard_defer(_leakguard_lazy_s(), _leakguard_setup)
    else:
        _leakguard_setup()
    _chain_next_sitecustomize()
    del _leakguard_setup, _chain_next_sitecustomize, _leakguard_defer, _leakguard_lazy_s
