/* SPDX-License-Identifier: MIT */
/*
 * sysmem.c - the memory the system reports (sysmem.h): memory cgroups (v2:
 * memory.current, .max, .high, .events, .stat, .pressure; v1: memory.usage_in_bytes,
 * .limit_in_bytes, .stat, .oom_control), processes (/proc/PID/statm, smaps_rollup),
 * /proc/meminfo, PSI, and GPU memory through NVML loaded with dlopen at run time (no
 * header, no link).
 */
#include "core/sysmem.h"

#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/cgpath.h"
#include "core/region.h"
#include "core/util.h"

static long rd(const char *dir, const char *file, char *buf, size_t n) {
  char path[4200];
  snprintf(path, sizeof path, "%s/%s", dir, file);
  return lgu_read_file(path, buf, n);
}

/* A value file: a number, or "max" (0 = none). v1 "unlimited" is a huge number. */
static int rd_u64(const char *dir, const char *file, uint64_t *out) {
  char buf[64];
  long r = rd(dir, file, buf, sizeof buf);
  if (r < 0) return (int)r;
  if (!strncmp(buf, "max", 3)) {
    *out = 0;
    return 0;
  }
  char *end;
  errno = 0;
  unsigned long long v = strtoull(buf, &end, 10);
  if (errno || end == buf) return -EINVAL;
  *out = v >= (1ULL << 60) ? 0 : v;
  return 0;
}

/* "key value" lines: value of key, or 0. */
static uint64_t kv(const char *text, const char *key) {
  const char *p = lgsm_cg_key(text, key);
  return p ? strtoull(p + 1, NULL, 10) : 0;
}

int lgsm_cgroup_version(const char *dir) {
  char p[4200];
  snprintf(p, sizeof p, "%s/%s", dir, LGSM_CG_USAGE(2));
  if (access(p, F_OK) == 0) return 2;
  snprintf(p, sizeof p, "%s/%s", dir, LGSM_CG_USAGE(1));
  if (access(p, F_OK) == 0) return 1;
  if (access(dir, F_OK) != 0) return -errno;
  return -ENOTSUP;
}

int lgsm_psi_parse(const char *text, double *some10, double *full10) {
  const char *s = strstr(text, "some avg10=");
  if (!s) return -EINVAL;
  *some10 = strtod(s + 11, NULL);
  const char *f = strstr(text, "full avg10=");
  *full10 = f ? strtod(f + 11, NULL) : -1;
  return 0;
}

int lgsm_cgroup_read(const char *dir, int version, lgsm_cg_sample_t *s) {
  memset(s, 0, sizeof *s);
  s->psi_some10 = s->psi_full10 = -1;
  char buf[8192];
  int r;
  if (version == 2) {
    if ((r = rd_u64(dir, LGSM_CG_USAGE(2), &s->usage))) return r;
    rd_u64(dir, LGSM_CG_LIMIT(2), &s->limit);
    rd_u64(dir, "memory.high", &s->high);
    if (rd(dir, LGSM_CG_OOM_EVENTS(2), buf, sizeof buf) > 0) {
      s->oom_kill = kv(buf, "oom_kill");
      s->oom = kv(buf, "oom");
      s->high_events = kv(buf, "high");
      s->max_events = kv(buf, "max");
    }
    uint64_t inactive = 0;
    if (rd(dir, "memory.stat", buf, sizeof buf) > 0) {
      s->anon = kv(buf, "anon");
      s->file = kv(buf, "file");
      inactive = kv(buf, "inactive_file");
    }
    s->working_set = s->usage > inactive ? s->usage - inactive : 0;
    if (rd(dir, "memory.pressure", buf, sizeof buf) > 0) lgsm_psi_parse(buf, &s->psi_some10, &s->psi_full10);
  } else {
    if ((r = rd_u64(dir, LGSM_CG_USAGE(1), &s->usage))) return r;
    rd_u64(dir, LGSM_CG_LIMIT(1), &s->limit);
    uint64_t inactive = 0;
    if (rd(dir, "memory.stat", buf, sizeof buf) > 0) {
      s->anon = kv(buf, "total_rss");
      s->file = kv(buf, "total_cache");
      inactive = kv(buf, "total_inactive_file");
      if (!s->limit) { /* an ancestor's limit applies (use_hierarchy) */
        uint64_t h = kv(buf, "hierarchical_memory_limit");
        s->limit = h >= (1ULL << 60) ? 0 : h;
      }
    }
    s->working_set = s->usage > inactive ? s->usage - inactive : 0;
    if (rd(dir, LGSM_CG_OOM_EVENTS(1), buf, sizeof buf) > 0) s->oom_kill = kv(buf, "oom_kill");
    uint64_t fc = 0;
    if (rd_u64(dir, "memory.failcnt", &fc) == 0) s->max_events = fc;
  }
  return 0;
}

long lgsm_cgroup_pids(const char *dir, int **pids) {
  char path[4200];
  snprintf(path, sizeof path, "%s/cgroup.procs", dir);
  FILE *f = fopen(path, "re");
  if (!f) return -errno;
  size_t n = 0, cap = 64;
  int *a = malloc(cap * sizeof *a);
  if (!a) {
    fclose(f);
    return -ENOMEM;
  }
  int pid;
  while (fscanf(f, "%d", &pid) == 1) {
    if (n == cap) {
      int *b = realloc(a, 2 * cap * sizeof *a);
      if (!b) {
        free(a);
        fclose(f);
        return -ENOMEM;
      }
      a = b;
      cap *= 2;
    }
    a[n++] = pid;
  }
  int bad = ferror(f);
  fclose(f);
  if (bad) {
    free(a);
    return -EIO;
  }
  *pids = a;
  return (long)n;
}

int64_t lgsm_proc_mem(int pid, int kind) {
  char path[64], buf[4096];
  if (kind == LGSM_MEM_PSS) {
    snprintf(path, sizeof path, "/proc/%d/smaps_rollup", pid);
    long r = lgu_read_file(path, buf, sizeof buf);
    if (r < 0) return r;
    const char *p = strstr(buf, "\nPss:");
    if (p) return (int64_t)strtoull(p + 5, NULL, 10) * 1024;
    if (r == 0) return -ESRCH; /* zombie / kernel thread: nothing mapped */
    /* fall through to RSS */
  }
  snprintf(path, sizeof path, "/proc/%d/statm", pid);
  long r = lgu_read_file(path, buf, sizeof buf);
  if (r < 0) return r == -ENOENT ? -ESRCH : r;
  unsigned long long size, res;
  if (sscanf(buf, "%llu %llu", &size, &res) != 2) return -ESRCH;
  static long page;
  if (!page) page = sysconf(_SC_PAGESIZE);
  return (int64_t)res * page;
}

int lgsm_proc_cgroup_dir(int pid, char *out, size_t n) {
  char path[64], buf[4096], cg[4096], mnt[4096], root[4096];
  snprintf(path, sizeof path, "/proc/%d/cgroup", pid);
  if (lgu_read_file(path, buf, sizeof buf) <= 0) return -ENOENT;
  /* the v1 memory controller first: where it is mounted, it is the one that limits */
  for (int v = 1; v <= 2; v++) {
    if (lgsm_cg_path(buf, v, cg, sizeof cg) != 0) continue;
    if (lgsm_cg_find_mount(v, mnt, sizeof mnt, root, sizeof root) ==
            0 /* as the collector sees it: it opens the paths */
        && lgsm_cg_join(out, n, mnt, root, cg) == 0)
      return v;
    /* no mountinfo to read: the usual mount points (hybrid hierarchies mount cgroup2
     * under unified/) */
    if (v == 1) snprintf(out, n, "/sys/fs/cgroup/memory%s", cg);
    else {
      snprintf(out, n, "/sys/fs/cgroup%s", cg);
      if (lgsm_cgroup_version(out) != 2) snprintf(out, n, "/sys/fs/cgroup/unified%s", cg);
    }
    return v;
  }
  return -ENOENT;
}

uint64_t lgsm_proc_cgroup_limit(int pid) {
  char dir[4200];
  lgsm_cg_sample_t s;
  int v = lgsm_proc_cgroup_dir(pid, dir, sizeof dir);
  if (v < 0 || lgsm_cgroup_version(dir) != v || lgsm_cgroup_read(dir, v, &s) != 0) return 0;
  return s.limit;
}

int lgsm_meminfo(uint64_t *total, uint64_t *avail) {
  char buf[8192];
  long r = lgu_read_file("/proc/meminfo", buf, sizeof buf);
  if (r <= 0) return r < 0 ? (int)r : -EIO;
  const char *t = strstr(buf, "MemTotal:"), *a = strstr(buf, "MemAvailable:");
  if (!t || !a) return -EINVAL;
  *total = strtoull(t + 9, NULL, 10) * 1024;
  *avail = strtoull(a + 13, NULL, 10) * 1024;
  return 0;
}

/* ------------------------------------------------------------------ NVML */
/* The few NVML declarations we need (ABI from nvml.h, stable since driver 3xx). */
typedef void *nvml_dev_t;
typedef struct {
  unsigned long long total, free, used;
} nvml_memory_t;
typedef struct {
  unsigned int pid;
  unsigned long long usedGpuMemory;
} nvml_proc_v1_t;
#define NVML_SUCCESS 0
#define NVML_ERROR_INSUFFICIENT_SIZE 7

struct lgsm_nvml {
  void *lib;
  int (*init)(void);
  int (*shutdown)(void);
  int (*count)(unsigned *);
  int (*handle)(unsigned, nvml_dev_t *);
  int (*mem)(nvml_dev_t, nvml_memory_t *);
  int (*procs)(nvml_dev_t, unsigned *, nvml_proc_v1_t *);
  const char *(*errstr)(int);
  int ndev;
  nvml_dev_t dev[LGSM_GPU_MAX];
};

lgsm_nvml_t *lgsm_nvml_open(char *why, size_t whylen) {
  const char *name = getenv(LG_ENV_NVML); /* tests: a stand-in library */
  if (!name || !*name) name = "libnvidia-ml.so.1";
  void *lib = dlopen(name, RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    (void)dlerror();
    snprintf(why, whylen, "GPU source off: %s not found (no NVIDIA driver)", name);
    return NULL;
  }
  lgsm_nvml_t *n = calloc(1, sizeof *n);
  if (!n) {
    dlclose(lib);
    snprintf(why, whylen, "GPU source off: out of memory");
    return NULL;
  }
  n->lib = lib;
  *(void **)&n->init = dlsym(lib, "nvmlInit_v2");
  *(void **)&n->shutdown = dlsym(lib, "nvmlShutdown");
  *(void **)&n->count = dlsym(lib, "nvmlDeviceGetCount_v2");
  *(void **)&n->handle = dlsym(lib, "nvmlDeviceGetHandleByIndex_v2");
  *(void **)&n->mem = dlsym(lib, "nvmlDeviceGetMemoryInfo");
  *(void **)&n->procs = dlsym(lib, "nvmlDeviceGetComputeRunningProcesses");
  *(void **)&n->errstr = dlsym(lib, "nvmlErrorString");
  if (!n->init || !n->shutdown || !n->count || !n->handle || !n->mem) {
    snprintf(why, whylen, "GPU source off: %s lacks the NVML functions needed", name);
    dlclose(lib);
    free(n);
    return NULL;
  }
  int rc = n->init();
  if (rc != NVML_SUCCESS) {
    snprintf(why, whylen, "GPU source off: nvmlInit failed: %s", n->errstr ? n->errstr(rc) : "error");
    dlclose(lib);
    free(n);
    return NULL;
  }
  unsigned c = 0;
  if (n->count(&c) != NVML_SUCCESS) c = 0;
  for (unsigned i = 0; i < c && n->ndev < LGSM_GPU_MAX; i++)
    if (n->handle(i, &n->dev[n->ndev]) == NVML_SUCCESS) n->ndev++;
  if (!n->ndev) {
    snprintf(why, whylen, "GPU source off: NVML found no GPU");
    lgsm_nvml_close(n);
    return NULL;
  }
  return n;
}

int lgsm_nvml_count(const lgsm_nvml_t *n) { return n ? n->ndev : 0; }

int lgsm_nvml_mem(lgsm_nvml_t *n, int i, uint64_t *used, uint64_t *total) {
  nvml_memory_t m;
  if (!n || i < 0 || i >= n->ndev || n->mem(n->dev[i], &m) != NVML_SUCCESS) return -1;
  *used = m.used;
  *total = m.total;
  return 0;
}

int lgsm_nvml_procs(lgsm_nvml_t *n, int i, void (*cb)(void *arg, int pid, uint64_t bytes), void *arg) {
  if (!n || !n->procs || i < 0 || i >= n->ndev) return -1;
  nvml_proc_v1_t p[128];
  unsigned c = 128;
  int rc = n->procs(n->dev[i], &c, p);
  if (rc != NVML_SUCCESS) return -1; /* INSUFFICIENT_SIZE: more than 128, entries not filled */
  if (c > 128) c = 128;
  for (unsigned k = 0; k < c; k++) cb(arg, (int)p[k].pid, p[k].usedGpuMemory);
  return (int)c;
}

void lgsm_nvml_close(lgsm_nvml_t *n) {
  if (!n) return;
  n->shutdown();
  dlclose(n->lib);
  free(n);
}

/* ------------------------------------------------------------------ the calling process's limit */

/* The calling process's memory cgroup when it sets a limit. */
static int self_cgroup(char *dir, size_t n, lgsm_cg_sample_t *s) {
  int v = lgsm_proc_cgroup_dir(getpid(), dir, n);
  if (v < 0 || lgsm_cgroup_version(dir) != v || lgsm_cgroup_read(dir, v, s) != 0 || !s->limit) return -ENOENT;
  return 0;
}

int lgsm_memory_cgroup(char *out, size_t n) {
  lgsm_cg_sample_t s;
  return self_cgroup(out, n, &s);
}

uint64_t lgsm_memory_limit(const char **source) {
  uint64_t total = 0, avail = 0;
  char dir[4200];
  lgsm_cg_sample_t s;
  lgsm_meminfo(&total, &avail);
  if (self_cgroup(dir, sizeof dir, &s) == 0 && (s.limit < total || !total)) {
    if (source) *source = "cgroup";
    return s.limit;
  }
  if (source) *source = "physical";
  return total;
}

uint64_t lgsm_memory_usage(void) {
  uint64_t total = 0, avail = 0;
  char dir[4200];
  lgsm_cg_sample_t s;
  lgsm_meminfo(&total, &avail);
  if (self_cgroup(dir, sizeof dir, &s) == 0 && s.limit < total && s.usage) return s.usage;
  return total > avail ? total - avail : 0;
}
