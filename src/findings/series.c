/* SPDX-License-Identifier: MIT */
/*
 * series.c - one site's merged series judged: the detector on the process's life until
 * it began to exit, the growth, the blocks gained and the time to OOM; when the live
 * analysis first flagged it. Shared by the per-site analysis (sites.c) and the search
 * for growth spread over many sites (spread.c).
 */
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "findings/impl.h"

/* Builds the detector's series from a dense per-snapshot array: the process's life
 * until it began to exit (its teardown is not what it did while it ran). */
void lgr_series_of(const pctx_t *c, const double *v, lgd_series_t *ser) {
  ser->n = 0;
  for (int64_t i = 0; i < c->nsnap; i++)
    if (!isnan(c->t[i]) && !(c->t[i] > c->run->exit_begin_s) && lgd_series_add(ser, c->t[i], v[i], c->step[i])) {
      lgr_fail(-ENOMEM);
      return;
    }
}

/* Analyses the merged series v; fills the site's result, growth and time to OOM. */
void lgr_analyse_series(const pctx_t *c, const double *v, const double *blk, lgr_site_t *s, lgd_series_t *ser) {
  double maxval = 0;
  for (int64_t i = 0; i < c->nsnap; i++)
    if (v[i] > maxval) maxval = v[i];
  s->peak_live_bytes = maxval >= 9.2e18 ? INT64_MAX : (int64_t)maxval; /* huge counts (fuzz) */
  memset(&s->r, 0, sizeof s->r);
  s->r.growth_bytes_per_step = NAN;
  s->r.since_s = NAN;
  s->time_to_oom_s = NAN;
  if (maxval < c->min_growth) return;
  lgr_series_of(c, v, ser);
  /* The classifier names the shape of suspects; other sites keep the rule-based shape
   * (thousands of them in a Python program: it would cost seconds). */
  lgd_options_t dopt = {c->o->min_growth_bytes, 1};
  lgd_analyze_recent(ser->pts, ser->n, &dopt, &s->r);
  if (!s->r.leak) return;
  s->growth_bytes = fmax(0, s->r.floor_last - s->r.floor_first);
  if (s->r.growth_bytes_per_s > 0) s->time_to_oom_s = c->headroom / s->r.growth_bytes_per_s;
  /* blocks gained since the growth began */
  double b0 = NAN, b1 = 0;
  for (int64_t i = 0; i < c->nsnap; i++) {
    if (isnan(c->t[i])) continue;
    if (isnan(b0) && c->t[i] >= s->r.since_s) b0 = blk ? blk[i] : 0;
    if (c->t[i] <= s->r.until_s) { /* not after a teardown */
      b1 = blk ? blk[i] : 0;
      s->held_bytes = (int64_t)v[i];
    }
  }
  s->blocks_gained = (int64_t)fmax(0, b1 - (isnan(b0) ? 0 : b0));
}

double lgr_site_flag(const pctx_t *c, const lgr_site_t *s) {
  double best = NAN;
  for (int k = 0; k < s->nstacks; k++) {
    int id = s->stacks[k].stack;
    if (id >= 0 && id < c->nflag && !isnan(c->flag_t[id]) && (isnan(best) || c->flag_t[id] < best))
      best = c->flag_t[id];
  }
  return best;
}
