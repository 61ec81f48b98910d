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
 *    pointer (CPU storages are posix_memalign blocks), other objects by their malloc
 *    block (PYTHONMALLOC=malloc; the GC pre-header precedes GC objects).
 * 4. Owners of the target sites (top suspects, else the largest attributable sites)
 *    are grouped by (site, kind, chain with indices wildcarded); tensors sharing a
 *    storage (views) count their bytes once.
 * 5. Autograd graphs rooted at reachable tensors are walked (grad_fn.next_functions)
 *    and their saved tensors attributed: a retained graph is named as such.
 * Everything is bounded by a wall-time budget and an object cap (truncated=true).
 * Every visited object is held by a strong reference until the end, so Python code
 * run by the attribution (torch calls, reprs) cannot free what we point at.
 */
#include "python/explain.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ------------------------------------------------------------------ holders */

static int dict_add_int(PyObject *d, const char *k, long long add) {
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

/* Adds one owner to its group (creating it). chain_norm is the grouping key. */
static PyObject *holder_for(ex_t *E, hold_t *H, uint32_t site, const char *kind, int32_t i, PyObject *extra_desc) {
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

static void dict_bounds(PyObject *holders) {
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

/* Saved tensors of an autograd node type: its "_saved_*" attribute names (cached). */

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
    size_t h = ((size_t)s * 0x9E3779B1u) & (hs - 1);
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

static int set_detail(PyObject *h, const char *k, PyObject *v /* stolen */) {
  PyObject *d = PyDict_GetItemString(h, "detail");
  int r = (d && v) ? PyDict_SetItemString(d, k, v) : -1;
  Py_XDECREF(v);
  return r;
}

static int add_detail(PyObject *h, const char *k, long long add) {
  PyObject *d = PyDict_GetItemString(h, "detail");
  return d ? dict_add_int(d, k, add) : -1;
}

static PyObject *chain_root_text(PyObject *chain) {
  Py_ssize_t n = PyList_GET_SIZE(chain);
  PyObject *head = PyList_GetSlice(chain, 0, n > 1 ? n - 1 : n);
  PyObject *sep = PyUnicode_FromString(" \u2192 ");
  PyObject *r = (head && sep) ? PyUnicode_Join(sep, head) : NULL;
  Py_XDECREF(head);
  Py_XDECREF(sep);
  return r;
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
    FILE *f = fopen(tmp, "wb");
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
  ex_t E;
  hold_t H;
  memset(&E, 0, sizeof E);
  memset(&H, 0, sizeof H);
  uintptr_t *sptr = NULL;
  PyObject *doc = NULL, *targets = NULL, *seen = NULL, *keep = NULL, *cache = NULL, *sorted = NULL, *out = NULL,
           *per_stack = NULL;
  const char *from = "suspects";
  E.max = max_objects;
  E.deadline = c0 + budget_s * 0.6; /* the graph walk; attribution gets the rest (CPU time) */
  E.memo = PyDict_New();
  H.groups = PyDict_New();
  H.order = PyList_New(0);
  H.storages = PyDict_New();
  H.sto_first = PyDict_New();
  H.targets = PySet_New(NULL);
  if (!E.memo || !H.groups || !H.order || !H.storages || !H.sto_first || !H.targets) goto done;
  images_refresh();
  rev_cache = PyDict_New();
  {
    PyObject *name = PyUnicode_FromString("torch");
    PyObject *torch = name ? PyImport_GetModule(name) : NULL;
    Py_XDECREF(name);
    PyObject *tt = torch ? PyObject_GetAttrString(torch, "Tensor") : NULL;
    if (tt && PyType_Check(tt)) g_tensor = E.tensor = (PyTypeObject *)tt;
    else Py_XDECREF(tt);
    static const char *const storage_names[2] = {"UntypedStorage", "TypedStorage"};
    for (int k = 0; torch && k < 2; k++) {
      PyObject *st = PyObject_GetAttrString(torch, storage_names[k]);
      if (st && PyType_Check(st)) E.storage[k] = (PyTypeObject *)st;
      else Py_XDECREF(st);
    }
    Py_XDECREF(torch);
    PyErr_Clear();
  }
  if (ex_grow(&E) < 0) {
    PyErr_NoMemory();
    goto done;
  }

  /* 1-2: roots, BFS, then what only the collector's list knows */
  add_module_roots(&E);
  add_frame_roots(&E);
  PyErr_Clear();
  Py_ssize_t q = 0;
  int stopped = ex_bfs(&E, &q);
  if (!stopped && !E.full) {
    PyObject *gc = PyImport_ImportModule("gc");
    PyObject *all = gc ? PyObject_CallMethod(gc, "get_objects", NULL) : NULL;
    Py_XDECREF(gc);
    for (Py_ssize_t j = 0; all && j < PyList_GET_SIZE(all) && !E.full; j++) {
      PyObject *o = PyList_GET_ITEM(all, j);
      if (ex_find(&E, o) < 0) ex_add_root(&E, o, R_UNROOTED, NULL);
    }
    Py_XDECREF(all);
    PyErr_Clear();
    stopped = ex_bfs(&E, &q);
  }
  if (stopped || E.full) E.truncated = 1;
  E.deadline = c0 + budget_s;
  int dbg = getenv(LG_ENV_EXPLAIN_DEBUG) != NULL;
  if (dbg) fprintf(stderr, "explain: graph %zd objects %.3fs\n", E.n, now_s() - t0);

  /* 3: attribution */
  sptr = calloc((size_t)E.n + 1, sizeof *sptr);
  if (!sptr) {
    PyErr_NoMemory();
    goto done;
  }
  for (Py_ssize_t i = 0; i < E.n; i++) {
    PyObject *o = E.obj[i];
    if (E.tensor && PyObject_TypeCheck(o, E.tensor)) {
      E.flags[i] |= F_TENSOR;
      continue;
    }
    if (is_storage(&E, o)) { /* a storage held directly: attributed like a tensor's */
      E.flags[i] |= F_TENSOR | F_STORAGE;
      continue;
    }
    size_t sz = 0;
    E.site[i] = lgpy_object_site(o, &sz);
    E.bytes[i] = sz;
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
        E.site2[i] = lgpy.pymalloc_wrapped ? lgpy_pyobj_site(buf, cap, &sz) : lgpy_block_site(buf, cap, &sz);
        E.bytes2[i] = E.site2[i] ? sz : 0;
      }
    }
  }
  for (Py_ssize_t i = 0; i < E.n; i++) {
    if (!(E.flags[i] & F_TENSOR)) continue;
    if (cpu_s() > E.deadline) {
      E.truncated = 1;
      break;
    }
    uint64_t nb = 0;
    E.site[i] = (E.flags[i] & F_STORAGE) ? storage_site(E.obj[i], &sptr[i], &nb) : tensor_site(E.obj[i], &sptr[i], &nb);
    E.bytes[i] = nb;
    if (E.site[i]) {
      PyObject *pk = PyLong_FromVoidPtr((void *)sptr[i]);
      PyObject *iv = PyLong_FromSsize_t(i);
      if (pk && iv && !PyDict_Contains(H.sto_first, pk)) PyDict_SetItem(H.sto_first, pk, iv);
      Py_XDECREF(pk);
      Py_XDECREF(iv);
    }
  }

  if (dbg) fprintf(stderr, "explain: attributed %.3fs\n", now_s() - t0);
  /* 4: the target sites */
  targets = pick_targets(&E, &H, stacks, top, sptr, &from);
  if (!targets) goto done;
  for (Py_ssize_t j = 0; j < PyList_GET_SIZE(targets); j++) {
    unsigned long v = PyLong_AsUnsignedLong(PyList_GET_ITEM(targets, j));
    if (PyErr_Occurred()) goto done;
    if (v >= (1UL << 26)) continue; /* not a stack id */
    if (v >= H.ntgt_bits) {
      uint32_t nb = H.ntgt_bits ? H.ntgt_bits : 4096;
      while (nb <= v) nb *= 2;
      uint8_t *t = PyMem_RawRealloc(H.tgt, nb / 8);
      if (!t) {
        PyErr_NoMemory();
        goto done;
      }
      memset(t + H.ntgt_bits / 8, 0, (nb - H.ntgt_bits) / 8);
      H.tgt = t;
      H.ntgt_bits = nb;
    }
    H.tgt[v >> 3] |= (uint8_t)(1u << (v & 7));
  }
  /* 5: autograd graphs rooted at reachable tensors (they claim the saved tensors that
   * no rooted tensor owns) */
  seen = PySet_New(NULL);
  keep = PyList_New(0);
  cache = PyDict_New();
  if (!seen || !keep || !cache) goto done;
  int32_t best = -1;
  graph_t bestg = {0};
  {
    int roots = 0;
    long budget_nodes = 500000;
    for (Py_ssize_t i = 0; E.tensor && i < E.n && roots < 256 && budget_nodes > 0; i++) {
      if (!(E.flags[i] & F_TENSOR) || (E.flags[i] & F_STORAGE) || root_kind_of(&E, (int32_t)i) == R_UNROOTED) continue;
      if (cpu_s() > E.deadline) {
        E.truncated = 1;
        break;
      }
      PyObject *gf = PyObject_GetAttrString(E.obj[i], "grad_fn");
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
        goto done;
      }
      graph_walk(&E, &H, seen, keep, cache, gf, &G, budget_nodes);
      budget_nodes -= G.nodes;
      if (G.depth > bestg.depth) {
        best = (int32_t)i;
        bestg = G;
        bestg.per_site = NULL;
      }
      PyObject *k, *v;
      Py_ssize_t pos = 0;
      while (PyDict_Next(G.per_site, &pos, &k, &v)) {
        uint32_t site = (uint32_t)PyLong_AsUnsignedLong(k);
        PyObject *h = holder_for(&E, &H, site, "autograd-graph", (int32_t)i, NULL);
        if (!h) break;
        long long c = PyLong_AsLongLong(PyTuple_GET_ITEM(v, 0));
        long long b = PyLong_AsLongLong(PyTuple_GET_ITEM(v, 1));
        dict_add_int(h, "objects", c);
        dict_add_int(h, "bytes", b);
        PyObject *chain = PyDict_GetItemString(h, "chain");
        set_detail(h, "root", chain ? chain_root_text(chain) : NULL);
        set_detail(h, "grad_fn", PyUnicode_FromString(short_tname(gf)));
        set_detail(h, "grad_fn_chain_length", PyLong_FromLong(G.depth));
        set_detail(h, "graph_nodes", PyLong_FromLong(G.nodes));
        add_detail(h, "saved_tensors", c);
        add_detail(h, "saved_bytes", b);
      }
      Py_DECREF(G.per_site);
      Py_DECREF(gf);
      if (PyErr_Occurred()) goto done;
    }
  }
  /* 6: owners of the target sites, grouped */
  long nown = 0;
  for (Py_ssize_t i = 0; i < E.n; i++) {
    int t1 = is_target(&H, E.site[i]), t2 = is_target(&H, E.site2[i]);
    if (!t1 && !t2) continue;
    if ((nown++ & 63) == 0 && cpu_s() > E.deadline) {
      E.truncated = 1;
      break;
    }
    PyObject *h;
    if (E.flags[i] & F_TENSOR) {
      PyObject *pk = PyLong_FromVoidPtr((void *)sptr[i]);
      if (!pk) goto done;
      h = PyDict_GetItem(H.storages, pk);
      if (h == Py_True) { /* saved by an autograd graph that holds it */
        Py_DECREF(pk);
        continue;
      }
      int sto = (E.flags[i] & F_STORAGE) != 0;
      if (h && h != Py_None) { /* a view of a storage already counted */
        Py_DECREF(pk);
        if (!sto) add_detail(h, "tensors", 1);
        continue;
      }
      h = holder_for(&E, &H, E.site[i], sto ? "storage" : "tensor", (int32_t)i, NULL);
      if (!h || PyDict_SetItem(H.storages, pk, h) < 0) {
        Py_DECREF(pk);
        goto done;
      }
      Py_DECREF(pk);
      if (!sto) add_detail(h, "tensors", 1);
      add_detail(h, "storages", 1);
      dict_add_int(h, "objects", 1);
      dict_add_int(h, "bytes", (long long)E.bytes[i]);
      continue;
    }
    if (t1 && t2 && E.site[i] == E.site2[i]) { /* object and its data from one line */
      h = holder_for(&E, &H, E.site[i], "object", (int32_t)i, NULL);
      if (!h) goto done;
      dict_add_int(h, "objects", 1);
      dict_add_int(h, "bytes", (long long)(E.bytes[i] + E.bytes2[i]));
      continue;
    }
    for (int k = 0; k < 2; k++) {
      if (!(k ? t2 : t1)) continue;
      h = holder_for(&E, &H, k ? E.site2[i] : E.site[i], "object", (int32_t)i, NULL);
      if (!h) goto done;
      dict_add_int(h, "objects", 1);
      dict_add_int(h, "bytes", (long long)(k ? E.bytes2[i] : E.bytes[i]));
    }
  }

  if (dbg) fprintf(stderr, "explain: owners %.3fs\n", now_s() - t0);
  {
    /* A retained graph whose nodes are the leak (backward() freed the saved tensors,
     * the grad_fn nodes themselves are not Python objects): name the longest chain for
     * targets nothing else explains. */
    if (best >= 0 && bestg.depth >= 16) {
      for (Py_ssize_t j = 0; j < PyList_GET_SIZE(targets); j++) {
        uint32_t site = (uint32_t)PyLong_AsUnsignedLong(PyList_GET_ITEM(targets, j));
        int has = 0;
        for (Py_ssize_t k = 0; k < PyList_GET_SIZE(H.order) && !has; k++) {
          PyObject *st = PyDict_GetItemString(PyList_GET_ITEM(H.order, k), "stack");
          has = st && PyLong_AsUnsignedLong(st) == site;
        }
        if (has) continue;
        PyObject *h = holder_for(&E, &H, site, "autograd-graph", best, NULL);
        if (!h) goto done;
        dict_add_int(h, "objects", bestg.nodes);
        PyObject *gf = PyObject_GetAttrString(E.obj[best], "grad_fn");
        PyObject *chain = PyDict_GetItemString(h, "chain");
        set_detail(h, "root", chain ? chain_root_text(chain) : NULL);
        set_detail(h, "grad_fn", PyUnicode_FromString(gf ? short_tname(gf) : "?"));
        Py_XDECREF(gf);
        PyErr_Clear();
        set_detail(h, "grad_fn_chain_length", PyLong_FromLong(bestg.depth));
        set_detail(h, "graph_nodes", PyLong_FromLong(bestg.nodes));
        set_detail(h, "saved_tensors", PyLong_FromLong(0));
        set_detail(h, "saved_bytes", PyLong_FromLong(0));
        set_detail(h, "inferred", Py_NewRef(Py_True));
      }
    }
  }

  if (dbg) fprintf(stderr, "explain: autograd %.3fs\n", now_s() - t0);
  dict_bounds(H.order);
  /* output: by bytes, at most 8 chains per stack */
  {
    PyObject *op = PyImport_ImportModule("operator");
    PyObject *key = op ? PyObject_CallMethod(op, "itemgetter", "s", "bytes") : NULL;
    PyObject *kw = key ? Py_BuildValue("{s:O,s:O}", "key", key, "reverse", Py_True) : NULL;
    PyObject *sf = PyDict_GetItemString(PyEval_GetBuiltins(), "sorted");
    PyObject *a = PyTuple_Pack(1, H.order);
    sorted = (kw && sf && a) ? PyObject_Call(sf, a, kw) : NULL;
    Py_XDECREF(op);
    Py_XDECREF(key);
    Py_XDECREF(kw);
    Py_XDECREF(a);
    if (!sorted) goto done;
  }
  out = PyList_New(0);
  per_stack = PyDict_New();
  if (!out || !per_stack) goto done;
  for (Py_ssize_t j = 0; j < PyList_GET_SIZE(sorted); j++) {
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
      PyObject *it =
          (len && sv) ? PyUnicode_FromFormat("autograd graph (grad_fn chain %S, %S saved tensors)", len, sv) : NULL;
      if (ch && it) PyList_Append(ch, it);
      Py_XDECREF(it);
    }
    if (!nv || PyDict_SetItem(per_stack, st, nv) < 0 || PyList_Append(out, h) < 0) {
      Py_XDECREF(nv);
      goto done;
    }
    Py_DECREF(nv);
  }
  doc = Py_BuildValue("{s:l,s:K,s:d,s:O,s:n,s:s,s:O,s:O,s:s,s:l}", "pid", (long)getpid(), "step",
                      (unsigned long long)lgpy_steps, "elapsed_s", now_s() - t0, "truncated",
                      E.truncated ? Py_True : Py_False, "objects_scanned", E.n, "targets_from", from, "targets",
                      targets, "holders", out, "why", why, "request", request);
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

done:
  if (lgpy.held) lgpy.held(0);
  if (lgpy.pause) lgpy.pause(0);
  Py_CLEAR(rev_cache);
  g_tensor = NULL;
  free(sptr);
  ex_free(&E);
  Py_XDECREF(H.groups);
  Py_XDECREF(H.order);
  Py_XDECREF(H.storages);
  Py_XDECREF(H.sto_first);
  Py_XDECREF(H.targets);
  PyMem_RawFree(H.tgt);
  Py_XDECREF(targets);
  Py_XDECREF(seen);
  Py_XDECREF(keep);
  Py_XDECREF(cache);
  Py_XDECREF(sorted);
  Py_XDECREF(out);
  Py_XDECREF(per_stack);
  if (gc_was) lgpy_gc_enable();
  if (!doc && !PyErr_Occurred()) PyErr_SetString(PyExc_RuntimeError, "leakguard: explain failed");
  return doc;
}
