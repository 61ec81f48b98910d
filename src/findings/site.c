/* SPDX-License-Identifier: MIT */
/*
 * site.c - the memory of a site of the model and of the parts it owns (frames, holders
 * and their details, a bound): freed and copied here, for every file of the findings
 * that makes, keeps or drops sites. Calls nothing of the others.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "findings/impl.h"
#include "findings/report.h"

static void free_frames(lgr_frame_t *f, int n) {
  for (int i = 0; i < n; i++) {
    free(f[i].function);
    free(f[i].file);
    free(f[i].module);
  }
  free(f);
}

static void detail_free(lgr_detail_t *d) {
  for (int i = 0; i < d->nitems; i++) detail_free(&d->items[i]);
  free(d->items);
  free(d->name);
  free(d->text);
}

void lgr_holder_free(lgr_holder_t *h) {
  if (!h) return;
  for (int i = 0; i < h->nchain; i++) free(h->chain[i]);
  free(h->chain);
  free(h->kind);
  if (h->detail) detail_free(h->detail);
  free(h->detail);
  free(h->kept_at.file);
  free(h->kept_at.function);
  free(h->kept_at.container);
  free(h->kept_at.source);
  memset(h, 0, sizeof *h);
}

/* A copy of s (NULL for NULL), lgr_fail on ENOMEM. */
static char *dup(const char *s) { return lgr_strdup(s); }

lgr_holder_t *lgr_holder_dup(const lgr_holder_t *h) {
  lgr_holder_t *c = calloc(1, sizeof *c);
  if (!c || (h->nchain && !(c->chain = calloc((size_t)h->nchain, sizeof *c->chain)))) {
    free(c);
    lgr_fail(-ENOMEM);
    return NULL;
  }
  for (int i = 0; i < h->nchain; i++) c->chain[c->nchain++] = dup(h->chain[i]);
  c->kind = dup(h->kind);
  c->objects = h->objects;
  c->bytes = h->bytes;
  c->kept_at.file = dup(h->kept_at.file);
  c->kept_at.line = h->kept_at.line;
  c->kept_at.function = dup(h->kept_at.function);
  c->kept_at.container = dup(h->kept_at.container);
  c->kept_at.source = dup(h->kept_at.source);
  return c; /* the details stay with the site's holder (the leak's is never drawn with them) */
}

lgr_bound_t *lgr_bound_dup(const lgr_bound_t *b) {
  if (!b) return NULL;
  lgr_bound_t *c = malloc(sizeof *c);
  if (!c) {
    lgr_fail(-ENOMEM);
    return NULL;
  }
  *c = *b;
  c->container = dup(b->container);
  return c;
}

void lgr_bound_free(lgr_bound_t *b) {
  if (b) free(b->container);
  free(b);
}

void lgr_site_free(lgr_site_t *s) {
  for (int i = 0; i < s->nholders; i++) lgr_holder_free(&s->holders[i]);
  free(s->holders);
  lgr_bound_free(s->bounded);
  free(s->series);
  free_frames(s->all_frames, s->nall);
  free(s->stacks);
  free(s->source);
  memset(s, 0, sizeof *s);
}
