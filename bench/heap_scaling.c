/* SPDX-License-Identifier: MIT */
/*
 * heap_scaling - the recorder's cost per malloc/free pair against the size of the live
 * heap (issue #32). Not a test: bench/heap_scaling.py runs it bare and under leakguard,
 * interleaved, and prints the ratios.
 *
 * The program first allocates --live N blocks of --size B bytes and keeps them (one call
 * site; with --sites K, K sites chosen round-robin through a table of distinct functions,
 * so that the live blocks' counters are spread). Then --pairs P times: --hold H blocks
 * are allocated (size log-uniform over 16 B - 1 KiB) and the oldest of them freed, so
 * that every pair allocates and frees a block that lived a little while, as a server's
 * request objects do; with --replace R (a fraction, default 0), that share of the frees
 * instead frees a random block of the live heap and allocates its replacement there:
 * the frees then touch the whole heap, as a cache's evictions do. With --chase 1 each
 * pick waits for the previous one's block: the misses no longer overlap. --pad N adds
 * N rounds of register-only work (~4 instructions each) per evicting pair, bare: the
 * price of a hook's instructions between the program's misses, without a hook.
 *
 * Output (one line, key=value): live, pairs, churn_s (the pair loop alone, monotonic
 * clock), ns_per_pair, build_s (allocating the live heap), rss_kb.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench_clock.h"

static inline size_t pick_size(uint64_t *s) {
  uint64_t r = rnd(s);
  unsigned band = 4 + (unsigned)(r % 7); /* 16 B .. 1 KiB */
  size_t lo = (size_t)1 << band;
  return lo + (size_t)((r >> 8) % lo);
}

/* K distinct allocation sites: each function is its own return address. */
#define SITE(n)                                                                                                        \
  static __attribute__((noinline)) void *site##n(size_t sz) {                                                          \
    void *p = malloc(sz);                                                                                              \
    __asm__ volatile("" ::"r"(p) : "memory");                                                                          \
    return p;                                                                                                          \
  }
SITE(0)
SITE(1)
SITE(2)
SITE(3)
SITE(4)
SITE(5)
SITE(6)
SITE(7)
static void *(*const sites[8])(size_t) = {site0, site1, site2, site3, site4, site5, site6, site7};

static __attribute__((noinline)) void *churn_alloc(size_t sz) {
  void *p = malloc(sz);
  __asm__ volatile("" ::"r"(p) : "memory");
  return p;
}

static long rss_kb(void) {
  FILE *f = fopen("/proc/self/status", "r");
  if (!f) return -1;
  char line[256];
  long kb = -1;
  while (fgets(line, sizeof line, f))
    if (!strncmp(line, "VmRSS:", 6)) kb = strtol(line + 6, NULL, 10);
  fclose(f);
  return kb;
}

int main(int argc, char **argv) {
  size_t live = 1000000, size = 64, hold = 64;
  uint64_t pairs = 5000000, seed = 1;
  unsigned nsites = 1;
  double replace = 0;
  int chase = 0;
  unsigned pad = 0;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!v) goto usage;
    if (!strcmp(a, "--live")) live = strtoull(v, NULL, 10);
    else if (!strcmp(a, "--size")) size = strtoull(v, NULL, 10);
    else if (!strcmp(a, "--pairs")) pairs = strtoull(v, NULL, 10);
    else if (!strcmp(a, "--hold")) hold = strtoull(v, NULL, 10);
    else if (!strcmp(a, "--sites")) nsites = (unsigned)strtoul(v, NULL, 10);
    else if (!strcmp(a, "--replace")) replace = strtod(v, NULL);
    else if (!strcmp(a, "--seed")) seed = strtoull(v, NULL, 10);
    else if (!strcmp(a, "--chase")) chase = atoi(v);
    else if (!strcmp(a, "--pad")) pad = (unsigned)strtoul(v, NULL, 10);
    else goto usage;
    i++;
  }
  if (!nsites || nsites > 8 || !hold || replace < 0 || replace > 1) goto usage;
  void **heap = malloc((live ? live : 1) * sizeof *heap);
  void **ring = calloc(hold, sizeof *ring);
  if (!heap || !ring) return 1;
  double t0 = now();
  for (size_t i = 0; i < live; i++) {
    heap[i] = sites[i % nsites](size);
    if (!heap[i]) return 1;
    memset(heap[i], (int)i, size < 16 ? size : 16);
  }
  double t1 = now();
  uint64_t s = seed | 1, thresh = (uint64_t)(replace * 4294967296.0);
  size_t at = 0;
  uint64_t padv = 0;
  for (uint64_t k = 0; k < pairs; k++) {
    if (live && (rnd(&s) & 0xffffffffu) < thresh) {
      size_t j = (size_t)(rnd(&s) % live);
      /* --chase 1: the next pick depends on the freed block's first byte, so that no
       * two misses overlap, bare or recorded (tells lost overlap from added work) */
      if (chase) s ^= (uint64_t)(unsigned char)*(volatile char *)heap[j] << 1;
      free(heap[j]);
      /* --pad N: N rounds of register-only work per pair (about 4 instructions each),
       * in place of a recorder's hook: what work between the misses costs alone */
      for (unsigned q = 0; q < pad; q++) {
        padv += q ^ (padv >> 3);
        __asm__ volatile("" : "+r"(padv));
      }
      heap[j] = sites[j % nsites](size);
      continue;
    }
    free(ring[at]);
    size_t sz = pick_size(&s);
    char *p = churn_alloc(sz);
    p[0] = (char)k;
    p[sz - 1] = (char)k;
    ring[at] = p;
    at = at + 1 == hold ? 0 : at + 1;
  }
  double t2 = now();
  if (padv == 42) putchar(' '); /* keeps the pad */
  printf("live=%zu pairs=%llu churn_s=%.4f ns_per_pair=%.1f build_s=%.3f rss_kb=%ld\n", live, (unsigned long long)pairs,
         t2 - t1, (t2 - t1) * 1e9 / (double)pairs, t1 - t0, rss_kb());
  for (size_t i = 0; i < hold; i++) free(ring[i]);
  for (size_t i = 0; i < live; i++) free(heap[i]);
  free(heap);
  free(ring);
  return 0;
usage:
  fprintf(stderr, "usage: heap_scaling [--live N] [--size B] [--pairs P] [--hold H] [--sites K<=8] "
                  "[--replace FRACTION] [--chase 0|1] [--pad N] [--seed N]\n");
  return 2;
}
