/* SPDX-License-Identifier: MIT */
/*
 * holders.c - leakguard.explain()'s holders: the owners of a target site's objects,
 * grouped by (site, kind, chain with indices and keys wildcarded), each a dict of the
 * JSON the collector reads (docs/python.md, "Holders"), with its bounded container and
 * details. explain.c walks, attributes and picks; this file groups and describes.
 */
#include "python/explain.h"

#include <string.h>

int dict_add_int(PyObject *d, const char *k, long long add) {
  PyObject *v = PyDict_GetItemString(d, k);
  long long cur = v ? PyLong_AsLongLong(v) : 0;
  PyObject *nv = PyLong_FromLongLong(cur + add);
  int r = nv ? PyDict_SetItemString(d, k, nv) : -1;
  Py_XDECREF(nv);
  return r;
}

/* A container on the way from a root to node i whose size has a bound: an
 * functools.lru_cache with a maxsize, a collections.deque with a maxlen. The nearest
 * such container becomes the holder's detail "bound": {container, maxsize, size, full}.
 * The report calls a suspect held through a full bounded container a plateau (issue #10:
 * a bounded lru_cache of variable-size tensors looked like a step leak). Only C methods
 * of the standard library's own types are called: no program code runs. */
static PyObject *bound_of(ex_t *E, int32_t i) {
  for (int depth = 0; i >= 0 && depth < 64; depth++, i = E->parent[i]) {
    PyObject *o = E->obj[i];
    const char *tn = Py_TYPE(o)->tp_name;
    long long maxsize = -1, size = -1;
    const char *container = NULL;
    if (!strcmp(tn, "functools._lru_cache_wrapper")) {
      PyObject *ci = PyObject_CallMethod(o, "cache_info", NULL);
      if (ci && PyTuple_Check(ci) && PyTuple_GET_SIZE(ci) >= 4 && PyLong_Check(PyTuple_GET_ITEM(ci, 2))) {
        maxsize = PyLong_AsLongLong(PyTuple_GET_ITEM(ci, 2));
        size = PyLong_AsLongLong(PyTuple_GET_ITEM(ci, 3));
        container = "lru_cache";
      }
      Py_XDECREF(ci);
    } else if (!strcmp(tn, "collections.deque")) {
      PyObject *ml = PyObject_GetAttrString(o, "maxlen");
      if (ml && PyLong_Check(ml)) {
        maxsize = PyLong_AsLongLong(ml);
        size = (long long)PyObject_Length(o);
        container = "deque";
      }
      Py_XDECREF(ml);
    }
    PyErr_Clear();
    if (container && maxsize >= 0 && size >= 0)
      return Py_BuildValue("{s:s,s:L,s:L,s:O}", "container", container, "maxsize", maxsize, "size", size, "full",
                           size >= maxsize ? Py_True : Py_False);
  }
  return NULL;
}

/* Which objects a dict's values are (FNV-1a over their addresses, in the dict's order). */
static unsigned long long values_fp(PyObject *d) {
  Py_ssize_t pos = 0;
  PyObject *k, *v;
  unsigned long long h = 1469598103934665603ULL;
  while (PyDict_Next(d, &pos, &k, &v)) {
    h ^= (unsigned long long)(uintptr_t)v;
    h *= 1099511628211ULL;
  }
  return h;
}

/* A module's globals or a frame's locals, walked as a root: a namespace whose names are
 * rebound, never a cache. Its length stays put and its values change at every step of
 * a loop, so dict_bounds() would take it for a dict whose length stopped growing: a
 * graph held by `total_loss`, a module global, was once called a plateau that way.
 * (A namespace reached through its module or class is a collapsed dict already.) */
static int is_namespace_root(ex_t *E, int32_t p) {
  if (E->parent[p] >= 0) return 0;
  int kind = E->rkind[-E->parent[p] - 1];
  return kind == R_MODULE || kind == R_FRAME;
}

/* Where the reference that keeps node i is made (issue #34 item 2): the allocation site
 * of its holder's own growth, which the recorder already has. The list holding i: its
 * item array, last grown at an append; the dict: its keys table, last grown at a
 * d[k] = v; i held by a name of a module or a frame (total_loss): i itself, made where
 * the name was last bound to a new object. Detail "kept_at": {stack, container}; the
 * report resolves the stack to the program's own line. Nothing when the buffer is not
 * recorded (sampled mode, mostly). */
static void kept_at(ex_t *E, int32_t i, PyObject *h) {
  int32_t p = E->parent[i];
  PyObject *po = p >= 0 ? E->obj[p] : NULL;
  uint32_t site = 0;
  const char *what = NULL;
  if (po && is_namespace_root(E, p)) {
    site = lgpy_object_site(E->obj[i], NULL);
    what = "name";
  } else if (po && PyList_Check(po)) {
    PyListObject *l = (PyListObject *)po;
    site = lgpy_buffer_site(l->ob_item, (size_t)l->allocated * sizeof(PyObject *));
    what = "list";
  } else if (po && PyDict_Check(po) && !is_collapsed_dict(E, p)) {
    site = lgpy_buffer_site(((PyDictObject *)po)->ma_keys, 0);
    what = "dict";
  }
  if (site) set_detail(h, "kept_at", Py_BuildValue("{s:I,s:s}", "stack", site, "container", what));
}

/* Adds one owner to its group (creating it). chain_norm is the grouping key. */
PyObject *holder_for(ex_t *E, hold_t *H, uint32_t site, const char *kind, int32_t i, PyObject *extra_desc) {
  int32_t p = E->parent[i];
  int cacheable = 0;
  if (!extra_desc && p >= 0 && E->parent[p] >= 0) {
    PyObject *po = E->obj[p];
    cacheable =
        PyList_Check(po) || PyTuple_Check(po) || PyAnySet_Check(po) || (PyDict_Check(po) && !is_collapsed_dict(E, p));
  }
  if (cacheable && H->last_h && H->last_site == site && H->last_parent == p && H->last_type == Py_TYPE(E->obj[i]) &&
      H->last_kind == kind)
    return H->last_h;
  PyObject *h = NULL;
  H->last_h = NULL;
  PyObject *norm = owner_chain(E, i, 0, extra_desc);
  if (!norm) return NULL;
  PyObject *nt = PyList_AsTuple(norm);
  Py_DECREF(norm);
  PyObject *key = nt ? Py_BuildValue("(IsO)", site, kind, nt) : NULL;
  Py_XDECREF(nt);
  if (!key) return NULL;
  h = PyDict_GetItemWithError(H->groups, key);
  if (h) {
    Py_DECREF(key);
    goto found; /* borrowed */
  }
  if (PyErr_Occurred()) {
    Py_DECREF(key);
    return NULL;
  }
  PyObject *chain = owner_chain(E, i, 1, extra_desc);
  h = chain ? Py_BuildValue("{s:I,s:O,s:i,s:K,s:s,s:{}}", "stack", site, "chain", chain, "objects", 0, "bytes", 0ULL,
                            "kind", kind, "detail")
            : NULL;
  Py_XDECREF(chain);
  if (h) kept_at(E, i, h);
  PyObject *bound = h ? bound_of(E, i) : NULL;
  if (bound) {
    PyObject *d = PyDict_GetItemString(h, "detail");
    if (d) PyDict_SetItemString(d, "bound", bound);
    Py_DECREF(bound);
  } else if (h && p >= 0 && PyDict_Check(E->obj[p]) && !is_collapsed_dict(E, p) && !is_namespace_root(E, p)) {
    /* held as the values of a plain dict: its length and which objects its values are,
     * for dict_bounds() once the holder's bytes are known */
    PyObject *d = PyDict_GetItemString(h, "detail");
    PyObject *dd = Py_BuildValue("{s:K,s:n,s:K}", "addr", (unsigned long long)(uintptr_t)E->obj[p], "len",
                                 PyDict_Size(E->obj[p]), "values", values_fp(E->obj[p]));
    if (d && dd) PyDict_SetItemString(d, "dict", dd);
    Py_XDECREF(dd);
  }
  if (!h || PyDict_SetItem(H->groups, key, h) < 0 || PyList_Append(H->order, h) < 0) {
    Py_XDECREF(h);
    Py_DECREF(key);
    return NULL;
  }
  Py_DECREF(key);
  Py_DECREF(h); /* borrowed now (owned by groups) */
found:
  if (cacheable) {
    H->last_h = h;
    H->last_site = site;
    H->last_parent = p;
    H->last_type = Py_TYPE(E->obj[i]);
    H->last_kind = kind;
  }
  return h;
}

/* A plain dict whose length stopped growing (issue #10): the values of a dict with a
 * fixed set of keys, replaced by values of varying size, make a curve that rises and
 * falls and can look like a step leak; the dict holds len values whatever happens. A
 * holder through a dict's values is given the bound {container: dict, maxsize: len,
 * size: len, full} when an earlier explanation of that stack in this process saw the
 * same dict at the same length, its values have been replaced since (other objects:
 * the program went on storing into it), and they are not getting bigger (their mean
 * size at most 1.5 times what it was at that first sighting: values that grow,
 * d[k] = cat(d[k], x), are a leak with a fixed set of keys). Two sightings of the very
 * same values say nothing: a growing cache seen twice after its last insertion (an
 * explanation asked for while the loop ended, then the one at exit) must stay a leak.
 * Remembered across explanations: (stack, dict address) -> (len, mean bytes, values)
 * when first seen at that length. */
static PyObject *dict_seen;

void dict_bounds(PyObject *holders) {
  if (!dict_seen && !(dict_seen = PyDict_New())) return;
  for (Py_ssize_t j = 0; j < PyList_GET_SIZE(holders); j++) {
    PyObject *h = PyList_GET_ITEM(holders, j);
    PyObject *det = PyDict_GetItemString(h, "detail");
    PyObject *dd = det ? PyDict_GetItemString(det, "dict") : NULL;
    if (!dd) continue;
    long long addr = PyLong_AsLongLong(PyDict_GetItemString(dd, "addr"));
    Py_ssize_t len = PyLong_AsSsize_t(PyDict_GetItemString(dd, "len"));
    PyObject *vals = PyDict_GetItemString(dd, "values");
    unsigned long long vfp = vals ? PyLong_AsUnsignedLongLong(vals) : 0;
    double objects = PyFloat_AsDouble(PyDict_GetItemString(h, "objects"));
    double bytes = PyFloat_AsDouble(PyDict_GetItemString(h, "bytes"));
    PyErr_Clear();
    double mean = objects > 0 ? bytes / objects : 0;
    PyObject *key = Py_BuildValue("(OL)", PyDict_GetItemString(h, "stack"), addr);
    PyObject *prev = key ? PyDict_GetItem(dict_seen, key) : NULL;
    if (prev && PyTuple_Check(prev) && PyTuple_GET_SIZE(prev) == 3 && len >= 2 &&
        PyLong_AsSsize_t(PyTuple_GET_ITEM(prev, 0)) == len &&
        mean <= 1.5 * PyFloat_AsDouble(PyTuple_GET_ITEM(prev, 1)) &&
        PyLong_AsUnsignedLongLong(PyTuple_GET_ITEM(prev, 2)) != vfp) {
      PyObject *b =
          Py_BuildValue("{s:s,s:n,s:n,s:O}", "container", "dict", "maxsize", len, "size", len, "full", Py_True);
      if (b) PyDict_SetItemString(det, "bound", b);
      Py_XDECREF(b);
    }
    if (!prev || !PyTuple_Check(prev) || PyTuple_GET_SIZE(prev) != 3 ||
        PyLong_AsSsize_t(PyTuple_GET_ITEM(prev, 0)) != len) {
      PyObject *now = Py_BuildValue("(ndK)", len, mean, vfp); /* first seen at this length */
      if (key && now) PyDict_SetItem(dict_seen, key, now);
      Py_XDECREF(now);
    }
    Py_XDECREF(key);
    PyErr_Clear();
    PyDict_DelItemString(dd, "addr"); /* addresses mean nothing outside this process */
    PyErr_Clear();
    PyDict_DelItemString(dd, "values");
    PyErr_Clear();
  }
}

int set_detail(PyObject *h, const char *k, PyObject *v /* stolen */) {
  PyObject *d = PyDict_GetItemString(h, "detail");
  int r = (d && v) ? PyDict_SetItemString(d, k, v) : -1;
  Py_XDECREF(v);
  return r;
}

int add_detail(PyObject *h, const char *k, long long add) {
  PyObject *d = PyDict_GetItemString(h, "detail");
  return d ? dict_add_int(d, k, add) : -1;
}

PyObject *chain_root_text(PyObject *chain) {
  Py_ssize_t n = PyList_GET_SIZE(chain);
  PyObject *head = PyList_GetSlice(chain, 0, n > 1 ? n - 1 : n);
  PyObject *sep = PyUnicode_FromString(" \u2192 ");
  PyObject *r = (head && sep) ? PyUnicode_Join(sep, head) : NULL;
  Py_XDECREF(head);
  Py_XDECREF(sep);
  return r;
}
