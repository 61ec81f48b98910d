/* SPDX-License-Identifier: MIT */
/*
 * srv_pool.c - for wrapped_server_stripped: the function under srv__alloc_mem that gets
 * the memory, built without debug information and its symbol stripped from the binary
 * (tests/scenarios/CMakeLists.txt), so that the recorded frame has no name at all.
 */
#include <stdlib.h>

#include "srv_mem.h"

void *srv__pool_take(size_t len) {
  void *p = malloc(len);
  __asm__ volatile("" : : "r"(p) : "memory"); /* a frame of its own, not a tail call */
  return p;
}
