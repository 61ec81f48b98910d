/* SPDX-License-Identifier: MIT */
/*
 * static_hello - a statically linked program (built with -static). LD_PRELOAD has
 * no effect on it, so `leakguard run` must refuse it with a clear error.
 * It allocates and leaks a little, so that a recorder that silently did nothing
 * would be noticed.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(void) {
  char *p = malloc(4096);
  memset(p, 's', 4096);
  printf("static_hello: %c\n", p[10]);
  return 0;
}
