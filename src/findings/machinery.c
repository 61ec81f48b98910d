/* SPDX-License-Identifier: MIT */
/*
 * machinery.c - the rules a frame is judged by, read through an accessor
 * (lgr_frame_at_fn) so that they apply to a site's frames and to a stack's locations
 * alike: which frames are allocator machinery (the site is the first that is not:
 * lgr_site_frame), which Python files are library code and which line is the program's
 * own (lgr_own_frame), the --own paths that make code the program's own, import frames;
 * and the accessors themselves. frames.c and headline.c both use them; they use
 * neither.
 */
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "findings/impl.h"

/* --own paths, for the build (lgr_own_add) */
static _Thread_local struct {
  char **v;
  int n;
} own;

void lgr_own_clear(void) {
  for (int i = 0; i < own.n; i++) free(own.v[i]);
  free(own.v);
  memset(&own, 0, sizeof own);
}

int lgr_own_add(const char *path) {
  if (!path || !*path) return 0;
  size_t n = strlen(path);
  while (n > 1 && path[n - 1] == '/') n--;
  char **nv = realloc(own.v, (size_t)(own.n + 1) * sizeof *nv);
  if (!nv) return -1;
  own.v = nv;
  if (!(own.v[own.n] = strndup(path, n))) return -1;
  own.n++;
  return 0;
}

int lgr_under_own(const char *path) {
  if (!path) return 0;
  for (int i = 0; i < own.n; i++) {
    size_t n = strlen(own.v[i]);
    if (!strncmp(path, own.v[i], n) && (path[n] == '/' || path[n] == 0 || own.v[i][n - 1] == '/')) return 1;
  }
  return 0;
}

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

void lgr_loc_at(const void *lv, int i, const char **fn, const char **file, const char **module) {
  const lgr_loc_t *l = ((const lgr_loc_t *const *)lv)[i];
  *fn = l->function;
  *file = l->file;
  *module = l->module;
}
