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
 *  4. the growth must stand above the floors' own noise (MAD of residuals);
 *  5.-7. the memory must be kept: not fallen back to the first floor, not level for
 *     longer than it took to rise (a fill that stopped), not given back by more than
 *     half at the end.
 * The shape (linear, accelerating, step, plateau, sawtooth, stable) is named from the
 * same windows. See docs/detection.md.
 */
#ifndef LG_ANALYSIS_DETECT_H
#define LG_ANALYSIS_DETECT_H

#include <stddef.h>
#include <stdint.h>

#include "leakguard.h"

typedef struct lgd_point {
  double t;    /* seconds since the process started */
  double lo;   /* minimum live bytes since the previous point */
  double hi;   /* maximum */
  double last; /* value at t */
  double step; /* step counter at t */
} lgd_point_t;

/* A growable series that halves its resolution (merging neighbours, keeping
 * min/max) instead of growing past max_points; later samples are then merged into
 * points of the same span, so the resolution stays even over the whole run. Setting n
 * to 0 empties it for reuse. */
typedef struct lgd_series {
  lgd_point_t *pts;
  size_t n, cap, max_points;
  size_t per_point, in_last; /* samples per point, and in the last one */
} lgd_series_t;

void lgd_series_init(lgd_series_t *s, size_t max_points);
void lgd_series_free(lgd_series_t *s);
/* Appends a sample; returns 0 or -ENOMEM. */
int lgd_series_add(lgd_series_t *s, double t, double value, double step);

typedef struct lgd_result {
  int leak; /* 1 when the site is a leak suspect */
  lg_pattern_t pattern;
  double growth_bytes_per_s;    /* Theil-Sen slope of the window floors */
  double growth_bytes_per_step; /* NaN when no steps were marked */
  double confidence;            /* 0..1 */
  double tau, p;                /* Mann-Kendall on the floors */
  double floor_first, floor_last;
  int windows;
  double since_s; /* start of the growing part (lgd_analyze_recent), else t of the first point */
  double until_s; /* t of the last point analysed (an exit-time teardown left out) */
} lgd_result_t;

/* The default smallest growth over a run that can be a leak (bytes). */
#define LGD_MIN_GROWTH_BYTES 4096.0

typedef struct lgd_options {
  double min_growth_bytes; /* ignore growth smaller than this over the run (default LGD_MIN_GROWTH_BYTES) */
  int leaks_only;          /* 1: do not classify the shape of non-leaking sites (live use) */
} lgd_options_t;

/* Analyses pts[0..n). Returns 0 (out filled; leak = 0 when there is too little data),
 * -EINVAL on NULL arguments. The verdict comes from the trend tests; the pattern from
 * the learned classifier (lg_classify, docs/classifier.md) restricted to the classes
 * that agree with the verdict (a leak class for a leak, else stable/plateau/sawtooth),
 * falling back to the rule-based shape when the series is too short. */
int lgd_analyze(const lgd_point_t *pts, size_t n, const lgd_options_t *opt, lgd_result_t *out);

/* lgd_analyze, and when the whole series is not a leak, its recent part: a leak that
 * began late (after a warm-up, at the 50th request) is a rise at the end of a long flat
 * series, which the whole-run trend test cannot see. The last 1/2, 1/4, 1/8 and 1/16 of
 * the series' time span (each with at least 12 points) are tried, longest first; one
 * counts when lgd_analyze calls it a leak AND its last floor stands above everything the
 * series held before it by at least half of its growth (a cache refilled after an
 * eviction, or a saw-tooth's rising edge, stays under its earlier highs). out->since_s
 * gives where the growing part begins. Same returns as lgd_analyze. */
int lgd_analyze_recent(const lgd_point_t *pts, size_t n, const lgd_options_t *opt, lgd_result_t *out);

/* A site level since `reached` for longer than it rose stopped there when more than this
 * many points follow `reached` (docs/detection.md, rule 6). */
#define LGD_STOP_POINTS 2
/* The fewest points a tail is analysed on. */
#define LGD_TAIL_MIN_POINTS 12
/* lgd_analyze of pts[from..n) alone, whose leak verdict then also needs the new-high
 * condition of lgd_analyze_recent against pts[0..from). -EINVAL on bad arguments. */
int lgd_analyze_tail(const lgd_point_t *pts, size_t n, size_t from, const lgd_options_t *opt, lgd_result_t *out);

/* Process-level shape from live bytes and resident memory (can name fragmentation:
 * RSS growing while live bytes stay flat). Returns the class, or -1 when the series is
 * too short or invalid; *nonleak (if not NULL) gets the most probable class that is
 * not a leak (for a process the report finds no leak in), or -1. */
int lgd_process_pattern(const double *t, const double *live, const double *rss, size_t n, int *nonleak);

#endif
