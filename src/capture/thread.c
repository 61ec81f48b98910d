/* SPDX-License-Identifier: MIT */
/*
 * thread.c - libleakguard.so: a thread's state, set up on its first recorded call
 * (lgi_thread_ready, the slow path of every hook's countdown: preload.c,
 * mmap_table.c, gpu/table.c).
 *
 * The process's lazy init is lifecycle.c's, reached through lgi_g.process_init:
 * lifecycle.c calls into the hooks' files (their fork locks, the real allocator), and
 * the hooks reach it only through here, so no file of the hooks and the lifecycle
 * calls the other back. The attach agent has its own lgi_thread_ready
 * (agent/thread.c).
 */
#include <pthread.h>
#include <stdint.h>

#include "capture/recorder.h"
#include "core/hash.h"
#include "core/platform.h"

static pthread_key_t thread_key;

void lgi_thread_key_create(void) { pthread_key_create(&thread_key, lgi_thread_exit); }

/* A waiting image (lazy start): adds what this thread allocated since its last chunk
 * to the process's count; 1 when a threshold is reached (then recording begins). The
 * first look of a thread counts what it asked for, not a chunk it never had. */
static int lazy_due(lgi_tls_t *t) {
  uint64_t used = (uint64_t)(t->lazy_chunk - t->countdown);
  uint64_t total = atomic_fetch_add_explicit(&lgi_g.lazy_count, used, memory_order_relaxed) + used;
  return total >= lgi_g.lazy_bytes || lgi_now_ns() - lgi_g.lazy_t0 >= lgi_g.lazy_ns;
}

/* Slow path of the per-thread countdown: initialises the process and the thread (and
 * looks at a waiting image's lazy start). Returns 1 when this allocation is to be
 * recorded. */
int lgi_thread_ready(lgi_tls_t *t) {
  if (!lgi_g.process_init()) return 0; /* too early, or another thread is initialising */
  if (!lgi_g.enabled && (!lgi_g.lazy || t->guard || !lazy_due(t) || !lgi_g.process_begin())) {
    if (lgi_g.lazy) t->lazy_chunk = t->countdown = LGI_LAZY_CHUNK; /* the next look */
    else t->countdown = INT64_MAX;
    return 0;
  }
  if (t->state == 0) {
    t->guard++;
    t->state = 1;
    t->rng = (uint64_t)lg_sys_gettid() * LG_HASH_GOLDEN64 + 0x632BE59BD9B4E019ULL;
    pthread_setspecific(thread_key, t);
    lgi_shard_acquire(t);
    lgi_unwind_thread_start(t);
    t->guard--;
  }
  return 1;
}
