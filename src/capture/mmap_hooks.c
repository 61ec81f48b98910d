/* SPDX-License-Identifier: MIT */
/*
 * mmap_hooks.c - libleakguard.so: the interposed mmap, mmap64, munmap and mremap, which
 * keep mmap_table.c's table of recorded anonymous ranges. Each makes the system call
 * itself (glibc's wrappers add nothing the recorder needs) and then tells the table.
 */
#include <stdarg.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "capture/recorder.h"
#include "core/platform.h"
#include "leakguard.h"

static void *do_mmap(void *addr, size_t len, int prot, int flags, int fd, off_t off, uintptr_t ra0, uintptr_t cfa0) {
  void *p = (void *)syscall(SYS_mmap, addr, len, prot, flags, fd, off);
  if (p != MAP_FAILED && lgi_g.enabled && (flags & (MAP_ANONYMOUS | MAP_FIXED)))
    lgi_mm_mapped(p, len, (flags & MAP_ANONYMOUS) != 0, ra0, cfa0);
  return p;
}

LG_API void *mmap(void *addr, size_t len, int prot, int flags, int fd, off_t off) {
  return do_mmap(addr, len, prot, flags, fd, off, LG_CALLER_RA, LG_CALLER_CFA);
}
LG_API void *mmap64(void *addr, size_t len, int prot, int flags, int fd, off_t off) {
  return do_mmap(addr, len, prot, flags, fd, off, LG_CALLER_RA, LG_CALLER_CFA);
}
LG_API int munmap(void *addr, size_t len) {
  int rc = (int)syscall(SYS_munmap, addr, len);
  if (rc == 0) lgi_mm_unmapped(addr, len);
  return rc;
}
LG_API void *mremap(void *old, size_t old_len, size_t new_len, int flags, ...) {
  void *want = NULL;
  LGI_MREMAP_WANT(flags, want);
  void *p = (void *)syscall(SYS_mremap, old, old_len, new_len, flags, want);
  if (p != MAP_FAILED) lgi_mm_remapped(old, old_len, p, new_len, flags);
  return p;
}

/* The hooks above by name, for dl.c (see lgi_alloc_own in preload.c): a munmap found
 * with dlsym must not leave a recorded range behind. */
LGI_OWN(mmap)
LGI_OWN(mmap64)
LGI_OWN(munmap)
LGI_OWN(mremap)

void *lgi_mmap_own(const char *name) {
  if (name[0] != 'm') return NULL;
  if (!strcmp(name, "mmap")) return (void *)lgi_own_mmap;
  if (!strcmp(name, "mmap64")) return (void *)lgi_own_mmap64;
  if (!strcmp(name, "munmap")) return (void *)lgi_own_munmap;
  if (!strcmp(name, "mremap")) return (void *)lgi_own_mremap;
  return NULL;
}
