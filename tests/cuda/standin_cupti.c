/* SPDX-License-Identifier: MIT */
/*
 * standin_cupti.c - a stand-in CUPTI (libcupti.so) for the --cuda-um tests only.
 *
 * Implements the activity API calls the recorder makes for Unified Memory counters
 * (configure, register buffer callbacks, enable, next record, flush, flush period,
 * result strings) with the record layout of cupti_activity.h
 * (CUpti_ActivityUnifiedMemoryCounter3). The test program makes records with
 * standin_cupti_record(address, counter kind, value); they are delivered through the
 * registered callbacks on cuptiActivityFlushAll, as CUPTI does. LG_STANDIN_CUPTI_BUSY=1
 * answers cuptiActivityEnable with CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED
 * (another profiler holds CUPTI); LG_STANDIN_CUPTI_NO_UM=1 answers the counter
 * configuration with CUPTI_ERROR_UM_PROFILING_NOT_SUPPORTED.
 */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define EXPORT __attribute__((visibility("default")))

typedef struct __attribute__((packed, aligned(8))) {
  uint32_t kind, counterKind;
  uint64_t value, start, end, address;
  uint32_t srcId, dstId, streamId, processId, flags, pad;
  uint64_t processors[5];
} um_rec_t;
typedef void (*req_fn)(uint8_t **, size_t *, size_t *);
typedef void (*done_fn)(void *, uint32_t, uint8_t *, size_t, size_t);

static req_fn req;
static done_fn done;
static int enabled;
static uint8_t *buf;
static size_t cap, used;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;

EXPORT int cuptiActivityConfigureUnifiedMemoryCounter(void *config, uint32_t count);
EXPORT int cuptiActivityRegisterCallbacks(req_fn r, done_fn d);
EXPORT int cuptiActivityEnable(int kind);
EXPORT int cuptiActivityGetNextRecord(uint8_t *b, size_t valid, void **rec);
EXPORT int cuptiActivityFlushAll(uint32_t flag);
EXPORT int cuptiActivityFlushPeriod(uint32_t ms);
EXPORT int cuptiGetResultString(int rc, const char **s);
EXPORT int standin_cupti_record(uint64_t address, uint32_t counter_kind, uint64_t value);

int cuptiActivityConfigureUnifiedMemoryCounter(void *config, uint32_t count) {
  (void)config;
  const char *e = getenv("LG_STANDIN_CUPTI_NO_UM");
  if (e && e[0] == '1') return 28; /* CUPTI_ERROR_UM_PROFILING_NOT_SUPPORTED */
  return count ? 0 : 1;
}
int cuptiActivityRegisterCallbacks(req_fn r, done_fn d) {
  req = r;
  done = d;
  return r && d ? 0 : 1;
}
int cuptiActivityEnable(int kind) {
  const char *e = getenv("LG_STANDIN_CUPTI_BUSY");
  if (e && e[0] == '1') return 39; /* CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED */
  enabled = kind == 25;
  return enabled ? 0 : 1;
}
int cuptiActivityGetNextRecord(uint8_t *b, size_t valid, void **rec) {
  uint8_t *next = *rec ? (uint8_t *)*rec + sizeof(um_rec_t) : b;
  if (next + sizeof(um_rec_t) > b + valid) return 12; /* CUPTI_ERROR_MAX_LIMIT_REACHED */
  *rec = next;
  return 0;
}
int cuptiActivityFlushAll(uint32_t flag) {
  (void)flag;
  pthread_mutex_lock(&mu);
  uint8_t *b = buf;
  size_t c = cap, u = used;
  buf = NULL;
  cap = used = 0;
  pthread_mutex_unlock(&mu);
  if (b && done) done(NULL, 0, b, c, u);
  return 0;
}
int cuptiActivityFlushPeriod(uint32_t ms) {
  (void)ms;
  return 0;
}
int cuptiGetResultString(int rc, const char **s) {
  *s = rc == 28 ? "CUPTI_ERROR_UM_PROFILING_NOT_SUPPORTED"
       : rc == 39 ? "CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED"
                  : "CUPTI_ERROR_UNKNOWN";
  return 0;
}

/* A record as CUPTI would make it for a Unified Memory event. 0, or -1 when the
 * counters are not enabled. */
int standin_cupti_record(uint64_t address, uint32_t counter_kind, uint64_t value) {
  if (!enabled || !req) return -1;
  pthread_mutex_lock(&mu);
  if (!buf) {
    size_t max;
    req(&buf, &cap, &max);
    used = 0;
  }
  int rc = -1;
  if (buf && used + sizeof(um_rec_t) <= cap) {
    um_rec_t *r = (um_rec_t *)(buf + used);
    memset(r, 0, sizeof *r);
    r->kind = 25;
    r->counterKind = counter_kind;
    r->value = value;
    r->address = address;
    used += sizeof *r;
    rc = 0;
  }
  pthread_mutex_unlock(&mu);
  return rc;
}
