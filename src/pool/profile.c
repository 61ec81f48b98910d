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
 *
 * A key may also be a Python line, "<file>:<line>" (the code object's co_filename, as
 * leakguard's report names it): when the profile has such keys and the allocating
 * thread runs Python code, its innermost Python line is looked up before the native
 * frames. Under PyTorch every tensor is allocated by the same native code; the Python
 * line tells a layer's activation from its weight. The line is read from the
 * interpreter's frames without the GIL (PyTorch releases it around its ops) and
 * without calling into Python: src/capture/pyread.h, the reader leakguard's recorder
 * uses.
 */
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "capture/pyread.h"
#include "pool/pool_impl.h"

typedef struct entry {
  char *key;
  int gen;
} entry_t;

struct lgp_profile {
  entry_t *e;
  int n;
  char skip[512];
  int py_keys;           /* the profile has "<file>:<line>" keys */
  int py_state;          /* 0 not looked for yet, 1 reader ready, -1 no usable interpreter */
  pthread_mutex_t py_mu; /* the reader's first setup */
  lgi_pyreader_t py;
};

/* "<anything>:<digits>": a Python line (native keys are names or module+0xoffset). */
static int is_py_key(const char *k) {
  const char *c = strrchr(k, ':');
  if (!c || c == k || !c[1]) return 0;
  for (const char *d = c + 1; *d; d++)
    if (*d < '0' || *d > '9') return 0;
  return 1;
}

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
    if (is_py_key(k)) p->py_keys = 1;
    p->e[p->n++].gen = g;
  }
  fclose(f);
  if (!p) return NULL;
  pthread_mutex_init(&p->py_mu, NULL);
  if (p->n) qsort(p->e, (size_t)p->n, sizeof *p->e, cmp_entry);
  const char *skip = secure_getenv("LEAKGUARD_POOL_SKIP");
  snprintf(p->skip, sizeof p->skip, "%s", skip ? skip : LG_POOL_SKIP_DEFAULT);
  *entries = p->n;
  return p;
}

void lgp_profile_free(lgp_profile_t *p) {
  if (!p) return;
  for (int i = 0; i < p->n; i++) free(p->e[i].key);
  pthread_mutex_destroy(&p->py_mu);
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

/* The generation of the calling thread's innermost Python line, -1 when it has none
 * in the profile (or runs no Python code). The reader is set up at the first lookup
 * (a pool may be made before the interpreter starts); a process with no interpreter
 * then is taken to have none, so that its allocations do not each look again. */
static int py_lookup(lgp_profile_t *p) {
  int st = __atomic_load_n(&p->py_state, __ATOMIC_ACQUIRE);
  if (st == 0) {
    pthread_mutex_lock(&p->py_mu);
    st = p->py_state;
    if (st == 0) {
      unsigned major, minor;
      int k = lgi_pyreader_init(&p->py, &major, &minor);
      st = k == LGI_PYR_READY ? 1 : -1; /* none, or one without a layout: native keys only */
      __atomic_store_n(&p->py_state, st, __ATOMIC_RELEASE);
    }
    pthread_mutex_unlock(&p->py_mu);
  }
  if (st != 1) return -1;
  char key[600];
  return lgi_py_innermost_line(&p->py, key, sizeof key) ? find(p, key) : -1;
}

int lgp_profile_lookup(lgp_profile_t *p, void *const *frames, int n) {
  if (p->py_keys) {
    int g = py_lookup(p);
    if (g >= 0) return g;
  }
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
