/* SPDX-License-Identifier: MIT */
/*
 * shapes.c - lgc-scn-shapes: a real program whose heap follows one memory shape, to
 * record labelled series for the pattern classifier (tools/classify-data/recorded,
 * made by tools/classify/record.sh under `leakguard run`).
 *
 * Usage: lgc-scn-shapes MODE TICKS TICK_MS SEED
 * Every tick replaces 32 of the 256 blocks of a ~8 MiB working set (churn, so live bytes are
 * never perfectly flat), then does what MODE says, then sleeps TICK_MS ms:
 *   stable        nothing more
 *   linear        keeps one 64 KiB block per tick (a list that grows per step)
 *   late-linear   the same, from the middle third of the run on
 *   linear-churn  keeps 24 KiB per tick under 8 MiB batches freed every 15 ticks
 *   accel         keeps tick * 3 KiB per tick (a structure chained on itself)
 *   step          keeps 3 MiB once per epoch (TICKS / 6 ticks)
 *   plateau       a cache of 128 KiB entries, bounded at TICKS * 0.35 entries (LRU)
 *   sawtooth      adds 512 KiB per tick to a batch, frees the batch every 12 ticks
 *   frag          every other tick, a new thread allocates 3 MiB of 1 KiB blocks, keeps
 *                 one 32-byte block allocated after them and frees the rest, then
 *                 parks: glibc cannot trim its arena below the survivor, so resident
 *                 memory grows while live bytes stay flat
 * All memory is written so that it is resident. SEED varies sizes and timing.
 */
#include <malloc.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static unsigned long long rng_state;

static unsigned rnd(void) {
  rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
  return (unsigned)(rng_state >> 33);
}

static void *xmalloc(size_t n) {
  char *p = malloc(n);
  if (!p) {
    perror("malloc");
    exit(1);
  }
  memset(p, (int)(n & 0xff) | 1, n);
  return p;
}

static void sleep_ms(int ms) {
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

/* A singly linked list of kept blocks. */
typedef struct node {
  struct node *next;
} node_t;

static node_t *keep(node_t *head, size_t n) {
  node_t *b = xmalloc(n < sizeof(node_t) ? sizeof(node_t) : n);
  b->next = head;
  return b;
}

static void free_all(node_t *head) {
  while (head) {
    node_t *next = head->next;
    free(head);
    head = next;
  }
}

static pthread_mutex_t park_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t park_cv = PTHREAD_COND_INITIALIZER;
static void *survivors[4096];
static int nsurvivors;

/* frag worker: burst, survivor, free the burst, park forever. */
static void *frag_worker(void *arg) {
  (void)arg;
  enum { NB = 3072 };
  static __thread void *burst[NB];
  for (int i = 0; i < NB; i++) burst[i] = xmalloc(1024);
  void *s = xmalloc(32);
  for (int i = 0; i < NB; i++) free(burst[i]);
  pthread_mutex_lock(&park_mu);
  if (nsurvivors < 4096) survivors[nsurvivors++] = s;
  for (;;) pthread_cond_wait(&park_cv, &park_mu);
  return NULL;
}

int main(int argc, char **argv) {
  if (argc != 5) {
    fprintf(stderr, "usage: lgc-scn-shapes MODE TICKS TICK_MS SEED\n");
    return 2;
  }
  const char *mode = argv[1];
  int ticks = atoi(argv[2]), tick_ms = atoi(argv[3]);
  rng_state = strtoull(argv[4], NULL, 10) * 2654435761ull + 1;
  if (ticks < 8 || tick_ms < 0) return 2;
  if (!strcmp(mode, "frag")) mallopt(M_ARENA_MAX, 1024);

  enum { WS = 256 };
  void *ws[WS];
  for (int i = 0; i < WS; i++) ws[i] = xmalloc(1024 + rnd() % (64 * 1024));
  node_t *kept = NULL, *batch = NULL;
  node_t *cache_head = NULL; /* newest first; evict from the tail */
  int cache_n = 0, cache_cap = (int)(ticks * (0.3 + (rnd() % 10) / 100.0));
  int epoch = ticks / 6 > 1 ? ticks / 6 : 2;
  int phase = (int)(rnd() % 5);

  for (int t = 0; t < ticks; t++) {
    for (int k = 0; k < 32; k++) { /* churn: an eighth of the working set per tick */
      int i = (int)(rnd() % WS);
      free(ws[i]);
      ws[i] = xmalloc(1024 + rnd() % (64 * 1024));
    }
    if (!strcmp(mode, "linear")) {
      kept = keep(kept, 64 * 1024);
    } else if (!strcmp(mode, "late-linear")) {
      if (t >= ticks / 3 + phase) kept = keep(kept, 64 * 1024);
    } else if (!strcmp(mode, "linear-churn")) {
      kept = keep(kept, 24 * 1024);
      batch = keep(batch, 512 * 1024);
      if ((t + phase) % 15 == 14) {
        free_all(batch);
        batch = NULL;
      }
    } else if (!strcmp(mode, "accel")) {
      kept = keep(kept, (size_t)(t + 1) * 3 * 1024);
    } else if (!strcmp(mode, "step")) {
      if ((t + phase) % epoch == epoch - 1) kept = keep(kept, 3 << 20);
    } else if (!strcmp(mode, "plateau")) {
      cache_head = keep(cache_head, 128 * 1024);
      if (++cache_n > cache_cap) { /* evict the oldest entry */
        node_t **pp = &cache_head;
        while ((*pp)->next) pp = &(*pp)->next;
        free(*pp);
        *pp = NULL;
        cache_n--;
      }
    } else if (!strcmp(mode, "sawtooth")) {
      batch = keep(batch, 512 * 1024);
      if ((t + phase) % 12 == 11) {
        free_all(batch);
        batch = NULL;
      }
    } else if (!strcmp(mode, "frag")) {
      if (t % 2 == 0) {
        pthread_t th;
        pthread_attr_t at;
        pthread_attr_init(&at);
        pthread_attr_setstacksize(&at, 64 * 1024);
        if (!pthread_create(&th, &at, frag_worker, NULL)) pthread_detach(th);
        pthread_attr_destroy(&at);
      }
    } else if (strcmp(mode, "stable")) {
      fprintf(stderr, "lgc-scn-shapes: unknown mode '%s'\n", mode);
      return 2;
    }
    sleep_ms(tick_ms);
  }
  /* Leave without tearing down: the recorder's last snapshot shows the final state. */
  fflush(stdout);
  exit(0);
}
