/* SPDX-License-Identifier: MIT */
/*
 * pool_trace.c - a tiny LD_PRELOAD tracer for bench/pool_replay.sh: the allocation
 * trace of a PyTorch CPU run (tensor storage: c10's CPU allocator takes it with
 * posix_memalign), with sizes, times, steps and a site per allocation.
 *
 * Only posix_memalign'ed blocks are traced (Python objects and small buffers come
 * from malloc and are not what a device caching allocator would see). A site is a hash
 * of the first 8 return addresses (backtrace; run under `setarch -R` so that two runs
 * give the same addresses), or with LGTRACE_KEY=python the allocating thread's innermost
 * Python line when it runs Python code (the key liblgpool's site profile uses under
 * PyTorch; read with src/capture/pyread.h, as liblgpool does). Steps: the program calls lgtrace_step() (ctypes). Records
 * go to an mmap'ed buffer, written at exit to LGTRACE_OUT as text lines:
 *   a <id> <size> <site> <t_us>      f <id> <t_us>      s <step> <t_us>
 */
#include <dlfcn.h>
#include <execinfo.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "capture/pyread.h"

#define EXPORT __attribute__((visibility("default")))
#define MAXREC (16u << 20)

typedef struct rec {
  char kind;
  uint32_t id;
  uint64_t size, site, t_us, addr;
} rec_t;

static rec_t *recs;
static _Atomic uint32_t nrec, nextid;
static int (*real_pm)(void **, size_t, size_t);
static void (*real_free)(void *);
static __thread int busy;
static uint64_t t0;

/* Live traced blocks: address -> id (open addressing, 1M slots). */
#define LIVE (1u << 20)
static struct slot {
  uintptr_t a;
  uint32_t id;
} * live;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;

static int key_python = -1; /* LGTRACE_KEY=python: 1 once the reader is set up, -2 none */
static lgi_pyreader_t py;

/* FNV-1a of the innermost Python line, 0 when the thread runs no Python code. */
static uint64_t python_key(void) {
  if (key_python == -1) {
    const char *k = getenv("LGTRACE_KEY");
    unsigned ma, mi;
    key_python = !k || strcmp(k, "python") ? -2 : lgi_pyreader_init(&py, &ma, &mi) == LGI_PYR_READY ? 1 : -1;
  }
  char line[600];
  if (key_python != 1 || !lgi_py_innermost_line(&py, line, sizeof line)) return 0;
  uint64_t h = 1469598103934665603ull;
  for (const char *c = line; *c; c++) h = (h ^ (unsigned char)*c) * 1099511628211ull;
  return h;
}

static uint64_t now_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u - t0;
}

__attribute__((constructor)) static void init(void) {
  *(void **)&real_pm = dlsym(RTLD_NEXT, "posix_memalign");
  *(void **)&real_free = dlsym(RTLD_NEXT, "free");
  recs = mmap(NULL, MAXREC * sizeof(rec_t), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  live = mmap(NULL, LIVE * sizeof *live, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  t0 = 0;
  t0 = now_us();
}

static void put(char kind, uint32_t id, uint64_t size, uint64_t site) {
  uint32_t i = nrec++;
  if (i >= MAXREC) return;
  recs[i] = (rec_t){kind, id, size, site, now_us(), 0};
}

EXPORT int posix_memalign(void **out, size_t align, size_t size) {
  if (!real_pm) init();
  int rc = real_pm(out, align, size);
  if (rc || busy || recs == MAP_FAILED || live == MAP_FAILED) return rc;
  busy = 1;
  void *fr[10];
  int n = backtrace(fr, 10);
  uint64_t h = 1469598103934665603ull;
  uint64_t pk = python_key();
  if (pk) h = pk; /* a Python line, whatever the native frames under it */
  else
    for (int i = 1; i < n; i++) h = (h ^ (uint64_t)(uintptr_t)fr[i]) * 1099511628211ull;
  pthread_mutex_lock(&mu);
  uint32_t id = ++nextid;
  uintptr_t a = (uintptr_t)*out;
  for (uint32_t s = (uint32_t)((a >> 4) * 2654435761u) & (LIVE - 1);; s = (s + 1) & (LIVE - 1))
    if (!live[s].a || live[s].a == 1) {
      live[s].a = a;
      live[s].id = id;
      break;
    }
  put('a', id, size, h);
  pthread_mutex_unlock(&mu);
  busy = 0;
  return rc;
}

EXPORT void free(void *p) {
  if (!real_free) init();
  if (p && live && live != MAP_FAILED) {
    uintptr_t a = (uintptr_t)p;
    pthread_mutex_lock(&mu);
    for (uint32_t s = (uint32_t)((a >> 4) * 2654435761u) & (LIVE - 1); live[s].a; s = (s + 1) & (LIVE - 1))
      if (live[s].a == a) {
        put('f', live[s].id, 0, 0);
        live[s].a = 1; /* tombstone */
        break;
      }
    pthread_mutex_unlock(&mu);
  }
  real_free(p);
}

EXPORT void lgtrace_step(void);
EXPORT void lgtrace_step(void) {
  static uint32_t step;
  pthread_mutex_lock(&mu);
  put('s', ++step, 0, 0);
  pthread_mutex_unlock(&mu);
}

__attribute__((destructor)) static void fini(void) {
  const char *path = getenv("LGTRACE_OUT");
  if (!path || recs == MAP_FAILED) return;
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) return;
  char buf[1 << 16];
  size_t used = 0;
  uint32_t n = nrec < MAXREC ? nrec : MAXREC;
  for (uint32_t i = 0; i < n; i++) {
    rec_t *r = &recs[i];
    if (used > sizeof buf - 128) {
      if (write(fd, buf, used) < 0) break;
      used = 0;
    }
    if (r->kind == 'a')
      used += (size_t)snprintf(buf + used, sizeof buf - used, "a %u %llu %llx %llu\n", r->id,
                               (unsigned long long)r->size, (unsigned long long)r->site, (unsigned long long)r->t_us);
    else
      used +=
          (size_t)snprintf(buf + used, sizeof buf - used, "%c %u %llu\n", r->kind, r->id, (unsigned long long)r->t_us);
  }
  if (used && write(fd, buf, used) < 0) used = 0;
  close(fd);
}
