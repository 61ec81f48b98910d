/* SPDX-License-Identifier: MIT */
/*
 * torch.c - PyTorch in leakguard.explain(): a CPU tensor is attributed by its storage
 * (a posix_memalign block in torch 1.13), a storage held directly (UntypedStorage,
 * TypedStorage) by its own data pointer, and retained autograd graphs are walked
 * through grad_fn.next_functions to the tensors their nodes saved. Only attribute
 * lookups: nothing links libtorch.
 */
#include "python/explain.h"

#include <string.h>

PyObject *tensor_desc(PyObject *t) {
  PyObject *shape = PyObject_GetAttrString(t, "shape");
  PyObject *dtype = PyObject_GetAttrString(t, "dtype");
  PyObject *gf = PyObject_GetAttrString(t, "grad_fn");
  PyObject *out = NULL;
  if (shape && dtype && PyTuple_Check(shape)) {
    PyObject *dts = PyObject_Str(dtype);
    PyObject *parts = PyList_New(0);
    for (Py_ssize_t j = 0; parts && j < PyTuple_GET_SIZE(shape); j++) {
      PyObject *s = PyObject_Str(PyTuple_GET_ITEM(shape, j));
      if (s) PyList_Append(parts, s);
      Py_XDECREF(s);
    }
    PyObject *sep = PyUnicode_FromString("\u00d7");
    PyObject *dims =
        (parts && sep && PyList_GET_SIZE(parts)) ? PyUnicode_Join(sep, parts) : PyUnicode_FromString("scalar");
    const char *dt = dts ? PyUnicode_AsUTF8(dts) : NULL;
    if (dt && strncmp(dt, "torch.", 6) == 0) dt += 6;
    if (dims && dt) {
      if (gf && gf != Py_None)
        out = PyUnicode_FromFormat("%s(%U, %s, grad_fn=%s)", short_tname(t), dims, dt, short_tname(gf));
      else out = PyUnicode_FromFormat("%s(%U, %s)", short_tname(t), dims, dt);
    }
    Py_XDECREF(dts);
    Py_XDECREF(parts);
    Py_XDECREF(sep);
    Py_XDECREF(dims);
  }
  Py_XDECREF(shape);
  Py_XDECREF(dtype);
  Py_XDECREF(gf);
  if (!out) {
    PyErr_Clear();
    out = PyUnicode_FromFormat("%s", short_tname(t));
  }
  return out;
}

/* Storage pointer and size of a CPU strided tensor; 0 when not applicable. */
static int tensor_storage(PyObject *t, uintptr_t *ptr, uint64_t *nbytes) {
  int ok = 0;
  PyObject *dev = PyObject_GetAttrString(t, "device");
  PyObject *dtype = dev ? PyObject_GetAttrString(dev, "type") : NULL;
  PyObject *layout = PyObject_GetAttrString(t, "layout");
  PyObject *ls = layout ? PyObject_Str(layout) : NULL;
  if (dtype && ls && PyUnicode_Check(dtype) && PyUnicode_CompareWithASCIIString(dtype, "cpu") == 0 &&
      PyUnicode_CompareWithASCIIString(ls, "torch.strided") == 0) {
    PyObject *st = PyObject_CallMethod(t, "storage", NULL);
    PyObject *dp = st ? PyObject_CallMethod(st, "data_ptr", NULL) : NULL;
    PyObject *nb = st ? PyObject_CallMethod(st, "nbytes", NULL) : NULL;
    if (dp && nb) {
      *ptr = (uintptr_t)PyLong_AsVoidPtr(dp);
      *nbytes = PyLong_AsUnsignedLongLong(nb);
      ok = !PyErr_Occurred() && *ptr && *nbytes;
    }
    Py_XDECREF(st);
    Py_XDECREF(dp);
    Py_XDECREF(nb);
  }
  Py_XDECREF(dev);
  Py_XDECREF(dtype);
  Py_XDECREF(layout);
  Py_XDECREF(ls);
  PyErr_Clear();
  return ok;
}

PyObject *storage_desc(PyObject *s) {
  PyObject *nb = PyObject_CallMethod(s, "nbytes", NULL);
  PyObject *dev = nb ? PyObject_GetAttrString(s, "device") : NULL;
  PyObject *type = dev ? PyObject_GetAttrString(dev, "type") : NULL;
  PyObject *out = NULL;
  if (nb && type && PyUnicode_Check(type))
    out = PyUnicode_FromFormat("%s(%llu bytes, %U)", short_tname(s), PyLong_AsUnsignedLongLong(nb), type);
  Py_XDECREF(nb);
  Py_XDECREF(dev);
  Py_XDECREF(type);
  if (!out) {
    PyErr_Clear();
    out = PyUnicode_FromFormat("%s", short_tname(s));
  }
  return out;
}

int is_storage(const ex_t *E, PyObject *o) {
  for (int k = 0; k < 2; k++)
    if (E->storage[k] && PyObject_TypeCheck(o, E->storage[k])) return 1;
  return 0;
}

uint32_t storage_site(PyObject *s, uintptr_t *ptr, uint64_t *nbytes) {
  uint32_t cs;
  if (lgpy_cuda_storage_site(s, ptr, nbytes, &cs)) return cs; /* CUDA: src/python/cuda.c */
  PyObject *dp = PyObject_CallMethod(s, "data_ptr", NULL);
  PyObject *nb = dp ? PyObject_CallMethod(s, "nbytes", NULL) : NULL;
  int ok = 0;
  if (dp && nb) {
    *ptr = (uintptr_t)PyLong_AsVoidPtr(dp);
    *nbytes = PyLong_AsUnsignedLongLong(nb);
    ok = !PyErr_Occurred() && *ptr && *nbytes;
  }
  Py_XDECREF(dp);
  Py_XDECREF(nb);
  PyErr_Clear();
  return ok ? lgpy_block_site((const void *)*ptr, (size_t)*nbytes, NULL) : 0;
}

uint32_t tensor_site(PyObject *t, uintptr_t *ptr, uint64_t *nbytes) {
  uint32_t cs;
  if (lgpy_cuda_tensor_site(t, ptr, nbytes, &cs)) return cs; /* CUDA: src/python/cuda.c */
  if (!tensor_storage(t, ptr, nbytes)) return 0;
  return lgpy_block_site((const void *)*ptr, (size_t)*nbytes, NULL);
}

static PyObject *saved_attrs(PyObject *cache, PyObject *node) {
  PyObject *tp = (PyObject *)Py_TYPE(node);
  PyObject *names = PyDict_GetItemWithError(cache, tp);
  if (names) return names;
  if (PyErr_Occurred()) return NULL;
  PyObject *all = PyObject_Dir(node);
  PyObject *lst = PyList_New(0);
  for (Py_ssize_t j = 0; all && lst && j < PyList_GET_SIZE(all); j++) {
    PyObject *n = PyList_GET_ITEM(all, j);
    const char *u = PyUnicode_Check(n) ? PyUnicode_AsUTF8(n) : NULL;
    if (u && strncmp(u, "_saved_", 7) == 0) PyList_Append(lst, n);
  }
  Py_XDECREF(all);
  PyErr_Clear();
  if (!lst) return NULL;
  if (PyDict_SetItem(cache, tp, lst) < 0) {
    Py_DECREF(lst);
    return NULL;
  }
  Py_DECREF(lst);
  return lst;
}

static void graph_saved_tensor(ex_t *E, hold_t *H, graph_t *G, PyObject *v) {
  if (!E->tensor || !PyObject_TypeCheck(v, E->tensor)) return;
  uintptr_t ptr;
  uint64_t nb;
  uint32_t s = tensor_site(v, &ptr, &nb);
  if (!s) return;
  PyObject *pk = PyLong_FromVoidPtr((void *)ptr);
  if (!pk) return;
  int seen = PyDict_Contains(H->storages, pk);
  if (seen == 0) {
    /* a tensor reachable from a root owns it directly: that chain wins */
    PyObject *first = PyDict_GetItem(H->sto_first, pk);
    if (first && root_kind_of(E, (int32_t)PyLong_AsLong(first)) != R_UNROOTED) seen = 1;
  }
  if (seen == 0) PyDict_SetItem(H->storages, pk, is_target(H, s) ? Py_True : Py_None);
  Py_DECREF(pk);
  if (seen != 0) return;
  G->saved++;
  G->saved_bytes += (long)nb;
  if (!is_target(H, s)) return;
  PyObject *sk = PyLong_FromUnsignedLong(s);
  PyObject *cur = sk ? PyDict_GetItem(G->per_site, sk) : NULL;
  long long c = 0, b = 0;
  if (cur) {
    c = PyLong_AsLongLong(PyTuple_GET_ITEM(cur, 0));
    b = PyLong_AsLongLong(PyTuple_GET_ITEM(cur, 1));
  }
  PyObject *nv = Py_BuildValue("(LL)", c + 1, b + (long long)nb);
  if (sk && nv) PyDict_SetItem(G->per_site, sk, nv);
  Py_XDECREF(sk);
  Py_XDECREF(nv);
}

/* The accumulation chain of a graph (graph_t.chain): nodes of gf's type, each the first
 * input of the one before. `total_loss += loss` makes one AddBackward0 a step whose first
 * input is the previous step's: the chain counts the steps, where the graph's depth adds
 * the depth of the first step's own graph. At most cap nodes. */
static long accumulation_chain(PyObject *gf, long cap) {
  long n = 0;
  PyTypeObject *type = Py_TYPE(gf);
  PyObject *node = Py_NewRef(gf);
  while (node && Py_TYPE(node) == type && n < cap) {
    n++;
    PyObject *nf = PyObject_GetAttrString(node, "next_functions");
    Py_DECREF(node);
    node = NULL;
    if (nf && PyTuple_Check(nf) && PyTuple_GET_SIZE(nf) > 0) {
      PyObject *pair = PyTuple_GET_ITEM(nf, 0);
      if (PyTuple_Check(pair) && PyTuple_GET_SIZE(pair) > 0 && PyTuple_GET_ITEM(pair, 0) != Py_None)
        node = Py_NewRef(PyTuple_GET_ITEM(pair, 0));
    }
    Py_XDECREF(nf);
  }
  Py_XDECREF(node);
  PyErr_Clear();
  return n;
}

void graph_walk(ex_t *E, hold_t *H, PyObject *seen, PyObject *keep, PyObject *cache, PyObject *gf, graph_t *G,
                long cap) {
  long ch = accumulation_chain(gf, cap);
  if (ch > G->chain) G->chain = ch;
  PyObject *q = PyList_New(0);
  PyObject *t0 = Py_BuildValue("(Oi)", gf, 1);
  if (!q || !t0) goto out;
  PyList_Append(q, t0);
  Py_DECREF(t0);
  for (Py_ssize_t h = 0; h < PyList_GET_SIZE(q) && G->nodes < cap; h++) {
    if ((h & 255) == 0 && cpu_s() > E->deadline) {
      E->truncated = 1;
      break;
    }
    PyObject *node = PyTuple_GET_ITEM(PyList_GET_ITEM(q, h), 0);
    long d = PyLong_AsLong(PyTuple_GET_ITEM(PyList_GET_ITEM(q, h), 1));
    PyObject *id = PyLong_FromVoidPtr(node);
    int was = id ? PySet_Contains(seen, id) : 1;
    if (was == 0) PySet_Add(seen, id);
    Py_XDECREF(id);
    if (was != 0) continue;
    G->nodes++;
    if (d > G->depth) G->depth = d;
    PyObject *names = saved_attrs(cache, node);
    for (Py_ssize_t j = 0; names && j < PyList_GET_SIZE(names); j++) {
      PyObject *v = PyObject_GetAttr(node, PyList_GET_ITEM(names, j));
      if (!v) {
        PyErr_Clear(); /* freed by backward() */
        continue;
      }
      if (PyTuple_Check(v) || PyList_Check(v)) {
        Py_ssize_t m = PySequence_Fast_GET_SIZE(v);
        for (Py_ssize_t k = 0; k < m; k++) graph_saved_tensor(E, H, G, PySequence_Fast_GET_ITEM(v, k));
      } else {
        graph_saved_tensor(E, H, G, v);
      }
      Py_DECREF(v);
    }
    PyErr_Clear();
    PyObject *nf = PyObject_GetAttrString(node, "next_functions");
    if (nf && PyTuple_Check(nf)) {
      for (Py_ssize_t k = 0; k < PyTuple_GET_SIZE(nf); k++) {
        PyObject *pair = PyTuple_GET_ITEM(nf, k);
        PyObject *fn = PyTuple_Check(pair) && PyTuple_GET_SIZE(pair) ? PyTuple_GET_ITEM(pair, 0) : NULL;
        if (!fn || fn == Py_None) continue;
        PyObject *e = Py_BuildValue("(Ol)", fn, d + 1);
        if (e) PyList_Append(q, e);
        Py_XDECREF(e);
      }
    }
    Py_XDECREF(nf);
    PyErr_Clear();
  }
out:
  /* the queue keeps the grad_fn wrappers alive, so their ids in `seen` stay unique */
  if (q) {
    PyList_Append(keep, q);
    Py_DECREF(q);
  }
}
