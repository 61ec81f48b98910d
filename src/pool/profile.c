/* SPDX-License-Identifier: MIT */
/*
 * profile.c - the generation of an allocation site, measured in an earlier run
 * (LEAKGUARD_POOL_PROFILE, docs/pool.md).
 *
 * The file has one site a line: "<key> <young|middle|old>", '#' starts a comment.
 * A key is a function name ("make_activation") or a module and the offset of a return
 * address in it ("libmodel.so+0x1a2b", the module's file name without directory).
 * The site of an allocation is its first frame outside liblgpool and outside the
 * modules in LEAKGUARD_POOL_SKIP (a comma-separated list of file-name prefixes;
 * default: the PyTorch and CUDA runtime libraries, which call the pluggable allocator
 * on everyone's behalf). Its function name is looked up first, then module+offset.
 */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pool_impl.h"

typedef struct entry {
  char *key;
  int gen;
} entry_t;

struct lgp_profile {
  entry_t *e;
  int n;
  char skip[512];
};

static int cmp_entry(const void *a, const void *b) {
  return strcmp(((const entry_t *)a)->key, ((const entry_t *)b)->key);
}

lgp_profile_t *lgp_profile_load(const char *path, int *entries) {
  FILE *f = fopen(path, "r");
  if (!f) return NULL;
  lgp_profile_t *p = calloc(1, sizeof *p);
  int cap = 0;
  char line[1024];
  while (p && fgets(line, sizeof line, f)) {
    char *h = strchr(line, '#');
    if (h) *h = 0;
    char key[900], gen[32];
    if (sscanf(line, "%899s %31s", key, gen) != 2) continue;
    int g = !strcmp(gen, "young") ? 0 : !strcmp(gen, "middle") ? 1 : !strcmp(gen, "old") ? 2 : -1;
    if (g < 0) continue;
    if (p->n == cap) {
      cap = cap ? cap * 2 : 64;
      entry_t *n = realloc(p->e, (size_t)cap * sizeof *n);
      if (!n) break;
      p->e = n;
    }
    char *k = strdup(key);
    if (!k) break;
    p->e[p->n].key = k;
    p->e[p->n++].gen = g;
  }
  fclose(f);
  if (!p) return NULL;
  if (p->n) qsort(p->e, (size_t)p->n, sizeof *p->e, cmp_entry);
  const char *skip = secure_getenv("LEAKGUARD_POOL_SKIP");
  snprintf(p->skip, sizeof p->skip, "%s", skip ? skip : LG_POOL_SKIP_DEFAULT);
  *entries = p->n;
  return p;
}

void lgp_profile_free(lgp_profile_t *p) {
  if (!p) return;
  for (int i = 0; i < p->n; i++) free(p->e[i].key);
  free(p->e);
  free(p);
}

static int find(const lgp_profile_t *p, const char *key) {
  entry_t k = {(char *)key, 0};
  const entry_t *e = p->n ? bsearch(&k, p->e, (size_t)p->n, sizeof *p->e, cmp_entry) : NULL;
  return e ? e->gen : -1;
}

static int skipped(const lgp_profile_t *p, const char *base) {
  size_t bl = strlen(base);
  for (const char *s = p->skip; *s;) {
    const char *c = strchr(s, ',');
    size_t l = c ? (size_t)(c - s) : strlen(s);
    if (l && l <= bl && !strncmp(base, s, l)) return 1;
    s += l + (c ? 1 : 0);
  }
  return 0;
}

int lgp_profile_lookup(lgp_profile_t *p, void *const *frames, int n) {
  Dl_info self;
  if (!dladdr((void *)lgp_profile_lookup, &self)) return -1;
  for (int i = 0; i < n; i++) {
    Dl_info di;
    if (!dladdr(frames[i], &di) || !di.dli_fname) return -1;
    if (di.dli_fbase == self.dli_fbase) continue;
    const char *base = strrchr(di.dli_fname, '/');
    base = base ? base + 1 : di.dli_fname;
    if (skipped(p, base)) continue;
    int g = di.dli_sname ? find(p, di.dli_sname) : -1;
    if (g >= 0) return g;
    char key[600];
    snprintf(key, sizeof key, "%s+0x%lx", *base ? base : "main",
             (unsigned long)((uintptr_t)frames[i] - (uintptr_t)di.dli_fbase));
    return find(p, key);
  }
  return -1;
}
