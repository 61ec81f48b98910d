/* SPDX-License-Identifier: MIT */
/*
 * nolibm.h - the two functions of libm that the hooks need (the sampling's
 * exponential draw and a sampled block's weight), written out.
 *
 * Why not libm: linked into libleakguard.so it is mapped and relocated in every
 * process the library is preloaded into, ~10 page faults (~0.1 ms in a virtual
 * machine) before main, and most of those processes are shells and helpers that never
 * sample anything (a pyenv shim starts some 80; bench/wrappers.py). The hooks cannot
 * load it when first needed: a dlopen inside an allocation that the dynamic linker
 * itself may be making is not safe. The sampling needs ~1e-12 relative accuracy, which
 * a short series gives; tests/unit/test_util.c compares both with libm.
 * lg_classify, also in the library, gets libm through libm_lazy.c (never in a hook).
 */
#ifndef LG_CAPTURE_NOLIBM_H
#define LG_CAPTURE_NOLIBM_H

#include <stdint.h>
#include <string.h>

/* ln(u) for a finite, normal u > 0. u = m 2^e with m in [sqrt(1/2), sqrt(2)); ln m =
 * 2 atanh(s) = 2 (s + s^3/3 + s^5/5 + ...), s = (m-1)/(m+1), |s| < 0.1716: twelve
 * terms leave an error below 1e-19. */
static inline double lgi_ln(double u) {
  /* 1/23, 1/21, ..., 1/3, 1: no division in the loop (each was ~15 cycles) */
  static const double inv_odd[12] = {1.0 / 23, 1.0 / 21, 1.0 / 19, 1.0 / 17, 1.0 / 15, 1.0 / 13,
                                     1.0 / 11, 1.0 / 9,  1.0 / 7,  1.0 / 5,  1.0 / 3,  1.0};
  uint64_t b;
  memcpy(&b, &u, sizeof b);
  int e = (int)((b >> 52) & 0x7ff) - 1023;
  b = (b & 0x000fffffffffffffULL) | 0x3ff0000000000000ULL; /* m in [1, 2) */
  double m;
  memcpy(&m, &b, sizeof m);
  if (m > 1.4142135623730951) {
    m *= 0.5;
    e++;
  }
  double s = (m - 1.0) / (m + 1.0), s2 = s * s, acc = inv_odd[0];
  for (int k = 1; k < 12; k++) acc = acc * s2 + inv_odd[k];
  return (double)e * 0.69314718055994530942 + 2.0 * s * acc;
}

/* 1 - e^-x for x >= 0 (-expm1(-x)): a sampled block's probability of being sampled.
 * Below 1/16 the alternating series x - x^2/2 + x^3/6 - ... (12 terms: error <
 * x^13/13!); above, e^-x = 2^-n (e^(-r/8))^8 with r in [0, ln 2), e^(-r/8) from 11
 * terms of its Taylor series (error < 1e-21 before the three squarings), and the
 * difference loses nothing (1 - e^-x > 0.06). */
static inline double lgi_one_minus_exp_neg(double x) {
  static const double inv[13] = {0,       1.0,     1.0 / 2, 1.0 / 3,  1.0 / 4,  1.0 / 5, 1.0 / 6,
                                 1.0 / 7, 1.0 / 8, 1.0 / 9, 1.0 / 10, 1.0 / 11, 1.0 / 12};
  if (!(x > 0.0)) return 0.0;
  if (x < 0.0625) {
    double p = 0.0, t = x;
    for (int k = 1; k <= 12; k++) {
      p += t;
      t *= -x * inv[k < 12 ? k + 1 : 12];
    }
    return p;
  }
  if (x > 745.0) return 1.0; /* e^-x is below the smallest double */
  int n = (int)(x / 0.69314718055994530942);
  double r = (x - n * 0.69314718055994530942) * 0.125, er = 1.0, t = 1.0;
  for (int k = 1; k <= 11; k++) {
    t *= -r * inv[k];
    er += t;
  }
  er *= er;
  er *= er;
  er *= er;
  /* 2^-n, n <= 1075: halvings in steps a normal double can take */
  while (n > 1000) {
    er *= 0x1p-1000;
    n -= 1000;
  }
  uint64_t b = (uint64_t)(1023 - n) << 52; /* 2^-n, normal for n <= 1022 */
  double two;
  memcpy(&two, &b, sizeof two);
  return 1.0 - er * two;
}

#endif
