/* SPDX-License-Identifier: MIT */
/*
 * pyframes_probe.c - the recorder's Python frame reader (src/capture/python.c, compiled
 * in here as is) outside the recorder, for a Python program to call through ctypes:
 *
 *   tests/python/frames_check.py   compares what the reader sees with
 *                                  traceback.extract_stack() on every CPython 3.9-3.13
 *   bench/py_frames.py             times one read per recorded allocation
 *
 * The region python.c interns into is a private buffer here; the lock is a plain spin
 * lock. ctypes.CDLL releases the GIL around the call, as PyTorch does around an op, so
 * the reader runs in exactly the state it meets inside malloc.
 */
#include <libunwind.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include "capture/recorder.h"

#define LGT_API __attribute__((visibility("default")))
LGT_API int lgt_init(void);
LGT_API int lgt_frames(char *buf, size_t cap);
LGT_API int lgt_frame_ids(uint64_t *out, int max);
LGT_API double lgt_bench(int what, long iters, int *nframes);

/* ---- what python.c uses from the rest of libleakguard */
lgi_global_t lgi_g;
static atomic_flag lock = ATOMIC_FLAG_INIT;
void lgi_lock(void) {
  while (atomic_flag_test_and_set_explicit(&lock, memory_order_acquire)) {}
}
void lgi_unlock(void) { atomic_flag_clear_explicit(&lock, memory_order_release); }
void *lgi_pages_alloc(size_t bytes) {
  void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  return p == MAP_FAILED ? NULL : p;
}
void lgi_pages_free(void *p, size_t bytes) {
  if (p) munmap(p, bytes);
}

static __thread lgi_tls_t tls; /* the reader's per-thread cache lives in tls.pycache */

#define NFRAMES (1u << 16)
#define STRCAP (8u << 20)

/* Sets up the region and detects the interpreter. Returns 1 when the reader is active
 * (a known CPython version), 0 when it is not (it said why on stderr). */
LGT_API int lgt_init(void) {
  if (!lgi_g.hdr) {
    size_t off_f = (sizeof(lg_region_hdr_t) + 63) & ~(size_t)63;
    size_t off_s = off_f + NFRAMES * sizeof(lg_pyframe_rec_t);
    lg_region_hdr_t *h = lgi_pages_alloc(off_s + STRCAP);
    if (!h) return 0;
    h->pyframes_off = off_f;
    h->pyframes_cap = NFRAMES;
    h->pystr_off = off_s;
    h->pystr_cap = STRCAP;
    lgi_g.hdr = h;
  }
  lgi_python_detect();
  return lgi_python_active();
}

/* The calling thread's Python frames, innermost first, as "file\tfunction\tline\n"
 * lines in buf (NUL-terminated). Returns the number of frames, -1 when buf is short. */
LGT_API int lgt_frames(char *buf, size_t cap) {
  uint64_t ids[64];
  int imported;
  unsigned n = lgi_python_frames(&tls, ids, 64, &imported);
  lg_region_hdr_t *h = lgi_g.hdr;
  const lg_pyframe_rec_t *rec = LG_PTR(h, h->pyframes_off, const lg_pyframe_rec_t *);
  const char *str = LG_PTR(h, h->pystr_off, const char *);
  size_t w = 0;
  buf[0] = 0;
  for (unsigned i = 0; i < n; i++) {
    const lg_pyframe_rec_t *r = &rec[ids[i] & ~LG_PYFRAME_BIT];
    int k = snprintf(buf + w, cap - w, "%s\t%s\t%d\n", str + r->file, str + r->func, (int)r->line);
    if (k < 0 || (size_t)k >= cap - w) return -1;
    w += (size_t)k;
  }
  return (int)n;
}

/* The pyframe ids of the calling thread's frames (what a recorded stack holds). */
LGT_API int lgt_frame_ids(uint64_t *out, int max) {
  int imported;
  return (int)lgi_python_frames(&tls, out, max > 0 ? (unsigned)max : 0, &imported);
}

static double now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

/* Nanoseconds per call of what = 0: the frame reader with a warm per-thread cache (the
 * steady state: every (code, instruction) seen before); 1: the reader after clearing
 * the per-thread cache (every frame decodes its line with PyCode_Addr2Line and looks
 * up the process-wide index; the 128 KiB memset is included); 2: malloc(64) + free;
 * 3: unw_backtrace of the native stack (what a native-only stack costs without the
 * recorder's stack cache). *nframes: frames the reader returned. */
LGT_API double lgt_bench(int what, long iters, int *nframes) {
  uint64_t ids[64];
  void *bt[128];
  volatile unsigned sink = 0;
  int imported;
  *nframes = (int)lgi_python_frames(&tls, ids, 64, &imported); /* warms the cache */
  double t0 = now_ns();
  for (long i = 0; i < iters; i++) {
    switch (what) {
    case 0: sink += lgi_python_frames(&tls, ids, 64, &imported); break;
    case 1:
      lgi_python_cache_clear(&tls);
      sink += lgi_python_frames(&tls, ids, 64, &imported);
      break;
    case 2: {
      void *volatile p = malloc(64);
      free(p);
      break;
    }
    default: sink += (unsigned)unw_backtrace(bt, 128); break;
    }
  }
  (void)sink;
  return (now_ns() - t0) / (double)iters;
}
