/* SPDX-License-Identifier: MIT */
/*
 * recording.c - the whole recording for the formats that draw every stack (pprof,
 * folded stacks, the HTML page's flame graphs and site table): each stack that held or
 * allocated memory with its values, every location and every module (report.h,
 * lgr_recording_t). Read after the analysis: a stack's share of its leaking site's
 * growth comes from the suspects.
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "findings/impl.h"

static int cmp_stk(const void *a, const void *b) {
  const lgr_stackval_t *x = a, *y = b;
  if (x->proc != y->proc) return x->proc < y->proc ? -1 : 1;
  return x->stack < y->stack ? -1 : x->stack > y->stack;
}

static lgr_stackval_t *find_stk(lgr_recording_t *rec, int proc, int stack) {
  if (!rec->nstacks) return NULL;
  lgr_stackval_t key = {.proc = proc, .stack = stack};
  return bsearch(&key, rec->stacks, rec->nstacks, sizeof key, cmp_stk);
}

static int cmp_loc(const void *a, const void *b) {
  const lgr_loc_t *x = a, *y = b;
  if (x->proc != y->proc) return x->proc < y->proc ? -1 : 1;
  return x->loc < y->loc ? -1 : x->loc > y->loc;
}

/* Grows an array of elements of size sz to hold one more; 0 or -ENOMEM. */
static int grow(void **v, size_t n, size_t *cap, size_t sz, size_t first) {
  if (n < *cap) return 0;
  size_t nc = *cap ? *cap * 2 : first;
  void *nv = realloc(*v, nc * sz);
  if (!nv) return -ENOMEM;
  *v = nv;
  *cap = nc;
  return 0;
}

static char *dup_col(sqlite3_stmt *st, int c) {
  const unsigned char *t = sqlite3_column_text(st, c);
  return strdup(t ? (const char *)t : "");
}

static int done(sqlite3_stmt *st, int rc, int step) {
  sqlite3_finalize(st);
  if (rc) return rc;
  return step == SQLITE_DONE ? 0 : step == SQLITE_NOMEM ? -ENOMEM : -EIO;
}

static int load_locs(sqlite3 *db, lgr_recording_t *rec) {
  sqlite3_stmt *st;
  if (sqlite3_prepare_v2(db,
                         "SELECT proc, loc, ip, module, function, file, line, inlined FROM locations"
                         " ORDER BY proc, loc",
                         -1, &st, NULL) != SQLITE_OK)
    return -EIO;
  size_t cap = 0;
  int rc = 0, step;
  while ((step = sqlite3_step(st)) == SQLITE_ROW) {
    if ((rc = grow((void **)&rec->locs, rec->nlocs, &cap, sizeof *rec->locs, 4096))) break;
    lgr_loc_t *l = &rec->locs[rec->nlocs++];
    memset(l, 0, sizeof *l);
    l->proc = sqlite3_column_int(st, 0);
    l->loc = sqlite3_column_int64(st, 1);
    l->ip = (uint64_t)sqlite3_column_int64(st, 2);
    l->module = dup_col(st, 3);
    l->function = dup_col(st, 4);
    l->file = dup_col(st, 5);
    l->line = sqlite3_column_int(st, 6);
    l->inlined = sqlite3_column_int(st, 7);
    if (!l->module || !l->function || !l->file) {
      rc = -ENOMEM;
      break;
    }
  }
  return done(st, rc, step);
}

static int load_modules(sqlite3 *db, lgr_recording_t *rec) {
  sqlite3_stmt *st;
  if (sqlite3_prepare_v2(db, "SELECT proc, path, start, end FROM modules ORDER BY proc, start", -1, &st, NULL) !=
      SQLITE_OK)
    return -EIO;
  size_t cap = 0;
  int rc = 0, step;
  while ((step = sqlite3_step(st)) == SQLITE_ROW) {
    if ((rc = grow((void **)&rec->modules, rec->nmodules, &cap, sizeof *rec->modules, 256))) break;
    lgr_module_t *m = &rec->modules[rec->nmodules++];
    m->proc = sqlite3_column_int(st, 0);
    m->start = (uint64_t)sqlite3_column_int64(st, 2);
    m->end = (uint64_t)sqlite3_column_int64(st, 3);
    if (!(m->path = dup_col(st, 1))) {
      rc = -ENOMEM;
      break;
    }
  }
  return done(st, rc, step);
}

/* The frames of stack s from its stacks.locs text: indexes of the locations it names
 * (ids without a row, in a damaged database, are left out). */
static int resolve_frames(lgr_recording_t *rec, lgr_stackval_t *s, const char *text, int64_t *ids) {
  int n = lgr_parse_locs(text, ids, LGR_MAX_FRAMES);
  if (n <= 0) return 0;
  if (!(s->frames = malloc((size_t)n * sizeof *s->frames))) return -ENOMEM;
  for (int j = 0; j < n; j++) {
    lgr_loc_t key = {.proc = s->proc, .loc = ids[j]};
    const lgr_loc_t *l = rec->nlocs ? bsearch(&key, rec->locs, rec->nlocs, sizeof key, cmp_loc) : NULL;
    if (l) s->frames[s->nframes++] = (int)(l - rec->locs);
  }
  return 0;
}

/* The stacks that ever held or allocated memory, with their values at the end (their
 * last sample) and the frame their site is named by. A sample of a stack the stacks
 * table lacks is kept, unstored. */
static int load_stacks(sqlite3 *db, lgr_recording_t *rec) {
  const char *sql =
      "SELECT s.proc, s.stack, s.live_bytes, s.live_blocks, s.alloc_bytes, s.alloc_blocks, k.locs, k.space,"
      " k.stack IS NOT NULL"
      " FROM samples s JOIN (SELECT proc, stack, max(seq) m, max(live_bytes) peak FROM samples"
      " GROUP BY proc, stack) l ON s.proc = l.proc AND s.stack = l.stack AND s.seq = l.m"
      " LEFT JOIN stacks k ON k.proc = s.proc AND k.stack = s.stack"
      " WHERE l.peak > 0 OR s.alloc_bytes > 0 ORDER BY s.proc, s.stack";
  sqlite3_stmt *st;
  if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) != SQLITE_OK) return -EIO;
  int64_t *ids = malloc(LGR_MAX_FRAMES * sizeof *ids);
  const lgr_loc_t **lv = malloc(LGR_MAX_FRAMES * sizeof *lv);
  size_t cap = 0;
  int rc = ids && lv ? 0 : -ENOMEM, step = SQLITE_DONE;
  while (rc == 0 && (step = sqlite3_step(st)) == SQLITE_ROW) {
    if ((rc = grow((void **)&rec->stacks, rec->nstacks, &cap, sizeof *rec->stacks, 1024))) break;
    lgr_stackval_t *s = &rec->stacks[rec->nstacks++];
    memset(s, 0, sizeof *s);
    s->site = s->lib = -1;
    s->proc = sqlite3_column_int(st, 0);
    s->stack = sqlite3_column_int(st, 1);
    for (int k = 0; k < 4; k++) {
      s->v[k] = sqlite3_column_int64(st, 2 + k);
      if (s->v[k] > LGR_MAX_COUNTER) rc = -EBADMSG; /* what no recorder writes */
    }
    s->stored = sqlite3_column_int(st, 8);
    const unsigned char *sp = sqlite3_column_text(st, 7);
    if (!(s->space = strdup(sp ? (const char *)sp : "host"))) rc = -ENOMEM;
    if (rc == 0) rc = resolve_frames(rec, s, (const char *)sqlite3_column_text(st, 6), ids);
    if (rc == 0) { /* the site it belongs to, named as the report names sites */
      int n = s->nframes < LGR_MAX_FRAMES ? s->nframes : LGR_MAX_FRAMES;
      for (int k = 0; k < n; k++) lv[k] = &rec->locs[s->frames[k]];
      s->site = lgr_stack_site(db, s->proc, lv, n, &s->lib);
    }
  }
  free(ids);
  free(lv);
  return done(st, rc, step);
}

/* Live bytes of every stack at its process's peak snapshot: the last sample at or
 * before it (samples are written when they change), read in the primary key's order
 * (proc, stack, seq), one pass per process. */
static int load_peak(sqlite3 *db, lgr_recording_t *rec) {
  sqlite3_stmt *pk, *st;
  if (sqlite3_prepare_v2(db,
                         "SELECT p.proc, (SELECT seq FROM snapshots x WHERE x.proc = p.proc"
                         " ORDER BY x.live_bytes DESC, x.seq LIMIT 1) FROM processes p",
                         -1, &pk, NULL) != SQLITE_OK)
    return -EIO;
  if (sqlite3_prepare_v2(db, "SELECT stack, live_bytes FROM samples WHERE proc = ? AND seq <= ? ORDER BY stack, seq",
                         -1, &st, NULL) != SQLITE_OK) {
    sqlite3_finalize(pk);
    return -EIO;
  }
  int rc = 0, step;
  while (rc == 0 && (step = sqlite3_step(pk)) == SQLITE_ROW) {
    if (sqlite3_column_type(pk, 1) == SQLITE_NULL) continue; /* no snapshot */
    int proc = sqlite3_column_int(pk, 0);
    sqlite3_bind_int(st, 1, proc);
    sqlite3_bind_int64(st, 2, sqlite3_column_int64(pk, 1));
    lgr_stackval_t *cur = NULL;
    int cur_stack = -1, s2;
    while ((s2 = sqlite3_step(st)) == SQLITE_ROW) {
      int stack = sqlite3_column_int(st, 0);
      if (stack != cur_stack) {
        cur_stack = stack;
        cur = find_stk(rec, proc, stack);
      }
      if (cur) cur->v[LGR_SV_PEAK] = sqlite3_column_int64(st, 1); /* the last one stays */
    }
    if (s2 != SQLITE_DONE) rc = -EIO;
    sqlite3_reset(st);
  }
  if (rc == 0 && step != SQLITE_DONE) rc = -EIO;
  sqlite3_finalize(pk);
  sqlite3_finalize(st);
  return rc;
}

/* The growth of each leaking site, shared among its stacks by their live bytes at the
 * end (evenly when none holds any). */
static void add_growth(const lgr_report_t *r, lgr_recording_t *rec) {
  for (int i = 0; i < r->nsuspects; i++) {
    const lgr_site_t *s = &r->suspects[i];
    double rate = s->r.growth_bytes_per_s, sum = 0;
    if (!isfinite(rate) || rate <= 0 || s->nstacks <= 0) continue;
    for (int k = 0; k < s->nstacks; k++) sum += s->stacks[k].live_bytes > 0 ? (double)s->stacks[k].live_bytes : 0;
    for (int k = 0; k < s->nstacks; k++) {
      lgr_stackval_t *x = find_stk(rec, s->proc, s->stacks[k].stack);
      if (!x) continue;
      double w = sum > 0 ? (s->stacks[k].live_bytes > 0 ? (double)s->stacks[k].live_bytes : 0) / sum : 1.0 / s->nstacks;
      x->v[LGR_SV_GROWTH] += (int64_t)llround(rate * w);
    }
  }
}

int lgr_load_recording(sqlite3 *db, lgr_report_t *r) {
  lgr_recording_t *rec = &r->rec;
  int rc = load_locs(db, rec);
  if (rc == 0) rc = load_modules(db, rec);
  if (rc == 0) rc = load_stacks(db, rec);
  if (rc == 0) rc = load_peak(db, rec);
  if (rc == 0) add_growth(r, rec);
  return rc;
}

void lgr_free_recording(lgr_recording_t *rec) {
  for (size_t i = 0; i < rec->nstacks; i++) {
    free(rec->stacks[i].space);
    free(rec->stacks[i].frames);
  }
  for (size_t i = 0; i < rec->nlocs; i++) {
    free(rec->locs[i].function);
    free(rec->locs[i].file);
    free(rec->locs[i].module);
  }
  for (size_t i = 0; i < rec->nmodules; i++) free(rec->modules[i].path);
  free(rec->stacks);
  free(rec->locs);
  free(rec->modules);
  memset(rec, 0, sizeof *rec);
}
