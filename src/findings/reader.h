/* SPDX-License-Identifier: MIT */
/*
 * reader.h - the findings layer's handle on a leakguard database (docs/schema.md).
 *
 * The findings are built from the database only: `report`, `diff` and `merge` open a
 * file with lgr_open (read-only for what they read, its schema checked), `run` and
 * `attach` lend the connection their store writes through (lgr_borrow). The writer
 * (output/store.c) and this layer are the only places with SQL.
 */
#ifndef LG_FINDINGS_READER_H
#define LG_FINDINGS_READER_H

#include <stddef.h>

/* The schema this leakguard writes and reads (meta key "schema"). */
#define LG_SCHEMA_VERSION 2

typedef struct lgr_db lgr_db_t;

/* Opens an existing leakguard database and validates it (its schema version, every
 * table a report needs readable). 0, or -errno with a one-line reason naming path in
 * why: -ENOENT, -EACCES, -EISDIR, -ENOMEM, -EINVAL (not a leakguard database, a damaged
 * one, another schema). */
int lgr_open(const char *path, lgr_db_t **out, char *why, size_t whylen);
/* A handle over an open SQLite connection (a sqlite3 *) that stays its owner's: the
 * collector's own database at the end of `run`. NULL when out of memory. */
lgr_db_t *lgr_borrow(void *sqlite3_handle);
/* Closes what lgr_open opened; frees a borrowed handle (the connection stays open). */
void lgr_close(lgr_db_t *db);
/* 1 when a recording was still writing the file lgr_open opened (its lock held: a
 * live recording), 0 otherwise and for a borrowed handle. */
int lgr_is_live(const lgr_db_t *db);
/* The SQLite connection (for the findings layer's own files, and merge's copy). */
void *lgr_sqlite(lgr_db_t *db);

#endif
