/* SPDX-License-Identifier: MIT */
/*
 * mmap_table.c - anonymous mmap: the table of recorded ranges that the mmap, munmap and
 * mremap hooks keep. The hooks are libleakguard.so's interposed functions
 * (mmap_hooks.c) and the attach agent's patched GOT slots (agent/hooks.c).
 *
 * Apart from the malloc family (preload.c) because a mapping carries no header: its
 * site and birth epoch live in a table of their own, under a lock of their own (taken
 * after the region's in the fork handlers, lifecycle.c).
 */
#include <sched.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "capture/recorder.h"
#include "core/platform.h"
#include "leakguard.h"

/* ------------------------------------------------------------------ anonymous mmap
 * Regions have no header. Recorded regions live in a sorted array of disjoint
 * [addr, addr+len) ranges (private pages; a spin lock that only mmap, munmap and
 * mremap take, around system calls that cost more than the search). That answers the
 * question munmap asks: which recorded regions does [a, a+len) overlap? It may take a
 * whole region, its head, its tail, a hole in the middle (the region splits in two and
 * counts as two blocks from then on) or several regions at once. A new mapping drops
 * whatever stale ranges it overlaps (MAP_FIXED over a recorded region replaces it; a
 * region unmapped behind our back, by a raw system call, is replaced when the kernel
 * hands the range out again). Lengths are counted in whole pages, as the kernel maps. */

typedef struct mm_ent {
  uint64_t addr, len;
  uint32_t site, epoch;
  uint32_t interp; /* mapped by the Python interpreter's own code (pymalloc's arenas) */
} mm_ent_t;
#define MM_CAP (1u << 16)
static mm_ent_t *mm_tab; /* sorted by addr, disjoint */
static uint32_t mm_n;
static atomic_flag mm_lock = ATOMIC_FLAG_INIT;

void lgi_mm_lock_take(void) {
  while (atomic_flag_test_and_set_explicit(&mm_lock, memory_order_acquire)) sched_yield();
}
void lgi_mm_lock_drop(void) { atomic_flag_clear_explicit(&mm_lock, memory_order_release); }

static inline uint64_t mm_pages(uint64_t len) {
  uint64_t pg = (uint64_t)getpagesize();
  return (len + pg - 1) & ~(pg - 1);
}

/* First index whose region ends after a. Caller holds mm_lock. */
static uint32_t mm_first_after(uint64_t a) {
  uint32_t lo = 0, hi = mm_n;
  while (lo < hi) {
    uint32_t mid = lo + (hi - lo) / 2;
    if (mm_tab[mid].addr + mm_tab[mid].len <= a) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

/* Inserts m at index i (the caller knows it keeps the order). 0 when full. */
static int mm_put(uint32_t i, mm_ent_t m) {
  if (mm_n >= MM_CAP) return 0;
  memmove(&mm_tab[i + 1], &mm_tab[i], (mm_n - i) * sizeof *mm_tab);
  mm_tab[i] = m;
  mm_n++;
  return 1;
}

static void mm_del(uint32_t i) {
  memmove(&mm_tab[i], &mm_tab[i + 1], (mm_n - i - 1) * sizeof *mm_tab);
  mm_n--;
}

/* Forgets [a, a+len) (len in whole pages): counts the bytes (and whole regions, or a
 * split) of every recorded region it overlaps off their sites. Caller holds mm_lock
 * and the recursion guard. If first is not NULL it receives the first overlapped
 * region as it was (site 0: none). */
static void mm_forget_range(lgi_tls_t *t, uint64_t a, uint64_t len, mm_ent_t *first) {
  uint64_t end = a + len;
  if (first) first->site = 0;
  uint32_t i = mm_first_after(a);
  while (i < mm_n && mm_tab[i].addr < end) {
    mm_ent_t e = mm_tab[i];
    uint64_t e_end = e.addr + e.len;
    if (first && !first->site) *first = e;
    uint64_t lo = e.addr > a ? e.addr : a, hi = e_end < end ? e_end : end;
    int64_t blocks = 0;
    if (lo == e.addr && hi == e_end) { /* the whole region */
      mm_del(i);
      blocks = -1;
    } else if (lo == e.addr) { /* its head: the rest starts later */
      mm_tab[i].addr = hi;
      mm_tab[i].len = e_end - hi;
      i++;
    } else if (hi == e_end) { /* its tail */
      mm_tab[i].len = lo - e.addr;
      i++;
    } else { /* a hole: two regions from now on */
      mm_tab[i].len = lo - e.addr;
      mm_ent_t rest = e;
      rest.addr = hi;
      rest.len = e_end - hi;
      if (mm_put(i + 1, rest)) blocks = 1;
      else lgi_count(t, e.site, -(int64_t)rest.len, 0, e.epoch, 0); /* table full: drop it */
      i += 2;
    }
    lgi_count(t, e.site, -(int64_t)(hi - lo), blocks, e.epoch, 0);
  }
}

/* Records the new region m (its stale overlaps forgotten first). Caller holds both. */
static void mm_add(lgi_tls_t *t, mm_ent_t m) {
  mm_forget_range(t, m.addr, m.len, NULL);
  if (mm_put(mm_first_after(m.addr), m)) lgi_count(t, m.site, (int64_t)m.len, 1, m.epoch, 1);
  else atomic_fetch_add(&lgi_g.hdr->dropped, 1);
}

static int mm_ready(lgi_tls_t *t) {
  if (t->guard || !lgi_g.enabled || !(lgi_g.hdr->flags & LG_RF_MMAP)) return 0;
  if (!lgi_thread_ready(t)) return 0;
  if (!mm_tab) {
    t->guard++;
    lgi_mm_lock_take();
    if (!mm_tab) mm_tab = lgi_pages_alloc(sizeof(mm_ent_t) * MM_CAP);
    lgi_mm_lock_drop();
    t->guard--;
  }
  return mm_tab != NULL;
}

/* A new mapping at [addr, addr+len): recorded when anonymous, and in every case the
 * recorded ranges it replaces are forgotten. */
void lgi_mm_mapped(void *addr, size_t len, int anon, uintptr_t ra0, uintptr_t cfa0) {
  lgi_tls_t *t = &lgi_tls;
  if (!mm_ready(t)) return;
  /* the allocator's own arena; pymalloc's, whose objects are recorded one by one */
  if (ra0 - lgi_alloc_lo < lgi_alloc_hi - lgi_alloc_lo || t->py_arena) anon = 0;
  t->guard++;
  uint32_t site = anon ? lgi_capture_all(t, ra0, cfa0, LG_SPACE_MMAP) : 0;
  uint32_t ep = lgi_epoch();
  lgi_mm_lock_take();
  if (anon) mm_add(t, (mm_ent_t){(uint64_t)addr, mm_pages(len), site, ep, (uint32_t)lgi_python_interp_frame(ra0)});
  else mm_forget_range(t, (uint64_t)addr, mm_pages(len), NULL);
  lgi_mm_lock_drop();
  t->guard--;
}

void lgi_mm_unmapped(void *addr, size_t len) {
  lgi_tls_t *t = &lgi_tls;
  if (!mm_tab || t->guard || !lgi_g.enabled) return;
  t->guard++;
  lgi_mm_lock_take();
  mm_forget_range(t, (uint64_t)addr, mm_pages(len), NULL);
  lgi_mm_lock_drop();
  t->guard--;
}

/* mremap moved or resized [old, old+old_len) to [p, p+new_len). A recorded region
 * keeps its allocation site and birth epoch (as the block it is), and counts the new
 * length. */
void lgi_mm_remapped(void *old, size_t old_len, void *p, size_t new_len, int flags) {
  lgi_tls_t *t = &lgi_tls;
  if (!mm_tab || t->guard || !lgi_g.enabled) return;
  t->guard++;
  lgi_mm_lock_take();
  mm_ent_t was = {0, 0, 0, 0, 0};
  int keep_old = old_len == 0; /* a shared mapping duplicated: the old one stays */
#ifdef MREMAP_DONTUNMAP
  if (flags & MREMAP_DONTUNMAP) keep_old = 1; /* the old range stays mapped (empty) */
#endif
  (void)flags;
  if (keep_old) {
    uint32_t i = mm_first_after((uint64_t)old);
    if (i < mm_n && mm_tab[i].addr <= (uint64_t)old) was = mm_tab[i];
  } else {
    mm_forget_range(t, (uint64_t)old, mm_pages(old_len), &was);
  }
  if (was.site) mm_add(t, (mm_ent_t){(uint64_t)p, mm_pages(new_len), was.site, was.epoch, was.interp});
  else mm_forget_range(t, (uint64_t)p, mm_pages(new_len), NULL);
  lgi_mm_lock_drop();
  t->guard--;
}

/* pymalloc wrapped in full mode (pymalloc.c): the ranges the interpreter mapped itself
 * before (its start-up's arenas, 3.12's frame stack chunks) are forgotten, as the
 * arenas it maps from then on are never recorded: their objects are, one by one. */
void lgi_mm_forget_interp(void) {
  lgi_tls_t *t = &lgi_tls;
  if (!mm_tab || t->guard || !lgi_g.enabled) return;
  t->guard++;
  lgi_mm_lock_take();
  for (uint32_t i = mm_n; i-- > 0;)
    if (mm_tab[i].interp) mm_forget_range(t, mm_tab[i].addr, mm_tab[i].len, NULL);
  lgi_mm_lock_drop();
  t->guard--;
}

/* A new attach (agent/start.c): the ranges of the last one belong to its region. */
void lgi_mm_reset(void) {
  lgi_mm_lock_take();
  mm_n = 0;
  lgi_mm_lock_drop();
}
