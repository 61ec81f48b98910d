/* SPDX-License-Identifier: MIT */
/*
 * platform.h - what depends on the CPU or on raw system calls, in one place: the
 * spin-wait hint, the pid and tid straight from the kernel, the caller's return
 * address and stack pointer as a hook sees them, glibc's malloc alignment.
 *
 * In core so that the collector can use it too; header only (static inline functions
 * and macros), because the preload library links no core object. Nothing here
 * allocates, takes a lock or calls stdio: safe in a malloc hook and a signal handler.
 */
#ifndef LG_CORE_PLATFORM_H
#define LG_CORE_PLATFORM_H

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

#endif
