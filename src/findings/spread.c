/* SPDX-License-Identifier: MIT */
/*
 * spread.c - growth spread over many sites (docs/detection.md, "From suspects to
 * leaks"): when a process's live memory grows as a leak that its suspects do not
 * explain, the sites are grouped by the callers they share and the deepest group whose
 * summed series is a leak becomes one suspect. Part of the per-process analysis of
 * sites.c, which calls lgr_find_spread once its sites are judged.
 */
#include <errno.h>
#include <math.h>
#include <sqlite3.h>
#include <stdlib.h>
#include <string.h>

#include "findings/report.h"
#include "findings/impl.h"

/* The group's stacks, like a site's (lgr_composition_ok): not a staircase of fills. */
static int members_compose(const pctx_t *c, const int *cand, const int *member, int nmem, const lgr_site_t *g,
                           lgd_series_t *ser) {
  const acc_t **accs = malloc((size_t)nmem * sizeof *accs);
  if (!accs) return 1;
  for (int m = 0; m < nmem; m++) accs[m] = &c->sites[cand[member[m]]];
  int ok = lgr_composition_ok(c, accs, nmem, g->r.since_s, g->r.until_s, ser);
  free(accs);
  return ok;
}

/* Growth spread over many sites is many sites growing together, all along: at least
 * half of the group's growth must come from members that grew in both halves of the
 * growing part. Sites that each filled once, one after the other (a server's
 * keyspaces, one per command), make a staircase that is not a leak. */
static int spread_persists(const pctx_t *c, const int *cand, const int *member, int nmem, double since, double until) {
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

/* A candidate's hash of its d outermost frames, for grouping (find_spread). */
typedef struct hkey {
  uint64_t h;
  int j;
} hkey_t;

static int cmp_hkey(const void *a, const void *b) {
  const hkey_t *x = a, *y = b;
  if (x->h != y->h) return x->h < y->h ? -1 : 1;
  return (x->j > y->j) - (x->j < y->j);
}

static int cmp_hkey_j(const void *a, const void *b) {
  const hkey_t *x = a, *y = b;
  return (x->j > y->j) - (x->j < y->j);
}

/* FNV-1a over what makes two frames the same caller: function, file and line. */
static uint64_t path_hash(uint64_t h, const lgr_frame_t *f) {
  for (const char *p = f->function ? f->function : ""; *p; p++) h = (h ^ (unsigned char)*p) * 1099511628211ULL;
  h = (h ^ 0x1f) * 1099511628211ULL;
  for (const char *p = f->file ? f->file : ""; *p; p++) h = (h ^ (unsigned char)*p) * 1099511628211ULL;
  h = (h ^ 0x1e) * 1099511628211ULL;
  for (unsigned x = (unsigned)f->line, k = 0; k < 4; k++, x >>= 8) h = (h ^ (x & 0xff)) * 1099511628211ULL;
  return h;
}

/* 1 with *unexplained, the process's growth that its suspects do not explain, when its
 * whole live memory grows as a leak and they explain under half of it; else 0. */
static int unexplained_growth(pctx_t *c, lgd_series_t *ser, double *unexplained) {
  double *tot = calloc((size_t)c->nsnap, sizeof *tot);
  if (!tot) return 0;
  for (int i = 0; i < c->nsites; i++)
    if (c->sites[i].val)
      for (int64_t k = 0; k < c->nsnap; k++) tot[k] += c->sites[i].val[k];
  lgr_site_t whole;
  memset(&whole, 0, sizeof whole);
  lgr_analyse_series(c, tot, NULL, &whole, ser);
  free(tot);
  if (!whole.r.leak) return 0;
  double explained = 0;
  for (int i = 0; i < c->r->nsuspects; i++)
    if (c->r->suspects[i].proc == c->run->proc) explained += c->r->suspects[i].r.growth_bytes_per_s;
  double u = whole.r.growth_bytes_per_s - explained;
  if (u < 0.5 * whole.r.growth_bytes_per_s || u * (whole.r.floor_last > whole.r.floor_first ? 1 : 0) <= 0) return 0;
  *unexplained = u;
  return 1;
}

/* Candidate sites: not already suspects, holding 1 KiB or more at some point, not a
 * module's start-up; each with the frames of its largest stack in cs[], its site index
 * in cand[]. Their number (at most 4096). */
static int spread_candidates(pctx_t *c, const int *used, lgr_site_t *cs, int *cand) {
  int ncand = 0;
  for (int i = 0; i < c->nsites && ncand < 4096; i++) {
    acc_t *a = &c->sites[i];
    if (used[i] || !a->val || a->nst == 0) continue;
    double mx = 0;
    for (int64_t k = 0; k < c->nsnap; k++) mx = fmax(mx, a->val[k]);
    if (mx < 1024) continue;
    lgr_site_t *s = &cs[ncand];
    s->proc = c->run->proc;
    int best = 0;
    for (int k = 1; k < a->nst; k++)
      if (a->st[k].live_bytes > a->st[best].live_bytes) best = k;
    s->stack = a->st[best].stack;
    lgr_load_frames(c->db, s, 0);
    if (s->nframes == 0 || lgr_in_import(s)) { /* a module's start-up is not spread growth */
      lgr_site_free(s);
      continue;
    }
    cand[ncand++] = i;
  }
  return ncand;
}

/* Root-first paths: the frames after the site frame for Python (its callers), all
 * frames for native stacks (first[j]: where candidate j's path ends). ph[j][d]: the hash
 * of its d outermost frames. The longest path's length; -1 out of memory. */
static int path_hashes(const lgr_site_t *cs, int ncand, int *first, uint64_t **ph) {
  int maxd = 0;
  for (int j = 0; j < ncand; j++) {
    first[j] = lgr_is_python_module(cs[j].frames[cs[j].site_frame].module) ? cs[j].site_frame : 0;
    int depth = cs[j].nframes - first[j];
    if (depth > maxd) maxd = depth;
    ph[j] = malloc((size_t)(depth + 1) * sizeof **ph);
    if (!ph[j]) return -1;
    uint64_t h = 1469598103934665603ULL;
    ph[j][0] = h;
    for (int x = 1; x <= depth; x++) {
      const lgr_frame_t *f = &cs[j].frames[cs[j].nframes - x];
      h = path_hash(h, f);
      ph[j][x] = h;
    }
  }
  return maxd;
}

/* The group of nmem candidates (member[], indices into cand[]) that share the d
 * outermost frames of candidate a: one suspect, its frames the shared path innermost
 * first, its series sum (blocks sumb), pushed to the report's suspects; its sites are
 * marked used. 0, -1 out of memory (g freed). */
static int push_group(pctx_t *c, const int *cand, const int *member, int nmem, const lgr_site_t *a, int j, int d,
                      const double *sum, const double *sumb, lgr_site_t *g, int *used) {
  g->proc = c->run->proc;
  g->pid = c->run->pid;
  g->leak = -1;
  g->device = -1; /* host memory: "on GPU 0" was printed for a zeroed group */
  g->oldest_age_s = NAN;
  g->spread_sites = nmem;
  snprintf(g->space, sizeof g->space, "%s", c->sites[cand[j]].space);
  g->stack = a->stack;
  g->all_frames = calloc((size_t)d, sizeof *g->all_frames);
  int nst = 0;
  for (int m = 0; m < nmem; m++) nst += c->sites[cand[member[m]]].nst;
  g->stacks = calloc((size_t)(nst ? nst : 1), sizeof *g->stacks);
  if (!g->all_frames || !g->stacks) {
    lgr_site_free(g);
    return -1;
  }
  int la = a->nframes;
  for (int x = 0; x < d; x++) {
    const lgr_frame_t *src = &a->frames[la - d + x];
    g->all_frames[x] = (lgr_frame_t){
        lgr_strdup(src->function), lgr_strdup(src->file), lgr_strdup(src->module), src->line, src->inlined, src->ip};
  }
  g->nall = g->nframes = d;
  g->frames = g->all_frames;
  g->site_frame = 0;
  double alloc_an = 0;
  for (int m = 0; m < nmem; m++) {
    acc_t *ac = &c->sites[cand[member[m]]];
    for (int k = 0; k < ac->nst; k++) g->stacks[g->nstacks++] = ac->st[k];
    g->live_blocks += ac->live_blocks;
    g->alloc_bytes += ac->alloc_bytes;
    g->alloc_blocks += ac->alloc_blocks;
    alloc_an += ac->alloc_blocks_an;
    used[cand[member[m]]] = 1;
  }
  lgr_site_life(c, sumb, alloc_an, g->live_blocks, &g->life);
  lgr_site_ages(c, g->stacks, g->nstacks, (double)g->alloc_blocks, (double)(g->live_blocks > 0 ? g->live_blocks : 0),
                &g->life);
  qsort(g->stacks, (size_t)g->nstacks, sizeof *g->stacks, lgr_cmp_stackref);
  for (int k = 0; k < g->nstacks; k++) g->live_bytes += g->stacks[k].live_bytes;
  g->detected_after_s = lgr_site_flag(c, g);
  g->series = malloc((size_t)c->nsnap * sizeof *g->series);
  if (g->series) memcpy(g->series, sum, (size_t)c->nsnap * sizeof *g->series);
  lgr_load_holders(c->db, g);
  int scap = c->r->nsuspects; /* lgr_push_site grows by doubling from the count */
  if (lgr_push_site(&c->r->suspects, &c->r->nsuspects, &scap, g)) lgr_site_free(g);
  return 0;
}

/* Whole-process growth that no single site explains (growth spread over many sites,
 * each under the bar): the sites are grouped by the path of callers they share, from
 * the root (Python frames for Python stacks, native frames otherwise), and the deepest
 * group whose summed series is a leak and that explains at least half of the
 * unexplained growth becomes one suspect. Groups at depth d are found by a hash of each
 * candidate's d outermost frames (prefix hashes from the root), sorted, so a depth
 * costs n log n instead of comparing every pair of the up to 4096 candidates (seconds
 * for a torch import); members are then checked frame by frame against the group's
 * first one, so a hash collision cannot merge sites. */
void lgr_find_spread(pctx_t *c, lgd_series_t *ser, int *used) {
  if (c->nsnap < 8) return;
  double unexplained;
  if (!unexplained_growth(c, ser, &unexplained)) return;
  int *cand = malloc((size_t)c->nsites * sizeof *cand);
  lgr_site_t *cs = calloc((size_t)c->nsites, sizeof *cs);
  if (!cand || !cs) {
    free(cand);
    free(cs);
    return;
  }
  int ncand = spread_candidates(c, used, cs, cand);
  int *first = malloc((size_t)(ncand ? ncand : 1) * sizeof *first);
  uint64_t **ph = calloc((size_t)(ncand ? ncand : 1), sizeof *ph);
  int maxd = first && ph ? path_hashes(cs, ncand, first, ph) : -1;
  if (maxd < 0) lgr_fail(-ENOMEM);
  double *sum = calloc((size_t)c->nsnap, sizeof *sum);
  double *sumb = calloc((size_t)c->nsnap, sizeof *sumb);
  int *member = malloc((size_t)(ncand ? ncand : 1) * sizeof *member);
  hkey_t *hk = malloc((size_t)(ncand ? ncand : 1) * sizeof *hk);
  int found = 0;
  for (int d = maxd; d >= 1 && sum && sumb && member && hk && !lgr_failed() && !found; d--) {
    /* groups at depth d: sites whose d outermost frames are the same, evaluated in the
     * order of their first member */
    int nk = 0;
    for (int j = 0; j < ncand; j++)
      if (cs[j].nframes - first[j] >= d) hk[nk++] = (hkey_t){ph[j][d], j};
    qsort(hk, (size_t)nk, sizeof *hk, cmp_hkey); /* by hash, then candidate order */
    /* each bucket's first entry is its lowest candidate: visit buckets in that order */
    int nb = 0;
    for (int x = 0; x < nk; x++)
      if (x == 0 || hk[x].h != hk[x - 1].h) member[nb++] = x;
    hkey_t *bucket = malloc((size_t)(nb ? nb : 1) * sizeof *bucket);
    if (!bucket) {
      lgr_fail(-ENOMEM);
      break;
    }
    for (int q = 0; q < nb; q++) bucket[q] = (hkey_t){(uint64_t)member[q], hk[member[q]].j};
    qsort(bucket, (size_t)nb, sizeof *bucket, cmp_hkey_j);
    for (int b = 0; b < nb && !found; b++) {
      int x0 = (int)bucket[b].h, j = bucket[b].j;
      const lgr_site_t *a = &cs[j];
      int la = a->nframes;
      int nmem = 0;
      for (int x = x0; x < nk && hk[x].h == hk[x0].h; x++) {
        const lgr_site_t *bs = &cs[hk[x].j];
        int lb = bs->nframes, same = 1;
        for (int y = 1; y <= d && same; y++) {
          const lgr_frame_t *fa = &a->frames[la - y], *fb = &bs->frames[lb - y];
          same = fa->line == fb->line && !strcmp(fa->function, fb->function) && !strcmp(fa->file, fb->file);
        }
        if (same) member[nmem++] = hk[x].j;
      }
      if (nmem < 2) continue;
      memset(sum, 0, (size_t)c->nsnap * sizeof *sum);
      memset(sumb, 0, (size_t)c->nsnap * sizeof *sumb);
      for (int m = 0; m < nmem; m++) {
        acc_t *ac = &c->sites[cand[member[m]]];
        for (int64_t k = 0; k < c->nsnap; k++) sum[k] += ac->val[k], sumb[k] += ac->blk[k];
      }
      lgr_site_t g;
      memset(&g, 0, sizeof g);
      lgr_analyse_series(c, sum, sumb, &g, ser);
      if (!g.r.leak || g.r.growth_bytes_per_s < 0.5 * unexplained) continue;
      if (!spread_persists(c, cand, member, nmem, g.r.since_s, g.r.until_s)) continue;
      if (!members_compose(c, cand, member, nmem, &g, ser)) continue;
      if (push_group(c, cand, member, nmem, a, j, d, sum, sumb, &g, used) < 0) break;
      found = 1;
    }
    free(bucket);
  }
  free(sum);
  free(sumb);
  free(member);
  free(hk);
  free(first);
  for (int j = 0; j < ncand && ph; j++) free(ph[j]);
  free(ph);
  for (int j = 0; j < ncand; j++) lgr_site_free(&cs[j]);
  free(cs);
  free(cand);
}
