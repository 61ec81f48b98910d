/* SPDX-License-Identifier: MIT */
/*
 * leaky.c - the bundled example: a toy request handler with a response cache whose
 * key never matches (it includes the request counter), so the cache grows forever,
 * next to a healthy per-request buffer that is freed and a startup table that lives
 * for the whole run. `leakguard run -- build/examples/leaky` should name
 * cache_put() as the only leak.
 *
 * Usage: leaky [SECONDS]   (default 6)
 */
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct entry {
  struct entry *next;
  char key[32];
  char *value;
};

static struct entry *cache;

static void cache_put(const char *key, size_t len) {
  struct entry *e = malloc(sizeof *e);
  e->value = malloc(len); /* kept forever: the key never matches again */
  memset(e->value, 'x', len);
  snprintf(e->key, sizeof e->key, "%s", key);
  e->next = cache;
  cache = e;
}

static int handle_request(unsigned long n) {
  char key[32];
  snprintf(key, sizeof key, "user-7:%lu", n); /* the bug: the counter is in the key */
  for (struct entry *e = cache; e; e = e->next)
    if (!strcmp(e->key, key)) return 1;
  char *work = malloc(64 * 1024); /* per-request buffer, freed */
  memset(work, 0, 64 * 1024);
  cache_put(key, 2048);
  free(work);
  return 0;
}

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

int main(int argc, char **argv) {
  double seconds = argc > 1 ? atof(argv[1]) : 6.0;
  uint64_t (*step)(void) = (uint64_t(*)(void))dlsym(RTLD_DEFAULT, "leakguard_step");
  char *table = calloc(4, 1024 * 1024); /* startup table, lives for the whole run */
  double t0 = now();
  unsigned long n = 0;
  while (now() - t0 < seconds) {
    handle_request(n++);
    if (step) step();
    struct timespec d = {0, 2 * 1000 * 1000};
    nanosleep(&d, NULL);
  }
  printf("served %lu requests (table at %p)\n", n, (void *)table);
  return 0;
}
