/* SPDX-License-Identifier: MIT */
/*
 * levels.c - the guard's level state machine: a pure function of the sample series.
 *
 * Per sample the "target" level is the highest of
 *   - threshold: usage/limit >= thr[k]; a level already held is kept down to
 *     thr[k] - hysteresis (so noise around a threshold does not flap);
 *   - trend: projected time to the limit (Theil-Sen slope over the window, when a
 *     Mann-Kendall test finds a significant upward trend and the pattern classifier
 *     does not see a curve levelling off (plateau)) below horizon[k], only
 *     above predict_min of the limit; kept up to 1.5 x horizon;
 *   - PSI: "full avg10" >= psi[k]; kept down to 0.75 x psi[k].
 * Going up is immediate. Going down needs the target to stay lower for min_dwell and
 * the current level to have been held for min_dwell; then the level drops to the
 * target directly.
 */
#include "guard/guard_impl.h"

#include <math.h>
#include <string.h>

#include "analysis/stats.h"
#include "leakguard.h"

const char *lgg_reason_name(int r) {
  static const char *const n[] = {"none", "threshold", "trend", "psi", "recover"};
  return r >= 0 && r <= LGG_R_RECOVER ? n[r] : "none";
}

void lgg_levels_init(lgg_levels_t *s, double now_s) {
  memset(s, 0, sizeof *s);
  s->entered_s = now_s;
  s->lower_since = -1;
  s->tto_s = -1;
}

/* Keeps the ring within the window, at most LGG_TREND_MAX samples spaced at least
 * window / LGG_TREND_MAX apart (the oldest drop out when full); samples closer
 * than that to the previous one are not kept (the latest usage is used directly). */
static void trend_add(lgg_levels_t *s, const lgg_level_cfg_t *c, double t, double v) {
  double spacing = c->window_s / LGG_TREND_MAX;
  if (s->n) {
    unsigned last = (s->head + s->n - 1) % LGG_TREND_MAX;
    if (t - s->t[last] < spacing) return; /* the latest usage is used directly */
  }
  while (s->n && (t - s->t[s->head] > c->window_s || s->n == LGG_TREND_MAX)) {
    s->head = (s->head + 1) % LGG_TREND_MAX;
    s->n--;
  }
  unsigned at = (s->head + s->n) % LGG_TREND_MAX;
  s->t[at] = t;
  s->v[at] = v;
  s->n++;
}

/* Theil-Sen slope of the window, 0 unless a Mann-Kendall test finds a significant
 * upward trend (p < 0.05) over at least 5 samples spanning 0.3 s: noise and single
 * spikes make no trend. */
static double trend_slope(const lgg_levels_t *s) {
  if (s->n < 5) return 0;
  double x[LGG_TREND_MAX], y[LGG_TREND_MAX];
  for (unsigned i = 0; i < s->n; i++) {
    unsigned k = (s->head + i) % LGG_TREND_MAX;
    x[i] = s->t[k] - s->t[s->head];
    y[i] = s->v[k];
  }
  if (x[s->n - 1] < 0.3) return 0; /* too short a span to call a trend */
  double tau, p;
  lga_mann_kendall(y, s->n, &tau, &p);
  if (!(tau > 0 && p < 0.05)) return 0;
  /* The pattern classifier names the shape: a curve that is levelling off (a cache
   * reaching its bound) is no reason to act on the trend. */
  lg_pattern_t shape;
  double pr[LG_PATTERN_COUNT];
  if (s->n >= 8 && lg_classify(x, y, NULL, s->n, &shape, pr) == 0 && shape == LG_PATTERN_PLATEAU &&
      pr[LG_PATTERN_PLATEAU] >= 0.6)
    return 0;
  return lga_theil_sen(x, y, s->n);
}

int lgg_levels_step(lgg_levels_t *s, const lgg_level_cfg_t *c, double t, double usage, double limit,
                    double psi_full10) {
  if (!(limit > 0)) limit = 1;
  double ratio = usage / limit;
  s->ratio = ratio;
  trend_add(s, c, t, usage);
  s->slope = trend_slope(s);
  s->tto_s = s->slope > 0 ? (limit > usage ? (limit - usage) / s->slope : 0) : -1;

  int tl = 0, why = LGG_R_NONE;
  for (int k = 1; k < LGG_NLEVELS; k++) {
    double thr = c->thr[k];
    if (thr > 0 && ratio >= thr - (k <= s->level ? c->hysteresis : 0)) {
      tl = k;
      why = LGG_R_THRESHOLD;
    }
  }
  if (s->tto_s >= 0 && ratio >= c->predict_min) {
    for (int k = tl + 1; k < LGG_NLEVELS; k++) {
      double h = c->horizon_s[k];
      if (h > 0 && s->tto_s < h * (k <= s->level ? 1.5 : 1.0)) {
        tl = k;
        why = LGG_R_TREND;
      }
    }
  }
  if (psi_full10 >= 0) {
    for (int k = tl + 1; k < LGG_NLEVELS; k++) {
      double p = c->psi[k];
      if (p > 0 && psi_full10 >= p * (k <= s->level ? 0.75 : 1.0)) {
        tl = k;
        why = LGG_R_PSI;
      }
    }
  }
  s->target = tl;
  if (tl > s->level) {
    s->level = tl;
    s->reason = why;
    s->entered_s = t;
    s->lower_since = -1;
  } else if (tl < s->level) {
    if (s->lower_since < 0) s->lower_since = t;
    if (t - s->lower_since >= c->min_dwell_s && t - s->entered_s >= c->min_dwell_s) {
      s->level = tl;
      s->reason = LGG_R_RECOVER;
      s->entered_s = t;
      s->lower_since = -1;
    }
  } else {
    s->lower_since = -1;
  }
  return s->level;
}
