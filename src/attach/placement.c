/* SPDX-License-Identifier: MIT */
/*
 * placement.c - where the target loads the agent from: the agent's own path when the
 * target's mount namespace shows the same file and the target runs as our user, else a
 * copy in the target's /tmp (through /proc/PID/root), written so that a process that
 * mapped an older copy keeps it and another user's file is never followed.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "attach/attach.h"

/* Whether the files at a and b hold the same bytes. */
static int same_bytes(const char *a, const char *b) {
  FILE *fa = fopen(a, "rbe"), *fb = fa ? fopen(b, "rbe") : NULL;
  int same = fa && fb;
  char x[65536], y[65536];
  while (same) {
    size_t ka = fread(x, 1, sizeof x, fa), kb = fread(y, 1, sizeof y, fb);
    if (ka != kb || memcmp(x, y, ka) != 0) same = 0;
    if (ka == 0) break;
  }
  if (fa) fclose(fa);
  if (fb) fclose(fb);
  return same;
}

/* Puts a copy of the agent at there (a path through /proc/PID/root). An existing copy
 * is used only when it is ours, not writable by others and the same bytes; otherwise a
 * new one is written beside it and renamed over it, never rewritten in place: a
 * process that loaded the old copy keeps its mapping (rewriting a mapped library under
 * it would crash it), and in sticky /tmp the rename fails over another user's file
 * instead of following it. 0 or -errno. */
static int copy_agent(const char *agent, const char *there) {
  struct stat st;
  if (lstat(there, &st) == 0 && S_ISREG(st.st_mode) && st.st_uid == geteuid() && !(st.st_mode & 022) &&
      same_bytes(agent, there))
    return 0;
  char tmp[PATH_MAX + 80];
  snprintf(tmp, sizeof tmp, "%s.XXXXXX", there);
  int fd = mkostemp(tmp, O_CLOEXEC);
  if (fd < 0) return -errno;
  FILE *in = fopen(agent, "rbe"), *o = fdopen(fd, "wb");
  int ok = in && o && fchmod(fd, 0644) == 0;
  char buf[65536];
  size_t k;
  while (ok && (k = fread(buf, 1, sizeof buf, in)) > 0) ok = fwrite(buf, 1, k, o) == k;
  if (in) fclose(in);
  if (o ? fclose(o) != 0 : close(fd) != 0) ok = 0;
  if (!ok || rename(tmp, there) != 0) {
    int e = errno ? errno : EIO;
    unlink(tmp);
    return -e;
  }
  return 0;
}

/* The agent's path as the target sees it: its own when the target's mount namespace
 * shows the same file and the target runs as our user; else a copy in the target's
 * /tmp, which another user can read (the build tree may be closed to it: /root, a
 * mktemp -d checkout). */
int lgj_agent_in_target(pid_t pid, const char *agent, char *out, size_t n, char *why, size_t wn) {
  char there[PATH_MAX + 64];
  struct stat a, b, proc;
  /* the target's root is as closed to us as ptrace is (a process that is not
   * dumpable, without CAP_SYS_PTRACE): say that, not that the agent is unreachable */
  snprintf(there, sizeof there, "/proc/%d/root/", (int)pid);
  if (access(there, X_OK) != 0 && (errno == EACCES || errno == EPERM)) return lgj_refused(pid, EPERM, why, wn);
  snprintf(there, sizeof there, "/proc/%d", (int)pid);
  int same_user = stat(there, &proc) != 0 || proc.st_uid == geteuid();
  snprintf(there, sizeof there, "/proc/%d/root%s", (int)pid, agent);
  if (same_user && stat(agent, &a) == 0 && stat(there, &b) == 0 && a.st_dev == b.st_dev && a.st_ino == b.st_ino) {
    snprintf(out, n, "%s", agent);
    return 0;
  }
  snprintf(out, n, "/tmp/libleakguard-agent-%d.so", (int)getuid());
  snprintf(there, sizeof there, "/proc/%d/root%s", (int)pid, out);
  int rc = copy_agent(agent, there);
  if (rc != 0) {
    snprintf(why, wn, "the agent %s is not reachable from process %d and cannot be copied to %s: %s", agent, (int)pid,
             there, strerror(-rc));
    return rc;
  }
  return 0;
}
