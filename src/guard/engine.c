/* SPDX-License-Identifier: MIT */
/*
 * engine.c - the guard: sources -> levels -> actions, and the counters. Creation, the
 * sources (cgroups, the pid set, system memory, GPUs) and their sampling, and the tick;
 * one thread calls lgg_tick() every interval. The watched processes are in procs.c,
 * what a level does in actions.c, the JSON-lines event log in events.c.
 */
#include "guard/guard.h"
#include "guard/guard_impl.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/outfile.h"
#include "core/util.h"
#include "output/metrics.h"
#include "leakguard.h"

/* action counter names (leakguard_guard_actions_total{action}), by C_* */
static const char *const cname[C_NCOUNT] = {"log", "publish", "signal", "memory_high", "exec", "kill", "sigkill"};

/* ------------------------------------------------------------------ create / watch */

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
  g->own_only = o && o->own_only;
  if (o && o->log) g->log = o->log;
  else if (g->cfg.log_path) {
    if (!strcmp(g->cfg.log_path, "-")) g->log = stdout;
    else {
      char lwhy[600];
      int lfd = lgu_open_append(g->cfg.log_path, lwhy, sizeof lwhy); /* never through a link */
      g->log = lfd >= 0 ? fdopen(lfd, "a") : NULL;
      if (!g->log) {
        int e = errno ? errno : EIO;
        if (lfd >= 0) close(lfd), snprintf(lwhy, sizeof lwhy, "%s: %s", g->cfg.log_path, strerror(e));
        snprintf(why, whylen, "event log %s", lwhy);
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
  g->level_since = g->t0 = lgg_now_mono();
  g->last_scan = -1e9;
  g->last_gpu = -1e9;
  for (int k = 0; k < LGG_NLEVELS; k++) g->last_act[k] = -1e9;
  uint64_t avail;
  if (lgsm_meminfo(&g->memtotal, &avail) != 0) g->memtotal = 1ULL << 40;
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
  lgg_levels_init(&s->lv, lgg_now_mono());
  return s;
}

static void event_watch(lgg_guard_t *g, const source_t *s) {
  cJSON *j = lgg_jbegin("watch");
  cJSON_AddStringToObject(j, "source", s->name);
  if (s->kind == SRC_CGROUP) lgg_jnum(j, "cgroup_version", s->version);
  lgg_jend(g, j);
}

int lgg_watch_pid(lgg_guard_t *g, int pid) {
  if (pid <= 0 || lgsm_proc_mem(pid, LGSM_MEM_RSS) < 0) return -ESRCH;
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
  cJSON *j = lgg_jbegin("watch_pid");
  lgg_jnum(j, "pid", pid);
  lgg_jend(g, j);
  return 0;
}

int lgg_watch_cgroup(lgg_guard_t *g, const char *path, char *why, size_t whylen) {
  int v = lgsm_cgroup_version(path);
  if (v == -ENOENT) {
    snprintf(why, whylen, "cgroup %s: no such directory", path);
    return v;
  }
  if (v < 0) {
    snprintf(why, whylen, "cgroup %s: not a memory cgroup (no memory.current or memory.usage_in_bytes)", path);
    return v;
  }
  lgsm_cg_sample_t cs;
  int rc = lgsm_cgroup_read(path, v, &cs);
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

/* Marks s lost (alive = 0) with a source_lost event and a line on stderr. */
static void source_lost(lgg_guard_t *g, source_t *s, const char *reason) {
  s->alive = 0;
  cJSON *j = lgg_jbegin("source_lost");
  cJSON_AddStringToObject(j, "source", s->name);
  cJSON_AddStringToObject(j, "reason", reason);
  lgg_jend(g, j);
  lgu_err("guard: %s: %s; still watching %d source%s", s->name, reason, lgg_nsources(g),
          lgg_nsources(g) == 1 ? "" : "s");
}

/* ------------------------------------------------------------------ sampling */
static void read_error(lgg_guard_t *g, source_t *s, int err) {
  if (s->err == err) return;
  s->err = err;
  cJSON *j = lgg_jbegin("read_error");
  cJSON_AddStringToObject(j, "source", s->name);
  cJSON_AddStringToObject(j, "error", strerror(err));
  lgg_jend(g, j);
  lgu_err("guard: %s: cannot read: %s (keeps trying)", s->name, strerror(err));
}

static int sample(lgg_guard_t *g, source_t *s, double t) {
  char buf[512];
  if (s->kind == SRC_CGROUP) {
    int rc = lgsm_cgroup_read(s->path, s->version, &s->cg);
    if (rc == -ENOENT || rc == -ENODEV) {
      source_lost(g, s, "cgroup removed");
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
        uint64_t l = lgsm_proc_cgroup_limit(g->pids[i]);
        if (l && (!lim || l < lim)) lim = l;
      }
      g->pids_limit = lim && lim < g->memtotal ? lim : g->memtotal;
    }
    s->limit = (double)(g->cfg.limit ? g->cfg.limit : g->pids_limit);
    s->psi_full = s->psi_some = -1;
  } else if (s->kind == SRC_SYSTEM) {
    uint64_t total, avail;
    int rc = lgsm_meminfo(&total, &avail);
    if (rc) {
      read_error(g, s, -rc);
      return -1;
    }
    s->usage = (double)(total - (avail < total ? avail : total));
    s->limit = (double)total;
    s->psi_full = s->psi_some = -1;
    if (lgu_read_file("/proc/pressure/memory", buf, sizeof buf) > 0) lgsm_psi_parse(buf, &s->psi_some, &s->psi_full);
  } else if (s->kind == SRC_GPU_REC) {
    /* no NVML: the recorded processes' device memory against the device's */
    if (lgg_regions_gpu(g->regions, s->gpu, &s->gpu_used, &s->gpu_total) != 0 || !s->gpu_total) return -1;
    s->usage = (double)s->gpu_used;
    s->limit = (double)s->gpu_total;
    s->psi_full = s->psi_some = -1;
  } else if (s->kind == SRC_GPU) {
    if (lgsm_nvml_mem(g->nvml, s->gpu, &s->gpu_used, &s->gpu_total) != 0 || !s->gpu_total) {
      read_error(g, s, EIO);
      return -1;
    }
    s->usage = (double)s->gpu_used;
    s->limit = (double)s->gpu_total;
    s->psi_full = s->psi_some = -1;
  }
  if (s->err) { /* recovered */
    cJSON *j = lgg_jbegin("read_ok");
    cJSON_AddStringToObject(j, "source", s->name);
    lgg_jend(g, j);
    s->err = 0;
  }
  s->sampled = 1;
  lgg_levels_step(&s->lv, &g->cfg.lv, t, s->usage, s->limit, s->psi_full);
  return 0;
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
      g->nvml = lgsm_nvml_open(why, sizeof why);
      if (!g->nvml) {
        cJSON *j = lgg_jbegin("source_off");
        cJSON_AddStringToObject(j, "source", "gpu");
        cJSON_AddStringToObject(j, "reason", why);
        lgg_jend(g, j);
        lgu_err("guard: %s", why);
      } else {
        for (int i = 0; i < lgsm_nvml_count(g->nvml); i++) {
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
  lgg_refresh_procs(g, t);
  if (g->pids_src >= 0 && g->src[g->pids_src].alive && !g->npids)
    source_lost(g, &g->src[g->pids_src], "every watched pid exited");
  /* recorder regions of the watched set (system mode: of every process; they join
   * the watched set at the next refresh) */
  int has_system = 0;
  for (int i = 0; i < g->nsrc; i++) has_system |= g->src[i].kind == SRC_SYSTEM && g->src[i].alive;
  /* a region found is given the level published (a dry run publishes nothing) */
  int level = g->cfg.dry_run ? -1 : g->published;
  if (t - g->last_scan >= g->cfg.scan_interval_s) {
    g->last_scan = t;
    if (has_system && !g->own_only) {
      lgg_regions_scan(g->regions, NULL, -1, level);
    } else {
      int *pids = malloc(((size_t)g->nprocs + 1) * sizeof *pids);
      if (pids) {
        for (int i = 0; i < g->nprocs; i++) pids[i] = g->procs[i].pid;
        lgg_regions_scan(g->regions, pids, g->nprocs, level);
        free(pids);
      }
    }
  }
  if (!g->nvml && g->cfg.gpu != 0) gpu_rec_sources(g);
  if (g->nvml && t - g->last_gpu >= g->cfg.gpu_interval_s) {
    g->last_gpu = t;
    for (int i = 0; i < g->nprocs; i++) g->procs[i].gpu = 0;
    for (int i = 0; i < lgsm_nvml_count(g->nvml); i++) lgsm_nvml_procs(g->nvml, i, lgg_gpu_proc_cb, g);
  }
  int lvl = 0, any = 0;
  for (int i = 0; i < g->nsrc; i++) {
    source_t *s = &g->src[i];
    if (!s->alive) continue;
    if (sample(g, s, t) == 0 && s->lv.level > lvl) lvl = s->lv.level;
    any |= s->alive;
  }
  lgg_check_victims(g, t);
  lgg_reap_children(g);
  if (!any) return -ENOENT;
  if (lvl != g->level) {
    const source_t *w = lgg_worst(g);
    int old = g->level;
    g->level = lvl;
    g->level_since = t;
    g->level_changes++;
    cJSON *j = lgg_jbegin("level");
    cJSON_AddStringToObject(j, "from", lg_level_name((lg_level_t)old));
    cJSON_AddStringToObject(j, "to", lg_level_name((lg_level_t)lvl));
    if (w) {
      cJSON_AddStringToObject(j, "source", w->name);
      cJSON_AddStringToObject(j, "reason", lvl > old ? lgg_reason_name(w->lv.reason) : "recover");
      lgg_jnum(j, "usage_bytes", w->usage);
      lgg_jnum(j, "limit_bytes", w->limit);
      lgg_jnum(j, "ratio", round(w->lv.ratio * 10000) / 10000);
      lgg_jnum(j, "trend_bps", round(w->lv.slope));
      lgg_jnum(j, "tto_s", w->lv.tto_s < 0 ? NAN : round(w->lv.tto_s * 100) / 100);
      if (w->psi_full >= 0) lgg_jnum(j, "psi_full_avg10", w->psi_full);
    }
    if (g->cfg.dry_run) cJSON_AddTrueToObject(j, "dry_run");
    lgg_jend(g, j);
    if (lvl > old) {
      for (int k = old + 1; k < lvl; k++) g->last_act[k] = t; /* skipped levels: only the top acts */
      lgg_run_actions(g, lvl, t, 0);
    } else {
      lgg_restore_high(g, lvl);
      if (published_by(g, old)) lgg_do_publish(g, lvl, w); /* subscribers learn it is over */
      if (lvl > 0) {
        lgu_err("guard: level %s (recovered; %s at %.0f%%)", lg_level_name((lg_level_t)lvl), w ? w->name : "",
                w ? w->lv.ratio * 100 : 0);
      } else {
        lgu_err("guard: level normal");
      }
    }
  } else if (lvl > 0 && g->cfg.act[lvl].repeat_s > 0 && t - g->last_act[lvl] >= g->cfg.act[lvl].repeat_s) {
    /* still there: repeat, but only while a source's current sample still asks for it */
    int still = 0;
    for (int i = 0; i < g->nsrc; i++) still |= g->src[i].alive && g->src[i].lv.target >= lvl;
    if (still) lgg_run_actions(g, lvl, t, 1);
  }
  return g->level;
}

/* ------------------------------------------------------------------ export */
static void num_label(char *buf, size_t n, int v) { snprintf(buf, n, "%d", v); }

void lgg_export(lgg_guard_t *g, lgx_registry_t *r) {
  if (!r) return;
  lgx_declare_m(r, LGX_GUARD_LEVEL);
  lgx_declare_m(r, LGX_GUARD_SOURCE_LEVEL);
  lgx_declare_m(r, LGX_GUARD_ACTIONS);
  lgx_declare_m(r, LGX_GUARD_LEVEL_CHANGES);
  lgx_declare_m(r, LGX_GUARD_WATCHED);
  lgx_declare_m(r, LGX_TIME_TO_OOM);
  lgx_declare_m(r, LGX_CGROUP_MEMORY);
  lgx_declare_m(r, LGX_CGROUP_OOM_KILLS);
  lgx_declare_m(r, LGX_MEMORY_PRESSURE);
  lgx_declare_m(r, LGX_GPU_USED);
  lgx_declare_m(r, LGX_GPU_TOTAL);
  lgx_set_m(r, LGX_GUARD_LEVEL, NULL, g->level);
  for (int c = 0; c < C_NCOUNT; c++) {
    const char *l[] = {"action", cname[c], NULL};
    lgx_set_m(r, LGX_GUARD_ACTIONS, l, (double)g->counts[c]);
  }
  lgx_set_m(r, LGX_GUARD_LEVEL_CHANGES, NULL, (double)g->level_changes);
  lgx_set_m(r, LGX_GUARD_WATCHED, NULL, g->nprocs);
  lgx_clear_m(r, LGX_GUARD_SOURCE_LEVEL);
  lgx_clear_m(r, LGX_CGROUP_MEMORY);
  for (int i = 0; i < g->nsrc; i++) {
    const source_t *s = &g->src[i];
    if (!s->alive || !s->sampled) continue;
    const char *sl[] = {"source", s->name, NULL};
    lgx_set_m(r, LGX_GUARD_SOURCE_LEVEL, sl, s->lv.level);
    lgx_set_m(r, LGX_TIME_TO_OOM, sl, s->lv.tto_s < 0 ? INFINITY : s->lv.tto_s);
    if (s->kind == SRC_CGROUP) {
      static const char *const kinds[] = {"usage", "limit", "high", "working_set", "anon", "file"};
      const uint64_t v[] = {s->cg.usage, s->cg.limit, s->cg.high, s->cg.working_set, s->cg.anon, s->cg.file};
      for (int k = 0; k < 6; k++) {
        if ((k == 1 || k == 2) && !v[k]) continue; /* no limit / high set */
        const char *l[] = {"cgroup", s->path, "kind", kinds[k], NULL};
        lgx_set_m(r, LGX_CGROUP_MEMORY, l, (double)v[k]);
      }
      const char *l[] = {"cgroup", s->path, NULL};
      lgx_set_m(r, LGX_CGROUP_OOM_KILLS, l, (double)(s->cg.oom_kill - s->oom_kill0));
    }
    if (s->psi_some >= 0) {
      const char *scope = s->kind == SRC_CGROUP ? s->path : "system";
      const char *ls[] = {"scope", scope, "kind", "some", NULL};
      lgx_set_m(r, LGX_MEMORY_PRESSURE, ls, s->psi_some);
      if (s->psi_full >= 0) {
        const char *lf[] = {"scope", scope, "kind", "full", NULL};
        lgx_set_m(r, LGX_MEMORY_PRESSURE, lf, s->psi_full);
      }
    }
    if (s->kind == SRC_GPU || s->kind == SRC_GPU_REC) {
      char dev[16];
      num_label(dev, sizeof dev, s->gpu);
      const char *l[] = {"device", dev, "source", s->kind == SRC_GPU ? "nvml" : "recorder", NULL};
      lgx_set_m(r, LGX_GPU_USED, l, (double)s->gpu_used);
      lgx_set_m(r, LGX_GPU_TOTAL, l, (double)s->gpu_total);
    }
  }
  /* system PSI even when the system source is not a trigger */
  char buf[512];
  double some, full;
  int has_sys = 0;
  for (int i = 0; i < g->nsrc; i++) has_sys |= g->src[i].kind == SRC_SYSTEM && g->src[i].alive;
  if (!has_sys && lgu_read_file("/proc/pressure/memory", buf, sizeof buf) > 0 &&
      lgsm_psi_parse(buf, &some, &full) == 0) {
    const char *ls[] = {"scope", "system", "kind", "some", NULL};
    lgx_set_m(r, LGX_MEMORY_PRESSURE, ls, some);
    if (full >= 0) {
      const char *lf[] = {"scope", "system", "kind", "full", NULL};
      lgx_set_m(r, LGX_MEMORY_PRESSURE, lf, full);
    }
  }
}

void lgg_free(lgg_guard_t *g) {
  if (!g) return;
  for (int i = 0; i < g->nsrc; i++) {
    if (g->src[i].high_set && g->src[i].alive) lgg_write_high(&g->src[i], g->src[i].orig_high);
    free(g->src[i].path);
  }
  for (int i = 0; i < g->nvictims; i++)
    if (g->victims[i].pidfd >= 0) close(g->victims[i].pidfd);
  for (int i = 0; i < g->nchildren; i++) waitpid(g->children[i], NULL, WNOHANG);
  if (g->own_log) fclose(g->log);
  lgg_regions_free(g->regions);
  lgsm_nvml_close(g->nvml);
  free(g->pids);
  free(g->procs);
  lgg_config_free(&g->cfg);
  free(g);
}
