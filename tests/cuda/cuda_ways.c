/* SPDX-License-Identifier: MIT */
/*
 * cuda_ways.c - the three ways a program reaches the CUDA driver (tests only).
 *
 * Built twice: cuda_lcuda is linked with -lcuda (the stand-in driver) and calls the
 * exported entry points; cuda_ways is not linked with it and dlopen()s it. Modes:
 *   lcuda    exported symbols (cuda_lcuda only)
 *   dlsym    dlsym(handle, "cuMemAlloc_v2") and friends
 *   getproc  dlsym(handle, "cuGetProcAddress_v2"), then every entry point through it,
 *            as libcudart >= 11.3 does: cuGetProcAddress itself (11030 and 12000),
 *            plain and per-thread-default-stream variants, cuCtxCreate per version,
 *            the IPC imports (one called), an unknown cuMem* name
 * Each mode keeps 10 blocks of 64 KiB at its KEEP site and allocates and frees 5 of
 * 1 MiB; it prints "cuda_ways: mode=M keep_bytes=B keep_blocks=N". With
 * --expect-wrapped 1 (under leakguard) it checks that the entry points it got are
 * leakguard's wrappers and that each forwards to exactly the implementation the
 * driver handed out (the stand-in counts calls per implementation); with 0 (no
 * leakguard) that they are the driver's own. Exit 1 on a failed check.
 */
#include "cuda_common.h"

static int expect_wrapped = 1;
static long (*calls)(const char *);
static PFN_cuMemAlloc_v3020 p_alloc;
static PFN_cuMemFree_v3020 p_free;

#define KEEP 10
#define KEEP_SIZE 65536

static void check_bound(void *fn, const char *name) {
  EXPECT(is_wrapper(fn) == expect_wrapped, "%s: %s leakguard's wrapper", name, expect_wrapped ? "is not" : "is");
}

static NOINLINE __attribute__((unused)) void keep_lcuda(CUdeviceptr *d) {
#ifdef LINKED
  CHECK(cuMemAlloc_v2(d, KEEP_SIZE)); /* KEEP:lcuda */
#else
  (void)d;
#endif
}

static NOINLINE void keep_fp(CUdeviceptr *d) {
  CHECK(p_alloc(d, KEEP_SIZE)); /* KEEP:fp */
}

static NOINLINE void churn(void) {
  for (int i = 0; i < 5; i++) {
    CUdeviceptr d;
    CHECK(p_alloc(&d, 1 << 20));
    CHECK(p_free(d));
  }
}

static void *sym(void *h, const char *name) {
  void *p = dlsym(h, name);
  if (!p) {
    fprintf(stderr, "dlsym %s: %s\n", name, dlerror());
    exit(3);
  }
  return p;
}

int main(int argc, char **argv) {
  const char *mode = argc > 1 ? argv[1] : "";
  if (argc > 3 && !strcmp(argv[2], "--expect-wrapped")) expect_wrapped = atoi(argv[3]);
  void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    fprintf(stderr, "dlopen libcuda.so.1: %s\n", dlerror());
    return 3;
  }
  *(void **)&calls = sym(h, "standin_calls");
  PFN_cuInit_v2000 init = (PFN_cuInit_v2000)sym(h, "cuInit");
  EXPECT(!is_wrapper((void *)init), "cuInit is passed through, never wrapped");
  CHECK(init(0));
  CUdeviceptr keep[KEEP];
  void (*keep_fn)(CUdeviceptr *) = keep_fp;

  if (!strcmp(mode, "lcuda")) {
#ifdef LINKED
    CUcontext c;
    CHECK(cuCtxCreate_v2(&c, 0, 0));
    p_alloc = cuMemAlloc_v2;
    p_free = cuMemFree_v2;
    keep_fn = keep_lcuda;
    /* A program linked with -lcuda binds the exported names: to leakguard's when
     * preloaded, whose calls reach the driver's implementation. */
    long before = calls("cuMemAlloc_v2");
    CUdeviceptr d;
    CHECK(cuMemAlloc_v2(&d, 4096));
    CHECK(cuMemFree_v2(d));
    EXPECT(calls("cuMemAlloc_v2") == before + 1, "the driver's cuMemAlloc_v2 ran once");
    /* An exported IPC import: its 64-byte handle, passed by value, arrives intact. */
    CUipcMemHandle ipc;
    for (int i = 0; i < 64; i++) ipc.reserved[i] = (char)i;
    CUdeviceptr imported = 0;
    EXPECT(cuIpcOpenMemHandle_v2(&imported, ipc, 1) == CUDA_SUCCESS && imported == 0x7e0000000000ULL,
           "cuIpcOpenMemHandle_v2 passed through with its handle intact");
    EXPECT(calls("cuIpcOpenMemHandle_v2") == 1, "the driver's cuIpcOpenMemHandle_v2 ran once");
    check_bound(dlsym(RTLD_DEFAULT, "cuMemAlloc_v2"), "dlsym(RTLD_DEFAULT, cuMemAlloc_v2)");
#else
    fprintf(stderr, "mode lcuda needs the -lcuda build\n");
    return 2;
#endif
  } else if (!strcmp(mode, "dlsym")) {
    PFN_cuCtxCreate_v3020 create = (PFN_cuCtxCreate_v3020)sym(h, "cuCtxCreate_v2");
    check_bound((void *)create, "cuCtxCreate_v2");
    CUcontext c;
    CHECK(create(&c, 0, 0));
    EXPECT(calls("cuCtxCreate_v2") == 1, "the driver's cuCtxCreate_v2 ran once (%ld)", calls("cuCtxCreate_v2"));
    p_alloc = (PFN_cuMemAlloc_v3020)sym(h, "cuMemAlloc_v2");
    p_free = (PFN_cuMemFree_v3020)sym(h, "cuMemFree_v2");
    check_bound((void *)p_alloc, "cuMemAlloc_v2");
    check_bound((void *)p_free, "cuMemFree_v2");
    /* The same lookup twice gives the same wrapper. */
    EXPECT(sym(h, "cuMemAlloc_v2") == (void *)p_alloc, "a second dlsym returns the same pointer");
    /* Not a tracked name: the driver's own. */
    EXPECT(!is_wrapper(sym(h, "cuStreamCreate")), "cuStreamCreate is passed through");
  } else if (!strcmp(mode, "getproc")) {
    PFN_cuGetProcAddress_v12000 gpa = (PFN_cuGetProcAddress_v12000)sym(h, "cuGetProcAddress_v2");
    check_bound((void *)gpa, "dlsym cuGetProcAddress_v2");
    int st = -1;
    void *gpa12 = NULL, *gpa11 = NULL;
    CHECK(gpa("cuGetProcAddress", &gpa12, 12000, 0, &st));
    check_bound(gpa12, "cuGetProcAddress@12000");
    CHECK(gpa("cuGetProcAddress", &gpa11, 11030, 0, &st));
    check_bound(gpa11, "cuGetProcAddress@11030");
    EXPECT(gpa11 != gpa12, "the v1 and v2 ABIs of cuGetProcAddress are different wrappers");
    long g1 = calls("cuGetProcAddress");
    /* Through the v1-ABI wrapper: context creation at three CUDA versions. */
    void *c2 = NULL, *c4 = NULL;
    CHECK(((PFN_cuGetProcAddress_v11030)gpa11)("cuCtxCreate", &c2, 11000, 0));
    EXPECT(calls("cuGetProcAddress") == g1 + 1, "the v1 wrapper forwards to the driver's v1 cuGetProcAddress");
    CHECK(((PFN_cuGetProcAddress_v12000)gpa12)("cuCtxCreate", &c4, 12080, 0, &st));
    check_bound(c2, "cuCtxCreate@11000");
    check_bound(c4, "cuCtxCreate@12080");
    CUcontext c;
    CHECK(((PFN_cuCtxCreate_v12050)c4)(&c, NULL, 0, 0));
    EXPECT(calls("cuCtxCreate_v4") == 1 && calls("cuCtxCreate_v2") == 0,
           "cuCtxCreate@12080 reached the driver's _v4 (v4 %ld, v2 %ld)", calls("cuCtxCreate_v4"),
           calls("cuCtxCreate_v2"));
    CHECK(gpa("cuMemAlloc", (void **)&p_alloc, 12000, 0, &st));
    CHECK(gpa("cuMemFree", (void **)&p_free, 12000, 0, &st));
    check_bound((void *)p_alloc, "cuMemAlloc@12000");
    /* Per-thread default stream: a different implementation, wrapped as such. */
    PFN_cuMemAllocAsync_v11020 aa = NULL, aa_ptsz = NULL;
    PFN_cuMemFreeAsync_v11020 fa = NULL, fa_ptsz = NULL;
    CHECK(gpa("cuMemAllocAsync", (void **)&aa, 12000, CU_GET_PROC_ADDRESS_DEFAULT, &st));
    CHECK(gpa("cuMemAllocAsync", (void **)&aa_ptsz, 12000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, &st));
    CHECK(gpa("cuMemFreeAsync", (void **)&fa, 12000, CU_GET_PROC_ADDRESS_DEFAULT, &st));
    CHECK(gpa("cuMemFreeAsync", (void **)&fa_ptsz, 12000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, &st));
    check_bound((void *)aa, "cuMemAllocAsync");
    check_bound((void *)aa_ptsz, "cuMemAllocAsync (per-thread)");
    EXPECT(aa != aa_ptsz, "plain and per-thread cuMemAllocAsync are different pointers");
    CUdeviceptr d1, d2;
    CHECK(aa(&d1, 4096, NULL));
    CHECK(aa_ptsz(&d2, 4096, NULL));
    CHECK(fa_ptsz(d1, NULL));
    CHECK(fa(d2, NULL));
    EXPECT(calls("cuMemAllocAsync") == 1 && calls("cuMemAllocAsync_ptsz") == 1,
           "each variant reached its own implementation once (plain %ld, ptsz %ld)", calls("cuMemAllocAsync"),
           calls("cuMemAllocAsync_ptsz"));
    EXPECT(calls("cuMemFreeAsync") == 1 && calls("cuMemFreeAsync_ptsz") == 1, "frees reached their variants");
    /* IPC imports: wrapped to pass through, noted by the recorder when first called
     * (cudart asks for the pool imports at its start and never calls them). */
    void *imp = NULL, *imp2 = NULL, *pip = NULL, *pis = NULL, *ipc = NULL;
    CHECK(gpa("cuMemImportFromShareableHandle", &imp, 12000, 0, &st));
    CHECK(gpa("cuMemImportFromShareableHandle", &imp2, 12000, 0, &st));
    CHECK(gpa("cuMemPoolImportPointer", &pip, 12000, 0, &st));
    CHECK(gpa("cuMemPoolImportFromShareableHandle", &pis, 12000, 0, &st));
    CHECK(gpa("cuIpcOpenMemHandle", &ipc, 12000, 0, &st));
    check_bound(imp, "cuMemImportFromShareableHandle");
    check_bound(pip, "cuMemPoolImportPointer");
    check_bound(pis, "cuMemPoolImportFromShareableHandle");
    check_bound(ipc, "cuIpcOpenMemHandle@12000");
    EXPECT(imp == imp2, "the same lookup gives the same pointer");
    CUmemGenericAllocationHandle ih;
    typedef CUresult (*import_fn)(CUmemGenericAllocationHandle *, void *, int);
    EXPECT(((import_fn)imp)(&ih, NULL, 1) == CUDA_ERROR_NOT_SUPPORTED, "the import reached the driver");
    EXPECT(((import_fn)imp2)(&ih, NULL, 1) == CUDA_ERROR_NOT_SUPPORTED, "twice");
    EXPECT(calls("cuMemImportFromShareableHandle") == 2 && calls("cuMemPoolImportPointer") == 0,
           "the driver's import ran twice, the pool imports never");
    /* An unknown memory entry point (a future allocator's) passes through, noted. */
    void *fut = NULL, *fut2 = NULL;
    CHECK(gpa("cuMemAllocStandinFuture", &fut, 12000, 0, &st));
    CHECK(gpa("cuMemAllocStandinFuture", &fut2, 12000, 0, &st));
    EXPECT(fut && !is_wrapper(fut) && fut == fut2, "an unknown cuMem* entry point is the driver's own");
    /* A name the driver does not know: the driver's answer, untouched. */
    void *none = (void *)1;
    EXPECT(gpa("cuNoSuchThing", &none, 12000, 0, &st) == CUDA_ERROR_NOT_FOUND && none == NULL &&
               st == CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND,
           "an unknown name: CUDA_ERROR_NOT_FOUND, NULL, SYMBOL_NOT_FOUND");
  } else {
    fprintf(stderr, "usage: %s lcuda|dlsym|getproc [--expect-wrapped 0|1]\n", argv[0]);
    return 2;
  }
  long a0 = calls("cuMemAlloc_v2");
  for (int i = 0; i < KEEP; i++) keep_fn(&keep[i]);
  churn();
  EXPECT(calls("cuMemAlloc_v2") == a0 + KEEP + 5, "every allocation reached the driver's cuMemAlloc_v2 (%ld)",
         calls("cuMemAlloc_v2") - a0);
  printf("cuda_ways: mode=%s keep_bytes=%d keep_blocks=%d\n", mode, KEEP * KEEP_SIZE, KEEP);
  fflush(stdout);
  return fails ? 1 : 0;
}
