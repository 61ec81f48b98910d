/* SPDX-License-Identifier: MIT */
/*
 * test_classify.c - unit tests of the pattern classifier (issue #4): each feature on
 * hand-made series, invariance to scale and time units, rejection of bad input,
 * the committed model's accuracy on a freshly generated test set. The CSV reader and
 * what `leakguard classify FILE` prints: test_csv.c.
 */
#include <errno.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "analysis/classify.h"
#include "gen.h"
#include "leakguard.h"

#define N 200

static double T[4096], V[4096], R[4096];

/* Fills T with 0..n-1 and V with fn(u), u = i / (n - 1). */
static void fill(size_t n, double (*fn)(double)) {
  for (size_t i = 0; i < n; i++) {
    T[i] = (double)i;
    V[i] = fn((double)i / (double)(n - 1));
  }
}

/* Deterministic pseudo-noise in [-0.5, 0.5). */
static double noise(unsigned i) {
  uint32_t x = i * 2654435761u + 12345u;
  x ^= x >> 15;
  x *= 2246822519u;
  x ^= x >> 13;
  return (double)(x & 0xffffff) / 16777216.0 - 0.5;
}

/* Nearly Gaussian pseudo-noise (sum of four of the above), sd about 0.58. Stable
 * memory curves are sums of many independent allocations; uniform noise between a
 * hard floor and ceiling is what a ramp sampled slower than its period looks like. */
static double gnoise(unsigned i) {
  return noise(4 * i + 5000) + noise(4 * i + 5001) + noise(4 * i + 5002) + noise(4 * i + 5003);
}

static double f_ramp(double u) { return 1000 + 500 * u; }
static double f_const(double u) {
  (void)u;
  return 4096;
}
static double f_quad(double u) { return 10 + 90 * u * u * u; }
static double f_steps(double u) { return 100 + 10 * floor(u * 4.999); }
static double f_saw(double u) { return 50 + 40 * (u * 5 - floor(u * 5)); }
static double f_plateau(double u) { return u < 0.3 ? 200 + 100 * u / 0.3 : 300; }
static double f_hockey(double u) { return u < 0.4 ? 500 : 500 + 100 * (u - 0.4); }
static double f_square(double u) { return 500 + 100 * u * u; }

static void features(size_t n, const double *rss, double *f) {
  assert_int_equal(lga_classify_features(T, V, rss, n, f), 0);
}

/* ------------------------------------------------------------------ names */

static void test_names(void **state) {
  (void)state;
  const char *expect[] = {"stable",  "linear-leak", "accelerating-leak", "step-leak",
                          "plateau", "sawtooth",    "fragmentation"};
  for (int c = 0; c < LG_PATTERN_COUNT; c++) assert_string_equal(lg_pattern_name((lg_pattern_t)c), expect[c]);
  assert_null(lg_pattern_name(LG_PATTERN_COUNT));
  assert_null(lg_pattern_name((lg_pattern_t)-1));
  assert_int_equal(lg_pattern_is_leak(LG_PATTERN_LINEAR_LEAK), 1);
  assert_int_equal(lg_pattern_is_leak(LG_PATTERN_ACCELERATING_LEAK), 1);
  assert_int_equal(lg_pattern_is_leak(LG_PATTERN_STEP_LEAK), 1);
  assert_int_equal(lg_pattern_is_leak(LG_PATTERN_STABLE), 0);
  assert_int_equal(lg_pattern_is_leak(LG_PATTERN_PLATEAU), 0);
  assert_int_equal(lg_pattern_is_leak(LG_PATTERN_SAWTOOTH), 0);
  assert_int_equal(lg_pattern_is_leak(LG_PATTERN_FRAGMENTATION), 0);
  for (int i = 0; i < LGA_CLS_NFEAT; i++) assert_non_null(lga_classify_feature_name(i));
  assert_null(lga_classify_feature_name(LGA_CLS_NFEAT));
}

/* ------------------------------------------------------------------ bad input */

static void test_bad_input(void **state) {
  (void)state;
  lg_pattern_t out = (lg_pattern_t)42;
  double p[LG_PATTERN_COUNT];
  fill(N, f_ramp);
  assert_int_equal(lg_classify(T, V, NULL, 7, &out, p), -EINVAL);
  assert_int_equal(lg_classify(T, V, NULL, 0, &out, p), -EINVAL);
  assert_int_equal(lg_classify(NULL, V, NULL, N, &out, p), -EINVAL);
  assert_int_equal(lg_classify(T, NULL, NULL, N, &out, p), -EINVAL);
  assert_int_equal(lg_classify(T, V, NULL, N, NULL, p), -EINVAL);
  assert_int_equal((int)out, 42); /* untouched on failure */

  V[17] = NAN;
  assert_int_equal(lg_classify(T, V, NULL, N, &out, p), -EDOM);
  V[17] = INFINITY;
  assert_int_equal(lg_classify(T, V, NULL, N, &out, p), -EDOM);
  fill(N, f_ramp);
  T[N - 1] = INFINITY;
  assert_int_equal(lg_classify(T, V, NULL, N, &out, p), -EDOM);
  fill(N, f_ramp);
  T[50] = T[49]; /* not strictly increasing */
  assert_int_equal(lg_classify(T, V, NULL, N, &out, p), -EDOM);
  T[50] = T[48];
  assert_int_equal(lg_classify(T, V, NULL, N, &out, p), -EDOM);
  fill(N, f_ramp);
  for (size_t i = 0; i < N; i++) R[i] = 2000;
  R[3] = -NAN;
  assert_int_equal(lg_classify(T, V, R, N, &out, p), -EDOM);
  assert_int_equal((int)out, 42);

  /* exactly 8 samples and NULL probs are fine */
  assert_int_equal(lg_classify(T, V, NULL, 8, &out, NULL), 0);
  assert_in_range(out, 0, LG_PATTERN_COUNT - 1);
}

/* ------------------------------------------------------------------ features */

static void test_feature_linear(void **state) {
  (void)state;
  double f[LGA_CLS_NFEAT];
  fill(N, f_ramp);
  features(N, NULL, f);
  assert_true(f[LGA_F_LIN_SLOPE] > 1.0 && f[LGA_F_LIN_SLOPE] < 1.2); /* range / (p95-p5) */
  assert_true(f[LGA_F_LIN_R2] > 0.999);
  assert_true(fabs(f[LGA_F_QUAD_C]) < 1e-6);
  assert_true(f[LGA_F_QUAD_GAIN] < 1e-6);
  assert_true(fabs(f[LGA_F_SLOPE_FIRST] - f[LGA_F_SLOPE_LAST]) < 1e-6);
  assert_true(fabs(f[LGA_F_ACCEL]) < 1e-6);
  assert_true(fabs(f[LGA_F_TS_FLOOR] - f[LGA_F_LIN_SLOPE]) < 0.02);
  assert_true(fabs(f[LGA_F_TS_CEIL] - f[LGA_F_LIN_SLOPE]) < 0.02);
  assert_true(f[LGA_F_MK_TAU] == 1.0);
  assert_true(f[LGA_F_UP_FRAC] == 1.0);
  assert_true(f[LGA_F_DRAWDOWN] == 0.0);
  assert_true(fabs(f[LGA_F_T50] - 0.5) < 0.1);
  assert_true(fabs(f[LGA_F_T90] - 0.9) < 0.1);
  assert_true(f[LGA_F_JUP_COUNT] == 0 && f[LGA_F_JDN_COUNT] == 0);
  assert_true(f[LGA_F_RESID] < 1e-9);
  assert_true(f[LGA_F_OUTLIERS] == 0);
  assert_true(fabs(f[LGA_F_LAST_VS_MAX]) < 1e-12);
  assert_true(f[LGA_F_HAS_RSS] == 0 && f[LGA_F_RSS_GROWTH] == 0);
  assert_true(fabs(f[LGA_F_LOGN] - log2(N) / 11) < 1e-12);
  for (int k = 1; k < LGA_CLS_WIN; k++) /* profile rises */
    assert_true(f[LGA_F_PROFILE + k] > f[LGA_F_PROFILE + k - 1]);
}

static void test_feature_constant(void **state) {
  (void)state;
  double f[LGA_CLS_NFEAT];
  fill(64, f_const);
  features(64, NULL, f);
  for (int i = LGA_F_LIN_SLOPE; i < LGA_CLS_NFEAT; i++) {
    if (i == LGA_F_T50 || i == LGA_F_T90 || i == LGA_F_NOISE) continue;
    assert_true(f[i] == 0.0);
  }
  assert_true(f[LGA_F_T50] == 0.5 && f[LGA_F_T90] == 0.5);
}

static void test_feature_curvature(void **state) {
  (void)state;
  double f[LGA_CLS_NFEAT];
  fill(N, f_quad);
  features(N, NULL, f);
  assert_true(f[LGA_F_QUAD_C] > 1.0);
  assert_true(f[LGA_F_QUAD_GAIN] > 0.05);
  assert_true(f[LGA_F_SLOPE_LAST] > 4 * f[LGA_F_SLOPE_FIRST]);
  assert_true(f[LGA_F_ACCEL] > 0.5);
  assert_true(f[LGA_F_T50] > 0.7);
  assert_true(f[LGA_F_MK_TAU] == 1.0);
}

/* Hinge and post-onset curvature: a late-starting straight leak against x^2. */
static void test_feature_hinge(void **state) {
  (void)state;
  double f[LGA_CLS_NFEAT];
  fill(N, f_hockey);
  features(N, NULL, f);
  assert_true(f[LGA_F_HINGE_GAIN] > 0.01); /* hinge fits better than quadratic */
  assert_true(fabs(f[LGA_F_HINGE_AT] - 0.4) < 0.06);
  assert_true(fabs(f[LGA_F_POST_CURV]) < 0.05); /* straight after the onset */
  fill(N, f_square);
  features(N, NULL, f);
  assert_true(f[LGA_F_HINGE_GAIN] < 0);  /* the quadratic fits exactly */
  assert_true(f[LGA_F_POST_CURV] > 0.3); /* still curved after the best c */
}

static void test_feature_steps(void **state) {
  (void)state;
  double f[LGA_CLS_NFEAT];
  fill(N, f_steps);
  features(N, NULL, f);
  assert_true(fabs(f[LGA_F_JUP_COUNT] - log1p(4)) < 1e-12); /* four steps up */
  assert_true(f[LGA_F_JDN_COUNT] == 0);
  assert_true(fabs(f[LGA_F_JUP_MASS] - 1.0) < 1e-9); /* steps span p5..p95 */
  assert_true(f[LGA_F_JUP_MAX] > 0.2 && f[LGA_F_JUP_MAX] < 0.4);
  assert_true(f[LGA_F_NOISE] <= 1e-3); /* flat between steps: noise floor */
  assert_true(f[LGA_F_LIN_R2] > 0.9);
}

static void test_feature_sawtooth(void **state) {
  (void)state;
  double f[LGA_CLS_NFEAT];
  fill(500, f_saw);
  features(500, NULL, f);
  assert_true(f[LGA_F_JDN_COUNT] >= log1p(4) - 1e-12); /* the drops */
  assert_true(f[LGA_F_JUP_COUNT] == 0);                /* ramps are not jumps */
  assert_true(f[LGA_F_ACF_PEAK] > 0.6);
  assert_true(fabs(f[LGA_F_ACF_LAG] - 0.2) < 0.03); /* 5 periods over the span */
  assert_true(f[LGA_F_ZCROSS] > 0.05 && f[LGA_F_ZCROSS] < 0.15);
  assert_true(f[LGA_F_SPREAD] > 0.35);        /* a window spans 5/12 of a period */
  assert_true(fabs(f[LGA_F_TS_FLOOR]) < 0.1); /* floors do not grow */
  assert_true(f[LGA_F_LIN_R2] < 0.05);
}

/* Distribution features: a ramp-and-drop seen with 4 samples per period (0 1 2 3 0 ...),
 * two-valued batches, samples bunched at a floor, and Gaussian-like noise. */
static void test_feature_distribution(void **state) {
  (void)state;
  double f[LGA_CLS_NFEAT];
  for (size_t i = 0; i < N; i++) {
    T[i] = (double)i;
    V[i] = 5000 + 100.0 * (double)(i % 4);
  }
  features(N, NULL, f);
  /* increments +1 +1 +1 -3: skewness -6 / 3^1.5 = -1.155 */
  assert_true(fabs(f[LGA_F_INC_SKEW] + 1.1547) < 0.04);
  /* four equally likely levels: skewness 0, kurtosis 2.5625 / 1.5625 = 1.64 */
  assert_true(fabs(f[LGA_F_RES_SKEW]) < 0.05);
  assert_true(fabs(f[LGA_F_RES_KURT] - (1.64 - 3)) < 0.05);
  /* Geary: mean |e| / sd = 1 / sqrt(1.25) = 0.894 */
  assert_true(fabs(f[LGA_F_RES_GEARY] - (0.894 - 0.8)) < 0.02);
  /* spread relative to the level: p95 - p5 = 300 around a median of 5100 */
  assert_true(fabs(f[LGA_F_REL_SPREAD] - (log10(300.0 / 5100.0) + 6)) < 1e-9);

  /* 0 1 2 0 1 2 ..., 4096 samples at a Unix-time origin: the raw samples are used
   * (bucket means of 8 nearly erase the teeth), in their own scale units. Increments
   * +1 +1 -2: skewness -2 / 2^1.5 = -0.707; three levels: kurtosis 1.5. */
  size_t n = 4096;
  for (size_t i = 0; i < n; i++) {
    T[i] = 1.7e9 + 0.5 * (double)i;
    V[i] = 5000 + 100.0 * (double)(i % 3);
  }
  features(n, NULL, f);
  assert_true(fabs(f[LGA_F_INC_SKEW] + 0.707) < 0.05);
  assert_true(fabs(f[LGA_F_RES_KURT] - (1.5 - 3)) < 0.1);
  assert_true(fabs(f[LGA_F_RES_SKEW]) < 0.1);

  /* two values in an irregular order: kurtosis near 1 */
  for (size_t i = 0; i < N; i++) {
    T[i] = (double)i;
    V[i] = 7000 + (noise((unsigned)i) > 0 ? 2000 : 0);
  }
  features(N, NULL, f);
  assert_true(f[LGA_F_RES_KURT] < -1.8);
  assert_true(f[LGA_F_RES_GEARY] > 0.18);     /* mean |e| / sd = 1 */
  assert_true(fabs(f[LGA_F_INC_SKEW]) < 0.3); /* symmetric jumps */

  /* 80 % of the samples on a floor, the rest scattered above it: skewed */
  for (size_t i = 0; i < N; i++) V[i] = 7000 + (i % 5 == 2 ? 1000 + 3000 * (noise((unsigned)i) + 0.5) : 0);
  features(N, NULL, f);
  assert_true(f[LGA_F_RES_SKEW] > 1.0);
  assert_true(f[LGA_F_RES_GEARY] < -0.02);

  /* a per-site curve that is empty most of the time: zero median */
  for (size_t i = 0; i < N; i++) V[i] = i % 5 == 2 ? 4096 : 0;
  features(N, NULL, f);
  assert_true(f[LGA_F_REL_SPREAD] == 9.0);

  /* sum of four uniform noises (nearly Gaussian): skewness ~0, kurtosis -0.3 */
  for (size_t i = 0; i < N; i++) {
    double x = 0;
    for (unsigned k = 0; k < 4; k++) x += noise((unsigned)(4 * i + k + 1000));
    V[i] = 1e6 + 1e3 * x;
  }
  features(N, NULL, f);
  assert_true(fabs(f[LGA_F_REL_SPREAD] - (log10(1e3 * 1.9 / 1e6) + 6)) < 0.3); /* ~0.2 % */
  assert_true(fabs(f[LGA_F_RES_SKEW]) < 0.4);
  assert_true(f[LGA_F_RES_KURT] > -0.8 && f[LGA_F_RES_KURT] < 0.3);
  assert_true(fabs(f[LGA_F_RES_GEARY]) < 0.05);
  assert_true(fabs(f[LGA_F_INC_SKEW]) < 0.4);
}

static void test_feature_plateau(void **state) {
  (void)state;
  double f[LGA_CLS_NFEAT];
  fill(N, f_plateau);
  features(N, NULL, f);
  assert_true(f[LGA_F_T50] < 0.25);
  assert_true(f[LGA_F_T90] < 0.35);
  assert_true(fabs(f[LGA_F_SLOPE_LAST]) < 1e-9);
  assert_true(f[LGA_F_SLOPE_FIRST] > 2);
  assert_true(f[LGA_F_QUAD_C] < 0);
  assert_true(fabs(f[LGA_F_LAST_VS_MAX]) < 1e-12);
}

static void test_feature_noise_and_spikes(void **state) {
  (void)state;
  double f[LGA_CLS_NFEAT];
  for (size_t i = 0; i < N; i++) {
    T[i] = (double)i;
    V[i] = 1e6 + 1e3 * noise((unsigned)i);
  }
  features(N, NULL, f);
  assert_true(f[LGA_F_VN_RATIO] > 1.5 && f[LGA_F_VN_RATIO] < 2.6); /* white noise: ~2 */
  assert_true(f[LGA_F_LIN_R2] < 0.1);
  assert_true(fabs(f[LGA_F_MK_TAU]) < 0.5);
  assert_true(f[LGA_F_ACF1] < 0.5);
  double before = f[LGA_F_OUTLIERS] * N, jup = f[LGA_F_JUP_COUNT], jdn = f[LGA_F_JDN_COUNT];
  V[100] += 1e5; /* an isolated spike: an outlier (its neighbours' medians may move), no jump */
  features(N, NULL, f);
  assert_true(f[LGA_F_OUTLIERS] * N - before > 0.5 && f[LGA_F_OUTLIERS] * N - before < 3.5);
  assert_true(f[LGA_F_JUP_COUNT] == jup && f[LGA_F_JDN_COUNT] == jdn);
  fill(N, f_quad); /* smooth: residual changes slowly */
  features(N, NULL, f);
  assert_true(f[LGA_F_VN_RATIO] < 0.5);
}

static void test_feature_rss(void **state) {
  (void)state;
  double f[LGA_CLS_NFEAT];
  for (size_t i = 0; i < N; i++) { /* live flat, rss doubles */
    T[i] = (double)i;
    V[i] = 1e8 + 1e5 * noise((unsigned)i);
    R[i] = 2e8 + 2e8 * (double)i / (N - 1);
  }
  features(N, R, f);
  assert_true(f[LGA_F_HAS_RSS] == 1.0);
  assert_true(f[LGA_F_RSS_GROWTH] > 0.5);
  assert_true(fabs(f[LGA_F_LIVE_GROWTH_R]) < 0.01);
  assert_true(f[LGA_F_RSS_EXCESS] > 0.5);
  assert_true(f[LGA_F_RSS_VS_LIVE] > 5);
  assert_true(f[LGA_F_RSS_TAU] == 1.0);
  assert_true(fabs(f[LGA_F_RSS_T50] - 0.5) < 0.1);
  for (size_t i = 0; i < N; i++) /* rss tracking a live leak: no excess */
    V[i] = 1e8 + 1e6 * (double)i, R[i] = V[i] + 5e7;
  features(N, R, f);
  assert_true(fabs(f[LGA_F_RSS_EXCESS]) < 0.01);
  assert_true(f[LGA_F_LIVE_GROWTH_R] > 0.5);
}

/* Features do not depend on the unit or origin of time or value. */
static void test_feature_invariance(void **state) {
  (void)state;
  double f1[LGA_CLS_NFEAT], f2[LGA_CLS_NFEAT];
  for (size_t i = 0; i < 300; i++) {
    T[i] = i + 0.3 * noise((unsigned)i + 7);
    V[i] = 500 + 3 * i + 40 * noise((unsigned)i) + (i % 37 == 0 ? 300 : 0);
  }
  features(300, NULL, f1);
  for (size_t i = 0; i < 300; i++) {
    T[i] = 1.7e9 + 0.25 * T[i];
    V[i] = 1e9 + 4096.0 * V[i];
  }
  features(300, NULL, f2);
  for (int i = 0; i < LGA_CLS_NFEAT; i++) /* the spread relative to the level moves */
    if (i != LGA_F_REL_SPREAD) assert_true(fabs(f1[i] - f2[i]) < 1e-6 * (1 + fabs(f1[i])));
  assert_true(f2[LGA_F_REL_SPREAD] < f1[LGA_F_REL_SPREAD] - 1); /* +1e9 on ~1e6 */
  for (size_t i = 0; i < 300; i++)                              /* a unit change alone keeps it */
    V[i] = 3.0 * (V[i] - 1e9);
  features(300, NULL, f2);
  assert_true(fabs(f1[LGA_F_REL_SPREAD] - f2[LGA_F_REL_SPREAD]) < 1e-9);
}

/* Long series are downsampled inside, with a bounded stack. */
static void test_long_series(void **state) {
  (void)state;
  double f[LGA_CLS_NFEAT];
  size_t n = 4096;
  for (size_t i = 0; i < n; i++) {
    T[i] = (double)i;
    V[i] = 1000 + (double)i + 50 * noise((unsigned)i);
  }
  features(n, NULL, f);
  assert_true(fabs(f[LGA_F_LOGN] - 12.0 / 11) < 1e-12);
  assert_true(f[LGA_F_LIN_R2] > 0.99);
  lg_pattern_t out;
  assert_int_equal(lg_classify(T, V, NULL, n, &out, NULL), 0);
  assert_int_equal(out, LG_PATTERN_LINEAR_LEAK);
}

/* ------------------------------------------------------------------ classification */

static lg_pattern_t classify(size_t n, const double *rss) {
  lg_pattern_t out;
  double p[LG_PATTERN_COUNT], sum = 0;
  assert_int_equal(lg_classify(T, V, rss, n, &out, p), 0);
  for (int c = 0; c < LG_PATTERN_COUNT; c++) {
    assert_true(p[c] >= 0 && p[c] <= 1);
    sum += p[c];
    assert_true(p[c] <= p[out]);
  }
  assert_true(fabs(sum - 1) < 1e-9);
  return out;
}

static void test_classify_handmade(void **state) {
  (void)state;
  size_t n = 240;
  for (size_t i = 0; i < n; i++) {
    double u = (double)i / (n - 1), e = noise((unsigned)i);
    T[i] = 10.0 * i;
    V[i] = 1e6 + 1e5 * u + 2e3 * e;
  }
  assert_int_equal(classify(n, NULL), LG_PATTERN_LINEAR_LEAK);
  for (size_t i = 0; i < n; i++) V[i] = 1e6 + 1e4 * gnoise((unsigned)i);
  assert_int_equal(classify(n, NULL), LG_PATTERN_STABLE);
  for (size_t i = 0; i < n; i++) {
    double u = (double)i / (n - 1);
    V[i] = 1e6 + 1e5 * exp(5 * u) / exp(5) + 500 * noise((unsigned)i);
  }
  assert_int_equal(classify(n, NULL), LG_PATTERN_ACCELERATING_LEAK);
  for (size_t i = 0; i < n; i++) V[i] = 1e6 + 2e4 * floor(6.0 * i / n) + 200 * noise((unsigned)i);
  assert_int_equal(classify(n, NULL), LG_PATTERN_STEP_LEAK);
  for (size_t i = 0; i < n; i++) {
    double u = (double)i / (n - 1);
    V[i] = 1e6 + 1e5 * (1 - exp(-u / 0.08)) + 1e3 * noise((unsigned)i);
  }
  assert_int_equal(classify(n, NULL), LG_PATTERN_PLATEAU);
  for (size_t i = 0; i < n; i++) V[i] = 1e6 + 1e5 * (double)(i % 30) / 30 + 1e3 * noise((unsigned)i);
  assert_int_equal(classify(n, NULL), LG_PATTERN_SAWTOOTH);
  /* The same batches every 0.37 sampling intervals (a training step's saw-tooth seen
   * at the recorder's interval): a ramp for 70 % of each period, then the floor, at
   * phases that wander with the sampling jitter. */
  for (size_t i = 0; i < n; i++) {
    T[i] = 10.0 * (i + 0.3 * noise((unsigned)i + 777));
    double x = T[i] / 3.7 - floor(T[i] / 3.7);
    V[i] = 1e6 + (x < 0.7 ? 1e5 * x / 0.7 : 0) + 1e3 * noise((unsigned)i);
  }
  assert_int_equal(classify(n, NULL), LG_PATTERN_SAWTOOTH);
  for (size_t i = 0; i < n; i++) { /* on/off batches at the same rate: two levels */
    double x = T[i] / 3.7 - floor(T[i] / 3.7);
    V[i] = 1e6 + (x < 0.5 ? 1e5 : 0) + 1e3 * noise((unsigned)i);
  }
  assert_int_equal(classify(n, NULL), LG_PATTERN_SAWTOOTH);
  for (size_t i = 0; i < n; i++) T[i] = 10.0 * i;
  for (size_t i = 0; i < n; i++) {
    V[i] = 1e6 + 1e4 * gnoise((unsigned)i);
    R[i] = 3e6 + 2e6 * (double)i / n + 1e3 * noise((unsigned)i + 99);
  }
  assert_int_equal(classify(n, R), LG_PATTERN_FRAGMENTATION);
  for (size_t i = 0; i < n; i++) /* same live curve, rss flat: stable */
    R[i] = 3e6 + 1e3 * noise((unsigned)i + 99);
  assert_int_equal(classify(n, R), LG_PATTERN_STABLE);
}

/* Round 3: the shapes the test2 misses had (docs/classifier.md). */
static void test_classify_round3(void **state) {
  (void)state;
  size_t n = 240;
  /* Step-synchronised saw-tooth: 70 % of the samples on the floor (snapshots right
   * after a flush, a little of the next batch in), the rest at a random phase of a
   * 1 MB batch; a stable working set with the same floor spread is stable. */
  for (size_t i = 0; i < n; i++) {
    T[i] = 10.0 * i;
    double a = noise((unsigned)i + 4000) + 0.5, b = noise((unsigned)i + 9000) + 0.5;
    V[i] = 1e6 + (a < 0.7 ? 2e4 * b : 1e6 * b);
  }
  assert_int_equal(classify(n, NULL), LG_PATTERN_SAWTOOTH);
  for (size_t i = 0; i < n; i++) V[i] = 1e6 + 2e4 * (noise((unsigned)i + 9000) + 0.5);
  assert_int_equal(classify(n, NULL), LG_PATTERN_STABLE);
  /* A table filled before the second snapshot, then flat: one jump at the very start
   * is a plateau, not a step leak. */
  V[0] = 1e6;
  for (size_t i = 1; i < n; i++) V[i] = 3e6 + 1e3 * noise((unsigned)i);
  assert_int_equal(classify(n, NULL), LG_PATTERN_PLATEAU);
  /* A leak that grows by uneven chunks (about half the samples gain one, sizes over a
   * 1:6 range): a fine, irregular staircase is a linear leak. */
  double acc = 0;
  for (size_t i = 0; i < n; i++) {
    if (i > 0 && noise((unsigned)i + 123) < 0) acc += 5e3 * (1 + 5 * (noise((unsigned)i + 456) + 0.5));
    V[i] = 1e6 + acc;
  }
  assert_int_equal(classify(n, NULL), LG_PATTERN_LINEAR_LEAK);
}

/* Round 4: what the recorder produces around a leak. */
static void test_classify_round4(void **state) {
  (void)state;
  double f1[LGA_CLS_NFEAT], f2[LGA_CLS_NFEAT];
  /* Teardown: a collapse in the last sample or two (to under half) is left out, so
   * the features are exactly those of the series without it; a fall to 60 % is kept. */
  size_t n = 120;
  fill(n, f_plateau);
  features(n, NULL, f1);
  V[n] = 0;
  assert_int_equal(lga_classify_features(T, V, NULL, n + 1, f2), 0);
  assert_memory_equal(f1, f2, sizeof f1);
  V[n] = 100;
  V[n + 1] = 20;
  assert_int_equal(lga_classify_features(T, V, NULL, n + 2, f2), 0);
  assert_memory_equal(f1, f2, sizeof f1);
  V[n] = 0.6 * V[n - 1];
  assert_int_equal(lga_classify_features(T, V, NULL, n + 1, f2), 0);
  assert_true(memcmp(f1, f2, sizeof f1) != 0);
  /* Tables built at start-up over 16 snapshots of 0.2 s, then a steady loop that marks
   * steps every 10 ms for 5.7 s, then the teardown: a plateau (it was called an
   * accelerating leak before the teardown was left out). */
  n = 0;
  for (int i = 0; i < 16; i++, n++) {
    T[n] = 0.2 * i;
    V[n] = 41e6 + 1e6 * i + 2e4 * noise((unsigned)i);
  }
  for (int i = 0; i < 570; i++, n++) {
    T[n] = 3.2 + 0.01 * i;
    V[n] = 56e6 + 2e4 * noise((unsigned)i + 77);
  }
  T[n] = T[n - 1] + 0.3;
  V[n++] = 0;
  assert_int_equal(classify(n, NULL), LG_PATTERN_PLATEAU);
  /* A connection leak snapshotted at every step marker (1600 samples, 10 ms): the
   * working set is built in the first 0.4 s (500 kB), then 280 kB leak per 0.5 s, in
   * blocks of ~1 kB. The start-up rise is not a step: a linear leak. */
  n = 1600;
  for (size_t i = 0; i < n; i++) {
    double t = 0.01 * (double)i;
    T[i] = t;
    double q = 74e3 + 5e5 * (1 - exp(-t / 0.12)) + 5.6e5 * t;
    V[i] = 1024 * floor((q + 3e3 * noise((unsigned)i + 31)) / 1024);
  }
  assert_int_equal(classify(n, NULL), LG_PATTERN_LINEAR_LEAK);
  /* The same leak starting after 1 s of a 16 s run (a plugin loaded late): linear. */
  for (size_t i = 0; i < n; i++) {
    double t = 0.01 * (double)i;
    V[i] = 4200 + (t > 1 ? 2.7e5 * (t - 1) : 0) + 2e3 * (noise((unsigned)i + 55) + 0.5);
  }
  assert_int_equal(classify(n, NULL), LG_PATTERN_LINEAR_LEAK);
}

/* The committed model on series it has never seen (indices past the evaluator's). */
static void test_model_accuracy(void **state) {
  (void)state;
  lgi_gen_series_t *s = malloc(sizeof *s);
  assert_non_null(s);
  long ok = 0, total = 0, benign = 0, false_leak = 0;
  for (uint64_t k = 500000; k < 502100; k++) {
    lgi_gen_make(LGI_GEN_TEST, k, s);
    lg_pattern_t out;
    assert_int_equal(lg_classify(s->t, s->v, s->has_rss ? s->rss : NULL, s->n, &out, NULL), 0);
    ok += (int)out == s->label;
    total++;
    if (s->label == LG_PATTERN_STABLE || s->label == LG_PATTERN_PLATEAU || s->label == LG_PATTERN_SAWTOOTH) {
      benign++;
      false_leak += lg_pattern_is_leak(out);
    }
  }
  free(s);
  print_message("accuracy %.2f %%, leak predicted for benign %.2f %%\n", 100.0 * ok / total,
                100.0 * false_leak / benign);
  /* The >= 97 % target is measured by lg-eval-classifier on the 7000-series test split
   * (97.13 % for the committed round-4 model, on the round-4 generator). These 2100
   * other series estimate the same accuracy with a standard error of about 0.37 %;
   * the committed model scores 96.76 % here (round 3: 96.05 % on its own generator),
   * so pooled over 9100 series it is about 97.0 %, i.e. at the target, not clearly
   * above it. The guard sits under that (a regression of ~0.6 % fails it). */
  assert_true(ok >= 0.962 * total);
  assert_true(false_leak <= 0.02 * benign);
}

/* Generator: deterministic, valid, labels cycle through the classes. */
static void test_generator(void **state) {
  (void)state;
  lgi_gen_series_t *a = malloc(sizeof *a), *b = malloc(sizeof *b);
  for (uint64_t k = 0; k < 50; k++) {
    lgi_gen_make(LGI_GEN_TRAIN, k, a);
    lgi_gen_make(LGI_GEN_TRAIN, k, b);
    assert_int_equal(a->label, (int)(k % LG_PATTERN_COUNT));
    assert_true(a->n >= 8 && a->n <= LGI_GEN_MAXN && a->n == b->n);
    assert_memory_equal(a->v, b->v, a->n * sizeof *a->v);
    for (size_t i = 1; i < a->n; i++) assert_true(a->t[i] > a->t[i - 1]);
    lgi_gen_make(LGI_GEN_TEST, k, b); /* splits differ */
    assert_true(a->n != b->n || memcmp(a->v, b->v, a->n * sizeof *a->v));
  }
  free(a);
  free(b);
}

/* Generator variants added in round 3, checked on the series that carry them. */
static void test_generator_round3(void **state) {
  (void)state;
  lgi_gen_series_t *s = malloc(sizeof *s);
  assert_non_null(s);
  int stepsync = 0, instant = 0, chunks = 0;
  for (uint64_t k = 0; k < 7000; k++) {
    lgi_gen_make(LGI_GEN_TRAIN, k, s);
    if (strstr(s->desc, " stepsync") && !strstr(s->desc, "spikes") && !strstr(s->desc, "teardown")) {
      /* mostly floor: the median sits in the lower third of the range */
      double lo = s->v[0], hi = s->v[0];
      for (size_t i = 1; i < s->n; i++) {
        lo = s->v[i] < lo ? s->v[i] : lo;
        hi = s->v[i] > hi ? s->v[i] : hi;
      }
      size_t below = 0;
      for (size_t i = 0; i < s->n; i++) below += s->v[i] < lo + (hi - lo) / 3;
      assert_int_equal(s->label, LG_PATTERN_SAWTOOTH);
      assert_true(s->n >= 32);
      assert_true(below >= s->n / 2);
      stepsync++;
    }
    if (strstr(s->desc, " instant")) {
      assert_int_equal(s->label, LG_PATTERN_PLATEAU);
      instant++;
    }
    if (strstr(s->desc, " chunks")) {
      assert_int_equal(s->label, LG_PATTERN_LINEAR_LEAK);
      assert_true(s->n >= 60);
      chunks++;
    }
  }
  free(s);
  print_message("stepsync %d, instant %d, chunks %d of 7000\n", stepsync, instant, chunks);
  assert_true(stepsync >= 20);
  assert_true(instant >= 50);
  assert_true(chunks >= 100);
}

/* Generator variants added in round 4. */
static void test_generator_round4(void **state) {
  (void)state;
  lgi_gen_series_t *s = malloc(sizeof *s);
  assert_non_null(s);
  int warmup = 0, denser = 0;
  for (uint64_t k = 0; k < 7000; k++) {
    lgi_gen_make(LGI_GEN_TRAIN, k, s);
    if (strstr(s->desc, " warmup")) {
      assert_true(lg_pattern_is_leak((lg_pattern_t)s->label));
      assert_true(s->n >= 16);
      warmup++;
    }
    if (strstr(s->desc, " denser") && strstr(s->desc, "jit=0.00 gaps=0") && !strstr(s->desc, "startgap")) {
      /* without jitter, gaps or a start gap: the first three intervals are 2-10x as
       * long as the last three */
      size_t m = s->n;
      double a = s->t[3] - s->t[0], b = s->t[m - 1] - s->t[m - 4];
      assert_true(m >= 24);
      assert_true(a >= 1.99 * b && a <= 10.01 * b);
      denser++;
    }
  }
  free(s);
  print_message("warmup %d, denser %d of 7000\n", warmup, denser);
  assert_true(warmup >= 500); /* 25 % of the 3/7 leak series of >= 16 samples */
  assert_true(denser >= 50);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_names),
      cmocka_unit_test(test_bad_input),
      cmocka_unit_test(test_feature_linear),
      cmocka_unit_test(test_feature_constant),
      cmocka_unit_test(test_feature_curvature),
      cmocka_unit_test(test_feature_hinge),
      cmocka_unit_test(test_feature_steps),
      cmocka_unit_test(test_feature_sawtooth),
      cmocka_unit_test(test_feature_distribution),
      cmocka_unit_test(test_feature_plateau),
      cmocka_unit_test(test_feature_noise_and_spikes),
      cmocka_unit_test(test_feature_rss),
      cmocka_unit_test(test_feature_invariance),
      cmocka_unit_test(test_long_series),
      cmocka_unit_test(test_classify_handmade),
      cmocka_unit_test(test_classify_round3),
      cmocka_unit_test(test_classify_round4),
      cmocka_unit_test(test_generator),
      cmocka_unit_test(test_generator_round3),
      cmocka_unit_test(test_generator_round4),
      cmocka_unit_test(test_model_accuracy),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
