/* SPDX-License-Identifier: MIT */
/*
 * pymem.h - CPython's allocator interface as the recorder wraps it (the preload
 * library's capture/pymalloc.c; the attach agent's wrapper, agent/pymod.c).
 * PyMemAllocatorEx and the domain numbers are the same from CPython 3.5 to 3.13
 * (Include/cpython/pymem.h); the capture layer includes no Python.h (it reads any
 * interpreter's memory without one), so they are declared here, once.
 */
#ifndef LG_CAPTURE_PYMEM_H
#define LG_CAPTURE_PYMEM_H
#include <stddef.h>

typedef struct pymem {
  void *ctx;
  void *(*malloc)(void *ctx, size_t size);
  void *(*calloc)(void *ctx, size_t nelem, size_t elsize);
  void *(*realloc)(void *ctx, void *ptr, size_t new_size);
  void (*free)(void *ctx, void *ptr);
} pymem_t;

enum { LG_PYMEM_DOMAIN_MEM = 1, LG_PYMEM_DOMAIN_OBJ = 2 };
#endif
