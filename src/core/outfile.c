/* SPDX-License-Identifier: MIT */
/*
 * outfile.c - claiming a file leakguard writes (issue #31): the database of a run or an
 * attach, the output of report -o and merge -o, the guard's log.
 *
 * Nothing is truncated, unlinked or written before the file is ours:
 *   - a new file is created with O_CREAT|O_EXCL|O_NOFOLLOW (a planted symbolic link, or
 *     any file already there, makes the create fail instead of being followed);
 *   - an existing one is opened with O_NOFOLLOW, must be a regular file, and is locked
 *     (flock, LOCK_EX|LOCK_NB) before anything else: a recording holds that lock for
 *     its whole life, so a second run on the same file is refused with the first one
 *     untouched; then it is replaced only with --force (memray's convention);
 *   - a directory that every user may write and that is not sticky is refused: there
 *     another user can rename a file leakguard made and put a link in its place between
 *     two of its opens (SQLite opens the database, its -wal and -shm by name). In a
 *     sticky one (/tmp) nobody else can, and the kernel's protected_symlinks keeps
 *     leakguard from following a link that another user planted.
 * flock and SQLite's POSIX (fcntl) locks are independent on Linux: the lock does not
 * get in SQLite's way, and readers (report) never take it.
 */
#include "core/outfile.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

/* The directory part of path ("." when none). */
static void dir_of(const char *path, char *out, size_t n) {
  const char *slash = strrchr(path, '/');
  if (!slash) snprintf(out, n, ".");
  else if (slash == path) snprintf(out, n, "/");
  else snprintf(out, n, "%.*s", (int)(slash - path), path);
}

int lgu_claim_output(const char *path, int force, int *fd_out, int *created, char *why, size_t whylen) {
  *fd_out = -1;
  *created = 0;
  char dir[PATH_MAX];
  struct stat ds;
  dir_of(path, dir, sizeof dir);
  if (stat(dir, &ds) != 0) {
    int e = errno;
    snprintf(why, whylen, "%s: %s", path, e == ENOENT ? "no such directory" : strerror(e));
    return -e;
  }
  if ((ds.st_mode & S_IWOTH) && !(ds.st_mode & S_ISVTX)) {
    snprintf(why, whylen,
             "%s: its directory %s is writable by every user and not sticky: another user could replace the "
             "file under leakguard (write it elsewhere)",
             path, dir);
    return -EPERM;
  }
  int fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
  if (fd >= 0) {
    /* new and ours, unless another run claimed it (--force) between the create and the
     * lock: then it is theirs */
    if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
      close(fd);
      snprintf(why, whylen, "%s is in use by another leakguard recording: left untouched", path);
      return -EBUSY;
    }
    *fd_out = fd;
    *created = 1;
    return 0;
  }
  if (errno != EEXIST) {
    int e = errno;
    snprintf(why, whylen, "%s: %s", path, e == ENOSPC ? "disk full" : strerror(e));
    return -e;
  }
  fd = open(path, O_RDWR | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) {
    int e = errno;
    if (e == ELOOP) snprintf(why, whylen, "%s is a symbolic link: refused (leakguard never writes through one)", path);
    else snprintf(why, whylen, "%s: %s", path, strerror(e));
    return -e;
  }
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    snprintf(why, whylen, "%s exists and is not a regular file: refused", path);
    close(fd);
    return -EINVAL;
  }
  if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
    snprintf(why, whylen, "%s is in use by another leakguard recording: left untouched (give another file with -o)",
             path);
    close(fd);
    return -EBUSY;
  }
  if (!force) {
    snprintf(why, whylen, "%s exists (an earlier recording?): left untouched; --force replaces it", path);
    close(fd);
    return -EEXIST;
  }
  if (ftruncate(fd, 0) != 0) {
    int e = errno;
    snprintf(why, whylen, "%s: %s", path, strerror(e));
    close(fd);
    return -e;
  }
  *fd_out = fd;
  return 0;
}

int lgu_same_file(int fd, const char *path) {
  struct stat a, b;
  return fstat(fd, &a) == 0 && lstat(path, &b) == 0 && S_ISREG(b.st_mode) && a.st_dev == b.st_dev &&
         a.st_ino == b.st_ino;
}

int lgu_open_append(const char *path, char *why, size_t whylen) {
  char dir[PATH_MAX];
  struct stat ds;
  dir_of(path, dir, sizeof dir);
  if (stat(dir, &ds) == 0 && (ds.st_mode & S_IWOTH) && !(ds.st_mode & S_ISVTX)) {
    snprintf(why, whylen, "%s: its directory %s is writable by every user and not sticky: refused", path, dir);
    errno = EPERM;
    return -1;
  }
  int fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0644);
  struct stat st;
  if (fd >= 0 && (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode))) {
    close(fd);
    snprintf(why, whylen, "%s is not a regular file: refused", path);
    errno = EINVAL;
    return -1;
  }
  if (fd < 0)
    snprintf(why, whylen, "%s: %s", path,
             errno == ELOOP ? "a symbolic link: refused (leakguard never writes through one)" : strerror(errno));
  return fd;
}

int lgu_output_in_use(const char *path) {
  struct stat st;
  if (stat(path, &st) != 0) return 0;
  FILE *f = fopen("/proc/locks", "re");
  if (!f) return 0;
  /* "5: FLOCK  ADVISORY  WRITE 29782 00:1b:8468368 0 EOF": the holder of a lock (a
   * waiter's line has "->" where FLOCK is); the device in hex, as the kernel prints it */
  char line[256], type[16], mode[16];
  unsigned maj, min;
  unsigned long long ino;
  int held = 0;
  while (!held && fgets(line, sizeof line, f))
    held = sscanf(line, "%*d: %15s %*15s %15s %*d %x:%x:%llu", type, mode, &maj, &min, &ino) == 5 &&
           !strcmp(type, "FLOCK") && !strcmp(mode, "WRITE") && maj == major(st.st_dev) && min == minor(st.st_dev) &&
           ino == (unsigned long long)st.st_ino;
  fclose(f);
  return held;
}
