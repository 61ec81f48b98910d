/* SPDX-License-Identifier: MIT */
/*
 * build.c - builds the report: reads runs, stacks and snapshot series from the
 * database, merges the stacks of each allocation site, runs the detector on every
 * site's series, separates significant growth from minor growth, finds growth spread
 * over many sites, and groups the suspects into leaks (see report.h for the units).
 * Detection is recomputed here, so a database left by a killed collector, or one
 * recorded by an older version, is reported with today's detector. This file holds the
 * order of the steps, the runs and frames read from the database and the rules that
 * name allocator machinery and minor growth; the per-site analysis is in
 * sites.c, the grouping into leaks and the holders in leaks.c, GPU
 * memory in gpu.c, the largest sites at each process's peak in peak.c, every stack
 * for the formats that draw them all in recording.c;
 * drawing is the renderers' (output/render.h).
 */
#include "findings/report.h"

#include <errno.h>
#include <math.h>
#include <sqlite3.h>
#include <stdlib.h>
#include <string.h>

#include "findings/impl.h"

/* ------------------------------------------------------------------ runs */

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
        else if (!strcmp(k, "attached_at")) r->runs[i].attached = 1; /* merged from an attach (merge.c) */
        else if (!strcmp(k, "source") && !r->runs[i].source) r->runs[i].source = lgr_dupstr(v);
        else if (!strcmp(k, "lazy"))
          r->runs[i].lazy = !strcmp((const char *)v, "began") ? LGR_LAZY_BEGAN : LGR_LAZY_WAITING;
        else if (!strcmp(k, "lazy_began_ns"))
          r->runs[i].lazy_began_s = ((double)strtoll((const char *)v, NULL, 10) - (double)r->runs[i].start_ns) / 1e9;
        else if (!strcmp(k, "lazy_before_bytes")) r->runs[i].lazy_before_bytes = strtoull((const char *)v, NULL, 10);
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

static int cmp_live(const void *a, const void *b) {
  const lgr_site_t *x = a, *y = b;
  return (x->live_bytes < y->live_bytes) - (x->live_bytes > y->live_bytes);
}

/* ------------------------------------------------------------------ build */

static int build(sqlite3 *db, const lgr_options_t *o, lgr_report_t *r, char *why, size_t whylen);

/* The program's own code for this build: the report's --own paths and those the
 * recording was made with (meta `own`, one a line). */
static int set_own(sqlite3 *db, const lgr_options_t *o) {
  lgr_own_clear();
  for (int i = 0; i < o->nown; i++)
    if (lgr_own_add(o->own[i]) != 0) return -ENOMEM;
  sqlite3_stmt *st;
  int rc = 0;
  if (lgr_prepare(db, "SELECT value FROM meta WHERE key='own'", -1, &st, NULL) == SQLITE_OK) {
    const char *v = lgr_row(st) ? (const char *)sqlite3_column_text(st, 0) : NULL;
    for (const char *p = v; p && *p && rc == 0;) {
      size_t n = strcspn(p, "\n");
      char *one = strndup(p, n);
      if (!one || lgr_own_add(one) != 0) rc = -ENOMEM;
      free(one);
      p += n + (p[n] == '\n');
    }
    sqlite3_finalize(st);
  }
  return rc;
}

int lgr_build(lgr_db_t *store, const lgr_options_t *o, lgr_report_t *r, char *why, size_t whylen) {
  sqlite3 *db = lgr_sqlite(store);
  (void)lgr_take_failure();
  int rc = set_own(db, o);
  if (rc == 0) rc = build(db, o, r, why, whylen);
  else snprintf(why, whylen, "out of memory while building the report");
  if (rc == 0) r->live = lgr_is_live(store);
  lgr_cache_clear();
  lgr_frames_clear();
  lgr_own_clear();
  const char *build_why = lgr_failure_why();
  if (rc == 0 && lgr_failed()) {
    rc = lgr_failed();
    if (rc == -ENOMEM) snprintf(why, whylen, "out of memory while building the report");
    else if (build_why[0]) snprintf(why, whylen, "cannot read the database: %s", build_why);
    else if (sqlite3_errcode(db) != SQLITE_OK)
      snprintf(why, whylen, "cannot read the database: %s", sqlite3_errmsg(db));
    else snprintf(why, whylen, "cannot read the database: damaged (%s)", strerror(-rc));
    lgr_free(r);
  }
  (void)lgr_take_failure();
  return rc;
}

/* The pool profile's order: by key, the site that allocated most first. */
static int cmp_genrow(const void *a, const void *b) {
  const lgr_genrow_t *x = a, *y = b;
  int c = strcmp(x->key, y->key);
  if (c) return c;
  return (x->alloc_blocks < y->alloc_blocks) - (x->alloc_blocks > y->alloc_blocks); /* most blocks first */
}

/* The shape named beside each process's verdict (issue #34 item 6). Over the whole run,
 * a leaking process whose start-up made most of its memory (a 100-MB import, then a
 * list growing by 120 KiB a step) read as a plateau beside LEAK. A leaking process is
 * described over the longest tail of its curve that reads as a leak: the whole curve,
 * or from an eighth, a quarter, three eighths or half of its points on, where the
 * start-up is behind; pattern_from_s says where that tail begins. None of them a leak:
 * the whole curve's shape (the leak may be small beside the rest of the process). A
 * process without a leak is not described by a leak's shape. */
/* Short-lived helpers (issue #35): a wrapper's processes (a pyenv shim's bash, readlink
 * and env; conda's activation; a `bash -c` launcher) are folded into one line, and the
 * report is named after the process that did the work. A helper lived under
 * LGR_HELPER_S (or never began to record: its lazy start), has no growing site, no GPU memory, no rank, no note and no gap, was not
 * killed by a signal and is not the main run (the largest peak; the longest-lived on a
 * tie). Folded only when there are at least LGR_HELPER_MIN of them. */
#define LGR_HELPER_MIN 3

static int sites_in(const lgr_site_t *v, int n, int proc) {
  for (int i = 0; i < n; i++)
    if (v[i].proc == proc) return 1;
  return 0;
}

static int is_helper(const lgr_report_t *r, const lgr_run_t *u) {
  /* never began to record (lazy start): under 32 KiB allocated after its first 0.1 s
   * (the defaults), however long it waited (a launcher's bash waiting for the work) */
  int idle = u->lazy == LGR_LAZY_WAITING;
  if (!(u->duration_s < LGR_HELPER_S || idle) || u->leaking || u->has_signal || u->rank >= 0 || u->notes || u->dropped)
    return 0;
  if ((!idle && !strcmp(u->end_reason, "running")) || !isnan(u->gap_from_s)) return 0;
  if (sites_in(r->suspects, r->nsuspects, u->proc) || sites_in(r->minor, r->nminor, u->proc)) return 0;
  for (int i = 0; i < r->ngpus; i++)
    if (r->gpus[i].proc == u->proc) return 0;
  return 1;
}

static void fold_helpers(lgr_report_t *r) {
  r->main_run = 0;
  for (int i = 1; i < r->nruns; i++) {
    const lgr_run_t *u = &r->runs[i], *m = &r->runs[r->main_run];
    if (u->peak_live_bytes > m->peak_live_bytes ||
        (u->peak_live_bytes == m->peak_live_bytes && u->duration_s > m->duration_s))
      r->main_run = i;
  }
  int n = 0;
  for (int i = 0; i < r->nruns; i++) n += r->runs[i].helper = i != r->main_run && is_helper(r, &r->runs[i]);
  if (n < LGR_HELPER_MIN) {
    for (int i = 0; i < r->nruns; i++) r->runs[i].helper = 0;
    n = 0;
  }
  r->nhelpers = n;
}

static void label_runs(lgr_report_t *r) {
  for (int i = 0; i < r->nruns; i++) {
    lgr_run_t *u = &r->runs[i];
    for (size_t k = 1; u->leaking && u->pattern >= 0 && !lg_pattern_is_leak((lg_pattern_t)u->pattern) && k <= 4; k++) {
      size_t at = u->curve_n * k / 8, n = u->curve_n - at;
      int nonleak = -1,
          p = n >= 8 ? lgd_process_pattern(u->curve_t + at, u->curve_live + at, u->curve_rss + at, n, &nonleak) : -1;
      if (p >= 0 && lg_pattern_is_leak((lg_pattern_t)p)) {
        u->pattern = p;
        u->pattern_from_s = u->curve_t[at];
      }
    }
    if (!u->leaking && u->pattern >= 0 && lg_pattern_is_leak((lg_pattern_t)u->pattern)) u->pattern = u->pattern_nonleak;
  }
}

static int build(sqlite3 *db, const lgr_options_t *o, lgr_report_t *r, char *why, size_t whylen) {
  memset(r, 0, sizeof *r);
  if (load_runs(db, r) != 0) {
    snprintf(why, whylen, "cannot read runs: %s", lgr_failure_why()[0] ? lgr_failure_why() : sqlite3_errmsg(db));
    lgr_free(r);
    return -EIO;
  }
  lgr_load_gpus(db, r);
  if (lgr_failed()) return 0; /* lgr_build frees and says why */
  int ocap = 0;
  lgr_site_t *others = NULL;
  int nothers = 0;
  for (int i = 0; i < r->nruns; i++) {
    /* an image that never began to record (its lazy start) has no sample to read: a
     * wrapper's 80 helpers were most of a short run's report */
    if (r->runs[i].lazy == LGR_LAZY_WAITING) continue;
    if (lgr_analyse_proc(db, &r->runs[i], o, r, &others, &nothers, &ocap) != 0) {
      snprintf(why, whylen, "cannot read snapshots: %s", lgr_failure_why()[0] ? lgr_failure_why() : sqlite3_errmsg(db));
      for (int k = 0; k < nothers; k++) lgr_site_free(&others[k]);
      free(others);
      lgr_free(r);
      return -EIO;
    }
    if (lgr_failed()) break;
  }
  if (lgr_failed()) { /* stop before the half-read sites are used */
    r->others = others;
    r->nothers = nothers;
    return 0;
  }
  lgr_rank_sites(r->suspects, r->nsuspects);
  lgr_rank_sites(r->minor, r->nminor);
  if (r->nslife > 1) qsort(r->slife, r->nslife, sizeof *r->slife, cmp_slife);
  lgr_peak_sites(db, o, r, others, nothers); /* before the others are cut */
  if (nothers) qsort(others, (size_t)nothers, sizeof *others, cmp_live);
  /* the five largest, and every site found bounded (it looked like a leak); not one that
   * grew then released to nothing (among the others for the peak's list alone) */
  int keep = 0;
  for (int i = 0; i < nothers; i++) {
    if ((keep < 5 && !(others[i].released && others[i].live_bytes <= 0)) || others[i].bounded)
      others[keep++] = others[i];
    else lgr_site_free(&others[i]);
  }
  r->others = others;
  r->nothers = keep;
  for (int i = 0; i < r->nsuspects; i++) {
    lgr_site_t *s = &r->suspects[i];
    if (s->nframes) s->source = lgr_source_line(s->frames[s->site_frame].file, s->frames[s->site_frame].line);
  }
  if (lgr_failed()) return 0;
  lgr_group_leaks(r);
  if (lgr_failed()) return 0;
  lgr_analyse_leaks(r);
  if (lgr_failed()) return 0;
  lgr_split_minor(r);
  lgr_explain_gaps(db, r);
  lgr_fix_hints(r);
  label_runs(r);
  fold_helpers(r);
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
  /* `leakguard attach` writes meta attached_at; the process it attached to is its first */
  if (lgr_prepare(db, "SELECT 1 FROM meta WHERE key='attached_at'", -1, &st, NULL) == SQLITE_OK) {
    int attached = lgr_row(st);
    sqlite3_finalize(st);
    for (int i = 0; attached && i < r->nruns; i++)
      if (!strcmp(r->runs[i].kind, "start")) r->runs[i].attached = 1;
  }
  for (int i = 0; i < r->nruns; i++)
    if (r->runs[i].attached) r->attached = 1;
  if (r->ngens > 1) qsort(r->gens, (size_t)r->ngens, sizeof *r->gens, cmp_genrow);
  if (o->recording && !lgr_failed()) {
    int rc = lgr_load_recording(db, r);
    if (rc == -EBADMSG) lgr_fail_why(-EBADMSG, "a stack holds impossible counters: damaged database");
    else if (rc) lgr_fail(rc);
  }
  return 0;
}

void lgr_free(lgr_report_t *r) {
  for (int i = 0; i < r->nruns; i++) {
    free(r->runs[i].command);
    free(r->runs[i].end_reason);
    free(r->runs[i].notes);
    free(r->runs[i].source);
    free(r->runs[i].kind);
    free(r->runs[i].host);
    free(r->runs[i].snap_t);
    free(r->runs[i].snap_step);
    free(r->runs[i].curve_t);
    free(r->runs[i].curve_live);
    free(r->runs[i].curve_rss);
  }
  lgr_free_leaks(r);
  for (int i = 0; i < r->nsuspects; i++) lgr_site_free(&r->suspects[i]);
  for (int i = 0; i < r->nminor; i++) lgr_site_free(&r->minor[i]);
  for (int i = 0; i < r->nothers; i++) lgr_site_free(&r->others[i]);
  for (int i = 0; i < r->nat_peak; i++) lgr_site_free(&r->at_peak[i]);
  free(r->runs);
  free(r->suspects);
  free(r->minor);
  free(r->others);
  free(r->at_peak);
  free(r->limit_source);
  free(r->gpus);
  for (int i = 0; i < r->ncuda_notes; i++) free(r->cuda_notes[i]);
  free(r->cuda_notes);
  free(r->nvml_status);
  for (int i = 0; i < r->num; i++) free(r->um[i].site);
  free(r->um);
  for (int i = 0; i < r->ngens; i++) free(r->gens[i].key);
  free(r->gens);
  free(r->slife);
  lgr_free_recording(&r->rec);
  memset(r, 0, sizeof *r);
}
