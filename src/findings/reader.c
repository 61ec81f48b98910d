/* SPDX-License-Identifier: MIT */
/*
 * reader.c - opening a leakguard database for the findings (reader.h), and the helpers
 * every query of the findings goes through (impl.h): rows stepped with a failure
 * recorded, statements prepared once per build, the first failure and its reason.
 */
#include "findings/reader.h"

#include <errno.h>
#include <stdarg.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/outfile.h"
#include "findings/impl.h"

struct lgr_db {
  sqlite3 *db;
  int owned; /* opened here (lgr_open), closed by lgr_close */
  int live;  /* a recording held the file when it was opened (lgu_output_in_use) */
};

int lgr_is_live(const lgr_db_t *d) { return d->live; }

lgr_db_t *lgr_borrow(void *handle) {
  lgr_db_t *d = calloc(1, sizeof *d);
  if (d) d->db = handle;
  return d;
}

void *lgr_sqlite(lgr_db_t *d) { return d->db; }

void lgr_close(lgr_db_t *d) {
  if (!d) return;
  if (d->owned) sqlite3_close(d->db);
  free(d);
}

/* Why db cannot be read as a leakguard database, or NULL. vr: room for a reason that
 * names the schema versions. */
static const char *check_schema(sqlite3 *db, int rc, char *vr, size_t vrlen) {
  sqlite3_stmt *st = NULL;
  const char *reason = NULL;
  if (rc == SQLITE_OK) rc = sqlite3_prepare_v2(db, "SELECT value FROM meta WHERE key='schema'", -1, &st, NULL);
  if (rc == SQLITE_OK) {
    rc = sqlite3_step(st);
    if (rc == SQLITE_ROW) {
      int v = sqlite3_column_int(st, 0);
      if (v > 0 && v < LG_SCHEMA_VERSION) {
        snprintf(vr, vrlen,
                 "recorded by an older leakguard (database schema %d; this one reads schema %d): record it again", v,
                 LG_SCHEMA_VERSION);
        reason = vr;
      } else if (v != LG_SCHEMA_VERSION) {
        snprintf(vr, vrlen, "unsupported leakguard database schema version %d (this leakguard reads %d)", v,
                 LG_SCHEMA_VERSION);
        reason = vr;
      }
      rc = SQLITE_OK;
    } else if (rc == SQLITE_DONE) {
      reason = "not a leakguard database (no schema version)";
      rc = SQLITE_OK;
    }
  }
  if (rc != SQLITE_OK && !reason) {
    if (rc == SQLITE_NOTADB || rc == SQLITE_CORRUPT || rc == SQLITE_ERROR)
      reason = "not a leakguard database, or a damaged one";
    else reason = "cannot read database";
  }
  if (!reason) {
    /* Every table the report needs must be readable (a truncated file fails here). */
    static const char *q[] = {"SELECT count(*) FROM processes", "SELECT count(*) FROM snapshots",
                              "SELECT count(*) FROM samples", "SELECT count(*) FROM stacks",
                              "SELECT count(*) FROM locations"};
    for (size_t i = 0; i < sizeof q / sizeof *q && !reason; i++) {
      sqlite3_stmt *c = NULL;
      if (sqlite3_prepare_v2(db, q[i], -1, &c, NULL) != SQLITE_OK || sqlite3_step(c) != SQLITE_ROW)
        reason = "not a leakguard database, or a damaged (truncated?) one";
      sqlite3_finalize(c);
    }
  }
  sqlite3_finalize(st);
  return reason;
}

int lgr_open(const char *path, lgr_db_t **out, char *why, size_t whylen) {
  struct stat sb;
  if (access(path, R_OK) != 0 || stat(path, &sb) != 0) {
    int e = errno;
    snprintf(why, whylen, "%s: %s", path, strerror(e));
    return -e;
  }
  if (S_ISDIR(sb.st_mode)) {
    snprintf(why, whylen, "%s: is a directory, not a leakguard database", path);
    return -EISDIR;
  }
  lgr_db_t *d = calloc(1, sizeof *d);
  if (!d) {
    snprintf(why, whylen, "%s: out of memory", path);
    return -ENOMEM;
  }
  d->owned = 1;
  /* Read-write open so that a WAL left by a killed collector is recovered. */
  int rc = sqlite3_open_v2(path, &d->db, SQLITE_OPEN_READWRITE, NULL);
  if (rc != SQLITE_OK) {
    sqlite3_close(d->db); /* a handle is returned even on failure */
    d->db = NULL;
    rc = sqlite3_open_v2(path, &d->db, SQLITE_OPEN_READONLY, NULL);
  }
  char vr[160];
  const char *reason = check_schema(d->db, rc, vr, sizeof vr);
  if (reason) {
    const char *detail = d->db ? sqlite3_errmsg(d->db) : "";
    if (detail && strcmp(detail, "not an error") != 0 && strcmp(detail, "no more rows available") != 0)
      snprintf(why, whylen, "%s: %s (%s)", path, reason, detail);
    else snprintf(why, whylen, "%s: %s", path, reason);
    lgr_close(d);
    return -EINVAL;
  }
  d->live = lgu_output_in_use(path);
  *out = d;
  return 0;
}

/* ------------------------------------------------------------------ queries */

char *lgr_dupstr(const unsigned char *s) { return lgr_strdup(s ? (const char *)s : ""); }

char *lgr_strdup(const char *s) {
  if (!s) return NULL;
  char *d = strdup(s);
  if (!d) lgr_fail(-ENOMEM);
  return d;
}

static _Thread_local int build_err;
static _Thread_local char build_why[256]; /* the first failure's reason, said by lgr_build */

void lgr_fail_why(int err, const char *fmt, ...) {
  if (build_err) return;
  build_err = err;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(build_why, sizeof build_why, fmt, ap);
  va_end(ap);
}

/* A statement that stopped with an error: its reason kept now (a later statement's
 * success would make SQLite's message "not an error"). */
static void step_failed(sqlite3_stmt *st, int rc) {
  if (rc == SQLITE_NOMEM) lgr_fail(-ENOMEM);
  else lgr_fail_why(-EIO, "%s", sqlite3_errmsg(sqlite3_db_handle(st)));
}

int lgr_row(sqlite3_stmt *st) {
  int rc = sqlite3_step(st);
  if (rc == SQLITE_ROW) return 1;
  if (rc != SQLITE_DONE) step_failed(st, rc);
  return 0;
}

int lgr_prepare(sqlite3 *db, const char *sql, int n, sqlite3_stmt **st, const char **tail) {
  int rc = sqlite3_prepare_v2(db, sql, n, st, tail);
  if (rc == SQLITE_NOMEM) lgr_fail(-ENOMEM); /* other errors: a table older databases lack */
  return rc;
}

/* Statements that the report runs once per site or stack, prepared once per build:
 * preparing costs more than the query itself, and a torch process has thousands of
 * sites. Reset (not finalized) between uses; lgr_build finalizes them. */
static _Thread_local struct {
  sqlite3 *db;
  sqlite3_stmt *st[LGR_STMT_COUNT];
} stmts;

sqlite3_stmt *lgr_cached(sqlite3 *db, int which, const char *sql) {
  if (which < 0 || which >= LGR_STMT_COUNT) return NULL;
  if (stmts.db != db) {
    lgr_cache_clear();
    stmts.db = db;
  }
  sqlite3_stmt *st = stmts.st[which];
  if (st) {
    sqlite3_reset(st);
    sqlite3_clear_bindings(st);
    return st;
  }
  if (lgr_prepare(db, sql, -1, &st, NULL) != SQLITE_OK) {
    sqlite3_finalize(st);
    return NULL;
  }
  return stmts.st[which] = st;
}

void lgr_cache_clear(void) {
  for (int i = 0; i < LGR_STMT_COUNT; i++) {
    sqlite3_finalize(stmts.st[i]);
    stmts.st[i] = NULL;
  }
  stmts.db = NULL;
}

int lgr_step(sqlite3_stmt *st) {
  int rc = sqlite3_step(st);
  if (rc != SQLITE_ROW && rc != SQLITE_DONE) step_failed(st, rc);
  return rc;
}

int lgr_failed(void) { return build_err; }

int lgr_take_failure(void) {
  int e = build_err;
  build_err = 0;
  build_why[0] = 0;
  return e;
}

const char *lgr_failure_why(void) { return build_why; }

void lgr_fail(int err) {
  if (!build_err) build_err = err;
}
