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
#include "python/lgpy.h"
#include "core/blockhdr.h"

#include <dlfcn.h>
#include <errno.h>
#include <link.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <structmember.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

extern uint64_t lgpy_steps;

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* ------------------------------------------------------------------ safe block check */

typedef struct {
  uintptr_t lo, hi;
} range_t;
static range_t *img;
static size_t nimg, capimg;

static int phdr_cb(struct dl_phdr_info *info, size_t size, void *arg) {
  for (int i = 0; i < info->dlpi_phnum; i++) {
    const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
    if (ph->p_type != PT_LOAD) continue;
    if (nimg == capimg) {
      size_t nc = capimg ? capimg * 2 : 256;
      range_t *n = realloc(img, nc * sizeof *n);
      if (!n) return 1;
      img = n;
      capimg = nc;
    }
    img[nimg].lo = info->dlpi_addr + ph->p_vaddr;
    img[nimg].hi = img[nimg].lo + ph->p_memsz;
    nimg++;
  }
  return 0;
}

static int range_cmp(const void *a, const void *b) {
  const range_t *x = a, *y = b;
  return x->lo < y->lo ? -1 : x->lo > y->lo;
}

static void images_refresh(void) {
  nimg = 0;
  dl_iterate_phdr(phdr_cb, NULL);
  qsort(img, nimg, sizeof *img, range_cmp);
}

/* Inside a loaded ELF image (static objects: small ints, builtin types, ...). */
static int in_image(uintptr_t a) {
  if (!nimg) images_refresh();
  size_t lo = 0, hi = nimg;
  while (lo < hi) {
    size_t mid = (lo + hi) / 2;
    if (img[mid].hi <= a)
      lo = mid + 1;
    else if (img[mid].lo > a)
      hi = mid;
    else
      return 1;
  }
  return 0;
}

/* A recorded malloc block has the recorder's 16-byte header in front of it
 * (src/core/blockhdr.h); others (in sampled mode, most) have glibc's chunk header
 * there, without the mark bit. lg_site_of() checks the mark; we also check that the
 * rest looks like a header first, so that a pointer that is not a block start is
 * (almost always) refused instead of yielding a random site. */
uint32_t lgpy_block_site(const void *block, size_t min_size, size_t *block_size) {
  if (!lgpy.site_of || !block) return 0;
  uintptr_t a = (uintptr_t)block;
  if ((a & 15) || a < 4096 || in_image(a)) return 0;
  uintptr_t h = a - LG_BLK_HDR;
  long pg = 4096;
  if ((h & ~(uintptr_t)(pg - 1)) != (a & ~(uintptr_t)(pg - 1))) {
    unsigned char v;
    if (mincore((void *)(h & ~(uintptr_t)(pg - 1)), 1, &v) != 0) return 0;
  }
  const uint64_t w = ((const lg_blk_t *)h)->word;
  unsigned off = lg_blk_word_offlog2(w);
  uint64_t size = lg_blk_word_size(w);
  if (!lg_blk_marked(w) || (w & 7) || off < 4 || off > 20 || size < min_size) return 0;
  uint32_t s = 0;
  if (lgpy.site_of(block, &s) != 0 || s == 0) return 0;
  if (block_size) *block_size = (size_t)size;
  return s;
}

uint32_t lgpy_object_site(PyObject *o, size_t *size) {
  if (!lgpy.pymalloc_is_malloc || !o) return 0;
  PyTypeObject *tp = Py_TYPE(o);
  size_t pre = 0;
  if (PyObject_IS_GC(o)) pre += 16; /* sizeof(PyGC_Head) in 3.11 */
  if (tp->tp_flags & Py_TPFLAGS_MANAGED_DICT) pre += 2 * sizeof(PyObject *);
  size_t minsz = pre + sizeof(PyObject);
  size_t bs = 0;
  uint32_t s = lgpy_block_site((const char *)o - pre, minsz, &bs);
  if (s && size) *size = bs;
  return s;
}

/* ------------------------------------------------------------------ object table */

enum { R_MODULE = 1, R_FRAME = 2, R_UNROOTED = 3 };
enum { F_TENSOR = 1, F_OWNER_DONE = 2 };

typedef struct {
  PyObject **obj;
  int32_t *parent; /* >= 0: BFS parent; < 0: root number -parent-1 */
  uint32_t *site;
  uint64_t *bytes;
  uint32_t *site2;  /* a second block the object owns: list items, bytearray data */
  uint64_t *bytes2;
  uint8_t *flags;
  Py_ssize_t n, cap, max;
  int32_t *ht; /* node index + 1, open addressing */
  size_t ht_size;
  PyObject **rname;
  uint8_t *rkind;
  int nroots, rcap;
  int32_t cur;
  int full;
  int truncated;
  double deadline;
  PyTypeObject *tensor;
  PyObject *memo; /* node index -> list (chain prefix) */
} ex_t;

static inline size_t hptr(const void *p, size_t mask) {
  uint64_t x = (uint64_t)(uintptr_t)p >> 4;
  x *= 0x9E3779B97F4A7C15ull;
  return (size_t)(x ^ (x >> 29)) & mask;
}

static int32_t ex_find(ex_t *E, PyObject *o) {
  size_t mask = E->ht_size - 1;
  for (size_t h = hptr(o, mask);; h = (h + 1) & mask) {
    int32_t v = E->ht[h];
    if (!v) return -1;
    if (E->obj[v - 1] == o) return v - 1;
  }
}

static int ex_grow(ex_t *E) {
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

/* Adds o (strong reference) unless present; returns its index, -1 when full. */
static int32_t ex_add(ex_t *E, PyObject *o, int32_t parent) {
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

static int ex_add_root(ex_t *E, PyObject *o, int kind, PyObject *name /* stolen */) {
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

/* BFS from node `from` on; returns 1 when stopped by the budget. */
static int ex_bfs(ex_t *E, Py_ssize_t *q) {
  for (; *q < E->n; (*q)++) {
    if ((*q & 1023) == 0 && now_s() > E->deadline) return 1;
    PyObject *o = E->obj[*q];
    if (!PyObject_IS_GC(o)) continue;
    traverseproc tr = Py_TYPE(o)->tp_traverse;
    if (!tr) continue;
    E->cur = (int32_t)*q;
    tr(o, visit_cb, E);
  }
  return 0;
}

static void ex_free(ex_t *E) {
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
}

static int root_kind_of(ex_t *E, int32_t i) {
  while (E->parent[i] >= 0) i = E->parent[i];
  return E->rkind[-E->parent[i] - 1];
}

/* ------------------------------------------------------------------ roots */

static void add_module_roots(ex_t *E) {
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

static void add_frame_roots(ex_t *E) {
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
      PyObject *loc = PyFrame_GetLocals(f);
      if (!loc) PyErr_Clear();
      if (loc && PyDict_Check(loc)) {
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

/* ------------------------------------------------------------------ naming */

static const char *short_tname(PyObject *o) {
  const char *n = Py_TYPE(o)->tp_name;
  const char *dot = strrchr(n, '.');
  return dot ? dot + 1 : n;
}

/* str(key) for names, repr(key) (at most 60 characters) otherwise. */
static PyTypeObject *g_tensor;
static PyObject *tensor_desc(PyObject *t);

static PyObject *key_text(PyObject *key, int as_name) {
  if (as_name && PyUnicode_Check(key)) return Py_NewRef(key);
  if (g_tensor && PyObject_TypeCheck(key, g_tensor)) return tensor_desc(key);
  PyObject *r = PyObject_Repr(key);
  if (!r) {
    PyErr_Clear();
    return PyUnicode_FromFormat("<%s>", short_tname(key));
  }
  if (PyUnicode_GET_LENGTH(r) > 60) {
    PyObject *s = PyUnicode_Substring(r, 0, 57);
    Py_DECREF(r);
    if (!s) return NULL;
    r = PyUnicode_FromFormat("%U...", s);
    Py_DECREF(s);
  }
  return r;
}

/* Reverse maps of big dicts (id(dict) -> {id(value): key}), built once per explain. */
static PyObject *rev_cache;

/* Key of dict d under which child is stored (borrowed); *is_key when child is a key. */
static PyObject *dict_key_of(PyObject *d, PyObject *child, int *is_key) {
  PyObject *k, *v;
  Py_ssize_t pos = 0;
  *is_key = 0;
  if (rev_cache && PyDict_GET_SIZE(d) > 32) {
    PyObject *dk = PyLong_FromVoidPtr(d);
    PyObject *rev = dk ? PyDict_GetItem(rev_cache, dk) : NULL;
    if (dk && !rev) {
      rev = PyDict_New();
      while (rev && PyDict_Next(d, &pos, &k, &v)) {
        PyObject *vk = PyLong_FromVoidPtr(v);
        if (vk && PyDict_GetItem(rev, vk) == NULL) PyDict_SetItem(rev, vk, k);
        Py_XDECREF(vk);
      }
      pos = 0;
      if (rev && PyDict_SetItem(rev_cache, dk, rev) == 0) Py_DECREF(rev); /* borrowed now */
      else Py_CLEAR(rev);
    }
    Py_XDECREF(dk);
    PyObject *ck = rev ? PyLong_FromVoidPtr(child) : NULL;
    PyObject *key = ck ? PyDict_GetItem(rev, ck) : NULL;
    Py_XDECREF(ck);
    PyErr_Clear();
    if (key) return key; /* the dict and its keys are alive (held by our table) */
  }
  while (PyDict_Next(d, &pos, &k, &v))
    if (v == child) return k;
  pos = 0;
  while (PyDict_Next(d, &pos, &k, &v))
    if (k == child) {
      *is_key = 1;
      return k;
    }
  return NULL;
}

static int is_collapsed_dict(ex_t *E, int32_t i) {
  PyObject *d = E->obj[i];
  int32_t p = E->parent[i];
  if (!PyDict_Check(d) || p < 0) return 0;
  PyObject *o = E->obj[p];
  if (PyType_Check(o)) return ((PyTypeObject *)o)->tp_dict == d;
  if (PyModule_Check(o)) return PyModule_GetDict(o) == d;
  if (Py_TYPE(o)->tp_dictoffset == 0 && !(Py_TYPE(o)->tp_flags & Py_TPFLAGS_MANAGED_DICT)) return 0;
  PyObject **dp = _PyObject_GetDictPtr(o);
  if (!dp) PyErr_Clear();
  return dp && *dp == d;
}

/* The name under which instance/class `o` refers to child: ".attr", or NULL. */
static PyObject *attr_name_of(PyObject *o, PyObject *child) {
  PyTypeObject *tp = Py_TYPE(o);
  PyObject *d = NULL;
  if (PyType_Check(o)) {
    d = Py_XNewRef(((PyTypeObject *)o)->tp_dict);
  } else if (tp->tp_dictoffset != 0 || (tp->tp_flags & Py_TPFLAGS_MANAGED_DICT)) {
    d = PyObject_GenericGetDict(o, NULL);
    if (!d) PyErr_Clear();
  }
  if (d && PyDict_Check(d)) {
    int is_key;
    PyObject *k = dict_key_of(d, child, &is_key);
    if (k && !is_key) {
      PyObject *kt = key_text(k, 1);
      Py_DECREF(d);
      if (!kt) return NULL;
      PyObject *r = PyUnicode_FromFormat(".%U", kt);
      Py_DECREF(kt);
      return r;
    }
  }
  Py_XDECREF(d);
  /* __slots__ and C members holding objects */
  PyObject *mro = tp->tp_mro;
  Py_ssize_t nm = mro && PyTuple_Check(mro) ? PyTuple_GET_SIZE(mro) : 0;
  for (Py_ssize_t j = 0; j < nm; j++) {
    PyTypeObject *t = (PyTypeObject *)PyTuple_GET_ITEM(mro, j);
    for (PyMemberDef *m = t->tp_members; m && m->name; m++) {
      if (m->type != T_OBJECT && m->type != T_OBJECT_EX) continue;
      if (*(PyObject **)((char *)o + m->offset) == child)
        return PyUnicode_FromFormat(".%s", m->name);
    }
  }
  if (PyType_Check(o)) {
    PyTypeObject *t = (PyTypeObject *)o;
    if ((PyObject *)t->tp_mro == child) return PyUnicode_FromString(".__mro__");
    if ((PyObject *)t->tp_bases == child) return PyUnicode_FromString(".__bases__");
  }
  return NULL;
}

/* Label of the edge parent p -> child c. real=0 wildcards indices and dict keys (the
 * grouping key); real=1 names them (the representative chain). */
static PyObject *edge_label(ex_t *E, int32_t p, int32_t c, int real) {
  PyObject *po = E->obj[p], *co = E->obj[c];
  int32_t pp = E->parent[p];
  if (pp < 0 && E->rkind[-pp - 1] != R_UNROOTED && PyDict_Check(po)) {
    int r = -pp - 1, is_key;
    PyObject *k = dict_key_of(po, co, &is_key);
    PyObject *kt = k ? key_text(k, 1) : PyUnicode_FromString("?");
    if (!kt) return NULL;
    PyObject *out = E->rkind[r] == R_MODULE
                        ? PyUnicode_FromFormat("%U.%U", E->rname[r], kt)
                        : PyUnicode_FromFormat("frame %U():%U", E->rname[r], kt);
    Py_DECREF(kt);
    return out;
  }
  if (PyDict_Check(po)) {
    int is_key;
    if (is_collapsed_dict(E, p)) {
      PyObject *k = dict_key_of(po, co, &is_key);
      if (k && !is_key) {
        PyObject *kt = key_text(k, 1);
        if (!kt) return NULL;
        PyObject *out = PyUnicode_FromFormat(".%U", kt);
        Py_DECREF(kt);
        return out;
      }
    }
    if (!real) {
      /* a key or a value: keys are rare holders, tell them apart only when cheap */
      return PyUnicode_FromString("[*]");
    }
    PyObject *k = dict_key_of(po, co, &is_key);
    if (!k) return PyUnicode_FromString("[?]");
    PyObject *kt = key_text(k, 0);
    if (!kt) return NULL;
    PyObject *out = is_key ? PyUnicode_FromFormat("<key %U>", kt) : PyUnicode_FromFormat("[%U]", kt);
    Py_DECREF(kt);
    return out;
  }
  if (PyList_Check(po) || PyTuple_Check(po)) {
    if (!real) return PyUnicode_FromString("[*]");
    Py_ssize_t n = PyList_Check(po) ? PyList_GET_SIZE(po) : PyTuple_GET_SIZE(po);
    for (Py_ssize_t j = 0; j < n; j++) {
      PyObject *it = PyList_Check(po) ? PyList_GET_ITEM(po, j) : PyTuple_GET_ITEM(po, j);
      if (it == co) return PyUnicode_FromFormat("[%zd]", j);
    }
    return PyUnicode_FromString("[?]");
  }
  if (PyAnySet_Check(po)) return PyUnicode_FromString("{item}");
  if (PyFrame_Check(po)) {
    PyObject *loc = PyFrame_GetLocals((PyFrameObject *)po);
    if (!loc) PyErr_Clear();
    if (loc && PyDict_Check(loc)) {
      int is_key;
      PyObject *k = dict_key_of(loc, co, &is_key);
      if (k) {
        PyObject *kt = key_text(k, 1);
        Py_DECREF(loc);
        if (!kt) return NULL;
        PyObject *out = PyUnicode_FromFormat(":%U", kt);
        Py_DECREF(kt);
        return out;
      }
    }
    Py_XDECREF(loc);
    return PyUnicode_FromString(":?");
  }
  if (PyCell_Check(po)) return PyUnicode_FromString(".cell_contents");
  if (PyFunction_Check(po)) {
    if (PyFunction_GET_CODE(po) == co) return PyUnicode_FromString(".__code__");
    if (PyFunction_GET_CLOSURE(po) == co) return PyUnicode_FromString(".__closure__");
    if (PyFunction_GET_DEFAULTS(po) == co) return PyUnicode_FromString(".__defaults__");
    if (PyFunction_GET_KW_DEFAULTS(po) == co) return PyUnicode_FromString(".__kwdefaults__");
    if (PyFunction_GET_GLOBALS(po) == co) return PyUnicode_FromString(".__globals__");
  }
  if (PyMethod_Check(po)) {
    if (PyMethod_GET_SELF(po) == co) return PyUnicode_FromString(".__self__");
    if (PyMethod_GET_FUNCTION(po) == co) return PyUnicode_FromString(".__func__");
  }
  PyObject *a = attr_name_of(po, co);
  if (a) return a;
  if (PyErr_Occurred()) PyErr_Clear();
  return PyUnicode_FromFormat("<ref from %s>", short_tname(po));
}

static PyObject *tensor_desc(PyObject *t) {
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
    PyObject *dims = (parts && sep && PyList_GET_SIZE(parts)) ? PyUnicode_Join(sep, parts)
                                                              : PyUnicode_FromString("scalar");
    const char *dt = dts ? PyUnicode_AsUTF8(dts) : NULL;
    if (dt && strncmp(dt, "torch.", 6) == 0) dt += 6;
    if (dims && dt) {
      if (gf && gf != Py_None)
        out = PyUnicode_FromFormat("%s(%U, %s, grad_fn=%s)", short_tname(t), dims, dt,
                                   short_tname(gf));
      else
        out = PyUnicode_FromFormat("%s(%U, %s)", short_tname(t), dims, dt);
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

static PyObject *node_desc(ex_t *E, int32_t i) {
  PyObject *o = E->obj[i];
  if (E->flags[i] & F_TENSOR) return tensor_desc(o);
  return PyUnicode_FromFormat("%s(%llu bytes)", short_tname(o),
                              (unsigned long long)(E->bytes[i] + E->bytes2[i]));
}

/* Chain items leading to node i as an intermediate ("label (type)" each); memoized
 * for the wildcarded form. Returns a new list. */
static PyObject *chain_prefix(ex_t *E, int32_t i, int real) {
  /* collect the path up to a memoized node or a root */
  int32_t path[4096];
  int np = 0;
  PyObject *base = NULL;
  int32_t x = i;
  for (;;) {
    if (!real) {
      PyObject *key = PyLong_FromLong(x);
      PyObject *m = key ? PyDict_GetItemWithError(E->memo, key) : NULL;
      Py_XDECREF(key);
      if (m) {
        base = PyList_GetSlice(m, 0, PyList_GET_SIZE(m));
        break;
      }
      if (PyErr_Occurred()) return NULL;
    }
    if (E->parent[x] < 0 || np == (int)(sizeof path / sizeof path[0])) {
      int32_t r = E->parent[x] < 0 ? -E->parent[x] - 1 : -1;
      base = PyList_New(0);
      if (base && (r < 0 || E->rkind[r] == R_UNROOTED)) {
        PyObject *it = r < 0 ? PyUnicode_FromString("...")
                             : PyUnicode_FromFormat("<unreachable from Python roots> (%s)",
                                                    short_tname(E->obj[x]));
        if (it) PyList_Append(base, it);
        Py_XDECREF(it);
      }
      break;
    }
    path[np++] = x;
    x = E->parent[x];
  }
  if (!base) return NULL;
  /* walk back down: path[np-1] is the child of the base node */
  for (int k = np - 1; k >= 0; k--) {
    int32_t c = path[k], p = E->parent[c];
    if (!is_collapsed_dict(E, c)) {
      PyObject *lab = edge_label(E, p, c, real);
      PyObject *it = lab ? PyUnicode_FromFormat("%U (%s)", lab, short_tname(E->obj[c])) : NULL;
      Py_XDECREF(lab);
      if (!it || PyList_Append(base, it) < 0) {
        Py_XDECREF(it);
        Py_DECREF(base);
        return NULL;
      }
      Py_DECREF(it);
    }
    if (!real) {
      PyObject *key = PyLong_FromLong(c);
      PyObject *cp = PyList_GetSlice(base, 0, PyList_GET_SIZE(base));
      if (key && cp) PyDict_SetItem(E->memo, key, cp);
      Py_XDECREF(key);
      Py_XDECREF(cp);
    }
  }
  return base;
}

/* Full chain naming owner i: prefix(parent) + [edge label, description]. */
static PyObject *owner_chain(ex_t *E, int32_t i, int real, PyObject *extra_desc) {
  int32_t p = E->parent[i];
  PyObject *chain;
  if (p < 0) {
    int r = -p - 1;
    chain = PyList_New(0);
    PyObject *it = E->rkind[r] == R_MODULE ? PyUnicode_FromFormat("%U.__dict__", E->rname[r])
                   : E->rkind[r] == R_FRAME ? PyUnicode_FromFormat("frame %U() locals", E->rname[r])
                                            : PyUnicode_FromString("<unreachable from Python roots>");
    if (chain && it) PyList_Append(chain, it);
    Py_XDECREF(it);
  } else {
    chain = chain_prefix(E, p, real);
    PyObject *lab = chain ? edge_label(E, p, i, real) : NULL;
    if (lab) PyList_Append(chain, lab);
    Py_XDECREF(lab);
  }
  if (!chain) return NULL;
  /* grouping key: the type only (sizes and shapes vary inside one container) */
  PyObject *d = extra_desc ? Py_NewRef(extra_desc)
                : real     ? node_desc(E, i)
                           : PyUnicode_FromString(short_tname(E->obj[i]));
  if (d) PyList_Append(chain, d);
  Py_XDECREF(d);
  if (PyErr_Occurred()) {
    Py_DECREF(chain);
    return NULL;
  }
  return chain;
}

/* ------------------------------------------------------------------ tensors */

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

static uint32_t tensor_site(PyObject *t, uintptr_t *ptr, uint64_t *nbytes) {
  uint32_t cs;
  if (lgpy_cuda_tensor_site(t, ptr, nbytes, &cs)) return cs; /* CUDA: src/python/cuda.c */
  if (!tensor_storage(t, ptr, nbytes)) return 0;
  return lgpy_block_site((const void *)*ptr, (size_t)*nbytes, NULL);
}

/* ------------------------------------------------------------------ holders */

typedef struct {
  PyObject *groups;   /* key -> holder dict */
  PyObject *order;    /* list of holder dicts, in creation order */
  PyObject *storages; /* storage ptr -> holder dict (views add to it); True: a graph's */
  PyObject *sto_first; /* storage ptr -> first (shallowest) tensor node using it */
  PyObject *targets;  /* set of site ids */
  uint8_t *tgt;       /* the same as a bitmap over site ids, for the hot loops */
  uint32_t ntgt_bits;
  /* the last group of an element of a container: siblings come one after the other in
   * BFS order and share the wildcarded chain */
  uint32_t last_site;
  int32_t last_parent;
  PyTypeObject *last_type;
  const char *last_kind;
  PyObject *last_h;
} hold_t;

static int dict_add_int(PyObject *d, const char *k, long long add) {
  PyObject *v = PyDict_GetItemString(d, k);
  long long cur = v ? PyLong_AsLongLong(v) : 0;
  PyObject *nv = PyLong_FromLongLong(cur + add);
  int r = nv ? PyDict_SetItemString(d, k, nv) : -1;
  Py_XDECREF(nv);
  return r;
}

/* Adds one owner to its group (creating it). chain_norm is the grouping key. */
static PyObject *holder_for(ex_t *E, hold_t *H, uint32_t site, const char *kind, int32_t i,
                            PyObject *extra_desc) {
  int32_t p = E->parent[i];
  int cacheable = 0;
  if (!extra_desc && p >= 0 && E->parent[p] >= 0) {
    PyObject *po = E->obj[p];
    cacheable = PyList_Check(po) || PyTuple_Check(po) || PyAnySet_Check(po) ||
                (PyDict_Check(po) && !is_collapsed_dict(E, p));
  }
  if (cacheable && H->last_h && H->last_site == site && H->last_parent == p &&
      H->last_type == Py_TYPE(E->obj[i]) && H->last_kind == kind)
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
  h = chain ? Py_BuildValue("{s:I,s:O,s:i,s:K,s:s,s:{}}", "stack", site, "chain", chain, "objects", 0,
                            "bytes", 0ULL, "kind", kind, "detail")
            : NULL;
  Py_XDECREF(chain);
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

static int is_target(hold_t *H, uint32_t site) {
  return site && site < H->ntgt_bits && (H->tgt[site >> 3] >> (site & 7) & 1);
}

/* Saved tensors of an autograd node type: its "_saved_*" attribute names (cached). */
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

typedef struct {
  long nodes, depth, saved, saved_bytes;
  PyObject *per_site; /* site -> [count, bytes] */
} graph_t;

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

/* Walks the autograd graph of grad_fn gf (nodes shared with earlier roots are not
 * walked again). */
static void graph_walk(ex_t *E, hold_t *H, PyObject *seen, PyObject *keep, PyObject *cache,
                       PyObject *gf, graph_t *G, long cap) {
  PyObject *q = PyList_New(0);
  PyObject *t0 = Py_BuildValue("(Oi)", gf, 1);
  if (!q || !t0) goto out;
  PyList_Append(q, t0);
  Py_DECREF(t0);
  for (Py_ssize_t h = 0; h < PyList_GET_SIZE(q) && G->nodes < cap; h++) {
    if ((h & 255) == 0 && now_s() > E->deadline) {
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

/* ------------------------------------------------------------------ explain */

static int holders_seq;

static PyObject *pick_targets(ex_t *E, hold_t *H, PyObject *stacks, int top, uintptr_t *sptr,
                              const char **from) {
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
  const char *dir = getenv("LEAKGUARD_DIR");
  if (!dir || !*dir) return 0;
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
    snprintf(path, pathsz, "%s/holders-%ld-%d.json", dir, (long)getpid(), ++holders_seq);
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "wb");
    if (f) {
      int ok = fwrite(u, 1, (size_t)len, f) == (size_t)len;
      ok &= fputc('\n', f) != EOF;
      ok &= fclose(f) == 0;
      if (ok && rename(tmp, path) == 0)
        rc = 1;
      else
        unlink(tmp);
    }
    if (rc < 0) PySys_WriteStderr("leakguard: cannot write %s: %s\n", path, strerror(errno));
    rc = rc < 0 ? 0 : 1; /* a diagnostic never fails the program */
  }
  Py_DECREF(text);
  return rc;
}

PyObject *lgpy_explain(PyObject *stacks, int top, double budget_s, Py_ssize_t max_objects,
                       int write) {
  double t0 = now_s();
  if (budget_s <= 0) {
    const char *b = getenv("LEAKGUARD_EXPLAIN_BUDGET_S");
    budget_s = b ? atof(b) : 0;
    if (budget_s <= 0) budget_s = 2.0;
  }
  if (max_objects <= 0) max_objects = 5000000;
  if (max_objects > INT32_MAX / 2) max_objects = INT32_MAX / 2;
  if (top <= 0) top = 5;
  if (top > 64) top = 64;

  int gc_was = PyGC_Disable(); /* no collection while we hold raw pointers */
  /* the walk's tables are leakguard's memory, not the program's */
  if (lgpy.pause) lgpy.pause(1);
  ex_t E;
  hold_t H;
  memset(&E, 0, sizeof E);
  memset(&H, 0, sizeof H);
  uintptr_t *sptr = NULL;
  PyObject *doc = NULL, *targets = NULL, *seen = NULL, *keep = NULL, *cache = NULL,
           *sorted = NULL, *out = NULL, *per_stack = NULL;
  const char *from = "suspects";
  E.max = max_objects;
  E.deadline = t0 + budget_s * 0.6; /* the graph walk; attribution gets the rest */
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
    Py_XDECREF(torch);
    if (tt && PyType_Check(tt))
      g_tensor = E.tensor = (PyTypeObject *)tt;
    else
      Py_XDECREF(tt);
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
  E.deadline = t0 + budget_s;
  int dbg = getenv("LEAKGUARD_EXPLAIN_DEBUG") != NULL;
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
    size_t sz = 0;
    E.site[i] = lgpy_object_site(o, &sz);
    E.bytes[i] = sz;
    if (lgpy.pymalloc_is_malloc) {
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
        E.site2[i] = lgpy_block_site(buf, cap, &sz);
        E.bytes2[i] = E.site2[i] ? sz : 0;
      }
    }
  }
  for (Py_ssize_t i = 0; i < E.n; i++) {
    if (!(E.flags[i] & F_TENSOR)) continue;
    if (now_s() > E.deadline) {
      E.truncated = 1;
      break;
    }
    uint64_t nb = 0;
    E.site[i] = tensor_site(E.obj[i], &sptr[i], &nb);
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
      if (!(E.flags[i] & F_TENSOR) || root_kind_of(&E, (int32_t)i) == R_UNROOTED) continue;
      if (now_s() > E.deadline) {
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
    if ((nown++ & 63) == 0 && now_s() > E.deadline) {
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
      if (h && h != Py_None) { /* a view of a storage already counted */
        Py_DECREF(pk);
        add_detail(h, "tensors", 1);
        continue;
      }
      h = holder_for(&E, &H, E.site[i], "tensor", (int32_t)i, NULL);
      if (!h || PyDict_SetItem(H.storages, pk, h) < 0) {
        Py_DECREF(pk);
        goto done;
      }
      Py_DECREF(pk);
      add_detail(h, "tensors", 1);
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
      PyObject *it = (len && sv) ? PyUnicode_FromFormat("autograd graph (grad_fn chain %S, %S saved tensors)", len, sv) : NULL;
      if (ch && it) PyList_Append(ch, it);
      Py_XDECREF(it);
    }
    if (!nv || PyDict_SetItem(per_stack, st, nv) < 0 || PyList_Append(out, h) < 0) {
      Py_XDECREF(nv);
      goto done;
    }
    Py_DECREF(nv);
  }
  doc = Py_BuildValue("{s:l,s:K,s:d,s:O,s:n,s:s,s:O,s:O}", "pid", (long)getpid(), "step",
                      (unsigned long long)lgpy_steps, "elapsed_s", now_s() - t0, "truncated",
                      E.truncated ? Py_True : Py_False, "objects_scanned", E.n, "targets_from",
                      from, "targets", targets, "holders", out);
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
  if (gc_was) PyGC_Enable();
  if (!doc && !PyErr_Occurred()) PyErr_SetString(PyExc_RuntimeError, "leakguard: explain failed");
  return doc;
}
