/* SPDX-License-Identifier: MIT */
/* srv_mem.h - wrapped_server's own allocation wrappers (srv_mem.c). */
#ifndef SRV_MEM_H
#define SRV_MEM_H

#include <stddef.h>

void *srv__alloc_mem(size_t len);
char *srv__dup_str(const char *s);
void srv__free_mem(void *p);
size_t srv__mem_in_use(void);

/* wrapped_server_stripped: the malloc wrapper takes its blocks through a function that
 * has no name in the binary (srv_pool.c, built without debug information, its symbol
 * stripped), as a stripped server's static allocator has none (postgres' AllocSetAlloc
 * under palloc in Debian's build). */
#ifdef SRV_POOL
void *srv__pool_take(size_t len);
#define SRV_MALLOC srv__pool_take
#else
#define SRV_MALLOC malloc
#endif

#endif
