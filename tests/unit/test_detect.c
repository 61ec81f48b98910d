/* SPDX-License-Identifier: MIT */
/*
 * test_detect.c - unit tests for the leak detector (lgd_analyze) and its decimating
 * series (lgd_series_add). Every scenario is generated in the test from a seeded
 * PRNG (splitmix64) and replayed over several seeds, so the verdicts must hold for
 * the shape of the curve, not for one lucky noise draw: linear leaks under heavy
 * churn, a filling-then-full cache, saw-tooth batches, a constant start-up table, a
 * slow leak buried in churn, accelerating and step leaks, too little data, growth
 * per step, and the min/max-preserving decimation.
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

#include <cmocka.h>

#include "analysis/detect.h"
#include "leakguard.h"

#define KiB 1024.0
#define MiB (1024.0 * 1024.0)
#define NSEEDS 8
#define MAXPTS 2048

/* ------------------------------------------------------------------ helpers */

typedef struct rng {
  uint64_t s;
} rng_t;

static uint64_t rng_next(rng_t *r) {
  uint64_t z = (r->s += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

/* uniform in [0, 1) */
static double rng_unit(rng_t *r) { return (double)(rng_next(r) >> 11) / 9007199254740992.0; }

/* uniform in [a, b) */
static double rng_range(rng_t *r, double a, double b) { return a + (b - a) * rng_unit(r); }

/* A point as the report builds them: one instantaneous value per snapshot. */
static void set_point(lgd_point_t *p, double t, double v, double step) {
  p->t = t;
  p->lo = p->hi = p->last = v;
  p->step = step;
}

static lgd_result_t analyze(const lgd_point_t *pts, size_t n) {
  lgd_result_t r;
  memset(&r, 0x5a, sizeof r);
  assert_int_equal(lgd_analyze(pts, n, NULL, &r), 0);
  return r;
}

static void dump(const char *what, unsigned seed, const lgd_result_t *r) {
  print_message("%s seed %u: leak=%d pattern=%s growth=%.1f B/s per_step=%.2f conf=%.2f tau=%.3f p=%.3g "
                "floors %.0f -> %.0f, %d windows\n",
                what, seed, r->leak, lg_pattern_name(r->pattern), r->growth_bytes_per_s, r->growth_bytes_per_step,
                r->confidence, r->tau, r->p, r->floor_first, r->floor_last, r->windows);
}

static void expect_verdict(const char *what, unsigned seed, const lgd_result_t *r, int leak, lg_pattern_t pattern) {
  if (r->leak != leak || r->pattern != pattern) {
    dump(what, seed, r);
    print_error("%s seed %u: want leak=%d pattern=%s\n", what, seed, leak, lg_pattern_name(pattern));
    fail();
  }
  assert_true(r->confidence >= 0 && r->confidence <= 1);
  if (leak) assert_true(r->confidence > 0);
  else assert_true(r->confidence == 0);
}

static void expect_rel(const char *what, unsigned seed, double got, double want, double rel) {
  if (!(fabs(got - want) <= rel * fabs(want))) {
    print_error("%s seed %u: %.3f, want %.3f within %.0f%%\n", what, seed, got, want, rel * 100);
    fail();
  }
}

/* ------------------------------------------------------------------ scenarios */

/* 120 snapshots, 1 s apart: 64 KiB/s of retained memory on an 8 MiB base, with up
 * to 2 MiB of short-lived allocations live at any snapshot (the churn is 32 times
 * the growth of one interval, a quarter of the whole run's growth). Passes for
 * 2000 of 2000 seeds; with 4 MiB of churn the floors' own noise makes the 10 %
 * slope bound fail for ~5 % of seeds, a statistical limit rather than a defect. */
static void test_linear_leak_under_churn(void **state) {
  (void)state;
  const double rate = 64 * KiB;
  for (unsigned seed = 1; seed <= NSEEDS; seed++) {
    rng_t g = {seed};
    lgd_point_t p[120];
    for (int i = 0; i < 120; i++) set_point(&p[i], i, 8 * MiB + rate * i + rng_range(&g, 0, 2 * MiB), 0);
    lgd_result_t r = analyze(p, 120);
    expect_verdict("linear", seed, &r, 1, LG_PATTERN_LINEAR_LEAK);
    expect_rel("linear growth_bytes_per_s", seed, r.growth_bytes_per_s, rate, 0.10);
    assert_true(isnan(r.growth_bytes_per_step)); /* no steps marked */
    assert_true(r.tau >= 0.5 && r.p < 0.05);
    assert_true(r.floor_last > r.floor_first);
  }
}

/* A bounded cache: fills to 32 MiB during the first third of the run, then stays
 * full (entries replaced, live size jitters by up to 256 KiB). */
static void test_plateau_cache(void **state) {
  (void)state;
  for (unsigned seed = 1; seed <= NSEEDS; seed++) {
    rng_t g = {seed};
    lgd_point_t p[90];
    for (int i = 0; i < 90; i++) {
      double fill = i < 30 ? 32 * MiB * i / 30.0 : 32 * MiB;
      set_point(&p[i], 2.0 * i, 1 * MiB + fill + rng_range(&g, 0, 256 * KiB), 0);
    }
    lgd_result_t r = analyze(p, 90);
    expect_verdict("plateau", seed, &r, 0, LG_PATTERN_PLATEAU);
  }
}

/* Saw-tooth: batches filled to 16 MiB over 6 snapshots and freed, period 0.6 s,
 * 600 snapshots (60 s): about three periods in each of the detector's windows. The
 * floor (512 KiB) jitters by up to 64 KiB. */
#define SAW_N 600
static void gen_sawtooth(lgd_point_t *p, unsigned seed) {
  rng_t g = {seed};
  int phase = (int)(rng_next(&g) % 6);
  for (int i = 0; i < SAW_N; i++) {
    int k = (i + phase) % 6; /* 0: just freed, 5: full */
    double v = 512 * KiB + 16 * MiB * k / 5.0 + rng_range(&g, 0, 64 * KiB);
    set_point(&p[i], 0.1 * i, v, 0);
  }
}

static void test_sawtooth(void **state) {
  (void)state;
  for (unsigned seed = 1; seed <= NSEEDS; seed++) {
    lgd_point_t p[SAW_N];
    gen_sawtooth(p, seed);
    lgd_result_t r = analyze(p, SAW_N);
    expect_verdict("sawtooth", seed, &r, 0, LG_PATTERN_SAWTOOTH);
  }
}

/* Saw-tooth seed 66 was once named "plateau": the plateau rule ran before the
 * saw-tooth rule and compared single window floors (early_growth = fl[h] - fl[0]: 32 KiB
 * of floor jitter passed "early_growth >= 4096 && > 3 * noise"), although every window
 * swings by 16 MiB and the floors have no trend (tau 0.10, p 0.45). */
static void test_sawtooth_floor_jitter_is_not_plateau(void **state) {
  (void)state;
  lgd_point_t p[SAW_N];
  gen_sawtooth(p, 66);
  lgd_result_t r = analyze(p, SAW_N);
  expect_verdict("sawtooth seed 66", 66, &r, 0, LG_PATTERN_SAWTOOTH);
}

/* A table allocated at start-up and kept: constant 20 MiB plus up to 2 KiB noise. */
static void test_constant_table(void **state) {
  (void)state;
  for (unsigned seed = 1; seed <= NSEEDS; seed++) {
    rng_t g = {seed};
    lgd_point_t p[100];
    for (int i = 0; i < 100; i++) set_point(&p[i], 0.5 * i, 20 * MiB + rng_range(&g, 0, 2 * KiB), 0);
    lgd_result_t r = analyze(p, 100);
    expect_verdict("constant", seed, &r, 0, LG_PATTERN_STABLE);
    assert_true(fabs(r.growth_bytes_per_s) < 100);
  }
  /* exactly constant too (all ties) */
  lgd_point_t c[40];
  for (int i = 0; i < 40; i++) set_point(&c[i], i, 20 * MiB, 0);
  lgd_result_t r = analyze(c, 40);
  expect_verdict("exact constant", 0, &r, 0, LG_PATTERN_STABLE);
  assert_true(r.growth_bytes_per_s == 0);
  assert_true(r.p == 1);
}

/* A slow leak, 1 KiB/s, buried in +-1 MiB of churn around a 64 MiB working set:
 * 60 snapshots one minute apart (an hour: 3.5 MiB retained in total, while one
 * snapshot interval only adds 60 KiB, 1/35 of the churn's range). */
#define SLOW_N 60
#define SLOW_RATE (1 * KiB)
static void gen_slow_leak(lgd_point_t *p, unsigned seed) {
  rng_t g = {seed};
  for (int i = 0; i < SLOW_N; i++) {
    double t = 60.0 * i;
    set_point(&p[i], t, 64 * MiB + SLOW_RATE * t + rng_range(&g, -1 * MiB, 1 * MiB), 0);
  }
}

static void check_slow_leak(unsigned seed, const lgd_result_t *r) {
  if (!r->leak) {
    dump("slow leak", seed, r);
    fail_msg("slow leak (1 KiB/s in +-1 MiB churn) not detected");
  }
  assert_true(lg_pattern_is_leak(r->pattern));
  expect_rel("slow growth_bytes_per_s", seed, r->growth_bytes_per_s, SLOW_RATE, 0.35);
}

static void test_slow_leak_in_churn(void **state) {
  (void)state;
  for (unsigned seed = 1; seed <= NSEEDS; seed++) {
    lgd_point_t p[SLOW_N];
    gen_slow_leak(p, seed);
    lgd_result_t r = analyze(p, SLOW_N);
    check_slow_leak(seed, &r);
  }
}

/* Slow-leak seeds once missed although the floors' trend is highly significant,
 * because auxiliary checks compared single window floors:
 *  - seed 297: tau 0.67, p 2e-7, slope 834 B/s, slope_late 974 B/s (> slope!), but
 *    late_growth = fl[W-1] - fl[h] = -19 KiB (one noisy floor), so still_growing = 0
 *    and the leak was named "plateau";
 *  - seed 348: tau 0.62, p 2e-6, slope 839 B/s over an hour (~2.8 MiB), but
 *    growth = median(last two floors) - median(first two) = 2.08 MiB < 3 * noise
 *    (2.10 MiB), so big_enough = 0 ("stable").
 * Both are detected now; kept as regression cases. */
static void test_slow_leak_single_floor_checks(void **state) {
  (void)state;
  static const unsigned seeds[] = {297, 348};
  for (size_t i = 0; i < sizeof seeds / sizeof *seeds; i++) {
    lgd_point_t p[SLOW_N];
    gen_slow_leak(p, seeds[i]);
    lgd_result_t r = analyze(p, SLOW_N);
    check_slow_leak(seeds[i], &r);
  }
}

/* Accelerating: live = 2 MiB + 2 KiB * t^2 over 60 s (growth speeds up 3x between
 * the halves), small noise. */
static void test_accelerating_leak(void **state) {
  (void)state;
  for (unsigned seed = 1; seed <= NSEEDS; seed++) {
    rng_t g = {seed};
    lgd_point_t p[60];
    for (int i = 0; i < 60; i++) {
      double t = i;
      set_point(&p[i], t, 2 * MiB + 2 * KiB * t * t + rng_range(&g, 0, 32 * KiB), 0);
    }
    lgd_result_t r = analyze(p, 60);
    expect_verdict("accelerating", seed, &r, 1, LG_PATTERN_ACCELERATING_LEAK);
  }
}

/* Step leak: a 1 MiB block retained every 10 snapshots, flat in between (a tiny
 * jitter of up to 1 KiB). */
static void test_step_leak(void **state) {
  (void)state;
  for (unsigned seed = 1; seed <= NSEEDS; seed++) {
    rng_t g = {seed};
    lgd_point_t p[60];
    for (int i = 0; i < 60; i++) set_point(&p[i], i, 4 * MiB + 1 * MiB * (i / 10) + rng_range(&g, 0, 1 * KiB), 0);
    lgd_result_t r = analyze(p, 60);
    expect_verdict("step", seed, &r, 1, LG_PATTERN_STEP_LEAK);
  }
}

/* Teardown: a leak whose last snapshot or two fall to (near) zero because the program
 * freed everything at exit is still a leak: one collapsed snapshot, two (the collector
 * snapshots again after the exit: 0, 0), or a two-step fall. Without the collapse rule
 * the series ends flat and fails the "still growing" test. */
static void test_teardown_left_out(void **state) {
  (void)state;
  lgd_point_t pts[32], pts2[96];
  const double tails[4][2] = {{-1, 0}, {0, 0}, {40 * KiB, 0}, {64 * KiB, 0}};
  for (int c = 0; c < 4; c++) {
    size_t n = 0;
    for (int i = 0; i < 15; i++, n++) set_point(&pts[n], 0.2 * i, 600 * KiB + 1000 * KiB * i, 0);
    for (int k = 0; k < 2; k++)
      if (tails[c][k] >= 0) {
        set_point(&pts[n], 0.2 * (double)n, tails[c][k], 0);
        n++;
      }
    lgd_result_t r = analyze(pts, n);
    expect_verdict("teardown", (unsigned)c, &r, 1, LG_PATTERN_LINEAR_LEAK);
    expect_rel("teardown growth", (unsigned)c, r.growth_bytes_per_s, 5000 * KiB, 0.05);
    assert_int_equal(r.windows, 7); /* 15 points analysed: n / 2 windows */
  }
  /* up to 10 % of the snapshots (8 of 88): the collector snapshots on while a slow
   * exit finishes, left out; 10 of 90 is too long to be the exit: kept (the last
   * windows' floors are 0) */
  for (int zeros = 8; zeros <= 10; zeros += 2) {
    size_t m = 0;
    for (int i = 0; i < 80; i++, m++) set_point(&pts2[m], 0.1 * i, 100 * KiB + 3 * KiB * i, 0);
    for (int k = 0; k < zeros; k++, m++) set_point(&pts2[m], 0.1 * (double)m, 0, 0);
    lgd_result_t r = analyze(pts2, m);
    if (zeros == 8) {
      expect_verdict("slow exit", 8, &r, 1, LG_PATTERN_LINEAR_LEAK);
      assert_true(r.floor_last > 300 * KiB);
    } else {
      assert_true(r.floor_last == 0);
    }
  }
  /* a fall to 60 % is not a teardown: all 17 points are analysed */
  size_t n = 0;
  for (int i = 0; i < 15; i++, n++) set_point(&pts[n], 0.2 * i, 600 * KiB + 1000 * KiB * i, 0);
  for (int k = 0; k < 2; k++, n++) set_point(&pts[n], 0.2 * (double)n, 0.6 * pts[14].last, 0);
  lgd_result_t r = analyze(pts, n);
  assert_int_equal(r.windows, 8);
}

static void test_too_few_points(void **state) {
  (void)state;
  lgd_point_t p[5];
  for (int i = 0; i < 5; i++) set_point(&p[i], i, 100 * MiB * i, i);
  for (size_t n = 0; n <= 5; n++) {
    lgd_result_t r = analyze(p, n);
    assert_int_equal(r.leak, 0);
    assert_int_equal(r.pattern, LG_PATTERN_STABLE);
    assert_true(r.confidence == 0);
    assert_true(r.p == 1);
    assert_true(isnan(r.growth_bytes_per_step));
  }
  /* enough points but no time elapsed: no verdict either */
  lgd_point_t q[10];
  for (int i = 0; i < 10; i++) set_point(&q[i], 5.0, 100 * MiB * i, 0);
  lgd_result_t r = analyze(q, 10);
  assert_int_equal(r.leak, 0);
}

/* Snapshots missing for a while (a CI machine starved the collector of torture_deep's
 * run): 10 points over 1.4 s with a 0.6-s hole, so that 2 of 5 equal-time windows are
 * empty. A 1.6 MB/s leak was "stable" (no verdict from 3 windows); the windows of
 * equal point counts find it. The same holes in a constant table with churn, in a
 * cache that filled before the hole and in a saw-tooth must stay no leak. */
static const double gap_t[10] = {0.1, 0.2, 0.3, 0.4, 0.98, 1.09, 1.19, 1.29, 1.39, 1.49};

static void test_gaps_leak(void **state) {
  (void)state;
  for (unsigned seed = 1; seed <= NSEEDS; seed++) {
    rng_t g = {seed};
    lgd_point_t p[10];
    for (int i = 0; i < 10; i++) set_point(&p[i], gap_t[i], 1.6e6 * gap_t[i] + rng_range(&g, 0, 16 * KiB), 0);
    lgd_result_t r = analyze(p, 10);
    if (!r.leak) dump("gaps leak", seed, &r);
    assert_int_equal(r.leak, 1);
    assert_int_equal(r.windows, 5);
    expect_rel("gaps growth_bytes_per_s", seed, r.growth_bytes_per_s, 1.6e6, 0.15);
  }
}

static void test_gaps_no_leak(void **state) {
  (void)state;
  for (unsigned seed = 1; seed <= NSEEDS; seed++) {
    rng_t g = {seed};
    lgd_point_t p[10];
    for (int i = 0; i < 10; i++) set_point(&p[i], gap_t[i], 20 * MiB + rng_range(&g, 0, 2 * MiB), 0);
    lgd_result_t r = analyze(p, 10);
    if (r.leak) dump("gaps table", seed, &r);
    assert_int_equal(r.leak, 0);
    /* a cache full before the hole: 3 points of filling, then full with jitter */
    for (int i = 0; i < 10; i++)
      set_point(&p[i], gap_t[i], (i < 3 ? 10 * MiB * (i + 1) : 32 * MiB) + rng_range(&g, 0, 256 * KiB), 0);
    r = analyze(p, 10);
    if (r.leak) dump("gaps cache", seed, &r);
    assert_int_equal(r.leak, 0);
    /* a saw-tooth: batches of 16 MiB built over 3 snapshots and freed */
    for (int i = 0; i < 10; i++)
      set_point(&p[i], gap_t[i], 512 * KiB + 8 * MiB * (i % 3) + rng_range(&g, 0, 64 * KiB), 0);
    r = analyze(p, 10);
    if (r.leak) dump("gaps sawtooth", seed, &r);
    assert_int_equal(r.leak, 0);
  }
}

static void test_invalid_arguments(void **state) {
  (void)state;
  lgd_point_t p[8];
  for (int i = 0; i < 8; i++) set_point(&p[i], i, i, 0);
  lgd_result_t r;
  assert_int_equal(lgd_analyze(NULL, 8, NULL, &r), -EINVAL);
  assert_int_equal(lgd_analyze(p, 8, NULL, NULL), -EINVAL);
}

/* A training loop: 4 steps per second, each retaining 2000 bytes (plus churn of up
 * to 32 KiB), steps counted from 1000 on. */
static void test_growth_per_step(void **state) {
  (void)state;
  for (unsigned seed = 1; seed <= NSEEDS; seed++) {
    rng_t g = {seed};
    lgd_point_t p[80];
    for (int i = 0; i < 80; i++) {
      double t = 0.5 * i, step = 1000 + 4 * t;
      set_point(&p[i], t, 1 * MiB + 2000 * (step - 1000) + rng_range(&g, 0, 32 * KiB), step);
    }
    lgd_result_t r = analyze(p, 80);
    expect_verdict("per-step", seed, &r, 1, LG_PATTERN_LINEAR_LEAK);
    expect_rel("growth_bytes_per_step", seed, r.growth_bytes_per_step, 2000, 0.10);
    expect_rel("growth_bytes_per_s", seed, r.growth_bytes_per_s, 8000, 0.10);
  }
}

/* min_growth_bytes: the same clean 10 KiB of growth is a leak with the default
 * threshold (4096) and is ignored with a 1 MiB threshold. */
static void test_min_growth_option(void **state) {
  (void)state;
  lgd_point_t p[40];
  for (int i = 0; i < 40; i++) set_point(&p[i], i, 1 * MiB + 256.0 * i, 0);
  lgd_result_t r;
  assert_int_equal(lgd_analyze(p, 40, NULL, &r), 0);
  assert_int_equal(r.leak, 1);
  lgd_options_t o = {.min_growth_bytes = 1 * MiB};
  assert_int_equal(lgd_analyze(p, 40, &o, &r), 0);
  assert_int_equal(r.leak, 0);
}

/* ------------------------------------------------------------------ series */

static void test_series_decimation(void **state) {
  (void)state;
  lgd_series_t s;
  lgd_series_init(&s, 64);
  assert_int_equal(s.max_points, 64);
  rng_t g = {42};
  double gmin = INFINITY, gmax = -INFINITY;
  const int N = 1000;
  for (int i = 0; i < N; i++) {
    double v = rng_range(&g, 1000, 2000);
    if (i == 137) v = 3;   /* global minimum, in the middle */
    if (i == 641) v = 1e9; /* global maximum */
    gmin = fmin(gmin, v);
    gmax = fmax(gmax, v);
    assert_int_equal(lgd_series_add(&s, i, v, 2.0 * i), 0);
    assert_true(s.n <= s.max_points);
  }
  assert_true(s.n > 0 && s.n <= 64);
  assert_true(s.n < (size_t)N);
  double lo = INFINITY, hi = -INFINITY;
  for (size_t i = 0; i < s.n; i++) {
    lo = fmin(lo, s.pts[i].lo);
    hi = fmax(hi, s.pts[i].hi);
    assert_true(s.pts[i].lo <= s.pts[i].last && s.pts[i].last <= s.pts[i].hi);
    if (i) assert_true(s.pts[i].t > s.pts[i - 1].t);
  }
  assert_true(lo == gmin);
  assert_true(hi == gmax);
  /* the newest sample is always kept as is */
  assert_true(s.pts[s.n - 1].t == N - 1);
  assert_true(s.pts[s.n - 1].step == 2.0 * (N - 1));
  /* an even resolution over the whole run: every point but the last spans the same
   * number of samples (the first one too: it was a point covering most of the run
   * when only the whole series was halved, each time merging its oldest points again) */
  double span0 = s.pts[1].t - s.pts[0].t;
  assert_true(s.pts[0].t < N / 16.0);
  for (size_t i = 1; i + 1 < s.n; i++) assert_true(s.pts[i].t - s.pts[i - 1].t == span0);
  lgd_series_free(&s);
  assert_null(s.pts);
  assert_int_equal(s.n, 0);

  /* a small max_points is raised to 16, an odd one made even */
  lgd_series_init(&s, 3);
  assert_int_equal(s.max_points, 16);
  lgd_series_free(&s);
  lgd_series_init(&s, 33);
  assert_int_equal(s.max_points, 32);
  for (int i = 0; i < 100; i++) assert_int_equal(lgd_series_add(&s, i, i, 0), 0);
  assert_true(s.n <= 32);
  lgd_series_free(&s);
}

/* A decimated leak is still a leak: 4000 samples of a churning linear leak through
 * a 256-point series. */
static void test_series_then_analyze(void **state) {
  (void)state;
  lgd_series_t s;
  lgd_series_init(&s, 256);
  rng_t g = {7};
  for (int i = 0; i < 4000; i++) {
    double t = 0.05 * i;
    assert_int_equal(lgd_series_add(&s, t, 4 * MiB + 16 * KiB * t + rng_range(&g, 0, 1 * MiB), 0), 0);
  }
  assert_true(s.n <= 256);
  lgd_result_t r = analyze(s.pts, s.n);
  expect_verdict("decimated linear", 7, &r, 1, LG_PATTERN_LINEAR_LEAK);
  expect_rel("decimated growth", 7, r.growth_bytes_per_s, 16 * KiB, 0.10);
  lgd_series_free(&s);
}

/* ------------------------------------------------------------------ recent growth */

static lgd_result_t analyze_recent(const lgd_point_t *pts, size_t n) {
  lgd_result_t r;
  memset(&r, 0x5a, sizeof r);
  assert_int_equal(lgd_analyze_recent(pts, n, NULL, &r), 0);
  return r;
}

/* 13 s at 0.1 s: 4 MiB of tables and up to 1 MiB of churn, then from 10 s on 5.5 MiB/s
 * kept (the 3-second leak at the end of a 13-second run of issue #10). The whole-run
 * trend test cannot see it; the recent part can, with its rate and start. */
static void test_recent_late_leak(void **state) {
  (void)state;
  for (unsigned seed = 1; seed <= NSEEDS; seed++) {
    rng_t g = {seed * 7919u};
    lgd_point_t p[130];
    for (int i = 0; i < 130; i++) {
      double t = 0.1 * (i + 1), kept = t > 10 ? (t - 10) * 5.5 * MiB : 0;
      set_point(&p[i], t, 4 * MiB + kept + rng_range(&g, 0, 1 * MiB), i);
    }
    lgd_result_t whole = analyze(p, 130), r = analyze_recent(p, 130);
    if (!r.leak || !(r.since_s >= 9.0 && r.since_s <= 10.9)) {
      dump("late leak", seed, &r);
      print_error("late leak seed %u: want a leak since ~10 s, got since %.2f (whole run: leak=%d)\n", seed, r.since_s,
                  whole.leak);
      fail();
    }
    expect_rel("late leak rate", seed, r.growth_bytes_per_s, 5.5 * MiB, 0.15);
    assert_true(r.until_s > 12.9);
  }
}

/* Recorded in CI (python_ok_detached, a false alarm): the site of `h` in a training loop
 * that keeps `recent = deque(maxlen=16)` of 256-KiB tensors. Nothing until the loop
 * begins at 1.9 s, 16 tensors by 2.2 s, then 14 to 17 alive (whether the next `h`
 * exists at the snapshot) for 3.7 s, and the teardown. The late half's floors drift up
 * by two tensors (Mann-Kendall tau 0.56 on them alone), and the whole-run slope, which
 * the rise inflates, let that drift pass for "still growing": step-leak, confidence
 * 0.65. Its late growth is 11 % of its early growth: a plateau. {t ms, live bytes}. */
static const int64_t deque16[][2] = {
    {202, 0},        {401, 0},        {604, 0},        {801, 0},        {1005, 0},       {1199, 0},
    {1405, 0},       {1603, 0},       {1801, 0},       {1898, 267035},  {1921, 599971},  {1942, 801105},
    {1963, 1068140}, {1984, 1335175}, {2004, 1602210}, {2025, 1602210}, {2046, 2136280}, {2067, 2403315},
    {2078, 2403315}, {2098, 2670350}, {2119, 2937385}, {2130, 2937385}, {2150, 3204420}, {2171, 3738490},
    {2181, 3738490}, {2201, 3738490}, {2222, 4005525}, {2232, 3738490}, {2253, 3738490}, {2274, 4005525},
    {2284, 3738490}, {2305, 4005525}, {2325, 4005525}, {2356, 4272560}, {2366, 4005525}, {2387, 4005525},
    {2397, 4272560}, {2408, 4272560}, {2428, 4539595}, {2450, 4605383}, {2463, 4272560}, {2483, 4272560},
    {2504, 4539595}, {2514, 4272560}, {2534, 4272560}, {2555, 4539595}, {2575, 4539595}, {2586, 4272560},
    {2596, 4539595}, {2607, 4272560}, {2627, 4539595}, {2648, 4539595}, {2660, 4272560}, {2680, 4539595},
    {2701, 4539595}, {2711, 4272560}, {2732, 4272560}, {2752, 4539595}, {2773, 4539595}, {2784, 4272560},
    {2804, 4272560}, {2825, 4539595}, {2845, 4539595}, {2857, 4272560}, {2878, 4005525}, {2898, 4272560},
    {2919, 4272560}, {2930, 4005525}, {2951, 4005525}, {2972, 4272560}, {2993, 4272560}, {3004, 4005525},
    {3024, 4005525}, {3044, 4272560}, {3066, 4272560}, {3077, 4005525}, {3097, 4005525}, {3118, 4272560},
    {3138, 4005525}, {3149, 3738490}, {3169, 4005525}, {3190, 4005525}, {3200, 4272560}, {3210, 4272560},
    {3221, 4005525}, {3241, 4005525}, {3263, 4272560}, {3284, 4272560}, {3294, 4005525}, {3314, 4005525},
    {3335, 4272560}, {3356, 4005525}, {3376, 4005525}, {3387, 3738490}, {3397, 4005525}, {3408, 3738490},
    {3428, 4338348}, {3449, 4272560}, {3461, 4005525}, {3482, 4272560}, {3502, 4272560}, {3512, 4005525},
    {3533, 4005525}, {3553, 4005525}, {3574, 4272560}, {3594, 4272560}, {3605, 4005525}, {3615, 4272560},
    {3636, 4272560}, {3658, 4539595}, {3679, 4539595}, {3689, 4272560}, {3710, 4272560}, {3730, 4605139},
    {3751, 4605139}, {3761, 4272560}, {3782, 4272560}, {3802, 4539595}, {3823, 4539595}, {3833, 4272560},
    {3854, 4272560}, {3876, 4539595}, {3897, 4539595}, {3917, 4539595}, {3938, 4539595}, {3958, 4539595},
    {3980, 4539595}, {3990, 4272560}, {4002, 4539595}, {4013, 4272560}, {4034, 4539595}, {4045, 4272560},
    {4067, 4272560}, {4088, 4539595}, {4109, 4539595}, {4119, 4272560}, {4140, 4272560}, {4160, 4539595},
    {4181, 4539595}, {4191, 4272560}, {4202, 4539595}, {4212, 4539595}, {4232, 4272560}, {4243, 4005525},
    {4266, 4272560}, {4286, 4272560}, {4296, 4005525}, {4317, 4005525}, {4338, 4272560}, {4358, 4272560},
    {4379, 4272560}, {4390, 4005525}, {4400, 4272560}, {4411, 4005525}, {4431, 4272560}, {4452, 4272560},
    {4464, 4005525}, {4485, 4272560}, {4505, 4272560}, {4516, 4272560}, {4537, 4272560}, {4557, 4539595},
    {4578, 4539595}, {4588, 4272560}, {4598, 4539595}, {4609, 4272560}, {4629, 4539595}, {4650, 4539595},
    {4662, 4272560}, {4682, 4005525}, {4703, 4272560}, {4723, 4272560}, {4734, 4005525}, {4754, 4005525},
    {4775, 4272560}, {4795, 4272560}, {4806, 4005525}, {4826, 4005525}, {4847, 4272560}, {4869, 4272560},
    {4880, 4005525}, {4900, 4272560}, {4921, 4272560}, {4931, 4005525}, {4952, 4005525}, {4972, 4539595},
    {4993, 4539595}, {5003, 4272560}, {5024, 4272560}, {5044, 4539595}, {5067, 4539595}, {5078, 4272560},
    {5098, 4272560}, {5118, 4272560}, {5139, 4539595}, {5149, 4272560}, {5170, 4272560}, {5190, 4272560},
    {5201, 4539595}, {5211, 4539595}, {5232, 4539595}, {5242, 4272560}, {5264, 4539595}, {5285, 4539595},
    {5295, 4272560}, {5316, 4272560}, {5336, 4539595}, {5357, 4539595}, {5368, 4338136}, {5388, 4338136},
    {5399, 4605171}, {5409, 4338136}, {5430, 4605171}, {5450, 4605171}, {5463, 4338136}, {5483, 4671072},
    {5504, 4671072}, {5514, 4338136}, {5535, 4338136}, {5556, 4605171}, {5566, 4338136}, {5586, 4338136},
    {5597, 4605171}, {5607, 4338136}, {5628, 4605171}, {5638, 4338136}, {5666, 4539595}, {5677, 4338348},
    {5697, 4539595}, {5718, 4539595}, {5728, 4272560}, {5748, 4272560}, {5769, 4539595}, {5790, 4539595},
    {5800, 4272560}, {5810, 4539595}, {5821, 4272560}, {5841, 4272560}, {5864, 4539595}, {5885, 4272560},
    {5996, 0},       {6203, 0},       {6346, 0},
};

static void test_bounded_deque_is_not_a_leak(void **state) {
  (void)state;
  size_t n = sizeof deque16 / sizeof *deque16;
  lgd_point_t p[sizeof deque16 / sizeof *deque16];
  for (size_t i = 0; i < n; i++) set_point(&p[i], deque16[i][0] / 1000.0, (double)deque16[i][1], (double)i);
  lgd_result_t r = analyze_recent(p, n);
  if (r.leak || r.pattern != LG_PATTERN_PLATEAU) {
    dump("bounded deque", 0, &r);
    fail_msg("a deque that filled in 0.3 s and stayed level for 3.7 s: want plateau, not a leak");
  }
}

/* A cache evicted at 8 s and refilling to the level it held before: the recent part
 * rises, but never above what the site already held. */
static void test_recent_refill_is_not_a_leak(void **state) {
  (void)state;
  for (unsigned seed = 1; seed <= NSEEDS; seed++) {
    rng_t g = {seed * 104729u};
    lgd_point_t p[130];
    for (int i = 0; i < 130; i++) {
      double t = 0.1 * (i + 1), c;
      if (t < 3) c = t / 3 * 2 * MiB;
      else if (t < 8) c = 2 * MiB;
      else c = (t - 8) / 5.5 * 2 * MiB;
      set_point(&p[i], t, 1 * MiB + c + rng_range(&g, 0, 64 * KiB), i);
    }
    lgd_result_t r = analyze_recent(p, 130);
    if (r.leak) {
      dump("refill", seed, &r);
      fail();
    }
  }
}

/* Batches of 3 s that are freed at once: the run ends on a rising edge. */
static void test_recent_sawtooth_edge_is_not_a_leak(void **state) {
  (void)state;
  for (unsigned seed = 1; seed <= NSEEDS; seed++) {
    rng_t g = {seed * 15485863u};
    lgd_point_t p[140];
    for (int i = 0; i < 140; i++) {
      double t = 0.1 * (i + 1), phase = fmod(t, 3.0);
      set_point(&p[i], t, 2 * MiB + phase / 3.0 * 1 * MiB + rng_range(&g, 0, 32 * KiB), i);
    }
    lgd_result_t r = analyze_recent(p, 140);
    if (r.leak) {
      dump("sawtooth edge", seed, &r);
      fail();
    }
  }
}

/* A teardown at exit is left out of the analysed part: until_s is before it. */
/* 5. Kept, not given back. Recorded (leakguard run -- redis-server, under
 * redis-benchmark -r 20000 -n 200000, Debian's redis 7.0): the live bytes of
 * clientsCronResizeOutputBuffer, as (seconds, bytes) at each of the run's 287 snapshots
 * (carried forward from the samples table, as the report reads them). The benchmark's 50
 * clients get output buffers sized to each test's replies and free them between tests
 * (1 s at zero every 6-35 s, shorter than a window); the LRANGE tests' replies grow
 * test after test, so the window floors rise: the old detector called it a linear leak
 * of 1.4 KiB/s. A leak under the same saw-tooth keeps its lows, and a leak after a
 * start-up spike that was freed (the fall comes before the growth) is still a leak. */
static const double redis_buffers[][2] = {
    {0.10, 0},        {0.20, 0},        {0.29, 0},        {0.40, 0},        {0.50, 0},        {0.60, 0},
    {0.70, 0},        {0.80, 0},        {0.90, 0},        {1.00, 0},        {1.10, 0},        {1.20, 0},
    {1.30, 0},        {1.40, 0},        {1.50, 0},        {1.60, 0},        {1.69, 0},        {1.80, 0},
    {1.90, 0},        {2.00, 0},        {2.10, 0},        {2.20, 0},        {2.30, 0},        {2.40, 0},
    {2.49, 0},        {2.60, 0},        {2.70, 0},        {2.80, 0},        {2.90, 0},        {3.00, 0},
    {3.09, 5120},     {3.20, 10240},    {3.31, 15360},    {3.42, 20480},    {3.54, 25600},    {3.66, 35840},
    {3.77, 40960},    {3.90, 46080},    {4.03, 51200},    {4.17, 51200},    {4.30, 51200},    {4.45, 51200},
    {4.60, 51200},    {4.75, 51200},    {4.91, 51200},    {5.08, 51200},    {5.25, 51200},    {5.42, 51200},
    {5.60, 51200},    {5.78, 51200},    {5.98, 51200},    {6.18, 51200},    {6.39, 51200},    {6.60, 51200},
    {6.82, 51200},    {7.05, 51200},    {7.28, 51200},    {7.53, 51200},    {7.78, 51200},    {8.04, 51200},
    {8.31, 51200},    {8.58, 0},        {8.86, 0},        {9.17, 0},        {9.48, 0},        {9.79, 15360},
    {10.11, 35840},   {10.45, 51200},   {10.80, 51200},   {11.17, 51200},   {11.54, 51200},   {11.92, 51200},
    {12.32, 51200},   {12.73, 51200},   {13.16, 51200},   {13.59, 51200},   {14.04, 51200},   {14.52, 0},
    {15.00, 0},       {15.49, 5120},    {16.02, 30720},   {16.55, 51200},   {17.10, 51200},   {17.67, 51200},
    {18.26, 51200},   {18.87, 51200},   {19.50, 51200},   {20.15, 51200},   {20.82, 51200},   {21.51, 51200},
    {22.24, 0},       {22.98, 15360},   {23.74, 51200},   {24.53, 51200},   {25.35, 51200},   {26.20, 51200},
    {27.07, 51200},   {27.97, 0},       {28.91, 10240},   {29.87, 51200},   {30.87, 51200},   {31.87, 51200},
    {32.88, 51200},   {33.87, 51200},   {34.86, 0},       {35.87, 40960},   {36.87, 51200},   {37.87, 51200},
    {38.87, 51200},   {39.86, 51200},   {40.86, 51200},   {41.87, 0},       {42.87, 40960},   {43.87, 51200},
    {44.87, 51200},   {45.87, 51200},   {46.86, 51200},   {47.87, 51200},   {48.86, 0},       {49.87, 30720},
    {50.87, 51200},   {51.87, 51200},   {52.87, 51200},   {53.87, 51200},   {54.87, 51200},   {55.87, 0},
    {56.86, 25600},   {57.86, 51200},   {58.87, 51200},   {59.86, 51200},   {60.87, 51200},   {61.87, 51200},
    {62.87, 0},       {63.86, 46080},   {64.87, 51200},   {65.86, 51200},   {66.87, 51200},   {67.86, 51200},
    {68.87, 0},       {69.87, 10240},   {70.86, 51200},   {71.86, 51200},   {72.87, 51200},   {73.87, 51200},
    {74.87, 51200},   {75.87, 51200},   {76.86, 0},       {77.87, 25600},   {78.87, 51200},   {79.87, 51200},
    {80.87, 51200},   {81.87, 51200},   {82.86, 51200},   {83.86, 0},       {84.87, 35840},   {85.87, 51200},
    {86.87, 51200},   {87.87, 51200},   {88.86, 51200},   {89.87, 51200},   {90.86, 51200},   {91.87, 51200},
    {92.86, 0},       {93.87, 10240},   {94.87, 51200},   {95.87, 51200},   {96.87, 51200},   {97.86, 51200},
    {98.87, 51200},   {99.86, 51200},   {100.86, 0},      {101.87, 46080},  {102.87, 51200},  {103.87, 51200},
    {104.87, 51200},  {105.87, 51200},  {106.87, 51200},  {107.87, 51200},  {108.87, 0},      {109.86, 25600},
    {110.87, 51200},  {111.87, 51200},  {112.86, 51200},  {113.86, 51200},  {114.87, 51200},  {115.87, 51200},
    {116.87, 51200},  {117.87, 51200},  {118.87, 51200},  {119.86, 0},      {120.87, 27070},  {121.87, 135350},
    {122.87, 135350}, {123.87, 135350}, {124.87, 135350}, {125.87, 135350}, {126.86, 135350}, {127.86, 135350},
    {128.86, 135350}, {129.87, 135350}, {130.87, 135350}, {131.87, 135350}, {132.87, 135350}, {133.87, 135350},
    {134.87, 135350}, {135.87, 135350}, {136.87, 135350}, {137.87, 135350}, {138.87, 0},      {139.87, 90140},
    {140.87, 225350}, {141.87, 225350}, {142.87, 225350}, {143.87, 225350}, {144.86, 225350}, {145.87, 225350},
    {146.87, 225350}, {147.87, 225350}, {148.87, 225350}, {149.87, 225350}, {150.87, 225350}, {151.86, 225350},
    {152.87, 225350}, {153.87, 225350}, {154.86, 225350}, {155.87, 225350}, {156.86, 225350}, {157.87, 225350},
    {158.87, 225350}, {159.87, 225350}, {160.87, 225350}, {161.87, 225350}, {162.86, 225350}, {163.87, 225350},
    {164.87, 225350}, {165.87, 225350}, {166.87, 225350}, {167.87, 0},      {168.87, 27035},  {169.86, 270350},
    {170.86, 270350}, {171.86, 270350}, {172.87, 270350}, {173.87, 270350}, {174.87, 270350}, {175.86, 270350},
    {176.86, 270350}, {177.87, 270350}, {178.87, 270350}, {179.87, 270350}, {180.87, 270350}, {181.87, 270350},
    {182.87, 270350}, {183.87, 270350}, {184.87, 270350}, {185.87, 270350}, {186.87, 270350}, {187.87, 270350},
    {188.87, 270350}, {189.86, 270350}, {190.87, 270350}, {191.86, 270350}, {192.87, 270350}, {193.87, 270350},
    {194.87, 270350}, {195.87, 270350}, {196.87, 270350}, {197.87, 270350}, {198.87, 270350}, {199.87, 270350},
    {200.86, 270350}, {201.86, 270350}, {202.87, 270350}, {203.87, 270350}, {204.87, 0},      {205.87, 40960},
    {206.86, 51200},  {207.87, 51200},  {208.87, 51200},  {209.87, 51200},  {210.86, 51200},  {211.86, 51200},
    {212.87, 51200},  {213.86, 51200},  {214.86, 51200},  {215.86, 51200},  {216.06, 0},
};

static void test_given_back_is_not_a_leak(void **state) {
  (void)state;
  const size_t n = sizeof redis_buffers / sizeof *redis_buffers;
  lgd_point_t p[sizeof redis_buffers / sizeof *redis_buffers];
  for (size_t i = 0; i < n; i++) set_point(&p[i], redis_buffers[i][0], redis_buffers[i][1], 0); /* the site alone */
  lgd_result_t r = analyze_recent(p, n);
  if (r.leak) {
    dump("redis output buffers", 0, &r);
    fail();
  }
  for (unsigned seed = 1; seed <= NSEEDS; seed++) {
    rng_t g = {seed * 31u};
    lgd_point_t q[216], s[216];
    for (int i = 0; i < 216; i++) {
      double t = i + 1, in = fmod(t, 27), buffers = in < 1 ? 0 : (50 + 30 * floor(t / 27)) * KiB;
      set_point(&q[i], t, 6 * MiB + buffers + 2 * KiB * t + rng_range(&g, 0, 8 * KiB), 0); /* 2 KiB/s kept */
      double spike = t < 3 ? 4 * MiB : 0;                                                  /* freed after 3 s */
      set_point(&s[i], t, 6 * MiB + spike + 16 * KiB * t + rng_range(&g, 0, 64 * KiB), 0);
    }
    r = analyze(q, 216);
    if (!r.leak) {
      dump("saw-tooth over a leak", seed, &r);
      fail();
    }
    r = analyze(s, 216);
    expect_verdict("leak after a freed spike", seed, &r, 1, LG_PATTERN_LINEAR_LEAK);
  }
}

/* A keyspace of random keys filled late in the run (redis-benchmark's HSET over 20 000
 * fields, issue #34): flat for 28 s, then 4 MiB that come ever slower (63 % of the
 * keys in 0.8 s), level for the last 4 s of a 34-s run, snapshots 0.5 s apart: not a
 * leak. What rule 6 (stopped) must leave alone: the same run with the memory still
 * rising to the end is a leak; so is a two-step staircase whose second step came 5 s
 * before the end, 10 s after the first (the time since is shorter than the rise). */
static void test_stopped_fill_is_not_a_leak(void **state) {
  (void)state;
  for (unsigned seed = 1; seed <= NSEEDS; seed++) {
    rng_t g = {seed * 104729u};
    lgd_point_t f[69], l[69], s[69];
    for (int i = 0; i < 69; i++) {
      double t = 0.5 * i, fill = t < 28 ? 0 : 4 * MiB * (1 - exp(-(t - 28) / 0.8));
      double lin = t < 28 ? 0 : 4 * MiB * (t - 28) / 6, steps = t < 19 ? 0 : t < 29 ? 2 * MiB : 4 * MiB;
      double noise = rng_range(&g, 0, 16 * KiB);
      set_point(&f[i], t, 1 * MiB + fill + noise, 0);
      set_point(&l[i], t, 1 * MiB + lin + noise, 0);
      set_point(&s[i], t, 1 * MiB + steps + noise, 0);
    }
    lgd_result_t r = analyze_recent(f, 69);
    if (r.leak) {
      dump("late fill that stopped", seed, &r);
      fail();
    }
    r = analyze_recent(l, 69);
    if (!r.leak) {
      dump("late leak still rising", seed, &r);
      fail();
    }
    r = analyze_recent(s, 69);
    if (!r.leak) {
      dump("two steps, the last 5 s ago", seed, &r);
      fail();
    }
  }
}

/* redis-server's HSET keyspace (issue #34), one stack of _sdsnewlen as the report read
 * it: nothing until 26 s, a first 0.9 MiB, the fill from 28.9 s on, 4.08 MB from
 * 31.8 s, and level to the end, here 6 s after it got there (the recording's last 2 s,
 * and 4 more). It rose from 25.3 s to 30.8 s and has stood at its level for 7 s: a
 * fill that stopped. Before rule 6 a step leak, on the whole run. {t ms, live bytes} */
static const int64_t hset_fill[][2] = {
    {97, 0},          {189, 0},         {289, 0},         {392, 0},         {497, 0},         {590, 0},
    {696, 0},         {791, 0},         {894, 0},         {990, 0},         {1097, 0},        {1191, 0},
    {1294, 0},        {1390, 0},        {1501, 0},        {1594, 0},        {1696, 0},        {1793, 0},
    {1890, 0},        {1992, 0},        {2097, 0},        {2197, 0},        {2298, 0},        {2398, 0},
    {2496, 0},        {2595, 0},        {2698, 0},        {2794, 0},        {2893, 0},        {2991, 0},
    {3098, 0},        {3195, 0},        {3313, 0},        {3412, 0},        {3531, 0},        {3647, 0},
    {3765, 0},        {3895, 0},        {4026, 0},        {4159, 0},        {4296, 0},        {4439, 0},
    {4589, 0},        {4744, 0},        {4898, 0},        {5061, 0},        {5238, 0},        {5406, 0},
    {5596, 0},        {5780, 0},        {5970, 0},        {6170, 0},        {6375, 0},        {6589, 0},
    {6807, 0},        {7037, 0},        {7273, 0},        {7520, 0},        {7770, 0},        {8028, 0},
    {8295, 0},        {8575, 0},        {8852, 0},        {9156, 0},        {9455, 0},        {9777, 0},
    {10096, 0},       {10441, 0},       {10785, 0},       {11144, 0},       {11515, 0},       {11910, 0},
    {12295, 0},       {12712, 0},       {13135, 0},       {13575, 0},       {14027, 0},       {14492, 0},
    {14971, 0},       {15471, 0},       {15989, 0},       {16529, 0},       {17078, 0},       {17644, 0},
    {18230, 0},       {18837, 0},       {19472, 0},       {20120, 0},       {20788, 0},       {21486, 0},
    {22202, 0},       {22942, 0},       {23702, 0},       {24502, 0},       {25314, 0},       {26159, 965328},
    {27027, 965328},  {27932, 965328},  {28860, 965328},  {29822, 3135072}, {30822, 3852948}, {31821, 4067148},
    {32817, 4079184}, {33826, 4080000}, {34826, 4080000}, {35826, 4080000}, {36826, 4080000}, {37826, 4080000},
};

static void test_redis_hset_fill_is_not_a_leak(void **state) {
  (void)state;
  size_t n = sizeof hset_fill / sizeof *hset_fill;
  lgd_point_t p[sizeof hset_fill / sizeof *hset_fill];
  for (size_t i = 0; i < n; i++) set_point(&p[i], hset_fill[i][0] / 1000.0, (double)hset_fill[i][1], 0);
  lgd_result_t r = analyze_recent(p, n);
  if (r.leak) {
    dump("redis HSET keyspace", 0, &r);
    fail_msg("a fill level for longer than it rose: want no leak");
  }
}

/* attach_python_small beside the other attach tests: a linked list growing 2.5 MB/s
 * until its main thread starves at 3 s (0.4 MB/s), then no snapshot while the holder
 * walk holds the process, and a last one at 6.3 s. Level for 2.6 s after a rise of
 * 3 s, but over one snapshot against 30: the hole is no evidence that it stopped. */
static void test_hole_before_the_end_is_still_a_leak(void **state) {
  (void)state;
  for (unsigned seed = 1; seed <= NSEEDS; seed++) {
    rng_t g = {seed * 389u};
    lgd_point_t p[39];
    double v = 0;
    for (int i = 0; i < 38; i++) {
      double t = 0.1 * i;
      v = t <= 3.0 ? 2.5 * MiB * t : 7.5 * MiB + 0.4 * MiB * (t - 3.0);
      set_point(&p[i], t, 240 * KiB + v + rng_range(&g, 0, 8 * KiB), 0);
    }
    set_point(&p[38], 6.3, 240 * KiB + v + 100 * KiB, 0);
    lgd_result_t r = analyze_recent(p, 39);
    if (!r.leak) {
      dump("leak, then a hole in the snapshots", seed, &r);
      fail();
    }
  }
}

/* A list pushed onto for 18 s and popped to a third of its peak in the last 2 s (the
 * LPUSH-then-LPOP shape, issue #34): it gave most of its growth back. */
static void test_released_at_end_is_not_a_leak(void **state) {
  (void)state;
  for (unsigned seed = 1; seed <= NSEEDS; seed++) {
    rng_t g = {seed * 977u};
    lgd_point_t p[200];
    for (int i = 0; i < 200; i++) {
      double t = 0.1 * i, list = t < 18 ? 2.5 * MiB * t : 45 * MiB - 15 * MiB * (t - 18);
      set_point(&p[i], t, 1 * MiB + list + rng_range(&g, 0, 64 * KiB), 0);
    }
    lgd_result_t r = analyze_recent(p, 200);
    if (r.leak) {
      dump("grew then released", seed, &r);
      fail();
    }
  }
}

static void test_until_before_teardown(void **state) {
  (void)state;
  lgd_point_t p[60];
  for (int i = 0; i < 58; i++) set_point(&p[i], i + 1, (i + 1) * 64 * KiB, 0);
  set_point(&p[58], 59, 0, 0);
  set_point(&p[59], 60, 0, 0);
  lgd_result_t r = analyze(p, 60);
  assert_true(r.leak);
  assert_true(r.until_s == 58);
}

/* A collector stopped for 10 s under load (the fault suite's stalled case, run 1 of a
 * flake hunt beside two CPU hogs): 16 points of a steady 16 KiB-per-fork leak before the
 * stop, 2 after it resumed, before the exit. The equal-time windows leave 3 non-empty;
 * the equal-count windows used then must not put the last point before the gap with
 * the points after it (its floor and their times made the late slope a tenth of the
 * real one, and the leak was missed). The series is that run's, as the report reads it. */
static void test_gap_after_stall(void **state) {
  (void)state;
  static const double t[18] = {0.060, 0.158, 0.373, 0.378, 0.468, 0.565, 0.680, 0.798,  0.868,
                               1.033, 1.097, 1.182, 1.265, 1.427, 1.487, 1.564, 13.426, 14.445};
  static const double v[18] = {16384,  32768,  81920,  81920,  98304,  131072, 147456, 163840,  180224,
                               212992, 229376, 245760, 262144, 294912, 311296, 327680, 2736128, 3014656};
  lgd_point_t p[18];
  for (int i = 0; i < 18; i++) set_point(&p[i], t[i], v[i], 0);
  lgd_result_t r = analyze(p, 18);
  if (!r.leak) dump("gap after stall", 0, &r);
  assert_int_equal(r.leak, 1);
  assert_int_equal(r.windows, 6); /* 5 by count, the last split at the gap */
  expect_rel("gap after stall growth_bytes_per_s", 0, r.growth_bytes_per_s, (3014656.0 - 16384) / (14.445 - 0.060),
             0.10);
  r = analyze_recent(p, 18);
  assert_int_equal(r.leak, 1);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_recent_late_leak),
      cmocka_unit_test(test_bounded_deque_is_not_a_leak),
      cmocka_unit_test(test_recent_refill_is_not_a_leak),
      cmocka_unit_test(test_recent_sawtooth_edge_is_not_a_leak),
      cmocka_unit_test(test_until_before_teardown),
      cmocka_unit_test(test_given_back_is_not_a_leak),
      cmocka_unit_test(test_stopped_fill_is_not_a_leak),
      cmocka_unit_test(test_redis_hset_fill_is_not_a_leak),
      cmocka_unit_test(test_released_at_end_is_not_a_leak),
      cmocka_unit_test(test_hole_before_the_end_is_still_a_leak),
      cmocka_unit_test(test_linear_leak_under_churn),
      cmocka_unit_test(test_plateau_cache),
      cmocka_unit_test(test_sawtooth),
      cmocka_unit_test(test_sawtooth_floor_jitter_is_not_plateau),
      cmocka_unit_test(test_constant_table),
      cmocka_unit_test(test_slow_leak_in_churn),
      cmocka_unit_test(test_slow_leak_single_floor_checks),
      cmocka_unit_test(test_accelerating_leak),
      cmocka_unit_test(test_step_leak),
      cmocka_unit_test(test_teardown_left_out),
      cmocka_unit_test(test_too_few_points),
      cmocka_unit_test(test_gaps_leak),
      cmocka_unit_test(test_gaps_no_leak),
      cmocka_unit_test(test_gap_after_stall),
      cmocka_unit_test(test_invalid_arguments),
      cmocka_unit_test(test_growth_per_step),
      cmocka_unit_test(test_min_growth_option),
      cmocka_unit_test(test_series_decimation),
      cmocka_unit_test(test_series_then_analyze),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
