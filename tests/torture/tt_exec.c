/* SPDX-License-Identifier: MIT */
/*
 * tt_exec.c - exec paths that leave the recorder behind (issue #17):
 *   unsetenv_spawn        unsetenv("LD_PRELOAD"), fork + exec of a shell that prints
 *                         and exits 4 (not recorded); reaped here; leak meanwhile
 *   unsetenv_exec         leak, then unsetenv("LD_PRELOAD") and exec in place a shell
 *                         that exits 6: the target's own image is replaced by one
 *                         that is not recorded, and its status is the run's
 *   setuid_spawn PATH     fork + exec of PATH -u (a set-user-ID copy of id made by the
 *                         driver); the loader ignores LD_PRELOAD there; leak meanwhile
 *   setuid_exec PATH      leak, then exec PATH -u in place
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tt.h"

static int spawn_wait(char *const argv[])
{
  fflush(stdout);
  pid_t pid = fork();
  if (pid < 0)
    tt_die("fork");
  if (pid == 0) {
    execv(argv[0], argv);
    _exit(127);
  }
  tt_leak(2000, 32768);
  int st;
  if (waitpid(pid, &st, 0) != pid)
    tt_die("waitpid");
  return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

int main(int argc, char **argv)
{
  if (argc < 2)
    return 2;
  const char *mode = argv[1];
  if (!strcmp(mode, "unsetenv_spawn")) {
    unsetenv("LD_PRELOAD");
    char *a[] = {"/bin/sh", "-c", "echo shell child says hi; exit 4", NULL};
    int rc = spawn_wait(a);
    printf("exec: shell child exited with %d\n", rc);
    return 0;
  }
  if (!strcmp(mode, "unsetenv_exec")) {
    tt_leak(2000, 32768);
    printf("exec: replacing myself\n");
    fflush(stdout);
    unsetenv("LD_PRELOAD");
    execl("/bin/sh", "sh", "-c", "echo replaced by a shell; exit 6", (char *)NULL);
    tt_die("execl");
  }
  if (argc < 3)
    return 2;
  if (!strcmp(mode, "setuid_spawn")) {
    char *a[] = {argv[2], "-u", NULL};
    int rc = spawn_wait(a);
    printf("exec: set-user-ID child exited with %d\n", rc);
    return 0;
  }
  if (!strcmp(mode, "setuid_exec")) {
    tt_leak(2000, 32768);
    printf("exec: replacing myself by a set-user-ID program\n");
    fflush(stdout);
    execl(argv[2], argv[2], "-u", (char *)NULL);
    tt_die("execl");
  }
  return 2;
}
