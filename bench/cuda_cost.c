/* SPDX-License-Identifier: MIT */
/*
 * cuda_cost.c - cost of a recorded cuMemAlloc/cuMemFree pair (issue #9), on the
 * stand-in driver (tests/cuda/standin_cuda.c) or, with LD_LIBRARY_PATH pointing at a
 * real driver, on a GPU. Not a test: bench/cuda_cost.sh runs it bare, with the
 * library preloaded but nothing recorded, and under `leakguard run`.
 *   cuda_cost [PAIRS]    (default 100000)
 * Prints "cuda_cost: pairs=N sync_ns=X async_ns=Y" (ns per allocate + free pair,
 * cuMemAlloc_v2/cuMemFree_v2 and cuMemAllocAsync/cuMemFreeAsync, best of 3 passes).
 * Every pair comes from the same call site, so the recorder's stack capture is a
 * verified cache hit (its cost is measured on its own by micro_unwind).
 */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

typedef int CUresult;
typedef unsigned long long CUdeviceptr;
typedef void *CUcontext;
CUresult cuInit(unsigned flags);
CUresult cuCtxCreate_v2(CUcontext *c, unsigned flags, int dev);
CUresult cuMemAlloc_v2(CUdeviceptr *p, size_t n);
CUresult cuMemFree_v2(CUdeviceptr p);
CUresult cuMemAllocAsync(CUdeviceptr *p, size_t n, void *stream);
CUresult cuMemFreeAsync(CUdeviceptr p, void *stream);
CUresult cuStreamSynchronize(void *stream);

static double now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

#define CHECK(x)                                                                                                       \
  do {                                                                                                                 \
    if ((x) != 0) {                                                                                                    \
      fprintf(stderr, "cuda_cost: %s failed\n", #x);                                                                   \
      exit(1);                                                                                                         \
    }                                                                                                                  \
  } while (0)

static double pass_sync(long n) {
  CUdeviceptr d;
  double t0 = now_ns();
  for (long i = 0; i < n; i++) {
    CHECK(cuMemAlloc_v2(&d, 1 << 20));
    CHECK(cuMemFree_v2(d));
  }
  return (now_ns() - t0) / (double)n;
}

static double pass_async(long n) {
  CUdeviceptr d;
  double t0 = now_ns();
  for (long i = 0; i < n; i++) {
    CHECK(cuMemAllocAsync(&d, 1 << 20, NULL));
    CHECK(cuMemFreeAsync(d, NULL));
  }
  CHECK(cuStreamSynchronize(NULL));
  return (now_ns() - t0) / (double)n;
}

int main(int argc, char **argv) {
  long n = argc > 1 ? atol(argv[1]) : 100000;
  CUcontext c;
  CHECK(cuInit(0));
  CHECK(cuCtxCreate_v2(&c, 0, 0));
  pass_sync(n / 10 + 1); /* warm: driver tables, the recorder's caches */
  pass_async(n / 10 + 1);
  double s = 1e30, a = 1e30;
  for (int k = 0; k < 3; k++) {
    double x = pass_sync(n), y = pass_async(n);
    if (x < s) s = x;
    if (y < a) a = y;
  }
  printf("cuda_cost: pairs=%ld sync_ns=%.1f async_ns=%.1f\n", n, s, a);
  return 0;
}
