/* SPDX-License-Identifier: MIT */
/*
 * futex_idle.c - programs whose every thread waits in futex, for `leakguard attach`
 * (tests/attach/attach_test.py, cases "futex" and "futex_loader"):
 *
 *   futex_idle OUT WAKE_S         a thread in pthread_cond_timedwait until WAKE_S after
 *                                 the start, another in sem_wait, main in
 *                                 pthread_timedjoin_np (60 s): a thread pool with nothing
 *                                 to do. The timed waits go on in restart_syscall once
 *                                 the injector's first stop interrupted them, and the
 *                                 injector takes the first thread it can, main. The first then keeps
 *                                 1 MiB every 0.25 s for 3 s (leak_futex) and posts the
 *                                 semaphore; OUT gets "waited S" (how long the timed
 *                                 wait lasted) and the program exits 0.
 *   futex_idle OUT WAKE_S loader  the main thread alone, waiting until WAKE_S inside a
 *                                 dl_iterate_phdr callback (it holds the loader's lock):
 *                                 no thread is safe to load anything in.
 *
 * OUT says "ready" once the threads are about to wait. Nothing allocates until WAKE_S,
 * so the injector finds no malloc or free to stop at.
 */
#include <link.h>
#include <pthread.h>
#include <semaphore.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv;
static sem_t sem;
static struct timespec t0, wake;
static double waited;

__attribute__((noinline)) static void *leak_futex(size_t n) {
  void *p = malloc(n);
  memset(p, 3, n);
  return p;
}

static double since(const struct timespec *a) {
  struct timespec b;
  clock_gettime(CLOCK_MONOTONIC, &b);
  return (double)(b.tv_sec - a->tv_sec) + (double)(b.tv_nsec - a->tv_nsec) / 1e9;
}

/* Waits on the condition variable (nobody signals it) until the wake time. */
static void wait_until_wake(void) {
  pthread_mutex_lock(&mu);
  while (pthread_cond_timedwait(&cv, &mu, &wake) == 0) {
  }
  pthread_mutex_unlock(&mu);
  waited = since(&t0);
}

static void *timed(void *arg) {
  (void)arg;
  wait_until_wake();
  for (int i = 0; i < 12; i++) {
    for (int k = 0; k < 16; k++) leak_futex(64 << 10);
    struct timespec ts = {0, 250000000};
    nanosleep(&ts, NULL);
  }
  sem_post(&sem);
  return NULL;
}

static void *poster(void *arg) {
  (void)arg;
  while (sem_wait(&sem) != 0) {
  }
  return NULL;
}

static int in_loader(struct dl_phdr_info *info, size_t size, void *arg) {
  (void)info;
  (void)size;
  (void)arg;
  wait_until_wake();
  return 1; /* one object is enough */
}

static void say(const char *path, const char *what) {
  char tmp[4096];
  snprintf(tmp, sizeof tmp, "%s.tmp", path);
  FILE *f = fopen(tmp, "w");
  if (!f) exit(4);
  fputs(what, f);
  fclose(f);
  rename(tmp, path);
}

int main(int argc, char **argv) {
  if (argc < 3) return 2;
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  pthread_cond_init(&cv, &ca);
  sem_init(&sem, 0, 0);
  clock_gettime(CLOCK_MONOTONIC, &t0);
  wake = t0;
  wake.tv_sec += atol(argv[2]);
  char line[64];
  if (argc > 3 && !strcmp(argv[3], "loader")) {
    say(argv[1], "ready\n");
    dl_iterate_phdr(in_loader, NULL);
  } else {
    pthread_t a, b;
    if (pthread_create(&a, NULL, timed, NULL) || pthread_create(&b, NULL, poster, NULL)) return 3;
    say(argv[1], "ready\n");
    struct timespec far;
    clock_gettime(CLOCK_REALTIME, &far);
    far.tv_sec += 60;
    if (pthread_timedjoin_np(a, NULL, &far) != 0) return 5; /* a wait cut short: the thread is not done */
    pthread_join(b, NULL);
  }
  snprintf(line, sizeof line, "waited %.3f\n", waited);
  say(argv[1], line);
  return 0;
}
