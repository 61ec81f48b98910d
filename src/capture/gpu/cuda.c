/* SPDX-License-Identifier: MIT */
/*
 * cuda.c - GPU memory, seen from inside libleakguard.so at the CUDA driver API.
 *
 * Every CUDA runtime (libcudart static or shared, PyTorch, CuPy...) ends in
 * libcuda.so.1, and reaches it in one of three ways; all three are caught here:
 *
 *  1. Exported symbols. A program linked with -lcuda binds cuMemAlloc_v2 & co. to the
 *     first definition in the global scope: ours, preloaded. Each export calls the
 *     next definition (the driver's), found once with the real dlsym(RTLD_NEXT).
 *     Only the tracked entry points are exported (never cuInit or
 *     cuDriverGetVersion), so a program without libcuda that probes for CUDA that
 *     way still finds none.
 *  2. dlsym on a libcuda handle. dlsym itself is interposed (capture/dl.c, with
 *     dlvsym and dlopen: an assembly entry tail-jumps to glibc's dlsym for RTLD_NEXT
 *     and RTLD_DEFAULT lookups, which glibc resolves relative to its caller); a lookup
 *     with an explicit handle, or an RTLD_DEFAULT lookup of a name that we export,
 *     reaches lgi_cuda_dlsym_result / lgi_cuda_dlsym_default through the GPU seam
 *     (gpu.h). A tracked name found in the driver comes back as a wrapper bound to
 *     exactly that pointer; one that finds only our own export (no driver loaded)
 *     comes back NULL, as without us.
 *  3. cuGetProcAddress / cuGetProcAddress_v2 (cudart >= 11.3, current PyTorch),
 *     themselves reached through 1 or 2. The wrapper lets the driver answer, then
 *     looks the requested name and version up and, for a tracked entry point,
 *     returns a wrapper bound to exactly the pointer the driver returned: the variant
 *     asked for (per-thread default stream, ABI version) stays that variant. A
 *     request for cuGetProcAddress itself returns its wrapper. An unknown cuMem*
 *     name passes through and is noted once in the region (the collector prints it).
 *     The IPC imports (memory another process allocated: cuIpcOpenMemHandle,
 *     cuMemImportFromShareableHandle, cuMemPoolImport*) are not recorded; their
 *     wrappers pass every call through and note the first, so that a program that
 *     only looks them up (cudart does, at its start) sees nothing.
 *
 * Wrappers are slots: for every entry-point ABI ("kind") there are LGC_NSLOT
 * distinct functions, each with its own real pointer. Binding a pointer takes the
 * slot already bound to it or a free one (compare-and-swap), so the plain and the
 * _ptsz variant of cuMemAllocAsync are two slots of one kind. No allocation, no lock.
 *
 * What is recorded (docs/cuda.md): device memory (cuMemAlloc_v2, cuMemAllocPitch_v2,
 * stream-ordered cuMemAllocAsync / cuMemAllocFromPoolAsync, freed when the free is
 * enqueued), VMM physical memory by handle (cuMemCreate / cuMemRelease; cuMemMap
 * keeps address -> handle), managed (cuMemAllocManaged), pinned host memory
 * (cuMemAllocHost_v2, cuMemHostAlloc), arrays, each as a site of its space with the
 * device ordinal, and the same native + Python stack as a host allocation. Host memory
 * registered with cuMemHostRegister, pool reserved/used bytes and contexts (created,
 * destroyed, recreated) are per-device gauges in the region header. Destroying a
 * context (or resetting / releasing the last reference of a primary context)
 * releases the records made in it. GPU allocations are never sampled.
 *
 * This file is how calls reach the wrappers (the three ways, the slots, binding, the
 * notes). The wrappers are cuda_mem.c (allocations and frees) and cuda_ctx.c
 * (contexts, devices, pools); what they record goes to the vendor-neutral table
 * (table.c, gpu.h); cuda_impl.h holds what the CUDA files share.
 */
#include <dlfcn.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "capture/gpu/cuda_impl.h"
#include "core/platform.h"
#include "leakguard.h"

/* src/guard/regions.c maps the header page only (and reads the CUDA gauges there). */
_Static_assert(sizeof(lg_region_hdr_t) <= 4096, "the region header must fit one page");

#define LGC_NAME(K) #K,
static const char *const kind_name[K_COUNT] = {LGC_KINDS(LGC_NAME)};

/* ------------------------------------------------------------------ slots */

#define LGC_NSLOT 8
static void *_Atomic slot_real[K_COUNT][LGC_NSLOT];

#define LGC_SLOT(K, i)                                                                                                 \
  static lgcu_result_t K##_s##i P_##K {                                                                                \
    return lgi_cuda_h_##K(atomic_load_explicit(&slot_real[K_##K][i], memory_order_acquire),                            \
                          LGC_EXPAND(LGC_UNPACK, A_##K), LG_CALLER_RA, LG_CALLER_CFA);                                 \
  }
#define LGC_SLOTS(K)                                                                                                   \
  LGC_SLOT(K, 0)                                                                                                       \
  LGC_SLOT(K, 1) LGC_SLOT(K, 2) LGC_SLOT(K, 3) LGC_SLOT(K, 4) LGC_SLOT(K, 5) LGC_SLOT(K, 6) LGC_SLOT(K, 7)
LGC_KINDS(LGC_SLOTS)
#define LGC_SLOTFNS(K)                                                                                                 \
  {(void *)K##_s0, (void *)K##_s1, (void *)K##_s2, (void *)K##_s3,                                                     \
   (void *)K##_s4, (void *)K##_s5, (void *)K##_s6, (void *)K##_s7},
static void *const slot_fn[K_COUNT][LGC_NSLOT] = {LGC_KINDS(LGC_SLOTFNS)};

/* ------------------------------------------------------------------ exports
 * The symbols a program linked with -lcuda binds to (the names cuda.h's macros
 * produce, plus the unversioned ones whose ABI is the same). Legacy 32-bit ABIs
 * (cuMemAlloc, cuMemFree... without _v2) are not exported: calls to them reach the
 * driver untracked. */
// clang-format off
#define LGC_EXPORTS(X)                                                                                  \
  X(cuGetProcAddress, GETPROC1) X(cuGetProcAddress_v2, GETPROC2) X(cuMemAlloc_v2, MEMALLOC)            \
  X(cuMemAllocPitch_v2, MEMPITCH) X(cuMemFree_v2, MEMFREE) X(cuMemAllocAsync, ALLOCASYNC)              \
  X(cuMemAllocAsync_ptsz, ALLOCASYNC) X(cuMemAllocFromPoolAsync, FROMPOOL)                              \
  X(cuMemAllocFromPoolAsync_ptsz, FROMPOOL) X(cuMemFreeAsync, FREEASYNC) X(cuMemFreeAsync_ptsz, FREEASYNC) \
  X(cuMemPoolCreate, POOLCREATE) X(cuMemPoolDestroy, POOLDESTROY) X(cuMemPoolTrimTo, POOLTRIM)         \
  X(cuMemCreate, MEMCREATE) X(cuMemRelease, MEMRELEASE) X(cuMemMap, MEMMAP) X(cuMemUnmap, MEMUNMAP)    \
  X(cuMemAllocManaged, MANAGED) X(cuMemAllocHost_v2, ALLOCHOST) X(cuMemHostAlloc, HOSTALLOC)           \
  X(cuMemFreeHost, FREEHOST) X(cuMemHostRegister, HOSTREG) X(cuMemHostRegister_v2, HOSTREG)            \
  X(cuMemHostUnregister, HOSTUNREG) X(cuArrayCreate_v2, ARRAY) X(cuArray3DCreate_v2, ARRAY3D)          \
  X(cuArrayDestroy, ARRAYDESTROY) X(cuCtxCreate, CTXCREATE2) X(cuCtxCreate_v2, CTXCREATE2)             \
  X(cuCtxCreate_v3, CTXCREATE3) X(cuCtxCreate_v4, CTXCREATE4) X(cuCtxDestroy, CTXDESTROY)              \
  X(cuCtxDestroy_v2, CTXDESTROY) X(cuDevicePrimaryCtxRetain, PRIMRETAIN)                                \
  X(cuDevicePrimaryCtxRelease, PRIMRELEASE) X(cuDevicePrimaryCtxRelease_v2, PRIMRELEASE)               \
  X(cuDevicePrimaryCtxReset, PRIMRESET) X(cuDevicePrimaryCtxReset_v2, PRIMRESET)                      \
  X(cuIpcOpenMemHandle, IPCOPEN) X(cuIpcOpenMemHandle_v2, IPCOPEN)                                      \
  X(cuMemImportFromShareableHandle, MEMIMPORT) X(cuMemPoolImportFromShareableHandle, POOLIMPORTSH)     \
  X(cuMemPoolImportPointer, POOLIMPORTPTR)
// clang-format on

#define LGC_EENUM(S, K) E_##S,
enum { LGC_EXPORTS(LGC_EENUM) E_COUNT };
#define LGC_ENAME(S, K) #S,
static const char *const export_name[E_COUNT] = {LGC_EXPORTS(LGC_ENAME)};
#define LGC_EKIND(S, K) K_##K,
static const unsigned char export_kind[E_COUNT] = {LGC_EXPORTS(LGC_EKIND)};
static void *_Atomic export_ptr[E_COUNT];
#define LGC_EPROTO(S, K) LG_API lgcu_result_t S P_##K;
LGC_EXPORTS(LGC_EPROTO)
static void *export_real(int i);
#define LGC_EXPORT_FN(S, K)                                                                                            \
  lgcu_result_t S P_##K {                                                                                              \
    return lgi_cuda_h_##K(export_real(E_##S), LGC_EXPAND(LGC_UNPACK, A_##K), LG_CALLER_RA, LG_CALLER_CFA);             \
  }
LGC_EXPORTS(LGC_EXPORT_FN)
#define LGC_EFN(S, K) (void *)S,
static void *const export_fn[E_COUNT] = {LGC_EXPORTS(LGC_EFN)};

/* ------------------------------------------------------------------ names and versions
 * cuGetProcAddress takes a base name and a CUDA version; the driver answers the
 * newest ABI variant not newer than the version (cudaTypedefs.h: PFN_x_vNNNNN).
 * kind -1: a legacy ABI that is not wrapped. */
typedef struct lgi_cuda_proc {
  const char *name;
  int ver;
  signed char kind;
} lgi_cuda_proc_t;
static const lgi_cuda_proc_t procs[] = {
    {"cuGetProcAddress", 11030, K_GETPROC1},
    {"cuGetProcAddress", 12000, K_GETPROC2},
    {"cuMemAlloc", 2000, -1},
    {"cuMemAlloc", 3020, K_MEMALLOC},
    {"cuMemAllocPitch", 2000, -1},
    {"cuMemAllocPitch", 3020, K_MEMPITCH},
    {"cuMemFree", 2000, -1},
    {"cuMemFree", 3020, K_MEMFREE},
    {"cuMemAllocAsync", 11020, K_ALLOCASYNC},
    {"cuMemAllocFromPoolAsync", 11020, K_FROMPOOL},
    {"cuMemFreeAsync", 11020, K_FREEASYNC},
    {"cuMemPoolCreate", 11020, K_POOLCREATE},
    {"cuMemPoolDestroy", 11020, K_POOLDESTROY},
    {"cuMemPoolTrimTo", 11020, K_POOLTRIM},
    {"cuMemCreate", 10020, K_MEMCREATE},
    {"cuMemRelease", 10020, K_MEMRELEASE},
    {"cuMemMap", 10020, K_MEMMAP},
    {"cuMemUnmap", 10020, K_MEMUNMAP},
    {"cuMemAllocManaged", 6000, K_MANAGED},
    {"cuMemAllocHost", 2000, -1},
    {"cuMemAllocHost", 3020, K_ALLOCHOST},
    {"cuMemHostAlloc", 2020, K_HOSTALLOC},
    {"cuMemFreeHost", 2000, K_FREEHOST},
    {"cuMemHostRegister", 4000, K_HOSTREG},
    {"cuMemHostUnregister", 4000, K_HOSTUNREG},
    {"cuArrayCreate", 2000, -1},
    {"cuArrayCreate", 3020, K_ARRAY},
    {"cuArray3DCreate", 2000, -1},
    {"cuArray3DCreate", 3020, K_ARRAY3D},
    {"cuArrayDestroy", 2000, K_ARRAYDESTROY},
    {"cuCtxCreate", 2000, K_CTXCREATE2},
    {"cuCtxCreate", 11040, K_CTXCREATE3},
    {"cuCtxCreate", 12050, K_CTXCREATE4},
    {"cuCtxDestroy", 2000, K_CTXDESTROY},
    {"cuDevicePrimaryCtxRetain", 7000, K_PRIMRETAIN},
    {"cuDevicePrimaryCtxRelease", 7000, K_PRIMRELEASE},
    {"cuDevicePrimaryCtxReset", 7000, K_PRIMRESET},
    /* IPC imports: not recorded, noted when first called (cudart asks for the pool
     * imports at its start: a note on lookup would be printed by every program) */
    {"cuIpcOpenMemHandle", 4010, K_IPCOPEN},
    {"cuMemImportFromShareableHandle", 10020, K_MEMIMPORT},
    {"cuMemPoolImportFromShareableHandle", 11020, K_POOLIMPORTSH},
    {"cuMemPoolImportPointer", 11020, K_POOLIMPORTPTR},
};

/* cuMem* entry points that neither allocate nor free (copies, queries, hints,
 * access, address reservations): passed through without a note. */
static const char *const benign_prefix[] = {"cuMemcpy",
                                            "cuMemset",
                                            "cuMemGet",
                                            "cuMemPrefetch",
                                            "cuMemAdvise",
                                            "cuMemRange",
                                            "cuMemHostGet",
                                            "cuMemAddress",
                                            "cuMemSetAccess",
                                            "cuMemSetMemPool",
                                            "cuMemPoolSet",
                                            "cuMemPoolGet",
                                            "cuMemPoolExport",
                                            "cuMemExport",
                                            "cuMemRetain",
                                            "cuMemDiscard",
                                            "cuMemBatch",
                                            "cuMemMapArray",
                                            NULL};

/* The kind for a cuGetProcAddress request; *known: the name is tracked at some version. */
static int proc_kind(const char *sym, int ver, int *known) {
  int kind = -1, best = -1;
  *known = 0;
  for (size_t i = 0; i < sizeof procs / sizeof *procs; i++) {
    if (strcmp(procs[i].name, sym) != 0) continue;
    *known = 1;
    if (procs[i].ver <= ver && procs[i].ver > best) {
      best = procs[i].ver;
      kind = procs[i].kind;
    }
  }
  return kind;
}

static int benign(const char *sym) {
  for (int i = 0; benign_prefix[i]; i++)
    if (!strncmp(sym, benign_prefix[i], strlen(benign_prefix[i]))) return 1;
  return 0;
}

static int export_index(const char *name) {
  if (!name || name[0] != 'c' || name[1] != 'u') return -1;
  for (int i = 0; i < E_COUNT; i++)
    if (!strcmp(name, export_name[i])) return i;
  return -1;
}

int lgi_cuda_export_name(const char *name) { return export_index(name) >= 0; }

/* ------------------------------------------------------------------ notes */

static void note(const char *name, const char *what) { lgi_gpu_note(name, what); }

/* ------------------------------------------------------------------ binding */

static int is_ours(const void *p) {
  for (int i = 0; i < E_COUNT; i++)
    if (export_fn[i] == p) return 1;
  for (int k = 0; k < K_COUNT; k++)
    for (int i = 0; i < LGC_NSLOT; i++)
      if (slot_fn[k][i] == p) return 1;
  return 0;
}

/* A wrapper of kind k bound to exactly real (or real itself when every slot of the
 * kind is bound to another pointer). */
static void *bind(int k, void *real) {
  if (!real || is_ours(real)) return real;
  lgi_cuda_helpers_from(real);
  lgi_gpu_set_flag(LG_GPU_SEEN);
  for (int i = 0; i < LGC_NSLOT; i++) {
    void *cur = atomic_load(&slot_real[k][i]);
    if (cur == real) return slot_fn[k][i];
    if (!cur) {
      void *z = NULL;
      if (atomic_compare_exchange_strong(&slot_real[k][i], &z, real) || z == real) return slot_fn[k][i];
    }
  }
  note(kind_name[k], "more driver variants than wrappers; untracked");
  return real;
}

static void *export_real(int i) {
  void *p = atomic_load_explicit(&export_ptr[i], memory_order_acquire);
  if (LGI_LIKELY(p != NULL)) return p;
  /* Called from here, RTLD_NEXT means the first definition after libleakguard. */
  p = ((dlsym_fn)lgi_dlsym_resolve())(RTLD_NEXT, export_name[i]);
  if (p) {
    lgi_cuda_helpers_from(p);
    lgi_gpu_set_flag(LG_GPU_SEEN);
    atomic_store_explicit(&export_ptr[i], p, memory_order_release);
  }
  return p;
}

/* What cuGetProcAddress hands back for sym at version ver. */
static void *wrap_proc(const char *sym, int ver, void *p) {
  int known, k = proc_kind(sym, ver, &known);
  if (k >= 0) return bind(k, p);
  if (known) note(sym, "legacy ABI asked for; untracked");
  else if (!strncmp(sym, "cuMem", 5) && !benign(sym)) note(sym, "unknown memory entry point; untracked");
  return p;
}

int lgi_cuda_dlsym_result(const char *name, void *r, void **out) {
  if (name[0] != 'c' || name[1] != 'u') return 0;
  *out = r;
  int e = export_index(name);
  if (e < 0) {
    if (!strncmp(name, "cuMem", 5) && !benign(name) && strcmp(name, "cuMemAlloc") && strcmp(name, "cuMemFree") &&
        strcmp(name, "cuMemAllocPitch") && strcmp(name, "cuMemAllocHost"))
      note(name, "unknown memory entry point; untracked");
    return 1;
  }
  if (is_ours(r)) {
    /* The handle's scope reached our own export (dlopen(NULL), a library that depends
     * on us): the answer is the driver's definition, or none. */
    void *n = ((dlsym_fn)lgi_dlsym_resolve())(RTLD_NEXT, name);
    *out = n ? bind(export_kind[e], n) : NULL;
    return 1;
  }
  *out = bind(export_kind[e], r);
  return 1;
}

void *lgi_cuda_dlsym_default(void *handle, const char *name) {
  (void)handle;
  int e = export_index(name);
  /* Our export is first in the global scope; what a program without us would get is
   * the next definition (the driver's), or nothing: then CUDA is absent, say so. */
  void *n = ((dlsym_fn)lgi_dlsym_resolve())(RTLD_NEXT, name);
  return n && e >= 0 ? bind(export_kind[e], n) : n;
}

/* ------------------------------------------------------------------ cuGetProcAddress wrappers */

lgcu_result_t lgi_cuda_h_GETPROC1(void *real, const char *sym, void **pfn, int ver, unsigned long long flags,
                                  uintptr_t ra, uintptr_t cfa) {
  (void)ra, (void)cfa;
  if (!real) return LGCU_ERROR_STUB_LIBRARY;
  lgcu_result_t rc = REAL(GETPROC1)(sym, pfn, ver, flags);
  if (rc == LGCU_SUCCESS && pfn && *pfn && sym) *pfn = wrap_proc(sym, ver, *pfn);
  return rc;
}

lgcu_result_t lgi_cuda_h_GETPROC2(void *real, const char *sym, void **pfn, int ver, unsigned long long flags,
                                  int *status, uintptr_t ra, uintptr_t cfa) {
  (void)ra, (void)cfa;
  if (!real) return LGCU_ERROR_STUB_LIBRARY;
  lgcu_result_t rc = REAL(GETPROC2)(sym, pfn, ver, flags, status);
  if (rc == LGCU_SUCCESS && pfn && *pfn && sym) *pfn = wrap_proc(sym, ver, *pfn);
  return rc;
}
