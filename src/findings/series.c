/* SPDX-License-Identifier: MIT */
/*
 * series.c - one site's merged series judged: the detector on the process's life until
 * it began to exit, the growth, the blocks gained and the time to OOM; when the live
 * analysis first flagged it; whether a site's or a group's growth is its stacks' own
 * or a staircase of fills (lgr_composition_ok). Shared by the per-site analysis
 * (sites.c) and the search for growth spread over many sites (spread.c).
 */
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
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

/* A site whose stacks each filled once and stopped, at different times (a server's
 * keyspaces, one per command, filled one after the other), sums to a staircase that
 * looks like a step leak. The site stays a suspect only when at least half of its
 * growth comes from stacks that grow by themselves (a leak on their own series) or
 * that are too small to judge alone. The same holds for a group of sites (spread.c):
 * str_new and entry_new, each a staircase of the same two fills, sum to one. */
int lgr_composition_ok(const pctx_t *c, const acc_t *const *accs, int nacc, double from_t, double until_t,
                       lgd_series_t *ser) {
  double *v = malloc((size_t)c->nsnap * sizeof *v);
  if (!v) return 1;
  double total = 0, ok = 0; /* analysed part: [from_t, until_t] */
  for (int m = 0; m < nacc; m++) {
    const acc_t *a = accs[m];
    for (int k = 0; k < a->nrng; k++) {
      double x = 0, peak = 0;
      size_t q = a->rng[k].from, end = q + a->rng[k].len;
      for (int64_t i = 0; i < c->nsnap; i++) {
        while (q < end && a->d[q].seq <= i) x += a->d[q].bytes, q++;
        v[i] = x;
        if (x > peak) peak = x;
      }
      double at_from = NAN, at_end = 0;
      for (int64_t i = 0; i < c->nsnap; i++) {
        if (isnan(c->t[i])) continue;
        if (isnan(at_from) && c->t[i] >= from_t) at_from = v[i];
        if (c->t[i] <= until_t) at_end = v[i];
      }
      if (isnan(at_from)) at_from = 0;
      double g = at_end - at_from;
      if (g <= 0) continue;
      total += g;
      if (peak < c->min_growth) {
        ok += g;
        continue;
      }
      lgr_series_of(c, v, ser);
      lgd_options_t dopt = {c->o->min_growth_bytes, 1};
      lgd_result_t r;
      if (lgd_analyze_recent(ser->pts, ser->n, &dopt, &r) == 0 && r.leak) ok += g;
    }
  }
  free(v);
  return total <= 0 || ok >= 0.5 * total;
}
