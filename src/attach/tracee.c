/* SPDX-License-Identifier: MIT */
/*
 * tracee.c - the target's threads under ptrace for the injector (inject.c): seize them
 * all (new threads and fork children are traced too), stop and resume them, breakpoints
 * at malloc and free, a function called in one stopped thread, and the detach that
 * leaves no thread or fork child stopped behind.
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <sys/ptrace.h>
#include <sys/user.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "attach/internal.h"

#define OPTS (PTRACE_O_TRACECLONE | PTRACE_O_TRACEFORK | PTRACE_O_TRACEVFORK | PTRACE_O_EXITKILL * 0)

static lgj_thr_t *find_thr(lgj_inj_t *s, pid_t tid) {
  for (int i = 0; i < s->n; i++)
    if (s->t[i].tid == tid && !s->t[i].gone) return &s->t[i];
  return NULL;
}
static lgj_thr_t *add_thr(lgj_inj_t *s, pid_t tid) {
  if (s->n == s->cap) {
    int cap = s->cap ? s->cap * 2 : 64;
    lgj_thr_t *nt = realloc(s->t, (size_t)cap * sizeof *nt);
    if (!nt) return NULL;
    s->t = nt;
    s->cap = cap;
  }
  s->t[s->n] = (lgj_thr_t){.tid = tid};
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
  if (lgj_status_field(tid, "Tgid", &tg) != 0) return -1;
  return (int)tg;
}

/* One wait status of tid. */
static void on_event(lgj_inj_t *s, pid_t tid, int st) {
  lgj_thr_t *t = find_thr(s, tid);
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
int lgj_pump(lgj_inj_t *s, int (*cond)(lgj_inj_t *), double deadline) {
  for (;;) {
    if (cond(s)) return 0;
    int st;
    pid_t tid = waitpid(-1, &st, __WALL | WNOHANG);
    if (tid > 0) {
      on_event(s, tid, st);
      lgj_thr_t *lead = find_thr(s, s->pid);
      if (!lead && (WIFEXITED(st) || WIFSIGNALED(st)) && tid == s->pid) return -ESRCH;
      /* a stop we do not wait for goes on at once (a clone event, a signal, a new
       * thread), except while everything is being stopped */
      lgj_thr_t *t = find_thr(s, tid);
      if (t && t->stopped && s->mode != 0 && !t->hit && !(tid == s->caller && s->call_done)) {
        ptrace(PTRACE_CONT, tid, NULL, (void *)(long)t->sig);
        t->stopped = 0;
        t->sig = 0;
      }
      continue;
    }
    if (tid < 0 && errno == ECHILD) return -ESRCH;
    if (lgj_now_ms() > deadline) return -ETIMEDOUT;
    struct timespec ts = {0, 100000};
    nanosleep(&ts, NULL);
  }
}

static int all_stopped(lgj_inj_t *s) {
  for (int i = 0; i < s->n; i++)
    if (!s->t[i].gone && !s->t[i].stopped) return 0;
  return 1;
}
int lgj_any_hit(lgj_inj_t *s) {
  for (int i = 0; i < s->n; i++)
    if (!s->t[i].gone && s->t[i].hit) return 1;
  return 0;
}
static int call_finished(lgj_inj_t *s) { return s->call_done; }

/* Seizes every thread; again until /proc/PID/task shows no new one. */
int lgj_seize_all(lgj_inj_t *s) {
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
int lgj_stop_all(lgj_inj_t *s, double deadline) {
  s->mode = 0;
  for (int i = 0; i < s->n; i++)
    if (!s->t[i].gone && !s->t[i].stopped) ptrace(PTRACE_INTERRUPT, s->t[i].tid, NULL, NULL);
  return lgj_pump(s, all_stopped, deadline);
}

void lgj_resume_all(lgj_inj_t *s, pid_t except) {
  s->mode = except ? 2 : 1;
  for (int i = 0; i < s->n; i++) {
    lgj_thr_t *t = &s->t[i];
    if (t->gone || !t->stopped || t->tid == except) continue;
    ptrace(PTRACE_CONT, t->tid, NULL, (void *)(long)t->sig);
    t->stopped = 0;
    t->sig = 0;
    t->hit = 0;
  }
}

/* No thread fit to load the agent this round: every thread runs run_ms without
 * breakpoints (the one stopped would hit the same entry again at once), then all stop
 * again for the next round. 0, or -ETIMEDOUT with why set. */
int lgj_next_round(lgj_inj_t *s, int run_ms) {
  lgj_resume_all(s, 0);
  struct timespec ts = {run_ms / 1000, (long)(run_ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
  if (lgj_stop_all(s, lgj_now_ms() + 3000) != 0) {
    snprintf(s->why, s->whylen, "process %d did not stop within 3 s", (int)s->pid);
    return -ETIMEDOUT;
  }
  for (int i = 0; i < s->n; i++) s->t[i].hit = 0;
  return 0;
}

int lgj_set_bps(lgj_inj_t *s, int on) {
  for (int i = 0; i < 2; i++) {
    uint64_t v = on ? (s->orig[i] & ~0xffULL) | 0xcc : s->orig[i];
    if (pwrite(s->memfd, &v, sizeof v, (off_t)s->bp[i]) != (ssize_t)sizeof v) return -errno;
  }
  s->bp_set = on;
  return 0;
}

/* Calls fn(a0, a1) in thread tid (stopped, registers saved in r0): 0 and *ret. */
int lgj_remote_call(lgj_inj_t *s, pid_t tid, const struct user_regs_struct *r0, uintptr_t sp, uintptr_t fn, uint64_t a0,
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
  lgj_thr_t *t = find_thr(s, tid);
  if (!t) return -ESRCH;
  t->hit = 0;
  if (ptrace(PTRACE_CONT, tid, NULL, NULL) != 0) return -errno;
  t->stopped = 0;
  int rc = lgj_pump(s, call_finished, lgj_now_ms() + timeout_ms);
  if (rc) return rc;
  t->stopped = 1;
  t->sig = 0;
  if (ptrace(PTRACE_GETREGS, tid, NULL, &r) != 0) return -errno;
  *ret = r.rax;
  return 0;
}

void lgj_read_str(lgj_inj_t *s, uintptr_t a, char *out, size_t n) {
  ssize_t k = a ? pread(s->memfd, out, n - 1, (off_t)a) : -1;
  out[k > 0 ? (size_t)k : 0] = 0;
  out[strnlen(out, n - 1)] = 0;
}

/* A thread of the target still traced by us that lgj_detach_all did not know: one that the
 * agent's start created (its first stop not yet reported when every known thread was
 * stopped). Left traced, it stops at its next ptrace event or signal and waits there
 * for a tracer that never looks, until the CLI exits: under load, 1 attach in 10 left
 * the agent's watcher so (seen stuck in clone3), and with it the Python module's setup
 * (attach_python_holders). */
static int traced_by_us(pid_t tid) {
  long tp = 0;
  return lgj_status_field(tid, "TracerPid", &tp) == 0 && tp == (long)getpid();
}

static void detach_stray(lgj_inj_t *s) {
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
      double end = lgj_now_ms() + 500;
      int st;
      while (waitpid(tid, &st, __WALL | WNOHANG) == 0 && lgj_now_ms() < end) {
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
static void detach_kids(lgj_inj_t *s) {
  for (int i = 0; i < s->nkids; i++) {
    pid_t k = s->kids[i];
    double end = lgj_now_ms() + 1000;
    int st;
    pid_t w;
    while ((w = waitpid(k, &st, __WALL | WNOHANG)) == 0 && lgj_now_ms() < end) {
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

void lgj_detach_all(lgj_inj_t *s) {
  (void)lgj_stop_all(s, lgj_now_ms() + 2000);
  for (int i = 0; i < s->n; i++) {
    lgj_thr_t *t = &s->t[i];
    if (t->gone) continue;
    ptrace(PTRACE_SETOPTIONS, t->tid, NULL, NULL); /* no new thread is traced from here on */
    ptrace(PTRACE_DETACH, t->tid, NULL, (void *)(long)t->sig);
  }
  detach_stray(s);
  detach_kids(s);
}
