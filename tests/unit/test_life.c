/* SPDX-License-Identifier: MIT */
/*
 * test_life.c - unit tests for how long blocks live (docs/lifetimes.md): a site's mean
 * lifetime by Little's law and its generation (findings/life.c), the percentiles of
 * the freed-by-age histograms in time and in steps, and a block's age in steps
 * (core/blockhdr.h). Hand-made series, no database.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "core/blockhdr.h"
#include "findings/impl.h"
#include "findings/report.h"

/* Lifetimes by Little's law (lgr_site_life, docs/lifetimes.md) on hand-made series:
 * 10 snapshots at 1..10 s, 200 steps. */
/* The lifetime distribution: percentiles over the freed blocks and the kept ones,
 * each the upper bound of its bucket (100 ms * 2^b), INFINITY on a kept block. */
static void test_life_percentiles(void **state) {
  (void)state;
  lgr_life_t l;
  memset(&l, 0, sizeof l);
  l.freed[0] = 90; /* < 0.1 s */
  l.freed[3] = 9;  /* [0.4, 0.8) s */
  l.nfreed = 99;
  lgr_life_percentiles(&l, 100, 1); /* one kept */
  assert_true(l.p50_le_s == 0.1 && l.p90_le_s == 0.1);
  assert_true(fabs(l.p99_le_s - 0.8) < 1e-12);
  lgr_life_percentiles(&l, 110, 11); /* eleven kept: the 99th is one of them */
  assert_true(l.p50_le_s == 0.1 && isinf(l.p99_le_s));
  assert_true(fabs(l.p90_le_s - 0.8) < 1e-12); /* 99 of 110 >= 90 % */
  l.freed[15] = 100;                           /* the last bucket is open-ended: 27 min and more */
  l.nfreed = 199;
  lgr_life_percentiles(&l, 199, 0);
  assert_true(isinf(l.p90_le_s) && isinf(l.p50_le_s)); /* 99 < 99.5: the median is in the last bucket */
  memset(&l, 0, sizeof l);
  lgr_life_percentiles(&l, 50, 50); /* nothing freed: no distribution */
  assert_true(isnan(l.p50_le_s) && isnan(l.p99_le_s));
}

/* Percentiles in steps: over the blocks freed after the first step and the kept ones
 * (not over every block allocated: those freed before the first step are not in the
 * histogram); bucket 0 is "freed in its birth step". */
static void test_life_percentiles_steps(void **state) {
  (void)state;
  lgr_life_t l;
  memset(&l, 0, sizeof l);
  l.nfreed = 1;     /* a time distribution exists */
  l.sfreed[0] = 80; /* < 1 step */
  l.sfreed[6] = 20; /* [32, 64) steps */
  l.nsfreed = 100;
  lgr_life_percentiles(&l, 1000, 0); /* 900 blocks freed before the first step: not in the population */
  assert_true(l.p50_le_steps == 1 && l.p90_le_steps == 64 && l.p99_le_steps == 64);
  lgr_life_percentiles(&l, 1000, 25); /* 25 kept: the 90th is one of them */
  assert_true(l.p50_le_steps == 1 && isinf(l.p90_le_steps));
  memset(l.sfreed, 0, sizeof l.sfreed);
  l.nsfreed = 0;
  lgr_life_percentiles(&l, 1000, 0); /* no steps */
  assert_true(isnan(l.p50_le_steps) && isnan(l.p99_le_steps));
}

/* The age in steps of a block (core/blockhdr.h): the bound from its birth tick's step
 * count, made exact by the birth step's residue. */
static void test_step_age(void **state) {
  (void)state;
  /* born at step 105 in a tick that opened at step 100, freed at step 145: 40 */
  assert_int_equal(lg_step_age(100, 145, 105 % LG_BLK_STEP_MOD), 40);
  assert_int_equal(lg_step_age(100, 145, LG_BLK_NO_STEP), 45); /* the bound alone */
  assert_int_equal(lg_step_age(105, 105, 105), 0);             /* freed in its birth step */
  /* 10 000 steps old, born 3 000 steps into its tick: the residue picks the right one */
  assert_int_equal(lg_step_age(20000, 33000, 23000 % LG_BLK_STEP_MOD), 10000);
  /* 5 000 steps into its tick (more than 4 096 in one 100-ms tick): 4 096 too old */
  assert_int_equal(lg_step_age(20000, 35000, 25000 % LG_BLK_STEP_MOD), 10000 + LG_BLK_STEP_MOD);
  /* a birth step's residue that the bound cannot hold (a racy slot): the bound */
  assert_int_equal(lg_step_age(100, 102, 4000), 2);
  assert_int_equal(lg_step_age(200, 100, 50), 0); /* a slot ahead of the count */
  /* the site word keeps the site and the residue apart */
  uint32_t w = lg_blk_site_word(123456, 4096 * 7 + 99);
  assert_int_equal(lg_blk_site(w), 123456);
  assert_int_equal(lg_blk_birth_step(w), 99);
}

static void test_site_life(void **state) {
  (void)state;
  double t[10], step[10], blk[10];
  lgr_run_t run;
  memset(&run, 0, sizeof run);
  run.exit_begin_s = NAN;
  pctx_t c;
  memset(&c, 0, sizeof c);
  c.run = &run;
  c.nsnap = 10;
  c.t = t;
  c.step = step;
  for (int i = 0; i < 10; i++) t[i] = i + 1, step[i] = 20.0 * (i + 1), blk[i] = 5;
  lgr_life_t l;
  /* 5 blocks live on average, 100 allocated a second: 50 ms, young */
  lgr_site_life(&c, blk, 1000, 5, &l);
  assert_int_equal(l.gen, LGR_GEN_YOUNG);
  assert_true(fabs(l.mean_s - 0.05) < 1e-12);
  assert_true(fabs(l.mean_steps - 0.05 * 20) < 1e-12);
  assert_true(fabs(l.kept - 0.005) < 1e-12);
  assert_true(l.below_s == 0);
  /* 5 live, 10 allocated a second: 0.5 s, middle */
  lgr_site_life(&c, blk, 100, 5, &l);
  assert_int_equal(l.gen, LGR_GEN_MIDDLE);
  assert_true(fabs(l.mean_s - 0.5) < 1e-12);
  /* never live at a snapshot: below what one block seen once would give */
  for (int i = 0; i < 10; i++) blk[i] = 0;
  lgr_site_life(&c, blk, 1000, 0, &l);
  assert_int_equal(l.gen, LGR_GEN_YOUNG);
  assert_true(l.mean_s == 0 && fabs(l.below_s - 0.1 / 100) < 1e-12);
  /* never live while it ran, live at the end (an exit path's buffer): nothing measured */
  lgr_site_life(&c, blk, 1, 1, &l);
  assert_int_equal(l.gen, -1);
  assert_true(isnan(l.mean_s));
  /* one block a second, all kept (a leak): half the run on average, old */
  for (int i = 0; i < 10; i++) blk[i] = i + 1;
  lgr_site_life(&c, blk, 10, 10, &l);
  assert_int_equal(l.gen, LGR_GEN_OLD);
  assert_true(fabs(l.mean_s - 5.5) < 1e-12 && fabs(l.kept - 1) < 1e-12);
  /* the teardown after exit_begin_s is not part of the run */
  run.exit_begin_s = 5.5;
  for (int i = 5; i < 10; i++) blk[i] = 1000;
  lgr_site_life(&c, blk, 10, 0, &l);
  assert_true(fabs(l.mean_s - 3.0 / (10.0 / 5)) < 1e-12);
  /* nothing allocated: unknown */
  lgr_site_life(&c, blk, 0, 0, &l);
  assert_int_equal(l.gen, -1);
  assert_string_equal(lgr_gen_name(LGR_GEN_MIDDLE), "middle");
  assert_string_equal(lgr_gen_name(-1), "unknown");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_life_percentiles),
      cmocka_unit_test(test_life_percentiles_steps),
      cmocka_unit_test(test_step_age),
      cmocka_unit_test(test_site_life),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
