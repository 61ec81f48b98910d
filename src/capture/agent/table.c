/* SPDX-License-Identifier: MIT */
/*
 * table.c - the agent's side table (agent.h): a recorded block has no header (blocks
 * allocated before attach cannot have one), so its site, epoch and size live here,
 * keyed by address, in mmap'd pages split into stripes, each a small open-addressing
 * table under its own spin lock (held for a few probes, never across a call).
 */
#include <stdatomic.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "capture/agent/agent.h"

lgag_stripe_t lgag_stripes[LGAG_STRIPES];
uint8_t *lgag_filter;

static inline void filter_add(uint64_t h) {
  uint8_t *f = lgag_filter_of(h), v = __atomic_load_n(f, __ATOMIC_RELAXED);
  while (v != 255 && !__atomic_compare_exchange_n(f, &v, (uint8_t)(v + 1), 1, __ATOMIC_RELEASE, __ATOMIC_RELAXED))
    continue;
}
static inline void filter_del(uint64_t h) {
  uint8_t *f = lgag_filter_of(h), v = __atomic_load_n(f, __ATOMIC_RELAXED);
  while (v != 255 && v != 0 &&
         !__atomic_compare_exchange_n(f, &v, (uint8_t)(v - 1), 1, __ATOMIC_RELEASE, __ATOMIC_RELAXED))
    continue;
}

/* 0 with the stripe locked; -1, without waiting, when this thread already holds it: a
 * signal handler that allocates or frees has interrupted the thread's own table
 * operation, and spinning would never end. The caller then leaves the table as it is
 * (a block not recorded, or an entry left stale: table_put reports it when the
 * address is handed out again). */
static inline int st_lock(lgag_stripe_t *s) {
  uintptr_t self = (uintptr_t)&lgi_tls, cur = 0;
  while (!atomic_compare_exchange_weak_explicit(&s->lock, &cur, self, memory_order_acquire, memory_order_relaxed)) {
    if (cur == self) return -1;
    while (atomic_load_explicit(&s->lock, memory_order_relaxed)) __builtin_ia32_pause();
    cur = 0;
  }
  atomic_fetch_add_explicit(&s->seq, 1, memory_order_relaxed);
  atomic_thread_fence(memory_order_release);
  return 0;
}
static inline void st_unlock(lgag_stripe_t *s) {
  atomic_fetch_add_explicit(&s->seq, 1, memory_order_release);
  atomic_store_explicit(&s->lock, 0, memory_order_release);
}

int lgag_table_init(void) {
  if (lgag_stripes[0].e) return 0; /* attached before */
  size_t bytes = (size_t)LGAG_STRIPES * LGAG_STRIPE_CAP * sizeof(lgag_ent_t);
  char *m = (char *)syscall(SYS_mmap, NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                            -1, 0);
  if (m == MAP_FAILED) return -1;
  lgag_filter = (uint8_t *)lgi_pages_alloc((size_t)1 << LGAG_FILTER_BITS);
  if (!lgag_filter) return -1;
  for (int i = 0; i < LGAG_STRIPES; i++)
    lgag_stripes[i].e = (lgag_ent_t *)(m + (size_t)i * LGAG_STRIPE_CAP * sizeof(lgag_ent_t));
  return 0;
}

/* Inserts p; *old gets a stale entry of the same address (its free was missed: a
 * pointer taken before the patch reached the real free), old->key 0 if none.
 * 0, -1 when the stripe is full, -2 inside this thread's own table operation. */
int lgag_table_put(uintptr_t p, uint32_t site, uint32_t epoch, uint64_t size, lgag_ent_t *old) {
  uint64_t h = lgag_hash_ptr(p);
  lgag_stripe_t *s = &lgag_stripes[h & (LGAG_STRIPES - 1)];
  old->key = 0;
  if (st_lock(s) != 0) return -2;
  if (s->n >= LGAG_STRIPE_CAP * 7 / 8) {
    st_unlock(s);
    return -1;
  }
  uint32_t i = (uint32_t)(h >> 8) & (LGAG_STRIPE_CAP - 1);
  while (s->e[i].key && s->e[i].key != p) i = (i + 1) & (LGAG_STRIPE_CAP - 1);
  if (s->e[i].key == p) *old = s->e[i];
  else {
    s->n++;
    filter_add(h);
  }
  s->e[i] = (lgag_ent_t){p, site, epoch, size};
  st_unlock(s);
  return 0;
}

/* Removes p (backward-shift deletion, no tombstones): 1 and *out when it was there. */
int lgag_table_take(uintptr_t p, lgag_ent_t *out) {
  uint64_t h = lgag_hash_ptr(p);
  lgag_stripe_t *s = &lgag_stripes[h & (LGAG_STRIPES - 1)];
  if (st_lock(s) != 0) return 0;
  uint32_t i = (uint32_t)(h >> 8) & (LGAG_STRIPE_CAP - 1);
  while (s->e[i].key && s->e[i].key != p) i = (i + 1) & (LGAG_STRIPE_CAP - 1);
  if (!s->e[i].key) {
    st_unlock(s);
    return 0;
  }
  *out = s->e[i];
  uint32_t j = i;
  for (;;) {
    j = (j + 1) & (LGAG_STRIPE_CAP - 1);
    if (!s->e[j].key) break;
    uint32_t home = (uint32_t)(lgag_hash_ptr(s->e[j].key) >> 8) & (LGAG_STRIPE_CAP - 1);
    /* move e[j] into the hole at i when its home is not within (i, j] cyclically */
    if (((j - home) & (LGAG_STRIPE_CAP - 1)) >= ((j - i) & (LGAG_STRIPE_CAP - 1))) {
      s->e[i] = s->e[j];
      i = j;
    }
  }
  s->e[i].key = 0;
  s->n--;
  filter_del(h);
  st_unlock(s);
  return 1;
}

/* Looks p up without removing it: 1 and *out when it is there (the Python module's
 * holders, lg_block_site; never from a hook). */
int lgag_table_find(uintptr_t p, lgag_ent_t *out) {
  if (!lgag_filter || !lgag_table_maybe(p)) return 0;
  uint64_t h = lgag_hash_ptr(p);
  lgag_stripe_t *s = &lgag_stripes[h & (LGAG_STRIPES - 1)];
  if (st_lock(s) != 0) return 0;
  uint32_t i = (uint32_t)(h >> 8) & (LGAG_STRIPE_CAP - 1);
  while (s->e[i].key && s->e[i].key != p) i = (i + 1) & (LGAG_STRIPE_CAP - 1);
  int found = s->e[i].key == p;
  if (found) *out = s->e[i];
  st_unlock(s);
  return found;
}

void lgag_table_reset(void) {
  /* the table's pages go back to the kernel (they read as zeros: empty) */
  for (int i = 0; i < LGAG_STRIPES; i++) (void)st_lock(&lgag_stripes[i]);
  syscall(SYS_madvise, lgag_stripes[0].e, (size_t)LGAG_STRIPES * LGAG_STRIPE_CAP * sizeof(lgag_ent_t), MADV_DONTNEED);
  memset(lgag_filter, 0, (size_t)1 << LGAG_FILTER_BITS);
  for (int i = 0; i < LGAG_STRIPES; i++) {
    lgag_stripes[i].n = 0;
    st_unlock(&lgag_stripes[i]);
  }
}

void lgag_table_atfork(void) {
  for (int i = 0; i < LGAG_STRIPES; i++) atomic_store(&lgag_stripes[i].lock, 0);
}
