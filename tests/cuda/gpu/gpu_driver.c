/* SPDX-License-Identifier: MIT */
/*
 * gpu_driver.c - the driver API way in, for scripts/gpu-check.sh (linked with -lcuda:
 * the real driver on a GPU, the tests' stand-in elsewhere; not built by CMake).
 * Declares what it uses (no cuda.h needed).
 *   gpu_driver leak SECONDS     keeps a 1 MiB cuMemAlloc_v2 per step   (LEAK:driver)
 *   gpu_driver control SECONDS  a ring of 8 in-flight buffers: no leak
 *   gpu_driver exact            9 x 1 MiB device kept (KEEP:driver), 4 x 2 MiB freed,
 *                               3 x 512 KiB pinned kept (KEEP:driver_pinned), 2 x 4 MiB
 *                               managed kept (KEEP:driver_managed); holds them 1.5 s
 *   gpu_driver managed PTX      64 MiB managed, touched by the host, then by the kernel
 *                               "touch" of the PTX file (tests/cuda/gpu/touch.cu) in a
 *                               loop: page faults and migrations (--cuda-um)
 * Prints "gpu_driver: key=value ..." lines; exit 1 on a CUDA error.
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
typedef void *CUmodule;
typedef void *CUfunction;
CUresult cuInit(unsigned flags);
CUresult cuDevicePrimaryCtxRetain(CUcontext *c, int dev);
CUresult cuCtxSetCurrent(CUcontext c);
CUresult cuCtxSynchronize(void);
CUresult cuMemAlloc_v2(CUdeviceptr *p, size_t n);
CUresult cuMemFree_v2(CUdeviceptr p);
CUresult cuMemAllocHost_v2(void **p, size_t n);
CUresult cuMemAllocManaged(CUdeviceptr *p, size_t n, unsigned flags);
CUresult cuModuleLoad(CUmodule *m, const char *path);
CUresult cuModuleGetFunction(CUfunction *f, CUmodule m, const char *name);
CUresult cuLaunchKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                        unsigned shmem, void *stream, void **params, void **extra);

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

static __attribute__((noinline, noipa)) void keep_pinned(void **p) {
  CK(cuMemAllocHost_v2(p, 512 << 10)); /* KEEP:driver_pinned */
}

static __attribute__((noinline, noipa)) void keep_managed(CUdeviceptr *d) {
  CK(cuMemAllocManaged(d, 4 << 20, 1 /* CU_MEM_ATTACH_GLOBAL */)); /* KEEP:driver_managed */
}

static __attribute__((noinline, noipa)) CUdeviceptr um_buffer(size_t n) {
  CUdeviceptr d;
  CK(cuMemAllocManaged(&d, n, 1)); /* KEEP:driver_um */
  return d;
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
    void *p;
    for (int i = 0; i < 3; i++) keep_pinned(&p);
    for (int i = 0; i < 2; i++) keep_managed(&d);
    usleep(1500000);
    printf("gpu_driver: mode=exact exact_bytes=%d exact_blocks=9 pinned_bytes=%d pinned_blocks=3 managed_bytes=%d "
           "managed_blocks=2\n", 9 << 20, 3 * (512 << 10), 2 * (4 << 20));
  } else if (!strcmp(m, "managed") && argc > 2) {
    CUmodule mod;
    CUfunction fn;
    CK(cuModuleLoad(&mod, argv[2]));
    CK(cuModuleGetFunction(&fn, mod, "touch"));
    size_t n = (64 << 20) / sizeof(float);
    CUdeviceptr a = um_buffer(n * sizeof(float));
    float *h = (float *)(unsigned long)a;
    for (int r = 0; r < 4; r++) {
      for (size_t i = 0; i < n; i += 1024) h[i] = (float)r; /* host touches: pages migrate back */
      void *params[] = {&a, &n};
      CK(cuLaunchKernel(fn, 256, 1, 1, 256, 1, 1, 0, NULL, params, NULL));
      CK(cuCtxSynchronize());
    }
    printf("gpu_driver: mode=managed bytes=%zu rounds=4\n", n * sizeof(float));
  } else {
    fprintf(stderr, "usage: gpu_driver leak|control SECONDS | exact | managed PTX\n");
    return 2;
  }
  return 0;
}
