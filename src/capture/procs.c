/* SPDX-License-Identifier: MIT */
/*
 * procs.c - libleakguard.so: the exec and wait families, so that the collector can
 * follow process lifetimes without relying on a descriptor the program may close.
 *
 * exec: before the real call the region's state becomes LG_PS_EXECED (and is put
 * back if the call returns, i.e. failed). When the connection to the collector then
 * reaches EOF, the collector knows the image was replaced, not that the program
 * closed our socket (close_range, closefrom, dup2 over it), after which it keeps
 * recording and watches the process through a pidfd. Only the process that owns the
 * region marks it: a vfork child shares our memory but has another pid.
 *
 * wait: a child reaped by the program itself (posix_spawn, vfork+exec, Python's
 * subprocess and multiprocessing) never reaches the collector's waitpid. Each reaped
 * child's pid and wait status go into the ring at the end of the region header
 * (lg_reaped_t), which the collector reads. Lock-free, no allocation: these hooks run
 * in SIGCHLD handlers too.
 *
 * The real functions are resolved at init (lgi_procs_init, outside any signal
 * handler); a hook called earlier resolves its own, which dlsym allows there.
 */
#include <dlfcn.h>
#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include "capture/recorder.h"
#include "core/platform.h"
#include "leakguard.h"

typedef int (*execve_fn)(const char *, char *const[], char *const[]);
typedef int (*execv_fn)(const char *, char *const[]);
typedef int (*fexecve_fn)(int, char *const[], char *const[]);
typedef int (*execveat_fn)(int, const char *, char *const[], char *const[], int);
typedef pid_t (*wait_fn)(int *);
typedef pid_t (*waitpid_fn)(pid_t, int *, int);
typedef pid_t (*wait3_fn)(int *, int, struct rusage *);
typedef pid_t (*wait4_fn)(pid_t, int *, int, struct rusage *);
typedef int (*waitid_fn)(idtype_t, id_t, siginfo_t *, int);

static struct {
  execve_fn execve, execvpe;
  execv_fn execv, execvp;
  fexecve_fn fexecve;
  execveat_fn execveat;
  wait_fn wait;
  waitpid_fn waitpid;
  wait3_fn wait3;
  wait4_fn wait4;
  waitid_fn waitid;
} real;

#define RESOLVE(name) (real.name ? real.name : (real.name = (__typeof__(real.name))dlsym(RTLD_NEXT, #name)))

void lgi_procs_init(void) {
  RESOLVE(execve);
  RESOLVE(execvpe);
  RESOLVE(execv);
  RESOLVE(execvp);
  RESOLVE(fexecve);
  RESOLVE(execveat);
  RESOLVE(wait);
  RESOLVE(waitpid);
  RESOLVE(wait3);
  RESOLVE(wait4);
  RESOLVE(waitid);
}

/* ------------------------------------------------------------------ exec */

/* Marks the region LG_PS_EXECED; returns the state to restore if exec fails (0:
 * nothing marked). */
static uint32_t exec_mark(void) {
  if (!lgi_g.live || lgi_g.hdr->pid != (int32_t)lg_sys_getpid()) return 0;
  return atomic_exchange(&lgi_g.hdr->state, LG_PS_EXECED);
}

static void exec_failed(uint32_t old) {
  if (old) atomic_store(&lgi_g.hdr->state, old);
}

/* The lazy start (docs/design.md "Lazy start"): LEAKGUARD_FIRST=1 marks the started
 * command's first image, the only one recorded from its start. An exec passes the new
 * image an environment with it turned to 0 (the program's own strings, in a copy of the
 * pointer array on this stack: no allocation, and a vfork child's exec leaves nothing
 * in its parent). Its Python layer (python/sitecustomize.py) reads the same mark. The
 * number of entries whose copy goes on the stack; a larger environment passes as it
 * is. */
#define LGI_ENV_ON_STACK 1024
static char first_off[] = LG_ENV_FIRST "=0";

/* The index of LEAKGUARD_FIRST=1 in envp and its entries (without the NULL) in *n; -1
 * when it has none (or too many entries to copy). */
static long first_at(char *const *envp, size_t *n) {
  static const char key[] = LG_ENV_FIRST "=1";
  long at = -1;
  size_t i = 0;
  for (; envp && envp[i]; i++)
    if (at < 0 && !strcmp(envp[i], key)) at = (long)i;
  *n = i;
  return i < LGI_ENV_ON_STACK ? at : -1;
}

#define EXEC_CALL(name, ...)                                                                                           \
  do {                                                                                                                 \
    if (!RESOLVE(name)) {                                                                                              \
      errno = ENOSYS;                                                                                                  \
      return -1;                                                                                                       \
    }                                                                                                                  \
    uint32_t old_ = exec_mark();                                                                                       \
    int rc_ = real.name(__VA_ARGS__);                                                                                  \
    int e_ = errno;                                                                                                    \
    exec_failed(old_);                                                                                                 \
    errno = e_;                                                                                                        \
    return rc_;                                                                                                        \
  } while (0)

/* envp with the mark turned off, as env_ (a VLA of the caller's): the exec's
 * environment. */
#define EXEC_ENV(envp)                                                                                                 \
  size_t n_;                                                                                                           \
  long at_ = first_at(envp, &n_);                                                                                      \
  char *env_[at_ >= 0 ? n_ + 1 : 1];                                                                                   \
  char *const *envx_ = envp;                                                                                           \
  if (at_ >= 0) {                                                                                                      \
    memcpy(env_, envp, (n_ + 1) * sizeof *env_);                                                                       \
    env_[at_] = first_off;                                                                                             \
    envx_ = env_;                                                                                                      \
  }

LG_API int execve(const char *path, char *const argv[], char *const envp[]) {
  EXEC_ENV(envp);
  EXEC_CALL(execve, path, argv, envx_);
}
LG_API int execvpe(const char *file, char *const argv[], char *const envp[]) {
  EXEC_ENV(envp);
  EXEC_CALL(execvpe, file, argv, envx_);
}
LG_API int fexecve(int fd, char *const argv[], char *const envp[]) {
  EXEC_ENV(envp);
  EXEC_CALL(fexecve, fd, argv, envx_);
}
LG_API int execveat(int dirfd, const char *path, char *const argv[], char *const envp[], int flags) {
  EXEC_ENV(envp);
  EXEC_CALL(execveat, dirfd, path, argv, envx_, flags);
}
/* execv and execvp pass environ: with the mark in it, as execve and execvpe. */
LG_API int execv(const char *path, char *const argv[]) {
  extern char **environ;
  EXEC_ENV(environ);
  if (at_ >= 0) EXEC_CALL(execve, path, argv, envx_);
  EXEC_CALL(execv, path, argv);
}
LG_API int execvp(const char *file, char *const argv[]) {
  extern char **environ;
  EXEC_ENV(environ);
  if (at_ >= 0) EXEC_CALL(execvpe, file, argv, envx_);
  EXEC_CALL(execvp, file, argv);
}

/* The execl family passes its arguments as varargs, which cannot be forwarded:
 * they are collected into an array on the stack (no allocation) for the execv form.
 * glibc declares arg0 nonnull, but execl(path, NULL) is valid: the value is laundered
 * so that the compiler keeps the test. */
static const char *opaque(const char *p) {
  __asm__("" : "+r"(p));
  return p;
}

/* Number of arguments, the terminating NULL not counted. */
static size_t count_args(const char *arg0, va_list ap) {
  size_t n = 0;
  for (const char *a = arg0; a; a = va_arg(ap, const char *)) n++;
  return n;
}

/* argv[0..n-1] from arg0 and ap, argv[n] = NULL; consumes the terminating NULL. */
static void collect_args(char **argv, size_t n, const char *arg0, va_list *ap) {
  if (n) argv[0] = (char *)arg0;
  for (size_t i = 1; i < n; i++) argv[i] = va_arg(*ap, char *);
  if (n) (void)va_arg(*ap, char *);
  argv[n] = NULL;
}

LG_API int execl(const char *path, const char *arg0, ...) {
  const char *a0 = opaque(arg0);
  va_list ap;
  va_start(ap, arg0);
  size_t n = count_args(a0, ap);
  va_end(ap);
  char *argv[n + 1];
  va_start(ap, arg0);
  collect_args(argv, n, a0, &ap);
  va_end(ap);
  return execv(path, argv);
}

LG_API int execlp(const char *file, const char *arg0, ...) {
  const char *a0 = opaque(arg0);
  va_list ap;
  va_start(ap, arg0);
  size_t n = count_args(a0, ap);
  va_end(ap);
  char *argv[n + 1];
  va_start(ap, arg0);
  collect_args(argv, n, a0, &ap);
  va_end(ap);
  return execvp(file, argv);
}

LG_API int execle(const char *path, const char *arg0, ...) {
  const char *a0 = opaque(arg0);
  va_list ap;
  va_start(ap, arg0);
  size_t n = count_args(a0, ap);
  va_end(ap);
  char *argv[n + 1];
  va_start(ap, arg0);
  collect_args(argv, n, a0, &ap);
  char *const *envp = va_arg(ap, char *const *); /* after the terminating NULL */
  va_end(ap);
  return execve(path, argv, envp);
}

/* ------------------------------------------------------------------ wait */

/* Posts one reaped child (status: a wait(2) status word) into the region's ring. */
static void post_reaped(pid_t pid, int status) {
  if (!lgi_g.live || pid <= 0) return;
  if (WIFSTOPPED(status) || WIFCONTINUED(status)) return; /* not reaped */
  lg_region_hdr_t *h = lgi_g.hdr;
  uint64_t n = atomic_fetch_add_explicit(&h->reaped_head, 1, memory_order_relaxed);
  lg_reaped_t *e = LG_PTR(h, h->reaped_off, lg_reaped_t *) + n % LG_REAPED_RING;
  atomic_store_explicit(&e->seq, 0, memory_order_relaxed);
  atomic_thread_fence(memory_order_release);
  __atomic_store_n(&e->pid, (int32_t)pid, __ATOMIC_RELAXED);
  __atomic_store_n(&e->status, status, __ATOMIC_RELAXED);
  atomic_store_explicit(&e->seq, n + 1, memory_order_release);
}

LG_API pid_t wait(int *status) {
  int st = 0;
  if (!RESOLVE(waitpid)) {
    errno = ENOSYS;
    return -1;
  }
  /* wait(s) is waitpid(-1, s, 0); glibc's wait calls its wait4 internally. */
  pid_t pid = real.waitpid(-1, &st, 0);
  if (pid > 0) {
    int e = errno;
    post_reaped(pid, st);
    errno = e;
    if (status) *status = st;
  }
  return pid;
}

LG_API pid_t waitpid(pid_t who, int *status, int options) {
  int st = 0;
  if (!RESOLVE(waitpid)) {
    errno = ENOSYS;
    return -1;
  }
  pid_t pid = real.waitpid(who, &st, options);
  if (pid > 0) {
    int e = errno;
    post_reaped(pid, st);
    errno = e;
    if (status) *status = st;
  }
  return pid;
}

LG_API pid_t wait3(int *status, int options, struct rusage *ru) {
  int st = 0;
  if (!RESOLVE(wait4)) {
    errno = ENOSYS;
    return -1;
  }
  pid_t pid = real.wait4(-1, &st, options, ru);
  if (pid > 0) {
    int e = errno;
    post_reaped(pid, st);
    errno = e;
    if (status) *status = st;
  }
  return pid;
}

LG_API pid_t wait4(pid_t who, int *status, int options, struct rusage *ru) {
  int st = 0;
  if (!RESOLVE(wait4)) {
    errno = ENOSYS;
    return -1;
  }
  pid_t pid = real.wait4(who, &st, options, ru);
  if (pid > 0) {
    int e = errno;
    post_reaped(pid, st);
    errno = e;
    if (status) *status = st;
  }
  return pid;
}

LG_API int waitid(idtype_t idtype, id_t id, siginfo_t *info, int options) {
  siginfo_t si;
  if (!RESOLVE(waitid)) {
    errno = ENOSYS;
    return -1;
  }
  memset(&si, 0, sizeof si);
  int rc = real.waitid(idtype, id, &si, options);
  if (rc == 0 && si.si_pid > 0 && !(options & WNOWAIT)) {
    int e = errno, st = -1;
    switch (si.si_code) {
    case CLD_EXITED: st = (si.si_status & 0xff) << 8; break;
    case CLD_KILLED: st = si.si_status & 0x7f; break;
    case CLD_DUMPED: st = (si.si_status & 0x7f) | 0x80; break;
    default: break; /* stopped, trapped, continued: not reaped */
    }
    if (st >= 0) post_reaped(si.si_pid, st);
    errno = e;
  }
  if (rc == 0 && info) *info = si;
  return rc;
}
