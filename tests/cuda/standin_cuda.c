/* SPDX-License-Identifier: MIT */
/*
 * standin_cuda.c - a stand-in CUDA driver (libcuda.so.1) for the tests only.
 *
 * CI has no GPU. This library answers the driver API the way libcuda.so.1 does for
 * the entry points leakguard tracks (and a few others programs need around them):
 * devices, contexts (created, primary, current per thread), device memory with fake
 * addresses that are reused after a free, stream-ordered pools with reserved and
 * used bytes, the VMM API, managed and pinned memory (the pages of both are really
 * mmap'ed, inside the call, as the real driver does), registered host memory, arrays,
 * cuGetProcAddress (v1 and v2, per CUDA version, with the per-thread-default-stream
 * variants as separate implementations) and a refusal of cuGetExportTable.
 *
 * Built with -Wl,-Bsymbolic: its own internal calls (cuMemAllocHost_v2 calls
 * cuMemHostAlloc here, like drivers do) bind inside the library, as in the real
 * driver. Without it, an interposer would catch them and a test could pass for the
 * wrong reason.
 *
 * Test hooks (not CUDA): standin_calls(name) counts the calls of each
 * implementation, standin_live_bytes(dev) the memory it holds, and
 * standin_check_bindings() (standin_procs.c, with cuGetProcAddress) says, for every
 * tracked entry point a caller obtained through cuGetProcAddress, whether the pointer
 * now stored where the caller asked it to be stored is a leakguard wrapper. With
 * LG_STANDIN_NVML_FILE set it writes the process's device usage
 * (+ LG_STANDIN_CTX_OVERHEAD per context) for the stand-in NVML
 * (tests/guard/guard_fake_nvml.c). LG_STANDIN_DEVICES (1), LG_STANDIN_MEM (16G).
 *
 * Stream order: cuMemFreeAsync only enqueues the free, as on a GPU. The block stays
 * the pool's (used, its address not handed out again) until the stream is
 * synchronized (cuStreamSynchronize of its stream or of the NULL stream,
 * cuCtxSynchronize, destroying the context), or until 64 frees are pending (the GPU
 * caught up). standin_pending_frees() says how many are.
 *
 * Kernels: cuModuleLoad / cuModuleGetFunction accept any file and name;
 * cuLaunchKernel runs nothing, but when its first parameter is a managed block and
 * the stand-in CUPTI (tests/cuda/standin_cupti.c, LEAKGUARD_CUPTI) is loaded with its
 * Unified Memory counters enabled, it makes the records a GPU touching that block
 * would: GPU page faults (one per 64 KiB) and the block's bytes moved to the device.
 */
#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "standin.h"

#define MAXDEV 8
#define CTX_MAGIC 0x43545831
#define POOL_MAGIC 0x504f4f4c

/* ------------------------------------------------------------------ call counters */
#define X_NAME(n) #n,
static const char *const impl_name[C_COUNT] = {IMPLS(X_NAME)};
_Atomic long standin_ncalls[C_COUNT];

EXPORT long standin_calls(const char *impl) {
  for (int i = 0; i < C_COUNT; i++)
    if (!strcmp(impl, impl_name[i])) return atomic_load(&standin_ncalls[i]);
  return -1;
}

/* ------------------------------------------------------------------ state */

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

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static int ndev = 1, inited;
static size_t devmem = 16ULL << 30, ctx_overhead = 300ULL << 20;
static ctx_t primary[MAXDEV];
static int prim_refs[MAXDEV];
static pool_t default_pool[MAXDEV];
static long long dev_live[MAXDEV];  /* device bytes held (allocations, pool reserves, VMM) */
static int dev_ctxs[MAXDEV];
static __thread ctx_t *current;
#define NB 4096
static blk_t *buckets[NB];
static mapping_t *maps;
static unsigned long long next_addr[MAXDEV], next_va = 0x300000000000ULL;
typedef struct freeblk {
  unsigned long long addr;
  size_t size;
  int dev;
} freeblk_t;
static freeblk_t freed[256];
static int nfreed;
/* Frees enqueued by cuMemFreeAsync, not yet done (stream order). */
#define MAXPENDING 64
static struct pending {
  blk_t *b;
  CUstream s;
} pending[MAXPENDING];
static int npending;

static void config(void) {
  if (inited) return;
  inited = 1;
  const char *e = getenv("LG_STANDIN_DEVICES");
  if (e && atoi(e) > 0) ndev = atoi(e) > MAXDEV ? MAXDEV : atoi(e);
  e = getenv("LG_STANDIN_MEM");
  if (e && strtoull(e, NULL, 10)) devmem = strtoull(e, NULL, 10);
  e = getenv("LG_STANDIN_CTX_OVERHEAD");
  if (e) ctx_overhead = strtoull(e, NULL, 10);
  for (int d = 0; d < MAXDEV; d++) {
    primary[d] = (ctx_t){CTX_MAGIC, d, 0, 1};
    default_pool[d] = (pool_t){POOL_MAGIC, d, 1, 1, 0, 0};
    next_addr[d] = 0x100000000000ULL + (unsigned long long)d * 0x10000000000ULL;
  }
}

/* The stand-in NVML reads this file: "USED TOTAL PID BYTES". */
static void publish(void) {
  const char *f = getenv("LG_STANDIN_NVML_FILE");
  if (!f) return;
  long long bytes = dev_live[0] + (long long)dev_ctxs[0] * (long long)ctx_overhead;
  char tmp[4200];
  snprintf(tmp, sizeof tmp, "%s.tmp", f);
  FILE *fp = fopen(tmp, "w");
  if (!fp) return;
  fprintf(fp, "%llu %llu %d %lld\n", (unsigned long long)(bytes + (1LL << 30)), (unsigned long long)devmem,
          (int)getpid(), bytes);
  if (fclose(fp) == 0) rename(tmp, f);
}

static unsigned hb(unsigned long long a) { return (unsigned)((a * 0x9E3779B97F4A7C15ULL) >> 52) % NB; }

static void blk_add(blk_t *b) {
  unsigned h = hb(b->addr);
  b->next = buckets[h];
  buckets[h] = b;
}

static blk_t *blk_take(unsigned long long a, int kind_mask) {
  for (blk_t **p = &buckets[hb(a)]; *p; p = &(*p)->next)
    if ((*p)->addr == a && (kind_mask & (1 << (*p)->kind))) {
      blk_t *b = *p;
      *p = b->next;
      return b;
    }
  return NULL;
}

/* Fake device addresses: reused after a free (same size), like a real allocator. */
static unsigned long long dev_addr(int dev, size_t n) {
  for (int i = nfreed - 1; i >= 0; i--)
    if (freed[i].dev == dev && freed[i].size == n) {
      unsigned long long a = freed[i].addr;
      freed[i] = freed[--nfreed];
      return a;
    }
  unsigned long long a = next_addr[dev];
  next_addr[dev] += (n + 511) & ~511ULL;
  if (next_addr[dev] == a) next_addr[dev] += 512;
  return a;
}

static void dev_release(int dev, unsigned long long a, size_t n) {
  if (nfreed < 256) freed[nfreed++] = (freeblk_t){a, n, dev};
}

static CUresult need_ctx(void) {
  if (!inited) return CUDA_ERROR_NOT_INITIALIZED;
  if (!current || !current->alive) return CUDA_ERROR_INVALID_CONTEXT;
  return CUDA_SUCCESS;
}

static CUresult dev_alloc(CUdeviceptr *p, size_t n, int kind, pool_t *pool) {
  if (!p || !n) return CUDA_ERROR_INVALID_VALUE;
  pthread_mutex_lock(&mu);
  CUresult rc = need_ctx();
  if (rc) goto out;
  int dev = pool ? pool->dev : current->dev;
  long long add = (long long)n;
  if (pool) {
    long long used = pool->used + (long long)n, want = (used + (2LL << 20) - 1) & ~((2LL << 20) - 1);
    add = want > pool->reserved ? want - pool->reserved : 0;
  }
  if (dev_live[dev] + add > (long long)devmem) {
    rc = CUDA_ERROR_OUT_OF_MEMORY;
    goto out;
  }
  blk_t *b = calloc(1, sizeof *b);
  b->addr = dev_addr(dev, n);
  b->size = n;
  b->kind = kind;
  b->dev = dev;
  b->ctx = current;
  b->pool = pool;
  if (pool) {
    pool->used += (long long)n;
    pool->reserved += add;
  }
  dev_live[dev] += add;
  blk_add(b);
  *p = b->addr;
  publish();
out:
  pthread_mutex_unlock(&mu);
  return rc;
}

static void blk_free_locked(blk_t *b) {
  if (b->kind == A_POOL) b->pool->used -= (long long)b->size; /* the pool keeps it reserved */
  else if (b->kind == A_DEV || b->kind == A_ARRAY) dev_live[b->dev] -= (long long)b->size;
  else if (b->kind == A_MANAGED) {
    dev_live[b->dev] -= (long long)b->size;
    munmap(b->host, b->size);
  } else if (b->kind == A_PINNED) {
    munmap(b->host, b->size);
    free(b->book);
  }
  if (b->kind == A_DEV || b->kind == A_POOL) dev_release(b->dev, b->addr, b->size);
  free(b);
}

static void events_done(CUstream s, int all);
/* Completes the pending frees of stream s (all of them when all), and the events
 * recorded on it. Caller holds mu. */
static void complete_pending(CUstream s, int all) {
  events_done(s, all);
  int w = 0;
  for (int i = 0; i < npending; i++) {
    if (all || pending[i].s == s) blk_free_locked(pending[i].b);
    else pending[w++] = pending[i];
  }
  npending = w;
}

/* cuMemFreeAsync: the free is enqueued; the memory goes when the stream gets there. */
static CUresult free_async(CUdeviceptr p, CUstream s) {
  pthread_mutex_lock(&mu);
  blk_t *b = blk_take(p, 1 << A_POOL | 1 << A_DEV);
  if (b) {
    if (npending == MAXPENDING) { /* the GPU caught up with the oldest */
      blk_free_locked(pending[0].b);
      memmove(pending, pending + 1, (MAXPENDING - 1) * sizeof *pending);
      npending--;
    }
    pending[npending].b = b;
    pending[npending++].s = s;
  }
  publish();
  pthread_mutex_unlock(&mu);
  return b ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

EXPORT int standin_pending_frees(void) {
  pthread_mutex_lock(&mu);
  int n = npending;
  pthread_mutex_unlock(&mu);
  return n;
}

static CUresult dev_free(CUdeviceptr p, int mask) {
  pthread_mutex_lock(&mu);
  blk_t *b = blk_take(p, mask);
  if (b) blk_free_locked(b);
  publish();
  pthread_mutex_unlock(&mu);
  return b ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

/* ------------------------------------------------------------------ init, devices */

EXPORT CUresult cuInit(unsigned flags) {
  BUMP(cuInit);
  (void)flags;
  pthread_mutex_lock(&mu);
  config();
  pthread_mutex_unlock(&mu);
  return CUDA_SUCCESS;
}
EXPORT CUresult cuDriverGetVersion(int *v) {
  BUMP(cuDriverGetVersion);
  if (!v) return CUDA_ERROR_INVALID_VALUE;
  *v = 13000;
  return CUDA_SUCCESS;
}
EXPORT CUresult cuDeviceGetCount(int *n) {
  if (!inited) return CUDA_ERROR_NOT_INITIALIZED;
  *n = ndev;
  return CUDA_SUCCESS;
}
EXPORT CUresult cuDeviceGet(CUdevice *d, int ordinal) {
  if (!inited) return CUDA_ERROR_NOT_INITIALIZED;
  if (ordinal < 0 || ordinal >= ndev) return CUDA_ERROR_INVALID_DEVICE;
  *d = ordinal;
  return CUDA_SUCCESS;
}
EXPORT CUresult cuDeviceTotalMem_v2(size_t *bytes, CUdevice d) {
  if (!inited) return CUDA_ERROR_NOT_INITIALIZED;
  if (d < 0 || d >= ndev) return CUDA_ERROR_INVALID_DEVICE;
  *bytes = devmem;
  return CUDA_SUCCESS;
}
EXPORT CUresult cuGetExportTable(const void **table, const void *uuid) {
  BUMP(cuGetExportTable);
  (void)uuid;
  if (table) *table = NULL;
  return CUDA_ERROR_NOT_FOUND; /* the real driver's private tables cannot be faked */
}
EXPORT CUresult cuGetErrorString(CUresult e, const char **s) {
  (void)e;
  *s = "stand-in driver error";
  return CUDA_SUCCESS;
}
EXPORT CUresult cuGetErrorName(CUresult e, const char **s) {
  (void)e;
  *s = "CUDA_ERROR_STANDIN";
  return CUDA_SUCCESS;
}

/* ------------------------------------------------------------------ contexts */

static CUresult ctx_new(CUcontext *c, CUdevice d) {
  if (!c) return CUDA_ERROR_INVALID_VALUE;
  pthread_mutex_lock(&mu);
  CUresult rc = CUDA_SUCCESS;
  if (!inited) rc = CUDA_ERROR_NOT_INITIALIZED;
  else if (d < 0 || d >= ndev) rc = CUDA_ERROR_INVALID_DEVICE;
  else {
    ctx_t *x = malloc(sizeof *x);
    *x = (ctx_t){CTX_MAGIC, d, 1, 0};
    current = x;
    dev_ctxs[d]++;
    *c = (CUcontext)x;
    publish();
  }
  pthread_mutex_unlock(&mu);
  return rc;
}
EXPORT CUresult cuCtxCreate(CUcontext *c, unsigned flags, CUdevice d) { (void)flags; return ctx_new(c, d); }
EXPORT CUresult cuCtxCreate_v2(CUcontext *c, unsigned flags, CUdevice d) {
  BUMP(cuCtxCreate_v2);
  (void)flags;
  return ctx_new(c, d);
}
EXPORT CUresult cuCtxCreate_v3(CUcontext *c, void *params, int n, unsigned flags, CUdevice d) {
  BUMP(cuCtxCreate_v3);
  (void)params, (void)n, (void)flags;
  return ctx_new(c, d);
}
EXPORT CUresult cuCtxCreate_v4(CUcontext *c, void *params, unsigned flags, CUdevice d) {
  BUMP(cuCtxCreate_v4);
  (void)params, (void)flags;
  return ctx_new(c, d);
}

/* Frees every allocation made in ctx (what destroying a context does). */
static void ctx_free_all(ctx_t *x) {
  for (int h = 0; h < NB; h++)
    for (blk_t **p = &buckets[h]; *p;) {
      if ((*p)->ctx == x && (*p)->kind != A_REG) {
        blk_t *b = *p;
        *p = b->next;
        blk_free_locked(b);
      } else if ((*p)->ctx == x) {
        blk_t *b = *p;
        *p = b->next;
        free(b);
      } else p = &(*p)->next;
    }
}

EXPORT CUresult cuCtxDestroy_v2(CUcontext c) {
  BUMP(cuCtxDestroy_v2);
  ctx_t *x = (ctx_t *)c;
  if (!x || x->magic != CTX_MAGIC || !x->alive || x->primary) return CUDA_ERROR_INVALID_CONTEXT;
  pthread_mutex_lock(&mu);
  complete_pending(NULL, 1); /* destroying a context waits for its work */
  ctx_free_all(x);
  x->alive = 0;
  dev_ctxs[x->dev]--;
  if (current == x) current = NULL;
  publish();
  pthread_mutex_unlock(&mu);
  /* the handle stays allocated (never reused): a stale use is detected */
  return CUDA_SUCCESS;
}
EXPORT CUresult cuCtxDestroy(CUcontext c) { return cuCtxDestroy_v2(c); }
EXPORT CUresult cuCtxGetCurrent(CUcontext *c) {
  if (!c) return CUDA_ERROR_INVALID_VALUE;
  *c = current && current->alive ? (CUcontext)current : NULL;
  return CUDA_SUCCESS;
}
EXPORT CUresult cuCtxSetCurrent(CUcontext c) {
  ctx_t *x = (ctx_t *)c;
  if (x && x->magic != CTX_MAGIC) return CUDA_ERROR_INVALID_CONTEXT;
  current = x;
  return CUDA_SUCCESS;
}
EXPORT CUresult cuCtxGetDevice(CUdevice *d) {
  CUresult rc = need_ctx();
  if (rc) return rc;
  *d = current->dev;
  return CUDA_SUCCESS;
}
EXPORT CUresult cuDevicePrimaryCtxRetain(CUcontext *c, CUdevice d) {
  BUMP(cuDevicePrimaryCtxRetain);
  if (!inited) return CUDA_ERROR_NOT_INITIALIZED;
  if (d < 0 || d >= ndev || !c) return CUDA_ERROR_INVALID_DEVICE;
  pthread_mutex_lock(&mu);
  if (prim_refs[d]++ == 0) {
    primary[d].alive = 1;
    dev_ctxs[d]++;
  }
  *c = (CUcontext)&primary[d];
  publish();
  pthread_mutex_unlock(&mu);
  return CUDA_SUCCESS;
}
static void primary_down(CUdevice d) {
  complete_pending(NULL, 1);
  ctx_free_all(&primary[d]);
  if (primary[d].alive) dev_ctxs[d]--;
  primary[d].alive = 0;
  prim_refs[d] = 0;
}
EXPORT CUresult cuDevicePrimaryCtxRelease_v2(CUdevice d) {
  BUMP(cuDevicePrimaryCtxRelease_v2);
  if (d < 0 || d >= ndev) return CUDA_ERROR_INVALID_DEVICE;
  pthread_mutex_lock(&mu);
  CUresult rc = CUDA_SUCCESS;
  if (prim_refs[d] == 0) rc = CUDA_ERROR_INVALID_CONTEXT;
  else if (--prim_refs[d] == 0) primary_down(d);
  publish();
  pthread_mutex_unlock(&mu);
  return rc;
}
EXPORT CUresult cuDevicePrimaryCtxRelease(CUdevice d) { return cuDevicePrimaryCtxRelease_v2(d); }
EXPORT CUresult cuDevicePrimaryCtxReset_v2(CUdevice d) {
  BUMP(cuDevicePrimaryCtxReset_v2);
  if (d < 0 || d >= ndev) return CUDA_ERROR_INVALID_DEVICE;
  pthread_mutex_lock(&mu);
  primary_down(d);
  publish();
  pthread_mutex_unlock(&mu);
  return CUDA_SUCCESS;
}
EXPORT CUresult cuDevicePrimaryCtxReset(CUdevice d) { return cuDevicePrimaryCtxReset_v2(d); }

/* ------------------------------------------------------------------ device memory */

EXPORT CUresult cuMemAlloc_v2(CUdeviceptr *p, size_t n) {
  BUMP(cuMemAlloc_v2);
  return dev_alloc(p, n, A_DEV, NULL);
}
EXPORT CUresult cuMemAllocPitch_v2(CUdeviceptr *p, size_t *pitch, size_t w, size_t h, unsigned esz) {
  BUMP(cuMemAllocPitch_v2);
  (void)esz;
  if (!pitch) return CUDA_ERROR_INVALID_VALUE;
  *pitch = (w + 511) & ~(size_t)511;
  return dev_alloc(p, *pitch * h, A_DEV, NULL);
}
EXPORT CUresult cuMemFree_v2(CUdeviceptr p) {
  BUMP(cuMemFree_v2);
  return dev_free(p, 1 << A_DEV | 1 << A_MANAGED | 1 << A_POOL);
}
EXPORT CUresult cuMemGetInfo_v2(size_t *free_b, size_t *total) {
  CUresult rc = need_ctx();
  if (rc) return rc;
  *total = devmem;
  *free_b = devmem - (size_t)dev_live[current->dev];
  return CUDA_SUCCESS;
}

static pool_t *pool_of_current(void) { return current ? &default_pool[current->dev] : NULL; }
static CUresult alloc_async(CUdeviceptr *p, size_t n, CUstream s) {
  (void)s;
  pool_t *pool = pool_of_current();
  if (!pool) return CUDA_ERROR_INVALID_CONTEXT;
  return dev_alloc(p, n, A_POOL, pool);
}
EXPORT CUresult cuMemAllocAsync(CUdeviceptr *p, size_t n, CUstream s) {
  BUMP(cuMemAllocAsync);
  return alloc_async(p, n, s);
}
EXPORT CUresult cuMemAllocAsync_ptsz(CUdeviceptr *p, size_t n, CUstream s) {
  BUMP(cuMemAllocAsync_ptsz);
  return alloc_async(p, n, s);
}
static CUresult from_pool(CUdeviceptr *p, size_t n, CUmemoryPool pool) {
  pool_t *x = (pool_t *)pool;
  if (!x || x->magic != POOL_MAGIC || !x->alive) return CUDA_ERROR_INVALID_VALUE;
  return dev_alloc(p, n, A_POOL, x);
}
EXPORT CUresult cuMemAllocFromPoolAsync(CUdeviceptr *p, size_t n, CUmemoryPool pool, CUstream s) {
  BUMP(cuMemAllocFromPoolAsync);
  (void)s;
  return from_pool(p, n, pool);
}
EXPORT CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr *p, size_t n, CUmemoryPool pool, CUstream s) {
  BUMP(cuMemAllocFromPoolAsync_ptsz);
  (void)s;
  return from_pool(p, n, pool);
}
EXPORT CUresult cuMemFreeAsync(CUdeviceptr p, CUstream s) {
  BUMP(cuMemFreeAsync);
  return free_async(p, s);
}
EXPORT CUresult cuMemFreeAsync_ptsz(CUdeviceptr p, CUstream s) {
  BUMP(cuMemFreeAsync_ptsz);
  return free_async(p, s);
}
EXPORT CUresult cuMemPoolCreate(CUmemoryPool *pool, const CUmemPoolProps *props) {
  BUMP(cuMemPoolCreate);
  if (!pool || !props || props->location.type != CU_MEM_LOCATION_TYPE_DEVICE || props->location.id < 0 ||
      props->location.id >= ndev)
    return CUDA_ERROR_INVALID_VALUE;
  pool_t *x = calloc(1, sizeof *x);
  *x = (pool_t){POOL_MAGIC, props->location.id, 0, 1, 0, 0};
  *pool = (CUmemoryPool)x;
  return CUDA_SUCCESS;
}
EXPORT CUresult cuMemPoolDestroy(CUmemoryPool pool) {
  BUMP(cuMemPoolDestroy);
  pool_t *x = (pool_t *)pool;
  if (!x || x->magic != POOL_MAGIC || x->is_default || !x->alive) return CUDA_ERROR_INVALID_VALUE;
  pthread_mutex_lock(&mu);
  dev_live[x->dev] -= x->reserved;
  x->alive = 0;
  x->reserved = x->used = 0;
  publish();
  pthread_mutex_unlock(&mu);
  return CUDA_SUCCESS;
}
EXPORT CUresult cuMemPoolTrimTo(CUmemoryPool pool, size_t keep) {
  BUMP(cuMemPoolTrimTo);
  pool_t *x = (pool_t *)pool;
  if (!x || x->magic != POOL_MAGIC) return CUDA_ERROR_INVALID_VALUE;
  pthread_mutex_lock(&mu);
  long long floor_ = (x->used + (2LL << 20) - 1) & ~((2LL << 20) - 1), want = (long long)keep;
  if (want < floor_) want = floor_;
  if (want < x->reserved) {
    dev_live[x->dev] -= x->reserved - want;
    x->reserved = want;
  }
  publish();
  pthread_mutex_unlock(&mu);
  return CUDA_SUCCESS;
}
EXPORT CUresult cuMemPoolGetAttribute(CUmemoryPool pool, int attr, void *value) {
  pool_t *x = (pool_t *)pool;
  if (!x || x->magic != POOL_MAGIC || !value) return CUDA_ERROR_INVALID_VALUE;
  pthread_mutex_lock(&mu);
  CUresult rc = CUDA_SUCCESS;
  if (attr == CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT) *(cuuint64_t *)value = (cuuint64_t)x->reserved;
  else if (attr == CU_MEMPOOL_ATTR_USED_MEM_CURRENT) *(cuuint64_t *)value = (cuuint64_t)x->used;
  else rc = CUDA_ERROR_NOT_SUPPORTED;
  pthread_mutex_unlock(&mu);
  return rc;
}
EXPORT CUresult cuMemPoolSetAttribute(CUmemoryPool pool, int attr, void *value) {
  (void)pool, (void)attr, (void)value;
  return CUDA_SUCCESS;
}
EXPORT CUresult cuDeviceGetMemPool(CUmemoryPool *pool, CUdevice d) {
  if (!inited) return CUDA_ERROR_NOT_INITIALIZED;
  if (d < 0 || d >= ndev || !pool) return CUDA_ERROR_INVALID_DEVICE;
  *pool = (CUmemoryPool)&default_pool[d];
  return CUDA_SUCCESS;
}
EXPORT CUresult cuDeviceGetDefaultMemPool(CUmemoryPool *pool, CUdevice d) { return cuDeviceGetMemPool(pool, d); }

/* ------------------------------------------------------------------ VMM */

EXPORT CUresult cuMemAddressReserve(CUdeviceptr *p, size_t n, size_t align, CUdeviceptr addr,
                                    unsigned long long flags) {
  (void)align, (void)addr, (void)flags;
  if (!p || !n) return CUDA_ERROR_INVALID_VALUE;
  pthread_mutex_lock(&mu);
  *p = next_va;
  next_va += (n + (2ULL << 20) - 1) & ~((2ULL << 20) - 1);
  pthread_mutex_unlock(&mu);
  return CUDA_SUCCESS;
}
EXPORT CUresult cuMemAddressFree(CUdeviceptr p, size_t n) {
  (void)p, (void)n;
  return CUDA_SUCCESS;
}
EXPORT CUresult cuMemCreate(CUmemGenericAllocationHandle *h, size_t n, const CUmemAllocationProp *prop,
                            unsigned long long flags) {
  BUMP(cuMemCreate);
  (void)flags;
  if (!h || !n || !prop || prop->location.type != CU_MEM_LOCATION_TYPE_DEVICE || prop->location.id < 0 ||
      prop->location.id >= ndev)
    return CUDA_ERROR_INVALID_VALUE;
  pthread_mutex_lock(&mu);
  vmm_t *v = calloc(1, sizeof *v);
  v->size = n;
  v->dev = prop->location.id;
  dev_live[v->dev] += (long long)n;
  *h = (CUmemGenericAllocationHandle)(uintptr_t)v;
  publish();
  pthread_mutex_unlock(&mu);
  return CUDA_SUCCESS;
}
static void vmm_maybe_free(vmm_t *v) {
  if (v->released && !v->mapped) {
    dev_live[v->dev] -= (long long)v->size;
    free(v);
  }
}
EXPORT CUresult cuMemRelease(CUmemGenericAllocationHandle h) {
  BUMP(cuMemRelease);
  vmm_t *v = (vmm_t *)(uintptr_t)h;
  if (!v || v->released) return CUDA_ERROR_INVALID_VALUE;
  pthread_mutex_lock(&mu);
  v->released = 1;
  vmm_maybe_free(v); /* physical memory goes when released and unmapped */
  publish();
  pthread_mutex_unlock(&mu);
  return CUDA_SUCCESS;
}
EXPORT CUresult cuMemMap(CUdeviceptr p, size_t n, size_t off, CUmemGenericAllocationHandle h,
                         unsigned long long flags) {
  BUMP(cuMemMap);
  (void)flags;
  vmm_t *v = (vmm_t *)(uintptr_t)h;
  if (!p || !v || off + n > v->size) return CUDA_ERROR_INVALID_VALUE;
  pthread_mutex_lock(&mu);
  mapping_t *m = malloc(sizeof *m);
  *m = (mapping_t){p, n, v, maps};
  maps = m;
  v->mapped++;
  pthread_mutex_unlock(&mu);
  return CUDA_SUCCESS;
}
EXPORT CUresult cuMemUnmap(CUdeviceptr p, size_t n) {
  BUMP(cuMemUnmap);
  int found = 0;
  pthread_mutex_lock(&mu);
  for (mapping_t **q = &maps; *q;) {
    if ((*q)->va >= p && (*q)->va < p + n) {
      mapping_t *m = *q;
      *q = m->next;
      m->h->mapped--;
      vmm_maybe_free(m->h);
      free(m);
      found = 1;
    } else q = &(*q)->next;
  }
  publish();
  pthread_mutex_unlock(&mu);
  return found ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}
EXPORT CUresult cuMemImportFromShareableHandle(CUmemGenericAllocationHandle *h, void *os, int type) {
  BUMP(cuMemImportFromShareableHandle);
  (void)h, (void)os, (void)type;
  return CUDA_ERROR_NOT_SUPPORTED;
}

/* IPC imports (leakguard does not record them: memory another process allocated).
 * cuIpcOpenMemHandle checks that its by-value handle arrived intact (bytes 0..63). */
static CUresult ipc_open(CUdeviceptr *p, CUipcMemHandle h) {
  for (int i = 0; i < 64; i++)
    if (h.reserved[i] != (char)i) return CUDA_ERROR_INVALID_VALUE;
  if (!p) return CUDA_ERROR_INVALID_VALUE;
  *p = 0x7e0000000000ULL;
  return CUDA_SUCCESS;
}
EXPORT CUresult cuIpcOpenMemHandle_v2(CUdeviceptr *p, CUipcMemHandle h, unsigned flags) {
  BUMP(cuIpcOpenMemHandle_v2);
  (void)flags;
  return ipc_open(p, h);
}
EXPORT CUresult cuIpcOpenMemHandle(CUdeviceptr *p, CUipcMemHandle h, unsigned flags) {
  (void)flags;
  return ipc_open(p, h);
}
EXPORT CUresult cuMemPoolImportFromShareableHandle(CUmemoryPool *pool, void *os, int type, unsigned long long flags) {
  BUMP(cuMemPoolImportFromShareableHandle);
  (void)pool, (void)os, (void)type, (void)flags;
  return CUDA_ERROR_NOT_SUPPORTED;
}
EXPORT CUresult cuMemPoolImportPointer(CUdeviceptr *p, CUmemoryPool pool, void *share) {
  BUMP(cuMemPoolImportPointer);
  (void)p, (void)pool, (void)share;
  return CUDA_ERROR_NOT_SUPPORTED;
}
/* Stands for an allocator entry point of a future CUDA (cuGetProcAddress only). */
CUresult standin_future_alloc(CUdeviceptr *p, size_t n) {
  (void)p, (void)n;
  return CUDA_ERROR_NOT_SUPPORTED;
}

/* ------------------------------------------------------------------ managed, pinned, registered */

EXPORT CUresult cuMemAllocManaged(CUdeviceptr *p, size_t n, unsigned flags) {
  BUMP(cuMemAllocManaged);
  (void)flags;
  if (!p || !n) return CUDA_ERROR_INVALID_VALUE;
  pthread_mutex_lock(&mu);
  CUresult rc = need_ctx();
  if (rc == CUDA_SUCCESS) {
    /* Managed memory is mapped into the process by the driver, inside the call. */
    void *h = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (h == MAP_FAILED) rc = CUDA_ERROR_OUT_OF_MEMORY;
    else {
      blk_t *b = calloc(1, sizeof *b);
      *b = (blk_t){(unsigned long long)(uintptr_t)h, n, A_MANAGED, current->dev, current, NULL, h, NULL, NULL};
      dev_live[current->dev] += (long long)n;
      blk_add(b);
      *p = b->addr;
      publish();
    }
  }
  pthread_mutex_unlock(&mu);
  return rc;
}

EXPORT CUresult cuMemHostAlloc(void **pp, size_t n, unsigned flags) {
  BUMP(cuMemHostAlloc);
  (void)flags;
  if (!pp || !n) return CUDA_ERROR_INVALID_VALUE;
  pthread_mutex_lock(&mu);
  CUresult rc = need_ctx();
  if (rc == CUDA_SUCCESS) {
    /* The pages (mmap) and some bookkeeping (malloc), both inside the call. */
    void *h = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    void *book = malloc(4096);
    if (h == MAP_FAILED) {
      free(book);
      rc = CUDA_ERROR_OUT_OF_MEMORY;
    } else {
      memset(book, 1, 4096);
      blk_t *b = calloc(1, sizeof *b);
      *b = (blk_t){(unsigned long long)(uintptr_t)h, n, A_PINNED, current->dev, current, NULL, h, book, NULL};
      blk_add(b);
      *pp = h;
    }
  }
  pthread_mutex_unlock(&mu);
  return rc;
}
EXPORT CUresult cuMemAllocHost_v2(void **pp, size_t n) {
  BUMP(cuMemAllocHost_v2);
  return cuMemHostAlloc(pp, n, 0); /* an internal call: bound inside (-Bsymbolic) */
}
EXPORT CUresult cuMemFreeHost(void *p) {
  BUMP(cuMemFreeHost);
  return dev_free((CUdeviceptr)(uintptr_t)p, 1 << A_PINNED);
}
EXPORT CUresult cuMemHostRegister_v2(void *p, size_t n, unsigned flags) {
  BUMP(cuMemHostRegister_v2);
  (void)flags;
  if (!p || !n) return CUDA_ERROR_INVALID_VALUE;
  pthread_mutex_lock(&mu);
  CUresult rc = need_ctx();
  if (rc == CUDA_SUCCESS) {
    blk_t *b = calloc(1, sizeof *b);
    *b = (blk_t){(unsigned long long)(uintptr_t)p, n, A_REG, current->dev, current, NULL, NULL, NULL, NULL};
    blk_add(b);
  }
  pthread_mutex_unlock(&mu);
  return rc;
}
EXPORT CUresult cuMemHostRegister(void *p, size_t n, unsigned flags) { return cuMemHostRegister_v2(p, n, flags); }
EXPORT CUresult cuMemHostUnregister(void *p) {
  BUMP(cuMemHostUnregister);
  pthread_mutex_lock(&mu);
  blk_t *b = blk_take((unsigned long long)(uintptr_t)p, 1 << A_REG);
  free(b);
  pthread_mutex_unlock(&mu);
  return b ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

/* ------------------------------------------------------------------ arrays, streams */

static unsigned fmt_bytes(int f) { return f == 0x01 || f == 0x08 ? 1 : f == 0x02 || f == 0x09 || f == 0x10 ? 2 : 4; }
static CUresult array_new(CUarray *a, size_t n) {
  if (!a || !n) return CUDA_ERROR_INVALID_VALUE;
  pthread_mutex_lock(&mu);
  CUresult rc = need_ctx();
  if (rc == CUDA_SUCCESS) {
    blk_t *b = calloc(1, sizeof *b);
    *b = (blk_t){(unsigned long long)(uintptr_t)b, n, A_ARRAY, current->dev, current, NULL, NULL, NULL, NULL};
    dev_live[current->dev] += (long long)n;
    blk_add(b);
    *a = (CUarray)b;
    publish();
  }
  pthread_mutex_unlock(&mu);
  return rc;
}
EXPORT CUresult cuArrayCreate_v2(CUarray *a, const CUDA_ARRAY_DESCRIPTOR *d) {
  BUMP(cuArrayCreate_v2);
  if (!d) return CUDA_ERROR_INVALID_VALUE;
  return array_new(a, d->Width * (d->Height ? d->Height : 1) * d->NumChannels * fmt_bytes(d->Format));
}
EXPORT CUresult cuArray3DCreate_v2(CUarray *a, const CUDA_ARRAY3D_DESCRIPTOR *d) {
  BUMP(cuArray3DCreate_v2);
  if (!d) return CUDA_ERROR_INVALID_VALUE;
  return array_new(a, d->Width * (d->Height ? d->Height : 1) * (d->Depth ? d->Depth : 1) * d->NumChannels *
                          fmt_bytes(d->Format));
}
EXPORT CUresult cuArrayDestroy(CUarray a) {
  BUMP(cuArrayDestroy);
  return dev_free((CUdeviceptr)(uintptr_t)a, 1 << A_ARRAY);
}
EXPORT CUresult cuStreamCreate(CUstream *s, unsigned flags) {
  (void)flags;
  if (!s) return CUDA_ERROR_INVALID_VALUE;
  CUresult rc = need_ctx();
  if (rc) return rc;
  *s = (CUstream)malloc(64);
  return CUDA_SUCCESS;
}
EXPORT CUresult cuStreamDestroy_v2(CUstream s) {
  free(s);
  return CUDA_SUCCESS;
}
EXPORT CUresult cuStreamSynchronize(CUstream s) {
  pthread_mutex_lock(&mu);
  complete_pending(s, s == NULL); /* the legacy NULL stream waits for every stream */
  publish();
  pthread_mutex_unlock(&mu);
  return CUDA_SUCCESS;
}
EXPORT CUresult cuCtxSynchronize(void) {
  pthread_mutex_lock(&mu);
  complete_pending(NULL, 1);
  publish();
  pthread_mutex_unlock(&mu);
  return CUDA_SUCCESS;
}

/* ------------------------------------------------------------------ modules, kernels */

EXPORT CUresult cuModuleLoad(CUmodule *m, const char *path) {
  if (!m || !path) return CUDA_ERROR_INVALID_VALUE;
  FILE *f = fopen(path, "r");
  if (!f) return CUDA_ERROR_FILE_NOT_FOUND;
  fclose(f);
  *m = (CUmodule)malloc(16);
  return CUDA_SUCCESS;
}
EXPORT CUresult cuModuleGetFunction(CUfunction *fn, CUmodule m, const char *name) {
  if (!fn || !m || !name) return CUDA_ERROR_INVALID_VALUE;
  *fn = (CUfunction)m;
  return CUDA_SUCCESS;
}
EXPORT CUresult cuLaunchKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                               unsigned bz, unsigned shmem, CUstream s, void **params, void **extra) {
  (void)gx, (void)gy, (void)gz, (void)bx, (void)by, (void)bz, (void)shmem, (void)s, (void)extra;
  if (!f) return CUDA_ERROR_INVALID_VALUE;
  CUresult rc = need_ctx();
  if (rc) return rc;
  if (!params || !params[0]) return CUDA_SUCCESS;
  CUdeviceptr a = *(CUdeviceptr *)params[0];
  size_t n = 0;
  pthread_mutex_lock(&mu);
  for (blk_t *b = buckets[hb(a)]; b; b = b->next)
    if (b->addr == a && b->kind == A_MANAGED) n = b->size;
  pthread_mutex_unlock(&mu);
  /* What a GPU touching the whole managed block makes CUPTI report. */
  const char *lib = getenv("LEAKGUARD_CUPTI");
  void *h = n && lib ? dlopen(lib, RTLD_NOW | RTLD_NOLOAD) : NULL;
  int (*rec)(unsigned long long, unsigned, unsigned long long) = NULL;
  if (h) *(void **)&rec = dlsym(h, "standin_cupti_record");
  if (rec) {
    rec(a, 4 /* GPU page faults */, (n + 65535) / 65536);
    rec(a, 1 /* bytes to the device */, n);
  }
  if (h) dlclose(h);
  return CUDA_SUCCESS;
}

EXPORT long long standin_live_bytes(int dev) {
  pthread_mutex_lock(&mu);
  long long v = dev >= 0 && dev < MAXDEV ? dev_live[dev] : -1;
  pthread_mutex_unlock(&mu);
  return v;
}

/* ------------------------------------------------------------------ events (liblgpool)
 * An event recorded on a stream is done at once (the GPU is idle), unless the test
 * holds the streams busy (standin_events_hold(1)): then it stays not ready until
 * standin_events_complete(stream) (NULL: every stream), cuStreamSynchronize of its
 * stream or of the NULL stream, cuCtxSynchronize, or cuEventSynchronize. */
#define EVENT_MAGIC 0x45564e54
typedef struct standin_event {
  int magic, done;
  CUstream s;
  struct standin_event *next;
} standin_event_t;
static standin_event_t *events;
static int events_held;

static void events_done(CUstream s, int all) { /* caller holds mu */
  for (standin_event_t *e = events; e; e = e->next)
    if (all || e->s == s) e->done = 1;
}
EXPORT void standin_events_hold(int hold) {
  pthread_mutex_lock(&mu);
  events_held = hold;
  pthread_mutex_unlock(&mu);
}
EXPORT void standin_events_complete(CUstream s) {
  pthread_mutex_lock(&mu);
  for (standin_event_t *e = events; e; e = e->next)
    if (!s || e->s == s) e->done = 1;
  pthread_mutex_unlock(&mu);
}
EXPORT long standin_event_queries;
EXPORT CUresult cuEventCreate(CUevent *ev, unsigned flags) {
  (void)flags;
  if (!ev) return CUDA_ERROR_INVALID_VALUE;
  standin_event_t *e = calloc(1, sizeof *e);
  if (!e) return CUDA_ERROR_OUT_OF_MEMORY;
  e->magic = EVENT_MAGIC;
  e->done = 1;
  pthread_mutex_lock(&mu);
  e->next = events;
  events = e;
  pthread_mutex_unlock(&mu);
  *ev = (CUevent)e;
  return CUDA_SUCCESS;
}
EXPORT CUresult cuEventRecord(CUevent ev, CUstream s) {
  standin_event_t *e = (standin_event_t *)ev;
  if (!e || e->magic != EVENT_MAGIC) return CUDA_ERROR_INVALID_HANDLE;
  pthread_mutex_lock(&mu);
  e->s = s;
  e->done = !events_held;
  pthread_mutex_unlock(&mu);
  return CUDA_SUCCESS;
}
EXPORT CUresult cuEventQuery(CUevent ev) {
  standin_event_t *e = (standin_event_t *)ev;
  if (!e || e->magic != EVENT_MAGIC) return CUDA_ERROR_INVALID_HANDLE;
  pthread_mutex_lock(&mu);
  standin_event_queries++;
  int done = e->done;
  pthread_mutex_unlock(&mu);
  return done ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
}
EXPORT CUresult cuEventSynchronize(CUevent ev) {
  standin_event_t *e = (standin_event_t *)ev;
  if (!e || e->magic != EVENT_MAGIC) return CUDA_ERROR_INVALID_HANDLE;
  pthread_mutex_lock(&mu);
  e->done = 1;
  pthread_mutex_unlock(&mu);
  return CUDA_SUCCESS;
}
EXPORT CUresult cuEventDestroy_v2(CUevent ev) {
  standin_event_t *e = (standin_event_t *)ev;
  if (!e || e->magic != EVENT_MAGIC) return CUDA_ERROR_INVALID_HANDLE;
  pthread_mutex_lock(&mu);
  for (standin_event_t **pp = &events; *pp; pp = &(*pp)->next)
    if (*pp == e) {
      *pp = e->next;
      break;
    }
  pthread_mutex_unlock(&mu);
  e->magic = 0;
  free(e);
  return CUDA_SUCCESS;
}
EXPORT CUresult cuEventDestroy(CUevent ev) { return cuEventDestroy_v2(ev); }
