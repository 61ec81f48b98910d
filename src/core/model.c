/* SPDX-License-Identifier: MIT */
/* model.c - reads a recorded process's shared region into per-site totals. */
#include "core/model.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "leakguard.h"

const char *lgm_kind_name(int kind) {
  static const char *const n[] = {"start", "fork", "exec", "spawn"};
  return kind >= 0 && kind < 4 ? n[kind] : "start";
}

int lgm_attach(lgm_proc_t *p, int fd, uint64_t size) {
  if (size < sizeof(lg_region_hdr_t)) return -EINVAL;
  void *m = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0); /* writes: epoch only */
  if (m == MAP_FAILED) return -errno;
  lg_region_hdr_t *h = m;
  if (h->magic != LG_REGION_MAGIC || h->version != LG_REGION_VERSION || h->size != size) {
    munmap(m, size);
    return -EPROTO;
  }
  p->hdr = h;
  p->map_size = size;
  return 0;
}

void lgm_release(lgm_proc_t *p) {
  if (p->hdr) munmap(p->hdr, p->map_size);
  p->hdr = NULL;
  free(p->sites);
  free(p->stored);
  p->sites = p->stored = NULL;
  p->nsites = 0;
}

uint32_t lgm_nstacks(const lgm_proc_t *p) {
  uint32_t n = atomic_load_explicit(&p->hdr->nstacks, memory_order_acquire);
  return n > p->hdr->stacks_cap ? p->hdr->stacks_cap : n;
}

unsigned lgm_stack(const lgm_proc_t *p, uint32_t id, const uint64_t **ips, unsigned *space) {
  const lg_region_hdr_t *h = p->hdr;
  if (id < 2 || id >= lgm_nstacks(p)) return 0;
  const lg_stack_rec_t *r = LG_PTR(h, h->stacks_off, const lg_stack_rec_t *) + id;
  if (r->depth > LG_MAX_DEPTH || (uint64_t)r->frames + r->depth > h->frames_cap) return 0;
  *ips = LG_PTR(h, h->frames_off, const uint64_t *) + r->frames;
  *space = r->space;
  return r->depth;
}

unsigned lgm_stack_device(const lgm_proc_t *p, uint32_t id) {
  const lg_region_hdr_t *h = p->hdr;
  if (id < 2 || id >= lgm_nstacks(p)) return 0;
  return (LG_PTR(h, h->stacks_off, const lg_stack_rec_t *) + id)->device;
}

int lgm_pyframe(const lgm_proc_t *p, uint64_t ip, const char **file, const char **func, int *line) {
  const lg_region_hdr_t *h = p->hdr;
  if (!(ip & LG_PYFRAME_BIT)) return -ENOENT;
  uint64_t id = ip & ~LG_PYFRAME_BIT;
  uint32_t n = atomic_load_explicit(&((lg_region_hdr_t *)h)->npyframes, memory_order_acquire);
  if (id == 0 || id >= n || id >= h->pyframes_cap) return -ENOENT;
  const lg_pyframe_rec_t *r = LG_PTR(h, h->pyframes_off, const lg_pyframe_rec_t *) + id;
  const char *strs = LG_PTR(h, h->pystr_off, const char *);
  if (r->file >= h->pystr_cap || r->func >= h->pystr_cap) return -ENOENT;
  *file = strs + r->file;
  *func = strs + r->func;
  *line = r->line;
  return 0;
}

uint32_t lgm_nmodules(const lgm_proc_t *p) {
  uint32_t n = atomic_load_explicit(&p->hdr->nmodules, memory_order_acquire);
  return n > p->hdr->modules_cap ? p->hdr->modules_cap : n;
}

const lg_module_rec_t *lgm_module(const lgm_proc_t *p, uint32_t i) {
  return LG_PTR(p->hdr, p->hdr->modules_off, const lg_module_rec_t *) + i;
}

static int grow(lgm_proc_t *p, uint32_t n) {
  if (n <= p->nsites) return 0;
  lgm_site_t *a = realloc(p->sites, n * sizeof *a);
  if (!a) return -ENOMEM;
  p->sites = a;
  lgm_site_t *b = realloc(p->stored, n * sizeof *b);
  if (!b) return -ENOMEM;
  p->stored = b;
  memset(a + p->nsites, 0, (n - p->nsites) * sizeof *a);
  memset(b + p->nsites, 0, (n - p->nsites) * sizeof *b);
  for (uint32_t i = p->nsites; i < n; i++) {
    unsigned space = 0;
    const uint64_t *ips;
    if (lgm_stack(p, i, &ips, &space)) {
      a[i].space = b[i].space = (uint8_t)space;
      a[i].device = b[i].device = (uint8_t)lgm_stack_device(p, i);
    }
  }
  p->nsites = n;
  return 0;
}

/* The counters of site in shard sd (NULL when that shard never touched its chunk). */
static const lg_site_ctr_t *shard_ctr(const lg_region_hdr_t *h, const lg_shard_desc_t *sd, uint32_t site) {
  const lg_site_ctr_t *c = lg_shard_chunk(h, sd, site / LG_SITES_PER_CHUNK);
  return c ? c + site % LG_SITES_PER_CHUNK : NULL;
}

void lgm_tick(lgm_proc_t *p, uint64_t now_ns) {
  lg_region_hdr_t *h = p->hdr;
  /* Ticks since the region's own start (the recorder's CLOCK_MONOTONIC): a block
   * born before the collector took the process in was born at epoch 0, and its age
   * counts from there. (A forked child's region starts again at its fork, epoch 0:
   * a block it inherited and frees is counted younger than it is, at least 0.) Never
   * backwards. */
  uint64_t start = h->start_ns ? h->start_ns : p->start_ns;
  uint64_t t = now_ns > start ? (now_ns - start) / LG_TICK_NS : 0;
  uint32_t epoch = t > UINT32_MAX ? UINT32_MAX : (uint32_t)t;
  if (epoch <= atomic_load_explicit(&h->epoch, memory_order_relaxed)) return;
  if (!h->stepmap_off || h->stepmap_off + LG_STEPMAP * sizeof(uint32_t) > p->map_size) {
    atomic_store_explicit(&h->epoch, epoch, memory_order_release); /* no step map (a test's region) */
    return;
  }
  uint32_t *map = LG_PTR(h, h->stepmap_off, uint32_t *);
  /* the slot first, then the epoch: a block born in this tick reads a slot written */
  __atomic_store_n(&map[epoch % LG_STEPMAP], (uint32_t)atomic_load_explicit(&h->steps, memory_order_acquire),
                   __ATOMIC_RELAXED);
  atomic_store_explicit(&h->epoch, epoch, memory_order_release);
}

int lgm_freed_ages(const lgm_proc_t *p, uint32_t id, int steps, uint64_t ages[LG_AGES]) {
  const lg_region_hdr_t *h = p->hdr;
  memset(ages, 0, LG_AGES * sizeof *ages);
  if (id >= p->nsites) return -ERANGE;
  const lgm_site_t *st = &p->sites[id];
  int64_t freed = (int64_t)st->alloc_blocks - st->live_blocks;
  if (freed <= 0) return -ERANGE;
  const lg_shard_desc_t *sd = LG_PTR(h, h->shards_off, const lg_shard_desc_t *);
  uint32_t nshards = __atomic_load_n(&h->nshards, __ATOMIC_ACQUIRE);
  if (nshards > h->shards_cap) nshards = h->shards_cap;
  /* each shard's counter wraps (int32): their sum is right modulo 2^32 */
  uint32_t sum[LG_AGES] = {0};
  for (uint32_t s = 0; s < nshards; s++) {
    const lg_site_ctr_t *x = shard_ctr(h, &sd[s], id);
    if (!x) continue;
    const int32_t *c = steps ? x->freed_step_age : x->freed_age;
    for (unsigned a = 0; a < LG_AGES; a++) sum[a] += (uint32_t)__atomic_load_n(&c[a], __ATOMIC_RELAXED);
  }
  int64_t total = 0;
  for (unsigned a = 0; a < LG_AGES; a++) {
    int32_t v = (int32_t)sum[a]; /* a free undone one tick later leaves -1 behind */
    ages[a] = v > 0 ? (uint64_t)v : 0;
    total += v > 0 ? v : 0;
  }
  /* steps: the frees before the first step marked are not in these counters */
  if (steps) return total > 0 && total <= freed + freed / 100 ? 0 : -ERANGE;
  int64_t d = total > freed ? total - freed : freed - total;
  return d * 100 <= freed ? 0 : -ERANGE;
}

int lgm_collect(lgm_proc_t *p) {
  const lg_region_hdr_t *h = p->hdr;
  uint32_t n = lgm_nstacks(p);
  if (grow(p, n) != 0) return -ENOMEM;
  for (uint32_t i = 0; i < n; i++) {
    uint8_t sp = p->sites[i].space, dev = p->sites[i].device, known = p->sites[i].known;
    memset(&p->sites[i], 0, sizeof p->sites[i]);
    p->sites[i].space = sp;
    p->sites[i].device = dev;
    p->sites[i].known = known;
  }
  const lg_shard_desc_t *sd = LG_PTR(h, h->shards_off, const lg_shard_desc_t *);
  uint32_t nshards = atomic_load(&((lg_region_hdr_t *)h)->nshards);
  if (nshards > h->shards_cap) nshards = h->shards_cap;
  uint32_t nchunks = (n + LG_SITES_PER_CHUNK - 1) / LG_SITES_PER_CHUNK;
  /* Pass 1: bytes and blocks, summed over the shards. */
  for (uint32_t s = 0; s < nshards; s++) {
    for (uint32_t c = 0; c < nchunks; c++) {
      const lg_site_ctr_t *ctr = lg_shard_chunk(h, &sd[s], c);
      if (!ctr) continue;
      for (uint32_t k = 0; k < LG_SITES_PER_CHUNK; k++) {
        uint32_t site = c * LG_SITES_PER_CHUNK + k;
        if (site >= n) break;
        const lg_site_ctr_t *x = &ctr[k];
        lgm_site_t *t = &p->sites[site];
        t->live_bytes += __atomic_load_n(&x->live_bytes, __ATOMIC_RELAXED);
        t->live_blocks += __atomic_load_n(&x->live_blocks, __ATOMIC_RELAXED);
        t->alloc_bytes += __atomic_load_n(&x->alloc_bytes, __ATOMIC_RELAXED);
        t->alloc_blocks += __atomic_load_n(&x->alloc_blocks, __ATOMIC_RELAXED);
      }
    }
  }
  /* Pass 2: the age of the oldest live block, for the sites that hold any. Most of the
   * stacks of a Python program's start-up (10^5) hold nothing after it: reading every
   * site's 24 era counters in every shard, and clearing a table of them, was most of a
   * snapshot's cost. */
  for (uint32_t i = 0; i < n; i++) {
    lgm_site_t *t = &p->sites[i];
    t->oldest_epoch = UINT32_MAX;
    if (t->live_blocks <= 0) continue;
    int32_t eras[LG_ERAS] = {0};
    for (uint32_t s = 0; s < nshards; s++) {
      const lg_site_ctr_t *x = shard_ctr(h, &sd[s], i);
      if (!x) continue;
      for (unsigned e = 0; e < LG_ERAS; e++) eras[e] += __atomic_load_n(&x->era_blocks[e], __ATOMIC_RELAXED);
    }
    for (unsigned e = 0; e < LG_ERAS; e++)
      if (eras[e] > 0) {
        t->oldest_epoch = lg_era_start(e);
        break;
      }
  }
  int64_t live = 0, blocks = 0, host = 0, mm = 0, gpu = 0;
  memset(p->gpu_space_bytes, 0, sizeof p->gpu_space_bytes);
  for (uint32_t i = 0; i < n; i++) {
    lgm_site_t *t = &p->sites[i];
    live += t->live_bytes;
    blocks += t->live_blocks;
    if (t->space == LG_SPACE_MMAP) mm += t->live_bytes;
    else if (t->space >= 2 && t->space <= 4) { /* device, managed, pinned (lg_space_t) */ gpu += t->live_bytes;
      if (t->device < LG_GPU_MAX_DEVICES) p->gpu_space_bytes[t->device][t->space - 2] += t->live_bytes;
    } else host += t->live_bytes;
  }
  p->live_bytes = live;
  p->live_blocks = blocks;
  p->host_bytes = host;
  p->mmap_bytes = mm;
  p->gpu_bytes = gpu;
  if (live > p->peak_live_bytes) p->peak_live_bytes = live;
  return 0;
}
