/* SPDX-License-Identifier: MIT */
/*
 * standin_cuda.c - a stand-in CUDA driver (libcuda.so.1) for the tests only: its
 * state, init, devices and contexts here; the memory entry points in standin_mem.c
 * (the state they share: standin_state.h); cuGetProcAddress in standin_procs.c.
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

#include "standin_state.h"


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

pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
int ndev = 1, inited;
size_t devmem = 16ULL << 30, ctx_overhead = 300ULL << 20;
static ctx_t primary[MAXDEV];
static int prim_refs[MAXDEV];
pool_t default_pool[MAXDEV];
long long dev_live[MAXDEV];  /* device bytes held (allocations, pool reserves, VMM) */
static int dev_ctxs[MAXDEV];
__thread ctx_t *current;
blk_t *buckets[NB];
mapping_t *maps;
static unsigned long long next_addr[MAXDEV];
unsigned long long next_va = 0x300000000000ULL;
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
void publish(void) {
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

unsigned hb(unsigned long long a) { return (unsigned)((a * 0x9E3779B97F4A7C15ULL) >> 52) % NB; }

void blk_add(blk_t *b) {
  unsigned h = hb(b->addr);
  b->next = buckets[h];
  buckets[h] = b;
}

blk_t *blk_take(unsigned long long a, int kind_mask) {
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

CUresult need_ctx(void) {
  if (!inited) return CUDA_ERROR_NOT_INITIALIZED;
  if (!current || !current->alive) return CUDA_ERROR_INVALID_CONTEXT;
  return CUDA_SUCCESS;
}

CUresult dev_alloc(CUdeviceptr *p, size_t n, int kind, pool_t *pool) {
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

/* Completes the pending frees of stream s (all of them when all), and the events
 * recorded on it. Caller holds mu. */
void complete_pending(CUstream s, int all) {
  events_done(s, all);
  int w = 0;
  for (int i = 0; i < npending; i++) {
    if (all || pending[i].s == s) blk_free_locked(pending[i].b);
    else pending[w++] = pending[i];
  }
  npending = w;
}

/* cuMemFreeAsync: the free is enqueued; the memory goes when the stream gets there. */
CUresult free_async(CUdeviceptr p, CUstream s) {
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

CUresult dev_free(CUdeviceptr p, int mask) {
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

