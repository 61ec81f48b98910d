/* SPDX-License-Identifier: MIT */
/*
 * micro_unwind - what does a stack cost? (issue #2: "libunwind or frame pointers
 * where present - measure and choose")
 *
 * --walk  In-process, no recorder: ns per stack walk from D nested frames, with
 *           libunwind-step   unw_getcontext + unw_init_local + unw_step loop reading IP
 *                            and SP (the recorder's miss path; UNW_CACHE_PER_THREAD)
 *           unw_backtrace    libunwind's IP-only fast trace
 *           glibc-backtrace  backtrace(3) (libgcc's unwinder)
 *           frame-pointer    following saved frame pointers; the D frames here are
 *                            built with frame pointers (function attribute), main and
 *                            libc are not (Debian default), so the chain stops early:
 *                            "frames" shows how much of the stack each method found.
 * --alloc Recorder cost per allocation: malloc(32)+free pairs from D nested frames,
 *           hit    always the same call chain (stack-cache hit after the first)
 *           miss   the caller's stack pointer moves by a random multiple of 16 bytes
 *                  (0..64 KiB, --jitter) before each call, so (return address, stack
 *                  pointer) is new each time: cache miss -> libunwind (the stack itself
 *                  is the same, so interning it is a lock-free lookup). The jitter is
 *                  an alloca in one frame, which the slot scan of a miss walks through
 *                  (uninitialised stack, up to 64 KiB): a smaller --jitter shows the
 *                  cost of a miss on ordinary frames.
 *         Run it bare and under `leakguard run`; the difference is the recorder's cost.
 *
 * Options: --depth D (default 8; several: --depth 4,16,48), --iters N (default 200000),
 *          --jitter BYTES (the miss case's largest stack-pointer move, default 65536),
 *          --unw-cache thread|global|none (libunwind caching policy for --walk; the
 *          recorder uses thread)
 */
#include <execinfo.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define UNW_LOCAL_ONLY
#include <libunwind.h>

#include "bench_clock.h"

#define MAXF 256

static unsigned long g_iters = 200000;
static unsigned long g_jitter = 65536; /* bytes, a multiple of 16 */
static uintptr_t g_stack_lo, g_stack_hi;

/* ------------------------------------------------------------------ walkers */

static __attribute__((noinline)) int walk_libunwind(void) {
  uint64_t ips[MAXF], sps[MAXF];
  unw_context_t ctx;
  unw_cursor_t cur;
  int n = 0;
  if (unw_getcontext(&ctx) != 0 || unw_init_local(&cur, &ctx) != 0) return 0;
  while (n < MAXF && unw_step(&cur) > 0) {
    unw_word_t ip = 0, sp = 0;
    unw_get_reg(&cur, UNW_REG_IP, &ip);
    unw_get_reg(&cur, UNW_REG_SP, &sp);
    if (!ip) break;
    ips[n] = ip;
    sps[n] = sp;
    n++;
  }
  __asm__ volatile("" : : "r"(ips), "r"(sps) : "memory");
  return n;
}

static __attribute__((noinline)) int walk_unw_backtrace(void) {
  void *ips[MAXF];
  int n = unw_backtrace(ips, MAXF);
  __asm__ volatile("" : : "r"(ips) : "memory");
  return n;
}

static __attribute__((noinline)) int walk_glibc(void) {
  void *ips[MAXF];
  int n = backtrace(ips, MAXF);
  __asm__ volatile("" : : "r"(ips) : "memory");
  return n;
}

static __attribute__((noinline, optimize("no-omit-frame-pointer"))) int walk_fp(void) {
  uint64_t ips[MAXF];
  int n = 0;
  const uintptr_t *fp = __builtin_frame_address(0);
  while (n < MAXF && (uintptr_t)fp >= g_stack_lo && (uintptr_t)fp + 16 <= g_stack_hi && ((uintptr_t)fp & 7) == 0) {
    uintptr_t ra = fp[1];
    if (!ra) break;
    ips[n++] = ra;
    const uintptr_t *next = (const uintptr_t *)fp[0];
    if (next <= fp) break;
    fp = next;
  }
  __asm__ volatile("" : : "r"(ips) : "memory");
  return n;
}

typedef int (*walker_fn)(void);
static const struct {
  const char *name;
  walker_fn fn;
} g_walkers[] = {{"libunwind-step", walk_libunwind},
                 {"unw_backtrace", walk_unw_backtrace},
                 {"glibc-backtrace", walk_glibc},
                 {"frame-pointer", walk_fp}};

static __attribute__((noinline, optimize("no-omit-frame-pointer"))) int time_walk(unsigned d, walker_fn fn,
                                                                                  double *ns) {
  if (d) {
    int n = time_walk(d - 1, fn, ns);
    __asm__ volatile("" : : "r"(n) : "memory");
    return n;
  }
  int n = fn();
  for (int w = 0; w < 1000; w++) fn(); /* warm caches */
  double t0 = now();
  for (unsigned long i = 0; i < g_iters; i++) n = fn();
  *ns = (now() - t0) * 1e9 / (double)g_iters;
  return n;
}

/* ------------------------------------------------------------------ allocations */

static __attribute__((noinline)) void *alloc_leaf(size_t sz) {
  void *p = malloc(sz);
  __asm__ volatile("" : : "r"(p) : "memory");
  return p;
}

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

static double time_alloc(unsigned d, int miss) {
  uint64_t s = 88172645463325252ULL;
  unsigned long slots = g_jitter / 16 ? g_jitter / 16 : 1;
  for (int w = 0; w < 1000; w++) free(alloc_jitter(miss ? (unsigned)(rnd(&s) % slots) : 0, d, 32));
  double t0 = now();
  for (unsigned long i = 0; i < g_iters; i++) {
    void *p = alloc_jitter(miss ? (unsigned)(rnd(&s) % slots) : 0, d, 32);
    free(p);
  }
  return (now() - t0) * 1e9 / (double)g_iters;
}

/* ------------------------------------------------------------------ main */

static void stack_bounds(void) {
  pthread_attr_t a;
  void *addr = NULL;
  size_t size = 0;
  if (pthread_getattr_np(pthread_self(), &a) == 0) {
    pthread_attr_getstack(&a, &addr, &size);
    pthread_attr_destroy(&a);
  }
  g_stack_lo = (uintptr_t)addr;
  g_stack_hi = (uintptr_t)addr + size;
}

int main(int argc, char **argv) {
  int walk = 0, alloc = 0;
  unw_caching_policy_t policy = UNW_CACHE_PER_THREAD;
  char depths[256] = "8";
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--walk")) walk = 1;
    else if (!strcmp(argv[i], "--alloc")) alloc = 1;
    else if (!strcmp(argv[i], "--depth") && i + 1 < argc) snprintf(depths, sizeof depths, "%s", argv[++i]);
    else if (!strcmp(argv[i], "--iters") && i + 1 < argc) g_iters = strtoul(argv[++i], NULL, 0);
    else if (!strcmp(argv[i], "--jitter") && i + 1 < argc) g_jitter = strtoul(argv[++i], NULL, 0);
    else if (!strcmp(argv[i], "--unw-cache") && i + 1 < argc) {
      const char *c = argv[++i];
      policy = !strcmp(c, "none") ? UNW_CACHE_NONE : !strcmp(c, "global") ? UNW_CACHE_GLOBAL : UNW_CACHE_PER_THREAD;
    } else {
      fprintf(stderr, "usage: micro_unwind (--walk | --alloc) [--depth D[,D...]] [--iters N] [--jitter BYTES] "
                      "[--unw-cache P]\n");
      return 2;
    }
  }
  if (!walk && !alloc) walk = alloc = 1;
  /* Under `leakguard run`: allocate once before pthread_getattr_np(). Otherwise the
   * main thread's first recorded malloc happens inside pthread_getattr_np (its fopen
   * of /proc/self/maps) and the recorder's own stack_bounds() calls
   * pthread_getattr_np again on the same thread: self-deadlock on the thread's lock
   * (found by this benchmark, reported in RECORDER_RESULTS.md). */
  void *volatile first = malloc(1);
  free(first);
  stack_bounds();
  unw_set_caching_policy(unw_local_addr_space, policy);
  for (char *tok = strtok(depths, ","); tok; tok = strtok(NULL, ",")) {
    unsigned d = (unsigned)strtoul(tok, NULL, 0);
    if (walk) {
      for (size_t k = 0; k < sizeof g_walkers / sizeof g_walkers[0]; k++) {
        double ns = 0;
        int n = time_walk(d, g_walkers[k].fn, &ns);
        printf("micro_unwind: walk method=%s depth=%u frames=%d ns_per_walk=%.1f\n", g_walkers[k].name, d, n, ns);
      }
    }
    if (alloc) {
      double hit = time_alloc(d, 0), miss = time_alloc(d, 1);
      printf("micro_unwind: alloc depth=%u hit_ns_per_pair=%.1f miss_ns_per_pair=%.1f\n", d, hit, miss);
    }
    fflush(stdout);
  }
  return 0;
}
