/* SPDX-License-Identifier: MIT */
/*
 * peak.c - the largest live sites at their process's peak that do not grow
 * (lgr_report_t.at_peak): what the text report lists as "Largest live sites at the
 * peak", and what the HTML page's site table shows sorted by its peak column.
 *
 * The sites that do not grow (lgr_report_t.others) are judged at the end, after an
 * exit's teardown: a 30-MiB table held all run and freed at exit holds nothing there
 * and was never listed. Here every stack's live bytes at the snapshot where its process
 * held the most (its last sample at or before it, as recording.c reads them for the
 * HTML page and pprof's peak_inuse_space) are summed by site, keyed as sites.c keys
 * them; a site with a stack among the growing ones (suspects, minor growth) is left
 * out. A site that is also among the others takes its shape, lifetime and holders'
 * bound from there, and whether it grew then released (lgr_released: a site that held
 * nothing at the end is among the others for that alone); one freed by the end and not
 * among them was not judged (lgr_site_t.unjudged).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/strmap.h"
#include "findings/impl.h"

#define TOP 5 /* as many as the others kept (build.c), and every bounded one */

/* One site of one process at its peak. */
typedef struct cand {
  int proc, pid, stack; /* stack: its largest at the peak (its frames are shown) */
  int64_t bytes, stack_bytes;
  char space[16];
  int other;   /* the same site in the others, -1: none */
  int growing; /* a stack of it grows (a suspect's or minor growth's) */
} cand_t;

typedef struct tag {
  int stack, tag; /* tag: -1 growing, else an index into the others */
} tag_t;

static int cmp_tag(const void *a, const void *b) {
  const tag_t *x = a, *y = b;
  if (x->stack != y->stack) return (x->stack > y->stack) - (x->stack < y->stack);
  return (x->tag > y->tag) - (x->tag < y->tag); /* growing (-1) first */
}

static int cmp_cand(const void *a, const void *b) {
  const cand_t *x = a, *y = b;
  if (x->bytes != y->bytes) return x->bytes < y->bytes ? 1 : -1;
  if (x->proc != y->proc) return (x->proc > y->proc) - (x->proc < y->proc);
  return (x->stack > y->stack) - (x->stack < y->stack);
}

/* The stacks of proc's sites: growing ones tagged -1, the others' by their index. */
static int tag_stacks(const lgr_report_t *r, const lgr_site_t *others, int nothers, int proc, tag_t **out, size_t *n) {
  size_t cap = 0;
  *out = NULL;
  *n = 0;
  for (int set = 0; set < 3; set++) {
    const lgr_site_t *a = set == 0 ? r->suspects : set == 1 ? r->minor : others;
    int na = set == 0 ? r->nsuspects : set == 1 ? r->nminor : nothers;
    for (int i = 0; i < na; i++) {
      if (a[i].proc != proc) continue;
      for (int k = 0; k < a[i].nstacks; k++) {
        if (*n == cap) {
          size_t nc = cap ? cap * 2 : 256;
          tag_t *t = realloc(*out, nc * sizeof *t);
          if (!t) return -ENOMEM;
          *out = t;
          cap = nc;
        }
        (*out)[(*n)++] = (tag_t){a[i].stacks[k].stack, set == 2 ? i : -1};
      }
    }
  }
  if (*n > 1) qsort(*out, *n, sizeof **out, cmp_tag);
  return 0;
}

typedef struct cands {
  cand_t *c;
  int n, cap;
} cands_t;

/* Adds one stack's live bytes at the peak to its site among proc's candidates (from
 * first on); map keys them. */
static int add_stack(sqlite3 *db, sqlite3_stmt *sk, const lgr_run_t *u, int stack, int64_t bytes, const tag_t *tags,
                     size_t ntags, cands_t *cs, int first, lgu_strmap_t *map, const lgr_loc_t **lv) {
  sqlite3_bind_int(sk, 2, stack);
  char space[16] = "host", key[1100];
  int nl = 0;
  if (lgr_row(sk)) {
    const char *sp = (const char *)sqlite3_column_text(sk, 1);
    if (sp) snprintf(space, sizeof space, "%s", sp);
    const char *locs = (const char *)sqlite3_column_text(sk, 0);
    nl = locs ? lgr_stack_locs(db, u->proc, locs, lv, LGR_MAX_FRAMES) : 0;
  }
  lgr_site_key(key, sizeof key, lv, nl, space);
  sqlite3_reset(sk);
  if (!key[0]) return 0;
  if (cs->n == cs->cap) {
    int nc = cs->cap ? cs->cap * 2 : 64;
    cand_t *c = realloc(cs->c, (size_t)nc * sizeof *c);
    if (!c) return -ENOMEM;
    cs->c = c;
    cs->cap = nc;
  }
  int added = 0, idx = lgu_strmap_get_or_add(map, key, cs->n - first, &added);
  if (idx < 0) return -ENOMEM;
  cand_t *c = &cs->c[first + idx];
  if (added) {
    memset(c, 0, sizeof *c);
    c->proc = u->proc;
    c->pid = u->pid;
    c->stack = stack;
    c->other = -1;
    snprintf(c->space, sizeof c->space, "%s", space);
    cs->n++;
  }
  c->bytes += bytes;
  if (bytes > c->stack_bytes) c->stack_bytes = bytes, c->stack = stack;
  size_t lo = 0, hi = ntags; /* the first tag of the stack */
  while (lo < hi) {
    size_t mid = (lo + hi) / 2;
    if (tags[mid].stack < stack) lo = mid + 1;
    else hi = mid;
  }
  for (; lo < ntags && tags[lo].stack == stack; lo++) {
    if (tags[lo].tag < 0) c->growing = 1;
    else if (c->other < 0) c->other = tags[lo].tag;
  }
  return 0;
}

/* The candidates of one process: its sites at its peak snapshot. */
static int proc_cands(sqlite3 *db, const lgr_report_t *r, const lgr_run_t *u, const lgr_site_t *others, int nothers,
                      cands_t *cs) {
  sqlite3_stmt *pk = NULL, *st = NULL, *sk = NULL;
  tag_t *tags = NULL;
  size_t ntags = 0;
  lgu_strmap_t map = {0};
  const lgr_loc_t **lv = malloc(LGR_MAX_FRAMES * sizeof *lv);
  int rc = lv ? tag_stacks(r, others, nothers, u->proc, &tags, &ntags) : -ENOMEM, first = cs->n;
  /* a database without these tables has no list (a failure to read is lgr_row's) */
  int ok = rc == 0 &&
           lgr_prepare(db, "SELECT seq FROM snapshots WHERE proc=? ORDER BY live_bytes DESC, seq LIMIT 1", -1, &pk,
                       NULL) == SQLITE_OK &&
           lgr_prepare(db, "SELECT stack, live_bytes FROM samples WHERE proc=? AND seq<=? ORDER BY stack, seq", -1, &st,
                       NULL) == SQLITE_OK &&
           lgr_prepare(db, "SELECT locs, space FROM stacks WHERE proc=? AND stack=?", -1, &sk, NULL) == SQLITE_OK;
  if (ok) {
    sqlite3_bind_int(pk, 1, u->proc);
    if (lgr_row(pk)) {
      sqlite3_bind_int(st, 1, u->proc);
      sqlite3_bind_int64(st, 2, sqlite3_column_int64(pk, 0));
      sqlite3_bind_int(sk, 1, u->proc);
      int cur = -1, have = 0;
      int64_t last = 0;
      for (;;) { /* the last sample of each stack at or before the peak */
        int more = lgr_row(st), stack = more ? sqlite3_column_int(st, 0) : -1;
        if (have && (!more || stack != cur) && last > 0)
          rc = add_stack(db, sk, u, cur, last, tags, ntags, cs, first, &map, lv);
        if (!more || rc) break;
        cur = stack;
        have = 1;
        last = sqlite3_column_int64(st, 1);
      }
    }
  }
  sqlite3_finalize(pk);
  sqlite3_finalize(st);
  sqlite3_finalize(sk);
  lgu_strmap_free(&map);
  free(tags);
  free(lv);
  return rc;
}

/* A listed site: its largest stack's frames, and what the others know of it. */
static void make_site(sqlite3 *db, const lgr_options_t *o, const cand_t *c, const lgr_site_t *others, lgr_site_t *s) {
  memset(s, 0, sizeof *s);
  s->proc = c->proc;
  s->pid = c->pid;
  s->stack = c->stack;
  s->leak = -1;
  s->device = -1;
  s->life.gen = -1;
  s->peak_proc_bytes = c->bytes;
  snprintf(s->space, sizeof s->space, "%s", c->space);
  if (c->other >= 0) {
    const lgr_site_t *x = &others[c->other];
    s->live_bytes = x->live_bytes;
    s->live_blocks = x->live_blocks;
    s->peak_live_bytes = x->peak_live_bytes;
    s->r = x->r;
    s->life = x->life;
    s->startup = x->startup;
    s->device = x->device;
    s->bounded = lgr_bound_dup(x->bounded);
    s->released = x->released;
    s->released_first_bytes = x->released_first_bytes;
    s->released_peak_bytes = x->released_peak_bytes;
    s->released_end_bytes = x->released_end_bytes;
    s->released_peak_s = x->released_peak_s;
  } else {
    s->unjudged = 1;
  }
  lgr_load_frames(db, s, o->native);
}

int lgr_wrapper_image(const lgr_run_t *u) {
  return u->end_reason && !strcmp(u->end_reason, "exec") && u->duration_s < LGR_HELPER_S;
}

int lgr_peak_sites(sqlite3 *db, const lgr_options_t *o, lgr_report_t *r, const lgr_site_t *others, int nothers) {
  cands_t cs = {0};
  int rc = 0;
  /* an image that never began recording has no sites; a wrapper's image that exec'd at
   * once held its start-up for a moment (bash's hash_create, env's locale data: issue
   * #35), not the program's memory */
  for (int i = 0; rc == 0 && i < r->nruns; i++)
    if (r->runs[i].lazy != LGR_LAZY_WAITING && !lgr_wrapper_image(&r->runs[i]))
      rc = proc_cands(db, r, &r->runs[i], others, nothers, &cs);
  int keep = 0;
  for (int i = 0; rc == 0 && i < cs.n; i++)
    if (!cs.c[i].growing) cs.c[keep++] = cs.c[i];
  if (keep > 1) qsort(cs.c, (size_t)keep, sizeof *cs.c, cmp_cand);
  int cap = 0;
  for (int i = 0; rc == 0 && i < keep; i++) {
    if (i >= TOP && (cs.c[i].other < 0 || !others[cs.c[i].other].bounded)) continue;
    lgr_site_t s;
    make_site(db, o, &cs.c[i], others, &s);
    if (lgr_push_site(&r->at_peak, &r->nat_peak, &cap, &s)) lgr_site_free(&s);
  }
  free(cs.c);
  if (rc) lgr_fail(rc); /* a site missing from the list: the report fails, as for any other */
  return rc;
}
