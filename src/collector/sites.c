/* SPDX-License-Identifier: MIT */
/* sites.c - the collector's live site groups (see sites.h). */
#include "collector/sites.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/strmap.h"
#include "findings/report.h"

/* A group is tracked (sampled every tick) from the first tick it holds this much. */
#define TRACK_BYTES 16384.0
/* Analyses without growth after which growth counts as a new episode. */
#define QUIET_TICKS 10

void lgc_sites_init(lgc_sites_t *s) { memset(s, 0, sizeof *s); }

void lgc_sites_free(lgc_sites_t *s) {
  for (int i = 0; i < s->n; i++) {
    free(s->g[i].key);
    free(s->g[i].label);
    free(s->g[i].frames_json);
    lgd_series_free(&s->g[i].hist);
  }
  free(s->g);
  free(s->group_of);
  if (s->index) {
    lgu_strmap_free(s->index);
    free(s->index);
  }
  memset(s, 0, sizeof *s);
}

int lgc_sites_assign(lgc_sites_t *s, uint32_t stack, const char *key, const char *label, const char *frames_json,
                     unsigned space, unsigned device, int in_import, int python) {
  if (!s->index && !(s->index = calloc(1, sizeof(lgu_strmap_t)))) return -ENOMEM;
  if (stack >= s->nstacks) {
    uint32_t nc = s->nstacks ? s->nstacks : 1024;
    while (nc <= stack) nc *= 2;
    int32_t *n = realloc(s->group_of, nc * sizeof *n);
    if (!n) return -ENOMEM;
    for (uint32_t i = s->nstacks; i < nc; i++) n[i] = -1;
    s->group_of = n;
    s->nstacks = nc;
  }
  int added = 0;
  int gi = lgu_strmap_get_or_add(s->index, key, s->n, &added);
  if (gi < 0) return -ENOMEM;
  if (added) {
    if (s->n == s->cap) {
      int nc = s->cap ? s->cap * 2 : 64;
      lgc_group_t *ng = realloc(s->g, (size_t)nc * sizeof *ng);
      if (!ng) return -ENOMEM;
      s->g = ng;
      s->cap = nc;
    }
    lgc_group_t *g = &s->g[s->n++];
    memset(g, 0, sizeof *g);
    g->key = strdup(key);
    g->label = strdup(label ? label : "??");
    g->frames_json = frames_json ? strdup(frames_json) : NULL;
    g->rep_stack = stack;
    g->space = space;
    g->device = device;
    g->python = python != 0;
    g->flag_t = NAN;
    g->t_tracked = NAN;
    if (!g->key || !g->label) return -ENOMEM;
  }
  if (s->group_of[stack] != gi) {
    s->g[gi].nstacks++;
    s->g[gi].nimport += in_import != 0;
  }
  s->group_of[stack] = gi;
  return 0;
}

void lgc_sites_tick(lgc_sites_t *s, double t, double step, const lgm_site_t *sites, uint32_t nsites) {
  for (int i = 0; i < s->n; i++) s->g[i].live = 0;
  uint32_t n = nsites < s->nstacks ? nsites : s->nstacks;
  for (uint32_t id = 2; id < n; id++) {
    int gi = s->group_of[id];
    if (gi >= 0) s->g[gi].live += (double)sites[id].live_bytes;
  }
  for (int i = 0; i < s->n; i++) {
    lgc_group_t *g = &s->g[i];
    if (g->live > g->peak) g->peak = g->live;
    if (!g->hist.max_points) {
      if (g->live < TRACK_BYTES) continue;
      lgd_series_init(&g->hist, 1024);
      g->t_tracked = t;
    }
    lgd_series_add(&g->hist, t, g->live, step);
    g->recent[g->head] = (lgd_point_t){t, g->live, g->live, g->live, step};
    g->head = (g->head + 1) % LGC_RECENT;
    if (g->nrecent < LGC_RECENT) g->nrecent++;
  }
}

/* The group's whole run (decimated) followed by its recent ticks at full resolution;
 * returns the count and, in *ring_from, where the recent ticks start. */
static size_t gather(const lgc_group_t *g, lgd_point_t *out, size_t cap, size_t *ring_from) {
  size_t k = 0;
  double first_recent = g->recent[(g->head - g->nrecent + LGC_RECENT) % LGC_RECENT].t;
  for (size_t i = 0; i < g->hist.n && k < cap; i++)
    if (g->hist.pts[i].t < first_recent) out[k++] = g->hist.pts[i];
  *ring_from = k;
  for (int i = 0; i < g->nrecent && k < cap; i++)
    out[k++] = g->recent[(g->head - g->nrecent + i + 2 * LGC_RECENT) % LGC_RECENT];
  return k;
}

int lgc_sites_analyse(lgc_sites_t *s, double t, double live_bytes, double headroom) {
  int newly = 0;
  size_t cap = 1024 + LGC_RECENT;
  lgd_point_t *pts = malloc(cap * sizeof *pts);
  if (!pts) return 0;
  for (int i = 0; i < s->n; i++) {
    lgc_group_t *g = &s->g[i];
    g->growing = 0;
    g->quiet++;
    if (!g->hist.max_points || g->hist.n < 6) continue;
    /* a site reached only under module imports is start-up (docs/detection.md) */
    if (g->nstacks > 0 && g->nimport == g->nstacks) continue;
    size_t ring_from = 0;
    size_t n = gather(g, pts, cap, &ring_from);
    lgd_options_t lo = {0, 1};
    lgd_analyze_recent(pts, n, &lo, &g->r);
    if (!g->r.leak && n - ring_from >= LGD_TAIL_MIN_POINTS) {
      /* the last ticks alone: a leak that began a few seconds ago */
      lgd_result_t r;
      if (lgd_analyze_tail(pts, n, ring_from, &lo, &r) == 0 && r.leak) g->r = r;
    }
    if (!g->r.leak) continue;
    double growth = fmax(0, g->r.floor_last - g->r.floor_first);
    double tto = g->r.growth_bytes_per_s > 0 ? headroom / g->r.growth_bytes_per_s : NAN;
    /* blocks are not sampled per tick: the few-blocks clause of the rule is the
     * report's alone, so a growth of a handful of big blocks may be flagged here. */
    if (lgr_is_minor(growth, g->r.growth_bytes_per_s, live_bytes, INFINITY, tto)) continue;
    g->growing = 1;
    /* A new episode of growth after a quiet spell (startup tables that grew, then a
     * leak that began later) flags again: the flag dates the growth that is current. */
    if (!g->flagged || g->quiet > QUIET_TICKS) {
      g->flagged = 1;
      g->flag_t = t;
      newly++;
    }
    g->quiet = 0;
  }
  free(pts);
  return newly;
}
