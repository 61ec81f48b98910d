/* SPDX-License-Identifier: MIT */
/* render_diff.c - `leakguard diff` drawn: the comparison of two runs (findings/diff.h)
 * as text or JSON, through the table of formats (render.h). */
#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "core/util.h"
#include "findings/diff.h"
#include "output/render.h"

static const char *const KIND_NAME[4] = {"new", "worse", "unchanged", "fixed"};
/* In the text: a site not listed at all did not grow either (the report lists every
 * growing site); the JSON keeps the two apart. */
static const char *const STATE_NAME[4] = {"not growing", "not growing", "minor growth", "leak"};
static const char *const STATE_KEY[4] = {"absent", "stable", "minor", "leak"};

/* ------------------------------------------------------------------ text */

static void print_site(FILE *f, const lgr_site_t *s) {
  const lgr_frame_t *fr = lgr_diff_frame(s);
  if (!fr) fprintf(f, "??");
  else if (fr->file[0]) fprintf(f, "%s (%s:%d)", fr->function, lgr_diff_path_tail(fr->file), fr->line);
  else fprintf(f, "%s [%s]", fr->function, fr->module);
  if (s->spread_sites) fprintf(f, " [%d sites under it]", s->spread_sites);
  if (strcmp(s->space, "host")) fprintf(f, " [%s]", s->space);
}

static void print_rate(FILE *f, const lgr_site_t *s, int per_step) {
  char b[32];
  double v = lgr_diff_rate(s, per_step);
  fprintf(f, "+%s/%s", lgu_fmt_bytes(b, sizeof b, isfinite(v) ? v : 0), per_step ? "step" : "s");
}

/* mark: name the entry's leak as its report does ([L1]), where a leak of the group has
 * several sites */
static void print_entry(FILE *f, const lgr_diff_entry_t *e, int mark) {
  const lgr_site_t *main = e->kind == LGR_DIFF_FIXED ? e->old_site : e->new_site;
  fprintf(f, "  ");
  print_site(f, main);
  if (mark && lgr_diff_leak(e) >= 0)
    fprintf(f, "  [L%d%s]", lgr_diff_leak(e) + 1, e->kind == LGR_DIFF_FIXED ? " in OLD" : "");
  fprintf(f, "\n      ");
  switch (e->kind) {
  case LGR_DIFF_NEW:
    print_rate(f, e->new_site, lgr_diff_has_steps(e->new_site));
    fprintf(f, " now; in OLD: %s", STATE_NAME[e->old_state]);
    break;
  case LGR_DIFF_WORSE:
  case LGR_DIFF_UNCHANGED:
    print_rate(f, e->new_site, e->per_step);
    fprintf(f, " now, ");
    print_rate(f, e->old_site, e->per_step);
    if (isfinite(e->ratio)) fprintf(f, " in OLD (%.2f\u00d7)", e->ratio);
    else fprintf(f, " in OLD");
    break;
  case LGR_DIFF_FIXED:
    print_rate(f, e->old_site, lgr_diff_has_steps(e->old_site));
    fprintf(f, " in OLD; now: %s", STATE_NAME[e->new_state]);
    break;
  }
  if (e->line_moved) {
    const lgr_site_t *other = e->kind == LGR_DIFF_FIXED ? e->new_site : e->old_site;
    if (other && lgr_diff_frame(other))
      fprintf(f, " (line %d in %s)", lgr_diff_frame(other)->line, e->kind == LGR_DIFF_FIXED ? "NEW" : "OLD");
  }
  fprintf(f, "\n");
}

int lgo_render_diff_text(FILE *f, const lgr_diff_t *d, const lgo_render_opts_t *o) {
  const char *old_path = o->base, *new_path = o->source;
  static const char *const TITLE[4] = {"New leaks (growing in NEW, not in OLD)", "Worse (growing faster in NEW)",
                                       "Unchanged (growing in both)", "Fixed (growing in OLD, not in NEW)"};
  fprintf(f, "leakguard diff\n  OLD %s\n  NEW %s\n", old_path, new_path);
  for (int k = 0; k < 4; k++) {
    if (!d->count[k]) continue;
    /* leaks, as the report counts them (causes), and their sites when they differ */
    fprintf(f, "\n%s: %d", TITLE[k], d->leaks[k]);
    if (d->leaks[k] != d->count[k]) fprintf(f, " (%d site%s)", d->count[k], d->count[k] == 1 ? "" : "s");
    fprintf(f, "\n");
    for (int i = 0; i < d->n; i++)
      if (d->e[i].kind == (lgr_diff_kind_t)k) print_entry(f, &d->e[i], d->leaks[k] != d->count[k]);
  }
  fprintf(f, "\nVerdict: %s (", lgr_diff_verdict(d));
  for (int k = 0; k < 4; k++) {
    fprintf(f, "%s%d %s", k ? ", " : "", d->leaks[k], KIND_NAME[k]);
    if (d->leaks[k] != d->count[k]) fprintf(f, " (%d site%s)", d->count[k], d->count[k] == 1 ? "" : "s");
  }
  fprintf(f, ")\n");
  return ferror(f) ? -EIO : 0;
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

static cJSON *side_json(jb_t *b, const lgr_site_t *s, lgr_diff_state_t st) {
  cJSON *x = jck(b, cJSON_CreateObject());
  if (!x) return NULL;
  jstr(b, x, "state", STATE_KEY[st]);
  if (!s) return x;
  jnum(b, x, "pid", s->pid);
  if (st == LGR_DIFF_LEAK && s->leak >= 0) jnum(b, x, "leak", s->leak + 1);
  jnum(b, x, "growth_bytes_per_s", s->r.growth_bytes_per_s);
  jnum(b, x, "growth_bytes_per_step", s->r.growth_bytes_per_step);
  jnum(b, x, "live_bytes", (double)s->live_bytes);
  jstr(b, x, "pattern", lg_pattern_name(s->r.pattern));
  const lgr_frame_t *fr = lgr_diff_frame(s);
  jnum(b, x, "line", fr ? fr->line : NAN);
  return x;
}

static cJSON *entry_json(jb_t *b, const lgr_diff_entry_t *e) {
  cJSON *x = jck(b, cJSON_CreateObject());
  if (!x) return NULL;
  const lgr_site_t *main = e->kind == LGR_DIFF_FIXED ? e->old_site : e->new_site;
  jstr(b, x, "kind", KIND_NAME[e->kind]);
  cJSON *site = jck(b, cJSON_CreateObject());
  const lgr_frame_t *fr = lgr_diff_frame(main);
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

int lgo_render_diff_json(FILE *f, const lgr_diff_t *d, const lgo_render_opts_t *o) {
  const char *old_path = o->base, *new_path = o->source;
  jb_t b = {0};
  cJSON *root = jck(&b, cJSON_CreateObject());
  if (!root) return -ENOMEM;
  jstr(&b, root, "old", old_path);
  jstr(&b, root, "new", new_path);
  jstr(&b, root, "verdict", lgr_diff_verdict(d));
  jnum(&b, root, "worse_ratio", d->worse_ratio);
  cJSON *counts = jck(&b, cJSON_CreateObject());
  for (int k = 0; counts && k < 4; k++) jnum(&b, counts, KIND_NAME[k], d->count[k]);
  jadd(&b, root, "counts", counts);
  cJSON *lc = jck(&b, cJSON_CreateObject());
  for (int k = 0; lc && k < 4; k++) jnum(&b, lc, KIND_NAME[k], d->leaks[k]);
  jadd(&b, root, "leak_counts", lc);
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
  return ferror(f) ? -EIO : 0;
}
