/* SPDX-License-Identifier: MIT */
/*
 * platform.h - what depends on the CPU or on raw system calls, in one place: the
 * spin-wait hint, the pid and tid straight from the kernel, the caller's return
 * address and stack pointer as a hook sees them, glibc's malloc alignment, the span of
 * a loaded ELF image.
 *
 * In core so that the collector can use it too; header only (static inline functions
 * and macros), because the preload library links no core object. Nothing here
 * allocates, takes a lock or calls stdio: safe in a malloc hook and a signal handler.
 */
#ifndef LG_CORE_PLATFORM_H
#define LG_CORE_PLATFORM_H

#include <link.h>
#include <stdint.h>
#include <sys/syscall.h>
#include <unistd.h>

/* The pause of a spin-wait loop: x86's PAUSE, AArch64's YIELD, nothing elsewhere. */
static inline void lg_cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  __asm__ __volatile__("yield" ::: "memory");
#endif
}

/* The calling process's pid and thread's tid, from the kernel: no libc wrapper or
 * cache (a vfork child shares its parent's memory), no allocation. syscall()'s value,
 * as the callers cast it. */
static inline long lg_sys_getpid(void) { return syscall(SYS_getpid); }
static inline long lg_sys_gettid(void) { return syscall(SYS_gettid); }

/* Inside a hook (never in a function it calls): the return address into its caller,
 * and the caller's stack pointer once the hook returns, taken as the hook's frame
 * address + 16 (saved frame pointer and return address, the x86-64 frame; the preload
 * library keeps frame pointers). unwind.c's stack cache keys on both. */
#define LG_CALLER_RA ((uintptr_t)__builtin_return_address(0))
#define LG_CALLER_CFA ((uintptr_t)__builtin_frame_address(0) + 16)

/* 1 where glibc's malloc aligns chunks to 16 bytes, so that bit 3 of the word in front
 * of one of its blocks is always clear (core/blockhdr.h, the mark bit). */
#if defined(__x86_64__) || defined(__aarch64__)
#define LG_MALLOC_ALIGN16 1
#else
#define LG_MALLOC_ALIGN16 0
#endif

/* The PT_LOAD segments of an ELF image, in a dl_iterate_phdr callback, one at a time:
 *   int i = 0;
 *   while (lg_image_segment(info, &i, &lo, &hi)) ... [lo, hi) is loaded ...
 * 1 with the next segment's addresses (i moves past it), 0 after the last. The one walk
 * of program headers: lg_image_span and the Python module's static-object test use it. */
static inline int lg_image_segment(const struct dl_phdr_info *info, int *i, uintptr_t *lo, uintptr_t *hi) {
  for (; *i < info->dlpi_phnum; (*i)++) {
    const ElfW(Phdr) *ph = &info->dlpi_phdr[*i];
    if (ph->p_type != PT_LOAD) continue;
    *lo = (uintptr_t)info->dlpi_addr + ph->p_vaddr;
    *hi = *lo + ph->p_memsz;
    (*i)++;
    return 1;
  }
  return 0;
}

/* The span [*lo, *hi) of an ELF image's PT_LOAD segments, in a dl_iterate_phdr
 * callback: 1, or 0 when the image maps nothing. */
static inline int lg_image_span(const struct dl_phdr_info *info, uintptr_t *lo, uintptr_t *hi) {
  uintptr_t l = UINTPTR_MAX, h = 0, s, e;
  for (int i = 0; lg_image_segment(info, &i, &s, &e);) {
    if (s < l) l = s;
    if (e > h) h = e;
  }
  *lo = l;
  *hi = h;
  return l < h;
}

/* The image that contains an address: dl_iterate_phdr(lg_image_of_cb, &q) with q.addr
 * set fills q.lo and q.hi (and returns 1) when an image contains it. */
typedef struct lg_image_of {
  uintptr_t addr, lo, hi;
} lg_image_of_t;
static inline int lg_image_of_cb(struct dl_phdr_info *info, size_t size, void *arg) {
  lg_image_of_t *q = arg;
  uintptr_t lo, hi;
  (void)size;
  if (!lg_image_span(info, &lo, &hi) || q->addr < lo || q->addr >= hi) return 0;
  q->lo = lo;
  q->hi = hi;
  return 1;
}

#endif
