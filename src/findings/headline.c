/* SPDX-License-Identifier: MIT */
/*
 * headline.c - the user's line first, for native stacks (issue #34, docs/detection.md
 * "From stacks to sites"): the frame a native site is named by is the innermost frame
 * in the program's own objects that is not one of the program's own allocation
 * wrappers. Frames in the system's libraries (libc, libstdc++, libcrypto, libtorch)
 * and the wrappers are passed over when such a caller exists; they stay in the site's
 * frames, and the innermost of them is its library_site.
 *
 * Own objects: the main executable (not the interpreter: a Python program's own code
 * is its Python files), and every module outside the system's library directories,
 * site-/dist-packages and the interpreter's library; a library in a system directory
 * named after the program (libmosquitto beside mosquitto); and whatever lies under an
 * --own PATH.
 *
 * A wrapper is recognised by its shape in the recorded stacks of one process, not by
 * its name (lgr_is_machinery knows the named ones: zmalloc, g_malloc...): a function
 * of the program's own objects that is the innermost frame above the allocator (or
 * above a wrapper: a strdup wrapper calling a malloc wrapper), and
 *  - never calls another of the program's functions that allocates (all it allocates
 *    it gets straight from the allocator: redis's createClient, which also makes its
 *    dicts and buffers, is no wrapper);
 *  - allocates at one line (one call of the allocator: a constructor that allocates a
 *    node and its key at two lines is none);
 *  - is called from at least LGR_WRAPPER_CALLERS call sites (function and line);
 *  - allocates blocks of different sizes for its callers (a constructor allocates its
 *    struct's size for every caller: redis's dictCreate, called from 3 sites, is none).
 * The recorder stores the stacks that held 1 KiB at a snapshot only: a wrapper's call
 * sites whose blocks are freed at once are not seen, and a wrapper seen from fewer
 * sites keeps the headline.
 */
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/strmap.h"
#include "findings/impl.h"

/* Call sites from which a function must be seen called before it counts as a wrapper
 * (docs/detection.md: the evidence). */
#define LGR_WRAPPER_CALLERS 3
/* Rounds of the search: a wrapper of a wrapper of ... this deep. */
#define LGR_WRAPPER_DEPTH 6

static const char *base_name(const char *p) {
  const char *b = strrchr(p, '/');
  return b ? b + 1 : p;
}

/* The stem of a file name: up to the first '.', '-' or '_' ("redis-server" "redis",
 * "libmosquitto.so.1" "mosquitto" after the "lib"). */
static size_t stem_len(const char *b) { return strcspn(b, ".-_"); }

static int is_interpreter(const char *exe) { return exe && !strncmp(base_name(exe), "python", 6); }

int lgr_module_is_system(const char *path, const char *exe) {
  if (!path || !*path) return 0;
  if (lgr_under_own(path)) return 0;
  const char *b = base_name(path);
  if (!strncmp(b, "libleakguard", 12) || !strncmp(b, "leakguard.", 10) || !strncmp(b, "liblgpool", 9)) return 1;
  if (exe && !strcmp(path, exe)) return is_interpreter(exe);
  if (strstr(path, "/site-packages/") || strstr(path, "/dist-packages/") || lgr_is_library_file(path)) return 1;
  static const char *const dirs[] = {"/lib",       "/lib32",         "/lib64",           "/usr/lib", "/usr/lib32",
                                     "/usr/lib64", "/usr/local/lib", "/usr/local/lib64", NULL};
  size_t dl = (size_t)(b - path) - (b > path); /* the directory, without its last '/' */
  int sys = 0;
  for (int i = 0; dirs[i] && !sys; i++) {
    size_t n = strlen(dirs[i]);
    if (dl == n && !strncmp(path, dirs[i], n)) sys = 1;
    /* a multiarch directory: /usr/lib/x86_64-linux-gnu */
    else if (dl > n + 1 && !strncmp(path, dirs[i], n) && path[n] == '/' && !memchr(path + n + 1, '/', dl - n - 1) &&
             memmem(path + n + 1, dl - n - 1, "-linux-", 7))
      sys = 1;
  }
  if (!sys) return 0;
  /* a library the program ships: named after it (libmosquitto.so.1 for mosquitto) */
  if (exe && !is_interpreter(exe) && !strncmp(b, "lib", 3)) {
    const char *e = base_name(exe);
    size_t n = stem_len(e);
    if (n >= 3 && stem_len(b + 3) == n && !strncmp(b + 3, e, n)) return 0;
  }
  return 1;
}

/* ------------------------------------------------------------------ one process */

static _Thread_local struct {
  int ready;
  lgu_strmap_t ownm, sysm; /* module file names with an own path, with a system path */
  lgu_strmap_t fids;       /* "function\x1fmodule" -> id */
  unsigned char *isw;      /* [fid]: a wrapper */
  int nfid;
} hl;

void lgr_headline_clear(void) {
  lgu_strmap_free(&hl.ownm);
  lgu_strmap_free(&hl.sysm);
  lgu_strmap_free(&hl.fids);
  free(hl.isw);
  memset(&hl, 0, sizeof hl);
}

static int module_own(const char *module) {
  if (!module || !*module) return 1;
  /* two modules of one file name: own when either is; one the table does not list: not
   * known to be a library */
  return lgu_strmap_find(&hl.ownm, module) >= 0 || lgu_strmap_find(&hl.sysm, module) < 0;
}

static int fid_key(char *key, size_t len, const char *fn, const char *module) {
  if (!fn || !*fn || !strcmp(fn, "??")) return -1;
  int n = snprintf(key, len, "%s\x1f%s", fn, module ? module : "");
  return n > 0 && (size_t)n < len ? 0 : -1;
}

static int frame_wrapper(const char *fn, const char *module) {
  char key[1024];
  if (!hl.isw || fid_key(key, sizeof key, fn, module) != 0) return 0;
  int id = lgu_strmap_find(&hl.fids, key);
  return id >= 0 && id < hl.nfid && hl.isw[id];
}

int lgr_headline(const void *frames, int n, int k, lgr_frame_at_fn at) {
  if (!hl.ready) return k;
  int unnamed = -1;
  for (int j = k; j < n; j++) {
    const char *fn, *file, *module;
    at(frames, j, &fn, &file, &module);
    if (lgr_is_python_module(module)) break; /* the Python lines decide (lgr_own_frame) */
    if (lgr_is_machinery(fn, file, module) || !module_own(module) || frame_wrapper(fn, module)) continue;
    if (fn && !strcmp(fn, "_start")) continue; /* the C runtime's entry: what libc's start-up called */
    /* past a wrapper, a function without a name (a stripped binary's static function:
     * mosquitto's retained-message helper) names nothing, and every such frame of the
     * module would be one site: its nearest named caller names it */
    if ((!fn || !*fn || !strcmp(fn, "??")) && (!file || !*file)) {
      if (unnamed < 0) unnamed = j;
      continue;
    }
    return j;
  }
  return unnamed >= 0 ? unnamed : k;
}

/* The search for wrappers: per location, what the rounds need. */
typedef struct {
  int fid;       /* -1: no name */
  int flags;     /* LF_* */
  uint64_t site; /* hash of function, file, line, module: a call site */
} locinfo_t;
enum { LF_MACH = 1, LF_OWN = 2, LF_PY = 4, LF_ANON = 8 };

typedef struct {
  int off, n, k, stack; /* frames li[off..off+n): indexes into the locations */
  double size;          /* mean block size, NaN: not read yet, -1: unknown */
} wstack_t;

typedef struct {
  uint64_t caller[LGR_WRAPPER_CALLERS];
  int ncaller, line, seen, lines2, deep, cand; /* lines2: allocates at two lines or more */
} wstat_t;

static uint64_t fnv(uint64_t h, const char *s) {
  for (; s && *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ULL;
  return (h ^ 0x1f) * 1099511628211ULL;
}

/* The mean block size of a stack, from its last samples row (cumulative counters). */
static double stack_size(sqlite3 *db, sqlite3_stmt *st, int proc, int stack) {
  (void)db;
  double v = -1;
  sqlite3_bind_int(st, 1, proc);
  sqlite3_bind_int(st, 2, stack);
  if (lgr_row(st)) {
    double b = (double)sqlite3_column_int64(st, 0), n = (double)sqlite3_column_int64(st, 1);
    if (n > 0) v = round(b / n);
  }
  sqlite3_reset(st);
  return v;
}

/* Where the candidate of stack w lies: the innermost frame from its site frame on
 * that is own, not machinery and not a wrapper found so far; -1: none with a caller. */
static int candidate(const wstack_t *w, const int *li, const locinfo_t *inf) {
  for (int j = w->k; j < w->n - 1; j++) {
    const locinfo_t *x = &inf[li[w->off + j]];
    if (x->flags & LF_PY) return -1;
    if ((x->flags & LF_MACH) || !(x->flags & LF_OWN) || (x->fid >= 0 && hl.isw[x->fid])) continue;
    if (x->fid < 0 && (x->flags & LF_ANON))
      continue; /* an unnamed static frame (stripped): its named caller may be the wrapper */
    return x->fid >= 0 ? j : -1;
  }
  return -1;
}

static int find_wrappers(sqlite3 *db, int proc, const lgr_loc_t *v, size_t nv, int64_t lo) {
  int rc = -1, nst = 0, cst = 0, nli = 0, cli = 0;
  wstack_t *ws = NULL;
  int *li = NULL;
  wstat_t *stat = NULL;
  sqlite3_stmt *st = NULL, *sz = NULL;
  locinfo_t *inf = calloc(nv ? nv : 1, sizeof *inf);
  const lgr_loc_t **lv = malloc(LGR_MAX_FRAMES * sizeof *lv);
  if (!inf || !lv) goto out;
  char key[1024];
  for (size_t i = 0; i < nv; i++) {
    const lgr_loc_t *l = &v[i];
    inf[i].fid = -1;
    if (!l->function) continue;
    if (lgr_is_python_module(l->module)) inf[i].flags |= LF_PY;
    if (lgr_is_machinery(l->function, l->file, l->module)) inf[i].flags |= LF_MACH;
    if (module_own(l->module)) inf[i].flags |= LF_OWN;
    if ((!*l->function || !strcmp(l->function, "??")) && (!l->file || !*l->file)) inf[i].flags |= LF_ANON;
    inf[i].site = fnv(fnv(fnv(fnv(1469598103934665603ULL, l->function), l->file), l->module), "") ^ (uint64_t)l->line;
  }
  if (lgr_prepare(db, "SELECT stack, locs FROM stacks WHERE proc=?", -1, &st, NULL) != SQLITE_OK) {
    rc = 0; /* a damaged database without the table: no wrappers (lgr_prepare records NOMEM) */
    goto out;
  }
  sqlite3_bind_int(st, 1, proc);
  int64_t ids[LGR_MAX_FRAMES];
  while (lgr_row(st)) {
    int n = lgr_parse_locs((const char *)sqlite3_column_text(st, 1), ids, LGR_MAX_FRAMES), m = 0;
    if (nli + n > cli) {
      int nc = cli ? cli * 2 : 4096;
      while (nc < nli + n) nc *= 2;
      int *nl = realloc(li, (size_t)nc * sizeof *nl);
      if (!nl) goto out;
      li = nl;
      cli = nc;
    }
    for (int i = 0; i < n; i++) {
      int64_t x = ids[i] - lo;
      if (x < 0 || (uint64_t)x >= nv || !v[x].function) continue;
      li[nli + m] = (int)x;
      lv[m++] = &v[x];
    }
    if (m < 2 || (inf[li[nli]].flags & LF_PY)) continue; /* a Python stack: lgr_own_frame */
    if (nst == cst) {
      cst = cst ? cst * 2 : 256;
      wstack_t *nw = realloc(ws, (size_t)cst * sizeof *nw);
      if (!nw) goto out;
      ws = nw;
    }
    ws[nst++] = (wstack_t){nli, m, lgr_site_frame(lv, m, lgr_loc_at), sqlite3_column_int(st, 0), NAN};
    nli += m;
  }
  sqlite3_finalize(st);
  st = NULL;
  if (!nst) {
    rc = 0;
    goto out;
  }
  /* function ids of the frames that can be candidates */
  for (int s = 0; s < nst; s++)
    for (int j = ws[s].k; j < ws[s].n; j++) {
      locinfo_t *x = &inf[li[ws[s].off + j]];
      const lgr_loc_t *l = &v[li[ws[s].off + j]];
      if (x->fid >= 0 || !(x->flags & LF_OWN) || (x->flags & (LF_MACH | LF_PY))) continue;
      if (fid_key(key, sizeof key, l->function, l->module) != 0) continue;
      int added = 0, id = lgu_strmap_get_or_add(&hl.fids, key, hl.nfid, &added);
      if (id < 0) goto out;
      hl.nfid += added;
      x->fid = id;
    }
  if (!hl.nfid) { /* no function of the program's own is a candidate */
    rc = 0;
    goto out;
  }
  hl.isw = calloc((size_t)hl.nfid, 1);
  stat = malloc((size_t)hl.nfid * sizeof *stat);
  if (!hl.isw || !stat) goto out;
  if (lgr_prepare(db,
                  "SELECT alloc_bytes, alloc_blocks FROM samples WHERE proc=? AND stack=? ORDER BY seq DESC LIMIT 1",
                  -1, &sz, NULL) != SQLITE_OK)
    sz = NULL;
  for (int round = 0; round < LGR_WRAPPER_DEPTH; round++) {
    memset(stat, 0, (size_t)hl.nfid * sizeof *stat);
    for (int s = 0; s < nst; s++) {
      int j = candidate(&ws[s], li, inf);
      if (j < 0) continue;
      const locinfo_t *f = &inf[li[ws[s].off + j]], *c = &inf[li[ws[s].off + j + 1]];
      wstat_t *t = &stat[f->fid];
      int line = v[li[ws[s].off + j]].line;
      if (!t->seen) t->seen = 1, t->line = line;
      else if (t->line != line) t->lines2 = 1;
      int seen = 0;
      for (int q = 0; q < t->ncaller; q++) seen |= t->caller[q] == c->site;
      if (!seen && t->ncaller < LGR_WRAPPER_CALLERS) t->caller[t->ncaller++] = c->site;
      /* every caller further out calls a function that allocates and is no wrapper */
      for (int q = j + 1; q < ws[s].n; q++) {
        int g = inf[li[ws[s].off + q]].fid;
        if (g >= 0 && g != f->fid) stat[g].deep = 1;
      }
    }
    int added = 0;
    for (int fid = 0; fid < hl.nfid; fid++) {
      wstat_t *t = &stat[fid];
      t->cand = !hl.isw[fid] && !t->deep && t->seen && !t->lines2 && t->ncaller >= LGR_WRAPPER_CALLERS;
    }
    /* the sizes, for the candidates only: different sizes for different callers */
    double *first = calloc((size_t)hl.nfid, sizeof *first);
    unsigned char *differ = calloc((size_t)hl.nfid, 1);
    if (!first || !differ) {
      free(first);
      free(differ);
      goto out;
    }
    for (int fid = 0; fid < hl.nfid; fid++) first[fid] = NAN;
    for (int s = 0; s < nst && sz; s++) {
      int j = candidate(&ws[s], li, inf);
      if (j < 0) continue;
      int fid = inf[li[ws[s].off + j]].fid;
      if (!stat[fid].cand || differ[fid]) continue;
      if (isnan(ws[s].size)) ws[s].size = stack_size(db, sz, proc, ws[s].stack);
      if (ws[s].size < 0) continue;
      if (isnan(first[fid])) first[fid] = ws[s].size;
      else if (first[fid] != ws[s].size) differ[fid] = 1;
    }
    for (int fid = 0; fid < hl.nfid; fid++)
      if (stat[fid].cand && differ[fid]) hl.isw[fid] = 1, added++;
    free(first);
    free(differ);
    if (!added) break;
  }
  rc = 0;
out:
  if (rc) lgr_fail(-ENOMEM);
  sqlite3_finalize(st);
  sqlite3_finalize(sz);
  free(inf);
  free(lv);
  free(ws);
  free(li);
  free(stat);
  return rc;
}

void lgr_headline_load(sqlite3 *db, int proc, const lgr_loc_t *v, size_t nv, int64_t lo) {
  lgr_headline_clear();
  sqlite3_stmt *st;
  char *exe = NULL;
  if (lgr_prepare(db, "SELECT exe FROM processes WHERE proc=?", -1, &st, NULL) == SQLITE_OK) {
    sqlite3_bind_int(st, 1, proc);
    if (lgr_row(st) && sqlite3_column_text(st, 0)) exe = lgr_dupstr(sqlite3_column_text(st, 0));
    sqlite3_finalize(st);
  }
  if (lgr_prepare(db, "SELECT path FROM modules WHERE proc=?", -1, &st, NULL) == SQLITE_OK) {
    sqlite3_bind_int(st, 1, proc);
    while (lgr_row(st)) {
      const char *p = (const char *)sqlite3_column_text(st, 0);
      if (!p || !*p) continue;
      int added = 0;
      if (lgu_strmap_get_or_add(lgr_module_is_system(p, exe) ? &hl.sysm : &hl.ownm, base_name(p), 1, &added) < 0) {
        lgr_fail(-ENOMEM);
        break;
      }
    }
    sqlite3_finalize(st);
  }
  free(exe);
  if (lgr_failed()) return;
  hl.ready = 1;
  if (find_wrappers(db, proc, v, nv, lo) != 0) hl.ready = 0;
}
