/* SPDX-License-Identifier: MIT */
/*
 * leakguard.explain(): who holds the leaked memory.
 *
 * 1. Roots: every module's __dict__ (sys.modules) and every thread's frame locals.
 * 2. One multi-source BFS over the object graph with tp_traverse (C, no Python code
 *    runs), so the first parent of each object is on a shortest chain from a root.
 *    Objects gc.get_objects() knows but the BFS did not reach are added as "unrooted"
 *    roots afterwards (reference cycles, objects held only from C).
 * 3. Attribution to allocation sites with lg_site_of(): tensor storages by their data
 *    pointer (CPU storages are posix_memalign blocks), other objects by their recorded
 *    block (pymalloc wrapped, or PYTHONMALLOC=malloc; the GC pre-header precedes GC
 *    objects).
 * 4. Owners of the target sites (top suspects, else the largest attributable sites)
 *    are grouped by (site, kind, chain with indices wildcarded); tensors sharing a
 *    storage (views) count their bytes once.
 * 5. Autograd graphs rooted at reachable tensors are walked (grad_fn.next_functions)
 *    and their saved tensors attributed: a retained graph is named as such.
 * Everything is bounded by a wall-time budget and an object cap (truncated=true).
 * Every visited object is held by a strong reference until the end, so Python code
 * run by the attribution (torch calls, reprs) cannot free what we point at.
 */
#include "core/hash.h"
#include "python/explain.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ------------------------------------------------------------------ explain */

static int holders_seq;

static PyObject *pick_targets(ex_t *E, hold_t *H, PyObject *stacks, int top, uintptr_t *sptr, const char **from) {
  PyObject *list = NULL;
  if (stacks) {
    *from = "argument";
    list = PySequence_List(stacks);
    if (!list) return NULL;
    for (Py_ssize_t j = 0; j < PyList_GET_SIZE(list); j++)
      if (PySet_Add(H->targets, PyList_GET_ITEM(list, j)) < 0) {
        Py_DECREF(list);
        return NULL;
      }
    return list;
  }
  *from = "suspects";
  PyObject *sus = lgpy_read_suspects();
  if (!sus) return NULL;
  list = PyList_New(0);
  /* A suspect is an allocation site: every stack of it ("stacks") is a target. */
  for (Py_ssize_t j = 0, taken = 0; list && j < PyList_GET_SIZE(sus) && taken < top; j++) {
    PyObject *s = PyList_GET_ITEM(sus, j);
    PyObject *st = PyDict_Check(s) ? PyDict_GetItemString(s, "stack") : NULL;
    PyObject *all = PyDict_Check(s) ? PyDict_GetItemString(s, "stacks") : NULL;
    if (!st || !PyLong_Check(st)) continue;
    taken++;
    Py_ssize_t n = all && PyList_Check(all) ? PyList_GET_SIZE(all) : 0;
    for (Py_ssize_t k = -1; k < n; k++) {
      PyObject *x = k < 0 ? st : PyList_GET_ITEM(all, k);
      if (PyLong_Check(x) && PySet_Contains(H->targets, x) == 0) {
        PySet_Add(H->targets, x);
        PyList_Append(list, x);
      }
    }
  }
  Py_DECREF(sus);
  if (!list) return NULL;
  /* and the largest sites we can attribute (storages counted once): the collector's
   * suspects lag a leak's first second or so, and may still be a finished start-up's */
  *from = PyList_GET_SIZE(list) ? "suspects+largest" : "largest";
  size_t hs = 1 << 16;
  while (hs < (size_t)E->n) hs <<= 1;
  uint32_t *hk = calloc(hs, sizeof *hk);
  uint64_t *hv = calloc(hs, sizeof *hv);
  PyObject *seen = PySet_New(NULL), *tot = NULL;
  size_t used = 0;
  for (Py_ssize_t ii = 0; hk && hv && seen && ii < 2 * E->n; ii++) {
    Py_ssize_t i = ii >> 1;
    uint32_t s = (ii & 1) ? E->site2[i] : E->site[i];
    if (!s) continue;
    if (E->flags[i] & F_TENSOR) {
      PyObject *pk = PyLong_FromVoidPtr((void *)sptr[i]);
      int was = pk ? PySet_Contains(seen, pk) : 1;
      if (was == 0) PySet_Add(seen, pk);
      Py_XDECREF(pk);
      if (was) continue;
    }
    size_t h = ((size_t)s * LG_HASH_GOLDEN32) & (hs - 1);
    while (hk[h] && hk[h] != s) h = (h + 1) & (hs - 1);
    if (!hk[h]) {
      if (used * 2 >= hs) continue; /* full enough: ignore new sites */
      hk[h] = s;
      used++;
    }
    hv[h] += (ii & 1) ? E->bytes2[i] : E->bytes[i];
  }
  tot = PyDict_New();
  for (size_t h = 0; tot && hk && hv && h < hs; h++) {
    if (!hk[h]) continue;
    PyObject *k = PyLong_FromUnsignedLong(hk[h]);
    PyObject *nv = PyLong_FromUnsignedLongLong(hv[h]);
    if (k && nv) PyDict_SetItem(tot, k, nv);
    Py_XDECREF(k);
    Py_XDECREF(nv);
  }
  free(hk);
  free(hv);
  PyObject *items = tot ? PyDict_Items(tot) : NULL;
  PyObject *op = PyImport_ImportModule("operator");
  PyObject *key = op ? PyObject_CallMethod(op, "itemgetter", "i", 1) : NULL;
  PyObject *kw = key ? Py_BuildValue("{s:O,s:O}", "key", key, "reverse", Py_True) : NULL;
  PyObject *sorted = NULL;
  if (items && kw) {
    PyObject *bi = PyEval_GetBuiltins();
    PyObject *sf = PyDict_GetItemString(bi, "sorted");
    PyObject *a = PyTuple_Pack(1, items);
    sorted = (sf && a) ? PyObject_Call(sf, a, kw) : NULL;
    Py_XDECREF(a);
  }
  for (Py_ssize_t j = 0; sorted && j < PyList_GET_SIZE(sorted) && j < top; j++) {
    PyObject *st = PyTuple_GET_ITEM(PyList_GET_ITEM(sorted, j), 0);
    if (PySet_Contains(H->targets, st) != 0) continue;
    PySet_Add(H->targets, st);
    PyList_Append(list, st);
  }
  Py_XDECREF(tot);
  Py_XDECREF(seen);
  Py_XDECREF(items);
  Py_XDECREF(op);
  Py_XDECREF(key);
  Py_XDECREF(kw);
  Py_XDECREF(sorted);
  if (PyErr_Occurred()) {
    Py_DECREF(list);
    return NULL;
  }
  return list;
}

static int write_doc(PyObject *doc, char *path, size_t pathsz) {
  const char *dir = lgpy_dir();
  if (!dir) return 0;
  PyObject *json = PyImport_ImportModule("json");
  PyObject *kw = Py_BuildValue("{s:O}", "ensure_ascii", Py_False);
  PyObject *fn = json ? PyObject_GetAttrString(json, "dumps") : NULL;
  PyObject *a = PyTuple_Pack(1, doc);
  PyObject *text = (fn && kw && a) ? PyObject_Call(fn, a, kw) : NULL;
  Py_XDECREF(json);
  Py_XDECREF(kw);
  Py_XDECREF(fn);
  Py_XDECREF(a);
  if (!text) return -1;
  Py_ssize_t len;
  const char *u = PyUnicode_AsUTF8AndSize(text, &len);
  int rc = -1;
  if (u) {
    char tmp[4200];
    snprintf(path, pathsz, "%s/" LG_FILE_HOLDERS, dir, (int)getpid(), ++holders_seq);
    snprintf(tmp, sizeof tmp, "%s/" LG_FILE_HOLDERS_TMP, dir, (int)getpid(), holders_seq);
    /* ours alone: a stale temporary removed, then O_EXCL|O_NOFOLLOW (never written
     * through a planted file or link) */
    int fd = unlink(tmp) == 0 || errno == ENOENT ? open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644)
                                                 : -1;
    FILE *f = fd >= 0 ? fdopen(fd, "wb") : NULL;
    if (!f && fd >= 0) close(fd);
    if (f) {
      int ok = fwrite(u, 1, (size_t)len, f) == (size_t)len;
      ok &= fputc('\n', f) != EOF;
      ok &= fclose(f) == 0;
      if (ok && rename(tmp, path) == 0) rc = 1;
      else unlink(tmp);
    }
    if (rc < 0) PySys_WriteStderr("leakguard: cannot write %s: %s\n", path, strerror(errno));
    rc = rc < 0 ? 0 : 1; /* a diagnostic never fails the program */
  }
  Py_DECREF(text);
  return rc;
}

/* One explain at a time: the walk keeps process-wide state, and Python code it calls
 * (torch's Tensor.storage) can run the watcher's pending call (watch.c) inside it. */
static int explaining;

int lgpy_explaining(void) { return explaining; }

static PyObject *explain_once(PyObject *stacks, int top, double budget_s, Py_ssize_t max_objects, int write,
                              const char *why, long request);

/* An explain that failed still answers: a holders file with no holder and the error,
 * so that the collector stops waiting and the report can say why (the exception is
 * kept for the caller). */
static void write_failure(const char *why, long request, double t0) {
  PyObject *type, *value, *tb;
  PyErr_Fetch(&type, &value, &tb);
  PyObject *text = value ? PyObject_Str(value) : NULL;
  const char *msg = text ? PyUnicode_AsUTF8(text) : NULL;
  const char *tname = type && PyType_Check(type) ? ((PyTypeObject *)type)->tp_name : "error";
  PyErr_Clear();
  PyObject *err = PyUnicode_FromFormat("%s: %s", tname, msg ? msg : "?");
  PyObject *doc =
      err ? Py_BuildValue("{s:l,s:K,s:d,s:O,s:n,s:s,s:l,s:O,s:[]}", "pid", (long)getpid(), "step",
                          (unsigned long long)lgpy_steps, "elapsed_s", now_s() - t0, "truncated", Py_False,
                          "objects_scanned", (Py_ssize_t)0, "why", why, "request", request, "error", err, "holders")
          : NULL;
  char path[4096];
  if (doc) write_doc(doc, path, sizeof path);
  PyErr_Clear();
  Py_XDECREF(doc);
  Py_XDECREF(err);
  Py_XDECREF(text);
  PyErr_Restore(type, value, tb);
}

PyObject *lgpy_explain(PyObject *stacks, int top, double budget_s, Py_ssize_t max_objects, int write, const char *why,
                       long request) {
  if (explaining) Py_RETURN_NONE;
  explaining = 1;
  double t0 = now_s();
  PyObject *r = explain_once(stacks, top, budget_s, max_objects, write, why ? why : "call", request);
  if (!r && write) write_failure(why ? why : "call", request, t0);
  explaining = 0;
  return r;
}

/* One explain's state, shared by its steps (explain_once). */
typedef struct {
  ex_t E;
  hold_t H;
  uintptr_t *sptr;               /* per node: the data pointer of a tensor's storage */
  PyObject *targets;             /* the target stack ids (list) */
  const char *from;              /* where they came from: "suspects", ... */
  PyObject *seen, *keep, *cache; /* the autograd walk's */
  int32_t best;                  /* the tensor with the longest grad_fn chain, -1: none */
  graph_t bestg;
  double t0; /* wall time at the start */
  int dbg;   /* LG_ENV_EXPLAIN_DEBUG: the steps' times on stderr */
} run_t;

/* The run's tables and torch's types (when torch is imported). 0, -1 with an exception. */
static int run_setup(run_t *R, Py_ssize_t max_objects, double deadline) {
  ex_t *E = &R->E;
  hold_t *H = &R->H;
  E->max = max_objects;
  E->deadline = deadline;
  E->memo = PyDict_New();
  H->groups = PyDict_New();
  H->order = PyList_New(0);
  H->storages = PyDict_New();
  H->sto_first = PyDict_New();
  H->targets = PySet_New(NULL);
  if (!E->memo || !H->groups || !H->order || !H->storages || !H->sto_first || !H->targets) return -1;
  images_refresh();
  rev_cache = PyDict_New();
  PyObject *name = PyUnicode_FromString("torch");
  PyObject *torch = name ? PyImport_GetModule(name) : NULL;
  Py_XDECREF(name);
  PyObject *tt = torch ? PyObject_GetAttrString(torch, "Tensor") : NULL;
  if (tt && PyType_Check(tt)) g_tensor = E->tensor = (PyTypeObject *)tt;
  else Py_XDECREF(tt);
  static const char *const storage_names[2] = {"UntypedStorage", "TypedStorage"};
  for (int k = 0; torch && k < 2; k++) {
    PyObject *st = PyObject_GetAttrString(torch, storage_names[k]);
    if (st && PyType_Check(st)) E->storage[k] = (PyTypeObject *)st;
    else Py_XDECREF(st);
  }
  Py_XDECREF(torch);
  PyErr_Clear();
  if (ex_grow(E) < 0) {
    PyErr_NoMemory();
    return -1;
  }
  return 0;
}

/* 1-2: roots, BFS, then what only the collector's list knows. */
static void run_walk(run_t *R) {
  ex_t *E = &R->E;
  add_module_roots(E);
  add_frame_roots(E);
  PyErr_Clear();
  Py_ssize_t q = 0;
  int stopped = ex_bfs(E, &q);
  if (!stopped && !E->full) {
    PyObject *gc = PyImport_ImportModule("gc");
    PyObject *all = gc ? PyObject_CallMethod(gc, "get_objects", NULL) : NULL;
    Py_XDECREF(gc);
    for (Py_ssize_t j = 0; all && j < PyList_GET_SIZE(all) && !E->full; j++) {
      PyObject *o = PyList_GET_ITEM(all, j);
      if (ex_find(E, o) < 0) ex_add_root(E, o, R_UNROOTED, NULL);
    }
    Py_XDECREF(all);
    PyErr_Clear();
    stopped = ex_bfs(E, &q);
  }
  if (stopped || E->full) E->truncated = 1;
}

/* 3: attribution of every node to its site (tensors by their storage). 0, -1. */
static int run_attribute(run_t *R) {
  ex_t *E = &R->E;
  hold_t *H = &R->H;
  R->sptr = calloc((size_t)E->n + 1, sizeof *R->sptr);
  if (!R->sptr) {
    PyErr_NoMemory();
    return -1;
  }
  uintptr_t *sptr = R->sptr;
  for (Py_ssize_t i = 0; i < E->n; i++) {
    PyObject *o = E->obj[i];
    if (E->tensor && PyObject_TypeCheck(o, E->tensor)) {
      E->flags[i] |= F_TENSOR;
      continue;
    }
    if (is_storage(E, o)) { /* a storage held directly: attributed like a tensor's */
      E->flags[i] |= F_TENSOR | F_STORAGE;
      continue;
    }
    size_t sz = 0;
    E->site[i] = lgpy_object_site(o, &sz);
    E->bytes[i] = sz;
    if (lgpy.pymalloc_is_malloc || lgpy.block || lgpy.pymalloc_wrapped) { /* malloc blocks, exact addresses */
      const void *buf = NULL;
      size_t cap = 0;
      if (PyList_Check(o)) {
        buf = ((PyListObject *)o)->ob_item;
        cap = (size_t)((PyListObject *)o)->allocated * sizeof(PyObject *);
      } else if (PyByteArray_Check(o)) {
        buf = ((PyByteArrayObject *)o)->ob_bytes;
        cap = (size_t)((PyByteArrayObject *)o)->ob_alloc;
      }
      if (buf && cap) {
        E->site2[i] = lgpy.pymalloc_wrapped ? lgpy_pyobj_site(buf, cap, &sz) : lgpy_block_site(buf, cap, &sz);
        E->bytes2[i] = E->site2[i] ? sz : 0;
      }
    }
  }
  for (Py_ssize_t i = 0; i < E->n; i++) {
    if (!(E->flags[i] & F_TENSOR)) continue;
    if (cpu_s() > E->deadline) {
      E->truncated = 1;
      break;
    }
    uint64_t nb = 0;
    E->site[i] =
        (E->flags[i] & F_STORAGE) ? storage_site(E->obj[i], &sptr[i], &nb) : tensor_site(E->obj[i], &sptr[i], &nb);
    E->bytes[i] = nb;
    if (E->site[i]) {
      PyObject *pk = PyLong_FromVoidPtr((void *)sptr[i]);
      PyObject *iv = PyLong_FromSsize_t(i);
      if (pk && iv && !PyDict_Contains(H->sto_first, pk)) PyDict_SetItem(H->sto_first, pk, iv);
      Py_XDECREF(pk);
      Py_XDECREF(iv);
    }
  }
  return 0;
}

/* 4: the target sites, as a bitmap over stack ids for the hot loops. 0, -1. */
static int run_targets(run_t *R, PyObject *stacks, int top) {
  hold_t *H = &R->H;
  R->targets = pick_targets(&R->E, H, stacks, top, R->sptr, &R->from);
  if (!R->targets) return -1;
  for (Py_ssize_t j = 0; j < PyList_GET_SIZE(R->targets); j++) {
    unsigned long v = PyLong_AsUnsignedLong(PyList_GET_ITEM(R->targets, j));
    if (PyErr_Occurred()) return -1;
    if (v >= (1UL << 26)) continue; /* not a stack id */
    if (v >= H->ntgt_bits) {
      uint32_t nb = H->ntgt_bits ? H->ntgt_bits : 4096;
      while (nb <= v) nb *= 2;
      uint8_t *t = PyMem_RawRealloc(H->tgt, nb / 8);
      if (!t) {
        PyErr_NoMemory();
        return -1;
      }
      memset(t + H->ntgt_bits / 8, 0, (nb - H->ntgt_bits) / 8);
      H->tgt = t;
      H->ntgt_bits = nb;
    }
    H->tgt[v >> 3] |= (uint8_t)(1u << (v & 7));
  }
  return 0;
}

/* 5: autograd graphs rooted at reachable tensors (they claim the saved tensors that no
 * rooted tensor owns); keeps the tensor with the longest grad_fn chain. 0, -1. */
static int run_autograd(run_t *R) {
  ex_t *E = &R->E;
  R->seen = PySet_New(NULL);
  R->keep = PyList_New(0);
  R->cache = PyDict_New();
  if (!R->seen || !R->keep || !R->cache) return -1;
  int roots = 0;
  long budget_nodes = 500000;
  for (Py_ssize_t i = 0; E->tensor && i < E->n && roots < 256 && budget_nodes > 0; i++) {
    if (!(E->flags[i] & F_TENSOR) || (E->flags[i] & F_STORAGE) || root_kind_of(E, (int32_t)i) == R_UNROOTED) continue;
    if (cpu_s() > E->deadline) {
      E->truncated = 1;
      break;
    }
    PyObject *gf = PyObject_GetAttrString(E->obj[i], "grad_fn");
    if (!gf || gf == Py_None) {
      Py_XDECREF(gf);
      PyErr_Clear();
      continue;
    }
    roots++;
    graph_t G = {0};
    G.per_site = PyDict_New();
    if (!G.per_site) {
      Py_DECREF(gf);
      return -1;
    }
    graph_walk(E, &R->H, R->seen, R->keep, R->cache, gf, &G, budget_nodes);
    budget_nodes -= G.nodes;
    if (G.depth > R->bestg.depth) {
      R->best = (int32_t)i;
      R->bestg = G;
      R->bestg.per_site = NULL;
    }
    PyObject *k, *v;
    Py_ssize_t pos = 0;
    while (PyDict_Next(G.per_site, &pos, &k, &v)) {
      uint32_t site = (uint32_t)PyLong_AsUnsignedLong(k);
      PyObject *h = holder_for(E, &R->H, site, "autograd-graph", (int32_t)i, NULL);
      if (!h) break;
      long long c = PyLong_AsLongLong(PyTuple_GET_ITEM(v, 0));
      long long b = PyLong_AsLongLong(PyTuple_GET_ITEM(v, 1));
      dict_add_int(h, "objects", c);
      dict_add_int(h, "bytes", b);
      PyObject *chain = PyDict_GetItemString(h, "chain");
      set_detail(h, "root", chain ? chain_root_text(chain) : NULL);
      set_detail(h, "grad_fn", PyUnicode_FromString(short_tname(gf)));
      set_detail(h, "grad_fn_chain_length", PyLong_FromLong(graph_chain_length(&G)));
      set_detail(h, "graph_nodes", PyLong_FromLong(G.nodes));
      add_detail(h, "saved_tensors", c);
      add_detail(h, "saved_bytes", b);
    }
    Py_DECREF(G.per_site);
    Py_DECREF(gf);
    if (PyErr_Occurred()) return -1;
  }
  return 0;
}

/* A tensor or storage node i of a target site: its storage's holder (views of one
 * storage count its bytes once; a storage an autograd graph saved is the graph's). */
static int own_tensor(run_t *R, Py_ssize_t i) {
  ex_t *E = &R->E;
  hold_t *H = &R->H;
  PyObject *pk = PyLong_FromVoidPtr((void *)R->sptr[i]);
  if (!pk) return -1;
  PyObject *h = PyDict_GetItem(H->storages, pk);
  int sto = (E->flags[i] & F_STORAGE) != 0, rc = 0;
  if (h == Py_True) {             /* saved by an autograd graph that holds it */
  } else if (h && h != Py_None) { /* a view of a storage already counted */
    if (!sto) add_detail(h, "tensors", 1);
  } else {
    h = holder_for(E, H, E->site[i], sto ? "storage" : "tensor", (int32_t)i, NULL);
    if (!h || PyDict_SetItem(H->storages, pk, h) < 0) {
      rc = -1;
    } else {
      if (!sto) add_detail(h, "tensors", 1);
      add_detail(h, "storages", 1);
      dict_add_int(h, "objects", 1);
      dict_add_int(h, "bytes", (long long)E->bytes[i]);
    }
  }
  Py_DECREF(pk);
  return rc;
}

/* 6: owners of the target sites, grouped. 0, -1. */
static int run_owners(run_t *R) {
  ex_t *E = &R->E;
  hold_t *H = &R->H;
  long nown = 0;
  for (Py_ssize_t i = 0; i < E->n; i++) {
    int t1 = is_target(H, E->site[i]), t2 = is_target(H, E->site2[i]);
    if (!t1 && !t2) continue;
    if ((nown++ & 63) == 0 && cpu_s() > E->deadline) {
      E->truncated = 1;
      break;
    }
    if (E->flags[i] & F_TENSOR) {
      if (own_tensor(R, i) < 0) return -1;
      continue;
    }
    PyObject *h;
    if (t1 && t2 && E->site[i] == E->site2[i]) { /* object and its data from one line */
      h = holder_for(E, H, E->site[i], "object", (int32_t)i, NULL);
      if (!h) return -1;
      dict_add_int(h, "objects", 1);
      dict_add_int(h, "bytes", (long long)(E->bytes[i] + E->bytes2[i]));
      continue;
    }
    for (int k = 0; k < 2; k++) {
      if (!(k ? t2 : t1)) continue;
      h = holder_for(E, H, k ? E->site2[i] : E->site[i], "object", (int32_t)i, NULL);
      if (!h) return -1;
      dict_add_int(h, "objects", 1);
      dict_add_int(h, "bytes", (long long)(k ? E->bytes2[i] : E->bytes[i]));
    }
  }
  return 0;
}

/* A retained graph whose nodes are the leak (backward() freed the saved tensors, the
 * grad_fn nodes themselves are not Python objects): the longest chain is named for the
 * targets nothing else explains. 0, -1. */
static int run_retained_graph(run_t *R) {
  if (R->best < 0 || R->bestg.depth < 16) return 0;
  hold_t *H = &R->H;
  for (Py_ssize_t j = 0; j < PyList_GET_SIZE(R->targets); j++) {
    uint32_t site = (uint32_t)PyLong_AsUnsignedLong(PyList_GET_ITEM(R->targets, j));
    int has = 0;
    for (Py_ssize_t k = 0; k < PyList_GET_SIZE(H->order) && !has; k++) {
      PyObject *st = PyDict_GetItemString(PyList_GET_ITEM(H->order, k), "stack");
      has = st && PyLong_AsUnsignedLong(st) == site;
    }
    if (has) continue;
    PyObject *h = holder_for(&R->E, H, site, "autograd-graph", R->best, NULL);
    if (!h) return -1;
    dict_add_int(h, "objects", R->bestg.nodes);
    PyObject *gf = PyObject_GetAttrString(R->E.obj[R->best], "grad_fn");
    PyObject *chain = PyDict_GetItemString(h, "chain");
    set_detail(h, "root", chain ? chain_root_text(chain) : NULL);
    set_detail(h, "grad_fn", PyUnicode_FromString(gf ? short_tname(gf) : "?"));
    Py_XDECREF(gf);
    PyErr_Clear();
    set_detail(h, "grad_fn_chain_length", PyLong_FromLong(graph_chain_length(&R->bestg)));
    set_detail(h, "graph_nodes", PyLong_FromLong(R->bestg.nodes));
    set_detail(h, "saved_tensors", PyLong_FromLong(0));
    set_detail(h, "saved_bytes", PyLong_FromLong(0));
    set_detail(h, "inferred", Py_NewRef(Py_True));
  }
  return 0;
}

/* The holders by bytes, at most 8 chains per stack (a new list, NULL with an
 * exception); an autograd graph's chain ends with the graph's own description. */
static PyObject *run_output(run_t *R) {
  PyObject *op = PyImport_ImportModule("operator");
  PyObject *key = op ? PyObject_CallMethod(op, "itemgetter", "s", "bytes") : NULL;
  PyObject *kw = key ? Py_BuildValue("{s:O,s:O}", "key", key, "reverse", Py_True) : NULL;
  PyObject *sf = PyDict_GetItemString(PyEval_GetBuiltins(), "sorted");
  PyObject *a = PyTuple_Pack(1, R->H.order);
  PyObject *sorted = (kw && sf && a) ? PyObject_Call(sf, a, kw) : NULL;
  Py_XDECREF(op);
  Py_XDECREF(key);
  Py_XDECREF(kw);
  Py_XDECREF(a);
  PyObject *out = sorted ? PyList_New(0) : NULL, *per_stack = out ? PyDict_New() : NULL;
  for (Py_ssize_t j = 0; per_stack && j < PyList_GET_SIZE(sorted); j++) {
    PyObject *h = PyList_GET_ITEM(sorted, j);
    PyObject *st = PyDict_GetItemString(h, "stack");
    PyObject *c = PyDict_GetItem(per_stack, st);
    long n = c ? PyLong_AsLong(c) : 0;
    if (n >= 8) continue;
    PyObject *nv = PyLong_FromLong(n + 1);
    PyObject *kd = PyDict_GetItemString(h, "kind");
    if (kd && PyUnicode_CompareWithASCIIString(kd, "autograd-graph") == 0) {
      PyObject *det = PyDict_GetItemString(h, "detail");
      PyObject *len = det ? PyDict_GetItemString(det, "grad_fn_chain_length") : NULL;
      PyObject *sv = det ? PyDict_GetItemString(det, "saved_tensors") : NULL;
      PyObject *ch = PyDict_GetItemString(h, "chain");
      PyObject *inf = det ? PyDict_GetItemString(det, "inferred") : NULL;
      PyObject *nodes = det ? PyDict_GetItemString(det, "graph_nodes") : NULL;
      /* an inferred holder (the site's blocks are the graph's own nodes, not saved
       * tensors) says how many nodes, not "0 saved tensors" */
      PyObject *it = inf == Py_True && len && nodes
                         ? PyUnicode_FromFormat("autograd graph (grad_fn chain %S, %S nodes)", len, nodes)
                     : (len && sv)
                         ? PyUnicode_FromFormat("autograd graph (grad_fn chain %S, %S saved tensors)", len, sv)
                         : NULL;
      if (ch && it) PyList_Append(ch, it);
      Py_XDECREF(it);
    }
    if (!nv || PyDict_SetItem(per_stack, st, nv) < 0 || PyList_Append(out, h) < 0) {
      Py_XDECREF(nv);
      Py_CLEAR(out);
      break;
    }
    Py_DECREF(nv);
  }
  if (!per_stack) Py_CLEAR(out);
  Py_XDECREF(per_stack);
  Py_XDECREF(sorted);
  return out;
}

/* The explain document; written to the run directory when write (with its "path"). */
static PyObject *run_document(run_t *R, PyObject *holders, int write, const char *why, long request) {
  PyObject *doc = Py_BuildValue("{s:l,s:K,s:d,s:O,s:n,s:s,s:O,s:O,s:s,s:l}", "pid", (long)getpid(), "step",
                                (unsigned long long)lgpy_steps, "elapsed_s", now_s() - R->t0, "truncated",
                                R->E.truncated ? Py_True : Py_False, "objects_scanned", R->E.n, "targets_from", R->from,
                                "targets", R->targets, "holders", holders, "why", why, "request", request);
  if (doc && write) {
    char path[4096];
    int w = write_doc(doc, path, sizeof path);
    if (w < 0) {
      Py_CLEAR(doc);
    } else if (w > 0) {
      PyObject *p = PyUnicode_DecodeFSDefault(path);
      if (p) PyDict_SetItemString(doc, "path", p);
      Py_XDECREF(p);
    }
  }
  return doc;
}

static void run_free(run_t *R) {
  Py_CLEAR(rev_cache);
  g_tensor = NULL;
  free(R->sptr);
  ex_free(&R->E);
  Py_XDECREF(R->H.groups);
  Py_XDECREF(R->H.order);
  Py_XDECREF(R->H.storages);
  Py_XDECREF(R->H.sto_first);
  Py_XDECREF(R->H.targets);
  PyMem_RawFree(R->H.tgt);
  Py_XDECREF(R->targets);
  Py_XDECREF(R->seen);
  Py_XDECREF(R->keep);
  Py_XDECREF(R->cache);
}

static PyObject *explain_once(PyObject *stacks, int top, double budget_s, Py_ssize_t max_objects, int write,
                              const char *why, long request) {
  double t0 = now_s(), c0 = cpu_s();
  if (budget_s <= 0) {
    const char *b = getenv(LG_ENV_EXPLAIN_BUDGET_S);
    budget_s = b ? atof(b) : 0;
    if (budget_s <= 0) budget_s = 2.0;
  }
  if (max_objects <= 0) max_objects = 5000000;
  if (max_objects > INT32_MAX / 2) max_objects = INT32_MAX / 2;
  if (top <= 0) top = 5;
  if (top > 64) top = 64;

  int gc_was = lgpy_gc_disable(); /* no collection while we hold raw pointers */
  /* the walk's tables are leakguard's memory, not the program's */
  if (lgpy.pause) lgpy.pause(1);
  if (lgpy.held) lgpy.held(1); /* the program waits for us: no snapshot meanwhile */
  run_t R;
  memset(&R, 0, sizeof R);
  R.from = "suspects";
  R.best = -1;
  R.t0 = t0;
  R.dbg = getenv(LG_ENV_EXPLAIN_DEBUG) != NULL;
  PyObject *doc = NULL, *holders = NULL;
  /* the graph walk gets 60 % of the budget, attribution the rest (CPU time) */
  if (run_setup(&R, max_objects, c0 + budget_s * 0.6) < 0) goto done;
  run_walk(&R);
  R.E.deadline = c0 + budget_s;
  if (R.dbg) fprintf(stderr, "explain: graph %zd objects %.3fs\n", R.E.n, now_s() - t0);
  if (run_attribute(&R) < 0) goto done;
  if (R.dbg) fprintf(stderr, "explain: attributed %.3fs\n", now_s() - t0);
  if (run_targets(&R, stacks, top) < 0 || run_autograd(&R) < 0 || run_owners(&R) < 0) goto done;
  if (R.dbg) fprintf(stderr, "explain: owners %.3fs\n", now_s() - t0);
  if (run_retained_graph(&R) < 0) goto done;
  if (R.dbg) fprintf(stderr, "explain: autograd %.3fs\n", now_s() - t0);
  dict_bounds(R.H.order);
  holders = run_output(&R);
  if (holders) doc = run_document(&R, holders, write, why, request);

done:
  if (lgpy.held) lgpy.held(0);
  if (lgpy.pause) lgpy.pause(0);
  run_free(&R);
  Py_XDECREF(holders);
  if (gc_was) lgpy_gc_enable();
  if (!doc && !PyErr_Occurred()) PyErr_SetString(PyExc_RuntimeError, "leakguard: explain failed");
  return doc;
}
