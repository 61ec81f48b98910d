/* SPDX-License-Identifier: MIT */
/*
 * micro_transport - how should allocation data reach the collector? (issue #2)
 *
 * Measures the cost, per allocation, for the allocating thread(s) of
 *   pipe-1     write(2) of one 32-byte record per allocation into a pipe
 *   pipe-4k    the same records batched in a 4 KiB per-thread buffer, one write(2)
 *              per 128 records
 *   shm-plain  updating the allocation site's counters in a shared-memory (memfd,
 *              MAP_SHARED) counter table, one shard per thread, relaxed load+store
 *              (what the recorder does)
 *   shm-atomic the same with atomic fetch-add into one table shared by all threads
 *              (the recorder's fallback shard)
 * The reading side is a separate process (as the collector is): for the pipes it
 * read(2)s 64 KiB at a time and discards; for shared memory it sums the table every
 * 10 ms. Each record: {site, size, address, timestamp}, 32 bytes; 512 sites.
 *
 * Options: --records N (per thread, default 2000000), --threads T (default 1),
 *          --mode NAME (default: all four)
 * Output: one line per mode: wall_ns_per_record (first thread start to last thread
 * end, divided by all records: the throughput cost) and cpu_ns_per_record (CPU time
 * of the producing process, i.e. of the "target", divided by all records).
 */
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "bench_clock.h"

#define NSITES 512
#define BATCH 4096

typedef struct rec {
  uint32_t site, pad;
  uint64_t size, addr, ts;
} rec_t;
_Static_assert(sizeof(rec_t) == 32, "32-byte record");

typedef struct ctr { /* like lg_site_ctr_t's first half */
  int64_t live_bytes, live_blocks;
  uint64_t alloc_bytes, alloc_blocks;
} ctr_t;

static uint64_t g_records = 2000000;
static unsigned g_threads = 1;
static int g_pipe[2];
static ctr_t *g_shm; /* (g_threads + 1) tables of NSITES */
static pthread_barrier_t g_bar;

static void write_all(int fd, const void *buf, size_t n) {
  const char *p = buf;
  while (n) {
    ssize_t k = write(fd, p, n);
    if (k <= 0) {
      perror("write");
      exit(1);
    }
    p += k;
    n -= (size_t)k;
  }
}

enum { M_PIPE1, M_PIPE4K, M_SHM, M_SHM_ATOMIC, M_N };
static const char *const mode_name[M_N] = {"pipe-1", "pipe-4k", "shm-plain", "shm-atomic"};
static int g_mode;

typedef struct worker {
  pthread_t th;
  unsigned idx;
  double t0, t1; /* this thread's start and end */
} worker_t;

static void *producer(void *arg) {
  worker_t *w = arg;
  uint64_t s = 0x9E3779B97F4A7C15ULL * (w->idx + 1);
  _Alignas(64) char buf[BATCH];
  size_t used = 0;
  ctr_t *mine = g_shm + (size_t)(w->idx + 1) * NSITES, *shared = g_shm;
  pthread_barrier_wait(&g_bar);
  w->t0 = now();
  for (uint64_t i = 0; i < g_records; i++) {
    uint64_t r = rnd(&s);
    rec_t rec = {(uint32_t)(r % NSITES), 0, 16 + (r >> 52), r & ~15ULL, i};
    switch (g_mode) {
    case M_PIPE1: write_all(g_pipe[1], &rec, sizeof rec); break;
    case M_PIPE4K:
      memcpy(buf + used, &rec, sizeof rec);
      used += sizeof rec;
      if (used == BATCH) {
        write_all(g_pipe[1], buf, used);
        used = 0;
      }
      break;
    case M_SHM: {
      ctr_t *c = &mine[rec.site];
      __atomic_store_n(&c->live_bytes, c->live_bytes + (int64_t)rec.size, __ATOMIC_RELAXED);
      __atomic_store_n(&c->live_blocks, c->live_blocks + 1, __ATOMIC_RELAXED);
      __atomic_store_n(&c->alloc_bytes, c->alloc_bytes + rec.size, __ATOMIC_RELAXED);
      __atomic_store_n(&c->alloc_blocks, c->alloc_blocks + 1, __ATOMIC_RELAXED);
      break;
    }
    case M_SHM_ATOMIC: {
      ctr_t *c = &shared[rec.site];
      __atomic_fetch_add(&c->live_bytes, (int64_t)rec.size, __ATOMIC_RELAXED);
      __atomic_fetch_add(&c->live_blocks, 1, __ATOMIC_RELAXED);
      __atomic_fetch_add(&c->alloc_bytes, rec.size, __ATOMIC_RELAXED);
      __atomic_fetch_add(&c->alloc_blocks, 1, __ATOMIC_RELAXED);
      break;
    }
    }
  }
  if (used) write_all(g_pipe[1], buf, used);
  w->t1 = now();
  return NULL;
}

/* The "collector": drains the pipe, or sums the shared table every 10 ms. */
static void reader(int pipe_mode, size_t shm_words) {
  if (pipe_mode) {
    static char buf[65536];
    uint64_t got = 0;
    ssize_t k;
    while ((k = read(g_pipe[0], buf, sizeof buf)) > 0) got += (uint64_t)k;
    _exit(got == g_records * g_threads * sizeof(rec_t) ? 0 : 3);
  }
  volatile int64_t sink = 0;
  const int64_t *w = (const int64_t *)g_shm;
  for (;;) {
    int64_t s = 0;
    for (size_t i = 0; i < shm_words; i++) s += __atomic_load_n(&w[i], __ATOMIC_RELAXED);
    sink += s;
    struct timespec ts = {0, 10000000};
    nanosleep(&ts, NULL);
  }
}

static double cpu_self(void) { /* user+sys of this (producer) process */
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec * 1e-6 + (double)ru.ru_stime.tv_sec +
         (double)ru.ru_stime.tv_usec * 1e-6;
}

/* Returns the wall span (first thread start to last thread end); *cpu: the producer
 * process's CPU time over the run. */
static double run_mode(int mode, double *cpu) {
  g_mode = mode;
  int pipe_mode = mode == M_PIPE1 || mode == M_PIPE4K;
  size_t shm_bytes = (size_t)(g_threads + 1) * NSITES * sizeof(ctr_t);
  int mfd = (int)syscall(SYS_memfd_create, "micro-transport", 0);
  if (mfd < 0 || ftruncate(mfd, (off_t)shm_bytes) != 0) {
    perror("memfd");
    exit(1);
  }
  g_shm = mmap(NULL, shm_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, mfd, 0);
  if (g_shm == MAP_FAILED) {
    perror("mmap");
    exit(1);
  }
  if (pipe(g_pipe) != 0) {
    perror("pipe");
    exit(1);
  }
  pid_t pid = fork();
  if (pid == 0) {
    close(g_pipe[1]);
    reader(pipe_mode, shm_bytes / sizeof(int64_t));
  }
  close(g_pipe[0]);
  worker_t *w = calloc(g_threads, sizeof *w);
  pthread_barrier_init(&g_bar, NULL, g_threads + 1);
  for (unsigned t = 0; t < g_threads; t++) {
    w[t].idx = t;
    pthread_create(&w[t].th, NULL, producer, &w[t]);
  }
  double c0 = cpu_self();
  pthread_barrier_wait(&g_bar);
  double t0 = 1e300, t1 = 0;
  for (unsigned t = 0; t < g_threads; t++) {
    pthread_join(w[t].th, NULL);
    if (w[t].t0 < t0) t0 = w[t].t0;
    if (w[t].t1 > t1) t1 = w[t].t1;
  }
  *cpu = cpu_self() - c0;
  double el = t1 - t0;
  close(g_pipe[1]);
  if (!pipe_mode) kill(pid, SIGKILL);
  int st = 0;
  waitpid(pid, &st, 0);
  if (pipe_mode && !(WIFEXITED(st) && WEXITSTATUS(st) == 0)) {
    fprintf(stderr, "micro_transport: reader lost records\n");
    exit(1);
  }
  pthread_barrier_destroy(&g_bar);
  free(w);
  munmap(g_shm, shm_bytes);
  close(mfd);
  return el;
}

int main(int argc, char **argv) {
  int only = -1;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!strcmp(argv[i], "--records")) g_records = strtoull(argv[i + 1], NULL, 0);
    else if (!strcmp(argv[i], "--threads")) g_threads = (unsigned)strtoul(argv[i + 1], NULL, 0);
    else if (!strcmp(argv[i], "--mode")) {
      for (int m = 0; m < M_N; m++)
        if (!strcmp(argv[i + 1], mode_name[m])) only = m;
      if (only < 0) {
        fprintf(stderr, "micro_transport: unknown mode %s\n", argv[i + 1]);
        return 2;
      }
    } else {
      fprintf(stderr, "usage: micro_transport [--records N] [--threads T] [--mode M]\n");
      return 2;
    }
  }
  if (g_threads < 1 || g_records < 1) return 2;
  for (int m = 0; m < M_N; m++) {
    if (only >= 0 && m != only) continue;
    double cpu = 0, el = run_mode(m, &cpu);
    double total = (double)g_records * g_threads;
    printf("micro_transport: mode=%s threads=%u records_per_thread=%llu seconds=%.4f wall_ns_per_record=%.2f "
           "cpu_ns_per_record=%.2f\n",
           mode_name[m], g_threads, (unsigned long long)g_records, el, el * 1e9 / total, cpu * 1e9 / total);
    fflush(stdout);
  }
  return 0;
}
