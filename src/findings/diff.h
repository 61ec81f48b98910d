/* SPDX-License-Identifier: MIT */
/*
 * diff.h - compares the findings of two recorded runs (`leakguard diff OLD NEW`), for
 * CI: which allocation sites leak in NEW and did not in OLD, which leak faster, which
 * were fixed (docs/diff.md).
 *
 * Sites are matched by what they are in the program, never by address (addresses move
 * with every build and every run): the memory space and the site frame's function,
 * file and line; a site whose line moved (code added above it) is matched by space,
 * function and file when exactly one site of the other run has them. A site that
 * leaks in several processes of a run (ranks, workers) is one entry: its fastest
 * process. Entries are sites; each kind also counts its leaks (causes: a list node and
 * its payload are two sites of one leak), as the report does.
 */
#ifndef LG_FINDINGS_DIFF_H
#define LG_FINDINGS_DIFF_H

#include "findings/report.h"

typedef enum lgr_diff_kind {
  LGR_DIFF_NEW,       /* leaks in NEW; not in OLD */
  LGR_DIFF_WORSE,     /* leaks in both, faster in NEW by the worse ratio or more */
  LGR_DIFF_UNCHANGED, /* leaks in both, not that much faster */
  LGR_DIFF_FIXED,     /* leaked in OLD; not in NEW */
} lgr_diff_kind_t;

/* What a site is in one of the two runs. */
typedef enum lgr_diff_state {
  LGR_DIFF_ABSENT, /* not among the sites the report lists (no growth, or too small to list) */
  LGR_DIFF_STABLE, /* listed, not growing (largest non-leaking sites, start-up, bounded) */
  LGR_DIFF_MINOR,  /* growing, too little to be a leak (docs/detection.md, "Minor growth") */
  LGR_DIFF_LEAK,   /* a suspect */
} lgr_diff_state_t;

typedef struct lgr_diff_entry {
  lgr_diff_kind_t kind;
  const lgr_site_t *old_site, *new_site; /* into the reports; NULL when absent */
  lgr_diff_state_t old_state, new_state;
  int line_moved; /* 1: matched by function and file, the line differs */
  double ratio;   /* new rate / old rate for sites that leak in both, else NaN */
  int per_step;   /* 1: the rates compared are per step (both runs mark steps) */
} lgr_diff_entry_t;

typedef struct lgr_diff {
  lgr_diff_entry_t *e; /* new, worse, fixed, unchanged; each group fastest first */
  int n;
  int count[4];       /* sites, by lgr_diff_kind_t */
  int leaks[4];       /* leaks (causes, as the report counts them) among those sites */
  double worse_ratio; /* the ratio compared with */
} lgr_diff_t;

/* The default worse ratio: a site that leaks 1.5 times as fast is worse. */
#define LGR_DIFF_WORSE_RATIO 1.5

/* Compares two built reports (they must outlive the result). 0 or -ENOMEM. */
int lgr_diff_compare(const lgr_report_t *old_r, const lgr_report_t *new_r, double worse_ratio, lgr_diff_t *out);
void lgr_diff_free(lgr_diff_t *d);

/* "regressed" (a new or worse leak), "improved" (only fixes), or "same". */
const char *lgr_diff_verdict(const lgr_diff_t *d);
/* For the renderers (output/render_diff.c): a site's own frame (NULL: none), the last
 * two components of a path (builds of the same code in two checkouts differ above them),
 * whether a site's growth is counted per step, its growth per step or per second. */
const lgr_frame_t *lgr_diff_frame(const lgr_site_t *s);
/* The entry's leak in its run's report (NEW's; OLD's for a fixed one): an index into its
 * lgr_report_t.leaks, -1 when none. */
int lgr_diff_leak(const lgr_diff_entry_t *e);
const char *lgr_diff_path_tail(const char *p);
int lgr_diff_has_steps(const lgr_site_t *s);
double lgr_diff_rate(const lgr_site_t *s, int per_step);

#endif
