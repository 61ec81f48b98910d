/* SPDX-License-Identifier: MIT */
/*
 * render.h - the renderers: each format draws the findings (findings/report.h) alone,
 * through one signature, and says what it needs built. `report`, `run` and `attach`
 * find a format here by name (--format); no renderer reads the database.
 */
#ifndef LG_OUTPUT_RENDER_H
#define LG_OUTPUT_RENDER_H

#include <stdio.h>

#include "findings/diff.h"
#include "findings/report.h"

typedef struct lgo_render_opts {
  int top;            /* suspects to show (text, JSON, the HTML page's report), 0: 10 */
  const char *source; /* what was recorded, for a header (the pool profile, diff: the database's path) */
  const char *base;   /* diff: the database compared against (OLD) */
} lgo_render_opts_t;

/* 0, or -ENOMEM (nothing useful written), -EIO (a failed write). */
typedef int (*lgo_render_fn)(FILE *f, const lgr_report_t *r, const lgo_render_opts_t *o);
/* The same for `leakguard diff`'s comparison (o->base: OLD, o->source: NEW). */
typedef int (*lgo_diff_fn)(FILE *f, const lgr_diff_t *d, const lgo_render_opts_t *o);

typedef struct lgo_format {
  const char *name; /* the --format value */
  lgo_render_fn render;
  lgo_diff_fn diff; /* NULL: not a format of `leakguard diff` */
  int recording;    /* needs lgr_options_t.recording: every stack, location and module */
  int generations;  /* needs lgr_options_t.generations: every site's lifetime */
  int binary;       /* not for a terminal (gzip) */
  const char *what; /* what it writes, for messages ("the pprof profile") */
} lgo_format_t;

/* The format called name, or NULL. */
const lgo_format_t *lgo_format(const char *name);
/* The format names, comma-separated with a final "or" ("text, json, ... or pool-profile"). */
const char *lgo_format_names(void);
/* lgr_options_t asks the findings for what f draws. */
void lgo_format_options(const lgo_format_t *f, lgr_options_t *o);

/* The renderers: text, folded and pool-profile in render_text.c, json in
 * render_json.c, html in render_html.c, diff in render_diff.c, pprof in pprof.c; the
 * table in render.c. */
int lgo_render_text(FILE *f, const lgr_report_t *r, const lgo_render_opts_t *o);
int lgo_render_json(FILE *f, const lgr_report_t *r, const lgo_render_opts_t *o);
int lgo_render_folded(FILE *f, const lgr_report_t *r, const lgo_render_opts_t *o);
int lgo_render_pool_profile(FILE *f, const lgr_report_t *r, const lgo_render_opts_t *o);
int lgo_render_pprof(FILE *f, const lgr_report_t *r, const lgo_render_opts_t *o);
int lgo_render_html(FILE *f, const lgr_report_t *r, const lgo_render_opts_t *o);
int lgo_render_diff_text(FILE *f, const lgr_diff_t *d, const lgo_render_opts_t *o);
int lgo_render_diff_json(FILE *f, const lgr_diff_t *d, const lgo_render_opts_t *o);

#endif
