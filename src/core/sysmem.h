/* SPDX-License-Identifier: MIT */
/*
 * sysmem.h - the memory the system reports: memory cgroups (v2 and v1), processes
 * (/proc/PID/statm, smaps_rollup), /proc/meminfo, PSI, and GPU memory through NVML
 * (loaded with dlopen at run time). Read by the guard, the NVML timeline of `leakguard
 * run` (core/nvml.c), and the memory limit of the calling process (lgsm_memory_*:
 * the collector's limit, the guard's cgroup of `leakguard run`).
 */
#ifndef LG_CORE_SYSMEM_H
#define LG_CORE_SYSMEM_H

#include <stddef.h>
#include <stdint.h>

enum { LGSM_MEM_RSS = 0, LGSM_MEM_PSS = 1 };

typedef struct lgsm_cg_sample {
  uint64_t usage;       /* memory.current / memory.usage_in_bytes */
  uint64_t limit;       /* memory.max / memory.limit_in_bytes; 0 = none */
  uint64_t high;        /* v2 memory.high; 0 = none */
  uint64_t working_set; /* usage - inactive_file */
  uint64_t anon, file;
  uint64_t oom_kill, oom, high_events, max_events;
  double psi_some10, psi_full10; /* < 0: unknown (v1) */
} lgsm_cg_sample_t;

/* 2 for v2, 1 for v1, -errno when dir is not a memory cgroup. */
int lgsm_cgroup_version(const char *dir);
/* Reads one sample. 0 or -errno (-ENOENT when the cgroup is gone). */
int lgsm_cgroup_read(const char *dir, int version, lgsm_cg_sample_t *s);
/* Pids in cgroup.procs into *pids (malloc'd); count or -errno. */
long lgsm_cgroup_pids(const char *dir, int **pids);
/* Parses a PSI file's text: "some avg10=..." / "full avg10=...". 0 or -EINVAL. */
int lgsm_psi_parse(const char *text, double *some10, double *full10);
/* Resident bytes (statm) or PSS (smaps_rollup); -errno when the process is gone. */
int64_t lgsm_proc_mem(int pid, int kind);
/* Memory limit of pid's memory cgroup (v2 memory.max or v1 limit), 0 if none. */
uint64_t lgsm_proc_cgroup_limit(int pid);
/* /proc/meminfo: MemTotal and MemAvailable in bytes. 0 or -errno. */
int lgsm_meminfo(uint64_t *total, uint64_t *avail);

/* NVML (dlopen("libnvidia-ml.so.1")). */
#define LGSM_GPU_MAX 16
typedef struct lgsm_nvml lgsm_nvml_t;
lgsm_nvml_t *lgsm_nvml_open(char *why, size_t whylen); /* NULL: GPU source off, why says */
int lgsm_nvml_count(const lgsm_nvml_t *n);
/* Memory of device i; 0 or -1. */
int lgsm_nvml_mem(lgsm_nvml_t *n, int i, uint64_t *used, uint64_t *total);
/* Calls cb(pid, bytes) for each compute process on device i. */
int lgsm_nvml_procs(lgsm_nvml_t *n, int i, void (*cb)(void *arg, int pid, uint64_t bytes), void *arg);
void lgsm_nvml_close(lgsm_nvml_t *n);

/* The memory limit that applies to processes started by us: the cgroup (v2
 * memory.max, v1 memory.limit_in_bytes) of the calling process if it sets one, else
 * MemTotal. *source receives "cgroup" or "physical". */
uint64_t lgsm_memory_limit(const char **source);
/* Directory of the calling process's memory cgroup when it sets a limit (v2
 * memory.max or v1 memory.limit_in_bytes); 0, or -ENOENT when there is none. */
int lgsm_memory_cgroup(char *out, size_t n);
/* Current usage against that limit: the cgroup's usage, else MemTotal - MemAvailable. */
uint64_t lgsm_memory_usage(void);

/* Memory cgroup directory of pid (v2 "0::/path", or the v1 memory controller) into
 * out: its version (2 or 1), or -ENOENT. */
int lgsm_proc_cgroup_dir(int pid, char *out, size_t n);

#endif
