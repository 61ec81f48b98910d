/* SPDX-License-Identifier: MIT */
/*
 * first_use - a healthy server whose first request on each route creates that route's
 * objects: a latency histogram (redis' hdr_init does this per command type) and a
 * small route record. Routes are first used at random times during the run, some
 * late. Per-request buffers are freed; the routing table and caches are built at
 * start-up (about 4 MiB) and stay.
 *
 * Ground truth: no leak. The per-route objects are a handful of blocks, a few percent
 * of the process: "minor growth", never a leak verdict.
 *
 * Options: --seconds S (default 8), --rate REQ_PER_S (default 5000), --routes N
 *          (default 6), --seed N
 */
#include "scen_common.h"

struct route {
  char name[32];
  unsigned long requests;
  uint32_t *histogram; /* created on the route's first request */
};

#define MAX_ROUTES 32
#define HIST_BUCKETS 4096

static struct route *g_routes[MAX_ROUTES];

static struct route *route_for(unsigned id) {
  if (!g_routes[id]) {
    struct route *r = calloc(1, sizeof *r);
    snprintf(r->name, sizeof r->name, "/api/v1/route%u", id);
    r->histogram = calloc(HIST_BUCKETS, sizeof *r->histogram); /* first use of the route */
    g_routes[id] = r;
  }
  return g_routes[id];
}

int main(int argc, char **argv) {
  double seconds = scen_seconds(argc, argv, 8);
  double rate = scen_opt_double(argc, argv, "--rate", NULL, 5000);
  unsigned routes = (unsigned)scen_opt_long(argc, argv, "--routes", NULL, 6);
  uint64_t rng = (uint64_t)scen_opt_long(argc, argv, "--seed", NULL, 11);
  if (routes < 1 || routes > MAX_ROUTES) routes = 6;
  scen_step_init();
  size_t table_len = 4u << 20;
  unsigned char *table = malloc(table_len);
  scen_touch(table, table_len);
  /* when each route is first used: spread over the run, the last in its final fifth */
  double first_at[MAX_ROUTES];
  for (unsigned i = 0; i < routes; i++) first_at[i] = seconds * (0.05 + 0.85 * (double)i / (double)routes);
  double t0 = scen_now();
  unsigned long served = 0;
  struct scen_pacer pace;
  scen_pacer_init(&pace, rate);
  while (scen_now() - t0 < seconds) {
    double now = scen_now() - t0;
    unsigned open = 0;
    while (open < routes && first_at[open] <= now) open++;
    if (open == 0) open = 1;
    unsigned id = (unsigned)scen_range(&rng, 0, open - 1);
    struct route *r = route_for(id);
    size_t len = scen_logsize(&rng, 64, 32768);
    char *req = malloc(len), *resp = malloc(len / 2 + 16);
    scen_touch(req, len);
    scen_touch(resp, len / 2 + 16);
    r->requests++;
    r->histogram[scen_range(&rng, 0, HIST_BUCKETS - 1)]++;
    free(resp);
    free(req);
    served++;
    scen_step();
    scen_pace(&pace);
  }
  printf("first_use: served=%lu routes=%u\n", served, routes);
  for (unsigned i = 0; i < MAX_ROUTES; i++)
    if (g_routes[i]) {
      free(g_routes[i]->histogram);
      free(g_routes[i]);
    }
  free(table);
  return 0;
}
