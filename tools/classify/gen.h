/* SPDX-License-Identifier: MIT */
/*
 * gen.h - labelled synthetic memory curves for training and evaluating the pattern
 * classifier (used by lg-gen-dataset, lg-train, lg-eval-classifier and the tests).
 *
 * Every series is a pure function of (split, index): the label is index % 7, and
 * all randomness comes from a xoshiro256** generator seeded from a hash of
 * (split, index). The splits use disjoint seed ranges, so train, validation and
 * test never share a series. Label definitions are in docs/classifier.md.
 */
#ifndef LG_TOOLS_CLASSIFY_GEN_H
#define LG_TOOLS_CLASSIFY_GEN_H

#include <stddef.h>
#include <stdint.h>

#define LGG_MAXN 2048

enum lgg_split { LGG_TRAIN = 0, LGG_VAL = 1, LGG_TEST = 2 };

typedef struct lgg_rng {
  uint64_t s[4];
} lgg_rng_t;

typedef struct lgg_series {
  size_t n;
  int label;                 /* lg_pattern_t */
  int has_rss;
  char desc[96];             /* generator variant, for debugging */
  double t[LGG_MAXN], v[LGG_MAXN], rss[LGG_MAXN];
} lgg_series_t;

/* Seeds r deterministically from seed (splitmix64 expansion). */
void lgg_seed(lgg_rng_t *r, uint64_t seed);
/* Next 64 random bits. */
uint64_t lgg_next(lgg_rng_t *r);
/* Uniform double in [0, 1). */
double lgg_unif(lgg_rng_t *r);
/* Standard normal deviate (Box-Muller, one value per call). */
double lgg_normal(lgg_rng_t *r);

/* Generates series number index of split into s (label = index % LG_PATTERN_COUNT). */
void lgg_make(int split, uint64_t index, lgg_series_t *s);

/* Generates one series of the given label from seed. */
void lgg_generate(uint64_t seed, int label, lgg_series_t *s);

/* Name of a split: "train", "val", "test"; NULL if unknown. Parses back with
 * lgg_split_parse (returns -1 if unknown). */
const char *lgg_split_name(int split);
int lgg_split_parse(const char *name);

#endif
