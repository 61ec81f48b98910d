/* SPDX-License-Identifier: MIT */
/*
 * gpu_driver.c - the driver API way in, for scripts/gpu-check.sh (linked with -lcuda;
 * not built by CMake). Declares what it uses (no cuda.h needed).
 *   gpu_driver leak SECONDS     keeps a 1 MiB cuMemAlloc_v2 per step   (LEAK:driver)
 *   gpu_driver control SECONDS  a ring of 8 in-flight buffers: no leak
 *   gpu_driver exact            9 x 1 MiB kept (KEEP:driver), 4 x 2 MiB freed; 1.5 s hold
 */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

typedef int CUresult;
typedef unsigned long long CUdeviceptr;
typedef void *CUcontext;
CUresult cuInit(unsigned flags);
CUresult cuDevicePrimaryCtxRetain(CUcontext *c, int dev);
CUresult cuCtxSetCurrent(CUcontext c);
CUresult cuMemAlloc_v2(CUdeviceptr *p, size_t n);
CUresult cuMemFree_v2(CUdeviceptr p);

#define CK(x)                                                \
  do {                                                       \
    CUresult e_ = (x);                                       \
    if (e_) {                                                \
      fprintf(stderr, "gpu_driver: %s: %d\n", #x, e_);       \
      exit(1);                                               \
    }                                                        \
  } while (0)

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec / 1e9;
}

static __attribute__((noinline, noipa)) void leak(CUdeviceptr *d) {
  CK(cuMemAlloc_v2(d, 1 << 20)); /* LEAK:driver */
}

static __attribute__((noinline, noipa)) void keep(CUdeviceptr *d) { /* noipa: not folded with leak() */
  CK(cuMemAlloc_v2(d, 1 << 20)); /* KEEP:driver */
}

int main(int argc, char **argv) {
  const char *m = argc > 1 ? argv[1] : "";
  double secs = argc > 2 ? atof(argv[2]) : 4;
  CUcontext c;
  CUdeviceptr d, ring[8] = {0};
  unsigned long long (*step)(void) = (unsigned long long (*)(void))dlsym(RTLD_DEFAULT, "leakguard_step");
  CK(cuInit(0));
  CK(cuDevicePrimaryCtxRetain(&c, 0));
  CK(cuCtxSetCurrent(c));
  if (!strcmp(m, "leak") || !strcmp(m, "control")) {
    long n = 0;
    for (double end = now_s() + secs; now_s() < end; n++) {
      if (!strcmp(m, "leak")) leak(&d);
      else {
        if (ring[n % 8]) CK(cuMemFree_v2(ring[n % 8]));
        CK(cuMemAlloc_v2(&ring[n % 8], 1 << 20));
      }
      if (step) step();
      usleep(10000);
    }
    printf("gpu_driver: mode=%s steps=%ld\n", m, n);
  } else if (!strcmp(m, "exact")) {
    for (int i = 0; i < 9; i++) keep(&d);
    for (int i = 0; i < 4; i++) {
      CK(cuMemAlloc_v2(&d, 2 << 20));
      CK(cuMemFree_v2(d));
    }
    usleep(1500000);
    printf("gpu_driver: mode=exact exact_bytes=%d exact_blocks=9\n", 9 << 20);
  } else {
    fprintf(stderr, "usage: gpu_driver leak|control SECONDS | exact\n");
    return 2;
  }
  return 0;
}
