/* SPDX-License-Identifier: MIT */
/*
 * hooks.c - what the agent's GOT slots point to (agent.h): the malloc family, mmap and
 * its kin, dlopen; each calls the function the slot held (lgag_real) and records in
 * the side table. The counting and each thread's set-up they rely on are thread.c.
 */
#include <stdarg.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "capture/agent/agent.h"
#include "core/platform.h"
#include "leakguard.h"

lgag_real_t lgag_real;
_Atomic int lgag_recording;
_Atomic int lgag_py_wrapped;
__thread int lgag_py_inner __attribute__((tls_model("initial-exec")));

__attribute__((noinline)) void lgag_record(lgi_tls_t *t, void *p, size_t size, uintptr_t ra0, uintptr_t cfa0) {
  t->guard++;
  uint32_t site = lgi_capture_all(t, ra0, cfa0, LG_SPACE_HOST);
  uint32_t ep = lgi_epoch();
  lgag_ent_t old;
  int rc = lgag_table_put((uintptr_t)p, site, ep, size, &old);
  if (rc != 0) {
    if (rc == -1) __atomic_fetch_add(&lgag_stats.table_full, 1, __ATOMIC_RELAXED);
    t->guard--;
    return;
  }
  if (old.key) lgi_count(t, old.site, -lgi_weight_bytes(old.size), -lgi_weight_blocks(old.size), old.epoch, 0);
  lgi_count(t, site, lgi_weight_bytes(size), lgi_weight_blocks(size), ep, 1);
  t->guard--;
}

/* Before the real free (the address may be handed out again as soon as it returns).
 * An empty table is seen by the filter alone: a count of the table's entries, written
 * by every recorded allocation and free, shared a cache line with the filter's
 * address, read by every free (29 % of the free hook's samples were that load). */
static inline void forget(void *p) {
  if (!p) return;
  lgag_ent_t e;
  if (lgag_table_maybe((uintptr_t)p) && lgag_table_take((uintptr_t)p, &e)) {
    lgi_tls_t *t = &lgi_tls;
    t->guard++;
    lgi_count(t, e.site, -lgi_weight_bytes(e.size), -lgi_weight_blocks(e.size), e.epoch, 0);
    t->guard--;
    return;
  }
  if (lgi_g.sample_bytes || !atomic_load_explicit(&lgag_recording, memory_order_relaxed) || lgi_tls.guard ||
      lgag_py_inner)
    return;
  /* full mode: every block allocated since attach is in the table, so this one is older */
  __atomic_fetch_add(&lgag_stats.preattach_bytes_released, lgag_real.usable(p), __ATOMIC_RELAXED);
  __atomic_fetch_add(&lgag_stats.preattach_blocks_released, 1, __ATOMIC_RELAXED);
}

static void *h_malloc(size_t n) {
  void *p = lgag_real.malloc(n);
  if (p && lgag_decide(&lgi_tls, n)) lgag_record(&lgi_tls, p, n, LG_CALLER_RA, LG_CALLER_CFA);
  return p;
}
static void h_free(void *p) {
  forget(p);
  lgag_real.free(p);
}
static void *h_calloc(size_t a, size_t b) {
  void *p = lgag_real.calloc(a, b);
  if (p && lgag_decide(&lgi_tls, a * b)) lgag_record(&lgi_tls, p, a * b, LG_CALLER_RA, LG_CALLER_CFA);
  return p;
}
static void *h_realloc(void *old, size_t n) {
  if (old && n == 0) {
    forget(old);
    return lgag_real.realloc(old, n);
  }
  lgag_ent_t e = {0};
  int known = old && lgag_table_maybe((uintptr_t)old) && lgag_table_take((uintptr_t)old, &e);
  if (old && !known && !lgi_g.sample_bytes && atomic_load_explicit(&lgag_recording, memory_order_relaxed) &&
      !lgi_tls.guard && !lgag_py_inner) {
    __atomic_fetch_add(&lgag_stats.preattach_bytes_released, lgag_real.usable(old), __ATOMIC_RELAXED);
    __atomic_fetch_add(&lgag_stats.preattach_blocks_released, 1, __ATOMIC_RELAXED);
  }
  void *p = lgag_real.realloc(old, n);
  lgi_tls_t *t = &lgi_tls;
  if (known) {
    t->guard++;
    if (p) lgi_count(t, e.site, -lgi_weight_bytes(e.size), -lgi_weight_blocks(e.size), e.epoch, 0);
    else { /* the old block lives on */ lgag_ent_t o2;
      (void)lgag_table_put(e.key, e.site, e.epoch, e.size, &o2);
    }
    t->guard--;
  }
  if (p && lgag_decide(t, n)) lgag_record(t, p, n, LG_CALLER_RA, LG_CALLER_CFA);
  return p;
}
static void *h_reallocarray(void *old, size_t a, size_t b) {
  size_t n;
  if (__builtin_mul_overflow(a, b, &n)) return lgag_real.reallocarray(old, a, b);
  return h_realloc(old, n);
}
static int h_posix_memalign(void **out, size_t al, size_t n) {
  int r = lgag_real.posix_memalign(out, al, n);
  if (r == 0 && lgag_decide(&lgi_tls, n)) lgag_record(&lgi_tls, *out, n, LG_CALLER_RA, LG_CALLER_CFA);
  return r;
}
static void *h_aligned_alloc(size_t al, size_t n) {
  void *p = lgag_real.aligned_alloc(al, n);
  if (p && lgag_decide(&lgi_tls, n)) lgag_record(&lgi_tls, p, n, LG_CALLER_RA, LG_CALLER_CFA);
  return p;
}
static void *h_memalign(size_t al, size_t n) {
  void *p = lgag_real.memalign(al, n);
  if (p && lgag_decide(&lgi_tls, n)) lgag_record(&lgi_tls, p, n, LG_CALLER_RA, LG_CALLER_CFA);
  return p;
}
static void *h_valloc(size_t n) {
  void *p = lgag_real.valloc(n);
  if (p && lgag_decide(&lgi_tls, n)) lgag_record(&lgi_tls, p, n, LG_CALLER_RA, LG_CALLER_CFA);
  return p;
}
static void *h_pvalloc(size_t n) {
  void *p = lgag_real.pvalloc(n);
  if (p && lgag_decide(&lgi_tls, n)) lgag_record(&lgi_tls, p, n, LG_CALLER_RA, LG_CALLER_CFA);
  return p;
}
static size_t h_usable(void *p) { return lgag_real.usable(p); }

/* Anonymous mmap (mmap_table.c's table, as under `leakguard run`): a mapping made
 * after attach is recorded at its call site; one that the program unmaps, moves or
 * maps over is forgotten. Mappings older than the attach are not in the table, and
 * their munmap changes nothing. */
static void *mm_hook(void *(*fn)(void *, size_t, int, int, int, off_t), void *addr, size_t len, int prot, int flags,
                     int fd, off_t off, uintptr_t ra0, uintptr_t cfa0) {
  void *p = fn(addr, len, prot, flags, fd, off);
  if (p != MAP_FAILED && (flags & (MAP_ANONYMOUS | MAP_FIXED)) && !lgag_py_inner &&
      atomic_load_explicit(&lgag_recording, memory_order_relaxed))
    lgi_mm_mapped(p, len, (flags & MAP_ANONYMOUS) != 0, ra0, cfa0);
  return p;
}
static void *h_mmap(void *addr, size_t len, int prot, int flags, int fd, off_t off) {
  return mm_hook(lgag_real.mmap, addr, len, prot, flags, fd, off, LG_CALLER_RA, LG_CALLER_CFA);
}
static void *h_mmap64(void *addr, size_t len, int prot, int flags, int fd, off_t off) {
  return mm_hook(lgag_real.mmap64, addr, len, prot, flags, fd, off, LG_CALLER_RA, LG_CALLER_CFA);
}
static int h_munmap(void *addr, size_t len) {
  int rc = lgag_real.munmap(addr, len);
  if (rc == 0) lgi_mm_unmapped(addr, len);
  return rc;
}
static void *h_mremap(void *old, size_t old_len, size_t new_len, int flags, ...) {
  void *want = NULL;
  LGI_MREMAP_WANT(flags, want);
  void *p = lgag_real.mremap(old, old_len, new_len, flags, want);
  if (p != MAP_FAILED) lgi_mm_remapped(old, old_len, p, new_len, flags);
  return p;
}

static void *h_dlopen(const char *f, int mode) {
  void *h = lgag_real.dlopen(f, mode);
  if (h && __atomic_load_n(&lgag_stats.state, __ATOMIC_SEQ_CST) == 1) {
    lgi_tls.guard++;
    lgag_rescan();
    lgi_tls.guard--;
  }
  return h;
}

/* The names whose GOT slots got.c rewrites. */
const lgag_name_t lgag_names[] = {
#define N(n, h, r)                                                                                                     \
  { #n, (void *)h, (void **)&lgag_real.r }
    N(malloc, h_malloc, malloc),
    N(free, h_free, free),
    N(calloc, h_calloc, calloc),
    N(realloc, h_realloc, realloc),
    N(reallocarray, h_reallocarray, reallocarray),
    N(posix_memalign, h_posix_memalign, posix_memalign),
    N(aligned_alloc, h_aligned_alloc, aligned_alloc),
    N(memalign, h_memalign, memalign),
    N(valloc, h_valloc, valloc),
    N(pvalloc, h_pvalloc, pvalloc),
    N(malloc_usable_size, h_usable, usable),
    N(dlopen, h_dlopen, dlopen),
    N(mmap, h_mmap, mmap),
    N(mmap64, h_mmap64, mmap64),
    N(munmap, h_munmap, munmap),
    N(mremap, h_mremap, mremap),
#undef N
};
const size_t lgag_nnames = sizeof lgag_names / sizeof lgag_names[0];
