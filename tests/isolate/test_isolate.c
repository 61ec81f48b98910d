/* SPDX-License-Identifier: MIT */
/* lg_isolate_call (src/isolate, issue #15): outcomes, exact bytes, named system calls
 * and signals, bad arguments, and the caller unharmed after each. */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ptrace.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "leakguard.h"

static int state = 7; /* the caller's state: a child's change must not reach it */

/* Output: the input reversed; status 42. */
static int reverse(const void *in, size_t inlen, void **out, size_t *outlen, void *arg) {
  unsigned char *o = malloc(inlen ? inlen : 1);
  for (size_t i = 0; i < inlen; i++) o[i] = ((const unsigned char *)in)[inlen - 1 - i];
  *out = o;
  *outlen = inlen;
  return 42;
}

static int bump_state(const void *in, size_t inlen, void **out, size_t *outlen, void *arg) {
  int seen = state;
  state += 1000;
  *out = malloc(sizeof seen);
  memcpy(*out, &seen, sizeof seen);
  *outlen = sizeof seen;
  return 0;
}

static int big_output(const void *in, size_t inlen, void **out, size_t *outlen, void *arg) {
  size_t n = (size_t)8 << 20;
  unsigned char *o = malloc(n);
  for (size_t i = 0; i < n; i++) o[i] = (unsigned char)(i * 31 + (i >> 13));
  *out = o;
  *outlen = n;
  return 0;
}

static int do_socket(const void *in, size_t inlen, void **out, size_t *outlen, void *arg) {
  return socket(AF_INET, SOCK_STREAM, 0) >= 0 ? 0 : errno;
}
static int do_open_write(const void *in, size_t inlen, void **out, size_t *outlen, void *arg) {
  return open("/tmp/lg-isolate-must-not-exist", O_WRONLY | O_CREAT, 0600) >= 0 ? 0 : errno;
}
static int do_open_read(const void *in, size_t inlen, void **out, size_t *outlen, void *arg) {
  int fd = open("/proc/self/stat", O_RDONLY);
  return fd >= 0 ? 0 : errno;
}
static int do_exec(const void *in, size_t inlen, void **out, size_t *outlen, void *arg) {
  char *argv[] = {"true", NULL};
  execv("/bin/true", argv);
  return errno;
}
static int do_fork(const void *in, size_t inlen, void **out, size_t *outlen, void *arg) {
  pid_t p = fork();
  if (p == 0) _exit(0);
  return p < 0 ? errno : 0;
}
static int do_kill_parent(const void *in, size_t inlen, void **out, size_t *outlen, void *arg) {
  return kill(getppid(), SIGKILL);
}
static int do_ptrace(const void *in, size_t inlen, void **out, size_t *outlen, void *arg) {
  return (int)ptrace(PTRACE_ATTACH, getppid(), 0, 0);
}
static void *thread_body(void *p) {
  *(int *)p = 5;
  return NULL;
}
static int do_thread(const void *in, size_t inlen, void **out, size_t *outlen, void *arg) {
  pthread_t t;
  int v = 0;
  if (pthread_create(&t, NULL, thread_body, &v)) return -1;
  pthread_join(t, NULL);
  return v;
}
static int do_touch(const void *in, size_t inlen, void **out, size_t *outlen, void *arg) {
  size_t n = *(const size_t *)in;
  volatile char *p = malloc(n);
  if (!p) return -1;
  for (size_t i = 0; i < n; i += 4096) p[i] = 1;
  return 0;
}
static int do_loop(const void *in, size_t inlen, void **out, size_t *outlen, void *arg) {
  for (volatile int i = 0;; i++)
    ;
  return 0;
}
static volatile uintptr_t bad_address = 8;
static int do_segv(const void *in, size_t inlen, void **out, size_t *outlen, void *arg) {
  return *(volatile int *)bad_address;
}
static int do_abort(const void *in, size_t inlen, void **out, size_t *outlen, void *arg) { abort(); }
static int do_exit3(const void *in, size_t inlen, void **out, size_t *outlen, void *arg) { _exit(3); }
static int uses_arg(const void *in, size_t inlen, void **out, size_t *outlen, void *arg) { return *(int *)arg; }

static int call(lg_isolate_fn fn, const lg_isolate_opts_t *o, lg_isolate_result_t *r) {
  void *out = NULL;
  size_t outlen = 0;
  int rc = lg_isolate_call(fn, NULL, 0, &out, &outlen, o, r);
  free(out);
  return rc;
}

static void ok_exact_bytes(void **unused) {
  const char in[] = "leakguard isolate";
  void *out = NULL;
  size_t outlen = 0;
  lg_isolate_result_t r;
  assert_int_equal(lg_isolate_call(reverse, in, sizeof in - 1, &out, &outlen, NULL, &r), LG_ISOLATE_OK);
  assert_int_equal(r.code, LG_ISOLATE_OK);
  assert_int_equal(r.status, 42);
  assert_int_equal(outlen, sizeof in - 1);
  assert_memory_equal(out, "etalosi draugkael", outlen);
  free(out);
  int v = 9;
  lg_isolate_opts_t o = {.arg = &v};
  assert_int_equal(call(uses_arg, &o, &r), LG_ISOLATE_OK);
  assert_int_equal(r.status, 9);
}

static void big_output_exact(void **unused) {
  void *out = NULL, *want = NULL;
  size_t outlen = 0, wantlen = 0;
  lg_isolate_result_t r;
  assert_int_equal(lg_isolate_call(big_output, NULL, 0, &out, &outlen, NULL, &r), LG_ISOLATE_OK);
  big_output(NULL, 0, &want, &wantlen, NULL);
  assert_int_equal(outlen, wantlen);
  assert_memory_equal(out, want, outlen);
  free(out);
  free(want);
  lg_isolate_opts_t o = {.max_out = 1 << 20};
  assert_int_equal(lg_isolate_call(big_output, NULL, 0, &out, &outlen, &o, &r), LG_ISOLATE_ERROR);
  assert_null(out);
  assert_non_null(strstr(r.message, "max_out"));
}

static void state_does_not_leak(void **unused) {
  for (int i = 0; i < 20; i++) {
    void *out = NULL;
    size_t outlen = 0;
    assert_int_equal(lg_isolate_call(bump_state, NULL, 0, &out, &outlen, NULL, NULL), LG_ISOLATE_OK);
    assert_int_equal(outlen, sizeof(int));
    assert_int_equal(*(int *)out, 7);
    free(out);
  }
  assert_int_equal(state, 7);
}

static void forbidden(lg_isolate_fn fn, const char *name) {
  lg_isolate_result_t r;
  assert_int_equal(call(fn, NULL, &r), LG_ISOLATE_FORBIDDEN);
  assert_string_equal(r.syscall, name);
  assert_true(r.syscall_nr >= 0);
  assert_non_null(strstr(r.message, name));
}

static void forbidden_calls(void **unused) {
  forbidden(do_socket, "socket");
  forbidden(do_open_write, "openat");
  assert_int_equal(access("/tmp/lg-isolate-must-not-exist", F_OK), -1);
  forbidden(do_exec, "execve");
  forbidden(do_fork, "clone");
  forbidden(do_kill_parent, "kill");
  forbidden(do_ptrace, "ptrace");
  /* the caller is here, and reading is allowed */
  lg_isolate_result_t r;
  assert_int_equal(call(do_open_read, NULL, &r), LG_ISOLATE_OK);
  assert_int_equal(r.status, 0);
}

static void allowed_calls(void **unused) {
  lg_isolate_result_t r;
  lg_isolate_opts_t o = {.allow = LG_ALLOW_NET};
  assert_int_equal(call(do_socket, &o, &r), LG_ISOLATE_OK);
  assert_int_equal(r.status, 0);
  o.allow = LG_ALLOW_PROC;
  assert_int_equal(call(do_fork, &o, &r), LG_ISOLATE_OK);
  /* threads are not processes: allowed by default */
  assert_int_equal(call(do_thread, NULL, &r), LG_ISOLATE_OK);
  assert_int_equal(r.status, 5);
}

static void budget(void **unused) {
  size_t n = (size_t)400 << 20;
  lg_isolate_opts_t o = {.max_rss = (size_t)100 << 20, .budget_by = LG_BUDGET_RSS};
  lg_isolate_result_t r;
  void *out = NULL;
  size_t outlen = 0;
  assert_int_equal(lg_isolate_call(do_touch, &n, sizeof n, &out, &outlen, &o, &r), LG_ISOLATE_BUDGET);
  assert_null(out);
  assert_true(r.peak_rss > o.max_rss);
  assert_int_equal(r.budget_by, LG_BUDGET_RSS);
  /* within the budget */
  n = (size_t)20 << 20;
  assert_int_equal(lg_isolate_call(do_touch, &n, sizeof n, &out, &outlen, &o, &r), LG_ISOLATE_OK);
  assert_true(r.peak_rss >= n - (n >> 3));
  assert_null(out); /* no output: NULL, 0 */
  assert_int_equal(outlen, 0);
}

/* A cgroup asked for where there is none: an error, not a silent fallback. */
static void cgroup_refused(void **unused) {
  size_t n = 1 << 20;
  lg_isolate_opts_t o = {.max_rss = (size_t)100 << 20, .budget_by = LG_BUDGET_CGROUP,
                         .cgroup_parent = "/nonexistent/leakguard"};
  lg_isolate_result_t r;
  void *out = NULL;
  size_t outlen = 0;
  assert_int_equal(lg_isolate_call(do_touch, &n, sizeof n, &out, &outlen, &o, &r), LG_ISOLATE_ERROR);
  assert_non_null(strstr(r.message, "no memory cgroup: /nonexistent/leakguard is not a memory cgroup"));
  o.budget_by = 7;
  assert_int_equal(lg_isolate_call(do_touch, &n, sizeof n, &out, &outlen, &o, &r), LG_ISOLATE_ERROR);
  assert_non_null(strstr(r.message, "budget_by"));
  /* AUTO with that parent falls back to polling RSS */
  o.budget_by = LG_BUDGET_AUTO;
  assert_int_equal(lg_isolate_call(do_touch, &n, sizeof n, &out, &outlen, &o, &r), LG_ISOLATE_OK);
  assert_int_equal(r.budget_by, LG_BUDGET_RSS);
}

/* ---------------------------------------------------------------- cgroup budgets
 * Run as `test_isolate cgroup` (ctest isolate_cgroup): exit 77 (skipped) where this
 * process cannot make memory cgroups, saying why. */
static char cg_parent[4096];

static int count_cgroups(pid_t pid) {
  char cmd[4200];
  snprintf(cmd, sizeof cmd, "ls -d %s/leakguard-iso-%d-* 2>/dev/null | wc -l", cg_parent, (int)pid);
  FILE *f = popen(cmd, "r");
  int n = -1;
  if (f) {
    if (fscanf(f, "%d", &n) != 1) n = -1;
    pclose(f);
  }
  return n;
}

/* This process's cgroups left in the parent directory once its children are gone. A
 * child that answered is reaped, and its cgroup removed, by the next call (or at
 * exit): a call without a budget here does that. */
static int cg_left(void) {
  int n = -1;
  for (int i = 0; i < 100 && (n = count_cgroups(getpid())) != 0; i++) {
    usleep(20000);
    size_t z = 0;
    void *out = NULL;
    size_t outlen = 0;
    (void)lg_isolate_call(do_touch, &z, sizeof z, &out, &outlen, NULL, NULL);
  }
  return n;
}

static void cgroup_budget(void **unused) {
  size_t n = (size_t)400 << 20;
  lg_isolate_opts_t o = {.max_rss = (size_t)100 << 20, .budget_by = LG_BUDGET_CGROUP};
  lg_isolate_result_t r;
  void *out = NULL;
  size_t outlen = 0;
  assert_int_equal(lg_isolate_call(do_touch, &n, sizeof n, &out, &outlen, &o, &r), LG_ISOLATE_BUDGET);
  assert_int_equal(r.budget_by, LG_BUDGET_CGROUP);
  assert_non_null(strstr(r.message, "cgroup's limit of 100 MiB"));
  assert_true(r.peak_rss >= o.max_rss - (o.max_rss >> 4) && r.peak_rss <= o.max_rss);
  /* within the budget: the peak is what the child added */
  n = (size_t)20 << 20;
  assert_int_equal(lg_isolate_call(do_touch, &n, sizeof n, &out, &outlen, &o, &r), LG_ISOLATE_OK);
  assert_int_equal(r.budget_by, LG_BUDGET_CGROUP);
  assert_true(r.peak_rss >= n - (n >> 3) && r.peak_rss <= n + ((size_t)8 << 20));
  assert_int_equal(cg_left(), 0);
}

/* Writing to the caller's pages copies them: the kernel charges the copies to the
 * child's cgroup, where the RSS (pages mapped, shared or not) does not grow. */
static char *shared_buf;
static size_t shared_len = (size_t)96 << 20;
static int do_write_shared(const void *in, size_t inlen, void **out, size_t *outlen, void *arg) {
  for (size_t i = 0; i < shared_len; i += 4096) shared_buf[i]++;
  return 0;
}
static void cgroup_counts_copies(void **unused) {
  shared_buf = malloc(shared_len);
  assert_non_null(shared_buf);
  memset(shared_buf, 1, shared_len);
  lg_isolate_opts_t o = {.max_rss = (size_t)32 << 20, .budget_by = LG_BUDGET_CGROUP};
  lg_isolate_result_t r;
  void *out = NULL;
  size_t outlen = 0;
  assert_int_equal(lg_isolate_call(do_write_shared, NULL, 0, &out, &outlen, &o, &r), LG_ISOLATE_BUDGET);
  assert_int_equal(r.budget_by, LG_BUDGET_CGROUP);
  o.budget_by = LG_BUDGET_RSS; /* for the record: polling sees no growth */
  int rc = lg_isolate_call(do_write_shared, NULL, 0, &out, &outlen, &o, &r);
  printf("# 96 MiB of the caller's pages written under a 32 MiB budget: cgroup: budget; rss: %s (peak %zu KiB)\n",
         lg_isolate_code_name(rc), r.peak_rss >> 10);
  assert_int_equal(shared_buf[0], 1); /* the caller's pages are its own */
  free(shared_buf);
  assert_int_equal(cg_left(), 0);
}

/* A pooled child serving several requests: each request its own budget in the
 * child's cgroup, and no cgroup left once the pool is freed. */
static void cgroup_pool(void **unused) {
  lg_isolate_opts_t o = {.max_rss = (size_t)100 << 20, .budget_by = LG_BUDGET_CGROUP, .pool_size = 2, .reuse_k = 4};
  lg_isolate_pool_t *p = lg_isolate_pool_new(do_touch, &o);
  assert_non_null(p);
  for (int i = 0; i < 6; i++) {
    size_t n = (size_t)60 << 20;
    lg_isolate_result_t r;
    void *out = NULL;
    size_t outlen = 0;
    assert_int_equal(lg_isolate_pool_call(p, &n, sizeof n, &out, &outlen, &r), LG_ISOLATE_OK);
    assert_int_equal(r.budget_by, LG_BUDGET_CGROUP);
    assert_true(r.peak_rss >= n - (n >> 3));
  }
  size_t n = (size_t)400 << 20;
  lg_isolate_result_t r;
  void *out = NULL;
  size_t outlen = 0;
  assert_int_equal(lg_isolate_pool_call(p, &n, sizeof n, &out, &outlen, &r), LG_ISOLATE_BUDGET);
  lg_isolate_pool_free(p);
  assert_int_equal(cg_left(), 0);
}

/* A process that exits with a pool it never freed leaves no cgroup behind. */
static void cgroup_exit_cleanup(void **unused) {
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    lg_isolate_opts_t o = {.max_rss = (size_t)64 << 20, .budget_by = LG_BUDGET_CGROUP, .pool_size = 3};
    lg_isolate_pool_t *p = lg_isolate_pool_new(do_touch, &o);
    size_t n = 1 << 20;
    void *out = NULL;
    size_t outlen = 0;
    int rc = p ? lg_isolate_pool_call(p, &n, sizeof n, &out, &outlen, NULL) : -1;
    while (p && lg_isolate_pool_ready(p) < 3) usleep(1000);
    exit(rc == LG_ISOLATE_OK ? 0 : 3);
  }
  int st;
  assert_int_equal(waitpid(pid, &st, 0), pid);
  assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
  assert_int_equal(count_cgroups(pid), 0); /* at once: its exit removed them */
}

static void timeout_and_crash(void **unused) {
  lg_isolate_result_t r;
  lg_isolate_opts_t o = {.timeout_s = 0.3};
  assert_int_equal(call(do_loop, &o, &r), LG_ISOLATE_TIMEOUT);
  assert_int_equal(call(do_segv, NULL, &r), LG_ISOLATE_CRASH);
  assert_int_equal(r.signal, SIGSEGV);
  assert_non_null(strstr(r.message, "SIGSEGV"));
  assert_int_equal(call(do_abort, NULL, &r), LG_ISOLATE_CRASH);
  assert_int_equal(r.signal, SIGABRT);
  assert_int_equal(call(do_exit3, NULL, &r), LG_ISOLATE_CRASH);
  assert_int_equal(r.signal, 0);
  assert_int_equal(r.exit_code, 3);
}

static void bad_arguments(void **unused) {
  void *out = (void *)1;
  size_t outlen = 1;
  lg_isolate_result_t r;
  assert_int_equal(lg_isolate_call(NULL, NULL, 0, &out, &outlen, NULL, &r), LG_ISOLATE_ERROR);
  assert_null(out);
  assert_int_equal(outlen, 0);
  assert_non_null(strstr(r.message, "fn is NULL"));
  assert_int_equal(lg_isolate_call(reverse, NULL, 0, NULL, &outlen, NULL, &r), LG_ISOLATE_ERROR);
  assert_int_equal(lg_isolate_call(reverse, NULL, 0, &out, NULL, NULL, NULL), LG_ISOLATE_ERROR);
  assert_int_equal(lg_isolate_call(reverse, NULL, 5, &out, &outlen, NULL, &r), LG_ISOLATE_ERROR);
  lg_isolate_opts_t o = {.timeout_s = -1};
  assert_int_equal(lg_isolate_call(reverse, NULL, 0, &out, &outlen, &o, &r), LG_ISOLATE_ERROR);
  o.timeout_s = NAN;
  assert_int_equal(lg_isolate_call(reverse, NULL, 0, &out, &outlen, &o, &r), LG_ISOLATE_ERROR);
  o = (lg_isolate_opts_t){.allow = 0x100};
  assert_int_equal(lg_isolate_call(reverse, NULL, 0, &out, &outlen, &o, &r), LG_ISOLATE_ERROR);
  o = (lg_isolate_opts_t){.pool_size = -1};
  assert_int_equal(lg_isolate_call(reverse, NULL, 0, &out, &outlen, &o, &r), LG_ISOLATE_ERROR);
  /* max_rss 0 is "no budget", not "nothing": the call runs */
  o = (lg_isolate_opts_t){.max_rss = 0};
  assert_int_equal(lg_isolate_call(reverse, "ab", 2, &out, &outlen, &o, &r), LG_ISOLATE_OK);
  assert_memory_equal(out, "ba", 2);
  free(out);
  assert_null(lg_isolate_code_name(-1));
  assert_null(lg_isolate_code_name(LG_ISOLATE_NCODES));
  assert_string_equal(lg_isolate_code_name(LG_ISOLATE_FORBIDDEN), "forbidden");
}

static void *thread_caller(void *p) {
  int id = (int)(intptr_t)p;
  for (int i = 0; i < 10; i++) {
    char in[32];
    int n = snprintf(in, sizeof in, "thread-%d-call-%d", id, i);
    void *out = NULL;
    size_t outlen = 0;
    if (lg_isolate_call(reverse, in, (size_t)n, &out, &outlen, NULL, NULL) != LG_ISOLATE_OK || outlen != (size_t)n)
      return (void *)1;
    for (int k = 0; k < n; k++)
      if (((char *)out)[k] != in[n - 1 - k]) return (void *)1;
    free(out);
  }
  return NULL;
}

static void threads(void **unused) {
  pthread_t t[4];
  for (int i = 0; i < 4; i++) assert_int_equal(pthread_create(&t[i], NULL, thread_caller, (void *)(intptr_t)i), 0);
  for (int i = 0; i < 4; i++) {
    void *rv;
    pthread_join(t[i], &rv);
    assert_null(rv);
  }
}

static void stats(void **unused) {
  lg_isolate_stats_t a, b;
  lg_isolate_stats(&a);
  lg_isolate_result_t r;
  call(do_socket, NULL, &r);
  call(do_segv, NULL, &r);
  call(do_open_read, NULL, &r);
  lg_isolate_stats(&b);
  assert_int_equal(b.requests[LG_ISOLATE_FORBIDDEN] - a.requests[LG_ISOLATE_FORBIDDEN], 1);
  assert_int_equal(b.requests[LG_ISOLATE_CRASH] - a.requests[LG_ISOLATE_CRASH], 1);
  assert_int_equal(b.requests[LG_ISOLATE_OK] - a.requests[LG_ISOLATE_OK], 1);
  uint64_t na = 0, nb = 0;
  for (int i = 0; i < LG_ISOLATE_RSS_BUCKETS; i++) {
    na += a.peak_rss_bucket[i];
    nb += b.peak_rss_bucket[i];
  }
  assert_int_equal(nb - na, 3);
}

/* reuse_k: one pooled child serves up to reuse_k requests; its state carries over
 * between them (the trade the option makes), a new child starts from the caller's. */
static int count_calls(const void *in, size_t inlen, void **out, size_t *outlen, void *arg) {
  (void)in, (void)arg;
  static int calls;     /* the child's copy: 0 in every fresh child */
  static char *volatile kept; /* 40 MiB more per request of inlen 1 */
  static char *volatile scratch; /* touched and unmapped in a first request of inlen 2 */
  calls++;
  if (inlen == 1) { /* keep 40 MiB more */
    size_t n = (size_t)40 << 20;
    kept = malloc(n);
    for (size_t i = 0; i < n; i += 4096) ((volatile char *)kept)[i] = 1;
  } else if (inlen == 2 && calls == 1) { /* a 64 MiB peak, given back */
    size_t n = (size_t)64 << 20;
    scratch = malloc(n);
    for (size_t i = 0; i < n; i += 4096) ((volatile char *)scratch)[i] = 1;
    free(scratch); /* above the mmap threshold: unmapped */
  }
  *out = malloc(sizeof calls);
  memcpy(*out, &calls, sizeof calls);
  *outlen = sizeof calls;
  return 0;
}

static int pool_count(lg_isolate_pool_t *p, size_t inlen, lg_isolate_result_t *r) {
  static const char in[2] = {0, 0};
  void *out = NULL;
  size_t outlen = 0;
  assert_int_equal(lg_isolate_pool_call(p, in, inlen, &out, &outlen, r), LG_ISOLATE_OK);
  assert_int_equal(outlen, sizeof(int));
  int v;
  memcpy(&v, out, sizeof v);
  free(out);
  return v;
}

static void pool_reuse(void **unused) {
  lg_isolate_result_t r;
  lg_isolate_opts_t o = {.pool_size = 1, .reuse_k = 3};
  lg_isolate_pool_t *p = lg_isolate_pool_new(count_calls, &o);
  assert_non_null(p);
  while (lg_isolate_pool_ready(p) < 1) usleep(1000);
  /* one child, three requests, then a fresh copy */
  assert_int_equal(pool_count(p, 0, &r), 1);
  assert_int_equal(pool_count(p, 0, &r), 2);
  assert_int_equal(pool_count(p, 0, &r), 3);
  assert_int_equal(pool_count(p, 0, &r), 1);
  lg_isolate_pool_free(p);
  /* the peak is each request's own: a 64 MiB peak in the first, none in the second */
  p = lg_isolate_pool_new(count_calls, &o);
  while (lg_isolate_pool_ready(p) < 1) usleep(1000);
  assert_int_equal(pool_count(p, 2, &r), 1);
  assert_true(r.peak_rss >= (size_t)60 << 20);
  assert_int_equal(pool_count(p, 2, &r), 2);
  assert_true(r.peak_rss < (size_t)16 << 20);
  lg_isolate_pool_free(p);
  /* the memory check between requests: a child that kept 40 MiB of a 64 MiB budget
   * (over half) serves no more, the next request gets a fresh one */
  o = (lg_isolate_opts_t){.pool_size = 1, .reuse_k = 5, .max_rss = (size_t)64 << 20};
  p = lg_isolate_pool_new(count_calls, &o);
  while (lg_isolate_pool_ready(p) < 1) usleep(1000);
  assert_int_equal(pool_count(p, 1, &r), 1);
  assert_int_equal(pool_count(p, 1, &r), 1);
  lg_isolate_pool_free(p);
}

static void pool(void **unused) {
  lg_isolate_opts_t o = {.pool_size = 0};
  assert_null(lg_isolate_pool_new(reverse, &o));
  o.pool_size = 3;
  assert_null(lg_isolate_pool_new(NULL, &o));
  lg_isolate_pool_t *p = lg_isolate_pool_new(reverse, &o);
  assert_non_null(p);
  /* wait (no time limit but ctest's) until the refill thread has forked all three */
  while (lg_isolate_pool_ready(p) < 3) usleep(1000);
  for (int i = 0; i < 12; i++) {
    char in[32];
    int n = snprintf(in, sizeof in, "pooled request %d", i);
    void *out = NULL;
    size_t outlen = 0;
    lg_isolate_result_t r;
    assert_int_equal(lg_isolate_pool_call(p, in, (size_t)n, &out, &outlen, &r), LG_ISOLATE_OK);
    assert_int_equal(r.status, 42);
    assert_int_equal(outlen, (size_t)n);
    for (int k = 0; k < n; k++) assert_int_equal(((char *)out)[k], in[n - 1 - k]);
    free(out);
  }
  void *out = NULL;
  size_t outlen = 0;
  assert_int_equal(lg_isolate_pool_call(p, NULL, 3, &out, &outlen, NULL), LG_ISOLATE_ERROR);
  lg_isolate_pool_free(p);
  /* pooled children are isolated and fresh like the others */
  o = (lg_isolate_opts_t){.pool_size = 2};
  p = lg_isolate_pool_new(do_socket, &o);
  lg_isolate_result_t r;
  assert_int_equal(lg_isolate_pool_call(p, NULL, 0, &out, &outlen, &r), LG_ISOLATE_FORBIDDEN);
  assert_string_equal(r.syscall, "socket");
  lg_isolate_pool_free(p);
  p = lg_isolate_pool_new(bump_state, &o);
  for (int i = 0; i < 5; i++) {
    assert_int_equal(lg_isolate_pool_call(p, NULL, 0, &out, &outlen, &r), LG_ISOLATE_OK);
    assert_int_equal(*(int *)out, 7);
    free(out);
  }
  lg_isolate_pool_free(p);
  o = (lg_isolate_opts_t){.pool_size = 1, .max_rss = (size_t)100 << 20};
  p = lg_isolate_pool_new(do_touch, &o);
  size_t n = (size_t)400 << 20;
  assert_int_equal(lg_isolate_pool_call(p, &n, sizeof n, &out, &outlen, &r), LG_ISOLATE_BUDGET);
  lg_isolate_pool_free(p);
  o = (lg_isolate_opts_t){.pool_size = 1, .timeout_s = 0.3};
  p = lg_isolate_pool_new(do_loop, &o);
  assert_int_equal(lg_isolate_pool_call(p, NULL, 0, &out, &outlen, &r), LG_ISOLATE_TIMEOUT);
  lg_isolate_pool_free(p);
}

int main(int argc, char **argv) {
  if (argc > 1 && strcmp(argv[1], "cgroup") == 0) {
    if (lg_isolate_budget_method(cg_parent, sizeof cg_parent) != LG_BUDGET_CGROUP) {
      printf("SKIP: no memory cgroup can be made here: %s\n", cg_parent);
      return 77;
    }
    printf("# children's cgroups go in %s\n", cg_parent);
    const struct CMUnitTest cg[] = {
        cmocka_unit_test(cgroup_budget),
        cmocka_unit_test(cgroup_counts_copies),
        cmocka_unit_test(cgroup_pool),
        cmocka_unit_test(cgroup_exit_cleanup),
    };
    return cmocka_run_group_tests(cg, NULL, NULL);
  }
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(cgroup_refused),
      cmocka_unit_test(ok_exact_bytes),
      cmocka_unit_test(big_output_exact),
      cmocka_unit_test(state_does_not_leak),
      cmocka_unit_test(forbidden_calls),
      cmocka_unit_test(allowed_calls),
      cmocka_unit_test(budget),
      cmocka_unit_test(timeout_and_crash),
      cmocka_unit_test(bad_arguments),
      cmocka_unit_test(threads),
      cmocka_unit_test(stats),
      cmocka_unit_test(pool),
      cmocka_unit_test(pool_reuse),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
