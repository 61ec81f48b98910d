/* SPDX-License-Identifier: MIT */
/*
 * pyread.h - reading the calling thread's CPython frames without the GIL and without
 * calling into Python: the reader shared by the preload library (capture/python.c,
 * which interns what it reads as stack frames) and liblgpool (pool/profile.c, which
 * keys a site profile by the innermost Python line). Header-only, static inline: each
 * of them is its own shared object, and python.c's per-allocation path keeps its
 * speed (bench/py_frames.py).
 *
 * The layouts are src/capture/pylayout.h's; the checks each read makes and why are in
 * python.c's opening comment. Every pointer read from the interpreter is checked
 * before it is followed; a chain that fails a check ends there.
 */
#ifndef LG_CAPTURE_PYREAD_H
#define LG_CAPTURE_PYREAD_H

#include <dlfcn.h>
#include <stddef.h>
#include <stdint.h>

#include "capture/pylayout.h"

typedef struct lgi_pyreader {
  const lgi_pylayout_t *lay;     /* the running interpreter's layout */
  void *(*get_tstate)(void);     /* PyGILState_GetThisThreadState */
  int (*addr2line)(void *, int); /* PyCode_Addr2Line(PyCodeObject *, int) */
  uintptr_t code_type, str_type; /* &PyCode_Type, &PyUnicode_Type */
  void *tstate_sym;              /* where get_tstate points (its module holds the interpreter) */
} lgi_pyreader_t;

enum { LGI_PYR_READY = 1, LGI_PYR_NONE = 0, LGI_PYR_UNSUPPORTED = -1, LGI_PYR_FREETHREADED = -2 };

/* The loaded interpreter's version: Py_Version (PY_VERSION_HEX, 3.11+), else the
 * leading "3.9.18" of Py_GetVersion() (a static buffer filled with snprintf: no
 * allocation, callable before Py_Initialize). 0 when unknown. */
static inline int lgi_py_version(unsigned *major, unsigned *minor) {
  const unsigned long *hex = (const unsigned long *)dlsym(RTLD_DEFAULT, "Py_Version");
  if (hex) {
    *major = (unsigned)(*hex >> 24) & 0xff;
    *minor = (unsigned)(*hex >> 16) & 0xff;
    return 1;
  }
  const char *(*gv)(void) = (const char *(*)(void))dlsym(RTLD_DEFAULT, "Py_GetVersion");
  const char *s = gv ? gv() : NULL;
  if (!s) return 0;
  unsigned v[2] = {0, 0};
  for (int k = 0; k < 2; k++) {
    if (*s < '0' || *s > '9') return 0;
    while (*s >= '0' && *s <= '9') v[k] = v[k] * 10 + (unsigned)(*s++ - '0');
    if (k == 0 && *s++ != '.') return 0;
  }
  *major = v[0];
  *minor = v[1];
  return 1;
}

/* Fills r for the interpreter loaded in this process: LGI_PYR_READY; LGI_PYR_NONE
 * when there is none (yet); LGI_PYR_UNSUPPORTED for a version without a layout, and
 * LGI_PYR_FREETHREADED for the free-threaded build (*major, *minor set when known). */
static inline int lgi_pyreader_init(lgi_pyreader_t *r, unsigned *major, unsigned *minor) {
  *major = *minor = 0;
  void *gt = dlsym(RTLD_DEFAULT, "PyGILState_GetThisThreadState");
  void *al = dlsym(RTLD_DEFAULT, "PyCode_Addr2Line");
  if (!gt || !al) return LGI_PYR_NONE;
  const lgi_pylayout_t *l = lgi_py_version(major, minor) ? lgi_pylayout_find(*major, *minor) : NULL;
  void *ct = dlsym(RTLD_DEFAULT, "PyCode_Type"), *st = dlsym(RTLD_DEFAULT, "PyUnicode_Type");
  /* only the free-threaded build (Py_GIL_DISABLED) has it: another object header */
  if (l && dlsym(RTLD_DEFAULT, "_Py_MergeZeroLocalRefcount")) return LGI_PYR_FREETHREADED;
  if (!l || !ct || !st) return LGI_PYR_UNSUPPORTED;
  r->lay = l;
  r->addr2line = (int (*)(void *, int))al;
  r->code_type = (uintptr_t)ct;
  r->str_type = (uintptr_t)st;
  r->get_tstate = (void *(*)(void))gt;
  r->tstate_sym = gt;
  return LGI_PYR_READY;
}

/* A pointer worth following: non-NULL, 8-aligned, in the user half of the x86-64 /
 * AArch64 48-bit address space. Cheap; not a proof that it is mapped. */
/* p >= 4096 && p < 2^47 && aligned, in one compare (p - 4096 wraps for p < 4096) */
static inline int lgi_py_ptr_ok(uintptr_t p) { return ((p - 4096) | (p & 7) << 60) < (1ULL << 47) - 4096; }
static inline uintptr_t lgi_py_rd_ptr(uintptr_t base, unsigned off) { return *(const uintptr_t *)(base + off); }
static inline int lgi_py_rd_int(uintptr_t base, unsigned off) { return *(const int *)(base + off); }
static inline intptr_t lgi_py_rd_ssize(uintptr_t base, unsigned off) { return *(const intptr_t *)(base + off); }

/* Copies a str object's text as UTF-8 when it is a compact string (identifiers and
 * file names are), truncated on a character boundary; else "?". Never calls into
 * Python. n >= 2. */
static inline void lgi_py_str_copy(const lgi_pyreader_t *r, uintptr_t o, char *out, size_t n) {
  out[0] = '?';
  out[1] = 0;
  const lgi_pylayout_t *l = r->lay;
  if (!lgi_py_ptr_ok(o) || lgi_py_rd_ptr(o, LGI_PY_OB_TYPE) != r->str_type) return;
  uint32_t st = *(const uint32_t *)(o + l->str_state);
  if (!(st & LGI_PY_STR_COMPACT) || (l->str_ready && !(st & l->str_ready))) return;
  unsigned kind = LGI_PY_STR_KIND(st);
  intptr_t len = lgi_py_rd_ssize(o, LGI_PY_STR_LENGTH);
  if (len < 0 || len > (1 << 20) || (kind != 1 && kind != 2 && kind != 4)) return;
  const unsigned char *d =
      (const unsigned char *)o + ((st & LGI_PY_STR_ASCII) ? l->str_ascii_data : l->str_compact_data);
  size_t w = 0;
  for (intptr_t i = 0; i < len; i++) {
    uint32_t c = kind == 1 ? d[i] : kind == 2 ? ((const uint16_t *)d)[i] : ((const uint32_t *)d)[i];
    if (c > 0x10FFFF || (c >= 0xD800 && c <= 0xDFFF)) c = '?';
    size_t need = c < 0x80 ? 1 : c < 0x800 ? 2 : c < 0x10000 ? 3 : 4;
    if (w + need >= n) break;
    if (need == 1) {
      out[w++] = (char)c;
    } else if (need == 2) {
      out[w++] = (char)(0xC0 | (c >> 6));
      out[w++] = (char)(0x80 | (c & 0x3F));
    } else if (need == 3) {
      out[w++] = (char)(0xE0 | (c >> 12));
      out[w++] = (char)(0x80 | ((c >> 6) & 0x3F));
      out[w++] = (char)(0x80 | (c & 0x3F));
    } else {
      out[w++] = (char)(0xF0 | (c >> 18));
      out[w++] = (char)(0x80 | ((c >> 12) & 0x3F));
      out[w++] = (char)(0x80 | ((c >> 6) & 0x3F));
      out[w++] = (char)(0x80 | (c & 0x3F));
    }
  }
  out[w] = 0;
}

/* The innermost frame of the calling thread, 0 when it runs no Python code. */
static inline uintptr_t lgi_py_innermost(const lgi_pyreader_t *r) {
  const lgi_pylayout_t *l = r->lay;
  uintptr_t ts = (uintptr_t)r->get_tstate();
  if (!lgi_py_ptr_ok(ts)) return 0;
  if (l->ts_cframe >= 0) {
    uintptr_t cf = lgi_py_rd_ptr(ts, (unsigned)l->ts_cframe);
    if (!lgi_py_ptr_ok(cf)) return 0;
    return lgi_py_rd_ptr(cf, l->ts_frame);
  }
  return lgi_py_rd_ptr(ts, l->ts_frame);
}

/* The frame's code object and instruction: *co, *ikey (a cache key) and *addrq (byte
 * offset for PyCode_Addr2Line, -1 for "before the first instruction"). Returns 1 for a
 * frame to report, 0 for one to skip (not started, C-stack shim), -1 when the chain
 * cannot be trusted from here on. */
static inline int lgi_py_frame_at(const lgi_pyreader_t *r, uintptr_t f, uintptr_t *co, uint64_t *ikey, int *addrq) {
  const lgi_pylayout_t *l = r->lay;
  uintptr_t c = lgi_py_rd_ptr(f, l->f_code);
  if (l->model == LGI_PYF_INTERP) {
    int owner = *(const signed char *)(f + l->f_owner);
    if (owner == l->owner_cstack) return 0;
    if (!lgi_py_ptr_ok(c) || lgi_py_rd_ptr(c, LGI_PY_OB_TYPE) != r->code_type) return -1;
    uintptr_t ip = lgi_py_rd_ptr(f, l->f_instr);
    intptr_t idx = ((intptr_t)ip - (intptr_t)(c + l->co_code)) / 2;
    /* _PyFrame_IsIncomplete: a frame that has not run its first traceable instruction */
    if (owner != l->owner_generator && idx < lgi_py_rd_int(c, (unsigned)l->co_firsttraceable)) return 0;
    if (idx >= lgi_py_rd_ssize(c, LGI_PY_OB_SIZE)) return -1; /* Py_SIZE(co): code units */
    *addrq = idx < 0 ? -1 : (int)idx * 2;
    *ikey = ip;
  } else {
    if (!lgi_py_ptr_ok(c) || lgi_py_rd_ptr(c, LGI_PY_OB_TYPE) != r->code_type) return -1;
    int lasti = lgi_py_rd_int(f, l->f_instr);
    uintptr_t bytes = lgi_py_rd_ptr(c, l->co_code);
    if (!lgi_py_ptr_ok(bytes)) return -1;
    long off = lasti < 0 ? -1 : (long)lasti * l->lasti_bytes;
    if (off >= lgi_py_rd_ssize(bytes, LGI_PY_OB_SIZE)) return -1;
    *addrq = (int)off;
    *ikey = (uint64_t)(uint32_t)lasti;
  }
  *co = c;
  return 1;
}

/* The innermost Python line of the calling thread as "file:line" (the code object's
 * co_filename, as the report names it): 1, or 0 when the thread runs no Python code
 * or its chain cannot be read. */
static inline int lgi_py_innermost_line(const lgi_pyreader_t *r, char *out, size_t n) {
  uintptr_t f = lgi_py_innermost(r);
  for (unsigned hops = 0; f && hops < 256; hops++) {
    if (!lgi_py_ptr_ok(f)) return 0;
    uintptr_t next = lgi_py_rd_ptr(f, r->lay->f_back), co;
    uint64_t ikey;
    int addrq, k = lgi_py_frame_at(r, f, &co, &ikey, &addrq);
    if (k < 0) return 0;
    if (k > 0) {
      if (n < 16) return 0;
      lgi_py_str_copy(r, lgi_py_rd_ptr(co, r->lay->co_filename), out, n - 12);
      int line = r->addr2line((void *)co, addrq);
      size_t w = 0;
      while (out[w]) w++;
      out[w++] = ':';
      char d[12];
      int nd = 0;
      unsigned x = line < 0 ? 0u : (unsigned)line;
      do d[nd++] = (char)('0' + x % 10);
      while ((x /= 10) && nd < 11);
      while (nd) out[w++] = d[--nd];
      out[w] = 0;
      return 1;
    }
    f = next;
  }
  return 0;
}

#endif
