/* SPDX-License-Identifier: MIT */
/*
 * pages.c - what every capture file may take without calling anything of ours: pages
 * from the kernel (never from malloc: recorder.h's rules) and the region's spin lock.
 * Apart from region_writer.c so that the files that use them (python.c, unwind.c,
 * the GPU table...) need nothing of the region's writer, which calls them.
 */
#include <sched.h>
#include <stdatomic.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "capture/recorder.h"
#include "core/platform.h"

void *lgi_pages_alloc(size_t bytes) {
  void *p = (void *)syscall(SYS_mmap, NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                            -1, 0);
  return (p == MAP_FAILED) ? NULL : p;
}

void lgi_pages_free(void *p, size_t bytes) {
  if (p) syscall(SYS_munmap, p, bytes);
}

void lgi_lock(void) {
  lg_region_hdr_t *h = lgi_g.hdr;
  unsigned spins = 0;
  for (;;) {
    uint32_t z = 0;
    if (atomic_compare_exchange_weak_explicit(&h->lock, &z, 1, memory_order_acquire, memory_order_relaxed)) return;
    if (++spins > 64) sched_yield();
    else lg_cpu_relax();
  }
}

void lgi_unlock(void) { atomic_store_explicit(&lgi_g.hdr->lock, 0, memory_order_release); }
