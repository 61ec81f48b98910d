/* SPDX-License-Identifier: MIT */
/*
 * cuda.c - the GPU side of the `leakguard` Python module (docs/cuda.md):
 *  - leakguard.cuda_memory(): per GPU, what the recorder saw at the CUDA driver API
 *    and, when PyTorch's CUDA is initialised, torch.cuda.memory_allocated/reserved;
 *  - CUDA tensors and storages in the holder explanation: a CUDA storage's data
 *    pointer is a device address, attributed with lg_cuda_site_of() (inside a caching
 *    allocator's segment: the segment's site, i.e. the Python line that made it grow);
 *  - torch.cuda.memory_allocated/reserved per device handed to the recorder
 *    (lg_cuda_torch_memory) at the watcher's ticks and at exit: the collector stores
 *    them next to the driver's view (the report's torch.cuda line);
 *  - the gc callback behind gc_triggered_without_cuda_cleanup_count: a collection
 *    (gc.callbacks "stop" with info["collected"] > 0) during which the bytes held by
 *    tensors went down (torch.cuda.memory_allocated, summed over devices) while the
 *    caching allocator's reserve did not (torch.cuda.memory_reserved): the objects
 *    that were freed held CUDA memory, and none of it went back to the driver.
 * Like the rest of the module, the recorder is found with dlsym at import (no link).
 */
#include "python/lgpy.h"

#include <dlfcn.h>
#include <string.h>

static struct {
  int (*site_of)(uint64_t, uint32_t *, int *);
  int (*devices)(void);
  int (*stats)(int, lg_cuda_stats_t *);
  uint64_t (*gc_note)(void);
  uint64_t (*gc_count)(void);
  int (*torch_memory)(int, int64_t, int64_t);
} cu;

/* State between the gc callback's "start" and "stop". */
static int gc_valid;
static double gc_alloc0, gc_reserved0;

/* torch's CUDA caching allocator: allocated and reserved bytes over every device, when
 * torch is imported and its CUDA initialised (never initialises it). 1 when read. A
 * callable leakguard._cuda_probe() -> (allocated, reserved) replaces it (tests, or
 * another framework's allocator). */
static int cuda_probe(PyObject *module, double *alloc, double *reserved) {
  PyObject *probe = module ? PyObject_GetAttrString(module, "_cuda_probe") : NULL;
  if (!probe) PyErr_Clear();
  if (probe && probe != Py_None && PyCallable_Check(probe)) {
    PyObject *r = PyObject_CallNoArgs(probe);
    Py_DECREF(probe);
    int ok = r && PyArg_ParseTuple(r, "dd", alloc, reserved);
    Py_XDECREF(r);
    if (!ok) PyErr_Clear();
    return ok;
  }
  Py_XDECREF(probe);
  PyObject *mods = PySys_GetObject("modules"); /* borrowed */
  PyObject *torch = mods ? PyDict_GetItemString(mods, "torch") : NULL;
  if (!torch) return 0;
  int ok = 0;
  PyObject *tc = PyObject_GetAttrString(torch, "cuda");
  PyObject *ini = tc ? PyObject_CallMethod(tc, "is_initialized", NULL) : NULL;
  if (ini && PyObject_IsTrue(ini) == 1) {
    PyObject *n = PyObject_CallMethod(tc, "device_count", NULL);
    long nd = n ? PyLong_AsLong(n) : 0;
    Py_XDECREF(n);
    *alloc = *reserved = 0;
    ok = 1;
    for (long d = 0; d < nd && ok; d++) {
      PyObject *a = PyObject_CallMethod(tc, "memory_allocated", "l", d);
      PyObject *r = PyObject_CallMethod(tc, "memory_reserved", "l", d);
      ok = a && r;
      if (ok) *alloc += PyFloat_AsDouble(a), *reserved += PyFloat_AsDouble(r);
      Py_XDECREF(a);
      Py_XDECREF(r);
    }
  }
  Py_XDECREF(ini);
  Py_XDECREF(tc);
  if (PyErr_Occurred()) PyErr_Clear(), ok = 0;
  return ok;
}

static PyObject *g_module; /* borrowed: the module lives as long as the interpreter */

static PyObject *gc_callback(PyObject *self, PyObject *args) {
  (void)self;
  const char *phase;
  PyObject *info;
  if (!PyArg_ParseTuple(args, "sO", &phase, &info)) return NULL;
  double a, r;
  if (!strcmp(phase, "start")) {
    gc_valid = cuda_probe(g_module, &gc_alloc0, &gc_reserved0);
  } else if (gc_valid) {
    gc_valid = 0;
    PyObject *c = PyDict_Check(info) ? PyDict_GetItemString(info, "collected") : NULL;
    long collected = c ? PyLong_AsLong(c) : 0;
    if (collected > 0 && cuda_probe(g_module, &a, &r) && a < gc_alloc0 && r >= gc_reserved0 && cu.gc_note) cu.gc_note();
  }
  if (PyErr_Occurred()) PyErr_Clear();
  Py_RETURN_NONE;
}

static PyMethodDef gc_def = {"_cuda_gc_callback", gc_callback, METH_VARARGS, NULL};

int lgpy_cuda_init(PyObject *module) {
  *(void **)&cu.site_of = dlsym(RTLD_DEFAULT, "lg_cuda_site_of");
  *(void **)&cu.devices = dlsym(RTLD_DEFAULT, "lg_cuda_devices");
  *(void **)&cu.stats = dlsym(RTLD_DEFAULT, "lg_cuda_stats");
  *(void **)&cu.gc_note = dlsym(RTLD_DEFAULT, "lg_cuda_gc_without_cleanup");
  *(void **)&cu.gc_count = dlsym(RTLD_DEFAULT, "lg_cuda_gc_without_cleanup_count");
  *(void **)&cu.torch_memory = dlsym(RTLD_DEFAULT, "lg_cuda_torch_memory");
  g_module = module;
  if (!lgpy.active || !cu.gc_note) return 0;
  /* only under the recorder: the count lives in its region */
  PyObject *gc = PyImport_ImportModule("gc");
  PyObject *cbs = gc ? PyObject_GetAttrString(gc, "callbacks") : NULL;
  PyObject *fn = PyCFunction_New(&gc_def, NULL);
  int rc = cbs && fn && PyList_Append(cbs, fn) == 0 ? 0 : -1;
  Py_XDECREF(fn);
  Py_XDECREF(cbs);
  Py_XDECREF(gc);
  return rc;
}

int lgpy_cuda_in_use(void) { return lgpy.active && cu.devices && cu.devices() > 0; }

void lgpy_cuda_torch_sample(void) {
  if (!lgpy.active || !cu.torch_memory) return;
  PyObject *mods = PySys_GetObject("modules"); /* borrowed */
  PyObject *torch = mods ? PyDict_GetItemString(mods, "torch") : NULL;
  if (!torch) return;
  if (lgpy.pause) lgpy.pause(1); /* leakguard's reading, not the program's memory */
  PyObject *tc = PyObject_GetAttrString(torch, "cuda");
  PyObject *ini = tc ? PyObject_CallMethod(tc, "is_initialized", NULL) : NULL;
  if (ini && PyObject_IsTrue(ini) == 1) {
    PyObject *n = PyObject_CallMethod(tc, "device_count", NULL);
    long nd = n ? PyLong_AsLong(n) : 0;
    Py_XDECREF(n);
    for (long d = 0; d < nd && d < LG_GPU_MAX_DEVICES; d++) {
      PyObject *a = PyObject_CallMethod(tc, "memory_allocated", "l", d);
      PyObject *r = PyObject_CallMethod(tc, "memory_reserved", "l", d);
      long long av = a ? PyLong_AsLongLong(a) : -1, rv = r ? PyLong_AsLongLong(r) : -1;
      Py_XDECREF(a);
      Py_XDECREF(r);
      if (PyErr_Occurred() || av < 0 || rv < 0) break;
      cu.torch_memory((int)d, av, rv);
    }
  }
  Py_XDECREF(ini);
  Py_XDECREF(tc);
  PyErr_Clear(); /* never break the program over a diagnostic */
  if (lgpy.pause) lgpy.pause(0);
}

/* The device address, size and recorded site of a CUDA storage (data_ptr, nbytes). */
static void device_site(PyObject *st, uintptr_t *ptr, uint64_t *nbytes, uint32_t *site) {
  PyObject *dp = st ? PyObject_CallMethod(st, "data_ptr", NULL) : NULL;
  PyObject *nb = st ? PyObject_CallMethod(st, "nbytes", NULL) : NULL;
  if (dp && nb) {
    *ptr = (uintptr_t)PyLong_AsUnsignedLongLong(dp);
    *nbytes = PyLong_AsUnsignedLongLong(nb);
    uint32_t s;
    if (!PyErr_Occurred() && *ptr && cu.site_of && cu.site_of((uint64_t)*ptr, &s, NULL) == 0) *site = s;
  }
  Py_XDECREF(dp);
  Py_XDECREF(nb);
}

static int on_cuda(PyObject *o) {
  PyObject *dev = PyObject_GetAttrString(o, "device");
  PyObject *type = dev ? PyObject_GetAttrString(dev, "type") : NULL;
  int yes = type && PyUnicode_Check(type) && PyUnicode_CompareWithASCIIString(type, "cuda") == 0;
  Py_XDECREF(dev);
  Py_XDECREF(type);
  PyErr_Clear();
  return yes;
}

int lgpy_cuda_storage_site(PyObject *st, uintptr_t *ptr, uint64_t *nbytes, uint32_t *site) {
  *site = 0;
  if (!on_cuda(st)) return 0;
  device_site(st, ptr, nbytes, site);
  PyErr_Clear();
  return 1;
}

int lgpy_cuda_tensor_site(PyObject *t, uintptr_t *ptr, uint64_t *nbytes, uint32_t *site) {
  *site = 0;
  if (!on_cuda(t)) return 0;
  PyObject *st = PyObject_HasAttrString(t, "untyped_storage") ? PyObject_CallMethod(t, "untyped_storage", NULL)
                                                              : PyObject_CallMethod(t, "storage", NULL);
  device_site(st, ptr, nbytes, site);
  Py_XDECREF(st);
  PyErr_Clear();
  return 1;
}

static int set_num(PyObject *d, const char *k, double v) {
  PyObject *o = PyLong_FromDouble(v);
  int rc = o ? PyDict_SetItemString(d, k, o) : -1;
  Py_XDECREF(o);
  return rc;
}

/* cuda_memory() -> {"devices": {0: {...}}, "torch_cuda": bool, "gc_triggered_without_cuda_cleanup_count": n} */
PyObject *lgpy_cuda_memory(PyObject *self, PyObject *noargs) {
  (void)self, (void)noargs;
  PyObject *out = PyDict_New(), *devs = PyDict_New();
  if (!out || !devs) goto fail;
  int nd = cu.devices ? cu.devices() : 0;
  for (int d = 0; d < nd; d++) {
    lg_cuda_stats_t st;
    if (!cu.stats || cu.stats(d, &st) != 0) continue;
    PyObject *e = PyDict_New(), *key = PyLong_FromLong(d);
    if (!e || !key || PyDict_SetItem(devs, key, e) < 0 || set_num(e, "device_bytes", (double)st.device_bytes) ||
        set_num(e, "managed_bytes", (double)st.managed_bytes) || set_num(e, "pinned_bytes", (double)st.pinned_bytes) ||
        set_num(e, "registered_bytes", (double)st.registered_bytes) ||
        set_num(e, "pool_reserved_bytes", (double)st.pool_reserved_bytes) ||
        set_num(e, "pool_used_bytes", (double)st.pool_used_bytes) ||
        set_num(e, "total_bytes", (double)st.total_bytes) || set_num(e, "contexts", st.contexts) ||
        set_num(e, "contexts_recreated", st.contexts_recreated)) {
      Py_XDECREF(e);
      Py_XDECREF(key);
      goto fail;
    }
    Py_DECREF(e);
    Py_DECREF(key);
  }
  /* torch's view, per device, when its CUDA is initialised */
  PyObject *mods = PySys_GetObject("modules");
  PyObject *torch = mods ? PyDict_GetItemString(mods, "torch") : NULL;
  PyObject *tc = torch ? PyObject_GetAttrString(torch, "cuda") : NULL;
  PyObject *ini = tc ? PyObject_CallMethod(tc, "is_initialized", NULL) : NULL;
  int torch_cuda = ini && PyObject_IsTrue(ini) == 1;
  if (torch_cuda) {
    PyObject *n = PyObject_CallMethod(tc, "device_count", NULL);
    long tn = n ? PyLong_AsLong(n) : 0;
    Py_XDECREF(n);
    for (long d = 0; d < tn; d++) {
      PyObject *key = PyLong_FromLong(d);
      PyObject *e = key ? PyDict_GetItem(devs, key) : NULL; /* borrowed */
      if (key && !e) {
        e = PyDict_New();
        if (e) PyDict_SetItem(devs, key, e), Py_DECREF(e);
      }
      PyObject *a = PyObject_CallMethod(tc, "memory_allocated", "l", d);
      PyObject *r = PyObject_CallMethod(tc, "memory_reserved", "l", d);
      if (e && a && r) {
        PyDict_SetItemString(e, "torch_allocated_bytes", a);
        PyDict_SetItemString(e, "torch_reserved_bytes", r);
      }
      Py_XDECREF(a);
      Py_XDECREF(r);
      Py_XDECREF(key);
    }
  }
  Py_XDECREF(ini);
  Py_XDECREF(tc);
  PyErr_Clear();
  if (PyDict_SetItemString(out, "devices", devs) < 0 ||
      PyDict_SetItemString(out, "torch_cuda", torch_cuda ? Py_True : Py_False) < 0 ||
      set_num(out, "gc_triggered_without_cuda_cleanup_count", cu.gc_count ? (double)cu.gc_count() : 0))
    goto fail;
  Py_DECREF(devs);
  return out;
fail:
  Py_XDECREF(out);
  Py_XDECREF(devs);
  return NULL;
}
