/* SPDX-License-Identifier: MIT */
/*
 * leaks.c - the grouping of suspects into leaks: one cause each, by holder (what
 * keeps a site's memory alive: holders.c), function or lockstep, analysed on its
 * summed series and judged significant or minor as a whole; why a leak of Python code
 * has no holder. Separate from build.c: it works on the sites once they are analysed.
 */
#include <errno.h>
#include <math.h>
#include <sqlite3.h>
#include <stdlib.h>
#include <string.h>

#include "findings/report.h"
#include "findings/impl.h"

/* ------------------------------------------------------------------ leaks */

/* The root of a suspect's top holder ("module.name (type)"), or NULL; *holder_out: a
 * copy of that holder. */
static char *holder_root(const lgr_site_t *s, lgr_holder_t **holder_out) {
  if (!s->nholders) return NULL;
  const lgr_holder_t *h0 = &s->holders[0];
  const char *c0 = h0->nchain > 0 ? h0->chain[0] : NULL;
  if (!c0 || !c0[0] || c0[0] == '<') return NULL;
  if (holder_out) *holder_out = lgr_holder_dup(h0);
  return lgr_strdup(c0);
}

/* The innermost non-allocator function of a suspect: "function\x1ffile". */
static char *function_key(const lgr_site_t *s) {
  if (s->nframes == 0) return NULL;
  const lgr_frame_t *f = &s->frames[s->site_frame];
  size_t n = strlen(f->function) + strlen(f->file) + strlen(f->module) + 4;
  char *k = malloc(n);
  if (k) snprintf(k, n, "%s\x1f%s\x1f%s", f->function, f->file, f->file[0] ? "" : f->module);
  else lgr_fail(-ENOMEM);
  return k;
}

/* The blocks s gained from time t to the end of its analysed part: its live bytes then
 * less those at the first snapshot at or after t, in blocks of its mean size at the
 * end. Its own blocks_gained when its series cannot tell. */
static double blocks_since(const lgr_report_t *r, const lgr_site_t *s, double t) {
  const lgr_run_t *u = NULL;
  for (int k = 0; k < r->nruns; k++)
    if (r->runs[k].proc == s->proc) u = &r->runs[k];
  if (!u || !s->series || !u->snap_t || s->live_blocks <= 0 || s->live_bytes <= 0) return (double)s->blocks_gained;
  double at = NAN, end = NAN;
  for (int64_t i = 0; i < u->nsnap; i++) {
    if (isnan(u->snap_t[i])) continue;
    if (isnan(at) && u->snap_t[i] >= t) at = s->series[i];
    if (u->snap_t[i] <= s->r.until_s) end = s->series[i];
  }
  if (isnan(at) || isnan(end)) return (double)s->blocks_gained;
  return fmax(0, end - at) / ((double)s->live_bytes / (double)s->live_blocks);
}

/* One event that leaks several blocks (a list node and its payload, a key and its
 * value) makes suspects that grow in lockstep: the same number of blocks gained, from
 * the same moment. Without holders to tie them, leaks of one process whose main
 * suspects gained the same number of blocks (within 5 %, at least 16) from the earlier
 * of their starts on, the earlier having gained little (under a quarter) before the
 * later started, are one cause. Their starts need not agree: a suspect the detector
 * judged on its whole series starts at its first point even when its growth began
 * late, and a small site's first stored row is dated back to its oldest block's birth
 * (flake hunt beside two hogs: late_leak's thumbnails, judged from 0.07 s, and their
 * list nodes, from 9.8 s, came out as two leaks). */
static int lockstep_from(const lgr_report_t *r, const lgr_site_t *early, double t0, const lgr_site_t *late, double t1) {
  double ge = blocks_since(r, early, t0), gl = blocks_since(r, late, t0);
  if (ge < 16 || gl < 16 || fabs(ge - gl) > 0.05 * fmax(ge, gl)) return 0;
  return ge - blocks_since(r, early, t1) <= 0.25 * ge;
}

/* The time of the last snapshot before s held anything (NaN: none, or unknown). */
static double onset(const lgr_report_t *r, const lgr_site_t *s) {
  for (int k = 0; k < r->nruns; k++) {
    const lgr_run_t *u = &r->runs[k];
    if (u->proc != s->proc || !s->series || !u->snap_t) continue;
    double before = NAN;
    for (int64_t i = 0; i < u->nsnap; i++) {
      if (isnan(u->snap_t[i])) continue;
      if (s->series[i] > 0) return before;
      before = u->snap_t[i];
    }
  }
  return NAN;
}

/* Tried from the earlier start, and from the earlier of the two sites' first bytes:
 * two sites judged on the same recent part (late_leak's thumbnails and list nodes,
 * growing since 9.8 s) differ by the first row of the smaller one, dated back to its
 * era (96 nodes at 6.4 s). */
static int in_lockstep(const lgr_report_t *r, const lgr_site_t *a, const lgr_site_t *b) {
  const lgr_site_t *early = a->r.since_s <= b->r.since_s ? a : b, *late = early == a ? b : a;
  double t0 = early->r.since_s, t1 = late->r.since_s;
  if (isnan(t0) || isnan(t1)) return 0;
  if (lockstep_from(r, early, t0, late, t1)) return 1;
  double oa = onset(r, a), ob = onset(r, b), o = isnan(oa) ? ob : isnan(ob) ? oa : fmin(oa, ob);
  return o < t0 && lockstep_from(r, early, o, late, t1);
}

static void merge_lockstep(lgr_report_t *r) {
  for (int i = 0; i < r->nleaks; i++) {
    lgr_leak_t *A = &r->leaks[i];
    const lgr_site_t *a = &r->suspects[A->suspects[0]];
    if (a->blocks_gained < 16 || a->spread_sites) continue;
    for (int j = i + 1; j < r->nleaks; j++) {
      lgr_leak_t *B = &r->leaks[j];
      const lgr_site_t *b = &r->suspects[B->suspects[0]];
      if (B->proc != A->proc || b->spread_sites || (A->holder && B->holder)) continue;
      if (!in_lockstep(r, a, b)) continue;
      for (int k = 0; k < B->nsuspects; k++) {
        A->suspects[A->nsuspects++] = B->suspects[k];
        r->suspects[B->suspects[k]].leak = i;
      }
      A->live_bytes += B->live_bytes;
      A->growth_bytes_per_s += B->growth_bytes_per_s;
      if (!isnan(B->growth_bytes_per_step))
        A->growth_bytes_per_step =
            (isnan(A->growth_bytes_per_step) ? 0 : A->growth_bytes_per_step) + B->growth_bytes_per_step;
      if (!isnan(B->detected_after_s) && (isnan(A->detected_after_s) || B->detected_after_s < A->detected_after_s))
        A->detected_after_s = B->detected_after_s;
      if (!A->holder) {
        A->holder = B->holder;
        B->holder = NULL;
      }
      free(A->by);
      A->by = lgr_strdup("lockstep");
      free(B->suspects);
      free(B->by);
      lgr_holder_free(B->holder);
      free(B->holder);
      memmove(B, B + 1, (size_t)(r->nleaks - j - 1) * sizeof *B);
      r->nleaks--;
      for (int x = 0; x < r->nsuspects; x++)
        if (r->suspects[x].leak > j) r->suspects[x].leak--;
      j--;
    }
  }
}

void lgr_group_leaks(lgr_report_t *r) {
  int n = r->nsuspects;
  if (!n) return;
  r->leaks = calloc((size_t)n, sizeof *r->leaks);
  char **key = calloc((size_t)n, sizeof *key);
  lgr_holder_t **holder = calloc((size_t)n, sizeof *holder);
  const char **by = calloc((size_t)n, sizeof *by);
  if (!r->leaks || !key || !holder || !by) {
    lgr_fail(-ENOMEM);
    goto out;
  }
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
    if (!key[i]) lgr_fail(-ENOMEM);
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
  if (lgr_failed()) goto out;
  /* suspects are ranked (lgr_rank_sites): the first of a key is its leak's main suspect */
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
      L->by = lgr_strdup(by[i]);
      if (!L->suspects) {
        lgr_fail(-ENOMEM);
        goto out;
      }
      L->holder = holder[i];
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
    /* The leak's holder keeps what it keeps of every suspect it holds: a suspect joined
     * by the same root adds its own top holder's measured objects and bytes (of the
     * same kind; an inferred one, with no bytes measured, adds nothing) */
    if (L->nsuspects && L->holder && !strcmp(by[i], "holder") && s->nholders && s->holders[0].bytes > 0 &&
        s->holders[0].kind && L->holder->kind && !strcmp(s->holders[0].kind, L->holder->kind)) {
      L->holder->objects += s->holders[0].objects;
      L->holder->bytes += s->holders[0].bytes;
    }
    if (L->suspects) L->suspects[L->nsuspects++] = i;
    s->leak = l;
    L->live_bytes += s->held_bytes;
    L->growth_bytes_per_s += s->r.growth_bytes_per_s;
    if (!isnan(s->r.growth_bytes_per_step))
      L->growth_bytes_per_step =
          (isnan(L->growth_bytes_per_step) ? 0 : L->growth_bytes_per_step) + s->r.growth_bytes_per_step;
    if (!isnan(s->detected_after_s) && (isnan(L->detected_after_s) || s->detected_after_s < L->detected_after_s))
      L->detected_after_s = s->detected_after_s;
  }
  if (lgr_failed()) goto out;
  merge_lockstep(r);
  for (int j = 0; j < r->nleaks; j++) {
    lgr_leak_t *L = &r->leaks[j];
    for (int k = 0; k < r->nruns; k++)
      if (r->runs[k].proc == L->proc && L->growth_bytes_per_s > 0) {
        const lgr_run_t *u = &r->runs[k];
        double headroom = u->limit_bytes > u->usage_bytes ? (double)(u->limit_bytes - u->usage_bytes) : 0;
        headroom = lgr_gpu_headroom(r, &r->suspects[L->suspects[0]], headroom);
        L->time_to_oom_s = headroom / L->growth_bytes_per_s;
      }
  }
out:
  for (int i = 0; i < n; i++) {
    if (key) free(key[i]);
    if (holder) lgr_holder_free(holder[i]);
    if (holder) free(holder[i]);
  }
  free(key);
  free(holder);
  free(by);
}

/* Why a leak of Python code has no holder, from the process's explains (docs/schema.md):
 * what its newest explanation says — a request never answered (one whose answer never
 * came), a walk that failed, one that stopped at its budget, one that found no Python
 * object keeping the memory — or that none was made. NULL for a database without the
 * table (older than it). */
static char *explain_gap(sqlite3 *db, const lgr_leak_t *L, const lgr_run_t *u) {
  sqlite3_stmt *st;
  /* the newest row, leaving out a request given up whose answer came after all */
  if (lgr_prepare(db,
                  "SELECT e.outcome, e.note, e.step, e.objects, e.elapsed_s, e.truncated,"
                  " (SELECT count(*) FROM explains a WHERE a.proc = ?1 AND a.outcome = 'answered')"
                  " FROM explains e WHERE e.proc = ?1 AND NOT (e.outcome = 'unanswered' AND EXISTS"
                  " (SELECT 1 FROM explains a WHERE a.proc = e.proc AND a.request = e.request"
                  "  AND a.outcome <> 'unanswered')) ORDER BY e.t_ns DESC, e.rowid DESC LIMIT 1",
                  -1, &st, NULL) != SQLITE_OK)
    return NULL; /* no explains table: a database older than it */
  sqlite3_bind_int(st, 1, L->proc);
  char buf[512] = "";
  if (lgr_row(st)) {
    const char *outcome = (const char *)sqlite3_column_text(st, 0);
    const char *note = (const char *)sqlite3_column_text(st, 1);
    long long step = sqlite3_column_int64(st, 2), objects = sqlite3_column_int64(st, 3);
    double sec = sqlite3_column_double(st, 4);
    int truncated = sqlite3_column_int(st, 5);
    long long answered = sqlite3_column_int64(st, 6);
    if (outcome && !strcmp(outcome, "unanswered"))
      snprintf(buf, sizeof buf, "the collector asked this process who holds it and got no answer (%s)",
               note ? note : "");
    else if (outcome && !strcmp(outcome, "failed"))
      snprintf(buf, sizeof buf, "its explanation failed: %s", note ? note : "?");
    else if (truncated)
      snprintf(buf, sizeof buf,
               "its explanation (step %lld) stopped at its budget after %lld objects in %.1f s; "
               "LEAKGUARD_EXPLAIN_BUDGET_S=4 gives it twice the CPU time",
               step, objects, sec);
    else
      snprintf(buf, sizeof buf,
               "no Python object found keeping this memory (%lld explanation%s, the last walked %lld objects): "
               "native code keeps it, or it was freed before it was explained",
               answered, answered == 1 ? "" : "s", objects);
  } else if (!lgr_failed()) {
    if (u && u->end_reason && strcmp(u->end_reason, "exit") && strcmp(u->end_reason, "running"))
      snprintf(buf, sizeof buf, "never explained: the process ended (%s) before its exit hook could run",
               u->has_signal ? "killed by a signal" : u->end_reason);
    else
      snprintf(buf, sizeof buf,
               "never explained: no request was answered and the exit hook did not run (os._exit, or the "
               "leakguard module not loaded)");
  }
  sqlite3_finalize(st);
  return buf[0] ? lgr_strdup(buf) : NULL;
}

void lgr_explain_gaps(sqlite3 *db, lgr_report_t *r) {
  for (int j = 0; j < r->nleaks; j++) {
    lgr_leak_t *L = &r->leaks[j];
    if (L->holder || L->no_holder || !L->nsuspects) continue;
    const lgr_site_t *m = &r->suspects[L->suspects[0]];
    int python = 0;
    for (int k = 0; k < m->nframes && !python; k++) python = lgr_is_python_module(m->frames[k].module);
    if (!python) continue;
    const lgr_run_t *u = NULL;
    for (int k = 0; k < r->nruns; k++)
      if (r->runs[k].proc == L->proc) u = &r->runs[k];
    L->no_holder = explain_gap(db, L, u);
  }
}

void lgr_free_leaks(lgr_report_t *r) {
  for (int i = 0; i < r->nleaks; i++) {
    free(r->leaks[i].suspects);
    free(r->leaks[i].by);
    lgr_holder_free(r->leaks[i].holder);
    free(r->leaks[i].holder);
    free(r->leaks[i].no_holder);
    free(r->leaks[i].fix);
  }
  free(r->leaks);
  r->leaks = NULL;
  r->nleaks = 0;
  for (int i = 0; i < r->nruns; i++) r->runs[i].leaking = 0;
}

/* A leak of several suspects is described by their summed series: its shape, rate
 * and confidence are the cause's (one noisy site of a spread-out leak says less). */
void lgr_analyse_leaks(lgr_report_t *r) {
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
      if (!isnan(u->snap_t[i]) && !(u->snap_t[i] > u->exit_begin_s) &&
          lgd_series_add(&ser, u->snap_t[i], sum[i], u->snap_step[i]))
        lgr_fail(-ENOMEM);
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
void lgr_split_minor(lgr_report_t *r) {
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
    if (!lgr_is_minor(growth, L->growth_bytes_per_s, size, blocks, L->time_to_oom_s)) continue;
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
      if (lgr_push_site(&r->minor, &r->nminor, &mcap, &r->suspects[i])) lgr_site_free(&r->suspects[i]);
    }
    r->nsuspects = w;
    lgr_free_leaks(r);
    for (int i = 0; i < r->nsuspects; i++) r->suspects[i].leak = -1;
    lgr_group_leaks(r);
    lgr_analyse_leaks(r);
    lgr_rank_sites(r->minor, r->nminor);
  }
  free(minor);
}
