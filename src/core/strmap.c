/* SPDX-License-Identifier: MIT */
/* strmap.c - see strmap.h. */
#include "core/strmap.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static uint64_t hash_str(const char *s) {
  uint64_t h = 1469598103934665603ULL;
  for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ULL;
  return h;
}

static int grow(lgu_strmap_t *m) {
  size_t nc = m->cap ? m->cap * 2 : 256;
  char **nk = calloc(nc, sizeof *nk);
  int *nv = calloc(nc, sizeof *nv);
  if (!nk || !nv) {
    free(nk);
    free(nv);
    return -1;
  }
  for (size_t i = 0; i < m->cap; i++) {
    if (!m->keys[i]) continue;
    size_t j = hash_str(m->keys[i]) & (nc - 1);
    while (nk[j]) j = (j + 1) & (nc - 1);
    nk[j] = m->keys[i];
    nv[j] = m->vals[i];
  }
  free(m->keys);
  free(m->vals);
  m->keys = nk;
  m->vals = nv;
  m->cap = nc;
  return 0;
}

int lgu_strmap_get_or_add(lgu_strmap_t *m, const char *key, int val, int *added) {
  *added = 0;
  if (m->n * 2 >= m->cap && grow(m) != 0) return -1;
  size_t j = hash_str(key) & (m->cap - 1);
  while (m->keys[j]) {
    if (!strcmp(m->keys[j], key)) return m->vals[j];
    j = (j + 1) & (m->cap - 1);
  }
  m->keys[j] = strdup(key);
  if (!m->keys[j]) return -1;
  m->vals[j] = val;
  m->n++;
  *added = 1;
  return val;
}

int lgu_strmap_find(const lgu_strmap_t *m, const char *key) {
  if (!m->cap) return -1;
  for (size_t j = hash_str(key) & (m->cap - 1); m->keys[j]; j = (j + 1) & (m->cap - 1))
    if (!strcmp(m->keys[j], key)) return m->vals[j];
  return -1;
}

void lgu_strmap_free(lgu_strmap_t *m) {
  for (size_t i = 0; i < m->cap; i++) free(m->keys[i]);
  free(m->keys);
  free(m->vals);
  memset(m, 0, sizeof *m);
}
