/* SPDX-License-Identifier: MIT */
/*
 * fork_leak - a pre-forking server: the parent does some work, forks one worker,
 * and both keep serving. Each leaks a known amount, steadily, from its own site:
 *   parent: remember_client()  (SITE:parent-leak)  PARENT_BLOCKS x PARENT_SIZE
 *   child:  cache_template()   (SITE:child-leak)   CHILD_BLOCKS x CHILD_SIZE
 * Nothing leaks before the fork. Both print "<role> pid=P leaked_bytes=B
 * leaked_blocks=N" (the child before exit(0); the parent after waiting for it).
 *
 * Options: --seconds S (default 4), --child-exit exit|_exit (default exit),
 *          --retitle TITLE (the worker renames itself, as postgres' backends do: its
 *          command line in /proc becomes TITLE), --seed N, --pidfile PATH
 */
#include "scen_common.h"

#include <sys/wait.h>

#define PARENT_BLOCKS 400
#define PARENT_SIZE 1000
#define CHILD_BLOCKS 250
#define CHILD_SIZE 1664

struct client {
  char addr[64];
  unsigned long requests;
  struct client *next;
  char pad[PARENT_SIZE - 64 - sizeof(unsigned long) - sizeof(void *)];
};

static struct client *g_clients;

static void remember_client(unsigned n) {
  struct client *c = malloc(sizeof *c); /* SITE:parent-leak */
  snprintf(c->addr, sizeof c->addr, "10.0.%u.%u:443", n / 250, n % 250);
  c->requests = n;
  c->next = NULL; /* bug: never linked into g_clients, never freed */
  scen_escape(c);
}

static char *g_templates[CHILD_BLOCKS];

static void cache_template(unsigned n) {
  char *t = malloc(CHILD_SIZE); /* SITE:child-leak */
  memset(t, 't', CHILD_SIZE);
  g_templates[n] = t; /* kept forever, never freed */
  scen_escape(t);     /* without it GCC drops the write-only array and the malloc */
}

/* Request churn shared by both roles: a few allocations per request, all freed. */
static void serve(uint64_t *rng) {
  size_t n = scen_logsize(rng, 32, 8192);
  char *req = malloc(n);
  scen_touch(req, n);
  char *resp = calloc(1, n * 2);
  scen_touch(resp, n * 2);
  free(req);
  free(resp);
}

/* Runs for SECONDS, calling leak_fn(i) for i in [0, blocks) evenly over the run. */
static void run_role(double seconds, unsigned blocks, void (*leak_fn)(unsigned), uint64_t *rng) {
  double start = scen_now(), end = start + seconds;
  unsigned leaked = 0;
  for (;;) {
    double now = scen_now();
    int last = now >= end;
    unsigned due = last ? blocks : (unsigned)((now - start) / seconds * blocks);
    while (leaked < due && leaked < blocks) leak_fn(leaked++); /* one call site only */
    if (last) break;
    for (int i = 0; i < 20; i++) serve(rng);
    scen_step();
    scen_sleep(0.001);
  }
}

int main(int argc, char **argv) {
  double seconds = scen_seconds(argc, argv, 4.0);
  const char *child_exit = scen_opt(argc, argv, "--child-exit", NULL);
  uint64_t rng = (uint64_t)scen_opt_long(argc, argv, "--seed", "SCEN_SEED", 8);
  scen_write_pidfile(argc, argv);
  scen_step_init();

  /* Warm-up before the fork: churn only. */
  double warm_end = scen_now() + 0.3;
  while (scen_now() < warm_end) serve(&rng);
  fflush(stdout);

  pid_t pid = fork();
  if (pid < 0) {
    perror("fork");
    return 1;
  }
  if (pid == 0) {
    const char *title = scen_opt(argc, argv, "--retitle", NULL);
    if (title) { /* setproctitle's way: the title over the argument strings */
      char *lo = argv[0], *hi = argv[argc - 1] + strlen(argv[argc - 1]);
      char buf[256];
      snprintf(buf, sizeof buf, "%s", title);
      memset(lo, 0, (size_t)(hi - lo));
      memcpy(lo, buf, strlen(buf) < (size_t)(hi - lo) ? strlen(buf) : (size_t)(hi - lo));
    }
    uint64_t crng = rng ^ 0xC0FFEE;
    run_role(seconds - 0.5, CHILD_BLOCKS, cache_template, &crng);
    printf("child pid=%ld leaked_bytes=%lu leaked_blocks=%u\n", (long)getpid(),
           (unsigned long)CHILD_BLOCKS * CHILD_SIZE, CHILD_BLOCKS);
    fflush(stdout);
    if (child_exit && strcmp(child_exit, "_exit") == 0) _exit(0);
    exit(0);
  }
  run_role(seconds - 0.3, PARENT_BLOCKS, remember_client, &rng);
  int status = 0;
  waitpid(pid, &status, 0);
  printf("parent pid=%ld leaked_bytes=%lu leaked_blocks=%u child_status=%d\n", (long)getpid(),
         (unsigned long)PARENT_BLOCKS * sizeof(struct client), PARENT_BLOCKS,
         WIFEXITED(status) ? WEXITSTATUS(status) : -1);
  (void)g_clients;
  return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : 1;
}
