/* SPDX-License-Identifier: MIT */
/* cuda_common.h - helpers of the CUDA test programs (tests/cuda). */
#ifndef LG_TESTS_CUDA_COMMON_H
#define LG_TESTS_CUDA_COMMON_H

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "lgcuda.h"

static int fails;

/* Allocation sites stay functions of their own (the tests name them). */
#define NOINLINE __attribute__((noinline))

#define CHECK(x)                                                                  \
  do {                                                                            \
    CUresult rc_ = (x);                                                           \
    if (rc_ != CUDA_SUCCESS) {                                                    \
      fprintf(stderr, "%s:%d: %s returned %d\n", __FILE__, __LINE__, #x, rc_);    \
      exit(3);                                                                    \
    }                                                                             \
  } while (0)

#define EXPECT(c, ...)                                  \
  do {                                                  \
    if (!(c)) {                                         \
      fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__); \
      fprintf(stderr, __VA_ARGS__);                     \
      fprintf(stderr, "\n");                            \
      fails++;                                          \
    }                                                   \
  } while (0)

/* 1 when p is a function in libleakguard.so (a wrapper), 0 otherwise. */
static inline int is_wrapper(void *p) {
  Dl_info di;
  return p && dladdr(p, &di) && di.dli_fname && strstr(di.dli_fname, "libleakguard") != NULL;
}

static inline void sleep_ms(long ms) {
  struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
  while (nanosleep(&ts, &ts) != 0) {
  }
}

/* The step marker, when the recorder is there (no link dependency). */
static inline void step(void) {
  static unsigned long long (*fn)(void);
  static int looked;
  if (!looked) {
    *(void **)&fn = dlsym(RTLD_DEFAULT, "leakguard_step");
    looked = 1;
  }
  if (fn) fn();
}

#endif
