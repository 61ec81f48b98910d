/* SPDX-License-Identifier: MIT */
/*
 * pool_replay.c - replays an allocation trace (bench/pool_trace.c) against
 *   none    no cache: one driver call per allocation and per free
 *   single  one caching pool like PyTorch's (liblgpool with single = 1: size-rounded,
 *           best fit, split and merged, nothing released until emptied)
 *   gen     the generational pool, each allocation's generation from its site's class
 *           measured on an earlier run's trace (the profile)
 * on the host backend (mmap stands for the driver). The pools' clock is the trace's:
 * windows are in trace time, so the figures other than time are deterministic.
 *   pool_replay TRACE PROFILE_TRACE
 * Prints one line per allocator: peak reserved, driver calls, fragmentation (mean of
 * (reserved - allocated) / reserved at the step marks), reserved at the end and after
 * a warn-level trim, replay time (best of 3).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include "leakguard.h"

typedef struct ev {
  char kind;
  uint32_t id;
  uint64_t size, site, t_us;
} ev_t;

typedef struct trace {
  ev_t *e;
  size_t n;
  uint32_t maxid;
} trace_t;

static int load(const char *path, trace_t *t) {
  FILE *f = fopen(path, "r");
  if (!f) return -1;
  size_t cap = 1 << 16;
  t->e = malloc(cap * sizeof *t->e);
  t->n = 0;
  t->maxid = 0;
  char line[256];
  while (fgets(line, sizeof line, f)) {
    ev_t e = {0};
    unsigned long long a, b, c, d;
    if (line[0] == 'a' && sscanf(line + 2, "%llu %llu %llx %llu", &a, &b, &c, &d) == 4) {
      /* The site: the native stack and the size (under torch, every tensor comes
       * through the same few native stacks; the size tells them apart a little). */
      e = (ev_t){'a', (uint32_t)a, b, c ^ (b * 0x9E3779B97F4A7C15ull), d};
    } else if ((line[0] == 'f' || line[0] == 's') && sscanf(line + 2, "%llu %llu", &a, &d) == 2) {
      e = (ev_t){line[0], (uint32_t)a, 0, 0, d};
    } else {
      continue;
    }
    if (t->n == cap) t->e = realloc(t->e, (cap *= 2) * sizeof *t->e);
    t->e[t->n++] = e;
    if (e.kind != 's' && e.id > t->maxid) t->maxid = e.id;
  }
  fclose(f);
  /* The run ends at its last step mark: what the interpreter frees at exit is not the
   * training's (and a block still live there lives to the end). */
  while (t->n && t->e[t->n - 1].kind != 's') t->n--;
  return 0;
}

/* ------------------------------------------------------------------ the profile
 * A block is young when freed in the step it was born in (or within 100 ms), old when
 * never freed or living longer than half the run, middle otherwise; a site's class is
 * its blocks' most frequent class (ties to the older). */
typedef struct site_cls {
  uint64_t site;
  uint32_t n[3];
} site_cls_t;
static site_cls_t *cls;
static size_t ncls;

static int cmp_site(const void *a, const void *b) {
  uint64_t x = ((const site_cls_t *)a)->site, y = ((const site_cls_t *)b)->site;
  return x < y ? -1 : x > y;
}

static site_cls_t *find_site(uint64_t s) {
  site_cls_t k = {s, {0}};
  return ncls ? bsearch(&k, cls, ncls, sizeof *cls, cmp_site) : NULL;
}

static void profile(const trace_t *t) {
  uint32_t *bstep = calloc(t->maxid + 1, 4), step = 0;
  uint64_t *bt = calloc(t->maxid + 1, 8), *bsite = calloc(t->maxid + 1, 8);
  char *freed = calloc(t->maxid + 1, 1);
  uint64_t run = t->n ? t->e[t->n - 1].t_us - t->e[0].t_us : 0;
  cls = calloc(t->n + 1, sizeof *cls);
  for (size_t i = 0; i < t->n; i++)
    if (t->e[i].kind == 'a') cls[ncls++].site = t->e[i].site;
  qsort(cls, ncls, sizeof *cls, cmp_site);
  size_t w = 0;
  for (size_t i = 0; i < ncls; i++)
    if (!w || cls[w - 1].site != cls[i].site) cls[w++] = cls[i];
  ncls = w;
  for (size_t i = 0; i < t->n; i++) {
    const ev_t *e = &t->e[i];
    if (e->kind == 's') step++;
    else if (e->kind == 'a') bstep[e->id] = step, bt[e->id] = e->t_us, bsite[e->id] = e->site;
    else if (e->kind == 'f' && e->id <= t->maxid && bt[e->id]) {
      freed[e->id] = 1;
      uint64_t life = e->t_us - bt[e->id];
      int c = step == bstep[e->id] || life < 100000 ? 0 : life > run / 2 ? 2 : 1;
      find_site(bsite[e->id])->n[c]++;
    }
  }
  for (uint32_t id = 1; id <= t->maxid; id++)
    if (bt[id] && !freed[id]) find_site(bsite[id])->n[2]++;
  free(bstep);
  free(bt);
  free(bsite);
  free(freed);
}

static lg_gen_t gen_of(uint64_t site) {
  site_cls_t *s = find_site(site);
  if (!s) return LG_GEN_MIDDLE; /* a site the earlier run did not have */
  int best = 2;
  for (int g = 1; g >= 0; g--)
    if (s->n[g] > s->n[best]) best = g;
  return (lg_gen_t)best;
}

/* ------------------------------------------------------------------ replay */

static uint64_t trace_ms;
static uint64_t trace_clock(void *arg) {
  (void)arg;
  return trace_ms;
}

typedef struct result {
  uint64_t peak_reserved, driver_calls, end_reserved, trimmed_reserved, peak_live;
  double frag, seconds;
} result_t;

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static result_t replay(const trace_t *t, int mode) {
  void **ptr = calloc(t->maxid + 1, sizeof *ptr);
  size_t *sz = calloc(t->maxid + 1, sizeof *sz), *rsz = calloc(t->maxid + 1, sizeof *rsz);
  result_t r = {0};
  lg_pool_t *p = NULL;
  if (mode) {
    lg_pool_config_t c;
    lg_pool_config_init(&c);
    c.single = mode == 1;
    c.clock_ms = trace_clock;
    p = lg_pool_create(&c);
  }
  uint64_t reserved = 0, live = 0, calls = 0;
  double fsum = 0;
  int fn = 0;
  double t0 = now_s();
  for (size_t i = 0; i < t->n; i++) {
    const ev_t *e = &t->e[i];
    trace_ms = e->t_us / 1000;
    if (e->kind == 'a') {
      if (!mode) {
        /* The driver's granularity is counted as 512 B (a lower bound, in favour of
         * no cache); mmap stands for the call. */
        size_t n = (e->size + 511) & ~(size_t)511;
        ptr[e->id] = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        rsz[e->id] = n;
        reserved += n;
        calls++;
        if (reserved > r.peak_reserved) r.peak_reserved = reserved;
      } else {
        ptr[e->id] = lg_pool_alloc_gen(p, e->size, mode == 2 ? gen_of(e->site) : LG_GEN_MIDDLE, NULL);
      }
      live += e->size;
      if (live > r.peak_live) r.peak_live = live;
      sz[e->id] = e->size;
    } else if (e->kind == 'f' && e->id <= t->maxid && ptr[e->id]) {
      if (!mode) {
        munmap(ptr[e->id], rsz[e->id]);
        reserved -= rsz[e->id];
        calls++;
        live -= sz[e->id];
      } else {
        lg_pool_free(p, ptr[e->id], NULL);
        live -= sz[e->id];
      }
      ptr[e->id] = NULL;
    } else if (e->kind == 's') {
      uint64_t res = reserved, alloc = 0;
      for (uint32_t id = 1; !mode && id <= t->maxid; id++)
        if (ptr[id]) alloc += rsz[id];
      if (mode) {
        lg_pool_stats_t s;
        lg_pool_stats(p, &s);
        res = s.reserved_bytes;
        alloc = s.allocated_bytes;
      }
      if (res) fsum += (double)(res - alloc) / (double)res, fn++;
    }
  }
  r.seconds = now_s() - t0;
  r.frag = fn ? fsum / fn : 0;
  if (mode) {
    lg_pool_stats_t s;
    lg_pool_stats(p, &s);
    r.peak_reserved = s.peak_reserved_bytes;
    r.end_reserved = s.reserved_bytes;
    if (getenv("LG_REPLAY_VERBOSE"))
      for (int g = 0; g < 3; g++)
        fprintf(stderr, "  %s: reserved %llu cached %llu\n", lg_gen_name((lg_gen_t)g),
                (unsigned long long)s.reserved_gen[g], (unsigned long long)s.cached_gen[g]);
    lg_pool_trim(p, LG_LEVEL_WARN);
    lg_pool_stats(p, &s);
    r.trimmed_reserved = s.reserved_bytes;
    r.driver_calls = s.driver_allocs + s.driver_frees;
    lg_pool_destroy(p);
  } else {
    r.end_reserved = r.trimmed_reserved = reserved;
    r.driver_calls = calls;
  }
  for (uint32_t id = 1; !mode && id <= t->maxid; id++)
    if (ptr[id]) munmap(ptr[id], rsz[id]);
  free(ptr);
  free(sz);
  free(rsz);
  return r;
}

int main(int argc, char **argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: pool_replay TRACE PROFILE_TRACE\n");
    return 2;
  }
  trace_t t, prof;
  if (load(argv[1], &t) || load(argv[2], &prof)) {
    perror("trace");
    return 1;
  }
  profile(&prof);
  size_t na = 0, steps = 0, ng[3] = {0};
  for (size_t i = 0; i < t.n; i++) {
    if (t.e[i].kind == 'a') na++, ng[gen_of(t.e[i].site)]++;
    if (t.e[i].kind == 's') steps++;
  }
  printf("trace: %zu allocations, %zu steps, %zu sites in the profile; generations young %zu middle %zu old %zu\n", na,
         steps, ncls, ng[0], ng[1], ng[2]);
  static const char *const names[] = {"none", "single", "gen"};
  result_t res[3];
  for (int m = 0; m < 3; m++) {
    res[m] = replay(&t, m);
    for (int k = 0; k < 2; k++) {
      result_t again = replay(&t, m);
      if (again.seconds < res[m].seconds) res[m].seconds = again.seconds;
    }
  }
  printf("%-7s %14s %12s %8s %14s %14s %10s %8s\n", "pool", "peak_reserved", "driver_calls", "frag", "end_reserved",
         "after_warn", "time_ms", "time_x");
  for (int m = 0; m < 3; m++)
    printf("%-7s %14llu %12llu %8.3f %14llu %14llu %10.2f %8.2f\n", names[m], (unsigned long long)res[m].peak_reserved,
           (unsigned long long)res[m].driver_calls, res[m].frag, (unsigned long long)res[m].end_reserved,
           (unsigned long long)res[m].trimmed_reserved, res[m].seconds * 1e3, res[m].seconds / res[0].seconds);
  printf("peak live (requested): %llu\n", (unsigned long long)res[0].peak_live);
  return 0;
}
