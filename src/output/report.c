/* SPDX-License-Identifier: MIT */
/*
 * report.c - builds the report: reads runs, stacks and snapshot series from the
 * database, merges the stacks of each allocation site, runs the detector on every
 * site's series, separates significant growth from minor growth, finds growth spread
 * over many sites, and groups the suspects into leaks (see report.h for the units).
 * Detection is recomputed here, so a database left by a killed collector, or one
 * recorded by an older version, is reported with today's detector. This file holds the
 * order of the steps, the runs and frames read from the database and the rules that
 * name allocator machinery and minor growth; the per-site analysis is in
 * report_sites.c, the grouping into leaks and the holders in report_leaks.c, GPU
 * memory in report_gpu.c, printing in report_print.c.
 */
#include "output/report.h"

#include <errno.h>
#include <math.h>
#include <sqlite3.h>
#include <stdlib.h>
#include <string.h>

#include "output/report_impl.h"

char *lgr_dupstr(const unsigned char *s) { return lgr_strdup(s ? (const char *)s : ""); }

char *lgr_strdup(const char *s) {
  if (!s) return NULL;
  char *d = strdup(s);
  if (!d) lgr_fail(-ENOMEM);
  return d;
}

/* A thin wrapper of the malloc family that programs and allocators put in front of it:
 * an optional prefix (redis z, GNU x, jemalloc je_, mimalloc mi_, tcmalloc tc_, glib
 * g_, CPython Py*_), an optional "try", a malloc-family name, an optional suffix
 * (_usable, _num, 0, _n, _with_size). zmalloc, ztrycalloc_usable, xmalloc, g_malloc0,
 * PyMem_RawMalloc and je_realloc are wrappers; cache_alloc and alloc_node are not. */
static int is_alloc_wrapper(const char *fn) {
  static const char *const prefix[] = {"",       "z",         "x",         "je_",     "mi_",        "tc_",        "g_",
                                       "PyMem_", "PyMem_Raw", "PyObject_", "_PyMem_", "_PyObject_", "_PyMem_Raw", NULL};
  static const char *const base[] = {"malloc", "calloc", "realloc", "strdup", "strndup", "memalign",
                                     "Malloc", "Calloc", "Realloc", "New",    NULL};
  static const char *const suffix[] = {"", "_usable", "_num", "0", "_n", "_with_size", "_default", NULL};
  for (int p = 0; prefix[p]; p++) {
    size_t lp = strlen(prefix[p]);
    if (strncmp(fn, prefix[p], lp) != 0) continue;
    const char *r = fn + lp;
    if (!strncmp(r, "try", 3)) r += 3;
    for (int b = 0; base[b]; b++) {
      size_t lb = strlen(base[b]);
      if (strncmp(r, base[b], lb) != 0) continue;
      /* "New" only after a Python prefix (PyObject_New) */
      if (!strcmp(base[b], "New") && lp < 3) continue;
      for (int x = 0; suffix[x]; x++)
        if (!strcmp(r + lb, suffix[x])) return 1;
    }
  }
  return 0;
}

/* A CUDA runtime API function as libcudart defines it (cudaMalloc, cudaStreamCreate,
 * cudaMallocAsync_ptsz): "cuda" and a capital letter. */
static int is_cuda_runtime_api(const char *fn) { return fn && !strncmp(fn, "cuda", 4) && fn[4] >= 'A' && fn[4] <= 'Z'; }

int lgr_is_machinery(const char *fn, const char *file, const char *module) {
  static const char *const alloc_fns[] = {
      "malloc",         "calloc",          "realloc",  "free",      "reallocarray",  "posix_memalign",
      "memalign",       "aligned_alloc",   "valloc",   "pvalloc",   "mmap",          "mmap64",
      "strdup",         "strndup",         "__strdup", "__strndup", "__libc_malloc", "__libc_calloc",
      "__libc_realloc", "__libc_memalign", "xmalloc",  "xcalloc",   "xrealloc",      "g_malloc",
      "g_malloc0",      "g_realloc",       NULL};
  if (module && strstr(module, "libleakguard")) return 1;
  /* CUDA runtime and driver. The runtime linked statically (nvcc's default) names its
   * internal functions libcudart_static_<sha1> (CUDA 13; __cudart<N> before); the
   * shared one is its own module. cudaMalloc* and cudaHostAlloc are the allocation
   * calls (and their templates in cuda_runtime.h), cuMem* the driver's. Internals that
   * carry no recognisable name are handled per stack (lgr_site_frame). */
  if (module && (strstr(module, "libcudart.so") || strstr(module, "libcuda.so"))) return 1;
  if (fn && (!strncmp(fn, "libcudart_static_", 17) || !strncmp(fn, "__cudart", 8) || !strncmp(fn, "cudart::", 8) ||
             !strncmp(fn, "cudaMalloc", 10) || !strncmp(fn, "cudaHostAlloc", 13) || !strncmp(fn, "cuMem", 5)))
    return 1;
  if (file) {
    const char *b = strrchr(file, '/');
    b = b ? b + 1 : file;
    if (!strcmp(b, "cuda_runtime.h") || !strcmp(b, "cuda_runtime_api.h")) return 1;
  }
  if (!fn) return 0;
  for (int i = 0; alloc_fns[i]; i++)
    if (!strcmp(fn, alloc_fns[i])) return 1;
  if (is_alloc_wrapper(fn)) return 1;
  if (!strncmp(fn, "operator new", 12) || !strncmp(fn, "_Zn", 3)) return 1;
  if (!strncmp(fn, "std::", 5) || !strncmp(fn, "__gnu_cxx::", 11)) return 1;
  if (file && !strncmp(file, "/usr/include/c++/", 17)) return 1;
  return 0;
}

/* How far a run of frames without source (the CUDA runtime's internals) is searched
 * for the runtime API function the program called. */
#define LGR_CUDART_DEPTH 64

int lgr_site_frame(const void *frames, int n, lgr_frame_at_fn at) {
  const char *fn, *file, *module;
  int k = 0;
  for (; k < n - 1; k++) {
    at(frames, k, &fn, &file, &module);
    if (!lgr_is_machinery(fn, file, module)) break;
  }
  /* The CUDA runtime: between the driver entry point (our wrapper, not in the stack)
   * and the runtime API function the program called (cudaMalloc, cudaStreamCreate...)
   * lie the runtime's internals, whatever their names (obfuscated, or none at all in
   * a binary without symbols). libcudart has no debug information: those frames and
   * the API function have no source file. A run of such frames that reaches a
   * "cuda[A-Z]..." function without a source file is machinery, and so is that
   * function (and an API function calling it); the site is what called the API. */
  for (int j = k; j < n - 1 && j < k + LGR_CUDART_DEPTH; j++) {
    at(frames, j, &fn, &file, &module);
    if (file && *file) break;
    if (!is_cuda_runtime_api(fn)) continue;
    int s = j + 1;
    for (; s < n - 1; s++) {
      at(frames, s, &fn, &file, &module);
      if (!((!file || !*file) && is_cuda_runtime_api(fn)) && !lgr_is_machinery(fn, file, module)) break;
    }
    return s;
  }
  return k;
}

int lgr_is_import_frame(const char *fn, const char *file) {
  (void)fn; /* every function of importlib's bootstrap runs for imports only (and for the
               interpreter's own start-up, _install) */
  return file &&
         (!strcmp(file, "<frozen importlib._bootstrap>") || !strcmp(file, "<frozen importlib._bootstrap_external>"));
}

/* Minor growth: the rule of docs/detection.md. */
int lgr_is_minor(double growth, double rate, double size, double blocks_gained, double tto) {
  double rel = size > 0 ? growth / size : 1;
  int slow = (isnan(tto) || tto > LGR_MINOR_OOM_S) && !(rate > 0 && size / rate < LGR_MINOR_DOUBLING_S);
  if (rel < LGR_MINOR_REL && slow) return 1;                                  /* tiny against the process */
  if (blocks_gained < LGR_MINOR_BLOCKS && rel < LGR_FEW_BLOCKS_REL) return 1; /* a handful of first uses */
  return 0;
}

/* ------------------------------------------------------------------ runs */

int lgr_is_python_module(const char *m) { return m && !strcmp(m, "python"); }

static int load_runs(sqlite3 *db, lgr_report_t *r) {
  sqlite3_stmt *st;
  const char *sql = "SELECT p.proc, p.pid, p.ppid, p.parent_proc, p.command, p.end_reason, p.kind,"
                    " p.exit_status, p.signal, p.start_ns, p.end_ns, p.peak_live_bytes, p.final_live_bytes,"
                    " p.dropped, p.steps, p.snapshots, p.sample_bytes,"
                    " (SELECT max(t_ns) FROM snapshots s WHERE s.proc=p.proc),"
                    " (SELECT limit_bytes FROM snapshots s WHERE s.proc=p.proc ORDER BY seq DESC LIMIT 1),"
                    " (SELECT usage_bytes FROM snapshots s WHERE s.proc=p.proc ORDER BY seq DESC LIMIT 1),"
                    " (SELECT max(live_bytes) FROM snapshots s WHERE s.proc=p.proc),"
                    " (SELECT live_bytes FROM snapshots s WHERE s.proc=p.proc ORDER BY seq DESC LIMIT 1),"
                    " (SELECT dropped FROM snapshots s WHERE s.proc=p.proc ORDER BY seq DESC LIMIT 1),"
                    " p.rank, p.host"
                    " FROM processes p ORDER BY p.proc";
  if (lgr_prepare(db, sql, -1, &st, NULL) != SQLITE_OK) return -EIO;
  int cap = 0;
  while (lgr_row(st)) {
    if (r->nruns == cap) {
      cap = cap ? cap * 2 : 8;
      lgr_run_t *n = realloc(r->runs, (size_t)cap * sizeof *n);
      if (!n) {
        lgr_fail(-ENOMEM);
        break;
      }
      r->runs = n;
    }
    lgr_run_t *u = &r->runs[r->nruns++];
    memset(u, 0, sizeof *u);
    int c = 0;
    u->pattern = -1;
    u->proc = sqlite3_column_int(st, c++);
    u->pid = sqlite3_column_int(st, c++);
    u->ppid = sqlite3_column_int(st, c++);
    u->parent_proc = sqlite3_column_int(st, c++);
    u->command = lgr_dupstr(sqlite3_column_text(st, c++));
    u->end_reason = lgr_dupstr(sqlite3_column_text(st, c++));
    u->kind = lgr_dupstr(sqlite3_column_text(st, c++));
    u->has_exit = sqlite3_column_type(st, c) != SQLITE_NULL;
    u->exit_status = sqlite3_column_int(st, c++);
    u->has_signal = sqlite3_column_type(st, c) != SQLITE_NULL;
    u->signal = sqlite3_column_int(st, c++);
    int64_t start = sqlite3_column_int64(st, c++);
    int has_end = sqlite3_column_type(st, c) != SQLITE_NULL;
    int64_t end = sqlite3_column_int64(st, c++);
    u->peak_live_bytes = sqlite3_column_int64(st, c++);
    u->final_live_bytes = sqlite3_column_int64(st, c++);
    u->dropped = (uint64_t)sqlite3_column_int64(st, c++);
    u->steps = (uint64_t)sqlite3_column_int64(st, c++);
    u->snapshots = (uint64_t)sqlite3_column_int64(st, c++);
    u->sample_bytes = (uint64_t)sqlite3_column_int64(st, c++);
    int64_t last_snap = sqlite3_column_int64(st, c++);
    u->limit_bytes = (uint64_t)sqlite3_column_int64(st, c++);
    u->usage_bytes = (uint64_t)sqlite3_column_int64(st, c++);
    /* The process row is rewritten at the end; after a crash of the collector the
     * snapshots are the truth. */
    int64_t peak = sqlite3_column_int64(st, c++);
    int64_t final = sqlite3_column_int64(st, c++);
    int64_t dropped = sqlite3_column_int64(st, c++);
    u->rank = sqlite3_column_type(st, c) == SQLITE_NULL ? -1 : sqlite3_column_int(st, c);
    c++;
    u->host = sqlite3_column_type(st, c) == SQLITE_NULL ? NULL : lgr_dupstr(sqlite3_column_text(st, c));
    c++;
    u->local_rank = u->world_size = -1;
    u->start_ns = start;
    u->exit_begin_s = NAN;
    u->gap_from_s = u->gap_to_s = NAN;
    if (peak > u->peak_live_bytes) u->peak_live_bytes = peak;
    if (!has_end) {
      u->final_live_bytes = final;
      if ((uint64_t)dropped > u->dropped) u->dropped = (uint64_t)dropped;
    }
    /* In doubles: hostile values must not overflow an int64 subtraction (fuzz). */
    u->duration_s = ((double)(has_end ? end : last_snap) - (double)start) / 1e9;
    if (u->duration_s < 0) u->duration_s = 0;
  }
  sqlite3_finalize(st);
  /* Labels (databases before them have no such table). */
  if (lgr_prepare(db, "SELECT proc, key, value FROM labels", -1, &st, NULL) == SQLITE_OK) {
    while (lgr_row(st)) {
      int proc = sqlite3_column_int(st, 0);
      const char *k = (const char *)sqlite3_column_text(st, 1);
      const unsigned char *v = sqlite3_column_text(st, 2);
      if (!k || !v) continue;
      for (int i = 0; i < r->nruns; i++) {
        if (r->runs[i].proc != proc) continue;
        if (!strcmp(k, "local_rank")) r->runs[i].local_rank = atoi((const char *)v);
        else if (!strcmp(k, "world_size")) r->runs[i].world_size = atoi((const char *)v);
        else if (!strcmp(k, "exit_begin_ns"))
          r->runs[i].exit_begin_s = ((double)strtoll((const char *)v, NULL, 10) - (double)r->runs[i].start_ns) / 1e9;
      }
    }
    sqlite3_finalize(st);
  }
  /* Notes (databases before them have no such table); those of proc 0 (the recording
   * itself, a parent not recorded) go to the first run. */
  if (r->nruns && lgr_prepare(db, "SELECT proc, note FROM notes ORDER BY proc, kind", -1, &st, NULL) == SQLITE_OK) {
    while (lgr_row(st)) {
      int proc = sqlite3_column_int(st, 0);
      const char *note = (const char *)sqlite3_column_text(st, 1);
      if (!note) continue;
      lgr_run_t *u = &r->runs[0];
      for (int i = 0; i < r->nruns; i++)
        if (r->runs[i].proc == proc) u = &r->runs[i];
      size_t had = u->notes ? strlen(u->notes) : 0, add = strlen(note);
      char *n = realloc(u->notes, had + add + 2);
      if (!n) {
        lgr_fail(-ENOMEM);
        break;
      }
      if (had) n[had++] = '\n';
      memcpy(n + had, note, add + 1);
      u->notes = n;
    }
    sqlite3_finalize(st);
  }
  return 0;
}

/* ------------------------------------------------------------------ frames */

/* The locations of one process (docs/schema.md: a stack is a list of location ids),
 * read once per process and kept for the build: every frame of every site is one of
 * them. Indexed by loc - lo. */
static _Thread_local struct {
  sqlite3 *db;
  int proc, loaded;
  int64_t lo;
  lgr_loc_t *v; /* [n], function == NULL: no such location */
  size_t n;
} locs;

static void locs_clear(void) {
  for (size_t i = 0; i < locs.n; i++) {
    free(locs.v[i].function);
    free(locs.v[i].file);
    free(locs.v[i].module);
  }
  free(locs.v);
  memset(&locs, 0, sizeof locs);
}

static int locs_load(sqlite3 *db, int proc) {
  if (locs.loaded && locs.db == db && locs.proc == proc) return 0;
  locs_clear();
  locs.db = db;
  locs.proc = proc;
  locs.loaded = 1;
  sqlite3_stmt *st;
  if (lgr_prepare(db, "SELECT min(loc), max(loc) FROM locations WHERE proc=?", -1, &st, NULL) != SQLITE_OK) return -EIO;
  sqlite3_bind_int(st, 1, proc);
  int64_t lo = 0, hi = -1;
  if (lgr_row(st) && sqlite3_column_type(st, 0) != SQLITE_NULL) {
    lo = sqlite3_column_int64(st, 0);
    hi = sqlite3_column_int64(st, 1);
  }
  sqlite3_finalize(st);
  /* ids are dense (the writer counts up from 1): a damaged database's holes cost memory,
   * so keep the range sane */
  if (hi < lo || hi - lo > 50000000) return 0;
  locs.lo = lo;
  locs.n = (size_t)(hi - lo + 1);
  locs.v = calloc(locs.n, sizeof *locs.v);
  if (!locs.v) {
    locs.n = 0;
    lgr_fail(-ENOMEM);
    return -ENOMEM;
  }
  if (lgr_prepare(db, "SELECT loc, function, file, line, module, inlined, ip FROM locations WHERE proc=?", -1, &st,
                  NULL) != SQLITE_OK)
    return -EIO;
  sqlite3_bind_int(st, 1, proc);
  while (lgr_row(st)) {
    int64_t id = sqlite3_column_int64(st, 0);
    if (id < lo || id > hi) continue;
    lgr_loc_t *l = &locs.v[id - lo];
    if (l->function) continue;
    l->function = lgr_dupstr(sqlite3_column_text(st, 1));
    l->file = lgr_dupstr(sqlite3_column_text(st, 2));
    l->line = sqlite3_column_int(st, 3);
    l->module = lgr_dupstr(sqlite3_column_text(st, 4));
    l->inlined = sqlite3_column_int(st, 5);
    l->ip = (uint64_t)sqlite3_column_int64(st, 6);
    if (!l->function || !l->file || !l->module) break;
  }
  sqlite3_finalize(st);
  return 0;
}

int lgr_parse_locs(const char *text, int64_t *ids, int max) {
  int n = 0;
  if (!text) return 0;
  for (const char *p = text; *p && n < max;) {
    if (*p >= '0' && *p <= '9') {
      int64_t v = 0;
      while (*p >= '0' && *p <= '9') {
        if (v < 1000000000000LL) v = v * 10 + (*p - '0');
        p++;
      }
      ids[n++] = v;
    } else p++;
  }
  return n;
}

int lgr_stack_locs(sqlite3 *db, int proc, const char *locs_text, const lgr_loc_t **out, int max) {
  if (locs_load(db, proc) != 0) return 0;
  int64_t ids[LGR_MAX_FRAMES];
  int n = lgr_parse_locs(locs_text, ids, max < LGR_MAX_FRAMES ? max : LGR_MAX_FRAMES), k = 0;
  for (int i = 0; i < n; i++) {
    int64_t x = ids[i] - locs.lo;
    if (x < 0 || (uint64_t)x >= locs.n || !locs.v[x].function) continue; /* a damaged database */
    out[k++] = &locs.v[x];
  }
  return k;
}

static void frame_at(const void *frames, int i, const char **fn, const char **file, const char **module) {
  const lgr_frame_t *f = (const lgr_frame_t *)frames + i;
  *fn = f->function;
  *file = f->file;
  *module = f->module;
}

void lgr_loc_at(const void *lv, int i, const char **fn, const char **file, const char **module) {
  const lgr_loc_t *l = ((const lgr_loc_t *const *)lv)[i];
  *fn = l->function;
  *file = l->file;
  *module = l->module;
}

/* Loads the frames of stack s->stack, innermost first, and finds the site frame. A
 * Python stack is recorded as its Python frames (innermost first) followed by the
 * native frames under the innermost Python line; it is read the way the program ran:
 * the native allocation frames, then that line, then its callers. Allocator machinery
 * in front is trimmed (unless native), and so are the interpreter's own frames
 * between the allocation and the Python line. */
int lgr_load_frames(sqlite3 *db, lgr_site_t *s, int native) {
  sqlite3_stmt *st = lgr_cached(db, LGR_STMT_STACK_LOCS, "SELECT locs FROM stacks WHERE proc=? AND stack=?");
  if (!st) return -EIO;
  sqlite3_bind_int(st, 1, s->proc);
  sqlite3_bind_int(st, 2, s->stack);
  const lgr_loc_t *lv[LGR_MAX_FRAMES];
  int nl = lgr_row(st) ? lgr_stack_locs(db, s->proc, (const char *)sqlite3_column_text(st, 0), lv, LGR_MAX_FRAMES) : 0;
  sqlite3_reset(st);
  if (nl > 0) {
    s->all_frames = calloc((size_t)nl, sizeof *s->all_frames);
    if (!s->all_frames) {
      lgr_fail(-ENOMEM);
      nl = 0;
    }
  }
  for (int i = 0; i < nl; i++) {
    lgr_frame_t *f = &s->all_frames[s->nall++];
    f->function = lgr_strdup(lv[i]->function);
    f->file = lgr_strdup(lv[i]->file);
    f->module = lgr_strdup(lv[i]->module);
    f->line = lv[i]->line;
    f->inlined = lv[i]->inlined;
    f->ip = lv[i]->ip;
  }
  /* Python frames first as recorded: rotate the native tail to the front. */
  int npy = 0;
  while (npy < s->nall && lgr_is_python_module(s->all_frames[npy].module)) npy++;
  if (npy > 0 && npy < s->nall) {
    lgr_frame_t *tmp = malloc((size_t)s->nall * sizeof *tmp);
    if (tmp) {
      int nn = s->nall - npy;
      memcpy(tmp, s->all_frames + npy, (size_t)nn * sizeof *tmp);
      memcpy(tmp + nn, s->all_frames, (size_t)npy * sizeof *tmp);
      memcpy(s->all_frames, tmp, (size_t)s->nall * sizeof *tmp);
      free(tmp);
    }
  }
  int skip = native ? 0 : lgr_site_frame(s->all_frames, s->nall, frame_at);
  /* No frames (a damaged database): no pointer arithmetic on NULL (fuzz, issue #17). */
  s->frames = s->all_frames ? s->all_frames + skip : NULL;
  s->nframes = s->nall - skip;
  s->site_frame = 0;
  if (npy > 0) {
    if (!native) {
      /* Fold the interpreter's own native frames away (--native keeps them): they are
       * moved behind the end, still owned by all_frames. */
      int w = 0;
      for (int i = 0; i < s->nframes; i++) {
        const char *m = s->frames[i].module;
        if (!strncmp(m, "python3", 7) || !strncmp(m, "libpython3", 10)) continue;
        lgr_frame_t t = s->frames[w];
        s->frames[w++] = s->frames[i];
        s->frames[i] = t;
      }
      s->nframes = w;
    }
    for (int i = 0; i < s->nframes; i++)
      if (lgr_is_python_module(s->frames[i].module)) {
        s->site_frame = i;
        break;
      }
  }
  return 0;
}

static void free_frames(lgr_frame_t *f, int n) {
  for (int i = 0; i < n; i++) {
    free(f[i].function);
    free(f[i].file);
    free(f[i].module);
  }
  free(f);
}

void lgr_site_free(lgr_site_t *s) {
  free(s->holders_json);
  free(s->bounded);
  free(s->series);
  free_frames(s->all_frames, s->nall);
  free(s->stacks);
  free(s->source);
  memset(s, 0, sizeof *s);
}

/* The text of line `line` of file, trimmed, or NULL (the file is not here). */
static char *source_line(const char *file, int line) {
  if (!file || !*file || line <= 0 || file[0] == '<') return NULL;
  FILE *f = fopen(file, "r");
  if (!f) return NULL;
  char buf[512];
  char *out = NULL;
  for (int n = 1; fgets(buf, sizeof buf, f);) {
    size_t len = strlen(buf);
    int whole = len > 0 && buf[len - 1] == '\n';
    if (n == line) {
      if (whole) buf[--len] = 0;
      char *p = buf;
      while (*p == ' ' || *p == '\t') p++;
      while (len > 0 && (buf[len - 1] == ' ' || buf[len - 1] == '\r' || buf[len - 1] == '\t')) buf[--len] = 0;
      if (*p) out = lgr_strdup(p);
      break;
    }
    if (whole) n++;
  }
  fclose(f);
  return out;
}

static int cmp_slife(const void *a, const void *b) {
  const lgr_stacklife_t *x = a, *y = b;
  if (x->proc != y->proc) return (x->proc > y->proc) - (x->proc < y->proc);
  return (x->stack > y->stack) - (x->stack < y->stack);
}

const lgr_life_t *lgr_stack_life(const lgr_report_t *r, int proc, int stack) {
  lgr_stacklife_t k = {.proc = proc, .stack = stack};
  const lgr_stacklife_t *e = r->nslife ? bsearch(&k, r->slife, r->nslife, sizeof k, cmp_slife) : NULL;
  return e ? &e->life : NULL;
}

static int cmp_strength(const void *a, const void *b) {
  const lgr_site_t *x = a, *y = b;
  if (x->strength != y->strength) return x->strength < y->strength ? 1 : -1;
  if (x->r.growth_bytes_per_s != y->r.growth_bytes_per_s)
    return x->r.growth_bytes_per_s < y->r.growth_bytes_per_s ? 1 : -1;
  return (x->live_bytes < y->live_bytes) - (x->live_bytes > y->live_bytes);
}

/* Ranks growing sites, strongest first. The growth rate alone would put first a step
 * seen in the last tenth of a second of a short run (two sampled blocks give a large
 * rate over a short span) above a leak that grew for the whole run. The key weighs the
 * rate by the detector's confidence and by how long the growth was seen:
 *   strength = rate x confidence x span / (span + tau),
 * span = the analysed growing part (until_s - since_s), tau = a tenth of the longest
 * such span among the sites ranked together, at least 1 s. Growth seen over many tau
 * counts at its full rate; growth seen for a moment counts a fraction of it. */
void lgr_rank_sites(lgr_site_t *s, int n) {
  double longest = 0;
  for (int i = 0; i < n; i++) {
    double span = s[i].r.until_s - s[i].r.since_s;
    if (isfinite(span) && span > longest) longest = span;
  }
  double tau = fmax(1.0, 0.1 * longest);
  for (int i = 0; i < n; i++) {
    double span = s[i].r.until_s - s[i].r.since_s, rate = s[i].r.growth_bytes_per_s;
    double conf = isfinite(s[i].r.confidence) ? fmin(1, fmax(0, s[i].r.confidence)) : 0;
    if (!isfinite(span) || span < 0) span = 0;
    s[i].strength = isfinite(rate) && rate > 0 ? rate * conf * span / (span + tau) : 0;
  }
  if (n > 1) qsort(s, (size_t)n, sizeof *s, cmp_strength);
}

static int cmp_live(const void *a, const void *b) {
  const lgr_site_t *x = a, *y = b;
  return (x->live_bytes < y->live_bytes) - (x->live_bytes > y->live_bytes);
}

int lgr_push_site(lgr_site_t **arr, int *n, int *cap, const lgr_site_t *s) {
  if (*n == *cap) { /* the capacity grows only with the array */
    int nc = *cap ? *cap * 2 : 16;
    lgr_site_t *a = realloc(*arr, (size_t)nc * sizeof *a);
    if (!a) {
      lgr_fail(-ENOMEM); /* the site would be missing from the report */
      return -ENOMEM;
    }
    *arr = a;
    *cap = nc;
  }
  (*arr)[(*n)++] = *s;
  return 0;
}

/* ------------------------------------------------------------------ build */

static _Thread_local int build_err;
static _Thread_local char build_why[256]; /* the first failure's reason, said by lgr_build */

void lgr_fail_why(int err, const char *fmt, ...) {
  if (build_err) return;
  build_err = err;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(build_why, sizeof build_why, fmt, ap);
  va_end(ap);
}

/* A statement that stopped with an error: its reason kept now (a later statement's
 * success would make SQLite's message "not an error"). */
static void step_failed(sqlite3_stmt *st, int rc) {
  if (rc == SQLITE_NOMEM) lgr_fail(-ENOMEM);
  else lgr_fail_why(-EIO, "%s", sqlite3_errmsg(sqlite3_db_handle(st)));
}

int lgr_row(sqlite3_stmt *st) {
  int rc = sqlite3_step(st);
  if (rc == SQLITE_ROW) return 1;
  if (rc != SQLITE_DONE) step_failed(st, rc);
  return 0;
}

int lgr_prepare(sqlite3 *db, const char *sql, int n, sqlite3_stmt **st, const char **tail) {
  int rc = sqlite3_prepare_v2(db, sql, n, st, tail);
  if (rc == SQLITE_NOMEM) lgr_fail(-ENOMEM); /* other errors: a table older databases lack */
  return rc;
}

/* Statements that the report runs once per site or stack, prepared once per build:
 * preparing costs more than the query itself, and a torch process has thousands of
 * sites. Reset (not finalized) between uses; lgr_build finalizes them. */
static _Thread_local struct {
  sqlite3 *db;
  sqlite3_stmt *st[LGR_STMT_COUNT];
} stmts;

sqlite3_stmt *lgr_cached(sqlite3 *db, int which, const char *sql) {
  if (which < 0 || which >= LGR_STMT_COUNT) return NULL;
  if (stmts.db != db) {
    lgr_cache_clear();
    stmts.db = db;
  }
  sqlite3_stmt *st = stmts.st[which];
  if (st) {
    sqlite3_reset(st);
    sqlite3_clear_bindings(st);
    return st;
  }
  if (lgr_prepare(db, sql, -1, &st, NULL) != SQLITE_OK) {
    sqlite3_finalize(st);
    return NULL;
  }
  return stmts.st[which] = st;
}

void lgr_cache_clear(void) {
  locs_clear();
  for (int i = 0; i < LGR_STMT_COUNT; i++) {
    sqlite3_finalize(stmts.st[i]);
    stmts.st[i] = NULL;
  }
  stmts.db = NULL;
}

int lgr_step(sqlite3_stmt *st) {
  int rc = sqlite3_step(st);
  if (rc != SQLITE_ROW && rc != SQLITE_DONE) step_failed(st, rc);
  return rc;
}

int lgr_failed(void) { return build_err != 0; }

int lgr_take_failure(void) {
  int e = build_err;
  build_err = 0;
  build_why[0] = 0;
  return e;
}

void lgr_fail(int err) {
  if (!build_err) build_err = err;
}

static int build(sqlite3 *db, const lgr_options_t *o, lgr_report_t *r, char *why, size_t whylen);

int lgr_build(lgst_t *store, const lgr_options_t *o, lgr_report_t *r, char *why, size_t whylen) {
  sqlite3 *db = lgst_db(store);
  build_err = 0;
  build_why[0] = 0;
  int rc = build(db, o, r, why, whylen);
  lgr_cache_clear();
  if (rc == 0 && build_err) {
    rc = build_err;
    if (rc == -ENOMEM) snprintf(why, whylen, "out of memory while building the report");
    else if (build_why[0]) snprintf(why, whylen, "cannot read the database: %s", build_why);
    else if (sqlite3_errcode(db) != SQLITE_OK)
      snprintf(why, whylen, "cannot read the database: %s", sqlite3_errmsg(db));
    else snprintf(why, whylen, "cannot read the database: damaged (%s)", strerror(-rc));
    lgr_free(r);
  }
  build_err = 0;
  build_why[0] = 0;
  return rc;
}

static int build(sqlite3 *db, const lgr_options_t *o, lgr_report_t *r, char *why, size_t whylen) {
  memset(r, 0, sizeof *r);
  if (load_runs(db, r) != 0) {
    snprintf(why, whylen, "cannot read runs: %s", build_why[0] ? build_why : sqlite3_errmsg(db));
    lgr_free(r);
    return -EIO;
  }
  lgr_load_gpus(db, r);
  if (build_err) return 0; /* lgr_build frees and says why */
  int ocap = 0;
  lgr_site_t *others = NULL;
  int nothers = 0;
  for (int i = 0; i < r->nruns; i++) {
    if (lgr_analyse_proc(db, &r->runs[i], o, r, &others, &nothers, &ocap) != 0) {
      snprintf(why, whylen, "cannot read snapshots: %s", build_why[0] ? build_why : sqlite3_errmsg(db));
      for (int k = 0; k < nothers; k++) lgr_site_free(&others[k]);
      free(others);
      lgr_free(r);
      return -EIO;
    }
    if (build_err) break;
  }
  if (build_err) { /* stop before the half-read sites are used */
    r->others = others;
    r->nothers = nothers;
    return 0;
  }
  lgr_rank_sites(r->suspects, r->nsuspects);
  lgr_rank_sites(r->minor, r->nminor);
  if (r->nslife > 1) qsort(r->slife, r->nslife, sizeof *r->slife, cmp_slife);
  if (nothers) qsort(others, (size_t)nothers, sizeof *others, cmp_live);
  /* the five largest, and every site found bounded (it looked like a leak) */
  int keep = 0;
  for (int i = 0; i < nothers; i++) {
    if (keep < 5 || others[i].bounded) others[keep++] = others[i];
    else lgr_site_free(&others[i]);
  }
  r->others = others;
  r->nothers = keep;
  for (int i = 0; i < r->nsuspects; i++) {
    lgr_site_t *s = &r->suspects[i];
    if (s->nframes) s->source = source_line(s->frames[s->site_frame].file, s->frames[s->site_frame].line);
  }
  if (build_err) return 0;
  lgr_group_leaks(r);
  if (build_err) return 0;
  lgr_analyse_leaks(r);
  if (build_err) return 0;
  lgr_split_minor(r);
  lgr_explain_gaps(db, r);
  /* a process without a leak is not described by a leak's shape */
  for (int i = 0; i < r->nruns; i++)
    if (!r->runs[i].leaking && r->runs[i].pattern >= 0 && lg_pattern_is_leak((lg_pattern_t)r->runs[i].pattern))
      r->runs[i].pattern = r->runs[i].pattern_nonleak;
  sqlite3_stmt *st;
  if (lgr_prepare(db, "SELECT value FROM meta WHERE key='limit_source'", -1, &st, NULL) == SQLITE_OK) {
    if (lgr_row(st)) r->limit_source = lgr_dupstr(sqlite3_column_text(st, 0));
    sqlite3_finalize(st);
  }
  /* said only where a Python frame was recorded: a C program has no import */
  if (lgr_prepare(db,
                  "SELECT value FROM meta WHERE key='import_sample_bytes'"
                  " AND EXISTS (SELECT 1 FROM locations WHERE module='python')",
                  -1, &st, NULL) == SQLITE_OK) {
    if (lgr_row(st)) r->import_sample = (uint64_t)sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
  }
  if (lgr_prepare(db, "SELECT 1 FROM meta WHERE key='attached_at'", -1, &st, NULL) == SQLITE_OK) {
    r->attached = lgr_row(st);
    sqlite3_finalize(st);
  }
  return 0;
}

void lgr_free(lgr_report_t *r) {
  for (int i = 0; i < r->nruns; i++) {
    free(r->runs[i].command);
    free(r->runs[i].end_reason);
    free(r->runs[i].notes);
    free(r->runs[i].kind);
    free(r->runs[i].host);
    free(r->runs[i].snap_t);
    free(r->runs[i].snap_step);
  }
  lgr_free_leaks(r);
  for (int i = 0; i < r->nsuspects; i++) lgr_site_free(&r->suspects[i]);
  for (int i = 0; i < r->nminor; i++) lgr_site_free(&r->minor[i]);
  for (int i = 0; i < r->nothers; i++) lgr_site_free(&r->others[i]);
  free(r->runs);
  free(r->suspects);
  free(r->minor);
  free(r->others);
  free(r->limit_source);
  free(r->gpus);
  for (int i = 0; i < r->ncuda_notes; i++) free(r->cuda_notes[i]);
  free(r->cuda_notes);
  free(r->nvml_status);
  free(r->um_json);
  for (int i = 0; i < r->ngens; i++) free(r->gens[i].key);
  free(r->gens);
  free(r->slife);
  memset(r, 0, sizeof *r);
}

const char *lgr_gen_name(int gen) {
  static const char *names[] = {"young", "middle", "old"};
  return gen >= 0 && gen <= LGR_GEN_OLD ? names[gen] : "unknown";
}
