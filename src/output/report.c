/* SPDX-License-Identifier: MIT */
/*
 * report.c - builds the report: reads runs, stacks and snapshot series from the
 * database, merges the stacks of each allocation site, runs the detector on every
 * site's series, separates significant growth from minor growth, finds growth spread
 * over many sites, and groups the suspects into leaks (see report.h for the units).
 * Detection is recomputed here, so a database left by a killed collector, or one
 * recorded by an older version, is reported with today's detector. Printing is in
 * report_print.c.
 */
#include "output/report.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <sqlite3.h>
#include <stdlib.h>
#include <string.h>

#include "analysis/stats.h"
#include "core/strmap.h"
#include "core/util.h"
#include "output/report_impl.h"

static char *dupstr(const unsigned char *s) { return strdup(s ? (const char *)s : ""); }

/* A thin wrapper of the malloc family that programs and allocators put in front of it:
 * an optional prefix (redis z, GNU x, jemalloc je_, mimalloc mi_, tcmalloc tc_, glib
 * g_, CPython Py*_), an optional "try", a malloc-family name, an optional suffix
 * (_usable, _num, 0, _n, _with_size). zmalloc, ztrycalloc_usable, xmalloc, g_malloc0,
 * PyMem_RawMalloc and je_realloc are wrappers; cache_alloc and alloc_node are not. */
static int is_alloc_wrapper(const char *fn) {
  static const char *const prefix[] = {"", "z", "x", "je_", "mi_", "tc_", "g_", "PyMem_", "PyMem_Raw",
                                       "PyObject_", "_PyMem_", "_PyObject_", "_PyMem_Raw", NULL};
  static const char *const base[] = {"malloc", "calloc", "realloc", "strdup", "strndup", "memalign",
                                     "Malloc", "Calloc", "Realloc", "New", NULL};
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

int lgr_is_machinery(const char *fn, const char *file, const char *module) {
  static const char *const alloc_fns[] = {
      "malloc", "calloc", "realloc", "free", "reallocarray", "posix_memalign", "memalign",
      "aligned_alloc", "valloc", "pvalloc", "mmap", "mmap64", "strdup", "strndup",
      "__strdup", "__strndup", "__libc_malloc", "__libc_calloc", "__libc_realloc",
      "__libc_memalign", "xmalloc", "xcalloc", "xrealloc", "g_malloc", "g_malloc0", "g_realloc",
      NULL};
  if (module && strstr(module, "libleakguard")) return 1;
  /* CUDA runtime and driver: the runtime linked statically has obfuscated names
   * (__cudart123) and cudart:: internals; cudaMalloc* are the allocation calls. */
  if (module && (strstr(module, "libcudart.so") || strstr(module, "libcuda.so"))) return 1;
  if (fn && (!strncmp(fn, "__cudart", 8) || !strncmp(fn, "cudart::", 8) || !strncmp(fn, "cudaMalloc", 10) ||
             !strcmp(fn, "cudaHostAlloc") || !strncmp(fn, "cuMem", 5)))
    return 1;
  if (!fn) return 0;
  for (int i = 0; alloc_fns[i]; i++)
    if (!strcmp(fn, alloc_fns[i])) return 1;
  if (is_alloc_wrapper(fn)) return 1;
  if (!strncmp(fn, "operator new", 12) || !strncmp(fn, "_Zn", 3)) return 1;
  if (!strncmp(fn, "std::", 5) || !strncmp(fn, "__gnu_cxx::", 11)) return 1;
  if (file && !strncmp(file, "/usr/include/c++/", 17)) return 1;
  return 0;
}

/* Minor growth: the rule of docs/detection.md. */
int lgr_is_minor(double growth, double rate, double size, double blocks_gained, double tto, int steady) {
  double rel = size > 0 ? growth / size : 1;
  int slow = (isnan(tto) || tto > LGR_MINOR_OOM_S) && !(rate > 0 && size / rate < LGR_MINOR_DOUBLING_S);
  if (rel < LGR_MINOR_REL && slow && !steady) return 1;          /* tiny against the process */
  if (blocks_gained < LGR_MINOR_BLOCKS && rel < LGR_FEW_BLOCKS_REL) return 1; /* a handful of first uses */
  return 0;
}

int lgr_is_steady(const lgd_result_t *r) {
  return r->leak && r->tau >= LGR_STEADY_TAU && r->p < LGR_STEADY_P && r->windows >= 10 &&
         (r->pattern == LG_PATTERN_LINEAR_LEAK || r->pattern == LG_PATTERN_ACCELERATING_LEAK);
}

/* ------------------------------------------------------------------ runs */

static int is_python_module(const char *m) { return m && !strcmp(m, "python"); }

static int load_runs(sqlite3 *db, lgr_report_t *r) {
  sqlite3_stmt *st;
  const char *sql =
      "SELECT p.proc, p.pid, p.ppid, p.parent_proc, p.command, p.end_reason, p.kind,"
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
  if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) != SQLITE_OK) return -EIO;
  int cap = 0;
  while (sqlite3_step(st) == SQLITE_ROW) {
    if (r->nruns == cap) {
      cap = cap ? cap * 2 : 8;
      lgr_run_t *n = realloc(r->runs, (size_t)cap * sizeof *n);
      if (!n) break;
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
    u->command = dupstr(sqlite3_column_text(st, c++));
    u->end_reason = dupstr(sqlite3_column_text(st, c++));
    u->kind = dupstr(sqlite3_column_text(st, c++));
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
    u->host = sqlite3_column_type(st, c) == SQLITE_NULL ? NULL : dupstr(sqlite3_column_text(st, c));
    c++;
    u->local_rank = u->world_size = -1;
    u->start_ns = start;
    u->exit_begin_s = NAN;
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
  if (sqlite3_prepare_v2(db, "SELECT proc, key, value FROM labels", -1, &st, NULL) == SQLITE_OK) {
    while (sqlite3_step(st) == SQLITE_ROW) {
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
  return 0;
}

/* ------------------------------------------------------------------ frames, holders */

/* Loads the frames of stack s->stack, innermost first, and finds the site frame. A
 * Python stack is recorded as its Python frames (innermost first) followed by the
 * native frames under the innermost Python line; it is read the way the program ran:
 * the native allocation frames, then that line, then its callers. Allocator machinery
 * in front is trimmed (unless native), and so are the interpreter's own frames
 * between the allocation and the Python line. */
static int load_frames(sqlite3 *db, lgr_site_t *s, int native) {
  sqlite3_stmt *st;
  if (sqlite3_prepare_v2(db,
                         "SELECT function, file, line, module, inlined, ip FROM frames"
                         " WHERE proc=? AND stack=? ORDER BY idx",
                         -1, &st, NULL) != SQLITE_OK)
    return -EIO;
  sqlite3_bind_int(st, 1, s->proc);
  sqlite3_bind_int(st, 2, s->stack);
  int cap = 0;
  while (sqlite3_step(st) == SQLITE_ROW) {
    if (s->nall == cap) {
      cap = cap ? cap * 2 : 16;
      lgr_frame_t *n = realloc(s->all_frames, (size_t)cap * sizeof *n);
      if (!n) break;
      s->all_frames = n;
    }
    lgr_frame_t *f = &s->all_frames[s->nall++];
    f->function = dupstr(sqlite3_column_text(st, 0));
    f->file = dupstr(sqlite3_column_text(st, 1));
    f->line = sqlite3_column_int(st, 2);
    f->module = dupstr(sqlite3_column_text(st, 3));
    f->inlined = sqlite3_column_int(st, 4);
    f->ip = (uint64_t)sqlite3_column_int64(st, 5);
  }
  sqlite3_finalize(st);
  /* Python frames first as recorded: rotate the native tail to the front. */
  int npy = 0;
  while (npy < s->nall && is_python_module(s->all_frames[npy].module)) npy++;
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
  int skip = 0;
  if (!native)
    while (skip < s->nall - 1 &&
           lgr_is_machinery(s->all_frames[skip].function, s->all_frames[skip].file, s->all_frames[skip].module))
      skip++;
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
      if (is_python_module(s->frames[i].module)) {
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

/* Holders of the site: those of its stacks in the latest explain that found holders
 * for any of them (an explain at exit that finds the objects gone leaves the earlier
 * findings standing); identical chains are added up, the five holding the most bytes
 * kept. */
static void load_holders(sqlite3 *db, lgr_site_t *s) {
  sqlite3_stmt *st;
  if (sqlite3_prepare_v2(db, "SELECT max(explain) FROM holders WHERE proc=?1 AND stack=?2", -1, &st, NULL) != SQLITE_OK)
    return; /* older database */
  int nst = s->nstacks < 256 ? s->nstacks : 256, latest = -1;
  for (int k = 0; k < nst; k++) {
    sqlite3_reset(st);
    sqlite3_bind_int(st, 1, s->proc);
    sqlite3_bind_int(st, 2, s->stacks[k].stack);
    if (sqlite3_step(st) == SQLITE_ROW && sqlite3_column_type(st, 0) != SQLITE_NULL &&
        sqlite3_column_int(st, 0) > latest)
      latest = sqlite3_column_int(st, 0);
  }
  sqlite3_finalize(st);
  if (latest < 0) return;
  if (sqlite3_prepare_v2(db,
                         "SELECT kind, chain, objects, bytes, detail FROM holders"
                         " WHERE proc=?1 AND stack=?2 AND explain=?3",
                         -1, &st, NULL) != SQLITE_OK)
    return;
  cJSON *arr = cJSON_CreateArray();
  for (int k = 0; k < nst; k++) {
    sqlite3_reset(st);
    sqlite3_bind_int(st, 1, s->proc);
    sqlite3_bind_int(st, 2, s->stacks[k].stack);
    sqlite3_bind_int(st, 3, latest);
    while (sqlite3_step(st) == SQLITE_ROW) {
      const char *chain = (const char *)sqlite3_column_text(st, 1);
      cJSON *c = chain ? cJSON_Parse(chain) : NULL;
      if (!c) continue;
      char *ctext = cJSON_PrintUnformatted(c);
      const char *kind = (const char *)sqlite3_column_text(st, 0);
      double objects = (double)sqlite3_column_int64(st, 2), bytes = (double)sqlite3_column_int64(st, 3);
      cJSON *h = NULL, *e;
      cJSON_ArrayForEach(e, arr) {
        char *t = cJSON_PrintUnformatted(cJSON_GetObjectItem(e, "chain"));
        int same = t && ctext && !strcmp(t, ctext);
        free(t);
        if (same) {
          h = e;
          break;
        }
      }
      free(ctext);
      if (h) {
        cJSON_SetNumberValue(cJSON_GetObjectItem(h, "objects"), cJSON_GetNumberValue(cJSON_GetObjectItem(h, "objects")) + objects);
        cJSON_SetNumberValue(cJSON_GetObjectItem(h, "bytes"), cJSON_GetNumberValue(cJSON_GetObjectItem(h, "bytes")) + bytes);
        cJSON_Delete(c);
        continue;
      }
      h = cJSON_CreateObject();
      cJSON_AddItemToObject(h, "chain", c);
      cJSON_AddNumberToObject(h, "objects", objects);
      cJSON_AddNumberToObject(h, "bytes", bytes);
      cJSON_AddStringToObject(h, "kind", kind ? kind : "object");
      const char *detail = (const char *)sqlite3_column_text(st, 4);
      cJSON *d = detail ? cJSON_Parse(detail) : NULL;
      if (d) cJSON_AddItemToObject(h, "detail", d);
      cJSON_AddItemToArray(arr, h);
    }
  }
  sqlite3_finalize(st);
  /* largest first, five kept */
  cJSON *sorted = cJSON_CreateArray();
  while (cJSON_GetArraySize(arr) > 0 && cJSON_GetArraySize(sorted) < 5) {
    int best = 0;
    double bb = -1;
    for (int i = 0; i < cJSON_GetArraySize(arr); i++) {
      double b = cJSON_GetNumberValue(cJSON_GetObjectItem(cJSON_GetArrayItem(arr, i), "bytes"));
      if (b > bb) bb = b, best = i;
    }
    cJSON_AddItemToArray(sorted, cJSON_DetachItemFromArray(arr, best));
  }
  cJSON_Delete(arr);
  if (cJSON_GetArraySize(sorted) > 0) s->holders_json = cJSON_PrintUnformatted(sorted);
  cJSON_Delete(sorted);
}

/* Holder-aware verdict (issue #10): when holders that own at least half of the explained
 * bytes of a site hold it through a bounded container at its bound (an lru_cache at its
 * maxsize, a deque at its maxlen: the Python module's detail "bound"), the site is a
 * plateau whatever its curve looks like: returns that bound as JSON, else NULL. */
static char *full_bound(const char *holders_json) {
  cJSON *hl = holders_json ? cJSON_Parse(holders_json) : NULL, *h, *bound = NULL;
  double all = 0, held = 0;
  cJSON_ArrayForEach(h, hl) {
    double b = cJSON_GetNumberValue(cJSON_GetObjectItem(h, "bytes"));
    if (!(b > 0)) continue;
    all += b;
    cJSON *bd = cJSON_GetObjectItem(cJSON_GetObjectItem(h, "detail"), "bound");
    if (cJSON_IsTrue(cJSON_GetObjectItem(bd, "full"))) {
      held += b;
      if (!bound) bound = bd;
    }
  }
  char *out = NULL;
  if (bound && held >= 0.5 * all) {
    cJSON *c = cJSON_Duplicate(bound, 1);
    cJSON_DeleteItemFromObject(c, "full");
    out = cJSON_PrintUnformatted(c);
    cJSON_Delete(c);
  }
  cJSON_Delete(hl);
  return out;
}

/* The text of line `line` of file, trimmed, or NULL (the file is not here). */
static char *source_line(const char *file, int line) {
  if (!file || !*file || line <= 0 || file[0] == '<') return NULL;
  FILE *f = fopen(file, "r");
  if (!f) return NULL;
  char buf[512];
  char *out = NULL;
  for (int n = 1; fgets(buf, sizeof buf, f); ) {
    size_t len = strlen(buf);
    int whole = len > 0 && buf[len - 1] == '\n';
    if (n == line) {
      if (whole) buf[--len] = 0;
      char *p = buf;
      while (*p == ' ' || *p == '\t') p++;
      while (len > 0 && (buf[len - 1] == ' ' || buf[len - 1] == '\r' || buf[len - 1] == '\t')) buf[--len] = 0;
      if (*p) out = strdup(p);
      break;
    }
    if (whole) n++;
  }
  fclose(f);
  return out;
}

/* ------------------------------------------------------------------ sites */

/* Key of a stack's allocation site, from its frame rows in order (Python frames first
 * as recorded): the innermost Python line, else the first frame that is not machinery.
 * The space is part of the key. Writes "" when there are no rows. */
typedef struct keyer {
  char key[1024];
  int have, py;
} keyer_t;

static void keyer_row(keyer_t *k, int idx, const char *fn, const char *file, int line, const char *module,
                      const char *space) {
  if (idx == 0) {
    k->have = 0;
    k->py = is_python_module(module);
    k->key[0] = 0;
  }
  if (k->have) return;
  if (!k->py && lgr_is_machinery(fn, file, module)) {
    /* remember it in case no other frame follows */
    snprintf(k->key, sizeof k->key, "%s\x1f%s\x1f%d\x1f%s\x1f%s", fn ? fn : "", file ? file : "", line,
             file && *file ? "" : (module ? module : ""), space ? space : "host");
    return;
  }
  snprintf(k->key, sizeof k->key, "%s\x1f%s\x1f%d\x1f%s\x1f%s", fn ? fn : "", file ? file : "", line,
           file && *file ? "" : (module ? module : ""), space ? space : "host");
  k->have = 1;
}

/* A change of one stack's live bytes and blocks at snapshot seq. */
typedef struct delta {
  int64_t seq;
  double bytes, blocks;
} delta_t;

/* A site while the samples are read. */
typedef struct acc {
  char space[16];
  lgr_stackref_t *st;
  int nst, cst;
  delta_t *d;
  size_t nd, cd;
  int64_t live_blocks;
  uint64_t alloc_bytes, alloc_blocks;
  int has_oldest;
  int64_t oldest;
  double *val, *blk;   /* merged series at each snapshot (built after reading) */
  struct { int stack; size_t from, len; } *rng; /* each stack's deltas, d[from..from+len), in seq order */
  int nrng;
} acc_t;

static int cmp_delta(const void *a, const void *b) {
  const delta_t *x = a, *y = b;
  return (x->seq > y->seq) - (x->seq < y->seq);
}

static int cmp_stackref(const void *a, const void *b) {
  const lgr_stackref_t *x = a, *y = b;
  if (x->peak_live_bytes != y->peak_live_bytes) return x->peak_live_bytes < y->peak_live_bytes ? 1 : -1;
  if (x->live_bytes != y->live_bytes) return x->live_bytes < y->live_bytes ? 1 : -1;
  return (x->stack > y->stack) - (x->stack < y->stack);
}

static int cmp_suspect(const void *a, const void *b) {
  const lgr_site_t *x = a, *y = b;
  if (x->r.growth_bytes_per_s != y->r.growth_bytes_per_s)
    return x->r.growth_bytes_per_s < y->r.growth_bytes_per_s ? 1 : -1;
  return (x->live_bytes < y->live_bytes) - (x->live_bytes > y->live_bytes);
}

static int cmp_live(const void *a, const void *b) {
  const lgr_site_t *x = a, *y = b;
  return (x->live_bytes < y->live_bytes) - (x->live_bytes > y->live_bytes);
}

static int push_site(lgr_site_t **arr, int *n, int *cap, const lgr_site_t *s) {
  if (*n == *cap) {
    *cap = *cap ? *cap * 2 : 16;
    lgr_site_t *a = realloc(*arr, (size_t)*cap * sizeof *a);
    if (!a) return -ENOMEM;
    *arr = a;
  }
  (*arr)[(*n)++] = *s;
  return 0;
}

/* ------------------------------------------------------------------ GPU memory
 * (docs/cuda.md). Tables written by the collector only for processes that used CUDA;
 * older databases have none, and every query here tolerates that. */

static int gpu_space(const char *space) {
  return !strcmp(space, "device") || !strcmp(space, "managed") || !strcmp(space, "pinned");
}

/* The GPU ordinal of a site of a GPU space (cuda_stacks), else -1. */
static int gpu_site_device(sqlite3 *db, const lgr_site_t *s) {
  if (!gpu_space(s->space)) return -1;
  sqlite3_stmt *st;
  int dev = 0;
  if (sqlite3_prepare_v2(db, "SELECT device FROM cuda_stacks WHERE proc=? AND stack=?", -1, &st, NULL) != SQLITE_OK)
    return 0;
  sqlite3_bind_int(st, 1, s->proc);
  sqlite3_bind_int(st, 2, s->stack);
  if (sqlite3_step(st) == SQLITE_ROW) dev = sqlite3_column_int(st, 0);
  sqlite3_finalize(st);
  return dev;
}

/* CUPTI Unified Memory counters of a managed site (--cuda-um). */
static void gpu_site_um(sqlite3 *db, lgr_site_t *s) {
  if (strcmp(s->space, "managed") != 0) return;
  sqlite3_stmt *st;
  if (sqlite3_prepare_v2(db,
                         "SELECT cpu_page_faults, gpu_page_faults, bytes_htod, bytes_dtoh, thrashing FROM cuda_um"
                         " WHERE proc=? AND stack=?",
                         -1, &st, NULL) != SQLITE_OK)
    return;
  sqlite3_bind_int(st, 1, s->proc);
  sqlite3_bind_int(st, 2, s->stack);
  if (sqlite3_step(st) == SQLITE_ROW) {
    s->has_um = 1;
    s->um_cpu_faults = sqlite3_column_int64(st, 0);
    s->um_gpu_faults = sqlite3_column_int64(st, 1);
    s->um_bytes_htod = sqlite3_column_int64(st, 2);
    s->um_bytes_dtoh = sqlite3_column_int64(st, 3);
    s->um_thrashing = sqlite3_column_int64(st, 4);
  }
  sqlite3_finalize(st);
}

/* Room left for a growing site: device and managed memory grow toward the device's
 * memory (NVML's use of the whole device when sampled, else what was recorded), host
 * memory toward the host limit. */
static double gpu_headroom(const lgr_report_t *r, const lgr_site_t *s, double host_headroom) {
  if (s->device < 0 || !strcmp(s->space, "pinned")) return host_headroom;
  for (int i = 0; i < r->ngpus; i++) {
    const lgr_gpu_t *g = &r->gpus[i];
    if (g->proc != s->proc || g->device != s->device) continue;
    uint64_t total = g->total_bytes ? g->total_bytes : g->nvml_total_bytes;
    if (!total) break;
    double used = (double)(g->device_bytes + g->managed_bytes);
    if (g->has_nvml && (double)g->nvml_used_bytes > used) used = (double)g->nvml_used_bytes;
    return (double)total > used ? (double)total - used : 0;
  }
  return host_headroom;
}

static int64_t q_int64(sqlite3 *db, const char *sql, const int64_t *args, int nargs, int64_t dflt, int *found) {
  sqlite3_stmt *st;
  if (found) *found = 0;
  if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) != SQLITE_OK) return dflt;
  for (int i = 0; i < nargs; i++) sqlite3_bind_int64(st, i + 1, args[i]);
  int64_t v = dflt;
  if (sqlite3_step(st) == SQLITE_ROW && sqlite3_column_type(st, 0) != SQLITE_NULL) {
    v = sqlite3_column_int64(st, 0);
    if (found) *found = 1;
  }
  sqlite3_finalize(st);
  return v;
}

/* CUPTI Unified Memory counters (--cuda-um), every managed site that has some. */
static void load_um(sqlite3 *db, lgr_report_t *r) {
  sqlite3_stmt *st;
  if (sqlite3_prepare_v2(db,
                         "SELECT proc, stack, cpu_page_faults, gpu_page_faults, bytes_htod, bytes_dtoh, thrashing"
                         " FROM cuda_um ORDER BY gpu_page_faults + cpu_page_faults DESC",
                         -1, &st, NULL) != SQLITE_OK)
    return;
  cJSON *arr = cJSON_CreateArray();
  while (sqlite3_step(st) == SQLITE_ROW) {
    cJSON *u = cJSON_CreateObject();
    lgr_site_t o;
    memset(&o, 0, sizeof o);
    o.proc = sqlite3_column_int(st, 0);
    o.stack = sqlite3_column_int(st, 1);
    for (int i = 0; i < r->nruns; i++)
      if (r->runs[i].proc == o.proc) cJSON_AddNumberToObject(u, "pid", r->runs[i].pid);
    cJSON_AddNumberToObject(u, "stack", o.stack);
    char where[600] = "(not in a recorded managed block)";
    if (o.stack >= 2 && load_frames(db, &o, 0) == 0 && o.nframes > 0) {
      const lgr_frame_t *f = &o.frames[0];
      if (f->file[0]) snprintf(where, sizeof where, "%s (%s:%d)", f->function, f->file, f->line);
      else snprintf(where, sizeof where, "%s [%s]", f->function, f->module);
    }
    lgr_site_free(&o);
    cJSON_AddStringToObject(u, "site", where);
    static const char *const keys[] = {"cpu_page_faults", "gpu_page_faults", "bytes_to_device", "bytes_to_host",
                                       "thrashing"};
    /* Stacks of one line (a loop unrolled, several return addresses) are one site here. */
    cJSON *same = NULL, *x;
    cJSON_ArrayForEach(x, arr) {
      if (cJSON_GetNumberValue(cJSON_GetObjectItem(x, "pid")) == cJSON_GetNumberValue(cJSON_GetObjectItem(u, "pid")) &&
          !strcmp(cJSON_GetStringValue(cJSON_GetObjectItem(x, "site")), where))
        same = x;
    }
    for (int k = 0; k < 5; k++) {
      double v = (double)sqlite3_column_int64(st, 2 + k);
      if (same) cJSON_SetNumberValue(cJSON_GetObjectItem(same, keys[k]), cJSON_GetNumberValue(cJSON_GetObjectItem(same, keys[k])) + v);
      else cJSON_AddNumberToObject(u, keys[k], v);
    }
    if (same) cJSON_Delete(u);
    else cJSON_AddItemToArray(arr, u);
  }
  sqlite3_finalize(st);
  if (cJSON_GetArraySize(arr) > 0) r->um_json = cJSON_PrintUnformatted(arr);
  cJSON_Delete(arr);
}

static void load_gpus(sqlite3 *db, lgr_report_t *r) {
  sqlite3_stmt *st;
  const char *sql =
      "SELECT proc, device, device_bytes, managed_bytes, pinned_bytes, registered_bytes, pool_reserved_bytes,"
      " pool_used_bytes, vmm_mapped_bytes, contexts, contexts_created, contexts_destroyed, contexts_recreated,"
      " total_bytes, (SELECT max(device_bytes + managed_bytes) FROM cuda_devices x"
      "  WHERE x.proc=c.proc AND x.device=c.device)"
      " FROM cuda_devices c WHERE seq=(SELECT max(seq) FROM cuda_devices y WHERE y.proc=c.proc AND y.device=c.device)"
      " ORDER BY proc, device";
  if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) != SQLITE_OK) return; /* no GPU memory recorded */
  int cap = 0;
  while (sqlite3_step(st) == SQLITE_ROW) {
    if (r->ngpus == cap) {
      cap = cap ? cap * 2 : 4;
      lgr_gpu_t *n = realloc(r->gpus, (size_t)cap * sizeof *n);
      if (!n) break;
      r->gpus = n;
    }
    lgr_gpu_t *g = &r->gpus[r->ngpus++];
    memset(g, 0, sizeof *g);
    int c = 0;
    g->proc = sqlite3_column_int(st, c++);
    g->device = sqlite3_column_int(st, c++);
    g->device_bytes = sqlite3_column_int64(st, c++);
    g->managed_bytes = sqlite3_column_int64(st, c++);
    g->pinned_bytes = sqlite3_column_int64(st, c++);
    g->registered_bytes = sqlite3_column_int64(st, c++);
    g->pool_reserved_bytes = sqlite3_column_int64(st, c++);
    g->pool_used_bytes = sqlite3_column_int64(st, c++);
    g->vmm_mapped_bytes = sqlite3_column_int64(st, c++);
    g->contexts = sqlite3_column_int64(st, c++);
    g->contexts_created = sqlite3_column_int64(st, c++);
    g->contexts_destroyed = sqlite3_column_int64(st, c++);
    g->contexts_recreated = sqlite3_column_int64(st, c++);
    g->total_bytes = (uint64_t)sqlite3_column_int64(st, c++);
    g->peak_device_bytes = sqlite3_column_int64(st, c++);
    for (int i = 0; i < r->nruns; i++)
      if (r->runs[i].proc == g->proc) g->pid = r->runs[i].pid;
    /* NVML: the last sample that saw this process, and what was recorded then. */
    int64_t a[2] = {g->proc, g->device}, t_ns;
    int found;
    t_ns = q_int64(db, "SELECT max(t_ns) FROM nvml_processes WHERE proc=? AND device=?", a, 2, 0, &found);
    if (found) {
      int64_t b[3] = {g->proc, g->device, t_ns}, d[2] = {t_ns, g->device};
      g->has_nvml = 1;
      g->nvml_process_bytes =
          q_int64(db, "SELECT used_bytes FROM nvml_processes WHERE proc=?1 AND device=?2 AND t_ns=?3", b, 3, 0, NULL);
      g->nvml_used_bytes = (uint64_t)q_int64(db, "SELECT used_bytes FROM nvml WHERE t_ns=?1 AND device=?2", d, 2, 0, NULL);
      g->nvml_total_bytes = (uint64_t)q_int64(db, "SELECT total_bytes FROM nvml WHERE t_ns=?1 AND device=?2", d, 2, 0, NULL);
      int64_t tracked = q_int64(db,
                                "SELECT c.device_bytes FROM cuda_devices c JOIN snapshots s ON s.proc=c.proc AND"
                                " s.seq=c.seq WHERE c.proc=?1 AND c.device=?2 AND s.t_ns<=?3 ORDER BY s.t_ns DESC LIMIT 1",
                                b, 3, 0, NULL);
      g->untracked_bytes = g->nvml_process_bytes - tracked;
    }
  }
  sqlite3_finalize(st);
  if (sqlite3_prepare_v2(db, "SELECT DISTINCT note FROM cuda_notes ORDER BY note", -1, &st, NULL) == SQLITE_OK) {
    while (sqlite3_step(st) == SQLITE_ROW) {
      char **n = realloc(r->cuda_notes, (size_t)(r->ncuda_notes + 1) * sizeof *n);
      if (!n) break;
      r->cuda_notes = n;
      r->cuda_notes[r->ncuda_notes++] = dupstr(sqlite3_column_text(st, 0));
    }
    sqlite3_finalize(st);
  }
  load_um(db, r);
  int found;
  q_int64(db, "SELECT 1 FROM meta WHERE key='torch_cuda' UNION ALL SELECT 1 FROM modules WHERE path LIKE"
          " '%libc10_cuda.so%' OR path LIKE '%libtorch_cuda.so%' LIMIT 1",
          NULL, 0, 0, &found);
  r->torch_cuda = found && r->ngpus > 0;
  if (sqlite3_prepare_v2(db, "SELECT value FROM meta WHERE key='nvml'", -1, &st, NULL) == SQLITE_OK) {
    if (sqlite3_step(st) == SQLITE_ROW && r->ngpus > 0) {
      const unsigned char *v = sqlite3_column_text(st, 0);
      if (v && strncmp((const char *)v, "on", 2) != 0) r->nvml_status = dupstr(v);
    }
    sqlite3_finalize(st);
  }
}


/* Per-process analysis state. */
typedef struct pctx {
  sqlite3 *db;
  lgr_run_t *run;
  const lgr_options_t *o;
  lgr_report_t *r;
  double min_growth;
  int64_t nsnap;
  double *t, *step;      /* per snapshot seq (NaN t: missing) */
  acc_t *sites;
  int nsites, csites;
  double *flag_t;        /* per stack id: first live flag (s after start), NaN none */
  int nflag;
  double headroom;
} pctx_t;

/* Builds the detector's series from a dense per-snapshot array: the process's life
 * until it began to exit (its teardown is not what it did while it ran). */
static void series_of(const pctx_t *c, const double *v, lgd_series_t *ser) {
  ser->n = 0;
  for (int64_t i = 0; i < c->nsnap; i++)
    if (!isnan(c->t[i]) && !(c->t[i] > c->run->exit_begin_s)) lgd_series_add(ser, c->t[i], v[i], c->step[i]);
}

/* Analyses the merged series v; fills the site's result, growth and time to OOM. */
static void analyse_series(const pctx_t *c, const double *v, const double *blk, lgr_site_t *s, lgd_series_t *ser) {
  double maxval = 0;
  for (int64_t i = 0; i < c->nsnap; i++)
    if (v[i] > maxval) maxval = v[i];
  s->peak_live_bytes = maxval >= 9.2e18 ? INT64_MAX : (int64_t)maxval; /* huge counts (fuzz) */
  memset(&s->r, 0, sizeof s->r);
  s->r.growth_bytes_per_step = NAN;
  s->r.since_s = NAN;
  s->time_to_oom_s = NAN;
  if (maxval < c->min_growth) return;
  series_of(c, v, ser);
  /* The classifier names the shape of suspects; other sites keep the rule-based shape
   * (thousands of them in a Python program: it would cost seconds). */
  lgd_options_t dopt = {c->o->min_growth_bytes, 1};
  lgd_analyze_recent(ser->pts, ser->n, &dopt, &s->r);
  if (!s->r.leak) return;
  s->growth_bytes = fmax(0, s->r.floor_last - s->r.floor_first);
  if (s->r.growth_bytes_per_s > 0) s->time_to_oom_s = c->headroom / s->r.growth_bytes_per_s;
  /* blocks gained since the growth began */
  double b0 = NAN, b1 = 0;
  for (int64_t i = 0; i < c->nsnap; i++) {
    if (isnan(c->t[i])) continue;
    if (isnan(b0) && c->t[i] >= s->r.since_s) b0 = blk ? blk[i] : 0;
    if (c->t[i] <= s->r.until_s) { /* not after a teardown */
      b1 = blk ? blk[i] : 0;
      s->held_bytes = (int64_t)v[i];
    }
  }
  s->blocks_gained = (int64_t)fmax(0, b1 - (isnan(b0) ? 0 : b0));
}

static double site_flag(const pctx_t *c, const lgr_site_t *s) {
  double best = NAN;
  for (int k = 0; k < s->nstacks; k++) {
    int id = s->stacks[k].stack;
    if (id >= 0 && id < c->nflag && !isnan(c->flag_t[id]) && (isnan(best) || c->flag_t[id] < best)) best = c->flag_t[id];
  }
  return best;
}

static int load_snapshots(pctx_t *c) {
  sqlite3_stmt *st;
  if (sqlite3_prepare_v2(c->db,
                         "SELECT seq, t_ns - (SELECT start_ns FROM processes WHERE proc=?1), step,"
                         " live_bytes, rss_bytes"
                         " FROM snapshots WHERE proc=?1 ORDER BY seq",
                         -1, &st, NULL) != SQLITE_OK)
    return -EIO;
  sqlite3_bind_int(st, 1, c->run->proc);
  int64_t cap = 0;
  double *pt = NULL, *plive = NULL, *prss = NULL;
  size_t pn = 0, pcap = 0;
  while (sqlite3_step(st) == SQLITE_ROW) {
    int64_t seq = sqlite3_column_int64(st, 0);
    if (seq < 0 || seq > 100000000) continue;
    if (seq >= cap) {
      int64_t nc = cap ? cap * 2 : 256;
      while (nc <= seq) nc *= 2;
      double *nt = realloc(c->t, (size_t)nc * sizeof *nt);
      if (!nt) break;
      c->t = nt;
      double *ns = realloc(c->step, (size_t)nc * sizeof *ns);
      if (!ns) break;
      c->step = ns;
      for (int64_t i = cap; i < nc; i++) c->t[i] = NAN, c->step[i] = 0;
      cap = nc;
    }
    c->t[seq] = (double)sqlite3_column_int64(st, 1) / 1e9;
    c->step[seq] = (double)sqlite3_column_int64(st, 2);
    if (pn == pcap) {
      pcap = pcap ? pcap * 2 : 256;
      double *a = realloc(pt, pcap * sizeof *a), *b = realloc(plive, pcap * sizeof *b),
             *c2 = realloc(prss, pcap * sizeof *c2);
      if (a) pt = a;
      if (b) plive = b;
      if (c2) prss = c2;
      if (!a || !b || !c2) pcap = pn;
    }
    if (pn < pcap && (pn == 0 || c->t[seq] > pt[pn - 1]) && !(c->t[seq] > c->run->exit_begin_s)) {
      pt[pn] = c->t[seq];
      plive[pn] = (double)sqlite3_column_int64(st, 3);
      prss[pn] = (double)sqlite3_column_int64(st, 4);
      pn++;
    }
    if (seq + 1 > c->nsnap) c->nsnap = seq + 1;
  }
  sqlite3_finalize(st);
  c->run->pattern = lgd_process_pattern(pt, plive, prss, pn, &c->run->pattern_nonleak);
  if (pn) {
    double *tmp = malloc(pn * sizeof *tmp);
    if (tmp) {
      memcpy(tmp, plive, pn * sizeof *tmp);
      c->run->median_live_bytes = lga_median(tmp, pn);
      free(tmp);
    }
  }
  free(pt);
  free(plive);
  free(prss);
  return 0;
}

/* First live flags per stack (the `flags` table; absent in older databases). */
static void load_flags(pctx_t *c, int max_stack) {
  c->nflag = max_stack + 1;
  c->flag_t = malloc((size_t)c->nflag * sizeof *c->flag_t);
  if (!c->flag_t) {
    c->nflag = 0;
    return;
  }
  for (int i = 0; i < c->nflag; i++) c->flag_t[i] = NAN;
  sqlite3_stmt *st;
  if (sqlite3_prepare_v2(c->db,
                         "SELECT f.stack, min(f.t_ns) - (SELECT start_ns FROM processes WHERE proc=?1)"
                         " FROM flags f WHERE f.proc=?1 GROUP BY f.stack",
                         -1, &st, NULL) != SQLITE_OK)
    return;
  sqlite3_bind_int(st, 1, c->run->proc);
  while (sqlite3_step(st) == SQLITE_ROW) {
    int id = sqlite3_column_int(st, 0);
    if (id >= 0 && id < c->nflag) c->flag_t[id] = (double)sqlite3_column_int64(st, 1) / 1e9;
  }
  sqlite3_finalize(st);
}

/* Maps every stack of the process to its site (sites[] created here for stacks with
 * frames; the others get one when their samples are read). */
static int key_stacks(pctx_t *c, lgu_strmap_t *keys, int **site_of, int *max_stack) {
  sqlite3_stmt *st;
  if (sqlite3_prepare_v2(c->db, "SELECT max(stack) FROM samples WHERE proc=?", -1, &st, NULL) != SQLITE_OK) return -EIO;
  sqlite3_bind_int(st, 1, c->run->proc);
  *max_stack = sqlite3_step(st) == SQLITE_ROW ? sqlite3_column_int(st, 0) : 0;
  sqlite3_finalize(st);
  if (*max_stack < 0 || *max_stack > 100000000) *max_stack = 0;
  *site_of = malloc((size_t)(*max_stack + 1) * sizeof **site_of);
  if (!*site_of) return -ENOMEM;
  for (int i = 0; i <= *max_stack; i++) (*site_of)[i] = -1;
  /* GPU sites of different devices are different sites (cuda_stacks: made on first use) */
  int *dev_of = calloc((size_t)(*max_stack + 1), sizeof *dev_of);
  if (!dev_of) return -ENOMEM;
  if (sqlite3_prepare_v2(c->db, "SELECT stack, device FROM cuda_stacks WHERE proc=?", -1, &st, NULL) == SQLITE_OK) {
    sqlite3_bind_int(st, 1, c->run->proc);
    while (sqlite3_step(st) == SQLITE_ROW) {
      int id = sqlite3_column_int(st, 0);
      if (id >= 0 && id <= *max_stack) dev_of[id] = sqlite3_column_int(st, 1);
    }
    sqlite3_finalize(st);
  }
  if (sqlite3_prepare_v2(c->db,
                         "SELECT f.stack, f.idx, f.function, f.file, f.line, f.module, k.space FROM frames f"
                         " LEFT JOIN stacks k ON k.proc=f.proc AND k.stack=f.stack"
                         " WHERE f.proc=? ORDER BY f.stack, f.idx",
                         -1, &st, NULL) != SQLITE_OK) {
    free(dev_of);
    return -EIO;
  }
  sqlite3_bind_int(st, 1, c->run->proc);
  keyer_t k = {{0}, 0, 0};
  char key_space[32];
  int cur = -1;
  char cur_space[16] = "host";
  int rc = sqlite3_step(st);
  for (;;) {
    int stack = rc == SQLITE_ROW ? sqlite3_column_int(st, 0) : -1;
    if (stack != cur && cur >= 0 && cur <= *max_stack && k.key[0]) {
      int added = 0;
      int idx = lgu_strmap_get_or_add(keys, k.key, c->nsites, &added);
      if (idx < 0) break;
      if (added) {
        if (c->nsites == c->csites) {
          c->csites = c->csites ? c->csites * 2 : 64;
          acc_t *na = realloc(c->sites, (size_t)c->csites * sizeof *na);
          if (!na) break;
          c->sites = na;
        }
        memset(&c->sites[c->nsites], 0, sizeof c->sites[0]);
        snprintf(c->sites[c->nsites].space, sizeof c->sites[0].space, "%s", cur_space);
        c->nsites++;
      }
      (*site_of)[cur] = idx;
    }
    if (rc != SQLITE_ROW) break;
    cur = stack;
    const char *sp = (const char *)sqlite3_column_text(st, 6);
    snprintf(cur_space, sizeof cur_space, "%s", sp ? sp : "host");
    snprintf(key_space, sizeof key_space, "%s@%d", cur_space, stack >= 0 && stack <= *max_stack ? dev_of[stack] : 0);
    keyer_row(&k, sqlite3_column_int(st, 1), (const char *)sqlite3_column_text(st, 2),
              (const char *)sqlite3_column_text(st, 3), sqlite3_column_int(st, 4),
              (const char *)sqlite3_column_text(st, 5), key_space);
    rc = sqlite3_step(st);
  }
  sqlite3_finalize(st);
  free(dev_of);
  return 0;
}

static acc_t *new_acc(pctx_t *c, const char *space) {
  if (c->nsites == c->csites) {
    c->csites = c->csites ? c->csites * 2 : 64;
    acc_t *na = realloc(c->sites, (size_t)c->csites * sizeof *na);
    if (!na) return NULL;
    c->sites = na;
  }
  acc_t *a = &c->sites[c->nsites++];
  memset(a, 0, sizeof *a);
  snprintf(a->space, sizeof a->space, "%s", space ? space : "host");
  return a;
}

/* Reads every sample of the process into the sites' delta lists. */
static int read_samples(pctx_t *c, int *site_of, int max_stack) {
  sqlite3_stmt *st;
  if (sqlite3_prepare_v2(c->db,
                         "SELECT s.stack, s.seq, s.live_bytes, s.live_blocks, s.alloc_bytes,"
                         " s.alloc_blocks, s.oldest_epoch, k.space FROM samples s"
                         " LEFT JOIN stacks k ON k.proc=s.proc AND k.stack=s.stack"
                         " WHERE s.proc=? ORDER BY s.stack, s.seq",
                         -1, &st, NULL) != SQLITE_OK)
    return -EIO;
  sqlite3_bind_int(st, 1, c->run->proc);
  int rc = sqlite3_step(st);
  while (rc == SQLITE_ROW) {
    int stack = sqlite3_column_int(st, 0);
    const char *sp = (const char *)sqlite3_column_text(st, 7);
    int si = stack >= 0 && stack <= max_stack ? site_of[stack] : -1;
    acc_t *a;
    if (si < 0) {
      a = new_acc(c, sp);
      if (!a) break;
      if (stack >= 0 && stack <= max_stack) site_of[stack] = c->nsites - 1;
    } else {
      a = &c->sites[si];
    }
    double pb = 0, pn = 0, peak = 0;
    int64_t live = 0, blocks = 0, ab = 0, an = 0, oldest = 0;
    size_t from = a->nd;
    int oldest_null = 1;
    while (rc == SQLITE_ROW && sqlite3_column_int(st, 0) == stack) {
      int64_t seq = sqlite3_column_int64(st, 1);
      if (seq >= c->nsnap) seq = c->nsnap - 1;
      if (seq < 0) seq = 0;
      live = sqlite3_column_int64(st, 2);
      blocks = sqlite3_column_int64(st, 3);
      ab = sqlite3_column_int64(st, 4);
      an = sqlite3_column_int64(st, 5);
      oldest_null = sqlite3_column_type(st, 6) == SQLITE_NULL;
      oldest = sqlite3_column_int64(st, 6);
      if ((double)live != pb || (double)blocks != pn) {
        if (a->nd == a->cd) {
          size_t ncap = a->cd ? a->cd * 2 : 16;
          delta_t *nd = realloc(a->d, ncap * sizeof *nd);
          if (!nd) return -ENOMEM;
          a->d = nd;
          a->cd = ncap;
        }
        a->d[a->nd++] = (delta_t){seq, (double)live - pb, (double)blocks - pn};
        pb = (double)live;
        pn = (double)blocks;
      }
      if ((double)live > peak) peak = (double)live;
      rc = sqlite3_step(st);
    }
    if (a->nst == a->cst) {
      a->cst = a->cst ? a->cst * 2 : 4;
      lgr_stackref_t *ns = realloc(a->st, (size_t)a->cst * sizeof *ns);
      if (!ns) return -ENOMEM;
      a->st = ns;
    }
    a->st[a->nst++] = (lgr_stackref_t){stack, live, (int64_t)peak};
    __typeof__(a->rng) nr = realloc(a->rng, (size_t)a->nst * sizeof *nr);
    if (!nr) return -ENOMEM;
    a->rng = nr;
    a->rng[a->nrng++] = (__typeof__(*a->rng)){stack, from, a->nd - from};
    a->live_blocks += blocks;
    a->alloc_bytes += (uint64_t)ab;
    a->alloc_blocks += (uint64_t)an;
    if (!oldest_null && (!a->has_oldest || oldest < a->oldest)) a->oldest = oldest, a->has_oldest = 1;
  }
  sqlite3_finalize(st);
  return 0;
}

/* Dense merged series of a site over the snapshots. */
static int densify(const pctx_t *c, acc_t *a) {
  a->val = calloc((size_t)c->nsnap, sizeof *a->val);
  a->blk = calloc((size_t)c->nsnap, sizeof *a->blk);
  if (!a->val || !a->blk) return -ENOMEM;
  delta_t *d = a->nrng > 1 && a->nd ? malloc(a->nd * sizeof *d) : a->d;
  if (!d && a->nd) return -ENOMEM;
  if (d != a->d) {
    memcpy(d, a->d, a->nd * sizeof *d);
    qsort(d, a->nd, sizeof *d, cmp_delta);
  }
  double v = 0, b = 0;
  size_t k = 0;
  for (int64_t i = 0; i < c->nsnap; i++) {
    while (k < a->nd && d[k].seq <= i) v += d[k].bytes, b += d[k].blocks, k++;
    a->val[i] = v;
    a->blk[i] = b;
  }
  if (d != a->d) free(d);
  return 0;
}

/* A site whose stacks each filled once and stopped, at different times (a server's
 * keyspaces, one per command, filled one after the other), sums to a staircase that
 * looks like a step leak. The site stays a suspect only when at least half of its
 * growth comes from stacks that grow by themselves (a leak on their own series) or
 * that are too small to judge alone. */
static int composition_ok(const pctx_t *c, const acc_t *a, const lgr_site_t *s, lgd_series_t *ser) {
  if (a->nrng < 2) return 1;
  double *v = malloc((size_t)c->nsnap * sizeof *v);
  if (!v) return 1;
  double from_t = s->r.since_s, total = 0, ok = 0; /* analysed part: [since_s, until_s] */
  for (int k = 0; k < a->nrng; k++) {
    double x = 0, peak = 0;
    size_t q = a->rng[k].from, end = q + a->rng[k].len;
    for (int64_t i = 0; i < c->nsnap; i++) {
      while (q < end && a->d[q].seq <= i) x += a->d[q].bytes, q++;
      v[i] = x;
      if (x > peak) peak = x;
    }
    double at_from = NAN, at_end = 0;
    for (int64_t i = 0; i < c->nsnap; i++) {
      if (isnan(c->t[i])) continue;
      if (isnan(at_from) && c->t[i] >= from_t) at_from = v[i];
      if (c->t[i] <= s->r.until_s) at_end = v[i];
    }
    if (isnan(at_from)) at_from = 0;
    double g = at_end - at_from;
    if (g <= 0) continue;
    total += g;
    if (peak < c->min_growth) {
      ok += g;
      continue;
    }
    series_of(c, v, ser);
    lgd_options_t dopt = {c->o->min_growth_bytes, 1};
    lgd_result_t r;
    if (lgd_analyze_recent(ser->pts, ser->n, &dopt, &r) == 0 && r.leak) ok += g;
  }
  free(v);
  return total <= 0 || ok >= 0.5 * total;
}

static void free_acc(acc_t *a) {
  free(a->rng);
  free(a->st);
  free(a->d);
  free(a->val);
  free(a->blk);
}

/* A site from an accumulator (frames not loaded yet). */
static void site_from_acc(const pctx_t *c, acc_t *a, lgr_site_t *s) {
  memset(s, 0, sizeof *s);
  s->proc = c->run->proc;
  s->pid = c->run->pid;
  s->leak = -1;
  s->device = -1;
  s->detected_after_s = NAN;
  s->oldest_age_s = NAN;
  snprintf(s->space, sizeof s->space, "%s", a->space);
  qsort(a->st, (size_t)a->nst, sizeof *a->st, cmp_stackref);
  s->stacks = a->st;
  s->nstacks = a->nst;
  a->st = NULL;
  a->nst = a->cst = 0;
  s->stack = s->nstacks ? s->stacks[0].stack : 0;
  for (int k = 0; k < s->nstacks; k++) s->live_bytes += s->stacks[k].live_bytes;
  s->live_blocks = a->live_blocks;
  s->alloc_bytes = a->alloc_bytes;
  s->alloc_blocks = a->alloc_blocks;
  double t_end = c->nsnap ? c->t[c->nsnap - 1] : 0;
  if (a->has_oldest) s->oldest_age_s = fmax(0, t_end - (double)a->oldest * 0.1);
}

/* Growth spread over many sites is many sites growing together, all along: at least
 * half of the group's growth must come from members that grew in both halves of the
 * growing part. Sites that each filled once, one after the other (a server's
 * keyspaces, one per command), make a staircase that is not a leak. */
static int spread_persists(const pctx_t *c, const int *cand, const int *member, int nmem, double since,
                           double until) {
  int64_t i0 = -1, i1 = -1, im = -1;
  for (int64_t i = 0; i < c->nsnap; i++) {
    if (isnan(c->t[i])) continue;
    if (i0 < 0 && c->t[i] >= since) i0 = i;
    if (c->t[i] <= until) i1 = i;
  }
  if (i0 < 0 || i1 <= i0) return 0;
  double tmid = (c->t[i0] + c->t[i1]) / 2;
  for (int64_t i = i0; i <= i1; i++)
    if (!isnan(c->t[i]) && c->t[i] >= tmid) {
      im = i;
      break;
    }
  if (im < 0) return 0;
  double total = 0, both = 0;
  for (int m = 0; m < nmem; m++) {
    const double *v = c->sites[cand[member[m]]].val;
    double early = v[im] - v[i0], late = v[i1] - v[im], g = v[i1] - v[i0];
    if (g <= 0) continue;
    total += g;
    if (early > 0 && late > 0) both += g;
  }
  return total > 0 && both >= 0.5 * total;
}

/* Whole-process growth that no single site explains (growth spread over many sites,
 * each under the bar): the sites are grouped by the path of callers they share, from
 * the root (Python frames for Python stacks, native frames otherwise), and the deepest
 * group whose summed series is a leak and that explains at least half of the
 * unexplained growth becomes one suspect. */
static void find_spread(pctx_t *c, lgd_series_t *ser, int *used) {
  if (c->nsnap < 8) return;
  /* the process's live bytes */
  double *tot = calloc((size_t)c->nsnap, sizeof *tot);
  if (!tot) return;
  for (int i = 0; i < c->nsites; i++)
    if (c->sites[i].val)
      for (int64_t k = 0; k < c->nsnap; k++) tot[k] += c->sites[i].val[k];
  lgr_site_t whole;
  memset(&whole, 0, sizeof whole);
  analyse_series(c, tot, NULL, &whole, ser);
  free(tot);
  if (!whole.r.leak) return;
  double explained = 0;
  for (int i = 0; i < c->r->nsuspects; i++)
    if (c->r->suspects[i].proc == c->run->proc) explained += c->r->suspects[i].r.growth_bytes_per_s;
  double unexplained = whole.r.growth_bytes_per_s - explained;
  if (unexplained < 0.5 * whole.r.growth_bytes_per_s || unexplained * (whole.r.floor_last > whole.r.floor_first ? 1 : 0) <= 0)
    return;
  /* candidate sites: not already suspects, holding memory at some point */
  int ncand = 0;
  int *cand = malloc((size_t)c->nsites * sizeof *cand);
  lgr_site_t *cs = calloc((size_t)c->nsites, sizeof *cs);
  if (!cand || !cs) {
    free(cand);
    free(cs);
    return;
  }
  for (int i = 0; i < c->nsites && ncand < 4096; i++) {
    acc_t *a = &c->sites[i];
    if (used[i] || !a->val || a->nst == 0) continue;
    double mx = 0;
    for (int64_t k = 0; k < c->nsnap; k++) mx = fmax(mx, a->val[k]);
    if (mx < 1024) continue;
    lgr_site_t *s = &cs[ncand];
    s->proc = c->run->proc;
    /* frames of its largest stack */
    int best = 0;
    for (int k = 1; k < a->nst; k++)
      if (a->st[k].live_bytes > a->st[best].live_bytes) best = k;
    s->stack = a->st[best].stack;
    load_frames(c->db, s, 0);
    if (s->nframes == 0) {
      lgr_site_free(s);
      continue;
    }
    cand[ncand++] = i;
  }
  /* Root-first paths: the frames after the site frame for Python (its callers), all
   * frames for native stacks. Depth d = the d outermost frames. */
  int maxd = 0;
  for (int j = 0; j < ncand; j++) {
    int depth = cs[j].nframes - (is_python_module(cs[j].frames[cs[j].site_frame].module) ? cs[j].site_frame : 0);
    if (depth > maxd) maxd = depth;
  }
  double *sum = calloc((size_t)c->nsnap, sizeof *sum);
  double *sumb = calloc((size_t)c->nsnap, sizeof *sumb);
  int *member = malloc((size_t)(ncand ? ncand : 1) * sizeof *member);
  int found = 0;
  for (int d = maxd; d >= 1 && sum && sumb && member && !found; d--) {
    /* groups at depth d: sites whose d outermost frames are the same */
    for (int j = 0; j < ncand && !found; j++) {
      lgr_site_t *a = &cs[j];
      int la = a->nframes;
      int first_a = is_python_module(a->frames[a->site_frame].module) ? a->site_frame : 0;
      if (la - first_a < d) continue;
      /* only the group's first member (in candidate order) evaluates it */
      int nmem = 0, dup = 0;
      for (int q = 0; q < ncand; q++) {
        lgr_site_t *b = &cs[q];
        int lb = b->nframes;
        int first_b = is_python_module(b->frames[b->site_frame].module) ? b->site_frame : 0;
        if (lb - first_b < d) continue;
        int same = 1;
        for (int x = 1; x <= d && same; x++) {
          const lgr_frame_t *fa = &a->frames[la - x], *fb = &b->frames[lb - x];
          same = fa->line == fb->line && !strcmp(fa->function, fb->function) && !strcmp(fa->file, fb->file);
        }
        if (!same) continue;
        if (q < j) {
          dup = 1;
          break;
        }
        member[nmem++] = q;
      }
      if (dup || nmem < 2) continue;
      memset(sum, 0, (size_t)c->nsnap * sizeof *sum);
      memset(sumb, 0, (size_t)c->nsnap * sizeof *sumb);
      for (int m = 0; m < nmem; m++) {
        acc_t *ac = &c->sites[cand[member[m]]];
        for (int64_t k = 0; k < c->nsnap; k++) sum[k] += ac->val[k], sumb[k] += ac->blk[k];
      }
      lgr_site_t g;
      memset(&g, 0, sizeof g);
      analyse_series(c, sum, sumb, &g, ser);
      if (!g.r.leak || g.r.growth_bytes_per_s < 0.5 * unexplained) continue;
      if (!spread_persists(c, cand, member, nmem, g.r.since_s, g.r.until_s)) continue;
      /* the group: frames = the shared path, innermost first */
      g.proc = c->run->proc;
      g.pid = c->run->pid;
      g.leak = -1;
      g.oldest_age_s = NAN;
      g.spread_sites = nmem;
      snprintf(g.space, sizeof g.space, "%s", c->sites[cand[j]].space);
      g.stack = a->stack;
      g.all_frames = calloc((size_t)d, sizeof *g.all_frames);
      int nst = 0;
      for (int m = 0; m < nmem; m++) nst += c->sites[cand[member[m]]].nst;
      g.stacks = calloc((size_t)(nst ? nst : 1), sizeof *g.stacks);
      if (!g.all_frames || !g.stacks) {
        lgr_site_free(&g);
        break;
      }
      for (int x = 0; x < d; x++) {
        const lgr_frame_t *src = &a->frames[la - d + x];
        g.all_frames[x] = (lgr_frame_t){strdup(src->function), strdup(src->file), strdup(src->module), src->line,
                                        src->inlined, src->ip};
      }
      g.nall = g.nframes = d;
      g.frames = g.all_frames;
      g.site_frame = 0;
      for (int m = 0; m < nmem; m++) {
        acc_t *ac = &c->sites[cand[member[m]]];
        for (int k = 0; k < ac->nst; k++) g.stacks[g.nstacks++] = ac->st[k];
        g.live_blocks += ac->live_blocks;
        g.alloc_bytes += ac->alloc_bytes;
        g.alloc_blocks += ac->alloc_blocks;
        used[cand[member[m]]] = 1;
      }
      qsort(g.stacks, (size_t)g.nstacks, sizeof *g.stacks, cmp_stackref);
      for (int k = 0; k < g.nstacks; k++) g.live_bytes += g.stacks[k].live_bytes;
      g.detected_after_s = site_flag(c, &g);
      g.series = malloc((size_t)c->nsnap * sizeof *g.series);
      if (g.series) memcpy(g.series, sum, (size_t)c->nsnap * sizeof *g.series);
      load_holders(c->db, &g);
      int scap = c->r->nsuspects; /* push_site grows by doubling from the count */
      if (push_site(&c->r->suspects, &c->r->nsuspects, &scap, &g)) lgr_site_free(&g);
      found = 1;
    }
  }
  free(sum);
  free(sumb);
  free(member);
  for (int j = 0; j < ncand; j++) lgr_site_free(&cs[j]);
  free(cs);
  free(cand);
}

/* Analyses every site of one process. */
static int analyse_proc(sqlite3 *db, lgr_run_t *run, const lgr_options_t *o, lgr_report_t *r, lgr_site_t **others,
                        int *nothers, int *ocap) {
  pctx_t c;
  memset(&c, 0, sizeof c);
  c.db = db;
  c.run = run;
  c.o = o;
  c.r = r;
  c.min_growth = o->min_growth_bytes > 0 ? o->min_growth_bytes : LGR_MIN_GROWTH_BYTES;
  c.headroom = run->limit_bytes > run->usage_bytes ? (double)(run->limit_bytes - run->usage_bytes) : 0;
  int rc = load_snapshots(&c);
  if (rc != 0 || c.nsnap == 0) goto out;
  lgu_strmap_t keys = {0};
  int *site_of = NULL, max_stack = 0;
  rc = key_stacks(&c, &keys, &site_of, &max_stack);
  lgu_strmap_free(&keys);
  if (rc == 0) rc = read_samples(&c, site_of, max_stack);
  free(site_of);
  if (rc != 0) goto out;
  load_flags(&c, max_stack);
  int *used = calloc((size_t)(c.nsites ? c.nsites : 1), sizeof *used);
  if (!used) {
    rc = -ENOMEM;
    goto out;
  }
  lgd_series_t ser;
  lgd_series_init(&ser, 4096);
  int scap = r->nsuspects;
  for (int i = 0; i < c.nsites; i++) {
    acc_t *a = &c.sites[i];
    if (a->nst == 0 || densify(&c, a) != 0) continue;
    lgr_site_t site;
    site_from_acc(&c, a, &site);
    /* keep the stack list for the spread search too */
    a->st = malloc((size_t)site.nstacks * sizeof *a->st);
    if (a->st) {
      memcpy(a->st, site.stacks, (size_t)site.nstacks * sizeof *a->st);
      a->nst = a->cst = site.nstacks;
    }
    site.device = gpu_site_device(db, &site);
    gpu_site_um(db, &site);
    analyse_series(&c, a->val, a->blk, &site, &ser);
    if (site.r.leak && site.device >= 0 && site.r.growth_bytes_per_s > 0) /* against the GPU's memory */
      site.time_to_oom_s = gpu_headroom(r, &site, c.headroom) / site.r.growth_bytes_per_s;
    if (site.r.leak && !composition_ok(&c, a, &site, &ser)) {
      site.r.leak = 0;
      site.r.confidence = 0;
      site.r.pattern = LG_PATTERN_PLATEAU;
      site.time_to_oom_s = NAN;
    }
    site.detected_after_s = site_flag(&c, &site);
    if (site.r.leak) {
      used[i] = 1;
      site.series = a->val; /* kept for the leak's summed series */
      a->val = NULL;
      load_frames(db, &site, o->native);
      load_holders(db, &site);
      if ((site.bounded = full_bound(site.holders_json))) { /* a full bounded cache: a plateau */
        site.r.leak = 0;
        site.r.confidence = 0;
        site.r.pattern = LG_PATTERN_PLATEAU;
        site.time_to_oom_s = NAN;
        free(site.series);
        site.series = NULL;
        if (push_site(others, nothers, ocap, &site)) lgr_site_free(&site);
        continue;
      }
      if (push_site(&r->suspects, &r->nsuspects, &scap, &site)) lgr_site_free(&site);
    } else if (site.peak_live_bytes > 0 && site.live_bytes > 0) {
      load_frames(db, &site, o->native);
      if (push_site(others, nothers, ocap, &site)) lgr_site_free(&site);
    } else {
      lgr_site_free(&site);
    }
  }
  find_spread(&c, &ser, used);
  lgd_series_free(&ser);
  free(used);
out:
  for (int i = 0; i < c.nsites; i++) free_acc(&c.sites[i]);
  free(c.sites);
  run->snap_t = c.t;       /* the leaks' series are read against them (lgr_free frees them) */
  run->snap_step = c.step;
  run->nsnap = c.nsnap;
  free(c.flag_t);
  return rc;
}

/* ------------------------------------------------------------------ leaks */

/* The root of a suspect's top holder ("module.name (type)"), or NULL. */
static char *holder_root(const lgr_site_t *s, char **holder_out) {
  if (!s->holders_json) return NULL;
  cJSON *hl = cJSON_Parse(s->holders_json);
  cJSON *h0 = cJSON_GetArrayItem(hl, 0);
  cJSON *c0 = cJSON_GetArrayItem(cJSON_GetObjectItem(h0, "chain"), 0);
  char *root = NULL;
  if (cJSON_IsString(c0) && c0->valuestring[0] && c0->valuestring[0] != '<') {
    root = strdup(c0->valuestring);
    if (holder_out) *holder_out = cJSON_PrintUnformatted(h0);
  }
  cJSON_Delete(hl);
  return root;
}

/* The innermost non-allocator function of a suspect: "function\x1ffile". */
static char *function_key(const lgr_site_t *s) {
  if (s->nframes == 0) return NULL;
  const lgr_frame_t *f = &s->frames[s->site_frame];
  size_t n = strlen(f->function) + strlen(f->file) + strlen(f->module) + 4;
  char *k = malloc(n);
  if (k) snprintf(k, n, "%s\x1f%s\x1f%s", f->function, f->file, f->file[0] ? "" : f->module);
  return k;
}

/* One event that leaks several blocks (a list node and its payload, a key and its
 * value) makes suspects that grow in lockstep: the same number of blocks gained, from
 * the same moment. Without holders to tie them, leaks of one process whose main
 * suspects gained the same number of blocks (within 5 %, at least 16) since about the
 * same time (1 s) are one cause. */
static void merge_lockstep(lgr_report_t *r) {
  for (int i = 0; i < r->nleaks; i++) {
    lgr_leak_t *A = &r->leaks[i];
    const lgr_site_t *a = &r->suspects[A->suspects[0]];
    if (a->blocks_gained < 16 || a->spread_sites) continue;
    for (int j = i + 1; j < r->nleaks; j++) {
      lgr_leak_t *B = &r->leaks[j];
      const lgr_site_t *b = &r->suspects[B->suspects[0]];
      if (B->proc != A->proc || b->spread_sites || (A->holder_json && B->holder_json)) continue;
      double ga = (double)a->blocks_gained, gb = (double)b->blocks_gained;
      if (fabs(ga - gb) > 0.05 * fmax(ga, gb) || fabs(a->r.since_s - b->r.since_s) > 1.0) continue;
      for (int k = 0; k < B->nsuspects; k++) {
        A->suspects[A->nsuspects++] = B->suspects[k];
        r->suspects[B->suspects[k]].leak = i;
      }
      A->live_bytes += B->live_bytes;
      A->growth_bytes_per_s += B->growth_bytes_per_s;
      if (!isnan(B->growth_bytes_per_step))
        A->growth_bytes_per_step = (isnan(A->growth_bytes_per_step) ? 0 : A->growth_bytes_per_step) + B->growth_bytes_per_step;
      if (!isnan(B->detected_after_s) && (isnan(A->detected_after_s) || B->detected_after_s < A->detected_after_s))
        A->detected_after_s = B->detected_after_s;
      if (!A->holder_json) {
        A->holder_json = B->holder_json;
        B->holder_json = NULL;
      }
      free(A->by);
      A->by = strdup("lockstep");
      free(B->suspects);
      free(B->by);
      free(B->holder_json);
      memmove(B, B + 1, (size_t)(r->nleaks - j - 1) * sizeof *B);
      r->nleaks--;
      for (int x = 0; x < r->nsuspects; x++)
        if (r->suspects[x].leak > j) r->suspects[x].leak--;
      j--;
    }
  }
}

static void group_leaks(lgr_report_t *r) {
  int n = r->nsuspects;
  if (!n) return;
  r->leaks = calloc((size_t)n, sizeof *r->leaks);
  char **key = calloc((size_t)n, sizeof *key), **holder = calloc((size_t)n, sizeof *holder);
  const char **by = calloc((size_t)n, sizeof *by);
  if (!r->leaks || !key || !holder || !by) goto out;
  for (int i = 0; i < n; i++) {
    lgr_site_t *s = &r->suspects[i];
    char *root = s->spread_sites ? NULL : holder_root(s, &holder[i]);
    if (s->spread_sites) by[i] = "spread";
    else if (root) by[i] = "holder";
    else by[i] = "function";
    const char *what = root ? root : NULL;
    char *fk = what ? NULL : function_key(s);
    size_t len = 64 + (what ? strlen(what) : fk ? strlen(fk) : 0);
    key[i] = malloc(len);
    if (key[i]) {
      if (s->spread_sites) snprintf(key[i], len, "spread %d %d", s->proc, i);
      else if (what) snprintf(key[i], len, "holder %d %s", s->proc, what);
      else if (fk) snprintf(key[i], len, "function %d %s", s->proc, fk);
      else snprintf(key[i], len, "site %d %d", s->proc, i);
    }
    if (!what && !fk && !s->spread_sites) by[i] = "site";
    free(root);
    free(fk);
  }
  /* suspects are ranked by growth: the first of a key is its leak's main suspect */
  for (int i = 0; i < n; i++) {
    lgr_site_t *s = &r->suspects[i];
    int l = -1;
    for (int j = 0; j < r->nleaks && l < 0; j++) {
      lgr_site_t *m = &r->suspects[r->leaks[j].suspects[0]];
      int mi = (int)(m - r->suspects);
      if (key[i] && key[mi] && !strcmp(key[i], key[mi])) l = j;
    }
    if (l < 0) {
      l = r->nleaks++;
      lgr_leak_t *L = &r->leaks[l];
      L->suspects = calloc((size_t)n, sizeof *L->suspects);
      L->by = strdup(by[i]);
      L->holder_json = holder[i];
      holder[i] = NULL;
      L->proc = s->proc;
      L->pid = s->pid;
      L->rank = -1;
      for (int k = 0; k < r->nruns; k++)
        if (r->runs[k].proc == s->proc) {
          L->rank = r->runs[k].rank;
          r->runs[k].leaking = 1;
        }
      L->pattern = s->r.pattern;
      L->detected_after_s = NAN;
      L->time_to_oom_s = NAN;
      L->growth_bytes_per_step = NAN;
    }
    lgr_leak_t *L = &r->leaks[l];
    if (L->suspects) L->suspects[L->nsuspects++] = i;
    s->leak = l;
    L->live_bytes += s->held_bytes;
    L->growth_bytes_per_s += s->r.growth_bytes_per_s;
    if (!isnan(s->r.growth_bytes_per_step))
      L->growth_bytes_per_step = (isnan(L->growth_bytes_per_step) ? 0 : L->growth_bytes_per_step) + s->r.growth_bytes_per_step;
    if (!isnan(s->detected_after_s) && (isnan(L->detected_after_s) || s->detected_after_s < L->detected_after_s))
      L->detected_after_s = s->detected_after_s;
  }
  merge_lockstep(r);
  for (int j = 0; j < r->nleaks; j++) {
    lgr_leak_t *L = &r->leaks[j];
    for (int k = 0; k < r->nruns; k++)
      if (r->runs[k].proc == L->proc && L->growth_bytes_per_s > 0) {
        const lgr_run_t *u = &r->runs[k];
        double headroom = u->limit_bytes > u->usage_bytes ? (double)(u->limit_bytes - u->usage_bytes) : 0;
        headroom = gpu_headroom(r, &r->suspects[L->suspects[0]], headroom);
        L->time_to_oom_s = headroom / L->growth_bytes_per_s;
      }
  }
out:
  for (int i = 0; i < n; i++) {
    if (key) free(key[i]);
    if (holder) free(holder[i]);
  }
  free(key);
  free(holder);
  free(by);
}

static void free_leaks(lgr_report_t *r) {
  for (int i = 0; i < r->nleaks; i++) {
    free(r->leaks[i].suspects);
    free(r->leaks[i].by);
    free(r->leaks[i].holder_json);
  }
  free(r->leaks);
  r->leaks = NULL;
  r->nleaks = 0;
  for (int i = 0; i < r->nruns; i++) r->runs[i].leaking = 0;
}

/* A leak of several suspects is described by their summed series: its shape, rate
 * and confidence are the cause's (one noisy site of a spread-out leak says less). */
static void analyse_leaks(lgr_report_t *r) {
  lgd_series_t ser;
  lgd_series_init(&ser, 4096);
  for (int j = 0; j < r->nleaks; j++) {
    lgr_leak_t *L = &r->leaks[j];
    const lgr_site_t *m = &r->suspects[L->suspects[0]];
    L->pattern = m->r.pattern;
    L->confidence = m->r.confidence;
    L->r = m->r;
    const lgr_run_t *u = NULL;
    for (int k = 0; k < r->nruns; k++)
      if (r->runs[k].proc == L->proc) u = &r->runs[k];
    if (L->nsuspects < 2 || !u || !u->snap_t) continue;
    double *sum = calloc((size_t)u->nsnap, sizeof *sum);
    if (!sum) continue;
    int ok = 1;
    for (int k = 0; k < L->nsuspects && ok; k++) {
      const lgr_site_t *s = &r->suspects[L->suspects[k]];
      if (!s->series) ok = 0;
      for (int64_t i = 0; ok && i < u->nsnap; i++) sum[i] += s->series[i];
    }
    ser.n = 0;
    for (int64_t i = 0; ok && i < u->nsnap; i++)
      if (!isnan(u->snap_t[i]) && !(u->snap_t[i] > u->exit_begin_s)) lgd_series_add(&ser, u->snap_t[i], sum[i], u->snap_step[i]);
    lgd_result_t lr;
    lgd_options_t dopt = {0, 1};
    if (ok && lgd_analyze_recent(ser.pts, ser.n, &dopt, &lr) == 0 && lr.leak) {
      L->pattern = lr.pattern;
      L->confidence = lr.confidence;
      L->r = lr;
    }
    free(sum);
  }
  lgd_series_free(&ser);
}

/* Significance is judged per leak (a cause), on the growth of all its suspects
 * together: the suspects of a minor leak move to the minor-growth list, and the rest
 * are grouped again. */
static void split_minor(lgr_report_t *r) {
  int *minor = calloc((size_t)(r->nsuspects ? r->nsuspects : 1), sizeof *minor), any = 0;
  if (!minor) return;
  for (int j = 0; j < r->nleaks; j++) {
    const lgr_leak_t *L = &r->leaks[j];
    double growth = 0, blocks = 0;
    for (int k = 0; k < L->nsuspects; k++) {
      growth += r->suspects[L->suspects[k]].growth_bytes;
      blocks += (double)r->suspects[L->suspects[k]].blocks_gained;
    }
    const lgr_run_t *u = NULL;
    for (int k = 0; k < r->nruns; k++)
      if (r->runs[k].proc == L->proc) u = &r->runs[k];
    double size = u ? u->median_live_bytes : 0;
    if (!lgr_is_minor(growth, L->growth_bytes_per_s, size, blocks, L->time_to_oom_s, lgr_is_steady(&L->r))) continue;
    for (int k = 0; k < L->nsuspects; k++) minor[L->suspects[k]] = 1;
    any = 1;
  }
  if (any) {
    int w = 0, mcap = r->nminor;
    for (int i = 0; i < r->nsuspects; i++) {
      if (!minor[i]) {
        r->suspects[w++] = r->suspects[i];
        continue;
      }
      r->suspects[i].leak = -1;
      if (push_site(&r->minor, &r->nminor, &mcap, &r->suspects[i])) lgr_site_free(&r->suspects[i]);
    }
    r->nsuspects = w;
    free_leaks(r);
    for (int i = 0; i < r->nsuspects; i++) r->suspects[i].leak = -1;
    group_leaks(r);
    analyse_leaks(r);
    if (r->nminor) qsort(r->minor, (size_t)r->nminor, sizeof *r->minor, cmp_suspect);
  }
  free(minor);
}

/* ------------------------------------------------------------------ build */

int lgr_build(lgst_t *store, const lgr_options_t *o, lgr_report_t *r, char *why, size_t whylen) {
  sqlite3 *db = lgst_db(store);
  memset(r, 0, sizeof *r);
  if (load_runs(db, r) != 0) {
    snprintf(why, whylen, "cannot read runs: %s", sqlite3_errmsg(db));
    lgr_free(r);
    return -EIO;
  }
  load_gpus(db, r);
  int ocap = 0;
  lgr_site_t *others = NULL;
  int nothers = 0;
  for (int i = 0; i < r->nruns; i++) {
    if (analyse_proc(db, &r->runs[i], o, r, &others, &nothers, &ocap) != 0) {
      snprintf(why, whylen, "cannot read snapshots: %s", sqlite3_errmsg(db));
      for (int k = 0; k < nothers; k++) lgr_site_free(&others[k]);
      free(others);
      lgr_free(r);
      return -EIO;
    }
  }
  if (r->nsuspects) qsort(r->suspects, (size_t)r->nsuspects, sizeof *r->suspects, cmp_suspect);
  if (r->nminor) qsort(r->minor, (size_t)r->nminor, sizeof *r->minor, cmp_suspect);
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
  group_leaks(r);
  analyse_leaks(r);
  split_minor(r);
  /* a process without a leak is not described by a leak's shape */
  for (int i = 0; i < r->nruns; i++)
    if (!r->runs[i].leaking && r->runs[i].pattern >= 0 && lg_pattern_is_leak((lg_pattern_t)r->runs[i].pattern))
      r->runs[i].pattern = r->runs[i].pattern_nonleak;
  sqlite3_stmt *st;
  if (sqlite3_prepare_v2(db, "SELECT value FROM meta WHERE key='limit_source'", -1, &st, NULL) == SQLITE_OK) {
    if (sqlite3_step(st) == SQLITE_ROW) r->limit_source = dupstr(sqlite3_column_text(st, 0));
    sqlite3_finalize(st);
  }
  return 0;
}

void lgr_free(lgr_report_t *r) {
  for (int i = 0; i < r->nruns; i++) {
    free(r->runs[i].command);
    free(r->runs[i].end_reason);
    free(r->runs[i].kind);
    free(r->runs[i].host);
    free(r->runs[i].snap_t);
    free(r->runs[i].snap_step);
  }
  free_leaks(r);
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
  memset(r, 0, sizeof *r);
}
