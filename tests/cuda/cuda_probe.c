/* SPDX-License-Identifier: MIT */
/*
 * cuda_probe.c - a program without libcuda that probes for CUDA (tests only).
 *
 * libleakguard.so exports the cu* entry points it tracks. Preloaded, those exports
 * must not make a program without the driver believe CUDA is present: every probe
 * below must answer as it does without leakguard. Also checks that dlsym(RTLD_NEXT)
 * still resolves relative to its real caller (the interposed dlsym must not make it
 * relative to libleakguard). Exit 0 when all hold, 1 otherwise.
 */
#include "cuda_common.h"

int main(void) {
  EXPECT(dlsym(RTLD_DEFAULT, "cuInit") == NULL, "dlsym(RTLD_DEFAULT, cuInit) is NULL");
  EXPECT(dlsym(RTLD_DEFAULT, "cuGetProcAddress_v2") == NULL, "dlsym(RTLD_DEFAULT, cuGetProcAddress_v2) is NULL");
  EXPECT(dlsym(RTLD_DEFAULT, "cuGetProcAddress") == NULL, "dlsym(RTLD_DEFAULT, cuGetProcAddress) is NULL");
  (void)dlerror();
  EXPECT(dlsym(RTLD_DEFAULT, "cuMemAlloc_v2") == NULL, "dlsym(RTLD_DEFAULT, cuMemAlloc_v2) is NULL");
  EXPECT(dlerror() != NULL, "and dlerror() says why");
  void *self = dlopen(NULL, RTLD_NOW);
  EXPECT(self && dlsym(self, "cuMemAlloc_v2") == NULL, "dlsym(dlopen(NULL), cuMemAlloc_v2) is NULL");
  EXPECT(self && dlsym(self, "cuCtxCreate_v2") == NULL, "dlsym(dlopen(NULL), cuCtxCreate_v2) is NULL");
  EXPECT(dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD) == NULL, "libcuda.so.1 is not loaded");
  /* RTLD_NEXT from the program: the first definition after the program, which is the
   * first in the global scope when the program defines none, i.e. RTLD_DEFAULT's. */
  EXPECT(dlsym(RTLD_NEXT, "dlsym") == dlsym(RTLD_DEFAULT, "dlsym"), "dlsym(RTLD_NEXT) keeps its caller");
  EXPECT(dlsym(RTLD_NEXT, "puts") == (void *)puts, "dlsym(RTLD_NEXT, puts) is libc's puts");
  printf("cuda_probe: %s\n", fails ? "FAILED" : "ok");
  return fails ? 1 : 0;
}
