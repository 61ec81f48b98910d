/* SPDX-License-Identifier: MIT */
/*
 * test_stats.c - unit tests for the detector's robust statistics: the Mann-Kendall
 * trend test (S, tau-a and the two-sided p-value with tie-corrected variance and
 * continuity correction, checked against values worked out by hand below),
 * the Theil-Sen slope (exact on a line with a wild outlier) and the median.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <cmocka.h>

#include "analysis/stats.h"

#define assert_near(a, b, eps)                                                                                         \
  do {                                                                                                                 \
    double a_ = (a), b_ = (b), e_ = (eps);                                                                             \
    if (!(fabs(a_ - b_) <= e_)) {                                                                                      \
      print_error("%s = %.17g, expected %.17g (+-%g)\n", #a, a_, b_, e_);                                              \
      fail();                                                                                                          \
    }                                                                                                                  \
  } while (0)

/* ------------------------------------------------------------------ Mann-Kendall */

static void test_mk_increasing(void **state) {
  (void)state;
  double y[10];
  for (int i = 0; i < 10; i++) y[i] = 100.0 + 3.0 * i;
  double tau = -5, p = -5;
  double s = lga_mann_kendall(y, 10, &tau, &p);
  /* every one of the 10*9/2 = 45 pairs is concordant */
  assert_near(s, 45, 0);
  assert_near(tau, 1.0, 0);
  /* no ties: var = n(n-1)(2n+5)/18 = 10*9*25/18 = 125; z = (45-1)/sqrt(125)
   * = 3.935480; p = 2(1 - Phi(z)) = 8.30307e-05 */
  assert_near(p, 8.30307e-05, 1e-9);
}

static void test_mk_decreasing(void **state) {
  (void)state;
  double y[10];
  for (int i = 0; i < 10; i++) y[i] = 1e6 - 1000.0 * i * i; /* strictly decreasing, not linear */
  double tau = 5, p = -5;
  double s = lga_mann_kendall(y, 10, &tau, &p);
  assert_near(s, -45, 0);
  assert_near(tau, -1.0, 0);
  assert_near(p, 8.30307e-05, 1e-9); /* two-sided: same as the increasing case */
}

static void test_mk_all_ties(void **state) {
  (void)state;
  double y[12];
  for (int i = 0; i < 12; i++) y[i] = 4096;
  double tau = 5, p = -5;
  double s = lga_mann_kendall(y, 12, &tau, &p);
  /* one tie group of 12: var = (12*11*29 - 12*11*29)/18 = 0 -> no evidence, p = 1 */
  assert_near(s, 0, 0);
  assert_near(tau, 0, 0);
  assert_near(p, 1.0, 0);
}

static void test_mk_small_n(void **state) {
  (void)state;
  double y[2] = {1, 2};
  double tau = 5, p = -5;
  assert_near(lga_mann_kendall(y, 2, &tau, &p), 1, 0);
  assert_near(tau, 1, 0);
  assert_near(p, 1.0, 0); /* n < 3 */
  /* tau and p are optional */
  double z[4] = {1, 3, 2, 4};
  assert_near(lga_mann_kendall(z, 4, NULL, NULL), 4, 0); /* +1+1+1 -1+1 +1 */
}

static void test_mk_ties_hand_example(void **state) {
  (void)state;
  /* y = 1 2 2 3 4 (n = 5, one tie group of t = 2).
   * S: i=0: 2>1 2>1 3>1 4>1 -> +4;  i=1: 2=2 -> 0, 3>2, 4>2 -> +2;
   *    i=2: 3>2 4>2 -> +2;          i=3: 4>3 -> +1.            S = 9
   * tau-a = S / (n(n-1)/2) = 9/10 = 0.9
   * var = [n(n-1)(2n+5) - t(t-1)(2t+5)] / 18 = [5*4*15 - 2*1*9]/18 = 282/18 = 15.6667
   * z = (S-1)/sqrt(var) = 8/3.958114 = 2.021165
   * p = 2(1 - Phi(2.021165)) = 0.0432627 */
  double y[5] = {1, 2, 2, 3, 4};
  double tau, p;
  double s = lga_mann_kendall(y, 5, &tau, &p);
  assert_near(s, 9, 0);
  assert_near(tau, 0.9, 1e-15);
  assert_near(p, 0.0432627, 1e-6);
  /* Without the tie correction (var = 300/18) p would be 0.0500; make sure we are
   * not there. */
  assert_true(fabs(p - 0.0500) > 0.005);
}

static void test_mk_negative_with_tie_group_of_three(void **state) {
  (void)state;
  /* y = 5 4 4 4 3 7 2 (n = 7, tie group t = 3 of value 4).
   * S: i=0 (5): -1 -1 -1 -1 +1 -1 = -4; i=1 (4): 0 0 -1 +1 -1 = -1;
   *    i=2 (4): 0 -1 +1 -1 = -1;         i=3 (4): -1 +1 -1 = -1;
   *    i=4 (3): +1 -1 = 0;               i=5 (7): -1.         S = -8
   * tau = -8/21; var = [7*6*19 - 3*2*11]/18 = (798-66)/18 = 40.6667
   * z = (S+1)/sqrt(var) = -7/6.377042 = -1.097688; p = 2(1-Phi(1.097688)) = 0.272341 */
  double y[7] = {5, 4, 4, 4, 3, 7, 2};
  double tau, p;
  double s = lga_mann_kendall(y, 7, &tau, &p);
  assert_near(s, -8, 0);
  assert_near(tau, -8.0 / 21.0, 1e-15);
  assert_near(p, 0.272341, 1e-6);
}

static void test_mk_does_not_modify_input(void **state) {
  (void)state;
  double y[6] = {3, 1, 2, 2, 9, 0};
  double c[6] = {3, 1, 2, 2, 9, 0};
  double p;
  lga_mann_kendall(y, 6, NULL, &p);
  for (int i = 0; i < 6; i++) assert_near(y[i], c[i], 0);
}

static void test_norm_sf(void **state) {
  (void)state;
  assert_near(lga_norm_sf(0), 0.5, 1e-15);
  assert_near(lga_norm_sf(1.959963984540054), 0.025, 1e-12);
  assert_near(lga_norm_sf(-1.959963984540054), 0.975, 1e-12);
}

/* ------------------------------------------------------------------ Theil-Sen */

static void test_theil_sen_outlier(void **state) {
  (void)state;
  /* y = 2x + 1 on x = 0..9, with y[5] replaced by 1000. Of the 45 pairwise slopes,
   * 36 are exactly 2, 5 (i < 5, j = 5) are huge and positive and 4 (i = 5, j > 5)
   * huge and negative: the median (23rd of 45) is exactly 2. Least squares would
   * give about 2 + 50. */
  double x[10], y[10];
  for (int i = 0; i < 10; i++) {
    x[i] = i;
    y[i] = 2.0 * i + 1.0;
  }
  y[5] = 1000;
  assert_near(lga_theil_sen(x, y, 10), 2.0, 0);
  /* x and y are not reordered */
  assert_near(y[5], 1000, 0);
  assert_near(x[9], 9, 0);
}

static void test_theil_sen_skips_equal_x(void **state) {
  (void)state;
  /* Pairs with equal x have no slope and are skipped: x = 0 0 1 1 2 2,
   * y = 10 - 3x with a +-1 jitter at the same x. Slopes between different x are
   * (dy)/(dx) in {-3 +-1, -3 +-2, -3}; the median is exactly -3. */
  double x[6] = {0, 0, 1, 1, 2, 2};
  double y[6] = {11, 9, 8, 6, 5, 3};
  /* pairs: (0,1)->(2,3): (8-11)=-3,(6-11)=-5,(8-9)=-1,(6-9)=-3  (dx=1)
   *        (0,1)->(4,5): -6/2=-3,-8/2=-4,-4/2=-2,-6/2=-3        (dx=2)
   *        (2,3)->(4,5): -3,-5,-1,-3                            (dx=1)
   * sorted: -5 -5 -4 -3 -3 -3 -3 -3 -3 -2 -1 -1 -> median (-3 + -3)/2 = -3 */
  assert_near(lga_theil_sen(x, y, 6), -3.0, 0);
}

static void test_theil_sen_degenerate(void **state) {
  (void)state;
  double x[2] = {1, 2}, y[2] = {5, 11};
  assert_near(lga_theil_sen(x, y, 0), 0, 0);
  assert_near(lga_theil_sen(x, y, 1), 0, 0);
  assert_near(lga_theil_sen(x, y, 2), 6, 0);
  double xs[3] = {4, 4, 4}, ys[3] = {1, 2, 3};
  assert_near(lga_theil_sen(xs, ys, 3), 0, 0); /* no pair with distinct x */
}

/* ------------------------------------------------------------------ median */

static void test_median(void **state) {
  (void)state;
  double odd[5] = {9, -1, 7, 3, 5};
  assert_near(lga_median(odd, 5), 5, 0);
  double even[4] = {10, 1, 4, 3};
  assert_near(lga_median(even, 4), 3.5, 0);
  double one[1] = {42};
  assert_near(lga_median(one, 1), 42, 0);
  double ties[6] = {2, 2, 2, 8, 8, 8};
  assert_near(lga_median(ties, 6), 5, 0);
  assert_near(lga_median(NULL, 0), 0, 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_mk_increasing),
      cmocka_unit_test(test_mk_decreasing),
      cmocka_unit_test(test_mk_all_ties),
      cmocka_unit_test(test_mk_small_n),
      cmocka_unit_test(test_mk_ties_hand_example),
      cmocka_unit_test(test_mk_negative_with_tie_group_of_three),
      cmocka_unit_test(test_mk_does_not_modify_input),
      cmocka_unit_test(test_norm_sf),
      cmocka_unit_test(test_theil_sen_outlier),
      cmocka_unit_test(test_theil_sen_skips_equal_x),
      cmocka_unit_test(test_theil_sen_degenerate),
      cmocka_unit_test(test_median),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
