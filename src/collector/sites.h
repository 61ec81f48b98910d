/* SPDX-License-Identifier: MIT */
/*
 * sites.h - the collector's live view of allocation sites (collector layer).
 *
 * The recorder interns call stacks; a program reaches one allocation site (a Python
 * line, a native function and line) through many of them. The report merges the stacks
 * of a site when it is built from the database (findings/build.c); while the program
 * runs, this module does the same for the live analysis: each symbolized stack is
 * assigned to its site group, the groups' summed live bytes are sampled at every live
 * tick, and the detector (lgd_analyze_recent) runs on the groups. A group is *flagged*
 * the first time it grows significantly (the report's "minor growth" rule applies); the
 * flag time is what the report calls detected_after_s.
 *
 * Each group keeps two series: the whole run, decimated (lgd_series_t), and the last
 * LGC_RECENT ticks at full resolution, so that a leak that begins late in a long run is
 * flagged within a few ticks of its start, not after the history's resolution.
 */
#ifndef LG_COLLECTOR_SITES_H
#define LG_COLLECTOR_SITES_H

#include <stdint.h>

#include "analysis/detect.h"
#include "core/model.h"

#define LGC_RECENT 64

typedef struct lgc_group {
  char *key;              /* what makes the site: function, file, line, module, space */
  char *label;            /* "function (file:line)" for people */
  char *frames_json;      /* the site's first frames (JSON array), for suspects files */
  uint32_t rep_stack;     /* its first stack */
  unsigned space, device; /* lg_space_t, and the GPU ordinal of a GPU space */
  double live;            /* summed live bytes at the last tick */
  double peak;
  lgd_series_t hist;              /* the whole run (decimated, floors kept); empty until it mattered */
  lgd_point_t recent[LGC_RECENT]; /* ring of the last ticks */
  int nrecent, head;
  double t_tracked;     /* first tick it was tracked */
  lgd_result_t r;       /* the last analysis */
  int growing;          /* 1 when the last analysis found significant growth */
  int flagged;          /* 1 once it was */
  double flag_t;        /* when the current episode of growth was first flagged (s since the process started) */
  int quiet;            /* analyses since it last grew */
  int nstacks, nimport; /* stacks assigned, and those under a module import */
  int python;           /* its site is a Python line: its stacks have Python frames */
} lgc_group_t;

typedef struct lgc_sites {
  lgc_group_t *g;
  int n, cap;
  int32_t *group_of; /* per stack id: group index, -1 not assigned yet */
  uint32_t nstacks;
  void *index; /* key -> group (private) */
} lgc_sites_t;

void lgc_sites_init(lgc_sites_t *s);
void lgc_sites_free(lgc_sites_t *s);

/* Assigns a (symbolized) stack to the group of key, creating it with label and
 * frames_json (both copied), space and device; in_import: the stack runs under a
 * module import (lgr_is_import_frame); python: the key is a Python line (the stack
 * has Python frames). 0 or -ENOMEM. */
int lgc_sites_assign(lgc_sites_t *s, uint32_t stack, const char *key, const char *label, const char *frames_json,
                     unsigned space, unsigned device, int in_import, int python);

/* One live tick at t seconds (process clock): sums the sites' live bytes per group and
 * appends a point to the groups that hold 16 KiB or more, or did once. */
void lgc_sites_tick(lgc_sites_t *s, double t, double step, const lgm_site_t *sites, uint32_t nsites);

/* Analyses every tracked group: fills g->r and g->growing (significant growth, with
 * the process's live_bytes now and headroom bytes for the minor-growth rule), and
 * sets g->flagged / g->flag_t when an episode of growth begins (the first growth, or
 * growth again after a quiet spell). Returns the number of groups flagged by this call. */
int lgc_sites_analyse(lgc_sites_t *s, double t, double live_bytes, double headroom);

#endif
