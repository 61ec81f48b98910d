/* SPDX-License-Identifier: MIT */
/*
 * metrics_fixture - serves the full leakguard metric set with known values through
 * the real exporter (lgx_serve), so Prometheus, the alerting rules and the Grafana
 * dashboard can be checked against a live endpoint without a recorded target.
 *
 *   metrics_fixture [ADDR:PORT] [--seconds S]
 *
 * ADDR:PORT defaults to 127.0.0.1:0 (a free loopback port). Prints one line
 * "serving http://HOST:PORT/metrics" on stdout once the endpoint is up, then serves
 * until SIGTERM/SIGINT or S seconds (default 60). leakguard_live_bytes is
 * 123456789 at start and grows by 4096 every 100 ms; the other values are constant
 * (see the table below, checked by tests/deploy/prometheus_scrape.py).
 * Exit 0, 2 on a bad address or a port in use (one line "leakguard: ..." on stderr).
 */
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "output/metrics.h"

static volatile sig_atomic_t stop;
static void on_signal(int sig) {
  (void)sig;
  stop = 1;
}

static void must(int rc, const char *what) {
  if (rc != 0) {
    fprintf(stderr, "leakguard: metrics_fixture: %s: %s\n", what, strerror(-rc));
    exit(98);
  }
}

int main(int argc, char **argv) {
  const char *addr = "127.0.0.1:0";
  double seconds = 60;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--seconds") == 0 && i + 1 < argc) seconds = atof(argv[++i]);
    else addr = argv[i];
  }

  lgx_registry_t *r = lgx_new();
  if (!r) return 98;
  /* the families leakguard publishes, as its catalog declares them (docs/metrics.md) */
  static const enum lgx_metric fam[] = {
      LGX_LIVE_BYTES,
      LGX_SITE_LIVE_BYTES,
      LGX_SITE_GROWTH,
      LGX_LEAK_SUSPECTS,
      LGX_TIME_TO_OOM,
      LGX_GUARD_LEVEL,
      LGX_GUARD_ACTIONS,
      LGX_CGROUP_MEMORY,
      LGX_MEMORY_PRESSURE,
      LGX_GPU_USED,
      LGX_DROPPED_RECORDS,
      LGX_TAG_LIVE_BYTES,
      LGX_TAG_PEAK_BYTES,
  };
  for (size_t i = 0; i < sizeof fam / sizeof *fam; i++) must(lgx_declare_m(r, fam[i]), lgx_metric(fam[i])->name);

  const char *s1[] = {"site", "cache_put (leaky.c:28)", NULL};
  const char *s2[] = {"site", "parse \"quoted\" (codec.c:7)", NULL};
  must(lgx_set_m(r, LGX_SITE_LIVE_BYTES, s1, 3858759), "site");
  must(lgx_set_m(r, LGX_SITE_LIVE_BYTES, s2, 65536), "site");
  must(lgx_set_m(r, LGX_SITE_GROWTH, s1, 965632), "growth");
  must(lgx_set_m(r, LGX_SITE_GROWTH, s2, 0), "growth");
  must(lgx_set_m(r, LGX_LEAK_SUSPECTS, NULL, 1), "suspects");
  const char *src[] = {"source", "cgroup:/sys/fs/cgroup/serve", NULL};
  must(lgx_set_m(r, LGX_TIME_TO_OOM, src, 25920), "ttoom");
  must(lgx_set_m(r, LGX_GUARD_LEVEL, NULL, 1), "level");
  const char *a1[] = {"action", "warn", NULL}, *a2[] = {"action", "shed", NULL};
  must(lgx_set_m(r, LGX_GUARD_ACTIONS, a1, 2), "actions");
  must(lgx_set_m(r, LGX_GUARD_ACTIONS, a2, 0), "actions");
  const char *k1[] = {"cgroup", "/sys/fs/cgroup/serve", "kind", "usage", NULL};
  const char *k2[] = {"cgroup", "/sys/fs/cgroup/serve", "kind", "limit", NULL};
  must(lgx_set_m(r, LGX_CGROUP_MEMORY, k1, 536870912), "cgroup");
  must(lgx_set_m(r, LGX_CGROUP_MEMORY, k2, 1073741824), "cgroup");
  const char *p1[] = {"scope", "system", "kind", "some", NULL}, *p2[] = {"scope", "system", "kind", "full", NULL};
  must(lgx_set_m(r, LGX_MEMORY_PRESSURE, p1, 0.25), "psi");
  must(lgx_set_m(r, LGX_MEMORY_PRESSURE, p2, 0.1), "psi");
  const char *g0[] = {"device", "0", NULL};
  must(lgx_set_m(r, LGX_GPU_USED, g0, 2147483648.0), "gpu");
  must(lgx_set_m(r, LGX_DROPPED_RECORDS, NULL, 0), "dropped");
  const char *t1[] = {"tag", "request", NULL};
  must(lgx_set_m(r, LGX_TAG_LIVE_BYTES, t1, 262144), "tag");
  must(lgx_set_m(r, LGX_TAG_PEAK_BYTES, t1, 1048576), "tag");
  double live = 123456789;
  must(lgx_set_m(r, LGX_LIVE_BYTES, NULL, live), "live");

  lgx_server_t *srv = NULL;
  char why[256];
  int rc = lgx_serve(r, addr, &srv, why, sizeof why);
  if (rc != 0) {
    fprintf(stderr, "leakguard: %s\n", why);
    lgx_free(r);
    return 2;
  }
  printf("serving %s\n", why);
  fflush(stdout);

  struct sigaction sa = {.sa_handler = on_signal};
  sigaction(SIGTERM, &sa, NULL);
  sigaction(SIGINT, &sa, NULL);
  struct timespec t0, now, tick = {.tv_nsec = 100 * 1000 * 1000};
  clock_gettime(CLOCK_MONOTONIC, &t0);
  while (!stop) {
    nanosleep(&tick, NULL);
    clock_gettime(CLOCK_MONOTONIC, &now);
    if ((double)(now.tv_sec - t0.tv_sec) + (double)(now.tv_nsec - t0.tv_nsec) / 1e9 >= seconds) break;
    live += 4096;
    lgx_set_m(r, LGX_LIVE_BYTES, NULL, live);
  }
  lgx_stop(srv);
  lgx_free(r);
  return 0;
}
