/* SPDX-License-Identifier: MIT */
/*
 * pycompat.h - what differs between the CPython versions the extension is built for
 * (3.9 to 3.13, one build per interpreter, src/python/python.cmake). Everything
 * version-specific in src/python sits here, under PY_VERSION_HEX.
 */
#ifndef LGPY_PYCOMPAT_H
#define LGPY_PYCOMPAT_H

#include <Python.h>
#include <frameobject.h> /* PyFrame_Check, PyFrame_GetBack up to 3.10 */

#if PY_VERSION_HEX < 0x03090000
#error "the leakguard module needs CPython 3.9 or later"
#endif

/* Py_NewRef / Py_XNewRef: new in 3.10. */
#if PY_VERSION_HEX < 0x030A0000
static inline PyObject *lgpy_newref(PyObject *o) {
  Py_INCREF(o);
  return o;
}
static inline PyObject *lgpy_xnewref(PyObject *o) {
  Py_XINCREF(o);
  return o;
}
#define Py_NewRef(o) lgpy_newref((PyObject *)(o))
#define Py_XNewRef(o) lgpy_xnewref((PyObject *)(o))
#endif

/* Py_IsFinalizing: public in 3.13, _Py_IsFinalizing before. */
#if PY_VERSION_HEX < 0x030D0000
#define Py_IsFinalizing() _Py_IsFinalizing()
#endif

/* Turns the cyclic GC off, returning whether it was on (PyGC_Disable, new in 3.10;
 * before, through the gc module). */
static inline int lgpy_gc_disable(void) {
#if PY_VERSION_HEX >= 0x030A0000
  return PyGC_Disable();
#else
  PyObject *gc = PyImport_ImportModule("gc");
  PyObject *on = gc ? PyObject_CallMethod(gc, "isenabled", NULL) : NULL;
  int was = on ? PyObject_IsTrue(on) == 1 : 0;
  PyObject *r = gc ? PyObject_CallMethod(gc, "disable", NULL) : NULL;
  Py_XDECREF(r);
  Py_XDECREF(on);
  Py_XDECREF(gc);
  PyErr_Clear();
  return was;
#endif
}

static inline void lgpy_gc_enable(void) {
#if PY_VERSION_HEX >= 0x030A0000
  PyGC_Enable();
#else
  PyObject *gc = PyImport_ImportModule("gc");
  PyObject *r = gc ? PyObject_CallMethod(gc, "enable", NULL) : NULL;
  Py_XDECREF(r);
  Py_XDECREF(gc);
  PyErr_Clear();
#endif
}

/* A frame's local variables as a dict (new reference), or NULL without an exception.
 * 3.9/3.10: the f_locals attribute (PyFrame_GetLocals is new in 3.11). 3.11/3.12:
 * PyFrame_GetLocals, the frame's f_locals dict brought up to date. 3.13 (PEP 667): a
 * function frame gives a write-through FrameLocalsProxy, not a dict: copied into a new
 * dict holding the same objects, which is all the graph search needs. */
static inline PyObject *lgpy_frame_locals(PyFrameObject *f) {
#if PY_VERSION_HEX >= 0x030B0000
  PyObject *loc = PyFrame_GetLocals(f);
#else
  PyObject *loc = PyObject_GetAttrString((PyObject *)f, "f_locals");
#endif
  if (loc && !PyDict_Check(loc)) {
    PyObject *d = PyDict_New();
    if (d && PyDict_Merge(d, loc, 1) < 0) Py_CLEAR(d);
    Py_DECREF(loc);
    loc = d;
  }
  if (!loc) PyErr_Clear();
  return loc;
}

/* Instances with a __dict__ the interpreter manages itself (no tp_dictoffset): 3.11+. */
#ifdef Py_TPFLAGS_MANAGED_DICT
#define LGPY_MANAGED_DICT Py_TPFLAGS_MANAGED_DICT
#else
#define LGPY_MANAGED_DICT 0UL
#endif

/* Bytes in front of a Python object inside its recorded block (docs/python.md):
 * _PyType_PreHeaderSize() in Include/internal/pycore_object.h, which is not public.
 *  - PyGC_Head (two words) for GC objects, all versions except the free-threaded
 *    build (3.13t keeps GC state in the object header);
 *  - 3.11: two more words (dict, values) for Py_TPFLAGS_MANAGED_DICT;
 *  - 3.12+: two words for Py_TPFLAGS_PREHEADER (MANAGED_DICT | MANAGED_WEAKREF). */
static inline size_t lgpy_preheader(PyObject *o) {
  unsigned long flags = Py_TYPE(o)->tp_flags;
  size_t pre = 0;
#ifndef Py_GIL_DISABLED
  if (PyObject_IS_GC(o)) pre += 2 * sizeof(void *);
#endif
#if defined(Py_TPFLAGS_PREHEADER)
  if (flags & Py_TPFLAGS_PREHEADER) pre += 2 * sizeof(PyObject *);
#elif defined(Py_TPFLAGS_MANAGED_DICT)
  if (flags & Py_TPFLAGS_MANAGED_DICT) pre += 2 * sizeof(PyObject *);
#endif
  (void)flags; /* 3.9/3.10: no pre-header flags */
  return pre;
}

#endif
