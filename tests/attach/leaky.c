/* SPDX-License-Identifier: MIT */
/* leaky.c - a library the attach target dlopens after attach: leaky() leaks 8 KiB. */
#include <stdlib.h>
#include <string.h>

void leaky(void);
__attribute__((noinline)) void leaky(void) {
  char *p = malloc(8192);
  if (p) memset(p, 3, 8192);
}
