/* SPDX-License-Identifier: MIT */
/*
 * classify.h - internal interface of the memory-curve pattern classifier.
 *
 * lg_classify() (public, include/leakguard.h) is split in two stages that are
 * exposed here so that the unit tests, the trainer (tools/classify/train.c) and
 * the evaluator can reach them:
 *
 *   1. lgi_classify_features(): turns a series of (time, value[, rss]) samples of
 *      any length >= 8, any spacing and any scale into LGI_CLS_NFEAT scale-free
 *      features (trend statistics, floor/ceiling growth, curvature, step and
 *      periodicity statistics, a coarse shape profile, and rss-vs-live growth).
 *   2. lgi_classify_infer(): a small multilayer perceptron (one tanh hidden layer,
 *      softmax output) whose weights live in the generated file classify_model.c.
 *
 * Everything here is allocation-free, uses bounded stack buffers (series longer
 * than LGI_CLS_CAP samples are downsampled deterministically by bucket means) and
 * is thread-safe (no mutable static state).
 */
#ifndef LG_ANALYSIS_CLASSIFY_H
#define LG_ANALYSIS_CLASSIFY_H

#include <math.h>
#include <stddef.h>
#include <stdio.h>

#include "leakguard.h"

/* Longest series handled as-is; longer ones are reduced to this many bucket means. */
#define LGI_CLS_CAP 512
/* Number of time windows used for the floor/ceiling/shape statistics. */
#define LGI_CLS_WIN 12
/* Longest uniform time grid used for the periodicity statistics. */
#define LGI_CLS_GRID 128
/* Hidden units of the MLP (a multiple of 4: lgi_classify_infer runs four at a time). */
#define LGI_CLS_HIDDEN 48

/* Feature indices. Values are scale-free: v is centred on its median and divided by
 * its robust range (p95 - p5, "scale units"), time is mapped to u in [0, 1]. */
enum lgi_cls_feature {
  LGI_F_LOGN = 0,      /* log2(n) / 11 (n before downsampling) */
  LGI_F_LIN_SLOPE,     /* OLS slope of the median-3-filtered series over u */
  LGI_F_LIN_R2,        /* R^2 of that linear fit */
  LGI_F_QUAD_C,        /* coefficient c of a + b(u-1/2) + c(u-1/2)^2 */
  LGI_F_QUAD_GAIN,     /* R^2(quadratic) - R^2(linear) */
  LGI_F_SLOPE_FIRST,   /* OLS slope over u in [0, 1/3) */
  LGI_F_SLOPE_MID,     /* OLS slope over u in [1/3, 2/3) */
  LGI_F_SLOPE_LAST,    /* OLS slope over u in [2/3, 1] */
  LGI_F_ACCEL,         /* (last - first) / (|first| + |last| + 0.1) */
  LGI_F_TS_FLOOR,      /* Theil-Sen slope of per-window minima */
  LGI_F_TS_CEIL,       /* Theil-Sen slope of per-window maxima */
  LGI_F_TS_MEAN,       /* Theil-Sen slope of per-window means */
  LGI_F_MK_TAU,        /* Mann-Kendall tau of per-window means */
  LGI_F_SPREAD,        /* median over windows of (max - min) */
  LGI_F_DRAWDOWN,      /* largest fall of window means below their running max,
                           relative to the range of the window means */
  LGI_F_UP_FRAC,       /* fraction of rising consecutive window means */
  LGI_F_T50,           /* u at which window means first reach 50% of net growth */
  LGI_F_T90,           /* same for 90% */
  LGI_F_GROWTH,        /* mean of last 2 windows - mean of first 2 windows */
  LGI_F_JUP_COUNT,     /* log1p(number of upward jumps) */
  LGI_F_JDN_COUNT,     /* log1p(number of downward jumps) */
  LGI_F_JUP_MASS,      /* sum of upward jumps */
  LGI_F_JDN_MASS,      /* sum of |downward jumps| */
  LGI_F_JUP_MAX,       /* largest upward jump */
  LGI_F_JDN_MAX,       /* largest |downward jump| */
  LGI_F_RESID,         /* RMS residual of the quadratic fit */
  LGI_F_NOISE,         /* robust sigma of increments (beyond the typical rate) */
  LGI_F_ZCROSS,        /* zero-crossing rate of the detrended time grid */
  LGI_F_ACF1,          /* lag-1 autocorrelation of the detrended time grid */
  LGI_F_ACF_PEAK,      /* highest autocorrelation after the first negative lag */
  LGI_F_ACF_LAG,       /* lag of that peak / grid length */
  LGI_F_OUTLIERS,      /* fraction of samples removed by the median-3 filter
                           by more than 0.2 scale units */
  LGI_F_LAST_VS_MAX,   /* last window mean - highest window mean */
  LGI_F_HAS_RSS,       /* 1 when an rss series was given */
  LGI_F_RSS_GROWTH,    /* Theil-Sen growth of rss window means / rss level */
  LGI_F_LIVE_GROWTH_R, /* Theil-Sen growth of live window means / rss level */
  LGI_F_RSS_EXCESS,    /* (rss growth - max(live growth, 0)) / rss level */
  LGI_F_RSS_VS_LIVE,   /* slog(rss growth / live robust range) */
  LGI_F_RSS_TAU,       /* Mann-Kendall tau of rss window means */
  LGI_F_RSS_T50,       /* u at which rss window means reach 50% of their growth */
  LGI_F_VN_RATIO,      /* von Neumann ratio of the unfiltered residual (about 2 for
                           white noise, near 0 for smooth curves) */
  LGI_F_HINGE_GAIN,    /* on the time grid: (SSR(quadratic) - SSR(best hinge)) / SST,
                           hinge = a + b max(0, u - c), c in {0.05, ..., 0.65}:
                           > 0 for a late-starting straight line, < 0 for convex growth */
  LGI_F_HINGE_AT,      /* the c of that best hinge */
  LGI_F_POST_CURV,     /* after that c, with s = (u - c) / (1 - c) in [0, 1]: fitted
                           y = a + b s + q s^2 gives q / (|b| + |q| + 0.05): about 0 for
                           a straight line, > 0.4 for convex growth */
  LGI_F_RES_SKEW,      /* skewness of the unfiltered samples around the quadratic fit
                           (raw input, at most LGI_CLS_CAP samples, residuals clipped to
                           +-1): 0 for symmetric noise, > 0 when the samples bunch near a
                           floor (a saw-tooth sampled slower than its period) */
  LGI_F_RES_KURT,      /* kurtosis - 3 of those residuals (kurtosis clipped to [1, 12]):
                           0 Gaussian, -1.2 uniform (a ramp at random phases), near -2
                           two-valued (on/off batches), > 0 sparse spikes or bursts */
  LGI_F_RES_GEARY,     /* Geary's ratio of those residuals, mean |e - mean| / sd, minus
                           0.8: 0 Gaussian (0.798), +0.07 uniform, +0.2 two-valued, < 0
                           sparse peaks; steadier than the kurtosis on short series */
  LGI_F_INC_SKEW,      /* skewness of the raw increments (each clipped to +-1.5,
                           the skewness to +-5): < 0
                           for gradual rises and sudden falls, > 0 for steps up */
  LGI_F_REL_SPREAD,    /* log10((p95 - p5) / |median|) + 6, clipped to [0, 9] (0 for a
                           flat series, 9 at a zero median): spread relative to the level */
  LGI_F_PROFILE,       /* LGI_CLS_WIN window means minus the first one */
  LGI_CLS_NFEAT = LGI_F_PROFILE + LGI_CLS_WIN
};

/* The learned part. Generated into classify_model.c by lg-train. */
typedef struct lgi_classify_model {
  float mean[LGI_CLS_NFEAT]; /* feature standardisation: (f - mean) * inv_std */
  float inv_std[LGI_CLS_NFEAT];
  float w1[LGI_CLS_HIDDEN][LGI_CLS_NFEAT];
  float b1[LGI_CLS_HIDDEN];
  float w2[LG_PATTERN_COUNT][LGI_CLS_HIDDEN];
  float b2[LG_PATTERN_COUNT]; /* includes the conservative bias against leak classes */
} lgi_classify_model_t;

/* The hidden units' activation, tanh(a) = 1 - 2 / (e^2a + 1) (one exp instead of
 * libm's tanh; the trainer uses the same function, so its derivative is 1 - h^2). */
static inline double lgi_cls_tanh(double a) { return 1.0 - 2.0 / (exp(2.0 * a) + 1.0); }

/* The committed model (src/analysis/classify_model.c). */
extern const lgi_classify_model_t lgi_classify_model;

/* Feature clip applied after standardisation (|z| <= this). */
#define LGI_CLS_ZCLIP 8.0

/* Validates the input exactly like lg_classify() and computes the features.
 * Returns 0, -EINVAL (n < 8, NULL t or v or f), -EDOM (non-finite value, time not
 * strictly increasing). f is written only on success. */
int lgi_classify_features(const double *t, const double *v, const double *rss, size_t n, double f[LGI_CLS_NFEAT]);

/* Name of feature i (for diagnostics and the generated model's comments), or NULL. */
const char *lgi_classify_feature_name(int i);

/* Runs model m on features f; writes LG_PATTERN_COUNT probabilities to probs and
 * returns the arg-max class. Never fails. */
lg_pattern_t lgi_classify_infer(const lgi_classify_model_t *m, const double f[LGI_CLS_NFEAT],
                                double probs[LG_PATTERN_COUNT]);

/* The CSV series reader (lgi_series_t, lgi_series_read_csv) is in analysis/csv.h. */
#include "analysis/csv.h"

#endif /* LG_ANALYSIS_CLASSIFY_H */
