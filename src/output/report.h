/* SPDX-License-Identifier: MIT */
/*
 * report.h - builds the leak report from a leakguard database (and only from it)
 * and prints it as text, JSON (the scripting interface, docs/json.md) or folded
 * stacks.
 */
#ifndef LG_OUTPUT_REPORT_H
#define LG_OUTPUT_REPORT_H

#include <stdint.h>
#include <stdio.h>

#include "analysis/detect.h"
#include "output/store.h"

typedef struct lgr_frame {
  char *function, *file, *module;
  int line, inlined;
  uint64_t ip;
} lgr_frame_t;

typedef struct lgr_site {
  int proc, pid, stack;
  char space[16];
  int64_t live_bytes, live_blocks;
  int64_t peak_live_bytes;    /* highest snapshot value */
  uint64_t alloc_bytes, alloc_blocks;
  double oldest_age_s;        /* NaN when unknown */
  char *holders_json;         /* JSON array of holders from the database, or NULL */
  double time_to_oom_s;       /* NaN when not growing */
  lgd_result_t r;
  lgr_frame_t *frames;        /* allocation site first, machinery trimmed */
  int nframes;
  lgr_frame_t *all_frames;    /* as recorded */
  int nall;
  int device;                 /* GPU ordinal for the device, managed and pinned spaces, else -1 */
  int has_um;                 /* CUPTI Unified Memory counters of a managed site (--cuda-um) */
  int64_t um_cpu_faults, um_gpu_faults, um_bytes_htod, um_bytes_dtoh, um_thrashing;
} lgr_site_t;

/* GPU memory of one process on one device at the end of the recording (docs/cuda.md). */
typedef struct lgr_gpu {
  int proc, pid, device;
  int64_t device_bytes, managed_bytes, pinned_bytes;  /* recorded sites, live at the end */
  int64_t peak_device_bytes;                          /* device + managed, highest snapshot */
  int64_t registered_bytes, pool_reserved_bytes, pool_used_bytes, vmm_mapped_bytes;
  int64_t contexts, contexts_created, contexts_destroyed, contexts_recreated;
  uint64_t total_bytes;                               /* the device's memory, 0 unknown */
  int has_nvml;                                       /* NVML samples for this process */
  uint64_t nvml_used_bytes, nvml_total_bytes;         /* the device, machine-wide */
  int64_t nvml_process_bytes;                         /* this process, per NVML */
  int64_t untracked_bytes;                            /* nvml_process_bytes - device_bytes */
} lgr_gpu_t;

typedef struct lgr_run {
  int proc, pid, ppid, parent_proc;
  char *command, *end_reason, *kind;
  int has_exit, exit_status, has_signal, signal;
  double duration_s;
  int64_t peak_live_bytes, final_live_bytes;
  uint64_t dropped, steps, snapshots, sample_bytes;
  uint64_t limit_bytes, usage_bytes;
  int pattern;                /* lg_pattern_t of live bytes + RSS over time, -1 unknown */
} lgr_run_t;

typedef struct lgr_report {
  lgr_run_t *runs;
  int nruns;
  lgr_site_t *suspects;       /* ranked: fastest growth first */
  int nsuspects;
  lgr_site_t *others;         /* largest non-leaking sites, for context */
  int nothers;
  char *limit_source;
  lgr_gpu_t *gpus;            /* per process and device that used CUDA */
  int ngpus;
  char **cuda_notes;          /* driver entry points passed through untracked */
  int ncuda_notes;
  int torch_cuda;             /* a process loaded PyTorch's CUDA libraries */
  char *nvml_status;          /* "NVML: ..." when the GPU timeline could not be recorded, or NULL */
  char *um_json;              /* JSON array: CUPTI Unified Memory counters per managed site, or NULL */
} lgr_report_t;

typedef struct lgr_options {
  int top;                    /* suspects to print, default 10 */
  int native;                 /* 1: keep every frame (no trimming of machinery) */
  double min_growth_bytes;
} lgr_options_t;

/* Builds the report. 0 or -errno (why gets a one-line reason). */
int lgr_build(lgst_t *db, const lgr_options_t *o, lgr_report_t *out, char *why, size_t whylen);
void lgr_free(lgr_report_t *r);

void lgr_print_text(FILE *f, const lgr_report_t *r, const lgr_options_t *o);
int lgr_print_json(FILE *f, const lgr_report_t *r, const lgr_options_t *o);
/* Folded stacks ("root;...;leaf bytes"), weighted by live bytes at the end. */
int lgr_print_folded(FILE *f, lgst_t *db);

/* 1 when a frame is allocator machinery (malloc family, operator new, C++ standard
 * library internals, leakguard itself) and not the allocation site. */
int lgr_is_machinery(const char *function, const char *file, const char *module);

#endif
