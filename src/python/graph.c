/* SPDX-License-Identifier: MIT */
/*
 * graph.c - the object graph search of leakguard.explain(): a table of every object
 * visited (strong references, so nothing is freed under us), the roots (module globals,
 * every thread's frame locals) and one multi-source BFS with tp_traverse, so the first
 * parent of each object is on a shortest chain from a root.
 */
#include "core/hash.h"
#include "python/explain.h"

#include <stdlib.h>

static inline size_t hptr(const void *p, size_t mask) {
  uint64_t x = (uint64_t)(uintptr_t)p >> 4;
  x *= LG_HASH_GOLDEN64;
  return (size_t)(x ^ (x >> 29)) & mask;
}

int32_t ex_find(ex_t *E, PyObject *o) {
  size_t mask = E->ht_size - 1;
  for (size_t h = hptr(o, mask);; h = (h + 1) & mask) {
    int32_t v = E->ht[h];
    if (!v) return -1;
    if (E->obj[v - 1] == o) return v - 1;
  }
}

int ex_grow(ex_t *E) {
  Py_ssize_t nc = E->cap ? E->cap * 2 : 1 << 16;
  PyObject **o = realloc(E->obj, nc * sizeof *o);
  if (o) E->obj = o;
  int32_t *p = realloc(E->parent, nc * sizeof *p);
  if (p) E->parent = p;
  uint32_t *s = realloc(E->site, nc * sizeof *s);
  if (s) E->site = s;
  uint64_t *b = realloc(E->bytes, nc * sizeof *b);
  if (b) E->bytes = b;
  uint8_t *f = realloc(E->flags, nc * sizeof *f);
  if (f) E->flags = f;
  uint32_t *s2 = realloc(E->site2, nc * sizeof *s2);
  if (s2) E->site2 = s2;
  uint64_t *b2 = realloc(E->bytes2, nc * sizeof *b2);
  if (b2) E->bytes2 = b2;
  if (!o || !p || !s || !b || !f || !s2 || !b2) return -1;
  E->cap = nc;
  size_t hs = 1;
  while (hs < (size_t)nc * 2) hs <<= 1;
  if (hs > E->ht_size) {
    int32_t *ht = calloc(hs, sizeof *ht);
    if (!ht) return -1;
    free(E->ht);
    E->ht = ht;
    E->ht_size = hs;
    for (Py_ssize_t i = 0; i < E->n; i++) {
      size_t h = hptr(E->obj[i], hs - 1);
      while (ht[h]) h = (h + 1) & (hs - 1);
      ht[h] = (int32_t)i + 1;
    }
  }
  return 0;
}

int32_t ex_add(ex_t *E, PyObject *o, int32_t parent) {
  int32_t f = ex_find(E, o);
  if (f >= 0) return f;
  if (E->n >= E->max) {
    E->full = 1;
    return -1;
  }
  if (E->n == E->cap && ex_grow(E) < 0) {
    E->full = 1;
    return -1;
  }
  int32_t i = (int32_t)E->n++;
  E->obj[i] = Py_NewRef(o);
  E->parent[i] = parent;
  E->site[i] = 0;
  E->bytes[i] = 0;
  E->site2[i] = 0;
  E->bytes2[i] = 0;
  E->flags[i] = 0;
  size_t mask = E->ht_size - 1;
  size_t h = hptr(o, mask);
  while (E->ht[h]) h = (h + 1) & mask;
  E->ht[h] = i + 1;
  return i;
}

int ex_add_root(ex_t *E, PyObject *o, int kind, PyObject *name /* stolen */) {
  if (ex_find(E, o) >= 0) {
    Py_XDECREF(name);
    return 0;
  }
  if (E->nroots == E->rcap) {
    int nc = E->rcap ? E->rcap * 2 : 256;
    PyObject **rn = realloc(E->rname, nc * sizeof *rn);
    if (rn) E->rname = rn;
    uint8_t *rk = realloc(E->rkind, nc);
    if (rk) E->rkind = rk;
    if (!rn || !rk) {
      Py_XDECREF(name);
      return -1;
    }
    E->rcap = nc;
  }
  int r = E->nroots;
  if (ex_add(E, o, -r - 1) < 0) {
    Py_XDECREF(name);
    return -1;
  }
  E->rname[r] = name;
  E->rkind[r] = (uint8_t)kind;
  E->nroots++;
  return 0;
}

static int visit_cb(PyObject *o, void *arg) {
  ex_t *E = arg;
  if (o && !E->full) ex_add(E, o, E->cur);
  return 0;
}

int ex_bfs(ex_t *E, Py_ssize_t *q) {
  for (; *q < E->n; (*q)++) {
    if ((*q & 1023) == 0 && cpu_s() > E->deadline) return 1;
    PyObject *o = E->obj[*q];
    if (!PyObject_IS_GC(o)) continue;
    traverseproc tr = Py_TYPE(o)->tp_traverse;
    if (!tr) continue;
    E->cur = (int32_t)*q;
    tr(o, visit_cb, E);
  }
  return 0;
}

void ex_free(ex_t *E) {
  for (Py_ssize_t i = 0; i < E->n; i++) Py_DECREF(E->obj[i]);
  for (int r = 0; r < E->nroots; r++) Py_XDECREF(E->rname[r]);
  free(E->obj);
  free(E->parent);
  free(E->site);
  free(E->bytes);
  free(E->site2);
  free(E->bytes2);
  free(E->flags);
  free(E->ht);
  free(E->rname);
  free(E->rkind);
  Py_XDECREF(E->memo);
  Py_XDECREF((PyObject *)E->tensor);
  Py_XDECREF((PyObject *)E->storage[0]);
  Py_XDECREF((PyObject *)E->storage[1]);
}

int root_kind_of(ex_t *E, int32_t i) {
  while (E->parent[i] >= 0) i = E->parent[i];
  return E->rkind[-E->parent[i] - 1];
}

/* ------------------------------------------------------------------ roots */

void add_module_roots(ex_t *E) {
  PyObject *mods = PyImport_GetModuleDict();
  PyObject *items = mods ? PyDict_Items(mods) : NULL;
  if (!items) {
    PyErr_Clear();
    return;
  }
  for (int pass = 0; pass < 2; pass++) {
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(items); i++) {
      PyObject *kv = PyList_GET_ITEM(items, i);
      PyObject *name = PyTuple_GET_ITEM(kv, 0), *mod = PyTuple_GET_ITEM(kv, 1);
      if (!PyUnicode_Check(name) || !PyModule_Check(mod)) continue;
      int is_main = PyUnicode_CompareWithASCIIString(name, "__main__") == 0;
      if (is_main != (pass == 0)) continue;
      PyObject *d = PyModule_GetDict(mod);
      if (d) ex_add_root(E, d, R_MODULE, Py_NewRef(name));
    }
  }
  Py_DECREF(items);
}

void add_frame_roots(ex_t *E) {
  PyObject *sys = PyImport_ImportModule("sys");
  PyObject *frames = sys ? PyObject_CallMethod(sys, "_current_frames", NULL) : NULL;
  Py_XDECREF(sys);
  if (!frames || !PyDict_Check(frames)) {
    PyErr_Clear();
    Py_XDECREF(frames);
    return;
  }
  PyObject *k, *v;
  Py_ssize_t pos = 0;
  while (PyDict_Next(frames, &pos, &k, &v)) {
    if (!PyFrame_Check(v)) continue;
    PyFrameObject *f = (PyFrameObject *)Py_NewRef(v);
    int depth = 0;
    while (f && depth++ < 1000) {
      PyObject *loc = lgpy_frame_locals(f);
      if (loc) {
        PyCodeObject *co = PyFrame_GetCode(f);
        PyObject *nm = co ? Py_NewRef(co->co_name) : PyUnicode_FromString("?");
        Py_XDECREF(co);
        ex_add_root(E, loc, R_FRAME, nm);
      }
      Py_XDECREF(loc);
      PyFrameObject *b = PyFrame_GetBack(f);
      Py_DECREF(f);
      f = b;
    }
    Py_XDECREF(f);
  }
  Py_DECREF(frames);
}
