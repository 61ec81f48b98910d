/* SPDX-License-Identifier: MIT */
/*
 * unwind.c - native stack capture for the recorder.
 *
 * Programs are built the usual way (-O2, no frame pointers, no debug info in system
 * libraries), so frame-pointer walking is not reliable; libunwind's DWARF CFI unwinder
 * is, but costs about a microsecond per stack. Allocation churn calls malloc from the
 * same few call chains millions of times, so a per-thread cache sits in front of it:
 *
 *   key    (return address into the malloc caller, caller's stack pointer)
 *   check  every cached return address i is still stored at its slot on the stack
 *          (cfa0 + slot_off[i]); the slots are live stack (above the current stack
 *          pointer), so a match means the same chain of callers.
 *
 * Two different callers with the same frame sizes give the same key but a different
 * return address at some slot, so they miss and are unwound. The cache is used only
 * when every slot lies inside this thread's stack (pthread bounds), so stacks that
 * are switched (coroutines) are always unwound, never read out of bounds.
 * BENCHMARKS.md has the measured cost of both paths.
 *
 * The stack the hook runs on is the program's, and may be nearly full: a signal
 * handler on a small alternate stack, the bottom of a deep recursion. The cache and
 * the unwind's buffers are per-thread pages, and an unwind (libunwind needs 3-5 KiB)
 * happens only with LGI_UNWIND_ROOM left below; otherwise the block is recorded with
 * its caller alone. A recorded malloc then needs about what a bare one does.
 */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/auxv.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>
#include <dlfcn.h>
#include <link.h>
#include <sys/single_threaded.h>

#define UNW_LOCAL_ONLY
#include <libunwind.h>

#include "capture/recorder.h"
#include "core/hash.h"
#include "core/platform.h"
#include "leakguard.h"

/* Per-thread cache of the stacks of Python threads: stack hash -> id. A Python stack
 * is read in full at every allocation (its frames are read, not unwound), and looking
 * it up in the shared index costs three cache misses on a big table (slot, stack record,
 * frames): 40 % of the recorder's time in `import torch`, whose 300 000 stacks are
 * mostly met again soon after they are first seen. The 64-bit hash stands for the
 * stack here without comparing the frames: two of a process's stacks would share it
 * with a probability of about n^2 / 2^65 (3e-9 for a million stacks). */
#define LGI_PYST_ENTRIES 4096
/* Native frames kept under a Python thread's allocation: at most LGI_PY_NATIVE, down to
 * the interpreter's own frame; LGI_PY_NATIVE_IMPORT when the innermost Python frame is
 * importlib's (C code that the import machinery called: an extension module's
 * initialisation, the static constructors of the libraries it loads). Those run once,
 * are start-up by definition (docs/detection.md), and `import torch` alone reaches
 * 200 000 distinct 6-frame heads from libtorch's operator registrations. 2 frames
 * (the allocator's caller and its caller) cost no DWARF step for code whose caller
 * libunwind has seen; a third was a step of ~17 us per new path (BENCHMARKS.md). */
#define LGI_PY_NATIVE 6
#define LGI_PY_NATIVE_IMPORT 2
/* The native head of a Python thread's allocation (native_head), verified like the
 * stack cache: the same return address and caller stack pointer, and each return
 * address still at its slot. */
#define LGI_HEAD_ENTRIES 256
#define LGI_HEAD_TRACE (LGI_PY_NATIVE + 16) /* the longest trace native_head asks for */
typedef struct {
  uint64_t ra0, cfa0;
  uint32_t n, max;
  uint32_t slot_off[LGI_PY_NATIVE];
  uint64_t ra[LGI_PY_NATIVE];
} lgi_head_ent_t;
typedef struct {
  uint64_t hash;
  uint32_t id;
} lgi_pyst_ent_t;
/* A Python thread's stack id by its chain key (lgi_python_chain_key), for allocations
 * made by the interpreter itself, whose stack is the Python frames alone. */
#define LGI_PYCHAIN_ENTRIES 4096
typedef struct {
  uint64_t key;
  uint32_t id;
  uint32_t under_import;
} lgi_pychain_ent_t;

/* The per-thread memory (recorder.h): the stack cache, and the buffers of an unwind,
 * which on the stack took ~8 KiB of whatever stack the program was on. */
/* A frame size learned from an unwind: the return address ip (into some function F)
 * lies `delta` bytes below the slot of the return address into F's caller. */
#define LGI_FDELTA_BITS 9 /* 512 sets of two ways: 16 KiB */
#define LGI_FDELTA_ENTRIES (2u << LGI_FDELTA_BITS)
typedef struct {
  uint64_t ip;
  uint64_t delta;
} lgi_fdelta_t;
/* Return addresses above ra0 that pick the stack cache's set (scache_set). */
#define LGI_SCACHE_KEYDEPTH 4

struct lgi_unw_mem {
  lgi_scache_ent_t cache[LGI_SCACHE_SETS][LGI_SCACHE_WAYS];
  uint8_t victim[LGI_SCACHE_SETS]; /* the next way a miss replaces, per set */
  lgi_fdelta_t fdelta[LGI_FDELTA_ENTRIES];
  uint64_t ips[LG_MAX_DEPTH];
  uint64_t sps[LG_MAX_DEPTH];
  void *bt[LG_MAX_DEPTH + 8];
  uint64_t all[LG_MAX_DEPTH]; /* lgi_capture_all: the Python frames, then native ones */
  lgi_pyst_ent_t pyst[LGI_PYST_ENTRIES];
  lgi_pychain_ent_t pychain[LGI_PYCHAIN_ENTRIES];
  lgi_head_ent_t head[LGI_HEAD_ENTRIES];
  unsigned head_skip; /* native_head: frames up to and including ra0 in its trace, 0: not known */
};

/* Stack that an unwind needs below the frame that decides to unwind: libunwind's
 * context and cursor, its frame-cache lookups (dl_iterate_phdr on a miss), the stack
 * table's slow path. With less left (a signal handler on a small alternate stack, the
 * bottom of a deep recursion) the block is recorded with its caller alone: unwinding
 * there would overflow a stack the program itself fits in (BENCHMARKS.md, "stack a
 * recorded malloc needs"). */
#define LGI_UNWIND_ROOM ((uintptr_t)LGI_UNWIND_ROOM_KIB * 1024)
#ifndef LGI_UNWIND_ROOM_KIB
#define LGI_UNWIND_ROOM_KIB 12
#endif

/* glibc's pthread_getattr_np. It holds the thread's own lock while it allocates
 * (realloc, and calloc inside pthread_attr_setaffinity_np): a capture from in there, or
 * from a signal handler that interrupted it, must not call it again (the lock is not
 * recursive). The program's calls go through the wrapper below, which says so. */
typedef int (*getattr_fn)(pthread_t, pthread_attr_t *);
static getattr_fn real_getattr;
#ifdef LGI_DEBUG_SP /* measuring what an unwind needs (BENCHMARKS.md): the last check's sp */
__attribute__((visibility("default"))) uintptr_t lgi_dbg_sp;
#endif

LG_API int pthread_getattr_np(pthread_t th, pthread_attr_t *attr) {
  getattr_fn f = __atomic_load_n(&real_getattr, __ATOMIC_ACQUIRE);
  if (!f) {
    f = (getattr_fn)dlsym(RTLD_NEXT, "pthread_getattr_np");
    if (!f) return ENOSYS;
    __atomic_store_n(&real_getattr, f, __ATOMIC_RELEASE);
  }
  lgi_tls_t *t = &lgi_tls;
  t->in_getattr++;
  int r = f(th, attr);
  t->in_getattr--;
  return r;
}

#ifdef LGI_AGENT
/* The agent finds a thread's stack bounds without pthread_getattr_np, which allocates
 * (its attribute extension and CPU set) in the calling thread's malloc arena: three
 * blocks allocated and freed in every thread at its first recorded allocation were
 * enough to move a thread of the churn program onto glibc's trim threshold, where it
 * went on trimming and regrowing its heap after the detach (BENCHMARKS.md, "Attach").
 * glibc's thread descriptor holds the stack block it made, or the one the program gave
 * pthread_attr_setstack, as `void *stackblock; size_t stackblock_size, guardsize;`.
 * Where in the descriptor depends on glibc's version, so a helper thread learns it
 * once, before anything is recorded: it asks pthread_getattr_np for its own stack (the
 * blocks go to the helper's arena) and looks for the one place in its own descriptor
 * that holds those three words. No single match: pthread_getattr_np as in
 * libleakguard.so. */
static _Atomic long stackblock_off = -1; /* -1 not learnt, -2 not found */
#define LGI_DESCR_SCAN 4096

static void *learn_stackblock(void *arg) {
  (void)arg;
  pthread_attr_t a;
  void *addr = NULL;
  size_t size = 0;
  long found = -2;
  if (real_getattr && real_getattr(pthread_self(), &a) == 0) {
    if (pthread_attr_getstack(&a, &addr, &size) != 0) addr = NULL;
    pthread_attr_destroy(&a);
  }
  uintptr_t lo = (uintptr_t)addr, hi = lo + size, self = (uintptr_t)pthread_self();
  int matches = 0;
  for (uintptr_t o = 0; addr && size && self > lo && o < LGI_DESCR_SCAN && self + o + 3 * sizeof(uintptr_t) <= hi;
       o += sizeof(uintptr_t)) {
    const uintptr_t *f = (const uintptr_t *)(self + o);
    if (f[0] && f[0] + f[1] == hi && f[0] + f[2] == lo) {
      found = (long)o;
      matches++;
    }
  }
  atomic_store(&stackblock_off, matches == 1 ? found : -2);
  return NULL;
}
#endif

/* libunwind's caches: per thread (no lock), and a bigger register-state cache (a miss
 * costs a dl_iterate_phdr and two sigprocmask system calls inside libunwind). */
static void unwinder_tune(int (*policy)(unw_addr_space_t, unw_caching_policy_t),
                          int (*cache_size)(unw_addr_space_t, size_t, int), unw_addr_space_t as) {
  policy(as, UNW_CACHE_PER_THREAD);
  cache_size(as, 4096, 0);
}

#ifndef LGI_AGENT
/* ---- libunwind, opened when the image first records
 *
 * Linked, libunwind came into every preloaded image with liblzma, whose CRC resolvers
 * run CPUID (a VM exit in a virtual machine) at load: 0.2 ms of every exec'd helper of
 * a wrapper, which a lazy image (docs/design.md, "Lazy start") otherwise spends on
 * nothing (BENCHMARKS.md, "Less per process"). It is opened instead when the image
 * starts recording: in the constructor of the started process's image, at lazy_begin,
 * or before a waiting image starts its first thread (pthread_create below).
 * dlopen takes the loader's lock and runs the loader: only while no other thread can
 * hold that lock (__libc_single_threaded), with the link maps consistent (r_state),
 * and never for an allocation of the loader itself (the caller's return address in
 * ld.so). Until then a stack is its caller alone, not cached, and the next capture
 * tries again. Opened so, libunwind's 16 bytes of TLS are dynamic: a thread's first
 * unwind allocates them in __tls_get_addr, passed through (the guard is held) and
 * freed with the thread. */
#define LGI_STR_(x) #x
#define LGI_STR(x) LGI_STR_(x)
typedef int (*backtrace_fn)(void **, int);
static backtrace_fn unw_backtrace_p;
static _Atomic int unwinder_state; /* 0 not open, 1 opening, 2 open, 3 cannot */

static uintptr_t rtld_lo, rtld_hi;
void lgi_unwind_loader_is(uintptr_t lo, uintptr_t hi) {
  rtld_lo = lo;
  rtld_hi = hi;
}

static int loader_quiet(uintptr_t caller) {
  return __libc_single_threaded && _r_debug.r_state == RT_CONSISTENT && caller - rtld_lo >= rtld_hi - rtld_lo;
}

static backtrace_fn unwinder_open(uintptr_t caller) {
  backtrace_fn bt = __atomic_load_n(&unw_backtrace_p, __ATOMIC_ACQUIRE);
  if (LGI_LIKELY(bt != NULL) || atomic_load(&unwinder_state) == 3 || !loader_quiet(caller)) return bt;
  int z = 0;
  if (!atomic_compare_exchange_strong(&unwinder_state, &z, 1)) return NULL;
  lgi_tls.guard++;
  int e = errno;
  void *h = dlopen(LGI_LIBUNWIND, RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
  int (*policy)(unw_addr_space_t, unw_caching_policy_t) = NULL;
  int (*cache_size)(unw_addr_space_t, size_t, int) = NULL;
  unw_addr_space_t *local = NULL;
  if (h) {
    *(void **)&bt = dlsym(h, LGI_STR(unw_backtrace));
    *(void **)&policy = dlsym(h, LGI_STR(unw_set_caching_policy));
    *(void **)&cache_size = dlsym(h, LGI_STR(unw_set_cache_size));
    local = dlsym(h, LGI_STR(unw_local_addr_space));
  }
  if (bt && policy && cache_size && local) {
    unwinder_tune(policy, cache_size, *local);
    __atomic_store_n(&unw_backtrace_p, bt, __ATOMIC_RELEASE);
    atomic_store(&unwinder_state, 2);
  } else {
    bt = NULL;
    atomic_store(&unwinder_state, 3);
    static const char msg[] = "leakguard: cannot open " LGI_LIBUNWIND ": stacks are their caller alone\n";
    (void)!write(2, msg, sizeof msg - 1);
  }
  errno = e;
  lgi_tls.guard--;
  return bt;
}

/* A waiting image about to have a second thread opens libunwind now, while it still
 * can (above): its recording may begin later, with threads. */
typedef int (*pthread_create_fn)(pthread_t *, const pthread_attr_t *, void *(*)(void *), void *);
static pthread_create_fn real_pthread_create;
LG_API int pthread_create(pthread_t *th, const pthread_attr_t *attr, void *(*fn)(void *), void *arg) {
  pthread_create_fn f = __atomic_load_n(&real_pthread_create, __ATOMIC_ACQUIRE);
  if (!f) {
    f = (pthread_create_fn)dlsym(RTLD_NEXT, "pthread_create");
    if (!f) return ENOSYS;
    __atomic_store_n(&real_pthread_create, f, __ATOMIC_RELEASE);
  }
  if ((lgi_g.live || lgi_g.silent) && !__atomic_load_n(&unw_backtrace_p, __ATOMIC_ACQUIRE) && !lgi_tls.guard)
    (void)unwinder_open((uintptr_t)__builtin_return_address(0));
  return f(th, attr, fn, arg);
}
#endif

void lgi_unwind_init(void) {
#ifdef LGI_AGENT
  unwinder_tune(unw_set_caching_policy, unw_set_cache_size, unw_local_addr_space);
#else
  (void)unwinder_open(0);
#endif
  if (!real_getattr)
    __atomic_store_n(&real_getattr, (getattr_fn)dlsym(RTLD_NEXT, "pthread_getattr_np"), __ATOMIC_RELEASE);
#ifdef LGI_AGENT
  pthread_t th;
  if (atomic_load(&stackblock_off) == -1) {
    if (pthread_create(&th, NULL, learn_stackblock, NULL) == 0) pthread_join(th, NULL);
    else atomic_store(&stackblock_off, -2);
  }
#endif
}

/* ---- fork while other threads unwind
 *
 * libunwind takes a mutex of its own while it steps (with every signal blocked), and
 * on a frame-cache miss glibc's dl_iterate_phdr lock, which glibc's fork does not
 * reset in the child. A thread of the parent inside libunwind at the fork leaves the
 * child a lock that nobody will release: the child's first unwind then hangs for
 * good, deaf to every signal but SIGKILL (tests/torture "forks" caught it; the glibc
 * part alone: a thread looping dl_iterate_phdr while another forks hangs the first
 * child). So an unwind counts itself in `unwinders`, and the prepare handler raises
 * `fork_pending` and waits until the count is down to its own thread's.
 *
 * Neither side blocks on the other for long: a thread that finds a fork pending waits
 * at most LGI_FORK_WAIT_NS, then records that block with its caller alone (it may hold
 * a lock of glibc's that the fork needs: NSS's, stdio's); the forking thread waits at
 * most LGI_FORK_DRAIN_NS (a thread stuck inside libunwind), and that child is then not
 * recorded: the recorder's own dl_iterate_phdr (a stack in a new module) would hang
 * in it as well. */
#define LGI_FORK_WAIT_NS 100000000ULL   /* 100 ms */
#define LGI_FORK_DRAIN_NS 2000000000ULL /* 2 s */
static atomic_int unwinders;
static atomic_int fork_pending;
static int fork_unsafe; /* the child cannot trust libunwind's or glibc's loader locks */

/* 1: the caller may call libunwind, and must call unwind_leave after. */
static int unwind_enter(lgi_tls_t *t) {
  uint64_t t0 = 0;
  for (;;) {
    atomic_fetch_add(&unwinders, 1); /* seq_cst: ordered against the load below */
    if (LGI_LIKELY(!atomic_load(&fork_pending))) {
      t->in_unwind = 1;
      return 1;
    }
    atomic_fetch_sub(&unwinders, 1);
    int e = errno;
    uint64_t now = lgi_now_ns();
    if (!t0) t0 = now;
    else if (now - t0 > LGI_FORK_WAIT_NS) {
      errno = e;
      return 0;
    }
    sched_yield();
    errno = e;
  }
}

static void unwind_leave(lgi_tls_t *t) {
  t->in_unwind = 0;
  atomic_fetch_sub(&unwinders, 1);
}

void lgi_unwind_fork_prepare(lgi_tls_t *t) {
  atomic_store(&fork_pending, 1);
  int own = t->in_unwind ? 1 : 0; /* fork from a handler that interrupted our unwind */
  fork_unsafe = own;
  uint64_t t0 = 0;
  int e = errno;
  while (atomic_load(&unwinders) > own) {
    uint64_t now = lgi_now_ns();
    if (!t0) t0 = now;
    else if (now - t0 > LGI_FORK_DRAIN_NS) {
      fork_unsafe = 1;
      break;
    }
    sched_yield();
  }
  errno = e;
}

void lgi_unwind_fork_parent(void) {
  fork_unsafe = 0;
  atomic_store(&fork_pending, 0);
}

int lgi_unwind_fork_child(lgi_tls_t *t) {
  int safe = !fork_unsafe;
  atomic_store(&unwinders, t->in_unwind ? 1 : 0);
  fork_unsafe = 0;
  atomic_store(&fork_pending, 0);
  return safe;
}

/* This thread's own stack [stack_lo, stack_hi): frames lie below stack_hi, and an
 * unwind needs LGI_UNWIND_ROOM above stack_lo.
 *  - The main thread: below __libc_stack_end, down to RLIMIT_STACK from the top of the
 *    stack mapping (its end is just above the exec'd file name, AT_EXECFN), which is
 *    how far the kernel grows it. Not pthread_getattr_np: for the main thread it reads
 *    /proc/self/maps with stdio under the thread's lock.
 *  - Other threads: pthread_getattr_np (the stack block glibc made, or the one the
 *    program gave pthread_attr_setstack), once per thread; the top is the thread
 *    descriptor. It takes the thread's own lock and allocates (passed through: the
 *    guard is held), so it is not called while the thread is inside the program's
 *    own call of it (then on a later capture).
 * Without bounds (-1), every capture of the thread keeps the caller alone. */
extern void *__libc_stack_end;
static void stack_bounds(lgi_tls_t *t) {
  int e = errno;
  if (lg_sys_gettid() == lg_sys_getpid()) {
    uintptr_t hi = (uintptr_t)__libc_stack_end, top = hi, pg = (uintptr_t)getpagesize();
    const char *fn = (const char *)getauxval(AT_EXECFN);
    if (fn && (uintptr_t)fn > hi) top = ((uintptr_t)fn + strlen(fn) + 1 + sizeof(void *) + pg - 1) & ~(pg - 1);
    struct rlimit rl;
    uintptr_t span = (uintptr_t)1 << 30; /* unlimited: as far as the old code assumed */
    if (getrlimit(RLIMIT_STACK, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur < span)
      span = (uintptr_t)rl.rlim_cur;
    t->stack_hi = hi;
    t->stack_lo = top > span ? top - span : 1;
    t->stack_known = 1;
  }
#ifdef LGI_AGENT
  else if (atomic_load_explicit(&stackblock_off, memory_order_relaxed) >= 0) {
    uintptr_t self = (uintptr_t)pthread_self();
    const uintptr_t *f = (const uintptr_t *)(self + (uintptr_t)atomic_load(&stackblock_off));
    uintptr_t lo = f[0] + f[2], hi = f[0] + f[1];
    t->stack_known = -1;
    if (f[0] && lo < hi && self > lo && self < hi) {
      t->stack_lo = lo;
      t->stack_hi = self;
      t->stack_known = 1;
    }
  }
#endif
  else if (!t->in_getattr && real_getattr) {
    pthread_attr_t a;
    void *addr = NULL;
    size_t size = 0;
    t->stack_known = -1;
    if (real_getattr(pthread_self(), &a) == 0) {
      if (pthread_attr_getstack(&a, &addr, &size) != 0) addr = NULL;
      pthread_attr_destroy(&a);
    }
    uintptr_t lo = (uintptr_t)addr, hi = lo + size, self = (uintptr_t)pthread_self();
    if (addr && size) {
      t->stack_lo = lo;
      t->stack_hi = self > lo && self < hi ? self : hi;
      t->stack_known = 1;
    }
  }
  errno = e;
}

/* 1 when the stack below here has LGI_UNWIND_ROOM left. On the thread's own stack its
 * bounds say; a signal handler's alternate stack has bounds we can ask for (one system
 * call). Any other stack (a coroutine's, a thread's that is not glibc's) is of unknown
 * size: no unwind. Bounds not found at the thread's first allocation (it was on an
 * alternate stack, or inside pthread_getattr_np) are looked for here. */
static __attribute__((noinline)) int room_to_unwind(lgi_tls_t *t) {
  uintptr_t sp = (uintptr_t)__builtin_frame_address(0);
#ifdef LGI_DEBUG_SP
  extern uintptr_t lgi_dbg_sp;
  lgi_dbg_sp = sp;
#endif
  if (LGI_LIKELY(t->stack_known > 0) && sp > t->stack_lo && sp <= t->stack_hi)
    return sp - t->stack_lo >= LGI_UNWIND_ROOM;
  stack_t ss;
  int e = errno;
  long r = syscall(SYS_sigaltstack, NULL, &ss);
  errno = e;
  uintptr_t lo = (uintptr_t)ss.ss_sp;
  if (r == 0 && (ss.ss_flags & SS_ONSTACK)) return sp > lo && sp - lo <= ss.ss_size && sp - lo >= LGI_UNWIND_ROOM;
  if (t->stack_known == 0) {
    stack_bounds(t);
    if (t->stack_known > 0 && sp > t->stack_lo && sp <= t->stack_hi) return sp - t->stack_lo >= LGI_UNWIND_ROOM;
  }
  return 0;
}

/* The thread's first allocation (thread.c), usually not deep in its stack: its
 * bounds, unless it runs on an alternate stack (then on a later capture). */
void lgi_unwind_thread_start(lgi_tls_t *t) {
  if (t->stack_known) return;
  stack_t ss;
  int e = errno;
  long r = syscall(SYS_sigaltstack, NULL, &ss);
  errno = e;
  if (r == 0 && !(ss.ss_flags & SS_ONSTACK)) stack_bounds(t);
}

/* The thread's memory, mapped on first use. After the thread's exit destructor ran
 * (a TLS destructor of the program allocates later) a temporary mapping, *tmp set:
 * the caller unmaps it. NULL when none can be mapped. */
static lgi_unw_mem_t *unw_mem(lgi_tls_t *t, int *tmp) {
  *tmp = 0;
  if (LGI_LIKELY(t->umem != NULL)) return t->umem;
  int e = errno;
  lgi_unw_mem_t *m = lgi_pages_alloc(sizeof *m);
  errno = e;
  if (m && t->state == 2) *tmp = 1;
  else t->umem = m;
  return m;
}

void lgi_unwind_thread_exit(lgi_tls_t *t) {
  lgi_pages_free(t->umem, sizeof *t->umem);
  t->umem = NULL;
}

/* Where each return address ips[1..n-1] of a fresh unwind is stored on the stack,
 * as sps[i] (the stack pointer of the frame it returns to): found by scanning upward
 * from the previous one (a return address sits at the top of its caller's frame,
 * above the callee's). 0 where not found within 64 KiB or outside this thread's stack
 * (such a stack is not cached). sps[0] = cfa0. Returns 1 when every slot was found. */
static int find_slots(const lgi_tls_t *t, uintptr_t cfa0, const uint64_t *ips, unsigned n, uint64_t *sps) {
  uintptr_t scan = cfa0, top = t->stack_hi;
  int ok = t->stack_known > 0 && cfa0 >= t->stack_lo && cfa0 < top;
  sps[0] = cfa0;
  for (unsigned i = 1; i < n; i++) {
    sps[i] = 0;
    if (!ok) continue;
    uintptr_t lim = scan + 65536 < top ? scan + 65536 : top;
    uintptr_t a = scan;
    while (a + 8 <= lim && *(const uint64_t *)a != ips[i]) a += 8;
    if (a + 8 <= lim) {
      sps[i] = a + 8;
      scan = a + 8;
    } else {
      ok = 0;
    }
  }
  return ok;
}

/* A cached stack is still the stack: each cached return address ra[1..n-1] at its
 * slot, cfa0 + slot_off[i] (the native stack cache and the native-head cache). */
static inline int slots_hold(uintptr_t cfa0, const uint32_t *slot_off, const uint64_t *ra, unsigned n) {
  for (unsigned i = 1; i < n; i++)
    if (*(const uint64_t *)(cfa0 + slot_off[i]) != ra[i]) return 0;
  return 1;
}

/* Whether a fresh unwind (find_slots gave sps) can be cached: every slot above cfa0
 * inside this thread's stack, within 4 GiB of cfa0, still holding its address. */
static int slots_cacheable(const lgi_tls_t *t, uintptr_t cfa0, const uint64_t *ips, const uint64_t *sps, unsigned n) {
  if (cfa0 < t->stack_lo || sps[0] != cfa0) return 0;
  for (unsigned j = 1; j < n; j++)
    if (sps[j] - 8 < cfa0 || sps[j] > t->stack_hi || sps[j] - cfa0 > UINT32_MAX ||
        *(const uint64_t *)(sps[j] - 8) != ips[j])
      return 0;
  return 1;
}

/* Writes the slots of a cacheable unwind into an entry (invalidated by the caller). */
static void slots_write(uintptr_t cfa0, const uint64_t *ips, const uint64_t *sps, unsigned n, uint32_t *slot_off,
                        uint64_t *ra) {
  for (unsigned j = 1; j < n; j++) {
    slot_off[j] = (uint32_t)(sps[j] - 8 - cfa0);
    ra[j] = ips[j];
  }
}

/* The return addresses of the calling chain, innermost first (frames of this file
 * included: callers look for ra0 in them). The agent (`leakguard attach`) steps with
 * unw_step instead of unw_backtrace: libunwind's fast trace keeps a thread-local cache
 * pointer, and a libunwind that came into the process with the agent's dlopen has its
 * TLS in glibc's dynamic TLS, which __tls_get_addr mallocs in each thread's own arena at
 * the thread's first trace. That block outlived the detach in every thread that made a
 * recorded allocation, and it moved the churn program's heap onto glibc's trim edge: one
 * or two of its threads went on trimming and regrowing their heap (5 000 madvise calls a
 * second, 10-30 % slower) after the agent had gone (BENCHMARKS.md, "Attach"). unw_step
 * touches no TLS; it costs two sigprocmask calls a frame, paid on a miss of the stack
 * cache above only. libleakguard.so keeps the fast trace: it stays loaded, and its
 * threads' TLS blocks (16 bytes, above) go with the threads. -1: libunwind is not open
 * (yet), the caller alone stands for the stack and is not cached. */
static int backtrace_ips(void **bt, int want, uintptr_t caller) {
#ifdef LGI_AGENT
  (void)caller;
  unw_context_t uc;
  unw_cursor_t c;
  if (unw_getcontext(&uc) != 0 || unw_init_local(&c, &uc) != 0) return 0;
  int k = 0;
  do {
    unw_word_t ip;
    if (unw_get_reg(&c, UNW_REG_IP, &ip) < 0 || ip == 0) break;
    bt[k++] = (void *)(uintptr_t)ip;
  } while (k < want && unw_step(&c) > 0);
  return k;
#else
  backtrace_fn f = __atomic_load_n(&unw_backtrace_p, __ATOMIC_ACQUIRE);
  if (LGI_UNLIKELY(!f) && !(f = unwinder_open(caller))) return -1; /* not open (yet) */
  return f(bt, want);
#endif
}

/* The innermost native frames of a Python thread's allocation, at most max, up to the
 * interpreter's own frame: from the head cache, else libunwind's fast trace (a per-IP
 * cache, no system calls once warm). */
static unsigned native_head(lgi_tls_t *t, lgi_unw_mem_t *m, int use_cache, uintptr_t ra0, uintptr_t cfa0, uint64_t *ips,
                            unsigned max) {
  lgi_head_ent_t *e = NULL;
  if (use_cache) {
    uint64_t k = (ra0 * LG_HASH_GOLDEN64) ^ (cfa0 >> 4);
    e = &m->head[(k >> 24) & (LGI_HEAD_ENTRIES - 1)];
    uint32_t en = __atomic_load_n(&e->n, __ATOMIC_ACQUIRE);
    if (en && e->ra0 == ra0 && e->cfa0 == cfa0 && e->max == max && slots_hold(cfa0, e->slot_off, e->ra, en)) {
      ips[0] = ra0;
      for (unsigned i = 1; i < en; i++) ips[i] = e->ra[i];
      return en;
    }
  }
  unsigned n = 0;
  ips[n++] = ra0;
  if (!unwind_enter(t)) return n;
  void **bt = m->bt;
  /* The trace asks for no frame beyond the last one kept: each further frame is a
   * lookup in libunwind's cache, and a frame it has not seen yet (code that runs once:
   * an import's static constructors) costs a DWARF step of ~17 us with a dozen
   * sigprocmask calls (BENCHMARKS.md, "Python start-up"). The recorder's own frames
   * above ra0 number the same for a given hook; head_skip is the most seen so far,
   * and a trace that stopped short of ra0 is asked again in full. */
  int want = m->head_skip ? (int)(m->head_skip + max - 1) : LGI_PY_NATIVE + 8;
  int k = backtrace_ips(bt, want, ra0), i = 0;
  if (k < 0) {
    unwind_leave(t);
    return n;
  }
  while (i < k && (uintptr_t)bt[i] != ra0) i++;
  if (i == k && k == want && want < LGI_HEAD_TRACE) {
    want = LGI_HEAD_TRACE;
    k = backtrace_ips(bt, want, ra0);
    i = 0;
    while (i < k && (uintptr_t)bt[i] != ra0) i++;
  }
  unwind_leave(t);
  if (i < k && (unsigned)i + 1 > m->head_skip && i + 1 + LGI_PY_NATIVE <= LGI_HEAD_TRACE)
    m->head_skip = (unsigned)i + 1;
  for (i++; i < k && n < max; i++) {
    ips[n++] = (uint64_t)(uintptr_t)bt[i];
    if (lgi_python_interp_frame((uintptr_t)bt[i])) break;
  }
  uint64_t *sps = m->sps;
  if (e && find_slots(t, cfa0, ips, n, sps) && slots_cacheable(t, cfa0, ips, sps, n)) {
    __atomic_store_n(&e->n, 0, __ATOMIC_RELAXED); /* invalid while being rewritten */
    e->ra0 = ra0;
    e->cfa0 = cfa0;
    e->max = max;
    slots_write(cfa0, ips, sps, n, e->slot_off, e->ra);
    __atomic_store_n(&e->n, n, __ATOMIC_RELEASE);
    /* a signal handler that captured in between rewrote it: drop it */
    if (e->ra0 != ra0 || e->cfa0 != cfa0) __atomic_store_n(&e->n, 0, __ATOMIC_RELAXED);
  }
  return n;
}

/* The learned frame sizes: a table of two-way sets. Direct-mapped (512 entries, as it
 * was), two hot return addresses of one set evicted each other at every unwind; the
 * lookup then stopped early and picked another cache set than the entry was written
 * to, so both stacks missed on every call: two misses a request in the C++ router in
 * one address layout of the libraries, none in another (BENCHMARKS.md, "A
 * layout-dependent cost"). The first way of ip's set, or NULL. */
static inline lgi_fdelta_t *fdelta_set(lgi_unw_mem_t *m, uint64_t ip) {
  return &m->fdelta[((ip * LG_HASH_GOLDEN64) >> (64 - LGI_FDELTA_BITS)) * 2];
}
static inline const lgi_fdelta_t *fdelta_find(lgi_unw_mem_t *m, uint64_t ip) {
  const lgi_fdelta_t *f = fdelta_set(m, ip);
  return f[0].ip == ip ? &f[0] : f[1].ip == ip ? &f[1] : NULL;
}
static inline void fdelta_put1(lgi_fdelta_t *f, uint64_t ip, uint64_t delta) {
  f->ip = 0; /* a signal handler's lookup in between sees no entry */
  __atomic_signal_fence(__ATOMIC_SEQ_CST);
  f->delta = delta;
  __atomic_signal_fence(__ATOMIC_SEQ_CST);
  f->ip = ip;
}
/* ip's frame size: its own way, else the first way, whose entry moves to the second. */
static void fdelta_put(lgi_unw_mem_t *m, uint64_t ip, uint64_t delta) {
  lgi_fdelta_t *f = fdelta_set(m, ip);
  if (f[1].ip == ip) {
    fdelta_put1(&f[1], ip, delta);
    return;
  }
  if (f[0].ip != ip && f[0].ip) fdelta_put1(&f[1], f[0].ip, f[0].delta);
  fdelta_put1(&f[0], ip, delta);
}

/* The stack cache's set for a call at (ra0, cfa0): a hash of ra0, cfa0 and the next
 * LGI_SCACHE_KEYDEPTH return addresses, read from the slots where the frame sizes that
 * earlier unwinds learned (fdelta) put them. In C++ nearly every allocation returns
 * into operator new (ra0) at a stack pointer that depends only on the depth of the
 * call (cfa0): keyed by those two alone, every call chain of one depth fought for one
 * entry, and a request handler missed 98 % of its captures (BENCHMARKS.md, "Where the
 * time goes"). A frame size that is unknown, or wrong (a frame that alloca grew), only
 * picks another set: a hit still needs every cached slot to hold its address. Reads
 * stay between cfa0 and the top of this thread's stack. */
static inline unsigned scache_set(const lgi_tls_t *t, lgi_unw_mem_t *m, uintptr_t ra0, uintptr_t cfa0) {
  uint64_t h = (ra0 ^ (cfa0 << 17)) * LG_HASH_GOLDEN64;
  uintptr_t lo = t->stack_lo, hi = t->stack_hi;
  if (LGI_LIKELY(t->stack_known > 0) && cfa0 - lo < hi - lo) {
    uintptr_t ip = ra0, pos = cfa0 - 8;
    for (int i = 0; i < LGI_SCACHE_KEYDEPTH; i++) {
      const lgi_fdelta_t *f = fdelta_find(m, ip);
      if (!f) break;
      uintptr_t next = pos + f->delta; /* learned deltas are >= 8: next > pos unless wrapped */
      if (next <= pos || next > hi - 8) break;
      pos = next;
      ip = *(const uint64_t *)pos;
      h = (h ^ ip) * LG_HASH_GOLDEN64;
    }
  }
  return (unsigned)(h >> (64 - LGI_SCACHE_SET_BITS));
}

/* Learns the frame sizes of the first LGI_SCACHE_KEYDEPTH frames of a fresh unwind
 * whose slots are known (sps: the stack pointer after each return, sps[0] = cfa0). */
static void fdelta_learn(lgi_unw_mem_t *m, uintptr_t cfa0, const uint64_t *ips, const uint64_t *sps, unsigned n) {
  uintptr_t prev = cfa0 - 8;
  for (unsigned i = 1; i < n && i <= LGI_SCACHE_KEYDEPTH; i++) {
    uintptr_t pos = sps[i] - 8;
    fdelta_put(m, ips[i - 1], pos - prev);
    prev = pos;
  }
}

/* The stack cache's id for a call at (ra0, cfa0) in `space`, or 0 (a miss). */
static inline uint32_t scache_lookup(const lgi_tls_t *t, lgi_unw_mem_t *m, uintptr_t ra0, uintptr_t cfa0,
                                     unsigned space) {
  lgi_scache_ent_t *set = m->cache[scache_set(t, m, ra0, cfa0)];
  for (unsigned w = 0; w < LGI_SCACHE_WAYS; w++) {
    lgi_scache_ent_t *x = &set[w];
    uint32_t id = __atomic_load_n(&x->id, __ATOMIC_ACQUIRE);
    if (LGI_LIKELY(id && x->ra0 == ra0 && x->cfa0 == cfa0 && x->space == (uint8_t)space &&
                   x->pad == (uint8_t)(space >> 8)) &&
        slots_hold(cfa0, x->slot_off, x->ra, x->depth))
      return id;
  }
  return 0;
}

static __attribute__((noinline)) uint32_t capture_miss(lgi_tls_t *t, lgi_unw_mem_t *m, int use_cache, uintptr_t ra0,
                                                       uintptr_t cfa0, unsigned space);

static inline uint32_t capture_native(lgi_tls_t *t, lgi_unw_mem_t *m, int use_cache, uintptr_t ra0, uintptr_t cfa0,
                                      unsigned space) {
  if (use_cache) {
    uint32_t id = scache_lookup(t, m, ra0, cfa0, space);
    if (LGI_LIKELY(id)) return id;
  }
  return capture_miss(t, m, use_cache, ra0, cfa0, space);
}

/* A miss of the stack cache (or no cache: a thread past its destructor): libunwind,
 * then the entry for next time. */
static uint32_t capture_miss(lgi_tls_t *t, lgi_unw_mem_t *m, int use_cache, uintptr_t ra0, uintptr_t cfa0,
                             unsigned space) {
  if (!room_to_unwind(t) || !unwind_enter(t)) {
    uint64_t ip = ra0;
    return lgi_stack_intern(&ip, 1, space);
  }

  /* Miss: unwind with libunwind, skipping the recorder's own frames (their stack
   * pointer is below the caller's). */
  uint64_t *ips = m->ips, *sps = m->sps;
  void **bt = m->bt;
  /* In a Python thread, the innermost native frames (extension code, allocator
   * wrappers) are kept, not the whole native chain: the Python frames identify the
   * site, and deep native recursion would multiply the stacks. */
  unsigned max = lgi_g.depth, n = 0;
  /* libunwind's fast trace (a per-IP frame cache, no system calls once warm) gives
   * the return addresses; the slot of each on the stack, needed by the cache check, is
   * found by scanning upward from the previous one (a return address sits at the top
   * of its caller's frame, above the callee's). unw_step would give the stack pointers
   * directly but costs two sigprocmask calls per frame. */
  int k = backtrace_ips(bt, LG_MAX_DEPTH + 8, ra0), i = 0;
  unwind_leave(t);
  if (k < 0) { /* libunwind not open yet: the caller, not cached */
    uint64_t ip = ra0;
    return lgi_stack_intern(&ip, 1, space);
  }
  while (i < k && (uintptr_t)bt[i] != ra0) i++;
  for (; i < k && n < max; i++) {
    uint64_t ip = (uint64_t)(uintptr_t)bt[i];
    if (ip == 0) break;
    ips[n++] = ip;
  }
  if (n == 0 || ips[0] != ra0) {
    /* The unwinder lost the chain (no CFI for a frame): keep at least the caller. */
    ips[0] = ra0;
    if (n == 0) n = 1;
  }
  int slots_ok = use_cache && find_slots(t, cfa0, ips, n, sps);
  uint32_t id = lgi_stack_intern(ips, n, space);

  /* Cache it if every slot is inside this thread's stack: in the set that the learned
   * frame sizes now give (a later lookup computes the same), in a free way or else the
   * set's next victim. */
  if (slots_ok && n <= LGI_SCACHE_DEPTH && slots_cacheable(t, cfa0, ips, sps, n)) {
    fdelta_learn(m, cfa0, ips, sps, n);
    unsigned si = scache_set(t, m, ra0, cfa0), w = 0;
    lgi_scache_ent_t *set = m->cache[si];
    while (w < LGI_SCACHE_WAYS && set[w].id) w++;
    if (w == LGI_SCACHE_WAYS) w = m->victim[si]++ % LGI_SCACHE_WAYS;
    lgi_scache_ent_t *e = &set[w];
    e->id = 0; /* invalid while being rewritten (signal handlers may look) */
    __atomic_signal_fence(__ATOMIC_SEQ_CST);
    e->ra0 = ra0;
    e->cfa0 = cfa0;
    e->depth = (uint16_t)n;
    e->space = (uint8_t)space;
    e->pad = (uint8_t)(space >> 8); /* GPU ordinal (LGI_SITE_SPACE) */
    slots_write(cfa0, ips, sps, n, e->slot_off, e->ra);
    __atomic_store_n(&e->id, id, __ATOMIC_RELEASE);
  }
  return id;
}

static __attribute__((noinline)) uint32_t capture_slow(lgi_tls_t *t, uintptr_t ra0, uintptr_t cfa0, unsigned space) {
  int tmp;
  lgi_unw_mem_t *m = unw_mem(t, &tmp);
  if (LGI_UNLIKELY(!m)) {
    uint64_t ip = ra0;
    return lgi_stack_intern(&ip, 1, space);
  }
  uint32_t id = capture_native(t, m, !tmp, ra0, cfa0, space);
  if (LGI_UNLIKELY(tmp)) lgi_pages_free(m, sizeof *m);
  return id;
}

/* A stack-cache hit needs no call below this one (the hot path of full mode). */
static inline uint32_t capture_fast(lgi_tls_t *t, uintptr_t ra0, uintptr_t cfa0, unsigned space) {
  lgi_unw_mem_t *m = t->umem;
  if (LGI_LIKELY(m != NULL)) {
    uint32_t id = scache_lookup(t, m, ra0, cfa0, space);
    if (LGI_LIKELY(id)) return id;
  }
  return capture_slow(t, ra0, cfa0, space);
}
uint32_t lgi_capture(lgi_tls_t *t, uintptr_t ra0, uintptr_t cfa0, unsigned space) {
  return capture_fast(t, ra0, cfa0, space);
}

#define LGI_PY_DEPTH 32

static uint32_t py_stack_id(lgi_unw_mem_t *m, const uint64_t *ips, unsigned n, unsigned space) {
  uint64_t hash = lgi_stack_hash(ips, n, space);
  lgi_pyst_ent_t *e = &m->pyst[(hash >> 17) & (LGI_PYST_ENTRIES - 1)];
  if (e->hash == hash && e->id) return e->id;
  uint32_t id = lgi_stack_intern_hashed(ips, n, space, hash);
  if (id != LGI_STACK_OVERFLOW) {
    e->id = 0; /* a signal handler's capture may look at it */
    e->hash = hash;
    __atomic_store_n(&e->id, id, __ATOMIC_RELEASE);
    /* a signal handler that captured in between rewrote it: drop both */
    if (__atomic_load_n(&e->hash, __ATOMIC_RELAXED) != hash) e->id = 0;
  }
  return id;
}

/* The stack id kept for a chain key, 0 when none. A signal handler's capture may
 * rewrite the entry between two reads of this thread: the id counts only when it is
 * the same before and after the key was read. */
static inline uint32_t pychain_get(const lgi_pychain_ent_t *e, uint64_t key, unsigned *under_import) {
  uint32_t id = __atomic_load_n(&e->id, __ATOMIC_ACQUIRE);
  if (!id || __atomic_load_n(&e->key, __ATOMIC_RELAXED) != key) return 0;
  *under_import = __atomic_load_n(&e->under_import, __ATOMIC_RELAXED);
  __atomic_signal_fence(__ATOMIC_SEQ_CST);
  return __atomic_load_n(&e->id, __ATOMIC_RELAXED) == id ? id : 0;
}
static inline void pychain_put(lgi_pychain_ent_t *e, uint64_t key, uint32_t id, unsigned under_import) {
  __atomic_store_n(&e->id, 0, __ATOMIC_RELAXED);
  __atomic_signal_fence(__ATOMIC_SEQ_CST);
  __atomic_store_n(&e->key, key, __ATOMIC_RELAXED);
  __atomic_store_n(&e->under_import, under_import, __ATOMIC_RELAXED);
  __atomic_store_n(&e->id, id, __ATOMIC_RELEASE);
  /* a signal handler that captured in between rewrote it: drop both */
  if (__atomic_load_n(&e->key, __ATOMIC_RELAXED) != key) __atomic_store_n(&e->id, 0, __ATOMIC_RELAXED);
}

/* The thread's chain-cache entry of a Python chain key in `space`; *key becomes the
 * entry's key. */
static inline lgi_pychain_ent_t *pychain_slot(lgi_unw_mem_t *m, uint64_t ckey, unsigned space, uint64_t *key) {
  *key = (ckey ^ space) * LG_HASH_GOLDEN64;
  return &m->pychain[(*key >> 40) & (LGI_PYCHAIN_ENTRIES - 1)];
}

/* pymalloc.c's full-mode fast path: the stack id of an object the interpreter
 * allocates (ra0 in its own code), when this thread's chain cache knows the Python
 * chain and it is not under an import; 0: take the long way (lgi_capture_all, which
 * fills the cache). The caller holds the recursion guard. */
uint32_t lgi_python_site_cached(lgi_tls_t *t, uintptr_t ra0) {
  lgi_unw_mem_t *m = t->umem;
  uint64_t ckey;
  if (LGI_UNLIKELY(!m) || !lgi_python_interp_frame(ra0) || !lgi_python_chain_key(&ckey)) return 0;
  unsigned ui = 0;
  lgi_pychain_ent_t *ce = pychain_slot(m, ckey, LG_SPACE_HOST, &ckey);
  uint32_t id = pychain_get(ce, ckey, &ui);
  return ui ? 0 : id;
}

uint32_t lgi_capture_all(lgi_tls_t *t, uintptr_t ra0, uintptr_t cfa0, unsigned space) {
  t->under_import = 0;
  if (!lgi_python_active()) return capture_fast(t, ra0, cfa0, space);
  int tmp;
  lgi_unw_mem_t *m = unw_mem(t, &tmp);
  if (LGI_UNLIKELY(!m)) return lgi_capture(t, ra0, cfa0, space);
  uint32_t id;
  /* Called from the interpreter itself, the stack is the Python frames alone: known
   * from an earlier allocation under the same chain, it costs one read of the chain's
   * pointers (lgi_python_chain_key) instead of the walk below. */
  lgi_pychain_ent_t *ce = NULL;
  uint64_t ckey = 0;
  if (lgi_python_interp_frame(ra0) && lgi_python_chain_key(&ckey)) {
    ce = pychain_slot(m, ckey, space, &ckey);
    unsigned ui = 0;
    if ((id = pychain_get(ce, ckey, &ui)) != 0) {
      t->under_import = ui;
      if (LGI_UNLIKELY(tmp)) lgi_pages_free(m, sizeof *m);
      return id;
    }
  }
  /* Reading Python frames interns new ones (file and function names on the stack)
   * and may decode a line table: not on a nearly full stack either. */
  int imported = 0;
  unsigned np = room_to_unwind(t) ? lgi_python_frames(t, m->all, LGI_PY_DEPTH, &imported) : 0;
  t->under_import = (imported & LGI_PY_UNDER_IMPORT) != 0;
  if (np == 0) {
    id = capture_native(t, m, !tmp, ra0, cfa0, space);
  } else if (lgi_python_interp_frame(ra0)) {
    /* In a Python thread the native stack is needed only down to the interpreter's
     * own frame: below it, it mirrors the Python frames, and unwinding it (deep,
     * different for every Python call depth) would cost more than the whole
     * allocation. Called from the interpreter itself (object, frame, dict
     * allocations), the Python line alone is the site: which internal C path
     * allocated does not matter to the user and would multiply the sites. */
    id = py_stack_id(m, m->all, np, space);
    if (ce && id != LGI_STACK_OVERFLOW && !tmp) pychain_put(ce, ckey, id, t->under_import);
  } else {
    unsigned nd = native_head(t, m, !tmp, ra0, cfa0, m->all + np,
                              (imported & LGI_PY_IMPORTLIB_C) ? LGI_PY_NATIVE_IMPORT : LGI_PY_NATIVE);
    id = py_stack_id(m, m->all, np + nd, space);
  }
  if (LGI_UNLIKELY(tmp)) lgi_pages_free(m, sizeof *m);
  return id;
}
