/* SPDX-License-Identifier: MIT */
/*
 * srv_mem.c - wrapped_server's allocation wrappers, the way a server keeps its own
 * (mosquitto's mosquitto__malloc and mosquitto__strdup in memory_mosq.c): a malloc
 * wrapper that counts the memory in use, and a strdup wrapper that calls it. Their
 * names match none of leakguard's known wrapper names: the report recognises them by
 * their shape (docs/detection.md, "From stacks to sites").
 */
#include "srv_mem.h"

#include <malloc.h>
#include <stdlib.h>
#include <string.h>

static size_t in_use;

void *srv__alloc_mem(size_t len) {
  void *p = SRV_MALLOC(len);
  if (p) in_use += malloc_usable_size(p);
  return p;
}

char *srv__dup_str(const char *s) {
  size_t n = strlen(s) + 1;
  char *d = srv__alloc_mem(n);
  if (d) memcpy(d, s, n);
  return d;
}

void srv__free_mem(void *p) {
  if (!p) return;
  in_use -= malloc_usable_size(p);
  free(p);
}

size_t srv__mem_in_use(void) { return in_use; }
