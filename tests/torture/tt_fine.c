/* SPDX-License-Identifier: MIT */
/*
 * tt_fine.c - allocator and process corners that must keep working under the
 * recorder (issue #17, "fine today, keep fine", and more). One mode per run; each
 * plants a leak (tt_leak) after its torture, found at rank 1. Built with -fno-builtin
 * (CMakeLists.txt): GCC would otherwise drop a malloc/free pair whose block does not
 * escape, and the program would not do what it says.
 *
 *   usable    malloc_usable_size() bytes fully written, realloc within it; then a leak
 *   aligned   posix_memalign, aligned_alloc, memalign, valloc, pvalloc at many
 *             alignments, written to the last byte; then a leak
 *   mallopt   mallopt(M_MMAP_THRESHOLD, M_TRIM_THRESHOLD, M_ARENA_MAX...), malloc_trim;
 *             then a leak
 *   signals   every signal blocked, then every catchable one ignored (SIGCHLD too:
 *             children are reaped by the kernel); fork, wait; then a leak
 *   forks     200 forks from a program whose 4 other threads allocate all the while;
 *             each child allocates, frees and exits with a known status; then a leak
 *   cancel    threads cancelled (deferred) while they allocate, with signal handlers
 *             that allocate, delivered between allocations; then a leak
 *   altstack  handlers on a 64 KiB sigaltstack that allocate (many call chains: many
 *             stacks to record); then a leak
 *   altstack8k  the same on an 8 KiB (SIGSTKSZ) alternate stack, and in a thread
 *             whose very first allocation is in such a handler; then a leak
 *   altstack_min  the same on the smallest alternate stack the program survives bare
 *             (this CPU's _SC_MINSIGSTKSZ, the kernel's signal frame, plus 4 KiB); then a
 *             leak
 *   tlsdtor   threads whose TLS destructors free (and allocate) while the thread's
 *             own state is torn down, after the recorder's destructor; then a leak
 *   deep      recursion in a thread (1 MiB stack, glibc's, a guard page below) until
 *             at most 6 KiB of stack is left, then malloc (bare needs 3.3 KiB here, the
 *             recorder used to need 11.5 KiB: BENCHMARKS.md); then a leak
 *   deep_user the same on a stack the program allocated (pthread_attr_setstack), with
 *             heap below it instead of a guard page: a canary there must stay intact
 *   threads   2,000 short-lived threads, each allocating
 *   longjmp   siglongjmp out of handlers that allocated
 *   _Fork     glibc's _Fork(), which runs no atfork handlers: its child, which leaks
 *             and exits 4, must be recorded as a process of its own
 *   libcbufs  buffers that glibc allocates or grows inside (getline, getdelim,
 *             open_memstream, asprintf, strdup, realpath, scandir, obstack) freed by
 *             the program, and program buffers that glibc reallocs; then a leak
 */
#include <dirent.h>
#include <malloc.h>
#include <obstack.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tt.h"

/* ------------------------------------------------------------------ usable */
static int mode_usable(void)
{
  unsigned long bad = 0;
  for (size_t n = 0; n < 70000; n += 1 + n / 8) {
    char *p = malloc(n);
    size_t u = malloc_usable_size(p);
    bad += u < n;
    memset(p, 0xa5, u); /* every usable byte is ours to write */
    p = realloc(p, u);  /* grow to exactly what was usable */
    bad += p[u ? u - 1 : 0] != (char)0xa5 && u;
    size_t u2 = malloc_usable_size(p);
    memset(p, 0x5a, u2);
    free(p);
  }
  printf("usable: %lu bad\n", bad);
  tt_leak(2000, 32768);
  return bad != 0;
}

/* ------------------------------------------------------------------ aligned */
static int mode_aligned(void)
{
  unsigned long bad = 0, n = 0;
  for (size_t al = sizeof(void *); al <= (1u << 16); al *= 2) {
    for (size_t sz = 0; sz < 20000; sz = sz * 3 + 1) {
      void *p[5] = {0};
      if (posix_memalign(&p[0], al, sz) != 0)
        bad++;
      p[1] = aligned_alloc(al, (sz + al - 1) / al * al);
      p[2] = memalign(al, sz);
      p[3] = valloc(sz);
      p[4] = pvalloc(sz);
      for (int i = 0; i < 5; i++) {
        size_t want = i >= 3 ? 4096 : al;
        bad += !p[i] || ((uintptr_t)p[i] & (want - 1)) != 0;
        if (p[i] && sz)
          memset(p[i], i, malloc_usable_size(p[i]));
        n++;
      }
      p[2] = realloc(p[2], sz + 100); /* realloc of an over-aligned block */
      if (p[2])
        memset(p[2], 9, sz + 100);
      for (int i = 0; i < 5; i++)
        free(p[i]);
    }
  }
  printf("aligned: %lu blocks, %lu bad\n", n, bad);
  tt_leak(2000, 32768);
  return bad != 0;
}

/* ------------------------------------------------------------------ mallopt */
static int mode_mallopt(void)
{
  int ok = mallopt(M_MMAP_THRESHOLD, 64 * 1024) && mallopt(M_TRIM_THRESHOLD, 128 * 1024) &&
           mallopt(M_TOP_PAD, 0) && mallopt(M_ARENA_MAX, 2) && mallopt(M_PERTURB, 0x55) &&
           mallopt(M_MXFAST, 64);
  unsigned long bad = 0;
  for (int r = 0; r < 20; r++) {
    void *v[256];
    for (int i = 0; i < 256; i++) {
      v[i] = malloc((size_t)(i * 997) % 200000);
      if (!v[i])
        bad++;
    }
    for (int i = 0; i < 256; i += 2)
      free(v[i]);
    malloc_trim(0);
    for (int i = 1; i < 256; i += 2)
      free(v[i]);
    malloc_trim(4096);
  }
  struct mallinfo2 mi = mallinfo2();
  (void)mi;
  printf("mallopt: options %s, %lu bad\n", ok ? "accepted" : "refused", bad);
  tt_leak(2000, 32768);
  return bad != 0;
}

/* ------------------------------------------------------------------ signals */
static int mode_signals(void)
{
  sigset_t all;
  sigfillset(&all);
  sigprocmask(SIG_BLOCK, &all, NULL);
  int ignored = 0;
  for (int s = 1; s < NSIG; s++) {
    if (s == SIGKILL || s == SIGSTOP)
      continue;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = SIG_IGN;
    if (sigaction(s, &sa, NULL) == 0)
      ignored++;
  }
  pid_t pid = fork();
  if (pid < 0)
    tt_die("fork");
  if (pid == 0) {
    free(malloc(1000));
    _exit(3);
  }
  /* SIGCHLD ignored: the kernel reaps the child; waitpid fails with ECHILD. */
  int st;
  pid_t w = waitpid(pid, &st, 0);
  printf("signals: all blocked, %s ignored, child reaped by the kernel: %s\n",
         ignored > 30 ? "all catchable" : "some", w < 0 && errno == ECHILD ? "yes" : "no");
  tt_leak(2000, 32768);
  return 0;
}

/* ------------------------------------------------------------------ forks */
static atomic_int stop_flag;
static void *churn(void *arg)
{
  size_t k = (size_t)(uintptr_t)arg;
  while (!atomic_load(&stop_flag)) {
    void *v[32];
    for (int i = 0; i < 32; i++)
      v[i] = malloc(16 + (k * 131 + (size_t)i * 57) % 3000);
    for (int i = 0; i < 32; i++)
      free(v[i]);
    k++;
  }
  return NULL;
}

static int mode_forks(void)
{
  pthread_t th[4];
  for (int i = 0; i < 4; i++)
    pthread_create(&th[i], NULL, churn, (void *)(uintptr_t)i);
  int good = 0;
  for (int i = 0; i < 200; i++) {
    pid_t pid = fork();
    if (pid < 0)
      tt_die("fork");
    if (pid == 0) {
      char *p = malloc(100 + (size_t)i);
      memset(p, 1, 100 + (size_t)i);
      free(p);
      _exit(i % 50);
    }
    int st;
    if (waitpid(pid, &st, 0) == pid && WIFEXITED(st) && WEXITSTATUS(st) == i % 50)
      good++;
  }
  atomic_store(&stop_flag, 1);
  for (int i = 0; i < 4; i++)
    pthread_join(th[i], NULL);
  printf("forks: %d of 200 children exited as expected\n", good);
  tt_leak(2000, 32768);
  return good != 200;
}

/* ------------------------------------------------------------------ cancel */
static atomic_long handled;
static void alloc_handler(int sig)
{
  (void)sig;
  char *p = malloc(64);
  if (p) {
    p[0] = 1;
    free(p);
  }
  atomic_fetch_add(&handled, 1);
}

static void cleanup_free(void *p)
{
  free(*(void **)p);
  *(void **)p = NULL;
}

static void *cancellable(void *arg)
{
  (void)arg;
  sigset_t usr;
  sigemptyset(&usr);
  sigaddset(&usr, SIGUSR1);
  void *held = NULL;
  pthread_cleanup_push(cleanup_free, &held);
  for (unsigned i = 0;; i++) {
    /* Signals arrive only between allocations: a handler that allocates while
     * malloc itself is interrupted would deadlock in glibc, recorded or not. */
    pthread_sigmask(SIG_BLOCK, &usr, NULL);
    held = malloc(32 + i % 4000);
    for (int k = 0; k < 50; k++)
      free(malloc(16 + (size_t)k * 31));
    free(held);
    held = malloc(100);
    pthread_sigmask(SIG_UNBLOCK, &usr, NULL);
    pthread_testcancel();
    if (i % 64 == 0)
      tt_sleep_ms(1); /* nanosleep: a cancellation point, signals land here */
  }
  pthread_cleanup_pop(1);
  return NULL;
}

static int mode_cancel(void)
{
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = alloc_handler;
  sigaction(SIGUSR1, &sa, NULL);
  sigset_t usr;
  sigemptyset(&usr);
  sigaddset(&usr, SIGUSR1);
  pthread_sigmask(SIG_BLOCK, &usr, NULL); /* only the workers take it */
  int cancelled = 0;
  for (int round = 0; round < 10; round++) {
    pthread_t th[8];
    for (int i = 0; i < 8; i++)
      pthread_create(&th[i], NULL, cancellable, NULL);
    for (int k = 0; k < 20; k++) {
      for (int i = 0; i < 8; i++)
        pthread_kill(th[i], SIGUSR1);
      tt_sleep_ms(2);
    }
    for (int i = 0; i < 8; i++)
      pthread_cancel(th[i]);
    for (int i = 0; i < 8; i++) {
      void *r;
      pthread_join(th[i], &r);
      cancelled += r == PTHREAD_CANCELED;
    }
  }
  printf("cancel: %d of 80 threads cancelled, handlers ran: %s\n", cancelled,
         atomic_load(&handled) > 0 ? "yes" : "no");
  tt_leak(2000, 32768);
  return cancelled != 80;
}

/* ------------------------------------------------------------------ altstack */
static volatile sig_atomic_t alt_ok;
static void alt_handler(int sig)
{
  (void)sig;
  stack_t ss;
  sigaltstack(NULL, &ss);
  char *p = malloc(200);
  char *q = calloc(10, 100);
  if (p && q && (ss.ss_flags & SS_ONSTACK))
    alt_ok++;
  free(p);
  free(q);
}

static __attribute__((noinline)) void alt_depth(int d)
{
  if (d > 0) {
    alt_depth(d - 1);
    __asm__ volatile("" ::: "memory");
    return;
  }
  raise(SIGUSR2);
}

/* A thread whose first allocation is in a handler on its alternate stack (a static
 * buffer: nothing was allocated in the thread before): glibc sets up the thread's
 * malloc cache there, and the recorder its own state. */
static char alt_thread_stack[8192];
static void *alt_thread(void *arg)
{
  (void)arg;
  stack_t ss = {.ss_sp = alt_thread_stack, .ss_size = sizeof alt_thread_stack, .ss_flags = 0};
  if (sigaltstack(&ss, NULL) != 0)
    return NULL;
  for (int i = 0; i < 50; i++)
    alt_depth(i % 10);
  return alt_thread_stack;
}

/* size: the alternate stack's size; 0: the smallest this program survives bare
 * (_SC_MINSIGSTKSZ, the kernel's signal frame on this CPU, plus 4 KiB). The stack is heap
 * memory with more heap below it: an overflow would not crash, it would corrupt, so a
 * 64 KiB canary below it must come out intact. */
#define ALT_CANARY (64 * 1024)
static int mode_altstack_size(size_t sz, int thread)
{
  if (sz == 0) {
    long min = sysconf(_SC_MINSIGSTKSZ); /* not MINSIGSTKSZ: _GNU_SOURCE makes it SIGSTKSZ */
    sz = (size_t)(min > 2048 ? min : 2048) + 4096;
    if (getenv("TT_ALTSTACK")) /* to measure what is the smallest, bare and recorded */
      sz = (size_t)atol(getenv("TT_ALTSTACK"));
  }
  unsigned char *buf = malloc(ALT_CANARY + sz);
  if (!buf)
    tt_die("malloc");
  memset(buf, 0xc5, ALT_CANARY);
  stack_t ss = {.ss_sp = buf + ALT_CANARY, .ss_size = sz, .ss_flags = 0};
  if (sigaltstack(&ss, NULL) != 0)
    tt_die("sigaltstack");
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = alt_handler;
  sa.sa_flags = SA_ONSTACK;
  sigaction(SIGUSR2, &sa, NULL);
  for (int i = 0; i < 2000; i++)
    alt_depth(i % 40); /* different call chains: new stacks to record */
  int want = 2000;
  if (thread) {
    pthread_t th;
    void *r = NULL;
    pthread_create(&th, NULL, alt_thread, NULL);
    pthread_join(th, &r);
    want += r ? 50 : 0;
  }
  size_t bad = 0;
  for (size_t i = 0; i < ALT_CANARY; i++)
    bad += buf[i] != 0xc5;
  printf("altstack: %d of %d handlers allocated on the alternate stack, %zu bytes below it overwritten\n",
         (int)alt_ok, want, bad);
  tt_leak(2000, 32768);
  return alt_ok != want || bad != 0;
}
static int mode_altstack(void) { return mode_altstack_size(64 * 1024, 0); }
static int mode_altstack8k(void) { return mode_altstack_size(8192, 1); }
static int mode_altstack_min(void) { return mode_altstack_size(0, 0); }

/* ------------------------------------------------------------------ tlsdtor */
static pthread_key_t keys[4];
static atomic_int dtor_runs;
static void tls_dtor(void *p)
{
  free(p);
  void *q = malloc(50); /* allocation during teardown */
  free(q);
  atomic_fetch_add(&dtor_runs, 1);
}

static __thread char *tls_buf;
static void *tls_thread(void *arg)
{
  (void)arg;
  for (int i = 0; i < 4; i++)
    pthread_setspecific(keys[i], malloc(100 + (size_t)i));
  tls_buf = malloc(300);
  /* the value is freed by a key destructor, after the recorder's own */
  pthread_setspecific(keys[3], tls_buf);
  return NULL;
}

static int mode_tlsdtor(void)
{
  for (int i = 0; i < 4; i++)
    pthread_key_create(&keys[i], tls_dtor);
  for (int round = 0; round < 50; round++) {
    pthread_t th[8];
    for (int i = 0; i < 8; i++)
      pthread_create(&th[i], NULL, tls_thread, NULL);
    for (int i = 0; i < 8; i++)
      pthread_join(th[i], NULL);
  }
  printf("tlsdtor: %d destructor runs\n", atomic_load(&dtor_runs));
  tt_leak(2000, 32768);
  return atomic_load(&dtor_runs) != 50 * 8 * 4;
}

/* ------------------------------------------------------------------ deep */
static uintptr_t deep_lo;
static size_t deep_left = 6 * 1024; /* stop with at most this much stack left (TT_DEEP_LEFT) */
static __attribute__((noinline)) size_t recurse(unsigned d)
{
  volatile char pad[256];
  pad[0] = (char)d;
  if ((uintptr_t)pad - deep_lo > deep_left) {
    size_t r = recurse(d + 1);
    return r + pad[0] * 0;
  }
  /* malloc at the bottom, with less than deep_left bytes of stack below pad (the
   * torture programs are built with -fno-builtin: GCC would drop this pair) */
  char *p = malloc(1000 + d % 100);
  memset(p, 1, 1000);
  size_t r = p[999] + d;
  free(p);
  return r;
}

static void *deep_thread(void *arg)
{
  (void)arg;
  pthread_attr_t a;
  void *base;
  size_t size;
  pthread_getattr_np(pthread_self(), &a);
  pthread_attr_getstack(&a, &base, &size);
  pthread_attr_destroy(&a);
  deep_lo = (uintptr_t)base;
  size_t r = 0;
  for (int i = 0; i < 20; i++)
    r += recurse(0) > 0;
  return (void *)r;
}

/* user: the thread runs on a stack the program allocated (pthread_attr_setstack),
 * with heap memory below it instead of a guard page: a 64 KiB canary there must
 * come out intact (an overflow would not crash, it would corrupt). */
#define DEEP_STACK (1024 * 1024)
#define DEEP_CANARY (64 * 1024)
static int mode_deep_stack(int user)
{
  const char *left = getenv("TT_DEEP_LEFT");
  if (left)
    deep_left = (size_t)atol(left);
  pthread_attr_t a;
  pthread_attr_init(&a);
  unsigned char *buf = NULL;
  if (user) {
    buf = malloc(DEEP_CANARY + DEEP_STACK);
    if (!buf)
      tt_die("malloc");
    memset(buf, 0xc5, DEEP_CANARY);
    pthread_attr_setstack(&a, buf + DEEP_CANARY, DEEP_STACK);
  } else {
    pthread_attr_setstacksize(&a, DEEP_STACK);
  }
  pthread_t th;
  pthread_create(&th, &a, deep_thread, NULL);
  void *r;
  pthread_join(th, &r);
  pthread_attr_destroy(&a);
  size_t bad = 0;
  for (size_t i = 0; user && i < DEEP_CANARY; i++)
    bad += buf[i] != 0xc5;
  printf("deep: %zu of 20 descents called malloc with at most %zu bytes of stack left\n", (size_t)(uintptr_t)r,
         deep_left);
  if (user)
    printf("deep: %zu bytes below the thread's own stack overwritten\n", bad);
  free(buf);
  tt_leak(2000, 32768);
  return (uintptr_t)r != 20 || bad != 0;
}
static int mode_deep(void) { return mode_deep_stack(0); }
static int mode_deep_user(void) { return mode_deep_stack(1); }

/* ------------------------------------------------------------------ threads */
static void *short_thread(void *arg)
{
  size_t i = (size_t)(uintptr_t)arg;
  char *p = malloc(64 + i % 512);
  memset(p, 1, 64);
  free(p);
  return malloc(16); /* freed by the joiner */
}

static int mode_threads(void)
{
  int done = 0;
  for (int b = 0; b < 2000; b += 50) {
    pthread_t th[50];
    for (int i = 0; i < 50; i++)
      if (pthread_create(&th[i], NULL, short_thread, (void *)(uintptr_t)(b + i)) != 0)
        tt_die("pthread_create");
    for (int i = 0; i < 50; i++) {
      void *r;
      pthread_join(th[i], &r);
      free(r);
      done++;
    }
  }
  printf("threads: %d threads ran\n", done);
  tt_leak(2000, 32768);
  return done != 2000;
}

/* ------------------------------------------------------------------ longjmp */
static sigjmp_buf jb;
static void *jmp_kept[200];
static int njmp;
static void jmp_handler(int sig)
{
  (void)sig;
  jmp_kept[njmp % 200] = malloc(512);
  siglongjmp(jb, 1);
}

static int mode_longjmp(void)
{
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = jmp_handler;
  sigaction(SIGUSR1, &sa, NULL);
  volatile int jumps = 0;
  for (volatile int i = 0; i < 1000; i++) {
    if (sigsetjmp(jb, 1) == 0) {
      free(malloc(100 + (size_t)i));
      raise(SIGUSR1);
    } else {
      jumps++;
      free(jmp_kept[njmp % 200]);
      njmp++;
    }
  }
  /* the mask was restored by siglongjmp: the signal still works */
  printf("longjmp: %d of 1000 handlers jumped out\n", jumps);
  tt_leak(2000, 32768);
  return jumps != 1000;
}

/* ------------------------------------------------------------------ _Fork */
static int mode_xfork(void)
{
  fflush(stdout);
  pid_t pid = _Fork();
  if (pid < 0)
    tt_die("_Fork");
  if (pid == 0) {
    tt_leak(2000, 16384);
    _exit(4);
  }
  tt_leak(2000, 32768);
  int st;
  if (waitpid(pid, &st, 0) != pid)
    tt_die("waitpid");
  printf("_Fork: child exited with %d\n", WIFEXITED(st) ? WEXITSTATUS(st) : -1);
  return 0;
}

/* ------------------------------------------------------------------ libcbufs */
#define obstack_chunk_alloc malloc
#define obstack_chunk_free free

static int mode_libcbufs(void)
{
  unsigned long bad = 0, bytes = 0;
  char text[4096];
  for (size_t i = 0; i < sizeof text; i++)
    text[i] = i % 61 == 60 ? '\n' : (char)('a' + i % 26);
  for (int r = 0; r < 200; r++) {
    /* getline with a buffer of ours that glibc grows, and one glibc allocates */
    FILE *f = fmemopen(text, sizeof text, "r");
    size_t cap = 4;
    char *line = malloc(cap), *line2 = NULL;
    size_t cap2 = 0;
    ssize_t n;
    while ((n = getline(&line, &cap, f)) > 0) {
      bytes += (size_t)n;
      if (getdelim(&line2, &cap2, 'z', f) < 0)
        break;
    }
    fclose(f);
    free(line);
    free(line2);
    /* open_memstream: glibc owns and grows the buffer until fclose */
    char *ms = NULL;
    size_t msz = 0;
    FILE *m = open_memstream(&ms, &msz);
    for (int k = 0; k < 100; k++)
      fprintf(m, "%d:%s;", k, "open_memstream");
    fclose(m);
    bad += msz == 0;
    free(ms);
    char *as = NULL;
    if (asprintf(&as, "%s-%d-%s", "asprintf", r, text + 100) < 0)
      bad++;
    free(as);
    free(strdup(text));
    free(strndup(text, 77));
    char *rp = realpath("/proc/self/exe", NULL);
    bad += rp == NULL;
    free(rp);
    struct dirent **list;
    int nd = scandir("/proc/self", &list, NULL, alphasort);
    for (int k = 0; k < nd; k++)
      free(list[k]);
    if (nd >= 0)
      free(list);
    else
      bad++;
    struct obstack ob;
    obstack_init(&ob);
    for (int k = 0; k < 500; k++)
      obstack_grow(&ob, text, 100);
    char *done = obstack_finish(&ob);
    bad += done[0] != 'a';
    obstack_free(&ob, NULL);
  }
  printf("libcbufs: %lu line bytes, %lu bad\n", bytes, bad);
  tt_leak(2000, 32768);
  return bad != 0;
}

int main(int argc, char **argv)
{
  static const struct {
    const char *name;
    int (*fn)(void);
  } modes[] = {{"usable", mode_usable},     {"aligned", mode_aligned}, {"mallopt", mode_mallopt},
               {"signals", mode_signals},   {"forks", mode_forks},     {"cancel", mode_cancel},
               {"altstack", mode_altstack}, {"tlsdtor", mode_tlsdtor}, {"deep", mode_deep},
               {"threads", mode_threads},   {"longjmp", mode_longjmp}, {"libcbufs", mode_libcbufs},
               {"_Fork", mode_xfork},       {"altstack8k", mode_altstack8k},
               {"altstack_min", mode_altstack_min}, {"deep_user", mode_deep_user}};
  if (argc != 2) {
    fprintf(stderr, "usage: tt_fine MODE\n");
    return 2;
  }
  for (size_t i = 0; i < sizeof modes / sizeof modes[0]; i++)
    if (!strcmp(argv[1], modes[i].name)) {
      int rc = modes[i].fn();
      fflush(stdout);
      return rc;
    }
  fprintf(stderr, "tt_fine: unknown mode %s\n", argv[1]);
  return 2;
}
