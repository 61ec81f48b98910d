/* SPDX-License-Identifier: MIT */
/*
 * gen.c - deterministic generator of labelled memory curves (see gen.h).
 *
 * A series is built in three layers: sample times (irregular spacing, missing
 * stretches, arbitrary origin and unit), a noiseless shape f(u) on u in [0, 1] in
 * units of the shape's amplitude, and nuisances (white and correlated noise,
 * spikes, quantisation, churn). Values are then mapped to bytes with a random
 * baseline and amplitude so that the classifier never sees a characteristic scale.
 * An optional rss series is derived from the live one (tracking, high-water mark or
 * allocator warm-up), or, for fragmentation, grows on its own while live stays
 * flat. docs/classifier.md gives the label definitions these shapes implement.
 */
#include "gen.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "leakguard.h"

static uint64_t splitmix(uint64_t *x) {
  uint64_t z = (*x += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

void lgi_gen_seed(lgi_gen_rng_t *r, uint64_t seed) {
  for (int i = 0; i < 4; i++) r->s[i] = splitmix(&seed);
}

static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

uint64_t lgi_gen_next(lgi_gen_rng_t *r) {
  uint64_t *s = r->s;
  uint64_t res = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
  s[2] ^= s[0];
  s[3] ^= s[1];
  s[1] ^= s[2];
  s[0] ^= s[3];
  s[2] ^= t;
  s[3] = rotl(s[3], 45);
  return res;
}

double lgi_gen_unif(lgi_gen_rng_t *r) { return (double)(lgi_gen_next(r) >> 11) * 0x1.0p-53; }

double lgi_gen_normal(lgi_gen_rng_t *r) {
  double a = lgi_gen_unif(r), b = lgi_gen_unif(r);
  return sqrt(-2.0 * log(1.0 - a)) * cos(6.283185307179586 * b);
}

/* Uniform in [a, b). */
static double U(lgi_gen_rng_t *r, double a, double b) { return a + (b - a) * lgi_gen_unif(r); }

/* Uniform integer in [a, b]. */
static int I(lgi_gen_rng_t *r, int a, int b) { return a + (int)(lgi_gen_unif(r) * (b - a + 1)); }

/* Log-uniform in [a, b). */
static double LU(lgi_gen_rng_t *r, double a, double b) { return exp(U(r, log(a), log(b))); }

const char *lgi_gen_split_name(int split) {
  static const char *const names[] = {"train", "val", "test"};
  return split >= 0 && split < 3 ? names[split] : NULL;
}

int lgi_gen_split_parse(const char *name) {
  for (int i = 0; i < 3; i++)
    if (!strcmp(name, lgi_gen_split_name(i))) return i;
  return -1;
}

void lgi_gen_make(int split, uint64_t index, lgi_gen_series_t *s) {
  uint64_t x = ((uint64_t)(split + 1) << 48) ^ index ^ 0x6C67636C61737321ull;
  uint64_t seed = splitmix(&x);
  lgi_gen_generate(seed, (int)(index % LG_PATTERN_COUNT), s);
}

/* ------------------------------------------------------------------ shapes */

static double saw_shape(int kind, double duty, double x);

/* A periodic churn: cycles of jittered length and amplitude. */
typedef struct saw {
  int kind; /* 0 ramp-and-drop, 1 on/off batch, 2 triangle, 3 smooth hump
                         (a queue that swells and drains, flat floor between) */
  double duty;
  int ncyc;
  double start[80], amp[80];
} saw_t;

static void saw_init_irr(lgi_gen_rng_t *r, saw_t *w, double periods, int kind, int irregular) {
  w->kind = kind;
  w->duty = U(r, 0.3, 0.7);
  double len = 1.0 / periods;
  double c = -U(r, 0, 1) * len;
  w->ncyc = 0;
  while (c <= 1.0 && w->ncyc < 79) {
    /* irregular batches: lengths over a 1:6 range, amplitude in proportion (the
     * batch fills at a steady rate until its randomly drawn size is reached) */
    double x = irregular ? LU(r, 0.35, 2.1) : U(r, 0.85, 1.15);
    w->start[w->ncyc] = c;
    w->amp[w->ncyc] = irregular ? x : U(r, 0.85, 1.15);
    w->ncyc++;
    c += len * x;
  }
  w->start[w->ncyc] = c > 1.0 ? c : 1.0 + 1e-9;
  w->amp[w->ncyc] = 1;
}

static void saw_init(lgi_gen_rng_t *r, saw_t *w, double periods, int kind) { saw_init_irr(r, w, periods, kind, 0); }

static double saw_at(const saw_t *w, double u) {
  int k = 0;
  while (k + 1 < w->ncyc && w->start[k + 1] <= u) k++;
  double x = (u - w->start[k]) / (w->start[k + 1] - w->start[k]);
  x = x < 0 ? 0 : (x >= 1 ? 0.999999 : x);
  return w->amp[k] * saw_shape(w->kind, w->duty, x);
}

/* Value of one saw-tooth cycle of the given kind at phase x in [0, 1). */
static double saw_shape(int kind, double duty, double x) {
  double y;
  switch (kind) {
  case 1: y = x < duty ? 1.0 : 0.0; break;
  case 2: y = 1.0 - fabs(2 * x - 1); break;
  case 3:
    y = x < duty ? sin(3.141592653589793 * x / duty) : 0.0;
    y *= y;
    break;
  default: y = x; break;
  }
  return y;
}

/* A saw-tooth whose period is comparable to or shorter than the sampling interval
 * (P mean sample intervals, P in [0.25, 4]): a training loop's per-step batch seen at
 * the recorder's interval. Cycles are drawn one after the other (length jitter, or
 * irregular batches over a 1:6 range with amplitude in proportion), so the phase at
 * each sample wanders and the samples scatter between the floor and the batch peaks.
 * Adds c times it to f; returns P. */
static double add_aliased_saw(lgi_gen_rng_t *r, size_t n, const double *u, double *f, double c, int kind,
                              int irregular) {
  double P = LU(r, 0.25, 4.0), duty = kind == 3 ? U(r, 0.6, 1.0) : U(r, 0.3, 0.7);
  double len = P / (double)(n - 1); /* u per cycle (u spans n - 1 mean intervals) */
  double cs = -U(r, 0, 1) * len, cl = len * U(r, 0.85, 1.15), ca = U(r, 0.85, 1.15);
  for (size_t i = 0; i < n; i++) {
    while (u[i] >= cs + cl) {
      cs += cl;
      double x = irregular ? LU(r, 0.35, 2.1) : U(r, 0.85, 1.15);
      cl = len * x;
      ca = irregular ? x : U(r, 0.85, 1.15);
    }
    f[i] += c * ca * saw_shape(kind, duty, (u[i] - cs) / cl);
  }
  return P;
}

/* Smooth step from 0 to 1 over [a, a + width]. */
static double ramp(double u, double a, double width) {
  if (u <= a) return 0;
  if (width <= 0 || u >= a + width) return 1;
  return (u - a) / width;
}

/* Fills u[0..n-1] with increasing times in [0, 1]: jittered spacing plus optional
 * missing stretches. */
static void make_times(lgi_gen_rng_t *r, size_t n, double *u, char *desc, size_t dlen) {
  double jit = lgi_gen_unif(r) < 0.4 ? 0 : (lgi_gen_unif(r) < 0.66 ? U(r, 0, 0.5) : U(r, 0.5, 0.95));
  /* Denser from sample c on: the program starts marking steps after its start-up and
   * the recorder snapshots at every marker, D times as often as its interval. */
  size_t c = 0;
  double D = 1;
  if (n >= 24 && lgi_gen_unif(r) < 0.1) {
    c = (size_t)I(r, 3, (int)(n / 2));
    D = LU(r, 2, 10);
  }
  u[0] = 0;
  for (size_t i = 1; i < n; i++) u[i] = u[i - 1] + (i <= c ? D : 1.0) * (1.0 + jit * (2 * lgi_gen_unif(r) - 1));
  int gaps = 0;
  if (n >= 24 && lgi_gen_unif(r) < 0.3) {
    gaps = I(r, 1, 3);
    for (int g = 0; g < gaps; g++) {
      size_t at = 1 + (size_t)(lgi_gen_unif(r) * (n - 1));
      double extra = U(r, 2, 3 + 0.1 * (double)n);
      for (size_t i = at; i < n; i++) u[i] += extra;
    }
  }
  double span = u[n - 1];
  for (size_t i = 0; i < n; i++) u[i] /= span;
  size_t l = strlen(desc);
  snprintf(desc + l, dlen - l, " jit=%.2f gaps=%d%s", jit, gaps, c ? " denser" : "");
}

/* Correlated noise (Ornstein-Uhlenbeck in u) plus white noise, total sigma. */
static void add_noise(lgi_gen_rng_t *r, size_t n, const double *u, double *f, double sigma) {
  if (sigma <= 0) return;
  double wf = U(r, 0.4, 1.0);
  double sw = sigma * sqrt(wf), sa = sigma * sqrt(1 - wf);
  double L = LU(r, 0.003, 0.15);
  double ar = sa * lgi_gen_normal(r);
  for (size_t i = 0; i < n; i++) {
    if (i) {
      double phi = exp(-(u[i] - u[i - 1]) / L);
      ar = phi * ar + sqrt(1 - phi * phi) * sa * lgi_gen_normal(r);
    }
    f[i] += sw * lgi_gen_normal(r) + ar;
  }
}

/* Isolated spikes (transient allocations, mostly upward). */
static void add_spikes(lgi_gen_rng_t *r, size_t n, double *f, double height) {
  double rate = U(r, 0.003, 0.02);
  for (size_t i = 0; i < n; i++)
    if (lgi_gen_unif(r) < rate) f[i] += (lgi_gen_unif(r) < 0.8 ? 1 : -1) * height * U(r, 2, 6);
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* Robust range (p95 - p5) of f[0..n-1]. */
static double range_of(const double *f, size_t n) {
  double tmp[LGI_GEN_MAXN];
  memcpy(tmp, f, n * sizeof *f);
  qsort(tmp, n, sizeof *tmp, cmp_double);
  return tmp[(n - 1) * 95 / 100] - tmp[(n - 1) * 5 / 100];
}

/* A stable live curve (in amplitude units) with the usual nuisances; shift allowed
 * when allow_shift. */
static void stable_shape(lgi_gen_rng_t *r, lgi_gen_series_t *s, const double *u, double *f, int allow_shift) {
  size_t n = s->n;
  double x = lgi_gen_unif(r);
  for (size_t i = 0; i < n; i++) f[i] = 0;
  if (allow_shift && x < 0.3) {
    double at = U(r, 0.15, 0.85), mag = U(r, 1, 6) * (lgi_gen_unif(r) < 0.6 ? 1 : -1);
    for (size_t i = 0; i < n; i++) f[i] += u[i] >= at ? mag : 0;
    strcat(s->desc, " shift");
  } else if (x < 0.45) {
    /* random bursts: non-periodic transient bumps */
    double rate = U(r, 0.01, 0.05), h = U(r, 2, 5);
    for (size_t i = 0; i < n; i++)
      if (lgi_gen_unif(r) < rate) {
        size_t w = (size_t)I(r, 1, 4);
        for (size_t k = i; k < n && k < i + w; k++) f[k] += h;
      }
    strcat(s->desc, " bursts");
  }
  add_noise(r, n, u, f, x > 0.97 ? 0.0 : 1.0);
  /* A wandering working set (blocks replaced at random, so the total drifts and
   * reverts in slow bumps): a purely correlated component on top, sometimes. */
  if (x <= 0.97 && lgi_gen_unif(r) < 0.3) {
    double L = LU(r, 0.02, 0.3), sd = U(r, 0.7, 2.0), ar = sd * lgi_gen_normal(r);
    for (size_t i = 0; i < n; i++) {
      if (i) {
        double phi = exp(-(u[i] - u[i - 1]) / L);
        ar = phi * ar + sqrt(1 - phi * phi) * sd * lgi_gen_normal(r);
      }
      f[i] += ar;
    }
    strcat(s->desc, " wander");
  }
}

/* What a label's shape leaves to the steps that follow it. */
typedef struct shape {
  double sigma, spike_h; /* the white noise and the spikes' height, in the shape's units */
  int churn_ok;          /* long enough for churn on top of the shape */
  int aliased, jitter;   /* an aliased saw-tooth (a visible part of memory); a constant table's jitter */
} shape_t;

#define SHAPE_ARGS lgi_gen_rng_t *r, lgi_gen_series_t *s, size_t n, const double *u, double *f, shape_t *sh

static void shape_stable(SHAPE_ARGS, int label) {
  saw_t w;
  if (label == LG_PATTERN_FRAGMENTATION && lgi_gen_unif(r) < 0.5) {
    double pmax = n / 6.0 < 24 ? n / 6.0 : 24;
    if (lgi_gen_unif(r) < 0.3) {
      for (size_t i = 0; i < n; i++) f[i] = 0;
      add_aliased_saw(r, n, u, f, 1.0, I(r, 0, 3), lgi_gen_unif(r) < 0.4);
    } else {
      saw_init(r, &w, U(r, 2, pmax > 2 ? pmax : 2), I(r, 0, 3));
      for (size_t i = 0; i < n; i++) f[i] = saw_at(&w, u[i]);
    }
    sh->sigma = U(r, 0.01, 0.15);
    add_noise(r, n, u, f, sh->sigma);
    strcat(s->desc, " live=saw");
  } else {
    stable_shape(r, s, u, f, label == LG_PATTERN_STABLE);
    sh->sigma = 1;
    if (label == LG_PATTERN_STABLE && lgi_gen_unif(r) < 0.2) {
      /* the jitter of a constant table: bounded (any distribution, here uniform,
       * not Gaussian) and tiny relative to the level (see the amplitude below) */
      for (size_t i = 0; i < n; i++) f[i] = U(r, -1.7, 1.7) + 0.3 * f[i];
      sh->jitter = 1;
      strcat(s->desc, " jitter");
    }
  }
  sh->spike_h = 1;
}

static void shape_linear(SHAPE_ARGS) {
  saw_t w;
  /* onset: at once, soon (a plugin loaded after a second of a long run), or late */
  double uo = lgi_gen_unif(r);
  double us = uo < 0.55 ? 0 : (uo < 0.65 ? U(r, 0.02, 0.1) : U(r, 0.1, 0.6));
  for (size_t i = 0; i < n; i++) f[i] = u[i] > us ? (u[i] - us) / (1 - us) : 0;
  if (n >= 60 && lgi_gen_unif(r) < 0.25) {
    /* chunked growth: the leak grows by irregular chunks between samples (a fine,
     * uneven staircase: chunk sizes log-normal, a sample gains a chunk with
     * probability pc in [1/6, 1], so treads last 1-6 samples and there are always
     * far more than step-leak's 12 steps) */
    double pc = U(r, 1.0 / 6.0, 1.0), sl = U(r, 0.2, 1.2), acc = 0;
    size_t first = 0;
    while (first + 1 < n && !(u[first] > us)) first++;
    for (size_t i = 0; i < n; i++) {
      if (i >= first && i > 0 && lgi_gen_unif(r) < pc) acc += exp(sl * lgi_gen_normal(r));
      f[i] = acc;
    }
    if (acc > 0)
      for (size_t i = 0; i < n; i++) f[i] /= acc;
    strcat(s->desc, " chunks");
  }
  if (sh->churn_ok && lgi_gen_unif(r) < 0.3) {
    double pmax = n / 5.0 < 24 ? n / 5.0 : 24;
    double c = U(r, 0.5, 2);
    if (lgi_gen_unif(r) < 0.3) {
      add_aliased_saw(r, n, u, f, c, I(r, 0, 3), lgi_gen_unif(r) < 0.4);
      strcat(s->desc, " churn-aliased");
    } else {
      saw_init(r, &w, U(r, 3, pmax), I(r, 0, 3));
      for (size_t i = 0; i < n; i++) f[i] += c * saw_at(&w, u[i]);
      strcat(s->desc, " churn");
    }
  }
  sh->sigma = U(r, 0.01, 0.2);
  sh->spike_h = 0.3;
}

static void shape_accelerating(SHAPE_ARGS) {
  saw_t w;
  double us = lgi_gen_unif(r) < 0.7 ? 0 : U(r, 0.05, 0.25);
  int ex = lgi_gen_unif(r) < 0.5;
  double p = 2 + 2 * pow(lgi_gen_unif(r), 3), k = U(r, 3, 7); /* p dense near 2 */
  double a = lgi_gen_unif(r) < 0.5 ? U(r, 0, 0.25) : 0;
  for (size_t i = 0; i < n; i++) {
    double x = u[i] > us ? (u[i] - us) / (1 - us) : 0;
    double g = ex ? (exp(k * x) - 1) / (exp(k) - 1) : pow(x, p);
    f[i] = a * x + (1 - a) * g;
  }
  if (sh->churn_ok && lgi_gen_unif(r) < 0.15) {
    saw_init(r, &w, U(r, 3, n / 5.0 < 24 ? n / 5.0 : 24), I(r, 0, 2));
    double c = U(r, 0.2, 0.6);
    for (size_t i = 0; i < n; i++) f[i] += c * saw_at(&w, u[i]);
    strcat(s->desc, " churn");
  }
  sh->sigma = U(r, 0.01, 0.1);
  sh->spike_h = 0.3;
}

static void shape_step(SHAPE_ARGS) {
  int kmax = (int)(n / 8) < 12 ? (int)(n / 8) : 12;
  kmax = kmax < 2 ? 2 : kmax;
  int K = I(r, 2, kmax);
  double at[12], size[12];
  if (lgi_gen_unif(r) < 0.6) {
    double E = 1.0 / (K + U(r, 0.2, 1)), ph = U(r, 0.1, 0.9) * E;
    for (int k = 0; k < K; k++) at[k] = ph + k * E;
    strcat(s->desc, " regular");
  } else {
    for (int k = 0; k < K; k++) { /* sorted uniform positions, min separation */
      at[k] = (k + U(r, 0.1, 0.9)) / K * 0.9 + 0.05;
    }
  }
  double width = lgi_gen_unif(r) < 0.8 ? 0 : U(r, 0.5, 2.5) / n;
  for (int k = 0; k < K; k++) size[k] = U(r, 0.5, 1.5) / K;
  for (size_t i = 0; i < n; i++) {
    f[i] = 0;
    for (int k = 0; k < K; k++) f[i] += size[k] * ramp(u[i], at[k], width);
  }
  sh->sigma = U(r, 0.02, 0.15) / K;
  sh->spike_h = 1.0 / K;
  char b[16];
  snprintf(b, sizeof b, " K=%d", K);
  strcat(s->desc, b);
}

static void shape_plateau(SHAPE_ARGS) {
  saw_t w;
  /* growth ends by u in [0.15, 0.6], or early (a cache filled at start-up) over
   * at least 4 samples */
  double emin = 4.0 / (double)n > 0.03 ? 4.0 / (double)n : 0.03;
  int early = emin < 0.15 && lgi_gen_unif(r) < 0.3;
  double up = early ? U(r, emin, 0.15) : U(r, 0.15, 0.6);
  double u0 = early || lgi_gen_unif(r) < 0.6 ? 0 : U(r, 0, 0.1);
  if (early) strcat(s->desc, " early");
  if (n >= 16 && lgi_gen_unif(r) < 0.15) {
    /* filled at once at start-up: done by sample k (1-2, up to 2 % of the series),
     * one jump at the very start and flat after - one level shift, not a step leak */
    int kmax = (int)(0.02 * (double)n) > 2 ? (int)(0.02 * (double)n) : 2;
    int k = I(r, 1, kmax);
    u0 = 0;
    up = u[k];
    strcat(s->desc, " instant");
  }
  double x = lgi_gen_unif(r);
  for (size_t i = 0; i < n; i++) {
    if (x < 0.4) f[i] = ramp(u[i], u0, up - u0);
    else if (x < 0.8) f[i] = u[i] > u0 ? 1 - exp(-3 * (u[i] - u0) / (up - u0)) : 0;
    else f[i] = 1 / (1 + exp(-(u[i] - (u0 + up) / 2) / ((up - u0) / 8)));
  }
  if (sh->churn_ok && lgi_gen_unif(r) < 0.15) {
    saw_init(r, &w, U(r, 3, n / 5.0 < 24 ? n / 5.0 : 24), I(r, 0, 2));
    double c = U(r, 0.1, 0.5);
    for (size_t i = 0; i < n; i++) f[i] += c * saw_at(&w, u[i]);
    strcat(s->desc, " churn");
  }
  sh->sigma = U(r, 0.01, 0.15);
  sh->spike_h = 0.3;
}

static void shape_sawtooth(SHAPE_ARGS) {
  saw_t w;
  /* batches faster than (or near) the sampling; under 32 samples such a curve
   * cannot be told from noise, so it is not generated there */
  if (lgi_gen_unif(r) < 0.3 && n >= 32) {
    int irr = lgi_gen_unif(r) < 0.4, kind = irr ? 0 : I(r, 0, 3);
    for (size_t i = 0; i < n; i++) f[i] = 0;
    double P = 0;
    char b[48];
    if (lgi_gen_unif(r) < 0.4) {
      /* step-synchronised sampling: the program marks a step after each flush and
       * the recorder snapshots at every marker, so most samples sit on the floor
       * just after a flush (a little of the next batch in), the rest are interval
       * snapshots at a random phase, up to the batch peak */
      double pf = U(r, 0.5, 0.88), eps = U(r, 0, 0.15), duty = U(r, 0.3, 0.7);
      kind = irr ? 0 : (lgi_gen_unif(r) < 0.5 ? 0 : I(r, 1, 3));
      for (size_t i = 0; i < n; i++) {
        double ca = irr ? LU(r, 0.35, 2.1) : U(r, 0.85, 1.15);
        f[i] = lgi_gen_unif(r) < pf ? ca * U(r, 0, eps) : ca * saw_shape(kind, duty, U(r, 0, 1));
      }
      snprintf(b, sizeof b, " stepsync pf=%.2f%s", pf, irr ? " irregular" : "");
    } else {
      P = add_aliased_saw(r, n, u, f, 1.0, kind, irr);
      snprintf(b, sizeof b, " aliased P=%.2f%s", P, irr ? " irregular" : "");
    }
    sh->aliased = 1;
    strcat(s->desc, b);
    sh->sigma = U(r, 0.01, 0.15);
    sh->spike_h = 0.3;
    return;
  }
  double pmax = n / 6.0 < 24 ? n / 6.0 : 24;
  int kind = lgi_gen_unif(r) < 0.5 ? 0 : I(r, 1, 3);
  int irr = lgi_gen_unif(r) < 0.3; /* irregular batches, down to ~3 samples each */
  if (irr) {
    kind = 0;
    pmax = n / 4.0 < 24 ? n / 4.0 : 24;
    strcat(s->desc, " irregular");
  }
  saw_init_irr(r, &w, U(r, 2, pmax > 2 ? pmax : 2), kind, irr);
  for (size_t i = 0; i < n; i++) f[i] = saw_at(&w, u[i]);
  sh->sigma = U(r, 0.01, 0.15);
  sh->spike_h = 0.3;
}

/* Start-up before a leak, the per-site form, noise, spikes, teardown: 1 for a per-site
 * curve. */
static int add_nuisances(lgi_gen_rng_t *r, lgi_gen_series_t *s, int label, size_t n, const double *u, double *f,
                         shape_t *sh) {
  /* Start-up before a leak: the program builds its working set in the first moments
   * of the run (a quick rise over 1 sample up to 8 % of the run, by 5 % to 80 % of the
   * leak's growth), then leaks. The rise belongs to the start-up, not to the leak's
   * shape: a linear leak stays linear, not a step leak. */
  if (lg_pattern_is_leak((lg_pattern_t)label) && n >= 16 && lgi_gen_unif(r) < 0.25) {
    int kmax = (int)(0.08 * (double)n) > 1 ? (int)(0.08 * (double)n) : 1;
    double wu = u[I(r, 1, kmax)], m = LU(r, 0.05, 0.8);
    int sat = lgi_gen_unif(r) < 0.5;
    for (size_t i = 0; i < n; i++) f[i] += m * (sat ? 1 - exp(-4 * u[i] / wu) : ramp(u[i], 0, wu));
    strcat(s->desc, " warmup");
  }
  /* A per-site curve (one allocation site's live bytes, as the detector sees it):
   * nearly noiseless (only that site's own blocks move it), starts near zero,
   * quantised to about its block size, no rss. */
  int site = label != LG_PATTERN_STABLE && label != LG_PATTERN_FRAGMENTATION && lgi_gen_unif(r) < 0.2;
  if (site) {
    sh->sigma *= U(r, 0, 0.1);
    strcat(s->desc, " site");
  }
  if (label != LG_PATTERN_STABLE && label != LG_PATTERN_FRAGMENTATION) add_noise(r, n, u, f, sh->sigma);
  if (lgi_gen_unif(r) < 0.25) {
    add_spikes(r, n, f, sh->spike_h);
    strcat(s->desc, " spikes");
  }
  /* Teardown: the program frees its data at exit, so the last sample (or two) falls
   * below the starting level. Any class. */
  if (n >= 16 && lgi_gen_unif(r) < 0.12) {
    double lo = f[0], hi = f[0];
    for (size_t i = 1; i < n; i++) {
      lo = f[i] < lo ? f[i] : lo;
      hi = f[i] > hi ? f[i] : hi;
    }
    size_t k = lgi_gen_unif(r) < 0.75 ? 1 : 2;
    double to = lo - U(r, 0, 0.3) * (hi - lo);
    for (size_t i = n - k; i < n; i++) f[i] = to;
    strcat(s->desc, " teardown");
  }

  return site;
}

/* The shape in bytes, in place; *B_out the baseline; returns the live range. */
static double to_bytes(lgi_gen_rng_t *r, size_t n, double *f, const shape_t *sh, int site, double *B_out) {
  /* Bytes: baseline B, amplitude A (relative to B over several decades). */
  double B = LU(r, 1e4, 1e10);
  /* Amplitude from 0.001 % of the level (a slow leak or the noise of a constant table
   * on a large process) to 20x (a floor near zero). An aliased saw-tooth is a visible
   * part of the memory (>= 5 % of the level): smaller batches, seen between the teeth,
   * are indistinguishable from noise. The jitter of a constant table stays under 1 %. */
  double A = B * (sh->aliased ? LU(r, 0.05, 20) : (sh->jitter ? LU(r, 1e-5, 0.01) : LU(r, 1e-5, 20)));
  double q = lgi_gen_unif(r) < 0.2 ? (A > 1e6 ? 4096 : 1) : 0;
  if (site) { /* from (near) zero, in blocks of about A / n */
    A = LU(r, 1e4, 1e9);
    B = A * U(r, 0, 0.3);
    q = A * U(r, 0.2, 1.0) / (double)n;
  }
  double live_range = A * range_of(f, n);
  for (size_t i = 0; i < n; i++) {
    double x = B + A * f[i];
    x = x < 0 ? 0 : x;
    f[i] = q > 0 ? q * floor(x / q) : x;
  }

  *B_out = B;
  return live_range;
}

/* rss beside live (s->v): always for fragmentation, half the time otherwise. */
static void add_rss(lgi_gen_rng_t *r, lgi_gen_series_t *s, int label, const double *u, int site, double B,
                    double live_range) {
  size_t n = s->n;
  const double *f = s->v;
  s->has_rss = label == LG_PATTERN_FRAGMENTATION || (!site && lgi_gen_unif(r) < 0.5);
  if (s->has_rss) {
    double over = B * U(r, 0.05, 1.0) + LU(r, 1e5, 1e7);
    double mode = lgi_gen_unif(r);
    double hw = 0;
    if (label == LG_PATTERN_FRAGMENTATION) {
      double base = B + over;
      double G = base * LU(r, 0.1, 1.5);
      double lo = U(r, 2, 5) * live_range;
      G = G < lo ? lo : G;
      double kappa = lgi_gen_unif(r) < 0.3 ? 0 : U(r, 0.5, 1.0);
      double gk = lgi_gen_unif(r), qx = U(r, 0.4, 0.8), us = lgi_gen_unif(r) < 0.7 ? 0 : U(r, 0.05, 0.3);
      int K = I(r, 3, 10);
      for (size_t i = 0; i < n; i++) {
        double x = u[i] > us ? (u[i] - us) / (1 - us) : 0, g;
        if (gk < 0.4) g = x;
        else if (gk < 0.7) g = pow(x, qx);
        else g = floor(x * K + 0.999) / K;
        hw = f[i] > hw ? f[i] : hw;
        double lv = kappa > 0 ? kappa * (f[i] - B) : (hw - B);
        s->rss[i] = base + lv + G * g + 0.01 * G * lgi_gen_normal(r);
      }
      strcat(s->desc, gk < 0.4 ? " rss=lin" : (gk < 0.7 ? " rss=concave" : " rss=steps"));
    } else {
      double warm = B * U(r, 0.05, 0.5), tau = U(r, 0.02, 0.08);
      /* high-water mark, sometimes with allocator overhead on top (rss then grows by
       * up to 2x live's range, below the fragmentation threshold) */
      double hwk = lgi_gen_unif(r) < 0.5 ? 1.0 : U(r, 1.0, 2.0);
      /* lag: memory reserved in one go becomes resident only as it is written, so
       * rss follows live's high-water mark with a delay (and may sit below live) */
      double lag = U(r, 0.02, 0.15), lagged = 0;
      for (size_t i = 0; i < n; i++) {
        hw = f[i] > hw || i == 0 ? f[i] : hw;
        double x;
        if (mode < 0.4) x = f[i] + over;
        else if (mode < 0.65) x = hw + (hwk - 1) * (hw - f[0]) + over;
        else if (mode < 0.85) x = f[i] + over + warm * (1 - exp(-u[i] / tau));
        else {
          lagged = i ? lagged + (hw - lagged) * (1 - exp(-(u[i] - u[i - 1]) / lag)) : f[0];
          x = lagged + over;
        }
        s->rss[i] = x * (1 + 0.002 * lgi_gen_normal(r));
      }
      strcat(s->desc,
             mode < 0.4 ? " rss=track" : (mode < 0.65 ? " rss=hwm" : (mode < 0.85 ? " rss=warm" : " rss=lag")));
    }
  }
}

/* A start gap, then the times in a random origin and unit, into s->t. */
static void finish_times(lgi_gen_rng_t *r, lgi_gen_series_t *s, double *u) {
  size_t n = s->n;
  /* Start gap: the recorder's first snapshot is taken while the program is still
   * starting up, so the first interval is long and nothing happens during it (the
   * values keep their shape; only the times move). */
  if (n >= 16 && lgi_gen_unif(r) < 0.25) {
    double extra = LU(r, 0.5, 10) * u[1];
    for (size_t i = 1; i < n; i++) u[i] = (u[i] + extra) / (1 + extra);
    strcat(s->desc, " startgap");
  }

  /* Times: random origin and unit. */
  double t0 = lgi_gen_unif(r) < 0.5 ? 0 : (lgi_gen_unif(r) < 0.5 ? U(r, 1.6e9, 1.8e9) : U(r, 0, 1e4));
  double dt = LU(r, 1e-2, 1e3);
  for (size_t i = 0; i < n; i++) s->t[i] = t0 + u[i] * dt * (double)n;
  for (size_t i = 1; i < n; i++) /* guard rounding at large origins */
    if (!(s->t[i] > s->t[i - 1])) s->t[i] = nextafter(s->t[i - 1], INFINITY);
}

void lgi_gen_generate(uint64_t seed, int label, lgi_gen_series_t *s) {
  lgi_gen_rng_t rr, *r = &rr;
  lgi_gen_seed(r, seed);
  memset(s->desc, 0, sizeof s->desc);
  size_t n = lgi_gen_unif(r) < 0.1 ? (size_t)I(r, 8, 23) : (size_t)LU(r, 24, 2049);
  n = n > LGI_GEN_MAXN ? LGI_GEN_MAXN : (n < 8 ? 8 : n);
  s->n = n;
  s->label = label;
  snprintf(s->desc, sizeof s->desc, "%s n=%zu", lg_pattern_name((lg_pattern_t)label), n);

  double *u = s->t, *f = s->v; /* reuse the output arrays as scratch */
  make_times(r, n, u, s->desc, sizeof s->desc);
  shape_t sh = {.churn_ok = n >= 60};
  switch (label) {
  case LG_PATTERN_STABLE:
  case LG_PATTERN_FRAGMENTATION: shape_stable(r, s, n, u, f, &sh, label); break;
  case LG_PATTERN_LINEAR_LEAK: shape_linear(r, s, n, u, f, &sh); break;
  case LG_PATTERN_ACCELERATING_LEAK: shape_accelerating(r, s, n, u, f, &sh); break;
  case LG_PATTERN_STEP_LEAK: shape_step(r, s, n, u, f, &sh); break;
  case LG_PATTERN_PLATEAU: shape_plateau(r, s, n, u, f, &sh); break;
  case LG_PATTERN_SAWTOOTH:
  default: shape_sawtooth(r, s, n, u, f, &sh); break;
  }
  int site = add_nuisances(r, s, label, n, u, f, &sh);
  double B, live_range = to_bytes(r, n, f, &sh, site, &B);
  add_rss(r, s, label, u, site, B, live_range);
  finish_times(r, s, u);
}
