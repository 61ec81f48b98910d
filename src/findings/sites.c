/* SPDX-License-Identifier: MIT */
/*
 * sites.c - the per-site analysis of one process: its snapshots, its stacks
 * merged into allocation sites, each site's series run through the detector, and the
 * search for growth spread over many sites (spread.c). Separate from build.c: it is the
 * bulk of the report's work, and build.c calls only lgr_analyse_proc of it. One site's
 * series is judged in series.c, which spread.c shares.
 */
#include <errno.h>
#include <math.h>
#include <sqlite3.h>
#include <stdlib.h>
#include <string.h>

#include "analysis/stats.h"
#include "core/strmap.h"
#include "leakguard.h" /* LG_PATTERN_PLATEAU */
#include "findings/report.h"
#include "findings/impl.h"

/* ------------------------------------------------------------------ sites */

static int cmp_delta(const void *a, const void *b) {
  const delta_t *x = a, *y = b;
  return (x->seq > y->seq) - (x->seq < y->seq);
}

static int load_snapshots(pctx_t *c) {
  sqlite3_stmt *st;
  if (lgr_prepare(c->db,
                  "SELECT seq, t_ns - (SELECT start_ns FROM processes WHERE proc=?1), step,"
                  " live_bytes, rss_bytes"
                  " FROM snapshots WHERE proc=?1 ORDER BY seq",
                  -1, &st, NULL) != SQLITE_OK)
    return -EIO;
  sqlite3_bind_int(st, 1, c->run->proc);
  int64_t cap = 0;
  double *pt = NULL, *plive = NULL, *prss = NULL;
  size_t pn = 0, pcap = 0;
  while (lgr_row(st)) {
    int64_t seq = sqlite3_column_int64(st, 0);
    if (seq < 0 || seq > 100000000) continue;
    if (seq >= cap) {
      int64_t nc = cap ? cap * 2 : 256;
      while (nc <= seq) nc *= 2;
      double *nt = realloc(c->t, (size_t)nc * sizeof *nt);
      if (!nt) {
        lgr_fail(-ENOMEM);
        break;
      }
      c->t = nt;
      double *ns = realloc(c->step, (size_t)nc * sizeof *ns);
      if (!ns) {
        lgr_fail(-ENOMEM);
        break;
      }
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
      if (!a || !b || !c2) {
        pcap = pn;
        lgr_fail(-ENOMEM); /* the process's curve would be cut short */
      }
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
  c->last_an = -1;
  for (int64_t i = 0; i < c->nsnap; i++)
    if (!isnan(c->t[i]) && !(c->t[i] > c->run->exit_begin_s)) c->last_an = i;
  c->run->pattern = lgd_process_pattern(pt, plive, prss, pn, &c->run->pattern_nonleak);
  if (pn) {
    double *tmp = malloc(pn * sizeof *tmp);
    if (tmp) {
      memcpy(tmp, plive, pn * sizeof *tmp);
      c->run->median_live_bytes = lga_median(tmp, pn);
      free(tmp);
    }
  }
  /* kept for the label beside the verdict (lgr_label_runs: over the leaks' window) */
  c->run->curve_t = pt;
  c->run->curve_live = plive;
  c->run->curve_rss = prss;
  c->run->curve_n = pn;
  return 0;
}

/* First live flags per stack (the `flags` table; absent in older databases). */
static void load_flags(pctx_t *c, int max_stack) {
  c->nflag = max_stack + 1;
  c->flag_t = malloc((size_t)c->nflag * sizeof *c->flag_t);
  if (!c->flag_t) {
    c->nflag = 0;
    lgr_fail(-ENOMEM);
    return;
  }
  for (int i = 0; i < c->nflag; i++) c->flag_t[i] = NAN;
  sqlite3_stmt *st;
  if (lgr_prepare(c->db,
                  "SELECT f.stack, min(f.t_ns) - (SELECT start_ns FROM processes WHERE proc=?1)"
                  " FROM flags f WHERE f.proc=?1 GROUP BY f.stack",
                  -1, &st, NULL) != SQLITE_OK)
    return;
  sqlite3_bind_int(st, 1, c->run->proc);
  while (lgr_row(st)) {
    int id = sqlite3_column_int(st, 0);
    if (id >= 0 && id < c->nflag) c->flag_t[id] = (double)sqlite3_column_int64(st, 1) / 1e9;
  }
  sqlite3_finalize(st);
}

/* Maps every stack of the process to its site (sites[] created here for stacks with
 * frames; the others get one when their samples are read). */
static int key_stacks(pctx_t *c, lgu_strmap_t *keys, int **site_of, int *max_stack) {
  sqlite3_stmt *st;
  if (lgr_prepare(c->db, "SELECT max(stack) FROM samples WHERE proc=?", -1, &st, NULL) != SQLITE_OK) return -EIO;
  sqlite3_bind_int(st, 1, c->run->proc);
  *max_stack = lgr_row(st) ? sqlite3_column_int(st, 0) : 0;
  sqlite3_finalize(st);
  if (*max_stack < 0 || *max_stack > 100000000) *max_stack = 0;
  *site_of = malloc((size_t)(*max_stack + 1) * sizeof **site_of);
  if (!*site_of) return -ENOMEM;
  for (int i = 0; i <= *max_stack; i++) (*site_of)[i] = -1;
  /* GPU sites of different devices are different sites (cuda_stacks: made on first use) */
  int *dev_of = calloc((size_t)(*max_stack + 1), sizeof *dev_of);
  if (!dev_of) return -ENOMEM;
  if (lgr_prepare(c->db, "SELECT stack, device FROM cuda_stacks WHERE proc=?", -1, &st, NULL) == SQLITE_OK) {
    sqlite3_bind_int(st, 1, c->run->proc);
    while (lgr_row(st)) {
      int id = sqlite3_column_int(st, 0);
      if (id >= 0 && id <= *max_stack) dev_of[id] = sqlite3_column_int(st, 1);
    }
    sqlite3_finalize(st);
  }
  if (lgr_prepare(c->db, "SELECT stack, locs, space FROM stacks WHERE proc=? ORDER BY stack", -1, &st, NULL) !=
      SQLITE_OK) {
    free(dev_of);
    return -EIO;
  }
  sqlite3_bind_int(st, 1, c->run->proc);
  const lgr_loc_t **lv = malloc(LGR_MAX_FRAMES * sizeof *lv);
  if (!lv) {
    sqlite3_finalize(st);
    free(dev_of);
    return -ENOMEM;
  }
  char key[1024], key_space[32];
  while (lgr_row(st)) {
    int stack = sqlite3_column_int(st, 0);
    if (stack < 0 || stack > *max_stack) continue;
    const char *sp = (const char *)sqlite3_column_text(st, 2);
    char cur_space[16];
    snprintf(cur_space, sizeof cur_space, "%s", sp ? sp : "host");
    snprintf(key_space, sizeof key_space, "%s@%d", cur_space, dev_of[stack]);
    int nl = lgr_stack_locs(c->db, c->run->proc, (const char *)sqlite3_column_text(st, 1), lv, LGR_MAX_FRAMES);
    lgr_site_key(key, sizeof key, lv, nl, key_space);
    if (!key[0]) continue;
    int added = 0;
    int idx = lgu_strmap_get_or_add(keys, key, c->nsites, &added);
    if (idx < 0) {
      lgr_fail(idx);
      break;
    }
    if (added) {
      if (c->nsites == c->csites) {
        int cap = c->csites ? c->csites * 2 : 64;
        acc_t *na = realloc(c->sites, (size_t)cap * sizeof *na);
        if (!na) {
          lgr_fail(-ENOMEM);
          break;
        }
        c->sites = na;
        c->csites = cap;
      }
      memset(&c->sites[c->nsites], 0, sizeof c->sites[0]);
      snprintf(c->sites[c->nsites].space, sizeof c->sites[0].space, "%s", cur_space);
      c->nsites++;
    }
    (*site_of)[stack] = idx;
  }
  free(lv);
  sqlite3_finalize(st);
  free(dev_of);
  return 0;
}

static acc_t *new_acc(pctx_t *c, const char *space) {
  if (c->nsites == c->csites) { /* the capacity grows only with the array */
    int cap = c->csites ? c->csites * 2 : 64;
    acc_t *na = realloc(c->sites, (size_t)cap * sizeof *na);
    if (!na) return NULL;
    c->sites = na;
    c->csites = cap;
  }
  acc_t *a = &c->sites[c->nsites++];
  memset(a, 0, sizeof *a);
  snprintf(a->space, sizeof a->space, "%s", space ? space : "host");
  return a;
}

/* How many blocks a stack had allocated at the analysed part's last snapshot, from its
 * cumulative count at its last row up to there (seq_b, -1: none) and its first row
 * after (seq_a, -1: none). A stack's row is stored only when its live blocks change,
 * so a stack that allocates and frees as much between two rows has no row at that
 * snapshot: its count there is read on the line between the rows around it. */
static double allocs_at_end(const pctx_t *c, int64_t seq_b, double an_b, int64_t seq_a, double an_a) {
  if (seq_b == c->last_an || seq_a < 0) return an_b;
  double tb = seq_b >= 0 ? c->t[seq_b] : 0, ta = c->t[seq_a], te = c->t[c->last_an];
  if (isnan(tb) || isnan(ta) || isnan(te) || !(ta > tb)) return an_b;
  return an_b + (an_a - an_b) * fmin(1, fmax(0, (te - tb) / (ta - tb)));
}

/* Reads every sample of the process into the sites' delta lists. */
static int read_samples(pctx_t *c, int *site_of, int max_stack) {
  sqlite3_stmt *st;
  if (lgr_prepare(c->db,
                  "SELECT s.stack, s.seq, s.live_bytes, s.live_blocks, s.alloc_bytes,"
                  " s.alloc_blocks, s.oldest_epoch, k.space FROM samples s"
                  " LEFT JOIN stacks k ON k.proc=s.proc AND k.stack=s.stack"
                  " WHERE s.proc=? ORDER BY s.stack, s.seq",
                  -1, &st, NULL) != SQLITE_OK)
    return -EIO;
  sqlite3_bind_int(st, 1, c->run->proc);
  int rc = lgr_step(st);
  while (rc == SQLITE_ROW) {
    int stack = sqlite3_column_int(st, 0);
    const char *sp = (const char *)sqlite3_column_text(st, 7);
    int si = stack >= 0 && stack <= max_stack ? site_of[stack] : -1;
    acc_t *a;
    if (si < 0) {
      a = new_acc(c, sp);
      if (!a) {
        lgr_fail(-ENOMEM);
        break;
      }
      if (stack >= 0 && stack <= max_stack) site_of[stack] = c->nsites - 1;
    } else {
      a = &c->sites[si];
    }
    double pb = 0, pn = 0, peak = 0;
    int64_t live = 0, blocks = 0, ab = 0, an = 0, oldest = 0;
    size_t from = a->nd;
    int oldest_null = 1;
    /* the stack's allocation count at the rows around the analysed part's end */
    int64_t an_seq = -1, an_before = 0, an_after = -1, after_seq = -1;
    int64_t first_seq = -1, first_oldest = -1; /* the stack's first row, and its oldest_epoch */
    while (rc == SQLITE_ROW && sqlite3_column_int(st, 0) == stack) {
      int64_t seq = sqlite3_column_int64(st, 1);
      if (seq >= c->nsnap) seq = c->nsnap - 1;
      if (seq < 0) seq = 0;
      if (first_seq < 0) {
        first_seq = seq;
        if (sqlite3_column_type(st, 6) != SQLITE_NULL) first_oldest = sqlite3_column_int64(st, 6);
      }
      live = sqlite3_column_int64(st, 2);
      blocks = sqlite3_column_int64(st, 3);
      ab = sqlite3_column_int64(st, 4);
      an = sqlite3_column_int64(st, 5);
      /* counters a recorder cannot write: negative, or beyond 2^56 (64 PiB, or as many
       * blocks): a damaged or crafted database, refused (their sums would overflow) */
      if (live < 0 || blocks < 0 || ab < 0 || an < 0 || live > LGR_MAX_COUNTER || blocks > LGR_MAX_COUNTER ||
          ab > LGR_MAX_COUNTER || an > LGR_MAX_COUNTER) {
        lgr_fail_why(-EBADMSG,
                     "stack %d at snapshot %lld holds impossible counters (live %lld B in %lld blocks, "
                     "%lld B in %lld allocated): damaged database",
                     stack, (long long)seq, (long long)live, (long long)blocks, (long long)ab, (long long)an);
        return sqlite3_finalize(st), -EBADMSG;
      }
      if (seq <= c->last_an) an_seq = seq, an_before = an;
      else if (after_seq < 0) after_seq = seq, an_after = an;
      oldest_null = sqlite3_column_type(st, 6) == SQLITE_NULL;
      oldest = sqlite3_column_int64(st, 6);
      if ((double)live != pb || (double)blocks != pn) {
        if (a->nd == a->cd) {
          size_t ncap = a->cd ? a->cd * 2 : 16;
          delta_t *nd = realloc(a->d, ncap * sizeof *nd);
          if (!nd) return sqlite3_finalize(st), -ENOMEM;
          a->d = nd;
          a->cd = ncap;
        }
        a->d[a->nd++] = (delta_t){seq, (double)live - pb, (double)blocks - pn};
        pb = (double)live;
        pn = (double)blocks;
      }
      if ((double)live > peak) peak = (double)live;
      rc = lgr_step(st);
    }
    /* A stack's first row can come long after its blocks were born: a stack under 4 KiB
     * is written only by the collector's snapshots of every change, one each 2 s
     * (store.h), and a loaded collector symbolizes late. Its first row's bytes are put at
     * the first snapshot after its oldest live block's birth (oldest_epoch, in 100-ms
     * ticks: the start of that block's era, never after the birth), not where the row
     * was written: there they made a step out of memory held since the start. (A healthy
     * Python script beside CPU hogs: 45 small stacks of its start-up first written at
     * 2.1 s, a "step-leak"; flake hunt.) Only a row under 4 KiB can be one a partial
     * snapshot left out: a stack is written in every snapshot once it holds 4 KiB
     * (store.c; known from 1 KiB on, in the same snapshot). A bigger first row held under
     * 4 KiB at the snapshot before it and is counted at the row: the era is coarse (26 s
     * wide at 28 s), and redis-server's HSET keyspace, filled from 28.5 s on, dated back
     * to 26.2 s, read as a slow rise that had not stopped when the run ended (issue #34).
     * (Dating 4 KiB of it back would make a step of 170 list nodes before a leak began:
     * late_leak's nodes and thumbnails no longer gained the same blocks.) */
    if (first_seq > 0 && first_oldest >= 0 && a->nd > from && a->d[from].seq == first_seq &&
        a->d[from].bytes < LGD_MIN_GROWTH_BYTES) {
      double born = (double)first_oldest * 0.1; /* LG_TICK_NS (core/region.h) */
      int64_t j = 0;
      while (j < first_seq && (isnan(c->t[j]) || c->t[j] < born)) j++;
      a->d[from].seq = j;
    }
    if (a->nst == a->cst) {
      int cap = a->cst ? a->cst * 2 : 4;
      lgr_stackref_t *ns = realloc(a->st, (size_t)cap * sizeof *ns);
      if (!ns) return sqlite3_finalize(st), -ENOMEM;
      a->st = ns;
      a->cst = cap;
    }
    a->st[a->nst++] = (lgr_stackref_t){stack, live, (int64_t)peak};
    __typeof__(a->rng) nr = realloc(a->rng, (size_t)a->nst * sizeof *nr);
    if (!nr) return sqlite3_finalize(st), -ENOMEM;
    a->rng = nr;
    a->rng[a->nrng++] = (__typeof__(*a->rng)){stack, from, a->nd - from};
    a->live_blocks += blocks;
    a->alloc_bytes += (uint64_t)ab;
    a->alloc_blocks += (uint64_t)an;
    a->alloc_blocks_an += allocs_at_end(c, an_seq, (double)an_before, after_seq, (double)an_after);
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

static int composition_ok(const pctx_t *c, const acc_t *a, const lgr_site_t *s, lgd_series_t *ser) {
  if (a->nrng < 2) return 1;
  return lgr_composition_ok(c, &a, 1, s->r.since_s, s->r.until_s, ser);
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
  s->life.gen = -1;
  snprintf(s->space, sizeof s->space, "%s", a->space);
  qsort(a->st, (size_t)a->nst, sizeof *a->st, lgr_cmp_stackref);
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

/* A site whose curve looked like a leak but is not one (start-up, a bounded holder):
 * a plateau among the sites that do not grow. */
static void not_a_leak(lgr_site_t *site, lgr_site_t **others, int *nothers, int *ocap) {
  site->r.leak = 0;
  site->r.confidence = 0;
  site->r.pattern = LG_PATTERN_PLATEAU;
  site->time_to_oom_s = NAN;
  free(site->series);
  site->series = NULL;
  if (lgr_push_site(others, nothers, ocap, site)) lgr_site_free(site);
}

/* Analyses every site of one process. */
/* The longest stretch of the run without a snapshot, when it is one: over 2 s and over
 * 10 times the median interval (the adaptive interval grows with the run's age: a
 * 60-s interval at an hour is no gap). The collector was stopped (SIGSTOP, a paused
 * container, swapped out) or starved: the report says so, and judges on the points it
 * has. The time the process was held by leakguard's own holder walk (the `explains`
 * rows: no snapshot is taken of a held process, docs/detection.md) is no such stretch:
 * a torch `total_loss += loss` run's walk at exit holds it 2 s, at its budget, and the
 * report said that the collector had not run. */
static int cmp_dbl(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}
#define LGR_MAX_WALKS 256
/* The walks of the process's answered explains, [from, to) seconds after its start;
 * none in a database older than the table. */
static int load_walks(sqlite3 *db, const lgr_run_t *u, double (*w)[2]) {
  sqlite3_stmt *st;
  int n = 0;
  if (!db || lgr_prepare(db,
                         "SELECT t_ns - (SELECT start_ns FROM processes WHERE proc=?1), elapsed_s FROM explains"
                         " WHERE proc=?1 AND outcome='answered' AND elapsed_s > 0 ORDER BY t_ns",
                         -1, &st, NULL) != SQLITE_OK)
    return 0;
  sqlite3_bind_int(st, 1, u->proc);
  while (n < LGR_MAX_WALKS && lgr_row(st)) {
    double to = (double)sqlite3_column_int64(st, 0) / 1e9, el = sqlite3_column_double(st, 1);
    if (!isfinite(to) || !(el > 0)) continue;
    w[n][0] = to - el;
    w[n][1] = to;
    n++;
  }
  sqlite3_finalize(st);
  return n;
}
/* Of the stretch [a, b), the part no walk held (walks do not overlap: one at a time). */
static double unheld(double a, double b, double (*w)[2], int nw) {
  double g = b - a;
  for (int i = 0; i < nw; i++) {
    double lo = fmax(a, w[i][0]), hi = fmin(b, w[i][1]);
    if (hi > lo) g -= hi - lo;
  }
  return g;
}
static void find_gap(sqlite3 *db, lgr_run_t *u) {
  if (!u->snap_t || u->nsnap < 4) return;
  double(*w)[2] = malloc(LGR_MAX_WALKS * sizeof *w);
  double *d = malloc((size_t)u->nsnap * sizeof *d), prev = NAN, best = 0, from = NAN, to = NAN;
  if (!d || !w) {
    free(d);
    free(w);
    return;
  }
  int nw = load_walks(db, u, w);
  int64_t n = 0;
  for (int64_t i = 0; i < u->nsnap; i++) {
    if (!isfinite(u->snap_t[i])) continue;
    if (isfinite(prev)) {
      double g = u->snap_t[i] - prev;
      d[n++] = g;
      double h = nw ? unheld(prev, u->snap_t[i], w, nw) : g;
      if (h > best) best = h, from = prev, to = u->snap_t[i];
    }
    prev = u->snap_t[i];
  }
  if (n >= 3) {
    qsort(d, (size_t)n, sizeof *d, cmp_dbl);
    double med = d[n / 2];
    if (best > 2.0 && best > 10 * med) {
      u->gap_from_s = from;
      u->gap_to_s = to;
    }
  }
  free(d);
  free(w);
}

int lgr_analyse_proc(sqlite3 *db, lgr_run_t *run, const lgr_options_t *o, lgr_report_t *r, lgr_site_t **others,
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
  lgr_load_ages(&c, 0);
  lgr_load_ages(&c, 1);
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
    if (a->nst == 0) continue;
    if (densify(&c, a) != 0) {
      lgr_fail(-ENOMEM);
      break;
    }
    lgr_site_t site;
    site_from_acc(&c, a, &site);
    /* keep the stack list for the spread search too */
    a->st = malloc((size_t)site.nstacks * sizeof *a->st);
    if (a->st) {
      memcpy(a->st, site.stacks, (size_t)site.nstacks * sizeof *a->st);
      a->nst = a->cst = site.nstacks;
    }
    site.device = lgr_gpu_site_device(db, &site);
    lgr_gpu_site_um(db, &site);
    lgr_analyse_series(&c, a->val, a->blk, &site, &ser);
    lgr_site_life(&c, a->blk, a->alloc_blocks_an, site.live_blocks, &site.life);
    lgr_site_ages(&c, site.stacks, site.nstacks, (double)site.alloc_blocks,
                  (double)(site.live_blocks > 0 ? site.live_blocks : 0), &site.life);
    lgr_add_stack_lives(&c, &site);
    if (o->generations && site.alloc_blocks > 0) {
      lgr_load_frames(db, &site, o->native); /* the first load: nall is 0 */
      lgr_add_genrow(&c, &site);
    }
    if (site.r.leak && site.device >= 0 && site.r.growth_bytes_per_s > 0) /* against the GPU's memory */
      site.time_to_oom_s = lgr_gpu_headroom(r, &site, c.headroom) / site.r.growth_bytes_per_s;
    if (site.r.leak && !composition_ok(&c, a, &site, &ser)) {
      site.r.leak = 0;
      site.r.confidence = 0;
      site.r.pattern = LG_PATTERN_PLATEAU;
      site.time_to_oom_s = NAN;
    }
    site.detected_after_s = lgr_site_flag(&c, &site);
    if (site.r.leak) {
      used[i] = 1;
      site.series = a->val; /* kept for the leak's summed series */
      a->val = NULL;
      if (!site.nall) lgr_load_frames(db, &site, o->native);
      if (lgr_in_import(&site)) { /* a module's start-up: made once, not a leak */
        r->nstartup++;
        r->startup_growth += site.growth_bytes;
        site.startup = 1;
        not_a_leak(&site, others, nothers, ocap);
        continue;
      }
      lgr_load_holders(db, &site);
      if ((site.bounded = lgr_full_bound(&site))) { /* a full bounded cache: a plateau */
        not_a_leak(&site, others, nothers, ocap);
        continue;
      }
      if (lgr_push_site(&r->suspects, &r->nsuspects, &scap, &site)) lgr_site_free(&site);
    } else {
      /* a site that held nothing at the end is not among the others, unless it grew then
       * released (the largest at the peak say so: peak.c) */
      if (site.peak_live_bytes > 0) lgr_released(&c, a->val, &site);
      if (site.peak_live_bytes > 0 && (site.live_bytes > 0 || site.released)) {
        if (!site.nall) lgr_load_frames(db, &site, o->native);
        if (lgr_push_site(others, nothers, ocap, &site)) lgr_site_free(&site);
      } else {
        lgr_site_free(&site);
      }
    }
  }
  lgr_find_spread(&c, &ser, used);
  lgd_series_free(&ser);
  free(used);
out:
  for (int i = 0; i < c.nsites; i++) free_acc(&c.sites[i]);
  free(c.sites);
  run->snap_t = c.t; /* the leaks' series are read against them (lgr_free frees them) */
  run->snap_step = c.step;
  run->nsnap = c.nsnap;
  find_gap(db, run);
  free(c.flag_t);
  for (int u = 0; u < 2; u++) {
    free(c.ages[u].stack);
    free(c.ages[u].cnt);
  }
  return rc;
}
