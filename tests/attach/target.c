/* SPDX-License-Identifier: MIT */
/*
 * target.c - a program for `leakguard attach` tests (tests/attach.cmake): threads
 * hammering malloc/free, one looping malloc_trim, one looping dlopen/dlclose, threads
 * that start and exit, a planted leak (leak_here) and a progress counter it writes
 * to the file named by argv[1] (the pid first, then the count, every 50 ms).
 * argv[2] (optional): megabytes allocated at start, freed once ARGV1.free exists; with
 * them 16 blocks of 64 KiB, grown by regrow_here() to 256 KiB each with realloc then.
 * ATTACH_FORK=1: a thread forks every 20 ms (the child allocates, frees, exits 0); a
 * child that dies otherwise is written to ARGV1.forkfail.
 * ATTACH_LEAKY=LIB: once ARGV1.go exists, LIB is dlopen'ed and its leaky() called
 * every 50 ms.
 * ATTACH_LOADERS_ONLY=1: three threads dlopen and dlclose libm, libz, libbz2 and liblzma
 * in a loop and nothing else runs but the progress line: nearly every malloc and free
 * the injector stops is the loader's, half way through a dlopen or dlclose.
 * ATTACH_MMAP=1: once ARGV1.go exists, every 50 ms mmap_leak_here() maps 64 KiB of
 * anonymous memory it never unmaps, and mmap_churn() maps 256 KiB, grows it with
 * mremap and unmaps it.
 * ATTACH_NAP=futex: every pause is a timed wait on a condition variable (futex), not
 * usleep: no thread ever waits in a call the injector takes at once (nanosleep), so it
 * stops a thread at malloc or free, as in a process whose threads never sleep.
 */
#include <sys/mman.h>
#include <sys/wait.h>
#include <dlfcn.h>
#include <malloc.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static _Atomic unsigned long progress;

static int nap_futex;
static void nap(unsigned usec) {
  if (!nap_futex) {
    usleep(usec);
    return;
  }
  static pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
  static pthread_cond_t c = PTHREAD_COND_INITIALIZER; /* never signalled */
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  ts.tv_nsec += (long)usec * 1000;
  ts.tv_sec += ts.tv_nsec / 1000000000L;
  ts.tv_nsec %= 1000000000L;
  pthread_mutex_lock(&m);
  while (pthread_cond_timedwait(&c, &m, &ts) == 0)
    continue;
  pthread_mutex_unlock(&m);
}

__attribute__((noinline)) static void *leak_here(size_t n) {
  void *p = malloc(n);
  memset(p, 1, n);
  return p;
}

#define OLD_BUFS 16
__attribute__((noinline)) static void regrow_here(char **bufs) {
  for (int i = 0; i < OLD_BUFS; i++) {
    char *q = realloc(bufs[i], 256 << 10);
    if (q) {
      memset(q, 5, 256 << 10);
      bufs[i] = q;
    }
  }
}

__attribute__((noinline)) static void *mmap_leak_here(size_t n) {
  void *p = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p != MAP_FAILED) memset(p, 3, n);
  return p;
}
__attribute__((noinline)) static void mmap_churn(void) {
  void *p = mmap(NULL, 256 << 10, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return;
  memset(p, 4, 256 << 10);
  void *q = mremap(p, 256 << 10, 512 << 10, MREMAP_MAYMOVE);
  if (q != MAP_FAILED) p = q;
  munmap(p, q != MAP_FAILED ? 512 << 10 : 256 << 10);
}

static void *hammer(void *arg) {
  (void)arg;
  void *keep[64] = {0};
  for (unsigned i = 0;; i++) {
    unsigned k = i % 64;
    free(keep[k]);
    keep[k] = malloc(16 + (i * 37) % 4000);
    if (i % 1024 == 0) atomic_fetch_add(&progress, 1);
  }
  return NULL;
}
static void *trimmer(void *arg) {
  (void)arg;
  for (;;) {
    malloc_trim(0);
    nap(1000);
  }
  return NULL;
}
static void *loader(void *arg) {
  (void)arg;
  for (;;) {
    void *h = dlopen("libm.so.6", RTLD_NOW | RTLD_LOCAL);
    if (h) dlclose(h);
    void *z = dlopen("libz.so.1", RTLD_NOW | RTLD_LOCAL);
    if (z) dlclose(z);
    nap(2000);
  }
  return NULL;
}
static void *loader_only(void *arg) {
  static const char *const libs[] = {"libm.so.6", "libz.so.1", "libbz2.so.1.0", "liblzma.so.5"};
  for (unsigned i = 0;; i++) {
    void *h = dlopen(libs[(i + (uintptr_t)arg) % 4], RTLD_NOW | RTLD_LOCAL);
    if (h) dlclose(h);
    if (i % 16 == 0) atomic_fetch_add(&progress, 1);
  }
  return NULL;
}
static void *brief(void *arg) { return malloc((size_t)(uintptr_t)arg); }
static void *spawner(void *arg) {
  (void)arg;
  for (;;) {
    pthread_t t;
    void *r;
    if (pthread_create(&t, NULL, brief, (void *)(uintptr_t)100) == 0) {
      pthread_join(t, &r);
      free(r);
    }
    nap(500);
  }
  return NULL;
}

static const char *prog;
static void *forker(void *arg) {
  (void)arg;
  for (;;) {
    pid_t c = fork();
    if (c == 0) {
      for (int i = 0; i < 1000; i++) free(malloc(64 + i));
      _exit(0);
    }
    int st = 0;
    if (c > 0 && waitpid(c, &st, 0) == c && !(WIFEXITED(st) && WEXITSTATUS(st) == 0)) {
      char p[4096];
      snprintf(p, sizeof p, "%s.forkfail", prog);
      FILE *f = fopen(p, "a");
      if (f) {
        fprintf(f, "child status %d\n", st);
        fclose(f);
      }
    }
    nap(20000);
  }
  return NULL;
}

int main(int argc, char **argv) {
  if (argc < 2) return 2;
  prog = argv[1];
  const char *nap_how = getenv("ATTACH_NAP");
  nap_futex = nap_how && strcmp(nap_how, "futex") == 0;
  const char *leaky_lib = getenv("ATTACH_LEAKY");
  int use_mmap = getenv("ATTACH_MMAP") != NULL;
  void (*leaky)(void) = NULL;
  char go[4096];
  snprintf(go, sizeof go, "%s.go", argv[1]);
  size_t big_mb = argc > 2 ? strtoul(argv[2], NULL, 10) : 0;
  char freeit[4096];
  snprintf(freeit, sizeof freeit, "%s.free", argv[1]);
  char **big = NULL, *old_bufs[OLD_BUFS];
  for (int i = 0; big_mb && i < OLD_BUFS; i++) {
    old_bufs[i] = malloc(64 << 10);
    memset(old_bufs[i], 4, 64 << 10);
  }
  if (big_mb) {
    big = malloc(big_mb * sizeof *big);
    for (size_t i = 0; i < big_mb; i++) {
      big[i] = malloc(1 << 20);
      memset(big[i], 2, 1 << 20);
    }
  }
  pthread_t t;
  int loaders_only = getenv("ATTACH_LOADERS_ONLY") != NULL;
  for (int i = 0; i < 3; i++) pthread_create(&t, NULL, loaders_only ? loader_only : hammer, (void *)(uintptr_t)i);
  if (!getenv("ATTACH_CHURN_ONLY") && !loaders_only) { /* ATTACH_CHURN_ONLY=1: the hammering threads alone (bench) */
    pthread_create(&t, NULL, trimmer, NULL);
    pthread_create(&t, NULL, loader, NULL);
    pthread_create(&t, NULL, spawner, NULL);
  }
  if (getenv("ATTACH_FORK")) pthread_create(&t, NULL, forker, NULL);
  /* ATTACH_MAIN_NAP_MS: the main thread's pause between progress lines (default 50 ms) */
  const char *mnap = getenv("ATTACH_MAIN_NAP_MS");
  unsigned main_nap_us = mnap ? (unsigned)strtoul(mnap, NULL, 10) * 1000u : 50000u;
  for (unsigned long tick = 0;; tick++) {
    if (tick % 2 == 0) leak_here(4096); /* 40 KiB/s */
    if (leaky_lib && !leaky && access(go, F_OK) == 0) {
      void *h = dlopen(leaky_lib, RTLD_NOW);
      if (h) *(void **)&leaky = dlsym(h, "leaky");
    }
    if (leaky) leaky();
    if (use_mmap && access(go, F_OK) == 0) {
      mmap_leak_here(64 << 10);
      mmap_churn();
    }
    if (big && access(freeit, F_OK) == 0) {
      for (size_t i = 0; i < big_mb; i++) free(big[i]);
      free(big);
      big = NULL;
      regrow_here(old_bufs);
    }
    FILE *f = fopen(argv[1], "w");
    if (f) {
      fprintf(f, "%d %lu\n", (int)getpid(), atomic_load(&progress));
      fclose(f);
    }
    nap(main_nap_us);
  }
}
