/* SPDX-License-Identifier: MIT */
/* stats.h - robust trend statistics used by the detector. */
#ifndef LG_ANALYSIS_STATS_H
#define LG_ANALYSIS_STATS_H

#include <stddef.h>

/* Mann-Kendall trend test on y[0..n) (in time order).
 * *tau receives Kendall's tau-a in [-1, 1]; *p the two-sided p-value from the normal
 * approximation with tie correction (1.0 when n < 3 or no variance). Returns S. */
double lga_mann_kendall(const double *y, size_t n, double *tau, double *p);

/* Theil-Sen slope: the median of the pairwise slopes (y_j - y_i) / (x_j - x_i) over
 * i < j with x_j > x_i. O(n^2) time, n <= 256 (scratch on the stack). 0 for n < 2. */
double lga_theil_sen(const double *x, const double *y, size_t n);

/* Median of a[0..n) (a is reordered). 0 for n == 0. */
double lga_median(double *a, size_t n);

/* Standard normal upper tail, 1 - Phi(z). */
double lga_norm_sf(double z);

#endif
