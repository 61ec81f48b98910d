/* SPDX-License-Identifier: MIT */
/* Added latency of isolated calls (issue #15): p50 and p99 of one request's wall time
 * with a caller of --caller-mb MiB resident (touched, so fork copies its page tables),
 * for a direct call, lg_isolate_call (a fork per request) and the pre-forked pool
 * (a ready child per request: the pool is let refill between requests, outside the
 * timing). The handler echoes 64 bytes.
 *   isolate_bench [--caller-mb 1024] [--requests 200] [--pool 4] [--budget auto|rss|cgroup]
 * Prints one table row per mode; "added" is the median minus the direct call's. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "leakguard.h"

static double now_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec * 1e-3;
}

static int echo(const void *in, size_t inlen, void **out, size_t *outlen, void *arg) {
  *out = malloc(inlen);
  memcpy(*out, in, inlen);
  *outlen = inlen;
  return 0;
}

static int cmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static void report(const char *mode, int mb, double *t, int n, double base) {
  qsort(t, (size_t)n, sizeof *t, cmp);
  double p50 = t[n / 2], p99 = t[(int)(n * 0.99)];
  printf("| %5d MiB | %-14s | %9.1f | %9.1f | %9.1f |\n", mb, mode, p50, p99, p50 - base);
}

int main(int argc, char **argv) {
  int mb = 1024, n = 200, pool = 4, by = LG_BUDGET_AUTO;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!strcmp(argv[i], "--budget"))
      by = !strcmp(argv[i + 1], "rss") ? LG_BUDGET_RSS : !strcmp(argv[i + 1], "cgroup") ? LG_BUDGET_CGROUP : -1;
    if (!strcmp(argv[i], "--caller-mb")) mb = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--requests")) n = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--pool")) pool = atoi(argv[i + 1]);
  }
  if (n < 2 || mb < 0 || pool < 1 || by < 0) return 2;
  size_t size = (size_t)mb << 20;
  char *ballast = malloc(size ? size : 1);
  for (size_t i = 0; i < size; i += 4096) ballast[i] = (char)i;
  char in[64];
  memset(in, 'x', sizeof in);
  double *t = calloc((size_t)n, sizeof *t);
  void *out;
  size_t outlen;
  for (int i = 0; i < n; i++) {
    double t0 = now_us();
    echo(in, sizeof in, &out, &outlen, NULL);
    t[i] = now_us() - t0;
    free(out);
  }
  qsort(t, (size_t)n, sizeof *t, cmp);
  double base = t[n / 2];
  lg_isolate_opts_t o = {.max_rss = (size_t)256 << 20, .timeout_s = 10, .budget_by = by};
  char where[256];
  int method = by ? by : lg_isolate_budget_method(where, sizeof where);
  printf("budget (256 MiB) enforced by %s\n\n", method == LG_BUDGET_CGROUP ? "a cgroup per child" : "polling RSS");
  printf("| caller    | mode           | p50 (us)  | p99 (us)  | added p50 |\n|---|---|---|---|---|\n");
  report("direct", mb, t, n, base);
  for (int i = 0; i < n; i++) {
    lg_isolate_result_t r;
    double t0 = now_us();
    if (lg_isolate_call(echo, in, sizeof in, &out, &outlen, &o, &r) != LG_ISOLATE_OK) {
      fprintf(stderr, "isolated call: %s\n", r.message);
      return 1;
    }
    t[i] = now_us() - t0;
    free(out);
  }
  report("fork per call", mb, t, n, base);
  o.pool_size = pool;
  lg_isolate_pool_t *p = lg_isolate_pool_new(echo, &o);
  if (!p) return 1;
  for (int i = 0; i < n; i++) {
    while (lg_isolate_pool_ready(p) < pool) usleep(200);
    lg_isolate_result_t r;
    double t0 = now_us();
    if (lg_isolate_pool_call(p, in, sizeof in, &out, &outlen, &r) != LG_ISOLATE_OK) {
      fprintf(stderr, "pooled call: %s\n", r.message);
      return 1;
    }
    t[i] = now_us() - t0;
    free(out);
  }
  report("pool", mb, t, n, base);
  lg_isolate_pool_free(p);
  free(t);
  free(ballast);
  return 0;
}
