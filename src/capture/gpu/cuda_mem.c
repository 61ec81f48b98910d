/* SPDX-License-Identifier: MIT */
/*
 * cuda_mem.c - GPU memory at the CUDA driver API: the wrappers that allocate and free
 * (device, stream-ordered, VMM, managed, pinned, registered host memory, arrays) and
 * the lg_cuda_* calls of the public API. What they record goes to the vendor-neutral
 * address/handle table (gpu/table.c, gpu.h).
 *
 * Apart from cuda.c (how a call reaches a wrapper) and cuda_ctx.c (contexts, devices,
 * pools). The recursion guard is held across every driver call made by a wrapper
 * (lgi_gpu_enter), so memory the driver allocates or maps inside it (the pages of
 * pinned memory) is not also counted as host or mmap memory.
 */
#include <errno.h>
#include <stdatomic.h>
#include <string.h>

#include "capture/gpu/cuda_impl.h"
#include "capture/gpu/gpu.h"
#include "core/model.h"
#include "leakguard.h"

/* ------------------------------------------------------------------ the wrappers */

/* A free of key in namespace ns through the driver's free function. */
#define LGC_FREE(t, key, ns, call)                                                                                     \
  do {                                                                                                                 \
    lgi_gpu_ent_t e_;                                                                                                  \
    int had_ = lgi_gpu_take(t, key, ns, &e_);                                                                          \
    rc = (call);                                                                                                       \
    if (rc != LGCU_SUCCESS && had_) lgi_gpu_untake(t, &e_);                                                            \
    lgi_gpu_after_free(had_, rc == LGCU_SUCCESS);                                                                      \
  } while (0)

lgcu_result_t lgi_cuda_h_MEMALLOC(void *real, lgcu_dptr_t *dptr, size_t n, uintptr_t ra, uintptr_t cfa) {
  if (!real) return LGCU_ERROR_STUB_LIBRARY;
  lgi_tls_t *t = &lgi_tls;
  if (!lgi_gpu_enter(t)) return REAL(MEMALLOC)(dptr, n);
  lgcu_result_t rc = REAL(MEMALLOC)(dptr, n);
  if (rc == LGCU_SUCCESS && dptr && *dptr) {
    uint64_t ctx;
    int dev = lgi_cuda_current_dev(&ctx);
    lgi_gpu_track(t, LGI_GPU_ADDR, *dptr, n, LG_SPACE_DEVICE, dev, ctx, 0, ra, cfa);
  }
  lgi_gpu_leave(t);
  return rc;
}

lgcu_result_t lgi_cuda_h_MEMPITCH(void *real, lgcu_dptr_t *dptr, size_t *pitch, size_t w, size_t h, unsigned esz,
                                  uintptr_t ra, uintptr_t cfa) {
  if (!real) return LGCU_ERROR_STUB_LIBRARY;
  lgi_tls_t *t = &lgi_tls;
  if (!lgi_gpu_enter(t)) return REAL(MEMPITCH)(dptr, pitch, w, h, esz);
  lgcu_result_t rc = REAL(MEMPITCH)(dptr, pitch, w, h, esz);
  if (rc == LGCU_SUCCESS && dptr && *dptr && pitch) {
    uint64_t ctx;
    int dev = lgi_cuda_current_dev(&ctx);
    lgi_gpu_track(t, LGI_GPU_ADDR, *dptr, (uint64_t)*pitch * h, LG_SPACE_DEVICE, dev, ctx, 0, ra, cfa);
  }
  lgi_gpu_leave(t);
  return rc;
}

lgcu_result_t lgi_cuda_h_MEMFREE(void *real, lgcu_dptr_t dptr, uintptr_t ra, uintptr_t cfa) {
  (void)ra, (void)cfa;
  if (!real) return LGCU_ERROR_STUB_LIBRARY;
  lgi_tls_t *t = &lgi_tls;
  if (!dptr || !lgi_gpu_enter(t)) return REAL(MEMFREE)(dptr);
  lgcu_result_t rc;
  LGC_FREE(t, dptr, LGI_GPU_ADDR, REAL(MEMFREE)(dptr));
  lgi_gpu_leave(t);
  return rc;
}

lgcu_result_t lgi_cuda_h_ALLOCASYNC(void *real, lgcu_dptr_t *dptr, size_t n, lgcu_stream_t s, uintptr_t ra,
                                    uintptr_t cfa) {
  if (!real) return LGCU_ERROR_STUB_LIBRARY;
  lgi_tls_t *t = &lgi_tls;
  if (!lgi_gpu_enter(t)) return REAL(ALLOCASYNC)(dptr, n, s);
  lgcu_result_t rc = REAL(ALLOCASYNC)(dptr, n, s);
  if (rc == LGCU_SUCCESS && dptr && *dptr) {
    uint64_t ctx;
    int dev = lgi_cuda_current_dev(&ctx);
    lgi_gpu_track(t, LGI_GPU_ADDR, *dptr, n, LG_SPACE_DEVICE, dev, ctx, (uint64_t)(uintptr_t)s, ra, cfa);
    lgi_cuda_default_pool(dev);
    lgi_cuda_pool_sample(0);
  }
  lgi_gpu_leave(t);
  return rc;
}

lgcu_result_t lgi_cuda_h_FROMPOOL(void *real, lgcu_dptr_t *dptr, size_t n, lgcu_pool_t pool, lgcu_stream_t s,
                                  uintptr_t ra, uintptr_t cfa) {
  if (!real) return LGCU_ERROR_STUB_LIBRARY;
  lgi_tls_t *t = &lgi_tls;
  if (!lgi_gpu_enter(t)) return REAL(FROMPOOL)(dptr, n, pool, s);
  lgcu_result_t rc = REAL(FROMPOOL)(dptr, n, pool, s);
  if (rc == LGCU_SUCCESS && dptr && *dptr) {
    uint64_t ctx;
    int dev = lgi_cuda_current_dev(&ctx), pd = lgi_cuda_pool_dev((uint64_t)(uintptr_t)pool);
    lgi_gpu_track(t, LGI_GPU_ADDR, *dptr, n, LG_SPACE_DEVICE, pd >= 0 ? pd : dev, ctx, (uint64_t)(uintptr_t)s, ra, cfa);
    lgi_cuda_pool_sample(0);
  }
  lgi_gpu_leave(t);
  return rc;
}

lgcu_result_t lgi_cuda_h_FREEASYNC(void *real, lgcu_dptr_t dptr, lgcu_stream_t s, uintptr_t ra, uintptr_t cfa) {
  (void)ra, (void)cfa;
  if (!real) return LGCU_ERROR_STUB_LIBRARY;
  lgi_tls_t *t = &lgi_tls;
  if (!dptr || !lgi_gpu_enter(t)) return REAL(FREEASYNC)(dptr, s);
  lgcu_result_t rc;
  /* Counted when enqueued: the program gave the memory back to the pool. */
  LGC_FREE(t, dptr, LGI_GPU_ADDR, REAL(FREEASYNC)(dptr, s));
  if (rc == LGCU_SUCCESS) lgi_cuda_pool_sample(0);
  lgi_gpu_leave(t);
  return rc;
}

lgcu_result_t lgi_cuda_h_MEMCREATE(void *real, lgcu_handle_t *h, size_t n, const void *prop, unsigned long long flags,
                                   uintptr_t ra, uintptr_t cfa) {
  if (!real) return LGCU_ERROR_STUB_LIBRARY;
  lgi_tls_t *t = &lgi_tls;
  if (!lgi_gpu_enter(t)) return REAL(MEMCREATE)(h, n, prop, flags);
  lgcu_result_t rc = REAL(MEMCREATE)(h, n, prop, flags);
  if (rc == LGCU_SUCCESS && h && *h) {
    const lgcu_alloc_prop_head_t *ph = prop;
    unsigned space = LG_SPACE_DEVICE;
    uint64_t ctx;
    int dev;
    if (ph && ph->location_type == LGCU_LOCATION_DEVICE) {
      dev = lgi_gpu_clamp_dev(ph->location_id);
      lgi_cuda_dev_seen(dev);
    } else {
      /* host memory made by the VMM API: pinned */
      if (ph && ph->location_type >= LGCU_LOCATION_HOST) space = LG_SPACE_PINNED;
      dev = lgi_cuda_current_dev(&ctx);
    }
    /* Physical memory lives until released, whatever the context: ctx 0. */
    lgi_gpu_track(t, LGI_GPU_HANDLE, *h, n, space, dev, 0, 0, ra, cfa);
  }
  lgi_gpu_leave(t);
  return rc;
}

lgcu_result_t lgi_cuda_h_MEMRELEASE(void *real, lgcu_handle_t h, uintptr_t ra, uintptr_t cfa) {
  (void)ra, (void)cfa;
  if (!real) return LGCU_ERROR_STUB_LIBRARY;
  lgi_tls_t *t = &lgi_tls;
  if (!h || !lgi_gpu_enter(t)) return REAL(MEMRELEASE)(h);
  lgcu_result_t rc;
  LGC_FREE(t, h, LGI_GPU_HANDLE, REAL(MEMRELEASE)(h));
  lgi_gpu_leave(t);
  return rc;
}

lgcu_result_t lgi_cuda_h_MEMMAP(void *real, lgcu_dptr_t p, size_t n, size_t off, lgcu_handle_t h,
                                unsigned long long flags, uintptr_t ra, uintptr_t cfa) {
  (void)ra, (void)cfa;
  if (!real) return LGCU_ERROR_STUB_LIBRARY;
  lgi_tls_t *t = &lgi_tls;
  if (!lgi_gpu_enter(t)) return REAL(MEMMAP)(p, n, off, h, flags);
  lgcu_result_t rc = REAL(MEMMAP)(p, n, off, h, flags);
  if (rc == LGCU_SUCCESS && p) {
    /* address -> handle, for attribution; the bytes count by handle */
    lgi_gpu_ent_t e;
    memset(&e, 0, sizeof e);
    lgi_gpu_tab_lock();
    lgi_gpu_ent_t *he = lgi_gpu_find(h, LGI_GPU_HANDLE);
    if (he) e.site = he->site, e.dev = he->dev, e.space = he->space;
    lgi_gpu_tab_unlock();
    e.key = p;
    e.size = n;
    e.aux = h;
    e.ns = LGI_GPU_MAP;
    e.epoch = lgi_epoch();
    lgi_gpu_put(t, &e);
  }
  lgi_gpu_leave(t);
  return rc;
}

lgcu_result_t lgi_cuda_h_MEMUNMAP(void *real, lgcu_dptr_t p, size_t n, uintptr_t ra, uintptr_t cfa) {
  (void)ra, (void)cfa;
  if (!real) return LGCU_ERROR_STUB_LIBRARY;
  lgi_tls_t *t = &lgi_tls;
  if (!lgi_gpu_enter(t)) return REAL(MEMUNMAP)(p, n);
  lgcu_result_t rc = REAL(MEMUNMAP)(p, n);
  if (rc == LGCU_SUCCESS) {
    /* Usually the mappings of the range follow each other: take them in a chain, and
     * scan the table only for what the chain misses. */
    uint64_t a = p, end = p + n;
    lgi_gpu_ent_t e;
    while (a < end && lgi_gpu_take(t, a, LGI_GPU_MAP, &e) && e.size) a += e.size;
    if (a < end) lgi_gpu_take_range(t, LGI_GPU_MAP, a, end);
    atomic_fetch_add_explicit(&lgi_g.hdr->gpu_calls, 1, memory_order_relaxed);
  }
  lgi_gpu_leave(t);
  return rc;
}

lgcu_result_t lgi_cuda_h_MANAGED(void *real, lgcu_dptr_t *dptr, size_t n, unsigned flags, uintptr_t ra, uintptr_t cfa) {
  if (!real) return LGCU_ERROR_STUB_LIBRARY;
  lgi_tls_t *t = &lgi_tls;
  if (!lgi_gpu_enter(t)) return REAL(MANAGED)(dptr, n, flags);
  lgcu_result_t rc = REAL(MANAGED)(dptr, n, flags);
  if (rc == LGCU_SUCCESS && dptr && *dptr) {
    uint64_t ctx;
    int dev = lgi_cuda_current_dev(&ctx);
    lgi_gpu_track(t, LGI_GPU_ADDR, *dptr, n, LG_SPACE_MANAGED, dev, ctx, 0, ra, cfa);
  }
  lgi_gpu_leave(t);
  return rc;
}

lgcu_result_t lgi_cuda_h_ALLOCHOST(void *real, void **pp, size_t n, uintptr_t ra, uintptr_t cfa) {
  if (!real) return LGCU_ERROR_STUB_LIBRARY;
  lgi_tls_t *t = &lgi_tls;
  if (!lgi_gpu_enter(t)) return REAL(ALLOCHOST)(pp, n);
  /* The guard is held: the pages the driver maps here are not also mmap memory. */
  lgcu_result_t rc = REAL(ALLOCHOST)(pp, n);
  if (rc == LGCU_SUCCESS && pp && *pp) {
    uint64_t ctx;
    int dev = lgi_cuda_current_dev(&ctx);
    lgi_gpu_track(t, LGI_GPU_ADDR, (uint64_t)(uintptr_t)*pp, n, LG_SPACE_PINNED, dev, ctx, 0, ra, cfa);
  }
  lgi_gpu_leave(t);
  return rc;
}

lgcu_result_t lgi_cuda_h_HOSTALLOC(void *real, void **pp, size_t n, unsigned flags, uintptr_t ra, uintptr_t cfa) {
  if (!real) return LGCU_ERROR_STUB_LIBRARY;
  lgi_tls_t *t = &lgi_tls;
  if (!lgi_gpu_enter(t)) return REAL(HOSTALLOC)(pp, n, flags);
  lgcu_result_t rc = REAL(HOSTALLOC)(pp, n, flags);
  if (rc == LGCU_SUCCESS && pp && *pp) {
    uint64_t ctx;
    int dev = lgi_cuda_current_dev(&ctx);
    lgi_gpu_track(t, LGI_GPU_ADDR, (uint64_t)(uintptr_t)*pp, n, LG_SPACE_PINNED, dev, ctx, 0, ra, cfa);
  }
  lgi_gpu_leave(t);
  return rc;
}

lgcu_result_t lgi_cuda_h_FREEHOST(void *real, void *p, uintptr_t ra, uintptr_t cfa) {
  (void)ra, (void)cfa;
  if (!real) return LGCU_ERROR_STUB_LIBRARY;
  lgi_tls_t *t = &lgi_tls;
  if (!p || !lgi_gpu_enter(t)) return REAL(FREEHOST)(p);
  lgcu_result_t rc;
  LGC_FREE(t, (uint64_t)(uintptr_t)p, LGI_GPU_ADDR, REAL(FREEHOST)(p));
  lgi_gpu_leave(t);
  return rc;
}

lgcu_result_t lgi_cuda_h_HOSTREG(void *real, void *p, size_t n, unsigned flags, uintptr_t ra, uintptr_t cfa) {
  if (!real) return LGCU_ERROR_STUB_LIBRARY;
  lgi_tls_t *t = &lgi_tls;
  if (!lgi_gpu_enter(t)) return REAL(HOSTREG)(p, n, flags);
  lgcu_result_t rc = REAL(HOSTREG)(p, n, flags);
  if (rc == LGCU_SUCCESS && p) {
    /* Already counted where it was allocated: a gauge of its own, no site. */
    uint64_t ctx;
    int dev = lgi_cuda_current_dev(&ctx);
    lgi_gpu_track(t, LGI_GPU_REG, (uint64_t)(uintptr_t)p, n, LG_SPACE_HOST, dev, ctx, 0, ra, cfa);
  }
  lgi_gpu_leave(t);
  return rc;
}

lgcu_result_t lgi_cuda_h_HOSTUNREG(void *real, void *p, uintptr_t ra, uintptr_t cfa) {
  (void)ra, (void)cfa;
  if (!real) return LGCU_ERROR_STUB_LIBRARY;
  lgi_tls_t *t = &lgi_tls;
  if (!p || !lgi_gpu_enter(t)) return REAL(HOSTUNREG)(p);
  lgcu_result_t rc;
  lgi_gpu_ent_t e;
  int had = lgi_gpu_take(t, (uint64_t)(uintptr_t)p, LGI_GPU_REG, &e);
  rc = REAL(HOSTUNREG)(p);
  if (rc != LGCU_SUCCESS && had) lgi_gpu_untake(t, &e);
  lgi_gpu_leave(t);
  return rc;
}

static uint64_t mul_sat(uint64_t a, uint64_t b) {
  uint64_t r;
  return __builtin_mul_overflow(a, b, &r) ? UINT64_MAX : r;
}

lgcu_result_t lgi_cuda_h_ARRAY(void *real, lgcu_array_t *a, const void *desc, uintptr_t ra, uintptr_t cfa) {
  if (!real) return LGCU_ERROR_STUB_LIBRARY;
  lgi_tls_t *t = &lgi_tls;
  if (!lgi_gpu_enter(t)) return REAL(ARRAY)(a, desc);
  lgcu_result_t rc = REAL(ARRAY)(a, desc);
  if (rc == LGCU_SUCCESS && a && *a && desc) {
    const lgcu_array_desc_t *d = desc;
    unsigned fb = lgcu_format_bytes(d->format);
    uint64_t n = mul_sat(mul_sat(d->width, d->height ? d->height : 1), (uint64_t)(fb ? fb * d->channels : 4));
    uint64_t ctx;
    int dev = lgi_cuda_current_dev(&ctx);
    lgi_gpu_track(t, LGI_GPU_ARRAY, (uint64_t)(uintptr_t)*a, n, LG_SPACE_DEVICE, dev, ctx, 0, ra, cfa);
  }
  lgi_gpu_leave(t);
  return rc;
}

lgcu_result_t lgi_cuda_h_ARRAY3D(void *real, lgcu_array_t *a, const void *desc, uintptr_t ra, uintptr_t cfa) {
  if (!real) return LGCU_ERROR_STUB_LIBRARY;
  lgi_tls_t *t = &lgi_tls;
  if (!lgi_gpu_enter(t)) return REAL(ARRAY3D)(a, desc);
  lgcu_result_t rc = REAL(ARRAY3D)(a, desc);
  if (rc == LGCU_SUCCESS && a && *a && desc) {
    const lgcu_array3d_desc_t *d = desc;
    unsigned fb = lgcu_format_bytes(d->format);
    uint64_t n = mul_sat(mul_sat(mul_sat(d->width, d->height ? d->height : 1), d->depth ? d->depth : 1),
                         (uint64_t)(fb ? fb * d->channels : 4));
    uint64_t ctx;
    int dev = lgi_cuda_current_dev(&ctx);
    lgi_gpu_track(t, LGI_GPU_ARRAY, (uint64_t)(uintptr_t)*a, n, LG_SPACE_DEVICE, dev, ctx, 0, ra, cfa);
  }
  lgi_gpu_leave(t);
  return rc;
}

lgcu_result_t lgi_cuda_h_ARRAYDESTROY(void *real, lgcu_array_t a, uintptr_t ra, uintptr_t cfa) {
  (void)ra, (void)cfa;
  if (!real) return LGCU_ERROR_STUB_LIBRARY;
  lgi_tls_t *t = &lgi_tls;
  if (!a || !lgi_gpu_enter(t)) return REAL(ARRAYDESTROY)(a);
  lgcu_result_t rc;
  LGC_FREE(t, (uint64_t)(uintptr_t)a, LGI_GPU_ARRAY, REAL(ARRAYDESTROY)(a));
  lgi_gpu_leave(t);
  return rc;
}

/* ------------------------------------------------------------------ IPC imports
 * Memory another process allocated (and counts): not recorded here. Passed through;
 * the first call of each is noted (docs/cuda.md, limits). */

static _Atomic uint32_t imports_noted;
static void import_noted(unsigned bit, const char *name) {
  if (atomic_load_explicit(&imports_noted, memory_order_relaxed) & (1u << bit)) return;
  atomic_fetch_or(&imports_noted, 1u << bit);
  lgi_gpu_note(name, "IPC import called; not recorded (another process's memory)");
}

lgcu_result_t lgi_cuda_h_IPCOPEN(void *real, lgcu_dptr_t *dptr, lgcu_ipc_handle_t handle, unsigned flags, uintptr_t ra,
                                 uintptr_t cfa) {
  (void)ra, (void)cfa;
  if (!real) return LGCU_ERROR_STUB_LIBRARY;
  import_noted(0, "cuIpcOpenMemHandle");
  return REAL(IPCOPEN)(dptr, handle, flags);
}

lgcu_result_t lgi_cuda_h_MEMIMPORT(void *real, lgcu_handle_t *h, void *os_handle, int type, uintptr_t ra,
                                   uintptr_t cfa) {
  (void)ra, (void)cfa;
  if (!real) return LGCU_ERROR_STUB_LIBRARY;
  import_noted(1, "cuMemImportFromShareableHandle");
  return REAL(MEMIMPORT)(h, os_handle, type);
}

lgcu_result_t lgi_cuda_h_POOLIMPORTSH(void *real, lgcu_pool_t *pool, void *os_handle, int type,
                                      unsigned long long flags, uintptr_t ra, uintptr_t cfa) {
  (void)ra, (void)cfa;
  if (!real) return LGCU_ERROR_STUB_LIBRARY;
  import_noted(2, "cuMemPoolImportFromShareableHandle");
  return REAL(POOLIMPORTSH)(pool, os_handle, type, flags);
}

lgcu_result_t lgi_cuda_h_POOLIMPORTPTR(void *real, lgcu_dptr_t *dptr, lgcu_pool_t pool, void *share, uintptr_t ra,
                                       uintptr_t cfa) {
  (void)ra, (void)cfa;
  if (!real) return LGCU_ERROR_STUB_LIBRARY;
  import_noted(3, "cuMemPoolImportPointer");
  return REAL(POOLIMPORTPTR)(dptr, pool, share);
}

/* ------------------------------------------------------------------ public API */

LG_API int lg_cuda_site_of(uint64_t addr, uint32_t *site, int *device) {
  if (!site || !lgi_g.enabled) return -ENOENT;
  lgi_tls.guard++;
  int rc = lgi_gpu_site_of(addr, site, device);
  lgi_tls.guard--;
  return rc;
}

LG_API uint64_t lg_cuda_gc_without_cleanup(void) {
  if (!lgi_g.enabled) return 0;
  return atomic_fetch_add(&lgi_g.hdr->gc_without_cuda_cleanup, 1) + 1;
}

LG_API uint64_t lg_cuda_gc_without_cleanup_count(void) {
  return lgi_g.enabled ? atomic_load(&lgi_g.hdr->gc_without_cuda_cleanup) : 0;
}

LG_API int lg_cuda_torch_memory(int dev, int64_t allocated_bytes, int64_t reserved_bytes) {
  if (!lgi_g.enabled) return -ENOENT;
  if (dev < 0 || dev >= LG_GPU_MAX_DEVICES) return -ENODEV;
  lg_gpu_dev_t *g = &lgi_g.hdr->gpu[dev];
  atomic_store_explicit(&g->torch_allocated_bytes, allocated_bytes, memory_order_relaxed);
  atomic_store_explicit(&g->torch_reserved_bytes, reserved_bytes, memory_order_relaxed);
  atomic_store_explicit(&g->torch_seen, 1, memory_order_release);
  return 0;
}

/* The process's own gauges through the core model's one reader (core/gauges.c). */
LG_API int lg_cuda_devices(void) {
  if (!lgi_g.enabled) return 0;
  lgm_gpu_t g[LG_GPU_MAX_DEVICES];
  return lgm_gpus(lgi_g.hdr, g, LG_GPU_MAX_DEVICES);
}

LG_API int lg_cuda_stats(int dev, lg_cuda_stats_t *out) {
  if (!out || !lgi_g.enabled) return -ENOENT;
  lgm_gpu_t g[LG_GPU_MAX_DEVICES];
  if (dev < 0 || dev >= lgm_gpus(lgi_g.hdr, g, LG_GPU_MAX_DEVICES)) return -ENODEV;
  lgm_gpu_state_t st;
  lgm_gpu_state(lgi_g.hdr, &st);
  out->device_bytes = g[dev].device_bytes;
  out->managed_bytes = g[dev].managed_bytes;
  out->pinned_bytes = g[dev].pinned_bytes;
  out->registered_bytes = g[dev].registered_bytes;
  out->pool_reserved_bytes = g[dev].pool_reserved_bytes;
  out->pool_used_bytes = g[dev].pool_used_bytes;
  out->total_bytes = g[dev].total_bytes;
  out->contexts = g[dev].contexts;
  out->contexts_recreated = g[dev].contexts_recreated;
  out->gc_without_cuda_cleanup = st.gc_without_cleanup;
  return 0;
}
