/* SPDX-License-Identifier: MIT */
/*
 * exec_chain - a launcher: it prepares its environment (leaking a known amount
 * from SITE:pre-exec on the way), then runs another scenario program, either
 *   --mode exec   replacing itself with execv() (same pid, new image), or
 *   --mode spawn  fork() + execv() in the child while the parent waits for it.
 * The target runs with "--seconds T". Prints "launcher pid=P leaked_bytes=B" before
 * the exec / spawn.
 *
 * Options: --target PATH (required), --mode exec|spawn (default exec),
 *          --pre-seconds S (default 1.5), --seconds T (target run length,
 *          default 3), --pidfile PATH
 */
#include "scen_common.h"

#include <sys/wait.h>

#define PRE_BLOCKS 300
#define PRE_SIZE 2048

static char *g_env_blocks[PRE_BLOCKS];

static void load_env_block(unsigned i) {
  char *b = malloc(PRE_SIZE); /* SITE:pre-exec */
  memset(b, 'e', PRE_SIZE);
  g_env_blocks[i] = b; /* intentionally never freed before the exec */
}

int main(int argc, char **argv) {
  const char *target = scen_opt(argc, argv, "--target", NULL);
  const char *mode = scen_opt(argc, argv, "--mode", NULL);
  double pre = scen_opt_double(argc, argv, "--pre-seconds", NULL, 1.5);
  const char *tsec = scen_opt(argc, argv, "--seconds", NULL);
  if (!target) {
    fprintf(stderr, "usage: %s --target PATH [--mode exec|spawn]\n", argv[0]);
    return 2;
  }
  if (!mode) mode = "exec";
  if (!tsec) tsec = "3";
  scen_write_pidfile(argc, argv);
  scen_step_init();

  uint64_t rng = 77;
  double start = scen_now(), end = start + pre;
  unsigned done = 0;
  for (;;) {
    int last = scen_now() >= end;
    unsigned due = last ? PRE_BLOCKS : (unsigned)((scen_now() - start) / pre * PRE_BLOCKS);
    while (done < due && done < PRE_BLOCKS) load_env_block(done++);
    if (last) break;
    char *tmp = malloc(scen_logsize(&rng, 16, 4096));
    scen_escape(tmp);
    free(tmp);
    scen_step();
    scen_sleep(0.0005);
  }
  printf("launcher pid=%ld leaked_bytes=%lu leaked_blocks=%u\n", (long)getpid(),
         (unsigned long)PRE_BLOCKS * PRE_SIZE, PRE_BLOCKS);
  fflush(stdout);

  char *targv[] = {(char *)target, (char *)"--seconds", (char *)tsec, NULL};
  if (strcmp(mode, "exec") == 0) {
    execv(target, targv);
    perror("execv");
    return 127;
  }
  pid_t pid = fork();
  if (pid < 0) {
    perror("fork");
    return 1;
  }
  if (pid == 0) {
    execv(target, targv);
    perror("execv");
    _exit(127);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  printf("launcher: child %ld exited with %d\n", (long)pid,
         WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status));
  for (unsigned i = 0; i < PRE_BLOCKS; i++) free(g_env_blocks[i]);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 1;
}
