/* SPDX-License-Identifier: MIT */
/*
 * inject.c - loads libleakguard-agent.so into a running process with ptrace (x86-64,
 * glibc >= 2.34: dlopen and dlsym are in libc.so.6). docs/attach.md.
 *
 * 1. PTRACE_SEIZE every thread (new threads and fork children are traced too:
 *    PTRACE_O_TRACECLONE/FORK/VFORK) and stop them all (PTRACE_INTERRUPT).
 * 2. A thread found waiting in a blocking system call that allocator and loader code
 *    never make (read, poll, epoll_wait, nanosleep...: in_safe_syscall) whose whole
 *    call stack (libunwind-ptrace) has no loader, allocator or libc-lock frame is
 *    taken at once (4.): ld.so's allocations for the agent go to an idle thread's
 *    malloc arena. Else:
 *    int3 at the entry of glibc's malloc and free; every thread runs on.
 * 3. The first thread that reaches one stops there, holding no allocator lock. The
 *    breakpoints go, the other threads are stopped; unless ld.so's _r_debug.r_state is
 *    RT_CONSISTENT (no dlopen/dlclose half done) and the stopped thread's callers are
 *    neither in ld.so nor in libc's loader or allocator (the loader allocates half way
 *    through a dlopen: ours, nested there, crashed it; inject_wait.c), they run on and
 *    we wait again.
 *    An idle target reaches neither within LG_INJECT_WAIT_MS: a thread waiting in one
 *    of in_safe_syscall's calls (its stack not read to the end at 2.) is taken
 *    instead, else one waiting in futex whose call stack has no allocator or loader
 *    frame (inject_wait.c); its call is restarted after.
 * 4. The other threads run on (a lock one of them holds is released as it would be);
 *    in the stopped thread we call dlopen(agent, RTLD_NOW), dlsym(h,
 *    "lg_agent_start") and lg_agent_start(cfg) (System V ABI, 16-byte aligned stack
 *    below the red zone, return address 0: the return is a SIGSEGV at 0, caught).
 * 5. Its registers are put back, every thread is detached. A fork child that inherited
 *    the int3 gets the original bytes back before it is let go.
 */
#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <sys/mman.h>
#include <sys/ptrace.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/user.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cli/inject.h"

/* How long the threads run with the breakpoints set before a thread waiting in a
 * system call is taken instead (an idle target). */
#define LG_INJECT_WAIT_MS 2000
/* How long a call made in the target (dlopen, dlsym, the agent's start) may take. A call
 * given up is not undone: the thread goes on and returns to the zero word we pushed, and
 * the target dies. So the bound is a last resort for a thread that never returns, not a
 * guess at how long loading takes: dlopen and dlsym wait for the loader's lock, and
 * beside threads that dlopen in a loop (attach_loaders) on a loaded machine they waited
 * 0.9 s here and more than 5 s (the bound that was) in the flake hunt's full suites. */
#ifndef LG_INJECT_CALL_MS /* a build may set it lower to see the message of a call given up */
#define LG_INJECT_CALL_MS 60000
#endif

#define OPTS (PTRACE_O_TRACECLONE | PTRACE_O_TRACEFORK | PTRACE_O_TRACEVFORK | PTRACE_O_EXITKILL * 0)

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/* ------------------------------------------------------------------ target facts */

static int status_field(pid_t pid, const char *key, long *out) {
  char p[64], line[256];
  snprintf(p, sizeof p, "/proc/%d/status", (int)pid);
  FILE *f = fopen(p, "re");
  if (!f) return -errno;
  int rc = -ENOENT;
  size_t kl = strlen(key);
  while (fgets(line, sizeof line, f))
    if (!strncmp(line, key, kl) && line[kl] == ':') {
      *out = strtol(line + kl + 1, NULL, 10);
      rc = 0;
      break;
    }
  fclose(f);
  return rc;
}

/* The load address and path of the first mapping whose file name ends in suffix. */
typedef struct {
  const char *const *suffixes;
  uintptr_t *base;
  char *path;
  size_t n;
} mapctx_t;
static int on_map(void *ctx, uintptr_t lo, uintptr_t hi, uint64_t off, const char *name) {
  mapctx_t *c = ctx;
  size_t l = strlen(name);
  (void)hi;
  for (const char *const *s = c->suffixes; *s; s++) {
    size_t sl = strlen(*s);
    if (off == 0 && l >= sl && !strcmp(name + l - sl, *s) && (l == sl || name[l - sl - 1] == '/')) {
      *c->base = lo;
      snprintf(c->path, c->n, "%s", name);
      return 1; /* found: stop */
    }
  }
  return 0;
}
static int find_map(pid_t pid, const char *const *suffixes, uintptr_t *base, char *path, size_t n) {
  *base = 0;
  mapctx_t c = {suffixes, base, path, n};
  int rc = lgj_maps_each(pid, on_map, &c);
  return rc ? rc : *base ? 0 : -ENOENT;
}

/* st_value of the defined dynamic symbols names[i] in the ELF file path (0: absent). */
typedef struct {
  const char *const *names;
  uint64_t *vals;
  int nn;
} symvals_t;
static void on_symval(void *ctx, const char *nm, uint64_t value, uint64_t size) {
  symvals_t *c = ctx;
  (void)size;
  for (int k = 0; k < c->nn; k++)
    if (!c->vals[k] && !strcmp(nm, c->names[k])) c->vals[k] = value;
}
static int elf_syms(const char *path, const char *const *names, uint64_t *vals, int nn) {
  for (int k = 0; k < nn; k++) vals[k] = 0;
  symvals_t c = {names, vals, nn};
  return lgj_elf_dynsyms(path, on_symval, &c);
}

static int ptrace_refused(pid_t pid, int e, char *why, size_t n);

int lg_inject_check(pid_t pid, char *why, size_t n) {
  char p[64];
  snprintf(p, sizeof p, "/proc/%d", (int)pid);
  if (pid <= 0 || access(p, F_OK) != 0) {
    snprintf(why, n, "no process %d", (int)pid);
    return -ESRCH;
  }
  if (pid == getpid()) {
    snprintf(why, n, "cannot attach to leakguard itself");
    return -EINVAL;
  }
  long tracer = 0;
  if (status_field(pid, "TracerPid", &tracer) == 0 && tracer != 0) {
    snprintf(why, n, "process %d is already traced by process %ld (a debugger or another leakguard attach)", (int)pid,
             tracer);
    return -EBUSY;
  }
  static const char *const libc[] = {"libc.so.6", NULL};
  uintptr_t base;
  char path[4096];
  int r = find_map(pid, libc, &base, path, sizeof path);
  /* another user's process: its maps are as closed to us as ptrace is */
  if (r == -EACCES || r == -EPERM) return ptrace_refused(pid, EPERM, why, n);
  if (r != 0) {
    snprintf(why, n,
             "process %d has no libc.so.6 mapped (statically linked, or not glibc): attach needs a dynamically "
             "linked glibc program",
             (int)pid);
    return -ENOEXEC;
  }
  /* the agent itself may be there: it stays loaded after a detach, and attaches again */
  static const char *const preload[] = {"libleakguard.so", NULL};
  if (find_map(pid, preload, &base, path, sizeof path) == 0) {
    snprintf(why, n, "process %d is already recorded by leakguard run (%s is loaded)", (int)pid, path);
    return -EALREADY;
  }
  return 0;
}

int lg_inject_refused(pid_t pid, int e, char *why, size_t n) { return ptrace_refused(pid, e, why, n); }

static int ptrace_refused(pid_t pid, int e, char *why, size_t n) {
  FILE *f = fopen("/proc/sys/kernel/yama/ptrace_scope", "re");
  int scope = 0;
  if (f) {
    if (fscanf(f, "%d", &scope) != 1) scope = 0;
    fclose(f);
  }
  if (e == EPERM && scope >= 1)
    snprintf(why, n,
             "ptrace of process %d refused: kernel.yama.ptrace_scope is %d (%s); run as root or set it to 0 "
             "(sysctl kernel.yama.ptrace_scope=0)",
             (int)pid, scope,
             scope == 1   ? "only a parent may trace"
             : scope == 2 ? "only CAP_SYS_PTRACE may trace"
                          : "ptrace disabled");
  else if (e == EPERM)
    snprintf(why, n,
             "ptrace of process %d refused: it belongs to another user or is not dumpable (needs CAP_SYS_PTRACE)",
             (int)pid);
  else snprintf(why, n, "ptrace of process %d failed: %s", (int)pid, strerror(e));
  return -e;
}

/* ------------------------------------------------------------------ thread set */

typedef struct thr {
  pid_t tid;
  int stopped, sig, hit, gone;
} thr_t;

typedef struct inj {
  pid_t pid;
  thr_t *t;
  int n, cap;
  int memfd;
  uintptr_t bp[2];
  uint64_t orig[2];
  int bp_set;
  int mode;     /* 0: stopping everything (stops stay), 1: running (hits stay), 2: calling */
  pid_t caller; /* the thread running our calls (0: none) */
  int call_done;
  pid_t kids[64]; /* fork children auto-attached and not yet let go (detach_all waits for them) */
  int nkids;
  char *why;
  size_t whylen;
} inj_t;

static thr_t *find_thr(inj_t *s, pid_t tid) {
  for (int i = 0; i < s->n; i++)
    if (s->t[i].tid == tid && !s->t[i].gone) return &s->t[i];
  return NULL;
}
static thr_t *add_thr(inj_t *s, pid_t tid) {
  if (s->n == s->cap) {
    int cap = s->cap ? s->cap * 2 : 64;
    thr_t *nt = realloc(s->t, (size_t)cap * sizeof *nt);
    if (!nt) return NULL;
    s->t = nt;
    s->cap = cap;
  }
  s->t[s->n] = (thr_t){.tid = tid};
  return &s->t[s->n++];
}

static int poke_word(pid_t tid, uintptr_t a, uint64_t v) {
  return (int)ptrace(PTRACE_POKEDATA, tid, (void *)a, (void *)v);
}

static int tgid_of(pid_t tid) {
  long tg = -1;
  char p[64];
  snprintf(p, sizeof p, "/proc/%d", (int)tid);
  (void)p;
  /* /proc/TID/status works for any thread id */
  if (status_field(tid, "Tgid", &tg) != 0) return -1;
  return (int)tg;
}

/* One wait status of tid. */
static void on_event(inj_t *s, pid_t tid, int st) {
  thr_t *t = find_thr(s, tid);
  if (WIFEXITED(st) || WIFSIGNALED(st)) {
    if (t) t->gone = 1;
    return;
  }
  if (!WIFSTOPPED(st)) return;
  if (!t) {
    if (tgid_of(tid) == s->pid) t = add_thr(s, tid);
    if (!t) { /* a fork child: give back the original bytes (its copy may hold the
               * breakpoints even when the parent's are gone), let it go */
      for (int i = 0; i < 2; i++) poke_word(tid, s->bp[i], s->orig[i]);
      ptrace(PTRACE_DETACH, tid, NULL, NULL);
      for (int i = 0; i < s->nkids; i++)
        if (s->kids[i] == tid) s->kids[i--] = s->kids[--s->nkids];
      return;
    }
  }
  t->stopped = 1;
  int sig = WSTOPSIG(st), ev = st >> 16;
  if (ev == PTRACE_EVENT_FORK || ev == PTRACE_EVENT_VFORK) {
    /* the child (traced, not yet running) gets the original bytes now: it is
     * detached when its first stop arrives, or freed with us if that comes late */
    unsigned long child = 0;
    if (ptrace(PTRACE_GETEVENTMSG, tid, NULL, &child) == 0 && child > 0) {
      if (s->nkids < (int)(sizeof s->kids / sizeof *s->kids)) s->kids[s->nkids++] = (pid_t)child;
      char mp[64];
      snprintf(mp, sizeof mp, "/proc/%lu/mem", child);
      int fd = open(mp, O_RDWR | O_CLOEXEC);
      if (fd >= 0) {
        for (int i = 0; i < 2; i++) (void)!pwrite(fd, &s->orig[i], sizeof s->orig[i], (off_t)s->bp[i]);
        close(fd);
      }
    }
  }
  if (ev) return; /* clone/fork/vfork event or PTRACE_EVENT_STOP: nothing to deliver */
  struct user_regs_struct r;
  if (sig == SIGTRAP && ptrace(PTRACE_GETREGS, tid, NULL, &r) == 0 &&
      (r.rip - 1 == s->bp[0] || r.rip - 1 == s->bp[1])) {
    r.rip -= 1;
    ptrace(PTRACE_SETREGS, tid, NULL, &r);
    t->hit = 1;
    return;
  }
  if (sig == SIGSEGV && tid == s->caller && ptrace(PTRACE_GETREGS, tid, NULL, &r) == 0 && r.rip == 0) {
    s->call_done = 1;
    return;
  }
  t->sig = sig; /* a signal for the program: delivered when it resumes */
}

/* Waits for events until cond(s) or the deadline. 0, or -ETIMEDOUT / -ESRCH. */
static int pump(inj_t *s, int (*cond)(inj_t *), double deadline) {
  for (;;) {
    if (cond(s)) return 0;
    int st;
    pid_t tid = waitpid(-1, &st, __WALL | WNOHANG);
    if (tid > 0) {
      on_event(s, tid, st);
      thr_t *lead = find_thr(s, s->pid);
      if (!lead && (WIFEXITED(st) || WIFSIGNALED(st)) && tid == s->pid) return -ESRCH;
      /* a stop we do not wait for goes on at once (a clone event, a signal, a new
       * thread), except while everything is being stopped */
      thr_t *t = find_thr(s, tid);
      if (t && t->stopped && s->mode != 0 && !t->hit && !(tid == s->caller && s->call_done)) {
        ptrace(PTRACE_CONT, tid, NULL, (void *)(long)t->sig);
        t->stopped = 0;
        t->sig = 0;
      }
      continue;
    }
    if (tid < 0 && errno == ECHILD) return -ESRCH;
    if (now_ms() > deadline) return -ETIMEDOUT;
    struct timespec ts = {0, 100000};
    nanosleep(&ts, NULL);
  }
}

static int all_stopped(inj_t *s) {
  for (int i = 0; i < s->n; i++)
    if (!s->t[i].gone && !s->t[i].stopped) return 0;
  return 1;
}
static int any_hit(inj_t *s) {
  for (int i = 0; i < s->n; i++)
    if (!s->t[i].gone && s->t[i].hit) return 1;
  return 0;
}
static int call_finished(inj_t *s) { return s->call_done; }

/* Seizes every thread; again until /proc/PID/task shows no new one. */
static int seize_all(inj_t *s) {
  char p[64];
  snprintf(p, sizeof p, "/proc/%d/task", (int)s->pid);
  /* the leader first: its refusal is the permission answer */
  if (ptrace(PTRACE_SEIZE, s->pid, NULL, (void *)(long)OPTS) != 0) return -errno;
  if (!add_thr(s, s->pid)) return -ENOMEM;
  ptrace(PTRACE_INTERRUPT, s->pid, NULL, NULL);
  for (int round = 0; round < 100; round++) {
    DIR *d = opendir(p);
    if (!d) return -errno;
    int added = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
      pid_t tid = (pid_t)atoi(e->d_name);
      if (tid <= 0 || find_thr(s, tid)) continue;
      if (ptrace(PTRACE_SEIZE, tid, NULL, (void *)(long)OPTS) != 0) {
        int er = errno;
        /* exited meanwhile; EPERM for a thread when the leader was seized: it is
         * exiting (PF_EXITING) */
        if (er == ESRCH || (er == EPERM && tid != s->pid && find_thr(s, s->pid))) continue;
        closedir(d);
        return -er;
      }
      if (!add_thr(s, tid)) {
        closedir(d);
        return -ENOMEM;
      }
      ptrace(PTRACE_INTERRUPT, tid, NULL, NULL);
      added++;
    }
    closedir(d);
    if (!added) return 0;
  }
  return 0;
}

/* A thread stopped (PTRACE_INTERRUPT) inside a blocking system call that no allocator
 * or loader code makes: it holds none of their locks, so it can run dlopen as well as
 * a thread stopped at malloc's entry. futex is not one (malloc waits on its arena lock
 * in futex). Its registers still say the call was interrupted (-ERESTART*, or -EINTR
 * for the calls that return it even to a stop): once they are put back, the kernel
 * restarts it on the way out of the stop, as after any signal without a handler. */
static int in_safe_syscall(const struct user_regs_struct *r) {
  long nr = (long)r->orig_rax, rv = (long)r->rax;
  if (rv != -4 /* EINTR */ && rv != -512 && rv != -513 && rv != -514 && rv != -516) return 0;
  switch (nr) {
  case SYS_read:
  case SYS_readv:
  case SYS_pread64:
  case SYS_recvfrom:
  case SYS_recvmsg:
  case SYS_accept:
  case SYS_accept4:
  case SYS_poll:
  case SYS_ppoll:
  case SYS_select:
  case SYS_pselect6:
  case SYS_epoll_wait:
  case SYS_epoll_pwait:
  case SYS_nanosleep:
  case SYS_clock_nanosleep:
  case SYS_pause:
  case SYS_rt_sigsuspend:
  case SYS_rt_sigtimedwait:
  case SYS_wait4:
  case SYS_waitid: return 1;
  default: return 0;
  }
}

/* With every thread stopped: one waiting in such a call, or else one waiting in futex
 * (or in restart_syscall: a timed wait interrupted before) whose call stack shows no
 * allocator, loader or libc-lock frame (inject_wait.c), or 0. */
static pid_t idle_caller(inj_t *s, const lgj_waitcheck_t *w) {
  for (int i = 0; i < s->n; i++) {
    struct user_regs_struct r;
    if (!s->t[i].gone && s->t[i].stopped && ptrace(PTRACE_GETREGS, s->t[i].tid, NULL, &r) == 0 && in_safe_syscall(&r))
      return s->t[i].tid;
  }
  for (int i = 0; w && i < s->n; i++) {
    struct user_regs_struct r;
    long rv;
    if (s->t[i].gone || !s->t[i].stopped || ptrace(PTRACE_GETREGS, s->t[i].tid, NULL, &r) != 0) continue;
    /* a timed wait already interrupted once (by our first stop) goes on in
     * restart_syscall: the stack says which call it is */
    if ((long)r.orig_rax != SYS_futex && (long)r.orig_rax != SYS_restart_syscall) continue;
    rv = (long)r.rax;
    if (rv != -512 /* ERESTARTSYS */ && rv != -516 /* ERESTART_RESTARTBLOCK */) continue;
    char why[160] = "";
    int ok = lgj_waiter_safe(w, s->t[i].tid, why, sizeof why);
    if (getenv("LG_INJECT_DEBUG"))
      fprintf(stderr, "waiter %d (system call %ld): %d %s\n", (int)s->t[i].tid, (long)r.orig_rax, ok, why);
    if (ok == 1) return s->t[i].tid;
  }
  return 0;
}

/* With every thread stopped: one waiting in one of in_safe_syscall's calls whose stack,
 * read to its end, has no loader, allocator or libc-lock frame, or 0. */
static pid_t safe_waiter(inj_t *s, const lgj_waitcheck_t *w) {
  for (int i = 0; i < s->n; i++) {
    struct user_regs_struct r;
    if (s->t[i].gone || !s->t[i].stopped || ptrace(PTRACE_GETREGS, s->t[i].tid, NULL, &r) != 0 || !in_safe_syscall(&r))
      continue;
    char why[160] = "";
    int ok = lgj_waiter_safe(w, s->t[i].tid, why, sizeof why);
    if (getenv("LG_INJECT_DEBUG"))
      fprintf(stderr, "waiter %d (system call %ld) at the first stop: %d %s\n", (int)s->t[i].tid, (long)r.orig_rax, ok,
              why);
    if (ok == 1) return s->t[i].tid;
  }
  return 0;
}

static int stop_all(inj_t *s, double deadline) {
  s->mode = 0;
  for (int i = 0; i < s->n; i++)
    if (!s->t[i].gone && !s->t[i].stopped) ptrace(PTRACE_INTERRUPT, s->t[i].tid, NULL, NULL);
  return pump(s, all_stopped, deadline);
}

static void resume_all(inj_t *s, pid_t except) {
  s->mode = except ? 2 : 1;
  for (int i = 0; i < s->n; i++) {
    thr_t *t = &s->t[i];
    if (t->gone || !t->stopped || t->tid == except) continue;
    ptrace(PTRACE_CONT, t->tid, NULL, (void *)(long)t->sig);
    t->stopped = 0;
    t->sig = 0;
    t->hit = 0;
  }
}

/* No thread fit to load the agent this round: every thread runs a little without
 * breakpoints (the one stopped would hit the same entry again at once), then all stop
 * again for the next round. 0, or -ETIMEDOUT with why set. */
static int next_round(inj_t *s) {
  resume_all(s, 0);
  struct timespec ts = {0, 5000000};
  nanosleep(&ts, NULL);
  if (stop_all(s, now_ms() + 3000) != 0) {
    snprintf(s->why, s->whylen, "process %d did not stop within 3 s", (int)s->pid);
    return -ETIMEDOUT;
  }
  for (int i = 0; i < s->n; i++) s->t[i].hit = 0;
  return 0;
}

static int set_bps(inj_t *s, int on) {
  for (int i = 0; i < 2; i++) {
    uint64_t v = on ? (s->orig[i] & ~0xffULL) | 0xcc : s->orig[i];
    if (pwrite(s->memfd, &v, sizeof v, (off_t)s->bp[i]) != (ssize_t)sizeof v) return -errno;
  }
  s->bp_set = on;
  return 0;
}

/* Calls fn(a0, a1) in thread tid (stopped, registers saved in r0): 0 and *ret. */
static int remote_call(inj_t *s, pid_t tid, const struct user_regs_struct *r0, uintptr_t sp, uintptr_t fn, uint64_t a0,
                       uint64_t a1, uint64_t *ret, double timeout_ms) {
  struct user_regs_struct r = *r0;
  uint64_t zero = 0;
  sp = (sp & ~(uintptr_t)15) - 8;
  if (pwrite(s->memfd, &zero, sizeof zero, (off_t)sp) != (ssize_t)sizeof zero) return -errno;
  r.rsp = sp;
  r.rip = fn;
  r.rdi = a0;
  r.rsi = a1;
  r.rax = 0;
  r.orig_rax = (unsigned long long)-1;
  if (ptrace(PTRACE_SETREGS, tid, NULL, &r) != 0) return -errno;
  s->caller = tid;
  s->call_done = 0;
  thr_t *t = find_thr(s, tid);
  if (!t) return -ESRCH;
  t->hit = 0;
  if (ptrace(PTRACE_CONT, tid, NULL, NULL) != 0) return -errno;
  t->stopped = 0;
  int rc = pump(s, call_finished, now_ms() + timeout_ms);
  if (rc) return rc;
  t->stopped = 1;
  t->sig = 0;
  if (ptrace(PTRACE_GETREGS, tid, NULL, &r) != 0) return -errno;
  *ret = r.rax;
  return 0;
}

static void read_str(inj_t *s, uintptr_t a, char *out, size_t n) {
  ssize_t k = a ? pread(s->memfd, out, n - 1, (off_t)a) : -1;
  out[k > 0 ? (size_t)k : 0] = 0;
  out[strnlen(out, n - 1)] = 0;
}

/* A thread of the target still traced by us that detach_all did not know: one that the
 * agent's start created (its first stop not yet reported when every known thread was
 * stopped). Left traced, it stops at its next ptrace event or signal and waits there
 * for a tracer that never looks, until the CLI exits: under load, 1 attach in 10 left
 * the agent's watcher so (seen stuck in clone3), and with it the Python module's setup
 * (attach_python_holders). */
static int traced_by_us(pid_t tid) {
  long tp = 0;
  return status_field(tid, "TracerPid", &tp) == 0 && tp == (long)getpid();
}

static void detach_stray(inj_t *s) {
  char p[64];
  snprintf(p, sizeof p, "/proc/%d/task", (int)s->pid);
  for (int round = 0; round < 20; round++) {
    DIR *d = opendir(p);
    if (!d) return;
    int found = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
      pid_t tid = (pid_t)atoi(e->d_name);
      if (tid <= 0 || !traced_by_us(tid)) continue;
      found++;
      if (ptrace(PTRACE_DETACH, tid, NULL, NULL) == 0) continue; /* it was in a stop */
      ptrace(PTRACE_INTERRUPT, tid, NULL, NULL);
      double end = now_ms() + 500;
      int st;
      while (waitpid(tid, &st, __WALL | WNOHANG) == 0 && now_ms() < end) {
        struct timespec ts = {0, 200000};
        nanosleep(&ts, NULL);
      }
      ptrace(PTRACE_DETACH, tid, NULL, NULL);
    }
    closedir(d);
    if (!found) return;
  }
}

/* Fork children whose first stop had not come when the threads were detached: each is
 * traced by us and held in that stop until we let it go. Left so, the thread that forked
 * it waits for it for the whole recording, and the collector's wait(2) would see its
 * stops. Its stop comes soon (the kernel queues it at the fork): wait for it, give the
 * original bytes back, detach. */
static void detach_kids(inj_t *s) {
  for (int i = 0; i < s->nkids; i++) {
    pid_t k = s->kids[i];
    double end = now_ms() + 1000;
    int st;
    pid_t w;
    while ((w = waitpid(k, &st, __WALL | WNOHANG)) == 0 && now_ms() < end) {
      struct timespec ts = {0, 200000};
      nanosleep(&ts, NULL);
    }
    if (w != k || !WIFSTOPPED(st)) continue; /* gone, or not ours any more */
    for (int j = 0; j < 2; j++) poke_word(k, s->bp[j], s->orig[j]);
    ptrace(PTRACE_DETACH, k, NULL, NULL);
  }
  s->nkids = 0;
  /* A fork under way while its thread was detached: the child is ours, but its parent's
   * event never came. Any stopped tracee left is such a child (we trace nothing else);
   * waitid(WSTOPPED) sees only stops, never consuming another child's exit. */
  for (int round = 0; round < 64; round++) {
    siginfo_t si;
    memset(&si, 0, sizeof si);
    if (waitid(P_ALL, 0, &si, WSTOPPED | WNOHANG | WNOWAIT | __WALL) != 0 || si.si_pid <= 0) break;
    pid_t k = si.si_pid;
    int st;
    if (waitpid(k, &st, __WALL | WNOHANG) != k) break;
    if (tgid_of(k) != s->pid) /* not a thread of the target that detach_stray missed */
      for (int j = 0; j < 2; j++) poke_word(k, s->bp[j], s->orig[j]);
    ptrace(PTRACE_DETACH, k, NULL, NULL);
  }
}

static void detach_all(inj_t *s) {
  (void)stop_all(s, now_ms() + 2000);
  for (int i = 0; i < s->n; i++) {
    thr_t *t = &s->t[i];
    if (t->gone) continue;
    ptrace(PTRACE_SETOPTIONS, t->tid, NULL, NULL); /* no new thread is traced from here on */
    ptrace(PTRACE_DETACH, t->tid, NULL, (void *)(long)t->sig);
  }
  detach_stray(s);
  detach_kids(s);
}

/* A call of ours that did not return: every thread stopped, the caller's innermost
 * frames into out (every thread's with LG_INJECT_DEBUG: who holds the lock it waits
 * for). The call is not undone (fail: detach). */
static void stuck_where(inj_t *s, const lgj_waitcheck_t *w, pid_t caller, char *out, size_t n) {
  snprintf(out, n, "a place not known (its stack cannot be read)");
  if (!w || stop_all(s, now_ms() + 3000) != 0) return;
  char buf[1200];
  if (lgj_stack_describe(w, caller, 8, buf, sizeof buf) == 0 && buf[0]) snprintf(out, n, "%s", buf);
  if (!getenv("LG_INJECT_DEBUG")) return;
  for (int i = 0; i < s->n; i++) {
    if (s->t[i].gone || s->t[i].tid == caller || lgj_stack_describe(w, s->t[i].tid, 16, buf, sizeof buf) != 0) continue;
    fprintf(stderr, "thread %d: %s\n", (int)s->t[i].tid, buf);
  }
}

int lg_inject(pid_t pid, const char *agent, const char *cfg, lg_inject_result_t *res, char *why, size_t n) {
  memset(res, 0, sizeof *res);
  int rc = lg_inject_check(pid, why, n);
  if (rc) return rc;
  static const char *const libc_sfx[] = {"libc.so.6", NULL};
  static const char *const ld_sfx[] = {"ld-linux-x86-64.so.2", NULL};
  uintptr_t libc_base, ld_base;
  char libc_path[4096], ld_path[4096], file[4200];
  if (find_map(pid, libc_sfx, &libc_base, libc_path, sizeof libc_path) != 0 ||
      find_map(pid, ld_sfx, &ld_base, ld_path, sizeof ld_path) != 0) {
    snprintf(why, n, "cannot find libc.so.6 and ld.so in process %d's mappings", (int)pid);
    return -ENOEXEC;
  }
  static const char *const libc_names[] = {"malloc", "free", "dlopen", "dlsym", "dlerror"};
  uint64_t lv[5], rv[1];
  static const char *const ld_names[] = {"_r_debug"};
  snprintf(file, sizeof file, "/proc/%d/root%s", (int)pid, libc_path);
  if (elf_syms(file, libc_names, lv, 5) != 0 || !lv[0] || !lv[1] || !lv[2] || !lv[3] || !lv[4]) {
    snprintf(why, n, "cannot read malloc, free, dlopen and dlsym from %s (glibc 2.34 or later is needed)", libc_path);
    return -ENOEXEC;
  }
  snprintf(file, sizeof file, "/proc/%d/root%s", (int)pid, ld_path);
  if (elf_syms(file, ld_names, rv, 1) != 0 || !rv[0]) {
    snprintf(why, n, "cannot find _r_debug in %s", ld_path);
    return -ENOEXEC;
  }
  uintptr_t r_state_addr = ld_base + rv[0] + 24; /* struct r_debug: version, map, brk, state */

  inj_t s = {.pid = pid, .memfd = -1, .why = why, .whylen = n};
  lgj_waitcheck_t wc;
  int wc_ok = 0;
  s.bp[0] = libc_base + lv[0];
  s.bp[1] = libc_base + lv[1];
  char mp[64];
  snprintf(mp, sizeof mp, "/proc/%d/mem", (int)pid);
  if ((rc = seize_all(&s)) != 0) {
    rc = ptrace_refused(pid, -rc, why, n);
    detach_all(&s);
    free(s.t);
    return rc;
  }
  s.memfd = open(mp, O_RDWR | O_CLOEXEC);
  if (s.memfd < 0 || pread(s.memfd, &s.orig[0], 8, (off_t)s.bp[0]) != 8 ||
      pread(s.memfd, &s.orig[1], 8, (off_t)s.bp[1]) != 8) {
    snprintf(why, n, "cannot read process %d's memory: %s", (int)pid, strerror(errno));
    rc = -EIO;
    goto fail;
  }
  double t_stop = now_ms();
  if ((rc = stop_all(&s, now_ms() + 3000)) != 0) {
    snprintf(why, n, "process %d did not stop within 3 s", (int)pid);
    goto fail;
  }
  /* libc's symbols and the mappings, read once: the stack of a waiting thread or of one
   * stopped at a breakpoint is judged by them (without them, only a thread in one of
   * in_safe_syscall's calls is taken, after the breakpoints) */
  snprintf(file, sizeof file, "/proc/%d/root%s", (int)pid, libc_path);
  int wrc = lgj_waitcheck_init(&wc, pid, file, libc_base);
  wc_ok = wrc == 0;
  if (getenv("LG_INJECT_DEBUG")) fprintf(stderr, "stack check: %s\n", wrc ? strerror(-wrc) : "ready");
  /* 0. a thread already waiting in one of in_safe_syscall's calls whose whole stack
   *    passes the check: taken at once, no breakpoint written. ld.so's allocations for
   *    the agent (link maps, scopes, search paths: kilobytes that stay) then go to that
   *    thread's malloc arena, not to the arena of a thread in full swing: there they
   *    moved the churn program's heap onto glibc's trim threshold, and that thread went
   *    on trimming and regrowing it after the detach (BENCHMARKS.md, "Attach"). */
  pid_t caller = wc_ok ? safe_waiter(&s, &wc) : 0;
  /* how the loading thread was chosen: said when its dlopen does not return */
  char how[200] = "waiting in a system call, its stack checked";
  if (caller) res->idle = 1;
  for (int tries = 1; tries <= 20 && !caller; tries++) {
    res->tries = tries;
    if ((rc = set_bps(&s, 1)) != 0) {
      snprintf(why, n, "cannot write process %d's memory: %s", (int)pid, strerror(-rc));
      goto fail;
    }
    resume_all(&s, 0);
    int w = pump(&s, any_hit, now_ms() + LG_INJECT_WAIT_MS);
    t_stop = now_ms();
    set_bps(&s, 0);
    if (w == -ESRCH) {
      snprintf(why, n, "process %d exited during attach", (int)pid);
      rc = w;
      goto fail;
    }
    if (stop_all(&s, now_ms() + 3000) != 0) {
      snprintf(why, n, "process %d did not stop within 3 s", (int)pid);
      rc = -ETIMEDOUT;
      goto fail;
    }
    int32_t state = -1;
    int got = (int)pread(s.memfd, &state, sizeof state, (off_t)r_state_addr);
    int loader_idle = got == (int)sizeof state && state == 0;
    if (getenv("LG_INJECT_DEBUG")) fprintf(stderr, "try %d: r_state %d (read %d), wait %d\n", tries, state, got, w);
    /* 1. a thread stopped at a breakpoint, no dlopen or dlclose half done, and none of
     *    its callers in the loader or in libc's allocator */
    for (int i = 0; loader_idle && i < s.n && !caller; i++) {
      if (s.t[i].gone || !s.t[i].hit) continue;
      char hwhy[160] = "";
      int ok = wc_ok ? lgj_hit_safe(&wc, s.t[i].tid, hwhy, sizeof hwhy) : 1;
      if (getenv("LG_INJECT_DEBUG")) fprintf(stderr, "hit %d: %d %s\n", (int)s.t[i].tid, ok, hwhy);
      if (ok == 1) {
        caller = s.t[i].tid;
        snprintf(how, sizeof how, "at a malloc or free, %s", hwhy[0] ? hwhy : "its stack checked");
      }
    }
    /* 2. else a thread waiting in a system call that can be interrupted safely (its
     *    stack holds no loader frame: a dlopen of ours there waits for a busy loader's
     *    lock like any other caller); after a hit too, as in a program whose only
     *    allocations are the loader's */
    if (!caller && (caller = idle_caller(&s, wc_ok ? &wc : NULL)) != 0) {
      res->idle = 1;
      snprintf(how, sizeof how, "waiting in a system call%s", wc_ok ? "" : ", its stack not checked");
    }
    if (caller) break;
    if (w == -ETIMEDOUT && !any_hit(&s)) {
      snprintf(why, n,
               "process %d made no malloc or free call within %d s, and none of its threads waits in a "
               "system call that can be interrupted safely (docs/attach.md)",
               (int)pid, LG_INJECT_WAIT_MS / 1000);
      rc = -ETIMEDOUT;
      goto fail;
    }
    /* 3. the loader busy, or every hit an allocation of the loader's: another round */
    if ((rc = next_round(&s)) != 0) goto fail;
  }
  if (!caller) {
    snprintf(why, n,
             "process %d reached no safe point in 20 rounds: every malloc or free stopped was the loader's, "
             "and no thread waits in a system call that can be interrupted safely",
             (int)pid);
    rc = -EAGAIN;
    goto fail;
  }
  struct user_regs_struct r0;
  if (ptrace(PTRACE_GETREGS, caller, NULL, &r0) != 0) {
    snprintf(why, n, "cannot read the registers of thread %d: %s", (int)caller, strerror(errno));
    rc = -EIO;
    goto fail;
  }
  if (getenv("LG_INJECT_DEBUG")) fprintf(stderr, "loading thread %d\n", (int)caller);
  /* the other threads run on while the caller loads the agent */
  resume_all(&s, caller);
  res->all_stopped_ms = now_ms() - t_stop;
  /* scratch: the agent's path and the config string, below the red zone */
  uintptr_t sp = (r0.rsp - 256 - 8192) & ~(uintptr_t)15;
  uintptr_t a_path = sp, a_sym = sp + 4096, a_cfg = sp + 4160;
  static const char sym[] = "lg_agent_start";
  size_t cl = strlen(cfg) + 1, al = strlen(agent) + 1;
  if (al > 4096 || cl > 8192 - 4160 - 64 || pwrite(s.memfd, agent, al, (off_t)a_path) != (ssize_t)al ||
      pwrite(s.memfd, sym, sizeof sym, (off_t)a_sym) != (ssize_t)sizeof sym ||
      pwrite(s.memfd, cfg, cl, (off_t)a_cfg) != (ssize_t)cl) {
    snprintf(why, n, "cannot write the agent's arguments into process %d", (int)pid);
    rc = -EIO;
    goto restore;
  }
  uint64_t h = 0, fn = 0, st = 0;
  double t_dl = now_ms();
  rc = remote_call(&s, caller, &r0, sp, libc_base + lv[2], a_path, 2 /* RTLD_NOW */, &h, LG_INJECT_CALL_MS);
  if (getenv("LG_INJECT_DEBUG")) fprintf(stderr, "dlopen took %.0f ms rc %d\n", now_ms() - t_dl, rc);
  if (rc != 0) {
    char where[1200];
    stuck_where(&s, wc_ok ? &wc : NULL, caller, where, sizeof where);
    snprintf(why, n,
             "dlopen in process %d did not return within %d s (%s) in thread %d, chosen %s (system call %lld); "
             "it waits in %s",
             (int)pid, LG_INJECT_CALL_MS / 1000, strerror(-rc), (int)caller, how, (long long)r0.orig_rax, where);
    goto fail; /* registers cannot be put back into a call that did not end */
  }
  if (!h) {
    char msg[512] = "";
    uint64_t e = 0;
    if (remote_call(&s, caller, &r0, sp, libc_base + lv[4], 0, 0, &e, LG_INJECT_CALL_MS) == 0)
      read_str(&s, e, msg, sizeof msg);
    snprintf(why, n, "the target could not load the agent %s: %s", agent, *msg ? msg : "dlopen failed");
    rc = -ENOENT;
    goto restore;
  }
  if ((rc = remote_call(&s, caller, &r0, sp, libc_base + lv[3], h, a_sym, &fn, LG_INJECT_CALL_MS)) != 0 || !fn) {
    if (rc) {
      char where[1200];
      stuck_where(&s, wc_ok ? &wc : NULL, caller, where, sizeof where);
      snprintf(why, n, "dlsym in process %d did not return within %d s (%s); it waits in %s", (int)pid,
               LG_INJECT_CALL_MS / 1000, strerror(-rc), where);
      goto fail;
    }
    snprintf(why, n, "lg_agent_start not found in the agent loaded by process %d", (int)pid);
    rc = -ENOENT;
    goto restore;
  }
  if ((rc = remote_call(&s, caller, &r0, sp, fn, a_cfg, 0, &st, LG_INJECT_CALL_MS)) != 0) {
    char where[1200];
    stuck_where(&s, wc_ok ? &wc : NULL, caller, where, sizeof where);
    snprintf(why, n, "the agent did not start in process %d (%s); it waits in %s", (int)pid, strerror(-rc), where);
    goto fail;
  }
  if (st < 4096) {
    static const char *const what[] = {"",
                                       "bad configuration",
                                       "the program's allocator is not glibc's",
                                       "cannot create the shared region",
                                       "the collector's socket is not reachable",
                                       "cannot start the agent's thread",
                                       "another leakguard attach is recording this process"};
    snprintf(why, n, "the agent did not start in process %d: %s", (int)pid, st < 7 ? what[st] : "error");
    rc = -EIO;
    goto restore;
  }
  res->stats_addr = (uintptr_t)st;
restore:
  if (wc_ok) lgj_waitcheck_free(&wc);
  ptrace(PTRACE_SETREGS, caller, NULL, &r0);
  res->caller_ms = now_ms() - t_stop;
  s.caller = 0;
  detach_all(&s);
  close(s.memfd);
  free(s.t);
  return res->stats_addr ? 0 : rc;
fail:
  if (wc_ok) lgj_waitcheck_free(&wc);
  if (s.bp_set) set_bps(&s, 0);
  s.caller = 0;
  detach_all(&s);
  if (s.memfd >= 0) close(s.memfd);
  free(s.t);
  return rc;
}

int lg_agent_read_stats(pid_t pid, uintptr_t addr, lg_agent_stats_t *out) {
  char p[64];
  snprintf(p, sizeof p, "/proc/%d/mem", (int)pid);
  int fd = open(p, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -errno;
  ssize_t k = pread(fd, out, sizeof *out, (off_t)addr);
  int e = errno;
  close(fd);
  if (k != (ssize_t)sizeof *out) return k < 0 ? -e : -EIO;
  return out->magic == LG_AGENT_MAGIC ? 0 : -EINVAL;
}
