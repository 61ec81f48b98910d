/* SPDX-License-Identifier: MIT */
/*
 * recorder.h - internals of libleakguard.so shared by the capture files.
 *
 * preload.c        the interposed malloc family (block header, sampling, counting)
 * pymalloc.c       CPython's small-object allocator wrapped (the same accounting)
 * lifecycle.c      lazy init, the hello to the collector, fork and _Fork,
 *                  LD_PRELOAD for exec'd children, process exit
 * thread.c         per-thread setup (lgi_thread_ready, the countdown's slow path)
 * mmap_table.c     mmap, munmap, mremap and the table of recorded anonymous ranges
 * dl.c             dlopen/dlmopen: RTLD_DEEPBIND dropped, new namespaces reported
 * dlsym_real.c     glibc's own dlsym, for dl.c's entries and the GPU vendors
 * procs.c          exec family (LG_PS_EXECED) and wait family (reaped-children ring)
 * unwind.c         stack capture: a per-thread cache of verified stacks in front of
 *                  libunwind
 * region_writer.c  the shared region: stack interning, module map, counter shards
 * pages.c          pages from the kernel and the region's spin lock
 *
 * Rules for everything in this directory (they are what makes a malloc hook safe):
 *  - never allocate through the interposed allocator (use lgi_pages_alloc, i.e. mmap),
 *  - never call stdio or anything that may take a lock held by unknown code,
 *  - the thread-local recursion guard (lgi_tls.guard) is checked first,
 *  - only our own spin lock, held for bounded time, and never by a thread that could
 *    be interrupted by itself (the guard makes nested hooks pass through).
 */
#ifndef LG_CAPTURE_RECORDER_H
#define LG_CAPTURE_RECORDER_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

#include "capture/nolibm.h"
#include "core/blockhdr.h"
#include "core/region.h"

#define LGI_HIDDEN __attribute__((visibility("hidden")))
#define LGI_LIKELY(x) __builtin_expect(!!(x), 1)

/* CLOCK_MONOTONIC in nanoseconds (the vDSO: no system call, no allocation). */
static inline uint64_t lgi_now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}
#define LGI_UNLIKELY(x) __builtin_expect(!!(x), 0)

/* Stack cache entry (per thread; LGI_SCACHE_SETS sets of LGI_SCACHE_WAYS entries,
 * unwind.c). A hit needs the same return address into the malloc caller and the same
 * caller stack pointer, and every saved return address of the cached stack still at
 * its slot on the stack. */
#define LGI_SCACHE_SET_BITS 6
#define LGI_SCACHE_SETS (1u << LGI_SCACHE_SET_BITS)
#define LGI_SCACHE_WAYS 4
#define LGI_SCACHE_DEPTH 64
typedef struct lgi_scache_ent {
  uint64_t ra0, cfa0;
  uint32_t id;
  uint16_t depth;
  uint8_t space;
  uint8_t pad;                         /* GPU ordinal of GPU spaces (the site key is space + device) */
  uint32_t slot_off[LGI_SCACHE_DEPTH]; /* slot address - cfa0 of frame i's return address */
  uint64_t ra[LGI_SCACHE_DEPTH];
} lgi_scache_ent_t;

/* The per-thread memory of stack capture (unwind.c), mmap'd on the thread's first
 * capture: the stack cache and the buffers of an unwind, which would otherwise take
 * ~8 KiB of the stack of whatever the program was doing (a signal handler on a small
 * alternate stack, the bottom of a deep recursion). One capture per thread at a time:
 * every caller holds the recursion guard. */
typedef struct lgi_unw_mem lgi_unw_mem_t;

#define LGI_TAG_DEPTH 8
typedef struct lgi_tls {
  int guard;         /* > 0 while inside the recorder: nested calls pass through */
  int state;         /* 0 new, 1 ready, 2 exited (thread destructor ran) */
  int64_t countdown; /* bytes until the next recorded allocation; <= 0: record */
  uint64_t rng;
  lg_shard_desc_t *shard; /* NULL: use the shared atomic shard 0 */
  uint64_t *chunk_dir;
  int shard_atomic;
  uintptr_t stack_lo, stack_hi; /* this thread's own stack, once stack_known */
  int stack_known;              /* 0 not yet, 1 yes, -1 unknown (no bounds) */
  int in_getattr;               /* inside the program's pthread_getattr_np (unwind.c) */
  int in_unwind;                /* inside libunwind (unwind.c: fork waits for none) */
  lgi_unw_mem_t *umem;          /* unwind.c's cache and buffers, mmap'd on first use */
  uint16_t tag;                 /* current lg_tag_push() tag, 0 = none */
  uint16_t tag_depth;
  uint16_t tag_stack[LGI_TAG_DEPTH];
  uint16_t quota_tag; /* quota crossed inside the allocator: callback pending */
  int64_t quota_live;
  void *pycache; /* python.c's per-thread frame cache */
  /* Imports sampled (lgi_global_t.import_sample): under_import is what the last
   * lgi_capture_all saw; imp, whether this thread's allocations are sampled now (set
   * from under_import at each recorded allocation, cleared by the first allocation
   * outside the import), imp_countdown the bytes to its next sample. */
  int under_import;
  int imp;
  int64_t imp_countdown;
  int py_arena; /* inside pymalloc's arena allocator (pymalloc.c): its mmap is not recorded */
  /* Lazy start (thread.c): the chunk of bytes this thread's countdown was last given
   * while the process waits (0: none yet); what it used of it is chunk - countdown. */
  int64_t lazy_chunk;
} lgi_tls_t;

LGI_HIDDEN extern __thread lgi_tls_t lgi_tls;

/* Global recorder state. */
typedef struct lgi_global {
  lg_region_hdr_t *hdr;    /* NULL when not recording */
  int fd;                  /* the region's memfd: the program may close or reuse the
                           * number (close_range, dup2), so check lgi_fd_is() first */
  uint64_t fd_dev, fd_ino; /* identity of the memfd when it was created */
  int conn;                /* the connection to the collector, -1 if none; same caveat */
  uint64_t conn_dev, conn_ino;
  int enabled; /* recording into hdr */
  /* The region is this image's and the collector has it: recording (enabled) or
   * waiting for its lazy start (lazy). Process-level marks (exec, exit, reaped
   * children) are written whenever it is set. */
  int live;
  /* Lazy start (core/region.h LG_LAZY_*, thread.c lgi_lazy_due): set while this image
   * waits; it begins when lazy_count reaches lazy_bytes or lazy_ns have passed since
   * lazy_t0 (checked once per LGI_LAZY_CHUNK bytes a thread allocates). */
  int lazy;
  /* A waiting image's fork child that has not said hello (lifecycle.c lazy_fork_child):
   * hdr is a private stand-in; its own region and hello come when it begins, and an
   * image it execs says its own. */
  int silent;
  int32_t silent_pid; /* its pid: a vfork child of it shares lgi_g and is not it */
  uint64_t lazy_bytes, lazy_ns, lazy_t0;
  _Atomic uint64_t lazy_count;
  uint32_t rflags;      /* the region's flags (LG_RF_*), for a lazy fork child's own region */
  uint64_t region_dirs; /* the offset of the shards' chunk directories (lgi_region_open) */
  uint32_t depth;
  uint64_t sample_bytes;
  uint64_t import_sample; /* full mode: bytes per sample under a Python import (0: none) */
  int follow;
  int fork_fd; /* the next child's copy of the region (lgi_region_fork_prepare), or -1 */
  char sock_path[108];
  /* libleakguard.so's lazy init (lifecycle.c), run by lgi_thread_ready (thread.c): 1
   * when the process is initialised, 0 when not (yet). Unused by the attach agent. */
  int (*process_init)(void);
  /* The lazy start's end (lifecycle.c): recording begins now; 1 when it has. */
  int (*process_begin)(void);
} lgi_global_t;

/* The bytes a waiting thread allocates between two looks at the lazy start's
 * thresholds (a clock read each): a slow grower begins within this much of them. */
#define LGI_LAZY_CHUNK ((int64_t)32 << 10)

LGI_HIDDEN extern lgi_global_t lgi_g;

/* ---- pages.c */

/* Spin lock of the region's slow path. */
LGI_HIDDEN void lgi_lock(void);
LGI_HIDDEN void lgi_unlock(void);
/* Pages from the kernel, never from malloc. */
LGI_HIDDEN void *lgi_pages_alloc(size_t bytes);
LGI_HIDDEN void lgi_pages_free(void *p, size_t bytes);

/* ---- region_writer.c */

/* 1 when fd is still open on the file whose device and inode were saved (the program
 * has not closed it or put another file at that number). No allocation, raw fstat. */
LGI_HIDDEN int lgi_fd_is(int fd, uint64_t dev, uint64_t ino);
/* Saves fd's device and inode in *dev, *ino (0, 0 when fstat fails). */
LGI_HIDDEN void lgi_fd_identity(int fd, uint64_t *dev, uint64_t *ino);
/* Connects to the collector and sends a hello (LG_HELLO_START, LG_HELLO_FORK) with the
 * region's memfd; keeps the connection in lgi_g.conn. The socket, or -1. */
LGI_HIDDEN int lgi_send_hello(unsigned kind);

/* Creates and maps a region sized for `depth`-frame stacks; returns 0 or -errno. */
LGI_HIDDEN int lgi_region_create(uint32_t depth, uint64_t sample_bytes, uint32_t flags, int lazy);
/* Opens a region made lazily (lgi_region_create's lazy) for recording: stack records
 * and counter shards. */
LGI_HIDDEN void lgi_region_open(lg_region_hdr_t *h);
/* fork. Before it, in the parent with the region lock held: copies the region into a
 * new memfd (lgi_g.fork_fd), the child's. After it, in the parent: closes that memfd.
 * In the child: maps it at the region's address in place of the inherited shared
 * mapping. 0 or -errno (then the child is not recorded). */
LGI_HIDDEN int lgi_region_fork_prepare(void);
LGI_HIDDEN void lgi_region_fork_discard(void);
LGI_HIDDEN int lgi_region_fork_adopt(void);
/* Interns a stack (ips[0] innermost) and returns its id (>= 2), or LGI_STACK_OVERFLOW
 * when the tables are full (counted in hdr->dropped). Lock-free when known. */
#define LGI_STACK_OVERFLOW 1u
LGI_HIDDEN uint32_t lgi_stack_intern(const uint64_t *ips, unsigned depth, unsigned space);
/* The same, with the stack's hash (lgi_stack_hash) already computed. */
LGI_HIDDEN uint64_t lgi_stack_hash(const uint64_t *ips, unsigned depth, unsigned space);
LGI_HIDDEN uint32_t lgi_stack_intern_hashed(const uint64_t *ips, unsigned depth, unsigned space, uint64_t hash);
/* Counters of `site` in this thread's shard (allocating the chunk if needed), or NULL. */
LGI_HIDDEN lg_site_ctr_t *lgi_site_ctr(lgi_tls_t *t, uint32_t site);
/* Acquires a shard for the calling thread. */
LGI_HIDDEN void lgi_shard_acquire(lgi_tls_t *t);
LGI_HIDDEN void lgi_shard_release(lgi_tls_t *t);

/* ---- preload.c, for the other hooks (mmap_table.c, the cuda*.c files) and lifecycle.c */

/* Adds bytes/blocks to site in this thread's shard (alloc: also to the allocation
 * totals). The caller holds the recursion guard exactly once. */
LGI_HIDDEN void lgi_count(lgi_tls_t *t, uint32_t site, int64_t bytes, int64_t blocks, uint32_t epoch, int alloc);
/* The region's epoch (birth time of a block). */
LGI_HIDDEN uint32_t lgi_epoch(void);
/* Finds the real allocator (once; a concurrent caller waits for the first). */
LGI_HIDDEN void lgi_resolve_real(void);
/* The loaded object holding p (l_name: "" for the program), NULL when unknown
 * (capture/preload.c). */
struct link_map;
LGI_HIDDEN struct link_map *lgi_map_of(const void *p);
/* The code of the next allocator when it is not glibc's (else 0, 0): an anonymous
 * mapping made from [lgi_alloc_lo, lgi_alloc_hi) is its own arena, not recorded. */
LGI_HIDDEN extern uintptr_t lgi_alloc_lo, lgi_alloc_hi;

/* The `space` argument of lgi_stack_intern/lgi_capture*: lg_space_t in bits 0-7 and,
 * for GPU spaces, the device ordinal in bits 8-15 (sites differ by device). */
#define LGI_SITE_SPACE(space, dev) ((unsigned)(space) | ((unsigned)((dev)&0xff) << 8))

/* The function preload.c defines for an allocator name (malloc, free, __libc_free,
 * malloc_usable_size...), NULL for any other name; for dl.c's dlsym/dlvsym. */
LGI_HIDDEN void *lgi_alloc_own(const char *name);
/* The same for mmap_table.c's names (mmap, mmap64, munmap, mremap). */
LGI_HIDDEN void *lgi_mmap_own(const char *name);

/* ---- preload.c, for pymalloc.c (CPython's allocator wrapped) */

/* 1 when every block gets a header (the allocator underneath is not glibc's). */
LGI_HIDDEN extern int lgi_head_all;
/* Fast-path test: 1 when a block of size bytes goes without a header (and then counts
 * it down). */
static inline int lgi_unheaded(lgi_tls_t *t, size_t size) {
  int64_t c = t->countdown - (int64_t)size;
  if (LGI_LIKELY(c > 0) && LGI_LIKELY(!t->tag) && LGI_LIKELY(!lgi_head_all)) {
    t->countdown = c;
    return 1;
  }
  return 0;
}
/* Slow path of the countdown: 1 when this block is to be recorded. */
LGI_HIDDEN int lgi_decide(lgi_tls_t *t, size_t size);
/* 1 when a block not recorded still needs a header (tagged, or every block headed). */
static inline int lgi_need_head(const lgi_tls_t *t) { return lgi_head_all || (t->tag && !t->guard); }
/* Heads the caller's fresh block at base + 2^offlog2 (flags or'ed into its word),
 * records it when rec, counts its tag: the user pointer, or NULL (a failing quota). */
LGI_HIDDEN void *lgi_head_finish(lgi_tls_t *t, void *base, size_t size, unsigned offlog2, uint64_t flags, int rec,
                                 uintptr_t ra0, uintptr_t cfa0);
/* The bookkeeping of a headed block's free (its site's counters, its tag); the caller
 * then frees the block's base. */
LGI_HIDDEN void lgi_free_count(lg_blk_t *b);
LGI_HIDDEN void *lgi_real_malloc(size_t size);
LGI_HIDDEN void *lgi_real_calloc(size_t n, size_t size);

/* ---- dl.c: dlsym and dlvsym of the interposed allocator names */

/* For the RTLD_NEXT entry of dlsym/dlvsym (version NULL for dlsym): our own function
 * when name is interposed here and the caller's lookup would give the function we
 * wrap (the caller is a library after us in load order, not that function's own);
 * NULL: the caller gets glibc's answer. */
LGI_HIDDEN void *lgi_dl_next_alloc(const char *name, const char *version, uintptr_t caller);
/* For lookups with an explicit handle: r, or our own function when r is the function
 * we wrap for name. */
LGI_HIDDEN void *lgi_dl_alloc_result(const char *name, void *r, uintptr_t caller);

/* ---- dlsym_real.c: glibc's dlsym (for dl.c's entries and the GPU vendors' hooks) */

/* glibc's dlsym, never ours (found with dlvsym, which is ours too but passes our own
 * lookups through). */
LGI_HIDDEN void *lgi_dlsym_resolve(void);
/* The same once found (NULL before): read by dl.c's assembly entries; hidden, so never
 * preempted. */
LGI_HIDDEN extern void *lgi_real_dlsym_ptr;

/* ---- gpu/table.c (GPU memory of any vendor: the records; gpu/gpu.h for the GPU files) */

/* fork: 0 prepare (takes the GPU table lock), 1 parent, 2 child (release it). */
LGI_HIDDEN void lgi_gpu_atfork(int phase);
/* The site of the recorded managed block containing addr (LG_CUDA_UM_UNKNOWN: none). */
LGI_HIDDEN uint32_t lgi_gpu_managed_site(uint64_t addr);

/* ---- thread.c (agent/thread.c in the attach agent) */

/* 1 when the process records and this thread is set up (initialising both if needed). */
LGI_HIDDEN int lgi_thread_ready(lgi_tls_t *t);
/* The pthread key whose destructor is lgi_thread_exit (lifecycle.c's init). */
LGI_HIDDEN void lgi_thread_key_create(void);

/* ---- lifecycle.c: lifecycle helpers used by the other hooks */

/* The fork handlers (pthread_atfork), also run around _Fork(), which skips them. */
LGI_HIDDEN void lgi_atfork_prepare(void);
LGI_HIDDEN void lgi_atfork_parent(void);
LGI_HIDDEN void lgi_atfork_child(void);
LGI_HIDDEN void lgi_breaker_atfork_child(void); /* breaker.c: restart the watcher */
/* One line on stderr with write(2) (no stdio, no allocation); "leakguard: " is
 * prepended and a newline appended. */
LGI_HIDDEN void lgi_say(const char *a, const char *b, const char *c);

/* ---- mmap_table.c */

/* The lock of the table of recorded ranges, for the fork handlers (lifecycle.c): taken
 * after the region's lock, dropped in the parent and the child. */
LGI_HIDDEN void lgi_mm_lock_take(void);
LGI_HIDDEN void lgi_mm_lock_drop(void);
/* mremap's fifth argument (the new address), passed only with MREMAP_FIXED: read in the
 * hook itself (mmap_hooks.c, agent/hooks.c), which is the variadic function. */
#define LGI_MREMAP_WANT(flags, want)                                                                                   \
  do {                                                                                                                 \
    if ((flags)&MREMAP_FIXED) {                                                                                        \
      va_list ap_;                                                                                                     \
      va_start(ap_, flags);                                                                                            \
      (want) = va_arg(ap_, void *);                                                                                    \
      va_end(ap_);                                                                                                     \
    }                                                                                                                  \
  } while (0)

/* A hidden alias of one of our interposed functions (lgi_own_NAME), so that its address
 * is our own definition's, not whatever the global scope binds NAME to: what dl.c hands
 * out for a lookup by name (preload.c, mmap_hooks.c). */
#if defined(__GNUC__) && !defined(__clang__)
#define LGI_OWN(name)                                                                                                  \
  extern __typeof__(name) lgi_own_##name __attribute__((alias(#name), copy(name), visibility("hidden")));
#else
#define LGI_OWN(name) extern __typeof__(name) lgi_own_##name __attribute__((alias(#name), visibility("hidden")));
#endif

/* mmap_table.c: what the mmap hooks tell the table of recorded anonymous ranges (a new
 * mapping, anonymous or not: it replaces what it overlaps; an unmapped range; a moved
 * or resized one), and its reset for a new attach. */
LGI_HIDDEN void lgi_mm_mapped(void *addr, size_t len, int anon, uintptr_t ra0, uintptr_t cfa0);
LGI_HIDDEN void lgi_mm_unmapped(void *addr, size_t len);
LGI_HIDDEN void lgi_mm_remapped(void *old, size_t old_len, void *p, size_t new_len, int flags);
LGI_HIDDEN void lgi_mm_reset(void);
/* Forgets the recorded ranges that the Python interpreter's own code mapped (pymalloc.c). */
LGI_HIDDEN void lgi_mm_forget_interp(void);

/* ---- procs.c (exec and wait families) */

/* Resolves the real exec and wait functions (called from the recorder's init). */
LGI_HIDDEN void lgi_procs_init(void);

/* ---- breaker.c */

/* Counts size bytes for tag. With check, returns 1 when the tag is over a failing
 * quota (the caller fails the allocation), and records a pending quota callback in t. */
LGI_HIDDEN int lgi_tag_alloc(lgi_tls_t *t, unsigned tag, size_t size, int check);
LGI_HIDDEN void lgi_tag_free(unsigned tag, size_t size);
/* Runs a pending quota callback (outside the allocator's bookkeeping). */
LGI_HIDDEN void lgi_tag_fire(lgi_tls_t *t);

/* ---- python.c (CPython 3.9-3.13 frames, layouts in pylayout.h) */

/* Looks for a CPython interpreter in the process (again after dlopen); picks its
 * layout, or says once on stderr that its frames cannot be read. */
LGI_HIDDEN void lgi_python_detect(void);
LGI_HIDDEN extern int lgi_py_state; /* python.c: 0 not looked, 1 active, -1 none */
/* Inline: asked on every recorded allocation. */
static inline int lgi_python_active(void) { return __atomic_load_n(&lgi_py_state, __ATOMIC_ACQUIRE) == 1; }
/* Writes up to max Python frames (LG_PYFRAME_BIT | pyframe id), innermost first, of
 * the calling thread; 0 when it runs no Python code. */
LGI_HIDDEN unsigned lgi_python_frames(lgi_tls_t *t, uint64_t *out, unsigned max, int *imported);
/* 1 with a key of the calling thread's whole Python chain (pointers only, no interning):
 * equal keys, equal lgi_python_frames results; 0 when there is none or it is too long. */
LGI_HIDDEN int lgi_python_chain_key(uint64_t *key);
/* *imported of lgi_python_frames: the walk stopped at the frame that runs a module's
 * body during an import; and the allocating code is C that importlib called itself. */
#define LGI_PY_UNDER_IMPORT 1
#define LGI_PY_IMPORTLIB_C 2
/* 1 while the calling thread runs under an import (frame pointers only: preload.c's
 * decide() for a thread whose imports are sampled). */
LGI_HIDDEN int lgi_python_under_import(void);
/* Full mode with pymalloc wrapped: code objects' deaths are counted from then on
 * (python.c); pymalloc.c's free calls lgi_python_code_died for every object it frees. */
LGI_HIDDEN void lgi_python_count_code_deaths(void);
LGI_HIDDEN extern int lgi_py_code_gen_on;
LGI_HIDDEN extern uint64_t lgi_py_code_gen;
LGI_HIDDEN extern uintptr_t lgi_py_code_type;
static inline void lgi_python_code_died(const void *obj) {
  /* ob_type, 8 bytes into any object; every block PyObject_Free gets has 16 bytes. Not
   * counting yet (code_type 0): a block with 0 there is no code object, and a shared
   * counter bumped by every such free would only bounce its cache line. */
  uintptr_t ct = lgi_py_code_type;
  if (LGI_UNLIKELY(ct != 0 && ((const uintptr_t *)obj)[1] == ct))
    __atomic_fetch_add(&lgi_py_code_gen, 1, __ATOMIC_RELEASE);
}
/* 1 when ip lies in the interpreter's own module (python3.X or libpython3.X). */
LGI_HIDDEN extern uintptr_t lgi_py_interp_lo, lgi_py_interp_hi;
static inline int lgi_python_interp_frame(uint64_t ip) {
  return ip - lgi_py_interp_lo < lgi_py_interp_hi - lgi_py_interp_lo;
}
/* Forgets the pyframe ids of the previous region (agent/start.c: a new attach, a new region). */
LGI_HIDDEN void lgi_python_reset(void);
LGI_HIDDEN void lgi_python_cache_clear(lgi_tls_t *t); /* the per-thread frame cache (benchmarks) */
/* Releases the calling thread's frame cache (thread exit). */
LGI_HIDDEN void lgi_python_thread_exit(lgi_tls_t *t);

/* ---- unwind.c */

/* Returns the stack id of the current call chain. ra0 is the return address into
 * the caller of the hook, cfa0 the caller's stack pointer after the call returns. */
LGI_HIDDEN uint32_t lgi_capture(lgi_tls_t *t, uintptr_t ra0, uintptr_t cfa0, unsigned space);
/* lgi_capture plus, in a Python thread, the Python frames in front. */
LGI_HIDDEN uint32_t lgi_capture_all(lgi_tls_t *t, uintptr_t ra0, uintptr_t cfa0, unsigned space);
/* The stack id of an allocation by the interpreter (ra0 in its code) from the thread's
 * Python chain cache, not under an import; 0 when not cached (pymalloc.c). */
LGI_HIDDEN uint32_t lgi_python_site_cached(lgi_tls_t *t, uintptr_t ra0);
LGI_HIDDEN void lgi_unwind_init(void);
/* The dynamic loader's code [lo, hi) (preload.c): no dlopen for its own allocations */
LGI_HIDDEN void lgi_unwind_loader_is(uintptr_t lo, uintptr_t hi);
/* Finds the thread's stack bounds (its first allocation: lgi_thread_ready). */
LGI_HIDDEN void lgi_unwind_thread_start(lgi_tls_t *t);
LGI_HIDDEN void lgi_unwind_thread_exit(lgi_tls_t *t);
/* fork: the prepare handler waits until no other thread is inside libunwind (whose
 * locks, and glibc's dl_iterate_phdr lock, a child would inherit held); the others
 * then release the threads that wait to unwind. */
LGI_HIDDEN void lgi_unwind_fork_prepare(lgi_tls_t *t);
LGI_HIDDEN void lgi_unwind_fork_parent(void);
/* 0: a thread was still inside libunwind (or this one, interrupted by the handler
 * that forks): the child must not be recorded. */
LGI_HIDDEN int lgi_unwind_fork_child(lgi_tls_t *t);

/* ---- accounting, shared by the preload library (preload.c) and the attach agent
 * (agent/hooks.c): inline, on their hot paths. */

/* The thread's next Exp(mean) draw: bytes to the next sampled byte (xorshift64). */
static inline double lgi_next_exp(lgi_tls_t *t, double mean) {
  t->rng ^= t->rng << 13;
  t->rng ^= t->rng >> 7;
  t->rng ^= t->rng << 17;
  double u = ((double)(t->rng >> 11) + 0.5) * (1.0 / 9007199254740992.0);
  return -lgi_ln(u) * mean;
}

/* Estimated bytes represented by one sampled block of `size` bytes: each byte is
 * sampled with probability 1/B, so the block is with p = 1 - exp(-size/B). */
static inline int64_t lgi_weight_bytes_at(size_t size, uint64_t B) {
  if (!B || !size) return (int64_t)size; /* size 0: p = 0, size / p would be NaN */
  double p = lgi_one_minus_exp_neg((double)size / (double)B);
  return (int64_t)((double)size / p + 0.5);
}
static inline int64_t lgi_weight_blocks_at(size_t size, uint64_t B) {
  if (!B || !size) return 1;
  double p = lgi_one_minus_exp_neg((double)size / (double)B);
  int64_t w = (int64_t)(1.0 / p + 0.5);
  return w < 1 ? 1 : w;
}
static inline int64_t lgi_weight_bytes(size_t size) { return lgi_weight_bytes_at(size, lgi_g.sample_bytes); }
static inline int64_t lgi_weight_blocks(size_t size) { return lgi_weight_blocks_at(size, lgi_g.sample_bytes); }

#define LGI_NO_STEP LG_BLK_NO_STEP

/* The age in steps of a block born at epoch, `ticks` ticks ago, now that `steps` steps
 * are marked (bstep: blockhdr.h lg_step_age); UINT32_MAX once its birth tick's slot of
 * the step map is another tick's. */
static inline uint32_t lgi_step_age(const lg_region_hdr_t *h, uint32_t epoch, uint32_t ticks, uint32_t steps,
                                    uint32_t bstep) {
  if (ticks >= LG_STEPMAP) return UINT32_MAX;
  const uint32_t *map = LG_PTR(h, h->stepmap_off, const uint32_t *);
  return lg_step_age(__atomic_load_n(&map[epoch % LG_STEPMAP], __ATOMIC_RELAXED), steps, bstep);
}

/* Adds bytes and blocks (negative: a free) to site's counters in the thread's shard,
 * born at epoch (and at step bstep modulo LG_BLK_STEP_MOD, or LGI_NO_STEP); alloc:
 * also to the allocated totals. */
static inline __attribute__((always_inline)) void lgi_ctr_update_at(lgi_tls_t *t, uint32_t site, int64_t bytes,
                                                                    int64_t blocks, uint32_t epoch, uint32_t bstep,
                                                                    int alloc) {
  int shared = t->shard_atomic || t->guard > 1 || !t->chunk_dir;
  lgi_tls_t tmp;
  if (t->guard > 1) { /* nested (signal handler inside a hook): shared shard only */
    memset(&tmp, 0, sizeof tmp);
    tmp.state = 2;
    tmp.guard = t->guard;
    lgi_shard_acquire(&tmp);
    t = &tmp;
  }
  /* the site's chunk of counters, installed: no call (region_writer.c installs one) */
  lg_site_ctr_t *c;
  uint64_t coff = t->chunk_dir ? __atomic_load_n(&t->chunk_dir[site / LG_SITES_PER_CHUNK], __ATOMIC_ACQUIRE) : 0;
  if (LGI_LIKELY(coff)) c = LG_PTR(lgi_g.hdr, coff, lg_site_ctr_t *) + site % LG_SITES_PER_CHUNK;
  else if (!(c = lgi_site_ctr(t, site))) return;
  unsigned era = lg_era(epoch);
  /* A free (blocks < 0), or the undoing of one (a refused free or realloc: blocks > 0
   * without alloc), counts the block's age in ticks into freed_age. */
  int32_t freed = blocks < 0 ? (int32_t)-blocks : !alloc ? -(int32_t)blocks : 0;
  unsigned age = 0, sage = LG_AGES; /* sage: the age in steps, LG_AGES: none (no steps) */
  if (freed) {
    lg_region_hdr_t *h = lgi_g.hdr;
    uint32_t now = __atomic_load_n(&h->epoch, __ATOMIC_RELAXED);
    uint32_t ticks = now > epoch ? now - epoch : 0;
    age = lg_age_bucket(ticks);
    uint32_t steps = (uint32_t)__atomic_load_n(&h->steps, __ATOMIC_RELAXED);
    if (steps) sage = lg_age_bucket(lgi_step_age(h, epoch, ticks, steps, bstep));
  }
  if (shared) {
    __atomic_fetch_add(&c->live_bytes, bytes, __ATOMIC_RELAXED);
    __atomic_fetch_add(&c->live_blocks, blocks, __ATOMIC_RELAXED);
    __atomic_fetch_add(&c->era_blocks[era], (int32_t)blocks, __ATOMIC_RELAXED);
    if (alloc) {
      __atomic_fetch_add(&c->alloc_bytes, (uint64_t)bytes, __ATOMIC_RELAXED);
      __atomic_fetch_add(&c->alloc_blocks, (uint64_t)blocks, __ATOMIC_RELAXED);
    }
    if (freed) __atomic_fetch_add(&c->freed_age[age], freed, __ATOMIC_RELAXED);
    if (sage < LG_AGES) __atomic_fetch_add(&c->freed_step_age[sage], freed, __ATOMIC_RELAXED);
  } else {
    /* Single writer: plain stores, 8-byte aligned so the collector never sees a torn value. */
    __atomic_store_n(&c->live_bytes, c->live_bytes + bytes, __ATOMIC_RELAXED);
    __atomic_store_n(&c->live_blocks, c->live_blocks + blocks, __ATOMIC_RELAXED);
    __atomic_store_n(&c->era_blocks[era], c->era_blocks[era] + (int32_t)blocks, __ATOMIC_RELAXED);
    if (alloc) {
      __atomic_store_n(&c->alloc_bytes, c->alloc_bytes + (uint64_t)bytes, __ATOMIC_RELAXED);
      __atomic_store_n(&c->alloc_blocks, c->alloc_blocks + (uint64_t)blocks, __ATOMIC_RELAXED);
    }
    if (freed) __atomic_store_n(&c->freed_age[age], c->freed_age[age] + freed, __ATOMIC_RELAXED);
    if (sage < LG_AGES) __atomic_store_n(&c->freed_step_age[sage], c->freed_step_age[sage] + freed, __ATOMIC_RELAXED);
  }
}

static inline void lgi_ctr_update(lgi_tls_t *t, uint32_t site, int64_t bytes, int64_t blocks, uint32_t epoch,
                                  int alloc) {
  lgi_ctr_update_at(t, site, bytes, blocks, epoch, LGI_NO_STEP, alloc);
}

/* A headed block recorded at site (0: a stack that could not be interned) for bytes
 * and blocks (its sampling weight): its site's counters, its birth tick and step
 * (record_alloc in preload.c, pymalloc.c's fused path). The caller holds the guard. */
static inline void lgi_blk_record(lgi_tls_t *t, lg_blk_t *b, uint32_t site, int64_t bytes, int64_t blocks) {
  lg_region_hdr_t *h = lgi_g.hdr;
  uint32_t ep = __atomic_load_n(&h->epoch, __ATOMIC_RELAXED);
  lgi_ctr_update(t, site, bytes, blocks, ep, 1);
  b->epoch = ep;
  b->site = site ? lg_blk_site_word(site, __atomic_load_n(&h->steps, __ATOMIC_RELAXED)) : 0;
}

/* The bookkeeping of a headed block's free in the common case, inline (preload.c's
 * free, pymalloc.c's): recorded in full (no sampling weight), untagged, freed by a
 * set-up thread of a recording process outside the recorder. 0: not that case, the
 * caller calls lgi_free_count. */
static inline int lgi_free_fast(lgi_tls_t *t, const lg_blk_t *b) {
  uint32_t sw = b->site;
  uint64_t w = b->word;
  if (!sw || (w & (LG_BLK_TAG_MASK | LG_BLK_SAMPLED)) || lgi_g.sample_bytes || !LGI_LIKELY(t->state == 1) ||
      !LGI_LIKELY(lgi_g.enabled) || t->guard)
    return 0;
  t->guard++;
  lgi_ctr_update_at(t, lg_blk_site(sw), -(int64_t)lg_blk_word_size(w), -1, b->epoch, lg_blk_birth_step(sw), 0);
  t->guard--;
  return 1;
}

/* The destructor of a recorded thread's pthread key: gives back its shard and its
 * unwinder's and Python's per-thread state (thread.c, agent/thread.c). */
static inline void lgi_thread_exit(void *arg) {
  (void)arg;
  lgi_tls_t *t = &lgi_tls;
  t->guard++;
  lgi_shard_release(t);
  lgi_unwind_thread_exit(t);
  lgi_python_thread_exit(t);
  t->state = 2;
  t->guard--;
}

#endif
