/* SPDX-License-Identifier: MIT */
/*
 * cuda_rtsim.c - a program of the static CUDA runtime's shape (tests only): its
 * "runtime" is cuda_rtsim_rt.c, compiled without debug information as
 * libcudart_static.a is. Two call sites of each runtime function leak device memory
 * at different rates; each must come out as a suspect of its own, at its own line,
 * not as one site inside the runtime.
 *   cuda_rtsim named SECONDS   cudaMalloc -> libcudart_static_<sha1> (CUDA 13 names)
 *   cuda_rtsim anon SECONDS    cudaStreamCreateWithPriority -> unnamed internals
 * Prints "cuda_rtsim: mode=M steps=N".
 */
#include "cuda_common.h"

int cudaMalloc(void **p, size_t n);
int cudaStreamCreateWithPriority(void **s, unsigned flags, int prio);

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

#define RT(x)                                                  \
  do {                                                         \
    if ((x) != 0) {                                            \
      fprintf(stderr, "cuda_rtsim: %s failed\n", #x);          \
      exit(3);                                                 \
    }                                                          \
  } while (0)

static NOINLINE __attribute__((noipa)) void named_a(void) {
  void *p;
  RT(cudaMalloc(&p, 1 << 20)); /* LEAK:rt_named_a */
}
static NOINLINE __attribute__((noipa)) void named_b(void) {
  void *p;
  RT(cudaMalloc(&p, 1 << 19)); /* LEAK:rt_named_b */
}
static NOINLINE __attribute__((noipa)) void anon_a(void) {
  void *s;
  RT(cudaStreamCreateWithPriority(&s, 0, 0)); /* LEAK:rt_anon_a */
}
static NOINLINE __attribute__((noipa)) void anon_b(void) {
  void *s;
  RT(cudaStreamCreateWithPriority(&s, 1, -1)); /* LEAK:rt_anon_b */
}

int main(int argc, char **argv) {
  const char *m = argc > 1 ? argv[1] : "";
  double secs = argc > 2 ? atof(argv[2]) : 3;
  int named = !strcmp(m, "named");
  if (!named && strcmp(m, "anon")) {
    fprintf(stderr, "usage: cuda_rtsim named|anon SECONDS\n");
    return 2;
  }
  CUcontext c;
  CHECK(cuInit(0));
  CHECK(cuCtxCreate_v2(&c, 0, 0));
  long n = 0;
  for (double end = now_s() + secs; now_s() < end; n++) {
    if (named) named_a(), named_b();
    else anon_a(), anon_b();
    step();
    sleep_ms(10);
  }
  printf("cuda_rtsim: mode=%s steps=%ld\n", m, n);
  return fails;
}
