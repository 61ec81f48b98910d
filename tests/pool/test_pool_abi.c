/* SPDX-License-Identifier: MIT */
/*
 * test_pool_abi.c - liblgpool.so as torch's CUDAPluggableAllocator loads it: dlopen,
 * then lgpool_alloc(size, device, stream) / lgpool_free(ptr, size, device, stream),
 * configured from the environment, here on the stand-in CUDA driver, with a site
 * profile naming this program's functions (exported: -rdynamic).
 *   test_pool_abi <path of liblgpool.so> <scratch directory>
 */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "leakguard.h"

#define MiB (1024ull * 1024ull)
#define EXPECT(c, ...)                                                                                                 \
  do {                                                                                                                 \
    if (!(c)) {                                                                                                        \
      fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);                                                             \
      fprintf(stderr, __VA_ARGS__);                                                                                    \
      fputc('\n', stderr);                                                                                             \
      exit(1);                                                                                                         \
    }                                                                                                                  \
  } while (0)

static void *(*pa)(size_t, int, void *);
static void (*pf)(void *, size_t, int, void *);

/* The allocation sites of the profile (their return addresses are the sites). */
__attribute__((noinline, visibility("default"))) void *site_activation(size_t n);
__attribute__((noinline, visibility("default"))) void *site_weights(size_t n);
__attribute__((noinline, visibility("default"))) void *site_other(size_t n);
__attribute__((noinline, visibility("default"))) void *site_activation(size_t n) {
  void *p = pa(n, 0, NULL);
  __asm__ volatile("" ::: "memory"); /* no tail call: this frame stays on the stack */
  return p;
}
__attribute__((noinline, visibility("default"))) void *site_weights(size_t n) {
  void *p = pa(n, 0, NULL);
  __asm__ volatile("" ::: "memory");
  return p;
}
__attribute__((noinline, visibility("default"))) void *site_other(size_t n) {
  void *p = pa(n, 0, NULL);
  __asm__ volatile("" ::: "memory");
  return p;
}

int main(int argc, char **argv) {
  EXPECT(argc == 3, "usage: test_pool_abi LIBLGPOOL DIR");
  char prof[4096];
  snprintf(prof, sizeof prof, "%s/pool_profile.txt", argv[2]);
  FILE *f = fopen(prof, "w");
  EXPECT(f, "cannot write %s", prof);
  /* a Python line's key too: this process has no interpreter, the native keys must
   * still be found (liblgpool looks the Python line up first) */
  fprintf(f, "# site generation\nsite_activation young\nsite_weights   old\nbogus_line\n/srv/train.py:12 old\n");
  fclose(f);
  setenv("LEAKGUARD_POOL_PROFILE", prof, 1);
  setenv("LEAKGUARD_POOL_BACKEND", "cuda", 1);
  setenv("LEAKGUARD_POOL_DEFAULT_GEN", "middle", 1);
  void *h = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  EXPECT(h, "dlopen: %s", dlerror());
  *(void **)&pa = dlsym(h, "lgpool_alloc");
  *(void **)&pf = dlsym(h, "lgpool_free");
  int (*st)(int, lg_pool_stats_t *);
  *(void **)&st = dlsym(h, "lgpool_stats");
  EXPECT(pa && pf && st, "the pluggable allocator's symbols");
  void *a = site_activation(4096), *w = site_weights(4096), *o = site_other(4096);
  EXPECT(a && w && o, "allocations on the stand-in driver");
  lg_pool_stats_t s;
  EXPECT(st(0, &s) == 0, "stats of device 0");
  EXPECT(s.reserved_gen[LG_GEN_YOUNG] == 2 * MiB, "site_activation -> young (%llu)",
         (unsigned long long)s.reserved_gen[LG_GEN_YOUNG]);
  EXPECT(s.reserved_gen[LG_GEN_OLD] == 2 * MiB, "site_weights -> old");
  EXPECT(s.reserved_gen[LG_GEN_MIDDLE] == 2 * MiB, "an unknown site -> the default, middle");
  EXPECT(s.driver_allocs == 3, "three segments, %llu", (unsigned long long)s.driver_allocs);
  pf(a, 4096, 0, NULL);
  pf(w, 4096, 0, NULL);
  pf(o, 4096, 0, NULL);
  pf(o, 4096, 0, NULL); /* double free: counted, no crash */
  EXPECT(st(0, &s) == 0 && s.double_frees == 1 && s.allocated_bytes == 0, "frees");
  EXPECT(s.event_records == 3, "one event per free on the CUDA backend (%llu)", (unsigned long long)s.event_records);
  EXPECT(st(3, &s) == -2, "no pool on device 3");
  printf("ok: pluggable allocator ABI, profile sites, stand-in driver\n");
  return 0;
}
