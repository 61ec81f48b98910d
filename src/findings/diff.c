/* SPDX-License-Identifier: MIT */
/* diff.c - two runs' reports compared site by site (diff.h, docs/diff.md). */
#include "findings/diff.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* One listed site of a report with what it is there. */
typedef struct row {
  const lgr_site_t *s;
  lgr_diff_state_t state;
  int used; /* already in an entry */
} row_t;

typedef struct rows {
  row_t *r;
  int n;
} rows_t;

const lgr_frame_t *lgr_diff_frame(const lgr_site_t *s) {
  return s->nframes > 0 && s->site_frame >= 0 && s->site_frame < s->nframes ? &s->frames[s->site_frame] : NULL;
}

/* The last two components of a path ("app/x.c"): builds of the same code in two
 * checkouts (CI's clean clones) differ above them. */
const char *lgr_diff_path_tail(const char *p) {
  const char *last = strrchr(p, '/');
  if (!last) return p;
  const char *q = last;
  while (q > p && q[-1] != '/') q--;
  return q > p ? q : p;
}

/* 1 when a and b are the same site: space, function and file (the module when there is
 * no file), and the line unless any_line. */
static int same_site(const lgr_site_t *a, const lgr_site_t *b, int any_line) {
  const lgr_frame_t *x = lgr_diff_frame(a), *y = lgr_diff_frame(b);
  if (!x || !y || strcmp(a->space, b->space) || !a->spread_sites != !b->spread_sites) return 0;
  if (strcmp(x->function, y->function)) return 0;
  if (x->file[0] || y->file[0]) {
    if (strcmp(lgr_diff_path_tail(x->file), lgr_diff_path_tail(y->file))) return 0;
  } else if (strcmp(x->module, y->module)) {
    return 0;
  }
  return any_line || x->line == y->line;
}

static int add_rows(rows_t *rs, const lgr_site_t *arr, int n, lgr_diff_state_t st) {
  if (n <= 0) return 0;
  row_t *nr = realloc(rs->r, (size_t)(rs->n + n) * sizeof *nr);
  if (!nr) return -ENOMEM;
  rs->r = nr;
  for (int i = 0; i < n; i++) {
    int dup = 0; /* the same site in another process: the first (fastest) stands for it */
    for (int k = 0; k < rs->n && !dup; k++) dup = rs->r[k].state == st && same_site(rs->r[k].s, &arr[i], 0);
    if (!dup) rs->r[rs->n++] = (row_t){&arr[i], st, 0};
  }
  return 0;
}

static int collect(const lgr_report_t *r, rows_t *rs) {
  memset(rs, 0, sizeof *rs);
  if (add_rows(rs, r->suspects, r->nsuspects, LGR_DIFF_LEAK) || add_rows(rs, r->minor, r->nminor, LGR_DIFF_MINOR) ||
      add_rows(rs, r->others, r->nothers, LGR_DIFF_STABLE)) {
    free(rs->r);
    rs->r = NULL;
    return -ENOMEM;
  }
  return 0;
}

/* The row of rs that is site s: the same line first (a leak before minor growth before
 * a stable site), else, when every candidate with its function and file is at one line,
 * that one (the line moved). */
static row_t *find(rows_t *rs, const lgr_site_t *s, int *moved) {
  *moved = 0;
  for (int st = LGR_DIFF_LEAK; st >= LGR_DIFF_STABLE; st--)
    for (int k = 0; k < rs->n; k++)
      if (rs->r[k].state == (lgr_diff_state_t)st && same_site(rs->r[k].s, s, 0)) return &rs->r[k];
  row_t *only = NULL;
  for (int k = 0; k < rs->n; k++) {
    if (!same_site(rs->r[k].s, s, 1)) continue;
    if (only && lgr_diff_frame(only->s)->line != lgr_diff_frame(rs->r[k].s)->line) return NULL; /* which one? */
    if (!only || rs->r[k].state > only->state) only = &rs->r[k];
  }
  if (only) *moved = 1;
  return only;
}

int lgr_diff_leak(const lgr_diff_entry_t *e) {
  const lgr_site_t *s = e->kind == LGR_DIFF_FIXED ? e->old_site : e->new_site;
  return s ? s->leak : -1;
}

int lgr_diff_has_steps(const lgr_site_t *s) {
  return isfinite(s->r.growth_bytes_per_step) && s->r.growth_bytes_per_step > 0;
}

double lgr_diff_rate(const lgr_site_t *s, int per_step) {
  return per_step ? s->r.growth_bytes_per_step : s->r.growth_bytes_per_s;
}

static double sort_rate(const lgr_diff_entry_t *e) {
  const lgr_site_t *s = e->kind == LGR_DIFF_FIXED ? e->old_site : e->new_site;
  return s && isfinite(s->r.growth_bytes_per_s) ? s->r.growth_bytes_per_s : 0;
}

static int cmp_entry(const void *a, const void *b) {
  const lgr_diff_entry_t *x = a, *y = b;
  if (x->kind != y->kind) return (int)x->kind - (int)y->kind;
  double rx = sort_rate(x), ry = sort_rate(y);
  return rx < ry ? 1 : rx > ry ? -1 : 0;
}

int lgr_diff_compare(const lgr_report_t *old_r, const lgr_report_t *new_r, double worse_ratio, lgr_diff_t *out) {
  memset(out, 0, sizeof *out);
  rows_t ro, rn;
  if (collect(old_r, &ro)) return -ENOMEM;
  if (collect(new_r, &rn)) {
    free(ro.r);
    return -ENOMEM;
  }
  int rc = 0;
  out->worse_ratio = worse_ratio;
  out->e = calloc((size_t)(ro.n + rn.n + 1), sizeof *out->e);
  if (!out->e) {
    rc = -ENOMEM;
    goto done;
  }
  for (int k = 0; k < rn.n; k++) {
    row_t *nw = &rn.r[k];
    if (nw->state != LGR_DIFF_LEAK) continue;
    nw->used = 1;
    lgr_diff_entry_t *e = &out->e[out->n++];
    e->new_site = nw->s;
    e->new_state = LGR_DIFF_LEAK;
    e->ratio = NAN;
    row_t *od = find(&ro, nw->s, &e->line_moved);
    if (od && !od->used) {
      od->used = 1;
      e->old_site = od->s;
      e->old_state = od->state;
    }
    if (e->old_state != LGR_DIFF_LEAK) {
      e->kind = LGR_DIFF_NEW;
      continue;
    }
    e->per_step = lgr_diff_has_steps(e->old_site) && lgr_diff_has_steps(e->new_site);
    double ro_ = lgr_diff_rate(e->old_site, e->per_step), rn_ = lgr_diff_rate(e->new_site, e->per_step);
    e->ratio = ro_ > 0 ? rn_ / ro_ : INFINITY;
    e->kind = e->ratio >= worse_ratio ? LGR_DIFF_WORSE : LGR_DIFF_UNCHANGED;
  }
  for (int k = 0; k < ro.n; k++) {
    row_t *od = &ro.r[k];
    if (od->state != LGR_DIFF_LEAK || od->used) continue;
    lgr_diff_entry_t *e = &out->e[out->n++];
    e->kind = LGR_DIFF_FIXED;
    e->old_site = od->s;
    e->old_state = LGR_DIFF_LEAK;
    e->ratio = NAN;
    row_t *nw = find(&rn, od->s, &e->line_moved);
    if (nw && !nw->used) {
      e->new_site = nw->s;
      e->new_state = nw->state;
    }
  }
  qsort(out->e, (size_t)out->n, sizeof *out->e, cmp_entry);
  for (int i = 0; i < out->n; i++) {
    const lgr_diff_entry_t *e = &out->e[i];
    out->count[e->kind]++;
    /* a leak counts once per kind: at its first site of that kind (same report, same leak) */
    int first = 1, L = lgr_diff_leak(e);
    for (int k = 0; first && L >= 0 && k < i; k++)
      first = !(out->e[k].kind == e->kind && lgr_diff_leak(&out->e[k]) == L);
    out->leaks[e->kind] += first;
  }
done:
  free(ro.r);
  free(rn.r);
  if (rc) lgr_diff_free(out);
  return rc;
}

void lgr_diff_free(lgr_diff_t *d) {
  free(d->e);
  memset(d, 0, sizeof *d);
}

const char *lgr_diff_verdict(const lgr_diff_t *d) {
  if (d->count[LGR_DIFF_NEW] || d->count[LGR_DIFF_WORSE]) return "regressed";
  return d->count[LGR_DIFF_FIXED] ? "improved" : "same";
}
