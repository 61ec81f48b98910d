/* SPDX-License-Identifier: MIT */
/*
 * test_metrics.c - unit tests for the Prometheus exporter (src/output/metrics.c):
 * the exact bytes of the text exposition format (HELP/TYPE lines, gauges, counters,
 * labels, escaping of '\', '"' and newline, value spellings, stable ordering, clear),
 * argument checking, and the HTTP endpoint: lgx_serve on a loopback port answers a
 * plain-socket GET /metrics with the rendered body, 404 elsewhere, 405 for POST; a
 * port already in use fails with -EADDRINUSE and a message that says so; bad
 * addresses fail with -EINVAL. The catalog (output/metrics_catalog.h): label keys checked,
 * and docs/metrics.md listing exactly its metrics, types and labels.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <math.h>
#include <netinet/in.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <cmocka.h>

#include "output/metrics.h"

static char *render(lgx_registry_t *r) {
  char *s = NULL;
  size_t len = 0;
  assert_int_equal(lgx_render(r, &s, &len), 0);
  assert_non_null(s);
  assert_int_equal(strlen(s), len);
  return s;
}

static void expect_render(lgx_registry_t *r, const char *want) {
  char *got = render(r);
  if (strcmp(got, want) != 0) print_error("rendered:\n%s\nwanted:\n%s\n", got, want);
  assert_string_equal(got, want);
  free(got);
}

/* ------------------------------------------------------------------ format */

static void test_empty(void **state) {
  (void)state;
  lgx_registry_t *r = lgx_new();
  assert_non_null(r);
  expect_render(r, "");
  lgx_free(r);
}

static void test_gauge_counter(void **state) {
  (void)state;
  lgx_registry_t *r = lgx_new();
  assert_int_equal(lgx_declare(r, "leakguard_live_bytes", LGX_GAUGE, "Live bytes."), 0);
  assert_int_equal(lgx_declare(r, "leakguard_dropped_records_total", LGX_COUNTER, "Dropped records."), 0);
  /* declared, no series yet: HELP and TYPE only; families by name */
  expect_render(r, "# HELP leakguard_dropped_records_total Dropped records.\n"
                   "# TYPE leakguard_dropped_records_total counter\n"
                   "# HELP leakguard_live_bytes Live bytes.\n"
                   "# TYPE leakguard_live_bytes gauge\n");
  assert_int_equal(lgx_set(r, "leakguard_live_bytes", NULL, 1048576), 0);
  assert_int_equal(lgx_add(r, "leakguard_dropped_records_total", NULL, 3), 0);
  assert_int_equal(lgx_add(r, "leakguard_dropped_records_total", NULL, 4), 0);
  expect_render(r, "# HELP leakguard_dropped_records_total Dropped records.\n"
                   "# TYPE leakguard_dropped_records_total counter\n"
                   "leakguard_dropped_records_total 7\n"
                   "# HELP leakguard_live_bytes Live bytes.\n"
                   "# TYPE leakguard_live_bytes gauge\n"
                   "leakguard_live_bytes 1048576\n");
  /* set replaces; counters never go down */
  assert_int_equal(lgx_set(r, "leakguard_live_bytes", NULL, 2.5), 0);
  assert_int_equal(lgx_set(r, "leakguard_dropped_records_total", NULL, 10), 0);
  assert_int_equal(lgx_add(r, "leakguard_dropped_records_total", NULL, -1), -EINVAL);
  assert_int_equal(lgx_set(r, "leakguard_dropped_records_total", NULL, -1), -EINVAL);
  expect_render(r, "# HELP leakguard_dropped_records_total Dropped records.\n"
                   "# TYPE leakguard_dropped_records_total counter\n"
                   "leakguard_dropped_records_total 10\n"
                   "# HELP leakguard_live_bytes Live bytes.\n"
                   "# TYPE leakguard_live_bytes gauge\n"
                   "leakguard_live_bytes 2.5\n");
  lgx_free(r);
}

static void test_labels_and_order(void **state) {
  (void)state;
  lgx_registry_t *r = lgx_new();
  assert_int_equal(lgx_declare(r, "leakguard_site_live_bytes", LGX_GAUGE, "Live bytes per site."), 0);
  const char *a[] = {"site", "cache_put (leaky.c:28)", NULL};
  const char *b[] = {"site", "handle (srv.c:9)", "space", "host", NULL};
  assert_int_equal(lgx_set(r, "leakguard_site_live_bytes", a, 300), 0);
  assert_int_equal(lgx_set(r, "leakguard_site_live_bytes", b, 100), 0);
  assert_int_equal(lgx_set(r, "leakguard_site_live_bytes", a, 400), 0); /* same series, updated in place */
  expect_render(r, "# HELP leakguard_site_live_bytes Live bytes per site.\n"
                   "# TYPE leakguard_site_live_bytes gauge\n"
                   "leakguard_site_live_bytes{site=\"cache_put (leaky.c:28)\"} 400\n"
                   "leakguard_site_live_bytes{site=\"handle (srv.c:9)\",space=\"host\"} 100\n");
  lgx_free(r);
}

/* A histogram: cumulative buckets ending in +Inf, _sum and _count, with and without
 * labels; set again replaces; the set/add of a gauge does not reach it. */
static void test_histogram(void **state) {
  (void)state;
  lgx_registry_t *r = lgx_new();
  assert_int_equal(lgx_declare(r, "leakguard_isolated_request_peak_rss_bytes", LGX_HISTOGRAM, "Peak growth."), 0);
  expect_render(r, "# HELP leakguard_isolated_request_peak_rss_bytes Peak growth.\n"
                   "# TYPE leakguard_isolated_request_peak_rss_bytes histogram\n");
  const double upper[2] = {1048576, 4194304};
  uint64_t counts[3] = {3, 0, 2};
  assert_int_equal(lgx_set_histogram(r, "leakguard_isolated_request_peak_rss_bytes", NULL, upper, counts, 3, 12e6), 0);
  expect_render(r, "# HELP leakguard_isolated_request_peak_rss_bytes Peak growth.\n"
                   "# TYPE leakguard_isolated_request_peak_rss_bytes histogram\n"
                   "leakguard_isolated_request_peak_rss_bytes_bucket{le=\"1048576\"} 3\n"
                   "leakguard_isolated_request_peak_rss_bytes_bucket{le=\"4194304\"} 3\n"
                   "leakguard_isolated_request_peak_rss_bytes_bucket{le=\"+Inf\"} 5\n"
                   "leakguard_isolated_request_peak_rss_bytes_sum 12000000\n"
                   "leakguard_isolated_request_peak_rss_bytes_count 5\n");
  counts[1] = 1;
  const char *l[] = {"pid", "42", NULL};
  assert_int_equal(lgx_set_histogram(r, "leakguard_isolated_request_peak_rss_bytes", NULL, upper, counts, 3, 13e6), 0);
  assert_int_equal(lgx_set_histogram(r, "leakguard_isolated_request_peak_rss_bytes", l, upper, counts, 1, 0), 0);
  expect_render(r, "# HELP leakguard_isolated_request_peak_rss_bytes Peak growth.\n"
                   "# TYPE leakguard_isolated_request_peak_rss_bytes histogram\n"
                   "leakguard_isolated_request_peak_rss_bytes_bucket{le=\"1048576\"} 3\n"
                   "leakguard_isolated_request_peak_rss_bytes_bucket{le=\"4194304\"} 4\n"
                   "leakguard_isolated_request_peak_rss_bytes_bucket{le=\"+Inf\"} 6\n"
                   "leakguard_isolated_request_peak_rss_bytes_sum 13000000\n"
                   "leakguard_isolated_request_peak_rss_bytes_count 6\n"
                   "leakguard_isolated_request_peak_rss_bytes_bucket{pid=\"42\",le=\"+Inf\"} 3\n"
                   "leakguard_isolated_request_peak_rss_bytes_sum{pid=\"42\"} 0\n"
                   "leakguard_isolated_request_peak_rss_bytes_count{pid=\"42\"} 3\n");
  assert_int_equal(lgx_set(r, "leakguard_isolated_request_peak_rss_bytes", NULL, 1), -EINVAL);
  assert_int_equal(lgx_set_histogram(r, "leakguard_nope", NULL, upper, counts, 3, 0), -ENOENT);
  assert_int_equal(lgx_set_histogram(r, "leakguard_isolated_request_peak_rss_bytes", NULL, NULL, counts, 3, 0),
                   -EINVAL);
  assert_int_equal(lgx_declare(r, "leakguard_g", LGX_GAUGE, "g"), 0);
  assert_int_equal(lgx_set_histogram(r, "leakguard_g", NULL, upper, counts, 3, 0), -EINVAL);
  lgx_free(r);
}

static void test_escaping(void **state) {
  (void)state;
  lgx_registry_t *r = lgx_new();
  assert_int_equal(lgx_declare(r, "m", LGX_GAUGE, "help with \\ backslash,\nnewline and \"quotes\""), 0);
  const char *l[] = {"v", "a\\b\"c\nd", NULL};
  assert_int_equal(lgx_set(r, "m", l, 1), 0);
  expect_render(r, "# HELP m help with \\\\ backslash,\\nnewline and \"quotes\"\n"
                   "# TYPE m gauge\n"
                   "m{v=\"a\\\\b\\\"c\\nd\"} 1\n");
  lgx_free(r);
}

static void test_values(void **state) {
  (void)state;
  lgx_registry_t *r = lgx_new();
  assert_int_equal(lgx_declare(r, "v", LGX_GAUGE, ""), 0);
  const char *names[] = {"a", "b", "c", "d", "e", "f", "g", "h"};
  double vals[] = {0.1, -0.0, INFINITY, -INFINITY, NAN, 1e21, 123456789012.0, -3};
  for (int i = 0; i < 8; i++) {
    const char *l[] = {"k", names[i], NULL};
    assert_int_equal(lgx_set(r, "v", l, vals[i]), 0);
  }
  expect_render(r, "# HELP v \n"
                   "# TYPE v gauge\n"
                   "v{k=\"a\"} 0.1\n"
                   "v{k=\"b\"} 0\n"
                   "v{k=\"c\"} +Inf\n"
                   "v{k=\"d\"} -Inf\n"
                   "v{k=\"e\"} NaN\n"
                   "v{k=\"f\"} 1e+21\n"
                   "v{k=\"g\"} 123456789012\n"
                   "v{k=\"h\"} -3\n");
  lgx_free(r);
}

static void test_clear(void **state) {
  (void)state;
  lgx_registry_t *r = lgx_new();
  assert_int_equal(lgx_declare(r, "top", LGX_GAUGE, "Top."), 0);
  const char *x[] = {"site", "x", NULL}, *y[] = {"site", "y", NULL};
  assert_int_equal(lgx_set(r, "top", x, 1), 0);
  assert_int_equal(lgx_set(r, "top", y, 2), 0);
  lgx_clear(r, "top");
  lgx_clear(r, "no_such_family"); /* harmless */
  expect_render(r, "# HELP top Top.\n# TYPE top gauge\n");
  /* re-publish in a new rank order: order follows the new sets */
  assert_int_equal(lgx_set(r, "top", y, 5), 0);
  assert_int_equal(lgx_set(r, "top", x, 4), 0);
  expect_render(r, "# HELP top Top.\n# TYPE top gauge\ntop{site=\"y\"} 5\ntop{site=\"x\"} 4\n");
  lgx_free(r);
}

static void test_bad_args(void **state) {
  (void)state;
  lgx_registry_t *r = lgx_new();
  assert_int_equal(lgx_declare(r, "1bad", LGX_GAUGE, ""), -EINVAL);
  assert_int_equal(lgx_declare(r, "bad-name", LGX_GAUGE, ""), -EINVAL);
  assert_int_equal(lgx_declare(r, "", LGX_GAUGE, ""), -EINVAL);
  assert_int_equal(lgx_declare(r, "ok:name_1", LGX_GAUGE, "first"), 0);
  assert_int_equal(lgx_declare(r, "ok:name_1", LGX_GAUGE, "second"), 0);    /* idempotent */
  assert_int_equal(lgx_declare(r, "ok:name_1", LGX_COUNTER, "x"), -EEXIST); /* type clash */
  assert_int_equal(lgx_set(r, "undeclared", NULL, 1), -ENOENT);
  const char *bad_key[] = {"bad-key", "v", NULL};
  const char *reserved[] = {"__name__", "v", NULL};
  const char *dup[] = {"a", "1", "a", "2", NULL};
  const char *odd[] = {"a", NULL};
  assert_int_equal(lgx_set(r, "ok:name_1", bad_key, 1), -EINVAL);
  assert_int_equal(lgx_set(r, "ok:name_1", reserved, 1), -EINVAL);
  assert_int_equal(lgx_set(r, "ok:name_1", dup, 1), -EINVAL);
  assert_int_equal(lgx_set(r, "ok:name_1", odd, 1), -EINVAL);
  expect_render(r, "# HELP ok:name_1 second\n# TYPE ok:name_1 gauge\n");
  lgx_free(r);
  lgx_free(NULL);
}

/* ------------------------------------------------------------------ HTTP */

/* A loopback port that nobody listens on right now. */
static int free_port(void) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  assert_true(fd >= 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  assert_int_equal(bind(fd, (struct sockaddr *)&a, sizeof a), 0);
  socklen_t l = sizeof a;
  assert_int_equal(getsockname(fd, (struct sockaddr *)&a, &l), 0);
  close(fd);
  return ntohs(a.sin_port);
}

/* Sends a raw HTTP/1.0 request to 127.0.0.1:port and returns the whole answer. */
static char *http(int port, const char *request) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  assert_true(fd >= 0);
  struct timeval tv = {.tv_sec = 5};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  struct sockaddr_in a = {
      .sin_family = AF_INET, .sin_port = htons((uint16_t)port), .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  assert_int_equal(connect(fd, (struct sockaddr *)&a, sizeof a), 0);
  size_t n = strlen(request);
  assert_int_equal(write(fd, request, n), (ssize_t)n);
  size_t cap = 1 << 16, len = 0;
  char *buf = malloc(cap);
  assert_non_null(buf);
  for (;;) {
    ssize_t k = read(fd, buf + len, cap - 1 - len);
    if (k <= 0) break;
    len += (size_t)k;
    assert_true(len < cap - 1);
  }
  buf[len] = '\0';
  close(fd);
  return buf;
}

static void test_serve(void **state) {
  (void)state;
  lgx_registry_t *r = lgx_new();
  assert_int_equal(lgx_declare(r, "leakguard_live_bytes", LGX_GAUGE, "Live bytes."), 0);
  assert_int_equal(lgx_set(r, "leakguard_live_bytes", NULL, 4096), 0);

  /* port 0: the kernel picks; why receives the URL with the real port */
  lgx_server_t *s = NULL;
  char why[256];
  int rc = lgx_serve(r, "127.0.0.1:0", &s, why, sizeof why);
  if (rc) print_error("lgx_serve: %d %s\n", rc, why);
  assert_int_equal(rc, 0);
  assert_non_null(s);
  int port = 0;
  assert_int_equal(sscanf(why, "http://127.0.0.1:%d/metrics", &port), 1);
  assert_true(port > 0);

  char *resp = http(port, "GET /metrics HTTP/1.0\r\n\r\n");
  assert_true(strncmp(resp, "HTTP/1.", 7) == 0 && strncmp(resp + 8, " 200 ", 5) == 0);
  assert_non_null(strstr(resp, "Content-Type: text/plain; version=0.0.4"));
  const char *body = strstr(resp, "\r\n\r\n");
  assert_non_null(body);
  assert_string_equal(body + 4, "# HELP leakguard_live_bytes Live bytes.\n"
                                "# TYPE leakguard_live_bytes gauge\n"
                                "leakguard_live_bytes 4096\n");
  free(resp);

  /* updates show on the next scrape */
  assert_int_equal(lgx_set(r, "leakguard_live_bytes", NULL, 8192), 0);
  resp = http(port, "GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
  assert_non_null(strstr(resp, "\nleakguard_live_bytes 8192\n"));
  free(resp);

  resp = http(port, "GET /nope HTTP/1.0\r\n\r\n");
  assert_non_null(strstr(resp, " 404 "));
  free(resp);
  resp = http(port, "POST /metrics HTTP/1.0\r\nContent-Length: 0\r\n\r\n");
  assert_non_null(strstr(resp, " 405 "));
  free(resp);

  /* the same port again: in use, a clear message */
  char addr[64];
  snprintf(addr, sizeof addr, "127.0.0.1:%d", port);
  lgx_server_t *s2 = (lgx_server_t *)0x1;
  rc = lgx_serve(r, addr, &s2, why, sizeof why);
  assert_int_equal(rc, -EADDRINUSE);
  assert_true(s2 == (lgx_server_t *)0x1); /* untouched on failure */
  assert_non_null(strstr(why, "already in use"));
  assert_non_null(strstr(why, addr));

  lgx_stop(s);
  lgx_stop(NULL);
  lgx_free(r);
}

static void test_serve_default_loopback(void **state) {
  (void)state;
  lgx_registry_t *r = lgx_new();
  int port = free_port();
  char addr[32], why[256], want[64];
  snprintf(addr, sizeof addr, ":%d", port);
  lgx_server_t *s = NULL;
  int rc = lgx_serve(r, addr, &s, why, sizeof why);
  if (rc) print_error("lgx_serve(%s): %d %s\n", addr, rc, why);
  assert_int_equal(rc, 0);
  snprintf(want, sizeof want, "http://127.0.0.1:%d/metrics", port); /* ":PORT" is loopback */
  assert_string_equal(why, want);
  char *resp = http(port, "GET /metrics HTTP/1.0\r\n\r\n");
  assert_non_null(strstr(resp, " 200 "));
  free(resp);
  lgx_stop(s);
  lgx_free(r);
}

static void test_serve_bad_addr(void **state) {
  (void)state;
  lgx_registry_t *r = lgx_new();
  const char *bad[] = {"",         "127.0.0.1", "127.0.0.1:", "127.0.0.1:70000", "127.0.0.1:-1", "host.example:9464",
                       "::1:9464", "[::1",      "[::1]9464",  "1.2.3.4:12ab"};
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    lgx_server_t *s = NULL;
    char why[256] = "";
    int rc = lgx_serve(r, bad[i], &s, why, sizeof why);
    if (rc != -EINVAL) print_error("lgx_serve(\"%s\") = %d (%s), want -EINVAL\n", bad[i], rc, why);
    assert_int_equal(rc, -EINVAL);
    assert_null(s);
    assert_true(why[0] != '\0');
  }
  lgx_free(r);
}

/* ------------------------------------------------------------------ the catalog */

/* Series of catalog metrics take only the catalog's label keys, in its order. */
static void test_catalog_labels(void **state) {
  (void)state;
  lgx_registry_t *r = lgx_new();
  assert_int_equal(lgx_declare_m(r, LGX_LIVE_BYTES), 0);
  const char *host[] = {"space", "host", NULL};
  const char *gpu[] = {"space", "device", "device", "0", NULL};
  const char *swapped[] = {"device", "0", "space", "device", NULL};
  const char *other[] = {"pid", "1", NULL};
  assert_int_equal(lgx_set_m(r, LGX_LIVE_BYTES, host, 5), 0);
  assert_int_equal(lgx_set_m(r, LGX_LIVE_BYTES, gpu, 7), 0);
  assert_int_equal(lgx_set_m(r, LGX_LIVE_BYTES, swapped, 1), -EINVAL);
  assert_int_equal(lgx_set_m(r, LGX_LIVE_BYTES, other, 1), -EINVAL);
  assert_int_equal(lgx_set_m(r, LGX_RSS_BYTES, host, 1), -EINVAL); /* no labels at all */
  assert_int_equal(lgx_set_m(r, LGX_NMETRICS, NULL, 1), -EINVAL);
  expect_render(r, "# HELP leakguard_live_bytes Live bytes recorded in the watched processes, by memory space (and "
                   "GPU for device, managed, pinned)\n"
                   "# TYPE leakguard_live_bytes gauge\n"
                   "leakguard_live_bytes{space=\"host\"} 5\n"
                   "leakguard_live_bytes{space=\"device\",device=\"0\"} 7\n");
  lgx_free(r);
}

/* docs/metrics.md lists every catalog metric with its type and labels, and nothing the
 * catalog does not have: "| `name` | type | `key`, `key` | meaning |" rows (a histogram's
 * `le` is the format's own label). A metric may have several rows (time to OOM: the
 * recorder's and the guard's); each must agree. */
static void test_catalog_docs(void **state) {
  (void)state;
  FILE *f = fopen(LG_SOURCE_DIR "/docs/metrics.md", "r");
  assert_non_null(f);
  int seen[LGX_NMETRICS] = {0};
  char line[4096];
  int rows = 0;
  while (fgets(line, sizeof line, f)) {
    char name[128], type[32];
    int at = 0;
    /* a metric's row: its name starts lower case (the alerts' rows are Leakguard...) */
    if (sscanf(line, "| `%127[a-z0-9_]` | %31[a-z] |%n", name, type, &at) != 2 || !at) continue;
    const char *labels = line + at, *end = strchr(labels, '|');
    assert_non_null(end);
    rows++;
    /* labels as the catalog writes them: the backquoted keys, comma-separated */
    char keys[256] = "";
    size_t w = 0;
    for (const char *p = labels; (p = strchr(p, '`')) != NULL && p < end;) {
      const char *e = strchr(p + 1, '`');
      if (!e || e > end) break;
      if (w) keys[w++] = ',';
      memcpy(keys + w, p + 1, (size_t)(e - p - 1));
      w += (size_t)(e - p - 1);
      keys[w] = 0;
      p = e + 1;
    }
    int found = -1;
    for (int m = 0; m < LGX_NMETRICS; m++)
      if (!strcmp(lgx_metric(m)->name, name)) found = m;
    if (found < 0) print_error("docs/metrics.md: %s is not in the catalog\n", name);
    assert_true(found >= 0);
    const lgx_metric_def_t *d = lgx_metric(found);
    static const char *const tn[] = {"gauge", "counter", "histogram"};
    char want[256];
    snprintf(want, sizeof want, "%s%s%s", d->labels, d->type == LGX_HISTOGRAM && d->labels[0] ? "," : "",
             d->type == LGX_HISTOGRAM ? "le" : "");
    if (strcmp(tn[d->type], type) || strcmp(want, keys))
      print_error("docs/metrics.md: %s is a %s with labels \"%s\"; the catalog: %s, \"%s\"\n", name, type, keys,
                  tn[d->type], want);
    assert_string_equal(tn[d->type], type);
    assert_string_equal(want, keys);
    seen[found] = 1;
  }
  fclose(f);
  for (int m = 0; m < LGX_NMETRICS; m++) {
    if (!seen[m]) print_error("docs/metrics.md does not list %s\n", lgx_metric(m)->name);
    assert_true(seen[m]);
  }
  assert_true(rows >= LGX_NMETRICS);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_empty),
      cmocka_unit_test(test_gauge_counter),
      cmocka_unit_test(test_labels_and_order),
      cmocka_unit_test(test_histogram),
      cmocka_unit_test(test_escaping),
      cmocka_unit_test(test_values),
      cmocka_unit_test(test_clear),
      cmocka_unit_test(test_bad_args),
      cmocka_unit_test(test_serve),
      cmocka_unit_test(test_serve_default_loopback),
      cmocka_unit_test(test_serve_bad_addr),
      cmocka_unit_test(test_catalog_labels),
      cmocka_unit_test(test_catalog_docs),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
