/* SPDX-License-Identifier: MIT */
/*
 * pool_impl.h - what the files of liblgpool share (docs/pool.md): pool.c (segments,
 * blocks, generations, windows, trimming), backend.c (host mmap or the CUDA driver,
 * dlopen'ed), profile.c (site -> generation from an earlier run), abi.c (the
 * CUDAPluggableAllocator entry points and the environment).
 */
#ifndef LG_POOL_IMPL_H
#define LG_POOL_IMPL_H

#include <pthread.h>
#include <stdint.h>

#include "leakguard.h"

#define LGP_HIDDEN __attribute__((visibility("hidden")))

/* Sizes (as PyTorch's caching allocator, so that the comparison is fair). */
#define LGP_ROUND 512u           /* every request rounds up to this */
#define LGP_SMALL_MAX (1u << 20) /* requests up to 1 MiB: the small pools */
#define LGP_SMALL_SEG (2u << 20) /* small segments: 2 MiB */
#define LGP_MID_MAX (10u << 20)  /* requests up to 10 MiB: 20 MiB segments */
#define LGP_MID_SEG (20u << 20)
#define LGP_LARGE_ROUND (2u << 20) /* larger ones: rounded to 2 MiB, own segment */

typedef struct lgp_seg lgp_seg_t;
typedef struct lgp_blk {
  uintptr_t addr;
  size_t size;
  lgp_seg_t *seg;
  struct lgp_blk *prev, *next;   /* address order inside the segment */
  struct lgp_blk *fprev, *fnext; /* the free list of its pool, when free */
  struct lgp_blk *hnext;         /* live hash chain, when allocated */
  void *stream;                  /* allocated on / freed on */
  void *event;                   /* recorded at the free, until done; NULL: settled */
  size_t requested;
  int free;
} lgp_blk_t;

struct lgp_seg {
  uintptr_t addr;
  size_t size;
  int gen, large;
  lgp_seg_t *prev, *next;
  lgp_blk_t *first;
  size_t used;         /* bytes of allocated blocks */
  uint64_t idle_since; /* when it became wholly free */
};

/* The driver behind the pool. */
typedef struct lgp_backend {
  lg_pool_backend_t kind;
  int device;
  void *cu;  /* dlopen handle of libcuda.so.1 */
  void *ctx; /* the context allocations are made in */
  int (*mem_alloc)(uintptr_t *p, size_t n);
  int (*mem_free)(uintptr_t p);
  int (*ctx_get)(void **ctx);
  int (*ctx_set)(void *ctx);
  int (*ev_create)(void **ev, unsigned flags);
  int (*ev_record)(void *ev, void *stream);
  int (*ev_query)(void *ev);
  int (*ev_destroy)(void *ev);
} lgp_backend_t;

LGP_HIDDEN int lgp_backend_open(lgp_backend_t *b, lg_pool_backend_t kind, int device);
LGP_HIDDEN void lgp_backend_close(lgp_backend_t *b);
LGP_HIDDEN int lgp_backend_alloc(lgp_backend_t *b, size_t n, uintptr_t *out);
LGP_HIDDEN void lgp_backend_free(lgp_backend_t *b, uintptr_t p, size_t n);

/* The site profile: key ("module+0xoffset" or a function name) -> generation. */
typedef struct lgp_profile lgp_profile_t;
LGP_HIDDEN lgp_profile_t *lgp_profile_load(const char *path, int *entries);
LGP_HIDDEN void lgp_profile_free(lgp_profile_t *p);
/* The generation of the allocation whose first frames are frames[0..n), or -1. */
LGP_HIDDEN int lgp_profile_lookup(lgp_profile_t *p, void *const *frames, int n);

#define LGP_HASH 4096
struct lg_pool {
  pthread_mutex_t mu;
  lg_pool_config_t cfg;
  lgp_backend_t be;
  lgp_seg_t *segs;
  lgp_blk_t *freel[LG_GEN_COUNT][2]; /* [gen][large] */
  lgp_blk_t *live[LGP_HASH];
  void **events; /* settled events, for reuse */
  int nevents, capevents;
  int idle_segs;     /* wholly free segments */
  uint64_t next_due; /* the earliest a window can expire */
  lg_pool_stats_t st;
  lgp_profile_t *profile;
  int sub_id, evict_id;
  int reported_double, reported_unknown;
};

#endif
