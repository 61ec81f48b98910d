/* SPDX-License-Identifier: MIT */
/*
 * metrics_catalog.h - every Prometheus metric leakguard publishes, in one table (outputs
 * layer): id, name, type, label keys (in the order callers pass them; a series may
 * leave trailing or optional ones out), help text. The collector's findings
 * (collector/findings.c), the memory gauges (output/metrics.c) and the guard engine
 * (guard/engine.c) name metrics by id only (lgx_declare_m, lgx_set_m: metrics.h), so a
 * name, its type and its help are written once, and a series with a label key the table
 * does not list is refused. docs/metrics.md lists the same rows: unit_test_metrics
 * checks name, type and labels against it.
 *
 * Names are Prometheus's conventions (`_bytes`, `_seconds`, `_total` for counters),
 * except the three CUDA metrics, whose names are the field guide's, verbatim
 * (docs/cuda.md).
 */
#ifndef LG_OUTPUT_METRICS_CATALOG_H
#define LG_OUTPUT_METRICS_CATALOG_H

/* X(ID, name, type, "label,keys", help) */
#define LGX_CATALOG(X)                                                                                                 \
  /* the recorder: the collector's live analysis (collector/findings.c) */                                             \
  X(LIVE_BYTES, "leakguard_live_bytes", GAUGE, "space,device",                                                         \
    "Live bytes recorded in the watched processes, by memory space (and GPU for device, managed, pinned)")             \
  X(CUDA_ALLOCATED, "cuda_memory_allocated_bytes", GAUGE, "device",                                                    \
    "CUDA device memory allocated and not freed, per GPU (recorded at the CUDA driver API)")                           \
  X(CUDA_CONTEXT_RECREATED, "cuda_context_recreated_total", COUNTER, "device",                                         \
    "CUDA contexts created for a GPU after a context of that GPU was destroyed")                                       \
  X(GC_WITHOUT_CUDA_CLEANUP, "gc_triggered_without_cuda_cleanup_count", COUNTER, "",                                   \
    "Python gc collections that freed objects holding CUDA memory while the CUDA allocator returned none")             \
  X(RSS_BYTES, "leakguard_rss_bytes", GAUGE, "", "Resident memory of the recorded processes")                          \
  X(LEAK_SUSPECTS, "leakguard_leak_suspects", GAUGE, "", "Allocation sites whose live bytes keep growing")             \
  X(SITE_LIVE_BYTES, "leakguard_site_live_bytes", GAUGE, "site,pid",                                                   \
    "Live bytes of the fastest-growing sites (top 10)")                                                                \
  X(SITE_GROWTH, "leakguard_site_growth_bytes_per_second", GAUGE, "site,pid",                                          \
    "Growth of the fastest-growing sites (top 10)")                                                                    \
  X(TIME_TO_OOM, "leakguard_time_to_oom_seconds", GAUGE, "source",                                                     \
    "Projected seconds until the source reaches its limit (+Inf: not growing); source=recorder: the recorded "         \
    "processes against the memory limit, else a guard source")                                                         \
  X(DROPPED_RECORDS, "leakguard_dropped_records_total", COUNTER, "", "Allocations the recorder could not attribute")   \
  X(STEPS, "leakguard_steps_total", COUNTER, "", "Step markers (leakguard_step) seen")                                 \
  X(TAG_LIVE_BYTES, "leakguard_tag_live_bytes", GAUGE, "tag,pid", "Live bytes per request tag (top 10 tags)")          \
  X(TAG_PEAK_BYTES, "leakguard_tag_peak_bytes", GAUGE, "tag,pid", "Peak live bytes per request tag (top 10 tags)")     \
  X(ISOLATED_REQUESTS, "leakguard_isolated_requests_total", COUNTER, "outcome",                                        \
    "Isolated calls (lg_isolate_call) by outcome")                                                                     \
  X(ISOLATED_PEAK_RSS, "leakguard_isolated_request_peak_rss_bytes", HISTOGRAM, "",                                     \
    "Peak memory growth of the isolated calls' children, bytes")                                                       \
  /* the guard (guard/engine.c) */                                                                                     \
  X(GUARD_LEVEL, "leakguard_guard_level", GAUGE, "", "Guard level: 0 normal, 1 warn, 2 breaker, 3 emergency")          \
  X(GUARD_SOURCE_LEVEL, "leakguard_guard_source_level", GAUGE, "source", "Level of each watched source")               \
  X(GUARD_ACTIONS, "leakguard_guard_actions_total", COUNTER, "action",                                                 \
    "Guard actions taken (or logged in dry-run), by action")                                                           \
  X(GUARD_LEVEL_CHANGES, "leakguard_guard_level_changes_total", COUNTER, "", "Guard level changes")                    \
  X(GUARD_WATCHED, "leakguard_guard_watched_processes", GAUGE, "", "Processes in the guard's watched set")             \
  X(CGROUP_MEMORY, "leakguard_cgroup_memory_bytes", GAUGE, "cgroup,kind", "Memory cgroup values, by kind")             \
  X(CGROUP_OOM_KILLS, "leakguard_cgroup_oom_kills_total", COUNTER, "cgroup",                                           \
    "OOM kills in the cgroup since the guard started watching")                                                        \
  X(MEMORY_PRESSURE, "leakguard_memory_pressure_avg10", GAUGE, "scope,kind",                                           \
    "PSI memory pressure (percent of time stalled, 10s average)")                                                      \
  X(GPU_USED, "leakguard_gpu_memory_used_bytes", GAUGE, "device,source",                                               \
    "GPU memory in use, per device (NVML; without it, what the recorder saw)")                                         \
  X(GPU_TOTAL, "leakguard_gpu_memory_total_bytes", GAUGE, "device,source", "GPU memory, per device")

enum lgx_metric {
#define LGX_CATALOG_ID(id, name, type, labels, help) LGX_##id,
  LGX_CATALOG(LGX_CATALOG_ID)
#undef LGX_CATALOG_ID
      LGX_NMETRICS
};

#endif
