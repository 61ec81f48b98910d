/* SPDX-License-Identifier: MIT */
/* test_guard_levels.c - the guard's level state machine on synthetic and recorded
 * series: thresholds, hysteresis, minimum dwell, predictive (trend) trigger, PSI. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "guard/guard_impl.h"

#define MIB (1024.0 * 1024.0)

static lgg_level_cfg_t cfg_default(void) {
  lgg_config_t c;
  lgg_config_defaults(&c);
  return c.lv;
}

static lgg_level_cfg_t cfg_no_predict(void) {
  lgg_level_cfg_t c = cfg_default();
  c.horizon_s[1] = c.horizon_s[2] = c.horizon_s[3] = 0;
  return c;
}

/* Thresholds: a slow ramp 0 -> 100 % crosses 75/88/95 % in order, by threshold. */
static void ramp_up_thresholds(void **st) {
  (void)st;
  lgg_level_cfg_t c = cfg_no_predict();
  lgg_levels_t s;
  lgg_levels_init(&s, 0);
  double limit = 1000;
  int seen_at[4] = {-1, -1, -1, -1};
  for (int i = 0; i <= 100; i++) {
    int l = lgg_levels_step(&s, &c, i, i * 10.0, limit, -1);
    if (seen_at[l] < 0) seen_at[l] = i;
  }
  assert_int_equal(seen_at[1], 75);
  assert_int_equal(seen_at[2], 88);
  assert_int_equal(seen_at[3], 95);
  assert_int_equal(s.reason, LGG_R_THRESHOLD);
}

/* Hysteresis: noise of +-3 % around the warn threshold enters warn once and never
 * leaves (only below 75 - 5 = 70 %). */
static void hysteresis_no_flap(void **st) {
  (void)st;
  lgg_level_cfg_t c = cfg_no_predict();
  c.min_dwell_s = 0;
  lgg_levels_t s;
  lgg_levels_init(&s, 0);
  int changes = 0, prev = 0;
  for (int i = 0; i < 400; i++) {
    double u = 750 + ((i % 2) ? 30 : -30) + (i % 7 - 3);
    int l = lgg_levels_step(&s, &c, i * 0.1, u, 1000, -1);
    changes += l != prev;
    prev = l;
  }
  assert_int_equal(changes, 1);
  assert_int_equal(prev, 1);
  /* below threshold - margin: leaves (no dwell) */
  assert_int_equal(lgg_levels_step(&s, &c, 41, 690, 1000, -1), 0);
  assert_int_equal(s.reason, LGG_R_RECOVER);
}

/* Without hysteresis the same series flaps: the margin is what prevents it. */
static void no_hysteresis_flaps(void **st) {
  (void)st;
  lgg_level_cfg_t c = cfg_no_predict();
  c.min_dwell_s = 0;
  c.hysteresis = 0;
  lgg_levels_t s;
  lgg_levels_init(&s, 0);
  int changes = 0, prev = 0;
  for (int i = 0; i < 100; i++) {
    int l = lgg_levels_step(&s, &c, i * 0.1, 750 + ((i % 2) ? 30 : -30), 1000, -1);
    changes += l != prev;
    prev = l;
  }
  assert_true(changes > 50);
}

/* Dwell: after a drop the level holds min_dwell seconds, then goes to the target
 * directly; a short dip does not lower it. Going up is immediate. */
static void dwell(void **st) {
  (void)st;
  lgg_level_cfg_t c = cfg_no_predict();
  c.min_dwell_s = 5;
  lgg_levels_t s;
  lgg_levels_init(&s, 0);
  assert_int_equal(lgg_levels_step(&s, &c, 0, 960, 1000, -1), 3); /* immediate */
  /* a 2 s dip and back up: stays at emergency all along */
  for (int i = 1; i <= 20; i++) assert_int_equal(lgg_levels_step(&s, &c, i * 0.1, 500, 1000, -1), 3);
  assert_int_equal(lgg_levels_step(&s, &c, 2.1, 960, 1000, -1), 3);
  /* now a lasting drop at t = 10: held until t >= 15, then straight to normal */
  double t = 10;
  for (; t < 14.95; t += 0.1) assert_int_equal(lgg_levels_step(&s, &c, t, 500, 1000, -1), 3);
  assert_int_equal(lgg_levels_step(&s, &c, 15.0, 500, 1000, -1), 0);
  assert_int_equal(s.reason, LGG_R_RECOVER);
  /* the dwell also applies from entering: re-enter at 20, drop right away */
  assert_int_equal(lgg_levels_step(&s, &c, 20, 900, 1000, -1), 2);
  assert_int_equal(lgg_levels_step(&s, &c, 20.1, 100, 1000, -1), 2);
  assert_int_equal(lgg_levels_step(&s, &c, 24.9, 100, 1000, -1), 2);
  assert_int_equal(lgg_levels_step(&s, &c, 25.2, 100, 1000, -1), 0);
}

/* Predictive trigger: a steady climb at 60 % enters levels by the projected time to
 * the limit, long before the thresholds. */
static void predictive(void **st) {
  (void)st;
  lgg_level_cfg_t c = cfg_default(); /* horizons 120 / 30 / 5 s, above 50 % */
  lgg_levels_t s;
  lgg_levels_init(&s, 0);
  double limit = 1000 * MIB;
  /* 600 MiB growing 2 MiB/s: 200 s to the limit: normal */
  int l = 0;
  for (int i = 0; i <= 50; i++) l = lgg_levels_step(&s, &c, i * 0.1, 600 * MIB + i * 0.2 * MIB, limit, -1);
  assert_int_equal(l, 0);
  assert_true(fabs(s.slope / MIB - 2.0) < 0.01);
  assert_true(s.tto_s > 150 && s.tto_s < 250);
  /* 5 MiB/s from 610 MiB: 68 s -> warn by trend */
  double u = 610 * MIB, t = 5;
  for (int i = 0; i < 100; i++, t += 0.1) {
    u += 0.5 * MIB;
    l = lgg_levels_step(&s, &c, t, u, limit, -1);
  }
  assert_int_equal(l, 1);
  assert_int_equal(s.reason, LGG_R_TREND);
  assert_true(u / limit < 0.75);
  /* 100 MiB/s: seconds to the limit -> emergency (within a second or two, as the
   * window's trend turns), below the 88 % and 95 % thresholds */
  for (int i = 0; i < 30 && l < 3; i++, t += 0.1) {
    u += 10 * MIB;
    l = lgg_levels_step(&s, &c, t, u, limit, -1);
  }
  assert_int_equal(l, 3);
  assert_int_equal(s.reason, LGG_R_TREND);
  assert_true(u / limit < 0.88);
}

/* The trend is robust: one spike (a sample read mid-burst) does not make a trend,
 * and growth below predict_min never triggers. */
static void predictive_robust(void **st) {
  (void)st;
  lgg_level_cfg_t c = cfg_default();
  lgg_levels_t s;
  lgg_levels_init(&s, 0);
  double limit = 1000;
  for (int i = 0; i < 200; i++) {
    double u = 600 + (i == 120 ? 140 : 0) + (i % 3);
    assert_int_equal(lgg_levels_step(&s, &c, i * 0.1, u, limit, -1), 0);
  }
  lgg_levels_init(&s, 0);
  for (int i = 0; i < 40; i++) /* 100 units/s at 10-40 %: under predict_min (50 %) */
    assert_int_equal(lgg_levels_step(&s, &c, i * 0.1, 100 + i * 10.0, limit, -1), 0);
}

/* PSI: full avg10 over 10 % -> warn, over 30 % -> breaker; kept down to 0.75 x. */
static void psi(void **st) {
  (void)st;
  lgg_level_cfg_t c = cfg_no_predict();
  c.min_dwell_s = 0;
  lgg_levels_t s;
  lgg_levels_init(&s, 0);
  assert_int_equal(lgg_levels_step(&s, &c, 0, 100, 1000, 5), 0);
  assert_int_equal(lgg_levels_step(&s, &c, 1, 100, 1000, 12), 1);
  assert_int_equal(s.reason, LGG_R_PSI);
  assert_int_equal(lgg_levels_step(&s, &c, 2, 100, 1000, 35), 2);
  assert_int_equal(lgg_levels_step(&s, &c, 3, 100, 1000, 25), 2); /* >= 22.5 */
  assert_int_equal(lgg_levels_step(&s, &c, 4, 100, 1000, 20), 1);
  assert_int_equal(lgg_levels_step(&s, &c, 5, 100, 1000, -1), 0); /* unknown: ignored */
}

/* ------------------------------------------------------------------ recorded series */
typedef struct series {
  double t[512], u[512], lim[512];
  int n;
} series_t;

static void load(series_t *s, const char *name) {
  char path[512];
  snprintf(path, sizeof path, "%s/%s", LGG_TEST_DATA, name);
  FILE *f = fopen(path, "r");
  assert_non_null(f);
  char line[256];
  s->n = 0;
  while (fgets(line, sizeof line, f) && s->n < 512) {
    if (line[0] == '#') continue;
    if (sscanf(line, "%lf,%lf,%lf", &s->t[s->n], &s->u[s->n], &s->lim[s->n]) == 3) s->n++;
  }
  fclose(f);
  assert_true(s->n > 10);
}

/* A real 150 MiB/s leak in a 256 MiB cgroup (recorded; the OOM killer ended it):
 * emergency comes from the trend while usage is still far below the limit, at least
 * 3 samples (300 ms) before the sample where the kernel killed the process. */
static void recorded_fast_leak(void **st) {
  (void)st;
  static series_t s;
  load(&s, "leak_150mibs_256m.csv");
  lgg_level_cfg_t c = cfg_default();
  lgg_levels_t lv;
  lgg_levels_init(&lv, 0);
  int peak = 0, emerg = -1;
  for (int i = 0; i < s.n; i++) {
    if (i > 0 && s.u[i] < s.u[i - 1] / 4) {
      peak = i;
      break;
    } /* the OOM kill */
    int l = lgg_levels_step(&lv, &c, s.t[i], s.u[i], s.lim[i], -1);
    if (l == 3 && emerg < 0) {
      emerg = i;
      assert_int_equal(lv.reason, LGG_R_TREND);
      assert_true(s.u[i] / s.lim[i] < 0.8);
    }
  }
  assert_true(peak > 0);
  assert_true(emerg >= 0);
  assert_true(peak - emerg >= 3);
}

/* A slower real leak (25 MiB/s into 256 MiB): the trend enters emergency (levels may
 * be skipped: only the top one acts) once past predict_min, seconds before 95 %. */
static void recorded_slow_leak(void **st) {
  (void)st;
  static series_t s;
  load(&s, "slow_leak_256m.csv");
  lgg_level_cfg_t c = cfg_default();
  lgg_levels_t lv;
  lgg_levels_init(&lv, 0);
  int first[4] = {-1, -1, -1, -1}, prev = 0, kill = -1;
  for (int i = 0; i < s.n; i++) {
    if (i > 0 && s.u[i] < s.u[i - 1] / 4) {
      kill = i;
      break;
    }
    int l = lgg_levels_step(&lv, &c, s.t[i], s.u[i], s.lim[i], -1);
    assert_true(l >= prev); /* monotone while the leak grows */
    prev = l;
    if (first[l] < 0) first[l] = i;
  }
  assert_true(kill > 0);
  assert_true(first[3] > 0);
  assert_int_equal(lv.reason, LGG_R_TREND);
  assert_true(s.u[first[3]] / s.lim[first[3]] < 0.6);
  assert_true(kill - first[3] >= 20); /* >= 2 s of lead over the OOM killer */
}

/* A real cache that fills fast (~75 MiB/s) to 200 MiB of 256 (78 %) and stays: while
 * it fills the trend says emergency (2 s from the limit); once it stays, the level
 * comes back to warn after the trend window and the dwell, once, and stays there. */
static void recorded_plateau(void **st) {
  (void)st;
  static series_t s;
  load(&s, "cache_plateau_256m.csv");
  lgg_level_cfg_t c = cfg_default();
  lgg_levels_t lv;
  lgg_levels_init(&lv, 0);
  int changes = 0, prev = 0, last = 0;
  for (int i = 0; i < s.n; i++) {
    int l = lgg_levels_step(&lv, &c, s.t[i], s.u[i], s.lim[i], -1);
    changes += l != prev;
    prev = l;
    last = l;
  }
  assert_int_equal(last, 1);
  assert_int_equal(changes, 2); /* up by trend while filling, then down to warn once */
  assert_int_equal(lv.reason, LGG_R_RECOVER);
  assert_true(lv.tto_s < 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(ramp_up_thresholds),
      cmocka_unit_test(hysteresis_no_flap),
      cmocka_unit_test(no_hysteresis_flaps),
      cmocka_unit_test(dwell),
      cmocka_unit_test(predictive),
      cmocka_unit_test(predictive_robust),
      cmocka_unit_test(psi),
      cmocka_unit_test(recorded_fast_leak),
      cmocka_unit_test(recorded_slow_leak),
      cmocka_unit_test(recorded_plateau),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
