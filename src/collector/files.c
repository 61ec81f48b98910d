/* SPDX-License-Identifier: MIT */
/*
 * files.c - the files that recorded processes write into the collector's private directory
 * (collector/collector.h): holders of explanations and labels, ingested into the store.
 */
#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "collector/collector_impl.h"

/* Names are matched whole (LG_FILE_*, core/region.h): "%n" is reached only when the
 * pattern's text after the last number matched too, and nothing may follow it, so a
 * temporary or other file that merely begins like one is not read (or removed). */

/* Stores labels-PID.json files ({"rank": 1, "world_size": 2, ...}) that the Python
 * module writes once a process knows its rank (torch.distributed initialised). */
static void ingest_labels(lgc_collector_t *c, const char *name) {
  int pid = 0, end = 0;
  if (sscanf(name, LG_FILE_LABELS "%n", &pid, &end) != 1 || !end || name[end]) return;
  char path[512];
  snprintf(path, sizeof path, "%s/%s", c->dir, name);
  char buf[4096];
  long k = lgu_read_file(path, buf, sizeof buf);
  unlink(path);
  lgc_proc_t *p = lgc_find_proc(c, pid, 0);
  cJSON *root = k > 0 ? cJSON_Parse(buf) : NULL;
  if (p && !root && k > 0) lgu_err("pid %d's labels (%s) could not be read: out of memory or not JSON", pid, name);
  if (p && root && lgc_db_ok(c)) {
    static const char *const keys[] = {"rank", "local_rank", "world_size"};
    lgc_db_begin(c);
    for (size_t i = 0; i < sizeof keys / sizeof *keys && lgc_db_ok(c); i++) {
      const cJSON *v = cJSON_GetObjectItem(root, keys[i]);
      if (!cJSON_IsNumber(v) || v->valuedouble < 0 || v->valuedouble > (1 << 24)) continue;
      char num[24];
      snprintf(num, sizeof num, "%d", (int)v->valuedouble);
      lgc_db_write(c, lgst_label(c->db, p->m.proc, keys[i], num));
    }
    if (lgc_db_ok(c)) lgc_db_write(c, lgst_proc(c->db, &p->m));
  }
  cJSON_Delete(root);
}

/* An unrecorded-PID-PPID file (region.h): a process whose hello we did not take in
 * time runs unrecorded. Counted on its parent's image, and said in a note (notes
 * table) that the report prints with the parent: 1 when name was one. */
static int ingest_unrecorded(lgc_collector_t *c, const char *name) {
  int pid = 0, ppid = 0, end = 0;
  if (sscanf(name, LG_FILE_UNRECORDED "%n", &pid, &ppid, &end) != 2 || !end || name[end]) return 0;
  char path[512];
  snprintf(path, sizeof path, "%s/%s", c->dir, name);
  unlink(path);
  lgc_proc_t *p = lgc_find_proc(c, ppid, 0);
  int n = p ? ++p->unrecorded_children : ++c->unrecorded_orphans;
  char note[256], whose[64];
  if (p) snprintf(whose, sizeof whose, "started by pid %d", ppid);
  else snprintf(whose, sizeof whose, "whose parents were not recorded");
  snprintf(note, sizeof note,
           "%d process%s %s ran unrecorded: the collector did not take %s connection within %d ms "
           "(it was stopped, paused or swamped), and the program went on without waiting",
           n, n == 1 ? "" : "es", whose, n == 1 ? "its" : "their", LG_HELLO_WAIT_MS);
  if (lgc_db_ok(c)) {
    lgc_db_begin(c);
    lgc_db_write(c, lgst_note(c->db, p ? p->m.proc : 0, "unrecorded", note));
  }
  return 1;
}

/* A number of doc, or def when it has none (or an absurd one). */
static double num_or(const cJSON *doc, const char *key, double def) {
  const cJSON *v = cJSON_GetObjectItem(doc, key);
  return cJSON_IsNumber(v) && v->valuedouble >= 0 && v->valuedouble < 9e15 ? v->valuedouble : def;
}

/* The explains row of an answer (docs/schema.md); it ends the wait for the request it
 * names (findings.c). */
static void store_explain(lgc_collector_t *c, lgc_proc_t *p, int explain, int64_t step, const cJSON *doc) {
  const cJSON *why = cJSON_GetObjectItem(doc, "why"), *err = cJSON_GetObjectItem(doc, "error");
  const cJSON *holders = cJSON_GetObjectItem(doc, "holders");
  int64_t request = (int64_t)num_or(doc, "request", 0);
  if (request && request == p->explain_pending) {
    p->explain_pending = 0;
    free(p->explain_req);
    p->explain_req = NULL;
  }
  lgst_explain_t e = {explain,
                      request,
                      lgu_now_ns(),
                      step,
                      cJSON_IsString(err) ? "failed" : "answered",
                      cJSON_IsString(why) ? why->valuestring : NULL,
                      num_or(doc, "elapsed_s", 0),
                      (int64_t)num_or(doc, "objects_scanned", 0),
                      cJSON_IsTrue(cJSON_GetObjectItem(doc, "truncated")),
                      cJSON_GetArraySize(holders),
                      cJSON_IsString(err) ? err->valuestring : NULL};
  lgc_db_write(c, lgst_explain(c->db, p->m.proc, &e));
}

/* Stores the holders-PID-N.json files that explains in the targets wrote. */
void lgc_ingest_holders(lgc_collector_t *c) {
  DIR *d = opendir(c->dir);
  if (!d) return;
  struct dirent *de;
  while ((de = readdir(d))) {
    int pid = 0, n = 0, end = 0;
    if (ingest_unrecorded(c, de->d_name)) continue;
    ingest_labels(c, de->d_name);
    if (sscanf(de->d_name, LG_FILE_HOLDERS "%n", &pid, &n, &end) != 2 || !end || de->d_name[end]) continue;
    char path[512];
    snprintf(path, sizeof path, "%s/%s", c->dir, de->d_name);
    FILE *f = fopen(path, "r");
    if (!f) continue;
    char *buf = NULL;
    size_t len = 0;
    FILE *mem = open_memstream(&buf, &len);
    char chunk[65536];
    size_t k;
    while (mem && (k = fread(chunk, 1, sizeof chunk, f)) > 0) fwrite(chunk, 1, k, mem);
    fclose(f);
    if (mem) fclose(mem);
    unlink(path);
    cJSON *root = buf ? cJSON_Parse(buf) : NULL;
    free(buf);
    lgc_proc_t *p = lgc_find_proc(c, pid, 0);
    lgc_db_begin(c);
    if (!root && p && lgc_db_ok(c))
      lgu_err("pid %d's holders (%s) could not be read: out of memory or not JSON", pid, de->d_name);
    if (!root || !p || !lgc_db_ok(c)) {
      cJSON_Delete(root);
      continue;
    }
    int explain = ++c->explains;
    int64_t step = (int64_t)cJSON_GetNumberValue(cJSON_GetObjectItem(root, "step"));
    store_explain(c, p, explain, step, root);
    cJSON *h;
    cJSON_ArrayForEach(h, cJSON_GetObjectItem(root, "holders")) {
      cJSON *chain = cJSON_GetObjectItem(h, "chain"), *detail = cJSON_GetObjectItem(h, "detail");
      const cJSON *kind = cJSON_GetObjectItem(h, "kind");
      char *cj = chain ? cJSON_PrintUnformatted(chain) : NULL, *dj = detail ? cJSON_PrintUnformatted(detail) : NULL;
      double stack = cJSON_GetNumberValue(cJSON_GetObjectItem(h, "stack"));
      /* the line that keeps them: its stack is stored even if its site stays small */
      double kept = cJSON_GetNumberValue(cJSON_GetObjectItem(cJSON_GetObjectItem(detail, "kept_at"), "stack"));
      if (kept >= 2 && kept < 4294967296.0) lgc_want_stack(c, p, (uint32_t)kept);
      if ((chain && !cj) || (detail && !dj)) lgc_db_write(c, -ENOMEM); /* a holder would be left out */
      if (cj && stack >= 1 && lgc_db_ok(c)) {
        lgst_holder_t row = {(uint32_t)stack,
                             explain,
                             step,
                             cJSON_IsString(kind) ? kind->valuestring : "object",
                             cj,
                             (int64_t)cJSON_GetNumberValue(cJSON_GetObjectItem(h, "objects")),
                             (int64_t)cJSON_GetNumberValue(cJSON_GetObjectItem(h, "bytes")),
                             dj};
        lgc_db_write(c, lgst_holder(c->db, p->m.proc, &row));
      }
      free(cj);
      free(dj);
    }
    cJSON_Delete(root);
  }
  closedir(d);
}

void lgc_remove_dir_files(const char *dir) {
  DIR *d = opendir(dir);
  if (!d) return;
  struct dirent *de;
  while ((de = readdir(d))) {
    if (de->d_name[0] == '.' && (!de->d_name[1] || (de->d_name[1] == '.' && !de->d_name[2]))) continue;
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, de->d_name);
    unlink(path);
  }
  closedir(d);
}
