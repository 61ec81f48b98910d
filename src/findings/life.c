/* SPDX-License-Identifier: MIT */
/*
 * life.c - how long a site's blocks live (docs/lifetimes.md): the mean lifetime
 * by Little's law and the generation, the distribution of the freed blocks' ages from
 * the lifetimes tables, and the rows the HTML site table and liblgpool's site profile
 * read. Part of the per-process analysis of sites.c.
 */
#include <errno.h>
#include <math.h>
#include <sqlite3.h>
#include <stdlib.h>
#include <string.h>

#include "leakguard.h" /* LG_POOL_SKIP_DEFAULT */
#include "findings/report.h"
#include "findings/impl.h"

/* The lifetimes (steps 0) or step_lifetimes (steps 1) table of this process: stacks
 * with freed blocks by age, ascending. An older database has no such table: no
 * distributions. */
void lgr_load_ages(pctx_t *c, int steps) {
  lgr_agetab_t *t = &c->ages[steps];
  sqlite3_stmt *st;
  const char *sql = steps ? "SELECT stack, bucket, blocks FROM step_lifetimes WHERE proc=? ORDER BY stack"
                          : "SELECT stack, bucket, blocks FROM lifetimes WHERE proc=? ORDER BY stack";
  if (lgr_prepare(c->db, sql, -1, &st, NULL) != SQLITE_OK) return;
  sqlite3_bind_int(st, 1, c->run->proc);
  int cap = 0;
  while (lgr_row(st)) {
    int id = sqlite3_column_int(st, 0), b = sqlite3_column_int(st, 1);
    if (b < 0 || b >= LGR_AGES) continue;
    if (t->n == 0 || t->stack[t->n - 1] != id) {
      if (t->n == cap) {
        cap = cap ? cap * 2 : 256;
        int *ns = realloc(t->stack, (size_t)cap * sizeof *ns);
        if (ns) t->stack = ns;
        double(*nc)[LGR_AGES] = realloc(t->cnt, (size_t)cap * sizeof *nc);
        if (nc) t->cnt = nc;
        if (!ns || !nc) {
          lgr_fail(-ENOMEM);
          break;
        }
      }
      t->stack[t->n] = id;
      memset(t->cnt[t->n], 0, sizeof t->cnt[t->n]);
      t->n++;
    }
    t->cnt[t->n - 1][b] += (double)sqlite3_column_int64(st, 2);
  }
  sqlite3_finalize(st);
}

/* Percentiles 50, 90, 99 of a population of `total` blocks of which the histogram
 * freed[] (nfreed blocks) was freed: the bound le(b) of the bucket holding each, or
 * +INFINITY beyond the freed ones (a kept block); NaN without a histogram. */
static void percentiles(const double *freed, double nfreed, double total, int steps, double *out[3]) {
  static const double q[3] = {0.5, 0.9, 0.99};
  for (int k = 0; k < 3; k++) {
    *out[k] = NAN;
    if (!(nfreed > 0) || !(total > 0)) continue;
    double want = q[k] * total, acc = 0;
    *out[k] = INFINITY;
    for (int b = 0; b < LGR_AGES; b++) {
      acc += freed[b];
      if (acc >= want) {
        *out[k] = b == LGR_AGES - 1 ? INFINITY : steps ? LGR_AGE_LE_STEPS(b) : LGR_AGE_LE_S(b);
        break;
      }
    }
  }
}

void lgr_life_percentiles(lgr_life_t *l, double alloc_blocks, double kept_blocks) {
  /* the population: the freed blocks and the kept ones (what the counters and the
   * series say may differ a little: the larger of the two counts) */
  double total = l->nfreed + kept_blocks;
  if (alloc_blocks > total) total = alloc_blocks;
  double *t[3] = {&l->p50_le_s, &l->p90_le_s, &l->p99_le_s};
  percentiles(l->freed, l->nfreed, total, 0, t);
  /* in steps: the blocks freed before the first step are not counted, nor allocated */
  double *s[3] = {&l->p50_le_steps, &l->p90_le_steps, &l->p99_le_steps};
  percentiles(l->sfreed, l->nsfreed, l->nsfreed + kept_blocks, 1, s);
}

void lgr_site_ages(const pctx_t *c, const lgr_stackref_t *stacks, int nstacks, double alloc_blocks, double kept_blocks,
                   lgr_life_t *l) {
  memset(l->freed, 0, sizeof l->freed);
  memset(l->sfreed, 0, sizeof l->sfreed);
  l->nfreed = l->nsfreed = 0;
  for (int u = 0; u < 2; u++) {
    const lgr_agetab_t *t = &c->ages[u];
    double *freed = u ? l->sfreed : l->freed, *nfreed = u ? &l->nsfreed : &l->nfreed;
    for (int k = 0; k < nstacks; k++) {
      int lo = 0, hi = t->n - 1, id = stacks[k].stack;
      while (lo <= hi) {
        int mid = (lo + hi) / 2;
        if (t->stack[mid] < id) lo = mid + 1;
        else if (t->stack[mid] > id) hi = mid - 1;
        else {
          for (int b = 0; b < LGR_AGES; b++) {
            freed[b] += t->cnt[mid][b];
            *nfreed += t->cnt[mid][b];
          }
          break;
        }
      }
    }
  }
  lgr_life_percentiles(l, alloc_blocks, kept_blocks);
}

/* The lifetime of the site's blocks by Little's law (docs/lifetimes.md): the mean of
 * its live blocks over the snapshots of the analysed part (not an exit's teardown),
 * over the blocks it allocated per second. Nothing here needs the recorder to time
 * each block: a site whose blocks live 50 us at 10^5 allocations/s holds 5 blocks on
 * average, whatever the snapshot interval. A block never freed counts its age at the
 * end, so a site that keeps what it allocates gets about half the run (a leak) or the
 * whole run (weights loaded at start). */
void lgr_site_life(const pctx_t *c, const double *blk, double alloc_blocks_an, int64_t end_blocks, lgr_life_t *l) {
  l->gen = -1;
  l->mean_s = l->mean_steps = NAN;
  l->below_s = 0;
  l->kept = 0;
  memset(l->freed, 0, sizeof l->freed);
  l->nfreed = 0;
  l->p50_le_s = l->p90_le_s = l->p99_le_s = NAN;
  memset(l->sfreed, 0, sizeof l->sfreed);
  l->nsfreed = 0;
  l->p50_le_steps = l->p90_le_steps = l->p99_le_steps = NAN;
  double sum = 0, last_blk = 0, t_end = NAN, steps = 0;
  int64_t n = 0;
  for (int64_t i = 0; i < c->nsnap; i++) {
    if (isnan(c->t[i]) || c->t[i] > c->run->exit_begin_s) continue;
    sum += blk[i] > 0 ? blk[i] : 0;
    last_blk = blk[i] > 0 ? blk[i] : 0;
    t_end = c->t[i];
    steps = c->step[i];
    n++;
  }
  /* the blocks allocated by t_end, not by the end of the run: when the last snapshots
   * before the exit come late (a collector slowed by a loaded machine), the whole
   * run's count over the analysed part's time would make the rate too high, and a
   * site that keeps its blocks look young */
  double allocs = alloc_blocks_an;
  if (n == 0 || !(t_end > 0) || !(allocs > 0)) return;
  /* never live while it ran, yet live at the very end: born after the analysed part
   * (a buffer of the exit path), nothing to measure */
  if (sum == 0 && end_blocks > 0) return;
  double rate = allocs / t_end; /* blocks allocated per second */
  l->mean_s = (sum / (double)n) / rate;
  if (sum == 0) l->below_s = (1.0 / (double)n) / rate; /* one block seen once would give this */
  l->kept = fmin(1, last_blk / allocs);
  if (steps > 0) l->mean_steps = l->mean_s * steps / t_end;
  if (l->kept >= 0.5 || l->mean_s >= 0.25 * t_end) l->gen = LGR_GEN_OLD;
  else if (l->mean_s < LGR_YOUNG_S) l->gen = LGR_GEN_YOUNG;
  else l->gen = LGR_GEN_MIDDLE;
}

/* Each stack of the site gets the site's lifetime (the HTML site table). */
void lgr_add_stack_lives(pctx_t *c, const lgr_site_t *s) {
  lgr_report_t *r = c->r;
  if (s->life.gen < 0 || s->nstacks <= 0) return;
  if (r->nslife + (size_t)s->nstacks > r->cslife) { /* the capacity grows only with the array */
    size_t cap = r->cslife ? r->cslife : 64;
    while (cap < r->nslife + (size_t)s->nstacks) cap *= 2;
    lgr_stacklife_t *n = realloc(r->slife, cap * sizeof *n);
    if (!n) return lgr_fail(-ENOMEM);
    r->slife = n;
    r->cslife = cap;
  }
  for (int k = 0; k < s->nstacks; k++) r->slife[r->nslife++] = (lgr_stacklife_t){s->proc, s->stacks[k].stack, s->life};
}

/* 1 when a liblgpool site profile skips the module's frames: liblgpool itself and the
 * libraries of its default LEAKGUARD_POOL_SKIP (LG_POOL_SKIP_DEFAULT, docs/pool.md). */
static int pool_skipped(const char *module) {
  if (!module) return 0;
  const char *b = strrchr(module, '/');
  b = b ? b + 1 : module;
  if (!strncmp(b, "liblgpool", 9)) return 1;
  for (const char *q = LG_POOL_SKIP_DEFAULT; *q;) {
    size_t n = strcspn(q, ",");
    if (n && !strncmp(b, q, n)) return 1;
    q += n + (q[n] == ',');
  }
  return 0;
}

/* A row of the site profile for a site with a function name, or with a Python line:
 * "<file>:<line>" of its innermost Python frame (the site the report names), which
 * liblgpool reads from the interpreter at allocation time (pool/profile.c). */
void lgr_add_genrow(pctx_t *c, const lgr_site_t *s) {
  if (s->life.gen < 0 || !s->nframes) return;
  const char *key = NULL;
  char name[600];
  /* a native site's profile key is its innermost function, not its headline
   * (lgr_headline): liblgpool looks up the allocator's caller */
  int from = lgr_is_python_module(s->frames[s->site_frame].module) ? s->site_frame : 0;
  for (int k = from; k < s->nframes && !key; k++) {
    const lgr_frame_t *fr = &s->frames[k];
    if (lgr_is_python_module(fr->module)) {
      if (!fr->file || !*fr->file || fr->line <= 0) return;
      snprintf(name, sizeof name, "%s:%d", fr->file, fr->line);
      key = name;
      break;
    }
    if (pool_skipped(fr->module)) continue;
    if (fr->function && *fr->function && strcmp(fr->function, "??")) key = fr->function;
    else return;
  }
  if (!key || strchr(key, ' ') || strchr(key, '#')) return; /* a line of the file is "<key> <gen>" */
  if (key != name) {
    /* GCC's clones (make_activation.constprop.0, .isra.0, .part.0, .cold) are the
     * function of the source: the key the profile's reader looks up */
    snprintf(name, sizeof name, "%s", key);
    static const char *clone[] = {".constprop.", ".isra.", ".part.", ".cold", ".lto_priv."};
    for (size_t i = 0; i < sizeof clone / sizeof *clone; i++) {
      char *q = strstr(name, clone[i]);
      if (q && q > name) *q = 0;
    }
    key = name;
  }
  lgr_report_t *r = c->r;
  if (r->ngens % 64 == 0) {
    lgr_genrow_t *n = realloc(r->gens, (size_t)(r->ngens + 64) * sizeof *n);
    if (!n) return lgr_fail(-ENOMEM);
    r->gens = n;
  }
  char *k = lgr_strdup(key);
  if (!k) return lgr_fail(-ENOMEM);
  r->gens[r->ngens++] = (lgr_genrow_t){k, s->life, s->alloc_blocks};
}

const char *lgr_gen_name(int gen) {
  static const char *names[] = {"young", "middle", "old"};
  return gen >= 0 && gen <= LGR_GEN_OLD ? names[gen] : "unknown";
}
