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

#define LGI_GEN_MAXN 2048

enum lgi_gen_split { LGI_GEN_TRAIN = 0, LGI_GEN_VAL = 1, LGI_GEN_TEST = 2 };

typedef struct lgi_gen_rng {
  uint64_t s[4];
} lgi_gen_rng_t;

typedef struct lgi_gen_series {
  size_t n;
  int label; /* lg_pattern_t */
  int has_rss;
  char desc[160]; /* generator variant, for debugging */
  double t[LGI_GEN_MAXN], v[LGI_GEN_MAXN], rss[LGI_GEN_MAXN];
} lgi_gen_series_t;

/* Seeds r deterministically from seed (splitmix64 expansion). */
void lgi_gen_seed(lgi_gen_rng_t *r, uint64_t seed);
/* Next 64 random bits. */
uint64_t lgi_gen_next(lgi_gen_rng_t *r);
/* Uniform double in [0, 1). */
double lgi_gen_unif(lgi_gen_rng_t *r);
/* Standard normal deviate (Box-Muller, one value per call). */
double lgi_gen_normal(lgi_gen_rng_t *r);

/* Generates series number index of split into s (label = index % LG_PATTERN_COUNT). */
void lgi_gen_make(int split, uint64_t index, lgi_gen_series_t *s);

/* Generates one series of the given label from seed. */
void lgi_gen_generate(uint64_t seed, int label, lgi_gen_series_t *s);

/* Name of a split: "train", "val", "test"; NULL if unknown. Parses back with
 * lgi_gen_split_parse (returns -1 if unknown). */
const char *lgi_gen_split_name(int split);
int lgi_gen_split_parse(const char *name);

#endif
