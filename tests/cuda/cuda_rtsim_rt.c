/* SPDX-License-Identifier: MIT */
/*
 * cuda_rtsim_rt.c - stands for the CUDA runtime linked statically (tests only; part
 * of cuda_rtsim, compiled WITHOUT debug information, like libcudart_static.a).
 *
 * nvcc links libcudart statically by default. CUDA 13's static runtime names its
 * internal functions libcudart_static_<sha1>, and cudaMalloc reaches the driver
 * through them (cudaMalloc calls libcudart_static_76a125a7...). No allocation of the
 * real static runtime can run on the stand-in driver (its initialisation needs the
 * real driver's private tables), so this file rebuilds the shape of its stacks:
 *   cudaMalloc -> libcudart_static_<sha1> -> cuMemAlloc_v2          (the names of CUDA 13)
 *   cudaStreamCreateWithPriority -> rt_9c1f04e2 -> rt_5d7a31b0 -> cuMemAlloc_v2
 *       (internals with names no rule knows: an API call that allocates inside)
 * Every call is followed by a barrier, so none becomes a tail call (the frames stay).
 */
#include "lgcuda.h"

#define BARRIER() __asm__ volatile("" ::: "memory")
#define NOINLINE __attribute__((noinline, noipa))

int cudaMalloc(void **p, size_t n);
int cudaStreamCreateWithPriority(void **s, unsigned flags, int prio);

/* CUDA 13 names, as nm shows them in a program nvcc linked (local symbols). */
static NOINLINE int libcudart_static_76a125a71b5a557a55dda5b7bcab25d92df5527b(CUdeviceptr *d, size_t n) {
  int r = cuMemAlloc_v2(d, n);
  BARRIER();
  return r;
}

NOINLINE int cudaMalloc(void **p, size_t n) {
  CUdeviceptr d = 0;
  int r = libcudart_static_76a125a71b5a557a55dda5b7bcab25d92df5527b(&d, n);
  BARRIER();
  *p = (void *)(unsigned long)d;
  return r;
}

/* Internals whose names no rule knows. */
static NOINLINE int rt_5d7a31b0(CUdeviceptr *d, size_t n) {
  int r = cuMemAlloc_v2(d, n);
  BARRIER();
  return r;
}

static NOINLINE int rt_9c1f04e2(CUdeviceptr *d, size_t n) {
  int r = rt_5d7a31b0(d, n);
  BARRIER();
  return r;
}

/* An API call that allocates device memory inside (here: 256 KiB << flags). */
NOINLINE int cudaStreamCreateWithPriority(void **s, unsigned flags, int prio) {
  CUdeviceptr d = 0;
  int r = rt_9c1f04e2(&d, (size_t)256 * 1024 << (flags & 3));
  BARRIER();
  *s = (void *)(unsigned long)d;
  (void)prio;
  return r;
}
