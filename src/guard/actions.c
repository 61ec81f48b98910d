/* SPDX-License-Identifier: MIT */
/*
 * actions.c - what a level does: log, publish the level to recorded processes, send a
 * signal, lower memory.high (and restore it), run a command, terminate the victim
 * (SIGTERM, then SIGKILL after the grace time). Separate from engine.c, which decides
 * the level: everything here touches other processes.
 *
 * Safety rules (docs/guard.md): the guard only signals single processes of the
 * watched set (never a process group, a whole cgroup or a session), never itself or
 * its ancestors, not processes with oom_score_adj -1000 unless configured, and signals
 * through a pidfd checked against the process's start time (no PID reuse races).
 * Commands run only when an [level] section names the exec action and a command.
 */
#include "guard/guard.h"
#include "guard/guard_impl.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/region.h"
#include "core/util.h"
#include "leakguard.h"

extern char **environ;

/* ------------------------------------------------------------------ actions */
static int pidfd_open_checked(const proc_t *p) {
  int fd = (int)syscall(SYS_pidfd_open, p->pid, 0);
  if (fd < 0) return errno == ENOSYS ? -2 : -1;
  unsigned long long st;
  if (lgg_proc_identity(p->pid, &st, NULL, 0) != 0 || st != p->start) { /* exited or reused */
    close(fd);
    return -1;
  }
  return fd;
}

static int send_sig(int pidfd, int pid, int sig) {
  if (pidfd >= 0) return (int)syscall(SYS_pidfd_send_signal, pidfd, sig, NULL, 0) == 0 ? 0 : -errno;
  return kill(pid, sig) == 0 ? 0 : -errno;
}

/* Sources at level >= lvl. */
static uint64_t sources_at(const lgg_guard_t *g, int lvl) {
  uint64_t m = 0;
  for (int i = 0; i < g->nsrc; i++)
    if (g->src[i].alive && g->src[i].lv.level >= lvl) m |= 1ULL << i;
  return m;
}
const source_t *lgg_worst(const lgg_guard_t *g) {
  const source_t *w = NULL;
  for (int i = 0; i < g->nsrc; i++) {
    const source_t *s = &g->src[i];
    if (!s->alive || !s->sampled) continue;
    if (!w || s->lv.level > w->lv.level || (s->lv.level == w->lv.level && s->lv.ratio > w->lv.ratio)) w = s;
  }
  return w;
}

static cJSON *action_event(lgg_guard_t *g, const char *action, int lvl) {
  cJSON *j = lgg_jbegin("action");
  cJSON_AddStringToObject(j, "action", action);
  cJSON_AddStringToObject(j, "level", lg_level_name((lg_level_t)lvl));
  if (g->cfg.dry_run) cJSON_AddTrueToObject(j, "dry_run");
  return j;
}

static void do_kill(lgg_guard_t *g, int lvl, double t) {
  uint64_t mask = sources_at(g, lvl);
  const proc_t *best = NULL;
  double bs = 0;
  for (int i = 0; i < g->nprocs; i++) {
    const proc_t *p = &g->procs[i];
    if (!lgg_candidate(g, p, mask) || lgg_victim_pending(g, p->pid)) continue;
    double sc = lgg_score(g, p, t);
    if (sc >= g->cfg.kill_min_growth && (!best || sc > bs)) {
      best = p;
      bs = sc;
    }
  }
  const char *why = "growth";
  if (!best && g->cfg.kill_fallback == LGG_FB_LARGEST) {
    for (int i = 0; i < g->nprocs; i++) {
      const proc_t *p = &g->procs[i];
      if (!lgg_candidate(g, p, mask) || lgg_victim_pending(g, p->pid)) continue;
      if (!best || p->mem > best->mem) best = p;
    }
    why = "largest";
  }
  cJSON *j = action_event(g, "kill", lvl);
  if (!best) {
    cJSON_AddStringToObject(j, "result",
                            g->nvictims ? "waiting for the last victim to exit" : "no candidate in the watched set");
    lgg_jend(g, j);
    return;
  }
  lgg_jnum(j, "pid", best->pid);
  cJSON_AddStringToObject(j, "comm", best->comm);
  cJSON_AddStringToObject(j, "chosen_by",
                          best->hint_t > 0 && t - best->hint_t <= 2 * g->cfg.lv.window_s ? "recorder" : why);
  lgg_jnum(j, "growth_bps", lgg_score(g, best, t));
  lgg_jnum(j, "mem_bytes", (double)best->mem);
  if (best->gpu) lgg_jnum(j, "gpu_bytes", (double)best->gpu);
  cJSON_AddStringToObject(j, "signal", "SIGTERM");
  lgg_jnum(j, "grace_s", g->cfg.kill_grace_s);
  g->counts[C_KILL]++;
  if (g->cfg.dry_run) {
    cJSON_AddStringToObject(j, "result", "dry-run");
    lgg_jend(g, j);
    lgu_err("guard: would terminate pid %d (%s), growing %.1f MiB/s (dry run)", best->pid, best->comm,
            lgg_score(g, best, t) / 1048576);
    return;
  }
  int fd = pidfd_open_checked(best);
  int rc = fd == -1 ? -ESRCH : send_sig(fd, best->pid, SIGTERM);
  cJSON_AddStringToObject(j, "result", rc ? strerror(-rc) : "sent");
  lgg_jend(g, j);
  if (rc) {
    if (fd >= 0) close(fd);
    return;
  }
  lgu_err("guard: terminating pid %d (%s), growing %.1f MiB/s at %s", best->pid, best->comm,
          lgg_score(g, best, t) / 1048576, lg_level_name((lg_level_t)lvl));
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

void lgg_check_victims(lgg_guard_t *g, double t) {
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
      cJSON *j = lgg_jbegin("victim_exit");
      lgg_jnum(j, "pid", v->pid);
      cJSON_AddStringToObject(j, "comm", v->comm);
      lgg_jnum(j, "after_s", t - v->sent_t);
      lgg_jend(g, j);
      if (v->pidfd >= 0) close(v->pidfd);
      g->victims[i] = g->victims[--g->nvictims];
      continue;
    }
    if (!v->sigkilled && t >= v->deadline) {
      int rc = send_sig(v->pidfd, v->pid, SIGKILL);
      v->sigkilled = 1;
      g->counts[C_SIGKILL]++;
      cJSON *j = action_event(g, "sigkill", g->level);
      lgg_jnum(j, "pid", v->pid);
      cJSON_AddStringToObject(j, "comm", v->comm);
      cJSON_AddStringToObject(j, "signal", "SIGKILL");
      cJSON_AddStringToObject(j, "result", rc ? strerror(-rc) : "sent");
      lgg_jend(g, j);
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
      if (lgg_candidate(g, &g->procs[i], mask) && (!top || lgg_score(g, &g->procs[i], t) > lgg_score(g, top, t)))
        top = &g->procs[i];
  }
  int n = 0;
  for (int i = 0; i < g->nprocs; i++) {
    const proc_t *p = &g->procs[i];
    if (top ? p != top : !lgg_candidate(g, p, mask)) continue;
    cJSON *j = action_event(g, "signal", lvl);
    lgg_jnum(j, "pid", p->pid);
    cJSON_AddStringToObject(j, "comm", p->comm);
    cJSON_AddStringToObject(j, "signal", sn);
    g->counts[C_SIGNAL]++;
    n++;
    if (g->cfg.dry_run) {
      cJSON_AddStringToObject(j, "result", "dry-run");
    } else {
      int fd = pidfd_open_checked(p);
      int rc = fd == -1 ? -ESRCH : send_sig(fd, p->pid, a->signal);
      if (fd >= 0) close(fd);
      cJSON_AddStringToObject(j, "result", rc ? strerror(-rc) : "sent");
    }
    lgg_jend(g, j);
  }
  if (!n) {
    cJSON *j = action_event(g, "signal", lvl);
    cJSON_AddStringToObject(j, "signal", sn);
    cJSON_AddStringToObject(j, "result", "no process in the watched set");
    lgg_jend(g, j);
  }
}

int lgg_write_high(const source_t *s, uint64_t v) {
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
    cJSON *j = action_event(g, "memory_high", lvl);
    cJSON_AddStringToObject(j, "source", s->name);
    g->counts[C_MEMHIGH]++;
    if (s->version != 2) {
      cJSON_AddStringToObject(j, "result", "unsupported: cgroup v1 has no memory.high");
      lgg_jend(g, j);
      continue;
    }
    uint64_t v = (uint64_t)(a->memory_high * s->limit);
    lgg_jnum(j, "memory_high", (double)v);
    if (g->cfg.dry_run) {
      cJSON_AddStringToObject(j, "result", "dry-run");
    } else {
      if (!s->high_set) s->orig_high = s->cg.high;
      int rc = lgg_write_high(s, v);
      if (!rc) s->high_set = 1;
      cJSON_AddStringToObject(j, "result", rc ? strerror(-rc) : "set");
    }
    lgg_jend(g, j);
  }
}

void lgg_restore_high(lgg_guard_t *g, int lvl) {
  for (int i = 0; i < g->nsrc; i++) {
    source_t *s = &g->src[i];
    if (!s->high_set || !s->alive) continue;
    int keep = 0;
    for (int k = 1; k <= lvl; k++) keep |= (g->cfg.act[k].mask & LGG_A_MEMHIGH) != 0;
    if (keep) continue;
    int rc = lgg_write_high(s, s->orig_high);
    s->high_set = 0;
    cJSON *j = action_event(g, "memory_high_restore", lvl);
    cJSON_AddStringToObject(j, "source", s->name);
    lgg_jnum(j, "memory_high", (double)s->orig_high);
    cJSON_AddStringToObject(j, "result", rc ? strerror(-rc) : "restored");
    lgg_jend(g, j);
  }
}

static void do_exec(lgg_guard_t *g, int lvl, const source_t *w) {
  const lgg_actions_cfg_t *a = &g->cfg.act[lvl];
  cJSON *j = action_event(g, "exec", lvl);
  cJSON_AddStringToObject(j, "command", a->command);
  g->counts[C_EXEC]++;
  if (g->cfg.dry_run) {
    cJSON_AddStringToObject(j, "result", "dry-run");
    lgg_jend(g, j);
    return;
  }
  /* environment: ours without LEAKGUARD_*, plus the level, its source, usage and limit */
  size_t ne = 0;
  while (environ[ne]) ne++;
  char **env = calloc(ne + 5, sizeof *env);
  char e1[64], e2[320], e3[64], e4[64];
  snprintf(e1, sizeof e1, LG_ENV_LEVEL "=%s", lg_level_name((lg_level_t)lvl));
  snprintf(e2, sizeof e2, LG_ENV_SOURCE "=%s", w ? w->name : "");
  snprintf(e3, sizeof e3, LG_ENV_USAGE "=%.0f", w ? w->usage : 0);
  snprintf(e4, sizeof e4, LG_ENV_LIMIT "=%.0f", w ? w->limit : 0);
  pid_t pid = -1;
  int rc = -ENOMEM;
  if (env) {
    size_t k = 0;
    for (size_t i = 0; i < ne; i++)
      if (strncmp(environ[i], LG_ENV_PREFIX, strlen(LG_ENV_PREFIX))) env[k++] = environ[i];
    env[k++] = e1;
    env[k++] = e2;
    env[k++] = e3;
    env[k++] = e4;
    char *argv[] = {"/bin/sh", "-c", a->command, NULL};
    rc = -posix_spawn(&pid, "/bin/sh", NULL, NULL, argv, env);
    free(env);
  }
  if (!rc) lgg_jnum(j, "pid", pid);
  cJSON_AddStringToObject(j, "result", rc ? strerror(-rc) : "started");
  lgg_jend(g, j);
  if (!rc) {
    if (g->nchildren < 16) g->children[g->nchildren++] = pid;
    else waitpid(pid, NULL, 0);
  }
}

void lgg_reap_children(lgg_guard_t *g) {
  for (int i = 0; i < g->nchildren;) {
    int st;
    pid_t r = waitpid(g->children[i], &st, WNOHANG);
    if (r == g->children[i] || (r < 0 && errno == ECHILD)) {
      if (r > 0) {
        cJSON *j = lgg_jbegin("exec_exit");
        lgg_jnum(j, "pid", r);
        if (WIFEXITED(st)) lgg_jnum(j, "status", WEXITSTATUS(st));
        else if (WIFSIGNALED(st)) lgg_jnum(j, "signal", WTERMSIG(st));
        lgg_jend(g, j);
      }
      g->children[i] = g->children[--g->nchildren];
    } else {
      i++;
    }
  }
}

void lgg_do_publish(lgg_guard_t *g, int lvl, const source_t *w) {
  uint64_t evict = 0;
  if (lvl == LGG_NLEVELS - 1 && w) {
    double target = (g->cfg.lv.thr[3] - g->cfg.lv.hysteresis) * w->limit;
    if (w->usage > target) evict = (uint64_t)(w->usage - target);
  }
  cJSON *j = action_event(g, "publish", lvl);
  cJSON_AddStringToObject(j, "published_level", lg_level_name((lg_level_t)g->level));
  if (evict) lgg_jnum(j, "evict_bytes", (double)evict);
  g->counts[C_PUBLISH]++;
  if (g->cfg.dry_run) {
    lgg_jnum(j, "regions", lgg_regions_count(g->regions));
    cJSON_AddStringToObject(j, "result", "dry-run");
  } else {
    lgg_jnum(j, "regions", lgg_regions_publish(g->regions, g->level, evict));
    g->published = g->level;
    cJSON_AddStringToObject(j, "result", "published");
  }
  lgg_jend(g, j);
}

void lgg_run_actions(lgg_guard_t *g, int lvl, double t, int repeat) {
  const lgg_actions_cfg_t *a = &g->cfg.act[lvl];
  const source_t *w = lgg_worst(g);
  g->last_act[lvl] = t;
  if ((a->mask & LGG_A_LOG) && !repeat) {
    g->counts[C_LOG]++;
    char b1[32], b2[32], b3[32], b4[32];
    if (w)
      lgu_err("guard: level %s: %s at %s of %s (%.0f%%), trend %s/s, time to limit %s", lg_level_name((lg_level_t)lvl),
              w->name, lgu_fmt_bytes(b1, sizeof b1, w->usage), lgu_fmt_bytes(b2, sizeof b2, w->limit),
              w->lv.ratio * 100, lgu_fmt_bytes(b3, sizeof b3, w->lv.slope),
              w->lv.tto_s < 0 ? "never" : lgu_fmt_duration(b4, sizeof b4, w->lv.tto_s));
  }
  if (a->mask & LGG_A_PUBLISH) lgg_do_publish(g, lvl, w);
  if (a->mask & LGG_A_MEMHIGH) do_memhigh(g, lvl);
  if (a->mask & LGG_A_SIGNAL) do_signal(g, lvl, t);
  if ((a->mask & LGG_A_EXEC) && a->command) do_exec(g, lvl, w);
  if (a->mask & LGG_A_KILL) do_kill(g, lvl, t);
}
