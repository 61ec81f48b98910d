/* SPDX-License-Identifier: MIT */
/*
 * preload.c - libleakguard.so: the interposed malloc family (the recorder's lifecycle
 * is in lifecycle.c, anonymous mmap in mmap_table.c).
 *
 * A block that is recorded carries a 16-byte header in front of it (lg_blk_t,
 * src/core/blockhdr.h): the stack id of its allocation site, its birth epoch, its
 * requested size and the offset back to the underlying allocator's pointer. free()
 * reads the header, so no global address table or lock is needed, and the recorder
 * memory per recorded block is those 16 bytes. Blocks that are not recorded (in
 * sampled mode almost all) go to glibc as they are, without a header; free() tells
 * them apart by a mark bit that glibc's own chunk header never has. This follows
 * glibc's documented malloc replacement contract: all of malloc, free, calloc, realloc,
 * memalign, posix_memalign, aligned_alloc, valloc, pvalloc, malloc_usable_size are
 * replaced.
 *
 * Hot path: one per-thread countdown decides (a) sampling and (b) "not ready yet":
 * while it stays positive an allocation is passed through untouched (a tail call). In
 * full mode it is always 0, so every allocation is headed and recorded.
 *
 * Also here: glibc's __libc_* allocator names and free_sized, which must not reach
 * glibc with our header (docs/design.md, "Mismatched allocator paths").
 */
#include <errno.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <dlfcn.h>
#include <link.h>
#include <malloc.h>

#include "capture/recorder.h"
#include "core/blockhdr.h"
#include "core/platform.h"
#include "leakguard.h"

__thread lgi_tls_t lgi_tls __attribute__((tls_model("initial-exec")));

/* ------------------------------------------------------------------ block header
 * Layout and the reason for the mark bit: src/core/blockhdr.h. */

#define HDR LG_BLK_HDR
static inline lg_blk_t *blk_of(void *p) { return (lg_blk_t *)((char *)p - HDR); }
static inline uint64_t word_of(const void *p) { return ((const uint64_t *)p)[-1]; }
static inline size_t blk_size(const lg_blk_t *b) { return lg_blk_word_size(b->word); }
static inline size_t blk_offset(const lg_blk_t *b) { return (size_t)1 << lg_blk_word_offlog2(b->word); }
static inline void *blk_base(void *p) { return (char *)p - blk_offset(blk_of(p)); }
static inline unsigned blk_tag(const lg_blk_t *b) { return lg_blk_word_tag(b->word); }

/* 1 when every block gets a header: the allocator underneath is not glibc's, so the
 * word in front of its blocks tells us nothing. Set by lgi_resolve_real() before the first
 * block is handed out, never changed after. */
int lgi_head_all;

/* ------------------------------------------------------------------ real allocator */

static void *(*real_malloc)(size_t);
static void (*real_free)(void *);
static void *(*real_calloc)(size_t, size_t);
static void *(*real_realloc)(void *, size_t);
static void *(*real_memalign)(size_t, size_t);
static size_t (*real_usable)(void *);

/* dlsym() may itself call calloc/malloc before the real functions are known: a
 * small static pool serves those, and free() ignores pointers inside it. */
static _Alignas(16) char boot_pool[64 * 1024];
static size_t boot_used;
static int in_boot(const void *p) {
  return (const char *)p >= boot_pool && (const char *)p < boot_pool + sizeof boot_pool;
}
static void *boot_alloc(size_t n) {
  size_t need = (n + 15 + HDR) & ~(size_t)15;
  size_t at = __atomic_fetch_add(&boot_used, need, __ATOMIC_RELAXED);
  if (at + need > sizeof boot_pool) return NULL;
  lg_blk_t *b = (lg_blk_t *)(boot_pool + at);
  b->site = 0;
  b->epoch = 0;
  b->word = lg_blk_word(n, 4, 0); /* marked: free() sends it to free_slow(), which ignores it */
  return boot_pool + at + HDR;    /* zeroed: static storage is never reused */
}

/* The object that holds p (its name: l_name, "" for the program), through ld.so's
 * _dl_find_object (glibc 2.35): a search of a sorted table, no lock, no allocation.
 * dladdr1() gives the same, but looks for the nearest symbol through the object's whole
 * symbol table on the way (~6 us an address in libc: next_is_glibc's six and the dlsym
 * hook's callers took ~90 us of every image's start, each exec'd helper of a wrapper's
 * included; BENCHMARKS.md). dladdr1() when ld.so cannot say (its table is built after
 * relocation: an allocation before that). NULL: unknown. */
struct link_map *lgi_map_of(const void *p) {
#if defined(__GLIBC__) && __GLIBC_PREREQ(2, 35)
  struct dl_find_object r;
  if (_dl_find_object((void *)p, &r) == 0 && r.dlfo_link_map) return r.dlfo_link_map;
#endif
  Dl_info di;
  struct link_map *lm = NULL;
  if (!dladdr1(p, &di, (void **)&lm, RTLD_DL_LINKMAP)) return NULL;
  return lm;
}

/* 1 when all the real functions are glibc's own (libc.so.6), whose blocks can go
 * without a header (src/core/blockhdr.h). Not a symbol comparison with __libc_malloc:
 * jemalloc and others define those names too. */
static int next_is_glibc(void) {
#if LG_MALLOC_ALIGN16
  void *fn[] = {(void *)real_malloc,  (void *)real_free,     (void *)real_calloc,
                (void *)real_realloc, (void *)real_memalign, (void *)real_usable};
  struct link_map *libc = NULL;
  for (size_t i = 0; i < sizeof fn / sizeof fn[0]; i++) {
    struct link_map *lm = lgi_map_of(fn[i]);
    const char *name = lm ? lm->l_name : NULL;
    size_t n = name ? strlen(name) : 0;
    if (n < 9 || strcmp(name + n - 9, "libc.so.6") != 0) return 0;
    if (n > 9 && name[n - 10] != '/') return 0;
    if (libc && lm != libc) return 0;
    libc = lm;
  }
  return 1;
#else
  return 0; /* the mark bit argument needs 16-byte malloc alignment */
#endif
}

/* The code of the next allocator when it is not glibc's: [lgi_alloc_lo, lgi_alloc_hi).
 * jemalloc, tcmalloc and mimalloc map their arenas with mmap(), and the blocks inside an
 * arena are already recorded through malloc: an anonymous mapping made from this range
 * is the allocator's own bookkeeping and is not recorded again (mmap_table.c; it would
 * count every byte twice, and an arena that grows in 4-64 MiB steps looks like a step
 * leak). */
uintptr_t lgi_alloc_lo, lgi_alloc_hi;

/* The dynamic loader's code: [rtld_lo, rtld_hi) (see record_alloc). */
static uintptr_t rtld_lo, rtld_hi;

static _Atomic int resolve_state; /* 0 no, 1 in progress, 2 done */
void lgi_resolve_real(void) {
  int z = 0;
  if (!atomic_compare_exchange_strong(&resolve_state, &z, 1)) {
    while (atomic_load(&resolve_state) != 2) sched_yield();
    return;
  }
  real_malloc = dlsym(RTLD_NEXT, "malloc");
  real_free = dlsym(RTLD_NEXT, "free");
  real_calloc = dlsym(RTLD_NEXT, "calloc");
  real_realloc = dlsym(RTLD_NEXT, "realloc");
  real_memalign = dlsym(RTLD_NEXT, "memalign");
  real_usable = dlsym(RTLD_NEXT, "malloc_usable_size");
  if (!real_malloc || !real_free || !real_calloc || !real_realloc || !real_memalign || !real_usable) {
    static const char msg[] = "leakguard: cannot find the real allocator, aborting\n";
    (void)!write(2, msg, sizeof msg - 1);
    abort();
  }
  lgi_head_all = !next_is_glibc();
  /* dl_iterate_phdr takes the loader's lock (as dladdr() does): this runs once, in
   * the first allocation. */
  if (lgi_head_all) {
    lg_image_of_t q = {(uintptr_t)real_malloc, 0, 0};
    if (dl_iterate_phdr(lg_image_of_cb, &q)) lgi_alloc_lo = q.lo, lgi_alloc_hi = q.hi;
  }
  /* ld.so defines __tls_get_addr (libc's _dl_find_object is only a forwarder) */
  void *in_rtld = dlsym(RTLD_DEFAULT, "__tls_get_addr");
  lg_image_of_t q = {(uintptr_t)in_rtld, 0, 0};
  if (in_rtld && dl_iterate_phdr(lg_image_of_cb, &q)) rtld_lo = q.lo, rtld_hi = q.hi;
  lgi_unwind_loader_is(rtld_lo, rtld_hi);
  atomic_store(&resolve_state, 2);
}

static uint32_t era_now(void) { return atomic_load_explicit(&lgi_g.hdr->epoch, memory_order_relaxed); }

/* ------------------------------------------------------------------ accounting */

/* For the other hooks (mmap_table.c, the cuda*.c files): recorder.h. */
void lgi_count(lgi_tls_t *t, uint32_t site, int64_t bytes, int64_t blocks, uint32_t epoch, int alloc) {
  lgi_ctr_update(t, site, bytes, blocks, epoch, alloc);
}
uint32_t lgi_epoch(void) { return era_now(); }

/* The sampling mean that a recorded block's word says it was recorded under: the run's
 * (-s; 0 in full mode), or the import sampling of a full recording. */
static inline uint64_t blk_mean(uint64_t word) {
  return word & LG_BLK_SAMPLED ? lgi_g.import_sample : lgi_g.sample_bytes;
}

/* The countdowns after a recorded allocation: the run's sampling, else 0 (every
 * allocation takes the slow path, lgi_decide()); and in full mode, while the thread's last
 * recorded allocation was under an import, the import sampling's. */
static inline void next_countdown(lgi_tls_t *t) {
  if (lgi_g.sample_bytes) t->countdown = (int64_t)lgi_next_exp(t, (double)lgi_g.sample_bytes);
  else t->countdown = 0;
  if (t->imp) t->imp_countdown = (int64_t)lgi_next_exp(t, (double)lgi_g.import_sample);
}

/* Records the block at user pointer p (its header already holds size and offset):
 * the countdown ran out and lgi_thread_ready() said yes. */
static __attribute__((noinline)) void record_alloc(lgi_tls_t *t, void *p, size_t size, uintptr_t ra0, uintptr_t cfa0) {
  t->guard++;
  /* decided under the import sampling (lgi_decide()): counts for its weight */
  int sampled = !lgi_g.sample_bytes && t->imp;
  /* The dynamic loader's own blocks (a thread's TLS vector, link maps) are not
   * recorded: ld.so reallocates a thread's DTV from inside __tls_get_addr, and
   * unwinding from there needs libunwind's TLS, whose __tls_get_addr would resize the
   * same DTV again, freeing the block the outer call is moving (glibc aborts in
   * mremap_chunk: seen with torch, a thread started before its libraries were loaded). */
  if (ra0 - rtld_lo < rtld_hi - rtld_lo) {
    next_countdown(t);
    t->guard--;
    return;
  }
  uint32_t site = lgi_capture_all(t, ra0, cfa0, LG_SPACE_HOST);
  /* Under an import (docs/python.md, "Imports sampled"): what a module's body allocates
   * is start-up, never a leak's growth, and `import torch` allocates a million blocks
   * from 300 000 stacks that each cost a Python walk and a native unwind. */
  if (lgi_g.import_sample && !lgi_g.sample_bytes) t->imp = t->under_import;
  next_countdown(t);
  uint64_t B = sampled ? lgi_g.import_sample : lgi_g.sample_bytes;
  lg_blk_t *b = blk_of(p);
  if (sampled) b->word |= LG_BLK_SAMPLED;
  lgi_blk_record(t, b, site, lgi_weight_bytes_at(size, B), lgi_weight_blocks_at(size, B));
  t->guard--;
}

/* Out of line: in sampled mode almost no freed block was recorded (not `cold`: in
 * full mode every one was). */
static __attribute__((noinline)) void record_free(lg_blk_t *b) {
  lgi_tls_t *t = &lgi_tls;
  if (!lgi_g.enabled) return;
  if (LGI_UNLIKELY(t->state == 0) && !lgi_thread_ready(t)) return;
  t->guard++;
  size_t sz = blk_size(b);
  uint64_t B = blk_mean(b->word);
  lgi_ctr_update_at(t, lg_blk_site(b->site), -lgi_weight_bytes_at(sz, B), -lgi_weight_blocks_at(sz, B), b->epoch,
                    lg_blk_birth_step(b->site), 0);
  t->guard--;
}

/* Heads a fresh block from the real allocator; base is the underlying pointer,
 * offset (a power of two >= 16) the distance to the user pointer. */
static inline void *head(void *base, size_t size, unsigned offset_log2) {
  char *p = (char *)base + ((size_t)1 << offset_log2);
  lg_blk_t *b = blk_of(p);
  b->site = 0;
  b->epoch = 0;
  b->word = lg_blk_word(size, offset_log2, 0);
  return p;
}

/* The block was allocated inside lg_tag_push(): count it, enforce the quota. */
static __attribute__((noinline)) void *tag_finish(lgi_tls_t *t, void *p, size_t size) {
  lg_blk_t *b = blk_of(p);
  b->word |= (uint64_t)t->tag << LG_BLK_TAG_SHIFT;
  t->guard++;
  int fail = lgi_tag_alloc(t, t->tag, size, 1);
  t->guard--;
  if (fail) {
    free(p);
    errno = ENOMEM;
    return NULL;
  }
  if (t->quota_tag) lgi_tag_fire(t);
  return p;
}

/* ------------------------------------------------------------------ the hot paths
 * The per-thread countdown decides: while it stays positive a block goes to the real
 * allocator as it is, without a header (sampled mode: almost every block; and every
 * block when nothing is recorded). A block gets a header when it is recorded (the
 * countdown ran out: sampling, full mode, or the thread's first allocation), when it
 * is tagged (lg_tag_push), or always when lgi_head_all is set. free() tells the two kinds
 * apart by the mark bit in the word in front of the block (src/core/blockhdr.h). */

/* Slow path of the countdown: 1 when this block is to be recorded. Inside the
 * recorder (guard) nothing is. */
int lgi_decide(lgi_tls_t *t, size_t size) {
  if (t->guard) return 0;
  t->countdown -= (int64_t)size;
  if (t->countdown > 0) return 0;
  int first = t->state == 0;
  /* A set-up thread of a recording process needs no call (thread.c's checks) */
  if (!(LGI_LIKELY(t->state == 1) && LGI_LIKELY(lgi_g.enabled)) && !lgi_thread_ready(t)) return 0;
  if (!lgi_g.sample_bytes) {
    if (LGI_LIKELY(!t->imp)) return 1;
    /* imports sampled (record_alloc): still under the import? A walk of frame pointers,
     * not a capture; out of it, this block is recorded and so is every next one */
    t->countdown = 0;
    if (!lgi_python_under_import()) {
      t->imp = 0;
      return 1;
    }
    t->imp_countdown -= (int64_t)size;
    return t->imp_countdown <= 0 && size != 0; /* byte sampling never picks an empty block */
  }
  /* The thread's first allocation starts its Poisson process (the first sampled byte
   * lies Exp(B) bytes ahead): it is not recorded just for being first. */
  if (LGI_UNLIKELY(first)) {
    t->countdown = (int64_t)lgi_next_exp(t, (double)lgi_g.sample_bytes) - (int64_t)size;
    if (t->countdown > 0) return 0;
  }
  /* Byte sampling never picks a block without bytes: the sampled byte still lies
   * ahead, in the next allocation that has some. */
  return size != 0;
}

/* 1 when lgi_decide would record this block without anything to update but the
 * countdown, which full mode keeps at 0: full mode, a set-up thread of a recording
 * process, outside the recorder, not under an import's sampling (malloc_slow). */
static inline int full_fast(const lgi_tls_t *t) {
  return !lgi_g.sample_bytes && LGI_LIKELY(t->state == 1) && LGI_LIKELY(lgi_g.enabled) && !t->guard && !t->imp;
}

static inline void *finish(lgi_tls_t *t, void *p, size_t size, int rec, uintptr_t ra0, uintptr_t cfa0) {
  if (rec) record_alloc(t, p, size, ra0, cfa0);
  if (LGI_UNLIKELY(t->tag) && !t->guard) return tag_finish(t, p, size);
  return p;
}

/* ------------------------------------------------------------------ for pymalloc.c
 * CPython's allocator wrapped (recorder.h): a block of the caller's own allocation
 * (glibc's or pymalloc's) headed at base + 2^offlog2 with flags in its word, then
 * recorded and tagged as malloc's; the bookkeeping of a headed block's free (the caller
 * frees its base itself); glibc's malloc and calloc. */
void *lgi_head_finish(lgi_tls_t *t, void *base, size_t size, unsigned offlog2, uint64_t flags, int rec, uintptr_t ra0,
                      uintptr_t cfa0) {
  void *p = head(base, size, offlog2);
  blk_of(p)->word |= flags;
  return finish(t, p, size, rec, ra0, cfa0);
}
void lgi_free_count(lg_blk_t *b) {
  if (b->site) record_free(b);
  if (LGI_UNLIKELY(b->word & LG_BLK_TAG_MASK)) lgi_tag_free(blk_tag(b), blk_size(b));
}
void *lgi_real_malloc(size_t size) { return real_malloc(size); }
void *lgi_real_calloc(size_t n, size_t size) { return real_calloc(n, size); }

/* ------------------------------------------------------------------ malloc family */

static inline int too_big(size_t size, size_t extra) { return size > SIZE_MAX - extra || size > LG_BLK_MAX_SIZE; }

static __attribute__((noinline)) void *malloc_slow(size_t size, uintptr_t ra0, uintptr_t cfa0) {
  if (LGI_UNLIKELY(!real_malloc)) {
    if (atomic_load(&resolve_state) == 1) return boot_alloc(size);
    lgi_resolve_real();
  }
  lgi_tls_t *t = &lgi_tls;
  /* full mode's common case: what lgi_decide would say (record), without asking */
  int rec = full_fast(t) ? 1 : lgi_decide(t, size);
  if (!rec && !lgi_need_head(t)) return real_malloc(size);
  if (too_big(size, HDR)) {
    errno = ENOMEM;
    return NULL;
  }
  void *base = real_malloc(size + HDR);
  if (!base) return NULL;
  return finish(t, head(base, size, 4), size, rec, ra0, cfa0);
}

/* malloc(size) on behalf of the caller at (ra0, cfa0). */
static inline void *do_malloc(size_t size, uintptr_t ra0, uintptr_t cfa0) {
  if (LGI_LIKELY(lgi_unheaded(&lgi_tls, size))) return real_malloc(size);
  return malloc_slow(size, ra0, cfa0);
}

static void *do_memalign(size_t align, size_t size, uintptr_t ra0, uintptr_t cfa0) {
  if (align <= HDR) return do_malloc(size, ra0, cfa0);
  lgi_tls_t *t = &lgi_tls;
  if (align & (align - 1)) align = (size_t)1 << (64 - __builtin_clzl(align)); /* as glibc */
  if (LGI_LIKELY(lgi_unheaded(t, size))) return real_memalign(align, size);
  if (LGI_UNLIKELY(!real_memalign)) {
    if (atomic_load(&resolve_state) == 1) return NULL;
    lgi_resolve_real();
  }
  int rec = lgi_decide(t, size);
  if (!rec && !lgi_need_head(t)) return real_memalign(align, size);
  if (too_big(size, align) || align > ((size_t)1 << 40)) {
    errno = ENOMEM;
    return NULL;
  }
  void *base = real_memalign(align, size + align);
  if (!base) return NULL;
  return finish(t, head(base, size, (unsigned)__builtin_ctzl(align)), size, rec, ra0, cfa0);
}

LG_API void *malloc(size_t size) {
  if (LGI_LIKELY(lgi_unheaded(&lgi_tls, size))) return real_malloc(size);
  return malloc_slow(size, LG_CALLER_RA, LG_CALLER_CFA); /* RA/CFA only on the slow path */
}

static __attribute__((noinline)) void free_slow(void *p) {
  if (in_boot(p)) return;
  lg_blk_t *b = blk_of(p);
  if (!lgi_free_fast(&lgi_tls, b)) lgi_free_count(b);
  /* a Python object's check word dies with it (pymalloc.c: lg_python_block must not
   * find it in memory glibc hands out again) */
  if (LGI_UNLIKELY(b->word & LG_BLK_PYOBJ)) ((uint64_t *)p)[-3] = 0;
  real_free(blk_base(p));
}

LG_API void free(void *p) {
  if (LGI_UNLIKELY(!p)) return;
  if (LGI_LIKELY(!lg_blk_marked(word_of(p)))) {
    real_free(p);
    return;
  }
  free_slow(p);
}

static __attribute__((noinline)) void *calloc_slow(size_t n, size_t size, uintptr_t ra0, uintptr_t cfa0) {
  size_t total;
  if (__builtin_mul_overflow(n, size, &total) || too_big(total, HDR)) {
    errno = ENOMEM;
    return NULL;
  }
  if (LGI_UNLIKELY(!real_calloc)) {
    if (atomic_load(&resolve_state) == 1) return boot_alloc(total);
    lgi_resolve_real();
  }
  lgi_tls_t *t = &lgi_tls;
  int rec = lgi_decide(t, total);
  if (!rec && !lgi_need_head(t)) return real_calloc(n, size);
  void *base = real_calloc(1, total + HDR);
  if (!base) return NULL;
  return finish(t, head(base, total, 4), total, rec, ra0, cfa0);
}

LG_API void *calloc(size_t n, size_t size) {
  size_t total;
  if (LGI_LIKELY(!__builtin_mul_overflow(n, size, &total)) && LGI_LIKELY(lgi_unheaded(&lgi_tls, total)))
    return real_calloc(n, size);
  return calloc_slow(n, size, LG_CALLER_RA, LG_CALLER_CFA);
}

/* realloc of a block with a header (recorded, tagged, bootstrap or over-aligned). */
static __attribute__((noinline)) void *realloc_headed(void *p, size_t size, uintptr_t ra0, uintptr_t cfa0) {
  lg_blk_t *b = blk_of(p);
  size_t old = blk_size(b);
  if (in_boot(p) || blk_offset(b) != HDR) {
    /* Bootstrap or over-aligned block: move it by hand. */
    void *q = do_malloc(size, ra0, cfa0);
    if (!q) return NULL;
    memcpy(q, p, old < size ? old : size);
    free(p);
    return q;
  }
  if (too_big(size, HDR)) {
    errno = ENOMEM;
    return NULL;
  }
  /* Account the free before the real realloc: once it returns, another thread may
   * get the old address from malloc. The block keeps a header (perhaps with site 0). */
  lg_blk_t saved = *b;
  if (saved.site) record_free(b);
  if (saved.word & LG_BLK_TAG_MASK) lgi_tag_free(blk_tag(&saved), old);
  void *base = real_realloc(blk_base(p), size + HDR);
  lgi_tls_t *t = &lgi_tls;
  if (!base) { /* the old block lives on: count it again */
    t->guard++;
    if (saved.site)
      lgi_ctr_update_at(t, lg_blk_site(saved.site), lgi_weight_bytes_at(old, blk_mean(saved.word)),
                        lgi_weight_blocks_at(old, blk_mean(saved.word)), saved.epoch, lg_blk_birth_step(saved.site), 0);
    if (saved.word & LG_BLK_TAG_MASK) lgi_tag_alloc(t, blk_tag(&saved), old, 0);
    t->guard--;
    return NULL;
  }
  int rec = lgi_decide(t, size);
  return finish(t, head(base, size, 4), size, rec, ra0, cfa0);
}

/* realloc of a block without a header whose new size needs one (recorded or tagged):
 * it moves into a fresh headed block. */
static __attribute__((noinline)) void *realloc_plain_slow(void *p, size_t size, uintptr_t ra0, uintptr_t cfa0) {
  lgi_tls_t *t = &lgi_tls;
  int rec = lgi_decide(t, size);
  if (!rec && !lgi_need_head(t)) return real_realloc(p, size);
  if (too_big(size, HDR)) {
    errno = ENOMEM;
    return NULL;
  }
  void *base = real_malloc(size + HDR);
  if (!base) return NULL; /* p lives on, unchanged */
  size_t old = real_usable(p);
  memcpy((char *)base + HDR, p, old < size ? old : size);
  real_free(p);
  return finish(t, head(base, size, 4), size, rec, ra0, cfa0);
}

static inline void *do_realloc(void *p, size_t size, uintptr_t ra0, uintptr_t cfa0) {
  lgi_tls_t *t = &lgi_tls;
  if (!p) return do_malloc(size, ra0, cfa0);
  if (size == 0) {
    free(p);
    return NULL;
  }
  if (LGI_UNLIKELY(lg_blk_marked(word_of(p)))) return realloc_headed(p, size, ra0, cfa0);
  if (LGI_LIKELY(lgi_unheaded(t, size))) return real_realloc(p, size);
  return realloc_plain_slow(p, size, ra0, cfa0);
}

LG_API void *realloc(void *p, size_t size) { return do_realloc(p, size, LG_CALLER_RA, LG_CALLER_CFA); }

LG_API void *reallocarray(void *p, size_t n, size_t size) {
  size_t total;
  if (__builtin_mul_overflow(n, size, &total)) {
    errno = ENOMEM;
    return NULL;
  }
  return do_realloc(p, total, LG_CALLER_RA, LG_CALLER_CFA);
}

LG_API int posix_memalign(void **out, size_t align, size_t size) {
  if (align < sizeof(void *) || (align & (align - 1))) return EINVAL;
  int e = errno;
  void *p = do_memalign(align, size, LG_CALLER_RA, LG_CALLER_CFA);
  if (!p) return ENOMEM;
  errno = e;
  *out = p;
  return 0;
}

LG_API void *memalign(size_t align, size_t size) { return do_memalign(align, size, LG_CALLER_RA, LG_CALLER_CFA); }

LG_API void *aligned_alloc(size_t align, size_t size) {
  if (align == 0 || (align & (align - 1))) {
    errno = EINVAL;
    return NULL;
  }
  return do_memalign(align, size, LG_CALLER_RA, LG_CALLER_CFA);
}

LG_API void *valloc(size_t size) {
  return do_memalign((size_t)sysconf(_SC_PAGESIZE), size, LG_CALLER_RA, LG_CALLER_CFA);
}

LG_API void *pvalloc(size_t size) {
  size_t pg = (size_t)sysconf(_SC_PAGESIZE);
  if (too_big(size, pg)) {
    errno = ENOMEM;
    return NULL;
  }
  return do_memalign(pg, (size + pg - 1) & ~(pg - 1), LG_CALLER_RA, LG_CALLER_CFA);
}

LG_API size_t malloc_usable_size(void *p) {
  if (!p) return 0;
  uint64_t w = word_of(p);
  if (!lg_blk_marked(w)) return real_usable(p);
  if (in_boot(p)) return lg_blk_word_size(w);
  return real_usable(blk_base(p)) - blk_offset(blk_of(p));
}

/* glibc exports its allocator under these names too, and some libraries call them
 * directly. Each is the same function as its public name here, so that a block with
 * our header never reaches glibc's free or realloc, and a block allocated through
 * them is recorded like any other. (__libc_reallocarray is GLIBC_PRIVATE.) */
void *__libc_malloc(size_t size);
void __libc_free(void *p);
void *__libc_calloc(size_t n, size_t size);
void *__libc_realloc(void *p, size_t size);
void *__libc_memalign(size_t align, size_t size);
void *__libc_valloc(size_t size);
void *__libc_pvalloc(size_t size);
void free_sized(void *p, size_t size);
void cfree(void *p);
void free_aligned_sized(void *p, size_t align, size_t size);

LG_API void *__libc_malloc(size_t size) {
  if (LGI_LIKELY(lgi_unheaded(&lgi_tls, size))) return real_malloc(size);
  return malloc_slow(size, LG_CALLER_RA, LG_CALLER_CFA);
}
LG_API void __libc_free(void *p) { free(p); }
LG_API void *__libc_calloc(size_t n, size_t size) {
  size_t total;
  if (LGI_LIKELY(!__builtin_mul_overflow(n, size, &total)) && LGI_LIKELY(lgi_unheaded(&lgi_tls, total)))
    return real_calloc(n, size);
  return calloc_slow(n, size, LG_CALLER_RA, LG_CALLER_CFA);
}
LG_API void *__libc_realloc(void *p, size_t size) { return do_realloc(p, size, LG_CALLER_RA, LG_CALLER_CFA); }
LG_API void *__libc_memalign(size_t align, size_t size) {
  return do_memalign(align, size, LG_CALLER_RA, LG_CALLER_CFA);
}
LG_API void *__libc_valloc(size_t size) {
  return do_memalign((size_t)sysconf(_SC_PAGESIZE), size, LG_CALLER_RA, LG_CALLER_CFA);
}
LG_API void *__libc_pvalloc(size_t size) {
  size_t pg = (size_t)sysconf(_SC_PAGESIZE);
  if (too_big(size, pg)) {
    errno = ENOMEM;
    return NULL;
  }
  return do_memalign(pg, (size + pg - 1) & ~(pg - 1), LG_CALLER_RA, LG_CALLER_CFA);
}

/* C23's sized frees (glibc 2.39 and later): defined here so that a program built
 * against a newer glibc never hands one of our blocks to them. */
LG_API void free_sized(void *p, size_t size) {
  (void)size;
  free(p);
}
LG_API void free_aligned_sized(void *p, size_t align, size_t size) {
  (void)align;
  (void)size;
  free(p);
}

/* cfree: removed from glibc 2.26 but still exported for old binaries, as glibc's own
 * free (which would abort on our header). */
LG_API void cfree(void *p) { free(p); }

/* ------------------------------------------------------------------ public API */

LG_API uint64_t leakguard_step(void) {
  if (!lgi_g.enabled) return 0;
  lg_region_hdr_t *h = lgi_g.hdr;
  return atomic_fetch_add_explicit(&h->steps, 1, memory_order_release) + 1;
}

LG_API uint64_t lg_step(void) { return leakguard_step(); }

LG_API int lg_site_of(const void *block, uint32_t *site) {
  if (!block || !site || in_boot(block) || !lgi_g.enabled) return -ENOENT;
  if (!lg_blk_marked(word_of(block))) return -ENOENT;
  uint32_t s = lg_blk_site(blk_of((void *)block)->site);
  if (!s) return -ENOENT;
  *site = s;
  return 0;
}

/* Recording, or waiting for its lazy start (lifecycle.c): the Python module sets up in
 * either (its hooks then count from the start on). */
LG_API int lg_recording(void) { return lgi_g.enabled || lgi_g.lazy; }

/* The recursion guard is what makes the hooks pass a call through: a paused thread
 * is, for the recorder, a thread inside it. */
LG_API void lg_program_held(int held) {
  if (!lgi_g.enabled) return;
  if (held) atomic_fetch_add(&lgi_g.hdr->held, 1);
  else if (atomic_load(&lgi_g.hdr->held) > 0) atomic_fetch_sub(&lgi_g.hdr->held, 1);
}

LG_API int lg_pause_recording(int pause) {
  if (!lgi_g.enabled) return 0;
  lgi_tls_t *t = &lgi_tls;
  if (pause) t->guard++;
  else if (t->guard > 0) t->guard--;
  return t->guard;
}

/* ------------------------------------------------------------------ names for dlsym
 * A program or a shim that looks an allocator function up by name (dlsym(RTLD_NEXT,
 * "free") in a library, dlsym on a dlopen("libc.so.6") handle) gets glibc's function,
 * which would meet blocks with our header: dl.c hands out ours instead (docs/design.md,
 * "Mismatched allocator paths"). Hidden aliases, so that the address is our own
 * definition's, not whatever the global scope binds the name to. */
LGI_OWN(malloc)
LGI_OWN(free)
LGI_OWN(calloc)
LGI_OWN(realloc)
LGI_OWN(reallocarray)
LGI_OWN(posix_memalign)
LGI_OWN(memalign)
LGI_OWN(aligned_alloc)
LGI_OWN(valloc)
LGI_OWN(pvalloc)
LGI_OWN(malloc_usable_size)
LGI_OWN(__libc_malloc)
LGI_OWN(__libc_free)
LGI_OWN(__libc_calloc)
LGI_OWN(__libc_realloc)
LGI_OWN(__libc_memalign)
LGI_OWN(__libc_valloc)
LGI_OWN(__libc_pvalloc)
LGI_OWN(free_sized)
LGI_OWN(free_aligned_sized)
LGI_OWN(cfree)

void *lgi_alloc_own(const char *name) {
#define E(n)                                                                                                           \
  { #n, (void *)lgi_own_##n }
  static const struct {
    const char *name;
    void *fn;
  } own[] = {E(malloc),
             E(free),
             E(calloc),
             E(realloc),
             E(reallocarray),
             E(posix_memalign),
             E(memalign),
             E(aligned_alloc),
             E(valloc),
             E(pvalloc),
             E(malloc_usable_size),
             E(__libc_malloc),
             E(__libc_free),
             E(__libc_calloc),
             E(__libc_realloc),
             E(__libc_memalign),
             E(__libc_valloc),
             E(__libc_pvalloc),
             E(free_sized),
             E(free_aligned_sized),
             E(cfree)};
#undef E
  for (size_t i = 0; i < sizeof own / sizeof own[0]; i++)
    if (!strcmp(name, own[i].name)) return own[i].fn;
  return NULL;
}
