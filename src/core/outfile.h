/* SPDX-License-Identifier: MIT */
/* outfile.h - claiming the files leakguard writes (see outfile.c). */
#ifndef LG_CORE_OUTFILE_H
#define LG_CORE_OUTFILE_H

#include <stddef.h>

/* Claims path for writing: created (O_EXCL|O_NOFOLLOW), or an existing regular file
 * locked and, with force, truncated. *fd_out: the file, open read-write and flock'ed
 * (keep it open as long as the file is being written: the lock tells other runs it is
 * in use); *created: 1 when this call made it. 0, or -errno with a one-line reason in
 * why: -EEXIST (exists, no force), -EBUSY (another recording has it), -ELOOP (a
 * symbolic link), -EPERM (a directory others may write, not sticky), -EINVAL (not a
 * regular file), or the open's error. */
int lgu_claim_output(const char *path, int force, int *fd_out, int *created, char *why, size_t whylen);
/* 1 when a recording holds path now (the flock of lgu_claim_output, seen in
 * /proc/locks without taking it: a reader must never make a run's claim fail), 0 when
 * none does or that cannot be told. */
int lgu_output_in_use(const char *path);
/* 1 when path names the regular file open as fd (nothing replaced it in between). */
int lgu_same_file(int fd, const char *path);
/* A log opened for appending, never through a symbolic link nor in a directory every
 * user may write that is not sticky: the fd, or -1 with the reason in why. */
int lgu_open_append(const char *path, char *why, size_t whylen);

#endif
