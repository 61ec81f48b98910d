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
  /* the families leakguard publishes (docs/metrics.md) */
  static const struct {
    const char *name;
    enum lgx_type type;
    const char *help;
  } fam[] = {
      {"leakguard_live_bytes", LGX_GAUGE, "Live heap bytes of the recorded processes."},
      {"leakguard_site_live_bytes", LGX_GAUGE, "Live bytes of the top allocation sites."},
      {"leakguard_site_growth_bytes_per_second", LGX_GAUGE, "Growth rate of the top allocation sites."},
      {"leakguard_leak_suspects", LGX_GAUGE, "Allocation sites currently judged to leak."},
      {"leakguard_time_to_oom_seconds", LGX_GAUGE, "Predicted time until the memory limit is reached."},
      {"leakguard_guard_level", LGX_GAUGE, "Guard level: 0 normal, 1 warn, 2 breaker, 3 emergency."},
      {"leakguard_guard_actions_total", LGX_COUNTER, "Actions taken by the guard."},
      {"leakguard_cgroup_memory_bytes", LGX_GAUGE, "Memory of the watched cgroup."},
      {"leakguard_memory_pressure_avg10", LGX_GAUGE, "Memory pressure stall information, some avg10 (percent)."},
      {"leakguard_gpu_memory_used_bytes", LGX_GAUGE, "GPU memory in use per device."},
      {"leakguard_dropped_records_total", LGX_COUNTER, "Allocation records the recorder could not keep."},
      {"leakguard_tag_live_bytes", LGX_GAUGE, "Live bytes of the top allocation tags."},
      {"leakguard_tag_peak_bytes", LGX_GAUGE, "Peak live bytes of the top allocation tags."},
  };
  for (size_t i = 0; i < sizeof fam / sizeof *fam; i++)
    must(lgx_declare(r, fam[i].name, fam[i].type, fam[i].help), fam[i].name);

  const char *s1[] = {"site", "cache_put (leaky.c:28)", NULL};
  const char *s2[] = {"site", "parse \"quoted\" (codec.c:7)", NULL};
  must(lgx_set(r, "leakguard_site_live_bytes", s1, 3858759), "site");
  must(lgx_set(r, "leakguard_site_live_bytes", s2, 65536), "site");
  must(lgx_set(r, "leakguard_site_growth_bytes_per_second", s1, 965632), "growth");
  must(lgx_set(r, "leakguard_site_growth_bytes_per_second", s2, 0), "growth");
  must(lgx_set(r, "leakguard_leak_suspects", NULL, 1), "suspects");
  const char *src[] = {"source", "cgroup:/sys/fs/cgroup/serve", NULL};
  must(lgx_set(r, "leakguard_time_to_oom_seconds", src, 25920), "ttoom");
  must(lgx_set(r, "leakguard_guard_level", NULL, 1), "level");
  const char *a1[] = {"action", "warn", NULL}, *a2[] = {"action", "shed", NULL};
  must(lgx_set(r, "leakguard_guard_actions_total", a1, 2), "actions");
  must(lgx_set(r, "leakguard_guard_actions_total", a2, 0), "actions");
  const char *k1[] = {"cgroup", "/sys/fs/cgroup/serve", "kind", "usage", NULL};
  const char *k2[] = {"cgroup", "/sys/fs/cgroup/serve", "kind", "limit", NULL};
  must(lgx_set(r, "leakguard_cgroup_memory_bytes", k1, 536870912), "cgroup");
  must(lgx_set(r, "leakguard_cgroup_memory_bytes", k2, 1073741824), "cgroup");
  const char *p1[] = {"scope", "system", "kind", "some", NULL}, *p2[] = {"scope", "system", "kind", "full", NULL};
  must(lgx_set(r, "leakguard_memory_pressure_avg10", p1, 0.25), "psi");
  must(lgx_set(r, "leakguard_memory_pressure_avg10", p2, 0.1), "psi");
  const char *g0[] = {"device", "0", NULL};
  must(lgx_set(r, "leakguard_gpu_memory_used_bytes", g0, 2147483648.0), "gpu");
  must(lgx_set(r, "leakguard_dropped_records_total", NULL, 0), "dropped");
  const char *t1[] = {"tag", "request", NULL};
  must(lgx_set(r, "leakguard_tag_live_bytes", t1, 262144), "tag");
  must(lgx_set(r, "leakguard_tag_peak_bytes", t1, 1048576), "tag");
  double live = 123456789;
  must(lgx_set(r, "leakguard_live_bytes", NULL, live), "live");

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
    lgx_set(r, "leakguard_live_bytes", NULL, live);
  }
  lgx_stop(srv);
  lgx_free(r);
  return 0;
}
