/* SPDX-License-Identifier: MIT */
/*
 * standin_state.h - the stand-in CUDA driver's state (tests only), shared by
 * standin_cuda.c (the state, init and devices, contexts) and standin_mem.c (the memory
 * entry points: device, stream-ordered, VMM, managed, pinned, registered, arrays,
 * modules, events). Everything here is under mu unless said otherwise; the library is
 * built with hidden visibility, so none of it is exported.
 */
#ifndef LG_TESTS_STANDIN_STATE_H
#define LG_TESTS_STANDIN_STATE_H

#include <pthread.h>
#include <stddef.h>

#include "standin.h"

#define MAXDEV 8
#define CTX_MAGIC 0x43545831
#define POOL_MAGIC 0x504f4f4c
#define NB 4096

typedef struct ctx {
  int magic, dev, alive, primary;
} ctx_t;

typedef struct pool {
  int magic, dev, is_default, alive;
  long long reserved, used;
} pool_t;

enum { A_DEV = 1, A_MANAGED, A_PINNED, A_POOL, A_ARRAY, A_REG };
typedef struct blk {
  unsigned long long addr;
  size_t size;
  int kind, dev;
  ctx_t *ctx;
  pool_t *pool;
  void *host;      /* managed/pinned: the mmap'ed pages */
  void *book;      /* pinned: driver bookkeeping (malloc'ed inside the call) */
  struct blk *next;
} blk_t;

typedef struct vmm {
  size_t size;
  int dev, released, mapped;
} vmm_t;

typedef struct mapping {
  unsigned long long va;
  size_t size;
  vmm_t *h;
  struct mapping *next;
} mapping_t;

extern pthread_mutex_t mu;
extern int ndev;                   /* LG_STANDIN_DEVICES */
extern int inited;                 /* cuInit was called */
extern size_t devmem;              /* LG_STANDIN_MEM: each device's memory */
extern pool_t default_pool[MAXDEV];
extern long long dev_live[MAXDEV]; /* device bytes held (allocations, pool reserves, VMM) */
extern __thread ctx_t *current;    /* the thread's current context */
extern blk_t *buckets[NB];         /* every live block, by address (hb) */
extern mapping_t *maps;            /* VMM mappings */
extern unsigned long long next_va; /* the next VMM address reservation */

/* The stand-in NVML's file (LG_STANDIN_NVML_FILE), rewritten. */
void publish(void);
unsigned hb(unsigned long long a);
void blk_add(blk_t *b);
/* The block at a of one of the kinds in kind_mask (1 << A_*), taken out; NULL: none. */
blk_t *blk_take(unsigned long long a, int kind_mask);
/* CUDA_SUCCESS when the thread has a live current context. */
CUresult need_ctx(void);
/* A block of kind (A_DEV, A_POOL...) of n bytes in the current context (or pool). */
CUresult dev_alloc(CUdeviceptr *p, size_t n, int kind, pool_t *pool);
CUresult dev_free(CUdeviceptr p, int mask);
/* cuMemFreeAsync: the free is enqueued; the memory goes when the stream gets there. */
CUresult free_async(CUdeviceptr p, CUstream s);
/* Completes the pending frees of stream s (all of them when all) and the events
 * recorded on it (events_done, standin_mem.c). Caller holds mu. */
void complete_pending(CUstream s, int all);
void events_done(CUstream s, int all);

#endif
