/* SPDX-License-Identifier: MIT */
/*
 * detect.h - decides, per allocation site, whether live memory is leaking.
 *
 * Input is the site's snapshot series; each point keeps the minimum and maximum seen
 * since the previous point (so decimated series keep their floors). The method:
 *  1. split the run into equal-time windows and take each window's floor (minimum
 *     live bytes): a saw-tooth of batches that are freed has flat floors;
 *  2. a Mann-Kendall test on the floors (rank based, no tuned threshold on bytes)
 *     says whether they trend upward, Theil-Sen gives the growth rate;
 *  3. the late half must still grow (a cache that fills then plateaus stops);
 *  4. the growth must stand above the floors' own noise (MAD of residuals).
 * The shape (linear, accelerating, step, plateau, sawtooth, stable) is named from the
 * same windows. See docs/detection.md.
 */
#ifndef LG_ANALYSIS_DETECT_H
#define LG_ANALYSIS_DETECT_H

#include <stddef.h>
#include <stdint.h>

#include "leakguard.h"

typedef struct lgd_point {
  double t;     /* seconds since the process started */
  double lo;    /* minimum live bytes since the previous point */
  double hi;    /* maximum */
  double last;  /* value at t */
  double step;  /* step counter at t */
} lgd_point_t;

/* A growable series that halves its resolution (merging neighbours, keeping
 * min/max) instead of growing past max_points. */
typedef struct lgd_series {
  lgd_point_t *pts;
  size_t n, cap, max_points;
} lgd_series_t;

void lgd_series_init(lgd_series_t *s, size_t max_points);
void lgd_series_free(lgd_series_t *s);
/* Appends a sample; returns 0 or -ENOMEM. */
int lgd_series_add(lgd_series_t *s, double t, double value, double step);

typedef struct lgd_result {
  int leak;                  /* 1 when the site is a leak suspect */
  lg_pattern_t pattern;
  double growth_bytes_per_s; /* Theil-Sen slope of the window floors */
  double growth_bytes_per_step; /* NaN when no steps were marked */
  double confidence;         /* 0..1 */
  double tau, p;             /* Mann-Kendall on the floors */
  double floor_first, floor_last;
  int windows;
} lgd_result_t;

typedef struct lgd_options {
  double min_growth_bytes;   /* ignore growth smaller than this over the run (default 4096) */
  int leaks_only;            /* 1: do not classify the shape of non-leaking sites (live use) */
} lgd_options_t;

/* Analyses pts[0..n). Returns 0 (out filled; leak = 0 when there is too little data),
 * -EINVAL on NULL arguments. The verdict comes from the trend tests; the pattern from
 * the learned classifier (lg_classify, docs/classifier.md) restricted to the classes
 * that agree with the verdict (a leak class for a leak, else stable/plateau/sawtooth),
 * falling back to the rule-based shape when the series is too short. */
int lgd_analyze(const lgd_point_t *pts, size_t n, const lgd_options_t *opt, lgd_result_t *out);

/* Process-level shape from live bytes and resident memory (can name fragmentation:
 * RSS growing while live bytes stay flat). Returns the class, or -1 when the series is
 * too short or invalid. */
int lgd_process_pattern(const double *t, const double *live, const double *rss, size_t n);

#endif
