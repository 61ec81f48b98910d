/* SPDX-License-Identifier: MIT */
/*
 * test_live.c - the live view's text (lgv_render): the header names the memory limit
 * it projects against (it showed the live bytes there once: one buffer for two
 * numbers), and rows come fastest growth first.
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

int main(void) {
  const struct CMUnitTest tests[] = {cmocka_unit_test(test_header_limit_and_rows)};
  return cmocka_run_group_tests(tests, NULL, NULL);
}
