/* SPDX-License-Identifier: MIT */
/*
 * naming.c - the items of a holder chain: the label of each edge (".attr", "[3]",
 * "[key]", "frame f():local", ...), the description of the owner, and chains with
 * indices and keys wildcarded (the grouping key) or real (the one shown).
 */
#include "python/explain.h"

#include <string.h>
#include <structmember.h>

PyTypeObject *g_tensor;
PyObject *rev_cache;

/* str(key) for names, repr(key) (at most 60 characters) otherwise. */
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

int is_collapsed_dict(ex_t *E, int32_t i) {
  PyObject *d = E->obj[i];
  int32_t p = E->parent[i];
  if (!PyDict_Check(d) || p < 0) return 0;
  PyObject *o = E->obj[p];
  if (PyType_Check(o)) return ((PyTypeObject *)o)->tp_dict == d;
  if (PyModule_Check(o)) return PyModule_GetDict(o) == d;
  if (Py_TYPE(o)->tp_dictoffset == 0 && !(Py_TYPE(o)->tp_flags & LGPY_MANAGED_DICT)) return 0;
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
  } else if (tp->tp_dictoffset != 0 || (tp->tp_flags & LGPY_MANAGED_DICT)) {
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
      if (*(PyObject **)((char *)o + m->offset) == child) return PyUnicode_FromFormat(".%s", m->name);
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
    PyObject *out = E->rkind[r] == R_MODULE ? PyUnicode_FromFormat("%U.%U", E->rname[r], kt)
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
    PyObject *loc = lgpy_frame_locals((PyFrameObject *)po);
    if (loc) {
      int is_key;
      PyObject *k = dict_key_of(loc, co, &is_key);
      if (k) {
        PyObject *kt = key_text(k, 1); /* before loc goes: in 3.13 a copy owns k */
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

static PyObject *node_desc(ex_t *E, int32_t i) {
  PyObject *o = E->obj[i];
  if (E->flags[i] & F_STORAGE) return storage_desc(o);
  if (E->flags[i] & F_TENSOR) return tensor_desc(o);
  return PyUnicode_FromFormat("%s(%llu bytes)", short_tname(o), (unsigned long long)(E->bytes[i] + E->bytes2[i]));
}

/* Appends one link to a chain, folding a run of the same link (a linked list's
 * ".next (Node)" over and over) into one item: "link ×N" in the chain shown, "link ×*"
 * in the grouping key, so that a list of any length is one holder. Without it every
 * depth was a holder of its own and the memo held a copy of every node's whole chain:
 * quadratic, 100 MB and seconds of the program's main thread for 45 000 nodes. 0 or -1. */
#define TIMES "\xc3\x97" /* U+00D7 in UTF-8: a %s argument (the format must be ASCII) */
static int append_link(PyObject *chain, PyObject *it, int real, long *run) {
  Py_ssize_t n = PyList_GET_SIZE(chain);
  PyObject *last = n ? PyList_GET_ITEM(chain, n - 1) : NULL;
  PyObject *folded = NULL;
  if (last && !real) {
    PyObject *star = PyUnicode_FromFormat("%U %s*", it, TIMES);
    if (!star) return -1;
    int same = PyUnicode_Compare(last, it) == 0 || PyUnicode_Compare(last, star) == 0;
    if (same) folded = star;
    else Py_DECREF(star);
  } else if (last && *run > 0 && PyUnicode_Compare(last, it) == 0) {
    folded = PyUnicode_FromFormat("%U %s%ld", it, TIMES, *run + 1);
    if (!folded) return -1;
  } else if (last && *run > 1) {
    PyObject *base = PyUnicode_FromFormat("%U %s%ld", it, TIMES, *run);
    int same = base && PyUnicode_Compare(last, base) == 0;
    Py_XDECREF(base);
    if (same) folded = PyUnicode_FromFormat("%U %s%ld", it, TIMES, *run + 1);
  }
  if (PyErr_Occurred()) {
    Py_XDECREF(folded);
    return -1;
  }
  if (folded) {
    (*run)++;
    return PyList_SetItem(chain, n - 1, folded); /* steals folded */
  }
  *run = 1;
  return PyList_Append(chain, it);
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
                             : PyUnicode_FromFormat("<unreachable from Python roots> (%s)", short_tname(E->obj[x]));
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
  long run = 0;
  for (int k = np - 1; k >= 0; k--) {
    int32_t c = path[k], p = E->parent[c];
    if (!is_collapsed_dict(E, c)) {
      PyObject *lab = edge_label(E, p, c, real);
      PyObject *it = lab ? PyUnicode_FromFormat("%U (%s)", lab, short_tname(E->obj[c])) : NULL;
      Py_XDECREF(lab);
      if (!it || append_link(base, it, real, &run) < 0) {
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

PyObject *owner_chain(ex_t *E, int32_t i, int real, PyObject *extra_desc) {
  int32_t p = E->parent[i];
  PyObject *chain;
  if (p < 0) {
    int r = -p - 1;
    chain = PyList_New(0);
    PyObject *it = E->rkind[r] == R_MODULE  ? PyUnicode_FromFormat("%U.__dict__", E->rname[r])
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
