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

/* Grew then released: rule 7's "released by the end" (docs/detection.md), here for every
 * site that does not grow, whichever rule turned it down (a list pushed for 1.2 s, then
 * popped empty, fails rule 3 already). Judged as the detector judges, on window floors
 * (the minimum of each of 5-32 windows of equal time) over the analysed part (the
 * process's life until it began to exit, less the teardown the detector left out):
 * the highest floor stands at least the smallest leak's growth above the first, and the
 * last floor fell back by more than half of that rise. Floors rise only with memory kept
 * for a window or more: a saw-tooth's teeth and a request's buffers, allocated and freed
 * within a window, never raise them. The figures said are the series' own: its highest
 * value (and when it was first reached) and its value at the end of the analysed part. */
#define REL_MAXW 32
void lgr_released(const pctx_t *c, const double *v, lgr_site_t *s) {
  s->released = 0;
  if (s->r.leak || (double)s->peak_live_bytes < c->min_growth) return;
  int64_t i0 = -1, i1 = -1, n = 0;
  for (int64_t i = 0; i < c->nsnap; i++) {
    double t = c->t[i];
    if (isnan(t) || t > c->run->exit_begin_s || t > s->r.until_s) continue;
    if (i0 < 0) i0 = i;
    i1 = i;
    n++;
  }
  if (n < 6 || !(c->t[i1] > c->t[i0])) return;
  int W = n / 2 < 5 ? 5 : n / 2 > REL_MAXW ? REL_MAXW : (int)(n / 2);
  double fl[REL_MAXW], t0 = c->t[i0], d = c->t[i1] - t0, top = -INFINITY, top_t = NAN;
  for (int w = 0; w < W; w++) fl[w] = INFINITY;
  for (int64_t i = i0; i <= i1; i++) {
    double t = c->t[i];
    if (isnan(t) || t > c->run->exit_begin_s || t > s->r.until_s) continue;
    double x = (t - t0) / d * W;
    int w = x >= W ? W - 1 : x > 0 ? (int)x : 0;
    fl[w] = fmin(fl[w], v[i]);
    if (v[i] > top) top = v[i], top_t = t;
  }
  int k = 0; /* the windows that hold a snapshot */
  for (int w = 0; w < W; w++)
    if (isfinite(fl[w])) fl[k++] = fl[w];
  if (k < 3) return;
  double high = fl[0];
  for (int w = 1; w < k; w++) high = fmax(high, fl[w]);
  double rise = high - fl[0], mid = fl[0] + 0.5 * rise;
  if (!(rise >= c->min_growth) || !(fl[k - 1] < mid)) return;
  /* one rise, held, then one fall: the floors stand above the middle of the rise in one
   * stretch of two windows or more (a cycle that swells and drains again and again, a
   * queue under a varying load, crosses it every cycle; one snapshot caught in a burst
   * raises one window) */
  int above = 0, falls = 0;
  for (int w = 0; w < k; w++) {
    above += fl[w] >= mid;
    falls += w > 0 && fl[w - 1] >= mid && fl[w] < mid;
  }
  if (above < 2 || falls != 1) return;
  s->released = 1;
  s->released_first_bytes = (int64_t)fl[0];
  s->released_peak_bytes = (int64_t)top;
  s->released_end_bytes = (int64_t)v[i1];
  s->released_peak_s = top_t;
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
