/* SPDX-License-Identifier: MIT */
/* Isolated calls: fn runs in a copy-on-write fork of the caller, under the seccomp
 * filter of seccomp.c, a memory budget (the child's own memory cgroup where one can be
 * made, else its RSS polled) and a timeout (docs/isolate.md).
 *
 * The child talks to the parent over one AF_UNIX stream socket (send with
 * MSG_NOSIGNAL: no SIGPIPE in the caller). Messages are a fixed header, lgiso_msg,
 * followed by len payload bytes for LGISO_DONE:
 *   LGISO_START  value = the child's RSS when it starts (the base of the budget)
 *   LGISO_DONE   value = fn's status, peak = peak growth, len = output bytes
 *   LGISO_DONE_AGAIN  the same, and the (pooled, reuse_k) child waits for another request
 *   LGISO_DENIED value = the number of the denied system call (SIGSYS handler)
 *   LGISO_SETUP  value = errno of a failed setup step
 *   LGISO_NOCG   value = errno of entering its cgroup (the parent polls RSS instead)
 *   LGISO_READY  a pooled child is set up (in its cgroup, filtered) and waits */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <dirent.h>
#include <dlfcn.h>
#include <linux/filter.h>
#include <linux/seccomp.h>

#include "core/region.h" /* the region's isolated-call counters (lg_region_isolate_note) */
#include "isolate/isolate.h"

#define LGISO_MAGIC 0x4c474931u /* "LGI1" */
enum {
  LGISO_START = 1,
  LGISO_DONE = 2,
  LGISO_DENIED = 3,
  LGISO_SETUP = 4,
  LGISO_DONE_AGAIN = 5,
  LGISO_NOCG = 6,
  LGISO_READY = 7
};
typedef struct lgiso_msg {
  uint32_t magic, kind;
  int64_t value;
  uint64_t peak, len;
} lgiso_msg_t;

#define DEFAULT_MAX_OUT ((size_t)256 << 20)
#define POLL_MS 2 /* budget polling period */
#define EXIT_DENIED 121
#define EXIT_SETUP 122
/* A child that has not started its request this long after it was given it is stuck
 * (an interpreter's lock held by another thread when it forked): it is killed. */
#define START_S 10.0

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* ---------------------------------------------------------------- child side */

static int child_sock = -1;

/* Async-signal-safe write of all of buf. */
static int write_all(int fd, const void *buf, size_t n) {
  const char *p = buf;
  while (n) {
    ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return -1;
    p += w;
    n -= (size_t)w;
  }
  return 0;
}

static int clear_refs_fd = -1; /* the child's /proc/self/clear_refs (reuse_k > 1) */

static void child_send(uint32_t kind, int64_t value, uint64_t peak, uint64_t len) {
  lgiso_msg_t m = {.magic = LGISO_MAGIC, .kind = kind, .value = value, .peak = peak, .len = len};
  (void)write_all(child_sock, &m, sizeof m);
}

static void on_sigsys(int sig, siginfo_t *si, void *uc) {
  child_send(LGISO_DENIED, si->si_syscall, 0, 0);
  _exit(EXIT_DENIED);
}

/* Reads a number of pages (field 1 of statm) or a "Key: N kB" line; -1 on failure.
 * Async-signal-safe (open/read/close only). */
static long read_file(const char *path, char *buf, size_t size) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  ssize_t n = read(fd, buf, size - 1);
  close(fd);
  if (n <= 0) return -1;
  buf[n] = 0;
  return n;
}

static int64_t statm_rss(const char *path) {
  char buf[128];
  if (read_file(path, buf, sizeof buf) < 0) return -1;
  char *p = buf;
  while (*p && *p != ' ') p++;
  return strtoll(p, NULL, 10) * sysconf(_SC_PAGESIZE);
}

static int64_t self_hwm(void) {
  char buf[4096];
  if (read_file("/proc/self/status", buf, sizeof buf) < 0) return -1;
  char *p = strstr(buf, "VmHWM:");
  return p ? strtoll(p + 6, NULL, 10) * 1024 : -1;
}

/* Closes the sockets the child inherited (the caller's listeners, connections, other
 * children's channels) except its own: without LG_ALLOW_NET the handler must not reach
 * the network through them either. */
static void close_inherited_sockets(void) {
  int fd = open("/proc/self/fd", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return;
  char buf[4096];
  for (;;) {
    long n = syscall(SYS_getdents64, fd, buf, sizeof buf);
    if (n <= 0) break;
    for (long off = 0; off < n;) {
      struct {
        uint64_t ino;
        int64_t off;
        unsigned short reclen;
        unsigned char type;
        char name[];
      } *d = (void *)(buf + off);
      off += d->reclen;
      if (d->name[0] < '0' || d->name[0] > '9') continue;
      int x = (int)strtol(d->name, NULL, 10);
      struct stat st;
      if (x != fd && x != child_sock && fstat(x, &st) == 0 && S_ISSOCK(st.st_mode)) close(x);
    }
  }
  close(fd);
}

static _Noreturn void child_main(lg_isolate_fn fn, const void *in, size_t inlen, int pooled, const lg_isolate_opts_t *o,
                                 lgiso_cg_t *cg, const struct sock_filter *prog, size_t plen,
                                 struct sock_filter *copy) {
  /* Into its cgroup first: what it allocates from here on is charged to it. */
  if (cg->procs_fd >= 0) {
    int rc = lgiso_cg_enter(cg);
    if (rc < 0) child_send(LGISO_NOCG, -rc, 0, 0);
  }
  if (o->after_fork_child) o->after_fork_child(o->hook_arg);
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_sigaction = on_sigsys;
  sa.sa_flags = SA_SIGINFO;
  sigaction(SIGSYS, &sa, NULL);
  sa.sa_handler = SIG_IGN;
  sa.sa_flags = 0;
  sigaction(SIGPIPE, &sa, NULL);
  /* A crash ends the child: the caller's handlers of crash signals (a test harness's
   * longjmp, a sanitizer's report) would go on running the caller's code in it. */
  static const int crash[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT, SIGTRAP};
  sigset_t un;
  sigemptyset(&un);
  sigaddset(&un, SIGSYS);
  sa.sa_handler = SIG_DFL;
  for (size_t i = 0; i < sizeof crash / sizeof crash[0]; i++) {
    sigaction(crash[i], &sa, NULL);
    sigaddset(&un, crash[i]);
  }
  pthread_sigmask(SIG_UNBLOCK, &un, NULL);
  /* Dies with the caller. */
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (pooled && o->reuse_k > 1) clear_refs_fd = open("/proc/self/clear_refs", O_WRONLY | O_CLOEXEC);
  if (!(o->allow & LG_ALLOW_NET)) close_inherited_sockets();
  /* The filter, with this process's pid where kill/tgkill compare it. */
  pid_t self = getpid();
  for (size_t i = 0; i < plen; i++) {
    copy[i] = prog[i];
    if (BPF_CLASS(copy[i].code) == BPF_JMP && copy[i].k == LGISO_SELF_PID) copy[i].k = (uint32_t)self;
  }
  struct sock_fprog fp = {.len = (unsigned short)plen, .filter = copy};
  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) || prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &fp)) {
    child_send(LGISO_SETUP, errno, 0, 0);
    _exit(EXIT_SETUP);
  }
  if (pooled) child_send(LGISO_READY, 0, 0, 0);
  /* A pooled child serves up to reuse_k requests (at least one), each with its own
   * START and DONE; it stops early when it grew by half its budget since its first
   * request (the memory check between requests). Its peak is reset between requests
   * through /proc/self/clear_refs, opened before the filter (no open for writing after). */
  int reuse = pooled && o->reuse_k > 1 ? o->reuse_k : 1;
  int clear_refs = reuse > 1 ? clear_refs_fd : -1;
  int64_t first_rss = -1;
  for (int served = 0;; served++) {
    char *buf = NULL;
    if (pooled) {
      /* A pooled child waits for its request: the input's length, then the input. */
      uint64_t len;
      if (recv(child_sock, &len, sizeof len, MSG_WAITALL) != (ssize_t)sizeof len) _exit(0);
      buf = malloc(len ? len : 1);
      if (!buf) _exit(EXIT_SETUP);
      for (uint64_t got = 0; got < len;) {
        ssize_t n = recv(child_sock, buf + got, len - got, 0);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) _exit(0);
        got += (uint64_t)n;
      }
      in = buf;
      inlen = len;
    }
    if (clear_refs >= 0) (void)!pwrite(clear_refs, "5", 1, 0); /* VmHWM := VmRSS */
    int64_t rss0 = statm_rss("/proc/self/statm");
    if (first_rss < 0) first_rss = rss0;
    child_send(LGISO_START, rss0, 0, 0);
    void *out = NULL;
    size_t outlen = 0;
    int status = fn(in, inlen, &out, &outlen, o->arg);
    if (!out) outlen = 0;
    int64_t hwm = self_hwm();
    uint64_t peak = hwm > rss0 && rss0 >= 0 ? (uint64_t)(hwm - rss0) : 0;
    int again = served + 1 < reuse;
    if (again && o->max_rss) {
      int64_t now = statm_rss("/proc/self/statm");
      again = now >= 0 && first_rss >= 0 && (uint64_t)(now > first_rss ? now - first_rss : 0) <= o->max_rss / 2;
    }
    child_send(again ? LGISO_DONE_AGAIN : LGISO_DONE, status, peak, outlen);
    if (outlen) (void)write_all(child_sock, out, outlen);
    if (!again) _exit(0);
    free(out);
    free(buf);
  }
}

/* ---------------------------------------------------------------- parent side */

static void fail(lg_isolate_result_t *res, int code, const char *fmt, const char *what, int err) {
  res->code = code;
  snprintf(res->message, sizeof res->message, fmt, what, strerror(err));
}

int lgiso_spawn(lgiso_job_t *job, lg_isolate_fn fn, const void *in, size_t inlen, int pooled,
                const lg_isolate_opts_t *opts, lg_isolate_result_t *res) {
  static const lg_isolate_opts_t none;
  memset(res, 0, sizeof *res);
  res->syscall_nr = -1;
  memset(job, 0, sizeof *job);
  job->pid = -1;
  job->pidfd = job->sock = -1;
  const lg_isolate_opts_t *o = opts ? opts : &none;
  const char *bad = !fn                                       ? "fn is NULL"
                    : !in && inlen                            ? "in is NULL with inlen > 0"
                    : isnan(o->timeout_s) || o->timeout_s < 0 ? "timeout_s is negative or NaN"
                    : o->allow & ~(unsigned)(LG_ALLOW_NET | LG_ALLOW_WRITE | LG_ALLOW_EXEC | LG_ALLOW_PROC)
                        ? "unknown allow flags"
                    : o->pool_size < 0 || o->reuse_k < 0 ? "pool_size or reuse_k is negative"
                                                         : NULL;
  if (bad) {
    res->code = LG_ISOLATE_ERROR;
    snprintf(res->message, sizeof res->message, "invalid argument: %s", bad);
    return res->code;
  }
  if (o->budget_by < LG_BUDGET_AUTO || o->budget_by > LG_BUDGET_CGROUP) {
    res->code = LG_ISOLATE_ERROR;
    snprintf(res->message, sizeof res->message, "invalid argument: budget_by is not an LG_BUDGET_*");
    return res->code;
  }
  job->opts = *o;
  if (!job->opts.max_out) job->opts.max_out = DEFAULT_MAX_OUT;
  lgiso_cg_init(&job->cg);
  if (o->max_rss && o->budget_by != LG_BUDGET_RSS) {
    char why[200];
    if (lgiso_cg_make(&job->cg, o->cgroup_parent, o->max_rss, why, sizeof why) < 0 &&
        o->budget_by == LG_BUDGET_CGROUP) {
      res->code = LG_ISOLATE_ERROR;
      snprintf(res->message, sizeof res->message, "no memory cgroup: %.100s", why);
      return res->code;
    }
  }
  job->opts.cgroup_parent = NULL; /* not kept: the caller's string */
  const struct sock_filter *prog;
  size_t plen;
  int rc = lgiso_filter(o->allow, &prog, &plen);
  if (rc < 0) {
    fail(res, LG_ISOLATE_ERROR, "building the seccomp filter: %s%s", "", -rc);
    return res->code;
  }
  /* The child's copy of the program is allocated here: the child must not allocate. */
  struct sock_filter *copy = malloc(plen * sizeof *copy);
  int sv[2];
  if (!copy || socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0) {
    int e = errno;
    free(copy);
    lgiso_cg_remove(&job->cg);
    fail(res, LG_ISOLATE_ERROR, "%ssocketpair: %s", "", e);
    return res->code;
  }
  job->t0 = now_s();
  if (o->before_fork) o->before_fork(o->hook_arg);
  pid_t pid = fork();
  int fork_err = errno;
  if (pid != 0 && o->after_fork_parent) o->after_fork_parent(o->hook_arg);
  if (pid < 0) {
    int e = fork_err;
    free(copy);
    close(sv[0]);
    close(sv[1]);
    lgiso_cg_remove(&job->cg);
    fail(res, LG_ISOLATE_ERROR, "%sfork: %s", "", e);
    return res->code;
  }
  if (pid == 0) {
    close(sv[0]);
    child_sock = sv[1];
    child_main(fn, in, inlen, pooled, &job->opts, &job->cg, prog, plen, copy);
  }
  free(copy);
  close(sv[1]);
  if (job->cg.procs_fd >= 0) { /* the child's to use */
    close(job->cg.procs_fd);
    job->cg.procs_fd = -1;
  }
  job->cg_base = 0;
  job->cg_peak_ok = 1;
  job->pooled = pooled;
  job->pid = pid;
  job->sock = sv[0];
  job->pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
  return LG_ISOLATE_OK;
}

/* Receive state of the parent. */
typedef struct rx {
  lgiso_msg_t hdr;
  size_t hdr_have;
  char *buf;
  size_t have;
  int64_t rss0; /* -1 until LGISO_START */
  int done, again, denied, setup, bad, nocg;
  int64_t status, denied_nr, setup_errno;
  uint64_t peak;
} rx_t;

/* Reads what is available; returns 0 at EOF, 1 when more may come, -1 on error. */
static int rx_read(int fd, rx_t *r, size_t max_out, int nonblock) {
  for (;;) {
    char tmp[65536];
    size_t want = sizeof tmp;
    char *dst = tmp;
    int into_buf = r->done && r->have < r->hdr.len;
    if (into_buf) {
      dst = r->buf + r->have;
      want = r->hdr.len - r->have;
    } else if (r->hdr_have < sizeof r->hdr) {
      dst = (char *)&r->hdr + r->hdr_have;
      want = sizeof r->hdr - r->hdr_have;
    }
    ssize_t n = recv(fd, dst, want, nonblock ? MSG_DONTWAIT : 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return 1;
    if (n <= 0) return n == 0 ? 0 : -1;
    if (into_buf) {
      r->have += (size_t)n;
    } else if (dst != tmp) {
      r->hdr_have += (size_t)n;
      if (r->hdr_have < sizeof r->hdr) continue;
      if (r->hdr.magic != LGISO_MAGIC) {
        r->bad = 1;
        return -1;
      }
      r->hdr_have = 0;
      switch (r->hdr.kind) {
      case LGISO_START: r->rss0 = r->hdr.value; break;
      case LGISO_DONE:
      case LGISO_DONE_AGAIN:
        r->again = r->hdr.kind == LGISO_DONE_AGAIN;
        if (r->hdr.len > max_out) {
          r->bad = 2;
          return -1;
        }
        r->done = 1;
        r->status = r->hdr.value;
        r->peak = r->hdr.peak;
        r->buf = malloc(r->hdr.len ? r->hdr.len : 1);
        if (!r->buf) {
          r->bad = 3;
          return -1;
        }
        r->hdr_have = sizeof r->hdr; /* nothing follows the payload */
        break;
      case LGISO_DENIED:
        r->denied = 1;
        r->denied_nr = r->hdr.value;
        break;
      case LGISO_SETUP:
        r->setup = 1;
        r->setup_errno = r->hdr.value;
        break;
      case LGISO_NOCG: r->nocg = 1; break;
      case LGISO_READY: break;
      default: r->bad = 1; return -1;
      }
    } else {
      r->bad = 1; /* bytes after the payload */
      return -1;
    }
    if (!nonblock) return 1;
  }
}

static const int rss_edges_mib[LG_ISOLATE_RSS_BUCKETS - 1] = {1, 4, 16, 64, 256, 1024, 4096};
static _Atomic uint64_t st_requests[LG_ISOLATE_NCODES];
static _Atomic uint64_t st_bucket[LG_ISOLATE_RSS_BUCKETS];
static _Atomic uint64_t st_sum;

_Static_assert(LG_ISOLATE_NCODES <= LG_ISO_CODES && LG_ISOLATE_RSS_BUCKETS == LG_ISO_BUCKETS,
               "the region's isolated-call counters (core/region.h) hold these");

/* libleakguard.so's counter in the region, when this process is recorded (looked up
 * once; the sentinel 1: not there). */
static lg_region_isolate_note_fn region_note(void) {
  static _Atomic(void *) fn;
  void *f = atomic_load_explicit(&fn, memory_order_acquire);
  if (!f) {
    f = dlsym(RTLD_DEFAULT, LG_REGION_ISOLATE_NOTE);
    if (!f) f = (void *)1;
    atomic_store_explicit(&fn, f, memory_order_release);
  }
  return f == (void *)1 ? NULL : (lg_region_isolate_note_fn)f;
}

void lgiso_count(int code, size_t peak) {
  if (code < 0 || code >= LG_ISOLATE_NCODES) return;
  atomic_fetch_add_explicit(&st_requests[code], 1, memory_order_relaxed);
  int b = -1;
  if (code != LG_ISOLATE_ERROR) {
    b = 0;
    while (b < LG_ISOLATE_RSS_BUCKETS - 1 && peak > (size_t)rss_edges_mib[b] << 20) b++;
    atomic_fetch_add_explicit(&st_bucket[b], 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&st_sum, peak, memory_order_relaxed);
  }
  lg_region_isolate_note_fn note = region_note();
  if (note) note(code, b, (uint64_t)peak);
}

void lg_isolate_stats(lg_isolate_stats_t *out) {
  if (!out) return;
  for (int i = 0; i < LG_ISOLATE_NCODES; i++)
    out->requests[i] = atomic_load_explicit(&st_requests[i], memory_order_relaxed);
  for (int i = 0; i < LG_ISOLATE_RSS_BUCKETS; i++)
    out->peak_rss_bucket[i] = atomic_load_explicit(&st_bucket[i], memory_order_relaxed);
  out->peak_rss_sum = atomic_load_explicit(&st_sum, memory_order_relaxed);
}

const char *lg_isolate_code_name(int code) {
  static const char *const names[LG_ISOLATE_NCODES] = {"ok", "budget", "forbidden", "timeout", "crash", "error"};
  return code >= 0 && code < LG_ISOLATE_NCODES ? names[code] : NULL;
}

/* Children that answered and were still exiting: reaped later, so that a call does not
 * wait for the kernel to tear down a copy of a large caller. */
static pthread_mutex_t reap_mu = PTHREAD_MUTEX_INITIALIZER;
static struct reap {
  pid_t pid;
  int pidfd;
  char *cg_dir; /* its cgroup, removed once it is reaped (malloc'd), or NULL */
} * reap_list;
static size_t reap_n, reap_cap;
static pid_t reap_owner;

/* What is left of a reaped child: its pidfd, its cgroup. */
static void release_reaped(struct reap *e) {
  if (e->pidfd >= 0) close(e->pidfd);
  if (e->cg_dir) {
    lgiso_cg_t cg;
    lgiso_cg_init(&cg);
    snprintf(cg.dir, sizeof cg.dir, "%s", e->cg_dir);
    lgiso_cg_remove(&cg);
    free(e->cg_dir);
  }
}

void lgiso_reap_deferred(void) {
  pthread_mutex_lock(&reap_mu);
  for (size_t i = 0; reap_owner == getpid() && i < reap_n;) {
    pid_t w = waitpid(reap_list[i].pid, NULL, WNOHANG);
    if (w == 0 || (w < 0 && errno == EINTR)) {
      i++;
      continue;
    }
    release_reaped(&reap_list[i]);
    reap_list[i] = reap_list[--reap_n];
  }
  pthread_mutex_unlock(&reap_mu);
}

/* 1 when deferred (the list owns pidfd and the cgroup), 0 when reaped now (no memory
 * for the list; the caller still owns them). */
static int defer_reap(pid_t pid, int pidfd, const lgiso_cg_t *cg) {
  char *dir = NULL;
  if (cg->v && !(dir = strdup(cg->dir))) goto now;
  pthread_mutex_lock(&reap_mu);
  if (reap_n == reap_cap) {
    size_t cap = reap_cap ? reap_cap * 2 : 16;
    struct reap *l = realloc(reap_list, cap * sizeof *l);
    if (!l) {
      pthread_mutex_unlock(&reap_mu);
      free(dir);
      goto now;
    }
    reap_list = l;
    reap_cap = cap;
  }
  if (reap_owner != getpid()) { /* a fork of the caller: its parent's list is not its own */
    for (size_t i = 0; i < reap_n; i++) free(reap_list[i].cg_dir);
    reap_n = 0;
    reap_owner = getpid();
  }
  reap_list[reap_n++] = (struct reap){pid, pidfd, dir};
  pthread_mutex_unlock(&reap_mu);
  return 1;
now:
  while (waitpid(pid, NULL, 0) < 0 && errno == EINTR) {}
  return 0;
}

/* At exit: the children that answered and were still exiting are reaped and their
 * cgroups removed, then every other cgroup this process made (lgiso_cg_cleanup). A
 * forked copy of the caller that exits leaves its parent's alone. */
__attribute__((destructor)) static void reap_all(void) {
  pthread_mutex_lock(&reap_mu);
  for (size_t i = 0; reap_owner == getpid() && i < reap_n; i++) {
    while (waitpid(reap_list[i].pid, NULL, 0) < 0 && errno == EINTR) {}
    release_reaped(&reap_list[i]);
  }
  reap_n = 0;
  pthread_mutex_unlock(&reap_mu);
  lgiso_cg_cleanup();
}

int lgiso_await_ready(lgiso_job_t *job) {
  double until = now_s() + START_S;
  for (;;) {
    int ms = (int)((until - now_s()) * 1000);
    struct pollfd p = {.fd = job->sock, .events = POLLIN};
    if (ms <= 0 || poll(&p, 1, ms) <= 0) return -1;
    lgiso_msg_t m;
    if (recv(job->sock, &m, sizeof m, MSG_WAITALL) != (ssize_t)sizeof m || m.magic != LGISO_MAGIC) return -1;
    if (m.kind == LGISO_READY) return 0;
    if (m.kind != LGISO_NOCG) return -1;                    /* a failed setup: LGISO_SETUP */
    if (job->opts.budget_by == LG_BUDGET_CGROUP) return -1; /* required: no fallback */
    job->nocg = 1;
  }
}

void lgiso_reap(lgiso_job_t *job) {
  while (waitpid(job->pid, NULL, 0) < 0 && errno == EINTR) {}
  if (job->pidfd >= 0) close(job->pidfd);
  job->pidfd = -1;
  lgiso_cg_remove(&job->cg);
}

static void kill_child(lgiso_job_t *job) {
  if (job->pidfd >= 0 && syscall(SYS_pidfd_send_signal, job->pidfd, SIGKILL, NULL, 0) == 0) return;
  kill(job->pid, SIGKILL);
}

/* How a call's child was watched (lgiso_wait). */
typedef struct {
  enum { NONE, BY_BUDGET, BY_TIMEOUT, BY_NOSTART, BY_NOCG } killed;
  int eof;                  /* the socket said all it will */
  int exited;               /* the child has exited (not reaped yet) */
  int answered;             /* its whole answer is in: all that remains for it is _exit(0) */
  uint64_t peak_seen;       /* the largest RSS growth polled */
  int st, reaped;           /* its wait status, and whether it was reaped */
  int64_t cg_peak, cg_ooms; /* its cgroup's peak (-1: none) and OOM kills */
  int by_cg;                /* its cgroup enforced the budget (read before a deferred reap takes it) */
} watch_t;

/* Reads the child's answer until it is whole or the child has exited, and kills it at
 * its budget (RSS polled, when no cgroup enforces it), its timeout, or when it did not
 * start. */
static void watch_child(lgiso_job_t *job, rx_t *r, watch_t *w) {
  const lg_isolate_opts_t *o = &job->opts;
  double deadline = o->timeout_s > 0 ? job->t0 + o->timeout_s : 0;
  char statm[64];
  snprintf(statm, sizeof statm, "/proc/%d/statm", (int)job->pid);
  while (!w->exited) {
    int by_cg = job->cg.v && !r->nocg; /* the kernel enforces the budget */
    int ms = -1;
    if (o->max_rss && !by_cg) ms = POLL_MS;
    double dl = deadline;
    if (r->rss0 < 0 && !r->done && (!dl || job->t0 + START_S < dl)) dl = job->t0 + START_S;
    if (dl) {
      double left = dl - now_s();
      int lms = left <= 0 ? 0 : (int)(left * 1000) + 1;
      if (ms < 0 || lms < ms) ms = lms;
    }
    if (job->pidfd < 0 && (ms < 0 || ms > 10)) ms = 10;
    struct pollfd p[2] = {{.fd = w->eof ? -1 : job->sock, .events = POLLIN}, {.fd = job->pidfd, .events = POLLIN}};
    int n = poll(p, 2, ms);
    if (n < 0 && errno != EINTR) break;
    if (n > 0 && (p[0].revents & (POLLIN | POLLHUP | POLLERR))) {
      int rc = rx_read(job->sock, r, o->max_out, 1);
      if (rc <= 0) {
        w->eof = 1;
        if (rc < 0 && w->killed == NONE) kill_child(job); /* a protocol error or an oversized output */
      }
    }
    if (w->killed == NONE && r->nocg && o->budget_by == LG_BUDGET_CGROUP) { /* required: no fallback */
      w->killed = BY_NOCG;
      kill_child(job);
    }
    if (w->killed == NONE && r->done && r->have == r->hdr.len) {
      w->answered = 1;
      break;
    }
    if (job->pidfd >= 0) {
      if (n > 0 && (p[1].revents & POLLIN)) w->exited = 1;
    } else {
      siginfo_t si = {0};
      if (waitid(P_PID, (id_t)job->pid, &si, WEXITED | WNOHANG | WNOWAIT) == 0 && si.si_pid == job->pid) w->exited = 1;
    }
    if (w->exited || w->killed != NONE) continue;
    if (o->max_rss && !by_cg && r->rss0 >= 0 && !r->done) {
      int64_t rss = statm_rss(statm);
      if (rss > r->rss0) {
        uint64_t g = (uint64_t)(rss - r->rss0);
        if (g > w->peak_seen) w->peak_seen = g;
        if (g > o->max_rss) {
          w->killed = BY_BUDGET;
          kill_child(job);
          continue;
        }
      }
    }
    if (deadline && now_s() >= deadline) {
      w->killed = BY_TIMEOUT;
      kill_child(job);
    } else if (r->rss0 < 0 && !r->done && !r->denied && !r->setup && now_s() >= job->t0 + START_S) {
      w->killed = BY_NOSTART;
      kill_child(job);
    }
  }
}

/* The child after its answer or its end: kept for the pool, reaped (now or later), its
 * cgroup's figures read before the cgroup goes, what it wrote read to the end. */
static void end_child(lgiso_job_t *job, rx_t *r, watch_t *w) {
  const lg_isolate_opts_t *o = &job->opts;
  w->st = 0;
  w->reaped = 1;
  w->cg_peak = -1;
  w->cg_ooms = 0;
  int by_cg = w->by_cg = job->cg.v && !r->nocg;
  if (by_cg) {
    w->cg_peak = job->cg_peak_ok ? lgiso_cg_peak(&job->cg) : -1;
    if (w->cg_peak >= 0) w->cg_peak = w->cg_peak > job->cg_base ? w->cg_peak - job->cg_base : 0;
  }
  job->reusable = w->answered && r->again && !r->denied;
  if (job->reusable) { /* a pooled child that serves again: the pool keeps it */
    w->reaped = 0;
  } else if (w->answered) {
    pid_t pw;
    while ((pw = waitpid(job->pid, &w->st, WNOHANG)) < 0 && errno == EINTR) {}
    if (pw == 0 && defer_reap(job->pid, job->pidfd, &job->cg)) {
      job->pidfd = -1;
      job->cg.v = 0; /* the reap list removes it */
      job->cg.dir[0] = 0;
      w->reaped = 0;
    }
  } else {
    /* The child has exited: what it wrote is in the socket. */
    if (!w->eof)
      while (rx_read(job->sock, r, o->max_out, 1) > 0 && !(r->done && r->have == r->hdr.len)) {}
    while (waitpid(job->pid, &w->st, 0) < 0 && errno == EINTR) {}
    if (by_cg && w->killed == NONE && WIFSIGNALED(w->st) && WTERMSIG(w->st) == SIGKILL)
      w->cg_ooms = lgiso_cg_oom_kills(&job->cg);
  }
  if (!job->reusable) {
    if (job->pidfd >= 0) close(job->pidfd);
    job->pidfd = -1;
    close(job->sock);
    lgiso_cg_remove(&job->cg);
  }
}

/* The call's outcome from what its child did: res's code, message and figures. */
static void verdict(const lgiso_job_t *job, const rx_t *r, const watch_t *w, lg_isolate_result_t *res) {
  const lg_isolate_opts_t *o = &job->opts;
  int st = w->st, by_cg = w->by_cg;
  res->seconds = now_s() - job->t0;
  res->budget_by = !o->max_rss ? 0 : by_cg ? LG_BUDGET_CGROUP : LG_BUDGET_RSS;
  res->peak_rss = by_cg && w->cg_peak >= 0 ? (size_t)w->cg_peak : r->peak > w->peak_seen ? r->peak : w->peak_seen;
  int complete = r->done && r->have == r->hdr.len && (!w->reaped || (WIFEXITED(st) && WEXITSTATUS(st) == 0));
  if (w->cg_ooms > 0) {
    res->code = LG_ISOLATE_BUDGET;
    snprintf(res->message, sizeof res->message,
             "memory budget exceeded: the kernel stopped it at its cgroup's limit of %zu MiB", o->max_rss >> 20);
  } else if (w->killed == BY_BUDGET || (complete && !by_cg && o->max_rss && r->peak > o->max_rss)) {
    res->code = LG_ISOLATE_BUDGET;
    snprintf(res->message, sizeof res->message, "memory budget exceeded: grew by %zu MiB, budget %zu MiB",
             res->peak_rss >> 20, o->max_rss >> 20);
  } else if (w->killed == BY_NOSTART) {
    res->code = LG_ISOLATE_ERROR;
    snprintf(res->message, sizeof res->message,
             "the child did not start within %g s (stuck after fork: a lock another thread held?)", START_S);
  } else if (w->killed == BY_TIMEOUT) {
    res->code = LG_ISOLATE_TIMEOUT;
    snprintf(res->message, sizeof res->message, "timed out after %.3g s", o->timeout_s);
  } else if (r->denied) {
    res->code = LG_ISOLATE_FORBIDDEN;
    res->syscall_nr = (int)r->denied_nr;
    lgiso_syscall_name(res->syscall_nr, res->syscall, sizeof res->syscall);
    snprintf(res->message, sizeof res->message, "forbidden system call: %s", res->syscall);
  } else if (w->killed == BY_NOCG) {
    res->code = LG_ISOLATE_ERROR;
    snprintf(res->message, sizeof res->message, "the child could not enter its memory cgroup (budget_by cgroup)");
  } else if (r->setup) {
    fail(res, LG_ISOLATE_ERROR, "%sinstalling the seccomp filter: %s", "", (int)r->setup_errno);
  } else if (complete) {
    res->code = LG_ISOLATE_OK;
    res->status = (int)r->status;
    snprintf(res->message, sizeof res->message, "ok");
  } else if (r->bad == 2) {
    res->code = LG_ISOLATE_ERROR;
    snprintf(res->message, sizeof res->message, "output of %llu bytes is over max_out", (unsigned long long)r->hdr.len);
  } else if (WIFSIGNALED(st) && WTERMSIG(st) == SIGSYS) {
    /* A denied call made with SIGSYS blocked (posix_spawn and Python's subprocess
     * block every signal around clone/vfork): the kernel kills without running the
     * handler, so the call cannot be named. */
    res->code = LG_ISOLATE_FORBIDDEN;
    snprintf(res->syscall, sizeof res->syscall, "unknown");
    snprintf(res->message, sizeof res->message,
             "forbidden system call (not named: made with SIGSYS blocked, as by posix_spawn)");
  } else if (WIFSIGNALED(st)) {
    res->code = LG_ISOLATE_CRASH;
    res->signal = WTERMSIG(st);
    const char *abbrev = sigabbrev_np(res->signal);
    snprintf(res->message, sizeof res->message, "crashed: killed by SIG%s (%s)", abbrev ? abbrev : "?",
             sigdescr_np(res->signal));
  } else {
    res->code = LG_ISOLATE_CRASH;
    res->exit_code = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
    snprintf(res->message, sizeof res->message, "the child exited with code %d before answering", res->exit_code);
  }
}

int lgiso_wait(lgiso_job_t *job, void **out, size_t *outlen, lg_isolate_result_t *res) {
  rx_t r = {.rss0 = -1, .nocg = job->nocg};
  watch_t w = {.killed = NONE};
  if (!job->pooled) lgiso_reap_deferred();
  watch_child(job, &r, &w);
  end_child(job, &r, &w);
  verdict(job, &r, &w, res);
  if (res->code == LG_ISOLATE_OK && r.have) {
    *out = r.buf;
    *outlen = r.have;
  } else {
    free(r.buf);
  }
  lgiso_count(res->code, res->peak_rss);
  return res->code;
}

int lg_isolate_call(lg_isolate_fn fn, const void *in, size_t inlen, void **out, size_t *outlen,
                    const lg_isolate_opts_t *opts, lg_isolate_result_t *res) {
  lg_isolate_result_t local;
  if (!res) res = &local;
  if (out) *out = NULL;
  if (outlen) *outlen = 0;
  if (!out || !outlen) {
    memset(res, 0, sizeof *res);
    res->syscall_nr = -1;
    res->code = LG_ISOLATE_ERROR;
    snprintf(res->message, sizeof res->message, "invalid argument: out or outlen is NULL");
    lgiso_count(res->code, 0);
    return res->code;
  }
  lgiso_job_t job;
  if (lgiso_spawn(&job, fn, in, inlen, 0, opts, res) != LG_ISOLATE_OK) {
    lgiso_count(res->code, 0);
    return res->code;
  }
  return lgiso_wait(&job, out, outlen, res);
}
