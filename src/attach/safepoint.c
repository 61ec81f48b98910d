/* SPDX-License-Identifier: MIT */
/*
 * safepoint.c - may the injector load the agent in a thread that waits in futex?
 * (docs/attach.md, "An idle target"). A futex wait is how glibc's malloc waits for an
 * arena lock and how a thread waits for the loader's lock, so the call alone says
 * nothing; the thread's call stack does. The stopped thread is unwound remotely with
 * libunwind-ptrace (the .eh_frame of every module: Debian's libc and libpython have no
 * frame pointers), and the wait is taken only when
 *  - no frame lies in ld.so (the loader's lock, or a constructor dlopen runs);
 *  - none lies in one of libc's allocator or loader entry points (malloc ...
 *    malloc_trim, dlopen ... dl_iterate_phdr, fork: their callers may hold a lock that
 *    dlopen needs);
 *  - none lies in __lll_lock_wait_private, the slow path of every lock of libc's own
 *    (malloc's arena and list locks, stdio's): malloc does not always keep a frame of
 *    its own on the stack (free tail-calls _int_free, a static function), but its lock
 *    wait always goes through that one;
 *  - the walk ends at the outermost frame (clone3, _start): a stack the unwinder cannot
 *    read to its end may hold anything.
 * A program's own waits (pthread_cond_wait, sem_clockwait, pthread_join,
 * pthread_mutex_lock on its mutexes, a raw futex in libgomp) pass; so does a timed one
 * that our first stop interrupted, which goes on in restart_syscall.
 */
#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <libunwind-ptrace.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/ptrace.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "attach/internal.h"

/* The deepest stack walked: deeper is "cannot tell". */
#define WAIT_MAX_FRAMES 1024

/* libc functions no frame may be in: the allocator's and the loader's entry points, and
 * the slow path of libc's internal locks. */
// clang-format off
static const char *const unsafe_names[] = {
    "malloc", "free", "calloc", "realloc", "reallocarray", "posix_memalign", "aligned_alloc", "memalign",
    "valloc", "pvalloc", "malloc_trim", "malloc_stats", "malloc_info", "mallinfo", "mallinfo2",
    "malloc_usable_size", "mallopt", "dlopen", "dlmopen", "dlclose", "dlsym", "dlvsym", "dladdr", "dladdr1",
    "dlinfo", "dl_iterate_phdr", "fork", "_Fork", "__libc_freeres", "__lll_lock_wait_private"};
// clang-format on

static int unsafe_name(const char *nm) {
  for (size_t i = 0; i < sizeof unsafe_names / sizeof *unsafe_names; i++)
    if (!strcmp(nm, unsafe_names[i])) return 1;
  return 0;
}

static int add_range(lgj_range_t **r, int *n, uintptr_t lo, uintptr_t hi) {
  lgj_range_t *nr = realloc(*r, (size_t)(*n + 1) * sizeof *nr);
  if (!nr) return -ENOMEM;
  nr[*n] = (lgj_range_t){lo, hi};
  *r = nr;
  ++*n;
  return 0;
}

typedef struct {
  lgj_waitcheck_t *w;
  uintptr_t base;
  int err;
} symctx_t;

static void on_sym(void *ctx, const char *nm, uint64_t value, uint64_t size) {
  symctx_t *c = ctx;
  if (!size) return;
  uintptr_t lo = c->base + value, hi = lo + size;
  /* every version of a name (several have two) */
  if (unsafe_name(nm) && add_range(&c->w->unsafe, &c->w->nunsafe, lo, hi)) c->err = -ENOMEM;
}

/* The mappings of the object whose path ends in "/" + name, into r. */
typedef struct {
  const char *name;
  lgj_range_t **r;
  int *n;
} objctx_t;
static int on_object_map(void *ctx, uintptr_t lo, uintptr_t hi, uint64_t off, const char *path) {
  objctx_t *c = ctx;
  size_t nl = strlen(c->name), l = strlen(path);
  (void)off;
  if (l > nl && path[l - nl - 1] == '/' && !strcmp(path + l - nl, c->name)) return add_range(c->r, c->n, lo, hi);
  return 0;
}
static int object_ranges(pid_t pid, const char *name, lgj_range_t **r, int *n) {
  objctx_t c = {name, r, n};
  return lgj_maps_each(pid, on_object_map, &c);
}

int lgj_waitcheck_init(lgj_waitcheck_t *w, pid_t pid, const char *libc_file, uintptr_t libc_base) {
  memset(w, 0, sizeof *w);
  symctx_t c = {w, libc_base, 0};
  int rc = lgj_elf_dynsyms(libc_file, on_sym, &c);
  if (rc == 0) rc = c.err;
  if (rc == 0) rc = object_ranges(pid, "ld-linux-x86-64.so.2", &w->ld, &w->nld);
  if (rc == 0 && (!w->nld || !w->nunsafe)) rc = -ENOENT;
  if (rc == 0) {
    w->as = unw_create_addr_space(&_UPT_accessors, 0);
    if (!w->as) rc = -ENOMEM;
  }
  if (rc != 0) lgj_waitcheck_free(w);
  return rc;
}

void lgj_waitcheck_free(lgj_waitcheck_t *w) {
  if (w->as) unw_destroy_addr_space((unw_addr_space_t)w->as);
  free(w->ld);
  free(w->unsafe);
  memset(w, 0, sizeof *w);
}

static int in_ranges(const lgj_range_t *r, int n, uintptr_t a) {
  for (int i = 0; i < n; i++)
    if (a >= r[i].lo && a < r[i].hi) return 1;
  return 0;
}

/* Walks tid's stack from frame `from` on: 0 at the first frame in ld.so or in one of
 * the unsafe libc functions (why says which), 1 at the outermost frame, -EIO when the
 * stack cannot be read to its end. */
static int walk_stack(const lgj_waitcheck_t *w, pid_t tid, int from, char *why, size_t n) {
  void *ui = _UPT_create(tid);
  if (!ui) return -ENOMEM;
  unw_cursor_t c;
  int rc = unw_init_remote(&c, (unw_addr_space_t)w->as, ui) < 0 ? -EIO : 0;
  int frames = 0;
  for (; rc == 0; frames++) {
    unw_word_t ip;
    if (frames >= WAIT_MAX_FRAMES || unw_get_reg(&c, UNW_REG_IP, &ip) < 0) {
      rc = -EIO;
      break;
    }
    /* a return address points after its call: the caller's function holds ip - 1 */
    uintptr_t a = frames ? (uintptr_t)ip - 1 : (uintptr_t)ip;
    if (frames >= from && in_ranges(w->ld, w->nld, a)) {
      snprintf(why, n, "thread %d: frame %d in ld.so", (int)tid, frames);
      break;
    }
    if (frames >= from && in_ranges(w->unsafe, w->nunsafe, a)) {
      snprintf(why, n, "thread %d: frame %d in libc's allocator, loader or own locks", (int)tid, frames);
      break;
    }
    int st = unw_step(&c);
    if (st == 0) rc = 1; /* the outermost frame: every frame seen */
    else if (st < 0) rc = -EIO;
  }
  if (rc == -EIO) snprintf(why, n, "thread %d: its stack could not be read to the end (%d frames)", (int)tid, frames);
  _UPT_destroy(ui);
  return rc;
}

int lgj_waiter_safe(const lgj_waitcheck_t *w, pid_t tid, char *why, size_t n) { return walk_stack(w, tid, 0, why, n); }

int lgj_hit_safe(const lgj_waitcheck_t *w, pid_t tid, char *why, size_t n) {
  int rc = walk_stack(w, tid, 1, why, n);
  return rc == -EIO ? 1 : rc;
}

/* The mappings of a process, for lgj_stack_describe: module and file offset of a pc. */
typedef struct {
  uintptr_t lo, hi;
  uint64_t off;
  char name[48];
} modmap_t;
typedef struct {
  modmap_t *m;
  int n;
} modctx_t;
static int on_mod_map(void *ctx, uintptr_t lo, uintptr_t hi, uint64_t off, const char *path) {
  modctx_t *c = ctx;
  if (path[0] != '/') return 0;
  modmap_t *nm = realloc(c->m, (size_t)(c->n + 1) * sizeof *nm);
  if (!nm) return -ENOMEM;
  c->m = nm;
  const char *b = strrchr(path, '/');
  nm[c->n] = (modmap_t){lo, hi, off, ""};
  snprintf(nm[c->n].name, sizeof nm[c->n].name, "%s", b + 1);
  c->n++;
  return 0;
}

int lgj_stack_describe(const lgj_waitcheck_t *w, pid_t tid, int max, char *out, size_t n) {
  if (!n) return -EINVAL;
  out[0] = 0;
  modctx_t mods = {0};
  (void)lgj_maps_each(tid, on_mod_map, &mods);
  void *ui = _UPT_create(tid);
  if (!ui) {
    free(mods.m);
    return -ENOMEM;
  }
  unw_cursor_t c;
  int rc = unw_init_remote(&c, (unw_addr_space_t)w->as, ui) < 0 ? -EIO : 0;
  size_t len = 0;
  for (int f = 0; rc == 0 && f < max; f++) {
    unw_word_t ip, off = 0;
    char nm[128] = "?", mod[80] = "";
    if (unw_get_reg(&c, UNW_REG_IP, &ip) < 0) break;
    uintptr_t a = f ? (uintptr_t)ip - 1 : (uintptr_t)ip;
    for (int i = 0; i < mods.n; i++)
      if (a >= mods.m[i].lo && a < mods.m[i].hi) {
        snprintf(mod, sizeof mod, " (%s+0x%lx)", mods.m[i].name, (unsigned long)(ip - mods.m[i].lo + mods.m[i].off));
        break;
      }
    /* the nearest symbol the file names: in a stripped library a static function shows
     * as the export before it, so the module offset is what to look up */
    if (unw_get_proc_name(&c, nm, sizeof nm, &off) != 0 || !nm[0]) snprintf(nm, sizeof nm, "?");
    else if (off) snprintf(nm + strlen(nm), sizeof nm - strlen(nm), "+0x%lx", (unsigned long)off);
    int k = snprintf(out + len, n - len, "%s%s%s", f ? " < " : "", nm, mod);
    if (k < 0 || (size_t)k >= n - len) break;
    len += (size_t)k;
    if (unw_step(&c) <= 0) break;
  }
  _UPT_destroy(ui);
  free(mods.m);
  return rc;
}

/* ------------------------------------------------------------------ the waiting threads */

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
 * allocator, loader or libc-lock frame (safepoint.c), or 0. */
pid_t lgj_idle_caller(lgj_inj_t *s, const lgj_waitcheck_t *w) {
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
pid_t lgj_safe_waiter(lgj_inj_t *s, const lgj_waitcheck_t *w) {
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
