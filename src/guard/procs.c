/* SPDX-License-Identifier: MIT */
/*
 * procs.c - the guard's watched-process table: the processes of the watched sources
 * (the pid set, the cgroups' members, in system mode the recorded processes), their
 * identity (start time), memory and growth, the recorder's growth hints, and which
 * of them may be a victim and how they rank. Separate from engine.c: it is the state
 * the actions choose from, refreshed once a tick.
 */
#include "guard/guard.h"
#include "guard/guard_impl.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "core/util.h"

/* ------------------------------------------------------------------ processes */
static int proc_cmp(const void *a, const void *b) { return ((const proc_t *)a)->pid - ((const proc_t *)b)->pid; }

static proc_t *proc_find(lgg_guard_t *g, int pid) {
  proc_t key = {.pid = pid};
  if (!g->nprocs) return NULL; /* bsearch on a NULL array is undefined even when empty */
  return bsearch(&key, g->procs, (size_t)g->nprocs, sizeof *g->procs, proc_cmp);
}

int lgg_proc_identity(int pid, unsigned long long *start, char *comm, size_t commlen) {
  char path[64], buf[1024];
  snprintf(path, sizeof path, "/proc/%d/stat", pid);
  if (lgu_read_file(path, buf, sizeof buf) <= 0) return -ESRCH;
  char *l = strchr(buf, '('), *r = strrchr(buf, ')');
  if (!l || !r || r < l) return -ESRCH;
  if (comm) snprintf(comm, commlen, "%.*s", (int)(r - l - 1), l + 1);
  /* field 22 (starttime): 20th field after the ") " */
  char *p = r + 2;
  for (int f = 3; f < 22 && p; f++) {
    p = strchr(p, ' ');
    if (p) p++;
  }
  if (!p) return -ESRCH;
  *start = strtoull(p, NULL, 10);
  return 0;
}

/* Marks pid as part of source si this tick (adds it when new). */
static void proc_mark(lgg_guard_t *g, int pid, int si, proc_t **added, int *nadded, int *capadded) {
  proc_t *p = proc_find(g, pid);
  if (!p) {
    for (int i = 0; i < *nadded; i++)
      if ((*added)[i].pid == pid) {
        p = &(*added)[i];
        break;
      }
  }
  if (!p) {
    if (*nadded == *capadded) {
      int cap = *capadded ? 2 * *capadded : 32;
      proc_t *a = realloc(*added, (size_t)cap * sizeof *a);
      if (!a) return;
      *added = a;
      *capadded = cap;
    }
    p = &(*added)[(*nadded)++];
    memset(p, 0, sizeof *p);
    p->pid = pid;
    p->srcmask = 0;
    p->seen = -1; /* new: identity read below */
  }
  if (p->seen != g->seen) {
    if (p->seen != -1) p->srcmask = 0;
    p->seen = g->seen;
  }
  p->srcmask |= 1ULL << si;
}

static void growth_update(lgg_guard_t *g, proc_t *p, double t) {
  double v = (double)p->mem + (double)p->gpu;
  double win = g->cfg.lv.window_s;
  while (p->rn && (t - p->rt[p->rhead] > win)) {
    p->rhead = (p->rhead + 1) % GROWTH_N;
    p->rn--;
  }
  if (p->rn) {
    unsigned o = p->rhead;
    double dt = t - p->rt[o];
    p->growth = dt >= 0.25 ? (v - p->rv[o]) / dt : 0;
  } else {
    p->growth = 0;
  }
  unsigned last = (p->rhead + p->rn + GROWTH_N - 1) % GROWTH_N;
  if (!p->rn || t - p->rt[last] >= win / GROWTH_N) {
    if (p->rn == GROWTH_N) {
      p->rhead = (p->rhead + 1) % GROWTH_N;
      p->rn--;
    }
    unsigned at = (p->rhead + p->rn) % GROWTH_N;
    p->rt[at] = t;
    p->rv[at] = v;
    p->rn++;
  }
}

void lgg_refresh_procs(lgg_guard_t *g, double t) {
  g->seen++;
  proc_t *added = NULL;
  int nadded = 0, capadded = 0;
  for (int i = 0; i < g->npids; i++) proc_mark(g, g->pids[i], g->pids_src, &added, &nadded, &capadded);
  for (int si = 0; si < g->nsrc; si++) {
    source_t *s = &g->src[si];
    if (!s->alive || g->own_only) continue; /* `run --guard`: its own processes, by pid */
    if (s->kind == SRC_CGROUP) {
      int *pids = NULL;
      long n = lgsm_cgroup_pids(s->path, &pids);
      for (long k = 0; k < n; k++) proc_mark(g, pids[k], si, &added, &nadded, &capadded);
      free(pids);
    } else if (s->kind == SRC_SYSTEM) {
      /* in system mode only processes that run with the recorder are candidates */
      for (int k = 0; k < lgg_regions_count(g->regions); k++)
        proc_mark(g, lgg_regions_pid(g->regions, k), si, &added, &nadded, &capadded);
    }
  }
  /* merge: drop the unseen, read identity of the new, sample memory */
  int w = 0;
  for (int i = 0; i < g->nprocs; i++)
    if (g->procs[i].seen == g->seen) g->procs[w++] = g->procs[i];
  g->nprocs = w;
  if (g->nprocs + nadded > g->capprocs) {
    int cap = g->nprocs + nadded + 32;
    proc_t *a = realloc(g->procs, (size_t)cap * sizeof *a);
    if (!a) {
      free(added);
      return;
    }
    g->procs = a;
    g->capprocs = cap;
  }
  for (int i = 0; i < nadded; i++) {
    proc_t *p = &added[i];
    if (lgg_proc_identity(p->pid, &p->start, p->comm, sizeof p->comm) != 0) continue;
    char path[64], buf[32];
    snprintf(path, sizeof path, "/proc/%d/oom_score_adj", p->pid);
    p->adj = lgu_read_file(path, buf, sizeof buf) > 0 ? atoi(buf) : 0;
    g->procs[g->nprocs++] = *p;
  }
  free(added);
  if (g->nprocs) qsort(g->procs, (size_t)g->nprocs, sizeof *g->procs, proc_cmp);
  w = 0;
  for (int i = 0; i < g->nprocs; i++) {
    proc_t *p = &g->procs[i];
    int64_t m = lgsm_proc_mem(p->pid, g->cfg.memory);
    if (m < 0) continue; /* exited: dropped */
    p->mem = m;
    growth_update(g, p, t);
    g->procs[w++] = *p;
  }
  g->nprocs = w;
  /* explicit pids that exited */
  for (int i = 0; i < g->npids;) {
    if (proc_find(g, g->pids[i])) {
      i++;
      continue;
    }
    cJSON *j = lgg_jbegin("pid_exit");
    lgg_jnum(j, "pid", g->pids[i]);
    lgg_jend(g, j);
    lgu_err("guard: pid %d exited; no longer watched", g->pids[i]);
    g->pids[i] = g->pids[--g->npids];
  }
}

void lgg_gpu_proc_cb(void *arg, int pid, uint64_t bytes) {
  lgg_guard_t *g = arg;
  proc_t *p = proc_find(g, pid);
  if (p) p->gpu += bytes;
}

static int is_ancestor(const lgg_guard_t *g, int pid) {
  for (int i = 0; i < g->nancestors; i++)
    if (g->ancestors[i] == pid) return 1;
  return 0;
}

int lgg_victim_pending(const lgg_guard_t *g, int pid) {
  for (int i = 0; i < g->nvictims; i++)
    if (g->victims[i].pid == pid) return 1;
  return 0;
}

int lgg_candidate(const lgg_guard_t *g, const proc_t *p, uint64_t mask) {
  if (!(p->srcmask & mask)) return 0;
  if (p->pid <= 1 || is_ancestor(g, p->pid) || p->mem <= 0) return 0;
  if (p->adj <= -1000 && !g->cfg.kill_protected) return 0;
  return 1;
}

double lgg_score(const lgg_guard_t *g, const proc_t *p, double t) {
  if (p->hint_t > 0 && t - p->hint_t <= 2 * g->cfg.lv.window_s) return p->hint;
  return p->growth;
}

void lgg_hint_growth(lgg_guard_t *g, int pid, double growth) {
  proc_t *p = proc_find(g, pid);
  if (p) {
    p->hint = growth;
    p->hint_t = lgg_now_mono();
  }
}
