/* SPDX-License-Identifier: MIT */
/*
 * agent.h - what the files of libleakguard-agent.so share (docs/attach.md). The agent
 * is the recorder `leakguard attach` loads into a running process:
 *   start.c   lg_agent_start, the watcher thread, detach, fork
 *   hooks.c   the hooks its GOT slots point to
 *   thread.c  counting, each thread's set-up per attach (recorder.h's thread.c part)
 *   table.c   the side table (block -> site, epoch, size): blocks carry no header
 *   got.c     rewriting and restoring the GOT slots of every loaded object
 *   pymod.c   CPython's allocators wrapped, the leakguard module's import, its API
 * The capture rules of recorder.h hold in every one: no allocation through malloc in a
 * hook, no stdio, the recursion guard first.
 */
#ifndef LG_CAPTURE_AGENT_H
#define LG_CAPTURE_AGENT_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <link.h>

#include "capture/recorder.h"
#include "core/agent_abi.h"
#include "core/hash.h"

/* What the CLI reads back (core/agent_abi.h), at the address lg_agent_start returns. */
extern lg_agent_stats_t lgag_stats;

/* ------------------------------------------------------------------ hooks.c */

/* The real functions (glibc's), filled from lgag_names at start. */
typedef struct lgag_real {
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
} lgag_real_t;
extern lgag_real_t lgag_real;

/* The GOT names the agent hooks, each with its hook and its slot in lgag_real. */
typedef struct lgag_name {
  const char *name;
  void *hook;
  void **real;
} lgag_name_t;
extern const lgag_name_t lgag_names[];
extern const size_t lgag_nnames;

extern _Atomic int lgag_recording;  /* hooks record */
extern _Atomic int lgag_py_wrapped; /* CPython's allocators are wrapped (pymod.c) */
/* thread.c */
extern pthread_key_t lgag_thread_key;
extern _Atomic uint32_t lgag_session; /* one per attach: lgi_thread_ready starts a thread over */

/* Set while CPython's own allocator runs inside our wrapper of it (pm_*, below): the
 * block it hands out is recorded by the wrapper, so the malloc or the arena mmap that
 * pymalloc makes for it is not. Unlike the guard, a munmap is still seen (an arena
 * recorded before the wrapper went in is forgotten when pymalloc gives it back). */
extern __thread int lgag_py_inner __attribute__((tls_model("initial-exec")));

/* 1 when this allocation is to be recorded (sampling countdown, as preload.c). */
static inline int lgag_decide(lgi_tls_t *t, size_t size) {
  if (!atomic_load_explicit(&lgag_recording, memory_order_relaxed) || t->guard || lgag_py_inner) return 0;
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

/* Records block p of size bytes at its call site (ra0, cfa0): side table and counters. */
void lgag_record(lgi_tls_t *t, void *p, size_t size, uintptr_t ra0, uintptr_t cfa0);

/* ------------------------------------------------------------------ table.c */

#define LGAG_STRIPES 256
#define LGAG_STRIPE_CAP 16384 /* power of 2: 4 M blocks in all, 96 MiB reserved, touched as used */
typedef struct lgag_ent {
  uintptr_t key; /* 0: empty */
  uint32_t site, epoch;
  uint64_t size;
} lgag_ent_t;
typedef struct lgag_stripe {
  _Atomic uintptr_t lock; /* 0, or the holder thread's lgi_tls address */
  _Atomic uint32_t seq;   /* odd while a writer changes the stripe (lookups without the lock) */
  uint32_t n;
  lgag_ent_t *e;
} __attribute__((aligned(64))) lgag_stripe_t;
extern lgag_stripe_t lgag_stripes[LGAG_STRIPES];
/* A counting filter in front of the table: a free of a block that was not recorded (in
 * sampled mode nearly every free) reads one byte, not a random line of the 96 MiB table.
 * 0: certainly absent; 255 sticks. 64 KiB, so that it stays in the core's cache beside
 * the program's own heap: at 1 MiB that byte was a cache miss on nearly every free
 * (86 % of the hook's samples), and the churn program attached with -s 512k ran 1.6x
 * slower than bare, 1.2x at 64 KiB (BENCHMARKS.md). Sampled mode keeps few blocks in
 * the table (one per 512 KiB of live heap by default), which 65 536 counters tell
 * apart; in full mode every block is there and the table is probed anyway. */
#define LGAG_FILTER_BITS 16
extern uint8_t *lgag_filter;
static inline uint8_t *lgag_filter_of(uint64_t h) { return &lgag_filter[(h >> 40) & ((1u << LGAG_FILTER_BITS) - 1)]; }
static inline uint64_t lgag_hash_ptr(uintptr_t p) {
  uint64_t h = (uint64_t)p * LG_HASH_GOLDEN64;
  return h ^ (h >> 29);
}

/* 1 when p may be in the table. Without the lock or any store (the common case in
 * sampled mode, a free of a block that was not recorded): a probe between two equal
 * even values of the stripe's sequence saw a consistent stripe. p itself cannot be
 * inserted meanwhile: the caller is freeing it, so it is live and not being handed out. */
static inline int lgag_table_maybe(uintptr_t p) {
  uint64_t h = lgag_hash_ptr(p);
  if (!__atomic_load_n(lgag_filter_of(h), __ATOMIC_ACQUIRE)) return 0;
  lgag_stripe_t *s = &lgag_stripes[h & (LGAG_STRIPES - 1)];
  for (int tries = 0; tries < 4; tries++) {
    uint32_t q = atomic_load_explicit(&s->seq, memory_order_acquire);
    if (q & 1) continue;
    uint32_t i = (uint32_t)(h >> 8) & (LGAG_STRIPE_CAP - 1);
    uintptr_t k;
    int found = 0;
    while ((k = __atomic_load_n(&s->e[i].key, __ATOMIC_RELAXED)) != 0) {
      if (k == p) {
        found = 1;
        break;
      }
      i = (i + 1) & (LGAG_STRIPE_CAP - 1);
    }
    atomic_thread_fence(memory_order_acquire);
    if (found) return 1;
    if (atomic_load_explicit(&s->seq, memory_order_relaxed) == q) return 0;
  }
  return 1; /* busy stripe: ask under the lock */
}

/* The table's pages, reserved (0 or -1). */
int lgag_table_init(void);
/* Inserts p; *old gets a stale entry of the same address (its free was missed: a
 * pointer taken before the patch reached the real free), old->key 0 if none.
 * 0, -1 when the stripe is full, -2 inside this thread's own table operation. */
int lgag_table_put(uintptr_t p, uint32_t site, uint32_t epoch, uint64_t size, lgag_ent_t *old);
/* Removes p: 1 and *out when it was there. */
int lgag_table_take(uintptr_t p, lgag_ent_t *out);
/* Looks p up without removing it: 1 and *out when it is there (never from a hook). */
int lgag_table_find(uintptr_t p, lgag_ent_t *out);
/* Empties the table for a new attach (its pages back to the kernel). */
void lgag_table_reset(void);
/* In a fork child: every stripe lock let go (a thread of the parent may have held one). */
void lgag_table_atfork(void);

/* ------------------------------------------------------------------ got.c */

/* Pages for the slots, the objects to skip (the agent at self_base, ld.so) and
 * _dl_find_object from libc (NULL: an older glibc): 0 or -1. */
int lgag_got_prepare(void *libc, uintptr_t self_base);
/* Patches every loaded object not patched yet (recording state permitting). */
void lgag_rescan(void);
/* Puts every patched slot back. */
void lgag_restore_all(void);
/* dl_iterate_phdr's count of objects ever added. */
unsigned long long lgag_loaded_adds(void);
/* Objects the last scan left because ld.so was still loading them. */
int lgag_unready(void);
/* In a fork child: the patch lock let go. */
void lgag_got_atfork(void);

/* ------------------------------------------------------------------ pymod.c */

/* From the config: the collector's directory, the module's directory and this
 * library's path (each kept only when it can be quoted in Python source). */
void lgag_py_setup(const char *dir, const char *moddir, const char *self);
/* Watcher thread: posts the module's import once, when a known CPython runs. */
void lgag_py_post(void);
/* Watcher thread at detach: posts the pending call that puts CPython's allocators back. */
void lgag_py_post_unwrap(void);
/* A new attach: the import is posted again. */
void lgag_py_reset(void);

#endif
