/* SPDX-License-Identifier: MIT */
/*
 * thread.c - the agent's side of the recorder contract (capture/recorder.h) that
 * libleakguard.so keeps in preload.c, thread.c and lifecycle.c: counting on this
 * thread's shard (lgi_count, lgi_epoch), each thread's set-up per attach
 * (lgi_thread_ready), the one-line message (lgi_say). The agent's hooks (hooks.c, the
 * Python module's pymod.c) and the shared capture files (mmap_table.c) call these; they
 * call nothing of the hooks back.
 */
#include <stdatomic.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "capture/agent/agent.h"
#include "core/hash.h"
#include "core/platform.h"

pthread_key_t lgag_thread_key;
_Atomic uint32_t lgag_session;

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

/* Each attach has a region of its own: a thread set up for an earlier one starts over
 * (its shard, stack cache and Python frame cache belong to the old region). */
static __thread uint32_t thread_session __attribute__((tls_model("initial-exec")));

int lgi_thread_ready(lgi_tls_t *t) {
  if (!lgi_g.enabled) return 0;
  uint32_t cur = atomic_load_explicit(&lgag_session, memory_order_acquire);
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
    t->rng = (uint64_t)lg_sys_gettid() * LG_HASH_GOLDEN64 + 0x632BE59BD9B4E019ULL;
    if (!t->rng) t->rng = 1;
    pthread_setspecific(lgag_thread_key, t);
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
