/* SPDX-License-Identifier: MIT */
/*
 * python.c - Python frames for allocations made while CPython 3.11 runs Python code.
 *
 * Mechanism (chosen by measurement, see docs/python.md): read the interpreter's own
 * frame chain of the *allocating* thread. PyGILState_GetThisThreadState() is a
 * pthread_getspecific (no GIL, no allocation); from its tstate, cframe->current_frame
 * and ->previous link the _PyInterpreterFrame structs of this thread, which only this
 * thread pushes and pops, so they are stable while it sits in malloc (also when
 * PyTorch released the GIL around an op). No frame objects are created, no reference
 * counts touched, nothing allocated: the public frame C-API would do all three and can
 * run a garbage collection inside malloc.
 *
 * Each (code object, instruction) pair maps to a pyframe record (file, qualified
 * name, line from PyCode_Addr2Line, which only decodes the immutable line table),
 * interned in the shared region on first sight and cached per thread. The stack of an
 * allocation is then [Python frames innermost first..., native frames...].
 *
 * Layouts come from CPython 3.11's own headers (Py_BUILD_CORE); the interpreter's
 * Py_Version is checked at run time, and any other version records native frames only
 * (one message). Symbols are found with dlsym: nothing links libpython.
 */
#define Py_BUILD_CORE 1
#include <Python.h>
#include <internal/pycore_code.h>
#include <internal/pycore_frame.h>

#include <dlfcn.h>
#include <link.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "capture/recorder.h"

#if PY_VERSION_HEX < 0x030B0000 || PY_VERSION_HEX >= 0x030C0000
#error "python.c reads CPython 3.11 frames; build against Python 3.11 headers"
#endif

static PyThreadState *(*get_tstate)(void);
static uintptr_t interp_lo, interp_hi; /* the module holding the interpreter loop */

static int find_interp_cb(struct dl_phdr_info *info, size_t sz, void *arg) {
  (void)sz;
  uintptr_t a = (uintptr_t)arg, lo = UINTPTR_MAX, hi = 0;
  for (int i = 0; i < info->dlpi_phnum; i++) {
    if (info->dlpi_phdr[i].p_type != PT_LOAD) continue;
    uintptr_t s = info->dlpi_addr + info->dlpi_phdr[i].p_vaddr, e = s + info->dlpi_phdr[i].p_memsz;
    if (s < lo) lo = s;
    if (e > hi) hi = e;
  }
  if (a >= lo && a < hi) {
    interp_lo = lo;
    interp_hi = hi;
    return 1;
  }
  return 0;
}

int lgi_python_interp_frame(uint64_t ip) { return ip >= interp_lo && ip < interp_hi; }
static int (*addr2line)(PyCodeObject *, int);
static int py_state; /* 0 unknown, 1 active, -1 off */

void lgi_python_detect(void) {
  if (py_state == 1) return;
  void *gt = dlsym(RTLD_DEFAULT, "PyGILState_GetThisThreadState");
  void *al = dlsym(RTLD_DEFAULT, "PyCode_Addr2Line");
  const unsigned long *ver = dlsym(RTLD_DEFAULT, "Py_Version");
  if (!gt || !al) return; /* not a Python process (yet) */
  if (!ver || (*ver >> 16) != 0x030B) {
    if (py_state == 0) {
      static const char msg[] =
          "leakguard: this Python is not CPython 3.11: recording native frames only\n";
      (void)!write(2, msg, sizeof msg - 1);
    }
    py_state = -1;
    return;
  }
  addr2line = (int (*)(PyCodeObject *, int))al;
  dl_iterate_phdr(find_interp_cb, gt);
  get_tstate = (PyThreadState * (*)(void)) gt;
  __atomic_store_n(&py_state, 1, __ATOMIC_RELEASE);
}

int lgi_python_active(void) { return __atomic_load_n(&py_state, __ATOMIC_ACQUIRE) == 1; }

/* Copies a str object's text when it is a compact Latin-1/ASCII string (file names
 * and identifiers are); else "?". Never calls into Python. */
static void str_copy(PyObject *o, char *out, size_t n) {
  out[0] = '?';
  out[1] = 0;
  if (!o || !PyUnicode_Check(o) || !PyUnicode_IS_READY(o) || !PyUnicode_IS_COMPACT(o)) return;
  if (PyUnicode_KIND(o) != PyUnicode_1BYTE_KIND) return;
  const char *d = (const char *)PyUnicode_DATA(o);
  size_t len = (size_t)PyUnicode_GET_LENGTH(o);
  if (len >= n) len = n - 1;
  memcpy(out, d, len);
  out[len] = 0;
}

static uint32_t str_intern(lg_region_hdr_t *h, const char *s) {
  size_t len = strlen(s) + 1;
  uint32_t at = atomic_load_explicit(&h->pystr_used, memory_order_relaxed);
  if (at + len > h->pystr_cap) return 0; /* offset 0 holds "" */
  memcpy(LG_PTR(h, h->pystr_off, char *) + at, s, len);
  atomic_store_explicit(&h->pystr_used, (uint32_t)(at + len), memory_order_release);
  return at;
}

/* Process-wide index (code, line) -> pyframe id, in private pages; guarded by the
 * region lock (only taken on a per-thread cache miss). */
#define PIX_CAP (1u << 18)
typedef struct { uint64_t code; int32_t line; uint32_t id; } pix_t;
static pix_t *pix;

static uint32_t pyframe_intern(PyCodeObject *co, int line) {
  lg_region_hdr_t *h = lgi_g.hdr;
  uint32_t id = 0;
  lgi_lock();
  if (!pix) pix = lgi_pages_alloc(sizeof(pix_t) * PIX_CAP);
  if (!pix) goto out;
  if (atomic_load(&h->pystr_used) == 0) atomic_store(&h->pystr_used, 1); /* "" at 0 */
  uint64_t key = (uint64_t)(uintptr_t)co;
  uint32_t i = (uint32_t)((key >> 4) * 0x9E3779B1u ^ (uint32_t)line * 0x85EBCA6Bu) & (PIX_CAP - 1);
  for (uint32_t n = 0; n < PIX_CAP / 2; n++, i = (i + 1) & (PIX_CAP - 1)) {
    if (pix[i].code == key && pix[i].line == line) {
      id = pix[i].id;
      goto out;
    }
    if (pix[i].code == 0) {
      uint32_t k = atomic_load_explicit(&h->npyframes, memory_order_relaxed);
      if (k == 0) k = 1; /* id 0: none */
      if (k >= h->pyframes_cap) goto out;
      char file[512], func[256];
      str_copy(co->co_filename, file, sizeof file);
      str_copy(co->co_qualname, func, sizeof func);
      lg_pyframe_rec_t *r = LG_PTR(h, h->pyframes_off, lg_pyframe_rec_t *) + k;
      r->code = key;
      r->line = line;
      r->file = str_intern(h, file);
      r->func = str_intern(h, func);
      atomic_store_explicit(&h->npyframes, k + 1, memory_order_release);
      pix[i] = (pix_t){key, line, k};
      id = k;
      goto out;
    }
  }
out:
  lgi_unlock();
  return id;
}

/* Per-thread cache: (code, instruction) -> pyframe id. */
#define PCACHE 512
typedef struct { uint64_t code; const void *instr; uint32_t id; } pcache_t;

unsigned lgi_python_frames(lgi_tls_t *t, uint64_t *out, unsigned max) {
  if (!lgi_python_active()) return 0;
  PyThreadState *ts = get_tstate();
  if (!ts || !ts->cframe) return 0;
  if (!t->pycache) {
    t->pycache = lgi_pages_alloc(sizeof(pcache_t) * PCACHE);
    if (!t->pycache) return 0;
  }
  pcache_t *pc = t->pycache;
  unsigned n = 0;
  for (_PyInterpreterFrame *f = ts->cframe->current_frame; f && n < max; f = f->previous) {
    PyCodeObject *co = f->f_code;
    if (!co) break;
    if (f->owner != FRAME_OWNED_BY_GENERATOR &&
        f->prev_instr < _PyCode_CODE(co) + co->_co_firsttraceable)
      continue; /* incomplete frame: not started yet */
    uint64_t key = (uint64_t)(uintptr_t)co;
    uint32_t slot = (uint32_t)(((uintptr_t)f->prev_instr >> 1) * 0x9E3779B1u ^ (uint32_t)(key >> 4)) & (PCACHE - 1);
    uint32_t id;
    if (pc[slot].code == key && pc[slot].instr == f->prev_instr) {
      id = pc[slot].id;
    } else {
      int lasti = (int)(f->prev_instr - _PyCode_CODE(co));
      int line = addr2line(co, lasti * (int)sizeof(_Py_CODEUNIT));
      id = pyframe_intern(co, line);
      if (!id) break;
      pc[slot].code = key;
      pc[slot].instr = f->prev_instr;
      pc[slot].id = id;
    }
    out[n++] = LG_PYFRAME_BIT | id;
  }
  return n;
}
