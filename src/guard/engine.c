/* SPDX-License-Identifier: MIT */
/*
 * engine.c - the guard: sources -> levels -> actions, the JSON-lines event log and
 * the counters. One thread calls lgg_tick() every interval.
 *
 * Safety rules (docs/guard.md): the guard only signals single processes of the
 * watched set (never a process group, a whole cgroup or a session), never itself or
 * its ancestors, not processes with oom_score_adj -1000 unless configured, and signals
 * through a pidfd checked against the process's start time (no PID reuse races).
 * Commands run only when an [level] section names the exec action and a command.
 */
#include "guard/guard.h"
#include "guard/guard_impl.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "core/util.h"
#include "output/metrics.h"
#include "leakguard.h"

extern char **environ;

#define MAX_SOURCES 64
#define GROWTH_N 16
enum { SRC_CGROUP = 0, SRC_PIDS, SRC_SYSTEM, SRC_GPU, SRC_GPU_REC /* GPU memory the recorder saw */ };

/* action counters (leakguard_guard_actions_total{action}) */
enum { C_LOG, C_PUBLISH, C_SIGNAL, C_MEMHIGH, C_EXEC, C_KILL, C_SIGKILL, C_NCOUNT };
static const char *const cname[C_NCOUNT] = {"log", "publish", "signal", "memory_high", "exec", "kill", "sigkill"};

typedef struct proc {
  int pid;
  unsigned long long start;  /* start time (clock ticks since boot): identity */
  char comm[32];
  int64_t mem;
  uint64_t gpu;
  double rt[GROWTH_N], rv[GROWTH_N];
  unsigned rn, rhead;
  double growth;             /* bytes/s over the window (RSS/PSS + GPU) */
  double hint, hint_t;       /* recorder suspects */
  uint64_t srcmask;
  int seen;
  int adj;                   /* oom_score_adj */
} proc_t;

typedef struct victim {
  int pid, pidfd;
  double deadline, sent_t;
  char comm[32];
  int sigkilled;
} victim_t;

typedef struct source {
  int kind, alive, version, gpu;
  char *path;
  char name[256];
  lgg_levels_t lv;
  lgs_cg_sample_t cg;
  double usage, limit, psi_full, psi_some;
  uint64_t gpu_used, gpu_total;
  int high_set;              /* memory.high lowered by us */
  uint64_t orig_high;        /* 0: "max" */
  int err;                   /* last read error logged (0: none) */
  uint64_t oom_kill0;        /* oom_kill count when watching started */
  int sampled;
} source_t;

struct lgg_guard {
  lgg_config_t cfg;
  FILE *log;
  int own_log;
  source_t src[MAX_SOURCES];
  int nsrc;
  int *pids;                 /* explicit --pid set */
  int npids, cappids;
  int pids_src;              /* index of the SRC_PIDS source, -1 */
  uint64_t pids_limit;
  double pids_limit_t;
  proc_t *procs;
  int nprocs, capprocs, seen;
  lgg_regions_t *regions;
  double last_scan;
  lgs_nvml_t *nvml;
  int gpu_tried;
  double last_gpu;
  int level, published, ticked;
  double level_since, t0;
  double last_act[LGG_NLEVELS];
  uint64_t counts[C_NCOUNT], level_changes, ticks;
  victim_t victims[16];
  int nvictims;
  pid_t children[16];
  int nchildren;
  int ancestors[32];
  int nancestors;
  uint64_t memtotal;
};

/* ------------------------------------------------------------------ event log */
typedef struct jbuf { char b[2048]; size_t n; } jbuf_t;

static void jraw(jbuf_t *j, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void jraw(jbuf_t *j, const char *fmt, ...) {
  if (j->n >= sizeof j->b) return;
  va_list ap;
  va_start(ap, fmt);
  int k = vsnprintf(j->b + j->n, sizeof j->b - j->n, fmt, ap);
  va_end(ap);
  if (k > 0) j->n += (size_t)k;
  if (j->n > sizeof j->b - 1) j->n = sizeof j->b - 1;
}

static void jstr(jbuf_t *j, const char *key, const char *v) {
  jraw(j, ",\"%s\":\"", key);
  for (const unsigned char *p = (const unsigned char *)v; *p; p++) {
    if (*p == '"' || *p == '\\') jraw(j, "\\%c", *p);
    else if (*p < 0x20) jraw(j, "\\u%04x", *p);
    else jraw(j, "%c", *p);
  }
  jraw(j, "\"");
}

static void jnum(jbuf_t *j, const char *key, double v) {
  if (!isfinite(v)) jraw(j, ",\"%s\":null", key);
  else if (v == floor(v) && fabs(v) < 1e15) jraw(j, ",\"%s\":%.0f", key, v);
  else jraw(j, ",\"%s\":%.6g", key, v);
}

static void jbegin(lgg_guard_t *g, jbuf_t *j, const char *event) {
  j->n = 0;
  uint64_t w = lgu_wall_ns();
  time_t s = (time_t)(w / 1000000000ULL);
  struct tm tm;
  gmtime_r(&s, &tm);
  char ts[40];
  strftime(ts, sizeof ts, "%Y-%m-%dT%H:%M:%S", &tm);
  jraw(j, "{\"ts\":\"%s.%03uZ\"", ts, (unsigned)(w / 1000000ULL % 1000));
  jstr(j, "event", event);
  (void)g;
}

static void jend(lgg_guard_t *g, jbuf_t *j) {
  jraw(j, "}");
  if (!g->log) return;
  fprintf(g->log, "%s\n", j->b);
  fflush(g->log);
}

/* ------------------------------------------------------------------ create / watch */
static double now_mono(void) { return (double)lgu_now_ns() / 1e9; }

int lgg_new(const lgg_options_t *o, lgg_guard_t **out, char *why, size_t whylen) {
  lgg_guard_t *g = calloc(1, sizeof *g);
  if (!g) {
    snprintf(why, whylen, "out of memory");
    return -ENOMEM;
  }
  lgg_config_defaults(&g->cfg);
  if (o && o->config_path) {
    int rc = lgg_config_load(&g->cfg, o->config_path, why, whylen);
    if (rc) {
      lgg_config_free(&g->cfg);
      free(g);
      return rc;
    }
  }
  if (o && o->dry_run) g->cfg.dry_run = 1;
  if (o && o->log) g->log = o->log;
  else if (g->cfg.log_path) {
    if (!strcmp(g->cfg.log_path, "-")) g->log = stdout;
    else {
      g->log = fopen(g->cfg.log_path, "ae");
      if (!g->log) {
        int e = errno;
        snprintf(why, whylen, "event log %s: %s", g->cfg.log_path, strerror(e));
        lgg_config_free(&g->cfg);
        free(g);
        return -e;
      }
      g->own_log = 1;
    }
  }
  g->regions = lgg_regions_new();
  if (!g->regions) {
    snprintf(why, whylen, "out of memory");
    lgg_free(g);
    return -ENOMEM;
  }
  g->pids_src = -1;
  g->level_since = g->t0 = now_mono();
  g->last_scan = -1e9;
  g->last_gpu = -1e9;
  for (int k = 0; k < LGG_NLEVELS; k++) g->last_act[k] = -1e9;
  uint64_t avail;
  if (lgs_meminfo(&g->memtotal, &avail) != 0) g->memtotal = 1ULL << 40;
  /* our ancestors are never victims */
  for (int pid = getpid(); pid > 1 && g->nancestors < 32;) {
    g->ancestors[g->nancestors++] = pid;
    char path[64], buf[1024];
    snprintf(path, sizeof path, "/proc/%d/stat", pid);
    if (lgu_read_file(path, buf, sizeof buf) <= 0) break;
    const char *p = strrchr(buf, ')');
    int ppid = 0;
    if (!p || sscanf(p + 2, "%*c %d", &ppid) != 1) break;
    pid = ppid;
  }
  *out = g;
  return 0;
}

void lgg_default_log(lgg_guard_t *g, FILE *log) {
  if (!g->log) g->log = log;
}

static source_t *add_source(lgg_guard_t *g, int kind, const char *name) {
  if (g->nsrc >= MAX_SOURCES) return NULL;
  source_t *s = &g->src[g->nsrc++];
  memset(s, 0, sizeof *s);
  s->kind = kind;
  s->alive = 1;
  snprintf(s->name, sizeof s->name, "%s", name);
  lgg_levels_init(&s->lv, now_mono());
  return s;
}

static void event_watch(lgg_guard_t *g, const source_t *s) {
  jbuf_t j;
  jbegin(g, &j, "watch");
  jstr(&j, "source", s->name);
  if (s->kind == SRC_CGROUP) jnum(&j, "cgroup_version", s->version);
  jend(g, &j);
}

int lgg_watch_pid(lgg_guard_t *g, int pid) {
  if (pid <= 0 || lgs_proc_mem(pid, LGS_MEM_RSS) < 0) return -ESRCH;
  for (int i = 0; i < g->npids; i++)
    if (g->pids[i] == pid) return 0;
  if (g->npids == g->cappids) {
    int cap = g->cappids ? 2 * g->cappids : 16;
    int *a = realloc(g->pids, (size_t)cap * sizeof *a);
    if (!a) return -ENOMEM;
    g->pids = a;
    g->cappids = cap;
  }
  g->pids[g->npids++] = pid;
  if (g->pids_src < 0) {
    source_t *s = add_source(g, SRC_PIDS, "pids");
    if (!s) return -ENOSPC;
    g->pids_src = (int)(s - g->src);
    event_watch(g, s);
  }
  g->src[g->pids_src].alive = 1;
  jbuf_t j;
  jbegin(g, &j, "watch_pid");
  jnum(&j, "pid", pid);
  jend(g, &j);
  return 0;
}

int lgg_watch_cgroup(lgg_guard_t *g, const char *path, char *why, size_t whylen) {
  int v = lgs_cgroup_version(path);
  if (v == -ENOENT) {
    snprintf(why, whylen, "cgroup %s: no such directory", path);
    return v;
  }
  if (v < 0) {
    snprintf(why, whylen, "cgroup %s: not a memory cgroup (no memory.current or memory.usage_in_bytes)", path);
    return v;
  }
  lgs_cg_sample_t cs;
  int rc = lgs_cgroup_read(path, v, &cs);
  if (rc) {
    snprintf(why, whylen, "cgroup %s: cannot read: %s", path, strerror(-rc));
    return rc;
  }
  char name[256];
  snprintf(name, sizeof name, "cgroup:%s", path);
  source_t *s = add_source(g, SRC_CGROUP, name);
  if (!s || !(s->path = strdup(path))) {
    snprintf(why, whylen, "too many sources");
    return -ENOSPC;
  }
  s->version = v;
  s->oom_kill0 = cs.oom_kill;
  event_watch(g, s);
  return 0;
}

void lgg_watch_system(lgg_guard_t *g) {
  for (int i = 0; i < g->nsrc; i++)
    if (g->src[i].kind == SRC_SYSTEM) return;
  source_t *s = add_source(g, SRC_SYSTEM, "system");
  if (s) event_watch(g, s);
}

int lgg_level(const lgg_guard_t *g) { return g->level; }
double lgg_tick_interval(const lgg_guard_t *g) { return g->cfg.interval_s; }

int lgg_nsources(const lgg_guard_t *g) {
  int n = 0;
  for (int i = 0; i < g->nsrc; i++) n += g->src[i].alive;
  return n;
}

/* ------------------------------------------------------------------ processes */
static int proc_cmp(const void *a, const void *b) {
  return ((const proc_t *)a)->pid - ((const proc_t *)b)->pid;
}

static proc_t *proc_find(lgg_guard_t *g, int pid) {
  proc_t key = {.pid = pid};
  if (!g->nprocs) return NULL; /* bsearch on a NULL array is undefined even when empty */
  return bsearch(&key, g->procs, (size_t)g->nprocs, sizeof *g->procs, proc_cmp);
}

static int proc_identity(int pid, unsigned long long *start, char *comm, size_t commlen) {
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
      if ((*added)[i].pid == pid) { p = &(*added)[i]; break; }
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

static void event_source_lost(lgg_guard_t *g, source_t *s, const char *reason) {
  s->alive = 0;
  jbuf_t j;
  jbegin(g, &j, "source_lost");
  jstr(&j, "source", s->name);
  jstr(&j, "reason", reason);
  jend(g, &j);
  lgu_err("guard: %s: %s; still watching %d source%s", s->name, reason, lgg_nsources(g),
          lgg_nsources(g) == 1 ? "" : "s");
}

static void refresh_procs(lgg_guard_t *g, double t) {
  g->seen++;
  proc_t *added = NULL;
  int nadded = 0, capadded = 0;
  for (int i = 0; i < g->npids; i++) proc_mark(g, g->pids[i], g->pids_src, &added, &nadded, &capadded);
  for (int si = 0; si < g->nsrc; si++) {
    source_t *s = &g->src[si];
    if (!s->alive) continue;
    if (s->kind == SRC_CGROUP) {
      int *pids = NULL;
      long n = lgs_cgroup_pids(s->path, &pids);
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
    if (proc_identity(p->pid, &p->start, p->comm, sizeof p->comm) != 0) continue;
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
    int64_t m = lgs_proc_mem(p->pid, g->cfg.memory);
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
    jbuf_t j;
    jbegin(g, &j, "pid_exit");
    jnum(&j, "pid", g->pids[i]);
    jend(g, &j);
    lgu_err("guard: pid %d exited; no longer watched", g->pids[i]);
    g->pids[i] = g->pids[--g->npids];
  }
  if (g->pids_src >= 0 && g->src[g->pids_src].alive && !g->npids)
    event_source_lost(g, &g->src[g->pids_src], "every watched pid exited");
}

static void gpu_proc_cb(void *arg, int pid, uint64_t bytes) {
  lgg_guard_t *g = arg;
  proc_t *p = proc_find(g, pid);
  if (p) p->gpu += bytes;
}

/* ------------------------------------------------------------------ sampling */
static void read_error(lgg_guard_t *g, source_t *s, int err) {
  if (s->err == err) return;
  s->err = err;
  jbuf_t j;
  jbegin(g, &j, "read_error");
  jstr(&j, "source", s->name);
  jstr(&j, "error", strerror(err));
  jend(g, &j);
  lgu_err("guard: %s: cannot read: %s (keeps trying)", s->name, strerror(err));
}

static int sample(lgg_guard_t *g, source_t *s, double t) {
  char buf[512];
  if (s->kind == SRC_CGROUP) {
    int rc = lgs_cgroup_read(s->path, s->version, &s->cg);
    if (rc == -ENOENT || rc == -ENODEV) {
      event_source_lost(g, s, "cgroup removed");
      return -1;
    }
    if (rc) {
      read_error(g, s, -rc);
      return -1;
    }
    s->usage = (double)(s->cg.working_set ? s->cg.working_set : s->cg.usage);
    s->limit = (double)(s->cg.limit && s->cg.limit < g->memtotal ? s->cg.limit : g->memtotal);
    s->psi_full = s->cg.psi_full10;
    s->psi_some = s->cg.psi_some10;
  } else if (s->kind == SRC_PIDS) {
    double u = 0;
    for (int i = 0; i < g->nprocs; i++)
      if (g->procs[i].srcmask & (1ULL << (s - g->src))) u += (double)g->procs[i].mem + (double)g->procs[i].gpu;
    s->usage = u;
    if (!g->pids_limit || t - g->pids_limit_t >= 5) { /* the pids' cgroup limit, re-read now and then */
      g->pids_limit_t = t;
      uint64_t lim = 0;
      for (int i = 0; i < g->npids; i++) {
        uint64_t l = lgs_proc_cgroup_limit(g->pids[i]);
        if (l && (!lim || l < lim)) lim = l;
      }
      g->pids_limit = lim && lim < g->memtotal ? lim : g->memtotal;
    }
    s->limit = (double)(g->cfg.limit ? g->cfg.limit : g->pids_limit);
    s->psi_full = s->psi_some = -1;
  } else if (s->kind == SRC_SYSTEM) {
    uint64_t total, avail;
    int rc = lgs_meminfo(&total, &avail);
    if (rc) {
      read_error(g, s, -rc);
      return -1;
    }
    s->usage = (double)(total - (avail < total ? avail : total));
    s->limit = (double)total;
    s->psi_full = s->psi_some = -1;
    if (lgu_read_file("/proc/pressure/memory", buf, sizeof buf) > 0)
      lgs_psi_parse(buf, &s->psi_some, &s->psi_full);
  } else if (s->kind == SRC_GPU_REC) {
    /* no NVML: the recorded processes' device memory against the device's */
    if (lgg_regions_gpu(g->regions, s->gpu, &s->gpu_used, &s->gpu_total) != 0 || !s->gpu_total) return -1;
    s->usage = (double)s->gpu_used;
    s->limit = (double)s->gpu_total;
    s->psi_full = s->psi_some = -1;
  } else if (s->kind == SRC_GPU) {
    if (lgs_nvml_mem(g->nvml, s->gpu, &s->gpu_used, &s->gpu_total) != 0 || !s->gpu_total) {
      read_error(g, s, EIO);
      return -1;
    }
    s->usage = (double)s->gpu_used;
    s->limit = (double)s->gpu_total;
    s->psi_full = s->psi_some = -1;
  }
  if (s->err) { /* recovered */
    jbuf_t j;
    jbegin(g, &j, "read_ok");
    jstr(&j, "source", s->name);
    jend(g, &j);
    s->err = 0;
  }
  s->sampled = 1;
  lgg_levels_step(&s->lv, &g->cfg.lv, t, s->usage, s->limit, s->psi_full);
  return 0;
}

/* ------------------------------------------------------------------ actions */
static int pidfd_open_checked(const proc_t *p) {
  int fd = (int)syscall(SYS_pidfd_open, p->pid, 0);
  if (fd < 0) return errno == ENOSYS ? -2 : -1;
  unsigned long long st;
  if (proc_identity(p->pid, &st, NULL, 0) != 0 || st != p->start) { /* exited or reused */
    close(fd);
    return -1;
  }
  return fd;
}

static int send_sig(int pidfd, int pid, int sig) {
  if (pidfd >= 0) return (int)syscall(SYS_pidfd_send_signal, pidfd, sig, NULL, 0) == 0 ? 0 : -errno;
  return kill(pid, sig) == 0 ? 0 : -errno;
}

static int is_ancestor(const lgg_guard_t *g, int pid) {
  for (int i = 0; i < g->nancestors; i++)
    if (g->ancestors[i] == pid) return 1;
  return 0;
}

static int victim_pending(const lgg_guard_t *g, int pid) {
  for (int i = 0; i < g->nvictims; i++)
    if (g->victims[i].pid == pid) return 1;
  return 0;
}

/* Sources at level >= lvl. */
static uint64_t sources_at(const lgg_guard_t *g, int lvl) {
  uint64_t m = 0;
  for (int i = 0; i < g->nsrc; i++)
    if (g->src[i].alive && g->src[i].lv.level >= lvl) m |= 1ULL << i;
  return m;
}

static int candidate(const lgg_guard_t *g, const proc_t *p, uint64_t mask) {
  if (!(p->srcmask & mask)) return 0;
  if (p->pid <= 1 || is_ancestor(g, p->pid) || p->mem <= 0) return 0;
  if (p->adj <= -1000 && !g->cfg.kill_protected) return 0;
  return 1;
}

static double score(const lgg_guard_t *g, const proc_t *p, double t) {
  if (p->hint_t > 0 && t - p->hint_t <= 2 * g->cfg.lv.window_s) return p->hint;
  return p->growth;
}

static const source_t *worst(const lgg_guard_t *g) {
  const source_t *w = NULL;
  for (int i = 0; i < g->nsrc; i++) {
    const source_t *s = &g->src[i];
    if (!s->alive || !s->sampled) continue;
    if (!w || s->lv.level > w->lv.level || (s->lv.level == w->lv.level && s->lv.ratio > w->lv.ratio)) w = s;
  }
  return w;
}

static void action_event(lgg_guard_t *g, jbuf_t *j, const char *action, int lvl) {
  jbegin(g, j, "action");
  jstr(j, "action", action);
  jstr(j, "level", lg_level_name((lg_level_t)lvl));
  if (g->cfg.dry_run) jraw(j, ",\"dry_run\":true");
}

static void do_kill(lgg_guard_t *g, int lvl, double t) {
  uint64_t mask = sources_at(g, lvl);
  const proc_t *best = NULL;
  double bs = 0;
  for (int i = 0; i < g->nprocs; i++) {
    const proc_t *p = &g->procs[i];
    if (!candidate(g, p, mask) || victim_pending(g, p->pid)) continue;
    double sc = score(g, p, t);
    if (sc >= g->cfg.kill_min_growth && (!best || sc > bs)) {
      best = p;
      bs = sc;
    }
  }
  const char *why = "growth";
  if (!best && g->cfg.kill_fallback == LGG_FB_LARGEST) {
    for (int i = 0; i < g->nprocs; i++) {
      const proc_t *p = &g->procs[i];
      if (!candidate(g, p, mask) || victim_pending(g, p->pid)) continue;
      if (!best || p->mem > best->mem) best = p;
    }
    why = "largest";
  }
  jbuf_t j;
  action_event(g, &j, "kill", lvl);
  if (!best) {
    jstr(&j, "result", g->nvictims ? "waiting for the last victim to exit" : "no candidate in the watched set");
    jend(g, &j);
    return;
  }
  jnum(&j, "pid", best->pid);
  jstr(&j, "comm", best->comm);
  jstr(&j, "chosen_by", best->hint_t > 0 && t - best->hint_t <= 2 * g->cfg.lv.window_s ? "recorder" : why);
  jnum(&j, "growth_bps", score(g, best, t));
  jnum(&j, "mem_bytes", (double)best->mem);
  if (best->gpu) jnum(&j, "gpu_bytes", (double)best->gpu);
  jstr(&j, "signal", "SIGTERM");
  jnum(&j, "grace_s", g->cfg.kill_grace_s);
  g->counts[C_KILL]++;
  if (g->cfg.dry_run) {
    jstr(&j, "result", "dry-run");
    jend(g, &j);
    lgu_err("guard: would terminate pid %d (%s), growing %.1f MiB/s (dry run)", best->pid, best->comm,
            score(g, best, t) / 1048576);
    return;
  }
  int fd = pidfd_open_checked(best);
  int rc = fd == -1 ? -ESRCH : send_sig(fd, best->pid, SIGTERM);
  jstr(&j, "result", rc ? strerror(-rc) : "sent");
  jend(g, &j);
  if (rc) {
    if (fd >= 0) close(fd);
    return;
  }
  lgu_err("guard: terminating pid %d (%s), growing %.1f MiB/s at %s", best->pid, best->comm,
          score(g, best, t) / 1048576, lg_level_name((lg_level_t)lvl));
  if (g->nvictims < 16) {
    victim_t *v = &g->victims[g->nvictims++];
    v->pid = best->pid;
    v->pidfd = fd;
    v->sent_t = t;
    v->deadline = t + g->cfg.kill_grace_s;
    v->sigkilled = 0;
    snprintf(v->comm, sizeof v->comm, "%s", best->comm);
  } else if (fd >= 0) {
    close(fd);
  }
}

static void check_victims(lgg_guard_t *g, double t) {
  for (int i = 0; i < g->nvictims;) {
    victim_t *v = &g->victims[i];
    int exited;
    if (v->pidfd >= 0) {
      struct pollfd pf = {.fd = v->pidfd, .events = POLLIN};
      exited = poll(&pf, 1, 0) > 0;
    } else {
      exited = kill(v->pid, 0) != 0 && errno == ESRCH;
    }
    if (exited) {
      jbuf_t j;
      jbegin(g, &j, "victim_exit");
      jnum(&j, "pid", v->pid);
      jstr(&j, "comm", v->comm);
      jnum(&j, "after_s", t - v->sent_t);
      jend(g, &j);
      if (v->pidfd >= 0) close(v->pidfd);
      g->victims[i] = g->victims[--g->nvictims];
      continue;
    }
    if (!v->sigkilled && t >= v->deadline) {
      int rc = send_sig(v->pidfd, v->pid, SIGKILL);
      v->sigkilled = 1;
      g->counts[C_SIGKILL]++;
      jbuf_t j;
      action_event(g, &j, "sigkill", g->level);
      jnum(&j, "pid", v->pid);
      jstr(&j, "comm", v->comm);
      jstr(&j, "signal", "SIGKILL");
      jstr(&j, "result", rc ? strerror(-rc) : "sent");
      jend(g, &j);
    }
    if (v->sigkilled && t >= v->deadline + 10) { /* unkillable (D state): stop waiting */
      if (v->pidfd >= 0) close(v->pidfd);
      g->victims[i] = g->victims[--g->nvictims];
      continue;
    }
    i++;
  }
}

static void do_signal(lgg_guard_t *g, int lvl, double t) {
  const lgg_actions_cfg_t *a = &g->cfg.act[lvl];
  uint64_t mask = sources_at(g, lvl);
  char sn[16];
  lgg_signal_name(a->signal, sn, sizeof sn);
  const proc_t *top = NULL;
  if (a->signal_target == LGG_T_TOP) {
    for (int i = 0; i < g->nprocs; i++)
      if (candidate(g, &g->procs[i], mask) && (!top || score(g, &g->procs[i], t) > score(g, top, t))) top = &g->procs[i];
  }
  int n = 0;
  for (int i = 0; i < g->nprocs; i++) {
    const proc_t *p = &g->procs[i];
    if (top ? p != top : !candidate(g, p, mask)) continue;
    jbuf_t j;
    action_event(g, &j, "signal", lvl);
    jnum(&j, "pid", p->pid);
    jstr(&j, "comm", p->comm);
    jstr(&j, "signal", sn);
    g->counts[C_SIGNAL]++;
    n++;
    if (g->cfg.dry_run) {
      jstr(&j, "result", "dry-run");
    } else {
      int fd = pidfd_open_checked(p);
      int rc = fd == -1 ? -ESRCH : send_sig(fd, p->pid, a->signal);
      if (fd >= 0) close(fd);
      jstr(&j, "result", rc ? strerror(-rc) : "sent");
    }
    jend(g, &j);
  }
  if (!n) {
    jbuf_t j;
    action_event(g, &j, "signal", lvl);
    jstr(&j, "signal", sn);
    jstr(&j, "result", "no process in the watched set");
    jend(g, &j);
  }
}

static int write_high(const source_t *s, uint64_t v) {
  char path[4200], val[32];
  snprintf(path, sizeof path, "%s/memory.high", s->path);
  if (v) snprintf(val, sizeof val, "%llu", (unsigned long long)v);
  else snprintf(val, sizeof val, "max");
  int fd = open(path, O_WRONLY | O_CLOEXEC);
  if (fd < 0) return -errno;
  ssize_t k = write(fd, val, strlen(val));
  int e = k < 0 ? -errno : 0;
  close(fd);
  return e;
}

static void do_memhigh(lgg_guard_t *g, int lvl) {
  const lgg_actions_cfg_t *a = &g->cfg.act[lvl];
  for (int i = 0; i < g->nsrc; i++) {
    source_t *s = &g->src[i];
    if (!s->alive || s->kind != SRC_CGROUP || s->lv.level < lvl) continue;
    jbuf_t j;
    action_event(g, &j, "memory_high", lvl);
    jstr(&j, "source", s->name);
    g->counts[C_MEMHIGH]++;
    if (s->version != 2) {
      jstr(&j, "result", "unsupported: cgroup v1 has no memory.high");
      jend(g, &j);
      continue;
    }
    uint64_t v = (uint64_t)(a->memory_high * s->limit);
    jnum(&j, "memory_high", (double)v);
    if (g->cfg.dry_run) {
      jstr(&j, "result", "dry-run");
    } else {
      if (!s->high_set) s->orig_high = s->cg.high;
      int rc = write_high(s, v);
      if (!rc) s->high_set = 1;
      jstr(&j, "result", rc ? strerror(-rc) : "set");
    }
    jend(g, &j);
  }
}

static void restore_high(lgg_guard_t *g, int lvl) {
  for (int i = 0; i < g->nsrc; i++) {
    source_t *s = &g->src[i];
    if (!s->high_set || !s->alive) continue;
    int keep = 0;
    for (int k = 1; k <= lvl; k++) keep |= (g->cfg.act[k].mask & LGG_A_MEMHIGH) != 0;
    if (keep) continue;
    int rc = write_high(s, s->orig_high);
    s->high_set = 0;
    jbuf_t j;
    action_event(g, &j, "memory_high_restore", lvl);
    jstr(&j, "source", s->name);
    jnum(&j, "memory_high", (double)s->orig_high);
    jstr(&j, "result", rc ? strerror(-rc) : "restored");
    jend(g, &j);
  }
}

static void do_exec(lgg_guard_t *g, int lvl, const source_t *w) {
  const lgg_actions_cfg_t *a = &g->cfg.act[lvl];
  jbuf_t j;
  action_event(g, &j, "exec", lvl);
  jstr(&j, "command", a->command);
  g->counts[C_EXEC]++;
  if (g->cfg.dry_run) {
    jstr(&j, "result", "dry-run");
    jend(g, &j);
    return;
  }
  /* environment: ours plus LEAKGUARD_LEVEL, _SOURCE, _USAGE, _LIMIT */
  size_t ne = 0;
  while (environ[ne]) ne++;
  char **env = calloc(ne + 5, sizeof *env);
  char e1[64], e2[320], e3[64], e4[64];
  snprintf(e1, sizeof e1, "LEAKGUARD_LEVEL=%s", lg_level_name((lg_level_t)lvl));
  snprintf(e2, sizeof e2, "LEAKGUARD_SOURCE=%s", w ? w->name : "");
  snprintf(e3, sizeof e3, "LEAKGUARD_USAGE=%.0f", w ? w->usage : 0);
  snprintf(e4, sizeof e4, "LEAKGUARD_LIMIT=%.0f", w ? w->limit : 0);
  pid_t pid = -1;
  int rc = -ENOMEM;
  if (env) {
    size_t k = 0;
    for (size_t i = 0; i < ne; i++)
      if (strncmp(environ[i], "LEAKGUARD_", 10)) env[k++] = environ[i];
    env[k++] = e1;
    env[k++] = e2;
    env[k++] = e3;
    env[k++] = e4;
    char *argv[] = {"/bin/sh", "-c", a->command, NULL};
    rc = -posix_spawn(&pid, "/bin/sh", NULL, NULL, argv, env);
    free(env);
  }
  if (!rc) jnum(&j, "pid", pid);
  jstr(&j, "result", rc ? strerror(-rc) : "started");
  jend(g, &j);
  if (!rc) {
    if (g->nchildren < 16) g->children[g->nchildren++] = pid;
    else waitpid(pid, NULL, 0);
  }
}

static void reap_children(lgg_guard_t *g) {
  for (int i = 0; i < g->nchildren;) {
    int st;
    pid_t r = waitpid(g->children[i], &st, WNOHANG);
    if (r == g->children[i] || (r < 0 && errno == ECHILD)) {
      if (r > 0) {
        jbuf_t j;
        jbegin(g, &j, "exec_exit");
        jnum(&j, "pid", r);
        if (WIFEXITED(st)) jnum(&j, "status", WEXITSTATUS(st));
        else if (WIFSIGNALED(st)) jnum(&j, "signal", WTERMSIG(st));
        jend(g, &j);
      }
      g->children[i] = g->children[--g->nchildren];
    } else {
      i++;
    }
  }
}

static void do_publish(lgg_guard_t *g, int lvl, const source_t *w) {
  uint64_t evict = 0;
  if (lvl == LGG_NLEVELS - 1 && w) {
    double target = (g->cfg.lv.thr[3] - g->cfg.lv.hysteresis) * w->limit;
    if (w->usage > target) evict = (uint64_t)(w->usage - target);
  }
  jbuf_t j;
  action_event(g, &j, "publish", lvl);
  jstr(&j, "published_level", lg_level_name((lg_level_t)g->level));
  if (evict) jnum(&j, "evict_bytes", (double)evict);
  g->counts[C_PUBLISH]++;
  if (g->cfg.dry_run) {
    jnum(&j, "regions", lgg_regions_count(g->regions));
    jstr(&j, "result", "dry-run");
  } else {
    jnum(&j, "regions", lgg_regions_publish(g->regions, g->level, evict));
    g->published = g->level;
    jstr(&j, "result", "published");
  }
  jend(g, &j);
}

static void run_actions(lgg_guard_t *g, int lvl, double t, int repeat) {
  const lgg_actions_cfg_t *a = &g->cfg.act[lvl];
  const source_t *w = worst(g);
  g->last_act[lvl] = t;
  if ((a->mask & LGG_A_LOG) && !repeat) {
    g->counts[C_LOG]++;
    char b1[32], b2[32], b3[32];
    if (w)
      lgu_err("guard: level %s: %s at %s of %s (%.0f%%), trend %s/s, time to limit %s", lg_level_name((lg_level_t)lvl), w->name,
              lgu_fmt_bytes(b1, sizeof b1, w->usage), lgu_fmt_bytes(b2, sizeof b2, w->limit), w->lv.ratio * 100,
              lgu_fmt_bytes(b3, sizeof b3, w->lv.slope), w->lv.tto_s < 0 ? "never" : lgu_fmt_duration(b1, sizeof b1, w->lv.tto_s));
  }
  if (a->mask & LGG_A_PUBLISH) do_publish(g, lvl, w);
  if (a->mask & LGG_A_MEMHIGH) do_memhigh(g, lvl);
  if (a->mask & LGG_A_SIGNAL) do_signal(g, lvl, t);
  if ((a->mask & LGG_A_EXEC) && a->command) do_exec(g, lvl, w);
  if (a->mask & LGG_A_KILL) do_kill(g, lvl, t);
}

/* ------------------------------------------------------------------ tick */
static int published_by(const lgg_guard_t *g, int lvl) {
  for (int k = 1; k <= lvl && k < LGG_NLEVELS; k++)
    if (g->cfg.act[k].mask & LGG_A_PUBLISH) return 1;
  return 0;
}

/* Without NVML, every GPU that recorded processes use is a source of its own, from
 * what the recorder saw at the CUDA driver API (docs/cuda.md, docs/guard.md). */
static void gpu_rec_sources(lgg_guard_t *g) {
  int n = lgg_regions_gpu_count(g->regions);
  for (int d = 0; d < n; d++) {
    int have = 0;
    for (int i = 0; i < g->nsrc; i++) have |= g->src[i].kind == SRC_GPU_REC && g->src[i].gpu == d;
    if (have) continue;
    char name[32];
    snprintf(name, sizeof name, "gpu%d-recorded", d);
    source_t *s = add_source(g, SRC_GPU_REC, name);
    if (!s) return;
    s->gpu = d;
    event_watch(g, s);
  }
}

int lgg_tick(lgg_guard_t *g, double t) {
  g->ticks++;
  if (!g->ticked) {
    g->ticked = 1;
    if (!g->nsrc) lgg_watch_system(g);
    if (g->cfg.gpu != 0 && !g->gpu_tried) {
      g->gpu_tried = 1;
      char why[320];
      g->nvml = lgs_nvml_open(why, sizeof why);
      if (!g->nvml) {
        jbuf_t j;
        jbegin(g, &j, "source_off");
        jstr(&j, "source", "gpu");
        jstr(&j, "reason", why);
        jend(g, &j);
        lgu_err("guard: %s", why);
      } else {
        for (int i = 0; i < lgs_nvml_count(g->nvml); i++) {
          char name[32];
          snprintf(name, sizeof name, "gpu%d", i);
          source_t *s = add_source(g, SRC_GPU, name);
          if (!s) break;
          s->gpu = i;
          event_watch(g, s);
        }
      }
    }
  }
  refresh_procs(g, t);
  /* recorder regions of the watched set (system mode: of every process; they join
   * the watched set at the next refresh) */
  int has_system = 0;
  for (int i = 0; i < g->nsrc; i++) has_system |= g->src[i].kind == SRC_SYSTEM && g->src[i].alive;
  if (t - g->last_scan >= g->cfg.scan_interval_s) {
    g->last_scan = t;
    if (has_system) {
      lgg_regions_scan(g->regions, NULL, -1, g->published);
    } else {
      int *pids = malloc(((size_t)g->nprocs + 1) * sizeof *pids);
      if (pids) {
        for (int i = 0; i < g->nprocs; i++) pids[i] = g->procs[i].pid;
        lgg_regions_scan(g->regions, pids, g->nprocs, g->published);
        free(pids);
      }
    }
  }
  if (!g->nvml && g->cfg.gpu != 0) gpu_rec_sources(g);
  if (g->nvml && t - g->last_gpu >= g->cfg.gpu_interval_s) {
    g->last_gpu = t;
    for (int i = 0; i < g->nprocs; i++) g->procs[i].gpu = 0;
    for (int i = 0; i < lgs_nvml_count(g->nvml); i++) lgs_nvml_procs(g->nvml, i, gpu_proc_cb, g);
  }
  int lvl = 0, any = 0;
  for (int i = 0; i < g->nsrc; i++) {
    source_t *s = &g->src[i];
    if (!s->alive) continue;
    if (sample(g, s, t) == 0 && s->lv.level > lvl) lvl = s->lv.level;
    any |= s->alive;
  }
  check_victims(g, t);
  reap_children(g);
  if (!any) return -ENOENT;
  if (lvl != g->level) {
    const source_t *w = worst(g);
    int old = g->level;
    g->level = lvl;
    g->level_since = t;
    g->level_changes++;
    jbuf_t j;
    jbegin(g, &j, "level");
    jstr(&j, "from", lg_level_name((lg_level_t)old));
    jstr(&j, "to", lg_level_name((lg_level_t)lvl));
    if (w) {
      jstr(&j, "source", w->name);
      jstr(&j, "reason", lvl > old ? lgg_reason_name(w->lv.reason) : "recover");
      jnum(&j, "usage_bytes", w->usage);
      jnum(&j, "limit_bytes", w->limit);
      jnum(&j, "ratio", round(w->lv.ratio * 10000) / 10000);
      jnum(&j, "trend_bps", round(w->lv.slope));
      jnum(&j, "tto_s", w->lv.tto_s < 0 ? NAN : round(w->lv.tto_s * 100) / 100);
      if (w->psi_full >= 0) jnum(&j, "psi_full_avg10", w->psi_full);
    }
    if (g->cfg.dry_run) jraw(&j, ",\"dry_run\":true");
    jend(g, &j);
    if (lvl > old) {
      for (int k = old + 1; k < lvl; k++) g->last_act[k] = t; /* skipped levels: only the top acts */
      run_actions(g, lvl, t, 0);
    } else {
      restore_high(g, lvl);
      if (published_by(g, old)) do_publish(g, lvl, w); /* subscribers learn it is over */
      if (lvl > 0) {
        lgu_err("guard: level %s (recovered; %s at %.0f%%)", lg_level_name((lg_level_t)lvl), w ? w->name : "", w ? w->lv.ratio * 100 : 0);
      } else {
        lgu_err("guard: level normal");
      }
    }
  } else if (lvl > 0 && g->cfg.act[lvl].repeat_s > 0 && t - g->last_act[lvl] >= g->cfg.act[lvl].repeat_s) {
    /* still there: repeat, but only while a source's current sample still asks for it */
    int still = 0;
    for (int i = 0; i < g->nsrc; i++) still |= g->src[i].alive && g->src[i].lv.target >= lvl;
    if (still) run_actions(g, lvl, t, 1);
  }
  return g->level;
}

void lgg_hint_growth(lgg_guard_t *g, int pid, double growth) {
  proc_t *p = proc_find(g, pid);
  if (p) {
    p->hint = growth;
    p->hint_t = now_mono();
  }
}

/* ------------------------------------------------------------------ export */
static void num_label(char *buf, size_t n, int v) { snprintf(buf, n, "%d", v); }

void lgg_export(lgg_guard_t *g, lgx_registry_t *r) {
  if (!r) return;
  lgx_declare(r, "leakguard_guard_level", LGX_GAUGE, "Guard level: 0 normal, 1 warn, 2 breaker, 3 emergency");
  lgx_declare(r, "leakguard_guard_source_level", LGX_GAUGE, "Level of each watched source");
  lgx_declare(r, "leakguard_guard_actions_total", LGX_COUNTER, "Guard actions taken (or logged in dry-run), by action");
  lgx_declare(r, "leakguard_guard_level_changes_total", LGX_COUNTER, "Guard level changes");
  lgx_declare(r, "leakguard_guard_watched_processes", LGX_GAUGE, "Processes in the guard's watched set");
  lgx_declare(r, "leakguard_time_to_oom_seconds", LGX_GAUGE, "Projected seconds until the source reaches its limit (+Inf: not growing)");
  lgx_declare(r, "leakguard_cgroup_memory_bytes", LGX_GAUGE, "Memory cgroup values, by kind");
  lgx_declare(r, "leakguard_cgroup_oom_kills_total", LGX_COUNTER, "OOM kills in the cgroup since the guard started watching");
  lgx_declare(r, "leakguard_memory_pressure_avg10", LGX_GAUGE, "PSI memory pressure (percent of time stalled, 10s average)");
  lgx_declare(r, "leakguard_gpu_memory_used_bytes", LGX_GAUGE,
              "GPU memory in use, per device (NVML; without it, what the recorder saw)");
  lgx_declare(r, "leakguard_gpu_memory_total_bytes", LGX_GAUGE, "GPU memory, per device");
  lgx_set(r, "leakguard_guard_level", NULL, g->level);
  for (int c = 0; c < C_NCOUNT; c++) {
    const char *l[] = {"action", cname[c], NULL};
    lgx_set(r, "leakguard_guard_actions_total", l, (double)g->counts[c]);
  }
  lgx_set(r, "leakguard_guard_level_changes_total", NULL, (double)g->level_changes);
  lgx_set(r, "leakguard_guard_watched_processes", NULL, g->nprocs);
  lgx_clear(r, "leakguard_guard_source_level");
  lgx_clear(r, "leakguard_cgroup_memory_bytes");
  for (int i = 0; i < g->nsrc; i++) {
    const source_t *s = &g->src[i];
    if (!s->alive || !s->sampled) continue;
    const char *sl[] = {"source", s->name, NULL};
    lgx_set(r, "leakguard_guard_source_level", sl, s->lv.level);
    lgx_set(r, "leakguard_time_to_oom_seconds", sl, s->lv.tto_s < 0 ? INFINITY : s->lv.tto_s);
    if (s->kind == SRC_CGROUP) {
      static const char *const kinds[] = {"usage", "limit", "high", "working_set", "anon", "file"};
      const uint64_t v[] = {s->cg.usage, s->cg.limit, s->cg.high, s->cg.working_set, s->cg.anon, s->cg.file};
      for (int k = 0; k < 6; k++) {
        if ((k == 1 || k == 2) && !v[k]) continue; /* no limit / high set */
        const char *l[] = {"cgroup", s->path, "kind", kinds[k], NULL};
        lgx_set(r, "leakguard_cgroup_memory_bytes", l, (double)v[k]);
      }
      const char *l[] = {"cgroup", s->path, NULL};
      lgx_set(r, "leakguard_cgroup_oom_kills_total", l, (double)(s->cg.oom_kill - s->oom_kill0));
    }
    if (s->psi_some >= 0) {
      const char *scope = s->kind == SRC_CGROUP ? s->path : "system";
      const char *ls[] = {"scope", scope, "kind", "some", NULL};
      lgx_set(r, "leakguard_memory_pressure_avg10", ls, s->psi_some);
      if (s->psi_full >= 0) {
        const char *lf[] = {"scope", scope, "kind", "full", NULL};
        lgx_set(r, "leakguard_memory_pressure_avg10", lf, s->psi_full);
      }
    }
    if (s->kind == SRC_GPU || s->kind == SRC_GPU_REC) {
      char dev[16];
      num_label(dev, sizeof dev, s->gpu);
      const char *l[] = {"device", dev, "source", s->kind == SRC_GPU ? "nvml" : "recorder", NULL};
      lgx_set(r, "leakguard_gpu_memory_used_bytes", l, (double)s->gpu_used);
      lgx_set(r, "leakguard_gpu_memory_total_bytes", l, (double)s->gpu_total);
    }
  }
  /* system PSI even when the system source is not a trigger */
  char buf[512];
  double some, full;
  int has_sys = 0;
  for (int i = 0; i < g->nsrc; i++) has_sys |= g->src[i].kind == SRC_SYSTEM && g->src[i].alive;
  if (!has_sys && lgu_read_file("/proc/pressure/memory", buf, sizeof buf) > 0 && lgs_psi_parse(buf, &some, &full) == 0) {
    const char *ls[] = {"scope", "system", "kind", "some", NULL};
    lgx_set(r, "leakguard_memory_pressure_avg10", ls, some);
    if (full >= 0) {
      const char *lf[] = {"scope", "system", "kind", "full", NULL};
      lgx_set(r, "leakguard_memory_pressure_avg10", lf, full);
    }
  }
}

void lgg_free(lgg_guard_t *g) {
  if (!g) return;
  for (int i = 0; i < g->nsrc; i++) {
    if (g->src[i].high_set && g->src[i].alive) write_high(&g->src[i], g->src[i].orig_high);
    free(g->src[i].path);
  }
  for (int i = 0; i < g->nvictims; i++)
    if (g->victims[i].pidfd >= 0) close(g->victims[i].pidfd);
  for (int i = 0; i < g->nchildren; i++) waitpid(g->children[i], NULL, WNOHANG);
  if (g->own_log) fclose(g->log);
  lgg_regions_free(g->regions);
  lgs_nvml_close(g->nvml);
  free(g->pids);
  free(g->procs);
  lgg_config_free(&g->cfg);
  free(g);
}
