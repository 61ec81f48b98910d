/* SPDX-License-Identifier: MIT */
/*
 * cuda_mem.c - GPU memory at the CUDA driver API: the wrappers that allocate and free
 * (device, stream-ordered, VMM, managed, pinned, registered host memory, arrays), the
 * address/handle table of what they recorded, and the lg_cuda_* calls of the public
 * API that read it.
 *
 * Apart from cuda.c (how a call reaches a wrapper) and cuda_ctx.c (contexts, devices,
 * pools): this is the part that holds records.
 *
 * Device memory has no header: an open-addressing table (address or handle ->
 * record), in pages from mmap, doubled when 70 % full, under its own spin lock that
 * is held for table operations only, never across a driver call or a stack capture.
 * The recursion guard is held across every driver call made by a wrapper, so memory
 * the driver allocates or maps inside it (the pages of pinned memory) is not also
 * counted as host or mmap memory.
 */
#include <errno.h>
#include <sched.h>
#include <stdatomic.h>
#include <string.h>

#include "capture/cuda_impl.h"
#include "core/hash.h"
#include "leakguard.h"

/* ------------------------------------------------------------------ the table */

enum { NS_ADDR = 1, NS_HANDLE, NS_MAP, NS_ARRAY, NS_REG };

typedef struct cu_ent {
  uint64_t key; /* address, handle or array */
  uint64_t size;
  uint64_t ctx; /* context it was made in (0: not bound to one) */
  uint64_t aux; /* NS_MAP: the handle; stream-ordered: the stream */
  uint32_t site, epoch;
  uint8_t ns; /* 0 = empty slot */
  uint8_t space, dev;
  uint8_t pad[5];
} cu_ent_t;

#define TAB_MIN (1u << 12)
#define TAB_MAX (1u << 24)
static cu_ent_t *tab;
static uint32_t tab_cap, tab_n;
static atomic_flag tab_lock_f = ATOMIC_FLAG_INIT;

void lgi_cuda_tab_lock(void) {
  while (atomic_flag_test_and_set_explicit(&tab_lock_f, memory_order_acquire)) sched_yield();
}
void lgi_cuda_tab_unlock(void) { atomic_flag_clear_explicit(&tab_lock_f, memory_order_release); }

void lgi_cuda_atfork(int phase) {
  if (phase == 0) lgi_cuda_tab_lock();
  else lgi_cuda_tab_unlock();
}

static inline uint32_t tab_slot(uint64_t key, unsigned ns, uint32_t cap) {
  uint64_t x = (key ^ ((uint64_t)ns << 59)) * LG_HASH_GOLDEN64;
  x ^= x >> 31;
  return (uint32_t)(x >> 20) & (cap - 1);
}

static void raw_insert(cu_ent_t *t, uint32_t cap, const cu_ent_t *e) {
  uint32_t i = tab_slot(e->key, e->ns, cap);
  while (t[i].ns) i = (i + 1) & (cap - 1);
  t[i] = *e;
}

/* Caller holds the lock. 0 or -1 (no memory). */
static int tab_grow(void) {
  uint32_t cap = tab ? tab_cap * 2 : TAB_MIN;
  if (cap > TAB_MAX) return -1;
  cu_ent_t *nt = lgi_pages_alloc((size_t)cap * sizeof *nt);
  if (!nt) return -1;
  for (uint32_t i = 0; tab && i < tab_cap; i++)
    if (tab[i].ns) raw_insert(nt, cap, &tab[i]);
  if (tab) lgi_pages_free(tab, (size_t)tab_cap * sizeof *tab);
  tab = nt;
  tab_cap = cap;
  return 0;
}

static cu_ent_t *tab_find(uint64_t key, unsigned ns) {
  if (!tab) return NULL;
  for (uint32_t i = tab_slot(key, ns, tab_cap);; i = (i + 1) & (tab_cap - 1)) {
    if (!tab[i].ns) return NULL;
    if (tab[i].key == key && tab[i].ns == ns) return &tab[i];
  }
}

/* Removes slot i (backward-shift deletion: linear probing needs no tombstones). */
static void tab_del(uint32_t i) {
  uint32_t m = tab_cap - 1, j = i;
  for (;;) {
    j = (j + 1) & m;
    if (!tab[j].ns) break;
    uint32_t k = tab_slot(tab[j].key, tab[j].ns, tab_cap);
    /* j's entry may move into the hole unless its home k lies cyclically in (i, j] */
    int stays = i <= j ? (i < k && k <= j) : (i < k || k <= j);
    if (!stays) {
      tab[i] = tab[j];
      i = j;
    }
  }
  memset(&tab[i], 0, sizeof tab[i]);
  tab_n--;
}

/* Inserts e; 1 when it replaced an entry with the same key (copied to *old), 0 when
 * new, -1 when there is no room. Caller holds the lock. */
static int tab_put(const cu_ent_t *e, cu_ent_t *old) {
  cu_ent_t *x = tab_find(e->key, e->ns);
  if (x) {
    *old = *x;
    *x = *e;
    return 1;
  }
  if ((!tab || (uint64_t)(tab_n + 1) * 10 > (uint64_t)tab_cap * 7) && tab_grow() != 0 && (!tab || tab_n + 1 >= tab_cap))
    return -1;
  raw_insert(tab, tab_cap, e);
  tab_n++;
  return 0;
}

static int tab_take(uint64_t key, unsigned ns, cu_ent_t *out) {
  cu_ent_t *x = tab_find(key, ns);
  if (!x) return 0;
  *out = *x;
  tab_del((uint32_t)(x - tab));
  return 1;
}

/* The last managed block found by lgi_cuda_managed_site (below). */
static _Atomic uint64_t um_last_key, um_last_size;
static _Atomic uint32_t um_last_site;

/* ------------------------------------------------------------------ accounting */

lg_cuda_dev_t *lgi_cuda_gauge(int dev) { return dev >= 0 && dev < LG_CUDA_MAX_DEVICES ? &lgi_g.hdr->cuda[dev] : NULL; }

/* Counts e on (sign 1) or off (sign -1) its site or gauge. Lock-free. */
static void count(lgi_tls_t *t, const cu_ent_t *e, int sign, int alloc) {
  lg_cuda_dev_t *g = lgi_cuda_gauge(e->dev);
  switch (e->ns) {
  case NS_ADDR:
  case NS_HANDLE:
  case NS_ARRAY:
    lgi_count(t, e->site, sign * (int64_t)e->size, sign, e->epoch, alloc && sign > 0);
    /* per-device totals for readers that do not sum sites (the guard) */
    if (g && e->space == LG_SPACE_DEVICE) atomic_fetch_add(&g->device_bytes, sign * (int64_t)e->size);
    else if (g && e->space == LG_SPACE_MANAGED) {
      atomic_fetch_add(&g->managed_bytes, sign * (int64_t)e->size);
      if (sign < 0) atomic_store(&um_last_site, 0); /* the UM lookup's cache may name it */
    } else if (g && e->space == LG_SPACE_PINNED) atomic_fetch_add(&g->pinned_bytes, sign * (int64_t)e->size);
    break;
  case NS_REG:
    if (g) atomic_fetch_add(&g->registered_bytes, sign * (int64_t)e->size);
    break;
  case NS_MAP:
    if (g) atomic_fetch_add(&g->vmm_mapped_bytes, sign * (int64_t)e->size);
    break;
  }
}

static void put_counted(lgi_tls_t *t, const cu_ent_t *e) {
  cu_ent_t old;
  lgi_cuda_tab_lock();
  int r = tab_put(e, &old);
  lgi_cuda_tab_unlock();
  if (r < 0) {
    atomic_fetch_add(&lgi_g.hdr->dropped, 1);
    return;
  }
  if (r == 1) count(t, &old, -1, 0); /* freed behind our back (by an untracked path) */
  count(t, e, 1, 1);
  atomic_fetch_add_explicit(&lgi_g.hdr->cuda_calls, 1, memory_order_relaxed);
  if (e->ns != NS_REG && e->ns != NS_MAP) lgi_cuda_set_flag(LG_CUDA_ALLOCATED);
}

/* Takes the record of key out before the driver frees it (the address could be
 * handed out again at once); 1 when there was one. */
static int take_counted(lgi_tls_t *t, uint64_t key, unsigned ns, cu_ent_t *e) {
  lgi_cuda_tab_lock();
  int had = tab_take(key, ns, e);
  lgi_cuda_tab_unlock();
  if (had) count(t, e, -1, 0);
  return had;
}

/* The driver refused the free: the memory lives on. */
static void untake(lgi_tls_t *t, const cu_ent_t *e) {
  cu_ent_t old;
  lgi_cuda_tab_lock();
  int r = tab_put(e, &old);
  lgi_cuda_tab_unlock();
  if (r == 1) count(t, &old, -1, 0);
  if (r >= 0) count(t, e, 1, 0);
}

static void after_free(int had, lgcu_result_t rc) {
  if (rc == LGCU_SUCCESS) {
    atomic_fetch_add_explicit(&lgi_g.hdr->cuda_calls, 1, memory_order_relaxed);
    if (!had) atomic_fetch_add_explicit(&lgi_g.hdr->cuda_unknown_frees, 1, memory_order_relaxed);
  }
}

/* Releases every record made in context c (not VMM handles: physical memory lives
 * until released, whatever the context). Caller holds the table lock. */
void lgi_cuda_release_ctx(lgi_tls_t *t, uint64_t c) {
  for (uint32_t i = 0; tab && i < tab_cap; i++)
    while (tab[i].ns && tab[i].ctx == c && tab[i].ns != NS_HANDLE) {
      cu_ent_t x = tab[i];
      tab_del(i);
      count(t, &x, -1, 0);
    }
}

/* ------------------------------------------------------------------ wrappers' common parts */

/* Enters the recorder for a tracked call: 1 (guard held) or 0 (pass through). */
int lgi_cuda_enter(lgi_tls_t *t) {
  if (t->guard || !lgi_thread_ready(t)) return 0;
  t->guard++;
  return 1;
}
void lgi_cuda_leave(lgi_tls_t *t) { t->guard--; }

/* A new allocation: its stack (space and device make the site) and its record. */
static void track(lgi_tls_t *t, unsigned ns, uint64_t key, uint64_t size, unsigned space, int dev, uint64_t ctx,
                  uint64_t aux, uintptr_t ra, uintptr_t cfa) {
  dev = lgi_cuda_clamp_dev(dev);
  cu_ent_t e;
  memset(&e, 0, sizeof e);
  e.key = key;
  e.size = size;
  e.ctx = ctx;
  e.aux = aux;
  e.ns = (uint8_t)ns;
  e.space = (uint8_t)space;
  e.dev = (uint8_t)dev;
  e.site = ns == NS_REG ? 0 : lgi_capture_all(t, ra, cfa, LGI_SITE_SPACE(space, dev));
  e.epoch = lgi_epoch();
  put_counted(t, &e);
}

/* A free of key in namespace ns through the driver's free function. */
#define LGC_FREE(t, key, ns, call)                                                                                     \
  do {                                                                                                                 \
    cu_ent_t e_;                                                                                                       \
    int had_ = take_counted(t, key, ns, &e_);                                                                          \
    rc = (call);                                                                                                       \
    if (rc != LGCU_SUCCESS && had_) untake(t, &e_);                                                                    \
    after_free(had_, rc);                                                                                              \
  } while (0)

/* ------------------------------------------------------------------ the wrappers */

lgcu_result_t lgi_cuda_h_MEMALLOC(void *real, lgcu_dptr_t *dptr, size_t n, uintptr_t ra, uintptr_t cfa) {
  if (!real) return LGCU_ERROR_STUB_LIBRARY;
  lgi_tls_t *t = &lgi_tls;
  if (!lgi_cuda_enter(t)) return REAL(MEMALLOC)(dptr, n);
  lgcu_result_t rc = REAL(MEMALLOC)(dptr, n);
  if (rc == LGCU_SUCCESS && dptr && *dptr) {
    uint64_t ctx;
    int dev = lgi_cuda_current_dev(&ctx);
    track(t, NS_ADDR, *dptr, n, LG_SPACE_DEVICE, dev, ctx, 0, ra, cfa);
  }
  lgi_cuda_leave(t);
  return rc;
}

lgcu_result_t lgi_cuda_h_MEMPITCH(void *real, lgcu_dptr_t *dptr, size_t *pitch, size_t w, size_t h, unsigned esz,
                                  uintptr_t ra, uintptr_t cfa) {
  if (!real) return LGCU_ERROR_STUB_LIBRARY;
  lgi_tls_t *t = &lgi_tls;
  if (!lgi_cuda_enter(t)) return REAL(MEMPITCH)(dptr, pitch, w, h, esz);
  lgcu_result_t rc = REAL(MEMPITCH)(dptr, pitch, w, h, esz);
  if (rc == LGCU_SUCCESS && dptr && *dptr && pitch) {
    uint64_t ctx;
    int dev = lgi_cuda_current_dev(&ctx);
    track(t, NS_ADDR, *dptr, (uint64_t)*pitch * h, LG_SPACE_DEVICE, dev, ctx, 0, ra, cfa);
  }
  lgi_cuda_leave(t);
  return rc;
}

lgcu_result_t lgi_cuda_h_MEMFREE(void *real, lgcu_dptr_t dptr, uintptr_t ra, uintptr_t cfa) {
  (void)ra, (void)cfa;
  if (!real) return LGCU_ERROR_STUB_LIBRARY;
  lgi_tls_t *t = &lgi_tls;
  if (!dptr || !lgi_cuda_enter(t)) return REAL(MEMFREE)(dptr);
  lgcu_result_t rc;
  LGC_FREE(t, dptr, NS_ADDR, REAL(MEMFREE)(dptr));
  lgi_cuda_leave(t);
  return rc;
}

lgcu_result_t lgi_cuda_h_ALLOCASYNC(void *real, lgcu_dptr_t *dptr, size_t n, lgcu_stream_t s, uintptr_t ra,
                                    uintptr_t cfa) {
  if (!real) return LGCU_ERROR_STUB_LIBRARY;
  lgi_tls_t *t = &lgi_tls;
  if (!lgi_cuda_enter(t)) return REAL(ALLOCASYNC)(dptr, n, s);
  lgcu_result_t rc = REAL(ALLOCASYNC)(dptr, n, s);
  if (rc == LGCU_SUCCESS && dptr && *dptr) {
    uint64_t ctx;
    int dev = lgi_cuda_current_dev(&ctx);
    track(t, NS_ADDR, *dptr, n, LG_SPACE_DEVICE, dev, ctx, (uint64_t)(uintptr_t)s, ra, cfa);
    lgi_cuda_default_pool(dev);
    lgi_cuda_pool_sample(0);
  }
  lgi_cuda_leave(t);
  return rc;
}

lgcu_result_t lgi_cuda_h_FROMPOOL(void *real, lgcu_dptr_t *dptr, size_t n, lgcu_pool_t pool, lgcu_stream_t s,
                                  uintptr_t ra, uintptr_t cfa) {
  if (!real) return LGCU_ERROR_STUB_LIBRARY;
  lgi_tls_t *t = &lgi_tls;
  if (!lgi_cuda_enter(t)) return REAL(FROMPOOL)(dptr, n, pool, s);
  lgcu_result_t rc = REAL(FROMPOOL)(dptr, n, pool, s);
  if (rc == LGCU_SUCCESS && dptr && *dptr) {
    uint64_t ctx;
    int dev = lgi_cuda_current_dev(&ctx), pd = lgi_cuda_pool_dev((uint64_t)(uintptr_t)pool);
    track(t, NS_ADDR, *dptr, n, LG_SPACE_DEVICE, pd >= 0 ? pd : dev, ctx, (uint64_t)(uintptr_t)s, ra, cfa);
    lgi_cuda_pool_sample(0);
  }
  lgi_cuda_leave(t);
  return rc;
}

lgcu_result_t lgi_cuda_h_FREEASYNC(void *real, lgcu_dptr_t dptr, lgcu_stream_t s, uintptr_t ra, uintptr_t cfa) {
  (void)ra, (void)cfa;
  if (!real) return LGCU_ERROR_STUB_LIBRARY;
  lgi_tls_t *t = &lgi_tls;
  if (!dptr || !lgi_cuda_enter(t)) return REAL(FREEASYNC)(dptr, s);
  lgcu_result_t rc;
  /* Counted when enqueued: the program gave the memory back to the pool. */
  LGC_FREE(t, dptr, NS_ADDR, REAL(FREEASYNC)(dptr, s));
  if (rc == LGCU_SUCCESS) lgi_cuda_pool_sample(0);
  lgi_cuda_leave(t);
  return rc;
}

lgcu_result_t lgi_cuda_h_MEMCREATE(void *real, lgcu_handle_t *h, size_t n, const void *prop, unsigned long long flags,
                                   uintptr_t ra, uintptr_t cfa) {
  if (!real) return LGCU_ERROR_STUB_LIBRARY;
  lgi_tls_t *t = &lgi_tls;
  if (!lgi_cuda_enter(t)) return REAL(MEMCREATE)(h, n, prop, flags);
  lgcu_result_t rc = REAL(MEMCREATE)(h, n, prop, flags);
  if (rc == LGCU_SUCCESS && h && *h) {
    const lgcu_alloc_prop_head_t *ph = prop;
    unsigned space = LG_SPACE_DEVICE;
    uint64_t ctx;
    int dev;
    if (ph && ph->location_type == LGCU_LOCATION_DEVICE) {
      dev = lgi_cuda_clamp_dev(ph->location_id);
      lgi_cuda_dev_seen(dev);
    } else {
      /* host memory made by the VMM API: pinned */
      if (ph && ph->location_type >= LGCU_LOCATION_HOST) space = LG_SPACE_PINNED;
      dev = lgi_cuda_current_dev(&ctx);
    }
    /* Physical memory lives until released, whatever the context: ctx 0. */
    track(t, NS_HANDLE, *h, n, space, dev, 0, 0, ra, cfa);
  }
  lgi_cuda_leave(t);
  return rc;
}

lgcu_result_t lgi_cuda_h_MEMRELEASE(void *real, lgcu_handle_t h, uintptr_t ra, uintptr_t cfa) {
  (void)ra, (void)cfa;
  if (!real) return LGCU_ERROR_STUB_LIBRARY;
  lgi_tls_t *t = &lgi_tls;
  if (!h || !lgi_cuda_enter(t)) return REAL(MEMRELEASE)(h);
  lgcu_result_t rc;
  LGC_FREE(t, h, NS_HANDLE, REAL(MEMRELEASE)(h));
  lgi_cuda_leave(t);
  return rc;
}

lgcu_result_t lgi_cuda_h_MEMMAP(void *real, lgcu_dptr_t p, size_t n, size_t off, lgcu_handle_t h,
                                unsigned long long flags, uintptr_t ra, uintptr_t cfa) {
  (void)ra, (void)cfa;
  if (!real) return LGCU_ERROR_STUB_LIBRARY;
  lgi_tls_t *t = &lgi_tls;
  if (!lgi_cuda_enter(t)) return REAL(MEMMAP)(p, n, off, h, flags);
  lgcu_result_t rc = REAL(MEMMAP)(p, n, off, h, flags);
  if (rc == LGCU_SUCCESS && p) {
    /* address -> handle, for attribution; the bytes count by handle */
    cu_ent_t e;
    memset(&e, 0, sizeof e);
    lgi_cuda_tab_lock();
    cu_ent_t *he = tab_find(h, NS_HANDLE);
    if (he) e.site = he->site, e.dev = he->dev, e.space = he->space;
    lgi_cuda_tab_unlock();
    e.key = p;
    e.size = n;
    e.aux = h;
    e.ns = NS_MAP;
    e.epoch = lgi_epoch();
    put_counted(t, &e);
  }
  lgi_cuda_leave(t);
  return rc;
}

lgcu_result_t lgi_cuda_h_MEMUNMAP(void *real, lgcu_dptr_t p, size_t n, uintptr_t ra, uintptr_t cfa) {
  (void)ra, (void)cfa;
  if (!real) return LGCU_ERROR_STUB_LIBRARY;
  lgi_tls_t *t = &lgi_tls;
  if (!lgi_cuda_enter(t)) return REAL(MEMUNMAP)(p, n);
  lgcu_result_t rc = REAL(MEMUNMAP)(p, n);
  if (rc == LGCU_SUCCESS) {
    /* Usually the mappings of the range follow each other: take them in a chain, and
     * scan the table only for what the chain misses. */
    uint64_t a = p, end = p + n;
    cu_ent_t e;
    while (a < end && take_counted(t, a, NS_MAP, &e) && e.size) a += e.size;
    if (a < end) {
      lgi_cuda_tab_lock();
      for (uint32_t i = 0; tab && i < tab_cap; i++)
        while (tab[i].ns == NS_MAP && tab[i].key >= a && tab[i].key < end) {
          cu_ent_t x = tab[i];
          tab_del(i);
          count(t, &x, -1, 0);
        }
      lgi_cuda_tab_unlock();
    }
    atomic_fetch_add_explicit(&lgi_g.hdr->cuda_calls, 1, memory_order_relaxed);
  }
  lgi_cuda_leave(t);
  return rc;
}

lgcu_result_t lgi_cuda_h_MANAGED(void *real, lgcu_dptr_t *dptr, size_t n, unsigned flags, uintptr_t ra, uintptr_t cfa) {
  if (!real) return LGCU_ERROR_STUB_LIBRARY;
  lgi_tls_t *t = &lgi_tls;
  if (!lgi_cuda_enter(t)) return REAL(MANAGED)(dptr, n, flags);
  lgcu_result_t rc = REAL(MANAGED)(dptr, n, flags);
  if (rc == LGCU_SUCCESS && dptr && *dptr) {
    uint64_t ctx;
    int dev = lgi_cuda_current_dev(&ctx);
    track(t, NS_ADDR, *dptr, n, LG_SPACE_MANAGED, dev, ctx, 0, ra, cfa);
  }
  lgi_cuda_leave(t);
  return rc;
}

lgcu_result_t lgi_cuda_h_ALLOCHOST(void *real, void **pp, size_t n, uintptr_t ra, uintptr_t cfa) {
  if (!real) return LGCU_ERROR_STUB_LIBRARY;
  lgi_tls_t *t = &lgi_tls;
  if (!lgi_cuda_enter(t)) return REAL(ALLOCHOST)(pp, n);
  /* The guard is held: the pages the driver maps here are not also mmap memory. */
  lgcu_result_t rc = REAL(ALLOCHOST)(pp, n);
  if (rc == LGCU_SUCCESS && pp && *pp) {
    uint64_t ctx;
    int dev = lgi_cuda_current_dev(&ctx);
    track(t, NS_ADDR, (uint64_t)(uintptr_t)*pp, n, LG_SPACE_PINNED, dev, ctx, 0, ra, cfa);
  }
  lgi_cuda_leave(t);
  return rc;
}

lgcu_result_t lgi_cuda_h_HOSTALLOC(void *real, void **pp, size_t n, unsigned flags, uintptr_t ra, uintptr_t cfa) {
  if (!real) return LGCU_ERROR_STUB_LIBRARY;
  lgi_tls_t *t = &lgi_tls;
  if (!lgi_cuda_enter(t)) return REAL(HOSTALLOC)(pp, n, flags);
  lgcu_result_t rc = REAL(HOSTALLOC)(pp, n, flags);
  if (rc == LGCU_SUCCESS && pp && *pp) {
    uint64_t ctx;
    int dev = lgi_cuda_current_dev(&ctx);
    track(t, NS_ADDR, (uint64_t)(uintptr_t)*pp, n, LG_SPACE_PINNED, dev, ctx, 0, ra, cfa);
  }
  lgi_cuda_leave(t);
  return rc;
}

lgcu_result_t lgi_cuda_h_FREEHOST(void *real, void *p, uintptr_t ra, uintptr_t cfa) {
  (void)ra, (void)cfa;
  if (!real) return LGCU_ERROR_STUB_LIBRARY;
  lgi_tls_t *t = &lgi_tls;
  if (!p || !lgi_cuda_enter(t)) return REAL(FREEHOST)(p);
  lgcu_result_t rc;
  LGC_FREE(t, (uint64_t)(uintptr_t)p, NS_ADDR, REAL(FREEHOST)(p));
  lgi_cuda_leave(t);
  return rc;
}

lgcu_result_t lgi_cuda_h_HOSTREG(void *real, void *p, size_t n, unsigned flags, uintptr_t ra, uintptr_t cfa) {
  if (!real) return LGCU_ERROR_STUB_LIBRARY;
  lgi_tls_t *t = &lgi_tls;
  if (!lgi_cuda_enter(t)) return REAL(HOSTREG)(p, n, flags);
  lgcu_result_t rc = REAL(HOSTREG)(p, n, flags);
  if (rc == LGCU_SUCCESS && p) {
    /* Already counted where it was allocated: a gauge of its own, no site. */
    uint64_t ctx;
    int dev = lgi_cuda_current_dev(&ctx);
    track(t, NS_REG, (uint64_t)(uintptr_t)p, n, LG_SPACE_HOST, dev, ctx, 0, ra, cfa);
  }
  lgi_cuda_leave(t);
  return rc;
}

lgcu_result_t lgi_cuda_h_HOSTUNREG(void *real, void *p, uintptr_t ra, uintptr_t cfa) {
  (void)ra, (void)cfa;
  if (!real) return LGCU_ERROR_STUB_LIBRARY;
  lgi_tls_t *t = &lgi_tls;
  if (!p || !lgi_cuda_enter(t)) return REAL(HOSTUNREG)(p);
  lgcu_result_t rc;
  cu_ent_t e;
  int had = take_counted(t, (uint64_t)(uintptr_t)p, NS_REG, &e);
  rc = REAL(HOSTUNREG)(p);
  if (rc != LGCU_SUCCESS && had) untake(t, &e);
  lgi_cuda_leave(t);
  return rc;
}

static uint64_t mul_sat(uint64_t a, uint64_t b) {
  uint64_t r;
  return __builtin_mul_overflow(a, b, &r) ? UINT64_MAX : r;
}

lgcu_result_t lgi_cuda_h_ARRAY(void *real, lgcu_array_t *a, const void *desc, uintptr_t ra, uintptr_t cfa) {
  if (!real) return LGCU_ERROR_STUB_LIBRARY;
  lgi_tls_t *t = &lgi_tls;
  if (!lgi_cuda_enter(t)) return REAL(ARRAY)(a, desc);
  lgcu_result_t rc = REAL(ARRAY)(a, desc);
  if (rc == LGCU_SUCCESS && a && *a && desc) {
    const lgcu_array_desc_t *d = desc;
    unsigned fb = lgcu_format_bytes(d->format);
    uint64_t n = mul_sat(mul_sat(d->width, d->height ? d->height : 1), (uint64_t)(fb ? fb * d->channels : 4));
    uint64_t ctx;
    int dev = lgi_cuda_current_dev(&ctx);
    track(t, NS_ARRAY, (uint64_t)(uintptr_t)*a, n, LG_SPACE_DEVICE, dev, ctx, 0, ra, cfa);
  }
  lgi_cuda_leave(t);
  return rc;
}

lgcu_result_t lgi_cuda_h_ARRAY3D(void *real, lgcu_array_t *a, const void *desc, uintptr_t ra, uintptr_t cfa) {
  if (!real) return LGCU_ERROR_STUB_LIBRARY;
  lgi_tls_t *t = &lgi_tls;
  if (!lgi_cuda_enter(t)) return REAL(ARRAY3D)(a, desc);
  lgcu_result_t rc = REAL(ARRAY3D)(a, desc);
  if (rc == LGCU_SUCCESS && a && *a && desc) {
    const lgcu_array3d_desc_t *d = desc;
    unsigned fb = lgcu_format_bytes(d->format);
    uint64_t n = mul_sat(mul_sat(mul_sat(d->width, d->height ? d->height : 1), d->depth ? d->depth : 1),
                         (uint64_t)(fb ? fb * d->channels : 4));
    uint64_t ctx;
    int dev = lgi_cuda_current_dev(&ctx);
    track(t, NS_ARRAY, (uint64_t)(uintptr_t)*a, n, LG_SPACE_DEVICE, dev, ctx, 0, ra, cfa);
  }
  lgi_cuda_leave(t);
  return rc;
}

lgcu_result_t lgi_cuda_h_ARRAYDESTROY(void *real, lgcu_array_t a, uintptr_t ra, uintptr_t cfa) {
  (void)ra, (void)cfa;
  if (!real) return LGCU_ERROR_STUB_LIBRARY;
  lgi_tls_t *t = &lgi_tls;
  if (!a || !lgi_cuda_enter(t)) return REAL(ARRAYDESTROY)(a);
  lgcu_result_t rc;
  LGC_FREE(t, (uint64_t)(uintptr_t)a, NS_ARRAY, REAL(ARRAYDESTROY)(a));
  lgi_cuda_leave(t);
  return rc;
}

/* ------------------------------------------------------------------ IPC imports
 * Memory another process allocated (and counts): not recorded here. Passed through;
 * the first call of each is noted (docs/cuda.md, limits). */

static _Atomic uint32_t imports_noted;
static void import_noted(unsigned bit, const char *name) {
  if (atomic_load_explicit(&imports_noted, memory_order_relaxed) & (1u << bit)) return;
  atomic_fetch_or(&imports_noted, 1u << bit);
  lgi_cuda_note(name, "IPC import called; not recorded (another process's memory)");
}

lgcu_result_t lgi_cuda_h_IPCOPEN(void *real, lgcu_dptr_t *dptr, lgcu_ipc_handle_t handle, unsigned flags, uintptr_t ra,
                                 uintptr_t cfa) {
  (void)ra, (void)cfa;
  if (!real) return LGCU_ERROR_STUB_LIBRARY;
  import_noted(0, "cuIpcOpenMemHandle");
  return REAL(IPCOPEN)(dptr, handle, flags);
}

lgcu_result_t lgi_cuda_h_MEMIMPORT(void *real, lgcu_handle_t *h, void *os_handle, int type, uintptr_t ra,
                                   uintptr_t cfa) {
  (void)ra, (void)cfa;
  if (!real) return LGCU_ERROR_STUB_LIBRARY;
  import_noted(1, "cuMemImportFromShareableHandle");
  return REAL(MEMIMPORT)(h, os_handle, type);
}

lgcu_result_t lgi_cuda_h_POOLIMPORTSH(void *real, lgcu_pool_t *pool, void *os_handle, int type,
                                      unsigned long long flags, uintptr_t ra, uintptr_t cfa) {
  (void)ra, (void)cfa;
  if (!real) return LGCU_ERROR_STUB_LIBRARY;
  import_noted(2, "cuMemPoolImportFromShareableHandle");
  return REAL(POOLIMPORTSH)(pool, os_handle, type, flags);
}

lgcu_result_t lgi_cuda_h_POOLIMPORTPTR(void *real, lgcu_dptr_t *dptr, lgcu_pool_t pool, void *share, uintptr_t ra,
                                       uintptr_t cfa) {
  (void)ra, (void)cfa;
  if (!real) return LGCU_ERROR_STUB_LIBRARY;
  import_noted(3, "cuMemPoolImportPointer");
  return REAL(POOLIMPORTPTR)(dptr, pool, share);
}

/* ------------------------------------------------------------------ managed sites (CUPTI) */

/* CUPTI delivers records in batches about the same few buffers: the last block found
 * is tried first. */
uint32_t lgi_cuda_managed_site(uint64_t addr) {
  uint64_t k = atomic_load(&um_last_key), n = atomic_load(&um_last_size);
  uint32_t s = atomic_load(&um_last_site);
  if (s && addr >= k && addr - k < n) return s;
  s = LG_CUDA_UM_UNKNOWN;
  lgi_cuda_tab_lock();
  for (uint32_t i = 0; tab && i < tab_cap; i++)
    if (tab[i].ns == NS_ADDR && tab[i].space == LG_SPACE_MANAGED && addr >= tab[i].key &&
        addr - tab[i].key < tab[i].size) {
      s = tab[i].site;
      atomic_store(&um_last_site, 0);
      atomic_store(&um_last_key, tab[i].key);
      atomic_store(&um_last_size, tab[i].size);
      atomic_store(&um_last_site, s);
      break;
    }
  lgi_cuda_tab_unlock();
  return s;
}

/* ------------------------------------------------------------------ public API */

LG_API int lg_cuda_site_of(uint64_t addr, uint32_t *site, int *device) {
  if (!site || !lgi_g.enabled) return -ENOENT;
  int rc = -ENOENT;
  uint32_t s = 0;
  int dev = 0;
  lgi_tls.guard++;
  lgi_cuda_tab_lock();
  const cu_ent_t *e = tab_find(addr, NS_ADDR);
  if (!e) e = tab_find(addr, NS_MAP);
  /* Inside a block (a tensor in a caching allocator's segment): a scan. */
  for (uint32_t i = 0; !e && tab && i < tab_cap; i++)
    if ((tab[i].ns == NS_ADDR || tab[i].ns == NS_MAP) && addr >= tab[i].key && addr - tab[i].key < tab[i].size)
      e = &tab[i];
  if (e && e->site) {
    s = e->site;
    dev = e->dev;
    rc = 0;
  }
  lgi_cuda_tab_unlock();
  lgi_tls.guard--;
  if (rc == 0) {
    *site = s;
    if (device) *device = dev;
  }
  return rc;
}

LG_API uint64_t lg_cuda_gc_without_cleanup(void) {
  if (!lgi_g.enabled) return 0;
  return atomic_fetch_add(&lgi_g.hdr->gc_without_cuda_cleanup, 1) + 1;
}

LG_API uint64_t lg_cuda_gc_without_cleanup_count(void) {
  return lgi_g.enabled ? atomic_load(&lgi_g.hdr->gc_without_cuda_cleanup) : 0;
}

LG_API int lg_cuda_torch_memory(int dev, int64_t allocated_bytes, int64_t reserved_bytes) {
  if (!lgi_g.enabled) return -ENOENT;
  if (dev < 0 || dev >= LG_CUDA_MAX_DEVICES) return -ENODEV;
  lg_cuda_dev_t *g = &lgi_g.hdr->cuda[dev];
  atomic_store_explicit(&g->torch_allocated_bytes, allocated_bytes, memory_order_relaxed);
  atomic_store_explicit(&g->torch_reserved_bytes, reserved_bytes, memory_order_relaxed);
  atomic_store_explicit(&g->torch_seen, 1, memory_order_release);
  return 0;
}

LG_API int lg_cuda_devices(void) {
  if (!lgi_g.enabled) return 0;
  uint32_t n = atomic_load(&lgi_g.hdr->cuda_ndev);
  return n > LG_CUDA_MAX_DEVICES ? LG_CUDA_MAX_DEVICES : (int)n;
}

LG_API int lg_cuda_stats(int dev, lg_cuda_stats_t *out) {
  if (!out || !lgi_g.enabled) return -ENOENT;
  if (dev < 0 || dev >= lg_cuda_devices()) return -ENODEV;
  lg_cuda_dev_t *g = &lgi_g.hdr->cuda[dev];
  out->device_bytes = atomic_load(&g->device_bytes);
  out->managed_bytes = atomic_load(&g->managed_bytes);
  out->pinned_bytes = atomic_load(&g->pinned_bytes);
  out->registered_bytes = atomic_load(&g->registered_bytes);
  out->pool_reserved_bytes = atomic_load(&g->pool_reserved_bytes);
  out->pool_used_bytes = atomic_load(&g->pool_used_bytes);
  out->total_bytes = atomic_load(&g->total_bytes);
  out->contexts = atomic_load(&g->contexts);
  out->contexts_recreated = atomic_load(&g->contexts_recreated);
  out->gc_without_cuda_cleanup = atomic_load(&lgi_g.hdr->gc_without_cuda_cleanup);
  return 0;
}
