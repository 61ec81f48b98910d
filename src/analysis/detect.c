/* SPDX-License-Identifier: MIT */
/* detect.c - the leak detector (see detect.h for the method). */
#include "analysis/detect.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "analysis/stats.h"

void lgd_series_init(lgd_series_t *s, size_t max_points) {
  memset(s, 0, sizeof *s);
  s->max_points = max_points < 16 ? 16 : max_points & ~(size_t)1;
}

void lgd_series_free(lgd_series_t *s) {
  free(s->pts);
  memset(s, 0, sizeof *s);
}

int lgd_series_add(lgd_series_t *s, double t, double v, double step) {
  if (s->n == 0) s->per_point = 1, s->in_last = 0;
  if (s->n && s->in_last < s->per_point) { /* the last point is not full yet (after a halving) */
    lgd_point_t *l = &s->pts[s->n - 1];
    *l = (lgd_point_t){t, fmin(l->lo, v), fmax(l->hi, v), v, step};
    s->in_last++;
    return 0;
  }
  if (s->n == s->max_points) {
    /* Halve the resolution: merge pairs, keeping the extremes. */
    size_t w = 0;
    for (size_t i = 0; i + 1 < s->n; i += 2) {
      lgd_point_t a = s->pts[i], b = s->pts[i + 1];
      b.lo = fmin(a.lo, b.lo);
      b.hi = fmax(a.hi, b.hi);
      s->pts[w++] = b;
    }
    s->n = w;
    s->per_point *= 2; /* every point now spans twice as many samples, the last one too */
  }
  if (s->n == s->cap) {
    size_t nc = s->cap ? s->cap * 2 : 64;
    if (nc > s->max_points) nc = s->max_points;
    lgd_point_t *p = realloc(s->pts, nc * sizeof *p);
    if (!p) return -ENOMEM;
    s->pts = p;
    s->cap = nc;
  }
  s->pts[s->n++] = (lgd_point_t){t, v, v, v, step};
  s->in_last = 1;
  return 0;
}

#define MAXW 32
#define MAXC 4096 /* points handed to the classifier (it resamples longer series itself) */

/* The classifier's most probable class among those consistent with the verdict. */
static int classify_consistent(const lgd_point_t *pts, size_t n, int leak) {
  if (n < 8) return -1;
  double t[MAXC], v[MAXC];
  size_t step = (n + MAXC - 1) / MAXC, k = 0;
  for (size_t i = 0; i < n && k < MAXC; i += step, k++) {
    t[k] = pts[i].t;
    v[k] = pts[i].last;
  }
  if (k < 8) return -1;
  lg_pattern_t c;
  double pr[LG_PATTERN_COUNT];
  if (lg_classify(t, v, NULL, k, &c, pr) != 0) return -1;
  int best = -1;
  for (int i = 0; i < LG_PATTERN_COUNT; i++) {
    if (i == LG_PATTERN_FRAGMENTATION) continue; /* needs RSS: process level only */
    if (lg_pattern_is_leak((lg_pattern_t)i) != leak) continue;
    if (best < 0 || pr[i] > pr[best]) best = i;
  }
  return best;
}

int lgd_process_pattern(const double *t, const double *live, const double *rss, size_t n, int *nonleak) {
  if (nonleak) *nonleak = -1;
  if (n < 8) return -1;
  lg_pattern_t c;
  double pr[LG_PATTERN_COUNT];
  if (lg_classify(t, live, rss, n, &c, pr) != 0) return -1;
  if (nonleak) {
    int best = -1;
    for (int i = 0; i < LG_PATTERN_COUNT; i++)
      if (!lg_pattern_is_leak((lg_pattern_t)i) && (best < 0 || pr[i] > pr[best])) best = i;
    *nonleak = best;
  }
  return (int)c;
}

/* Splits pts[0..n) into W windows, of equal time (by_count 0) or of equal point counts,
 * and gives each non-empty one's floor (lowest minimum), ceiling, mean time and last
 * step, in order. Returns the number of non-empty windows. By count, a window never
 * spans a gap longer than gap seconds (a stopped or starved collector): its floor would
 * come from one side of the gap and its mean time from both, and the late windows'
 * slope, read between such times, would miss growth seen after the gap (the fault
 * suite's stalled collector, under load: 16 points before the stop, 2 after). Such a
 * window is split there, up to MAXW windows in all. */
static size_t fill_windows(const lgd_point_t *pts, size_t n, size_t W, int by_count, double gap, double *fl, double *ce,
                           double *tm, double *st) {
  double t0 = pts[0].t, d = pts[n - 1].t - t0;
  int cnt[MAXW] = {0};
  for (size_t w = 0; w < MAXW; w++) {
    fl[w] = INFINITY;
    ce[w] = -INFINITY;
    tm[w] = 0;
    st[w] = 0;
  }
  size_t shift = 0, prev = 0;
  for (size_t i = 0; i < n; i++) {
    size_t w;
    if (by_count) {
      w = i * W / n + shift;
      if (i > 0 && gap > 0 && pts[i].t - pts[i - 1].t > gap && w == prev && w + 1 < MAXW) w++, shift++;
      if (w >= MAXW) w = MAXW - 1;
      prev = w;
    } else {
      /* Times out of order or out of range (a damaged database) must not convert a
       * negative, huge or NaN double to size_t (fuzz, issue #17). */
      double x = (pts[i].t - t0) / d * (double)W;
      w = x >= (double)W ? W - 1 : x > 0 ? (size_t)x : 0;
    }
    fl[w] = fmin(fl[w], pts[i].lo);
    ce[w] = fmax(ce[w], pts[i].hi);
    tm[w] += pts[i].t;
    st[w] = pts[i].step;
    cnt[w]++;
  }
  size_t k = 0;
  for (size_t w = 0; w < (by_count ? MAXW : W); w++) {
    if (!cnt[w]) continue;
    fl[k] = fl[w];
    ce[k] = ce[w];
    tm[k] = tm[w] / cnt[w];
    st[k] = st[w];
    k++;
  }
  return k;
}

int lgd_analyze(const lgd_point_t *pts, size_t n, const lgd_options_t *opt, lgd_result_t *out) {
  if (!pts || !out) return -EINVAL;
  double min_growth = opt && opt->min_growth_bytes > 0 ? opt->min_growth_bytes : LGD_MIN_GROWTH_BYTES;
  memset(out, 0, sizeof *out);
  out->since_s = n ? pts[0].t : NAN;
  out->pattern = LG_PATTERN_STABLE;
  out->growth_bytes_per_step = NAN;
  out->p = 1;
  /* Teardown: a program that frees everything at exit (destructors, interpreter
   * finalisation) ends with a collapse: its last snapshots, up to 2 or 10 % of them,
   * all under half of the snapshot before the collapse (zeros for a while when the
   * collector snapshots on until the process is gone: a torch worker takes 2 s of a
   * 15-s run to shut its process group and interpreter down). What it did while
   * running is the question: leave the longest such collapse out. */
  {
    size_t kmax = n / 10 > 2 ? n / 10 : 2, cut = 0;
    double tail = -INFINITY;
    for (size_t k = 1; k <= kmax && n > 6 + k; k++) {
      tail = fmax(tail, pts[n - k].last);
      if (tail < 0.5 * pts[n - 1 - k].last) cut = k;
    }
    n -= cut;
  }
  out->until_s = n ? pts[n - 1].t : NAN;
  if (n < 6) return 0;
  if (!(pts[n - 1].t - pts[0].t > 0)) return 0;

  /* 1. window floors and ceilings. */
  size_t W = n / 2;
  if (W < 5) W = 5;
  if (W > MAXW) W = MAXW;
  double fl[MAXW], ce[MAXW], tm[MAXW], st[MAXW];
  size_t k = fill_windows(pts, n, W, 0, 0, fl, ce, tm, st);
  /* Snapshots missing for a while (a collector stopped or starved by a loaded machine)
   * leave windows empty; with fewer than 5 left the trend test has nothing to say,
   * although the points there are all that is known of the floors (a decimated point
   * even holds the minimum since the point before). Windows of equal point counts,
   * split at a gap longer than one of the time windows. */
  if (k < 5) k = fill_windows(pts, n, 5, 1, (pts[n - 1].t - pts[0].t) / (double)W, fl, ce, tm, st);
  W = k;
  out->windows = (int)W;
  if (W < 5) return 0;

  /* 2. trend of the floors. */
  double tau = 0, p = 1;
  lga_mann_kendall(fl, W, &tau, &p);
  double slope = lga_theil_sen(tm, fl, W);
  size_t h = W / 2;
  double slope_early = lga_theil_sen(tm, fl, h + 1);
  double slope_late = lga_theil_sen(tm + h, fl + h, W - h);
  double a2[2] = {fl[0], fl[1]}, b2[2] = {fl[W - 2], fl[W - 1]};
  double first = lga_median(a2, 2), last = lga_median(b2, 2);
  double growth = last - first;
  double level = 0, amp[MAXW], resid[MAXW];
  for (size_t w = 0; w < W; w++) {
    level = fmax(level, ce[w]);
    amp[w] = ce[w] - fl[w];
  }
  double med_amp = lga_median(amp, W);
  double icpt_pts[MAXW];
  for (size_t w = 0; w < W; w++) icpt_pts[w] = fl[w] - slope * tm[w];
  double icpt = lga_median(icpt_pts, W);
  for (size_t w = 0; w < W; w++) resid[w] = fabs(fl[w] - (icpt + slope * tm[w]));
  double noise = 1.4826 * lga_median(resid, W);
  /* Growth from slopes, not from single floors: one noisy window must not decide. */
  double late_growth = slope_late * (tm[W - 1] - tm[h]);
  double early_growth = slope_early * (tm[h] - tm[0]);
  double total_growth = slope * (tm[W - 1] - tm[0]);

  out->tau = tau;
  out->p = p;
  out->floor_first = first;
  out->floor_last = last;
  out->growth_bytes_per_s = slope;
  if (st[W - 1] > st[0]) {
    double sl = lga_theil_sen(st, fl, W);
    out->growth_bytes_per_step = sl;
  }

  /* 3./4. the verdict. */
  int trending = tau >= 0.5 && p < 0.05 && slope > 0;
  /* Still growing: the late half's own slope, against the whole run's and against the
   * early half's growth. The second test is the plateau rule below: a curve that rose
   * in one burst and then stayed level (a bounded deque of 16 tensors filled in 0.3 s
   * of a 6-s run) has a whole-run slope that the burst inflates, and a late half whose
   * floors drift by a block or two (the 17th tensor caught alive or not) could pass
   * the first test alone: CI, python_ok_detached, late growth 11 % of the early. */
  int still_growing = late_growth > 0 && slope_late > 0.2 * slope && late_growth > 0.2 * early_growth;
  int big_enough = total_growth >= min_growth && total_growth > 3 * noise;
  out->leak = trending && still_growing && big_enough;
  /* 5. Kept, not given back. Memory that a leak holds is never freed again: a site whose
   * live bytes fell back to near its first floor once its growth was under way (the
   * Theil-Sen line already at half of it) had given that memory back. Window floors
   * can miss such a fall when it is shorter than a window: redis-benchmark's 50 clients
   * resize their output buffers up to each test's reply size and free them between
   * tests, a saw-tooth whose peaks rise test after test. */
  if (out->leak) {
    /* a point's minimum is that of the time since the point before it (decimated
     * series): the line is read at the start of that span */
    double g = last - first;
    for (size_t i = 1; i < n && out->leak; i++)
      if (icpt + slope * pts[i - 1].t >= first + 0.5 * g && pts[i].lo <= first + 0.1 * g) out->leak = 0;
  }
  /* 6. Still rising at the end. A fill decelerates and stops (a keyspace of 20 000
   * random keys is 90 % full after 46 000 of the benchmark's 300 000 SETs); a leak
   * goes on. `reached`: the start of the last stretch whose floors all stand within
   * 10 % of the growth from its end level; `began`: the last point before it still
   * within 10 % of the first floor. A leak that rose from began to reached has not
   * stopped when the time since is shorter than the rise: a steady leak reaches its
   * last tenth a ninth of its rise before the end, a staircase of k steps less than a
   * step (after a rise of k-1 steps). A site that has stood at its level for longer
   * than it took to get there, in time and in snapshots, over more than
   * LGD_STOP_POINTS points, filled and stopped (redis-server's HSET keyspace, filled in the last 7 s of a 35-s run and
   * level for the last 4: a step leak before this rule, however long it stayed level,
   * when its first row was dated back to its era). */
  if (out->leak) {
    double g = last - first;
    size_t reached = n;
    while (reached > 0 && pts[reached - 1].lo >= last - 0.1 * g) reached--;
    size_t began = reached;
    while (began > 0 && pts[began - 1].lo > first + 0.1 * g) began--;
    size_t b = began > 0 ? began - 1 : 0; /* the last point still low */
    /* longer in time and in snapshots: a hole in the snapshots is no evidence (the
     * collector takes none while a Python holder walk holds the process, 2.5 s at the
     * end of an attach) */
    if (reached < n && n - reached > LGD_STOP_POINTS && n - 1 - reached > reached - b &&
        pts[n - 1].t - pts[reached].t > pts[reached].t - pts[b].t)
      out->leak = 0;
  }
  /* 7. Released by the end. A site whose last window's floor fell back by more than
   * half of the growth from its first floor to its highest one gave most of it back
   * (a list pushed onto, then popped, in the last seconds): a leak keeps its memory. */
  if (out->leak) {
    double top = first;
    for (size_t w = 0; w < W; w++) top = fmax(top, fl[w]);
    if (fl[W - 1] < first + 0.5 * (top - first)) out->leak = 0;
  }

  if (out->leak) {
    /* Shape of a leak. Step: most of the growth in few window transitions. */
    double inc[MAXW];
    size_t ups = 0;
    for (size_t w = 1; w < W; w++) {
      inc[w - 1] = fmax(0, fl[w] - fl[w - 1]);
      if (inc[w - 1] > 0.02 * growth) ups++;
    }
    if (ups * 3 <= W - 1 && ups >= 1) out->pattern = LG_PATTERN_STEP_LEAK;
    else if (slope_early > 0 && slope_late > 2.0 * slope_early) out->pattern = LG_PATTERN_ACCELERATING_LEAK;
    else out->pattern = LG_PATTERN_LINEAR_LEAK;
    int cls = classify_consistent(pts, n, 1);
    if (cls >= 0) out->pattern = (lg_pattern_t)cls;
    double c = tau * (1 - p) * fmin(1.0, (double)W / 10.0);
    out->confidence = c < 0 ? 0 : (c > 1 ? 1 : c);
  } else {
    if (level > 0 && med_amp > 0.3 * level && med_amp >= min_growth) out->pattern = LG_PATTERN_SAWTOOTH;
    else if (early_growth >= min_growth && early_growth > 3 * noise && late_growth <= 0.2 * early_growth)
      out->pattern = LG_PATTERN_PLATEAU;
    else out->pattern = LG_PATTERN_STABLE;
    int cls = opt && opt->leaks_only ? -1 : classify_consistent(pts, n, 0);
    if (cls >= 0) out->pattern = (lg_pattern_t)cls;
    out->confidence = 0;
  }
  return 0;
}

int lgd_analyze_tail(const lgd_point_t *pts, size_t n, size_t from, const lgd_options_t *opt, lgd_result_t *out) {
  if (!pts || !out || from > n) return -EINVAL;
  lgd_result_t r;
  int rc = lgd_analyze(pts + from, n - from, opt, &r);
  if (rc != 0) return rc;
  if (r.leak && from > 0) {
    double min_growth = opt && opt->min_growth_bytes > 0 ? opt->min_growth_bytes : LGD_MIN_GROWTH_BYTES;
    double before = -INFINITY;
    for (size_t i = 0; i < from; i++) before = fmax(before, pts[i].hi);
    double above = r.floor_last - before, grown = r.floor_last - r.floor_first;
    if (above < min_growth || above < 0.5 * grown) {
      r.leak = 0;
      r.confidence = 0;
    }
  }
  *out = r;
  return 0;
}

int lgd_analyze_recent(const lgd_point_t *pts, size_t n, const lgd_options_t *opt, lgd_result_t *out) {
  int rc = lgd_analyze(pts, n, opt, out);
  if (rc != 0 || n < 2 * LGD_TAIL_MIN_POINTS) return rc;
  /* Every suffix that passes is a candidate, and so is the whole run when it is a leak;
   * the fastest one says how fast the leak grows now, and the longest one growing at
   * least 70 % as fast says since when. A leak that began at 10 s of a 13-s run is a
   * leak on the whole run too, but the whole run's Theil-Sen slope, the median over
   * pairs of windows that are mostly flat, is a thousandth of its rate. */
  double t0 = pts[0].t, t1 = pts[n - 1].t;
  lgd_result_t cand[5];
  int ok[5] = {out->leak, 0, 0, 0, 0}, best = out->leak ? 0 : -1;
  cand[0] = *out;
  for (int k = 1; k <= 4; k++) {
    double from = t1 - (t1 - t0) / (double)(1 << k);
    size_t i0 = 0;
    while (i0 < n && pts[i0].t < from) i0++;
    if (n - i0 < LGD_TAIL_MIN_POINTS) break;
    if (i0 == 0) continue;
    if (lgd_analyze_tail(pts, n, i0, opt, &cand[k]) != 0 || !cand[k].leak) continue;
    ok[k] = 1;
    if (best < 0 || cand[k].growth_bytes_per_s > cand[best].growth_bytes_per_s) best = k;
  }
  if (best < 0) return 0;
  for (int k = 0; k < 5; k++)
    if (ok[k] && cand[k].growth_bytes_per_s >= 0.7 * cand[best].growth_bytes_per_s) {
      *out = cand[k];
      break;
    }
  return 0;
}
