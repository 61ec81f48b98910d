/* SPDX-License-Identifier: MIT */
/* srv_mem.h - wrapped_server's own allocation wrappers (srv_mem.c). */
#ifndef SRV_MEM_H
#define SRV_MEM_H

#include <stddef.h>

void *srv__alloc_mem(size_t len);
char *srv__dup_str(const char *s);
void srv__free_mem(void *p);
size_t srv__mem_in_use(void);

#endif
