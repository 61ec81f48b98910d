/* SPDX-License-Identifier: MIT */
/*
 * standin_mem.c - the stand-in CUDA driver's memory entry points (tests only; the
 * driver itself: standin_cuda.c): device memory, stream-ordered pools, the VMM API,
 * managed, pinned and registered host memory, arrays and streams, modules and kernels
 * (with the stand-in CUPTI's Unified Memory records), events.
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

void events_done(CUstream s, int all) { /* caller holds mu */
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
