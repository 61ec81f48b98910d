/* SPDX-License-Identifier: MIT */
/*
 * unwind.c - native stack capture for the recorder.
 *
 * Programs are built the usual way (-O2, no frame pointers, no debug info in system
 * libraries), so frame-pointer walking is not reliable; libunwind's DWARF CFI unwinder
 * is, but costs about a microsecond per stack. Allocation churn calls malloc from the
 * same few call chains millions of times, so a per-thread cache sits in front of it:
 *
 *   key    (return address into the malloc caller, caller's stack pointer)
 *   check  every cached return address i is still stored at its slot on the stack
 *          (cfa0 + slot_off[i]); the slots are live stack (above the current stack
 *          pointer), so a match means the same chain of callers.
 *
 * Two different callers with the same frame sizes give the same key but a different
 * return address at some slot, so they miss and are unwound. The cache is used only
 * when every slot lies inside this thread's stack (pthread bounds), so stacks that
 * are switched (coroutines) are always unwound, never read out of bounds.
 * BENCHMARKS.md has the measured cost of both paths.
 */
#include <pthread.h>
#include <string.h>

#define UNW_LOCAL_ONLY
#include <libunwind.h>

#include "capture/recorder.h"

void lgi_unwind_init(void) {
  unw_set_caching_policy(unw_local_addr_space, UNW_CACHE_PER_THREAD);
}

static void stack_bounds(lgi_tls_t *t) {
  pthread_attr_t a;
  void *addr = NULL;
  size_t size = 0;
  t->stack_lo = t->stack_hi = 1; /* "looked up" even if it fails */
  if (pthread_getattr_np(pthread_self(), &a) != 0) return;
  if (pthread_attr_getstack(&a, &addr, &size) == 0 && addr) {
    t->stack_lo = (uintptr_t)addr;
    t->stack_hi = (uintptr_t)addr + size;
  }
  pthread_attr_destroy(&a);
}

static lgi_scache_ent_t *scache_slot(lgi_tls_t *t, uintptr_t ra0, uintptr_t cfa0) {
  if (LGI_UNLIKELY(!t->scache)) {
    t->scache = lgi_pages_alloc(sizeof(lgi_scache_ent_t) * LGI_SCACHE_ENTRIES);
    if (!t->scache) return NULL;
    stack_bounds(t);
  }
  uint64_t k = (ra0 * 0x9E3779B97F4A7C15ULL) ^ (cfa0 >> 4);
  return &t->scache[(k >> 20) & (LGI_SCACHE_ENTRIES - 1)];
}

void lgi_unwind_thread_exit(lgi_tls_t *t) {
  lgi_pages_free(t->scache, sizeof(lgi_scache_ent_t) * LGI_SCACHE_ENTRIES);
  t->scache = NULL;
}

uint32_t lgi_capture(lgi_tls_t *t, uintptr_t ra0, uintptr_t cfa0, unsigned space) {
  lgi_scache_ent_t *e = scache_slot(t, ra0, cfa0);
  if (LGI_LIKELY(e && e->ra0 == ra0 && e->cfa0 == cfa0 && e->space == space && e->id)) {
    unsigned i = 1;
    for (; i < e->depth; i++)
      if (*(const uint64_t *)(cfa0 + e->slot_off[i]) != e->ra[i]) break;
    if (i == e->depth) return e->id;
  }

  /* Miss: unwind with libunwind, skipping the recorder's own frames (their stack
   * pointer is below the caller's). */
  uint64_t ips[LG_MAX_DEPTH];
  uint64_t sps[LG_MAX_DEPTH];
  unsigned max = lgi_g.depth, n = 0;
  unw_context_t ctx;
  unw_cursor_t cur;
  if (unw_getcontext(&ctx) == 0 && unw_init_local(&cur, &ctx) == 0) {
    int started = 0;
    while (n < max && unw_step(&cur) > 0) {
      unw_word_t ip = 0, sp = 0;
      unw_get_reg(&cur, UNW_REG_IP, &ip);
      unw_get_reg(&cur, UNW_REG_SP, &sp);
      if (!started) {
        if (sp < cfa0) continue;
        started = 1;
      }
      if (ip == 0) break;
      ips[n] = ip;
      sps[n] = sp;
      n++;
    }
  }
  if (n == 0 || ips[0] != ra0) {
    /* The unwinder lost the chain (no CFI for a frame): keep at least the caller. */
    ips[0] = ra0;
    sps[0] = cfa0;
    if (n == 0) n = 1;
  }
  uint32_t id = lgi_stack_intern(ips, n, space);

  /* Cache it if every slot is inside this thread's stack. */
  if (e && n <= LGI_SCACHE_DEPTH && cfa0 >= t->stack_lo && sps[0] == cfa0) {
    unsigned i = 1;
    for (; i < n; i++)
      if (sps[i] - 8 < cfa0 || sps[i] > t->stack_hi || sps[i] - cfa0 > UINT32_MAX ||
          *(const uint64_t *)(sps[i] - 8) != ips[i])
        break;
    if (i == n) {
      e->id = 0; /* invalid while being rewritten (signal handlers may look) */
      e->ra0 = ra0;
      e->cfa0 = cfa0;
      e->depth = (uint16_t)n;
      e->space = (uint8_t)space;
      for (i = 1; i < n; i++) {
        e->slot_off[i] = (uint32_t)(sps[i] - 8 - cfa0);
        e->ra[i] = ips[i];
      }
      __atomic_store_n(&e->id, id, __ATOMIC_RELEASE);
    }
  }
  return id;
}

uint32_t lgi_capture_all(lgi_tls_t *t, uintptr_t ra0, uintptr_t cfa0, unsigned space) {
  uint32_t native = lgi_capture(t, ra0, cfa0, space);
  if (!lgi_python_active()) return native;
  lg_region_hdr_t *h = lgi_g.hdr;
  const lg_stack_rec_t *r = LG_PTR(h, h->stacks_off, const lg_stack_rec_t *) + native;
  unsigned nd = native >= 2 ? r->depth : 0;
  uint64_t ips[LG_MAX_DEPTH];
  unsigned room = LG_MAX_DEPTH - nd, max = room < 64 ? room : 64;
  unsigned np = lgi_python_frames(t, ips, max);
  if (np == 0) return native;
  /* Native frames up to the interpreter's own: below it the native stack only
   * mirrors the Python frames (--native in reports shows the kept ones). */
  const uint64_t *nf = LG_PTR(h, h->frames_off, const uint64_t *) + r->frames;
  unsigned keep = 0;
  while (keep < nd && !lgi_python_interp_frame(nf[keep])) keep++;
  if (keep < nd) keep++; /* the interpreter frame that made the call */
  memcpy(ips + np, nf, keep * sizeof *ips);
  return lgi_stack_intern(ips, np + keep, space);
}
