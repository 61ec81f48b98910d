/* SPDX-License-Identifier: MIT */
/*
 * fuzz_report.c - fuzz target: `leakguard report` on a corrupted or hostile database
 * (src/findings/reader.c lgr_open, src/findings/build.c). The base is a real recording
 * (report_seed.sql, a dump of a short `leakguard run`). The first input byte picks how
 * the input changes it:
 *
 *   even  SQL: the rest of the input is SQL run on the base (errors ignored) -- wrong
 *         column types, huge counts, NULLs, missing or renamed tables, a schema
 *         version from the future, rows pointing nowhere;
 *   odd   bytes: the file image is cut (bytes 1-4, little endian, modulo its length
 *         + 1: truncated pages) and patched by records (u32 offset, u8 length, bytes).
 *
 * The result is written to a temporary file and opened, built and printed (text, JSON,
 * folded) as the report command does. ATTACH, DETACH and VACUUM are refused (they
 * would write other files), and SQL runs under a step budget (no hang by design).
 */
#include <sqlite3.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "findings/diff.h"
#include "findings/report.h"
#include "output/render.h"
#include "output/store.h"

#include "fuzz_main.h"

#ifndef LG_FUZZ_SEED
#define LG_FUZZ_SEED "report_seed.sql"
#endif

static unsigned char *seed;
static sqlite3_int64 seed_len;
static FILE *devnull;
static char path[256];

static int deny_attach(void *u, int action, const char *a, const char *b, const char *c, const char *d) {
  (void)u, (void)a, (void)b, (void)c, (void)d;
  return action == SQLITE_ATTACH || action == SQLITE_DETACH ? SQLITE_DENY : SQLITE_OK;
}

static int budget(void *u) { return ++*(int *)u > 2000; /* progress calls of 1000 VM steps each */ }

static int load_seed(void) {
  FILE *f = fopen(LG_FUZZ_SEED, "rb");
  if (!f) {
    fprintf(stderr, "fuzz_report: cannot open the seed %s\n", LG_FUZZ_SEED);
    exit(2);
  }
  static char sql[1 << 20];
  size_t n = fread(sql, 1, sizeof sql - 1, f);
  fclose(f);
  sql[n] = 0;
  sqlite3 *db;
  if (sqlite3_open(":memory:", &db) != SQLITE_OK || sqlite3_exec(db, sql, NULL, NULL, NULL) != SQLITE_OK) {
    fprintf(stderr, "fuzz_report: bad seed: %s\n", sqlite3_errmsg(db));
    exit(2);
  }
  seed = sqlite3_serialize(db, "main", &seed_len, 0);
  sqlite3_close(db);
  devnull = fopen("/dev/null", "w");
  const char *tmp = getenv("TMPDIR");
  snprintf(path, sizeof path, "%s/lgfuzz-report-%d.db", tmp && *tmp ? tmp : "/tmp", (int)getpid());
  return seed && devnull ? 0 : -1;
}

/* The SQL mode: the base changed by the input's SQL; returns the new image. */
static unsigned char *apply_sql(const uint8_t *data, size_t size, sqlite3_int64 *len) {
  char *sql = malloc(size + 1);
  if (!sql) return NULL;
  memcpy(sql, data, size);
  sql[size] = 0;
  if (strcasestr(sql, "attach") || strcasestr(sql, "vacuum") || strcasestr(sql, "detach")) {
    free(sql);
    return NULL;
  }
  sqlite3 *db;
  unsigned char *img = sqlite3_malloc64((sqlite3_uint64)seed_len);
  if (!img || sqlite3_open(":memory:", &db) != SQLITE_OK) {
    sqlite3_free(img);
    free(sql);
    return NULL;
  }
  memcpy(img, seed, (size_t)seed_len);
  unsigned char *out = NULL;
  if (sqlite3_deserialize(db, "main", img, seed_len, seed_len,
                          SQLITE_DESERIALIZE_FREEONCLOSE | SQLITE_DESERIALIZE_RESIZEABLE) == SQLITE_OK) {
    int steps = 0;
    sqlite3_limit(db, SQLITE_LIMIT_ATTACHED, 0);
    sqlite3_set_authorizer(db, deny_attach, NULL);
    sqlite3_progress_handler(db, 1000, budget, &steps);
    sqlite3_exec(db, sql, NULL, NULL, NULL);
    sqlite3_progress_handler(db, 0, NULL, NULL);
    out = sqlite3_serialize(db, "main", len, 0);
  }
  sqlite3_close(db);
  free(sql);
  return out;
}

/* The bytes mode: the base image cut and patched. */
static unsigned char *apply_bytes(const uint8_t *data, size_t size, sqlite3_int64 *len) {
  unsigned char *img = sqlite3_malloc64((sqlite3_uint64)seed_len);
  if (!img) return NULL;
  memcpy(img, seed, (size_t)seed_len);
  *len = seed_len;
  if (size >= 4) {
    uint32_t cut = (uint32_t)data[0] | (uint32_t)data[1] << 8 | (uint32_t)data[2] << 16 | (uint32_t)data[3] << 24;
    if (cut) *len = (sqlite3_int64)(cut % ((uint64_t)seed_len + 1));
    data += 4;
    size -= 4;
  }
  while (size >= 5) {
    uint32_t off = (uint32_t)data[0] | (uint32_t)data[1] << 8 | (uint32_t)data[2] << 16 | (uint32_t)data[3] << 24;
    size_t n = data[4];
    data += 5;
    size -= 5;
    if (n > size) n = size;
    if (*len > 0)
      for (size_t i = 0; i < n; i++) img[((uint64_t)off + i) % (uint64_t)*len] = data[i];
    data += n;
    size -= n;
  }
  return img;
}

int lg_fuzz_one(const uint8_t *data, size_t size) {
  if (!seed && load_seed() != 0) return 1;
  if (size < 1) return 1;
  sqlite3_int64 len = 0;
  unsigned char *img = (data[0] & 1) ? apply_bytes(data + 1, size - 1, &len) : apply_sql(data + 1, size - 1, &len);
  if (!img) return 1;
  char aux[300];
  snprintf(aux, sizeof aux, "%s-wal", path);
  unlink(aux);
  snprintf(aux, sizeof aux, "%s-shm", path);
  unlink(aux);
  FILE *f = fopen(path, "wb");
  if (!f || fwrite(img, 1, (size_t)len, f) != (size_t)len) {
    if (f) fclose(f);
    sqlite3_free(img);
    return 1;
  }
  fclose(f);
  sqlite3_free(img);
  lgr_db_t *db = NULL;
  char why[1024];
  int rc = 1;
  if (lgr_open(path, &db, why, sizeof why) == 0) {
    lgr_options_t ro = {.top = 10, .recording = 1, .generations = 1};
    lgo_render_opts_t wo = {.top = 10, .source = path};
    lgr_report_t rep;
    if (lgr_build(db, &ro, &rep, why, sizeof why) == 0) {
      lgo_render_text(devnull, &rep, &wo);
      lgo_render_json(devnull, &rep, &wo);
      lgo_render_pprof(devnull, &rep, &wo);
      lgo_render_html(devnull, &rep, &wo);
      lgo_render_folded(devnull, &rep, &wo);
      lgo_render_pool_profile(devnull, &rep, &wo);
      lgr_diff_t d; /* `leakguard diff` of the report against itself */
      if (lgr_diff_compare(&rep, &rep, LGR_DIFF_WORSE_RATIO, &d) == 0) {
        lgo_render_opts_t dro = {.source = "a", .base = "a"};
        lgo_render_diff_text(devnull, &d, &dro);
        lgo_render_diff_json(devnull, &d, &dro);
        lgr_diff_free(&d);
      }
      lgr_free(&rep);
      rc = 0;
    }
    lgr_close(db);
  }
  unlink(path);
  return rc;
}
