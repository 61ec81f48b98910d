/* SPDX-License-Identifier: MIT */
/*
 * standin.h - what the files of the stand-in CUDA driver share (tests only):
 * standin_cuda.c (the driver's state, init, devices, contexts), standin_mem.c (the
 * memory entry points; the state they share: standin_state.h) and standin_procs.c
 * (cuGetProcAddress and the binding proof). The entry points themselves are declared
 * in lgcuda.h, these are the rest.
 */
#ifndef LG_TESTS_STANDIN_H
#define LG_TESTS_STANDIN_H

#include <stdatomic.h>

#include "lgcuda.h"

#define EXPORT __attribute__((visibility("default")))

/* Entry points the stand-in has beyond lgcuda.h (the other ABI variants). */
EXPORT CUresult cuGetExportTable(const void **table, const void *uuid);
EXPORT CUresult cuGetErrorString(CUresult e, const char **s);
EXPORT CUresult cuGetErrorName(CUresult e, const char **s);
EXPORT CUresult cuCtxCreate(CUcontext *c, unsigned flags, CUdevice d);
EXPORT CUresult cuCtxCreate_v3(CUcontext *c, void *params, int n, unsigned flags, CUdevice d);
EXPORT CUresult cuCtxCreate_v4(CUcontext *c, void *params, unsigned flags, CUdevice d);
EXPORT CUresult cuCtxDestroy(CUcontext c);
EXPORT CUresult cuDevicePrimaryCtxRelease(CUdevice d);
EXPORT CUresult cuDevicePrimaryCtxReset(CUdevice d);
EXPORT CUresult cuMemHostRegister(void *p, size_t n, unsigned flags);
EXPORT CUresult cuMemImportFromShareableHandle(CUmemGenericAllocationHandle *h, void *os, int type);
EXPORT CUresult cuIpcOpenMemHandle(CUdeviceptr *p, CUipcMemHandle h, unsigned flags);
EXPORT CUresult cuMemPoolImportFromShareableHandle(CUmemoryPool *pool, void *os, int type, unsigned long long flags);
EXPORT CUresult cuMemPoolImportPointer(CUdeviceptr *p, CUmemoryPool pool, void *share);
CUresult standin_future_alloc(CUdeviceptr *p, size_t n);
/* Events (liblgpool's stream order) and their test hooks. */
EXPORT CUresult cuEventCreate(CUevent *ev, unsigned flags);
EXPORT CUresult cuEventRecord(CUevent ev, CUstream s);
EXPORT CUresult cuEventQuery(CUevent ev);
EXPORT CUresult cuEventSynchronize(CUevent ev);
EXPORT CUresult cuEventDestroy_v2(CUevent ev);
EXPORT CUresult cuEventDestroy(CUevent ev);
EXPORT void standin_events_hold(int hold);
EXPORT void standin_events_complete(CUstream s);
EXPORT extern long standin_event_queries;

/* Calls of each implementation (standin_calls()). */
#define IMPLS(X)                                                                                             \
  X(cuInit) X(cuDriverGetVersion) X(cuGetProcAddress) X(cuGetProcAddress_v2) X(cuGetExportTable)            \
  X(cuMemAlloc_v2) X(cuMemAllocPitch_v2) X(cuMemFree_v2) X(cuMemAllocAsync) X(cuMemAllocAsync_ptsz)         \
  X(cuMemAllocFromPoolAsync) X(cuMemAllocFromPoolAsync_ptsz) X(cuMemFreeAsync) X(cuMemFreeAsync_ptsz)       \
  X(cuMemPoolCreate) X(cuMemPoolDestroy) X(cuMemPoolTrimTo) X(cuMemCreate) X(cuMemRelease) X(cuMemMap)      \
  X(cuMemUnmap) X(cuMemAllocManaged) X(cuMemAllocHost_v2) X(cuMemHostAlloc) X(cuMemFreeHost)                \
  X(cuMemHostRegister_v2) X(cuMemHostUnregister) X(cuArrayCreate_v2) X(cuArray3DCreate_v2) X(cuArrayDestroy) \
  X(cuCtxCreate_v2) X(cuCtxCreate_v3) X(cuCtxCreate_v4) X(cuCtxDestroy_v2) X(cuDevicePrimaryCtxRetain)      \
  X(cuDevicePrimaryCtxRelease_v2) X(cuDevicePrimaryCtxReset_v2) X(cuMemImportFromShareableHandle)          \
  X(cuIpcOpenMemHandle_v2) X(cuMemPoolImportFromShareableHandle) X(cuMemPoolImportPointer)

#define X_ENUM(n) C_##n,
enum { IMPLS(X_ENUM) C_COUNT };
extern _Atomic long standin_ncalls[C_COUNT];
#define BUMP(n) atomic_fetch_add_explicit(&standin_ncalls[C_##n], 1, memory_order_relaxed)

#endif
