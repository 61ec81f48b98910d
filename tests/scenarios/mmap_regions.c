/* SPDX-License-Identifier: MIT */
/*
 * mmap_regions - exactness scenario for the recorder's anonymous mmap regions.
 *
 * Each of ROUNDS rounds (default 300) maps anonymous regions and takes them apart in
 * every way munmap, mmap and mremap allow:
 *   a  64 pages; unmap a hole of 8 in the middle (a split: two regions), then 4 pages
 *      of the head and 4 of the tail            -> 48 pages in 2 regions
 *   b  16 pages; mremap to 64 (may move), then shrink in place to 24   -> 24 pages
 *   c  30 pages reserved, then 3 x 10 pages mapped over it with MAP_FIXED -> 30 pages
 *      in 3 regions, unmapped later by ONE munmap over all three
 *   d  8 pages; 2 of them replaced by a MAP_FIXED private file mapping   -> 6 pages
 *      in 2 regions (the file pages are not anonymous)
 *   e  5000 bytes (counted as 2 pages)
 * and then unmaps everything, except that with --leak 1 every 10th round keeps its
 * regions for good. The program counts exactly what it kept (pages and regions) and
 * prints
 *   mmap_regions: rounds=R leaked_bytes=B leaked_blocks=N
 * so that the recorder's live bytes at exit of a --leak 1 and a --leak 0 run differ by
 * exactly B, and live blocks by N (tests/integration/exact.py).
 *
 * Options: --rounds N (default 300), --leak 0|1 (default 1), --pidfile PATH
 */
#include "scen_common.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

static size_t pg;
static unsigned long kept_bytes, kept_blocks;

static char *map_anon(size_t pages) {
  char *p = mmap(NULL, pages * pg, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) {
    perror("mmap");
    exit(2);
  }
  p[0] = 1;
  return p;
}

static void unmap(void *p, size_t bytes) {
  if (munmap(p, bytes) != 0) {
    perror("munmap");
    exit(2);
  }
}

static void round_once(int keep, int fd) {
  /* a: split by a hole, then head and tail trimmed */
  char *a = map_anon(64);
  unmap(a + 28 * pg, 8 * pg);
  unmap(a, 4 * pg);
  unmap(a + 60 * pg, 4 * pg);
  /* b: grow (may move), then shrink in place */
  char *b = map_anon(16);
  b = mremap(b, 16 * pg, 64 * pg, MREMAP_MAYMOVE);
  if (b == MAP_FAILED) {
    perror("mremap");
    exit(2);
  }
  b[63 * pg] = 1;
  if (mremap(b, 64 * pg, 24 * pg, 0) != b) {
    perror("mremap shrink");
    exit(2);
  }
  /* c: a reservation filled with three fixed mappings */
  char *c = mmap(NULL, 30 * pg, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (c == MAP_FAILED) {
    perror("mmap reserve");
    exit(2);
  }
  for (int i = 0; i < 3; i++) {
    char *q = mmap(c + (size_t)i * 10 * pg, 10 * pg, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
    if (q != c + (size_t)i * 10 * pg) {
      perror("mmap fixed");
      exit(2);
    }
    q[0] = 1;
  }
  /* d: two pages replaced by a file mapping */
  char *d = map_anon(8);
  if (mmap(d + 3 * pg, 2 * pg, PROT_READ, MAP_PRIVATE | MAP_FIXED, fd, 0) != d + 3 * pg) {
    perror("mmap file");
    exit(2);
  }
  /* e: not a whole number of pages */
  char *e = mmap(NULL, 5000, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (e == MAP_FAILED) {
    perror("mmap e");
    exit(2);
  }
  if (keep) {
    kept_bytes += (48 + 24 + 30 + 6 + 2) * pg;
    kept_blocks += 2 + 1 + 3 + 2 + 1;
    scen_escape(a);
    return;
  }
  unmap(a + 4 * pg, 24 * pg);
  unmap(a + 36 * pg, 24 * pg);
  unmap(b, 24 * pg);
  unmap(c, 30 * pg); /* the three fixed regions at once */
  unmap(d, 8 * pg);  /* the file pages in the middle go too */
  unmap(e, 5000);
}

int main(int argc, char **argv) {
  long rounds = scen_opt_long(argc, argv, "--rounds", NULL, 300);
  int leak = (int)scen_opt_long(argc, argv, "--leak", NULL, 1);
  scen_write_pidfile(argc, argv);
  pg = (size_t)sysconf(_SC_PAGESIZE);
  char path[] = "/tmp/lg-mmap-regions-XXXXXX";
  int fd = mkstemp(path);
  if (fd < 0 || ftruncate(fd, (off_t)(2 * pg)) != 0) {
    perror("tmpfile");
    return 2;
  }
  unlink(path);
  for (long r = 0; r < rounds; r++) {
    round_once(leak && r % 10 == 9, fd);
    if (r % 20 == 0) scen_sleep(0.005);
  }
  close(fd);
  printf("mmap_regions: rounds=%ld leaked_bytes=%lu leaked_blocks=%lu\n", rounds, kept_bytes,
         kept_blocks);
  return 0;
}
