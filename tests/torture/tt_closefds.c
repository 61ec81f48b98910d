/* SPDX-License-Identifier: MIT */
/*
 * tt_closefds.c - a daemon-style program that closes (or overwrites) every inherited
 * descriptor, then leaks, and forks a child that leaks too (issue #17). The recorder's
 * memfd and socket are among those descriptors: the program must go on being
 * recorded, its child too, and the child's exit status (reaped here) must reach the
 * report.
 *   tt_closefds close_range|closefrom|dup2
 *   tt_closefds close_range_spawn   close_range, then a posix_spawn'ed child (this
 *                                   program, "child 8") that leaks and exits 8
 */
#include <spawn.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tt.h"

extern char **environ;

int main(int argc, char **argv)
{
  const char *mode = argc > 1 ? argv[1] : "close_range";
  if (argc > 2 && !strcmp(mode, "child")) {
    tt_leak(2000, 16384);
    return atoi(argv[2]);
  }
  int spawn = !strcmp(mode, "close_range_spawn");
  fflush(stdout);
  if (!strcmp(mode, "close_range") || spawn) {
    if (syscall(SYS_close_range, 3u, ~0u, 0u) != 0)
      tt_die("close_range");
  } else if (!strcmp(mode, "closefrom")) {
    closefrom(3);
  } else if (!strcmp(mode, "dup2")) {
    /* /dev/null over every low number, and over some high ones */
    int fd = open("/dev/null", O_RDWR);
    if (fd < 0)
      tt_die("open");
    for (int i = 3; i < 256; i++)
      if (i != fd && dup2(fd, i) < 0)
        tt_die("dup2");
    for (int i = 1000; i < 1010; i++)
      if (dup2(fd, i) < 0)
        tt_die("dup2 high");
  } else {
    fprintf(stderr, "unknown mode %s\n", mode);
    return 2;
  }
  printf("closefds(%s): descriptors closed\n", mode);
  fflush(stdout);
  tt_leak(1000, 32768);
  pid_t pid;
  if (spawn) {
    char self[4096];
    ssize_t k = readlink("/proc/self/exe", self, sizeof self - 1);
    if (k <= 0)
      tt_die("readlink");
    self[k] = 0;
    char *av[] = {self, "child", "8", NULL};
    int rc = posix_spawn(&pid, self, NULL, NULL, av, environ);
    if (rc) {
      errno = rc;
      tt_die("posix_spawn");
    }
  } else {
    pid = fork();
  }
  if (pid < 0)
    tt_die("fork");
  if (pid == 0) {
    tt_leak(2000, 16384);
    printf("closefds(%s): child done\n", mode);
    fflush(stdout);
    _exit(7);
  }
  tt_leak(2000, 32768);
  int st;
  if (waitpid(pid, &st, 0) != pid)
    tt_die("waitpid");
  printf("closefds(%s): child exited with %d\n", mode, WIFEXITED(st) ? WEXITSTATUS(st) : -1);
  printf("closefds(%s): parent leaked %zu blocks\n", mode, tt_nkept);
  return 0;
}
