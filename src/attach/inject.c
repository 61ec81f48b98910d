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
 *    through a dlopen: ours, nested there, crashed it; safepoint.c), they run on and
 *    we wait again.
 *    An idle target reaches neither within LG_INJECT_WAIT_MS: a thread waiting in one
 *    of in_safe_syscall's calls (its stack not read to the end at 2.) is taken
 *    instead, else one waiting in futex whose call stack has no allocator or loader
 *    frame (safepoint.c); its call is restarted after.
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

#include "attach/internal.h"

/* How long the threads run with the breakpoints set before a thread waiting in a
 * system call is taken instead (an idle target). */
#define LG_INJECT_WAIT_MS 2000
/* How long a call made in the target (dlopen, dlsym, the agent's start) may take. A call
 * given up is not undone: the thread goes on and returns to the zero word we pushed, and
 * the target dies. So the bound is a last resort for a thread that never returns, not a
 * guess at how long loading takes: dlopen and dlsym wait for the loader's lock, and
 * beside threads that dlopen in a loop (attach_loaders) on a loaded machine they waited
 * 0.9 s here and more than 5 s (the bound that was) in the flake hunt's full suites. */
/* How long the breakpoint rounds go on before the attach gives up (a target whose every
 * malloc and free is the loader's: attach_loaders). Beside two CPU hogs with the test
 * suite at -j2, 20 rounds of 5 ms (the bound that was) ran out before the one thread
 * that could be taken, a main thread between naps, was ever stopped in its nap. */
#define LG_INJECT_ROUNDS_MS 20000
#ifndef LG_INJECT_CALL_MS /* a build may set it lower to see the message of a call given up */
#define LG_INJECT_CALL_MS 60000
#endif

/* A call of ours that did not return: every thread stopped, the caller's innermost
 * frames into out (every thread's with LG_INJECT_DEBUG: who holds the lock it waits
 * for). The call is not undone (fail: detach). */
static void stuck_where(lgj_inj_t *s, const lgj_waitcheck_t *w, pid_t caller, char *out, size_t n) {
  snprintf(out, n, "a place not known (its stack cannot be read)");
  if (!w || lgj_stop_all(s, lgj_now_ms() + 3000) != 0) return;
  char buf[1200];
  if (lgj_stack_describe(w, caller, 8, buf, sizeof buf) == 0 && buf[0]) snprintf(out, n, "%s", buf);
  if (!getenv("LG_INJECT_DEBUG")) return;
  for (int i = 0; i < s->n; i++) {
    if (s->t[i].gone || s->t[i].tid == caller || lgj_stack_describe(w, s->t[i].tid, 16, buf, sizeof buf) != 0) continue;
    fprintf(stderr, "thread %d: %s\n", (int)s->t[i].tid, buf);
  }
}

/* What the injector calls in the target: libc's and ld.so's addresses there. */
typedef struct {
  uintptr_t libc_base;
  char libc_path[4096];
  uint64_t fn[5];         /* malloc, free, dlopen, dlsym, dlerror: offsets in libc */
  uintptr_t r_state_addr; /* ld.so's _r_debug.r_state */
} lgj_target_t;
enum { FN_MALLOC, FN_FREE, FN_DLOPEN, FN_DLSYM, FN_DLERROR };

/* Finds libc and ld.so in pid's mappings and the symbols the attach needs. 0, or
 * -ENOEXEC with why. */
static int find_target(pid_t pid, lgj_target_t *T, char *why, size_t n) {
  static const char *const libc_sfx[] = {"libc.so.6", NULL};
  static const char *const ld_sfx[] = {"ld-linux-x86-64.so.2", NULL};
  uintptr_t ld_base;
  char ld_path[4096], file[4200];
  if (lgj_find_map(pid, libc_sfx, &T->libc_base, T->libc_path, sizeof T->libc_path) != 0 ||
      lgj_find_map(pid, ld_sfx, &ld_base, ld_path, sizeof ld_path) != 0) {
    snprintf(why, n, "cannot find libc.so.6 and ld.so in process %d's mappings", (int)pid);
    return -ENOEXEC;
  }
  static const char *const libc_names[] = {"malloc", "free", "dlopen", "dlsym", "dlerror"};
  static const char *const ld_names[] = {"_r_debug"};
  uint64_t rv[1];
  snprintf(file, sizeof file, "/proc/%d/root%s", (int)pid, T->libc_path);
  if (lgj_elf_syms(file, libc_names, T->fn, 5) != 0 || !T->fn[0] || !T->fn[1] || !T->fn[2] || !T->fn[3] || !T->fn[4]) {
    snprintf(why, n, "cannot read malloc, free, dlopen and dlsym from %s (glibc 2.34 or later is needed)",
             T->libc_path);
    return -ENOEXEC;
  }
  snprintf(file, sizeof file, "/proc/%d/root%s", (int)pid, ld_path);
  if (lgj_elf_syms(file, ld_names, rv, 1) != 0 || !rv[0]) {
    snprintf(why, n, "cannot find _r_debug in %s", ld_path);
    return -ENOEXEC;
  }
  T->r_state_addr = ld_base + rv[0] + 24; /* struct r_debug: version, map, brk, state */
  return 0;
}

/* The thread that will load the agent, every thread stopped (steps 2 and 3 of the
 * comment at the top): > 0, or 0 with *rc and why. *how says how it was chosen (for
 * the message of a dlopen that does not return), *t_stop when the threads last
 * stopped. */
static pid_t choose_caller(lgj_inj_t *s, const lgj_waitcheck_t *wc, const lgj_target_t *T, lgj_result_t *res, char *how,
                           size_t hown, double *t_stop, int *rc, char *why, size_t n) {
  pid_t pid = s->pid;
  /* 0. a thread already waiting in one of in_safe_syscall's calls whose whole stack
   *    passes the check: taken at once, no breakpoint written. ld.so's allocations for
   *    the agent (link maps, scopes, search paths: kilobytes that stay) then go to that
   *    thread's malloc arena, not to the arena of a thread in full swing: there they
   *    moved the churn program's heap onto glibc's trim threshold, and that thread went
   *    on trimming and regrowing it after the detach (BENCHMARKS.md, "Attach"). */
  pid_t caller = wc ? lgj_safe_waiter(s, wc) : 0;
  snprintf(how, hown, "waiting in a system call, its stack checked");
  if (caller) res->idle = 1;
  /* rounds until LG_INJECT_ROUNDS_MS: counted in time, not rounds, for a thread that is
   * not yet back in its wait when it is stopped (runnable, waiting for a CPU on a loaded
   * machine) must get CPU time between the rounds to be found waiting */
  double rounds_end = lgj_now_ms() + LG_INJECT_ROUNDS_MS;
  for (int tries = 1; !caller; tries++) {
    res->tries = tries;
    if ((*rc = lgj_set_bps(s, 1)) != 0) {
      snprintf(why, n, "cannot write process %d's memory: %s", (int)pid, strerror(-*rc));
      return 0;
    }
    lgj_resume_all(s, 0);
    int w = lgj_pump(s, lgj_any_hit, lgj_now_ms() + LG_INJECT_WAIT_MS);
    *t_stop = lgj_now_ms();
    lgj_set_bps(s, 0);
    if (w == -ESRCH) {
      snprintf(why, n, "process %d exited during attach", (int)pid);
      *rc = w;
      return 0;
    }
    if (lgj_stop_all(s, lgj_now_ms() + 3000) != 0) {
      snprintf(why, n, "process %d did not stop within 3 s", (int)pid);
      *rc = -ETIMEDOUT;
      return 0;
    }
    int32_t state = -1;
    int got = (int)pread(s->memfd, &state, sizeof state, (off_t)T->r_state_addr);
    int loader_idle = got == (int)sizeof state && state == 0;
    if (getenv("LG_INJECT_DEBUG")) fprintf(stderr, "try %d: r_state %d (read %d), wait %d\n", tries, state, got, w);
    /* 1. a thread stopped at a breakpoint, no dlopen or dlclose half done, and none of
     *    its callers in the loader or in libc's allocator */
    for (int i = 0; loader_idle && i < s->n && !caller; i++) {
      if (s->t[i].gone || !s->t[i].hit) continue;
      char hwhy[160] = "";
      int ok = wc ? lgj_hit_safe(wc, s->t[i].tid, hwhy, sizeof hwhy) : 1;
      if (getenv("LG_INJECT_DEBUG")) fprintf(stderr, "hit %d: %d %s\n", (int)s->t[i].tid, ok, hwhy);
      if (ok == 1) {
        caller = s->t[i].tid;
        snprintf(how, hown, "at a malloc or free, %s", hwhy[0] ? hwhy : "its stack checked");
      }
    }
    /* 2. else a thread waiting in a system call that can be interrupted safely (its
     *    stack holds no loader frame: a dlopen of ours there waits for a busy loader's
     *    lock like any other caller); after a hit too, as in a program whose only
     *    allocations are the loader's */
    if (!caller && (caller = lgj_idle_caller(s, wc)) != 0) {
      res->idle = 1;
      snprintf(how, hown, "waiting in a system call%s", wc ? "" : ", its stack not checked");
    }
    if (caller) break;
    if (w == -ETIMEDOUT && !lgj_any_hit(s)) {
      snprintf(why, n,
               "process %d made no malloc or free call within %d s, and none of its threads waits in a "
               "system call that can be interrupted safely (docs/attach.md)",
               (int)pid, LG_INJECT_WAIT_MS / 1000);
      *rc = -ETIMEDOUT;
      return 0;
    }
    if (lgj_now_ms() > rounds_end) break;
    /* 3. the loader busy, or every hit an allocation of the loader's: another round,
     *    after the threads ran a little longer each time (5 ms more a round, at most
     *    100 ms) */
    if ((*rc = lgj_next_round(s, tries < 20 ? 5 * tries : 100)) != 0) return 0;
  }
  if (!caller) {
    snprintf(why, n,
             "process %d reached no safe point in %d s (%d rounds): every malloc or free stopped was the loader's, "
             "and no thread waits in a system call that can be interrupted safely",
             (int)pid, LG_INJECT_ROUNDS_MS / 1000, res->tries);
    *rc = -EAGAIN;
  }
  return caller;
}

/* Step 4: in the stopped thread caller (registers r0), dlopen(agent), dlsym(h,
 * "lg_agent_start"), lg_agent_start(cfg); res->stats_addr on success. 0; < 0 with why
 * and *lost set when a call did not return (the thread cannot be given its registers
 * back: the attach fails without restoring them). */
static int load_agent(lgj_inj_t *s, const lgj_waitcheck_t *wc, const lgj_target_t *T, pid_t caller,
                      struct user_regs_struct *r0, const char *agent, const char *cfg, const char *how,
                      lgj_result_t *res, int *lost, char *why, size_t n) {
  pid_t pid = s->pid;
  *lost = 0;
  /* scratch: the agent's path and the config string, below the red zone */
  uintptr_t sp = (r0->rsp - 256 - 8192) & ~(uintptr_t)15;
  uintptr_t a_path = sp, a_sym = sp + 4096, a_cfg = sp + 4160;
  static const char sym[] = "lg_agent_start";
  size_t cl = strlen(cfg) + 1, al = strlen(agent) + 1;
  if (al > 4096 || cl > 8192 - 4160 - 64 || pwrite(s->memfd, agent, al, (off_t)a_path) != (ssize_t)al ||
      pwrite(s->memfd, sym, sizeof sym, (off_t)a_sym) != (ssize_t)sizeof sym ||
      pwrite(s->memfd, cfg, cl, (off_t)a_cfg) != (ssize_t)cl) {
    snprintf(why, n, "cannot write the agent's arguments into process %d", (int)pid);
    return -EIO;
  }
  uintptr_t libc = T->libc_base;
  uint64_t h = 0, fn = 0, st = 0;
  char where[1200];
  double t_dl = lgj_now_ms();
  int rc = lgj_remote_call(s, caller, r0, sp, libc + T->fn[FN_DLOPEN], a_path, 2 /* RTLD_NOW */, &h, LG_INJECT_CALL_MS);
  if (getenv("LG_INJECT_DEBUG")) fprintf(stderr, "dlopen took %.0f ms rc %d\n", lgj_now_ms() - t_dl, rc);
  if (rc != 0) {
    stuck_where(s, wc, caller, where, sizeof where);
    snprintf(why, n,
             "dlopen in process %d did not return within %d s (%s) in thread %d, chosen %s (system call %lld); "
             "it waits in %s",
             (int)pid, LG_INJECT_CALL_MS / 1000, strerror(-rc), (int)caller, how, (long long)r0->orig_rax, where);
    *lost = 1;
    return rc;
  }
  if (!h) {
    char msg[512] = "";
    uint64_t e = 0;
    if (lgj_remote_call(s, caller, r0, sp, libc + T->fn[FN_DLERROR], 0, 0, &e, LG_INJECT_CALL_MS) == 0)
      lgj_read_str(s, e, msg, sizeof msg);
    snprintf(why, n, "the target could not load the agent %s: %s", agent, *msg ? msg : "dlopen failed");
    return -ENOENT;
  }
  if ((rc = lgj_remote_call(s, caller, r0, sp, libc + T->fn[FN_DLSYM], h, a_sym, &fn, LG_INJECT_CALL_MS)) != 0) {
    stuck_where(s, wc, caller, where, sizeof where);
    snprintf(why, n, "dlsym in process %d did not return within %d s (%s); it waits in %s", (int)pid,
             LG_INJECT_CALL_MS / 1000, strerror(-rc), where);
    *lost = 1;
    return rc;
  }
  if (!fn) {
    snprintf(why, n, "lg_agent_start not found in the agent loaded by process %d", (int)pid);
    return -ENOENT;
  }
  if ((rc = lgj_remote_call(s, caller, r0, sp, fn, a_cfg, 0, &st, LG_INJECT_CALL_MS)) != 0) {
    stuck_where(s, wc, caller, where, sizeof where);
    snprintf(why, n, "the agent did not start in process %d (%s); it waits in %s", (int)pid, strerror(-rc), where);
    *lost = 1;
    return rc;
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
    return -EIO;
  }
  res->stats_addr = (uintptr_t)st;
  return 0;
}

int lgj_inject(pid_t pid, const char *agent, const char *cfg, lgj_result_t *res, char *why, size_t n) {
  memset(res, 0, sizeof *res);
  int rc = lgj_check(pid, why, n);
  if (rc) return rc;
  lgj_target_t T;
  if ((rc = find_target(pid, &T, why, n)) != 0) return rc;

  lgj_inj_t s = {.pid = pid, .memfd = -1, .why = why, .whylen = n};
  lgj_waitcheck_t wc;
  int wc_ok = 0;
  s.bp[0] = T.libc_base + T.fn[FN_MALLOC];
  s.bp[1] = T.libc_base + T.fn[FN_FREE];
  char mp[64], file[4200];
  snprintf(mp, sizeof mp, "/proc/%d/mem", (int)pid);
  if ((rc = lgj_seize_all(&s)) != 0) {
    rc = lgj_refused(pid, -rc, why, n);
    lgj_detach_all(&s);
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
  double t_stop = lgj_now_ms();
  if ((rc = lgj_stop_all(&s, lgj_now_ms() + 3000)) != 0) {
    snprintf(why, n, "process %d did not stop within 3 s", (int)pid);
    goto fail;
  }
  /* libc's symbols and the mappings, read once: the stack of a waiting thread or of one
   * stopped at a breakpoint is judged by them (without them, only a thread in one of
   * in_safe_syscall's calls is taken, after the breakpoints) */
  snprintf(file, sizeof file, "/proc/%d/root%s", (int)pid, T.libc_path);
  int wrc = lgj_waitcheck_init(&wc, pid, file, T.libc_base);
  wc_ok = wrc == 0;
  if (getenv("LG_INJECT_DEBUG")) fprintf(stderr, "stack check: %s\n", wrc ? strerror(-wrc) : "ready");
  char how[200];
  pid_t caller = choose_caller(&s, wc_ok ? &wc : NULL, &T, res, how, sizeof how, &t_stop, &rc, why, n);
  if (!caller) goto fail;
  struct user_regs_struct r0;
  if (ptrace(PTRACE_GETREGS, caller, NULL, &r0) != 0) {
    snprintf(why, n, "cannot read the registers of thread %d: %s", (int)caller, strerror(errno));
    rc = -EIO;
    goto fail;
  }
  if (getenv("LG_INJECT_DEBUG")) fprintf(stderr, "loading thread %d\n", (int)caller);
  /* the other threads run on while the caller loads the agent */
  lgj_resume_all(&s, caller);
  res->all_stopped_ms = lgj_now_ms() - t_stop;
  int lost;
  rc = load_agent(&s, wc_ok ? &wc : NULL, &T, caller, &r0, agent, cfg, how, res, &lost, why, n);
  if (lost) goto fail; /* registers cannot be put back into a call that did not end */
  if (wc_ok) lgj_waitcheck_free(&wc);
  ptrace(PTRACE_SETREGS, caller, NULL, &r0);
  res->caller_ms = lgj_now_ms() - t_stop;
  s.caller = 0;
  lgj_detach_all(&s);
  close(s.memfd);
  free(s.t);
  return res->stats_addr ? 0 : rc;
fail:
  if (wc_ok) lgj_waitcheck_free(&wc);
  if (s.bp_set) lgj_set_bps(&s, 0);
  s.caller = 0;
  lgj_detach_all(&s);
  if (s.memfd >= 0) close(s.memfd);
  free(s.t);
  return rc;
}

int lgj_read_stats(pid_t pid, uintptr_t addr, lg_agent_stats_t *out) {
  char p[64];
  snprintf(p, sizeof p, "/proc/%d/mem", (int)pid);
  int fd = open(p, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -errno;
  ssize_t k = pread(fd, out, sizeof *out, (off_t)addr);
  int e = errno;
  close(fd);
  if (k != (ssize_t)sizeof *out) return k < 0 ? -e : -EIO;
  if (out->magic != LG_AGENT_MAGIC) return -EINVAL;
  return out->version == LG_AGENT_ABI_VERSION ? 0 : -EPROTO;
}
