/* SPDX-License-Identifier: MIT */
/*
 * agent.c - libleakguard-agent.so: the recorder of `leakguard attach` (docs/attach.md).
 *
 * Loaded into a running process by the injector (attach/inject.c) with dlopen, then
 * started with lg_agent_start(config). It does not interpose symbols (the process is
 * already bound): it rewrites the GOT slots (R_X86_64_JUMP_SLOT, R_X86_64_GLOB_DAT) of
 * the malloc family in every loaded object except ld.so, the vDSO and itself, so that
 * those calls reach the hooks below, which call the function the slot held.
 *
 * Blocks allocated before attach have no header, so nothing here uses one: a recorded
 * block lives in a side table (pointer -> site, epoch, size) in mmap'd pages, split
 * into stripes, each a small open-addressing table under its own spin lock (held for
 * a few probes, never across a call). A free or realloc of a pointer the table does
 * not know goes straight to the real function; in full mode (every allocation
 * recorded) its usable size is counted as "pre-attach bytes released".
 *
 * Order at start: region and hello (the collector knows us), patch every object with
 * recording off, then recording on: no recorded block can lose its free to a module
 * not yet patched. A watcher thread patches objects loaded later (dlopen is hooked
 * too, and the list is polled), and detaches when the collector's connection ends
 * (--duration, Ctrl-C, or the CLI killed): it restores every slot, stops recording
 * and leaves the library loaded as a pass-through (never dlclose'd). Recorded blocks
 * freed after detach go to the real free directly: they carry no header.
 *
 * The capture rules of recorder.h hold here too: no allocation through malloc in a
 * hook, no stdio, the recursion guard first.
 */
#include <elf.h>
#include <errno.h>
#include <math.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>
#include <dlfcn.h>
#include <link.h>
#include <malloc.h>

#include "capture/pymem.h"
#include "capture/recorder.h"
#include "core/agent_abi.h"
#include "core/platform.h"
#include "leakguard.h"

__thread lgi_tls_t lgi_tls __attribute__((tls_model("initial-exec")));
lgi_global_t lgi_g = {.fd = -1, .conn = -1, .fork_fd = -1};
uintptr_t lgi_alloc_lo, lgi_alloc_hi;

/* What the CLI reads back (core/agent_abi.h), at the address lg_agent_start returns. */
static lg_agent_stats_t stats = {.magic = LG_AGENT_MAGIC, .version = LG_AGENT_ABI_VERSION};

/* ------------------------------------------------------------------ real functions */

static struct {
  void *(*malloc)(size_t);
  void (*free)(void *);
  void *(*calloc)(size_t, size_t);
  void *(*realloc)(void *, size_t);
  void *(*reallocarray)(void *, size_t, size_t);
  int (*posix_memalign)(void **, size_t, size_t);
  void *(*aligned_alloc)(size_t, size_t);
  void *(*memalign)(size_t, size_t);
  void *(*valloc)(size_t);
  void *(*pvalloc)(size_t);
  size_t (*usable)(void *);
  void *(*dlopen)(const char *, int);
  void *(*mmap)(void *, size_t, int, int, int, off_t);
  void *(*mmap64)(void *, size_t, int, int, int, off_t);
  int (*munmap)(void *, size_t);
  void *(*mremap)(void *, size_t, size_t, int, ...);
} real;

static _Atomic int recording;  /* hooks record */
static _Atomic int py_wrapped; /* CPython's allocators are wrapped (pm_*, "Python" below) */

/* ------------------------------------------------------------------ side table */

#define STRIPES 256
#define STRIPE_CAP 16384 /* power of 2: 4 M blocks in all, 96 MiB reserved, touched as used */
typedef struct ent {
  uintptr_t key; /* 0: empty */
  uint32_t site, epoch;
  uint64_t size;
} ent_t;
typedef struct stripe {
  _Atomic uintptr_t lock; /* 0, or the holder thread's lgi_tls address */
  _Atomic uint32_t seq;   /* odd while a writer changes the stripe (lookups without the lock) */
  uint32_t n;
  ent_t *e;
} __attribute__((aligned(64))) stripe_t;
static stripe_t stripes[STRIPES];
/* A counting filter in front of the table: a free of a block that was not recorded (in
 * sampled mode nearly every free) reads one byte, not a random line of the 96 MiB table.
 * 0: certainly absent; 255 sticks. 64 KiB, so that it stays in the core's cache beside
 * the program's own heap: at 1 MiB that byte was a cache miss on nearly every free
 * (86 % of the hook's samples), and the churn program attached with -s 512k ran 1.6x
 * slower than bare, 1.2x at 64 KiB (BENCHMARKS.md). Sampled mode keeps few blocks in
 * the table (one per 512 KiB of live heap by default), which 65 536 counters tell
 * apart; in full mode every block is there and the table is probed anyway. */
#define FILTER_BITS 16
static uint8_t *filter;
static inline uint8_t *filter_of(uint64_t h) { return &filter[(h >> 40) & ((1u << FILTER_BITS) - 1)]; }
static inline void filter_add(uint64_t h) {
  uint8_t *f = filter_of(h), v = __atomic_load_n(f, __ATOMIC_RELAXED);
  while (v != 255 && !__atomic_compare_exchange_n(f, &v, (uint8_t)(v + 1), 1, __ATOMIC_RELEASE, __ATOMIC_RELAXED))
    continue;
}
static inline void filter_del(uint64_t h) {
  uint8_t *f = filter_of(h), v = __atomic_load_n(f, __ATOMIC_RELAXED);
  while (v != 255 && v != 0 &&
         !__atomic_compare_exchange_n(f, &v, (uint8_t)(v - 1), 1, __ATOMIC_RELEASE, __ATOMIC_RELAXED))
    continue;
}

static inline uint64_t hash_ptr(uintptr_t p) {
  uint64_t h = (uint64_t)p * 0x9E3779B97F4A7C15ULL;
  return h ^ (h >> 29);
}
/* 0 with the stripe locked; -1, without waiting, when this thread already holds it: a
 * signal handler that allocates or frees has interrupted the thread's own table
 * operation, and spinning would never end. The caller then leaves the table as it is
 * (a block not recorded, or an entry left stale: table_put reports it when the
 * address is handed out again). */
static inline int st_lock(stripe_t *s) {
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
static inline void st_unlock(stripe_t *s) {
  atomic_fetch_add_explicit(&s->seq, 1, memory_order_release);
  atomic_store_explicit(&s->lock, 0, memory_order_release);
}

/* 1 when p may be in the table. Without the lock or any store (the common case in
 * sampled mode, a free of a block that was not recorded): a probe between two equal
 * even values of the stripe's sequence saw a consistent stripe. p itself cannot be
 * inserted meanwhile: the caller is freeing it, so it is live and not being handed out. */
static inline int table_maybe(uintptr_t p) {
  uint64_t h = hash_ptr(p);
  if (!__atomic_load_n(filter_of(h), __ATOMIC_ACQUIRE)) return 0;
  stripe_t *s = &stripes[h & (STRIPES - 1)];
  for (int tries = 0; tries < 4; tries++) {
    uint32_t q = atomic_load_explicit(&s->seq, memory_order_acquire);
    if (q & 1) continue;
    uint32_t i = (uint32_t)(h >> 8) & (STRIPE_CAP - 1);
    uintptr_t k;
    int found = 0;
    while ((k = __atomic_load_n(&s->e[i].key, __ATOMIC_RELAXED)) != 0) {
      if (k == p) {
        found = 1;
        break;
      }
      i = (i + 1) & (STRIPE_CAP - 1);
    }
    atomic_thread_fence(memory_order_acquire);
    if (found) return 1;
    if (atomic_load_explicit(&s->seq, memory_order_relaxed) == q) return 0;
  }
  return 1; /* busy stripe: ask under the lock */
}

static int table_init(void) {
  size_t bytes = (size_t)STRIPES * STRIPE_CAP * sizeof(ent_t);
  char *m = (char *)syscall(SYS_mmap, NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                            -1, 0);
  if (m == MAP_FAILED) return -1;
  filter = (uint8_t *)lgi_pages_alloc((size_t)1 << FILTER_BITS);
  if (!filter) return -1;
  for (int i = 0; i < STRIPES; i++) stripes[i].e = (ent_t *)(m + (size_t)i * STRIPE_CAP * sizeof(ent_t));
  return 0;
}

/* Inserts p; *old gets a stale entry of the same address (its free was missed: a
 * pointer taken before the patch reached the real free), old->key 0 if none.
 * 0, -1 when the stripe is full, -2 inside this thread's own table operation. */
static int table_put(uintptr_t p, uint32_t site, uint32_t epoch, uint64_t size, ent_t *old) {
  uint64_t h = hash_ptr(p);
  stripe_t *s = &stripes[h & (STRIPES - 1)];
  old->key = 0;
  if (st_lock(s) != 0) return -2;
  if (s->n >= STRIPE_CAP * 7 / 8) {
    st_unlock(s);
    return -1;
  }
  uint32_t i = (uint32_t)(h >> 8) & (STRIPE_CAP - 1);
  while (s->e[i].key && s->e[i].key != p) i = (i + 1) & (STRIPE_CAP - 1);
  if (s->e[i].key == p) *old = s->e[i];
  else {
    s->n++;
    filter_add(h);
  }
  s->e[i] = (ent_t){p, site, epoch, size};
  st_unlock(s);
  return 0;
}

/* Removes p (backward-shift deletion, no tombstones): 1 and *out when it was there. */
static int table_take(uintptr_t p, ent_t *out) {
  uint64_t h = hash_ptr(p);
  stripe_t *s = &stripes[h & (STRIPES - 1)];
  if (st_lock(s) != 0) return 0;
  uint32_t i = (uint32_t)(h >> 8) & (STRIPE_CAP - 1);
  while (s->e[i].key && s->e[i].key != p) i = (i + 1) & (STRIPE_CAP - 1);
  if (!s->e[i].key) {
    st_unlock(s);
    return 0;
  }
  *out = s->e[i];
  uint32_t j = i;
  for (;;) {
    j = (j + 1) & (STRIPE_CAP - 1);
    if (!s->e[j].key) break;
    uint32_t home = (uint32_t)(hash_ptr(s->e[j].key) >> 8) & (STRIPE_CAP - 1);
    /* move e[j] into the hole at i when its home is not within (i, j] cyclically */
    if (((j - home) & (STRIPE_CAP - 1)) >= ((j - i) & (STRIPE_CAP - 1))) {
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
static int table_find(uintptr_t p, ent_t *out) {
  if (!filter || !table_maybe(p)) return 0;
  uint64_t h = hash_ptr(p);
  stripe_t *s = &stripes[h & (STRIPES - 1)];
  if (st_lock(s) != 0) return 0;
  uint32_t i = (uint32_t)(h >> 8) & (STRIPE_CAP - 1);
  while (s->e[i].key && s->e[i].key != p) i = (i + 1) & (STRIPE_CAP - 1);
  int found = s->e[i].key == p;
  if (found) *out = s->e[i];
  st_unlock(s);
  return found;
}

/* ------------------------------------------------------------------ accounting
 * (the counters as in preload.c: this thread's shard, shared shard when nested) */

uint32_t lgi_epoch(void) { return atomic_load_explicit(&lgi_g.hdr->epoch, memory_order_relaxed); }

void lgi_count(lgi_tls_t *t, uint32_t site, int64_t bytes, int64_t blocks, uint32_t epoch, int alloc) {
  lgi_ctr_update(t, site, bytes, blocks, epoch, alloc);
}

void lgi_say(const char *a, const char *b, const char *c) {
  char buf[512];
  size_t n = 0;
  const char *parts[] = {"leakguard agent: ", a, b, c};
  for (size_t i = 0; i < sizeof parts / sizeof parts[0]; i++)
    for (const char *q = parts[i]; q && *q && n < sizeof buf - 1; q++) buf[n++] = *q;
  buf[n++] = '\n';
  (void)!syscall(SYS_write, 2, buf, n);
}

/* ------------------------------------------------------------------ threads */

static pthread_key_t thread_key;

/* Each attach has a region of its own: a thread set up for an earlier one starts over
 * (its shard, stack cache and Python frame cache belong to the old region). */
static _Atomic uint32_t session;
static __thread uint32_t thread_session __attribute__((tls_model("initial-exec")));

int lgi_thread_ready(lgi_tls_t *t) {
  if (!lgi_g.enabled) return 0;
  uint32_t cur = atomic_load_explicit(&session, memory_order_acquire);
  if (LGI_UNLIKELY(thread_session != cur) && t->state != 2) {
    t->guard++;
    lgi_unwind_thread_exit(t);
    lgi_python_thread_exit(t);
    t->shard = NULL;
    t->chunk_dir = NULL;
    t->shard_atomic = 0;
    t->stack_known = 0;
    t->state = 0;
    thread_session = cur;
    t->guard--;
  }
  if (t->state == 0) {
    t->guard++;
    t->state = 1;
    t->rng = (uint64_t)lg_sys_gettid() * 0x9E3779B97F4A7C15ULL + 0x632BE59BD9B4E019ULL;
    if (!t->rng) t->rng = 1;
    pthread_setspecific(thread_key, t);
    lgi_shard_acquire(t);
    lgi_unwind_thread_start(t);
    if (lgi_g.sample_bytes) t->countdown = (int64_t)lgi_next_exp(t, (double)lgi_g.sample_bytes);
    t->guard--;
  }
  return t->state == 1;
}

/* The names the other capture files expect from preload.c and lifecycle.c (dl.c,
 * procs.c, breaker.c and the CUDA files are not part of the agent). */
void *lgi_alloc_own(const char *name) {
  (void)name;
  return NULL;
}
void *lgi_mmap_own(const char *name) {
  (void)name;
  return NULL;
}

/* ------------------------------------------------------------------ hooks */

/* Set while CPython's own allocator runs inside our wrapper of it (pm_*, below): the
 * block it hands out is recorded by the wrapper, so the malloc or the arena mmap that
 * pymalloc makes for it is not. Unlike the guard, a munmap is still seen (an arena
 * recorded before the wrapper went in is forgotten when pymalloc gives it back). */
static __thread int py_inner __attribute__((tls_model("initial-exec")));

/* 1 when this allocation is to be recorded (sampling countdown, as preload.c). */
static inline int decide(lgi_tls_t *t, size_t size) {
  if (!atomic_load_explicit(&recording, memory_order_relaxed) || t->guard || py_inner) return 0;
  if (lgi_g.sample_bytes) {
    if (LGI_UNLIKELY(t->state == 0)) {
      if (!lgi_thread_ready(t)) return 0;
    }
    t->countdown -= (int64_t)size;
    if (LGI_LIKELY(t->countdown > 0)) return 0;
    t->countdown = (int64_t)lgi_next_exp(t, (double)lgi_g.sample_bytes);
    return size != 0;
  }
  return lgi_thread_ready(t);
}

static __attribute__((noinline)) void record(lgi_tls_t *t, void *p, size_t size, uintptr_t ra0, uintptr_t cfa0) {
  t->guard++;
  uint32_t site = lgi_capture_all(t, ra0, cfa0, LG_SPACE_HOST);
  uint32_t ep = lgi_epoch();
  ent_t old;
  int rc = table_put((uintptr_t)p, site, ep, size, &old);
  if (rc != 0) {
    if (rc == -1) __atomic_fetch_add(&stats.table_full, 1, __ATOMIC_RELAXED);
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
  ent_t e;
  if (table_maybe((uintptr_t)p) && table_take((uintptr_t)p, &e)) {
    lgi_tls_t *t = &lgi_tls;
    t->guard++;
    lgi_count(t, e.site, -lgi_weight_bytes(e.size), -lgi_weight_blocks(e.size), e.epoch, 0);
    t->guard--;
    return;
  }
  if (lgi_g.sample_bytes || !atomic_load_explicit(&recording, memory_order_relaxed) || lgi_tls.guard || py_inner)
    return;
  /* full mode: every block allocated since attach is in the table, so this one is older */
  __atomic_fetch_add(&stats.preattach_bytes_released, real.usable(p), __ATOMIC_RELAXED);
  __atomic_fetch_add(&stats.preattach_blocks_released, 1, __ATOMIC_RELAXED);
}

static void *h_malloc(size_t n) {
  void *p = real.malloc(n);
  if (p && decide(&lgi_tls, n)) record(&lgi_tls, p, n, LG_CALLER_RA, LG_CALLER_CFA);
  return p;
}
static void h_free(void *p) {
  forget(p);
  real.free(p);
}
static void *h_calloc(size_t a, size_t b) {
  void *p = real.calloc(a, b);
  if (p && decide(&lgi_tls, a * b)) record(&lgi_tls, p, a * b, LG_CALLER_RA, LG_CALLER_CFA);
  return p;
}
static void *h_realloc(void *old, size_t n) {
  if (old && n == 0) {
    forget(old);
    return real.realloc(old, n);
  }
  ent_t e = {0};
  int known = old && table_maybe((uintptr_t)old) && table_take((uintptr_t)old, &e);
  if (old && !known && !lgi_g.sample_bytes && atomic_load_explicit(&recording, memory_order_relaxed) &&
      !lgi_tls.guard && !py_inner) {
    __atomic_fetch_add(&stats.preattach_bytes_released, real.usable(old), __ATOMIC_RELAXED);
    __atomic_fetch_add(&stats.preattach_blocks_released, 1, __ATOMIC_RELAXED);
  }
  void *p = real.realloc(old, n);
  lgi_tls_t *t = &lgi_tls;
  if (known) {
    t->guard++;
    if (p) lgi_count(t, e.site, -lgi_weight_bytes(e.size), -lgi_weight_blocks(e.size), e.epoch, 0);
    else { /* the old block lives on */ ent_t o2;
      (void)table_put(e.key, e.site, e.epoch, e.size, &o2);
    }
    t->guard--;
  }
  if (p && decide(t, n)) record(t, p, n, LG_CALLER_RA, LG_CALLER_CFA);
  return p;
}
static void *h_reallocarray(void *old, size_t a, size_t b) {
  size_t n;
  if (__builtin_mul_overflow(a, b, &n)) return real.reallocarray(old, a, b);
  return h_realloc(old, n);
}
static int h_posix_memalign(void **out, size_t al, size_t n) {
  int r = real.posix_memalign(out, al, n);
  if (r == 0 && decide(&lgi_tls, n)) record(&lgi_tls, *out, n, LG_CALLER_RA, LG_CALLER_CFA);
  return r;
}
static void *h_aligned_alloc(size_t al, size_t n) {
  void *p = real.aligned_alloc(al, n);
  if (p && decide(&lgi_tls, n)) record(&lgi_tls, p, n, LG_CALLER_RA, LG_CALLER_CFA);
  return p;
}
static void *h_memalign(size_t al, size_t n) {
  void *p = real.memalign(al, n);
  if (p && decide(&lgi_tls, n)) record(&lgi_tls, p, n, LG_CALLER_RA, LG_CALLER_CFA);
  return p;
}
static void *h_valloc(size_t n) {
  void *p = real.valloc(n);
  if (p && decide(&lgi_tls, n)) record(&lgi_tls, p, n, LG_CALLER_RA, LG_CALLER_CFA);
  return p;
}
static void *h_pvalloc(size_t n) {
  void *p = real.pvalloc(n);
  if (p && decide(&lgi_tls, n)) record(&lgi_tls, p, n, LG_CALLER_RA, LG_CALLER_CFA);
  return p;
}
static size_t h_usable(void *p) { return real.usable(p); }

/* Anonymous mmap (mmap_table.c's table, as under `leakguard run`): a mapping made
 * after attach is recorded at its call site; one that the program unmaps, moves or
 * maps over is forgotten. Mappings older than the attach are not in the table, and
 * their munmap changes nothing. */
static void *mm_hook(void *(*fn)(void *, size_t, int, int, int, off_t), void *addr, size_t len, int prot, int flags,
                     int fd, off_t off, uintptr_t ra0, uintptr_t cfa0) {
  void *p = fn(addr, len, prot, flags, fd, off);
  if (p != MAP_FAILED && (flags & (MAP_ANONYMOUS | MAP_FIXED)) && !py_inner &&
      atomic_load_explicit(&recording, memory_order_relaxed))
    lgi_mm_mapped(p, len, (flags & MAP_ANONYMOUS) != 0, ra0, cfa0);
  return p;
}
static void *h_mmap(void *addr, size_t len, int prot, int flags, int fd, off_t off) {
  return mm_hook(real.mmap, addr, len, prot, flags, fd, off, LG_CALLER_RA, LG_CALLER_CFA);
}
static void *h_mmap64(void *addr, size_t len, int prot, int flags, int fd, off_t off) {
  return mm_hook(real.mmap64, addr, len, prot, flags, fd, off, LG_CALLER_RA, LG_CALLER_CFA);
}
static int h_munmap(void *addr, size_t len) {
  int rc = real.munmap(addr, len);
  if (rc == 0) lgi_mm_unmapped(addr, len);
  return rc;
}
static void *h_mremap(void *old, size_t old_len, size_t new_len, int flags, ...) {
  void *want = NULL;
  LGI_MREMAP_WANT(flags, want);
  void *p = real.mremap(old, old_len, new_len, flags, want);
  if (p != MAP_FAILED) lgi_mm_remapped(old, old_len, p, new_len, flags);
  return p;
}

static void rescan(void);
static void *h_dlopen(const char *f, int mode) {
  void *h = real.dlopen(f, mode);
  if (h && __atomic_load_n(&stats.state, __ATOMIC_SEQ_CST) == 1) {
    lgi_tls.guard++;
    rescan();
    lgi_tls.guard--;
  }
  return h;
}

/* ------------------------------------------------------------------ GOT patching */

static const struct {
  const char *name;
  void *hook;
  void **real;
} names[] = {
#define N(n, h, r)                                                                                                     \
  { #n, (void *)h, (void **)&real.r }
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
#define NNAMES (sizeof names / sizeof names[0])

/* One patched slot: restored at detach. Pages from mmap. An object that dlclose
 * unmaps loses its slots (pruned at the next scan); one loaded again at the same
 * address is patched again (its fresh GOT does not hold our hooks). */
typedef struct slot {
  uintptr_t addr, orig, obj;
  int relro;
} slot_t;
#define MAX_SLOTS 65536
static slot_t *slots;
static size_t nslots;
#define MAX_OBJS 8192
static uintptr_t *live_objs; /* objects loaded now (scan) */
static size_t nlive;
static pthread_mutex_t patch_mu = PTHREAD_MUTEX_INITIALIZER;
static uintptr_t self_base, rtld_base;

static void write_slot(uintptr_t addr, uintptr_t val, int relro) {
  uintptr_t pg = addr & ~(uintptr_t)4095;
  if (relro) syscall(SYS_mprotect, pg, 4096, PROT_READ | PROT_WRITE);
  __atomic_store_n((uintptr_t *)addr, val, __ATOMIC_RELEASE);
  if (relro) syscall(SYS_mprotect, pg, 4096, PROT_READ);
}

static uintptr_t dyn_ptr(uintptr_t v, uintptr_t base) { return v < base ? v + base : v; }

static void patch_rela(uintptr_t obj, uintptr_t base, const ElfW(Rela) * r, size_t n, const ElfW(Sym) * sym,
                       const char *str, uintptr_t rlo, uintptr_t rhi) {
  for (size_t i = 0; i < n; i++) {
    unsigned type = ELF64_R_TYPE(r[i].r_info);
    if (type != R_X86_64_JUMP_SLOT && type != R_X86_64_GLOB_DAT) continue;
    const char *nm = str + sym[ELF64_R_SYM(r[i].r_info)].st_name;
    for (size_t k = 0; k < NNAMES; k++) {
      if (strcmp(nm, names[k].name) != 0) continue;
      uintptr_t addr = base + r[i].r_offset, cur = *(uintptr_t *)addr;
      if (cur == (uintptr_t)names[k].hook || !*names[k].real) break;
      int relro = addr >= rlo && addr < rhi;
      size_t j = 0;
      while (j < nslots && slots[j].addr != addr) j++;
      if (j == nslots) {
        if (nslots >= MAX_SLOTS) break;
        nslots++;
      }
      slots[j] = (slot_t){addr, cur, obj, relro};
      /* a lazy slot not bound yet (it points into the object's PLT) is bound to the hook */
      write_slot(addr, (uintptr_t)names[k].hook, relro);
      __atomic_fetch_add(&stats.slots_patched, 1, __ATOMIC_SEQ_CST);
      break;
    }
  }
}

/* glibc >= 2.35: _dl_find_object knows an object once ld.so has relocated it and put
 * its RELRO pages read-only (dl_open_worker_begin updates it after both), and
 * dl_iterate_phdr lists it from the moment it is mapped. A slot written while ld.so
 * still relocates the object is lost, and a RELRO page put back to read-only under ld.so
 * crashes it in elf_machine_rela (seen: a target whose threads dlopen in a loop). Such
 * an object is left to a later scan. NULL on an older glibc: no such check. */
static int (*find_object)(void *, struct dl_find_object *);
static _Atomic int unready; /* objects the last scan left (still being loaded) */

/* The object's identity, dynamic section and RELRO range (the pages ld.so makes
 * read-only: its end rounded down); 0 when it is not to be patched (no dynamic
 * section, vDSO, ld.so, the agent). */
static uintptr_t obj_of(struct dl_phdr_info *info, const ElfW(Dyn) * *dynp, uintptr_t *rlo, uintptr_t *rhi) {
  uintptr_t base = info->dlpi_addr;
  const ElfW(Dyn) *dyn = NULL;
  *rlo = *rhi = 0;
  for (int i = 0; i < info->dlpi_phnum; i++) {
    if (info->dlpi_phdr[i].p_type == PT_DYNAMIC) dyn = (const ElfW(Dyn) *)(base + info->dlpi_phdr[i].p_vaddr);
    if (info->dlpi_phdr[i].p_type == PT_GNU_RELRO) {
      /* as _dl_protect_relro rounds it: the last partial page stays writable (it
       * holds .data too), so a slot there must not make it read-only */
      *rlo = (base + info->dlpi_phdr[i].p_vaddr) & ~(uintptr_t)4095;
      *rhi = (base + info->dlpi_phdr[i].p_vaddr + info->dlpi_phdr[i].p_memsz) & ~(uintptr_t)4095;
    }
  }
  if (!dyn) return 0;
  const char *nm = info->dlpi_name ? info->dlpi_name : "";
  if (strstr(nm, "linux-vdso") || strstr(nm, "linux-gate")) return 0;
  if (base == self_base || (rtld_base && base == rtld_base)) return 0;
  *dynp = dyn;
  return base ^ (uintptr_t)dyn;
}

/* In dl_iterate_phdr's callback the object cannot be unmapped (dlclose removes it
 * from the list, under the lock the iteration holds, before it unmaps it). */
static int patch_cb(struct dl_phdr_info *info, size_t size, void *arg) {
  (void)size;
  (void)arg;
  const ElfW(Dyn) *dyn = NULL;
  uintptr_t rlo, rhi, base = info->dlpi_addr;
  uintptr_t obj = obj_of(info, &dyn, &rlo, &rhi);
  if (!obj) return 0;
  if (nlive < MAX_OBJS) live_objs[nlive++] = obj;
  struct dl_find_object fo;
  if (find_object && find_object((void *)dyn, &fo) != 0) {
    atomic_fetch_add(&unready, 1);
    return 0;
  }
  const ElfW(Sym) *sym = NULL;
  const char *str = NULL;
  const ElfW(Rela) *rela = NULL, *jmp = NULL;
  size_t relasz = 0, jmpsz = 0;
  for (const ElfW(Dyn) *d = dyn; d->d_tag != DT_NULL; d++) {
    switch (d->d_tag) {
    case DT_SYMTAB: sym = (const ElfW(Sym) *)dyn_ptr(d->d_un.d_ptr, base); break;
    case DT_STRTAB: str = (const char *)dyn_ptr(d->d_un.d_ptr, base); break;
    case DT_RELA: rela = (const ElfW(Rela) *)dyn_ptr(d->d_un.d_ptr, base); break;
    case DT_RELASZ: relasz = d->d_un.d_val / sizeof(ElfW(Rela)); break;
    case DT_JMPREL: jmp = (const ElfW(Rela) *)dyn_ptr(d->d_un.d_ptr, base); break;
    case DT_PLTRELSZ: jmpsz = d->d_un.d_val / sizeof(ElfW(Rela)); break;
    default: break;
    }
  }
  if (!sym || !str) return 0;
  if (rela) patch_rela(obj, base, rela, relasz, sym, str, rlo, rhi);
  if (jmp) patch_rela(obj, base, jmp, jmpsz, sym, str, rlo, rhi);
  return 0;
}

static int is_live(uintptr_t obj) {
  for (size_t i = 0; i < nlive; i++)
    if (live_objs[i] == obj) return 1;
  return 0;
}

static _Atomic unsigned long seen_adds;
static void rescan(void) {
  pthread_mutex_lock(&patch_mu);
  if (__atomic_load_n(&stats.state, __ATOMIC_SEQ_CST) <= 1) {
    nlive = 0;
    atomic_store(&unready, 0);
    dl_iterate_phdr(patch_cb, NULL);
    size_t k = 0; /* the slots of unloaded objects go */
    for (size_t i = 0; i < nslots; i++)
      if (is_live(slots[i].obj)) slots[k++] = slots[i];
    nslots = k;
  }
  pthread_mutex_unlock(&patch_mu);
  if (lgi_g.hdr) atomic_fetch_add(&lgi_g.hdr->module_gen, 1);
}

static int adds_cb(struct dl_phdr_info *info, size_t size, void *arg) {
  (void)info;
  if (size >= offsetof(struct dl_phdr_info, dlpi_subs)) *(unsigned long long *)arg = info->dlpi_adds;
  return 1;
}

/* Restores the slots of each object still loaded, inside the iteration (above). */
static int restore_cb(struct dl_phdr_info *info, size_t size, void *arg) {
  (void)size;
  (void)arg;
  const ElfW(Dyn) *dyn = NULL;
  uintptr_t rlo, rhi;
  uintptr_t obj = obj_of(info, &dyn, &rlo, &rhi);
  if (!obj) return 0;
  for (size_t i = nslots; i-- > 0;)
    if (slots[i].obj == obj) {
      write_slot(slots[i].addr, slots[i].orig, slots[i].relro);
      __atomic_fetch_add(&stats.slots_restored, 1, __ATOMIC_SEQ_CST);
    }
  return 0;
}

static void restore_all(void) {
  pthread_mutex_lock(&patch_mu);
  dl_iterate_phdr(restore_cb, NULL);
  nslots = 0;
  pthread_mutex_unlock(&patch_mu);
}

/* ------------------------------------------------------------------ hello */

/* ------------------------------------------------------------------ detach, watcher */

static int cli_pidfd = -1;
static _Atomic int detach_once;
static _Atomic int watcher_running; /* from its creation to its last instruction of ours */

static void detach(const char *why) {
  if (atomic_exchange(&detach_once, 1)) return;
  __atomic_store_n(&stats.state, 2, __ATOMIC_SEQ_CST); /* first: a rescan waiting for the lock patches nothing */
  restore_all();
  atomic_store(&recording, 0);
  lgi_g.enabled = 0;
  if (why) lgi_say("detached: ", why, "");
}

static void py_post(void);
static int py_unwrap(void *arg);

static void *watcher(void *arg) {
  (void)arg;
  lgi_tls.guard++; /* nothing this thread allocates is recorded */
  unsigned long long adds = 0;
  int unready_ticks = 0;
  dl_iterate_phdr(adds_cb, &adds);
  atomic_store(&seen_adds, adds);
  for (;;) {
    py_post(); /* a full pending-call queue: tried again at the next tick */
    struct pollfd q[2] = {{lgi_g.conn, POLLIN, 0}, {cli_pidfd, POLLIN, 0}};
    int conn_ok = lgi_fd_is(lgi_g.conn, lgi_g.conn_dev, lgi_g.conn_ino);
    if (!conn_ok) q[0].fd = -1;
    int r = poll(q, 2, 100);
    if (r > 0 && (q[0].revents & (POLLIN | POLLHUP | POLLERR))) {
      char b;
      ssize_t got = recv(lgi_g.conn, &b, 1, MSG_DONTWAIT);
      if (got == 0 || (got < 0 && errno != EAGAIN && errno != EINTR)) break;
    }
    if (r > 0 && (q[1].revents & POLLIN)) break; /* the CLI is gone */
    if (!conn_ok && cli_pidfd < 0) break;
    unsigned long long now = 0;
    dl_iterate_phdr(adds_cb, &now);
    /* an object still being loaded is looked at again at the next ticks (5 s at most:
     * one _dl_find_object never knows, dlmopen's, costs no endless scans) */
    int again = atomic_load(&unready) && unready_ticks < 50;
    if (now != atomic_load(&seen_adds) || again) {
      unready_ticks = now != atomic_load(&seen_adds) ? 0 : unready_ticks + 1;
      atomic_store(&seen_adds, now);
      rescan();
    }
  }
  detach(NULL); /* quietly: the target's stderr is not ours */
  /* CPython's allocators back (py_unwrap), posted from this thread: never from the
   * stopped one, which may hold the interpreter's pending-call lock */
  int (*add)(int (*)(void *), void *) = (int (*)(int (*)(void *), void *))dlsym(RTLD_DEFAULT, "Py_AddPendingCall");
  if (add && atomic_load(&py_wrapped)) (void)add(py_unwrap, NULL);
  if (lgi_fd_is(lgi_g.conn, lgi_g.conn_dev, lgi_g.conn_ino)) syscall(SYS_close, lgi_g.conn);
  if (cli_pidfd >= 0) syscall(SYS_close, cli_pidfd);
  atomic_store(&watcher_running, 0); /* the next attach may start */
  return NULL;
}

/* fork while attached: the child records nothing. Its slots keep the hooks, which pass
 * every call through (its blocks carry no header, so nothing else is needed): putting
 * the slots back would need dl_iterate_phdr, whose lock another thread of the parent
 * may have held at the fork (glibc does not reset it in the child). */
static void atfork_child(void) {
  atomic_store(&watcher_running, 0); /* the child has no watcher thread */
  if (__atomic_load_n(&stats.state, __ATOMIC_SEQ_CST) != 1) return;
  atomic_store(&recording, 0);
  lgi_g.enabled = 0;
  __atomic_store_n(&stats.state, 2, __ATOMIC_SEQ_CST);
  atomic_store(&detach_once, 1);
  pthread_mutex_init(&patch_mu, NULL);
  for (int i = 0; i < STRIPES; i++) atomic_store(&stripes[i].lock, 0);
  lgi_mm_lock_drop(); /* another thread may have held it at the fork */
}

/* ------------------------------------------------------------------ Python
 * Holders after attach (docs/attach.md, "Python after attach"): the leakguard module is
 * imported in the target by a pending call, which CPython runs in the main thread
 * between two bytecodes, under the GIL. It is posted from the watcher thread, never from
 * the stopped context: Py_AddPendingCall takes the interpreter's pending-call lock,
 * which the stopped thread may hold. The module then looks the functions below up
 * through this library's own handle (dlopen of its path with RTLD_NOLOAD): the injector
 * loads it RTLD_LOCAL, so dlsym(RTLD_DEFAULT, ...) does not see them. */

static char py_dir[256], py_moddir[1024], self_path[1024];
static _Atomic int py_posted;

/* A path that can go between double quotes in Python source as it is. */
static int py_quotable(const char *s) {
  if (!*s) return 0;
  for (; *s; s++)
    if (*s == '\'' || *s == '"' || *s == '\\' || (unsigned char)*s < 0x20) return 0;
  return 1;
}

/* CPython's own allocator after attach. A process not started by `leakguard run` runs
 * pymalloc (no PYTHONMALLOC=malloc): objects of up to 512 bytes live in its arenas, never
 * pass through malloc, and the GOT hooks see only the arenas. The pending call below
 * wraps the allocators of the MEM and OBJ domains (PyMem_SetAllocator, under the GIL, as
 * tracemalloc does): a block they hand out is recorded at its call site in the side
 * table, as a malloc block is, and taken out when they free it; a block allocated before
 * the wrapper is passed through (its free finds nothing). Blocks move nowhere and carry no
 * header, so the wrapper can go at any time: a pending call at detach puts the
 * allocators back, and until it runs (a main thread in one long C call) or in a fork
 * child, the wrapper passes every call through. pymem_t: capture/pymem.h. */
static const int pymem_domain[2] = {LG_PYMEM_DOMAIN_MEM, LG_PYMEM_DOMAIN_OBJ};
static pymem_t py_orig[2]; /* the allocators found, the wrappers' ctx */

/* A recorded block of the side table freed or moved by CPython's allocator. */
static inline void pm_forget(void *p, ent_t *e) {
  if (!p || !table_maybe((uintptr_t)p) || !table_take((uintptr_t)p, e)) {
    e->key = 0;
    return;
  }
  lgi_tls_t *t = &lgi_tls;
  t->guard++;
  lgi_count(t, e->site, -lgi_weight_bytes(e->size), -lgi_weight_blocks(e->size), e->epoch, 0);
  t->guard--;
}
static void *pm_malloc(void *ctx, size_t n) {
  pymem_t *o = ctx;
  py_inner++;
  void *p = o->malloc(o->ctx, n);
  py_inner--;
  if (p && decide(&lgi_tls, n)) record(&lgi_tls, p, n, LG_CALLER_RA, LG_CALLER_CFA);
  return p;
}
static void *pm_calloc(void *ctx, size_t a, size_t b) {
  pymem_t *o = ctx;
  py_inner++;
  void *p = o->calloc(o->ctx, a, b);
  py_inner--;
  if (p && decide(&lgi_tls, a * b)) record(&lgi_tls, p, a * b, LG_CALLER_RA, LG_CALLER_CFA);
  return p;
}
static void *pm_realloc(void *ctx, void *old, size_t n) {
  pymem_t *o = ctx;
  ent_t e;
  pm_forget(old, &e);
  py_inner++;
  void *p = o->realloc(o->ctx, old, n);
  py_inner--;
  if (!p && e.key) { /* the old block lives on */
    ent_t o2;
    lgi_tls_t *t = &lgi_tls;
    t->guard++;
    if (table_put(e.key, e.site, e.epoch, e.size, &o2) == 0)
      lgi_count(t, e.site, lgi_weight_bytes(e.size), lgi_weight_blocks(e.size), e.epoch, 0);
    t->guard--;
  }
  if (p && decide(&lgi_tls, n)) record(&lgi_tls, p, n, LG_CALLER_RA, LG_CALLER_CFA);
  return p;
}
static void pm_free(void *ctx, void *p) {
  pymem_t *o = ctx;
  ent_t e;
  pm_forget(p, &e);
  py_inner++;
  o->free(o->ctx, p);
  py_inner--;
}

/* In the main thread, GIL held (py_boot): the wrappers go in, once. */
static void py_wrap(void) {
  void (*get)(int, pymem_t *) = (void (*)(int, pymem_t *))dlsym(RTLD_DEFAULT, "PyMem_GetAllocator");
  void (*set)(int, pymem_t *) = (void (*)(int, pymem_t *))dlsym(RTLD_DEFAULT, "PyMem_SetAllocator");
  if (!get || !set || atomic_load(&py_wrapped)) return;
  for (int i = 0; i < 2; i++) get(pymem_domain[i], &py_orig[i]);
  for (int i = 0; i < 2; i++) {
    pymem_t w = {&py_orig[i], pm_malloc, pm_calloc, pm_realloc, pm_free};
    set(pymem_domain[i], &w);
  }
  atomic_store(&py_wrapped, 1);
}

/* A pending call posted at detach (main thread, GIL held): the allocators found go back. */
static int py_unwrap(void *arg) {
  (void)arg;
  void (*set)(int, pymem_t *) = (void (*)(int, pymem_t *))dlsym(RTLD_DEFAULT, "PyMem_SetAllocator");
  if (!set || !atomic_load(&py_wrapped) || __atomic_load_n(&stats.state, __ATOMIC_SEQ_CST) == 1)
    return 0; /* attached again */
  for (int i = 0; i < 2; i++) set(pymem_domain[i], &py_orig[i]);
  atomic_store(&py_wrapped, 0);
  return 0;
}

/* In the main thread, GIL held. Always 0: a pending call that returns -1 must leave an
 * exception set, which would surface in the program. What fails is written to
 * LG_FILE_PYBOOT in the collector's directory (the CLI prints it in one line). The code
 * runs in a namespace of its own (exec), so __main__ gains no name. */
static int py_boot(void *arg) {
  (void)arg;
  int (*run)(const char *, void *) = (int (*)(const char *, void *))dlsym(RTLD_DEFAULT, "PyRun_SimpleStringFlags");
  if (!run || __atomic_load_n(&stats.state, __ATOMIC_SEQ_CST) != 1) return 0;
  static char code[4096];
  int n = snprintf(code, sizeof code,
                   "exec('''\n"
                   "try:\n"
                   "    import importlib.util as u\n"
                   "    s = u.spec_from_file_location(\"_leakguard_site\", \"%s/sitecustomize.py\")\n"
                   "    m = u.module_from_spec(s)\n"
                   "    s.loader.exec_module(m)\n"
                   "    m._leakguard_attach(\"%s\", \"%s\", \"%s\")\n"
                   "except Exception as e:\n"
                   "    try:\n"
                   "        import os\n"
                   "        with open(os.path.join(\"%s\", \"%s\" %% os.getpid()), \"w\") as f:\n"
                   "            f.write(\"%%s: %%s\" %% (type(e).__name__, e))\n"
                   "    except Exception:\n"
                   "        pass\n"
                   "''', {'__builtins__': __builtins__})\n",
                   py_moddir, py_moddir, py_dir, self_path, py_dir, LG_FILE_PYBOOT);
  if (n <= 0 || (size_t)n >= sizeof code) return 0;
  py_wrap();
  lgi_tls.guard++; /* the module's import is leakguard's, not the program's */
  (void)run(code, NULL);
  lgi_tls.guard--;
  return 0;
}

/* Watcher thread: once per attach, when the process runs a CPython the frame reader
 * knows and the CLI gave the module's directory. */
static void py_post(void) {
  if (atomic_load(&py_posted) || !py_dir[0] || !py_moddir[0] || !self_path[0] || !lgi_python_active()) return;
  int (*add)(int (*)(void *), void *) = (int (*)(int (*)(void *), void *))dlsym(RTLD_DEFAULT, "Py_AddPendingCall");
  if (add && add(py_boot, NULL) == 0) atomic_store(&py_posted, 1);
}

/* What the module calls (src/python/api.c), as libleakguard.so's functions of the same
 * names do under `leakguard run`. */
LG_API int lg_recording(void) {
  return atomic_load(&recording) && __atomic_load_n(&stats.state, __ATOMIC_SEQ_CST) == 1;
}

LG_API uint64_t leakguard_step(void) {
  if (!lg_recording() || !lgi_g.hdr) return 0;
  return atomic_fetch_add_explicit(&lgi_g.hdr->steps, 1, memory_order_release) + 1;
}

LG_API int lg_site_of(const void *block, uint32_t *site) {
  ent_t e;
  if (!block || !site || !lg_recording() || !table_find((uintptr_t)block, &e)) return -ENOENT;
  *site = e.site;
  return 0;
}

/* Headerless: the module asks the side table for a block's site and size instead of
 * reading a header in front of the block. Exact addresses only, so any pointer may be
 * asked (an object pymalloc placed in one of its arenas is simply not there). */
LG_API int lg_agent_block(const void *block, uint32_t *site, uint64_t *size);
LG_API int lg_agent_block(const void *block, uint32_t *site, uint64_t *size) {
  ent_t e;
  if (!block || !lg_recording() || !table_find((uintptr_t)block, &e)) return -ENOENT;
  if (site) *site = e.site;
  if (size) *size = e.size;
  return 0;
}

LG_API void lg_program_held(int held) {
  if (!lg_recording() || !lgi_g.hdr) return;
  if (held) atomic_fetch_add(&lgi_g.hdr->held, 1);
  else if (atomic_load(&lgi_g.hdr->held) > 0) atomic_fetch_sub(&lgi_g.hdr->held, 1);
}

LG_API int lg_pause_recording(int pause) {
  lgi_tls_t *t = &lgi_tls;
  if (pause) t->guard++;
  else if (t->guard > 0) t->guard--;
  return t->guard;
}

/* ------------------------------------------------------------------ start */

static unsigned long long cfg_num(const char *cfg, const char *key, unsigned long long dflt) {
  const char *p = strstr(cfg, key);
  if (!p) return dflt;
  p += strlen(key);
  unsigned long long v = 0;
  int any = 0;
  for (; *p >= '0' && *p <= '9'; p++, any = 1) v = v * 10 + (unsigned)(*p - '0');
  return any ? v : dflt;
}

/* Copies the value of key (up to the line's end) into out; 0 when absent or too long. */
static int cfg_str(const char *cfg, const char *key, char *out, size_t n) {
  out[0] = 0;
  const char *p = strstr(cfg, key);
  if (!p) return 0;
  p += strlen(key);
  size_t k = strcspn(p, "\n");
  if (k == 0 || k >= n) return 0;
  memcpy(out, p, k);
  out[k] = 0;
  return 1;
}

static _Atomic int starting;

/* A new attach after a detach: the previous region's collector is gone. Its mapping is
 * left (a hook of the last session may still be finishing a record in it), the rest is
 * reset: figures, side table (its blocks may have been freed since, unseen), Python
 * frame ids, and every thread's per-region state (session). */
static void restart(void) {
  stats.preattach_bytes_released = 0;
  stats.preattach_blocks_released = 0;
  stats.slots_patched = 0;
  stats.slots_restored = 0;
  stats.table_full = 0;
  /* the table's pages go back to the kernel (they read as zeros: empty) */
  for (int i = 0; i < STRIPES; i++) (void)st_lock(&stripes[i]);
  syscall(SYS_madvise, stripes[0].e, (size_t)STRIPES * STRIPE_CAP * sizeof(ent_t), MADV_DONTNEED);
  memset(filter, 0, (size_t)1 << FILTER_BITS);
  for (int i = 0; i < STRIPES; i++) {
    stripes[i].n = 0;
    st_unlock(&stripes[i]);
  }
  if (lgi_g.fd >= 0) syscall(SYS_close, lgi_g.fd);
  lgi_g.fd = -1;
  lgi_g.hdr = NULL;
  lgi_python_reset();
  lgi_mm_reset();
  cli_pidfd = -1;
  atomic_store(&py_posted, 0);
  atomic_store(&detach_once, 0);
  atomic_fetch_add(&session, 1);
}

/* Called by the injector in the stopped thread, at the entry of malloc or free (no
 * allocator lock held by this thread). cfg: "sock=PATH\nsample=N\ndepth=N\ncli=PID\nmmap=0|1\n".
 * Returns the address of the stats block (core/agent_abi.h), or an error code below 4096
 * (1: bad config, 2: allocator not glibc's, 3: region, 4: collector not reachable,
 * 5: thread). */
LG_API uintptr_t lg_agent_start(const char *cfg);
LG_API uintptr_t lg_agent_start(const char *cfg) {
  lgi_tls.guard++;
  uintptr_t rc = 0;
  /* An attach right after another one ended: the last collector is gone, but its
   * watcher detaches at its next tick (100 ms) and then closes that session's socket
   * and pidfd, which must not be this session's. Wait for it to end, up to 1 s, before
   * calling this process recorded by another attach. */
  for (int i = 0; atomic_load(&watcher_running) && i < 100; i++) {
    struct timespec ts = {0, 10 * 1000 * 1000};
    nanosleep(&ts, NULL);
  }
  uint32_t was = __atomic_load_n(&stats.state, __ATOMIC_SEQ_CST);
  int idle = 0;
  if (atomic_load(&watcher_running)) was = 1;
  if (was == 1 || !atomic_compare_exchange_strong(&starting, &idle, 1)) {
    lgi_tls.guard--;
    return 6; /* recording already */
  }
  if (was == 2) { /* attached before: the library stayed as a pass-through; start over */
    restart();
    __atomic_store_n(&stats.state, 0, __ATOMIC_SEQ_CST);
  }
  const char *s = strstr(cfg, "sock=");
  if (!s) {
    rc = 1;
    goto out;
  }
  s += 5;
  size_t n = strcspn(s, "\n");
  if (n == 0 || n >= sizeof lgi_g.sock_path) {
    rc = 1;
    goto out;
  }
  memcpy(lgi_g.sock_path, s, n);
  lgi_g.sock_path[n] = 0;
  lgi_g.sample_bytes = cfg_num(cfg, "sample=", 0);
  unsigned long long depth = cfg_num(cfg, "depth=", LG_DEFAULT_DEPTH);
  if (depth < 1) depth = 1;
  if (depth > LG_MAX_DEPTH) depth = LG_MAX_DEPTH;
  lgi_g.depth = (uint32_t)depth;
  lgi_g.follow = 0;
  int cli = (int)cfg_num(cfg, "cli=", 0);
  if (!cfg_str(cfg, "\ndir=", py_dir, sizeof py_dir) || !py_quotable(py_dir)) py_dir[0] = 0;
  if (!cfg_str(cfg, "\npydir=", py_moddir, sizeof py_moddir) || !py_quotable(py_moddir)) py_moddir[0] = 0;

  /* the real functions: glibc's (another allocator in front of it is not supported) */
  void *libc = dlopen("libc.so.6", RTLD_NOW | RTLD_NOLOAD);
  if (!libc) {
    rc = 2;
    goto out;
  }
  for (size_t k = 0; k < NNAMES; k++) *names[k].real = dlsym(libc, names[k].name);
  if (!real.malloc || !real.free || !real.calloc || !real.realloc || !real.usable || !real.dlopen) {
    rc = 2;
    goto out;
  }
  Dl_info di;
  const ElfW(Sym) *sy = NULL;
  void *first = dlsym(RTLD_DEFAULT, "malloc");
  if (first && dladdr1(first, &di, (void **)&sy, RTLD_DL_SYMENT) && sy && sy->st_shndx != SHN_UNDEF &&
      first != (void *)real.malloc) {
    rc = 2;
    goto out;
  }
  if (dladdr((void *)lg_agent_start, &di)) {
    self_base = (uintptr_t)di.dli_fbase;
    size_t k = di.dli_fname ? strlen(di.dli_fname) : 0;
    if (k && k < sizeof self_path) memcpy(self_path, di.dli_fname, k + 1);
    if (!py_quotable(self_path)) self_path[0] = 0;
  }
  *(void **)&find_object = dlsym(libc, "_dl_find_object");
  void *in_rtld = dlsym(RTLD_DEFAULT, "__tls_get_addr");
  if (in_rtld && dladdr(in_rtld, &di)) rtld_base = (uintptr_t)di.dli_fbase;
  struct link_map *lm = NULL;
  if (dladdr1((void *)lg_agent_start, &di, (void **)&lm, RTLD_DL_LINKMAP) && lm) self_base = lm->l_addr;

  if (!slots) slots = (slot_t *)lgi_pages_alloc(MAX_SLOTS * sizeof(slot_t));
  if (!live_objs) live_objs = (uintptr_t *)lgi_pages_alloc(MAX_OBJS * sizeof(uintptr_t));
  if (!slots || !live_objs || (!stripes[0].e && table_init() != 0)) {
    rc = 3;
    goto out;
  }
  lgi_unwind_init();
  lgi_python_detect();
  if (lgi_region_create(lgi_g.depth, lgi_g.sample_bytes, cfg_num(cfg, "mmap=", 1) ? LG_RF_MMAP : 0) != 0) {
    rc = 3;
    goto out;
  }
  if (lgi_send_hello(LG_HELLO_START) < 0) {
    rc = 4;
    goto out;
  }
  if (cli > 0) cli_pidfd = (int)syscall(SYS_pidfd_open, cli, 0);
  static int once;
  if (!once) {
    once = 1;
    pthread_key_create(&thread_key, lgi_thread_exit);
    pthread_atfork(NULL, NULL, atfork_child);
  }
  lgi_g.enabled = 1;
  /* patch everything with recording off, then record */
  rescan();
  __atomic_store_n(&stats.state, 1, __ATOMIC_SEQ_CST);
  rescan(); /* objects loaded meanwhile */
  atomic_store(&recording, 1);
  pthread_t th;
  pthread_attr_t at;
  pthread_attr_init(&at);
  pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
  atomic_store(&watcher_running, 1);
  if (pthread_create(&th, &at, watcher, NULL) != 0) {
    atomic_store(&watcher_running, 0);
    detach("cannot start the watcher thread");
    rc = 5;
  }
  pthread_attr_destroy(&at);
  if (!rc) rc = (uintptr_t)&stats;
out:
  atomic_store(&starting, 0);
  lgi_tls.guard--;
  return rc;
}

/* For tests and gdb: detach now (what the watcher does when the collector ends). */
LG_API void lg_agent_detach(void);
LG_API void lg_agent_detach(void) { detach(NULL); }
