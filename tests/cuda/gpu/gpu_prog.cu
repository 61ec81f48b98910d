// SPDX-License-Identifier: MIT
/*
 * gpu_prog.cu - programs for scripts/gpu-check.sh on a real GPU (not built by CMake:
 * the script builds it with nvcc, with the static cudart, nvcc's default, and the
 * shared one).
 *   gpu_prog leak SECONDS      keeps a 1 MiB cudaMalloc per step           (LEAK:sync)
 *   gpu_prog async SECONDS     keeps a 1 MiB cudaMallocAsync per step      (LEAK:async)
 *   gpu_prog control SECONDS   a ring of 8 in-flight buffers: no leak
 *   gpu_prog exact             7 x 3 MiB kept (KEEP:exact), 5 x 2 MiB freed, 3 x 512 KiB
 *                              pinned kept (KEEP:pinned), 2 x 4 MiB managed kept
 *                              (KEEP:managed); holds them 1.5 s, then exits
 *   gpu_prog pairs N           N cudaMalloc/cudaFree pairs of 1 MiB: prints ns per pair
 *   gpu_prog managed           64 MiB managed, touched by the host then by a kernel
 *                              in a loop (page faults and migrations)
 * Prints "gpu_prog: key=value ..." lines; exit 1 on a CUDA error.
 */
#include <cuda_runtime.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define CK(x)                                                                           \
  do {                                                                                  \
    cudaError_t e_ = (x);                                                               \
    if (e_ != cudaSuccess) {                                                            \
      fprintf(stderr, "gpu_prog: %s: %s (%d)\n", #x, cudaGetErrorString(e_), (int)e_); \
      exit(1);                                                                          \
    }                                                                                   \
  } while (0)

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec / 1e9;
}

static __attribute__((noinline)) void *leak_sync(void) {
  void *p;
  CK(cudaMalloc(&p, 1 << 20)); /* LEAK:sync */
  return p;
}

static __attribute__((noinline)) void *leak_async(cudaStream_t s) {
  void *p;
  CK(cudaMallocAsync(&p, 1 << 20, s)); /* LEAK:async */
  return p;
}

static __attribute__((noinline)) void *keep_exact(void) {
  void *p;
  CK(cudaMalloc(&p, 3 << 20)); /* KEEP:exact */
  return p;
}

static __attribute__((noinline)) void *keep_pinned(void) {
  void *p;
  CK(cudaMallocHost(&p, 512 << 10)); /* KEEP:pinned */
  return p;
}

static __attribute__((noinline)) void *keep_managed(void) {
  void *p;
  CK(cudaMallocManaged(&p, 4 << 20)); /* KEEP:managed */
  return p;
}

__global__ void touch(float *a, size_t n) {
  for (size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)blockDim.x * gridDim.x) a[i] += 1.0f;
}

int main(int argc, char **argv) {
  const char *m = argc > 1 ? argv[1] : "";
  double secs = argc > 2 ? atof(argv[2]) : 4;
  /* the step marker, when recorded (no link dependency) */
  unsigned long long (*step)(void) = (unsigned long long (*)(void))dlsym(RTLD_DEFAULT, "leakguard_step");
  /* The runtime's initialisation (context, its own allocations) here, not inside the
   * first marked call: the marked sites hold exactly what they allocate. */
  if (strcmp(m, "pairs")) CK(cudaFree(0));
  if (!strcmp(m, "leak") || !strcmp(m, "async") || !strcmp(m, "control")) {
    cudaStream_t s;
    CK(cudaStreamCreate(&s));
    void *ring[8] = {0};
    long n = 0;
    for (double end = now_s() + secs; now_s() < end; n++) {
      if (!strcmp(m, "leak")) leak_sync();
      else if (!strcmp(m, "async")) leak_async(s);
      else {
        if (ring[n % 8]) CK(cudaFree(ring[n % 8]));
        CK(cudaMalloc(&ring[n % 8], 1 << 20));
      }
      if (step) step();
      usleep(10000);
    }
    CK(cudaStreamSynchronize(s));
    printf("gpu_prog: mode=%s steps=%ld\n", m, n);
  } else if (!strcmp(m, "exact")) {
    for (int i = 0; i < 7; i++) keep_exact();
    for (int i = 0; i < 5; i++) {
      void *p;
      CK(cudaMalloc(&p, 2 << 20));
      CK(cudaFree(p));
    }
    for (int i = 0; i < 3; i++) keep_pinned();
    for (int i = 0; i < 2; i++) keep_managed();
    CK(cudaDeviceSynchronize());
    usleep(1500000);
    printf("gpu_prog: mode=exact exact_bytes=%d exact_blocks=7 pinned_bytes=%d pinned_blocks=3 managed_bytes=%d "
           "managed_blocks=2\n", 7 * (3 << 20), 3 * (512 << 10), 2 * (4 << 20));
  } else if (!strcmp(m, "pairs")) {
    long n = argc > 2 ? atol(argv[2]) : 100000;
    void *p;
    CK(cudaMalloc(&p, 1 << 20)); /* context and caches warm */
    CK(cudaFree(p));
    double t0 = now_s();
    for (long i = 0; i < n; i++) {
      CK(cudaMalloc(&p, 1 << 20));
      CK(cudaFree(p));
    }
    printf("gpu_prog: mode=pairs pairs=%ld ns_per_pair=%.1f\n", n, (now_s() - t0) * 1e9 / n);
  } else if (!strcmp(m, "managed")) {
    size_t n = (64 << 20) / sizeof(float);
    float *a;
    CK(cudaMallocManaged(&a, n * sizeof(float)));
    for (int r = 0; r < 4; r++) {
      for (size_t i = 0; i < n; i += 1024) a[i] = (float)r; /* host touches: pages migrate back */
      touch<<<256, 256>>>(a, n);
      CK(cudaDeviceSynchronize());
    }
    printf("gpu_prog: mode=managed bytes=%zu rounds=4\n", n * sizeof(float));
  } else {
    fprintf(stderr, "usage: gpu_prog leak|async|control SECONDS | exact | pairs N | managed\n");
    return 2;
  }
  return 0;
}
