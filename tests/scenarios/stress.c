/* SPDX-License-Identifier: MIT */
/*
 * stress - exactness stress test for the recorder.
 *
 * THREADS threads (default 8) each perform OPS random operations (default 500000)
 * on a private table of slots, using every allocation function: malloc, calloc,
 * realloc (grow, shrink, from NULL, to size 0), reallocarray, memalign,
 * posix_memalign, aligned_alloc, valloc, malloc(0). About one block in ten is
 * handed to another thread, which frees it (cross-thread free).
 *
 * With --leak 1, about one free in 500 is skipped: the block is leaked. The
 * program counts exactly what it leaked (requested sizes of the leaked blocks,
 * the latest size for realloc'd ones) and prints
 *   stress: ... leaked_bytes=B leaked_blocks=N
 * With --leak 0 it frees everything and the run is otherwise identical, so the
 * recorder's live bytes at exit of the two runs differ by exactly B.
 *
 * The program does not call mmap itself.
 *
 * Options: --threads N (default 8), --ops N (default 500000), --leak 0|1
 *          (default 1), --seed N, --pidfile PATH
 */
#include "scen_common.h"

#include <malloc.h>
#include <pthread.h>

struct block {
  void *p;
  size_t size;
};

#define INBOX_CAP 512

struct inbox {
  pthread_mutex_t mu;
  struct block items[INBOX_CAP];
  size_t n;
};

struct thread_state {
  pthread_t tid;
  unsigned index;
  uint64_t rng;
  unsigned long long leaked_bytes, leaked_blocks;
  unsigned long long allocs, frees, reallocs, handoffs;
};

static unsigned g_threads = 8;
static long g_ops = 500000;
static int g_leak = 1;
static struct inbox *g_inboxes;

#define SLOTS 1024

static size_t pick_size(uint64_t *rng) {
  uint64_t r = scen_range(rng, 0, 999);
  if (r < 700) return scen_range(rng, 1, 256);
  if (r < 950) return scen_range(rng, 257, 4096);
  if (r < 998) return scen_range(rng, 4097, 65536);
  return scen_range(rng, 131072, 600000); /* served by mmap inside malloc */
}

static size_t pick_align(uint64_t *rng) {
  static const size_t aligns[] = {16, 32, 64, 128, 256, 4096};
  return aligns[scen_range(rng, 0, 5)];
}

static void fill(void *p, size_t n) {
  if (p && n) scen_touch(p, n);
}

/* Allocates a block with a randomly chosen function; returns its requested size. */
static void *allocate(struct thread_state *t, size_t *out_size) {
  uint64_t *rng = &t->rng;
  size_t sz = pick_size(rng);
  void *p = NULL;
  switch (scen_range(rng, 0, 9)) {
  case 0:
  case 1:
    p = malloc(sz);
    break;
  case 2: {
    size_t n = scen_range(rng, 1, 16), m = scen_range(rng, 1, 64);
    sz = n * m;
    p = calloc(n, m);
    break;
  }
  case 3:
    p = realloc(NULL, sz);
    break;
  case 4:
    p = memalign(pick_align(rng), sz);
    break;
  case 5:
    if (posix_memalign(&p, pick_align(rng), sz) != 0) p = NULL;
    break;
  case 6: {
    size_t a = pick_align(rng);
    sz = (sz + a - 1) / a * a;
    p = aligned_alloc(a, sz);
    break;
  }
  case 7:
    if (scen_range(rng, 0, 7) == 0) {
      p = valloc(sz);
    } else {
      p = malloc(sz);
    }
    break;
  case 8: {
    size_t n = scen_range(rng, 1, 32), m = scen_range(rng, 1, 48);
    sz = n * m;
    p = reallocarray(NULL, n, m);
    break;
  }
  case 9:
    sz = 0;
    p = malloc(0);
    break;
  }
  if (!p) {
    fprintf(stderr, "stress: allocation of %zu bytes failed\n", sz);
    abort();
  }
  fill(p, sz);
  t->allocs++;
  *out_size = sz;
  return p;
}

/* Frees a block, or with --leak 1 occasionally leaks it (and counts it). */
static void release(struct thread_state *t, struct block b) {
  int unlucky = scen_range(&t->rng, 0, 499) == 0; /* drawn in both modes */
  if (g_leak && unlucky) {
    t->leaked_bytes += b.size;
    t->leaked_blocks++;
    scen_escape(b.p);
    return;
  }
  free(b.p);
  t->frees++;
}

static void drain_inbox(struct thread_state *t, struct inbox *in) {
  struct block local[INBOX_CAP];
  size_t n;
  pthread_mutex_lock(&in->mu);
  n = in->n;
  memcpy(local, in->items, n * sizeof *local);
  in->n = 0;
  pthread_mutex_unlock(&in->mu);
  for (size_t i = 0; i < n; i++) release(t, local[i]);
}

static void *thread_main(void *arg) {
  struct thread_state *t = arg;
  struct block *slots = calloc(SLOTS, sizeof *slots);
  struct inbox *mine = &g_inboxes[t->index];
  struct inbox *next = &g_inboxes[(t->index + 1) % g_threads];
  for (long op = 0; op < g_ops; op++) {
    struct block *s = &slots[scen_range(&t->rng, 0, SLOTS - 1)];
    if (!s->p) {
      s->p = allocate(t, &s->size);
      continue;
    }
    uint64_t action = scen_range(&t->rng, 0, 99);
    if (action < 55) {
      release(t, *s);
      s->p = NULL;
    } else if (action < 85) {
      /* realloc: grow or shrink, sometimes via reallocarray, sometimes to 0 */
      uint64_t kind = scen_range(&t->rng, 0, 99);
      if (kind < 3) {
        void *r = realloc(s->p, 0); /* glibc: frees, returns NULL */
        if (r) { /* other allocators may return a minimal block */
          s->p = r;
          s->size = 0;
        } else {
          s->p = NULL;
        }
        t->reallocs++;
        continue;
      }
      size_t nsz;
      void *r;
      if (kind < 25) {
        size_t n = scen_range(&t->rng, 1, 64), m = scen_range(&t->rng, 1, 64);
        nsz = n * m;
        r = reallocarray(s->p, n, m);
      } else {
        nsz = kind < 60 ? s->size + scen_range(&t->rng, 1, 2048)
                        : scen_range(&t->rng, 1, s->size ? s->size : 1);
        r = realloc(s->p, nsz);
      }
      if (!r) {
        fprintf(stderr, "stress: realloc to %zu failed\n", nsz);
        abort();
      }
      fill(r, nsz);
      s->p = r;
      s->size = nsz;
      t->reallocs++;
    } else if (action < 95) {
      /* hand the block to the next thread, which frees it */
      int sent = 0;
      pthread_mutex_lock(&next->mu);
      if (next->n < INBOX_CAP) {
        next->items[next->n++] = *s;
        sent = 1;
      }
      pthread_mutex_unlock(&next->mu);
      if (!sent) release(t, *s);
      s->p = NULL;
      t->handoffs++;
    } else {
      drain_inbox(t, mine);
    }
    if ((op & 4095) == 0) scen_step();
  }
  for (size_t i = 0; i < SLOTS; i++) {
    if (slots[i].p) {
      free(slots[i].p);
      t->frees++;
    }
  }
  free(slots);
  return NULL;
}

int main(int argc, char **argv) {
  g_threads = (unsigned)scen_opt_long(argc, argv, "--threads", NULL, 8);
  g_ops = scen_opt_long(argc, argv, "--ops", NULL, 500000);
  g_leak = (int)scen_opt_long(argc, argv, "--leak", NULL, 1);
  uint64_t seed = (uint64_t)scen_opt_long(argc, argv, "--seed", "SCEN_SEED", 1);
  if (g_threads < 1 || g_threads > 256) g_threads = 8;
  scen_write_pidfile(argc, argv);
  scen_step_init();

  g_inboxes = calloc(g_threads, sizeof *g_inboxes);
  struct thread_state *ts = calloc(g_threads, sizeof *ts);
  for (unsigned i = 0; i < g_threads; i++) {
    pthread_mutex_init(&g_inboxes[i].mu, NULL);
    ts[i].index = i;
    ts[i].rng = seed * 1000003u + i;
  }
  for (unsigned i = 0; i < g_threads; i++) pthread_create(&ts[i].tid, NULL, thread_main, &ts[i]);
  for (unsigned i = 0; i < g_threads; i++) pthread_join(ts[i].tid, NULL);

  /* Blocks still in inboxes (sent after their receiver finished): free them. */
  for (unsigned i = 0; i < g_threads; i++) {
    for (size_t k = 0; k < g_inboxes[i].n; k++) {
      free(g_inboxes[i].items[k].p);
      ts[i].frees++;
    }
    g_inboxes[i].n = 0;
    pthread_mutex_destroy(&g_inboxes[i].mu);
  }
  unsigned long long lb = 0, ln = 0, allocs = 0, frees = 0, reallocs = 0, handoffs = 0;
  for (unsigned i = 0; i < g_threads; i++) {
    lb += ts[i].leaked_bytes;
    ln += ts[i].leaked_blocks;
    allocs += ts[i].allocs;
    frees += ts[i].frees;
    reallocs += ts[i].reallocs;
    handoffs += ts[i].handoffs;
  }
  free(ts);
  free(g_inboxes);
  printf("stress: threads=%u ops=%ld allocs=%llu frees=%llu reallocs=%llu handoffs=%llu "
         "leaked_bytes=%llu leaked_blocks=%llu\n",
         g_threads, g_ops, allocs, frees, reallocs, handoffs, lb, ln);
  return 0;
}
