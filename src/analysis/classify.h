/* SPDX-License-Identifier: MIT */
/*
 * classify.h - internal interface of the memory-curve pattern classifier.
 *
 * lg_classify() (public, include/leakguard.h) is split in two stages that are
 * exposed here so that the unit tests, the trainer (tools/classify/train.c) and
 * the evaluator can reach them:
 *
 *   1. lga_classify_features(): turns a series of (time, value[, rss]) samples of
 *      any length >= 8, any spacing and any scale into LGA_CLS_NFEAT scale-free
 *      features (trend statistics, floor/ceiling growth, curvature, step and
 *      periodicity statistics, a coarse shape profile, and rss-vs-live growth).
 *   2. lga_classify_infer(): a small multilayer perceptron (one tanh hidden layer,
 *      softmax output) whose weights live in the generated file classify_model.c.
 *
 * Everything here is allocation-free, uses bounded stack buffers (series longer
 * than LGA_CLS_CAP samples are downsampled deterministically by bucket means) and
 * is thread-safe (no mutable static state).
 */
#ifndef LG_ANALYSIS_CLASSIFY_H
#define LG_ANALYSIS_CLASSIFY_H

#include <math.h>
#include <stddef.h>
#include <stdio.h>

#include "leakguard.h"

/* Longest series handled as-is; longer ones are reduced to this many bucket means. */
#define LGA_CLS_CAP 512
/* Number of time windows used for the floor/ceiling/shape statistics. */
#define LGA_CLS_WIN 12
/* Longest uniform time grid used for the periodicity statistics. */
#define LGA_CLS_GRID 128
/* Hidden units of the MLP (a multiple of 4: lga_classify_infer runs four at a time). */
#define LGA_CLS_HIDDEN 48

/* Feature indices. Values are scale-free: v is centred on its median and divided by
 * its robust range (p95 - p5, "scale units"), time is mapped to u in [0, 1]. */
enum lga_cls_feature {
  LGA_F_LOGN = 0,      /* log2(n) / 11 (n before downsampling) */
  LGA_F_LIN_SLOPE,     /* OLS slope of the median-3-filtered series over u */
  LGA_F_LIN_R2,        /* R^2 of that linear fit */
  LGA_F_QUAD_C,        /* coefficient c of a + b(u-1/2) + c(u-1/2)^2 */
  LGA_F_QUAD_GAIN,     /* R^2(quadratic) - R^2(linear) */
  LGA_F_SLOPE_FIRST,   /* OLS slope over u in [0, 1/3) */
  LGA_F_SLOPE_MID,     /* OLS slope over u in [1/3, 2/3) */
  LGA_F_SLOPE_LAST,    /* OLS slope over u in [2/3, 1] */
  LGA_F_ACCEL,         /* (last - first) / (|first| + |last| + 0.1) */
  LGA_F_TS_FLOOR,      /* Theil-Sen slope of per-window minima */
  LGA_F_TS_CEIL,       /* Theil-Sen slope of per-window maxima */
  LGA_F_TS_MEAN,       /* Theil-Sen slope of per-window means */
  LGA_F_MK_TAU,        /* Mann-Kendall tau of per-window means */
  LGA_F_SPREAD,        /* median over windows of (max - min) */
  LGA_F_DRAWDOWN,      /* largest fall of window means below their running max,
                           relative to the range of the window means */
  LGA_F_UP_FRAC,       /* fraction of rising consecutive window means */
  LGA_F_T50,           /* u at which window means first reach 50% of net growth */
  LGA_F_T90,           /* same for 90% */
  LGA_F_GROWTH,        /* mean of last 2 windows - mean of first 2 windows */
  LGA_F_JUP_COUNT,     /* log1p(number of upward jumps) */
  LGA_F_JDN_COUNT,     /* log1p(number of downward jumps) */
  LGA_F_JUP_MASS,      /* sum of upward jumps */
  LGA_F_JDN_MASS,      /* sum of |downward jumps| */
  LGA_F_JUP_MAX,       /* largest upward jump */
  LGA_F_JDN_MAX,       /* largest |downward jump| */
  LGA_F_RESID,         /* RMS residual of the quadratic fit */
  LGA_F_NOISE,         /* robust sigma of increments (beyond the typical rate) */
  LGA_F_ZCROSS,        /* zero-crossing rate of the detrended time grid */
  LGA_F_ACF1,          /* lag-1 autocorrelation of the detrended time grid */
  LGA_F_ACF_PEAK,      /* highest autocorrelation after the first negative lag */
  LGA_F_ACF_LAG,       /* lag of that peak / grid length */
  LGA_F_OUTLIERS,      /* fraction of samples removed by the median-3 filter
                           by more than 0.2 scale units */
  LGA_F_LAST_VS_MAX,   /* last window mean - highest window mean */
  LGA_F_HAS_RSS,       /* 1 when an rss series was given */
  LGA_F_RSS_GROWTH,    /* Theil-Sen growth of rss window means / rss level */
  LGA_F_LIVE_GROWTH_R, /* Theil-Sen growth of live window means / rss level */
  LGA_F_RSS_EXCESS,    /* (rss growth - max(live growth, 0)) / rss level */
  LGA_F_RSS_VS_LIVE,   /* slog(rss growth / live robust range) */
  LGA_F_RSS_TAU,       /* Mann-Kendall tau of rss window means */
  LGA_F_RSS_T50,       /* u at which rss window means reach 50% of their growth */
  LGA_F_VN_RATIO,      /* von Neumann ratio of the unfiltered residual (about 2 for
                           white noise, near 0 for smooth curves) */
  LGA_F_HINGE_GAIN,    /* on the time grid: (SSR(quadratic) - SSR(best hinge)) / SST,
                           hinge = a + b max(0, u - c), c in {0.05, ..., 0.65}:
                           > 0 for a late-starting straight line, < 0 for convex growth */
  LGA_F_HINGE_AT,      /* the c of that best hinge */
  LGA_F_POST_CURV,     /* after that c, with s = (u - c) / (1 - c) in [0, 1]: fitted
                           y = a + b s + q s^2 gives q / (|b| + |q| + 0.05): about 0 for
                           a straight line, > 0.4 for convex growth */
  LGA_F_RES_SKEW,      /* skewness of the unfiltered samples around the quadratic fit
                           (raw input, at most LGA_CLS_CAP samples, residuals clipped to
                           +-1): 0 for symmetric noise, > 0 when the samples bunch near a
                           floor (a saw-tooth sampled slower than its period) */
  LGA_F_RES_KURT,      /* kurtosis - 3 of those residuals (kurtosis clipped to [1, 12]):
                           0 Gaussian, -1.2 uniform (a ramp at random phases), near -2
                           two-valued (on/off batches), > 0 sparse spikes or bursts */
  LGA_F_RES_GEARY,     /* Geary's ratio of those residuals, mean |e - mean| / sd, minus
                           0.8: 0 Gaussian (0.798), +0.07 uniform, +0.2 two-valued, < 0
                           sparse peaks; steadier than the kurtosis on short series */
  LGA_F_INC_SKEW,      /* skewness of the raw increments (each clipped to +-1.5,
                           the skewness to +-5): < 0
                           for gradual rises and sudden falls, > 0 for steps up */
  LGA_F_REL_SPREAD,    /* log10((p95 - p5) / |median|) + 6, clipped to [0, 9] (0 for a
                           flat series, 9 at a zero median): spread relative to the level */
  LGA_F_PROFILE,       /* LGA_CLS_WIN window means minus the first one */
  LGA_CLS_NFEAT = LGA_F_PROFILE + LGA_CLS_WIN
};

/* The learned part. Generated into classify_model.c by lg-train. */
typedef struct lga_classify_model {
  float mean[LGA_CLS_NFEAT]; /* feature standardisation: (f - mean) * inv_std */
  float inv_std[LGA_CLS_NFEAT];
  float w1[LGA_CLS_HIDDEN][LGA_CLS_NFEAT];
  float b1[LGA_CLS_HIDDEN];
  float w2[LG_PATTERN_COUNT][LGA_CLS_HIDDEN];
  float b2[LG_PATTERN_COUNT]; /* includes the conservative bias against leak classes */
} lga_classify_model_t;

/* The hidden units' activation, tanh(a) = 1 - 2 / (e^2a + 1) (one exp instead of
 * libm's tanh; the trainer uses the same function, so its derivative is 1 - h^2). */
static inline double lga_cls_tanh(double a) { return 1.0 - 2.0 / (exp(2.0 * a) + 1.0); }

/* The committed model (src/analysis/classify_model.c). */
extern const lga_classify_model_t lga_classify_model;

/* Feature clip applied after standardisation (|z| <= this). */
#define LGA_CLS_ZCLIP 8.0

/* Validates the input exactly like lg_classify() and computes the features.
 * Returns 0, -EINVAL (n < 8, NULL t or v or f), -EDOM (non-finite value, time not
 * strictly increasing). f is written only on success. */
int lga_classify_features(const double *t, const double *v, const double *rss, size_t n, double f[LGA_CLS_NFEAT]);

/* Name of feature i (for diagnostics and the generated model's comments), or NULL. */
const char *lga_classify_feature_name(int i);

/* Runs model m on features f; writes LG_PATTERN_COUNT probabilities to probs and
 * returns the arg-max class. Never fails. */
lg_pattern_t lga_classify_infer(const lga_classify_model_t *m, const double f[LGA_CLS_NFEAT],
                                double probs[LG_PATTERN_COUNT]);

/* The CSV series reader (lga_series_t, lga_series_read_csv) is in analysis/csv.h. */
#include "analysis/csv.h"

#endif /* LG_ANALYSIS_CLASSIFY_H */
