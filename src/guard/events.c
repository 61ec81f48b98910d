/* SPDX-License-Identifier: MIT */
/*
 * events.c - the guard's JSON-lines event log (docs/guard.md): each event is one cJSON
 * object, {"ts":...,"event":...} and its fields, printed unformatted as one line and
 * flushed. Separate so that every file of the guard writes events the same way.
 */
#include "guard/guard.h"
#include "guard/guard_impl.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdlib.h>
#include <time.h>

#include "core/util.h"

cJSON *lgg_jbegin(const char *event) {
  cJSON *j = cJSON_CreateObject();
  uint64_t w = lgu_wall_ns();
  time_t s = (time_t)(w / 1000000000ULL);
  struct tm tm;
  gmtime_r(&s, &tm);
  char ts[40], ms[48];
  strftime(ts, sizeof ts, "%Y-%m-%dT%H:%M:%S", &tm);
  snprintf(ms, sizeof ms, "%s.%03uZ", ts, (unsigned)(w / 1000000ULL % 1000));
  cJSON_AddStringToObject(j, "ts", ms);
  cJSON_AddStringToObject(j, "event", event);
  return j;
}

void lgg_jnum(cJSON *j, const char *key, double v) {
  if (!isfinite(v)) {
    cJSON_AddNullToObject(j, key);
  } else if (v == floor(v) && fabs(v) < 1e15) {
    cJSON_AddNumberToObject(j, key, v);
  } else { /* the 6 significant digits the log has always had */
    char b[32];
    snprintf(b, sizeof b, "%.6g", v);
    cJSON_AddNumberToObject(j, key, strtod(b, NULL));
  }
}

void lgg_jend(lgg_guard_t *g, cJSON *j) {
  char *line = g->log && j ? cJSON_PrintUnformatted(j) : NULL;
  cJSON_Delete(j);
  if (!line) return;
  fprintf(g->log, "%s\n", line);
  fflush(g->log);
  free(line);
}
