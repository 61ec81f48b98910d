/* SPDX-License-Identifier: MIT */
/*
 * fuzz_main.h - the main() shared by the fuzz harnesses (tests/fuzz/fuzz_*.c).
 *
 * A harness defines  int lg_fuzz_one(const uint8_t *data, size_t size)  (0, or
 * nonzero when the input was rejected: both are fine, only a crash or a hang is a
 * finding) and includes this file once.
 *
 * Built by afl-cc (bench/fuzz.sh) it runs in AFL++'s persistent mode: one process,
 * many inputs through the shared-memory test-case buffer. Built by the plain compiler
 * (CMake, with ASan+UBSan in the sanitizer build) it is a replay program: each
 * argument is a file, or a directory whose files are all replayed; it prints one line
 * per input and exits 0 when every input ran to the end. The fuzz-regress ctests
 * replay the minimised corpora and every past crash this way.
 */
#ifndef LG_FUZZ_MAIN_H
#define LG_FUZZ_MAIN_H

#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int lg_fuzz_one(const uint8_t *data, size_t size);

#ifdef __AFL_FUZZ_TESTCASE_LEN
__AFL_FUZZ_INIT();
int main(void) {
  __AFL_INIT();
  unsigned char *buf = __AFL_FUZZ_TESTCASE_BUF;
  while (__AFL_LOOP(10000)) {
    size_t len = (size_t)__AFL_FUZZ_TESTCASE_LEN;
    lg_fuzz_one(buf, len);
  }
  return 0;
}
#else
static int replay_file(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) {
    fprintf(stderr, "fuzz replay: cannot open %s\n", path);
    return -1;
  }
  size_t cap = 4096, n = 0;
  uint8_t *buf = malloc(cap);
  size_t k;
  while (buf && (k = fread(buf + n, 1, cap - n, f)) > 0) {
    n += k;
    if (n == cap) {
      uint8_t *nb = realloc(buf, cap * 2);
      if (!nb) {
        free(buf);
        buf = NULL;
        break;
      }
      buf = nb;
      cap *= 2;
    }
  }
  fclose(f);
  if (!buf) {
    fprintf(stderr, "fuzz replay: out of memory reading %s\n", path);
    return -1;
  }
  int rc = lg_fuzz_one(buf, n);
  printf("replayed %s (%zu bytes): %s\n", path, n, rc ? "rejected" : "accepted");
  fflush(stdout);
  free(buf);
  return 0;
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* Replays path, or every regular file directly in it (sorted). Returns the number of
 * files replayed, or -1. */
static int replay_path(const char *path) {
  struct stat st;
  if (stat(path, &st) != 0) {
    fprintf(stderr, "fuzz replay: no such file or directory: %s\n", path);
    return -1;
  }
  if (!S_ISDIR(st.st_mode)) return replay_file(path) == 0 ? 1 : -1;
  DIR *d = opendir(path);
  if (!d) return -1;
  char **names = NULL;
  size_t n = 0, cap = 0;
  struct dirent *de;
  while ((de = readdir(d))) {
    if (de->d_name[0] == '.') continue;
    if (n == cap) {
      cap = cap ? cap * 2 : 64;
      char **nn = realloc(names, cap * sizeof *nn);
      if (!nn) break;
      names = nn;
    }
    size_t len = strlen(path) + strlen(de->d_name) + 2;
    names[n] = malloc(len);
    if (!names[n]) break;
    snprintf(names[n], len, "%s/%s", path, de->d_name);
    n++;
  }
  closedir(d);
  if (n) qsort(names, n, sizeof *names, cmp_str);
  int count = 0;
  for (size_t i = 0; i < n; i++) {
    if (stat(names[i], &st) == 0 && S_ISREG(st.st_mode)) {
      if (replay_file(names[i]) != 0) count = -1;
      else if (count >= 0) count++;
    }
    free(names[i]);
  }
  free(names);
  return count;
}

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: %s FILE|DIR...  (replays fuzz inputs; built with afl-cc it fuzzes)\n", argv[0]);
    return 2;
  }
  int total = 0;
  for (int i = 1; i < argc; i++) {
    int k = replay_path(argv[i]);
    if (k < 0) return 1;
    total += k;
  }
  printf("%d inputs replayed, no crash\n", total);
  return total > 0 ? 0 : 1;
}
#endif

#endif /* LG_FUZZ_MAIN_H */
