/* SPDX-License-Identifier: MIT */
/*
 * merge.c - several leakguard databases in one (`leakguard merge -o OUT A.db B.db ...`):
 * the processes, ranks and nodes of a job, each recorded on its own, reported as one run
 * (docs/schema.md, "Merged databases").
 *
 * Every row is keyed by its process image (`proc`), and nothing is shared between
 * images (stacks, locations and modules are per image), so merging is copying each
 * input's rows with its images renumbered after those already in OUT. Pids collide
 * across nodes; the host (the `host` label, recorded by the collector) and the rank
 * stay with each image, and a `source` label names the file it came from (an
 * `attached_at` label the image `leakguard attach` attached to). NVML's
 * machine-wide samples (`nvml`, no image key) are copied as they are; samples of two
 * machines at the same instant and device keep the first. The copying is the store's
 * (lgst_copy_in, store.c); this file checks the inputs and drives it.
 */
#include "output/merge.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static int same_file(const struct stat *a, const struct stat *b) {
  return a->st_dev == b->st_dev && a->st_ino == b->st_ino;
}

int lgst_merge(const char *out, const char *const *in, int n, char *why, size_t whylen) {
  struct stat so, si[64];
  if (n < 1 || n > 64) {
    snprintf(why, whylen, "give 1 to 64 databases to merge (got %d)", n);
    return -EINVAL;
  }
  if (stat(out, &so) == 0) {
    int input = 0;
    for (int i = 0; i < n; i++) {
      struct stat x;
      if (stat(in[i], &x) == 0 && same_file(&x, &so)) input = 1;
    }
    snprintf(why, whylen,
             input ? "%s is one of the inputs: merging a database into itself"
                   : "%s exists: leakguard merge does not overwrite a file (remove it first)",
             out);
    return -EEXIST;
  }
  for (int i = 0; i < n; i++) {
    lgr_db_t *s = NULL;
    char w[1024];
    if (lgr_open(in[i], &s, w, sizeof w) != 0) { /* the schema checks of `report` */
      snprintf(why, whylen, "%s", w);
      return -EINVAL;
    }
    lgr_close(s);
    if (stat(in[i], &si[i]) != 0) {
      snprintf(why, whylen, "%s: %s", in[i], strerror(errno));
      return -errno;
    }
    for (int k = 0; k < i; k++)
      if (same_file(&si[k], &si[i])) {
        if (!strcmp(in[i], in[k]))
          snprintf(why, whylen, "%s is given twice: its processes would be counted twice", in[i]);
        else snprintf(why, whylen, "%s and %s are the same file: its processes would be counted twice", in[k], in[i]);
        return -EINVAL;
      }
  }
  lgst_t *s = NULL;
  char err[1024];
  /* claimed (core/outfile.c): a link planted at out since the check above is refused */
  int rc = lgst_create_ex(out, 0, &s, err, sizeof err);
  if (rc != 0) {
    snprintf(why, whylen, "cannot create %s", err);
    return rc;
  }
  /* the copy is the store's (its SQL is there): one transaction per input */
  for (int i = 0; rc == 0 && i < n; i++) rc = lgst_copy_in(s, in[i], i == 0, why, whylen);
  if (rc == 0) {
    char cmd[4096];
    size_t k = (size_t)snprintf(cmd, sizeof cmd, "leakguard merge");
    for (int i = 0; i < n && k < sizeof cmd; i++) k += (size_t)snprintf(cmd + k, sizeof cmd - k, " %s", in[i]);
    rc = lgst_meta(s, "command", cmd);
    if (rc) snprintf(why, whylen, "cannot write the meta table");
  }
  if (rc == 0) {
    char nb[16];
    snprintf(nb, sizeof nb, "%d", n);
    if ((rc = lgst_meta(s, "merged", nb)) != 0) snprintf(why, whylen, "cannot write the meta table");
  }
  if (rc != 0) lgst_discard(s, out); /* no half-merged file */
  else lgst_close(s);
  return rc;
}
