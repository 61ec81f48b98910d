/* SPDX-License-Identifier: MIT */
/*
 * cuda_impl.h - internals shared by the CUDA driver API files of libleakguard.so
 * (docs/cuda.md):
 *
 * cuda.c      how a call reaches a wrapper: the exported entry points, dlsym, and
 *             cuGetProcAddress; the slots and binding; notes and flags
 * cuda_mem.c  the wrappers that allocate and free, the public lg_cuda_* calls (what
 *             they record goes to the vendor-neutral table, gpu/table.c)
 * cuda_ctx.c  contexts, devices and stream-ordered pools: their wrappers, the driver
 *             queries the wrappers make, the per-device gauges
 * cuda_um.c   CUPTI's Unified Memory counters (--cuda-um)
 *
 * A wrapper is lgi_cuda_h_<KIND>(real, the entry point's parameters, ra, cfa): real is
 * the driver's function it was bound to (NULL: no driver), ra and cfa the caller's
 * return address and stack pointer for the stack capture. The rules of recorder.h hold.
 */
#ifndef LG_CAPTURE_CUDA_IMPL_H
#define LG_CAPTURE_CUDA_IMPL_H

#include <stdint.h>

#include "capture/gpu/cuda_abi.h"
#include "capture/gpu/gpu.h"
#include "capture/recorder.h"

#define LGC_UNPACK(...) __VA_ARGS__
#define LGC_EXPAND(m, a) m a

typedef void *(*dlsym_fn)(void *, const char *);

/* ------------------------------------------------------------------ kinds
 * One kind per entry-point ABI. P_x: the parameters, A_x: the arguments. */
/* A table: clang-format would read "T * p" in these macros as a product. */
// clang-format off
#define LGC_KINDS(X)                                                                                                   \
  X(GETPROC1)                                                                                                          \
  X(GETPROC2) X(MEMALLOC) X(MEMPITCH) X(MEMFREE) X(ALLOCASYNC) X(FROMPOOL) X(FREEASYNC) X(POOLCREATE) X(POOLDESTROY)   \
      X(POOLTRIM) X(MEMCREATE) X(MEMRELEASE) X(MEMMAP) X(MEMUNMAP) X(MANAGED) X(ALLOCHOST) X(HOSTALLOC) X(FREEHOST)    \
          X(HOSTREG) X(HOSTUNREG) X(ARRAY) X(ARRAY3D) X(ARRAYDESTROY) X(CTXCREATE2) X(CTXCREATE3) X(CTXCREATE4)        \
              X(CTXDESTROY) X(PRIMRETAIN) X(PRIMRELEASE) X(PRIMRESET) X(IPCOPEN) X(MEMIMPORT) X(POOLIMPORTSH)  \
                  X(POOLIMPORTPTR)

#define P_GETPROC1 (const char *sym, void **pfn, int ver, unsigned long long flags)
#define A_GETPROC1 (sym, pfn, ver, flags)
#define P_GETPROC2 (const char *sym, void **pfn, int ver, unsigned long long flags, int *status)
#define A_GETPROC2 (sym, pfn, ver, flags, status)
#define P_MEMALLOC (lgcu_dptr_t * dptr, size_t n)
#define A_MEMALLOC (dptr, n)
#define P_MEMPITCH (lgcu_dptr_t * dptr, size_t * pitch, size_t w, size_t h, unsigned esz)
#define A_MEMPITCH (dptr, pitch, w, h, esz)
#define P_MEMFREE (lgcu_dptr_t dptr)
#define A_MEMFREE (dptr)
#define P_ALLOCASYNC (lgcu_dptr_t * dptr, size_t n, lgcu_stream_t s)
#define A_ALLOCASYNC (dptr, n, s)
#define P_FROMPOOL (lgcu_dptr_t * dptr, size_t n, lgcu_pool_t pool, lgcu_stream_t s)
#define A_FROMPOOL (dptr, n, pool, s)
#define P_FREEASYNC (lgcu_dptr_t dptr, lgcu_stream_t s)
#define A_FREEASYNC (dptr, s)
#define P_POOLCREATE (lgcu_pool_t * pool, const void *props)
#define A_POOLCREATE (pool, props)
#define P_POOLDESTROY (lgcu_pool_t pool)
#define A_POOLDESTROY (pool)
#define P_POOLTRIM (lgcu_pool_t pool, size_t keep)
#define A_POOLTRIM (pool, keep)
#define P_MEMCREATE (lgcu_handle_t * h, size_t n, const void *prop, unsigned long long flags)
#define A_MEMCREATE (h, n, prop, flags)
#define P_MEMRELEASE (lgcu_handle_t h)
#define A_MEMRELEASE (h)
#define P_MEMMAP (lgcu_dptr_t p, size_t n, size_t off, lgcu_handle_t h, unsigned long long flags)
#define A_MEMMAP (p, n, off, h, flags)
#define P_MEMUNMAP (lgcu_dptr_t p, size_t n)
#define A_MEMUNMAP (p, n)
#define P_MANAGED (lgcu_dptr_t * dptr, size_t n, unsigned flags)
#define A_MANAGED (dptr, n, flags)
#define P_ALLOCHOST (void **pp, size_t n)
#define A_ALLOCHOST (pp, n)
#define P_HOSTALLOC (void **pp, size_t n, unsigned flags)
#define A_HOSTALLOC (pp, n, flags)
#define P_FREEHOST (void *p)
#define A_FREEHOST (p)
#define P_HOSTREG (void *p, size_t n, unsigned flags)
#define A_HOSTREG (p, n, flags)
#define P_HOSTUNREG (void *p)
#define A_HOSTUNREG (p)
#define P_ARRAY (lgcu_array_t * a, const void *desc)
#define A_ARRAY (a, desc)
#define P_ARRAY3D (lgcu_array_t * a, const void *desc)
#define A_ARRAY3D (a, desc)
#define P_ARRAYDESTROY (lgcu_array_t a)
#define A_ARRAYDESTROY (a)
#define P_CTXCREATE2 (lgcu_ctx_t * c, unsigned flags, lgcu_device_t d)
#define A_CTXCREATE2 (c, flags, d)
#define P_CTXCREATE3 (lgcu_ctx_t * c, void *params, int nparams, unsigned flags, lgcu_device_t d)
#define A_CTXCREATE3 (c, params, nparams, flags, d)
#define P_CTXCREATE4 (lgcu_ctx_t * c, void *params, unsigned flags, lgcu_device_t d)
#define A_CTXCREATE4 (c, params, flags, d)
#define P_CTXDESTROY (lgcu_ctx_t c)
#define A_CTXDESTROY (c)
#define P_PRIMRETAIN (lgcu_ctx_t * c, lgcu_device_t d)
#define A_PRIMRETAIN (c, d)
#define P_PRIMRELEASE (lgcu_device_t d)
#define A_PRIMRELEASE (d)
#define P_PRIMRESET (lgcu_device_t d)
#define A_PRIMRESET (d)
/* Imports of memory another process allocated: passed through, noted when first called. */
#define P_IPCOPEN (lgcu_dptr_t * dptr, lgcu_ipc_handle_t handle, unsigned flags)
#define A_IPCOPEN (dptr, handle, flags)
#define P_MEMIMPORT (lgcu_handle_t * h, void *os_handle, int type)
#define A_MEMIMPORT (h, os_handle, type)
#define P_POOLIMPORTSH (lgcu_pool_t * pool, void *os_handle, int type, unsigned long long flags)
#define A_POOLIMPORTSH (pool, os_handle, type, flags)
#define P_POOLIMPORTPTR (lgcu_dptr_t * dptr, lgcu_pool_t pool, void *share)
#define A_POOLIMPORTPTR (dptr, pool, share)
// clang-format on

#define LGC_ENUM(K) K_##K,
enum { LGC_KINDS(LGC_ENUM) K_COUNT };
#define LGC_PFN(K) typedef lgcu_result_t(*pfn_##K) P_##K;
LGC_KINDS(LGC_PFN)
#define LGC_HPROTO(K)                                                                                                  \
  LGI_HIDDEN lgcu_result_t lgi_cuda_h_##K(void *real, LGC_EXPAND(LGC_UNPACK, P_##K), uintptr_t ra, uintptr_t cfa);
LGC_KINDS(LGC_HPROTO)
#define REAL(K) ((pfn_##K)real)

/* ---- cuda_mem.c: the wrappers; what they record goes to gpu/table.c (gpu.h). */

/* ---- cuda_ctx.c */

/* Resolves the driver queries (once) in the object that defines real. */
LGI_HIDDEN void lgi_cuda_helpers_from(void *real);
/* First sight of a device: the count of devices, its total memory. */
LGI_HIDDEN void lgi_cuda_dev_seen(int dev);
/* The current context (in *ctx_out, 0: none) and its device (0 when there is none). */
LGI_HIDDEN int lgi_cuda_current_dev(uint64_t *ctx_out);
/* The device of a known pool, or -1. */
LGI_HIDDEN int lgi_cuda_pool_dev(uint64_t p);
/* Reads the pools' reserved and used bytes into the gauges: at most once per epoch
 * tick, or now with force. */
LGI_HIDDEN void lgi_cuda_pool_sample(int force);
/* Learns the current pool of device dev (once per device). */
LGI_HIDDEN void lgi_cuda_default_pool(int dev);

/* ---- cuda_um.c (CUPTI Unified Memory counters, --cuda-um) */

/* Starts the counters once a context exists (LEAKGUARD_CUDA_UM=1); says in a note
 * why when CUPTI is missing, unsupported or taken by another profiler. */
LGI_HIDDEN void lgi_cuda_um_start(void);

#endif
