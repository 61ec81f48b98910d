/* SPDX-License-Identifier: MIT */
/*
 * standin_procs.c - the stand-in CUDA driver's cuGetProcAddress (v1 and v2), and the
 * proof of binding the tests read (tests only; built into libcuda.so.1 with
 * standin_cuda.c).
 *
 * Apart from the driver's state and entry points (standin_cuda.c) because it is a
 * table over all of them: for each name, the implementation per CUDA version, with
 * the per-thread-default-stream variants as separate implementations. Every lookup
 * remembers where the caller asked the pointer to be stored, so that
 * standin_check_bindings() and standin_binding() can say what is stored there now;
 * LG_STANDIN_PROC_LOG=FILE writes every name asked for (found or not) to FILE.
 */
#include <dlfcn.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "standin.h"

/* ------------------------------------------------------------------ cuGetProcAddress */

typedef struct proc {
  const char *name;
  int ver;
  void *impl, *ptsz;
} proc_t;
#define P(n, v, f) {n, v, (void *)f, NULL}
#define PZ(n, v, f, z) {n, v, (void *)f, (void *)z}
static CUresult gpa1(const char *sym, void **pfn, int ver, cuuint64_t flags);
static CUresult gpa2(const char *sym, void **pfn, int ver, cuuint64_t flags, int *status);
static const proc_t procs[] = {
    P("cuGetProcAddress", 11030, gpa1), P("cuGetProcAddress", 12000, gpa2), P("cuInit", 2000, cuInit),
    P("cuDriverGetVersion", 2020, cuDriverGetVersion), P("cuDeviceGetCount", 2000, cuDeviceGetCount),
    P("cuDeviceGet", 2000, cuDeviceGet), P("cuDeviceTotalMem", 3020, cuDeviceTotalMem_v2),
    P("cuGetExportTable", 3000, cuGetExportTable), P("cuGetErrorString", 6000, cuGetErrorString),
    P("cuGetErrorName", 6000, cuGetErrorName), P("cuCtxCreate", 3020, cuCtxCreate_v2),
    P("cuCtxCreate", 11040, cuCtxCreate_v3), P("cuCtxCreate", 12050, cuCtxCreate_v4),
    P("cuCtxDestroy", 4000, cuCtxDestroy_v2), P("cuCtxGetCurrent", 4000, cuCtxGetCurrent),
    P("cuCtxSetCurrent", 4000, cuCtxSetCurrent), P("cuCtxGetDevice", 2000, cuCtxGetDevice),
    P("cuDevicePrimaryCtxRetain", 7000, cuDevicePrimaryCtxRetain),
    P("cuDevicePrimaryCtxRelease", 11000, cuDevicePrimaryCtxRelease_v2),
    P("cuDevicePrimaryCtxReset", 11000, cuDevicePrimaryCtxReset_v2), P("cuMemAlloc", 3020, cuMemAlloc_v2),
    P("cuMemAllocPitch", 3020, cuMemAllocPitch_v2), P("cuMemFree", 3020, cuMemFree_v2),
    P("cuMemGetInfo", 3020, cuMemGetInfo_v2),
    PZ("cuMemAllocAsync", 11020, cuMemAllocAsync, cuMemAllocAsync_ptsz),
    PZ("cuMemAllocFromPoolAsync", 11020, cuMemAllocFromPoolAsync, cuMemAllocFromPoolAsync_ptsz),
    PZ("cuMemFreeAsync", 11020, cuMemFreeAsync, cuMemFreeAsync_ptsz), P("cuMemPoolCreate", 11020, cuMemPoolCreate),
    P("cuMemPoolDestroy", 11020, cuMemPoolDestroy), P("cuMemPoolTrimTo", 11020, cuMemPoolTrimTo),
    P("cuMemPoolGetAttribute", 11020, cuMemPoolGetAttribute), P("cuMemPoolSetAttribute", 11020, cuMemPoolSetAttribute),
    P("cuDeviceGetMemPool", 11020, cuDeviceGetMemPool), P("cuDeviceGetDefaultMemPool", 11020, cuDeviceGetDefaultMemPool),
    P("cuMemAddressReserve", 10020, cuMemAddressReserve), P("cuMemAddressFree", 10020, cuMemAddressFree),
    P("cuMemCreate", 10020, cuMemCreate), P("cuMemRelease", 10020, cuMemRelease), P("cuMemMap", 10020, cuMemMap),
    P("cuMemUnmap", 10020, cuMemUnmap), P("cuMemImportFromShareableHandle", 10020, cuMemImportFromShareableHandle),
    P("cuIpcOpenMemHandle", 4010, cuIpcOpenMemHandle), P("cuIpcOpenMemHandle", 11000, cuIpcOpenMemHandle_v2),
    P("cuMemPoolImportFromShareableHandle", 11020, cuMemPoolImportFromShareableHandle),
    P("cuMemPoolImportPointer", 11020, cuMemPoolImportPointer),
    P("cuMemAllocStandinFuture", 12000, standin_future_alloc),
    P("cuMemAllocManaged", 6000, cuMemAllocManaged), P("cuMemAllocHost", 3020, cuMemAllocHost_v2),
    P("cuMemHostAlloc", 2020, cuMemHostAlloc), P("cuMemFreeHost", 2000, cuMemFreeHost),
    P("cuMemHostRegister", 6050, cuMemHostRegister_v2), P("cuMemHostUnregister", 4000, cuMemHostUnregister),
    P("cuArrayCreate", 3020, cuArrayCreate_v2), P("cuArray3DCreate", 3020, cuArray3DCreate_v2),
    P("cuArrayDestroy", 2000, cuArrayDestroy), P("cuStreamCreate", 2000, cuStreamCreate),
    P("cuStreamDestroy", 4000, cuStreamDestroy_v2), P("cuStreamSynchronize", 2000, cuStreamSynchronize),
    P("cuCtxSynchronize", 2000, cuCtxSynchronize), P("cuModuleLoad", 2000, cuModuleLoad),
    P("cuModuleGetFunction", 2000, cuModuleGetFunction), P("cuLaunchKernel", 4000, cuLaunchKernel),
};

/* Where callers asked cuGetProcAddress to store what (the binding proof). */
#define MAXREQ 2048
static struct {
  const char *name;
  void **loc;
  void *impl;
} reqs[MAXREQ];
static _Atomic int nreqs;

/* LG_STANDIN_PROC_LOG=FILE: every name asked for, one "name version flags" a line. */
static void log_request(const char *sym, int ver, cuuint64_t flags) {
  static FILE *f;
  static int tried;
  if (!tried) {
    tried = 1;
    const char *path = getenv("LG_STANDIN_PROC_LOG");
    f = path ? fopen(path, "a") : NULL;
  }
  if (f) {
    fprintf(f, "%s %d %llu\n", sym, ver, (unsigned long long)flags);
    fflush(f);
  }
}

static CUresult lookup(const char *sym, void **pfn, int ver, cuuint64_t flags, int *status) {
  if (!sym || !pfn) return CUDA_ERROR_INVALID_VALUE;
  log_request(sym, ver, flags);
  const proc_t *best = NULL;
  int seen = 0;
  for (size_t i = 0; i < sizeof procs / sizeof *procs; i++) {
    if (strcmp(procs[i].name, sym) != 0) continue;
    seen = 1;
    if (procs[i].ver <= ver && (!best || procs[i].ver > best->ver)) best = &procs[i];
  }
  *pfn = NULL;
  if (!best) {
    if (status) *status = seen ? CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT : CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    return CUDA_ERROR_NOT_FOUND;
  }
  void *impl = (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) && best->ptsz ? best->ptsz : best->impl;
  *pfn = impl;
  if (status) *status = CU_GET_PROC_ADDRESS_SUCCESS;
  int k = atomic_fetch_add(&nreqs, 1);
  if (k < MAXREQ) reqs[k].name = best->name, reqs[k].loc = pfn, reqs[k].impl = impl;
  return CUDA_SUCCESS;
}
static CUresult gpa1(const char *sym, void **pfn, int ver, cuuint64_t flags) {
  BUMP(cuGetProcAddress);
  return lookup(sym, pfn, ver, flags, NULL);
}
static CUresult gpa2(const char *sym, void **pfn, int ver, cuuint64_t flags, int *status) {
  BUMP(cuGetProcAddress_v2);
  return lookup(sym, pfn, ver, flags, status);
}
EXPORT CUresult cuGetProcAddress(const char *sym, void **pfn, int ver, cuuint64_t flags) {
  return gpa1(sym, pfn, ver, flags);
}
EXPORT CUresult cuGetProcAddress_v2(const char *sym, void **pfn, int ver, cuuint64_t flags, int *status) {
  return gpa2(sym, pfn, ver, flags, status);
}

/* For every entry point leakguard tracks that a caller obtained through
 * cuGetProcAddress: is the pointer stored at the location the caller gave a wrapper
 * in libleakguard (it forwards to exactly our implementation: the tests call it), or
 * our implementation itself (not routed)? Writes "name=wrapped|DIRECT|moved ..." and
 * returns the number of tracked entry points that are not wrapped (-1: none asked). */
EXPORT int standin_check_bindings(char *report, size_t n) {
  static const char *const tracked[] = {
      "cuGetProcAddress", "cuMemAlloc", "cuMemAllocPitch", "cuMemFree", "cuMemAllocAsync", "cuMemAllocFromPoolAsync",
      "cuMemFreeAsync", "cuMemPoolCreate", "cuMemPoolDestroy", "cuMemPoolTrimTo", "cuMemCreate", "cuMemRelease",
      "cuMemMap", "cuMemUnmap", "cuMemAllocManaged", "cuMemAllocHost", "cuMemHostAlloc", "cuMemFreeHost",
      "cuMemHostRegister", "cuMemHostUnregister", "cuArrayCreate", "cuArray3DCreate", "cuArrayDestroy",
      "cuCtxCreate", "cuCtxDestroy", "cuDevicePrimaryCtxRetain", "cuDevicePrimaryCtxRelease",
      "cuDevicePrimaryCtxReset", NULL};
  int k = atomic_load(&nreqs), bad = 0, checked = 0;
  size_t used = 0;
  if (n) report[0] = 0;
  for (int i = 0; i < k && i < MAXREQ; i++) {
    int t = 0;
    for (int j = 0; tracked[j]; j++)
      if (!strcmp(tracked[j], reqs[i].name)) t = 1;
    if (!t) continue;
    void *now = *reqs[i].loc;
    Dl_info di;
    const char *what;
    if (now == reqs[i].impl) what = "DIRECT", bad++;
    else if (now && dladdr(now, &di) && di.dli_fname && strstr(di.dli_fname, "libleakguard")) what = "wrapped";
    else what = "moved"; /* the caller reused the location: no verdict */
    checked++;
    if (used < n) used += (size_t)snprintf(report + used, n - used, "%s=%s ", reqs[i].name, what);
  }
  return checked ? bad : -1;
}

/* The pointer now stored where the last caller that asked cuGetProcAddress for name
 * (a base name) wanted it stored, or NULL. */
EXPORT void *standin_binding(const char *name) {
  void *p = NULL;
  int k = atomic_load(&nreqs);
  for (int i = 0; i < k && i < MAXREQ; i++)
    if (!strcmp(reqs[i].name, name)) p = *reqs[i].loc;
  return p;
}
