/* SPDX-License-Identifier: MIT */
/*
 * table.c - the GPU memory a vendor's hooks recorded, whatever the vendor (gpu.h):
 * an open-addressing table (address or handle -> record; device memory has no
 * header), in pages from mmap, doubled when 70 % full, under its own spin lock that is
 * held for table operations only, never across a driver call or a stack capture; and
 * the accounting of each record on its site (the thread's shard) and on its device's
 * gauges in the region; the region's GPU flags and notes. It calls no vendor's file
 * (vendors.c asks them about names).
 */
#include <errno.h>
#include <sched.h>
#include <stdatomic.h>
#include <string.h>

#include "capture/gpu/gpu.h"
#include "core/hash.h"
#include "leakguard.h"

/* ------------------------------------------------------------------ flags, notes */

void lgi_gpu_set_flag(uint32_t f) {
  if (lgi_g.enabled && !(atomic_load_explicit(&lgi_g.hdr->gpu_flags, memory_order_relaxed) & f))
    atomic_fetch_or(&lgi_g.hdr->gpu_flags, f);
}

void lgi_gpu_note(const char *name, const char *what) {
  lg_region_hdr_t *h = lgi_g.hdr;
  if (!lgi_g.enabled || !h || !name) return;
  char buf[LG_GPU_NOTE_LEN];
  size_t a = strnlen(name, 40), b = strlen(what);
  memset(buf, 0, sizeof buf);
  memcpy(buf, name, a);
  memcpy(buf + a, ": ", 2);
  if (a + 2 + b > sizeof buf - 1) b = sizeof buf - 1 - a - 2;
  memcpy(buf + a + 2, what, b);
  lgi_lock();
  uint32_t n = atomic_load_explicit(&h->gpu_nnotes, memory_order_relaxed);
  int dup = 0;
  for (uint32_t i = 0; i < n && i < LG_GPU_NOTES; i++)
    if (!strncmp(h->gpu_notes[i], buf, sizeof buf)) dup = 1;
  if (!dup && n < LG_GPU_NOTES) {
    memcpy(h->gpu_notes[n], buf, sizeof buf);
    atomic_store_explicit(&h->gpu_nnotes, n + 1, memory_order_release);
  }
  lgi_unlock();
}

int lgi_gpu_clamp_dev(int dev) { return dev < 0 ? 0 : dev >= LGI_GPU_DEVS - 1 ? LGI_GPU_DEVS - 2 : dev; }

/* ------------------------------------------------------------------ the table */

#define TAB_MIN (1u << 12)
#define TAB_MAX (1u << 24)
static lgi_gpu_ent_t *tab;
static uint32_t tab_cap, tab_n;
static atomic_flag tab_lock_f = ATOMIC_FLAG_INIT;

void lgi_gpu_tab_lock(void) {
  while (atomic_flag_test_and_set_explicit(&tab_lock_f, memory_order_acquire)) sched_yield();
}
void lgi_gpu_tab_unlock(void) { atomic_flag_clear_explicit(&tab_lock_f, memory_order_release); }

void lgi_gpu_atfork(int phase) {
  if (phase == 0) lgi_gpu_tab_lock();
  else lgi_gpu_tab_unlock();
}

static inline uint32_t tab_slot(uint64_t key, unsigned ns, uint32_t cap) {
  uint64_t x = (key ^ ((uint64_t)ns << 59)) * LG_HASH_GOLDEN64;
  x ^= x >> 31;
  return (uint32_t)(x >> 20) & (cap - 1);
}

static void raw_insert(lgi_gpu_ent_t *t, uint32_t cap, const lgi_gpu_ent_t *e) {
  uint32_t i = tab_slot(e->key, e->ns, cap);
  while (t[i].ns) i = (i + 1) & (cap - 1);
  t[i] = *e;
}

/* Caller holds the lock. 0 or -1 (no memory). */
static int tab_grow(void) {
  uint32_t cap = tab ? tab_cap * 2 : TAB_MIN;
  if (cap > TAB_MAX) return -1;
  lgi_gpu_ent_t *nt = lgi_pages_alloc((size_t)cap * sizeof *nt);
  if (!nt) return -1;
  for (uint32_t i = 0; tab && i < tab_cap; i++)
    if (tab[i].ns) raw_insert(nt, cap, &tab[i]);
  if (tab) lgi_pages_free(tab, (size_t)tab_cap * sizeof *tab);
  tab = nt;
  tab_cap = cap;
  return 0;
}

lgi_gpu_ent_t *lgi_gpu_find(uint64_t key, unsigned ns) {
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
static int tab_put(const lgi_gpu_ent_t *e, lgi_gpu_ent_t *old) {
  lgi_gpu_ent_t *x = lgi_gpu_find(e->key, e->ns);
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

static int tab_take(uint64_t key, unsigned ns, lgi_gpu_ent_t *out) {
  lgi_gpu_ent_t *x = lgi_gpu_find(key, ns);
  if (!x) return 0;
  *out = *x;
  tab_del((uint32_t)(x - tab));
  return 1;
}

/* The last managed block found by lgi_gpu_managed_site (below). */
static _Atomic uint64_t um_last_key, um_last_size;
static _Atomic uint32_t um_last_site;

/* ------------------------------------------------------------------ accounting */

lg_gpu_dev_t *lgi_gpu_gauge(int dev) { return dev >= 0 && dev < LG_GPU_MAX_DEVICES ? &lgi_g.hdr->gpu[dev] : NULL; }

/* Counts e on (sign 1) or off (sign -1) its site or gauge. Lock-free. */
static void count(lgi_tls_t *t, const lgi_gpu_ent_t *e, int sign, int alloc) {
  lg_gpu_dev_t *g = lgi_gpu_gauge(e->dev);
  switch (e->ns) {
  case LGI_GPU_ADDR:
  case LGI_GPU_HANDLE:
  case LGI_GPU_ARRAY:
    lgi_count(t, e->site, sign * (int64_t)e->size, sign, e->epoch, alloc && sign > 0);
    /* per-device totals for readers that do not sum sites (the guard) */
    if (g && e->space == LG_SPACE_DEVICE) atomic_fetch_add(&g->device_bytes, sign * (int64_t)e->size);
    else if (g && e->space == LG_SPACE_MANAGED) {
      atomic_fetch_add(&g->managed_bytes, sign * (int64_t)e->size);
      if (sign < 0) atomic_store(&um_last_site, 0); /* the UM lookup's cache may name it */
    } else if (g && e->space == LG_SPACE_PINNED) atomic_fetch_add(&g->pinned_bytes, sign * (int64_t)e->size);
    break;
  case LGI_GPU_REG:
    if (g) atomic_fetch_add(&g->registered_bytes, sign * (int64_t)e->size);
    break;
  case LGI_GPU_MAP:
    if (g) atomic_fetch_add(&g->vmm_mapped_bytes, sign * (int64_t)e->size);
    break;
  }
}

void lgi_gpu_put(lgi_tls_t *t, const lgi_gpu_ent_t *e) {
  lgi_gpu_ent_t old;
  lgi_gpu_tab_lock();
  int r = tab_put(e, &old);
  lgi_gpu_tab_unlock();
  if (r < 0) {
    atomic_fetch_add(&lgi_g.hdr->dropped, 1);
    return;
  }
  if (r == 1) count(t, &old, -1, 0); /* freed behind our back (by an untracked path) */
  count(t, e, 1, 1);
  atomic_fetch_add_explicit(&lgi_g.hdr->gpu_calls, 1, memory_order_relaxed);
  if (e->ns != LGI_GPU_REG && e->ns != LGI_GPU_MAP) lgi_gpu_set_flag(LG_GPU_ALLOCATED);
}

/* Takes the record of key out before the driver frees it (the address could be
 * handed out again at once); 1 when there was one. */
int lgi_gpu_take(lgi_tls_t *t, uint64_t key, unsigned ns, lgi_gpu_ent_t *e) {
  lgi_gpu_tab_lock();
  int had = tab_take(key, ns, e);
  lgi_gpu_tab_unlock();
  if (had) count(t, e, -1, 0);
  return had;
}

/* The driver refused the free: the memory lives on. */
void lgi_gpu_untake(lgi_tls_t *t, const lgi_gpu_ent_t *e) {
  lgi_gpu_ent_t old;
  lgi_gpu_tab_lock();
  int r = tab_put(e, &old);
  lgi_gpu_tab_unlock();
  if (r == 1) count(t, &old, -1, 0);
  if (r >= 0) count(t, e, 1, 0);
}

void lgi_gpu_after_free(int had, int ok) {
  if (ok) {
    atomic_fetch_add_explicit(&lgi_g.hdr->gpu_calls, 1, memory_order_relaxed);
    if (!had) atomic_fetch_add_explicit(&lgi_g.hdr->gpu_unknown_frees, 1, memory_order_relaxed);
  }
}

/* Releases every record made in context c (not VMM handles: physical memory lives
 * until released, whatever the context). Caller holds the table lock. */
void lgi_gpu_release_ctx(lgi_tls_t *t, uint64_t c) {
  for (uint32_t i = 0; tab && i < tab_cap; i++)
    while (tab[i].ns && tab[i].ctx == c && tab[i].ns != LGI_GPU_HANDLE) {
      lgi_gpu_ent_t x = tab[i];
      tab_del(i);
      count(t, &x, -1, 0);
    }
}

/* ------------------------------------------------------------------ the vendors' common parts */

/* Enters the recorder for a tracked call: 1 (guard held) or 0 (pass through). */
int lgi_gpu_enter(lgi_tls_t *t) {
  if (t->guard || !lgi_thread_ready(t)) return 0;
  t->guard++;
  return 1;
}
void lgi_gpu_leave(lgi_tls_t *t) { t->guard--; }

/* A new allocation: its stack (space and device make the site) and its record. */
void lgi_gpu_track(lgi_tls_t *t, unsigned ns, uint64_t key, uint64_t size, unsigned space, int dev, uint64_t ctx,
                   uint64_t aux, uintptr_t ra, uintptr_t cfa) {
  dev = lgi_gpu_clamp_dev(dev);
  lgi_gpu_ent_t e;
  memset(&e, 0, sizeof e);
  e.key = key;
  e.size = size;
  e.ctx = ctx;
  e.aux = aux;
  e.ns = (uint8_t)ns;
  e.space = (uint8_t)space;
  e.dev = (uint8_t)dev;
  e.site = ns == LGI_GPU_REG ? 0 : lgi_capture_all(t, ra, cfa, LGI_SITE_SPACE(space, dev));
  e.epoch = lgi_epoch();
  lgi_gpu_put(t, &e);
}

/* ------------------------------------------------------------------ managed sites (CUPTI) */

/* CUPTI delivers records in batches about the same few buffers: the last block found
 * is tried first. */
uint32_t lgi_gpu_managed_site(uint64_t addr) {
  uint64_t k = atomic_load(&um_last_key), n = atomic_load(&um_last_size);
  uint32_t s = atomic_load(&um_last_site);
  if (s && addr >= k && addr - k < n) return s;
  s = LG_CUDA_UM_UNKNOWN;
  lgi_gpu_tab_lock();
  for (uint32_t i = 0; tab && i < tab_cap; i++)
    if (tab[i].ns == LGI_GPU_ADDR && tab[i].space == LG_SPACE_MANAGED && addr >= tab[i].key &&
        addr - tab[i].key < tab[i].size) {
      s = tab[i].site;
      atomic_store(&um_last_site, 0);
      atomic_store(&um_last_key, tab[i].key);
      atomic_store(&um_last_size, tab[i].size);
      atomic_store(&um_last_site, s);
      break;
    }
  lgi_gpu_tab_unlock();
  return s;
}

void lgi_gpu_take_range(lgi_tls_t *t, unsigned ns, uint64_t lo, uint64_t hi) {
  lgi_gpu_tab_lock();
  for (uint32_t i = 0; tab && i < tab_cap; i++)
    while (tab[i].ns == ns && tab[i].key >= lo && tab[i].key < hi) {
      lgi_gpu_ent_t x = tab[i];
      tab_del(i);
      count(t, &x, -1, 0);
    }
  lgi_gpu_tab_unlock();
}

int lgi_gpu_site_of(uint64_t addr, uint32_t *site, int *device) {
  int rc = -ENOENT;
  uint32_t s = 0;
  int dev = 0;
  lgi_gpu_tab_lock();
  const lgi_gpu_ent_t *e = lgi_gpu_find(addr, LGI_GPU_ADDR);
  if (!e) e = lgi_gpu_find(addr, LGI_GPU_MAP);
  /* Inside a block (a tensor in a caching allocator's segment): a scan. */
  for (uint32_t i = 0; !e && tab && i < tab_cap; i++)
    if ((tab[i].ns == LGI_GPU_ADDR || tab[i].ns == LGI_GPU_MAP) && addr >= tab[i].key &&
        addr - tab[i].key < tab[i].size)
      e = &tab[i];
  if (e && e->site) {
    s = e->site;
    dev = e->dev;
    rc = 0;
  }
  lgi_gpu_tab_unlock();
  if (rc == 0) {
    *site = s;
    if (device) *device = dev;
  }
  return rc;
}
