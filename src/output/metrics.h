/* SPDX-License-Identifier: MIT */
/*
 * metrics.h - the Prometheus exporter (outputs layer).
 *
 * A registry of gauges and counters that any source (the collector's snapshots, the
 * guard, later CUDA/NVML sources) sets; an HTTP endpoint (libmicrohttpd) serves it in
 * the Prometheus text exposition format at /metrics. Cardinality is bounded by the
 * callers (top-K sites, top tags). Thread-safe: sources update from the collector or
 * guard thread while libmicrohttpd serves from its own thread.
 */
#ifndef LG_OUTPUT_METRICS_H
#define LG_OUTPUT_METRICS_H

#include <stddef.h>
#include <stdint.h>

typedef struct lgx_registry lgx_registry_t;

enum lgx_type { LGX_GAUGE = 0, LGX_COUNTER = 1, LGX_HISTOGRAM = 2 };

lgx_registry_t *lgx_new(void);
void lgx_free(lgx_registry_t *r);

/* Declares a metric family (name must follow Prometheus naming, e.g.
 * "leakguard_live_bytes"); help is the # HELP text. Idempotent. 0 or -errno. */
int lgx_declare(lgx_registry_t *r, const char *name, enum lgx_type type, const char *help);

/* Sets (gauge) or sets the cumulative value (counter) of one series. labels is NULL
 * or a flat NULL-terminated array {"key", "value", "key2", "value2", NULL}; values are
 * escaped as the format requires. 0 or -errno. */
int lgx_set(lgx_registry_t *r, const char *name, const char *const *labels, double value);
/* Adds to a counter series. */
int lgx_add(lgx_registry_t *r, const char *name, const char *const *labels, double delta);
/* Sets the series of one histogram (a family declared LGX_HISTOGRAM): counts[0..n) are
 * the observations per bucket (not cumulative), bucket b <= upper[b] for b < n - 1, the
 * last one unbounded (+Inf); sum is the sum of the observations. Renders
 * name_bucket{labels,le} (cumulative), name_sum{labels} and name_count{labels}. At most
 * 64 buckets. 0 or -errno. */
int lgx_set_histogram(lgx_registry_t *r, const char *name, const char *const *labels, const double *upper,
                      const uint64_t *counts, int n, double sum);
/* Removes every series of a family (before re-publishing a top-K set). */
void lgx_clear(lgx_registry_t *r, const char *name);

/* ---- the catalog (output/metrics_catalog.h): leakguard's own metrics, by id */
#include "output/metrics_catalog.h"
typedef struct {
  const char *name;
  enum lgx_type type;
  const char *labels; /* label keys, comma-separated, in order ("" none) */
  const char *help;
} lgx_metric_def_t;
/* The catalog's row for m, NULL for an id outside it. */
const lgx_metric_def_t *lgx_metric(enum lgx_metric m);
/* lgx_declare with the catalog's name, type and help. */
int lgx_declare_m(lgx_registry_t *r, enum lgx_metric m);
/* lgx_set, lgx_add, lgx_clear, lgx_set_histogram of the catalog's metric m; the label
 * keys must be among the catalog's, in its order (-EINVAL otherwise). */
int lgx_set_m(lgx_registry_t *r, enum lgx_metric m, const char *const *labels, double value);
int lgx_add_m(lgx_registry_t *r, enum lgx_metric m, const char *const *labels, double delta);
void lgx_clear_m(lgx_registry_t *r, enum lgx_metric m);
int lgx_set_histogram_m(lgx_registry_t *r, enum lgx_metric m, const char *const *labels, const double *upper,
                        const uint64_t *counts, int n, double sum);

/* Renders the exposition text into a malloc'd string (*len bytes). 0 or -ENOMEM. */
int lgx_render(lgx_registry_t *r, char **out, size_t *len);

/* Starts serving /metrics on addr ("127.0.0.1:9464", "[::1]:9464", ":9464" = loopback
 * too; a non-loopback address only when given explicitly). 0, -EADDRINUSE, -EINVAL. */
typedef struct lgx_server lgx_server_t;
int lgx_serve(lgx_registry_t *r, const char *addr, lgx_server_t **out, char *why, size_t whylen);
void lgx_stop(lgx_server_t *s);

/* Publishes leakguard_live_bytes{space,device} and the CUDA metrics
 * (cuda_memory_allocated_bytes{device}, cuda_context_recreated_total{device},
 * gc_triggered_without_cuda_cleanup_count) from the processes' latest snapshots. */
struct lgm_proc;
void lgx_publish_memory(lgx_registry_t *r, const struct lgm_proc *const *procs, int n);

#endif
