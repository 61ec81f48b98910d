/* SPDX-License-Identifier: MIT */
/*
 * churn - allocation-churn benchmark for the recorder (issue #2). Not a test.
 *
 * Each of T threads owns a small working set of W slots; one operation picks a slot
 * at random, frees what it holds and allocates a new block of a random size (log-
 * uniform over [min, max], default 16 B - 4 KiB) and writes its first and last byte.
 * The program runs a fixed number of operations (--ops, per thread; wall time is then
 * comparable across tools) or for a fixed time (--seconds), and prints allocations/s.
 *
 * Options:
 *   --threads T     worker threads (default 4)
 *   --ops N         allocations per thread (default: run --seconds)
 *   --seconds S     run time when --ops is not given (default 2)
 *   --ws W          working-set slots per thread (default 1024)
 *   --min B --max B block size range (default 16, 4096)
 *   --seed N        random seed (default 1)
 *   --depth D       call malloc through D extra nested frames (default 0)
 *   --jitter J      before each malloc, move the stack pointer by a random multiple of
 *                   16 bytes in [0, J*16): every allocation then comes from a new
 *                   (return address, stack pointer) pair, i.e. forces stack-cache misses
 *   --live N        memory mode: allocate N blocks of --size B (default 64) bytes in
 *                   the main thread, keep them, print /proc/self/status RSS lines, exit
 *   --size B        block size for --live
 *
 * Output (one line, key=value): threads, ops, seconds, allocs_per_s, and in every mode
 * the process's own peak RSS (VmHWM, kB) and its shared-memory RSS (RssShmem, kB).
 */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench_clock.h"

static unsigned g_threads = 4, g_ws = 1024, g_depth = 0, g_jitter = 0;
static uint64_t g_ops = 0, g_seed = 1;
static double g_seconds = 2.0;
static size_t g_min = 16, g_max = 4096;
static volatile int g_stop;
static pthread_barrier_t g_bar;

/* Log-uniform size in [g_min, g_max]: pick a power-of-two band, then a size in it. */
static inline size_t pick_size(uint64_t *s) {
  uint64_t r = rnd(s);
  unsigned lo = 63u - (unsigned)__builtin_clzll(g_min), hi = 63u - (unsigned)__builtin_clzll(g_max);
  unsigned band = lo + (unsigned)((r & 0xffff) % (hi - lo + 1));
  size_t base = (size_t)1 << band;
  size_t sz = base + (size_t)((r >> 16) % base);
  if (sz < g_min) sz = g_min;
  if (sz > g_max) sz = g_max;
  return sz;
}

static __attribute__((noinline)) void *alloc_leaf(size_t sz) {
  void *p = malloc(sz);
  __asm__ volatile("" : : "r"(p) : "memory"); /* no tail call: keep this frame */
  return p;
}

/* D nested frames above the malloc call (no tail calls, so each frame is real). */
static __attribute__((noinline)) void *alloc_deep(unsigned d, size_t sz) {
  void *p = d ? alloc_deep(d - 1, sz) : alloc_leaf(sz);
  __asm__ volatile("" : : "r"(p) : "memory");
  return p;
}

static __attribute__((noinline)) void *alloc_jitter(unsigned j, unsigned d, size_t sz) {
  char *pad = __builtin_alloca((size_t)j * 16 + 16);
  __asm__ volatile("" : : "r"(pad) : "memory");
  void *p = alloc_deep(d, sz);
  __asm__ volatile("" : : "r"(p), "r"(pad) : "memory");
  return p;
}

static inline void *alloc_one(uint64_t *s, size_t sz) {
  if (g_jitter) return alloc_jitter((unsigned)(rnd(s) % g_jitter), g_depth, sz);
  if (g_depth) return alloc_deep(g_depth - 1, sz);
  return malloc(sz);
}

typedef struct worker {
  pthread_t th;
  unsigned idx;
  uint64_t done;
  uint64_t sum;
} worker_t;

static void *work(void *arg) {
  worker_t *w = arg;
  uint64_t s = g_seed * 0x9E3779B97F4A7C15ULL + w->idx * 0xBF58476D1CE4E5B9ULL + 1;
  char **slot = calloc(g_ws, sizeof *slot);
  size_t *len = calloc(g_ws, sizeof *len);
  if (!slot || !len) abort();
  uint64_t n = 0, sum = 0;
  pthread_barrier_wait(&g_bar);
  for (;;) {
    if (g_ops) {
      if (n >= g_ops) break;
    } else if ((n & 1023) == 0 && g_stop) {
      break;
    }
    uint64_t r = rnd(&s);
    unsigned i = (unsigned)(r % g_ws);
    if (slot[i]) {
      sum += (unsigned char)slot[i][len[i] - 1];
      free(slot[i]);
    }
    size_t sz = pick_size(&s);
    char *p = alloc_one(&s, sz);
    if (!p) abort();
    p[0] = (char)r;
    p[sz - 1] = (char)(r >> 8);
    slot[i] = p;
    len[i] = sz;
    n++;
  }
  for (unsigned i = 0; i < g_ws; i++) free(slot[i]);
  free(slot);
  free(len);
  w->done = n;
  w->sum = sum;
  return NULL;
}

/* Prints the named /proc/self/status fields ("VmHWM", ...) as key=kB pairs. */
static void print_status(const char *const *keys, unsigned nkeys) {
  FILE *f = fopen("/proc/self/status", "r");
  if (!f) return;
  char line[256];
  while (fgets(line, sizeof line, f)) {
    for (unsigned k = 0; k < nkeys; k++) {
      size_t kl = strlen(keys[k]);
      if (strncmp(line, keys[k], kl) == 0 && line[kl] == ':') {
        printf(" %s_kB=%ld", keys[k], strtol(line + kl + 1, NULL, 10));
      }
    }
  }
  fclose(f);
}

static int live_mode(uint64_t n, size_t size) {
  char **v = malloc(n * sizeof *v);
  if (!v) return 1;
  for (uint64_t i = 0; i < n; i++) {
    v[i] = malloc(size);
    if (!v[i]) return 1;
    memset(v[i], (int)(i & 0xff), size);
  }
  printf("churn: live=%llu size=%zu", (unsigned long long)n, size);
  static const char *const keys[] = {"VmRSS", "VmHWM", "RssAnon", "RssFile", "RssShmem"};
  print_status(keys, 5);
  printf("\n");
  fflush(stdout);
  for (uint64_t i = 0; i < n; i++) free(v[i]);
  free(v);
  return 0;
}

static unsigned long long arg_ull(const char *s, const char *name) {
  char *end = NULL;
  unsigned long long v = strtoull(s, &end, 0);
  if (end == s || *end) {
    fprintf(stderr, "churn: bad value for %s: '%s'\n", name, s);
    exit(2);
  }
  return v;
}

int main(int argc, char **argv) {
  uint64_t live = 0;
  size_t live_size = 64;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (i + 1 >= argc) {
      fprintf(stderr, "churn: %s needs a value (see the comment at the top of churn.c)\n", a);
      return 2;
    }
    const char *v = argv[++i];
    if (!strcmp(a, "--threads")) g_threads = (unsigned)arg_ull(v, a);
    else if (!strcmp(a, "--ops")) g_ops = arg_ull(v, a);
    else if (!strcmp(a, "--seconds")) g_seconds = atof(v);
    else if (!strcmp(a, "--ws")) g_ws = (unsigned)arg_ull(v, a);
    else if (!strcmp(a, "--min")) g_min = (size_t)arg_ull(v, a);
    else if (!strcmp(a, "--max")) g_max = (size_t)arg_ull(v, a);
    else if (!strcmp(a, "--seed")) g_seed = arg_ull(v, a);
    else if (!strcmp(a, "--depth")) g_depth = (unsigned)arg_ull(v, a);
    else if (!strcmp(a, "--jitter")) g_jitter = (unsigned)arg_ull(v, a);
    else if (!strcmp(a, "--live")) live = arg_ull(v, a);
    else if (!strcmp(a, "--size")) live_size = (size_t)arg_ull(v, a);
    else {
      fprintf(stderr, "churn: unknown option %s\n", a);
      return 2;
    }
  }
  if (live) return live_mode(live, live_size);
  if (g_threads < 1 || g_ws < 1 || g_min < 1 || g_max < g_min) {
    fprintf(stderr, "churn: bad options\n");
    return 2;
  }
  worker_t *w = calloc(g_threads, sizeof *w);
  pthread_barrier_init(&g_bar, NULL, g_threads + 1);
  for (unsigned t = 0; t < g_threads; t++) {
    w[t].idx = t;
    if (pthread_create(&w[t].th, NULL, work, &w[t]) != 0) return 1;
  }
  pthread_barrier_wait(&g_bar);
  double t0 = now();
  if (!g_ops) {
    struct timespec ts = {(time_t)g_seconds, (long)((g_seconds - (double)(time_t)g_seconds) * 1e9)};
    nanosleep(&ts, NULL);
    g_stop = 1;
  }
  uint64_t total = 0, sum = 0;
  for (unsigned t = 0; t < g_threads; t++) {
    pthread_join(w[t].th, NULL);
    total += w[t].done;
    sum += w[t].sum;
  }
  double el = now() - t0;
  printf("churn: threads=%u ws=%u ops=%llu seconds=%.3f allocs_per_s=%.0f check=%llu", g_threads, g_ws,
         (unsigned long long)total, el, (double)total / el, (unsigned long long)(sum & 0xff));
  static const char *const keys[] = {"VmHWM", "RssShmem"};
  print_status(keys, 2);
  printf("\n");
  free(w);
  return 0;
}
