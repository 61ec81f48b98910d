/* SPDX-License-Identifier: MIT */
/*
 * frames.c - the frames of a site: the locations of a process read once per build, a
 * stack's frames in the order the program ran, the source line of a site. Which frames
 * are machinery or library code is machinery.c; which names a native site, headline.c.
 */
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "findings/impl.h"

/* Minor growth: the rule of docs/detection.md. */
/* ------------------------------------------------------------------ frames */

/* The locations of one process (docs/schema.md: a stack is a list of location ids),
 * read once per process and kept for the build: every frame of every site is one of
 * them. Indexed by loc - lo. */

/* The library site of a site named at frame k past frames [k0, k): the innermost of
 * them that has a name (a stripped program's static allocator says "??", as postgres'
 * AllocSetAlloc does, where its caller palloc says more), else k0. */
static int lib_frame_of(const void *frames, int k0, int k, lgr_frame_at_fn at) {
  for (int j = k0; j < k; j++) {
    const char *fn, *file, *module;
    at(frames, j, &fn, &file, &module);
    if ((fn && *fn && strcmp(fn, "??") != 0) || (file && *file)) return j;
  }
  return k0;
}
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
    s->lib_frame = s->site_frame ? 1 + lib_frame_of(s->frames, 0, s->site_frame, frame_at) : 0;
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

/* The frame that names a stack's site among its locations lv[0..nl) (Python frames
 * first as recorded): the innermost Python line of the program's own code
 * (lgr_own_frame), else the native site frame (lgr_site_frame) or its own caller further
 * out (lgr_headline); *lib: the innermost frame passed over to get there (the library's
 * line, the system library's or the wrapper's frame), -1 when none. For the process whose
 * locations were loaded last. -1 without frames. */
static int site_index(const lgr_loc_t **lv, int nl, int *lib) {
  *lib = -1;
  if (nl <= 0) return -1;
  if (lgr_is_python_module(lv[0]->module)) {
    int k = lgr_own_frame(lv, nl, 0, lgr_loc_at);
    if (k != 0) *lib = 0;
    return k;
  }
  int k0 = lgr_site_frame(lv, nl, lgr_loc_at), k = lgr_headline(lv, nl, k0, lgr_loc_at);
  if (k != k0) {
    *lib = lib_frame_of(lv, k0, k, lgr_loc_at);
  }
  return k;
}

int lgr_stack_site(sqlite3 *db, int proc, const lgr_loc_t **lv, int nl, int *lib) {
  *lib = -1;
  if (locs_load(db, proc) != 0) return nl > 0 ? 0 : -1;
  return site_index(lv, nl, lib);
}

/* Key of a stack's allocation site, from its frames in order (Python frames first as
 * recorded): the frame site_index names. The space is part of the key. Writes "" when
 * there are no frames. */
void lgr_site_key(char *key, size_t len, const lgr_loc_t **lv, int nl, const char *space) {
  key[0] = 0;
  int lib, k = site_index(lv, nl, &lib);
  if (k < 0) return;
  const lgr_loc_t *l = lv[k];
  const char *fn = l->function, *file = l->file, *module = l->module;
  snprintf(key, len, "%s\x1f%s\x1f%d\x1f%s\x1f%s", fn ? fn : "", file ? file : "", l->line,
           file && *file ? "" : (module ? module : ""), space ? space : "host");
}
