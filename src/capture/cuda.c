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
 *  2. dlsym on a libcuda handle. dlsym itself is interposed: an assembly entry
 *     tail-jumps to glibc's dlsym for RTLD_NEXT and RTLD_DEFAULT lookups (glibc
 *     resolves those relative to its caller, so the caller must stay the program's);
 *     a lookup with an explicit handle, or an RTLD_DEFAULT lookup of a name that we
 *     export, goes through lgi_dlsym_handle/lgi_dlsym_default. A tracked name found in
 *     the driver comes back as a wrapper bound to exactly that pointer; one that finds
 *     only our own export (no driver loaded) comes back NULL, as without us.
 *  3. cuGetProcAddress / cuGetProcAddress_v2 (cudart >= 11.3, current PyTorch),
 *     themselves reached through 1 or 2. The wrapper lets the driver answer, then
 *     looks the requested name and version up and, for a tracked entry point,
 *     returns a wrapper bound to exactly the pointer the driver returned: the variant
 *     asked for (per-thread default stream, ABI version) stays that variant. A
 *     request for cuGetProcAddress itself returns its wrapper. An unknown cuMem*
 *     name passes through and is noted once in the region (the collector prints it).
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
 * Device memory has no header: an open-addressing table (address or handle ->
 * record), in pages from mmap, doubled when 70 % full, under its own spin lock that
 * is held for table operations only, never across a driver call or a stack capture.
 * The recursion guard is held across every driver call made by a wrapper, so memory
 * the driver allocates or maps inside it (the pages of pinned memory) is not also
 * counted as host or mmap memory.
 */
#include <dlfcn.h>
#include <errno.h>
#include <link.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "capture/cuda_abi.h"
#include "capture/recorder.h"
#include "leakguard.h"

/* src/guard/regions.c maps the header page only (and reads the CUDA gauges there). */
_Static_assert(sizeof(lg_region_hdr_t) <= 4096, "the region header must fit one page");
#define CALLER_RA ((uintptr_t)__builtin_return_address(0))
#define CALLER_CFA ((uintptr_t)__builtin_frame_address(0) + 16)
#define LGC_UNPACK(...) __VA_ARGS__
#define LGC_EXPAND(m, a) m a

typedef void *(*dlsym_fn)(void *, const char *);

/* ------------------------------------------------------------------ kinds
 * One kind per entry-point ABI. P_x: the parameters, A_x: the arguments. */
#define LGC_KINDS(X)                                                                                          \
  X(GETPROC1) X(GETPROC2) X(MEMALLOC) X(MEMPITCH) X(MEMFREE) X(ALLOCASYNC) X(FROMPOOL) X(FREEASYNC)          \
  X(POOLCREATE) X(POOLDESTROY) X(POOLTRIM) X(MEMCREATE) X(MEMRELEASE) X(MEMMAP) X(MEMUNMAP) X(MANAGED)       \
  X(ALLOCHOST) X(HOSTALLOC) X(FREEHOST) X(HOSTREG) X(HOSTUNREG) X(ARRAY) X(ARRAY3D) X(ARRAYDESTROY)          \
  X(CTXCREATE2) X(CTXCREATE3) X(CTXCREATE4) X(CTXDESTROY) X(PRIMRETAIN) X(PRIMRELEASE) X(PRIMRESET)

#define P_GETPROC1 (const char *sym, void **pfn, int ver, unsigned long long flags)
#define A_GETPROC1 (sym, pfn, ver, flags)
#define P_GETPROC2 (const char *sym, void **pfn, int ver, unsigned long long flags, int *status)
#define A_GETPROC2 (sym, pfn, ver, flags, status)
#define P_MEMALLOC (lgc_dptr_t * dptr, size_t n)
#define A_MEMALLOC (dptr, n)
#define P_MEMPITCH (lgc_dptr_t * dptr, size_t *pitch, size_t w, size_t h, unsigned esz)
#define A_MEMPITCH (dptr, pitch, w, h, esz)
#define P_MEMFREE (lgc_dptr_t dptr)
#define A_MEMFREE (dptr)
#define P_ALLOCASYNC (lgc_dptr_t * dptr, size_t n, lgc_stream_t s)
#define A_ALLOCASYNC (dptr, n, s)
#define P_FROMPOOL (lgc_dptr_t * dptr, size_t n, lgc_pool_t pool, lgc_stream_t s)
#define A_FROMPOOL (dptr, n, pool, s)
#define P_FREEASYNC (lgc_dptr_t dptr, lgc_stream_t s)
#define A_FREEASYNC (dptr, s)
#define P_POOLCREATE (lgc_pool_t * pool, const void *props)
#define A_POOLCREATE (pool, props)
#define P_POOLDESTROY (lgc_pool_t pool)
#define A_POOLDESTROY (pool)
#define P_POOLTRIM (lgc_pool_t pool, size_t keep)
#define A_POOLTRIM (pool, keep)
#define P_MEMCREATE (lgc_handle_t * h, size_t n, const void *prop, unsigned long long flags)
#define A_MEMCREATE (h, n, prop, flags)
#define P_MEMRELEASE (lgc_handle_t h)
#define A_MEMRELEASE (h)
#define P_MEMMAP (lgc_dptr_t p, size_t n, size_t off, lgc_handle_t h, unsigned long long flags)
#define A_MEMMAP (p, n, off, h, flags)
#define P_MEMUNMAP (lgc_dptr_t p, size_t n)
#define A_MEMUNMAP (p, n)
#define P_MANAGED (lgc_dptr_t * dptr, size_t n, unsigned flags)
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
#define P_ARRAY (lgc_array_t * a, const void *desc)
#define A_ARRAY (a, desc)
#define P_ARRAY3D (lgc_array_t * a, const void *desc)
#define A_ARRAY3D (a, desc)
#define P_ARRAYDESTROY (lgc_array_t a)
#define A_ARRAYDESTROY (a)
#define P_CTXCREATE2 (lgc_ctx_t * c, unsigned flags, lgc_device_t d)
#define A_CTXCREATE2 (c, flags, d)
#define P_CTXCREATE3 (lgc_ctx_t * c, void *params, int nparams, unsigned flags, lgc_device_t d)
#define A_CTXCREATE3 (c, params, nparams, flags, d)
#define P_CTXCREATE4 (lgc_ctx_t * c, void *params, unsigned flags, lgc_device_t d)
#define A_CTXCREATE4 (c, params, flags, d)
#define P_CTXDESTROY (lgc_ctx_t c)
#define A_CTXDESTROY (c)
#define P_PRIMRETAIN (lgc_ctx_t * c, lgc_device_t d)
#define A_PRIMRETAIN (c, d)
#define P_PRIMRELEASE (lgc_device_t d)
#define A_PRIMRELEASE (d)
#define P_PRIMRESET (lgc_device_t d)
#define A_PRIMRESET (d)

#define LGC_ENUM(K) K_##K,
enum { LGC_KINDS(LGC_ENUM) K_COUNT };
#define LGC_NAME(K) #K,
static const char *const kind_name[K_COUNT] = {LGC_KINDS(LGC_NAME)};
#define LGC_PFN(K) typedef lgc_result_t(*pfn_##K) P_##K;
LGC_KINDS(LGC_PFN)
#define LGC_HPROTO(K) \
  static lgc_result_t h_##K(void *real, LGC_EXPAND(LGC_UNPACK, P_##K), uintptr_t ra, uintptr_t cfa);
LGC_KINDS(LGC_HPROTO)
#define REAL(K) ((pfn_##K)real)

/* ------------------------------------------------------------------ slots */

#define LGC_NSLOT 8
static void *_Atomic slot_real[K_COUNT][LGC_NSLOT];

#define LGC_SLOT(K, i)                                                                               \
  static lgc_result_t K##_s##i P_##K {                                                               \
    return h_##K(atomic_load_explicit(&slot_real[K_##K][i], memory_order_acquire),                   \
                 LGC_EXPAND(LGC_UNPACK, A_##K), CALLER_RA, CALLER_CFA);                              \
  }
#define LGC_SLOTS(K) LGC_SLOT(K, 0) LGC_SLOT(K, 1) LGC_SLOT(K, 2) LGC_SLOT(K, 3) \
  LGC_SLOT(K, 4) LGC_SLOT(K, 5) LGC_SLOT(K, 6) LGC_SLOT(K, 7)
LGC_KINDS(LGC_SLOTS)
#define LGC_SLOTFNS(K) {(void *)K##_s0, (void *)K##_s1, (void *)K##_s2, (void *)K##_s3, \
                        (void *)K##_s4, (void *)K##_s5, (void *)K##_s6, (void *)K##_s7},
static void *const slot_fn[K_COUNT][LGC_NSLOT] = {LGC_KINDS(LGC_SLOTFNS)};

/* ------------------------------------------------------------------ exports
 * The symbols a program linked with -lcuda binds to (the names cuda.h's macros
 * produce, plus the unversioned ones whose ABI is the same). Legacy 32-bit ABIs
 * (cuMemAlloc, cuMemFree... without _v2) are not exported: calls to them reach the
 * driver untracked. */
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
  X(cuDevicePrimaryCtxReset, PRIMRESET) X(cuDevicePrimaryCtxReset_v2, PRIMRESET)

#define LGC_EENUM(S, K) E_##S,
enum { LGC_EXPORTS(LGC_EENUM) E_COUNT };
#define LGC_ENAME(S, K) #S,
static const char *const export_name[E_COUNT] = {LGC_EXPORTS(LGC_ENAME)};
#define LGC_EKIND(S, K) K_##K,
static const unsigned char export_kind[E_COUNT] = {LGC_EXPORTS(LGC_EKIND)};
static void *_Atomic export_ptr[E_COUNT];
#define LGC_EPROTO(S, K) LG_API lgc_result_t S P_##K;
LGC_EXPORTS(LGC_EPROTO)
static void *export_real(int i);
#define LGC_EXPORT_FN(S, K)                                                                            \
  lgc_result_t S P_##K {                                                                               \
    return h_##K(export_real(E_##S), LGC_EXPAND(LGC_UNPACK, A_##K), CALLER_RA, CALLER_CFA);            \
  }
LGC_EXPORTS(LGC_EXPORT_FN)
#define LGC_EFN(S, K) (void *)S,
static void *const export_fn[E_COUNT] = {LGC_EXPORTS(LGC_EFN)};

/* ------------------------------------------------------------------ names and versions
 * cuGetProcAddress takes a base name and a CUDA version; the driver answers the
 * newest ABI variant not newer than the version (cudaTypedefs.h: PFN_x_vNNNNN).
 * kind -1: a legacy ABI that is not wrapped. */
typedef struct lgc_proc {
  const char *name;
  int ver;
  signed char kind;
} lgc_proc_t;
static const lgc_proc_t procs[] = {
    {"cuGetProcAddress", 11030, K_GETPROC1}, {"cuGetProcAddress", 12000, K_GETPROC2},
    {"cuMemAlloc", 2000, -1}, {"cuMemAlloc", 3020, K_MEMALLOC},
    {"cuMemAllocPitch", 2000, -1}, {"cuMemAllocPitch", 3020, K_MEMPITCH},
    {"cuMemFree", 2000, -1}, {"cuMemFree", 3020, K_MEMFREE},
    {"cuMemAllocAsync", 11020, K_ALLOCASYNC}, {"cuMemAllocFromPoolAsync", 11020, K_FROMPOOL},
    {"cuMemFreeAsync", 11020, K_FREEASYNC}, {"cuMemPoolCreate", 11020, K_POOLCREATE},
    {"cuMemPoolDestroy", 11020, K_POOLDESTROY}, {"cuMemPoolTrimTo", 11020, K_POOLTRIM},
    {"cuMemCreate", 10020, K_MEMCREATE}, {"cuMemRelease", 10020, K_MEMRELEASE},
    {"cuMemMap", 10020, K_MEMMAP}, {"cuMemUnmap", 10020, K_MEMUNMAP},
    {"cuMemAllocManaged", 6000, K_MANAGED},
    {"cuMemAllocHost", 2000, -1}, {"cuMemAllocHost", 3020, K_ALLOCHOST},
    {"cuMemHostAlloc", 2020, K_HOSTALLOC}, {"cuMemFreeHost", 2000, K_FREEHOST},
    {"cuMemHostRegister", 4000, K_HOSTREG}, {"cuMemHostUnregister", 4000, K_HOSTUNREG},
    {"cuArrayCreate", 2000, -1}, {"cuArrayCreate", 3020, K_ARRAY},
    {"cuArray3DCreate", 2000, -1}, {"cuArray3DCreate", 3020, K_ARRAY3D},
    {"cuArrayDestroy", 2000, K_ARRAYDESTROY},
    {"cuCtxCreate", 2000, K_CTXCREATE2}, {"cuCtxCreate", 11040, K_CTXCREATE3}, {"cuCtxCreate", 12050, K_CTXCREATE4},
    {"cuCtxDestroy", 2000, K_CTXDESTROY}, {"cuDevicePrimaryCtxRetain", 7000, K_PRIMRETAIN},
    {"cuDevicePrimaryCtxRelease", 7000, K_PRIMRELEASE}, {"cuDevicePrimaryCtxReset", 7000, K_PRIMRESET},
};

/* cuMem* entry points that neither allocate nor free (copies, queries, hints,
 * access, address reservations): passed through without a note. */
static const char *const benign_prefix[] = {
    "cuMemcpy", "cuMemset", "cuMemGet", "cuMemPrefetch", "cuMemAdvise", "cuMemRange", "cuMemHostGet",
    "cuMemAddress", "cuMemSetAccess", "cuMemSetMemPool", "cuMemPoolSet", "cuMemPoolGet", "cuMemPoolExport",
    "cuMemExport", "cuMemRetain", "cuMemDiscard", "cuMemBatch", "cuMemMapArray", NULL};

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

/* ------------------------------------------------------------------ the real dlsym */

/* Read by the assembly entry; hidden, so never preempted. */
LGI_HIDDEN void *lgi_real_dlsym_ptr;
LGI_HIDDEN void *lgi_dlsym_resolve(void);
LGI_HIDDEN int lgi_cuda_export_name(const char *name);
LGI_HIDDEN void *lgi_dlsym_handle(void *handle, const char *name);
LGI_HIDDEN void *lgi_dlsym_default(void *handle, const char *name);

/* glibc's dlsym, never ours: dlvsym is not interposed. */
__attribute__((used)) void *lgi_dlsym_resolve(void) {
  void *p = __atomic_load_n(&lgi_real_dlsym_ptr, __ATOMIC_ACQUIRE);
  if (LGI_LIKELY(p)) return p;
  p = dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.34");
  if (!p) p = dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.2.5");
  if (!p) {
    static const char msg[] = "leakguard: cannot find the real dlsym, aborting\n";
    (void)!write(2, msg, sizeof msg - 1);
    abort();
  }
  __atomic_store_n(&lgi_real_dlsym_ptr, p, __ATOMIC_RELEASE);
  return p;
}

#if defined(__x86_64__)
/* dlsym(handle, name): RTLD_NEXT (-1) and RTLD_DEFAULT (0) depend on the caller's
 * object, so they jump to glibc with the caller's return address untouched (a C
 * wrapper could only call it, and glibc would resolve relative to libleakguard).
 * RTLD_DEFAULT lookups of a name we export, and every lookup with an explicit handle
 * (caller-independent), go to C. */
__asm__(".pushsection .text\n"
        ".globl dlsym\n"
        ".type dlsym,@function\n"
        ".p2align 4\n"
        "dlsym:\n"
        "  .cfi_startproc\n"
        "  cmpq $-1, %rdi\n"
        "  je 2f\n"
        "  testq %rdi, %rdi\n"
        "  jne lgi_dlsym_handle\n"
        "  pushq %rdi\n"
        "  .cfi_adjust_cfa_offset 8\n"
        "  pushq %rsi\n"
        "  .cfi_adjust_cfa_offset 8\n"
        "  subq $8, %rsp\n"
        "  .cfi_adjust_cfa_offset 8\n"
        "  movq %rsi, %rdi\n"
        "  call lgi_cuda_export_name\n"
        "  addq $8, %rsp\n"
        "  .cfi_adjust_cfa_offset -8\n"
        "  popq %rsi\n"
        "  .cfi_adjust_cfa_offset -8\n"
        "  popq %rdi\n"
        "  .cfi_adjust_cfa_offset -8\n"
        "  testl %eax, %eax\n"
        "  jne lgi_dlsym_default\n"
        "2:\n"
        "  movq lgi_real_dlsym_ptr(%rip), %rax\n"
        "  testq %rax, %rax\n"
        "  je 3f\n"
        "  jmp *%rax\n"
        "3:\n"
        "  pushq %rdi\n"
        "  .cfi_adjust_cfa_offset 8\n"
        "  pushq %rsi\n"
        "  .cfi_adjust_cfa_offset 8\n"
        "  subq $8, %rsp\n"
        "  .cfi_adjust_cfa_offset 8\n"
        "  call lgi_dlsym_resolve\n"
        "  addq $8, %rsp\n"
        "  .cfi_adjust_cfa_offset -8\n"
        "  popq %rsi\n"
        "  .cfi_adjust_cfa_offset -8\n"
        "  popq %rdi\n"
        "  .cfi_adjust_cfa_offset -8\n"
        "  jmp *%rax\n"
        "  .cfi_endproc\n"
        ".size dlsym, .-dlsym\n"
        ".popsection\n");
#else
/* Elsewhere a sibling call (the compiler's, at -O2) keeps the caller for glibc. */
LG_API void *dlsym(void *handle, const char *name) {
  if (handle == RTLD_DEFAULT && lgi_cuda_export_name(name)) return lgi_dlsym_default(handle, name);
  if (handle != RTLD_DEFAULT && handle != RTLD_NEXT) return lgi_dlsym_handle(handle, name);
  return ((dlsym_fn)lgi_dlsym_resolve())(handle, name);
}
#endif

static int export_index(const char *name) {
  if (!name || name[0] != 'c' || name[1] != 'u') return -1;
  for (int i = 0; i < E_COUNT; i++)
    if (!strcmp(name, export_name[i])) return i;
  return -1;
}

__attribute__((used)) int lgi_cuda_export_name(const char *name) { return export_index(name) >= 0; }

/* ------------------------------------------------------------------ notes, flags */

void lgi_cuda_note(const char *name, const char *what);
static void note(const char *name, const char *what) { lgi_cuda_note(name, what); }
void lgi_cuda_note(const char *name, const char *what) {
  lg_region_hdr_t *h = lgi_g.hdr;
  if (!lgi_g.enabled || !h || !name) return;
  char buf[LG_CUDA_NOTE_LEN];
  size_t a = strnlen(name, 40), b = strlen(what);
  memset(buf, 0, sizeof buf);
  memcpy(buf, name, a);
  memcpy(buf + a, ": ", 2);
  if (a + 2 + b > sizeof buf - 1) b = sizeof buf - 1 - a - 2;
  memcpy(buf + a + 2, what, b);
  lgi_lock();
  uint32_t n = atomic_load_explicit(&h->cuda_nnotes, memory_order_relaxed);
  int dup = 0;
  for (uint32_t i = 0; i < n && i < LG_CUDA_NOTES; i++)
    if (!strncmp(h->cuda_notes[i], buf, sizeof buf)) dup = 1;
  if (!dup && n < LG_CUDA_NOTES) {
    memcpy(h->cuda_notes[n], buf, sizeof buf);
    atomic_store_explicit(&h->cuda_nnotes, n + 1, memory_order_release);
  }
  lgi_unlock();
}

static void set_flag(uint32_t f) {
  if (lgi_g.enabled && !(atomic_load_explicit(&lgi_g.hdr->cuda_flags, memory_order_relaxed) & f))
    atomic_fetch_or(&lgi_g.hdr->cuda_flags, f);
}

/* ------------------------------------------------------------------ driver helpers
 * Queries the wrappers make (current context, its device, total memory, pool
 * attributes), resolved in the same driver object as the first bound entry point. */
static struct {
  lgc_result_t (*ctx_get_current)(lgc_ctx_t *);
  lgc_result_t (*ctx_get_device)(lgc_device_t *);
  lgc_result_t (*total_mem)(size_t *, lgc_device_t);
  lgc_result_t (*pool_get_attr)(lgc_pool_t, int, void *);
  lgc_result_t (*dev_get_mempool)(lgc_pool_t *, lgc_device_t);
} hp;
static _Atomic int hp_state; /* 0 not yet, 1 resolving, 2 done */

static void helpers_from(void *real) {
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
  helpers_from(real);
  set_flag(LG_CUDA_SEEN);
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
    helpers_from(p);
    set_flag(LG_CUDA_SEEN);
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

__attribute__((used)) void *lgi_dlsym_handle(void *handle, const char *name) {
  dlsym_fn d = (dlsym_fn)lgi_dlsym_resolve();
  void *r = d(handle, name);
  if (!r || !name || name[0] != 'c' || name[1] != 'u') return r;
  int e = export_index(name);
  if (e < 0) {
    if (!strncmp(name, "cuMem", 5) && !benign(name) && strcmp(name, "cuMemAlloc") && strcmp(name, "cuMemFree") &&
        strcmp(name, "cuMemAllocPitch") && strcmp(name, "cuMemAllocHost"))
      note(name, "unknown memory entry point; untracked");
    return r;
  }
  if (is_ours(r)) {
    /* The handle's scope reached our own export (dlopen(NULL), a library that depends
     * on us): the answer is the driver's definition, or none. */
    void *n = d(RTLD_NEXT, name);
    return n ? bind(export_kind[e], n) : NULL;
  }
  return bind(export_kind[e], r);
}

__attribute__((used)) void *lgi_dlsym_default(void *handle, const char *name) {
  (void)handle;
  int e = export_index(name);
  /* Our export is first in the global scope; what a program without us would get is
   * the next definition (the driver's), or nothing: then CUDA is absent, say so. */
  void *n = ((dlsym_fn)lgi_dlsym_resolve())(RTLD_NEXT, name);
  return n && e >= 0 ? bind(export_kind[e], n) : n;
}

/* ------------------------------------------------------------------ the table */

enum { NS_ADDR = 1, NS_HANDLE, NS_MAP, NS_ARRAY, NS_REG };

typedef struct cu_ent {
  uint64_t key;    /* address, handle or array */
  uint64_t size;
  uint64_t ctx;    /* context it was made in (0: not bound to one) */
  uint64_t aux;    /* NS_MAP: the handle; stream-ordered: the stream */
  uint32_t site, epoch;
  uint8_t ns;      /* 0 = empty slot */
  uint8_t space, dev;
  uint8_t pad[5];
} cu_ent_t;

#define TAB_MIN (1u << 12)
#define TAB_MAX (1u << 24)
static cu_ent_t *tab;
static uint32_t tab_cap, tab_n;
static atomic_flag tab_lock_f = ATOMIC_FLAG_INIT;

static void tab_lock(void) {
  while (atomic_flag_test_and_set_explicit(&tab_lock_f, memory_order_acquire)) sched_yield();
}
static void tab_unlock(void) { atomic_flag_clear_explicit(&tab_lock_f, memory_order_release); }

void lgi_cuda_atfork(int phase) {
  if (phase == 0) tab_lock();
  else tab_unlock();
}

static inline uint32_t tab_slot(uint64_t key, unsigned ns, uint32_t cap) {
  uint64_t x = (key ^ ((uint64_t)ns << 59)) * 0x9E3779B97F4A7C15ULL;
  x ^= x >> 31;
  return (uint32_t)(x >> 20) & (cap - 1);
}

static void raw_insert(cu_ent_t *t, uint32_t cap, const cu_ent_t *e) {
  uint32_t i = tab_slot(e->key, e->ns, cap);
  while (t[i].ns) i = (i + 1) & (cap - 1);
  t[i] = *e;
}

/* Caller holds the lock. 0 or -1 (no memory). */
static int tab_grow(void) {
  uint32_t cap = tab ? tab_cap * 2 : TAB_MIN;
  if (cap > TAB_MAX) return -1;
  cu_ent_t *nt = lgi_pages_alloc((size_t)cap * sizeof *nt);
  if (!nt) return -1;
  for (uint32_t i = 0; tab && i < tab_cap; i++)
    if (tab[i].ns) raw_insert(nt, cap, &tab[i]);
  if (tab) lgi_pages_free(tab, (size_t)tab_cap * sizeof *tab);
  tab = nt;
  tab_cap = cap;
  return 0;
}

static cu_ent_t *tab_find(uint64_t key, unsigned ns) {
  if (!tab) return NULL;
  for (uint32_t i = tab_slot(key, ns, tab_cap);; i = (i + 1) & (tab_cap - 1)) {
    if (!tab[i].ns) return NULL;
    if (tab[i].key == key && tab[i].ns == ns) return &tab[i];
  }
}

/* Removes slot i (backward-shift deletion: linear probing needs no tombstones). */
static void tab_del(uint32_t i) {
  uint32_t m = tab_cap - 1, j = i;
  for (;;) {
    j = (j + 1) & m;
    if (!tab[j].ns) break;
    uint32_t k = tab_slot(tab[j].key, tab[j].ns, tab_cap);
    /* j's entry may move into the hole unless its home k lies cyclically in (i, j] */
    int stays = i <= j ? (i < k && k <= j) : (i < k || k <= j);
    if (!stays) {
      tab[i] = tab[j];
      i = j;
    }
  }
  memset(&tab[i], 0, sizeof tab[i]);
  tab_n--;
}

/* Inserts e; 1 when it replaced an entry with the same key (copied to *old), 0 when
 * new, -1 when there is no room. Caller holds the lock. */
static int tab_put(const cu_ent_t *e, cu_ent_t *old) {
  cu_ent_t *x = tab_find(e->key, e->ns);
  if (x) {
    *old = *x;
    *x = *e;
    return 1;
  }
  if ((!tab || (uint64_t)(tab_n + 1) * 10 > (uint64_t)tab_cap * 7) && tab_grow() != 0 && (!tab || tab_n + 1 >= tab_cap))
    return -1;
  raw_insert(tab, tab_cap, e);
  tab_n++;
  return 0;
}

static int tab_take(uint64_t key, unsigned ns, cu_ent_t *out) {
  cu_ent_t *x = tab_find(key, ns);
  if (!x) return 0;
  *out = *x;
  tab_del((uint32_t)(x - tab));
  return 1;
}

/* The last managed block found by lgi_cuda_managed_site (below). */
static _Atomic uint64_t um_last_key, um_last_size;
static _Atomic uint32_t um_last_site;

/* ------------------------------------------------------------------ accounting */

static lg_cuda_dev_t *gauge(int dev) {
  return dev >= 0 && dev < LG_CUDA_MAX_DEVICES ? &lgi_g.hdr->cuda[dev] : NULL;
}

/* Counts e on (sign 1) or off (sign -1) its site or gauge. Lock-free. */
static void count(lgi_tls_t *t, const cu_ent_t *e, int sign, int alloc) {
  lg_cuda_dev_t *g = gauge(e->dev);
  switch (e->ns) {
  case NS_ADDR:
  case NS_HANDLE:
  case NS_ARRAY:
    lgi_count(t, e->site, sign * (int64_t)e->size, sign, e->epoch, alloc && sign > 0);
    /* per-device totals for readers that do not sum sites (the guard) */
    if (g && e->space == LG_SPACE_DEVICE) atomic_fetch_add(&g->device_bytes, sign * (int64_t)e->size);
    else if (g && e->space == LG_SPACE_MANAGED) {
      atomic_fetch_add(&g->managed_bytes, sign * (int64_t)e->size);
      if (sign < 0) atomic_store(&um_last_site, 0); /* the UM lookup's cache may name it */
    }
    else if (g && e->space == LG_SPACE_PINNED) atomic_fetch_add(&g->pinned_bytes, sign * (int64_t)e->size);
    break;
  case NS_REG:
    if (g) atomic_fetch_add(&g->registered_bytes, sign * (int64_t)e->size);
    break;
  case NS_MAP:
    if (g) atomic_fetch_add(&g->vmm_mapped_bytes, sign * (int64_t)e->size);
    break;
  }
}

static void put_counted(lgi_tls_t *t, const cu_ent_t *e) {
  cu_ent_t old;
  tab_lock();
  int r = tab_put(e, &old);
  tab_unlock();
  if (r < 0) {
    atomic_fetch_add(&lgi_g.hdr->dropped, 1);
    return;
  }
  if (r == 1) count(t, &old, -1, 0); /* freed behind our back (by an untracked path) */
  count(t, e, 1, 1);
  atomic_fetch_add_explicit(&lgi_g.hdr->cuda_calls, 1, memory_order_relaxed);
  if (e->ns != NS_REG && e->ns != NS_MAP) set_flag(LG_CUDA_ALLOCATED);
}

/* Takes the record of key out before the driver frees it (the address could be
 * handed out again at once); 1 when there was one. */
static int take_counted(lgi_tls_t *t, uint64_t key, unsigned ns, cu_ent_t *e) {
  tab_lock();
  int had = tab_take(key, ns, e);
  tab_unlock();
  if (had) count(t, e, -1, 0);
  return had;
}

/* The driver refused the free: the memory lives on. */
static void untake(lgi_tls_t *t, const cu_ent_t *e) {
  cu_ent_t old;
  tab_lock();
  int r = tab_put(e, &old);
  tab_unlock();
  if (r == 1) count(t, &old, -1, 0);
  if (r >= 0) count(t, e, 1, 0);
}

static void after_free(int had, lgc_result_t rc) {
  if (rc == LGC_SUCCESS) {
    atomic_fetch_add_explicit(&lgi_g.hdr->cuda_calls, 1, memory_order_relaxed);
    if (!had) atomic_fetch_add_explicit(&lgi_g.hdr->cuda_unknown_frees, 1, memory_order_relaxed);
  }
}

/* ------------------------------------------------------------------ contexts and devices */

#define LGC_MAX_CTX 256
#define LGC_DEVS 256
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

static int clamp_dev(int dev) { return dev < 0 ? 0 : dev >= LGC_DEVS - 1 ? LGC_DEVS - 2 : dev; }

/* First sight of a device: the count of devices, its total memory. */
static void dev_seen(int dev) {
  lg_region_hdr_t *h = lgi_g.hdr;
  uint32_t n = atomic_load(&h->cuda_ndev), want = (uint32_t)dev + 1;
  while (n < want && !atomic_compare_exchange_weak(&h->cuda_ndev, &n, want)) {
  }
  lg_cuda_dev_t *g = gauge(dev);
  if (g && !atomic_load_explicit(&g->total_bytes, memory_order_relaxed) && hp.total_mem) {
    size_t b = 0;
    if (hp.total_mem(&b, dev) == LGC_SUCCESS && b) atomic_store(&g->total_bytes, (uint64_t)b);
  }
}

/* The current context and its device (0 when there is none: the call failed anyway). */
static int current_dev(uint64_t *ctx_out) {
  lgc_ctx_t c = NULL;
  *ctx_out = 0;
  if (!hp.ctx_get_current || hp.ctx_get_current(&c) != LGC_SUCCESS || !c) return 0;
  uint64_t cv = (uint64_t)(uintptr_t)c;
  *ctx_out = cv;
  uint32_t g = atomic_load_explicit(&ctx_gen, memory_order_acquire);
  if (tl_ctx == cv && tl_gen == g) return tl_dev;
  int dev = -1;
  tab_lock();
  ctx_ent_t *e = ctx_find(cv);
  if (e && e->alive) dev = e->dev;
  tab_unlock();
  if (dev < 0) {
    /* A context made before recording, or through an untracked path: learn its device
     * (not counted as created). */
    lgc_device_t d = 0;
    dev = hp.ctx_get_device && hp.ctx_get_device(&d) == LGC_SUCCESS ? clamp_dev(d) : 0;
    tab_lock();
    e = ctx_slot(cv);
    if (e) *e = (ctx_ent_t){cv, dev, 1, 0};
    tab_unlock();
    dev_seen(dev);
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
  dev = clamp_dev(dev);
  tab_lock();
  ctx_ent_t *e = ctx_slot(c);
  if (e) *e = (ctx_ent_t){c, dev, 1, (uint8_t)primary};
  int again = destroyed_once[dev];
  tab_unlock();
  atomic_fetch_add(&ctx_gen, 1);
  lg_cuda_dev_t *g = gauge(dev);
  if (g) {
    atomic_fetch_add(&g->contexts, 1);
    atomic_fetch_add(&g->contexts_created, 1);
    if (again) atomic_fetch_add(&g->contexts_recreated, 1);
  }
  atomic_fetch_add_explicit(&lgi_g.hdr->cuda_calls, 1, memory_order_relaxed);
  dev_seen(dev);
  if (!(atomic_load(&lgi_g.hdr->cuda_flags) & LG_CUDA_TORCH) && dl_iterate_phdr(torch_cb, NULL))
    set_flag(LG_CUDA_TORCH);
  lgi_cuda_um_start(); /* --cuda-um: CUPTI needs a context */
}

/* The context is gone: every record made in it is released. */
static void ctx_destroyed(lgi_tls_t *t, uint64_t c) {
  tab_lock();
  ctx_ent_t *e = ctx_find(c);
  int dev = e && e->alive ? e->dev : -1;
  if (e) e->alive = 0;
  if (dev >= 0) destroyed_once[dev] = 1;
  for (uint32_t i = 0; tab && i < tab_cap; i++)
    while (tab[i].ns && tab[i].ctx == c && tab[i].ns != NS_HANDLE) {
      cu_ent_t x = tab[i];
      tab_del(i);
      count(t, &x, -1, 0);
    }
  tab_unlock();
  atomic_fetch_add(&ctx_gen, 1);
  lg_cuda_dev_t *g = gauge(dev);
  if (g) {
    atomic_fetch_sub(&g->contexts, 1);
    atomic_fetch_add(&g->contexts_destroyed, 1);
  }
  atomic_fetch_add_explicit(&lgi_g.hdr->cuda_calls, 1, memory_order_relaxed);
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
  tab_lock();
  int i = 0;
  while (i < npools && pools[i].pool != p) i++;
  if (i == npools && npools < LGC_MAX_POOLS) {
    pools[npools].pool = p;
    pools[npools++].dev = dev;
    added = 1;
  }
  tab_unlock();
  lg_cuda_dev_t *g = gauge(dev);
  if (added && g) atomic_fetch_add(&g->pools, 1);
}

static int pool_dev(uint64_t p) {
  int dev = -1;
  tab_lock();
  for (int i = 0; i < npools; i++)
    if (pools[i].pool == p) dev = pools[i].dev;
  tab_unlock();
  return dev;
}

static void pool_del(uint64_t p) {
  int dev = -1;
  tab_lock();
  for (int i = 0; i < npools; i++)
    if (pools[i].pool == p) {
      dev = pools[i].dev;
      pools[i] = pools[--npools];
      break;
    }
  tab_unlock();
  lg_cuda_dev_t *g = gauge(dev);
  if (g) atomic_fetch_sub(&g->pools, 1);
}

static void pool_sample(int force) {
  if (!hp.pool_get_attr) return;
  uint32_t ep = lgi_epoch();
  if (!force && atomic_load_explicit(&pool_epoch, memory_order_relaxed) == ep) return;
  atomic_store_explicit(&pool_epoch, ep, memory_order_relaxed);
  uint64_t list[LGC_MAX_POOLS];
  int devs[LGC_MAX_POOLS], n = 0;
  tab_lock();
  for (int i = 0; i < npools; i++) list[n] = pools[i].pool, devs[n++] = pools[i].dev;
  tab_unlock();
  int64_t res[LG_CUDA_MAX_DEVICES] = {0}, used[LG_CUDA_MAX_DEVICES] = {0};
  for (int i = 0; i < n; i++) {
    uint64_t r = 0, u = 0;
    if (devs[i] < 0 || devs[i] >= LG_CUDA_MAX_DEVICES) continue;
    if (hp.pool_get_attr((lgc_pool_t)(uintptr_t)list[i], LGC_POOL_RESERVED_MEM_CURRENT, &r) == LGC_SUCCESS)
      res[devs[i]] += (int64_t)r;
    if (hp.pool_get_attr((lgc_pool_t)(uintptr_t)list[i], LGC_POOL_USED_MEM_CURRENT, &u) == LGC_SUCCESS)
      used[devs[i]] += (int64_t)u;
  }
  uint32_t nd = atomic_load(&lgi_g.hdr->cuda_ndev);
  for (uint32_t d = 0; d < nd && d < LG_CUDA_MAX_DEVICES; d++) {
    atomic_store(&lgi_g.hdr->cuda[d].pool_reserved_bytes, res[d]);
    atomic_store(&lgi_g.hdr->cuda[d].pool_used_bytes, used[d]);
  }
}

static void default_pool(int dev) {
  if (dev < 0 || dev >= LGC_DEVS || default_pool_known[dev] || !hp.dev_get_mempool) return;
  lgc_pool_t p = NULL;
  if (hp.dev_get_mempool(&p, dev) == LGC_SUCCESS && p) pool_add((uint64_t)(uintptr_t)p, dev);
  default_pool_known[dev] = 1;
}

/* ------------------------------------------------------------------ wrappers' common parts */

/* Enters the recorder for a tracked call: 1 (guard held) or 0 (pass through). */
static inline int enter(lgi_tls_t *t) {
  if (t->guard || !lgi_thread_ready(t)) return 0;
  t->guard++;
  return 1;
}
static inline void leave(lgi_tls_t *t) { t->guard--; }

/* A new allocation: its stack (space and device make the site) and its record. */
static void track(lgi_tls_t *t, unsigned ns, uint64_t key, uint64_t size, unsigned space, int dev, uint64_t ctx,
                  uint64_t aux, uintptr_t ra, uintptr_t cfa) {
  dev = clamp_dev(dev);
  cu_ent_t e;
  memset(&e, 0, sizeof e);
  e.key = key;
  e.size = size;
  e.ctx = ctx;
  e.aux = aux;
  e.ns = (uint8_t)ns;
  e.space = (uint8_t)space;
  e.dev = (uint8_t)dev;
  e.site = ns == NS_REG ? 0 : lgi_capture_all(t, ra, cfa, LGI_SITE_SPACE(space, dev));
  e.epoch = lgi_epoch();
  put_counted(t, &e);
}

/* A free of key in namespace ns through the driver's free function. */
#define LGC_FREE(t, key, ns, call)            \
  do {                                        \
    cu_ent_t e_;                              \
    int had_ = take_counted(t, key, ns, &e_); \
    rc = (call);                              \
    if (rc != LGC_SUCCESS && had_) untake(t, &e_); \
    after_free(had_, rc);                     \
  } while (0)

/* ------------------------------------------------------------------ the wrappers */

static lgc_result_t h_GETPROC1(void *real, const char *sym, void **pfn, int ver, unsigned long long flags,
                               uintptr_t ra, uintptr_t cfa) {
  (void)ra, (void)cfa;
  if (!real) return LGC_ERROR_STUB_LIBRARY;
  lgc_result_t rc = REAL(GETPROC1)(sym, pfn, ver, flags);
  if (rc == LGC_SUCCESS && pfn && *pfn && sym) *pfn = wrap_proc(sym, ver, *pfn);
  return rc;
}

static lgc_result_t h_GETPROC2(void *real, const char *sym, void **pfn, int ver, unsigned long long flags,
                               int *status, uintptr_t ra, uintptr_t cfa) {
  (void)ra, (void)cfa;
  if (!real) return LGC_ERROR_STUB_LIBRARY;
  lgc_result_t rc = REAL(GETPROC2)(sym, pfn, ver, flags, status);
  if (rc == LGC_SUCCESS && pfn && *pfn && sym) *pfn = wrap_proc(sym, ver, *pfn);
  return rc;
}

static lgc_result_t h_MEMALLOC(void *real, lgc_dptr_t *dptr, size_t n, uintptr_t ra, uintptr_t cfa) {
  if (!real) return LGC_ERROR_STUB_LIBRARY;
  lgi_tls_t *t = &lgi_tls;
  if (!enter(t)) return REAL(MEMALLOC)(dptr, n);
  lgc_result_t rc = REAL(MEMALLOC)(dptr, n);
  if (rc == LGC_SUCCESS && dptr && *dptr) {
    uint64_t ctx;
    int dev = current_dev(&ctx);
    track(t, NS_ADDR, *dptr, n, LG_SPACE_DEVICE, dev, ctx, 0, ra, cfa);
  }
  leave(t);
  return rc;
}

static lgc_result_t h_MEMPITCH(void *real, lgc_dptr_t *dptr, size_t *pitch, size_t w, size_t h, unsigned esz,
                               uintptr_t ra, uintptr_t cfa) {
  if (!real) return LGC_ERROR_STUB_LIBRARY;
  lgi_tls_t *t = &lgi_tls;
  if (!enter(t)) return REAL(MEMPITCH)(dptr, pitch, w, h, esz);
  lgc_result_t rc = REAL(MEMPITCH)(dptr, pitch, w, h, esz);
  if (rc == LGC_SUCCESS && dptr && *dptr && pitch) {
    uint64_t ctx;
    int dev = current_dev(&ctx);
    track(t, NS_ADDR, *dptr, (uint64_t)*pitch * h, LG_SPACE_DEVICE, dev, ctx, 0, ra, cfa);
  }
  leave(t);
  return rc;
}

static lgc_result_t h_MEMFREE(void *real, lgc_dptr_t dptr, uintptr_t ra, uintptr_t cfa) {
  (void)ra, (void)cfa;
  if (!real) return LGC_ERROR_STUB_LIBRARY;
  lgi_tls_t *t = &lgi_tls;
  if (!dptr || !enter(t)) return REAL(MEMFREE)(dptr);
  lgc_result_t rc;
  LGC_FREE(t, dptr, NS_ADDR, REAL(MEMFREE)(dptr));
  leave(t);
  return rc;
}

static lgc_result_t h_ALLOCASYNC(void *real, lgc_dptr_t *dptr, size_t n, lgc_stream_t s, uintptr_t ra,
                                 uintptr_t cfa) {
  if (!real) return LGC_ERROR_STUB_LIBRARY;
  lgi_tls_t *t = &lgi_tls;
  if (!enter(t)) return REAL(ALLOCASYNC)(dptr, n, s);
  lgc_result_t rc = REAL(ALLOCASYNC)(dptr, n, s);
  if (rc == LGC_SUCCESS && dptr && *dptr) {
    uint64_t ctx;
    int dev = current_dev(&ctx);
    track(t, NS_ADDR, *dptr, n, LG_SPACE_DEVICE, dev, ctx, (uint64_t)(uintptr_t)s, ra, cfa);
    default_pool(dev);
    pool_sample(0);
  }
  leave(t);
  return rc;
}

static lgc_result_t h_FROMPOOL(void *real, lgc_dptr_t *dptr, size_t n, lgc_pool_t pool, lgc_stream_t s,
                               uintptr_t ra, uintptr_t cfa) {
  if (!real) return LGC_ERROR_STUB_LIBRARY;
  lgi_tls_t *t = &lgi_tls;
  if (!enter(t)) return REAL(FROMPOOL)(dptr, n, pool, s);
  lgc_result_t rc = REAL(FROMPOOL)(dptr, n, pool, s);
  if (rc == LGC_SUCCESS && dptr && *dptr) {
    uint64_t ctx;
    int dev = current_dev(&ctx), pd = pool_dev((uint64_t)(uintptr_t)pool);
    track(t, NS_ADDR, *dptr, n, LG_SPACE_DEVICE, pd >= 0 ? pd : dev, ctx, (uint64_t)(uintptr_t)s, ra, cfa);
    pool_sample(0);
  }
  leave(t);
  return rc;
}

static lgc_result_t h_FREEASYNC(void *real, lgc_dptr_t dptr, lgc_stream_t s, uintptr_t ra, uintptr_t cfa) {
  (void)ra, (void)cfa;
  if (!real) return LGC_ERROR_STUB_LIBRARY;
  lgi_tls_t *t = &lgi_tls;
  if (!dptr || !enter(t)) return REAL(FREEASYNC)(dptr, s);
  lgc_result_t rc;
  /* Counted when enqueued: the program gave the memory back to the pool. */
  LGC_FREE(t, dptr, NS_ADDR, REAL(FREEASYNC)(dptr, s));
  if (rc == LGC_SUCCESS) pool_sample(0);
  leave(t);
  return rc;
}

static lgc_result_t h_POOLCREATE(void *real, lgc_pool_t *pool, const void *props, uintptr_t ra, uintptr_t cfa) {
  (void)ra, (void)cfa;
  if (!real) return LGC_ERROR_STUB_LIBRARY;
  lgi_tls_t *t = &lgi_tls;
  if (!enter(t)) return REAL(POOLCREATE)(pool, props);
  lgc_result_t rc = REAL(POOLCREATE)(pool, props);
  if (rc == LGC_SUCCESS && pool && *pool) {
    const lgc_alloc_prop_head_t *ph = props;
    uint64_t ctx;
    int dev = ph && ph->location_type == LGC_LOCATION_DEVICE ? clamp_dev(ph->location_id) : current_dev(&ctx);
    dev_seen(dev);
    pool_add((uint64_t)(uintptr_t)*pool, dev);
    pool_sample(1);
  }
  leave(t);
  return rc;
}

static lgc_result_t h_POOLDESTROY(void *real, lgc_pool_t pool, uintptr_t ra, uintptr_t cfa) {
  (void)ra, (void)cfa;
  if (!real) return LGC_ERROR_STUB_LIBRARY;
  lgi_tls_t *t = &lgi_tls;
  if (!enter(t)) return REAL(POOLDESTROY)(pool);
  lgc_result_t rc = REAL(POOLDESTROY)(pool);
  if (rc == LGC_SUCCESS) {
    pool_del((uint64_t)(uintptr_t)pool);
    pool_sample(1);
  }
  leave(t);
  return rc;
}

static lgc_result_t h_POOLTRIM(void *real, lgc_pool_t pool, size_t keep, uintptr_t ra, uintptr_t cfa) {
  (void)ra, (void)cfa;
  if (!real) return LGC_ERROR_STUB_LIBRARY;
  lgi_tls_t *t = &lgi_tls;
  if (!enter(t)) return REAL(POOLTRIM)(pool, keep);
  lgc_result_t rc = REAL(POOLTRIM)(pool, keep);
  if (rc == LGC_SUCCESS) pool_sample(1);
  leave(t);
  return rc;
}

static lgc_result_t h_MEMCREATE(void *real, lgc_handle_t *h, size_t n, const void *prop, unsigned long long flags,
                                uintptr_t ra, uintptr_t cfa) {
  if (!real) return LGC_ERROR_STUB_LIBRARY;
  lgi_tls_t *t = &lgi_tls;
  if (!enter(t)) return REAL(MEMCREATE)(h, n, prop, flags);
  lgc_result_t rc = REAL(MEMCREATE)(h, n, prop, flags);
  if (rc == LGC_SUCCESS && h && *h) {
    const lgc_alloc_prop_head_t *ph = prop;
    unsigned space = LG_SPACE_DEVICE;
    uint64_t ctx;
    int dev;
    if (ph && ph->location_type == LGC_LOCATION_DEVICE) {
      dev = clamp_dev(ph->location_id);
      dev_seen(dev);
    } else {
      /* host memory made by the VMM API: pinned */
      if (ph && ph->location_type >= LGC_LOCATION_HOST) space = LG_SPACE_PINNED;
      dev = current_dev(&ctx);
    }
    /* Physical memory lives until released, whatever the context: ctx 0. */
    track(t, NS_HANDLE, *h, n, space, dev, 0, 0, ra, cfa);
  }
  leave(t);
  return rc;
}

static lgc_result_t h_MEMRELEASE(void *real, lgc_handle_t h, uintptr_t ra, uintptr_t cfa) {
  (void)ra, (void)cfa;
  if (!real) return LGC_ERROR_STUB_LIBRARY;
  lgi_tls_t *t = &lgi_tls;
  if (!h || !enter(t)) return REAL(MEMRELEASE)(h);
  lgc_result_t rc;
  LGC_FREE(t, h, NS_HANDLE, REAL(MEMRELEASE)(h));
  leave(t);
  return rc;
}

static lgc_result_t h_MEMMAP(void *real, lgc_dptr_t p, size_t n, size_t off, lgc_handle_t h,
                             unsigned long long flags, uintptr_t ra, uintptr_t cfa) {
  (void)ra, (void)cfa;
  if (!real) return LGC_ERROR_STUB_LIBRARY;
  lgi_tls_t *t = &lgi_tls;
  if (!enter(t)) return REAL(MEMMAP)(p, n, off, h, flags);
  lgc_result_t rc = REAL(MEMMAP)(p, n, off, h, flags);
  if (rc == LGC_SUCCESS && p) {
    /* address -> handle, for attribution; the bytes count by handle */
    cu_ent_t e;
    memset(&e, 0, sizeof e);
    tab_lock();
    cu_ent_t *he = tab_find(h, NS_HANDLE);
    if (he) e.site = he->site, e.dev = he->dev, e.space = he->space;
    tab_unlock();
    e.key = p;
    e.size = n;
    e.aux = h;
    e.ns = NS_MAP;
    e.epoch = lgi_epoch();
    put_counted(t, &e);
  }
  leave(t);
  return rc;
}

static lgc_result_t h_MEMUNMAP(void *real, lgc_dptr_t p, size_t n, uintptr_t ra, uintptr_t cfa) {
  (void)ra, (void)cfa;
  if (!real) return LGC_ERROR_STUB_LIBRARY;
  lgi_tls_t *t = &lgi_tls;
  if (!enter(t)) return REAL(MEMUNMAP)(p, n);
  lgc_result_t rc = REAL(MEMUNMAP)(p, n);
  if (rc == LGC_SUCCESS) {
    /* Usually the mappings of the range follow each other: take them in a chain, and
     * scan the table only for what the chain misses. */
    uint64_t a = p, end = p + n;
    cu_ent_t e;
    while (a < end && take_counted(t, a, NS_MAP, &e) && e.size) a += e.size;
    if (a < end) {
      tab_lock();
      for (uint32_t i = 0; tab && i < tab_cap; i++)
        while (tab[i].ns == NS_MAP && tab[i].key >= a && tab[i].key < end) {
          cu_ent_t x = tab[i];
          tab_del(i);
          count(t, &x, -1, 0);
        }
      tab_unlock();
    }
    atomic_fetch_add_explicit(&lgi_g.hdr->cuda_calls, 1, memory_order_relaxed);
  }
  leave(t);
  return rc;
}

static lgc_result_t h_MANAGED(void *real, lgc_dptr_t *dptr, size_t n, unsigned flags, uintptr_t ra,
                              uintptr_t cfa) {
  if (!real) return LGC_ERROR_STUB_LIBRARY;
  lgi_tls_t *t = &lgi_tls;
  if (!enter(t)) return REAL(MANAGED)(dptr, n, flags);
  lgc_result_t rc = REAL(MANAGED)(dptr, n, flags);
  if (rc == LGC_SUCCESS && dptr && *dptr) {
    uint64_t ctx;
    int dev = current_dev(&ctx);
    track(t, NS_ADDR, *dptr, n, LG_SPACE_MANAGED, dev, ctx, 0, ra, cfa);
  }
  leave(t);
  return rc;
}

static lgc_result_t h_ALLOCHOST(void *real, void **pp, size_t n, uintptr_t ra, uintptr_t cfa) {
  if (!real) return LGC_ERROR_STUB_LIBRARY;
  lgi_tls_t *t = &lgi_tls;
  if (!enter(t)) return REAL(ALLOCHOST)(pp, n);
  /* The guard is held: the pages the driver maps here are not also mmap memory. */
  lgc_result_t rc = REAL(ALLOCHOST)(pp, n);
  if (rc == LGC_SUCCESS && pp && *pp) {
    uint64_t ctx;
    int dev = current_dev(&ctx);
    track(t, NS_ADDR, (uint64_t)(uintptr_t)*pp, n, LG_SPACE_PINNED, dev, ctx, 0, ra, cfa);
  }
  leave(t);
  return rc;
}

static lgc_result_t h_HOSTALLOC(void *real, void **pp, size_t n, unsigned flags, uintptr_t ra, uintptr_t cfa) {
  if (!real) return LGC_ERROR_STUB_LIBRARY;
  lgi_tls_t *t = &lgi_tls;
  if (!enter(t)) return REAL(HOSTALLOC)(pp, n, flags);
  lgc_result_t rc = REAL(HOSTALLOC)(pp, n, flags);
  if (rc == LGC_SUCCESS && pp && *pp) {
    uint64_t ctx;
    int dev = current_dev(&ctx);
    track(t, NS_ADDR, (uint64_t)(uintptr_t)*pp, n, LG_SPACE_PINNED, dev, ctx, 0, ra, cfa);
  }
  leave(t);
  return rc;
}

static lgc_result_t h_FREEHOST(void *real, void *p, uintptr_t ra, uintptr_t cfa) {
  (void)ra, (void)cfa;
  if (!real) return LGC_ERROR_STUB_LIBRARY;
  lgi_tls_t *t = &lgi_tls;
  if (!p || !enter(t)) return REAL(FREEHOST)(p);
  lgc_result_t rc;
  LGC_FREE(t, (uint64_t)(uintptr_t)p, NS_ADDR, REAL(FREEHOST)(p));
  leave(t);
  return rc;
}

static lgc_result_t h_HOSTREG(void *real, void *p, size_t n, unsigned flags, uintptr_t ra, uintptr_t cfa) {
  if (!real) return LGC_ERROR_STUB_LIBRARY;
  lgi_tls_t *t = &lgi_tls;
  if (!enter(t)) return REAL(HOSTREG)(p, n, flags);
  lgc_result_t rc = REAL(HOSTREG)(p, n, flags);
  if (rc == LGC_SUCCESS && p) {
    /* Already counted where it was allocated: a gauge of its own, no site. */
    uint64_t ctx;
    int dev = current_dev(&ctx);
    track(t, NS_REG, (uint64_t)(uintptr_t)p, n, LG_SPACE_HOST, dev, ctx, 0, ra, cfa);
  }
  leave(t);
  return rc;
}

static lgc_result_t h_HOSTUNREG(void *real, void *p, uintptr_t ra, uintptr_t cfa) {
  (void)ra, (void)cfa;
  if (!real) return LGC_ERROR_STUB_LIBRARY;
  lgi_tls_t *t = &lgi_tls;
  if (!p || !enter(t)) return REAL(HOSTUNREG)(p);
  lgc_result_t rc;
  cu_ent_t e;
  int had = take_counted(t, (uint64_t)(uintptr_t)p, NS_REG, &e);
  rc = REAL(HOSTUNREG)(p);
  if (rc != LGC_SUCCESS && had) untake(t, &e);
  leave(t);
  return rc;
}

static uint64_t mul_sat(uint64_t a, uint64_t b) {
  uint64_t r;
  return __builtin_mul_overflow(a, b, &r) ? UINT64_MAX : r;
}

static lgc_result_t h_ARRAY(void *real, lgc_array_t *a, const void *desc, uintptr_t ra, uintptr_t cfa) {
  if (!real) return LGC_ERROR_STUB_LIBRARY;
  lgi_tls_t *t = &lgi_tls;
  if (!enter(t)) return REAL(ARRAY)(a, desc);
  lgc_result_t rc = REAL(ARRAY)(a, desc);
  if (rc == LGC_SUCCESS && a && *a && desc) {
    const lgc_array_desc_t *d = desc;
    unsigned fb = lgc_format_bytes(d->format);
    uint64_t n = mul_sat(mul_sat(d->width, d->height ? d->height : 1), (uint64_t)(fb ? fb * d->channels : 4));
    uint64_t ctx;
    int dev = current_dev(&ctx);
    track(t, NS_ARRAY, (uint64_t)(uintptr_t)*a, n, LG_SPACE_DEVICE, dev, ctx, 0, ra, cfa);
  }
  leave(t);
  return rc;
}

static lgc_result_t h_ARRAY3D(void *real, lgc_array_t *a, const void *desc, uintptr_t ra, uintptr_t cfa) {
  if (!real) return LGC_ERROR_STUB_LIBRARY;
  lgi_tls_t *t = &lgi_tls;
  if (!enter(t)) return REAL(ARRAY3D)(a, desc);
  lgc_result_t rc = REAL(ARRAY3D)(a, desc);
  if (rc == LGC_SUCCESS && a && *a && desc) {
    const lgc_array3d_desc_t *d = desc;
    unsigned fb = lgc_format_bytes(d->format);
    uint64_t n = mul_sat(mul_sat(mul_sat(d->width, d->height ? d->height : 1), d->depth ? d->depth : 1),
                         (uint64_t)(fb ? fb * d->channels : 4));
    uint64_t ctx;
    int dev = current_dev(&ctx);
    track(t, NS_ARRAY, (uint64_t)(uintptr_t)*a, n, LG_SPACE_DEVICE, dev, ctx, 0, ra, cfa);
  }
  leave(t);
  return rc;
}

static lgc_result_t h_ARRAYDESTROY(void *real, lgc_array_t a, uintptr_t ra, uintptr_t cfa) {
  (void)ra, (void)cfa;
  if (!real) return LGC_ERROR_STUB_LIBRARY;
  lgi_tls_t *t = &lgi_tls;
  if (!a || !enter(t)) return REAL(ARRAYDESTROY)(a);
  lgc_result_t rc;
  LGC_FREE(t, (uint64_t)(uintptr_t)a, NS_ARRAY, REAL(ARRAYDESTROY)(a));
  leave(t);
  return rc;
}

/* Context creation, all three ABIs. */
#define LGC_CTXCREATE(K, call)                                         \
  if (!real) return LGC_ERROR_STUB_LIBRARY;                            \
  lgi_tls_t *t = &lgi_tls;                                             \
  if (!enter(t)) return call;                                          \
  lgc_result_t rc = call;                                              \
  if (rc == LGC_SUCCESS && c && *c) ctx_created((uint64_t)(uintptr_t)*c, d, 0); \
  leave(t);                                                            \
  return rc

static lgc_result_t h_CTXCREATE2(void *real, lgc_ctx_t *c, unsigned flags, lgc_device_t d, uintptr_t ra,
                                 uintptr_t cfa) {
  (void)ra, (void)cfa;
  LGC_CTXCREATE(CTXCREATE2, REAL(CTXCREATE2)(c, flags, d));
}
static lgc_result_t h_CTXCREATE3(void *real, lgc_ctx_t *c, void *params, int nparams, unsigned flags,
                                 lgc_device_t d, uintptr_t ra, uintptr_t cfa) {
  (void)ra, (void)cfa;
  LGC_CTXCREATE(CTXCREATE3, REAL(CTXCREATE3)(c, params, nparams, flags, d));
}
static lgc_result_t h_CTXCREATE4(void *real, lgc_ctx_t *c, void *params, unsigned flags, lgc_device_t d,
                                 uintptr_t ra, uintptr_t cfa) {
  (void)ra, (void)cfa;
  LGC_CTXCREATE(CTXCREATE4, REAL(CTXCREATE4)(c, params, flags, d));
}

static lgc_result_t h_CTXDESTROY(void *real, lgc_ctx_t c, uintptr_t ra, uintptr_t cfa) {
  (void)ra, (void)cfa;
  if (!real) return LGC_ERROR_STUB_LIBRARY;
  lgi_tls_t *t = &lgi_tls;
  if (!enter(t)) return REAL(CTXDESTROY)(c);
  lgc_result_t rc = REAL(CTXDESTROY)(c);
  if (rc == LGC_SUCCESS && c) ctx_destroyed(t, (uint64_t)(uintptr_t)c);
  leave(t);
  return rc;
}

static lgc_result_t h_PRIMRETAIN(void *real, lgc_ctx_t *c, lgc_device_t d, uintptr_t ra, uintptr_t cfa) {
  (void)ra, (void)cfa;
  if (!real) return LGC_ERROR_STUB_LIBRARY;
  lgi_tls_t *t = &lgi_tls;
  if (!enter(t)) return REAL(PRIMRETAIN)(c, d);
  lgc_result_t rc = REAL(PRIMRETAIN)(c, d);
  if (rc == LGC_SUCCESS && c && *c) {
    int dev = clamp_dev(d);
    tab_lock();
    int first = prim[dev].refs++ == 0;
    prim[dev].ctx = (uint64_t)(uintptr_t)*c;
    tab_unlock();
    if (first) ctx_created((uint64_t)(uintptr_t)*c, dev, 1);
  }
  leave(t);
  return rc;
}

static lgc_result_t h_PRIMRELEASE(void *real, lgc_device_t d, uintptr_t ra, uintptr_t cfa) {
  (void)ra, (void)cfa;
  if (!real) return LGC_ERROR_STUB_LIBRARY;
  lgi_tls_t *t = &lgi_tls;
  if (!enter(t)) return REAL(PRIMRELEASE)(d);
  lgc_result_t rc = REAL(PRIMRELEASE)(d);
  if (rc == LGC_SUCCESS) {
    int dev = clamp_dev(d);
    tab_lock();
    int last = prim[dev].refs > 0 && --prim[dev].refs == 0;
    uint64_t c = prim[dev].ctx;
    tab_unlock();
    /* The last reference destroys the primary context. */
    if (last && c) ctx_destroyed(t, c);
  }
  leave(t);
  return rc;
}

static lgc_result_t h_PRIMRESET(void *real, lgc_device_t d, uintptr_t ra, uintptr_t cfa) {
  (void)ra, (void)cfa;
  if (!real) return LGC_ERROR_STUB_LIBRARY;
  lgi_tls_t *t = &lgi_tls;
  if (!enter(t)) return REAL(PRIMRESET)(d);
  lgc_result_t rc = REAL(PRIMRESET)(d);
  if (rc == LGC_SUCCESS) {
    int dev = clamp_dev(d);
    tab_lock();
    int was = prim[dev].refs > 0;
    uint64_t c = prim[dev].ctx;
    prim[dev].refs = 0;
    tab_unlock();
    /* Every allocation of the primary context is gone; using it again recreates it. */
    if (was && c) ctx_destroyed(t, c);
  }
  leave(t);
  return rc;
}

/* ------------------------------------------------------------------ managed sites (CUPTI) */

/* CUPTI delivers records in batches about the same few buffers: the last block found
 * is tried first. */
uint32_t lgi_cuda_managed_site(uint64_t addr) {
  uint64_t k = atomic_load(&um_last_key), n = atomic_load(&um_last_size);
  uint32_t s = atomic_load(&um_last_site);
  if (s && addr >= k && addr - k < n) return s;
  s = LG_CUDA_UM_UNKNOWN;
  tab_lock();
  for (uint32_t i = 0; tab && i < tab_cap; i++)
    if (tab[i].ns == NS_ADDR && tab[i].space == LG_SPACE_MANAGED && addr >= tab[i].key &&
        addr - tab[i].key < tab[i].size) {
      s = tab[i].site;
      atomic_store(&um_last_site, 0);
      atomic_store(&um_last_key, tab[i].key);
      atomic_store(&um_last_size, tab[i].size);
      atomic_store(&um_last_site, s);
      break;
    }
  tab_unlock();
  return s;
}

/* ------------------------------------------------------------------ public API */

LG_API int lg_cuda_site_of(uint64_t addr, uint32_t *site, int *device) {
  if (!site || !lgi_g.enabled) return -ENOENT;
  int rc = -ENOENT;
  uint32_t s = 0;
  int dev = 0;
  lgi_tls.guard++;
  tab_lock();
  const cu_ent_t *e = tab_find(addr, NS_ADDR);
  if (!e) e = tab_find(addr, NS_MAP);
  /* Inside a block (a tensor in a caching allocator's segment): a scan. */
  for (uint32_t i = 0; !e && tab && i < tab_cap; i++)
    if ((tab[i].ns == NS_ADDR || tab[i].ns == NS_MAP) && addr >= tab[i].key && addr - tab[i].key < tab[i].size)
      e = &tab[i];
  if (e && e->site) {
    s = e->site;
    dev = e->dev;
    rc = 0;
  }
  tab_unlock();
  lgi_tls.guard--;
  if (rc == 0) {
    *site = s;
    if (device) *device = dev;
  }
  return rc;
}

LG_API uint64_t lg_cuda_gc_without_cleanup(void) {
  if (!lgi_g.enabled) return 0;
  return atomic_fetch_add(&lgi_g.hdr->gc_without_cuda_cleanup, 1) + 1;
}

LG_API uint64_t lg_cuda_gc_without_cleanup_count(void) {
  return lgi_g.enabled ? atomic_load(&lgi_g.hdr->gc_without_cuda_cleanup) : 0;
}

LG_API int lg_cuda_devices(void) {
  if (!lgi_g.enabled) return 0;
  uint32_t n = atomic_load(&lgi_g.hdr->cuda_ndev);
  return n > LG_CUDA_MAX_DEVICES ? LG_CUDA_MAX_DEVICES : (int)n;
}

LG_API int lg_cuda_stats(int dev, lg_cuda_stats_t *out) {
  if (!out || !lgi_g.enabled) return -ENOENT;
  if (dev < 0 || dev >= lg_cuda_devices()) return -ENODEV;
  lg_cuda_dev_t *g = &lgi_g.hdr->cuda[dev];
  out->device_bytes = atomic_load(&g->device_bytes);
  out->managed_bytes = atomic_load(&g->managed_bytes);
  out->pinned_bytes = atomic_load(&g->pinned_bytes);
  out->registered_bytes = atomic_load(&g->registered_bytes);
  out->pool_reserved_bytes = atomic_load(&g->pool_reserved_bytes);
  out->pool_used_bytes = atomic_load(&g->pool_used_bytes);
  out->total_bytes = atomic_load(&g->total_bytes);
  out->contexts = atomic_load(&g->contexts);
  out->contexts_recreated = atomic_load(&g->contexts_recreated);
  out->gc_without_cuda_cleanup = atomic_load(&lgi_g.hdr->gc_without_cuda_cleanup);
  return 0;
}
