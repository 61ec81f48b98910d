/* SPDX-License-Identifier: MIT */
/*
 * report.c - the report: reads runs, stacks and snapshot series from the database,
 * runs the detector on every site's series, ranks the suspects and prints them.
 * Detection is recomputed here, so a database left by a killed collector, or one
 * recorded by an older version, is reported with today's detector.
 */
#include "output/report.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <sqlite3.h>
#include <stdlib.h>
#include <string.h>

#include "core/util.h"

static char *dupstr(const unsigned char *s) { return strdup(s ? (const char *)s : ""); }

int lgr_is_machinery(const char *fn, const char *file, const char *module) {
  static const char *const alloc_fns[] = {
      "malloc", "calloc", "realloc", "free", "reallocarray", "posix_memalign", "memalign",
      "aligned_alloc", "valloc", "pvalloc", "mmap", "mmap64", "strdup", "strndup",
      "__strdup", "__strndup", "__libc_malloc", "__libc_calloc", "__libc_realloc",
      "__libc_memalign", "xmalloc", "xcalloc", "xrealloc", "g_malloc", "g_malloc0", "g_realloc",
      NULL};
  if (module && strstr(module, "libleakguard")) return 1;
  if (!fn) return 0;
  for (int i = 0; alloc_fns[i]; i++)
    if (!strcmp(fn, alloc_fns[i])) return 1;
  if (!strncmp(fn, "operator new", 12) || !strncmp(fn, "_Zn", 3)) return 1;
  if (!strncmp(fn, "std::", 5) || !strncmp(fn, "__gnu_cxx::", 11)) return 1;
  if (file && !strncmp(file, "/usr/include/c++/", 17)) return 1;
  return 0;
}

/* ------------------------------------------------------------------ loading */

typedef struct snapinfo {
  double t;
  double step;
} snapinfo_t;

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
      " (SELECT dropped FROM snapshots s WHERE s.proc=p.proc ORDER BY seq DESC LIMIT 1)"
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
  return 0;
}

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
  int skip = 0;
  if (!native)
    while (skip < s->nall - 1 &&
           lgr_is_machinery(s->all_frames[skip].function, s->all_frames[skip].file, s->all_frames[skip].module))
      skip++;
  /* No frames (a damaged database): no pointer arithmetic on NULL (fuzz, issue #17). */
  s->frames = s->all_frames ? s->all_frames + skip : NULL;
  s->nframes = s->nall - skip;
  if (!native && s->nframes > 0 && !strcmp(s->frames[0].module, "python")) {
    /* A Python stack: fold the interpreter's own native frames away (--native keeps
     * them). The dropped frames stay owned by all_frames. */
    int w = 0;
    for (int i = 0; i < s->nframes; i++) {
      const char *m = s->frames[i].module;
      if (!strncmp(m, "python3", 7) || !strncmp(m, "libpython3", 10)) continue;
      lgr_frame_t tmp = s->frames[w];
      s->frames[w++] = s->frames[i];
      s->frames[i] = tmp;
    }
    s->nframes = w;
  }
  return 0;
}

/* Holders explained for stack `stack` in the latest explain of the site's process, as a
 * JSON array in s->holders_json (left NULL when there are none). `via`: they were
 * explained for another stack with the same allocation site; each holder says which. */
static void holders_of(sqlite3 *db, lgr_site_t *s, int stack, int via) {
  sqlite3_stmt *st;
  const char *sql =
      "SELECT kind, chain, objects, bytes, detail FROM holders WHERE proc=?1 AND stack=?2 AND"
      " explain=(SELECT max(explain) FROM holders WHERE proc=?1) ORDER BY bytes DESC LIMIT 5";
  if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) != SQLITE_OK) return; /* older database */
  sqlite3_bind_int(st, 1, s->proc);
  sqlite3_bind_int(st, 2, stack);
  cJSON *arr = cJSON_CreateArray();
  while (sqlite3_step(st) == SQLITE_ROW) {
    cJSON *h = cJSON_CreateObject();
    const char *chain = (const char *)sqlite3_column_text(st, 1);
    cJSON *c = chain ? cJSON_Parse(chain) : NULL;
    cJSON_AddItemToObject(h, "chain", c ? c : cJSON_CreateArray());
    cJSON_AddNumberToObject(h, "objects", (double)sqlite3_column_int64(st, 2));
    cJSON_AddNumberToObject(h, "bytes", (double)sqlite3_column_int64(st, 3));
    const char *kind = (const char *)sqlite3_column_text(st, 0);
    cJSON_AddStringToObject(h, "kind", kind ? kind : "object");
    const char *detail = (const char *)sqlite3_column_text(st, 4);
    cJSON *d = detail ? cJSON_Parse(detail) : NULL;
    if (d) cJSON_AddItemToObject(h, "detail", d);
    if (via) cJSON_AddNumberToObject(h, "via_stack", stack);
    cJSON_AddItemToArray(arr, h);
  }
  sqlite3_finalize(st);
  if (cJSON_GetArraySize(arr) > 0) s->holders_json = cJSON_PrintUnformatted(arr);
  cJSON_Delete(arr);
}

static void free_site(lgr_site_t *s) {
  free(s->holders_json);
  for (int i = 0; i < s->nall; i++) {
    free(s->all_frames[i].function);
    free(s->all_frames[i].file);
    free(s->all_frames[i].module);
  }
  free(s->all_frames);
}

static int same_str(const char *a, const char *b) { return (!a && !b) || (a && b && !strcmp(a, b)); }

/* Holders of a suspect (its frames loaded). The explain at exit names the owners of the
 * collector's suspects *at that moment*; the final analysis, with every snapshot, can
 * pick other native stacks of the same source line (a Python line reaches malloc through
 * many paths, and sampling makes each path's series noisy). When the suspect's own stack
 * was not explained, the holders of the explained stack with the same allocation site
 * (frames[0]: function, file, line) are shown, each with `via_stack`. */
static void load_holders(sqlite3 *db, lgr_site_t *s, int native) {
  holders_of(db, s, s->stack, 0);
  if (s->holders_json || s->nframes == 0) return;
  sqlite3_stmt *st;
  const char *sql =
      "SELECT stack FROM holders WHERE proc=?1 AND stack<>?2 AND"
      " explain=(SELECT max(explain) FROM holders WHERE proc=?1)"
      " GROUP BY stack ORDER BY sum(bytes) DESC, stack LIMIT 64";
  if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) != SQLITE_OK) return;
  sqlite3_bind_int(st, 1, s->proc);
  sqlite3_bind_int(st, 2, s->stack);
  const lgr_frame_t *f0 = &s->frames[0];
  while (!s->holders_json && sqlite3_step(st) == SQLITE_ROW) {
    lgr_site_t o = {.proc = s->proc, .stack = sqlite3_column_int(st, 0)};
    if (load_frames(db, &o, native) == 0 && o.nframes > 0 && o.frames[0].line == f0->line &&
        same_str(o.frames[0].function, f0->function) && same_str(o.frames[0].file, f0->file))
      holders_of(db, s, o.stack, 1);
    free_site(&o);
  }
  sqlite3_finalize(st);
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

/* Analyses every site of one process. */
static int analyse_proc(sqlite3 *db, lgr_run_t *run, const lgr_options_t *o, lgr_report_t *r,
                        int *scap, int *ocap, lgr_site_t **others, int *nothers) {
  sqlite3_stmt *st;
  /* snapshot times */
  if (sqlite3_prepare_v2(db,
                         "SELECT seq, t_ns - (SELECT start_ns FROM processes WHERE proc=?1), step,"
                         " live_bytes, rss_bytes"
                         " FROM snapshots WHERE proc=?1 ORDER BY seq",
                         -1, &st, NULL) != SQLITE_OK)
    return -EIO;
  sqlite3_bind_int(st, 1, run->proc);
  snapinfo_t *snaps = NULL;
  int64_t nsnap = 0, cap = 0;
  double *pt = NULL, *plive = NULL, *prss = NULL;
  size_t pn = 0, pcap = 0;
  while (sqlite3_step(st) == SQLITE_ROW) {
    int64_t seq = sqlite3_column_int64(st, 0);
    if (seq < 0 || seq > 100000000) continue;
    if (seq >= cap) {
      int64_t nc = cap ? cap * 2 : 256;
      while (nc <= seq) nc *= 2;
      snapinfo_t *n = realloc(snaps, (size_t)nc * sizeof *n);
      if (!n) break;
      for (int64_t i = cap; i < nc; i++) n[i] = (snapinfo_t){NAN, 0};
      snaps = n;
      cap = nc;
    }
    snaps[seq].t = (double)sqlite3_column_int64(st, 1) / 1e9;
    if (pn == pcap) {
      pcap = pcap ? pcap * 2 : 256;
      double *a = realloc(pt, pcap * sizeof *a), *b = realloc(plive, pcap * sizeof *b),
             *c2 = realloc(prss, pcap * sizeof *c2);
      if (a) pt = a;
      if (b) plive = b;
      if (c2) prss = c2;
      if (!a || !b || !c2) pcap = pn;
    }
    if (pn < pcap && (pn == 0 || snaps[seq].t > pt[pn - 1])) {
      pt[pn] = snaps[seq].t;
      plive[pn] = (double)sqlite3_column_int64(st, 3);
      prss[pn] = (double)sqlite3_column_int64(st, 4);
      pn++;
    }
    snaps[seq].step = (double)sqlite3_column_int64(st, 2);
    if (seq + 1 > nsnap) nsnap = seq + 1;
  }
  sqlite3_finalize(st);
  run->pattern = lgd_process_pattern(pt, plive, prss, pn);
  free(pt);
  free(plive);
  free(prss);
  if (nsnap == 0) {
    free(snaps);
    return 0;
  }
  if (sqlite3_prepare_v2(db,
                         "SELECT s.stack, s.seq, s.live_bytes, s.live_blocks, s.alloc_bytes,"
                         " s.alloc_blocks, s.oldest_epoch, k.space FROM samples s"
                         " LEFT JOIN stacks k ON k.proc=s.proc AND k.stack=s.stack"
                         " WHERE s.proc=? ORDER BY s.stack, s.seq",
                         -1, &st, NULL) != SQLITE_OK) {
    free(snaps);
    return -EIO;
  }
  sqlite3_bind_int(st, 1, run->proc);
  double t_end = snaps[nsnap - 1].t;
  double headroom = run->limit_bytes > run->usage_bytes ? (double)(run->limit_bytes - run->usage_bytes) : 0;
  int rc = sqlite3_step(st);
  lgd_series_t ser;
  lgd_series_init(&ser, 4096);
  while (rc == SQLITE_ROW) {
    lgr_site_t site;
    memset(&site, 0, sizeof site);
    site.proc = run->proc;
    site.pid = run->pid;
    site.stack = sqlite3_column_int(st, 0);
    const unsigned char *sp = sqlite3_column_text(st, 7);
    snprintf(site.space, sizeof site.space, "%s", sp ? (const char *)sp : "host");
    ser.n = 0;
    double val = 0, maxval = 0;
    int64_t next = 0;
    int oldest_null = 1;
    int64_t oldest = 0;
    while (rc == SQLITE_ROW && sqlite3_column_int(st, 0) == site.stack) {
      int64_t seq = sqlite3_column_int64(st, 1);
      if (seq >= nsnap) seq = nsnap - 1;
      for (; next < seq; next++)
        if (!isnan(snaps[next].t)) lgd_series_add(&ser, snaps[next].t, val, snaps[next].step);
      val = (double)sqlite3_column_int64(st, 2);
      if (val > maxval) maxval = val;
      site.live_bytes = sqlite3_column_int64(st, 2);
      site.live_blocks = sqlite3_column_int64(st, 3);
      site.alloc_bytes = (uint64_t)sqlite3_column_int64(st, 4);
      site.alloc_blocks = (uint64_t)sqlite3_column_int64(st, 5);
      oldest_null = sqlite3_column_type(st, 6) == SQLITE_NULL;
      oldest = sqlite3_column_int64(st, 6);
      rc = sqlite3_step(st);
    }
    for (; next < nsnap; next++)
      if (!isnan(snaps[next].t)) lgd_series_add(&ser, snaps[next].t, val, snaps[next].step);
    site.oldest_age_s = oldest_null ? NAN : fmax(0, t_end - (double)oldest * 0.1);
    site.peak_live_bytes = maxval >= 9.2e18 ? INT64_MAX : (int64_t)maxval; /* huge counts (fuzz) */
    /* The classifier names the shape of suspects; other sites keep the rule-based
     * shape (thousands of them in a Python program: it would cost seconds). */
    lgd_options_t dopt = {o->min_growth_bytes, 1};
    if (maxval >= (o->min_growth_bytes > 0 ? o->min_growth_bytes : 4096)) lgd_analyze(ser.pts, ser.n, &dopt, &site.r);
    else memset(&site.r, 0, sizeof site.r), site.r.growth_bytes_per_step = NAN;
    site.time_to_oom_s = NAN;
    if (site.r.leak && site.r.growth_bytes_per_s > 0)
      site.time_to_oom_s = headroom / site.r.growth_bytes_per_s;
    if (site.r.leak) {
      load_frames(db, &site, o->native);
      load_holders(db, &site, o->native);
      if (push_site(&r->suspects, &r->nsuspects, scap, &site)) free_site(&site);
    } else if (maxval > 0 && site.live_bytes > 0) {
      load_frames(db, &site, o->native);
      if (push_site(others, nothers, ocap, &site)) free_site(&site);
    }
  }
  lgd_series_free(&ser);
  sqlite3_finalize(st);
  free(snaps);
  return 0;
}

int lgr_build(lgst_t *store, const lgr_options_t *o, lgr_report_t *r, char *why, size_t whylen) {
  sqlite3 *db = lgst_db(store);
  memset(r, 0, sizeof *r);
  if (load_runs(db, r) != 0) {
    snprintf(why, whylen, "cannot read runs: %s", sqlite3_errmsg(db));
    lgr_free(r);
    return -EIO;
  }
  int scap = 0, ocap = 0;
  lgr_site_t *others = NULL;
  int nothers = 0;
  for (int i = 0; i < r->nruns; i++) {
    if (analyse_proc(db, &r->runs[i], o, r, &scap, &ocap, &others, &nothers) != 0) {
      snprintf(why, whylen, "cannot read snapshots: %s", sqlite3_errmsg(db));
      /* Nothing of the half-built report survives (leaks found by the fuzzer). */
      for (int k = 0; k < nothers; k++) free_site(&others[k]);
      free(others);
      lgr_free(r);
      return -EIO;
    }
  }
  if (r->nsuspects) qsort(r->suspects, (size_t)r->nsuspects, sizeof *r->suspects, cmp_suspect);
  if (nothers) qsort(others, (size_t)nothers, sizeof *others, cmp_live);
  int keep = nothers < 5 ? nothers : 5;
  for (int i = keep; i < nothers; i++) free_site(&others[i]);
  r->others = others;
  r->nothers = keep;
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
  }
  for (int i = 0; i < r->nsuspects; i++) free_site(&r->suspects[i]);
  for (int i = 0; i < r->nothers; i++) free_site(&r->others[i]);
  free(r->runs);
  free(r->suspects);
  free(r->others);
  free(r->limit_source);
  memset(r, 0, sizeof *r);
}

/* ------------------------------------------------------------------ text */

static const char *basename_of(const char *p) {
  const char *s = strrchr(p, '/');
  return s ? s + 1 : p;
}

static void print_frame(FILE *f, const lgr_frame_t *fr, const char *lead) {
  fprintf(f, "%s%s", lead, fr->function[0] ? fr->function : "??");
  if (fr->file[0]) fprintf(f, " (%s:%d)", fr->file, fr->line);
  else if (fr->module[0]) fprintf(f, " [%s]", fr->module);
  fprintf(f, "%s\n", fr->inlined ? " [inlined]" : "");
}

static void print_run_end(FILE *f, const lgr_run_t *u) {
  if (u->has_signal) fprintf(f, "killed by signal %d (SIG%s)", u->signal, sigabbrev_np(u->signal) ? sigabbrev_np(u->signal) : "?");
  else if (u->has_exit) fprintf(f, "exited with status %d", u->exit_status);
  else if (!strcmp(u->end_reason, "exec")) fprintf(f, "replaced itself (exec)");
  else if (!strcmp(u->end_reason, "running")) fprintf(f, "was still running when recording stopped");
  else fprintf(f, "ended (%s)", u->end_reason);
}

void lgr_print_text(FILE *f, const lgr_report_t *r, const lgr_options_t *o) {
  char b1[32], b2[32], b3[32];
  int top = o->top > 0 ? o->top : 10;
  fprintf(f, "leakguard report: %s\n", r->nsuspects ? "LEAK" : "no leak found");
  for (int i = 0; i < r->nruns; i++) {
    const lgr_run_t *u = &r->runs[i];
    fprintf(f, "  process %d (%s) ", u->pid, u->command);
    print_run_end(f, u);
    fprintf(f, " after %.1fs; live %s at the end, peak %s", u->duration_s,
            lgu_fmt_bytes(b1, sizeof b1, (double)u->final_live_bytes),
            lgu_fmt_bytes(b2, sizeof b2, (double)u->peak_live_bytes));
    if (u->steps) fprintf(f, ", %llu steps", (unsigned long long)u->steps);
    if (u->sample_bytes) fprintf(f, ", sampled every %s", lgu_fmt_bytes(b3, sizeof b3, (double)u->sample_bytes));
    if (u->dropped) fprintf(f, ", %llu records DROPPED", (unsigned long long)u->dropped);
    if (u->pattern >= 0) fprintf(f, "; memory curve: %s", lg_pattern_name((lg_pattern_t)u->pattern));
    fprintf(f, "\n");
  }
  if (!r->nsuspects) {
    fprintf(f, "\nNo allocation site's live memory keeps growing.\n");
  } else {
    fprintf(f, "\n%d growing allocation site%s (fastest first):\n", r->nsuspects, r->nsuspects > 1 ? "s" : "");
  }
  for (int i = 0; i < r->nsuspects && i < top; i++) {
    const lgr_site_t *s = &r->suspects[i];
    fprintf(f, "\n#%d %s  +%s/s", i + 1, lg_pattern_name(s->r.pattern),
            lgu_fmt_bytes(b1, sizeof b1, s->r.growth_bytes_per_s));
    if (!isnan(s->r.growth_bytes_per_step))
      fprintf(f, " (+%s/step)", lgu_fmt_bytes(b2, sizeof b2, s->r.growth_bytes_per_step));
    fprintf(f, "  live %s in %lld blocks", lgu_fmt_bytes(b3, sizeof b3, (double)s->live_bytes),
            (long long)s->live_blocks);
    if (s->peak_live_bytes > s->live_bytes * 2)
      fprintf(f, " (peak %s, freed at exit)", lgu_fmt_bytes(b2, sizeof b2, (double)s->peak_live_bytes));
    fprintf(f, "  confidence %.2f", s->r.confidence);
    if (!isnan(s->time_to_oom_s)) fprintf(f, "  OOM in %s", lgu_fmt_duration(b1, sizeof b1, s->time_to_oom_s));
    fprintf(f, "\n   pid %d, %s memory", s->pid, s->space);
    if (!isnan(s->oldest_age_s)) fprintf(f, ", oldest live block ~%.0fs old", s->oldest_age_s);
    fprintf(f, "\n");
    for (int k = 0; k < s->nframes && k < 8; k++)
      print_frame(f, &s->frames[k], k == 0 ? "   allocated at " : "      called from ");
    cJSON *hl = s->holders_json ? cJSON_Parse(s->holders_json) : NULL;
    cJSON *h;
    cJSON_ArrayForEach(h, hl) {
      fprintf(f, "   held by ");
      cJSON *c;
      int first = 1;
      cJSON_ArrayForEach(c, cJSON_GetObjectItem(h, "chain")) {
        fprintf(f, "%s%s", first ? "" : " \u2192 ", cJSON_IsString(c) ? c->valuestring : "?");
        first = 0;
      }
      const cJSON *kind = cJSON_GetObjectItem(h, "kind");
      const cJSON *via = cJSON_GetObjectItem(h, "via_stack");
      fprintf(f, "  (%s, %.0f objects, %s%s)\n", cJSON_IsString(kind) ? kind->valuestring : "object",
              cJSON_GetNumberValue(cJSON_GetObjectItem(h, "objects")),
              lgu_fmt_bytes(b1, sizeof b1, cJSON_GetNumberValue(cJSON_GetObjectItem(h, "bytes"))),
              cJSON_IsNumber(via) ? "; explained for another stack of this line" : "");
    }
    cJSON_Delete(hl);
  }
  if (r->nothers) {
    fprintf(f, "\nLargest live sites that are not growing:\n");
    for (int i = 0; i < r->nothers; i++) {
      const lgr_site_t *s = &r->others[i];
      fprintf(f, "  %10s  %-10s %s", lgu_fmt_bytes(b1, sizeof b1, (double)s->live_bytes),
              lg_pattern_name(s->r.pattern), s->nframes ? s->frames[0].function : "??");
      if (s->nframes && s->frames[0].file[0]) fprintf(f, " (%s:%d)", basename_of(s->frames[0].file), s->frames[0].line);
      fprintf(f, "\n");
    }
  }
}

/* ------------------------------------------------------------------ JSON */

static cJSON *num_or_null(double v) { return isfinite(v) ? cJSON_CreateNumber(v) : cJSON_CreateNull(); }

static double round2(double v) { return isfinite(v) ? round(v * 100) / 100 : v; }

static cJSON *site_json(const lgr_site_t *s, int rank, int with_rank) {
  cJSON *j = cJSON_CreateObject();
  if (with_rank) cJSON_AddNumberToObject(j, "rank", rank);
  cJSON_AddNumberToObject(j, "pid", s->pid);
  cJSON_AddStringToObject(j, "space", s->space);
  cJSON_AddNumberToObject(j, "live_bytes", (double)s->live_bytes);
  cJSON_AddNumberToObject(j, "live_blocks", (double)s->live_blocks);
  cJSON_AddNumberToObject(j, "peak_live_bytes", (double)s->peak_live_bytes);
  cJSON_AddNumberToObject(j, "allocated_bytes", (double)s->alloc_bytes);
  cJSON_AddNumberToObject(j, "allocated_blocks", (double)s->alloc_blocks);
  cJSON_AddItemToObject(j, "growth_bytes_per_s", num_or_null(round2(s->r.growth_bytes_per_s)));
  cJSON_AddItemToObject(j, "growth_bytes_per_step", num_or_null(round2(s->r.growth_bytes_per_step)));
  cJSON_AddItemToObject(j, "time_to_oom_s", num_or_null(round2(s->time_to_oom_s)));
  cJSON_AddNumberToObject(j, "confidence", round2(s->r.confidence));
  cJSON_AddStringToObject(j, "pattern", lg_pattern_name(s->r.pattern));
  cJSON_AddItemToObject(j, "oldest_block_age_s", num_or_null(round2(s->oldest_age_s)));
  cJSON_AddNumberToObject(j, "stack", s->stack);
  cJSON *hl = s->holders_json ? cJSON_Parse(s->holders_json) : NULL;
  cJSON_AddItemToObject(j, "holders", hl ? hl : cJSON_CreateArray());
  cJSON *fr = cJSON_AddArrayToObject(j, "frames");
  for (int k = 0; k < s->nframes; k++) {
    cJSON *x = cJSON_CreateObject();
    cJSON_AddStringToObject(x, "function", s->frames[k].function);
    if (s->frames[k].file[0]) cJSON_AddStringToObject(x, "file", s->frames[k].file);
    else cJSON_AddNullToObject(x, "file");
    if (s->frames[k].line) cJSON_AddNumberToObject(x, "line", s->frames[k].line);
    else cJSON_AddNullToObject(x, "line");
    cJSON_AddStringToObject(x, "module", s->frames[k].module);
    if (s->frames[k].inlined) cJSON_AddTrueToObject(x, "inlined");
    cJSON_AddItemToArray(fr, x);
  }
  return j;
}

int lgr_print_json(FILE *f, const lgr_report_t *r, const lgr_options_t *o) {
  cJSON *root = cJSON_CreateObject();
  cJSON_AddNumberToObject(root, "schema", 1);
  cJSON_AddStringToObject(root, "verdict", r->nsuspects ? "leak" : "no-leak");
  if (r->limit_source) cJSON_AddStringToObject(root, "limit_source", r->limit_source);
  cJSON *runs = cJSON_AddArrayToObject(root, "runs");
  for (int i = 0; i < r->nruns; i++) {
    const lgr_run_t *u = &r->runs[i];
    cJSON *j = cJSON_CreateObject();
    cJSON_AddNumberToObject(j, "pid", u->pid);
    cJSON_AddNumberToObject(j, "ppid", u->ppid);
    cJSON_AddStringToObject(j, "command", u->command);
    cJSON_AddStringToObject(j, "started_by", u->kind);
    cJSON_AddStringToObject(j, "end", u->end_reason);
    if (u->has_exit) cJSON_AddNumberToObject(j, "exit_status", u->exit_status);
    else cJSON_AddNullToObject(j, "exit_status");
    if (u->has_signal) cJSON_AddNumberToObject(j, "signal", u->signal);
    else cJSON_AddNullToObject(j, "signal");
    cJSON_AddNumberToObject(j, "duration_s", round2(u->duration_s));
    cJSON_AddNumberToObject(j, "peak_live_bytes", (double)u->peak_live_bytes);
    cJSON_AddNumberToObject(j, "final_live_bytes", (double)u->final_live_bytes);
    cJSON_AddNumberToObject(j, "dropped_records", (double)u->dropped);
    cJSON_AddNumberToObject(j, "steps", (double)u->steps);
    cJSON_AddNumberToObject(j, "snapshots", (double)u->snapshots);
    cJSON_AddNumberToObject(j, "sample_bytes", (double)u->sample_bytes);
    cJSON_AddNumberToObject(j, "limit_bytes", (double)u->limit_bytes);
    if (u->pattern >= 0) cJSON_AddStringToObject(j, "memory_pattern", lg_pattern_name((lg_pattern_t)u->pattern));
    else cJSON_AddNullToObject(j, "memory_pattern");
    cJSON_AddItemToArray(runs, j);
  }
  cJSON *sus = cJSON_AddArrayToObject(root, "suspects");
  int top = o->top > 0 ? o->top : 10;
  for (int i = 0; i < r->nsuspects && i < top; i++) cJSON_AddItemToArray(sus, site_json(&r->suspects[i], i + 1, 1));
  cJSON *oth = cJSON_AddArrayToObject(root, "largest_non_leaking");
  for (int i = 0; i < r->nothers; i++) cJSON_AddItemToArray(oth, site_json(&r->others[i], 0, 0));
  char *s = cJSON_Print(root);
  cJSON_Delete(root);
  if (!s) return -ENOMEM;
  fputs(s, f);
  fputc('\n', f);
  free(s);
  return 0;
}

/* ------------------------------------------------------------------ folded */

int lgr_print_folded(FILE *f, lgst_t *store) {
  sqlite3 *db = lgst_db(store);
  sqlite3_stmt *st;
  /* last sample per (proc, stack) with live bytes > 0 */
  const char *sql =
      "SELECT s.proc, s.stack, s.live_bytes FROM samples s"
      " JOIN (SELECT proc, stack, max(seq) m FROM samples GROUP BY proc, stack) l"
      " ON s.proc=l.proc AND s.stack=l.stack AND s.seq=l.m WHERE s.live_bytes > 0"
      " ORDER BY s.proc, s.stack";
  if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) != SQLITE_OK) return -EIO;
  sqlite3_stmt *fr;
  if (sqlite3_prepare_v2(db, "SELECT function FROM frames WHERE proc=? AND stack=? ORDER BY idx DESC", -1, &fr,
                         NULL) != SQLITE_OK) {
    sqlite3_finalize(st);
    return -EIO;
  }
  while (sqlite3_step(st) == SQLITE_ROW) {
    sqlite3_reset(fr);
    sqlite3_bind_int(fr, 1, sqlite3_column_int(st, 0));
    sqlite3_bind_int(fr, 2, sqlite3_column_int(st, 1));
    int first = 1;
    while (sqlite3_step(fr) == SQLITE_ROW) {
      const char *fn = (const char *)sqlite3_column_text(fr, 0);
      fprintf(f, "%s", first ? "" : ";");
      for (const char *p = fn ? fn : "??"; *p; p++) fputc(*p == ';' || *p == ' ' ? '_' : *p, f);
      first = 0;
    }
    if (first) fprintf(f, "[unknown]");
    fprintf(f, " %lld\n", (long long)sqlite3_column_int64(st, 2));
  }
  sqlite3_finalize(fr);
  sqlite3_finalize(st);
  return 0;
}
