/* SPDX-License-Identifier: MIT */
/*
 * backend.c - where liblgpool's segments come from: anonymous mmap (host memory, for
 * tests and CPU runs) or the CUDA driver, dlopen'ed (libcuda.so.1: cuMemAlloc_v2,
 * cuMemFree_v2, and events for stream order). No link-time dependency on CUDA.
 */
#include <dlfcn.h>
#include <errno.h>
#include <string.h>
#include <sys/mman.h>

#include "pool/pool_impl.h"

/* The host backend's events: none (host memory is synchronous). */
static int host_ev_create(void **ev, unsigned flags) {
  (void)flags;
  *ev = NULL;
  return 1;
}
static int host_ev_record(void *ev, void *stream) { return 1; }
static int host_ev_query(void *ev) { return 0; }
static int host_ev_destroy(void *ev) { return 0; }

#define SYM(field, name)                                                                                               \
  do {                                                                                                                 \
    *(void **)&b->field = dlsym(b->cu, name);                                                                          \
    if (!b->field) goto fail;                                                                                          \
  } while (0)

int lgp_backend_open(lgp_backend_t *b, lg_pool_backend_t kind, int device) {
  memset(b, 0, sizeof *b);
  b->kind = kind;
  b->device = device;
  b->ev_create = host_ev_create;
  b->ev_record = host_ev_record;
  b->ev_query = host_ev_query;
  b->ev_destroy = host_ev_destroy;
  if (kind == LG_POOL_HOST) return 0;
  if (kind != LG_POOL_CUDA) return EINVAL;
  b->cu = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!b->cu) return ENOSYS;
  int (*init)(unsigned);
  int (*dev_get)(int *, int);
  int (*retain)(void **, int);
  *(void **)&init = dlsym(b->cu, "cuInit");
  *(void **)&dev_get = dlsym(b->cu, "cuDeviceGet");
  *(void **)&retain = dlsym(b->cu, "cuDevicePrimaryCtxRetain");
  if (!init || !dev_get || !retain) goto fail;
  SYM(mem_alloc, "cuMemAlloc_v2");
  SYM(mem_free, "cuMemFree_v2");
  SYM(ctx_get, "cuCtxGetCurrent");
  SYM(ctx_set, "cuCtxSetCurrent");
  SYM(ev_create, "cuEventCreate");
  SYM(ev_record, "cuEventRecord");
  SYM(ev_query, "cuEventQuery");
  SYM(ev_destroy, "cuEventDestroy_v2");
  if (init(0)) goto fail;
  /* The caller's context when it has one (torch makes the device's current), else
   * the device's primary context. */
  if (b->ctx_get(&b->ctx) || !b->ctx) {
    int d;
    if (dev_get(&d, device) || retain(&b->ctx, d) || b->ctx_set(b->ctx)) goto fail;
  }
  return 0;
fail:
  dlclose(b->cu);
  b->cu = NULL;
  return ENOSYS;
}

void lgp_backend_close(lgp_backend_t *b) {
  if (b->cu) dlclose(b->cu);
  b->cu = NULL;
}

int lgp_backend_alloc(lgp_backend_t *b, size_t n, uintptr_t *out) {
  if (b->kind == LG_POOL_HOST) {
    void *m = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (m == MAP_FAILED) return ENOMEM;
    *out = (uintptr_t)m;
    return 0;
  }
  void *cur = NULL;
  if (b->ctx_get(&cur) || !cur) b->ctx_set(b->ctx);
  uintptr_t a = 0; /* a CUdeviceptr: 64 bits, as uintptr_t on LP64 */
  if (b->mem_alloc(&a, n)) return ENOMEM;
  *out = a;
  return 0;
}

void lgp_backend_free(lgp_backend_t *b, uintptr_t p, size_t n) {
  if (b->kind == LG_POOL_HOST) munmap((void *)p, n);
  else b->mem_free(p);
}
