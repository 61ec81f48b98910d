/* SPDX-License-Identifier: MIT */
/*
 * regions.c - publishing the guard level to processes running with the recorder.
 *
 * Each recorded process holds its shared region as a memfd named "leakguard-region";
 * /proc/PID/fd/N reads "/memfd:leakguard-region (deleted)". The guard opens that fd
 * through /proc, checks magic/version/size, maps the header page shared and writes
 * guard_level, bumps guard_seq and, at emergency, sets evict_request (bytes to free);
 * the recorder's helper thread notifies its subscribers (include/leakguard.h).
 * Regions are deduplicated by inode (the collector of `leakguard run` holds the same
 * memfds) and unmapped when their process is gone, so the guard keeps no memfd alive.
 */
#include "guard/guard_impl.h"
#include "core/model.h"
#include "core/region.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/region.h"

#define MEMFD_LINK "/memfd:" LG_REGION_MEMFD

typedef struct region {
  dev_t dev;
  ino_t ino;
  int pid;
  lg_region_hdr_t *hdr;
  size_t map;
  int seen;
} region_t;

struct lgg_regions {
  region_t *r;
  int n, cap;
  int scan;
};

lgg_regions_t *lgg_regions_new(void) { return calloc(1, sizeof(lgg_regions_t)); }

int lgg_regions_count(const lgg_regions_t *r) { return r ? r->n : 0; }
int lgg_regions_pid(const lgg_regions_t *r, int i) { return r->r[i].pid; }

static void drop(lgg_regions_t *r, int i) {
  munmap(r->r[i].hdr, r->r[i].map);
  r->r[i] = r->r[--r->n];
}

static void try_fd(lgg_regions_t *r, int pid, const char *fdname, int level) {
  char path[96], link[128];
  snprintf(path, sizeof path, "/proc/%d/fd/%s", pid, fdname);
  ssize_t k = readlink(path, link, sizeof link - 1);
  if (k <= 0) return;
  link[k] = 0;
  if (strncmp(link, MEMFD_LINK, sizeof MEMFD_LINK - 1)) return;
  struct stat st;
  if (stat(path, &st) != 0) return;
  for (int i = 0; i < r->n; i++)
    if (r->r[i].dev == st.st_dev && r->r[i].ino == st.st_ino) {
      r->r[i].seen = r->scan;
      return;
    }
  int fd = open(path, O_RDWR | O_CLOEXEC);
  if (fd < 0) return;
  lg_region_hdr_t h;
  size_t map = (size_t)sysconf(_SC_PAGESIZE);
  if (pread(fd, &h, sizeof h, 0) != (ssize_t)sizeof h || h.magic != LG_REGION_MAGIC || h.version != LG_REGION_VERSION ||
      h.size != (uint64_t)st.st_size || h.size < map) {
    close(fd);
    return;
  }
  void *m = mmap(NULL, map, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (m == MAP_FAILED) return;
  if (r->n == r->cap) {
    int cap = r->cap ? 2 * r->cap : 16;
    region_t *a = realloc(r->r, (size_t)cap * sizeof *a);
    if (!a) {
      munmap(m, map);
      return;
    }
    r->r = a;
    r->cap = cap;
  }
  region_t *e = &r->r[r->n++];
  e->dev = st.st_dev;
  e->ino = st.st_ino;
  e->hdr = m;
  e->map = map;
  e->pid = e->hdr->pid;
  e->seen = r->scan;
  if (level >= 0 && (int)atomic_load(&e->hdr->guard_level) != level) {
    atomic_store(&e->hdr->guard_level, (uint32_t)level);
    atomic_fetch_add(&e->hdr->guard_seq, 1);
  }
}

static void scan_pid(lgg_regions_t *r, int pid, int level) {
  char path[64];
  snprintf(path, sizeof path, "/proc/%d/fd", pid);
  DIR *d = opendir(path);
  if (!d) return;
  struct dirent *de;
  while ((de = readdir(d)))
    if (de->d_name[0] != '.') try_fd(r, pid, de->d_name, level);
  closedir(d);
}

void lgg_regions_scan(lgg_regions_t *r, const int *pids, long n, int level) {
  r->scan++;
  if (n < 0) {
    DIR *d = opendir("/proc");
    if (d) {
      struct dirent *de;
      while ((de = readdir(d))) {
        int pid = atoi(de->d_name);
        if (pid > 0 && pid != getpid()) scan_pid(r, pid, level);
      }
      closedir(d);
    }
  } else {
    for (long i = 0; i < n; i++) scan_pid(r, pids[i], level);
  }
  /* keep a region while its process lives; recorded processes that are not in scope
   * any more (or exited) are dropped so their memfd is freed */
  for (int i = 0; i < r->n;) {
    region_t *e = &r->r[i];
    int gone = kill(e->pid, 0) != 0 && errno == ESRCH;
    uint32_t st = atomic_load(&e->hdr->state);
    if (gone || st == LG_PS_EXITING || st == LG_PS_EXECED || e->seen != r->scan) drop(r, i);
    else i++;
  }
}

int lgg_regions_publish(lgg_regions_t *r, int level, uint64_t evict_bytes) {
  int c = 0;
  for (int i = 0; i < r->n; i++) {
    lg_region_hdr_t *h = r->r[i].hdr;
    if (evict_bytes) atomic_store(&h->evict_request, evict_bytes);
    atomic_store(&h->guard_level, (uint32_t)level);
    atomic_fetch_add(&h->guard_seq, 1);
    c++;
  }
  return c;
}

void lgg_regions_free(lgg_regions_t *r) {
  if (!r) return;
  for (int i = 0; i < r->n; i++) munmap(r->r[i].hdr, r->r[i].map);
  free(r->r);
  free(r);
}

/* ------------------------------------------------------------------ GPU memory */

int lgg_regions_gpu_count(const lgg_regions_t *r) {
  int n = 0;
  lgm_gpu_t g[LG_GPU_MAX_DEVICES];
  for (int i = 0; r && i < r->n; i++) {
    int k = lgm_gpus(r->r[i].hdr, g, LG_GPU_MAX_DEVICES);
    if (k > n) n = k;
  }
  return n;
}

int lgg_regions_gpu(const lgg_regions_t *r, int dev, uint64_t *used, uint64_t *total) {
  if (!r || dev < 0 || dev >= LG_GPU_MAX_DEVICES) return -1;
  int64_t u = 0;
  uint64_t tot = 0;
  int any = 0;
  lgm_gpu_t gpu[LG_GPU_MAX_DEVICES];
  for (int i = 0; i < r->n; i++) {
    if (lgm_gpus(r->r[i].hdr, gpu, LG_GPU_MAX_DEVICES) <= dev) continue;
    const lgm_gpu_t *g = &gpu[dev];
    int64_t cache = g->pool_reserved_bytes - g->pool_used_bytes;
    u += g->device_bytes + g->managed_bytes + (cache > 0 ? cache : 0);
    if (g->total_bytes > tot) tot = g->total_bytes;
    any = 1;
  }
  if (!any) return -1;
  *used = u > 0 ? (uint64_t)u : 0;
  *total = tot;
  return 0;
}
