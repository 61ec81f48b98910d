/* SPDX-License-Identifier: MIT */
/*
 * test_csv.c - the classify CSV reader (src/analysis/csv.c): headers, comments,
 * blanks and an rss column; samples with equal timestamps are merged into their mean,
 * a timestamp going back is rejected with its line number, and the merged series
 * feeds the "at least 8 samples" rule; each error names the line and the column. And
 * what `leakguard classify FILE` does with it (src/analysis/classify_file.c): the
 * class and probabilities in text and JSON, errors with nothing printed.
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

#include <cjson/cJSON.h>
#include <cmocka.h>

#include "analysis/classify_file.h"
#include "analysis/csv.h"
#include "leakguard.h"

static int parse(const char *text, lga_series_t *s, char *err, size_t errlen) {
  FILE *fp = fmemopen((void *)text, strlen(text), "r");
  assert_non_null(fp);
  int rc = lga_series_read_csv(fp, "m.csv", s, err, errlen);
  fclose(fp);
  return rc;
}

static void test_equal_times_merge_to_mean(void **state) {
  (void)state;
  lga_series_t s;
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
  lga_series_free(&s);
}

static void test_equal_times_merge_rss(void **state) {
  (void)state;
  lga_series_t s;
  char err[256];
  const char *csv = "0,1,100\n0,3,300\n1,1,1\n2,1,1\n3,1,1\n4,1,1\n5,1,1\n6,1,1\n7,4,7\n7,6,9\n";
  assert_int_equal(parse(csv, &s, err, sizeof err), 0);
  assert_int_equal(s.n, 8);
  assert_non_null(s.rss);
  assert_true(s.v[0] == 2 && s.rss[0] == 200);
  assert_true(s.v[7] == 5 && s.rss[7] == 8);
  lga_series_free(&s);
}

/* Merging never overflows: the mean of two values near DBL_MAX is finite. */
static void test_merge_huge_values(void **state) {
  (void)state;
  lga_series_t s;
  char err[256];
  const char *csv = "1,1.7e308\n1,1.7e308\n2,1\n3,1\n4,1\n5,1\n6,1\n7,1\n8,1\n";
  assert_int_equal(parse(csv, &s, err, sizeof err), 0);
  assert_true(s.v[0] == 1.7e308);
  lga_series_free(&s);
}

/* Samples are counted after merging. */
static void test_merged_count_too_few(void **state) {
  (void)state;
  lga_series_t s;
  char err[256];
  assert_int_equal(parse("1,1\n1,2\n2,1\n3,1\n4,1\n5,1\n6,1\n7,1\n", &s, err, sizeof err), -1);
  assert_string_equal(err, "m.csv: need at least 8 samples, got 7");
  assert_null(s.t);
}

static void test_decreasing_time_names_line(void **state) {
  (void)state;
  lga_series_t s;
  char err[256];
  /* line 1 header, line 2 comment: the bad row is line 6 */
  const char *csv = "time,value\n# c\n1,1\n2,2\n2,3\n1.5,4\n3,5\n";
  assert_int_equal(parse(csv, &s, err, sizeof err), -1);
  assert_string_equal(err, "m.csv:6: time 1.5 is before the previous sample's 2");
  assert_null(strchr(err, '\n'));
  assert_null(s.t);
  assert_int_equal(s.n, 0);
}

static void expect_error(const char *text, const char *msg) {
  lga_series_t s;
  char err[256];
  assert_int_equal(parse(text, &s, err, sizeof err), -1);
  assert_string_equal(err, msg);
  assert_null(s.t);
  assert_int_equal(s.n, 0);
}

static void test_csv_ok(void **state) {
  (void)state;
  lga_series_t s;
  char err[256];
  assert_int_equal(parse("time,value\n1,10\n2,11\n3,12\n4,13\n5,14\n6,15\n7,16\n8,17\n\n\n", &s, err, sizeof err), 0);
  assert_int_equal(s.n, 8);
  assert_null(s.rss);
  assert_true(s.t[7] == 8 && s.v[7] == 17);
  lga_series_free(&s);
  /* no header, rss column, blanks, CRLF, comments */
  assert_int_equal(parse("# exported\r\n0.5, 1e3, 2e3\r\n1.5,1001,2001\n2.5,1002,2002\n"
                         "3.5,1003,2003\n4.5,1004,2004\n5.5,1005,2005\n6.5,1006,2006\n"
                         "7.5,1007,2007\n",
                         &s, err, sizeof err),
                   0);
  assert_int_equal(s.n, 8);
  assert_non_null(s.rss);
  assert_true(s.t[0] == 0.5 && s.v[0] == 1000 && s.rss[0] == 2000 && s.rss[7] == 2007);
  lga_series_free(&s);
  /* named columns in another order */
  assert_int_equal(parse("rss,value,timestamp\n9,2,1\n9,2,2\n9,2,3\n9,2,4\n9,2,5\n9,2,6\n"
                         "9,2,7\n9,3,8\n",
                         &s, err, sizeof err),
                   0);
  assert_true(s.t[7] == 8 && s.v[7] == 3 && s.rss[7] == 9);
  lga_series_free(&s);
}

static void test_csv_errors(void **state) {
  (void)state;
  const char *rows = "1,1\n2,2\n3,3\n4,4\n5,5\n6,6\n7,7\n";
  char buf[512];
  expect_error("", "m.csv: need at least 8 samples, got 0");
  expect_error("time,value\n", "m.csv: need at least 8 samples, got 0");
  expect_error("1,1\n2,2\n3,3\n", "m.csv: need at least 8 samples, got 3");
  snprintf(buf, sizeof buf, "time,value\n1,1\n\n2,2\n%s", rows);
  expect_error(buf, "m.csv:3: empty row");
  expect_error("time,value\n1,1\n2,abc\n", "m.csv:3: column 2: 'abc' is not a number, a size or a date");
  expect_error("1,1\n2,\n", "m.csv:2: column 2 is empty");
  expect_error("1,1\n2,2,2\n", "m.csv:2: expected 2 columns, got 3");
  expect_error("1\n", "m.csv:1: expected 2 or 3 columns (time,value[,rss]), got 1");
  expect_error("1,1,1,1\n", "m.csv:1: expected 2 or 3 columns (time,value[,rss]), got 4");
  expect_error("1,1\n2,nan\n", "m.csv:2: column 2: non-finite value 'nan'");
  expect_error("1,1\ninf,2\n", "m.csv:2: column 1: non-finite value 'inf'");
  /* equal times are merged (tests/unit/test_csv.c); a time going back is an error */
  expect_error("1,1\n3,2\n2,3\n", "m.csv:3: time 2 is before the previous sample's 3");
  expect_error("1,1\n2,2\n3,12abc\n", "m.csv:3: column 2: '12abc' is not a number, a size or a date");
}

/* ------------------------------------------------------------------ classify FILE */

/* What `leakguard classify FILE` prints (lga_classify_file), into a memory stream. */
static int classify_file(const char *path, int json, char **out, char *why) {
  size_t n;
  FILE *fp = open_memstream(out, &n);
  assert_non_null(fp);
  int rc = lga_classify_file(path, LGA_CSV_MAX_BYTES, json, fp, why, 512);
  fclose(fp);
  return rc;
}

static void test_classify_file(void **state) {
  (void)state;
  char path[] = "/tmp/lg-test-classify-XXXXXX";
  int fd = mkstemp(path);
  assert_true(fd >= 0);
  FILE *fp = fdopen(fd, "w");
  fprintf(fp, "time,value\n");
  /* a line rising 1 % of its start per sample, with a little deterministic noise */
  for (int i = 0; i < 200; i++) fprintf(fp, "%d,%.1f\n", i, 1e6 + 1e4 * i + 2e3 * ((i * 7919) % 13 - 6) / 6.0);
  fclose(fp);

  char *out = NULL, why[512] = "";
  assert_int_equal(classify_file(path, 1, &out, why), 0);
  cJSON *j = cJSON_Parse(out);
  assert_non_null(j);
  assert_string_equal(cJSON_GetObjectItem(j, "class")->valuestring, "linear-leak");
  cJSON *p = cJSON_GetObjectItem(j, "probabilities");
  double sum = 0;
  for (int c = 0; c < LG_PATTERN_COUNT; c++) {
    cJSON *x = cJSON_GetObjectItem(p, lg_pattern_name((lg_pattern_t)c));
    assert_non_null(x);
    sum += x->valuedouble;
  }
  assert_true(fabs(sum - 1) < 1e-3);
  assert_int_equal(cJSON_GetArraySize(p), LG_PATTERN_COUNT);
  cJSON_Delete(j);
  assert_true(strchr(out, '\n') == out + strlen(out) - 1); /* one line */
  free(out);

  out = NULL;
  assert_int_equal(classify_file(path, 0, &out, why), 0);
  assert_true(!strncmp(out, "linear-leak\n  stable             0.", 32));
  assert_non_null(strstr(out, "\n  fragmentation      0."));
  free(out);

  /* bad input: nothing printed, the reason names the file and the line */
  fp = fopen(path, "a");
  fprintf(fp, "12,oops\n");
  fclose(fp);
  out = NULL;
  assert_int_equal(classify_file(path, 1, &out, why), -EINVAL);
  assert_string_equal(out, "");
  free(out);
  char want[256];
  snprintf(want, sizeof want, "%s:202: column 2: 'oops' is not a number, a size or a date", path);
  assert_string_equal(why, want);
  out = NULL;
  assert_int_equal(classify_file("/nonexistent/x.csv", 0, &out, why), -EINVAL);
  assert_string_equal(why, "/nonexistent/x.csv: No such file or directory");
  free(out);

  /* a write that fails is an error, not a silent success */
  FILE *full = fopen("/dev/full", "w");
  if (full) {
    fp = fopen(path, "w");
    for (int i = 0; i < 50; i++) fprintf(fp, "%d,%d\n", i, 1000 + 10 * i);
    fclose(fp);
    assert_int_equal(lga_classify_file(path, LGA_CSV_MAX_BYTES, 0, full, why, sizeof why), -EIO);
    assert_true(!strncmp(why, "cannot write the result: ", 25));
    fclose(full);
  }
  unlink(path);
}

/* Bounded input (issue #31): a device is refused at once (/dev/zero was read without
 * end), a file over --max-bytes is refused, a line without end stops at its bound, a
 * pipe is read up to the limit. */
static void test_bounded_input(void **state) {
  (void)state;
  lga_series_t s;
  char why[512];
  assert_int_equal(lga_series_load("/dev/zero", LGA_CSV_MAX_BYTES, &s, why, sizeof why), -1);
  assert_string_equal(why, "/dev/zero: not a regular file");
  char path[] = "/tmp/lgcsvXXXXXX";
  int fd = mkstemp(path);
  assert_true(fd >= 0);
  FILE *fp = fdopen(fd, "w");
  for (int i = 0; i < 100; i++) fprintf(fp, "%d,%d\n", i, 1000 + i);
  fclose(fp);
  assert_int_equal(lga_series_load(path, 100, &s, why, sizeof why), -1);
  assert_non_null(strstr(why, "more than 100 (--max-bytes raises the limit)"));
  assert_int_equal(lga_series_load(path, 0, &s, why, sizeof why), 0); /* 0: no limit */
  assert_int_equal(s.n, 100);
  lga_series_free(&s);
  unlink(path);
  /* a stream: 4097 bytes without a newline, then more */
  char *big = malloc(8192);
  memset(big, '1', 8192);
  fp = fmemopen(big, 8192, "r");
  assert_int_equal(lga_series_read_csv_max(fp, "zero", 0, &s, why, sizeof why), -1);
  assert_string_equal(why, "zero:1: line longer than 4096 bytes: not a CSV of samples");
  fclose(fp);
  /* a stream over the limit */
  for (int i = 0; i < 8192; i += 8) memcpy(big + i, "1,1000\n\n", 8);
  for (int i = 0; i < 8192; i += 7) memcpy(big + i, "1,1000\n", i + 7 <= 8192 ? 7 : 8192 - i);
  fp = fmemopen(big, 8192, "r");
  assert_int_equal(lga_series_read_csv_max(fp, "stdin", 1000, &s, why, sizeof why), -1);
  assert_string_equal(why, "stdin: larger than 1000 bytes (--max-bytes raises the limit)");
  fclose(fp);
  free(big);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_equal_times_merge_to_mean),
      cmocka_unit_test(test_equal_times_merge_rss),
      cmocka_unit_test(test_merge_huge_values),
      cmocka_unit_test(test_merged_count_too_few),
      cmocka_unit_test(test_decreasing_time_names_line),
      cmocka_unit_test(test_csv_ok),
      cmocka_unit_test(test_csv_errors),
      cmocka_unit_test(test_classify_file),
      cmocka_unit_test(test_bounded_input),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
