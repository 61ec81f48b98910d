/* SPDX-License-Identifier: MIT */
/* The clock and the random numbers the benchmark programs share (churn, heap_scaling,
 * micro_transport, micro_unwind). Not part of leakguard. */
#ifndef LG_BENCH_CLOCK_H
#define LG_BENCH_CLOCK_H
#include <stdint.h>
#include <time.h>

/* Monotonic seconds. */
static inline double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* xorshift64: the next number of the stream in *s (never 0 when *s starts non-zero). */
static inline uint64_t rnd(uint64_t *s) {
  uint64_t x = *s;
  x ^= x << 13;
  x ^= x >> 7;
  x ^= x << 17;
  return *s = x;
}
#endif
