/* SPDX-License-Identifier: MIT */
/*
 * tt_spawn.c - children started with posix_spawn and with vfork+exec, and reaped by
 * this program, not by leakguard (issue #17): their exit status must still reach the
 * report (runs[].exit_status), through the recorder's wait hooks.
 *   tt_spawn            parent: spawns "tt_spawn child 5" (posix_spawn) and
 *                       "tt_spawn child 6" (vfork+execv), leaks, reaps both
 *   tt_spawn child N    leaks a little, exits with N
 */
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tt.h"

extern char **environ;

int main(int argc, char **argv)
{
  if (argc > 2 && !strcmp(argv[1], "child")) {
    tt_leak(600, 8192);
    return atoi(argv[2]);
  }
  char self[4096];
  ssize_t k = readlink("/proc/self/exe", self, sizeof self - 1);
  if (k <= 0)
    tt_die("readlink");
  self[k] = 0;
  char *a1[] = {self, "child", "5", NULL}, *a2[] = {self, "child", "6", NULL};
  pid_t p1;
  int rc = posix_spawn(&p1, self, NULL, NULL, a1, environ);
  if (rc) {
    errno = rc;
    tt_die("posix_spawn");
  }
  pid_t p2 = vfork();
  if (p2 < 0)
    tt_die("vfork");
  if (p2 == 0) {
    execv(self, a2);
    _exit(127);
  }
  tt_leak(2000, 32768);
  int st1, st2;
  if (waitpid(p1, &st1, 0) != p1 || waitpid(p2, &st2, 0) != p2)
    tt_die("waitpid");
  printf("spawn: posix_spawn child exited with %d, vfork child with %d\n", WEXITSTATUS(st1),
         WEXITSTATUS(st2));
  return 0;
}
