/* SPDX-License-Identifier: MIT */
/*
 * cuda_ctx.c - contexts, devices and stream-ordered pools at the CUDA driver API: their
 * wrappers, the driver queries the other wrappers make (current context, its device,
 * total memory, pool attributes), and the per-device gauges of the region header
 * (contexts created, destroyed, recreated; pools' reserved and used bytes).
 *
 * Apart from cuda_mem.c because none of it is a record of an allocation: it is what
 * the records are attributed to (a device, a context) and counted against. Destroying
 * a context (or resetting / releasing the last reference of a primary context)
 * releases the records made in it (lgi_gpu_release_ctx). The table lock of cuda_mem.c
 * also guards the context, primary-context and pool lists here.
 */
#include <dlfcn.h>
#include <link.h>
#include <sched.h>
#include <stdatomic.h>
#include <string.h>

#include "capture/gpu/cuda_impl.h"

/* ------------------------------------------------------------------ driver helpers
 * Queries the wrappers make (current context, its device, total memory, pool
 * attributes), resolved in the same driver object as the first bound entry point. */
static struct {
  lgcu_result_t (*ctx_get_current)(lgcu_ctx_t *);
  lgcu_result_t (*ctx_get_device)(lgcu_device_t *);
  lgcu_result_t (*total_mem)(size_t *, lgcu_device_t);
  lgcu_result_t (*pool_get_attr)(lgcu_pool_t, int, void *);
  lgcu_result_t (*dev_get_mempool)(lgcu_pool_t *, lgcu_device_t);
} hp;
static _Atomic int hp_state; /* 0 not yet, 1 resolving, 2 done */

void lgi_cuda_helpers_from(void *real) {
  if (LGI_LIKELY(atomic_load_explicit(&hp_state, memory_order_acquire) == 2)) return;
  int z = 0;
  if (!atomic_compare_exchange_strong(&hp_state, &z, 1)) {
    while (atomic_load(&hp_state) == 1) sched_yield();
    return;
  }
  dlsym_fn d = (dlsym_fn)lgi_dlsym_resolve();
  Dl_info di;
  /* A handle on the driver's object (kept: the driver is never unloaded under us),
   * so the lookups stay in it even when it was dlopen()ed RTLD_LOCAL. A link_map from
   * dladdr1 is no handle for an object loaded as a dependency (no search list). */
  void *h = dladdr(real, &di) && di.dli_fname ? dlopen(di.dli_fname, RTLD_LAZY | RTLD_NOLOAD) : NULL;
  if (!h) h = RTLD_NEXT;
  *(void **)&hp.ctx_get_current = d(h, "cuCtxGetCurrent");
  *(void **)&hp.ctx_get_device = d(h, "cuCtxGetDevice");
  *(void **)&hp.total_mem = d(h, "cuDeviceTotalMem_v2");
  *(void **)&hp.pool_get_attr = d(h, "cuMemPoolGetAttribute");
  *(void **)&hp.dev_get_mempool = d(h, "cuDeviceGetMemPool");
  atomic_store_explicit(&hp_state, 2, memory_order_release);
}

/* ------------------------------------------------------------------ contexts and devices */

#define LGC_MAX_CTX 256
#define LGC_DEVS LGI_GPU_DEVS
typedef struct ctx_ent {
  uint64_t ctx;
  int dev;
  uint8_t alive, primary;
} ctx_ent_t;
static ctx_ent_t ctxs[LGC_MAX_CTX];
static int nctx;
static struct {
  int refs;
  uint64_t ctx;
} prim[LGC_DEVS];
static uint8_t destroyed_once[LGC_DEVS];
static _Atomic uint32_t ctx_gen = 1; /* bumped when a context goes or comes: thread caches */
static __thread uint64_t tl_ctx;
static __thread int tl_dev;
static __thread uint32_t tl_gen;

/* Caller holds the table lock. */
static ctx_ent_t *ctx_find(uint64_t c) {
  ctx_ent_t *dead = NULL;
  for (int i = 0; i < nctx; i++) {
    if (ctxs[i].ctx != c) continue;
    if (ctxs[i].alive) return &ctxs[i];
    dead = &ctxs[i];
  }
  return dead;
}

static ctx_ent_t *ctx_slot(uint64_t c) {
  ctx_ent_t *e = ctx_find(c);
  if (e) return e;
  for (int i = 0; i < nctx; i++)
    if (!ctxs[i].alive) return &ctxs[i];
  return nctx < LGC_MAX_CTX ? &ctxs[nctx++] : NULL;
}

/* First sight of a device: the count of devices, its total memory. */
void lgi_cuda_dev_seen(int dev) {
  lg_region_hdr_t *h = lgi_g.hdr;
  uint32_t none = LG_GPU_VENDOR_NONE; /* the ordinals are CUDA's (unless another vendor's came first) */
  atomic_compare_exchange_strong(&h->gpu_vendor, &none, LG_GPU_VENDOR_CUDA);
  uint32_t n = atomic_load(&h->gpu_ndev), want = (uint32_t)dev + 1;
  while (n < want && !atomic_compare_exchange_weak(&h->gpu_ndev, &n, want)) {}
  lg_gpu_dev_t *g = lgi_gpu_gauge(dev);
  if (g && !atomic_load_explicit(&g->total_bytes, memory_order_relaxed) && hp.total_mem) {
    size_t b = 0;
    if (hp.total_mem(&b, dev) == LGCU_SUCCESS && b) atomic_store(&g->total_bytes, (uint64_t)b);
  }
}

/* The current context and its device (0 when there is none: the call failed anyway). */
int lgi_cuda_current_dev(uint64_t *ctx_out) {
  lgcu_ctx_t c = NULL;
  *ctx_out = 0;
  if (!hp.ctx_get_current || hp.ctx_get_current(&c) != LGCU_SUCCESS || !c) return 0;
  uint64_t cv = (uint64_t)(uintptr_t)c;
  *ctx_out = cv;
  uint32_t g = atomic_load_explicit(&ctx_gen, memory_order_acquire);
  if (tl_ctx == cv && tl_gen == g) return tl_dev;
  int dev = -1;
  lgi_gpu_tab_lock();
  ctx_ent_t *e = ctx_find(cv);
  if (e && e->alive) dev = e->dev;
  lgi_gpu_tab_unlock();
  if (dev < 0) {
    /* A context made before recording, or through an untracked path: learn its device
     * (not counted as created). */
    lgcu_device_t d = 0;
    dev = hp.ctx_get_device && hp.ctx_get_device(&d) == LGCU_SUCCESS ? lgi_gpu_clamp_dev(d) : 0;
    lgi_gpu_tab_lock();
    e = ctx_slot(cv);
    if (e) *e = (ctx_ent_t){cv, dev, 1, 0};
    lgi_gpu_tab_unlock();
    lgi_cuda_dev_seen(dev);
  }
  tl_ctx = cv;
  tl_dev = dev;
  tl_gen = g;
  return dev;
}

/* PyTorch's CUDA allocator library loaded? (For the report's notice: its caching
 * allocator hides tensors behind segments, docs/cuda.md.) */
static int torch_cb(struct dl_phdr_info *info, size_t size, void *arg) {
  (void)size, (void)arg;
  const char *n = info->dlpi_name;
  return n && (strstr(n, "libc10_cuda.so") || strstr(n, "libtorch_cuda.so"));
}

static void ctx_created(uint64_t c, int dev, int primary) {
  dev = lgi_gpu_clamp_dev(dev);
  lgi_gpu_tab_lock();
  ctx_ent_t *e = ctx_slot(c);
  if (e) *e = (ctx_ent_t){c, dev, 1, (uint8_t)primary};
  int again = destroyed_once[dev];
  lgi_gpu_tab_unlock();
  atomic_fetch_add(&ctx_gen, 1);
  lg_gpu_dev_t *g = lgi_gpu_gauge(dev);
  if (g) {
    atomic_fetch_add(&g->contexts, 1);
    atomic_fetch_add(&g->contexts_created, 1);
    if (again) atomic_fetch_add(&g->contexts_recreated, 1);
  }
  atomic_fetch_add_explicit(&lgi_g.hdr->gpu_calls, 1, memory_order_relaxed);
  lgi_cuda_dev_seen(dev);
  if (!(atomic_load(&lgi_g.hdr->gpu_flags) & LG_CUDA_TORCH) && dl_iterate_phdr(torch_cb, NULL))
    lgi_gpu_set_flag(LG_CUDA_TORCH);
  lgi_cuda_um_start(); /* --cuda-um: CUPTI needs a context */
}

/* The context is gone: every record made in it is released. */
static void ctx_destroyed(lgi_tls_t *t, uint64_t c) {
  lgi_gpu_tab_lock();
  ctx_ent_t *e = ctx_find(c);
  int dev = e && e->alive ? e->dev : -1;
  if (e) e->alive = 0;
  if (dev >= 0) destroyed_once[dev] = 1;
  lgi_gpu_release_ctx(t, c);
  lgi_gpu_tab_unlock();
  atomic_fetch_add(&ctx_gen, 1);
  lg_gpu_dev_t *g = lgi_gpu_gauge(dev);
  if (g) {
    atomic_fetch_sub(&g->contexts, 1);
    atomic_fetch_add(&g->contexts_destroyed, 1);
  }
  atomic_fetch_add_explicit(&lgi_g.hdr->gpu_calls, 1, memory_order_relaxed);
}

/* ------------------------------------------------------------------ pools
 * Stream-ordered pools: created ones (device from their properties) and the
 * devices' current pools, as first used by cuMemAllocAsync. Their reserved and used
 * bytes are read at most once per epoch tick (100 ms), from inside a wrapper. */

#define LGC_MAX_POOLS 64
static struct {
  uint64_t pool;
  int dev;
} pools[LGC_MAX_POOLS];
static int npools;
static uint8_t default_pool_known[LGC_DEVS];
static _Atomic uint32_t pool_epoch = UINT32_MAX;

static void pool_add(uint64_t p, int dev) {
  int added = 0;
  lgi_gpu_tab_lock();
  int i = 0;
  while (i < npools && pools[i].pool != p) i++;
  if (i == npools && npools < LGC_MAX_POOLS) {
    pools[npools].pool = p;
    pools[npools++].dev = dev;
    added = 1;
  }
  lgi_gpu_tab_unlock();
  lg_gpu_dev_t *g = lgi_gpu_gauge(dev);
  if (added && g) atomic_fetch_add(&g->pools, 1);
}

int lgi_cuda_pool_dev(uint64_t p) {
  int dev = -1;
  lgi_gpu_tab_lock();
  for (int i = 0; i < npools; i++)
    if (pools[i].pool == p) dev = pools[i].dev;
  lgi_gpu_tab_unlock();
  return dev;
}

static void pool_del(uint64_t p) {
  int dev = -1;
  lgi_gpu_tab_lock();
  for (int i = 0; i < npools; i++)
    if (pools[i].pool == p) {
      dev = pools[i].dev;
      pools[i] = pools[--npools];
      break;
    }
  lgi_gpu_tab_unlock();
  lg_gpu_dev_t *g = lgi_gpu_gauge(dev);
  if (g) atomic_fetch_sub(&g->pools, 1);
}

void lgi_cuda_pool_sample(int force) {
  if (!hp.pool_get_attr) return;
  uint32_t ep = lgi_epoch();
  if (!force && atomic_load_explicit(&pool_epoch, memory_order_relaxed) == ep) return;
  atomic_store_explicit(&pool_epoch, ep, memory_order_relaxed);
  uint64_t list[LGC_MAX_POOLS];
  int devs[LGC_MAX_POOLS], n = 0;
  lgi_gpu_tab_lock();
  for (int i = 0; i < npools; i++) list[n] = pools[i].pool, devs[n++] = pools[i].dev;
  lgi_gpu_tab_unlock();
  int64_t res[LG_GPU_MAX_DEVICES] = {0}, used[LG_GPU_MAX_DEVICES] = {0};
  for (int i = 0; i < n; i++) {
    uint64_t r = 0, u = 0;
    if (devs[i] < 0 || devs[i] >= LG_GPU_MAX_DEVICES) continue;
    if (hp.pool_get_attr((lgcu_pool_t)(uintptr_t)list[i], LGCU_POOL_RESERVED_MEM_CURRENT, &r) == LGCU_SUCCESS)
      res[devs[i]] += (int64_t)r;
    if (hp.pool_get_attr((lgcu_pool_t)(uintptr_t)list[i], LGCU_POOL_USED_MEM_CURRENT, &u) == LGCU_SUCCESS)
      used[devs[i]] += (int64_t)u;
  }
  uint32_t nd = atomic_load(&lgi_g.hdr->gpu_ndev);
  for (uint32_t d = 0; d < nd && d < LG_GPU_MAX_DEVICES; d++) {
    atomic_store(&lgi_g.hdr->gpu[d].pool_reserved_bytes, res[d]);
    atomic_store(&lgi_g.hdr->gpu[d].pool_used_bytes, used[d]);
  }
}

void lgi_cuda_default_pool(int dev) {
  if (dev < 0 || dev >= LGC_DEVS || default_pool_known[dev] || !hp.dev_get_mempool) return;
  lgcu_pool_t p = NULL;
  if (hp.dev_get_mempool(&p, dev) == LGCU_SUCCESS && p) pool_add((uint64_t)(uintptr_t)p, dev);
  default_pool_known[dev] = 1;
}

/* ------------------------------------------------------------------ the wrappers: pools, contexts */

lgcu_result_t lgi_cuda_h_POOLCREATE(void *real, lgcu_pool_t *pool, const void *props, uintptr_t ra, uintptr_t cfa) {
  (void)ra, (void)cfa;
  if (!real) return LGCU_ERROR_STUB_LIBRARY;
  lgi_tls_t *t = &lgi_tls;
  if (!lgi_gpu_enter(t)) return REAL(POOLCREATE)(pool, props);
  lgcu_result_t rc = REAL(POOLCREATE)(pool, props);
  if (rc == LGCU_SUCCESS && pool && *pool) {
    const lgcu_alloc_prop_head_t *ph = props;
    uint64_t ctx;
    int dev = ph && ph->location_type == LGCU_LOCATION_DEVICE ? lgi_gpu_clamp_dev(ph->location_id)
                                                              : lgi_cuda_current_dev(&ctx);
    lgi_cuda_dev_seen(dev);
    pool_add((uint64_t)(uintptr_t)*pool, dev);
    lgi_cuda_pool_sample(1);
  }
  lgi_gpu_leave(t);
  return rc;
}

lgcu_result_t lgi_cuda_h_POOLDESTROY(void *real, lgcu_pool_t pool, uintptr_t ra, uintptr_t cfa) {
  (void)ra, (void)cfa;
  if (!real) return LGCU_ERROR_STUB_LIBRARY;
  lgi_tls_t *t = &lgi_tls;
  if (!lgi_gpu_enter(t)) return REAL(POOLDESTROY)(pool);
  lgcu_result_t rc = REAL(POOLDESTROY)(pool);
  if (rc == LGCU_SUCCESS) {
    pool_del((uint64_t)(uintptr_t)pool);
    lgi_cuda_pool_sample(1);
  }
  lgi_gpu_leave(t);
  return rc;
}

lgcu_result_t lgi_cuda_h_POOLTRIM(void *real, lgcu_pool_t pool, size_t keep, uintptr_t ra, uintptr_t cfa) {
  (void)ra, (void)cfa;
  if (!real) return LGCU_ERROR_STUB_LIBRARY;
  lgi_tls_t *t = &lgi_tls;
  if (!lgi_gpu_enter(t)) return REAL(POOLTRIM)(pool, keep);
  lgcu_result_t rc = REAL(POOLTRIM)(pool, keep);
  if (rc == LGCU_SUCCESS) lgi_cuda_pool_sample(1);
  lgi_gpu_leave(t);
  return rc;
}

/* Context creation, all three ABIs. */
#define LGC_CTXCREATE(K, call)                                                                                         \
  if (!real) return LGCU_ERROR_STUB_LIBRARY;                                                                           \
  lgi_tls_t *t = &lgi_tls;                                                                                             \
  if (!lgi_gpu_enter(t)) return call;                                                                                  \
  lgcu_result_t rc = call;                                                                                             \
  if (rc == LGCU_SUCCESS && c && *c) ctx_created((uint64_t)(uintptr_t)*c, d, 0);                                       \
  lgi_gpu_leave(t);                                                                                                    \
  return rc

lgcu_result_t lgi_cuda_h_CTXCREATE2(void *real, lgcu_ctx_t *c, unsigned flags, lgcu_device_t d, uintptr_t ra,
                                    uintptr_t cfa) {
  (void)ra, (void)cfa;
  LGC_CTXCREATE(CTXCREATE2, REAL(CTXCREATE2)(c, flags, d));
}
lgcu_result_t lgi_cuda_h_CTXCREATE3(void *real, lgcu_ctx_t *c, void *params, int nparams, unsigned flags,
                                    lgcu_device_t d, uintptr_t ra, uintptr_t cfa) {
  (void)ra, (void)cfa;
  LGC_CTXCREATE(CTXCREATE3, REAL(CTXCREATE3)(c, params, nparams, flags, d));
}
lgcu_result_t lgi_cuda_h_CTXCREATE4(void *real, lgcu_ctx_t *c, void *params, unsigned flags, lgcu_device_t d,
                                    uintptr_t ra, uintptr_t cfa) {
  (void)ra, (void)cfa;
  LGC_CTXCREATE(CTXCREATE4, REAL(CTXCREATE4)(c, params, flags, d));
}

lgcu_result_t lgi_cuda_h_CTXDESTROY(void *real, lgcu_ctx_t c, uintptr_t ra, uintptr_t cfa) {
  (void)ra, (void)cfa;
  if (!real) return LGCU_ERROR_STUB_LIBRARY;
  lgi_tls_t *t = &lgi_tls;
  if (!lgi_gpu_enter(t)) return REAL(CTXDESTROY)(c);
  lgcu_result_t rc = REAL(CTXDESTROY)(c);
  if (rc == LGCU_SUCCESS && c) ctx_destroyed(t, (uint64_t)(uintptr_t)c);
  lgi_gpu_leave(t);
  return rc;
}

lgcu_result_t lgi_cuda_h_PRIMRETAIN(void *real, lgcu_ctx_t *c, lgcu_device_t d, uintptr_t ra, uintptr_t cfa) {
  (void)ra, (void)cfa;
  if (!real) return LGCU_ERROR_STUB_LIBRARY;
  lgi_tls_t *t = &lgi_tls;
  if (!lgi_gpu_enter(t)) return REAL(PRIMRETAIN)(c, d);
  lgcu_result_t rc = REAL(PRIMRETAIN)(c, d);
  if (rc == LGCU_SUCCESS && c && *c) {
    int dev = lgi_gpu_clamp_dev(d);
    lgi_gpu_tab_lock();
    int first = prim[dev].refs++ == 0;
    prim[dev].ctx = (uint64_t)(uintptr_t)*c;
    lgi_gpu_tab_unlock();
    if (first) ctx_created((uint64_t)(uintptr_t)*c, dev, 1);
  }
  lgi_gpu_leave(t);
  return rc;
}

lgcu_result_t lgi_cuda_h_PRIMRELEASE(void *real, lgcu_device_t d, uintptr_t ra, uintptr_t cfa) {
  (void)ra, (void)cfa;
  if (!real) return LGCU_ERROR_STUB_LIBRARY;
  lgi_tls_t *t = &lgi_tls;
  if (!lgi_gpu_enter(t)) return REAL(PRIMRELEASE)(d);
  lgcu_result_t rc = REAL(PRIMRELEASE)(d);
  if (rc == LGCU_SUCCESS) {
    int dev = lgi_gpu_clamp_dev(d);
    lgi_gpu_tab_lock();
    int last = prim[dev].refs > 0 && --prim[dev].refs == 0;
    uint64_t c = prim[dev].ctx;
    lgi_gpu_tab_unlock();
    /* The last reference destroys the primary context. */
    if (last && c) ctx_destroyed(t, c);
  }
  lgi_gpu_leave(t);
  return rc;
}

lgcu_result_t lgi_cuda_h_PRIMRESET(void *real, lgcu_device_t d, uintptr_t ra, uintptr_t cfa) {
  (void)ra, (void)cfa;
  if (!real) return LGCU_ERROR_STUB_LIBRARY;
  lgi_tls_t *t = &lgi_tls;
  if (!lgi_gpu_enter(t)) return REAL(PRIMRESET)(d);
  lgcu_result_t rc = REAL(PRIMRESET)(d);
  if (rc == LGCU_SUCCESS) {
    int dev = lgi_gpu_clamp_dev(d);
    lgi_gpu_tab_lock();
    int was = prim[dev].refs > 0;
    uint64_t c = prim[dev].ctx;
    prim[dev].refs = 0;
    lgi_gpu_tab_unlock();
    /* Every allocation of the primary context is gone; using it again recreates it. */
    if (was && c) ctx_destroyed(t, c);
  }
  lgi_gpu_leave(t);
  return rc;
}
