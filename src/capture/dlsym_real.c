/* SPDX-License-Identifier: MIT */
/*
 * dlsym_real.c - glibc's own dlsym, found once: what dl.c's dlsym and dlvsym entries
 * jump to, and what a GPU vendor's hooks (gpu/cuda.c, gpu/cuda_ctx.c) look the real
 * driver functions up with. Apart from dl.c, which asks the GPU vendors about their
 * names (gpu/gpu.h), so that the vendors need nothing of dl.c and dl.c nothing of them
 * but that seam.
 */
#include <dlfcn.h>
#include <stdlib.h>
#include <unistd.h>

#include "capture/recorder.h"

void *lgi_real_dlsym_ptr;

/* Our dlvsym passes this lookup from us to glibc's. */
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
