/* SPDX-License-Identifier: MIT */
/* stats.c - Mann-Kendall, Theil-Sen, median (hand-written: a few dozen lines, and no
 * Debian C library offers these robust estimators without pulling in R or GSL's
 * much larger API for one function each). */
#include "analysis/stats.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

double lga_median(double *a, size_t n) {
  if (n == 0) return 0;
  qsort(a, n, sizeof *a, cmp_double);
  return n % 2 ? a[n / 2] : 0.5 * (a[n / 2 - 1] + a[n / 2]);
}

double lga_norm_sf(double z) { return 0.5 * erfc(z / sqrt(2.0)); }

double lga_mann_kendall(const double *y, size_t n, double *tau, double *p) {
  double s = 0;
  for (size_t i = 0; i + 1 < n; i++)
    for (size_t j = i + 1; j < n; j++) s += (y[j] > y[i]) - (y[j] < y[i]);
  double pairs = (double)n * (double)(n - 1) / 2.0;
  if (tau) *tau = pairs > 0 ? s / pairs : 0;
  if (p) {
    /* variance with tie groups: n(n-1)(2n+5) - sum t(t-1)(2t+5), over 18 */
    double var = (double)n * (n - 1) * (2.0 * n + 5);
    double *c = malloc(n * sizeof *c);
    if (c) {
      memcpy(c, y, n * sizeof *c);
      qsort(c, n, sizeof *c, cmp_double);
      for (size_t i = 0; i < n;) {
        size_t j = i;
        while (j < n && c[j] == c[i]) j++;
        double t = (double)(j - i);
        if (t > 1) var -= t * (t - 1) * (2 * t + 5);
        i = j;
      }
      free(c);
    }
    var /= 18.0;
    if (n < 3 || var <= 0) *p = 1.0;
    else {
      double z = s > 0 ? (s - 1) / sqrt(var) : (s < 0 ? (s + 1) / sqrt(var) : 0);
      *p = 2.0 * lga_norm_sf(fabs(z));
      if (*p > 1) *p = 1;
    }
  }
  return s;
}

double lga_theil_sen(const double *x, const double *y, size_t n) {
  if (n < 2) return 0;
  if (n > 256) n = 256;
  double sl[256 * 255 / 2];
  size_t k = 0;
  for (size_t i = 0; i + 1 < n; i++)
    for (size_t j = i + 1; j < n; j++)
      if (x[j] > x[i]) sl[k++] = (y[j] - y[i]) / (x[j] - x[i]);
  return lga_median(sl, k);
}
