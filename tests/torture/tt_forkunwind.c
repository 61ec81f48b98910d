/* SPDX-License-Identifier: MIT */
/*
 * tt_forkunwind.c - fork while another thread is inside the recorder's unwinder.
 *
 * libunwind holds a mutex of its own while it steps, and on a frame-cache miss glibc's
 * dl_iterate_phdr lock, which glibc 2.36's fork does not reset in the child. A thread
 * of the parent inside an unwind at the fork used to leave the child those locks held:
 * its first unwind hung for good, with every signal blocked (a clean-clone CI run of
 * torture_forks hung once so). This program makes the window wide instead of rare:
 *
 *  - it defines dl_iterate_phdr (exported, so libunwind's call binds here) and passes
 *    every call to glibc's; but in the "holder" thread, once armed, the first callback
 *    stays HOLD_MS inside glibc's dl_iterate_phdr (its lock held) and says so on
 *    stderr;
 *  - the holder calls malloc from a function it never called before: under leakguard
 *    the recorder unwinds it, and libunwind's miss reaches dl_iterate_phdr;
 *  - the main thread forks while the holder is in there, and the child allocates
 *    from a function of its own that no thread ever called (the child's unwind misses
 *    libunwind's cache too). The parent waits up to 15 s for the child.
 *
 * Bare, nothing unwinds and the holder is never caught inside: the fork happens after
 * a second, and the output is the same. Modes: "hold" (300 ms: the fork waits for the
 * holder to leave libunwind), "stuck" (3 s: longer than the recorder waits, the
 * child runs unrecorded rather than hang).
 */
#include <dlfcn.h>
#include <link.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <sys/wait.h>

#include "tt.h"

static long hold_ms;
static atomic_int armed;  /* the holder's next dl_iterate_phdr callback stays */
static atomic_int inside; /* the holder is inside glibc's dl_iterate_phdr now */
static _Thread_local int is_holder;

typedef int (*phdr_cb)(struct dl_phdr_info *, size_t, void *);
struct wrap {
  phdr_cb cb;
  void *data;
};

static int holding_cb(struct dl_phdr_info *info, size_t size, void *data)
{
  struct wrap *w = (struct wrap *)data;
  int one = 1;
  if (atomic_compare_exchange_strong(&armed, &one, 0)) {
    static const char msg[] = "tt_forkunwind: holder inside dl_iterate_phdr\n";
    if (write(2, msg, sizeof msg - 1) < 0) { /* stderr is not compared */
    }
    atomic_store(&inside, 1);
    tt_sleep_ms(hold_ms);
    atomic_store(&inside, 2);
  }
  return w->cb(info, size, w->data);
}

__attribute__((visibility("default"))) int dl_iterate_phdr(phdr_cb cb, void *data)
{
  static int (*real)(phdr_cb, void *);
  if (!real)
    real = (int (*)(phdr_cb, void *))dlsym(RTLD_NEXT, "dl_iterate_phdr");
  if (!is_holder || !atomic_load(&armed))
    return real(cb, data);
  struct wrap w = {cb, data};
  return real(holding_cb, &w);
}

/* Allocation sites called once each, from one thread each: every unwind of them is a
 * cache miss. */
static __attribute__((noinline)) void *fresh_holder(size_t n)
{
  void *p = malloc(n);
  __asm__ volatile("" ::"r"(p) : "memory");
  return p;
}
static __attribute__((noinline)) void *fresh_child(size_t n)
{
  void *p = malloc(n);
  __asm__ volatile("" ::"r"(p) : "memory");
  return p;
}

static atomic_int go;
static void *holder(void *arg)
{
  (void)arg;
  is_holder = 1;
  while (!atomic_load(&go))
    tt_sleep_ms(1);
  atomic_store(&armed, 1);
  free(fresh_holder(4000));
  atomic_store(&armed, 0);
  return NULL;
}

int main(int argc, char **argv)
{
  if (argc != 2 || (strcmp(argv[1], "hold") && strcmp(argv[1], "stuck"))) {
    fprintf(stderr, "usage: tt_forkunwind hold|stuck\n");
    return 2;
  }
  hold_ms = !strcmp(argv[1], "hold") ? 300 : 3000;
  pthread_t th;
  if (pthread_create(&th, NULL, holder, NULL))
    tt_die("pthread_create");
  atomic_store(&go, 1);
  for (int i = 0; i < 1000 && atomic_load(&inside) == 0; i++)
    tt_sleep_ms(1);
  pid_t pid = fork();
  if (pid < 0)
    tt_die("fork");
  if (pid == 0) {
    char *p = (char *)fresh_child(123);
    memset(p, 1, 123);
    free(p);
    _exit(7);
  }
  int st = 0, done = 0;
  for (int i = 0; i < 1500 && !done; i++) {
    pid_t r = waitpid(pid, &st, WNOHANG);
    if (r == pid)
      done = 1;
    else
      tt_sleep_ms(10);
  }
  if (!done) {
    kill(pid, SIGKILL);
    waitpid(pid, &st, 0);
    printf("forkunwind: the child hung\n");
  } else {
    printf("forkunwind: the child exited %d\n", WIFEXITED(st) ? WEXITSTATUS(st) : -1);
  }
  pthread_join(th, NULL);
  tt_leak(2000, 32768);
  printf("forkunwind: done\n");
  fflush(stdout);
  return done ? 0 : 1;
}
