/* SPDX-License-Identifier: MIT */
/*
 * test_csv.c - the classify CSV reader (src/analysis/csv.c): samples with equal
 * timestamps are merged into their mean, a timestamp going back is rejected with its
 * line number, and the merged series feeds the "at least 8 samples" rule.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "analysis/csv.h"

static int parse(const char *text, lgi_series_t *s, char *err, size_t errlen) {
  FILE *fp = fmemopen((void *)text, strlen(text), "r");
  assert_non_null(fp);
  int rc = lgi_series_read_csv(fp, "m.csv", s, err, errlen);
  fclose(fp);
  return rc;
}

static void test_equal_times_merge_to_mean(void **state) {
  (void)state;
  lgi_series_t s;
  char err[256];
  /* t=2 three times (mean 20), t=5 twice (mean 55): 11 rows, 8 samples */
  const char *csv = "time,value\n1,10\n2,10\n2,20\n2,30\n3,40\n4,50\n5,50\n5,60\n6,70\n7,80\n8,90\n";
  assert_int_equal(parse(csv, &s, err, sizeof err), 0);
  assert_int_equal(s.n, 8);
  const double t[8] = {1, 2, 3, 4, 5, 6, 7, 8}, v[8] = {10, 20, 40, 50, 55, 70, 80, 90};
  for (int i = 0; i < 8; i++) {
    assert_true(s.t[i] == t[i]);
    assert_true(s.v[i] == v[i]);
  }
  assert_null(s.rss);
  lgi_series_free(&s);
}

static void test_equal_times_merge_rss(void **state) {
  (void)state;
  lgi_series_t s;
  char err[256];
  const char *csv = "0,1,100\n0,3,300\n1,1,1\n2,1,1\n3,1,1\n4,1,1\n5,1,1\n6,1,1\n7,4,7\n7,6,9\n";
  assert_int_equal(parse(csv, &s, err, sizeof err), 0);
  assert_int_equal(s.n, 8);
  assert_non_null(s.rss);
  assert_true(s.v[0] == 2 && s.rss[0] == 200);
  assert_true(s.v[7] == 5 && s.rss[7] == 8);
  lgi_series_free(&s);
}

/* Merging never overflows: the mean of two values near DBL_MAX is finite. */
static void test_merge_huge_values(void **state) {
  (void)state;
  lgi_series_t s;
  char err[256];
  const char *csv = "1,1.7e308\n1,1.7e308\n2,1\n3,1\n4,1\n5,1\n6,1\n7,1\n8,1\n";
  assert_int_equal(parse(csv, &s, err, sizeof err), 0);
  assert_true(s.v[0] == 1.7e308);
  lgi_series_free(&s);
}

/* Samples are counted after merging. */
static void test_merged_count_too_few(void **state) {
  (void)state;
  lgi_series_t s;
  char err[256];
  assert_int_equal(parse("1,1\n1,2\n2,1\n3,1\n4,1\n5,1\n6,1\n7,1\n", &s, err, sizeof err), -1);
  assert_string_equal(err, "m.csv: need at least 8 samples, got 7");
  assert_null(s.t);
}

static void test_decreasing_time_names_line(void **state) {
  (void)state;
  lgi_series_t s;
  char err[256];
  /* line 1 header, line 2 comment: the bad row is line 6 */
  const char *csv = "time,value\n# c\n1,1\n2,2\n2,3\n1.5,4\n3,5\n";
  assert_int_equal(parse(csv, &s, err, sizeof err), -1);
  assert_string_equal(err, "m.csv:6: time 1.5 is before the previous sample's 2");
  assert_null(strchr(err, '\n'));
  assert_null(s.t);
  assert_int_equal(s.n, 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_equal_times_merge_to_mean),  cmocka_unit_test(test_equal_times_merge_rss),
      cmocka_unit_test(test_merge_huge_values),          cmocka_unit_test(test_merged_count_too_few),
      cmocka_unit_test(test_decreasing_time_names_line),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
