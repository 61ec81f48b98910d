/* SPDX-License-Identifier: MIT */
/*
 * diff.h - compares the reports of two recorded runs (`leakguard diff OLD NEW`), for
 * CI: which allocation sites leak in NEW and did not in OLD, which leak faster, which
 * were fixed (docs/diff.md).
 *
 * Sites are matched by what they are in the program, never by address (addresses move
 * with every build and every run): the memory space and the site frame's function,
 * file and line; a site whose line moved (code added above it) is matched by space,
 * function and file when exactly one site of the other run has them. A site that
 * leaks in several processes of a run (ranks, workers) is one entry: its fastest
 * process.
 */
#ifndef LG_OUTPUT_DIFF_H
#define LG_OUTPUT_DIFF_H

#include <stdio.h>

#include "findings/report.h"

typedef enum lgdf_kind {
  LGDF_NEW,       /* leaks in NEW; not in OLD */
  LGDF_WORSE,     /* leaks in both, faster in NEW by the worse ratio or more */
  LGDF_UNCHANGED, /* leaks in both, not that much faster */
  LGDF_FIXED,     /* leaked in OLD; not in NEW */
} lgdf_kind_t;

/* What a site is in one of the two runs. */
typedef enum lgdf_state {
  LGDF_ABSENT, /* not among the sites the report lists (no growth, or too small to list) */
  LGDF_STABLE, /* listed, not growing (largest non-leaking sites, start-up, bounded) */
  LGDF_MINOR,  /* growing, too little to be a leak (docs/detection.md, "Minor growth") */
  LGDF_LEAK,   /* a suspect */
} lgdf_state_t;

typedef struct lgdf_entry {
  lgdf_kind_t kind;
  const lgr_site_t *old_site, *new_site; /* into the reports; NULL when absent */
  lgdf_state_t old_state, new_state;
  int line_moved; /* 1: matched by function and file, the line differs */
  double ratio;   /* new rate / old rate for sites that leak in both, else NaN */
  int per_step;   /* 1: the rates compared are per step (both runs mark steps) */
} lgdf_entry_t;

typedef struct lgdf {
  lgdf_entry_t *e; /* new, worse, fixed, unchanged; each group fastest first */
  int n;
  int count[4]; /* by lgdf_kind_t */
} lgdf_t;

/* The default worse ratio: a site that leaks 1.5 times as fast is worse. */
#define LGDF_WORSE_RATIO 1.5

/* Compares two built reports (they must outlive the result). 0 or -ENOMEM. */
int lgdf_compare(const lgr_report_t *old_r, const lgr_report_t *new_r, double worse_ratio, lgdf_t *out);
void lgdf_free(lgdf_t *d);

/* "regressed" (a new or worse leak), "improved" (only fixes), or "same". */
const char *lgdf_verdict(const lgdf_t *d);
void lgdf_print_text(FILE *f, const lgdf_t *d, const char *old_path, const char *new_path);
/* 0, or -ENOMEM (nothing printed). */
int lgdf_print_json(FILE *f, const lgdf_t *d, const char *old_path, const char *new_path, double worse_ratio);

#endif
