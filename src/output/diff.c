/* SPDX-License-Identifier: MIT */
/* diff.c - two runs' reports compared site by site (diff.h, docs/diff.md). */
#include "output/diff.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/util.h"

static const char *const KIND_NAME[4] = {"new", "worse", "unchanged", "fixed"};
/* In the text: a site not listed at all did not grow either (the report lists every
 * growing site); the JSON keeps the two apart. */
static const char *const STATE_NAME[4] = {"not growing", "not growing", "minor growth", "leak"};
static const char *const STATE_KEY[4] = {"absent", "stable", "minor", "leak"};

/* One listed site of a report with what it is there. */
typedef struct row {
  const lgr_site_t *s;
  lgdf_state_t state;
  int used; /* already in an entry */
} row_t;

typedef struct rows {
  row_t *r;
  int n;
} rows_t;

static const lgr_frame_t *site_frame(const lgr_site_t *s) {
  return s->nframes > 0 && s->site_frame >= 0 && s->site_frame < s->nframes ? &s->frames[s->site_frame] : NULL;
}

/* The last two components of a path ("app/x.c"): builds of the same code in two
 * checkouts (CI's clean clones) differ above them. */
static const char *path_tail(const char *p) {
  const char *last = strrchr(p, '/');
  if (!last) return p;
  const char *q = last;
  while (q > p && q[-1] != '/') q--;
  return q > p ? q : p;
}

/* 1 when a and b are the same site: space, function and file (the module when there is
 * no file), and the line unless any_line. */
static int same_site(const lgr_site_t *a, const lgr_site_t *b, int any_line) {
  const lgr_frame_t *x = site_frame(a), *y = site_frame(b);
  if (!x || !y || strcmp(a->space, b->space) || !a->spread_sites != !b->spread_sites) return 0;
  if (strcmp(x->function, y->function)) return 0;
  if (x->file[0] || y->file[0]) {
    if (strcmp(path_tail(x->file), path_tail(y->file))) return 0;
  } else if (strcmp(x->module, y->module)) {
    return 0;
  }
  return any_line || x->line == y->line;
}

static int add_rows(rows_t *rs, const lgr_site_t *arr, int n, lgdf_state_t st) {
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
  if (add_rows(rs, r->suspects, r->nsuspects, LGDF_LEAK) || add_rows(rs, r->minor, r->nminor, LGDF_MINOR) ||
      add_rows(rs, r->others, r->nothers, LGDF_STABLE)) {
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
  for (int st = LGDF_LEAK; st >= LGDF_STABLE; st--)
    for (int k = 0; k < rs->n; k++)
      if (rs->r[k].state == (lgdf_state_t)st && same_site(rs->r[k].s, s, 0)) return &rs->r[k];
  row_t *only = NULL;
  for (int k = 0; k < rs->n; k++) {
    if (!same_site(rs->r[k].s, s, 1)) continue;
    if (only && site_frame(only->s)->line != site_frame(rs->r[k].s)->line) return NULL; /* which one? */
    if (!only || rs->r[k].state > only->state) only = &rs->r[k];
  }
  if (only) *moved = 1;
  return only;
}

static int has_steps(const lgr_site_t *s) {
  return isfinite(s->r.growth_bytes_per_step) && s->r.growth_bytes_per_step > 0;
}

static double rate_of(const lgr_site_t *s, int per_step) {
  return per_step ? s->r.growth_bytes_per_step : s->r.growth_bytes_per_s;
}

static double sort_rate(const lgdf_entry_t *e) {
  const lgr_site_t *s = e->kind == LGDF_FIXED ? e->old_site : e->new_site;
  return s && isfinite(s->r.growth_bytes_per_s) ? s->r.growth_bytes_per_s : 0;
}

static int cmp_entry(const void *a, const void *b) {
  const lgdf_entry_t *x = a, *y = b;
  if (x->kind != y->kind) return (int)x->kind - (int)y->kind;
  double rx = sort_rate(x), ry = sort_rate(y);
  return rx < ry ? 1 : rx > ry ? -1 : 0;
}

int lgdf_compare(const lgr_report_t *old_r, const lgr_report_t *new_r, double worse_ratio, lgdf_t *out) {
  memset(out, 0, sizeof *out);
  rows_t ro, rn;
  if (collect(old_r, &ro)) return -ENOMEM;
  if (collect(new_r, &rn)) {
    free(ro.r);
    return -ENOMEM;
  }
  int rc = 0;
  out->e = calloc((size_t)(ro.n + rn.n + 1), sizeof *out->e);
  if (!out->e) {
    rc = -ENOMEM;
    goto done;
  }
  for (int k = 0; k < rn.n; k++) {
    row_t *nw = &rn.r[k];
    if (nw->state != LGDF_LEAK) continue;
    nw->used = 1;
    lgdf_entry_t *e = &out->e[out->n++];
    e->new_site = nw->s;
    e->new_state = LGDF_LEAK;
    e->ratio = NAN;
    row_t *od = find(&ro, nw->s, &e->line_moved);
    if (od && !od->used) {
      od->used = 1;
      e->old_site = od->s;
      e->old_state = od->state;
    }
    if (e->old_state != LGDF_LEAK) {
      e->kind = LGDF_NEW;
      continue;
    }
    e->per_step = has_steps(e->old_site) && has_steps(e->new_site);
    double ro_ = rate_of(e->old_site, e->per_step), rn_ = rate_of(e->new_site, e->per_step);
    e->ratio = ro_ > 0 ? rn_ / ro_ : INFINITY;
    e->kind = e->ratio >= worse_ratio ? LGDF_WORSE : LGDF_UNCHANGED;
  }
  for (int k = 0; k < ro.n; k++) {
    row_t *od = &ro.r[k];
    if (od->state != LGDF_LEAK || od->used) continue;
    lgdf_entry_t *e = &out->e[out->n++];
    e->kind = LGDF_FIXED;
    e->old_site = od->s;
    e->old_state = LGDF_LEAK;
    e->ratio = NAN;
    row_t *nw = find(&rn, od->s, &e->line_moved);
    if (nw && !nw->used) {
      e->new_site = nw->s;
      e->new_state = nw->state;
    }
  }
  qsort(out->e, (size_t)out->n, sizeof *out->e, cmp_entry);
  for (int i = 0; i < out->n; i++) out->count[out->e[i].kind]++;
done:
  free(ro.r);
  free(rn.r);
  if (rc) lgdf_free(out);
  return rc;
}

void lgdf_free(lgdf_t *d) {
  free(d->e);
  memset(d, 0, sizeof *d);
}

const char *lgdf_verdict(const lgdf_t *d) {
  if (d->count[LGDF_NEW] || d->count[LGDF_WORSE]) return "regressed";
  return d->count[LGDF_FIXED] ? "improved" : "same";
}

/* ------------------------------------------------------------------ text */

static void print_site(FILE *f, const lgr_site_t *s) {
  const lgr_frame_t *fr = site_frame(s);
  if (!fr) fprintf(f, "??");
  else if (fr->file[0]) fprintf(f, "%s (%s:%d)", fr->function, path_tail(fr->file), fr->line);
  else fprintf(f, "%s [%s]", fr->function, fr->module);
  if (s->spread_sites) fprintf(f, " [%d sites under it]", s->spread_sites);
  if (strcmp(s->space, "host")) fprintf(f, " [%s]", s->space);
}

static void print_rate(FILE *f, const lgr_site_t *s, int per_step) {
  char b[32];
  double v = rate_of(s, per_step);
  fprintf(f, "+%s/%s", lgu_fmt_bytes(b, sizeof b, isfinite(v) ? v : 0), per_step ? "step" : "s");
}

static void print_entry(FILE *f, const lgdf_entry_t *e) {
  const lgr_site_t *main = e->kind == LGDF_FIXED ? e->old_site : e->new_site;
  fprintf(f, "  ");
  print_site(f, main);
  fprintf(f, "\n      ");
  switch (e->kind) {
  case LGDF_NEW:
    print_rate(f, e->new_site, has_steps(e->new_site));
    fprintf(f, " now; in OLD: %s", STATE_NAME[e->old_state]);
    break;
  case LGDF_WORSE:
  case LGDF_UNCHANGED:
    print_rate(f, e->new_site, e->per_step);
    fprintf(f, " now, ");
    print_rate(f, e->old_site, e->per_step);
    if (isfinite(e->ratio)) fprintf(f, " in OLD (%.2f\u00d7)", e->ratio);
    else fprintf(f, " in OLD");
    break;
  case LGDF_FIXED:
    print_rate(f, e->old_site, has_steps(e->old_site));
    fprintf(f, " in OLD; now: %s", STATE_NAME[e->new_state]);
    break;
  }
  if (e->line_moved) {
    const lgr_site_t *other = e->kind == LGDF_FIXED ? e->new_site : e->old_site;
    if (other && site_frame(other))
      fprintf(f, " (line %d in %s)", site_frame(other)->line, e->kind == LGDF_FIXED ? "NEW" : "OLD");
  }
  fprintf(f, "\n");
}

void lgdf_print_text(FILE *f, const lgdf_t *d, const char *old_path, const char *new_path) {
  static const char *const TITLE[4] = {"New leaks (growing in NEW, not in OLD)", "Worse (growing faster in NEW)",
                                       "Unchanged (growing in both)", "Fixed (growing in OLD, not in NEW)"};
  fprintf(f, "leakguard diff\n  OLD %s\n  NEW %s\n", old_path, new_path);
  for (int k = 0; k < 4; k++) {
    if (!d->count[k]) continue;
    fprintf(f, "\n%s: %d\n", TITLE[k], d->count[k]);
    for (int i = 0; i < d->n; i++)
      if (d->e[i].kind == (lgdf_kind_t)k) print_entry(f, &d->e[i]);
  }
  fprintf(f, "\nVerdict: %s (%d new, %d worse, %d unchanged, %d fixed)\n", lgdf_verdict(d), d->count[LGDF_NEW],
          d->count[LGDF_WORSE], d->count[LGDF_UNCHANGED], d->count[LGDF_FIXED]);
}

/* ------------------------------------------------------------------ JSON */

/* Every cJSON constructor can fail (NULL): the tree is checked as it is built and a
 * document with a missing field is never printed. */
typedef struct jb {
  int oom;
} jb_t;

static cJSON *jck(jb_t *b, cJSON *x) {
  if (!x) b->oom = 1;
  return x;
}

static void jnum(jb_t *b, cJSON *o, const char *k, double v) {
  if (!(isfinite(v) ? cJSON_AddNumberToObject(o, k, round(v * 100) / 100) : cJSON_AddNullToObject(o, k))) b->oom = 1;
}

static void jstr(jb_t *b, cJSON *o, const char *k, const char *v) {
  if (!cJSON_AddStringToObject(o, k, v)) b->oom = 1;
}

static void jadd(jb_t *b, cJSON *o, const char *k, cJSON *item) {
  if (!item || !cJSON_AddItemToObject(o, k, item)) {
    b->oom = 1;
    cJSON_Delete(item);
  }
}

static cJSON *side_json(jb_t *b, const lgr_site_t *s, lgdf_state_t st) {
  cJSON *x = jck(b, cJSON_CreateObject());
  if (!x) return NULL;
  jstr(b, x, "state", STATE_KEY[st]);
  if (!s) return x;
  jnum(b, x, "pid", s->pid);
  jnum(b, x, "growth_bytes_per_s", s->r.growth_bytes_per_s);
  jnum(b, x, "growth_bytes_per_step", s->r.growth_bytes_per_step);
  jnum(b, x, "live_bytes", (double)s->live_bytes);
  jstr(b, x, "pattern", lg_pattern_name(s->r.pattern));
  const lgr_frame_t *fr = site_frame(s);
  jnum(b, x, "line", fr ? fr->line : NAN);
  return x;
}

static cJSON *entry_json(jb_t *b, const lgdf_entry_t *e) {
  cJSON *x = jck(b, cJSON_CreateObject());
  if (!x) return NULL;
  const lgr_site_t *main = e->kind == LGDF_FIXED ? e->old_site : e->new_site;
  jstr(b, x, "kind", KIND_NAME[e->kind]);
  cJSON *site = jck(b, cJSON_CreateObject());
  const lgr_frame_t *fr = site_frame(main);
  if (site) {
    jstr(b, site, "function", fr ? fr->function : "??");
    if (fr && fr->file[0]) jstr(b, site, "file", fr->file);
    else if (!cJSON_AddNullToObject(site, "file")) b->oom = 1;
    jnum(b, site, "line", fr && fr->line ? fr->line : NAN);
    jstr(b, site, "module", fr ? fr->module : "");
    jstr(b, site, "space", main->space);
    if (main->spread_sites) jnum(b, site, "spread_sites", main->spread_sites);
  }
  jadd(b, x, "site", site);
  if (!cJSON_AddBoolToObject(x, "line_moved", e->line_moved)) b->oom = 1;
  jadd(b, x, "old", side_json(b, e->old_site, e->old_state));
  jadd(b, x, "new", side_json(b, e->new_site, e->new_state));
  jnum(b, x, "ratio", e->ratio);
  if (!cJSON_AddBoolToObject(x, "per_step", e->per_step)) b->oom = 1;
  return x;
}

int lgdf_print_json(FILE *f, const lgdf_t *d, const char *old_path, const char *new_path, double worse_ratio) {
  jb_t b = {0};
  cJSON *root = jck(&b, cJSON_CreateObject());
  if (!root) return -ENOMEM;
  jstr(&b, root, "old", old_path);
  jstr(&b, root, "new", new_path);
  jstr(&b, root, "verdict", lgdf_verdict(d));
  jnum(&b, root, "worse_ratio", worse_ratio);
  cJSON *counts = jck(&b, cJSON_CreateObject());
  for (int k = 0; counts && k < 4; k++) jnum(&b, counts, KIND_NAME[k], d->count[k]);
  jadd(&b, root, "counts", counts);
  cJSON *arr = jck(&b, cJSON_CreateArray());
  for (int i = 0; arr && i < d->n; i++) {
    cJSON *x = entry_json(&b, &d->e[i]);
    if (!x || !cJSON_AddItemToArray(arr, x)) {
      b.oom = 1;
      cJSON_Delete(x);
    }
  }
  jadd(&b, root, "sites", arr);
  char *txt = b.oom ? NULL : cJSON_Print(root);
  cJSON_Delete(root);
  if (!txt) return -ENOMEM;
  fprintf(f, "%s\n", txt);
  cJSON_free(txt);
  return 0;
}
