/* SPDX-License-Identifier: MIT */
/*
 * holders.c - what keeps a site's memory alive, read from the database into the model:
 * the holders the Python module's explanations found (the holders table, whose chain
 * and detail columns hold the module's JSON: parsed here, once, into lgr_holder_t and
 * lgr_detail_t, so that no one above reads JSON), the kept_at detail resolved to the
 * program's own line, and the bound a full bounded container puts on a site. Their
 * memory is site.c's.
 */
#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <sqlite3.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "findings/impl.h"
#include "findings/report.h"

/* ------------------------------------------------------------------ the module's JSON */

/* d from the JSON value j (its name, if any, is the caller's). */
static void detail_of(const cJSON *j, lgr_detail_t *d) {
  memset(d, 0, sizeof *d);
  if (cJSON_IsFalse(j)) d->type = LGR_DETAIL_FALSE;
  else if (cJSON_IsTrue(j)) d->type = LGR_DETAIL_TRUE;
  else if (cJSON_IsNumber(j)) {
    d->type = LGR_DETAIL_NUMBER;
    d->number = j->valuedouble;
  } else if (cJSON_IsString(j)) {
    d->type = LGR_DETAIL_TEXT;
    d->text = lgr_strdup(j->valuestring);
  } else if (cJSON_IsArray(j) || cJSON_IsObject(j)) {
    d->type = cJSON_IsArray(j) ? LGR_DETAIL_LIST : LGR_DETAIL_GROUP;
    int n = cJSON_GetArraySize(j);
    d->items = n > 0 ? calloc((size_t)n, sizeof *d->items) : NULL;
    if (n > 0 && !d->items) {
      lgr_fail(-ENOMEM);
      return;
    }
    const cJSON *e;
    cJSON_ArrayForEach(e, j) {
      lgr_detail_t *it = &d->items[d->nitems++];
      detail_of(e, it);
      if (d->type == LGR_DETAIL_GROUP) it->name = lgr_strdup(e->string);
    }
  } else d->type = LGR_DETAIL_NULL;
}

/* The item of a group named name (any case, the first), or NULL. */
static const lgr_detail_t *detail_get(const lgr_detail_t *g, const char *name) {
  if (!g || g->type != LGR_DETAIL_GROUP) return NULL;
  for (int i = 0; i < g->nitems; i++)
    if (g->items[i].name && !strcasecmp(g->items[i].name, name)) return &g->items[i];
  return NULL;
}

/* h's chain from the JSON array c (any other value: no element). */
static void chain_of(const cJSON *c, lgr_holder_t *h) {
  int n = cJSON_IsArray(c) ? cJSON_GetArraySize(c) : 0;
  h->chain = n > 0 ? calloc((size_t)n, sizeof *h->chain) : NULL;
  if (n > 0 && !h->chain) {
    lgr_fail(-ENOMEM);
    return;
  }
  const cJSON *e;
  if (n > 0) cJSON_ArrayForEach(e, c) h->chain[h->nchain++] = cJSON_IsString(e) ? lgr_strdup(e->valuestring) : NULL;
}

static int same_chain(const lgr_holder_t *a, const lgr_holder_t *b) {
  if (a->nchain != b->nchain) return 0;
  for (int i = 0; i < a->nchain; i++) {
    const char *x = a->chain[i], *y = b->chain[i];
    if ((x == NULL) != (y == NULL) || (x && strcmp(x, y))) return 0;
  }
  return 1;
}

/* ------------------------------------------------------------------ holders */

/* The line that keeps a holder's objects (issue #34 item 2): the module's detail
 * kept_at {stack, container} (the site of the holder's own growth: a list's item array,
 * a dict's keys table, an object bound to a name) as the program's own line of that
 * stack. Nothing when the stack has no line of the program's (its frames unknown, or
 * all in libraries). */
static void resolve_kept_at(sqlite3 *db, int proc, lgr_holder_t *h, const cJSON *detail) {
  const cJSON *k = cJSON_GetObjectItem(detail, "kept_at");
  const cJSON *stack = cJSON_GetObjectItem(k, "stack"), *what = cJSON_GetObjectItem(k, "container");
  if (!cJSON_IsNumber(stack) || !cJSON_IsString(what)) return;
  lgr_site_t t;
  memset(&t, 0, sizeof t);
  t.proc = proc;
  t.stack = (int)stack->valuedouble;
  if (lgr_load_frames(db, &t, 0) == 0 && t.nframes > 0) {
    const lgr_frame_t *f = &t.frames[t.site_frame];
    if (lgr_is_python_module(f->module) && f->file[0] && f->line > 0) {
      lgr_kept_at_t *o = &h->kept_at;
      o->file = lgr_strdup(f->file);
      o->line = f->line;
      o->function = lgr_strdup(f->function);
      o->container = lgr_strdup(what->valuestring);
      o->source = lgr_source_line(f->file, f->line);
    }
  }
  lgr_site_free(&t);
}

/* Holders of the site: those of its stacks in the latest explain that found holders
 * for any of them (an explain at exit that finds the objects gone leaves the earlier
 * findings standing); identical chains are added up, the five holding the most bytes
 * kept. */
void lgr_load_holders(sqlite3 *db, lgr_site_t *s) {
  sqlite3_stmt *st =
      lgr_cached(db, LGR_STMT_HOLDERS_LATEST, "SELECT max(explain) FROM holders WHERE proc=?1 AND stack=?2");
  if (!st) return; /* older database */
  int nst = s->nstacks < 256 ? s->nstacks : 256, latest = -1;
  for (int k = 0; k < nst; k++) {
    sqlite3_reset(st);
    sqlite3_bind_int(st, 1, s->proc);
    sqlite3_bind_int(st, 2, s->stacks[k].stack);
    if (lgr_row(st) && sqlite3_column_type(st, 0) != SQLITE_NULL && sqlite3_column_int(st, 0) > latest)
      latest = sqlite3_column_int(st, 0);
  }
  sqlite3_reset(st);
  if (latest < 0) return;
  st = lgr_cached(db, LGR_STMT_HOLDERS,
                  "SELECT kind, chain, objects, bytes, detail FROM holders"
                  " WHERE proc=?1 AND stack=?2 AND explain=?3");
  if (!st) return;
  lgr_holder_t *all = NULL;
  int n = 0, cap = 0;
  for (int k = 0; k < nst; k++) {
    sqlite3_reset(st);
    sqlite3_bind_int(st, 1, s->proc);
    sqlite3_bind_int(st, 2, s->stacks[k].stack);
    sqlite3_bind_int(st, 3, latest);
    while (lgr_row(st)) {
      const char *chain = (const char *)sqlite3_column_text(st, 1);
      cJSON *c = chain ? cJSON_Parse(chain) : NULL;
      if (!c) continue;
      lgr_holder_t h;
      memset(&h, 0, sizeof h);
      chain_of(c, &h);
      cJSON_Delete(c);
      const char *kind = (const char *)sqlite3_column_text(st, 0);
      double objects = (double)sqlite3_column_int64(st, 2), bytes = (double)sqlite3_column_int64(st, 3);
      lgr_holder_t *same = NULL;
      for (int i = 0; i < n && !same; i++)
        if (same_chain(&all[i], &h)) same = &all[i];
      if (same) {
        same->objects += objects;
        same->bytes += bytes;
        lgr_holder_free(&h);
        continue;
      }
      if (n == cap) {
        lgr_holder_t *g = realloc(all, (size_t)(cap = cap ? 2 * cap : 8) * sizeof *all);
        if (!g) {
          lgr_fail(-ENOMEM);
          lgr_holder_free(&h);
          break;
        }
        all = g;
      }
      h.objects = objects;
      h.bytes = bytes;
      h.kind = lgr_strdup(kind ? kind : "object");
      const char *detail = (const char *)sqlite3_column_text(st, 4);
      cJSON *d = detail ? cJSON_Parse(detail) : NULL;
      if (d && (h.detail = malloc(sizeof *h.detail))) detail_of(d, h.detail);
      else if (d) lgr_fail(-ENOMEM);
      if (d) resolve_kept_at(db, s->proc, &h, d);
      cJSON_Delete(d);
      all[n++] = h;
    }
  }
  sqlite3_reset(st);
  /* largest first, five kept */
  s->holders = n > 0 ? calloc((size_t)(n < 5 ? n : 5), sizeof *s->holders) : NULL;
  if (n > 0 && !s->holders) lgr_fail(-ENOMEM);
  while (s->holders && n > 0 && s->nholders < 5) {
    int best = 0;
    double bb = -1;
    for (int i = 0; i < n; i++)
      if (all[i].bytes > bb) bb = all[i].bytes, best = i;
    /* an inferred holder (no bytes measured: the graph's own nodes) of a root already
     * shown with what it measurably keeps says nothing more */
    int dup = 0;
    for (int k = 0; k < s->nholders && !(all[best].bytes > 0); k++)
      dup |= s->holders[k].bytes > 0 && s->holders[k].nchain && all[best].nchain && s->holders[k].chain[0] &&
             all[best].chain[0] && !strcmp(s->holders[k].chain[0], all[best].chain[0]);
    if (dup) lgr_holder_free(&all[best]);
    else s->holders[s->nholders++] = all[best];
    memmove(&all[best], &all[best + 1], (size_t)(n - best - 1) * sizeof *all);
    n--;
  }
  for (int i = 0; i < n; i++) lgr_holder_free(&all[i]);
  free(all);
}

/* Holder-aware verdict (issue #10): when holders that own at least half of the explained
 * bytes of a site hold it through a bounded container at its bound (an lru_cache at its
 * maxsize, a deque at its maxlen: the Python module's detail "bound"), the site is a
 * plateau whatever its curve looks like: returns that bound, else NULL. */
lgr_bound_t *lgr_full_bound(const lgr_site_t *s) {
  const lgr_detail_t *bound = NULL;
  double all = 0, held = 0;
  for (int i = 0; i < s->nholders; i++) {
    const lgr_holder_t *h = &s->holders[i];
    if (!(h->bytes > 0)) continue;
    all += h->bytes;
    const lgr_detail_t *bd = detail_get(h->detail, "bound");
    const lgr_detail_t *full = detail_get(bd, "full");
    if (full && full->type == LGR_DETAIL_TRUE) {
      held += h->bytes;
      if (!bound) bound = bd;
    }
  }
  if (!bound || !(held >= 0.5 * all)) return NULL;
  lgr_bound_t *b = calloc(1, sizeof *b);
  if (!b) {
    lgr_fail(-ENOMEM);
    return NULL;
  }
  const lgr_detail_t *c = detail_get(bound, "container"), *m = detail_get(bound, "maxsize"),
                     *z = detail_get(bound, "size");
  b->container = c && c->type == LGR_DETAIL_TEXT ? lgr_strdup(c->text) : NULL;
  b->maxsize = m && m->type == LGR_DETAIL_NUMBER ? m->number : NAN;
  b->size = z && z->type == LGR_DETAIL_NUMBER ? z->number : NAN;
  return b;
}
