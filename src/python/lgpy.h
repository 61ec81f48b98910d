/* SPDX-License-Identifier: MIT */
/* Internal header of the `leakguard` CPython extension (src/python). */
#ifndef LGPY_H
#define LGPY_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "python/pycompat.h"
#include <stdint.h>

#include "core/region.h"
#include "leakguard.h"

/* The recorder's entry points, resolved with dlsym(RTLD_DEFAULT, ...) at import so the
 * module never links libleakguard and imports (as no-ops) without it. */
typedef struct lgpy_api {
  uint64_t (*step)(void);
  int (*recording)(void);
  int (*site_of)(const void *block, uint32_t *site);
  int (*tag_push)(const char *name);
  void (*tag_pop)(void);
  int (*tag_stats)(int id, lg_tag_stats_t *out);
  int (*pause)(int pause); /* lg_pause_recording */
  void (*exiting)(void);   /* lg_exiting */
  void (*held)(int held);  /* lg_program_held */
  /* the attach agent's side table (lg_agent_block): blocks have no header there */
  int (*block)(const void *block, uint32_t *site, uint64_t *size);
  /* lg_python_startup_largest: 1 when the k largest Python stacks are all start-up */
  int (*startup_largest)(int k);
  /* lg_python_block: an object recorded with pymalloc kept */
  int (*pyobj)(const void *block, uint32_t *site, uint64_t *size);
  int active;             /* recorder loaded and recording in this process */
  int pymalloc_is_malloc; /* PYTHONMALLOC=malloc: Python objects are malloc blocks */
  int pymalloc_wrapped;   /* pymalloc kept, recorded objects headed (lg_python_wrap) */
} lgpy_api_t;

extern lgpy_api_t lgpy;
/* Looks the entry points up (api.c); called once at import. */
void lgpy_resolve_api(void);
/* The same from one library's handle: the attach agent, loaded RTLD_LOCAL (_attach). */
void lgpy_resolve_api_in(void *handle);
/* The collector's directory: LEAKGUARD_DIR, or the one _attach was given. NULL if none. */
const char *lgpy_dir(void);
void lgpy_set_dir(const char *dir);
/* step() calls seen by this module (leakguard.step). */
extern uint64_t lgpy_steps;

/* Site of a heap block whose start is `block` and which holds at least min_size bytes;
 * 0 when unknown. Conservative: refuses addresses inside loaded ELF images (static
 * objects), unmapped header pages, and headers that do not look like ours. */
uint32_t lgpy_block_site(const void *block, size_t min_size, size_t *block_size);
/* The same with pymalloc kept (lgpy.pymalloc_wrapped): blocks.c. */
uint32_t lgpy_pyobj_site(const void *block, size_t min_size, size_t *block_size);

/* Site and size of a Python object (GC pre-header accounted for), 0 when unknown. */
uint32_t lgpy_object_site(PyObject *o, size_t *size);
/* A container's buffer (a list's item array, a dict's keys table) at buf, cap bytes
 * (0: unknown): the site of its last growth, 0 when it is not recorded. */
uint32_t lgpy_buffer_site(const void *buf, size_t cap);

/* explain(): writes holders-<pid>-<n>.json (when write) and returns the dict. */
/* why: what asked ("request": the collector's, "exit", "step", "call": the program);
 * request: the collector's request seq it answers (0: none). Both go into the holders
 * file, and an explain that fails still writes one, with "error" (docs/python.md). */
PyObject *lgpy_explain(PyObject *stacks, int top, double budget_s, Py_ssize_t max_objects, int write, const char *why,
                       long request);

/* 1 while an explain runs (a nested one returns None at once). */
int lgpy_explaining(void);

/* suspects-<pid>.json's "suspects" list (new ref; [] when none). */
PyObject *lgpy_read_suspects(void);
/* The same, and *t: the run's age in seconds when the collector wrote them (-1: no file) */
PyObject *lgpy_read_suspects_at(double *t);

/* ---- cuda.c (GPU memory, docs/cuda.md) */
/* Resolves the recorder's CUDA entry points; under the recorder, adds the gc callback
 * that counts gc_triggered_without_cuda_cleanup_count. 0 or -1 (exception set). */
int lgpy_cuda_init(PyObject *module);
/* 1 when t is a CUDA tensor (then *ptr, *nbytes: its storage; *site: the recorded
 * GPU allocation holding it, 0 when unknown), 0 otherwise. */
int lgpy_cuda_tensor_site(PyObject *t, uintptr_t *ptr, uint64_t *nbytes, uint32_t *site);
/* leakguard.cuda_memory() */
PyObject *lgpy_cuda_memory(PyObject *self, PyObject *noargs);
/* 1 when this process used CUDA (the recorder saw a device): no GIL needed. */
int lgpy_cuda_in_use(void);
/* Main thread, GIL held: reads torch.cuda.memory_allocated/memory_reserved of every
 * device when torch's CUDA is initialised (never initialises it) and hands them to the
 * recorder (lg_cuda_torch_memory), which the collector stores at each snapshot. */
void lgpy_cuda_torch_sample(void);
/* 1 when s is a torch storage (UntypedStorage, TypedStorage) of a CUDA device: then
 * *ptr, *nbytes and *site as for a tensor. */
int lgpy_cuda_storage_site(PyObject *s, uintptr_t *ptr, uint64_t *nbytes, uint32_t *site);

/* ---- watch.c (the collector's requests while the program runs) */
/* leakguard._watch(look, labels), _watch_stop(), _watch_after_fork() */
PyObject *lgpy_watch(PyObject *self, PyObject *args);
PyObject *lgpy_watch_stop(PyObject *self, PyObject *unused);
PyObject *lgpy_watch_after_fork(PyObject *self, PyObject *unused);

/* ---- isolate.c (leakguard.isolated, docs/isolate.md) */
PyObject *lgpy_isolate_call(PyObject *self, PyObject *args, PyObject *kw);
PyObject *lgpy_isolate_stats(PyObject *self, PyObject *unused);
PyObject *lgpy_isolate_pool_new(PyObject *self, PyObject *args, PyObject *kw);
PyObject *lgpy_isolate_pool_call(PyObject *self, PyObject *args);
PyObject *lgpy_isolate_pool_ready(PyObject *self, PyObject *cap);
PyObject *lgpy_isolate_pool_free(PyObject *self, PyObject *cap);
PyObject *lgpy_isolate_budget_method(PyObject *self, PyObject *unused);
/* Runs src/python/isolate.py (compiled in) in the module's namespace. 0 or -1. */
int lgpy_isolate_init(PyObject *module);

#endif
