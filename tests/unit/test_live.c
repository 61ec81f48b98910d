/* SPDX-License-Identifier: MIT */
/*
 * test_live.c - the live view's text (lgv_render): the header names the memory limit
 * it projects against (it showed the live bytes there once: one buffer for two
 * numbers), and rows come fastest growth first; every line fits the terminal's width
 * (a line that wrapped left stale lines on the screen), multibyte characters never split,
 * no control character passes; the plain status line is one line.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "output/live.h"

static void test_header_limit_and_rows(void **state) {
  (void)state;
  lgv_frame_t f;
  memset(&f, 0, sizeof f);
  f.elapsed_s = 12.5;
  f.pid = 4242;
  f.nprocs = 1;
  f.live_bytes = 5169479; /* 4.93 MiB */
  f.rss_bytes = 64ULL << 20;
  f.limit = 24ULL << 30; /* 24 GiB */
  f.usage = 8ULL << 30;
  f.limit_source = "physical";
  lgv_row_t slow = {1024, 65536, LG_PATTERN_LINEAR_LEAK, 4242, "slow (a.c:1)", NULL, 0};
  lgv_row_t fast = {1 << 20, 1 << 24, LG_PATTERN_STEP_LEAK, 4242, "fast (b.c:2)", NULL, 0};
  lgv_add_row(&f, &slow);
  lgv_add_row(&f, &fast);
  f.growth_bps = slow.growth_bps + fast.growth_bps;
  char buf[4096];
  size_t n = lgv_render(&f, 10, 200, buf, sizeof buf);
  assert_true(n > 0 && n < sizeof buf);
  if (!strstr(buf, "(limit 24.0 GiB, physical)") || !strstr(buf, "live 4.93 MiB")) {
    print_error("header: %s\n", buf);
    fail();
  }
  const char *a = strstr(buf, "fast (b.c:2)"), *b = strstr(buf, "slow (a.c:1)");
  assert_non_null(a);
  assert_non_null(b);
  assert_true(a < b);
}

static void frame(lgv_frame_t *f, const char *label) {
  memset(f, 0, sizeof *f);
  f->elapsed_s = 3.8;
  f->pid = 1234567;
  f->nprocs = 2;
  f->live_bytes = 123456789;
  f->rss_bytes = 987654321;
  f->limit = 100ULL << 30;
  f->usage = 10ULL << 30;
  f->limit_source = "cgroup";
  f->steps = 4242;
  f->gpu_bytes = 1 << 30;
  f->gpu_total = 80ULL << 30;
  f->gpu_growth_bps = 1 << 20;
  lgv_row_t r = {1 << 20, 1 << 28, LG_PATTERN_LINEAR_LEAK, 1, label, "device", 0};
  lgv_add_row(f, &r);
  f->growth_bps = 1 << 20;
}

/* Display columns of a line (a multibyte character counted 2, as lgv_fit does). */
static int columns(const char *s, size_t n) {
  int c = 0;
  for (size_t i = 0; i < n; i++)
    if (((unsigned char)s[i] & 0xC0) != 0x80) c += (unsigned char)s[i] >= 0x80 ? 2 : 1;
  return c;
}

static void test_lines_fit_the_width(void **state) {
  (void)state;
  char label[600];
  memset(label, 'x', sizeof label - 1);
  label[sizeof label - 1] = 0;
  memcpy(label, "fn_\xc3\xa9t\xc3\xa9 (a.c:1)", 17); /* "fn_été": two 2-byte characters */
  lgv_frame_t f;
  frame(&f, label);
  static const int widths[] = {20, 40, 79, 80, 100, 120, 200};
  for (size_t w = 0; w < sizeof widths / sizeof *widths; w++) {
    char buf[8192];
    size_t n = lgv_render(&f, 10, widths[w], buf, sizeof buf);
    assert_true(n > 0 && buf[n - 1] == '\n');
    int lines = 0;
    for (const char *p = buf; *p; lines++) {
      const char *nl = strchr(p, '\n');
      assert_non_null(nl);
      if (columns(p, (size_t)(nl - p)) > widths[w] - 1) {
        print_error("width %d: a line of %d columns: %.*s\n", widths[w], columns(p, (size_t)(nl - p)), (int)(nl - p),
                    p);
        fail();
      }
      for (const char *c = p; c < nl; c++) assert_true((unsigned char)*c >= 0x20);
      p = nl + 1;
    }
    assert_int_equal(lines, 4); /* header, GPU, table header, one row: cut, never wrapped */
  }
  /* 200 columns: the whole header, the limit's text included (cut at 100 before) */
  char buf[8192];
  lgv_render(&f, 10, 200, buf, sizeof buf);
  assert_non_null(strstr(buf, "(limit 100 GiB, cgroup)  steps 4242\n"));
}

static void test_fit(void **state) {
  (void)state;
  char out[64];
  /* a 2-byte character that would straddle the edge is left out whole */
  assert_int_equal(lgv_fit("ab\xc3\xa9z", 5, 3, out, sizeof out), 2);
  assert_string_equal(out, "ab");
  assert_int_equal(lgv_fit("ab\xc3\xa9z", 5, 4, out, sizeof out), 4);
  assert_string_equal(out, "ab\xc3\xa9");
  /* control characters (an escape in a label) become '?'; the first line only */
  lgv_fit("a\033[2Jb\nsecond", 14, 0, out, sizeof out);
  assert_string_equal(out, "a?[2Jb");
  /* a small buffer: cut, terminated */
  assert_int_equal(lgv_fit("abcdef", 6, 0, out, 4), 3);
  assert_string_equal(out, "abc");
}

static void test_plain_line(void **state) {
  (void)state;
  lgv_frame_t f;
  frame(&f, "grow (g.c:7)");
  char buf[1024];
  size_t n = lgv_render_line(&f, 0, buf, sizeof buf);
  assert_true(n > 0 && buf[n - 1] == '\n' && strchr(buf, '\n') == buf + n - 1);
  assert_null(strchr(buf, '\033'));
  assert_non_null(strstr(buf, "leakguard    3.8s  pid 1234567 +children"));
  assert_non_null(strstr(buf, "top 1.00 MiB/s [GPU] grow (g.c:7)"));
  n = lgv_render_line(&f, 80, buf, sizeof buf);
  assert_int_equal(n, 80); /* 79 columns and the newline */
}

int main(void) {
  const struct CMUnitTest tests[] = {cmocka_unit_test(test_header_limit_and_rows),
                                     cmocka_unit_test(test_lines_fit_the_width), cmocka_unit_test(test_fit),
                                     cmocka_unit_test(test_plain_line)};
  return cmocka_run_group_tests(tests, NULL, NULL);
}
