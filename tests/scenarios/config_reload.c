/* SPDX-License-Identifier: MIT */
/*
 * config_reload - a proxy that reloads its routing configuration every 0.5..0.9 s
 * (as if on SIGHUP from a config-management agent) while serving requests.
 *
 * A configuration is a header, a rule table (one array of fixed-size rules, sized
 * by the number of rules in the file: 100..200 KiB) and a hash index over it.
 * config_release() frees the index and the header but not the rule table, so
 * every reload leaks the previous rule table: a step-shaped leak.
 *
 * Ground truth: the rule-table allocation in config_load() (LEAK-SITE).
 *
 * Options: --seconds S (default 5), --rate REQ_PER_S (default 15000), --seed N,
 *          --pidfile PATH
 */
#include "scen_common.h"

struct rule {
  char prefix[48];
  char upstream[40];
  uint32_t weight;
  uint32_t flags;
};

struct config {
  unsigned version;
  size_t nrules;
  struct rule *rules;
  uint32_t *index; /* open addressing over rules, 2x size */
  size_t index_size;
};

static uint32_t hash_prefix(const char *s) {
  uint32_t h = 2166136261u;
  while (*s) h = (h ^ (unsigned char)*s++) * 16777619u;
  return h;
}

static struct config *config_load(unsigned version, uint64_t *rng) {
  struct config *c = calloc(1, sizeof *c);
  c->version = version;
  c->nrules = scen_range(rng, 1100, 2200);
  c->rules = malloc(c->nrules * sizeof *c->rules); /* LEAK-SITE */
  for (size_t i = 0; i < c->nrules; i++) {
    struct rule *r = &c->rules[i];
    memset(r, 0, sizeof *r);
    snprintf(r->prefix, sizeof r->prefix, "/svc/%zu/v%u", i, version % 7);
    snprintf(r->upstream, sizeof r->upstream, "10.1.%zu.%zu:8080", i / 250, i % 250);
    r->weight = (uint32_t)scen_range(rng, 1, 100);
  }
  c->index_size = c->nrules * 2;
  c->index = malloc(c->index_size * sizeof *c->index);
  memset(c->index, 0xff, c->index_size * sizeof *c->index);
  for (size_t i = 0; i < c->nrules; i++) {
    size_t slot = hash_prefix(c->rules[i].prefix) % c->index_size;
    while (c->index[slot] != UINT32_MAX) slot = (slot + 1) % c->index_size;
    c->index[slot] = (uint32_t)i;
  }
  return c;
}

static void config_release(struct config *c) {
  free(c->index);
  free(c); /* bug: c->rules is not freed */
}

static const struct rule *route(const struct config *c, const char *path) {
  size_t slot = hash_prefix(path) % c->index_size;
  while (c->index[slot] != UINT32_MAX) {
    const struct rule *r = &c->rules[c->index[slot]];
    if (strcmp(r->prefix, path) == 0) return r;
    slot = (slot + 1) % c->index_size;
  }
  return NULL;
}

int main(int argc, char **argv) {
  double seconds = scen_seconds(argc, argv, 5.0);
  double rate = scen_opt_double(argc, argv, "--rate", "SCEN_RATE", 15000);
  uint64_t rng = (uint64_t)scen_opt_long(argc, argv, "--seed", "SCEN_SEED", 404);
  scen_write_pidfile(argc, argv);
  scen_step_init();

  unsigned version = 1;
  struct config *cfg = config_load(version, &rng);
  double now = scen_now(), end = now + seconds;
  double next_reload = now + 0.5 + scen_unit(&rng) * 0.4;
  struct scen_pacer pacer;
  scen_pacer_init(&pacer, rate);
  unsigned long served = 0, misses = 0;
  char path[64];
  while ((now = scen_now()) < end) {
    if (now >= next_reload) {
      struct config *fresh = config_load(++version, &rng);
      struct config *old = cfg;
      cfg = fresh;
      config_release(old);
      next_reload = now + 0.5 + scen_unit(&rng) * 0.4;
    }
    snprintf(path, sizeof path, "/svc/%u/v%u", (unsigned)scen_range(&rng, 0, 2400), version % 7);
    const struct rule *r = route(cfg, path);
    size_t body = scen_logsize(&rng, 64, 32768);
    char *buf = malloc(body);
    memset(buf, r ? (int)r->weight : 0, body);
    scen_escape(buf);
    free(buf);
    if (r) served++; else misses++;
    scen_step();
    scen_pace(&pacer);
  }
  printf("config_reload: version=%u served=%lu misses=%lu\n", version, served, misses);
  free(cfg->rules);
  config_release(cfg);
  return 0;
}
