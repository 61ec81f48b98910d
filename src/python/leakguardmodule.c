/* SPDX-License-Identifier: MIT */
/*
 * `import leakguard`: the Python face of the recorder.
 *
 *   leakguard.step()            step marker (training iteration, request)
 *   leakguard.snapshot()        recorder state: steps, tags, current suspects
 *   leakguard.suspects()        live results written by the collector for this process
 *   with leakguard.tag("name"): attribute allocations to a label
 *   leakguard.explain()         reference chains of the top suspects (holders file)
 *
 * The module never links libleakguard: the recorder's functions are looked up with
 * dlsym(RTLD_DEFAULT, ...) at import. Without the recorder (or when it is not
 * recording in this process) every call is a cheap no-op and the first one says so
 * once on stderr.
 */
#include "python/lgpy.h"

#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int warned;
static long explain_at_step = -1; /* LEAKGUARD_EXPLAIN_AT_STEP */
static int atexit_installed;

static void resolve_api(void) {
  lgpy_resolve_api();
  const char *s = getenv(LG_ENV_EXPLAIN_AT_STEP);
  if (s && *s) {
    char *end;
    long v = strtol(s, &end, 10);
    if (*end == 0 && v > 0) explain_at_step = v;
  }
}

/* Recorder present and recording now (a forked child under --no-follow stops). */
static int active_now(void) { return lgpy.active && lgpy.recording(); }

static void say_noop_once(void) {
  if (warned) return;
  warned = 1;
  PySys_WriteStderr("leakguard: not running under `leakguard run`; step/tag/explain are no-ops\n");
}

/* ------------------------------------------------------------------ step */

static PyObject *py_step(PyObject *self, PyObject *unused) {
  if (!active_now()) {
    say_noop_once();
    return PyLong_FromLong(0);
  }
  uint64_t n = lgpy.step();
  lgpy_steps++;
  if (explain_at_step > 0 && lgpy_steps == (uint64_t)explain_at_step) {
    PyObject *r = lgpy_explain(NULL, 5, -1, 0, 1, "step", 0);
    if (!r) {
      /* never break the training loop over a diagnostic */
      PyErr_WriteUnraisable(self);
    }
    Py_XDECREF(r);
  }
  return PyLong_FromUnsignedLongLong(n);
}

static PyObject *py_recording(PyObject *self, PyObject *unused) { return PyBool_FromLong(active_now()); }

static PyObject *py_suspects(PyObject *self, PyObject *unused) {
  if (!active_now()) return PyList_New(0);
  return lgpy_read_suspects();
}

/* ------------------------------------------------------------------ snapshot */

static PyObject *tag_stats_dict(void) {
  PyObject *d = PyDict_New();
  if (!d || !lgpy.tag_stats) return d;
  for (int id = 1; id <= 1024; id++) {
    lg_tag_stats_t st;
    if (lgpy.tag_stats(id, &st) != 0) break;
    PyObject *v = Py_BuildValue("{s:L,s:L,s:K}", "live_bytes", (long long)st.live_bytes, "peak_bytes",
                                (long long)st.peak_bytes, "allocations", (unsigned long long)st.allocations);
    if (!v || PyDict_SetItemString(d, st.name ? st.name : "?", v) < 0) {
      Py_XDECREF(v);
      Py_DECREF(d);
      return NULL;
    }
    Py_DECREF(v);
  }
  return d;
}

static PyObject *py_snapshot(PyObject *self, PyObject *unused) {
  int on = active_now();
  if (!on) say_noop_once();
  PyObject *tags = on ? tag_stats_dict() : PyDict_New();
  PyObject *sus = on ? lgpy_read_suspects() : PyList_New(0);
  PyObject *r = NULL;
  if (tags && sus)
    r = Py_BuildValue("{s:O,s:l,s:K,s:O,s:O}", "recording", on ? Py_True : Py_False, "pid", (long)getpid(), "steps",
                      (unsigned long long)lgpy_steps, "tags", tags, "suspects", sus);
  Py_XDECREF(tags);
  Py_XDECREF(sus);
  return r;
}

/* ------------------------------------------------------------------ explain */

/* leakguard._pause_this_thread(): the calling thread's allocations are no longer
 * recorded (lg_pause_recording; frees of recorded blocks still count). For leakguard's
 * own Python threads in the target: their memory is not the
 * program's, and a report must never name leakguard's code as a leak. */
static PyObject *py_pause_this_thread(PyObject *self, PyObject *unused) {
  if (lgpy.pause) lgpy.pause(1);
  Py_RETURN_NONE;
}

/* _request: the collector's request this call answers (sitecustomize's watcher). */
static PyObject *py_explain(PyObject *self, PyObject *args, PyObject *kw) {
  static char *kwlist[] = {"stacks", "top", "budget_s", "max_objects", "write", "_request", NULL};
  PyObject *stacks = Py_None;
  int top = 5, write = 1;
  double budget = -1;
  Py_ssize_t max_objects = 0;
  long request = 0;
  if (!PyArg_ParseTupleAndKeywords(args, kw, "|Oidnpl:explain", kwlist, &stacks, &top, &budget, &max_objects, &write,
                                   &request))
    return NULL;
  if (!active_now()) {
    say_noop_once();
    Py_RETURN_NONE;
  }
  return lgpy_explain(stacks == Py_None ? NULL : stacks, top, budget, max_objects, write,
                      request > 0 ? "request" : "call", request > 0 ? request : 0);
}

/* At exit, the holders of the collector's suspects are explained; with none, those of
 * the largest sites, since the collector's list lags a leak's first second or so. But
 * the walk over every object (0.1-0.3 s in a torch process) would only slow every
 * healthy script's exit when there is nothing to explain: it is left out when the
 * collector listed no suspect at a Python line outside an import (python_suspect) and
 * the EXIT_LARGEST largest Python sites are all a
 * module's start-up (lg_python_startup_largest), whose holders no report shows:
 * `python3 -c "import torch"`. EXIT_LARGEST is more than the 5 sites explained, since
 * the recorder ranks stacks by live bytes and the explanation by the bytes of the
 * objects it finds. Not with CUDA in use: a GPU tensor's bytes are not in the ranking.
 * (A rule on how long the collector had watched, 1.5 s, made the outcome depend on the
 * machine's load: a loaded start-up passed it, and memory kept at the very end went
 * unexplained. What is decided here depends on the data alone.) */
#define EXIT_LARGEST 16

/* 1 when a suspect of the collector's list is one whose holders a report would show:
 * its site is a Python line (a stack with Python frames has them first, and its site is
 * the innermost: collector/snapshot.c) and none of its frames is importlib's bootstrap
 * (a stack cut at an import: start-up). A site without a Python frame (the
 * interpreter's own start-up in C, a C thread) is passed over, as
 * lg_python_startup_largest passes it over: the collector's live view may flag such a
 * group while the interpreter starts, the more readily the slower the start (seen:
 * 3.9's type objects, flagged beside two CPU hogs, made a program that only imports
 * walk its objects at exit). */
static int python_suspect(PyObject *o) {
  PyObject *fr = PyDict_Check(o) ? PyDict_GetItemString(o, "frames") : NULL;
  if (!fr || !PyList_Check(fr) || PyList_GET_SIZE(fr) == 0) return 0;
  for (Py_ssize_t i = 0; i < PyList_GET_SIZE(fr); i++) {
    PyObject *f = PyList_GET_ITEM(fr, i);
    PyObject *mod = PyDict_Check(f) ? PyDict_GetItemString(f, "module") : NULL;
    PyObject *file = PyDict_Check(f) ? PyDict_GetItemString(f, "file") : NULL;
    const char *m = mod && PyUnicode_Check(mod) ? PyUnicode_AsUTF8(mod) : NULL;
    const char *fl = file && PyUnicode_Check(file) ? PyUnicode_AsUTF8(file) : NULL;
    if (!m || !fl) {
      PyErr_Clear();
      return 1; /* cannot tell: explain */
    }
    if (i == 0 && strcmp(m, "python") != 0) return 0;
    if (!strcmp(m, "python") && !strncmp(fl, "<frozen importlib._bootstrap", 28)) return 0;
  }
  return 1;
}

static PyObject *atexit_explain(PyObject *self, PyObject *unused) {
  if (!active_now() || !lgpy_dir()) Py_RETURN_NONE;
  lgpy_cuda_torch_sample(); /* torch.cuda's last figures, before the teardown */
  /* the interpreter's finalisation, which frees every object, is teardown */
  if (lgpy.exiting) lgpy.exiting();
  double t;
  PyObject *sus = lgpy_read_suspects_at(&t);
  int none = sus != NULL;
  for (Py_ssize_t i = 0; none && i < PyList_GET_SIZE(sus); i++) none = !python_suspect(PyList_GET_ITEM(sus, i));
  int quiet = none && lgpy.startup_largest && !lgpy_cuda_in_use() && lgpy.startup_largest(EXIT_LARGEST) == 1;
  Py_XDECREF(sus);
  if (!sus) PyErr_Clear();
  if (quiet) Py_RETURN_NONE;
  PyObject *r = lgpy_explain(NULL, 5, -1, 0, 1, "exit", 0);
  if (!r) {
    PyErr_Print();
    Py_RETURN_NONE;
  }
  Py_DECREF(r);
  Py_RETURN_NONE;
}

static PyMethodDef atexit_def = {"_explain_at_exit", atexit_explain, METH_NOARGS, NULL};

/* Registers explain at interpreter exit (once; only under the recorder). */
static PyObject *py_install_atexit(PyObject *self, PyObject *unused) {
  if (atexit_installed || !active_now()) Py_RETURN_FALSE;
  PyObject *fn = PyCFunction_NewEx(&atexit_def, NULL, NULL);
  PyObject *ae = PyImport_ImportModule("atexit");
  PyObject *r = (fn && ae) ? PyObject_CallMethod(ae, "register", "O", fn) : NULL;
  Py_XDECREF(fn);
  Py_XDECREF(ae);
  if (!r) return NULL;
  Py_DECREF(r);
  atexit_installed = 1;
  Py_RETURN_TRUE;
}

/* leakguard._attach(dir, agent): `leakguard attach` loaded its agent into this running
 * process (docs/attach.md) and has this called from a pending call, under the GIL. The
 * agent is loaded RTLD_LOCAL, so the recorder's functions are looked up in its own
 * handle; the collector's directory is given, since the environment cannot be. The
 * handle is kept: the agent is never unloaded. True when recording. */
static PyObject *py_attach(PyObject *self, PyObject *args) {
  const char *dir, *agent;
  if (!PyArg_ParseTuple(args, "ss:_attach", &dir, &agent)) return NULL;
  void *h = dlopen(agent, RTLD_NOW | RTLD_NOLOAD);
  if (!h) {
    PyErr_Format(PyExc_RuntimeError, "the agent %s is not loaded in this process", agent);
    return NULL;
  }
  lgpy_resolve_api_in(h);
  lgpy_set_dir(dir);
  warned = 1; /* step() called before the attach said its line already, or needs none */
  return PyBool_FromLong(active_now());
}

/* ------------------------------------------------------------------ test helpers */

static PyObject *py_site_of_address(PyObject *self, PyObject *arg) {
  void *p = PyLong_AsVoidPtr(arg);
  if (!p && PyErr_Occurred()) return NULL;
  if (!active_now() || !lgpy.site_of) Py_RETURN_NONE;
  uint32_t s = lgpy_block_site(p, 1, NULL);
  if (!s) Py_RETURN_NONE;
  return PyLong_FromUnsignedLong(s);
}

static PyObject *py_python_suspect(PyObject *self, PyObject *arg) { return PyBool_FromLong(python_suspect(arg)); }

static PyObject *py_site_of_object(PyObject *self, PyObject *arg) {
  if (!active_now()) Py_RETURN_NONE;
  size_t sz = 0;
  uint32_t s = lgpy_object_site(arg, &sz);
  if (!s) Py_RETURN_NONE;
  return PyLong_FromUnsignedLong(s);
}

/* ------------------------------------------------------------------ tag */

typedef struct {
  PyObject_HEAD PyObject *name; /* str */
  int depth;                    /* pushes not yet popped by this object */
} TagObject;

static int tag_init(TagObject *self, PyObject *args, PyObject *kw) {
  static char *kwlist[] = {"name", NULL};
  PyObject *name;
  if (!PyArg_ParseTupleAndKeywords(args, kw, "U:tag", kwlist, &name)) return -1;
  Py_XSETREF(self->name, Py_NewRef(name));
  return 0;
}

static void tag_dealloc(TagObject *self) {
  Py_XDECREF(self->name);
  Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *tag_enter(TagObject *self, PyObject *unused) {
  if (!active_now() || !lgpy.tag_push) {
    say_noop_once();
    return Py_NewRef(self);
  }
  const char *n = PyUnicode_AsUTF8(self->name);
  if (!n) return NULL;
  int id = lgpy.tag_push(n);
  if (id >= 1) self->depth++;
  return Py_NewRef(self);
}

static PyObject *tag_exit(TagObject *self, PyObject *args) {
  if (self->depth > 0 && lgpy.tag_pop) {
    self->depth--;
    lgpy.tag_pop();
  }
  Py_RETURN_FALSE;
}

static PyObject *tag_repr(TagObject *self) { return PyUnicode_FromFormat("leakguard.tag(%R)", self->name); }

static PyMethodDef tag_methods[] = {{"__enter__", (PyCFunction)tag_enter, METH_NOARGS, NULL},
                                    {"__exit__", (PyCFunction)tag_exit, METH_VARARGS, NULL},
                                    {NULL, NULL, 0, NULL}};

static PyTypeObject TagType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "leakguard.tag",
    .tp_basicsize = sizeof(TagObject),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "with leakguard.tag(name): attribute this thread's allocations to name",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)tag_init,
    .tp_dealloc = (destructor)tag_dealloc,
    .tp_repr = (reprfunc)tag_repr,
    .tp_methods = tag_methods,
};

/* ------------------------------------------------------------------ module */

static PyMethodDef methods[] = {
    {"step", py_step, METH_NOARGS, "step() -> int: mark the end of one step (training iteration, request)."},
    {"recording", py_recording, METH_NOARGS, "recording() -> bool: True when running under `leakguard run`."},
    {"snapshot", py_snapshot, METH_NOARGS,
     "snapshot() -> dict: recording, pid, steps, tags (live/peak bytes), suspects."},
    {"suspects", py_suspects, METH_NOARGS,
     "suspects() -> list: the collector's current leak suspects for this process."},
    {"explain", (PyCFunction)(void (*)(void))py_explain, METH_VARARGS | METH_KEYWORDS,
     "explain(stacks=None, top=5, budget_s=2.0, max_objects=5000000, write=True) -> dict:\n"
     "name the live objects holding the top suspects' memory and their shortest\n"
     "reference chains from a root; writes holders-<pid>-<n>.json to LEAKGUARD_DIR."},
    {"cuda_memory", lgpy_cuda_memory, METH_NOARGS, /* src/python/cuda.c */
     "cuda_memory() -> dict: GPU memory per device (recorded, and torch.cuda's view)."},
    {"_install_atexit", py_install_atexit, METH_NOARGS, NULL},
    {"_attach", py_attach, METH_VARARGS, NULL},
    {"_pause_this_thread", py_pause_this_thread, METH_NOARGS, NULL},
    {"_watch", lgpy_watch, METH_VARARGS, NULL}, /* src/python/watch.c */
    {"_watch_stop", lgpy_watch_stop, METH_NOARGS, NULL},
    {"_watch_after_fork", lgpy_watch_after_fork, METH_NOARGS, NULL},
    {"_site_of_address", py_site_of_address, METH_O, NULL},
    {"_site_of_object", py_site_of_object, METH_O, NULL},
    {"_python_suspect", py_python_suspect, METH_O, NULL},
    {"_isolate_call", (PyCFunction)(void (*)(void))lgpy_isolate_call, METH_VARARGS | METH_KEYWORDS,
     NULL}, /* src/python/isolate.c */
    {"_isolate_pool_new", (PyCFunction)(void (*)(void))lgpy_isolate_pool_new, METH_VARARGS | METH_KEYWORDS, NULL},
    {"_isolate_pool_call", lgpy_isolate_pool_call, METH_VARARGS, NULL},
    {"_isolate_pool_ready", lgpy_isolate_pool_ready, METH_O, NULL},
    {"_isolate_pool_free", lgpy_isolate_pool_free, METH_O, NULL},
    {"isolate_budget_method", lgpy_isolate_budget_method, METH_NOARGS,
     "isolate_budget_method() -> (how, detail): how a max_rss budget is enforced here, 'cgroup'\n"
     "(detail: where the children's cgroups go) or 'rss' (detail: why no cgroup)."},
    {"isolate_stats", lgpy_isolate_stats, METH_NOARGS,
     "isolate_stats() -> dict: counts of this process's isolated calls by outcome, peak RSS histogram."},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef moddef = {
    PyModuleDef_HEAD_INIT, .m_name = "leakguard", .m_doc = "leakguard: live memory-leak detection (Python API)",
    .m_size = -1,          .m_methods = methods,
};

PyMODINIT_FUNC PyInit_leakguard(void);
PyMODINIT_FUNC PyInit_leakguard(void) {
  resolve_api();
  if (PyType_Ready(&TagType) < 0) return NULL;
  PyObject *m = PyModule_Create(&moddef);
  if (!m) return NULL;
  Py_INCREF(&TagType);
  if (PyModule_AddObject(m, "tag", (PyObject *)&TagType) < 0 ||
      PyModule_AddStringConstant(m, "__version__", LG_VERSION) < 0 ||
      PyModule_AddIntConstant(m, "EXPLAIN_AT_STEP", explain_at_step) < 0 ||
      /* the contract with the collector (core/region.h), for python/sitecustomize.py */
      PyModule_AddStringConstant(m, "ENV_DIR", LG_ENV_DIR) < 0 ||
      PyModule_AddStringConstant(m, "ENV_STEPS", LG_ENV_STEPS) < 0 ||
      PyModule_AddStringConstant(m, "ENV_FIRST", LG_ENV_FIRST) < 0 ||
      PyModule_AddStringConstant(m, "ENV_LAZY", LG_ENV_LAZY) < 0 ||
      PyModule_AddStringConstant(m, "FILE_EXPLAIN", LG_FILE_EXPLAIN) < 0 ||
      PyModule_AddStringConstant(m, "FILE_LABELS", LG_FILE_LABELS) < 0 ||
      PyModule_AddStringConstant(m, "FILE_LABELS_TMP", LG_FILE_LABELS_TMP) < 0) {
    Py_DECREF(m);
    return NULL;
  }
  if (lgpy_cuda_init(m) != 0) PyErr_Clear(); /* GPU side: src/python/cuda.c */
  if (lgpy_isolate_init(m) != 0) {           /* leakguard.isolated: src/python/isolate.py */
    Py_DECREF(m);
    return NULL;
  }
  /* Under the recorder, explain at exit (also for scripts that import us themselves). */
  if (active_now() && lgpy_dir()) {
    PyObject *r = py_install_atexit(m, NULL);
    if (!r) {
      Py_DECREF(m);
      return NULL;
    }
    Py_DECREF(r);
  }
  return m;
}
