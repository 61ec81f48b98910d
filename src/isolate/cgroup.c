/* SPDX-License-Identifier: MIT */
/* Per-child memory cgroups: the kernel enforces an isolated child's budget
 * (docs/isolate.md, "How the budget is enforced").
 *
 * Each child gets a cgroup of its own, made by the parent before fork under the
 * caller's memory cgroup (or under LEAKGUARD_ISOLATE_CGROUP / opts->cgroup_parent):
 *   v1  <memory mount>/<caller's path>/leakguard-iso-<pid>-<n>, memory.limit_in_bytes
 *   v2  <cgroup2 mount>/<caller's path>/leakguard-iso-<pid>-<n>, memory.max; only where
 *       the parent cgroup delegates the memory controller (its cgroup.subtree_control
 *       names memory: v2 forbids that in a cgroup that holds processes, the caller's
 *       own one included, unless it is the root)
 * The child writes its pid to the cgroup's cgroup.procs (a descriptor opened by the
 * parent) before its seccomp filter. Charges do not move with a task, so what is
 * charged to the child's cgroup is exactly what the child adds: the pages it
 * allocates, the copy-on-write copies of the caller's pages it writes to, the page
 * cache it reads in. Past the limit the kernel reclaims what it can and then its OOM
 * killer kills the child; the parent tells that from a crash by the cgroup's oom_kill
 * count. The directory is removed once the child is reaped.
 *
 * Hand-written, not libcgroup: Debian's libcgroup speaks v1 through its own config
 * files and daemon; the few reads and writes here need none of it. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/cgpath.h"
#include "isolate/isolate.h"

/* Where children's cgroups go, found once. */
static struct {
  int v; /* 1, 2, or 0: none (why says why) */
  char dir[PATH_MAX];
  char why[160];
} found;
static pthread_once_t found_once = PTHREAD_ONCE_INIT;
static _Atomic unsigned seq;

static int read_small(const char *path, char *buf, size_t size) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  size_t have = 0;
  for (;;) {
    ssize_t n = read(fd, buf + have, size - 1 - have);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    have += (size_t)n;
    if (have == size - 1) break;
  }
  close(fd);
  buf[have] = 0;
  return (int)have;
}

static int write_str(const char *dir, const char *file, const char *s) {
  char path[PATH_MAX];
  if (snprintf(path, sizeof path, "%s/%s", dir, file) >= (int)sizeof path) return -ENAMETOOLONG;
  int fd = open(path, O_WRONLY | O_CLOEXEC);
  if (fd < 0) return -errno;
  ssize_t n = write(fd, s, strlen(s));
  int e = n < 0 ? errno : 0;
  close(fd);
  return n < 0 ? -e : 0;
}

/* This process's path in the v1 memory hierarchy (v == 1) or in cgroup2, from
 * /proc/self/cgroup. */
static int find_path(int v, char *out, size_t size) {
  char buf[8192];
  if (read_small("/proc/self/cgroup", buf, sizeof buf) <= 0) return -1;
  return lgsm_cg_path(buf, v, out, size);
}

static int v2_delegates(const char *dir) {
  char path[PATH_MAX + 32], buf[512];
  snprintf(path, sizeof path, "%s/cgroup.subtree_control", dir);
  int n = read_small(path, buf, sizeof buf);
  return n > 0 && lgsm_cg_has_word(buf, (size_t)n, "memory");
}

/* Removes the children's cgroups that processes which died without their exit handler
 * (killed) left in dir: those whose maker is gone and that are empty. */
static void sweep_stale(const char *dir) {
  DIR *d = opendir(dir);
  if (!d) return;
  struct dirent *e;
  while ((e = readdir(d)) != NULL) {
    int pid;
    unsigned n;
    if (sscanf(e->d_name, "leakguard-iso-%d-%u", &pid, &n) != 2 || pid <= 0) continue;
    if (kill(pid, 0) == 0 || errno != ESRCH) continue;
    char path[PATH_MAX];
    if (snprintf(path, sizeof path, "%s/%s", dir, e->d_name) < (int)sizeof path) (void)rmdir(path);
  }
  closedir(d);
}

static void use_dir(int v, const char *dir) {
  found.v = v;
  snprintf(found.dir, sizeof found.dir, "%s", dir);
  sweep_stale(dir);
}

/* The version of the hierarchy a given parent directory is in (2 when it has
 * memory.max), or 0 with why when it cannot take children with a memory limit. */
static int probe_parent(const char *dir, char *why, size_t whylen) {
  char probe[PATH_MAX + 32];
  snprintf(probe, sizeof probe, "%s/memory.max", dir);
  if (access(probe, F_OK) == 0 ||
      (snprintf(probe, sizeof probe, "%s/cgroup.subtree_control", dir), access(probe, F_OK) == 0)) {
    if (!v2_delegates(dir) && write_str(dir, "cgroup.subtree_control", "+memory") < 0) {
      snprintf(why, whylen, "%.100s does not delegate the memory controller", dir);
      return 0;
    }
    return 2;
  }
  snprintf(probe, sizeof probe, "%s/memory.limit_in_bytes", dir);
  if (access(probe, F_OK) == 0) return 1;
  snprintf(why, whylen, "%.100s is not a memory cgroup", dir);
  return 0;
}

static void find_parent(void) {
  const char *env = secure_getenv("LEAKGUARD_ISOLATE_CGROUP");
  char mnt[PATH_MAX], root[PATH_MAX], path[PATH_MAX], dir[PATH_MAX];
  if (env && *env) {
    if (strcmp(env, "off") == 0) {
      snprintf(found.why, sizeof found.why, "LEAKGUARD_ISOLATE_CGROUP=off");
      return;
    }
    int v = probe_parent(env, found.why, sizeof found.why);
    if (v) use_dir(v, env);
    return;
  }
  /* cgroup2 with the memory controller delegated below this process's cgroup */
  if (lgsm_cg_find_mount(2, mnt, sizeof mnt, root, sizeof root) == 0 && find_path(2, path, sizeof path) == 0 &&
      lgsm_cg_join(dir, sizeof dir, mnt, root, path) == 0) {
    char ctl[PATH_MAX + 32], buf[512];
    snprintf(ctl, sizeof ctl, "%s/cgroup.controllers", dir);
    int n = read_small(ctl, buf, sizeof buf);
    if (n > 0 && lgsm_cg_has_word(buf, (size_t)n, "memory")) {
      if (v2_delegates(dir)) {
        use_dir(2, dir);
        return;
      }
      snprintf(found.why, sizeof found.why,
               "cgroup v2: %.80s holds processes and does not delegate memory (set LEAKGUARD_ISOLATE_CGROUP)", dir);
    }
  }
  /* the v1 memory hierarchy */
  if (lgsm_cg_find_mount(1, mnt, sizeof mnt, root, sizeof root) == 0 && find_path(1, path, sizeof path) == 0 &&
      lgsm_cg_join(dir, sizeof dir, mnt, root, path) == 0) {
    char probe[PATH_MAX + 32];
    snprintf(probe, sizeof probe, "%s/memory.limit_in_bytes", dir);
    if (access(probe, F_OK) == 0) {
      use_dir(1, dir);
      return;
    }
  }
  if (!found.why[0]) snprintf(found.why, sizeof found.why, "no memory cgroup hierarchy found");
}

/* Set when making a cgroup in the found directory failed for want of permission:
 * AUTO stops trying (why in found_why_late). */
static _Atomic int found_denied;
static char found_why_late[160];
static pthread_mutex_t late_mu = PTHREAD_MUTEX_INITIALIZER;

const char *lgiso_cg_where(const char **dir) {
  pthread_once(&found_once, find_parent);
  if (dir) *dir = found.dir;
  if (atomic_load(&found_denied)) return found_why_late;
  return found.v ? NULL : found.why;
}

/* The cgroups this process made and has not removed, for the exit handler: a pool that
 * was never freed, a child reaped late. Owned by the process that made them (a forked
 * copy of the caller that exits must not touch them). */
static pthread_mutex_t live_mu = PTHREAD_MUTEX_INITIALIZER;
static char **live;
static size_t nlive, caplive;
static pid_t live_owner;

static void live_add(const char *dir) {
  char *d = strdup(dir);
  if (!d) return;
  pthread_mutex_lock(&live_mu);
  if (live_owner != getpid()) { /* a fork of the caller: its parent's are not its own */
    nlive = 0;
    live_owner = getpid();
  }
  if (nlive == caplive) {
    size_t cap = caplive ? caplive * 2 : 16;
    char **l = realloc(live, cap * sizeof *l);
    if (!l) {
      pthread_mutex_unlock(&live_mu);
      free(d);
      return;
    }
    live = l;
    caplive = cap;
  }
  live[nlive++] = d;
  pthread_mutex_unlock(&live_mu);
}

static void live_del(const char *dir) {
  pthread_mutex_lock(&live_mu);
  for (size_t i = 0; live_owner == getpid() && i < nlive; i++)
    if (strcmp(live[i], dir) == 0) {
      free(live[i]);
      live[i] = live[--nlive];
      break;
    }
  pthread_mutex_unlock(&live_mu);
}

void lgiso_cg_cleanup(void) {
  pthread_mutex_lock(&live_mu);
  if (live_owner == getpid()) {
    for (size_t i = 0; i < nlive; i++) {
      char path[PATH_MAX + 32], buf[4096];
      snprintf(path, sizeof path, "%s/cgroup.procs", live[i]);
      if (read_small(path, buf, sizeof buf) > 0) {
        char *save = NULL;
        for (char *t = strtok_r(buf, "\n", &save); t; t = strtok_r(NULL, "\n", &save)) {
          pid_t pid = (pid_t)strtol(t, NULL, 10);
          if (pid > 0 && kill(pid, SIGKILL) == 0) (void)waitpid(pid, NULL, 0);
        }
      }
      for (int k = 0; k < 200 && rmdir(live[i]) < 0 && errno == EBUSY; k++) usleep(500);
      free(live[i]);
    }
    nlive = 0;
  }
  pthread_mutex_unlock(&live_mu);
}

void lgiso_cg_init(lgiso_cg_t *cg) {
  memset(cg, 0, sizeof *cg);
  cg->procs_fd = -1;
}

int lgiso_cg_make(lgiso_cg_t *cg, const char *parent, size_t limit, char *why, size_t whylen) {
  lgiso_cg_init(cg);
  int v;
  if (parent) {
    v = probe_parent(parent, why, whylen);
    if (!v) return -1;
  } else {
    const char *no = lgiso_cg_where(&parent);
    if (no) {
      snprintf(why, whylen, "%s", no);
      return -1;
    }
    v = found.v;
  }
  unsigned n = atomic_fetch_add(&seq, 1);
  if (snprintf(cg->dir, sizeof cg->dir, "%s/leakguard-iso-%d-%u", parent, (int)getpid(), n) >= (int)sizeof cg->dir) {
    snprintf(why, whylen, "cgroup path too long");
    return -1;
  }
  if (mkdir(cg->dir, 0755) < 0) {
    int e = errno;
    snprintf(why, whylen, "mkdir %.100s: %s", cg->dir, strerror(e));
    if (parent == found.dir && (e == EACCES || e == EPERM || e == EROFS)) {
      pthread_mutex_lock(&late_mu);
      snprintf(found_why_late, sizeof found_why_late, "%s", why);
      pthread_mutex_unlock(&late_mu);
      atomic_store(&found_denied, 1);
    }
    cg->dir[0] = 0;
    return -1;
  }
  cg->v = v;
  live_add(cg->dir);
  if (cg->v == 1) {
    (void)write_str(cg->dir, "memory.swappiness", "0"); /* the budget is RAM: no swapping instead */
  } else {
    (void)write_str(cg->dir, "memory.swap.max", "0");
  }
  char path[PATH_MAX + 32];
  snprintf(path, sizeof path, "%s/cgroup.procs", cg->dir);
  cg->procs_fd = open(path, O_WRONLY | O_CLOEXEC);
  int rc = cg->procs_fd < 0 ? -errno : lgiso_cg_limit(cg, limit);
  if (rc < 0) {
    snprintf(why, whylen, "setting up %.100s: %s", cg->dir, strerror(-rc));
    lgiso_cg_remove(cg);
    return -1;
  }
  return 0;
}

int lgiso_cg_limit(lgiso_cg_t *cg, size_t limit) {
  char num[32];
  snprintf(num, sizeof num, "%zu", limit);
  return write_str(cg->dir, LGSM_CG_LIMIT(cg->v), num);
}

/* In the child, before its filter: only write and close (async-signal-safe). */
int lgiso_cg_enter(lgiso_cg_t *cg) {
  char num[24], *p = num + sizeof num;
  unsigned long v = (unsigned long)getpid();
  do {
    *--p = (char)('0' + v % 10);
    v /= 10;
  } while (v);
  ssize_t n = write(cg->procs_fd, p, (size_t)(num + sizeof num - p));
  int e = errno;
  close(cg->procs_fd);
  cg->procs_fd = -1;
  return n < 0 ? -e : 0;
}

/* A number file, or a "key N" line of a keyed file; -1 when absent. */
static int64_t read_num(const lgiso_cg_t *cg, const char *file, const char *key) {
  char path[PATH_MAX + 32], buf[2048];
  snprintf(path, sizeof path, "%s/%s", cg->dir, file);
  if (read_small(path, buf, sizeof buf) <= 0) return -1;
  const char *p = buf;
  if (key && !(p = lgsm_cg_key(buf, key))) return -1;
  if (strncmp(p, "max", 3) == 0) return INT64_MAX;
  return strtoll(p, NULL, 10);
}

int64_t lgiso_cg_current(const lgiso_cg_t *cg) { return read_num(cg, LGSM_CG_USAGE(cg->v), NULL); }

int64_t lgiso_cg_peak(const lgiso_cg_t *cg) {
  return read_num(cg, cg->v == 1 ? "memory.max_usage_in_bytes" : "memory.peak", NULL);
}

int lgiso_cg_reset_peak(lgiso_cg_t *cg) {
  return cg->v == 1 ? write_str(cg->dir, "memory.max_usage_in_bytes", "0") : -EOPNOTSUPP;
}

int64_t lgiso_cg_oom_kills(const lgiso_cg_t *cg) {
  int64_t k = read_num(cg, LGSM_CG_OOM_EVENTS(cg->v), "oom_kill");
  return k >= 0 || cg->v == 2 ? k : read_num(cg, "memory.failcnt", NULL); /* v1 before 4.13: failcnt */
}

void lgiso_cg_remove(lgiso_cg_t *cg) {
  if (cg->procs_fd >= 0) close(cg->procs_fd);
  cg->procs_fd = -1;
  if (cg->dir[0]) {
    /* A dying task leaves its cgroup a moment after it is reaped: retry briefly. */
    for (int i = 0; i < 200 && rmdir(cg->dir) < 0 && errno == EBUSY; i++) usleep(500);
    live_del(cg->dir);
  }
  cg->dir[0] = 0;
  cg->v = 0;
}

int lg_isolate_budget_method(char *detail, size_t size) {
  const char *dir = NULL, *no = lgiso_cg_where(&dir);
  if (detail && size) snprintf(detail, size, "%s", no ? no : dir);
  return no ? LG_BUDGET_RSS : LG_BUDGET_CGROUP;
}
