/* SPDX-License-Identifier: MIT */
/*
 * classify_infer.c - the pattern classifier's names (lg_pattern_name,
 * lg_pattern_is_leak, lga_classify_feature_name) and its inference
 * (lga_classify_infer): the features of classify.c through the one-hidden-layer
 * perceptron whose weights tools/classify/train.c generates. Part of the lg_classify
 * object library, compiled with -ffp-contract=off like the features, so that the
 * trainer and every build compute the same probabilities.
 */
#include "analysis/classify.h"

#include <math.h>

static double clampd(double x, double lo, double hi) { return x < lo ? lo : (x > hi ? hi : x); }

static const char *const pattern_names[LG_PATTERN_COUNT] = {
    "stable", "linear-leak", "accelerating-leak", "step-leak", "plateau", "sawtooth", "fragmentation",
};

/* Stable name of a pattern; NULL when p is out of range. */
LG_API const char *lg_pattern_name(lg_pattern_t p) {
  if ((unsigned)p >= (unsigned)LG_PATTERN_COUNT) return NULL;
  return pattern_names[p];
}

/* 1 for linear-leak, accelerating-leak and step-leak, else 0. */
LG_API int lg_pattern_is_leak(lg_pattern_t p) {
  return p == LG_PATTERN_LINEAR_LEAK || p == LG_PATTERN_ACCELERATING_LEAK || p == LG_PATTERN_STEP_LEAK;
}

static const char *const feature_names[LGA_F_PROFILE] = {
    "log_n",
    "lin_slope",
    "lin_r2",
    "quad_c",
    "quad_gain",
    "slope_first",
    "slope_mid",
    "slope_last",
    "accel",
    "ts_floor",
    "ts_ceil",
    "ts_mean",
    "mk_tau",
    "spread",
    "drawdown",
    "up_frac",
    "t50",
    "t90",
    "growth",
    "jump_up_count",
    "jump_down_count",
    "jump_up_mass",
    "jump_down_mass",
    "jump_up_max",
    "jump_down_max",
    "resid",
    "noise",
    "zero_cross",
    "acf1",
    "acf_peak",
    "acf_lag",
    "outliers",
    "last_vs_max",
    "has_rss",
    "rss_growth",
    "live_growth_rss",
    "rss_excess",
    "rss_vs_live",
    "rss_tau",
    "rss_t50",
    "vn_ratio",
    "hinge_gain",
    "hinge_at",
    "post_curv",
    "res_skew",
    "res_kurt",
    "res_geary",
    "inc_skew",
    "rel_spread",
};

/* Name of feature i; profile features are all called "profile". NULL if out of range. */
const char *lga_classify_feature_name(int i) {
  if (i < 0 || i >= LGA_CLS_NFEAT) return NULL;
  return i < LGA_F_PROFILE ? feature_names[i] : "profile";
}

/* ------------------------------------------------------------------ inference */

lg_pattern_t lga_classify_infer(const lga_classify_model_t *mdl, const double f[LGA_CLS_NFEAT],
                                double probs[LG_PATTERN_COUNT]) {
  double z[LGA_CLS_NFEAT], h[LGA_CLS_HIDDEN], logit[LG_PATTERN_COUNT];
  for (int i = 0; i < LGA_CLS_NFEAT; i++)
    z[i] = clampd((f[i] - mdl->mean[i]) * mdl->inv_std[i], -LGA_CLS_ZCLIP, LGA_CLS_ZCLIP);
  /* Four units at a time: four independent chains of additions (each unit's sum is
   * still taken in the order i = 0, 1, ..., exactly as the trainer does). */
  for (int j = 0; j + 3 < LGA_CLS_HIDDEN; j += 4) {
    double a0 = mdl->b1[j], a1 = mdl->b1[j + 1], a2 = mdl->b1[j + 2], a3 = mdl->b1[j + 3];
    for (int i = 0; i < LGA_CLS_NFEAT; i++) {
      a0 += mdl->w1[j][i] * z[i];
      a1 += mdl->w1[j + 1][i] * z[i];
      a2 += mdl->w1[j + 2][i] * z[i];
      a3 += mdl->w1[j + 3][i] * z[i];
    }
    h[j] = lga_cls_tanh(a0);
    h[j + 1] = lga_cls_tanh(a1);
    h[j + 2] = lga_cls_tanh(a2);
    h[j + 3] = lga_cls_tanh(a3);
  }
  double top = -INFINITY;
  int best = 0;
  for (int c = 0; c < LG_PATTERN_COUNT; c++) {
    double a = mdl->b2[c];
    for (int j = 0; j < LGA_CLS_HIDDEN; j++) a += mdl->w2[c][j] * h[j];
    logit[c] = a;
    if (a > top) {
      top = a;
      best = c;
    }
  }
  double sum = 0;
  for (int c = 0; c < LG_PATTERN_COUNT; c++) {
    probs[c] = exp(logit[c] - top);
    sum += probs[c];
  }
  for (int c = 0; c < LG_PATTERN_COUNT; c++) probs[c] /= sum;
  return (lg_pattern_t)best;
}
