// SPDX-License-Identifier: MIT
/*
 * cudart_route.cu - the real libcudart (CUDA toolkit) against the stand-in driver
 * (tests only; built by nvcc, twice: static cudart, nvcc's default, and shared).
 *
 * cudart reaches the driver by dlopen("libcuda.so.1"), dlsym(handle,
 * "cuGetProcAddress_v2"), then ~440 entry points through it. Its initialisation
 * then asks cuGetExportTable for the driver's private tables, which no stand-in can
 * provide: cudaGetDeviceCount fails with cudaErrorSymbolNotFound and no cudart
 * allocation can run without the real driver. What can be proved here is the
 * routing: every tracked entry point cudart obtained is, where cudart keeps it, a
 * leakguard wrapper (standin_check_bindings), and calling the pointer cudart holds
 * for cuMemAlloc records the allocation at the caller's line.
 *   cudart_route EXPECT_WRAPPED   (1 under leakguard, 0 without)
 * Prints "cudart_route: keep_bytes=B keep_blocks=N wrapped=W requests=R".
 */
#include <cuda_runtime.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef int (*alloc_fn)(unsigned long long *, size_t);
typedef int (*retain_fn)(void **, int);
typedef int (*setcur_fn)(void *);
typedef int (*init_fn)(unsigned);

static int fails;
#define EXPECT(c, ...)                                     \
  do {                                                     \
    if (!(c)) {                                            \
      fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__); \
      fprintf(stderr, __VA_ARGS__);                        \
      fprintf(stderr, "\n");                               \
      fails++;                                             \
    }                                                      \
  } while (0)

static int is_wrapper(void *p) {
  Dl_info di;
  return p && dladdr(p, &di) && di.dli_fname && strstr(di.dli_fname, "libleakguard") != NULL;
}

static __attribute__((noinline)) void keep(alloc_fn f, unsigned long long *d) {
  int rc = f(d, 256 * 1024); /* KEEP:cudart */
  EXPECT(rc == 0, "cuMemAlloc through cudart's pointer returned %d", rc);
}

int main(int argc, char **argv) {
  int expect = argc > 1 ? atoi(argv[1]) : 1;
  /* Keep the driver loaded: cudart unloads it when its initialisation fails. */
  void *h = dlopen("libcuda.so.1", RTLD_NOW);
  if (!h) {
    fprintf(stderr, "dlopen libcuda.so.1: %s\n", dlerror());
    return 3;
  }
  long (*calls)(const char *) = (long (*)(const char *))dlsym(h, "standin_calls");
  int (*check)(char *, size_t) = (int (*)(char *, size_t))dlsym(h, "standin_check_bindings");
  void *(*binding)(const char *) = (void *(*)(const char *))dlsym(h, "standin_binding");
  if (!calls || !check || !binding) {
    fprintf(stderr, "not the stand-in driver\n");
    return 3;
  }
  int n = -1;
  cudaError_t e = cudaGetDeviceCount(&n);
  EXPECT(e == cudaErrorSymbolNotFound, "cudaGetDeviceCount: %d (%s), expected cudaErrorSymbolNotFound: the stand-in "
         "refuses the private export tables", (int)e, cudaGetErrorName(e));
  long requests = calls("cuGetProcAddress_v2");
  EXPECT(requests >= 100, "cudart asked cuGetProcAddress_v2 for its entry points (%ld requests)", requests);
  EXPECT(calls("cuGetExportTable") >= 1, "cudart asked for the private tables");
  static char rep[1 << 16];
  int bad = check(rep, sizeof rep);
  int wrapped = 0;
  for (char *p = rep; (p = strstr(p, "=wrapped")); p++) wrapped++;
  if (expect) EXPECT(bad == 0 && wrapped >= 20, "every tracked entry point cudart holds is a wrapper: %s", rep);
  else EXPECT(bad > 0 && wrapped == 0, "without leakguard cudart holds the driver's own: %s", rep);
  alloc_fn f = (alloc_fn)binding("cuMemAlloc");
  retain_fn retain = (retain_fn)binding("cuDevicePrimaryCtxRetain");
  EXPECT(f && is_wrapper((void *)f) == expect, "cudart's cuMemAlloc %s a wrapper", expect ? "is" : "is not");
  if (!f || !retain) return 1;
  ((init_fn)dlsym(h, "cuInit"))(0);
  void *ctx = NULL;
  EXPECT(retain(&ctx, 0) == 0, "cuDevicePrimaryCtxRetain through cudart's pointer");
  ((setcur_fn)dlsym(h, "cuCtxSetCurrent"))(ctx);
  long before = calls("cuMemAlloc_v2");
  unsigned long long d[4];
  for (int i = 0; i < 4; i++) keep(f, &d[i]);
  EXPECT(calls("cuMemAlloc_v2") == before + 4, "cudart's pointer reached the driver's cuMemAlloc_v2");
  printf("cudart_route: keep_bytes=%d keep_blocks=4 wrapped=%d requests=%ld\n", 4 * 256 * 1024, wrapped, requests);
  fflush(stdout);
  return fails ? 1 : 0;
}
