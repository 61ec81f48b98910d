/* SPDX-License-Identifier: MIT */
/* guard_idle.c - a watched process for bench/guard_cost.sh: holds MIB (default 2) of
 * touched memory and rewrites one page a second, until killed. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int main(int argc, char **argv) {
  size_t mib = argc > 1 ? (size_t)atol(argv[1]) : 2;
  char *p = malloc(mib << 20);
  if (!p) return 1;
  memset(p, 1, mib << 20);
  for (unsigned i = 0;; i++) {
    p[(i * 4096u) % (mib << 20)]++;
    sleep(1);
  }
}
