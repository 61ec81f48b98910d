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
 * machines at the same instant and device keep the first.
 */
#include "output/merge.h"

#include <errno.h>
#include <sqlite3.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Runs the SQL that sqlite3_vmprintf makes of fmt (%Q quotes a string, %w an
 * identifier: not printf's, so no format attribute). */
static int exec_fmt(sqlite3 *db, char *why, size_t whylen, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  char *sql = sqlite3_vmprintf(fmt, ap);
  va_end(ap);
  if (!sql) {
    snprintf(why, whylen, "out of memory");
    return -ENOMEM;
  }
  char *err = NULL;
  int rc = sqlite3_exec(db, sql, NULL, NULL, &err);
  sqlite3_free(sql);
  if (rc != SQLITE_OK) {
    snprintf(why, whylen, "%s", err ? err : sqlite3_errstr(rc));
    sqlite3_free(err);
    return -EIO;
  }
  return 0;
}

/* 1 when schema has table name, 0 when it has not, -1 when that cannot be read (a
 * failed query is not an absent table: its rows would be left out unsaid). */
static int has_table(sqlite3 *db, const char *schema, const char *name) {
  char *sql = sqlite3_mprintf("SELECT 1 FROM %w.sqlite_master WHERE type='table' AND name=%Q", schema, name);
  sqlite3_stmt *st = NULL;
  int rc = sql ? sqlite3_prepare_v2(db, sql, -1, &st, NULL) : SQLITE_NOMEM;
  if (rc == SQLITE_OK) rc = sqlite3_step(st);
  sqlite3_finalize(st);
  sqlite3_free(sql);
  return rc == SQLITE_ROW ? 1 : rc == SQLITE_DONE ? 0 : -1;
}

/* Copies src.T into main.T with proc and parent_proc shifted by off. */
static int copy_table(sqlite3 *db, const char *t, long long off, char *why, size_t whylen) {
  char *sql = sqlite3_mprintf("PRAGMA src.table_info(%Q)", t);
  sqlite3_stmt *st = NULL;
  if (!sql || sqlite3_prepare_v2(db, sql, -1, &st, NULL) != SQLITE_OK) {
    sqlite3_free(sql);
    snprintf(why, whylen, "cannot read the columns of %s", t);
    return -EIO;
  }
  sqlite3_free(sql);
  char cols[2048] = "", exprs[2048] = "";
  size_t nc = 0, ne = 0;
  int ok = 1, step;
  while ((step = sqlite3_step(st)) == SQLITE_ROW) {
    const char *c = (const char *)sqlite3_column_text(st, 1);
    if (!c) { /* out of memory: every column or none */
      ok = 0;
      break;
    }
    int shift = !strcmp(c, "proc") || !strcmp(c, "parent_proc");
    int a = snprintf(cols + nc, sizeof cols - nc, "%s\"%s\"", nc ? "," : "", c);
    /* proc 0 is no image (notes of the recording itself): it stays 0 */
    int b = shift ? snprintf(exprs + ne, sizeof exprs - ne, "%sCASE WHEN \"%s\" = 0 THEN 0 ELSE \"%s\" + %lld END",
                             ne ? "," : "", c, c, off)
                  : snprintf(exprs + ne, sizeof exprs - ne, "%s\"%s\"", ne ? "," : "", c);
    if (a < 0 || b < 0 || (size_t)a >= sizeof cols - nc || (size_t)b >= sizeof exprs - ne) {
      ok = 0;
      break;
    }
    nc += (size_t)a;
    ne += (size_t)b;
  }
  sqlite3_finalize(st);
  if (ok && step != SQLITE_DONE) {
    snprintf(why, whylen, "cannot read the columns of %s: %s", t, sqlite3_errstr(step));
    return -EIO;
  }
  if (!ok || !nc) {
    snprintf(why, whylen, "table %s: unexpected columns", t);
    return -EIO;
  }
  /* nvml has no image key: two machines' samples at one instant keep the first; two
   * inputs' notes on the recording itself (proc 0) keep the first of each kind */
  return exec_fmt(db, why, whylen, "INSERT %s INTO main.\"%w\"(%s) SELECT %s FROM src.\"%w\"",
                  strcmp(t, "nvml") && strcmp(t, "notes") ? "" : "OR IGNORE", t, cols, exprs, t);
}

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
  sqlite3 *db = lgst_db(s);
  int cuda = 0;
  for (int i = 0; rc == 0 && i < n; i++) {
    /* one transaction per input (SQLite attaches outside transactions) */
    rc = exec_fmt(db, why, whylen, "ATTACH %Q AS src", in[i]);
    if (rc) break;
    rc = exec_fmt(db, why, whylen, "BEGIN");
    long long off = 0;
    sqlite3_stmt *st = NULL;
    /* the inputs' process keys are shifted past those merged so far: a failed query
     * here must fail the merge, or this input's processes would replace earlier ones */
    if (rc == 0 &&
        sqlite3_prepare_v2(db, "SELECT coalesce(max(proc), 0) FROM main.processes", -1, &st, NULL) == SQLITE_OK &&
        sqlite3_step(st) == SQLITE_ROW)
      off = sqlite3_column_int64(st, 0);
    else if (rc == 0) {
      snprintf(why, whylen, "cannot read the merged processes: %s", sqlite3_errmsg(db));
      rc = -EIO;
    }
    sqlite3_finalize(st);
    const char *const *TABLES = lgst_tables(); /* the store's, meta merged apart */
    for (int k = 0; rc == 0 && TABLES[k]; k++) {
      int has = has_table(db, "src", TABLES[k]);
      if (has < 0) {
        snprintf(why, whylen, "cannot read the tables of %s: %s", in[i], sqlite3_errmsg(db));
        rc = -EIO;
        break;
      }
      if (!has) continue;
      if (lgst_table_is_gpu(TABLES[k])) {
        if (!cuda && (rc = lgst_cuda_tables(s)) != 0) {
          snprintf(why, whylen, "cannot create the GPU tables");
          break;
        }
        cuda = 1;
      }
      rc = copy_table(db, TABLES[k], off, why, whylen);
    }
    /* where each image came from; the image `leakguard attach` attached to (meta
     * attached_at, its first image, of kind start) stays attached, a label of its own:
     * the merged meta is not one input's; the first input's settings (interval, limit) */
    if (rc == 0)
      rc = exec_fmt(db, why, whylen,
                    "INSERT OR REPLACE INTO main.labels(proc, key, value) SELECT proc + %lld, 'source', %Q"
                    " FROM src.processes",
                    off, in[i]);
    if (rc == 0)
      rc = exec_fmt(db, why, whylen,
                    "INSERT OR REPLACE INTO main.labels(proc, key, value) SELECT p.proc + %lld, 'attached_at', m.value"
                    " FROM src.processes p JOIN src.meta m ON m.key = 'attached_at' WHERE p.kind = 'start'",
                    off);
    if (rc == 0 && i == 0)
      rc = exec_fmt(db, why, whylen,
                    "INSERT OR IGNORE INTO main.meta(key, value) SELECT key, value FROM src.meta"
                    " WHERE key NOT IN ('schema', 'version', 'command', 'attached_at')");
    char w2[256];
    if (rc != 0 && strncmp(why, in[i], strlen(in[i]))) { /* the error names the input it came from */
      char w3[1024];
      snprintf(w3, sizeof w3, "%s: %s", in[i], why);
      snprintf(why, whylen, "%s", w3);
    }
    if (rc == 0) rc = exec_fmt(db, why, whylen, "COMMIT");
    else exec_fmt(db, w2, sizeof w2, "ROLLBACK"); /* the first error is the reason */
    int drc = exec_fmt(db, w2, sizeof w2, "DETACH src");
    if (rc == 0 && drc != 0) {
      snprintf(why, whylen, "%s", w2);
      rc = drc;
    }
  }
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
