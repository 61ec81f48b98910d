/* SPDX-License-Identifier: MIT */
/*
 * pymalloc.c - CPython's small-object allocator (pymalloc) wrapped, so that Python
 * objects are recorded without PYTHONMALLOC=malloc (docs/python.md, "pymalloc kept").
 *
 * With every object a malloc block, the interpreter alone ran a third more instructions
 * on an allocation loop before anything was recorded (BENCHMARKS.md, issue #32). The
 * leakguard module, at its import under the recorder (or sitecustomize through ctypes
 * where the module is missing), calls lg_python_wrap() under the GIL: the MEM and OBJ
 * domains' malloc and calloc go through pm_malloc_* and pm_calloc_*, which decide as
 * malloc does (the thread's countdown: the same Poisson process in sampled mode, every
 * request in full mode).
 *
 * A request that is not recorded goes to pymalloc untouched: no header, no stack walk,
 * no frame read, no write to the shared region (sampled mode: almost all). A recorded
 * one becomes a headed block whose user pointer sits 32 bytes into it, with a check
 * word at p - 24 derived from p and a per-process secret (core/blockhdr.h,
 * LG_BLK_PYOBJ), so that a recorded object is told from any other by a 64-bit check:
 *  - full mode: the block is pymalloc's own, 32 bytes bigger (requests of up to
 *    480 bytes; pymalloc serves up to 512). Its free and realloc must not reach
 *    pymalloc with the user pointer: full mode wraps them too (pm_free_*, pm_realloc_*),
 *    and they pass pymalloc the block's base;
 *  - sampled mode, a tagged request (lg_tag_push: its quota may refuse it and free it
 *    through free()), or a request of 481 to 512 bytes: a glibc block. pymalloc hands a
 *    block outside its arenas to the raw domain, that is to our free and realloc, which
 *    read the header as for any malloc block: sampled mode leaves free and realloc as
 *    they are (no cost on the objects it did not pick).
 * Requests over 512 bytes (and of 0) are not decided here: pymalloc passes them to the
 * raw domain's malloc, where our hook decides. Objects from before the wrap (the
 * interpreter's start-up) fail the check and go to pymalloc as they are.
 * pymem_t: capture/pymem.h.
 */
#include <errno.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>
#include <dlfcn.h>
#include <sys/auxv.h>

#include "capture/pymem.h"
#include "capture/recorder.h"
#include "core/blockhdr.h"
#include "core/platform.h"
#include "leakguard.h"

#define PY_SMALL_REQUEST 512 /* obmalloc.c's SMALL_REQUEST_THRESHOLD, 3.9 to 3.13 */
#define PY_OFF ((size_t)1 << LG_BLK_PYOBJ_OFFLOG2)
static pymem_t pm_orig[2]; /* [0] PYMEM_DOMAIN_MEM, [1] PYMEM_DOMAIN_OBJ */
static uint64_t pm_secret;
static _Atomic int pm_wrapped;
static int pm_in_pool; /* full mode: recorded objects stay in pymalloc's pools */

static inline lg_blk_t *blk_of(const void *p) { return (lg_blk_t *)((char *)p - LG_BLK_HDR); }

/* 1 when p is a block headed here (either kind): the mark, the flag, the offset and the
 * check word. Safe for any object: a pymalloc object has at least its pool's 48-byte
 * header in front of it, a glibc block its chunk header and the end of the chunk before. */
static inline int pm_ours(const void *p) {
  uint64_t w = blk_of(p)->word;
  return lg_blk_marked(w) && (w & LG_BLK_PYOBJ) && lg_blk_word_offlog2(w) == LG_BLK_PYOBJ_OFFLOG2 &&
         ((const uint64_t *)p)[-3] == lg_blk_pyobj_cookie((uintptr_t)p, pm_secret);
}

/* The recorded (or tagged) object: a headed block, in pymalloc's pool or glibc's heap. */
static __attribute__((noinline)) void *pm_slow(pymem_t *o, size_t size, int zero, uintptr_t ra0, uintptr_t cfa0) {
  lgi_tls_t *t = &lgi_tls;
  int rec = lgi_decide(t, size);
  if (!rec && !lgi_need_head(t)) return zero ? o->calloc(o->ctx, 1, size) : o->malloc(o->ctx, size);
  void *base;
  if (pm_in_pool && size <= PY_SMALL_REQUEST - PY_OFF && !t->tag)
    base = zero ? o->calloc(o->ctx, 1, size + PY_OFF) : o->malloc(o->ctx, size + PY_OFF);
  else base = zero ? lgi_real_calloc(1, size + PY_OFF) : lgi_real_malloc(size + PY_OFF);
  if (!base) return NULL;
  char *p = (char *)base + PY_OFF;
  ((uint64_t *)p)[-3] = lg_blk_pyobj_cookie((uintptr_t)p, pm_secret);
  return lgi_head_finish(t, base, size, LG_BLK_PYOBJ_OFFLOG2, LG_BLK_PYOBJ, rec, ra0, cfa0);
}

/* Full mode's common case, fused (BENCHMARKS.md, issue #32): a set-up thread, not
 * tagged, not under an import's sampling, an object that stays in pymalloc's pools and
 * a Python chain the thread's cache knows. It does what pm_slow, lgi_decide,
 * lgi_head_finish, record_alloc and lgi_capture_all do on that path, without their
 * calls and re-checks: the block headed, its site's counters in the thread's shard. A
 * chain not cached goes the long way with the block already made. */
static inline int pm_fast_ok(const lgi_tls_t *t, size_t size) {
  return pm_in_pool && size <= PY_SMALL_REQUEST - PY_OFF && LGI_LIKELY(t->state == 1) && LGI_LIKELY(lgi_g.enabled) &&
         !t->tag && !t->imp;
}
static __attribute__((noinline)) void *pm_fast(pymem_t *o, size_t size, int zero, uintptr_t ra0, uintptr_t cfa0) {
  lgi_tls_t *t = &lgi_tls;
  void *base = zero ? o->calloc(o->ctx, 1, size + PY_OFF) : o->malloc(o->ctx, size + PY_OFF);
  if (!base) return NULL;
  char *p = (char *)base + PY_OFF;
  ((uint64_t *)p)[-3] = lg_blk_pyobj_cookie((uintptr_t)p, pm_secret);
  t->guard++;
  uint32_t site = lgi_python_site_cached(t, ra0);
  if (LGI_UNLIKELY(!site)) {
    t->guard--;
    return lgi_head_finish(t, base, size, LG_BLK_PYOBJ_OFFLOG2, LG_BLK_PYOBJ, 1, ra0, cfa0);
  }
  lg_blk_t *b = blk_of(p);
  b->word = lg_blk_word(size, LG_BLK_PYOBJ_OFFLOG2, 0) | LG_BLK_PYOBJ;
  t->under_import = 0;
  lgi_blk_record(t, b, site, (int64_t)size, 1);
  t->guard--;
  return p;
}

static inline void *pm_alloc(pymem_t *o, size_t size, int zero, uintptr_t ra0, uintptr_t cfa0) {
  lgi_tls_t *t = &lgi_tls;
  if (size - 1 >= PY_SMALL_REQUEST || t->guard) return zero ? o->calloc(o->ctx, 1, size) : o->malloc(o->ctx, size);
  /* full mode's countdown never runs positive (every request is decided) */
  if (pm_fast_ok(t, size)) return pm_fast(o, size, zero, ra0, cfa0);
  if (LGI_LIKELY(lgi_unheaded(t, size))) return zero ? o->calloc(o->ctx, 1, size) : o->malloc(o->ctx, size);
  return pm_slow(o, size, zero, ra0, cfa0);
}
static void *pm_malloc_mem(void *ctx, size_t n) {
  (void)ctx;
  return pm_alloc(&pm_orig[0], n, 0, LG_CALLER_RA, LG_CALLER_CFA);
}
static void *pm_malloc_obj(void *ctx, size_t n) {
  (void)ctx;
  return pm_alloc(&pm_orig[1], n, 0, LG_CALLER_RA, LG_CALLER_CFA);
}
static void *pm_calloc_any(pymem_t *o, size_t a, size_t b, uintptr_t ra0, uintptr_t cfa0) {
  size_t n;
  if (__builtin_mul_overflow(a, b, &n)) return o->calloc(o->ctx, a, b); /* pymalloc refuses it */
  return pm_alloc(o, n, 1, ra0, cfa0);
}
static void *pm_calloc_mem(void *ctx, size_t a, size_t b) {
  (void)ctx;
  return pm_calloc_any(&pm_orig[0], a, b, LG_CALLER_RA, LG_CALLER_CFA);
}
static void *pm_calloc_obj(void *ctx, size_t a, size_t b) {
  (void)ctx;
  return pm_calloc_any(&pm_orig[1], a, b, LG_CALLER_RA, LG_CALLER_CFA);
}

/* Full mode: a headed block's bookkeeping, then its base to pymalloc (which hands a
 * glibc block, outside its arenas, to the raw domain: our free, which finds no mark at
 * the base and passes it to glibc). */
static inline void pm_release(pymem_t *o, void *p) {
  lg_blk_t *b = blk_of(p);
  if (!lgi_free_fast(&lgi_tls, b)) lgi_free_count(b);
  /* The check word dies with the block. Left in pymalloc's pool, it would still be
     * there when the pool serves another size class: an object pymalloc hands out
     * unheaded (under an import's sampling, inside the recorder) at exactly this user
     * pointer would pass the check at its free, and its "base", 32 bytes before it,
     * would be freed instead (a block of another object: pymalloc's free list and the
     * heap corrupted). */
  ((uint64_t *)p)[-3] = 0;
  blk_of(p)->word = 0;
  o->free(o->ctx, (char *)p - PY_OFF);
}
static inline void pm_free_any(pymem_t *o, void *p) {
  if (p && pm_ours(p)) pm_release(o, p);
  else o->free(o->ctx, p);
}
static void pm_free_mem(void *ctx, void *p) {
  (void)ctx;
  pm_free_any(&pm_orig[0], p);
}
static void pm_free_obj(void *ctx, void *p) {
  (void)ctx;
  if (p) lgi_python_code_died(p);
  pm_free_any(&pm_orig[1], p);
}

/* Full mode: a headed block moves into a new one, decided at the caller's stack as
 * realloc's are (preload.c); any other goes to pymalloc as it is. */
static void *pm_realloc_any(pymem_t *o, void *p, size_t n, uintptr_t ra0, uintptr_t cfa0) {
  if (!p) return pm_alloc(o, n, 0, ra0, cfa0);
  if (!pm_ours(p)) return o->realloc(o->ctx, p, n);
  size_t old = lg_blk_word_size(blk_of(p)->word);
  void *q = pm_alloc(o, n, 0, ra0, cfa0);
  if (!q) return NULL; /* p lives on, unchanged */
  memcpy(q, p, old < n ? old : n);
  pm_release(o, p);
  return q;
}
static void *pm_realloc_mem(void *ctx, void *p, size_t n) {
  (void)ctx;
  return pm_realloc_any(&pm_orig[0], p, n, LG_CALLER_RA, LG_CALLER_CFA);
}
static void *pm_realloc_obj(void *ctx, void *p, size_t n) {
  (void)ctx;
  return pm_realloc_any(&pm_orig[1], p, n, LG_CALLER_RA, LG_CALLER_CFA);
}

/* Full mode: pymalloc's arenas (256 KiB to 1 MiB mappings) hold recorded objects, so
 * the mmap that makes one is not recorded as well (mmap_table.c); those mapped before
 * the wrap, the interpreter's start-up, are forgotten (lgi_mm_forget_interp): the
 * objects made before the wrap are not recorded. CPython's
 * PyObjectArenaAllocator, the same from 3.4 to 3.13 (3.12 and later also map the
 * frame stack's chunks through it: not recorded either). */
typedef struct {
  void *ctx;
  void *(*alloc)(void *ctx, size_t size);
  void (*free)(void *ctx, void *ptr, size_t size);
} pyarena_t;
static pyarena_t pm_arena;
static void *pm_arena_alloc(void *ctx, size_t size) {
  (void)ctx;
  lgi_tls_t *t = &lgi_tls;
  t->py_arena++;
  void *p = pm_arena.alloc(pm_arena.ctx, size);
  t->py_arena--;
  return p;
}
static void pm_arena_wrap(void) {
  void (*get)(pyarena_t *) = (void (*)(pyarena_t *))dlsym(RTLD_DEFAULT, "PyObject_GetArenaAllocator");
  void (*set)(pyarena_t *) = (void (*)(pyarena_t *))dlsym(RTLD_DEFAULT, "PyObject_SetArenaAllocator");
  if (!get || !set) return;
  get(&pm_arena);
  if (!pm_arena.alloc) return;
  pyarena_t w = pm_arena;
  w.alloc = pm_arena_alloc;
  set(&w);
}

/* Called by the leakguard module at its import, GIL held (PyMem_SetAllocator's rule).
 * 1 when CPython's pymalloc is wrapped (now or before), 0 when it stays as it is: not
 * recording, or another allocator than plain pymalloc (PYTHONMALLOC=malloc or
 * pymalloc_debug by the user: wrapping malloc would count its bytes twice, and the
 * debug hooks would check their own header on our blocks). */
LG_API int lg_python_wrap(void) {
  if (atomic_load(&pm_wrapped)) return 1;
  if (!lgi_g.enabled && !lgi_g.lazy) return 0; /* waiting for its lazy start: wrapped now, counted from then */
  const char *(*name)(void) = (const char *(*)(void))dlsym(RTLD_DEFAULT, "_PyMem_GetCurrentAllocatorName");
  void (*get)(int, pymem_t *) = (void (*)(int, pymem_t *))dlsym(RTLD_DEFAULT, "PyMem_GetAllocator");
  void (*set)(int, pymem_t *) = (void (*)(int, pymem_t *))dlsym(RTLD_DEFAULT, "PyMem_SetAllocator");
  const char *cur = name ? name() : NULL;
  if (!get || !set || !cur || strcmp(cur, "pymalloc") != 0) return 0;
  const uint8_t *rnd = (const uint8_t *)getauxval(AT_RANDOM);
  if (rnd) memcpy(&pm_secret, rnd + 8, sizeof pm_secret);
  pm_secret ^= (uint64_t)(uintptr_t)&pm_secret; /* differs per process even without AT_RANDOM */
  pm_in_pool = !lgi_g.sample_bytes;
  get(LG_PYMEM_DOMAIN_MEM, &pm_orig[0]);
  get(LG_PYMEM_DOMAIN_OBJ, &pm_orig[1]);
  pymem_t w[2] = {pm_orig[0], pm_orig[1]};
  w[0].malloc = pm_malloc_mem, w[0].calloc = pm_calloc_mem;
  w[1].malloc = pm_malloc_obj, w[1].calloc = pm_calloc_obj;
  if (pm_in_pool) {
    pm_arena_wrap();
    lgi_mm_forget_interp();
    w[0].realloc = pm_realloc_mem, w[0].free = pm_free_mem;
    w[1].realloc = pm_realloc_obj, w[1].free = pm_free_obj;
  }
  set(LG_PYMEM_DOMAIN_MEM, &w[0]);
  set(LG_PYMEM_DOMAIN_OBJ, &w[1]);
  if (pm_in_pool) lgi_python_count_code_deaths();
  atomic_store(&pm_wrapped, 1);
  return 1;
}

/* The Python module's question about an object or a buffer at block: 0 with its site and
 * size when it is a LG_BLK_PYOBJ block recorded here. Safe for any object (pm_ours). */
LG_API int lg_python_block(const void *block, uint32_t *site, uint64_t *size) {
  uintptr_t a = (uintptr_t)block;
  if (!a || (a & 15) || !atomic_load(&pm_wrapped) || !lgi_g.enabled || !pm_ours(block)) return -ENOENT;
  const lg_blk_t *b = blk_of(block);
  uint32_t s = lg_blk_site(b->site);
  if (!s) return -ENOENT;
  if (site) *site = s;
  if (size) *size = lg_blk_word_size(b->word);
  return 0;
}
