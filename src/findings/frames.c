/* SPDX-License-Identifier: MIT */
/*
 * frames.c - the frames of a site: which frames are allocator machinery (the site is
 * the first that is not), the locations of a process read once per build, a stack's
 * frames in the order the program ran, the source line of a site; and freeing a site,
 * which owns its frames.
 */
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "findings/impl.h"

int lgr_is_python_module(const char *m) { return m && !strcmp(m, "python"); }

/* A Python file that is not the program's own code: the interpreter's library
 * (lib/python3.X/, 3.13t's lib/python3.Xt/, the frozen modules) or an installed package
 * (site-packages, Debian's dist-packages). */
int lgr_is_library_file(const char *file) {
  if (!file || !*file || lgr_under_own(file)) return 0;
  if (!strncmp(file, "<frozen ", 8)) return 1;
  if (strstr(file, "/site-packages/") || strstr(file, "/dist-packages/")) return 1;
  for (const char *p = strstr(file, "/lib/python3."); p; p = strstr(p + 1, "/lib/python3.")) {
    const char *q = p + 13;
    if (!isdigit((unsigned char)*q)) continue;
    while (isdigit((unsigned char)*q)) q++;
    if (*q == 't') q++;
    if (*q == '/') return 1;
  }
  return 0;
}

int lgr_own_frame(const void *frames, int n, int i, lgr_frame_at_fn at) {
  const char *fn, *file, *module;
  for (int k = i; k < n; k++) {
    at(frames, k, &fn, &file, &module);
    if (!lgr_is_python_module(module)) break;
    /* under an import the innermost line stays the site: start-up (docs/detection.md) */
    if (lgr_is_import_frame(fn, file)) break;
    if (!lgr_is_library_file(file)) return k;
  }
  return i;
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

/* The GPU vendors' runtimes and drivers, as frames show them: one row per vendor (the
 * device seam, issue #33; a HIP row would name libamdhip64.so, "hip" API functions,
 * hipMalloc and hip_runtime.h). CUDA: the runtime linked statically (nvcc's default)
 * names its internal functions libcudart_static_<sha1> (CUDA 13; __cudart<N> before);
 * the shared one is its own module. cudaMalloc* and cudaHostAlloc are the allocation
 * calls (and their templates in cuda_runtime.h), cuMem* the driver's. Internals that
 * carry no recognisable name are handled per stack (lgr_site_frame). */
typedef struct {
  const char *modules[3];   /* shared objects whose every frame is machinery */
  const char *fn_prefix[7]; /* functions that are machinery */
  const char *headers[3];   /* header files (allocation templates) */
  const char *api;          /* the runtime API's prefix, followed by a capital letter */
} gpu_runtime_t;
static const gpu_runtime_t gpu_runtimes[] = {
    {{"libcudart.so", "libcuda.so", NULL},
     {"libcudart_static_", "__cudart", "cudart::", "cudaMalloc", "cudaHostAlloc", "cuMem", NULL},
     {"cuda_runtime.h", "cuda_runtime_api.h", NULL},
     "cuda"},
};
#define NGPU_RUNTIMES (sizeof gpu_runtimes / sizeof gpu_runtimes[0])

static int gpu_runtime_machinery(const char *fn, const char *file, const char *module) {
  const char *b = NULL;
  if (file) {
    b = strrchr(file, '/');
    b = b ? b + 1 : file;
  }
  for (size_t v = 0; v < NGPU_RUNTIMES; v++) {
    const gpu_runtime_t *g = &gpu_runtimes[v];
    for (int i = 0; module && g->modules[i]; i++)
      if (strstr(module, g->modules[i])) return 1;
    for (int i = 0; fn && g->fn_prefix[i]; i++)
      if (!strncmp(fn, g->fn_prefix[i], strlen(g->fn_prefix[i]))) return 1;
    for (int i = 0; b && g->headers[i]; i++)
      if (!strcmp(b, g->headers[i])) return 1;
  }
  return 0;
}

/* A GPU runtime API function as the runtime library defines it (cudaMalloc,
 * cudaStreamCreate, cudaMallocAsync_ptsz): the vendor's prefix and a capital letter. */
static int is_gpu_runtime_api(const char *fn) {
  if (!fn) return 0;
  for (size_t v = 0; v < NGPU_RUNTIMES; v++) {
    size_t n = strlen(gpu_runtimes[v].api);
    if (!strncmp(fn, gpu_runtimes[v].api, n) && fn[n] >= 'A' && fn[n] <= 'Z') return 1;
  }
  return 0;
}

int lgr_is_machinery(const char *fn, const char *file, const char *module) {
  static const char *const alloc_fns[] = {
      "malloc",         "calloc",          "realloc",  "free",      "reallocarray",  "posix_memalign",
      "memalign",       "aligned_alloc",   "valloc",   "pvalloc",   "mmap",          "mmap64",
      "strdup",         "strndup",         "__strdup", "__strndup", "__libc_malloc", "__libc_calloc",
      "__libc_realloc", "__libc_memalign", "xmalloc",  "xcalloc",   "xrealloc",      "g_malloc",
      "g_malloc0",      "g_realloc",       NULL};
  if (module && strstr(module, "libleakguard")) return 1;
  if (gpu_runtime_machinery(fn, file, module)) return 1;
  if (!fn) return 0;
  for (int i = 0; alloc_fns[i]; i++)
    if (!strcmp(fn, alloc_fns[i])) return 1;
  if (is_alloc_wrapper(fn)) return 1;
  if (!strncmp(fn, "operator new", 12) || !strncmp(fn, "_Zn", 3)) return 1;
  if (!strncmp(fn, "std::", 5) || !strncmp(fn, "__gnu_cxx::", 11)) return 1;
  if (file && !strncmp(file, "/usr/include/c++/", 17)) return 1;
  return 0;
}

/* How far a run of frames without source (a GPU runtime's internals) is searched
 * for the runtime API function the program called. */
#define LGR_GPU_RUNTIME_DEPTH 64

int lgr_site_frame(const void *frames, int n, lgr_frame_at_fn at) {
  const char *fn, *file, *module;
  int k = 0;
  for (; k < n - 1; k++) {
    at(frames, k, &fn, &file, &module);
    if (!lgr_is_machinery(fn, file, module)) break;
  }
  /* A GPU runtime (CUDA's): between the driver entry point (our wrapper, not in the
   * stack) and the runtime API function the program called (cudaMalloc,
   * cudaStreamCreate...) lie the runtime's internals, whatever their names (obfuscated,
   * or none at all in a binary without symbols). libcudart has no debug information:
   * those frames and the API function have no source file. A run of such frames that
   * reaches an API function ("cuda[A-Z]...") without a source file is machinery, and so
   * is that function (and an API function calling it); the site is what called the API. */
  for (int j = k; j < n - 1 && j < k + LGR_GPU_RUNTIME_DEPTH; j++) {
    at(frames, j, &fn, &file, &module);
    if (file && *file) break;
    if (!is_gpu_runtime_api(fn)) continue;
    int s = j + 1;
    for (; s < n - 1; s++) {
      at(frames, s, &fn, &file, &module);
      if (!((!file || !*file) && is_gpu_runtime_api(fn)) && !lgr_is_machinery(fn, file, module)) break;
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

void lgr_frames_clear(void) {
  for (size_t i = 0; i < locs.n; i++) {
    free(locs.v[i].function);
    free(locs.v[i].file);
    free(locs.v[i].module);
  }
  free(locs.v);
  memset(&locs, 0, sizeof locs);
  lgr_headline_clear();
}

static int locs_load(sqlite3 *db, int proc) {
  if (locs.loaded && locs.db == db && locs.proc == proc) return 0;
  lgr_frames_clear();
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
  lgr_headline_load(db, proc, locs.v, locs.n, locs.lo);
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
  if (!npy && !native && s->nframes > 0) {
    /* the program's own caller of a system library or of its allocation wrapper; the
     * innermost frame stays below it (lgr_headline) */
    s->site_frame = lgr_headline(s->frames, s->nframes, 0, frame_at);
    s->lib_frame = s->site_frame ? 1 : 0;
  }
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
        /* the program's own line, the library's frames below it (lgr_own_frame) */
        s->site_frame = lgr_own_frame(s->frames, s->nframes, i, frame_at);
        s->lib_frame = s->site_frame != i ? i + 1 : 0;
        break;
      }
  }
  return 0;
}

/* The text of line `line` of file, trimmed, or NULL (the file is not here). */
char *lgr_source_line(const char *file, int line) {
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

/* A stack under a module import (any of its frames, docs/detection.md "Start-up"). */
int lgr_in_import(const lgr_site_t *s) {
  for (int i = 0; i < s->nall; i++)
    if (lgr_is_import_frame(s->all_frames[i].function, s->all_frames[i].file)) return 1;
  return 0;
}

/* Key of a stack's allocation site, from its frames in order (Python frames first as
 * recorded): the innermost Python line of the program's own code (lgr_own_frame), else
 * the native site frame (lgr_site_frame) or its own caller further out (lgr_headline).
 * The space is part of the key. Writes "" when there are no frames. */
void lgr_site_key(char *key, size_t len, const lgr_loc_t **lv, int nl, const char *space) {
  key[0] = 0;
  if (nl <= 0) return;
  int k = lgr_is_python_module(lv[0]->module) ? lgr_own_frame(lv, nl, 0, lgr_loc_at)
                                              : lgr_headline(lv, nl, lgr_site_frame(lv, nl, lgr_loc_at), lgr_loc_at);
  const lgr_loc_t *l = lv[k];
  const char *fn = l->function, *file = l->file, *module = l->module;
  snprintf(key, len, "%s\x1f%s\x1f%d\x1f%s\x1f%s", fn ? fn : "", file ? file : "", l->line,
           file && *file ? "" : (module ? module : ""), space ? space : "host");
}
