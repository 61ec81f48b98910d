/* SPDX-License-Identifier: MIT */
/*
 * impl.h - what the pieces of the findings share: build.c (building, runs and
 * frames), sites.c (per-site analysis), spread.c (growth spread over sites), life.c
 * (lifetimes), holders.c (what keeps a site's memory), leaks.c (leaks), gpu.c (GPU
 * memory), recording.c (every stack, for the formats that draw them all) and site.c
 * (sites' memory), and the numbers of the significance rule (docs/detection.md,
 * "Minor growth").
 */
#ifndef LG_FINDINGS_IMPL_H
#define LG_FINDINGS_IMPL_H

#include <sqlite3.h>

#include "findings/report.h"

/* Below this growth over the run a site is never a suspect (bytes). */
#define LGR_MIN_GROWTH_BYTES LGD_MIN_GROWTH_BYTES
/* Minor growth, either way:
 *  - tiny against the process: the growth is under LGR_MINOR_REL of the process's
 *    typical live memory (the median of its snapshots), at its rate the memory limit is
 *    more than LGR_MINOR_OOM_S away and the process would take more than
 *    LGR_MINOR_DOUBLING_S to double;
 *  - a handful of first uses: fewer than LGR_MINOR_BLOCKS blocks gained, together
 *    under LGR_FEW_BLOCKS_REL of the process's typical live memory. */
#define LGR_MINOR_REL 0.02
#define LGR_MINOR_OOM_S 86400.0
#define LGR_MAX_COUNTER (1LL << 56) /* a sample's bytes or blocks beyond: damaged database */
#define LGR_MINOR_DOUBLING_S 1200.0
#define LGR_MINOR_BLOCKS 8
#define LGR_FEW_BLOCKS_REL 0.25

/* Failures while the report is built. A query that stops with an error, or an
 * allocation that fails, must fail the whole report instead of leaving a shorter one
 * that looks complete: row loops step with lgr_row() and failed allocations call
 * lgr_fail(); lgr_build() checks at the end. One report is built at a time per thread. */
int lgr_row(sqlite3_stmt *st);  /* sqlite3_step: 1 for a row, 0 when done or failed */
int lgr_step(sqlite3_stmt *st); /* sqlite3_step, recording a failure */
/* sqlite3_prepare_v2, recording SQLITE_NOMEM (other errors are the caller's: a table
 * that older databases lack is not a failure) */
int lgr_prepare(sqlite3 *db, const char *sql, int n, sqlite3_stmt **st, const char **tail);
void lgr_fail(int err); /* records -ENOMEM, -EIO... (the first one is kept) */
/* The same with the reason lgr_build says (a damaged row: which one, what is wrong). */
void lgr_fail_why(int err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* A statement prepared once per build and reset for each use (NULL when it cannot be
 * prepared: a table that an older database lacks); lgr_build finalizes them all. */
enum { LGR_STMT_STACK_LOCS, LGR_STMT_HOLDERS_LATEST, LGR_STMT_HOLDERS, LGR_STMT_COUNT };
sqlite3_stmt *lgr_cached(sqlite3 *db, int which, const char *sql);
void lgr_cache_clear(void);
int lgr_failed(void);              /* the failure recorded (-errno), 0: none */
const char *lgr_failure_why(void); /* its reason, "" when none was given */
/* The failure recorded (0: none), cleared: for printers that read the database after
 * lgr_build (the HTML page's stacks) through the same helpers. */
int lgr_take_failure(void);

/* leaks.c: why each leak of Python code has no holder (the explains table). */
void lgr_explain_gaps(sqlite3 *db, lgr_report_t *r);

/* reader.c */
char *lgr_dupstr(const unsigned char *s); /* a column's text ("" for NULL); lgr_fail on ENOMEM */
char *lgr_strdup(const char *s);          /* NULL for NULL; lgr_fail on ENOMEM */

/* site.c: the memory of sites and what they own */
/* Frees what a site owns and zeroes it. */
void lgr_site_free(lgr_site_t *s);
void lgr_holder_free(lgr_holder_t *h); /* what h owns, h zeroed */
/* A copy of h without its details (a leak's holder); NULL and lgr_fail on ENOMEM. */
lgr_holder_t *lgr_holder_dup(const lgr_holder_t *h);
lgr_bound_t *lgr_bound_dup(const lgr_bound_t *b); /* NULL for NULL; lgr_fail on ENOMEM */
void lgr_bound_free(lgr_bound_t *b);

/* frames.c */
int lgr_load_frames(sqlite3 *db, lgr_site_t *s, int native);
/* The locations of a stack of process proc, from its stacks.locs text (a JSON array of
 * ids), innermost first: up to max pointers into a per-build cache (lgr_frames_clear
 * frees it). Unknown ids (a damaged database) are left out. Returns the count. */
int lgr_stack_locs(sqlite3 *db, int proc, const char *locs_text, const lgr_loc_t **out, int max);
void lgr_frames_clear(void);
/* The key of a stack's allocation site from its locations lv[0..nl) (Python frames first
 * as recorded) and its space (NULL: host): the program's own Python line, else the native
 * site frame; "" without frames. Sites of one key are one site (sites.c, peak.c). */
void lgr_site_key(char *key, size_t len, const lgr_loc_t **lv, int nl, const char *space);
/* The index in lv[0..nl) (a stack of process proc, Python frames first as recorded) of
 * the frame its site is named by, as lgr_site_key keys it; *lib: the innermost frame
 * passed over to reach it (library code, a system library, a wrapper), -1 when none.
 * -1 without frames. Loads the process's locations and headline (lgr_stack_locs). */
int lgr_stack_site(sqlite3 *db, int proc, const lgr_loc_t **lv, int nl, int *lib);
int lgr_parse_locs(const char *text, int64_t *ids, int max);
/* The text of line `line` of file, trimmed, or NULL (the file is not here). */
char *lgr_source_line(const char *file, int line);

/* headline.c: the native site's headline, the user's frame first (docs/detection.md). */
/* Loads what the headline of process proc needs (its modules, its wrappers found by
 * their shape in its stacks) from its locations v[0..nv), ids from lo; frames.c calls it
 * when it loads them. */
void lgr_headline_load(sqlite3 *db, int proc, const lgr_loc_t *v, size_t nv, int64_t lo);
void lgr_headline_clear(void);
/* From k, the native site frame (lgr_site_frame), outwards: the first frame in the
 * program's own objects that is neither machinery nor one of its allocation wrappers;
 * k when there is none (or at the first Python frame). For the process loaded last. */
int lgr_headline(const void *frames, int n, int k, lgr_frame_at_fn at);
/* --own paths for this build (report options and the run's meta), and their test. */
int lgr_own_add(const char *path);
void lgr_own_clear(void);

/* rank.c */
void lgr_rank_sites(lgr_site_t *s, int n);
int lgr_push_site(lgr_site_t **arr, int *n, int *cap, const lgr_site_t *s);
/* qsort order of a site's lgr_stackref_t: highest peak first (sites.c, spread.c). */
int lgr_cmp_stackref(const void *a, const void *b);

/* sites.c and spread.c: the per-process analysis state. */
/* A change of one stack's live bytes and blocks at snapshot seq. */
typedef struct delta {
  int64_t seq;
  double bytes, blocks;
} delta_t;

/* A site while the samples are read. */
typedef struct acc {
  char space[16];
  lgr_stackref_t *st;
  int nst, cst;
  delta_t *d;
  size_t nd, cd;
  int64_t live_blocks;
  uint64_t alloc_bytes, alloc_blocks;
  double alloc_blocks_an; /* the blocks allocated by the end of the analysed part */
  int has_oldest;
  int64_t oldest;
  double *val, *blk; /* merged series at each snapshot (built after reading) */
  struct {
    int stack;
    size_t from, len;
  } * rng; /* each stack's deltas, d[from..from+len), in seq order */
  int nrng;
} acc_t;

/* Per-process analysis state. */
/* Stacks with freed blocks by age: their ids, ascending, and their blocks by bucket. */
typedef struct lgr_agetab {
  int n;
  int *stack;
  double (*cnt)[LGR_AGES];
} lgr_agetab_t;

typedef struct pctx {
  sqlite3 *db;
  lgr_run_t *run;
  const lgr_options_t *o;
  lgr_report_t *r;
  double min_growth;
  int64_t nsnap;
  double *t, *step; /* per snapshot seq (NaN t: missing) */
  int64_t last_an;  /* the last snapshot of the analysed part (before the exit), -1 none */
  acc_t *sites;
  int nsites, csites;
  double *flag_t; /* per stack id: first live flag (s after start), NaN none */
  int nflag;
  lgr_agetab_t ages[2]; /* freed blocks by age in ticks (lifetimes), in steps (step_lifetimes) */
  double headroom;
} pctx_t;

/* series.c: the detector's series from a dense per-snapshot array v: the process's life
 * until it began to exit. */
void lgr_series_of(const pctx_t *c, const double *v, lgd_series_t *ser);
/* Analyses the merged series v (blk: its blocks, or NULL) of site s. */
void lgr_analyse_series(const pctx_t *c, const double *v, const double *blk, lgr_site_t *s, lgd_series_t *ser);
/* After lgr_analyse_series, for a site that does not grow: whether its merged series v
 * grew then released (lgr_site_t.released; docs/detection.md, rule 7). */
void lgr_released(const pctx_t *c, const double *v, lgr_site_t *s);
/* sites.c: whether at least half of the growth of the sites accs[0..nacc) over
 * [from_t, until_t] comes from stacks that are a leak on their own series or too small
 * to judge alone (not a staircase of fills, docs/detection.md). */
int lgr_composition_ok(const pctx_t *c, const acc_t *const *accs, int nacc, double from_t, double until_t,
                       lgd_series_t *ser);
/* The lifetime of a site's blocks (docs/lifetimes.md) from its blocks per snapshot and
 * the blocks it had allocated by the end of the analysed part (acc_t.alloc_blocks_an). */
void lgr_site_life(const pctx_t *c, const double *blk, double alloc_blocks_an, int64_t end_blocks, lgr_life_t *l);
/* The lifetime distribution of the stacks (from c's lifetimes) into l; alloc_blocks
 * and kept_blocks: the site's blocks allocated, and live at the end. */
void lgr_site_ages(const pctx_t *c, const lgr_stackref_t *stacks, int nstacks, double alloc_blocks, double kept_blocks,
                   lgr_life_t *l);
/* The percentiles of l from l->freed, over alloc_blocks blocks of which kept_blocks
 * outlived the run. */
void lgr_life_percentiles(lgr_life_t *l, double alloc_blocks, double kept_blocks);
/* life.c: the lifetimes (steps 0) or step_lifetimes (steps 1) table of the
 * process into c->ages; each stack of site s gets its lifetime (the HTML site table);
 * s's row of liblgpool's site profile. */
void lgr_load_ages(pctx_t *c, int steps);
void lgr_add_stack_lives(pctx_t *c, const lgr_site_t *s);
void lgr_add_genrow(pctx_t *c, const lgr_site_t *s);
/* The first live flag of any of the site's stacks (s after start), NaN: none. */
double lgr_site_flag(const pctx_t *c, const lgr_site_t *s);
/* 1 when the site's stack runs under a module import (lgr_is_import_frame). */
int lgr_in_import(const lgr_site_t *s);
/* spread.c: growth spread over many sites; used[i]: site i already a suspect. */
void lgr_find_spread(pctx_t *c, lgd_series_t *ser, int *used);

/* sites.c */
int lgr_analyse_proc(sqlite3 *db, lgr_run_t *run, const lgr_options_t *o, lgr_report_t *r, lgr_site_t **others,
                     int *nothers, int *ocap);

/* holders.c: s->holders from the latest explain of its stacks; the bound of a site
 * mostly held through full bounded containers (a plateau), or NULL. */
void lgr_load_holders(sqlite3 *db, lgr_site_t *s);
lgr_bound_t *lgr_full_bound(const lgr_site_t *s);

/* leaks.c */
void lgr_group_leaks(lgr_report_t *r);
void lgr_free_leaks(lgr_report_t *r);
void lgr_analyse_leaks(lgr_report_t *r);
/* Each leak's fix in one line (fix.c, docs/fixes.md), after holders and gaps. */
void lgr_fix_hints(lgr_report_t *r);
void lgr_split_minor(lgr_report_t *r);

/* recording.c: lgr_report_t.rec (after the analysis: each stack's share of growth). */
/* lgr_report_t.at_peak, from the others before they are cut to the largest (peak.c) */
int lgr_peak_sites(sqlite3 *db, const lgr_options_t *o, lgr_report_t *r, const lgr_site_t *others, int nothers);
/* A helper (build.c) lived under LGR_HELPER_S or never began to record. */
#define LGR_HELPER_S 1.0
/* 1 for a wrapper's image (peak.c): it replaced itself (exec) within LGR_HELPER_S, and
 * what it held went with it (a `bash -c` launcher's, a shebang's `env`). */
int lgr_wrapper_image(const lgr_run_t *u);

int lgr_load_recording(sqlite3 *db, lgr_report_t *r);
void lgr_free_recording(lgr_recording_t *rec);

/* gpu.c */
int lgr_gpu_site_device(sqlite3 *db, const lgr_site_t *s);
void lgr_gpu_site_um(sqlite3 *db, lgr_site_t *s);
double lgr_gpu_headroom(const lgr_report_t *r, const lgr_site_t *s, double host_headroom);
void lgr_load_gpus(sqlite3 *db, lgr_report_t *r);

#endif
