/* SPDX-License-Identifier: MIT */
/*
 * classify.c - names the shape of a memory curve (lg_classify, lg_pattern_name,
 * lg_pattern_is_leak).
 *
 * A series of (time, value[, rss]) samples is reduced to LGA_CLS_NFEAT scale-free
 * features (see classify.h for the list, docs/classifier.md for the rationale) and
 * fed to a one-hidden-layer perceptron whose weights are generated into
 * classify_model.c by tools/classify/train.c. The whole path is O(n) (series longer
 * than LGA_CLS_CAP are reduced to bucket means first; the remaining work is bounded
 * by that cap), uses only bounded stack buffers (about 26 KiB), no allocation, no
 * mutable static state, and libm only. Compiled once (an object library linked into
 * the preload library, the analysis layer and the classifier tools); lg_classify(),
 * which needs the generated model, is in classify_api.c so that the trainer can link
 * the features without a model. The names of patterns and features and the inference
 * are classify_infer.c's.
 */
#include "analysis/classify.h"

#include <errno.h>
#include <math.h>
#include <string.h>

/* ------------------------------------------------------------------ helpers */

/* k-th smallest of a[0..n-1] (Hoare-partition selection with a median-of-three pivot,
 * insertion sort below 12 elements; reorders a, leaving a[0..k-1] <= a[k] <= a[k+1..]).
 * n >= 1, k < n. */
static double kth(double *a, long n, long k) {
  long lo = 0, hi = n - 1;
  while (hi - lo >= 12) {
    long md = lo + (hi - lo) / 2;
    double p = a[lo], q = a[md], r = a[hi]; /* median of three as the pivot */
    double x = p < q ? (q < r ? q : (p < r ? r : p)) : (p < r ? p : (q < r ? r : q));
    long i = lo, j = hi;
    do {
      while (a[i] < x) i++;
      while (x < a[j]) j--;
      if (i <= j) {
        double tmp = a[i];
        a[i] = a[j];
        a[j] = tmp;
        i++;
        j--;
      }
    } while (i <= j);
    if (k <= j) hi = j;
    else if (k >= i) lo = i;
    else return a[k]; /* j < k < i: a[k] == x, in place */
  }
  for (long i = lo + 1; i <= hi; i++) {
    double x = a[i];
    long j = i - 1;
    while (j >= lo && a[j] > x) {
      a[j + 1] = a[j];
      j--;
    }
    a[j + 1] = x;
  }
  return a[k];
}

/* Copies at most LGA_CLS_SEL evenly strided elements of src[0..m-1] to dst (robust
 * statistics are estimated on this subsample to bound their cost); returns the count. */
#define LGA_CLS_SEL 128
static long strided(const double *src, long m, double *dst) {
  if (m <= LGA_CLS_SEL) {
    memcpy(dst, src, (size_t)m * sizeof *dst);
    return m;
  }
  for (long k = 0; k < LGA_CLS_SEL; k++) dst[k] = src[k * m / LGA_CLS_SEL];
  return LGA_CLS_SEL;
}

/* Median of three values. */
static double med3(double a, double b, double c) {
  if (a > b) {
    double tmp = a;
    a = b;
    b = tmp;
  }
  if (b > c) b = c;
  return a > b ? a : b;
}

/* Clamps x to [lo, hi]. */
static double clampd(double x, double lo, double hi) { return x < lo ? lo : (x > hi ? hi : x); }

/* Signed log: sign(x) * log1p(|x|). */
static double slog(double x) { return x < 0 ? -log1p(-x) : log1p(x); }

/* Least-squares slope of y over x from running sums; 0 when undetermined. */
static double ols_slope(double cnt, double sx, double sy, double sxx, double sxy) {
  double den = cnt * sxx - sx * sx;
  if (cnt < 2 || den <= 1e-18 * cnt * cnt) return 0.0;
  return (cnt * sxy - sx * sy) / den;
}

/* Theil-Sen slope of (x[i], y[i]), i < k (k <= LGA_CLS_WIN); 0 when k < 2. */
static double theil_sen(const double *x, const double *y, int k) {
  double s[LGA_CLS_WIN * (LGA_CLS_WIN - 1) / 2];
  long ns = 0;
  for (int i = 0; i < k; i++)
    for (int j = i + 1; j < k; j++) s[ns++] = (y[j] - y[i]) / (x[j] - x[i]);
  return ns ? kth(s, ns, ns / 2) : 0.0;
}

/* Mann-Kendall tau of the equally spaced sequence y[0..k-1]. */
static double mk_tau(const double *y, int k) {
  double s = 0;
  for (int i = 0; i < k; i++)
    for (int j = i + 1; j < k; j++) s += (y[j] > y[i]) - (y[j] < y[i]);
  return k > 1 ? s / (0.5 * k * (k - 1)) : 0.0;
}

/* Fills empty cells (cnt[i] == 0) of y[0..k-1] by linear interpolation between the
 * nearest filled cells (nearest value at the ends). At least one cell is filled. */
static void fill_gaps(double *y, const int *cnt, int k) {
  int prev = -1;
  for (int i = 0; i < k; i++) {
    if (!cnt[i]) continue;
    if (prev < 0) {
      for (int j = 0; j < i; j++) y[j] = y[i];
    } else {
      for (int j = prev + 1; j < i; j++) y[j] = y[prev] + (y[i] - y[prev]) * (double)(j - prev) / (double)(i - prev);
    }
    prev = i;
  }
  for (int j = prev + 1; j < k; j++) y[j] = y[prev];
}

/* First window centre at which y (k filled window means) has risen by frac of its
 * net growth g measured from base; def when g is not positive. */
static double rise_time(const double *y, int k, double base, double g, double frac, double def) {
  if (!(g > 0)) return def;
  for (int i = 0; i < k; i++)
    if (y[i] - base >= frac * g) return (i + 0.5) / k;
  return 1.0;
}

/* ------------------------------------------------------------------ features */

/* A series on its way to features: what the steps of lga_classify_features share. */
typedef struct {
  const double *t, *v, *rss; /* the input */
  size_t n;                  /* its samples, without a teardown's last ones */
  long m;                    /* samples kept: n, or LGA_CLS_CAP bucket means */
  double u[LGA_CLS_CAP];     /* time, to [0, 1] (step 2) */
  double y[LGA_CLS_CAP];     /* values in scale units (step 3) */
  double r[LGA_CLS_CAP];     /* rss, bytes */
  double yf[LGA_CLS_CAP];    /* y, median-3 filtered (step 4) */
  double w[LGA_CLS_SEL];     /* scratch for quantiles */
  double t0, inv_span;       /* u = (t - t0) * inv_span */
  double med, scale, inv_scale;
  int flat; /* no spread to speak of: scale is the level, inv_scale 0 */
} cls_series_t;

/* The window means of step 6 that step 9 compares rss with. */
enum { W = LGA_CLS_WIN };
typedef struct {
  int cnt[W];   /* samples per window */
  int np;       /* windows with samples */
  double pc[W]; /* their mean times */
  double pr[W]; /* their mean rss */
  double rmean[W];
  double ts_mean; /* Theil-Sen slope of the window means, scale units per unit u */
} cls_windows_t;

/* 1. Bounded copy: bucket means when n > LGA_CLS_CAP (buckets by index). */
static void cls_copy(cls_series_t *s) {
  const double *t = s->t, *v = s->v, *rss = s->rss;
  size_t n = s->n;
  if (n <= LGA_CLS_CAP) {
    s->m = (long)n;
    memcpy(s->u, t, n * sizeof *t);
    memcpy(s->y, v, n * sizeof *v);
    if (rss) memcpy(s->r, rss, n * sizeof *rss);
    return;
  }
  long m = s->m = LGA_CLS_CAP;
  for (long b = 0; b < m; b++) {
    size_t lo = (size_t)b * n / (size_t)m, hi = (size_t)(b + 1) * n / (size_t)m;
    double st = 0, sv = 0, sr = 0;
    for (size_t i = lo; i < hi; i++) {
      st += t[i] - t[0];
      sv += v[i];
      if (rss) sr += rss[i];
    }
    double c = (double)(hi - lo);
    s->u[b] = st / c;
    s->y[b] = sv / c;
    s->r[b] = rss ? sr / c : 0;
  }
}

/* 2. Time to [0, 1]. 3. Values to scale units: centred on the median, divided by
 * p95 - p5. 4. Median-3 filter (removes isolated spikes, keeps steps). */
static void cls_normalise(cls_series_t *s, double f[LGA_CLS_NFEAT]) {
  long m = s->m;
  double *u = s->u, *y = s->y, *yf = s->yf, *w = s->w;
  s->t0 = u[0];
  s->inv_span = 1.0 / (u[m - 1] - u[0]);
  for (long i = 0; i < m; i++) u[i] = (u[i] - s->t0) * s->inv_span;
  u[0] = 0.0;
  u[m - 1] = 1.0;

  long ns = strided(y, m, w);
  long mid = (ns - 1) / 2, k95 = (ns - 1) * 95 / 100; /* ns >= 8: k5 < mid < k95 */
  double med = kth(w, ns, mid);
  /* kth leaves w partitioned around mid: search each quantile on its side only */
  double p5 = kth(w, mid, (ns - 1) * 5 / 100), p95 = kth(w + mid + 1, ns - mid - 1, k95 - mid - 1);
  double vmin = y[0], vmax = y[0];
  for (long i = 1; i < m; i++) {
    vmin = y[i] < vmin ? y[i] : vmin;
    vmax = y[i] > vmax ? y[i] : vmax;
  }
  double scale = p95 - p5;
  if (!(scale > 0)) scale = vmax - vmin;
  int flat = !(scale > 1e-13 * fabs(med)) || !(scale > 0);
  /* Spread relative to the level (invariant to the unit, like the rss ratios): batches
   * that come and go are a visible part of live memory; the noise around a constant
   * table is not. log10(range / |median|) + 6 in [0, 9]: 0 flat, 9 at a zero median. */
  f[LGA_F_REL_SPREAD] = flat ? 0.0 : (med != 0 ? clampd(log10(scale / fabs(med)) + 6, 0, 9) : 9.0);
  if (flat) scale = fabs(med) > 0 ? fabs(med) : 1.0;
  double inv_scale = flat ? 0.0 : 1.0 / scale;
  for (long i = 0; i < m; i++) y[i] = (y[i] - med) * inv_scale;
  s->med = med;
  s->scale = scale;
  s->inv_scale = inv_scale;
  s->flat = flat;

  yf[0] = y[0];
  yf[m - 1] = y[m - 1];
  for (long i = 1; i < m - 1; i++) yf[i] = med3(y[i - 1], y[i], y[i + 1]);
}

/* Shape of the distribution of the unfiltered samples around the quadratic fit
 * mu_y + qa + qb x + qc x^2 (x = u - 1/2), and of their increments, from the raw input
 * (all of it up to LGA_CLS_CAP samples, else LGA_CLS_CAP strided samples, in units of
 * their own p95 - p5: bucket means would average an aliased saw-tooth into Gaussian
 * noise). Gaussian noise is symmetric (skewness 0, kurtosis 3); a saw-tooth sampled
 * slower than its period scatters between a hard floor and the batch peaks: bunched
 * near the floor (skewness > 0), uniform for a ramp (kurtosis 1.8) or two-valued for
 * on/off batches (kurtosis near 1). Residuals are clipped to +-1 scale unit (3 sigma of
 * Gaussian noise) and increments to +-1.5, so that a few spikes cannot dominate. Sums
 * are single pass. */
static void cls_residual_shape(cls_series_t *s, double mu_y, double qa, double qb, double qc, double f[LGA_CLS_NFEAT]) {
  const double *t = s->t, *v = s->v, *u = s->u, *y = s->y;
  size_t n = s->n;
  long m = s->m;
  double *w = s->w;
  int raw = n > LGA_CLS_CAP;
  long nr = raw ? LGA_CLS_CAP : m;
  double e1 = 0, e2 = 0, e3 = 0, e4 = 0, d1 = 0, d2 = 0, d3 = 0;
  double c0 = mu_y + qa, rt0 = s->t0 + 0.5 / s->inv_span; /* x = u - 1/2 (u from t - t[0]) */
  double eb[LGA_CLS_CAP], rs = s->inv_scale, fk = 1.0;
  if (raw) { /* raw scale units: bucket means shrink (or erase) fast teeth */
    for (long k = 0; k < LGA_CLS_SEL; k++) w[k] = v[(size_t)k * (n - 1) / LGA_CLS_SEL];
    double lo = kth(w, LGA_CLS_SEL, (LGA_CLS_SEL - 1) * 5 / 100);
    double hi = kth(w, LGA_CLS_SEL, (LGA_CLS_SEL - 1) * 95 / 100);
    if (hi - lo > 1e-13 * fabs(s->med) && hi - lo > 0) {
      rs = 1.0 / (hi - lo);
      fk = s->flat ? 0.0 : s->scale * rs; /* the fit, from scale units to raw scale units */
    }
  }
  for (long k = 0; k < nr; k++) {
    double x, yi, d;
    if (raw) {
      size_t i = (size_t)k * (n - 1) / LGA_CLS_CAP;
      x = ((t[i] - t[0]) - rt0) * s->inv_span;
      yi = (v[i] - s->med) * rs;
      d = (v[i + 1] - v[i]) * rs;
    } else {
      x = u[k] - 0.5;
      yi = y[k];
      d = k + 1 < m ? y[k + 1] - y[k] : 0.0;
    }
    double e = clampd(yi - fk * (c0 + (qb + qc * x) * x), -1, 1), ee = e * e;
    eb[k] = e;
    d = clampd(d, -1.5, 1.5);
    double dd = d * d;
    e1 += e;
    e2 += ee;
    e3 += ee * e;
    e4 += ee * ee;
    d1 += d;
    d2 += dd;
    d3 += dd * d;
  }
  double N = (double)nr, Nd = (double)(raw ? nr : nr - 1);
  double a1 = e1 / N, c2 = e2 / N - a1 * a1;
  double c3 = e3 / N - 3 * a1 * e2 / N + 2 * a1 * a1 * a1;
  double c4 = e4 / N - 4 * a1 * e3 / N + 6 * a1 * a1 * e2 / N - 3 * a1 * a1 * a1 * a1;
  int ok = c2 > 1e-10;
  f[LGA_F_RES_SKEW] = ok ? clampd(c3 / (c2 * sqrt(c2)), -5, 5) : 0.0;
  f[LGA_F_RES_KURT] = ok ? clampd(c4 / (c2 * c2), 1, 12) - 3 : 0.0;
  double mad = 0;
  for (long k = 0; k < nr; k++) mad += fabs(eb[k] - a1);
  f[LGA_F_RES_GEARY] = ok ? mad / N / sqrt(c2) - 0.8 : 0.0;
  double b1 = d1 / Nd, q2 = d2 / Nd - b1 * b1, q3 = d3 / Nd - 3 * b1 * d2 / Nd + 2 * b1 * b1 * b1;
  f[LGA_F_INC_SKEW] = q2 > 1e-10 ? clampd(q3 / (q2 * sqrt(q2)), -5, 5) : 0.0;
}

/* 5. Linear and quadratic fits on the filtered series, slopes per third. */
static void cls_fits(cls_series_t *s, double f[LGA_CLS_NFEAT]) {
  long m = s->m;
  const double *u = s->u, *y = s->y, *yf = s->yf;
  double su = 0, sy = 0;
  for (long i = 0; i < m; i++) {
    su += u[i];
    sy += yf[i];
  }
  double mu_u = su / m, mu_y = sy / m;
  double sxx = 0, sxy = 0, syy = 0;
  double S1 = 0, S2 = 0, S3 = 0, S4 = 0, Y1 = 0, Y2 = 0;
  double tc[3] = {0}, tu[3] = {0}, ty[3] = {0}, tuu[3] = {0}, tuy[3] = {0};
  for (long i = 0; i < m; i++) {
    double du = u[i] - mu_u, dy = yf[i] - mu_y;
    sxx += du * du;
    sxy += du * dy;
    syy += dy * dy;
    double x = u[i] - 0.5, x2 = x * x;
    S1 += x;
    S2 += x2;
    S3 += x2 * x;
    S4 += x2 * x2;
    Y1 += x * dy;
    Y2 += x2 * dy;
    int th = u[i] < 1.0 / 3 ? 0 : (u[i] < 2.0 / 3 ? 1 : 2);
    tc[th] += 1;
    tu[th] += u[i];
    ty[th] += yf[i];
    tuu[th] += u[i] * u[i];
    tuy[th] += u[i] * yf[i];
  }
  double slope = sxx > 0 ? sxy / sxx : 0;
  double r2 = (sxx > 0 && syy > 1e-24) ? sxy * sxy / (sxx * syy) : 0;
  /* Quadratic on centred y: [m S1 S2; S1 S2 S3; S2 S3 S4] [a b c]' = [0 Y1 Y2]'. */
  double M = (double)m;
  double det = M * (S2 * S4 - S3 * S3) - S1 * (S1 * S4 - S3 * S2) + S2 * (S1 * S3 - S2 * S2);
  double qa = 0, qb = 0, qc = 0;
  if (fabs(det) > 1e-12 * M * M * M * 1e-4) {
    qa = (0 * (S2 * S4 - S3 * S3) - S1 * (Y1 * S4 - S3 * Y2) + S2 * (Y1 * S3 - S2 * Y2)) / det;
    qb = (M * (Y1 * S4 - S3 * Y2) - 0 * (S1 * S4 - S3 * S2) + S2 * (S1 * Y2 - Y1 * S2)) / det;
    qc = (M * (S2 * Y2 - Y1 * S3) - S1 * (S1 * Y2 - Y1 * S2) + 0 * (S1 * S3 - S2 * S2)) / det;
  }
  double ssq = 0, vn_num = 0, vn_den = 0, eprev = 0;
  for (long i = 0; i < m; i++) {
    double x = u[i] - 0.5, fit = qa + qb * x + qc * x * x;
    double e = (yf[i] - mu_y) - fit, er = (y[i] - mu_y) - fit;
    ssq += e * e;
    vn_den += er * er;
    vn_num += i ? (er - eprev) * (er - eprev) : 0;
    eprev = er;
  }
  f[LGA_F_VN_RATIO] = vn_den > 1e-20 * M ? clampd(vn_num / vn_den, 0, 4) : 0.0;
  cls_residual_shape(s, mu_y, qa, qb, qc, f);
  double r2q = syy > 1e-24 ? 1.0 - ssq / syy : 0;
  double sl[3];
  for (int k = 0; k < 3; k++) sl[k] = ols_slope(tc[k], tu[k], ty[k], tuu[k], tuy[k]);

  f[LGA_F_LOGN] = log2((double)s->n) / 11.0;
  f[LGA_F_LIN_SLOPE] = clampd(slope, -20, 20);
  f[LGA_F_LIN_R2] = r2;
  f[LGA_F_QUAD_C] = clampd(qc, -50, 50);
  f[LGA_F_QUAD_GAIN] = clampd(r2q - r2, 0, 1);
  f[LGA_F_SLOPE_FIRST] = clampd(sl[0], -20, 20);
  f[LGA_F_SLOPE_MID] = clampd(sl[1], -20, 20);
  f[LGA_F_SLOPE_LAST] = clampd(sl[2], -20, 20);
  f[LGA_F_ACCEL] = (sl[2] - sl[0]) / (fabs(sl[0]) + fabs(sl[2]) + 0.1);
  f[LGA_F_RESID] = sqrt(ssq / M);
}

/* 6. Time windows: floors, ceilings, means (and rss means). */
static void cls_windows(const cls_series_t *s, cls_windows_t *wn, double f[LGA_CLS_NFEAT]) {
  long m = s->m;
  const double *u = s->u, *yf = s->yf;
  int *cnt = wn->cnt;
  double wmin[W], wmax[W], wsum[W], wu[W], wr[W];
  /* u is sorted: window k holds the samples with (int)(u * W) == k (u = 1 in the last). */
  for (long i = 0, k = 0; k < W; k++) {
    double lo = INFINITY, hi = -INFINITY, sum = 0, sumu = 0, sumr = 0;
    long i0 = i;
    for (; i < m && (k == W - 1 || u[i] * W < k + 1); i++) {
      lo = yf[i] < lo ? yf[i] : lo;
      hi = yf[i] > hi ? yf[i] : hi;
      sum += yf[i];
      sumu += u[i];
    }
    if (s->rss)
      for (long j = i0; j < i; j++) sumr += s->r[j];
    cnt[k] = (int)(i - i0);
    wmin[k] = lo;
    wmax[k] = hi;
    wsum[k] = sum;
    wu[k] = sumu;
    wr[k] = sumr;
  }
  double pf[W], pcl[W], pm[W], mean[W], spread[W];
  int np = 0, nsp = 0;
  for (int k = 0; k < W; k++) {
    if (!cnt[k]) {
      mean[k] = wn->rmean[k] = 0;
      continue;
    }
    mean[k] = wsum[k] / cnt[k];
    wn->rmean[k] = wr[k] / cnt[k];
    wn->pc[np] = wu[k] / cnt[k];
    pf[np] = wmin[k];
    pcl[np] = wmax[k];
    pm[np] = mean[k];
    wn->pr[np] = wn->rmean[k];
    np++;
    if (cnt[k] >= 2) spread[nsp++] = wmax[k] - wmin[k];
  }
  wn->np = np;
  fill_gaps(mean, cnt, W);
  f[LGA_F_TS_FLOOR] = clampd(theil_sen(wn->pc, pf, np), -20, 20);
  f[LGA_F_TS_CEIL] = clampd(theil_sen(wn->pc, pcl, np), -20, 20);
  wn->ts_mean = theil_sen(wn->pc, pm, np);
  f[LGA_F_TS_MEAN] = clampd(wn->ts_mean, -20, 20);
  f[LGA_F_MK_TAU] = mk_tau(mean, W);
  f[LGA_F_SPREAD] = nsp ? kth(spread, nsp, nsp / 2) : 0.0;
  double mlo = mean[0], mhi = mean[0], run = mean[0], dd = 0, mean_avg = 0;
  int ups = 0;
  for (int k = 0; k < W; k++) {
    mlo = mean[k] < mlo ? mean[k] : mlo;
    mhi = mean[k] > mhi ? mean[k] : mhi;
    run = mean[k] > run ? mean[k] : run;
    dd = run - mean[k] > dd ? run - mean[k] : dd;
    ups += k && mean[k] > mean[k - 1];
    mean_avg += mean[k] / W;
  }
  f[LGA_F_DRAWDOWN] = mhi - mlo > 1e-9 ? dd / (mhi - mlo) : 0.0;
  f[LGA_F_UP_FRAC] = (double)ups / (W - 1);
  double base = 0.5 * (mean[0] + mean[1]);
  double growth = 0.5 * (mean[W - 2] + mean[W - 1]) - base;
  f[LGA_F_GROWTH] = clampd(growth, -20, 20);
  f[LGA_F_T50] = rise_time(mean, W, base, growth > 0.1 ? growth : 0, 0.5, 0.5);
  f[LGA_F_T90] = rise_time(mean, W, base, growth > 0.1 ? growth : 0, 0.9, 0.5);
  f[LGA_F_LAST_VS_MAX] = mean[W - 1] - mhi;
  for (int k = 0; k < W; k++) f[LGA_F_PROFILE + k] = clampd(mean[k] - mean_avg, -20, 20);
}

/* 7. Jumps: increments beyond the typical rate, against a robust noise level. Medians
 * are taken over at most LGA_CLS_SEL evenly strided increments. */
static void cls_jumps(const cls_series_t *s, double f[LGA_CLS_NFEAT]) {
  long m = s->m;
  const double *u = s->u, *y = s->y, *yf = s->yf;
  long nd = m - 1, nsub = nd < LGA_CLS_SEL ? nd : LGA_CLS_SEL;
  double sub[LGA_CLS_SEL];
  for (long k = 0; k < nsub; k++) {
    long i = 1 + k * nd / nsub;
    sub[k] = (yf[i] - yf[i - 1]) / (u[i] - u[i - 1]);
  }
  double rate = kth(sub, nsub, nsub / 2);
  for (long k = 0; k < nsub; k++) {
    long i = 1 + k * nd / nsub;
    sub[k] = fabs((yf[i] - yf[i - 1]) - rate * (u[i] - u[i - 1]));
  }
  double sigma = 1.4826 * kth(sub, nsub, nsub / 2);
  sigma = sigma < 1e-3 ? 1e-3 : sigma;
  double thr = 5 * sigma > 0.04 ? 5 * sigma : 0.04;
  int jup = 0, jdn = 0;
  double mup = 0, mdn = 0, xup = 0, xdn = 0;
  for (long i = 1; i < m; i++) {
    double e = (yf[i] - yf[i - 1]) - rate * (u[i] - u[i - 1]);
    if (e > thr) {
      jup++;
      mup += e;
      xup = e > xup ? e : xup;
    } else if (e < -thr) {
      jdn++;
      mdn -= e;
      xdn = -e > xdn ? -e : xdn;
    }
  }
  f[LGA_F_JUP_COUNT] = log1p(jup);
  f[LGA_F_JDN_COUNT] = log1p(jdn);
  f[LGA_F_JUP_MASS] = clampd(mup, 0, 50);
  f[LGA_F_JDN_MASS] = clampd(mdn, 0, 50);
  f[LGA_F_JUP_MAX] = clampd(xup, 0, 20);
  f[LGA_F_JDN_MAX] = clampd(xdn, 0, 20);
  f[LGA_F_NOISE] = clampd(sigma, 0, 20);
  int nout = 0;
  for (long i = 0; i < m; i++) nout += fabs(y[i] - yf[i]) > 0.5;
  f[LGA_F_OUTLIERS] = (double)nout / (double)m;
}

/* The quadratic a + b x + c x^2 (x = (k + 1/2) / G - 1/2) fitted to gz[0..G-1]; *gy0
 * the sum of gz. */
static void grid_quadratic(const double *gz, int G, double *a, double *b, double *c, double *gy0) {
  double g1 = 0, g2 = 0, g3 = 0, g4 = 0, y0 = 0, gy1 = 0, gy2 = 0;
  for (int k = 0; k < G; k++) {
    double x = (k + 0.5) / G - 0.5, x2 = x * x;
    g1 += x;
    g2 += x2;
    g3 += x2 * x;
    g4 += x2 * x2;
    y0 += gz[k];
    gy1 += x * gz[k];
    gy2 += x2 * gz[k];
  }
  double Gd = G;
  double gdet = Gd * (g2 * g4 - g3 * g3) - g1 * (g1 * g4 - g3 * g2) + g2 * (g1 * g3 - g2 * g2);
  *a = *b = *c = 0;
  if (fabs(gdet) > 1e-300) {
    *a = (y0 * (g2 * g4 - g3 * g3) - g1 * (gy1 * g4 - g3 * gy2) + g2 * (gy1 * g3 - g2 * gy2)) / gdet;
    *b = (Gd * (gy1 * g4 - g3 * gy2) - y0 * (g1 * g4 - g3 * g2) + g2 * (g1 * gy2 - gy1 * g2)) / gdet;
    *c = (Gd * (g2 * gy2 - gy1 * g3) - g1 * (g1 * gy2 - gy1 * g2) + y0 * (g1 * g3 - g2 * g2)) / gdet;
  }
  *gy0 = y0;
}

/* The best hinge a + b max(0, x - c) (x = (k + 1/2) / G) for gz around its mean gmean
 * (sst: its sum of squares there): its residual sum of squares (sst when no hinge is
 * better than none), *at its c. Sums over the cells right of c of 1, x, x^2, y, x y,
 * accumulated from the right, give each candidate's fit in O(1); ties keep the
 * smallest c. */
static double grid_hinge(const double *gz, int G, double gmean, double sst, double *at) {
  enum { NC = 13 };
  double ssr_c[NC + 1];
  double h0 = 0, h1 = 0, h2 = 0, hy = 0, hxy = 0, Gd = G;
  int kk = G - 1;
  for (int ci = NC; ci >= 1; ci--) {
    double cc = 0.05 * ci;
    for (; kk >= 0 && (kk + 0.5) / G > cc; kk--) {
      double x = (kk + 0.5) / G, yk = gz[kk] - gmean;
      h0 += 1;
      h1 += x;
      h2 += x * x;
      hy += yk;
      hxy += x * yk;
    }
    double sh = h1 - cc * h0, shh = h2 - 2 * cc * h1 + cc * cc * h0, shy = hxy - cc * hy;
    double vh = shh - sh * sh / Gd;
    ssr_c[ci] = vh > 1e-12 ? sst - shy * shy / vh : INFINITY;
  }
  double best_ssr = sst, best_c = 0;
  for (int ci = 1; ci <= NC; ci++)
    if (ssr_c[ci] < best_ssr) {
      best_ssr = ssr_c[ci];
      best_c = 0.05 * ci;
    }
  *at = best_c;
  return best_ssr;
}

/* Curvature of the grid right of the hinge at best_c: gz is detrended, a + b x + c x^2
 * (x = (k + 1/2) / G - 1/2) is added back. */
static double grid_post_curvature(const double *gz, int G, double best_c, double a, double b, double c) {
  double p0 = 0, p1 = 0, p2 = 0, p3 = 0, p4 = 0, q0 = 0, q1 = 0, q2 = 0;
  for (int k = 0; k < G; k++) {
    double x = (k + 0.5) / G, sx = (x - best_c) / (1 - best_c);
    if (sx < 0) continue;
    double xc = x - 0.5, yk = gz[k] + a + b * xc + c * xc * xc, s2 = sx * sx;
    p0 += 1;
    p1 += sx;
    p2 += s2;
    p3 += s2 * sx;
    p4 += s2 * s2;
    q0 += yk;
    q1 += sx * yk;
    q2 += s2 * yk;
  }
  double pd = p0 * (p2 * p4 - p3 * p3) - p1 * (p1 * p4 - p3 * p2) + p2 * (p1 * p3 - p2 * p2);
  if (!(p0 >= 6 && fabs(pd) > 1e-12)) return 0;
  double pb = (p0 * (q1 * p4 - p3 * q2) - q0 * (p1 * p4 - p3 * p2) + p2 * (p1 * q2 - q1 * p2)) / pd;
  double pq = (p0 * (p2 * q2 - q1 * p3) - p1 * (p1 * q2 - q1 * p2) + q0 * (p1 * p3 - p2 * p2)) / pd;
  return pq / (fabs(pb) + fabs(pq) + 0.05);
}

/* Zero crossings and autocorrelation of the detrended grid gz (var0: its sum of
 * squares): the lag-1 value, and the first peak after the first negative value. */
static void grid_periodicity(const double *gz, int G, double var0, double f[LGA_CLS_NFEAT]) {
  double zc = 0, acf1 = 0, peak = 0, lag = 0;
  if (var0 > 1e-12 * G) {
    int crossings = 0, prev = 0;
    for (int k = 0; k < G; k++) {
      int s = (gz[k] > 0) - (gz[k] < 0);
      if (s && prev && s != prev) crossings++;
      if (s) prev = s;
    }
    zc = (double)crossings / (G - 1);
    int seen_neg = 0;
    for (int L = 1; L <= G / 2; L++) {
      double a0 = 0, a1 = 0, a2 = 0, a3 = 0; /* 4 chains: latency, fixed order */
      int k = 0;
      for (; k + 3 + L < G; k += 4) {
        a0 += gz[k] * gz[k + L];
        a1 += gz[k + 1] * gz[k + 1 + L];
        a2 += gz[k + 2] * gz[k + 2 + L];
        a3 += gz[k + 3] * gz[k + 3 + L];
      }
      for (; k + L < G; k++) a0 += gz[k] * gz[k + L];
      double acc = ((a0 + a1) + (a2 + a3)) / var0;
      if (L == 1) acf1 = acc;
      if (acc < 0) seen_neg = 1;
      else if (seen_neg && acc > peak) {
        peak = acc;
        lag = (double)L / G;
      }
    }
  }
  f[LGA_F_ZCROSS] = zc;
  f[LGA_F_ACF1] = acf1;
  f[LGA_F_ACF_PEAK] = peak;
  f[LGA_F_ACF_LAG] = lag;
}

/* 8. Periodicity on a uniform time grid, quadratically detrended; the best hinge
 * against the quadratic (same parameter count) and the curvature after it. */
static void cls_grid(const cls_series_t *s, double f[LGA_CLS_NFEAT]) {
  enum { G_MAX = LGA_CLS_GRID };
  long m = s->m;
  const double *u = s->u, *yf = s->yf;
  int G = m < G_MAX ? (int)m : G_MAX;
  double gz[G_MAX];
  int gc[G_MAX];
  for (long i = 0, k = 0; k < G; k++) { /* same bucketing as the windows */
    double sum = 0;
    long i0 = i;
    for (; i < m && (k == G - 1 || u[i] * G < k + 1); i++) sum += yf[i];
    gc[k] = (int)(i - i0);
    gz[k] = gc[k] ? sum / gc[k] : 0.0;
  }
  fill_gaps(gz, gc, G);
  double a, b, c, gy0;
  grid_quadratic(gz, G, &a, &b, &c, &gy0);
  double gmean = gy0 / (double)G, sst = 0;
  for (int k = 0; k < G; k++) sst += (gz[k] - gmean) * (gz[k] - gmean);
  double best_c, best_ssr = grid_hinge(gz, G, gmean, sst, &best_c);
  double var0 = 0;
  for (int k = 0; k < G; k++) {
    double x = (k + 0.5) / G - 0.5;
    gz[k] -= a + b * x + c * x * x;
    var0 += gz[k] * gz[k];
  }
  f[LGA_F_HINGE_GAIN] = sst > 1e-12 * G ? clampd((var0 - best_ssr) / sst, -1, 1) : 0.0;
  f[LGA_F_HINGE_AT] = best_c;
  f[LGA_F_POST_CURV] = grid_post_curvature(gz, G, best_c, a, b, c);
  grid_periodicity(gz, G, var0, f);
}

/* 9. rss against live: growth relative to the rss level and to live's range. */
static void cls_rss(const cls_series_t *s, cls_windows_t *wn, double f[LGA_CLS_NFEAT]) {
  if (!s->rss) {
    f[LGA_F_HAS_RSS] = f[LGA_F_RSS_GROWTH] = f[LGA_F_LIVE_GROWTH_R] = 0;
    f[LGA_F_RSS_EXCESS] = f[LGA_F_RSS_VS_LIVE] = f[LGA_F_RSS_TAU] = f[LGA_F_RSS_T50] = 0;
    return;
  }
  int np = wn->np;
  double *rmean = wn->rmean;
  fill_gaps(rmean, wn->cnt, W);
  double level = 0;
  for (int k = 0; k < np; k++) level += fabs(wn->pr[k]) / np;
  level = level > 0 ? level : 1.0;
  double rs = theil_sen(wn->pc, wn->pr, np);          /* bytes per unit u */
  double ls = s->flat ? 0.0 : wn->ts_mean * s->scale; /* bytes per unit u */
  double rbase = 0.5 * (rmean[0] + rmean[1]);
  double rgrowth = 0.5 * (rmean[W - 2] + rmean[W - 1]) - rbase;
  f[LGA_F_HAS_RSS] = 1.0;
  f[LGA_F_RSS_GROWTH] = clampd(rs / level, -5, 5);
  f[LGA_F_LIVE_GROWTH_R] = clampd(ls / level, -5, 5);
  f[LGA_F_RSS_EXCESS] = clampd((rs - (ls > 0 ? ls : 0)) / level, -5, 5);
  f[LGA_F_RSS_VS_LIVE] = clampd(slog(rs / (s->flat ? level : s->scale)), -20, 20);
  f[LGA_F_RSS_TAU] = mk_tau(rmean, W);
  f[LGA_F_RSS_T50] = rise_time(rmean, W, rbase, rgrowth > 0.02 * level ? rgrowth : 0, 0.5, 0.5);
}

int lga_classify_features(const double *t, const double *v, const double *rss, size_t n, double f[LGA_CLS_NFEAT]) {
  if (!t || !v || !f || n < 8) return -EINVAL;
  for (size_t i = 0; i < n; i++) {
    if (!isfinite(t[i]) || !isfinite(v[i]) || (rss && !isfinite(rss[i]))) return -EDOM;
    if (i && !(t[i] > t[i - 1])) return -EDOM;
  }

  /* 0. Teardown: a program that frees its data at exit ends with a collapse in its
   * last sample or two (to under half of a positive value). The shape is what the
   * program did while it ran, so those samples are left out, as the detector does
   * (src/analysis/detect.c). */
  for (int k = 0; k < 2 && n > 8 && v[n - 2] > 0 && v[n - 1] >= 0 && v[n - 1] < 0.5 * v[n - 2]; k++) n--;

  cls_series_t s; /* not zeroed: each step writes what the next ones read */
  s.t = t;
  s.v = v;
  s.rss = rss;
  s.n = n;
  cls_windows_t wn;
  cls_copy(&s);            /* 1 */
  cls_normalise(&s, f);    /* 2, 3, 4 */
  cls_fits(&s, f);         /* 5 */
  cls_windows(&s, &wn, f); /* 6 */
  cls_jumps(&s, f);        /* 7 */
  cls_grid(&s, f);         /* 8 */
  cls_rss(&s, &wn, f);     /* 9 */
  for (int i = 0; i < LGA_CLS_NFEAT; i++)
    if (!isfinite(f[i])) f[i] = 0.0;
  return 0;
}
