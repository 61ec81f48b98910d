/* SPDX-License-Identifier: MIT */
/*
 * The watcher: what the collector asks of a Python process while it runs (docs/python.md).
 *
 *   - explain-PID.json changed (a site was flagged, or its memory doubled): have the main
 *     thread name who holds it;
 *   - until the process knows its rank (torch.distributed initialised): have the main
 *     thread look, so that labels-PID.json names the rank;
 *   - once the process uses CUDA: have the main thread read torch.cuda's allocated and
 *     reserved bytes for the recorder at every tick (lgpy_cuda_torch_sample).
 *
 * Both run Python code, and both run in the main thread between two bytecodes
 * (Py_AddPendingCall), never in the watcher: there the walk would read torch objects
 * while the main thread works on them in C++ without the GIL.
 *
 * Why a native thread and not a Python daemon thread: a daemon thread that waits for
 * the GIL while the interpreter finalises can hang the program at exit. CPython 3.9
 * (gh-96387, fixed in 3.10.8 and 3.11) lets such a thread ask the main thread to drop
 * the GIL, then exit without taking it, and the main thread waits for that switch
 * forever. A thread that wakes every 0.1 s made that hang likely (a test caught it).
 * This thread never takes the GIL: it stats one file, and posts a pending call (which
 * CPython documents as safe without the GIL, from any thread). It is stopped and
 * joined by an atexit callback, before the interpreter is torn down, so no pending
 * call is posted to a freed interpreter; a pending call still queued then does nothing.
 *
 * The thread's own allocations are never recorded (lg_pause_recording), it blocks
 * every signal, and it is started again in a forked child (os.register_at_fork).
 */
#include "python/lgpy.h"

#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define WATCH_TICK_NS 100000000L /* a look at explain-PID.json every 0.1 s */
#define LABEL_TICKS 5            /* the rank every 0.5 s, until it is known */

static struct {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  pthread_t thread;
  int running; /* a thread was started and not joined (main thread, with the GIL) */
  int stop;    /* under mu */
  char path[PATH_MAX];
  PyObject *look;   /* callables, owned; called in the main thread */
  PyObject *labels; /* returns True once the rank is known (then never again) */
  atomic_int want_look, want_labels, want_torch, posted, labeled, closed;
} w = {.mu = PTHREAD_MUTEX_INITIALIZER};

/* In the main thread, with the GIL. */
static int pending_watch(void *unused) {
  (void)unused;
  atomic_store(&w.posted, 0);
  if (atomic_load(&w.closed)) return 0; /* the interpreter is finalising */
  if (lgpy_explaining()) return 0;      /* inside an explain's Python call: the next tick */
  /* What runs here is leakguard's work in the program's main thread (reading the
   * request, importing json, the walk): its allocations are not the program's
   * (paused), and the program is held meanwhile (no snapshot: a leak would look flat
   * while its main thread serves us; an attach beside CPU hogs saw a leak called a
   * plateau that way). */
  if (lgpy.pause) lgpy.pause(1);
  if (lgpy.held) lgpy.held(1);
  if (atomic_exchange(&w.want_look, 0) && w.look) {
    PyObject *r = PyObject_CallNoArgs(w.look);
    if (!r) PyErr_Clear(); /* never break the program over a diagnostic */
    Py_XDECREF(r);
  }
  if (atomic_exchange(&w.want_torch, 0)) lgpy_cuda_torch_sample();
  if (atomic_exchange(&w.want_labels, 0) && w.labels && !atomic_load(&w.labeled)) {
    PyObject *r = PyObject_CallNoArgs(w.labels);
    if (!r) PyErr_Clear();
    else if (PyObject_IsTrue(r) == 1) atomic_store(&w.labeled, 1);
    Py_XDECREF(r);
  }
  if (lgpy.held) lgpy.held(0);
  if (lgpy.pause) lgpy.pause(0);
  return 0;
}

static void *watch_main(void *unused) {
  (void)unused;
  if (lgpy.pause) lgpy.pause(1);
  struct timespec last = {0, 0};
  unsigned tick = 0;
  pthread_mutex_lock(&w.mu);
  while (!w.stop) {
    struct timespec until;
    clock_gettime(CLOCK_MONOTONIC, &until);
    until.tv_nsec += WATCH_TICK_NS;
    if (until.tv_nsec >= 1000000000L) {
      until.tv_sec++;
      until.tv_nsec -= 1000000000L;
    }
    while (!w.stop && pthread_cond_timedwait(&w.cv, &w.mu, &until) == 0) {}
    if (w.stop) break;
    pthread_mutex_unlock(&w.mu);
    if (lgpy.recording && !lgpy.recording()) { /* detached (attach), or no longer followed */
      pthread_mutex_lock(&w.mu);
      break;
    }
    int post;
    struct stat st;
    if (stat(w.path, &st) == 0 && (st.st_mtim.tv_sec != last.tv_sec || st.st_mtim.tv_nsec != last.tv_nsec)) {
      last = st.st_mtim;
      atomic_store(&w.want_look, 1);
    }
    if (!atomic_load(&w.labeled) && ++tick % LABEL_TICKS == 0) atomic_store(&w.want_labels, 1);
    if (lgpy_cuda_in_use()) atomic_store(&w.want_torch, 1); /* reads the region only */
    post = atomic_load(&w.want_look) || atomic_load(&w.want_labels) || atomic_load(&w.want_torch);
    /* one pending call at a time; a full queue (-1) is tried again at the next tick */
    if (post && !atomic_exchange(&w.posted, 1) && Py_AddPendingCall(pending_watch, NULL) != 0)
      atomic_store(&w.posted, 0);
    pthread_mutex_lock(&w.mu);
  }
  pthread_mutex_unlock(&w.mu);
  return NULL;
}

/* Main thread, GIL held. 0, or -1 with an exception set. */
static int watch_start(void) {
  const char *dir = lgpy_dir();
  if (!dir) return 0;
  char name[64];
  snprintf(name, sizeof name, LG_FILE_EXPLAIN, (int)getpid());
  if (snprintf(w.path, sizeof w.path, "%s/%s", dir, name) >= (int)sizeof w.path) return 0;
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  pthread_cond_init(&w.cv, &ca);
  pthread_condattr_destroy(&ca);
  w.stop = 0;
  atomic_store(&w.posted, 0);
  atomic_store(&w.want_look, 0);
  atomic_store(&w.want_labels, 0);
  atomic_store(&w.want_torch, 0);
  atomic_store(&w.closed, 0);
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old); /* the thread inherits: every signal blocked */
  int rc = pthread_create(&w.thread, NULL, watch_main, NULL);
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  if (rc != 0) {
    PyErr_SetString(PyExc_RuntimeError, "leakguard: cannot start the watcher thread");
    return -1;
  }
  w.running = 1;
  return 0;
}

/* leakguard._watch(look, labels): start the watcher (once per process). */
PyObject *lgpy_watch(PyObject *self, PyObject *args) {
  PyObject *look, *labels;
  if (!PyArg_ParseTuple(args, "OO:_watch", &look, &labels)) return NULL;
  if (!PyCallable_Check(look) || !PyCallable_Check(labels)) {
    PyErr_SetString(PyExc_TypeError, "_watch(look, labels): callables");
    return NULL;
  }
  if (w.running) Py_RETURN_FALSE;
  Py_XSETREF(w.look, Py_NewRef(look));
  Py_XSETREF(w.labels, Py_NewRef(labels));
  atomic_store(&w.labeled, 0);
  if (watch_start() != 0) return NULL;
  return PyBool_FromLong(w.running);
}

/* leakguard._watch_stop(): atexit (before the interpreter is torn down). Joins the
 * thread with the GIL released: it never waits for the GIL, so this cannot deadlock. */
PyObject *lgpy_watch_stop(PyObject *self, PyObject *unused) {
  atomic_store(&w.closed, 1);
  if (!w.running) Py_RETURN_NONE;
  PyThreadState *ts = PyEval_SaveThread();
  pthread_mutex_lock(&w.mu);
  w.stop = 1;
  pthread_cond_signal(&w.cv);
  pthread_mutex_unlock(&w.mu);
  pthread_join(w.thread, NULL);
  PyEval_RestoreThread(ts);
  w.running = 0;
  Py_RETURN_NONE;
}

/* leakguard._watch_after_fork(): in a forked child (only the forking thread exists
 * there; the lock may have been held by the parent's watcher at the fork). */
PyObject *lgpy_watch_after_fork(PyObject *self, PyObject *unused) {
  if (!w.running) Py_RETURN_NONE;
  pthread_mutex_init(&w.mu, NULL);
  w.running = 0;
  atomic_store(&w.labeled, 0);
  if (watch_start() != 0) return NULL;
  Py_RETURN_NONE;
}
