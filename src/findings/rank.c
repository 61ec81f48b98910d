/* SPDX-License-Identifier: MIT */
/*
 * rank.c - how growing sites are ranked (strongest first) and which growth is too small
 * to be called a leak (docs/detection.md, "Minor growth"); the array of sites.
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>

#include "findings/impl.h"

int lgr_is_minor(double growth, double rate, double size, double blocks_gained, double tto) {
  double rel = size > 0 ? growth / size : 1;
  int slow = (isnan(tto) || tto > LGR_MINOR_OOM_S) && !(rate > 0 && size / rate < LGR_MINOR_DOUBLING_S);
  if (rel < LGR_MINOR_REL && slow) return 1;                                  /* tiny against the process */
  if (blocks_gained < LGR_MINOR_BLOCKS && rel < LGR_FEW_BLOCKS_REL) return 1; /* a handful of first uses */
  return 0;
}

/* A site's stacks, highest peak first (sites.c, spread.c). */
int lgr_cmp_stackref(const void *a, const void *b) {
  const lgr_stackref_t *x = a, *y = b;
  if (x->peak_live_bytes != y->peak_live_bytes) return x->peak_live_bytes < y->peak_live_bytes ? 1 : -1;
  if (x->live_bytes != y->live_bytes) return x->live_bytes < y->live_bytes ? 1 : -1;
  return (x->stack > y->stack) - (x->stack < y->stack);
}

static int cmp_strength(const void *a, const void *b) {
  const lgr_site_t *x = a, *y = b;
  if (x->strength != y->strength) return x->strength < y->strength ? 1 : -1;
  if (x->r.growth_bytes_per_s != y->r.growth_bytes_per_s)
    return x->r.growth_bytes_per_s < y->r.growth_bytes_per_s ? 1 : -1;
  return (x->live_bytes < y->live_bytes) - (x->live_bytes > y->live_bytes);
}

/* Ranks growing sites, strongest first. The growth rate alone would put first a step
 * seen in the last tenth of a second of a short run (two sampled blocks give a large
 * rate over a short span) above a leak that grew for the whole run. The key weighs the
 * rate by the detector's confidence and by how long the growth was seen:
 *   strength = rate x confidence x span / (span + tau),
 * span = the analysed growing part (until_s - since_s), tau = a tenth of the longest
 * such span among the sites ranked together, at least 1 s. Growth seen over many tau
 * counts at its full rate; growth seen for a moment counts a fraction of it. */
void lgr_rank_sites(lgr_site_t *s, int n) {
  double longest = 0;
  for (int i = 0; i < n; i++) {
    double span = s[i].r.until_s - s[i].r.since_s;
    if (isfinite(span) && span > longest) longest = span;
  }
  double tau = fmax(1.0, 0.1 * longest);
  for (int i = 0; i < n; i++) {
    double span = s[i].r.until_s - s[i].r.since_s, rate = s[i].r.growth_bytes_per_s;
    double conf = isfinite(s[i].r.confidence) ? fmin(1, fmax(0, s[i].r.confidence)) : 0;
    if (!isfinite(span) || span < 0) span = 0;
    s[i].strength = isfinite(rate) && rate > 0 ? rate * conf * span / (span + tau) : 0;
  }
  if (n > 1) qsort(s, (size_t)n, sizeof *s, cmp_strength);
}

int lgr_push_site(lgr_site_t **arr, int *n, int *cap, const lgr_site_t *s) {
  if (*n == *cap) { /* the capacity grows only with the array */
    int nc = *cap ? *cap * 2 : 16;
    lgr_site_t *a = realloc(*arr, (size_t)nc * sizeof *a);
    if (!a) {
      lgr_fail(-ENOMEM); /* the site would be missing from the report */
      return -ENOMEM;
    }
    *arr = a;
    *cap = nc;
  }
  (*arr)[(*n)++] = *s;
  return 0;
}
