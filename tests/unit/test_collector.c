/* SPDX-License-Identifier: MIT */
/* The collector's adaptive snapshot interval (src/collector/collector.c). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <math.h>

#include "collector/collector.h"

static void test_interval_young(void **state) {
  (void)state;
  assert_true(lgc_adaptive_interval_s(0) == 0.1);
  assert_true(lgc_adaptive_interval_s(2.9) == 0.1);
  assert_true(fabs(lgc_adaptive_interval_s(15) - 0.5) < 1e-12);
  assert_true(lgc_adaptive_interval_s(30) == 1.0);
  assert_true(lgc_adaptive_interval_s(599) == 1.0);
}

static void test_interval_old(void **state) {
  (void)state;
  assert_true(lgc_adaptive_interval_s(600) == 1.0);
  assert_true(fabs(lgc_adaptive_interval_s(3600) - 6.0) < 1e-12);
  assert_true(lgc_adaptive_interval_s(36000) == 60.0);
  assert_true(lgc_adaptive_interval_s(7 * 86400.0) == 60.0);
}

/* The snapshots a day-long run stores: the sum of 1/interval over its age. */
static void test_interval_day_of_snapshots(void **state) {
  (void)state;
  double t = 0, n = 0;
  while (t < 86400.0) {
    t += lgc_adaptive_interval_s(t);
    n++;
  }
  assert_true(n > 3000 && n < 6000); /* about 4 700, against 86 400 at 1 s */
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_interval_young),
      cmocka_unit_test(test_interval_old),
      cmocka_unit_test(test_interval_day_of_snapshots),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
