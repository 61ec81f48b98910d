/* SPDX-License-Identifier: MIT */
/*
 * lifecycle - allocations before main and after exit.
 *
 *   .preinit_array  (before any shared library constructor, i.e. possibly before
 *                   the recorder's): allocates PRE_BYTES, freed in main
 *   constructor     allocates TABLE_BYTES (freed in the destructor) and
 *                   UNTIL_ATEXIT_BYTES (freed in the atexit handler), plus churn
 *   main            runs --seconds of churn; with --leak 1 leaks LEAK_BLOCKS x
 *                   LEAK_SIZE bytes (SITE:main-leak)
 *   atexit handler  frees UNTIL_ATEXIT_BYTES, allocates ATEXIT_BYTES (freed in the
 *                   destructor), churn
 *   destructor      frees ATEXIT_BYTES and TABLE_BYTES, churn
 *
 * Everything except the --leak blocks is freed by the time the process ends.
 * main prints "lifecycle: leaked_bytes=B leaked_blocks=N" before returning.
 *
 * Options: --seconds S (default 2), --leak 0|1 (default 1), --pidfile PATH
 */
#include "scen_common.h"

#define PRE_BYTES 40000
#define TABLE_BYTES 100000
#define UNTIL_ATEXIT_BYTES 77777
#define ATEXIT_BYTES 50000
#define LEAK_BLOCKS 20
#define LEAK_SIZE 12345

static char *g_pre, *g_table, *g_until_atexit, *g_atexit_buf;
static unsigned long g_churned;

static void churn(unsigned n) {
  uint64_t rng = n;
  for (unsigned i = 0; i < n; i++) {
    size_t sz = scen_logsize(&rng, 8, 20000);
    char *p = i & 1 ? malloc(sz) : calloc(1, sz);
    scen_touch(p, sz);
    p = realloc(p, sz / 2 + 1);
    scen_escape(p);
    free(p);
    g_churned++;
  }
}

static void early_preinit(int argc, char **argv, char **envp) {
  (void)argc;
  (void)argv;
  (void)envp;
  g_pre = malloc(PRE_BYTES);
  memset(g_pre, 'p', PRE_BYTES);
  churn(100);
}

__attribute__((used, section(".preinit_array"))) static void (*const preinit_fn)(int, char **,
                                                                                  char **) =
    early_preinit;

__attribute__((constructor(101))) static void early_ctor(void) {
  g_table = malloc(TABLE_BYTES);
  memset(g_table, 't', TABLE_BYTES);
  g_until_atexit = calloc(1, UNTIL_ATEXIT_BYTES);
  churn(1000);
}

static void at_exit_handler(void) {
  free(g_until_atexit);
  g_until_atexit = NULL;
  g_atexit_buf = malloc(ATEXIT_BYTES);
  memset(g_atexit_buf, 'a', ATEXIT_BYTES);
  churn(1000);
}

__attribute__((destructor(101))) static void late_dtor(void) {
  free(g_atexit_buf);
  free(g_table);
  g_atexit_buf = g_table = NULL;
  churn(1000);
}

int main(int argc, char **argv) {
  double seconds = scen_seconds(argc, argv, 2.0);
  int leak = (int)scen_opt_long(argc, argv, "--leak", NULL, 1);
  scen_write_pidfile(argc, argv);
  scen_step_init();
  atexit(at_exit_handler);

  free(g_pre);
  g_pre = NULL;
  double start = scen_now(), end = start + seconds;
  unsigned leaked = 0;
  for (;;) {
    int last = scen_now() >= end;
    unsigned due = last ? LEAK_BLOCKS : (unsigned)((scen_now() - start) / seconds * LEAK_BLOCKS);
    while (leak && leaked < due && leaked < LEAK_BLOCKS) {
      char *b = malloc(LEAK_SIZE); /* SITE:main-leak */
      memset(b, 'L', LEAK_SIZE);
      scen_escape(b);
      leaked++;
    }
    if (last) break;
    churn(50);
    scen_step();
    scen_sleep(0.002);
  }
  printf("lifecycle: churned=%lu leaked_bytes=%lu leaked_blocks=%u\n", g_churned,
         (unsigned long)leaked * LEAK_SIZE, leaked);
  return 0;
}
