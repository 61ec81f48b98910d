/* SPDX-License-Identifier: MIT */
/* leakguard._isolate_call: the C half of leakguard.isolated (docs/isolate.md). The
 * Python half (src/python/isolate.py, compiled in) pickles; this runs a zero-argument
 * callable in an isolated child (lg_isolate_call, src/isolate) and returns what the
 * callable returned (bytes) with the outcome.
 *
 * fork() happens with the GIL held, between PyOS_BeforeFork and PyOS_AfterFork_*
 * (as os.fork does): the child has a consistent interpreter. The wait runs without the
 * GIL, so other threads (and other isolated calls) go on meanwhile. */
#include "python/lgpy.h"
#include <marshal.h>

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct py_hooks {
  PyThreadState *saved;
} py_hooks_t;

static void before_fork(void *arg) { PyOS_BeforeFork(); }
static void after_fork_parent(void *arg) {
  py_hooks_t *h = arg;
  PyOS_AfterFork_Parent();
  h->saved = PyEval_SaveThread();
}
static void after_fork_child(void *arg) { PyOS_AfterFork_Child(); }

/* In the child: calls the callable; its bytes are the output. */
static int call_in_child(const void *in, size_t inlen, void **out, size_t *outlen, void *arg) {
  PyObject *r = PyObject_CallObject((PyObject *)arg, NULL);
  if (!r || !PyBytes_Check(r)) {
    if (PyErr_Occurred()) PyErr_Print();
    Py_XDECREF(r);
    return 1;
  }
  size_t n = (size_t)PyBytes_GET_SIZE(r);
  *out = malloc(n ? n : 1);
  if (!*out) return 2;
  memcpy(*out, PyBytes_AS_STRING(r), n);
  *outlen = n;
  return 0;
}

static PyObject *result_dict(const lg_isolate_result_t *res, void *out, size_t outlen) {
  PyObject *payload = Py_None;
  Py_INCREF(payload);
  if (res->code == LG_ISOLATE_OK && res->status == 0) {
    Py_DECREF(payload);
    payload = PyBytes_FromStringAndSize(out, (Py_ssize_t)outlen);
  }
  free(out);
  if (!payload) return NULL;
  static const char *const by[] = {"none", "rss", "cgroup"};
  return Py_BuildValue("{s:i,s:s,s:N,s:i,s:i,s:i,s:s,s:s,s:K,s:d,s:s}", "code", res->code, "outcome",
                       lg_isolate_code_name(res->code), "payload", payload, "status", res->status, "signal",
                       res->signal, "exit_code", res->exit_code, "syscall", res->syscall, "message", res->message,
                       "peak_rss", (unsigned long long)res->peak_rss, "seconds", res->seconds, "budget_by",
                       by[res->budget_by >= 0 && res->budget_by <= 2 ? res->budget_by : 0]);
}

PyObject *lgpy_isolate_call(PyObject *self, PyObject *args, PyObject *kw) {
  static char *kwlist[] = {"fn", "max_rss", "timeout", "allow", "budget_by", NULL};
  PyObject *fn;
  unsigned long long max_rss = 0;
  double timeout = 0;
  unsigned int allow = 0;
  int budget_by = 0;
  if (!PyArg_ParseTupleAndKeywords(args, kw, "O|KdIi:_isolate_call", kwlist, &fn, &max_rss, &timeout, &allow,
                                   &budget_by))
    return NULL;
  if (!PyCallable_Check(fn)) {
    PyErr_SetString(PyExc_TypeError, "_isolate_call: fn must be callable");
    return NULL;
  }
  py_hooks_t h = {NULL};
  lg_isolate_opts_t o = {.max_rss = (size_t)max_rss,
                         .timeout_s = timeout,
                         .allow = allow,
                         .arg = fn,
                         .before_fork = before_fork,
                         .after_fork_parent = after_fork_parent,
                         .after_fork_child = after_fork_child,
                         .hook_arg = &h,
                         .budget_by = budget_by};
  void *out = NULL;
  size_t outlen = 0;
  lg_isolate_result_t res;
  lg_isolate_call(call_in_child, NULL, 0, &out, &outlen, &o, &res);
  if (h.saved) PyEval_RestoreThread(h.saved);
  return result_dict(&res, out, outlen);
}

/* ---------------------------------------------------------------- the pool
 * lg_isolate_pool with CPython's fork hooks. A pool forks from its refill thread (a
 * thread CPython does not know) and from callers that find it empty: whichever thread
 * forks takes the GIL first (PyGILState_Ensure: a thread state of its own) and forks
 * between PyOS_BeforeFork and PyOS_AfterFork_*, as os.fork does in any thread. The
 * child is that thread alone, holding the GIL: CPython makes it the main thread. The
 * callers wait without the GIL, so the refill thread can take it. */
static _Thread_local PyGILState_STATE pool_gil;
static _Thread_local int pool_ts_kept;
static void pool_before_fork(void *arg) {
  pool_gil = PyGILState_Ensure();
  if (!pool_ts_kept) {
    /* A second hold, never released: this thread's state outlives each fork. Made and
     * deleted per fork, it would take the runtime's head lock without the GIL, and a
     * fork in another thread at that moment gives a child that deadlocks in
     * PyOS_AfterFork_Child on CPython < 3.12, 3.11.8, 3.10.14, 3.9.20 (gh-112275). */
    (void)PyGILState_Ensure();
    pool_ts_kept = 1;
  }
  PyOS_BeforeFork();
}
static void pool_after_fork_parent(void *arg) {
  PyOS_AfterFork_Parent();
  PyGILState_Release(pool_gil);
}

/* In the child: the dispatcher (a callable taking the request's bytes and returning
 * the answer's bytes) on the request. */
static int pool_in_child(const void *in, size_t inlen, void **out, size_t *outlen, void *arg) {
  PyObject *b = PyBytes_FromStringAndSize(in, (Py_ssize_t)inlen);
  PyObject *r = b ? PyObject_CallFunctionObjArgs((PyObject *)arg, b, NULL) : NULL;
  Py_XDECREF(b);
  if (!r || !PyBytes_Check(r)) {
    if (PyErr_Occurred()) PyErr_Print();
    Py_XDECREF(r);
    return 1;
  }
  size_t n = (size_t)PyBytes_GET_SIZE(r);
  *out = malloc(n ? n : 1);
  if (!*out) {
    Py_DECREF(r);
    return 2;
  }
  memcpy(*out, PyBytes_AS_STRING(r), n);
  *outlen = n;
  Py_DECREF(r);
  return 0;
}

typedef struct pypool {
  lg_isolate_pool_t *pool;
  PyObject *dispatch;
} pypool_t;

#define POOL_CAPSULE "leakguard._isolate_pool"

static void pool_capsule_free(PyObject *cap) {
  pypool_t *p = PyCapsule_GetPointer(cap, POOL_CAPSULE);
  if (!p) return;
  /* Not closed (leakguard.IsolatedPool closes its pools, at exit too): freeing joins
   * the refill thread, which may wait for the GIL; at finalization it is left. */
  if (p->pool && !Py_IsFinalizing()) {
    Py_BEGIN_ALLOW_THREADS lg_isolate_pool_free(p->pool);
    Py_END_ALLOW_THREADS p->pool = NULL;
  }
  if (!p->pool) {
    Py_XDECREF(p->dispatch);
    PyMem_Free(p);
  }
}

PyObject *lgpy_isolate_pool_new(PyObject *self, PyObject *args, PyObject *kw) {
  static char *kwlist[] = {"dispatch", "size", "max_rss", "timeout", "allow", "reuse", "budget_by", NULL};
  PyObject *dispatch;
  int size = 0, reuse = 0, budget_by = 0;
  unsigned long long max_rss = 0;
  double timeout = 0;
  unsigned int allow = 0;
  if (!PyArg_ParseTupleAndKeywords(args, kw, "Oi|KdIii:_isolate_pool_new", kwlist, &dispatch, &size, &max_rss, &timeout,
                                   &allow, &reuse, &budget_by))
    return NULL;
  if (!PyCallable_Check(dispatch)) {
    PyErr_SetString(PyExc_TypeError, "_isolate_pool_new: dispatch must be callable");
    return NULL;
  }
  pypool_t *p = PyMem_Calloc(1, sizeof *p);
  if (!p) return PyErr_NoMemory();
  p->dispatch = Py_NewRef(dispatch);
  lg_isolate_opts_t o = {.max_rss = (size_t)max_rss,
                         .timeout_s = timeout,
                         .allow = allow,
                         .pool_size = size,
                         .reuse_k = reuse,
                         .arg = dispatch,
                         .before_fork = pool_before_fork,
                         .after_fork_parent = pool_after_fork_parent,
                         .after_fork_child = after_fork_child,
                         .budget_by = budget_by};
  p->pool = lg_isolate_pool_new(pool_in_child, &o);
  if (!p->pool) {
    int e = errno;
    Py_DECREF(p->dispatch);
    PyMem_Free(p);
    errno = e;
    return PyErr_SetFromErrno(e == EINVAL ? PyExc_ValueError : PyExc_OSError);
  }
  /* Until the refill thread has its thread state (made once, at its first fork), this
   * thread does not fork (gh-112275 above): it waits for the first child. */
  Py_BEGIN_ALLOW_THREADS for (int i = 0; i < 5000 && lg_isolate_pool_ready(p->pool) == 0; i++) usleep(1000);
  Py_END_ALLOW_THREADS PyObject *cap = PyCapsule_New(p, POOL_CAPSULE, pool_capsule_free);
  if (!cap) {
    Py_BEGIN_ALLOW_THREADS lg_isolate_pool_free(p->pool);
    Py_END_ALLOW_THREADS Py_DECREF(p->dispatch);
    PyMem_Free(p);
  }
  return cap;
}

static pypool_t *pool_of(PyObject *cap) {
  pypool_t *p = PyCapsule_GetPointer(cap, POOL_CAPSULE);
  if (p && !p->pool) {
    PyErr_SetString(PyExc_ValueError, "the isolated pool is closed");
    return NULL;
  }
  return p;
}

PyObject *lgpy_isolate_pool_call(PyObject *self, PyObject *args) {
  PyObject *cap;
  Py_buffer in;
  if (!PyArg_ParseTuple(args, "Oy*:_isolate_pool_call", &cap, &in)) return NULL;
  pypool_t *p = pool_of(cap);
  if (!p) {
    PyBuffer_Release(&in);
    return NULL;
  }
  void *out = NULL;
  size_t outlen = 0;
  lg_isolate_result_t res;
  Py_BEGIN_ALLOW_THREADS lg_isolate_pool_call(p->pool, in.buf, (size_t)in.len, &out, &outlen, &res);
  Py_END_ALLOW_THREADS PyBuffer_Release(&in);
  return result_dict(&res, out, outlen);
}

PyObject *lgpy_isolate_pool_ready(PyObject *self, PyObject *cap) {
  pypool_t *p = pool_of(cap);
  return p ? PyLong_FromLong(lg_isolate_pool_ready(p->pool)) : NULL;
}

PyObject *lgpy_isolate_pool_free(PyObject *self, PyObject *cap) {
  pypool_t *p = PyCapsule_GetPointer(cap, POOL_CAPSULE);
  if (!p) return NULL;
  if (p->pool) {
    lg_isolate_pool_t *pool = p->pool;
    p->pool = NULL; /* closed for other threads from here */
    Py_BEGIN_ALLOW_THREADS lg_isolate_pool_free(pool);
    Py_END_ALLOW_THREADS
  }
  Py_RETURN_NONE;
}

PyObject *lgpy_isolate_budget_method(PyObject *self, PyObject *unused) {
  char detail[256];
  int m = lg_isolate_budget_method(detail, sizeof detail);
  return Py_BuildValue("(ss)", m == LG_BUDGET_CGROUP ? "cgroup" : "rss", detail);
}

PyObject *lgpy_isolate_stats(PyObject *self, PyObject *unused) {
  lg_isolate_stats_t st;
  lg_isolate_stats(&st);
  PyObject *req = PyDict_New(), *buckets = PyList_New(LG_ISOLATE_RSS_BUCKETS);
  if (!req || !buckets) goto fail;
  for (int i = 0; i < LG_ISOLATE_NCODES; i++) {
    PyObject *v = PyLong_FromUnsignedLongLong(st.requests[i]);
    if (!v || PyDict_SetItemString(req, lg_isolate_code_name(i), v) < 0) {
      Py_XDECREF(v);
      goto fail;
    }
    Py_DECREF(v);
  }
  for (int i = 0; i < LG_ISOLATE_RSS_BUCKETS; i++) {
    PyObject *v = PyLong_FromUnsignedLongLong(st.peak_rss_bucket[i]);
    if (!v) goto fail;
    PyList_SET_ITEM(buckets, i, v);
  }
  return Py_BuildValue("{s:N,s:N,s:K}", "requests", req, "peak_rss_buckets", buckets, "peak_rss_sum",
                       (unsigned long long)st.peak_rss_sum);
fail:
  Py_XDECREF(req);
  Py_XDECREF(buckets);
  return NULL;
}

extern const char lgpy_isolate_py[]; /* src/python/isolate.py, generated by cmake/embed.cmake */
/* the same compiled by the interpreter this module is built for (src/python/python.cmake) */
extern const char lgpy_isolate_pyc[];
extern const unsigned long lgpy_isolate_pyc_size;

/* Runs isolate.py in the module's namespace from its bytecode: every Python program
 * under `leakguard run` imports this module (sitecustomize), and compiling the 340
 * lines there took ~1.5 ms of each one's start-up (BENCHMARKS.md). The source when the
 * bytecode cannot be read (an interpreter of another marshal format). */
int lgpy_isolate_init(PyObject *module) {
  PyObject *d = PyModule_GetDict(module); /* borrowed */
  if (PyDict_GetItemString(d, "__builtins__") == NULL &&
      PyDict_SetItemString(d, "__builtins__", PyEval_GetBuiltins()) < 0)
    return -1;
  PyObject *code = PyMarshal_ReadObjectFromString(lgpy_isolate_pyc, (Py_ssize_t)lgpy_isolate_pyc_size);
  if (code && PyCode_Check(code)) {
    PyObject *r = PyEval_EvalCode(code, d, d);
    Py_DECREF(code);
    if (!r) return -1;
    Py_DECREF(r);
    return 0;
  }
  Py_XDECREF(code);
  PyErr_Clear();
  PyObject *r = PyRun_String(lgpy_isolate_py, Py_file_input, d, d);
  if (!r) return -1;
  Py_DECREF(r);
  return 0;
}
