/* SPDX-License-Identifier: MIT */
/*
 * report.h - the findings: the leak report's model, built from a leakguard database
 * (and only from it: findings/reader.h), knowing nothing of formats. The renderers
 * (output/render.h: text, JSON, HTML, pprof, folded, pool profile) draw it.
 *
 * The units of the report, from the bottom up (docs/detection.md):
 *  - a *stack*: one recorded call stack (what the recorder interns);
 *  - a *site*: the stacks of one process that share an allocation site (the innermost
 *    Python line when there is one, else the innermost native frame that is not
 *    allocator machinery) and a memory space, merged: their live bytes are summed
 *    before the detector looks at them, so a leak spread over the many native paths
 *    of one line is one suspect, and one strong signal;
 *  - a *suspect*: a site whose live memory keeps growing;
 *  - a *leak*: one cause. Suspects held by the same root object (Python holders), or
 *    without holders allocated by the same function, form one leak; growth spread
 *    over many sites, none of which passes alone, is found as a group of sites under a
 *    common caller and forms a leak of its own. A leak must be significant: growth
 *    that is tiny against the process, or a handful of first-use blocks, is *minor
 *    growth*, reported apart (its suspects too) and never a leak.
 */
#ifndef LG_FINDINGS_REPORT_H
#define LG_FINDINGS_REPORT_H

#include <stdint.h>
#include <stdio.h>

#include "analysis/detect.h"
#include "findings/reader.h"

typedef struct lgr_frame {
  char *function, *file, *module;
  int line, inlined;
  uint64_t ip;
} lgr_frame_t;

/* One recorded stack merged into a site. */
typedef struct lgr_stackref {
  int stack;
  int64_t live_bytes; /* at the end */
  int64_t peak_live_bytes;
} lgr_stackref_t;

/* The lifetime of a site's blocks (docs/lifetimes.md), from the recorded series by
 * Little's law: mean lifetime = mean live blocks / blocks allocated per second. A block
 * still live at the end counts its age so far. */
enum { LGR_GEN_YOUNG = 0, LGR_GEN_MIDDLE = 1, LGR_GEN_OLD = 2 };
#define LGR_YOUNG_S 0.1 /* young: a mean lifetime below liblgpool's default young window */
#define LGR_AGES 16     /* = LG_AGES (core/region.h) */
#define LGR_AGE_LE_S(b) (0.1 * (double)(1ULL << (b))) /* bucket b: lifetimes < this */
#define LGR_AGE_LE_STEPS(b) ((double)(1ULL << (b)))   /* in steps: bucket 0 = the birth step */
typedef struct lgr_life {
  int gen;           /* LGR_GEN_*, -1: unknown (nothing allocated, or no snapshot) */
  double mean_s;     /* mean lifetime, NaN unknown; 0 with below_s > 0: never live at a snapshot */
  double below_s;    /* > 0: the mean lifetime is below this (what the snapshots can resolve) */
  double mean_steps; /* mean_s in steps (the run's mean step time), NaN without steps */
  double kept;       /* fraction of the blocks allocated still live at the end, 0..1 */
  /* The distribution, from the blocks freed by age (the lifetimes table: 100-ms ticks,
   * log2 buckets; docs/lifetimes.md). nfreed 0: none recorded (an older database, a
   * process whose counters wrapped, nothing freed). freed[b]: blocks that lived less
   * than LGR_AGE_LE_S(b) (and at least half of it, b >= 2). Percentiles over every
   * block allocated, the kept ones included: the upper bound of the bucket holding it,
   * or +INFINITY when it is a kept block. */
  double freed[LGR_AGES];
  double nfreed;
  double p50_le_s, p90_le_s, p99_le_s;
  /* The same in steps (the step_lifetimes table, for a process that marked steps):
   * sfreed[b] lived less than LGR_AGE_LE_STEPS(b) steps; nsfreed 0: none. Percentiles
   * over the blocks freed after the first step and the kept ones. */
  double sfreed[LGR_AGES];
  double nsfreed;
  double p50_le_steps, p90_le_steps, p99_le_steps;
} lgr_life_t;
const char *lgr_gen_name(int gen); /* "young", "middle", "old", "unknown" */

/* ------------------------------------------------------------------ holders
 * What keeps a site's memory alive: the live Python objects the module's explanation
 * found owning it (docs/python.md, "Holders"; holders.c reads them). */

/* One detail of a holder as the Python module described it: a named value (a number,
 * a text, a truth value, nothing) or a group or list of details, in the module's order.
 * Free-form: the report interprets only `bound` and `kept_at` (below); the formats that
 * list every detail show them all. */
enum {
  LGR_DETAIL_NULL,
  LGR_DETAIL_FALSE,
  LGR_DETAIL_TRUE,
  LGR_DETAIL_NUMBER,
  LGR_DETAIL_TEXT,
  LGR_DETAIL_LIST,  /* items, unnamed */
  LGR_DETAIL_GROUP, /* items, each named */
};
typedef struct lgr_detail {
  char *name; /* in a group; NULL in a list (and at the top) */
  int type;   /* LGR_DETAIL_* */
  double number;
  char *text;
  struct lgr_detail *items;
  int nitems;
} lgr_detail_t;

/* Where the reference that keeps a holder's objects is made: the module's kept_at
 * (the stack of the holder's own growth) resolved to the program's own line. */
typedef struct lgr_kept_at {
  char *file; /* NULL: not known (no such detail, or no line of the program's) */
  char *function;
  char *container; /* "list", "dict", "name" */
  char *source;    /* the line's text, or NULL */
  int line;
} lgr_kept_at_t;

typedef struct lgr_holder {
  char **chain; /* the reference chain, root first ("__main__.history (list)", "[*]"...);
                 * an element that is not text is NULL */
  int nchain;
  char *kind;           /* "tensor", "autograd-graph", "object"... */
  double objects;       /* summed over the stacks of the site */
  double bytes;         /* idem */
  lgr_detail_t *detail; /* the module's details (an LGR_DETAIL_GROUP), or NULL */
  lgr_kept_at_t kept_at;
} lgr_holder_t;

/* A bounded container at its bound (an lru_cache at its maxsize, a deque at its
 * maxlen, a dict whose length stopped growing: the holders' detail "bound", issue #10). */
typedef struct lgr_bound {
  char *container; /* "lru_cache", "deque", "dict"; NULL when the module named none */
  double maxsize;  /* NaN when not given */
  double size;     /* NaN when not given */
} lgr_bound_t;

typedef struct lgr_site {
  int proc, pid;
  int stack; /* the merged stack that held the most live bytes (its frames are shown) */
  char space[16];
  int64_t live_bytes, live_blocks;
  int64_t peak_live_bytes; /* highest value of the merged series */
  int64_t blocks_gained;   /* live blocks at the end minus at the start of the growth */
  int64_t held_bytes;      /* live bytes at the end of the analysed part (before an exit's teardown) */
  uint64_t alloc_bytes, alloc_blocks;
  double oldest_age_s;   /* NaN when unknown */
  lgr_holder_t *holders; /* the five holding the most bytes, most first (holders.c) */
  int nholders;
  double time_to_oom_s;    /* NaN when not growing */
  double detected_after_s; /* first flag during the run (s after the process started); NaN: none */
  double growth_bytes;     /* growth over the growing part (last floor - first floor) */
  double strength;         /* the rank key of lgr_rank_sites (build.c), bytes/s */
  lgr_life_t life;
  lgd_result_t r;
  lgr_frame_t *frames; /* innermost first: native allocation frames, then the Python line, then its callers */
  int nframes;
  int site_frame;          /* index in frames of the allocation site */
  int lib_frame;           /* 1 + index in frames of the innermost Python line when that is library code
                            * and the site is the program's own line further out (lgr_own_frame), or of
                            * the innermost native frame that is not machinery when the site is the
                            * program's own caller further out (a system library's frame, the
                            * program's allocation wrapper: lgr_headline); 0: none */
  lgr_frame_t *all_frames; /* as recorded */
  int nall;
  lgr_stackref_t *stacks; /* the merged stacks, highest peak first */
  int nstacks;
  int spread_sites;     /* > 0: a group of that many sites under a common caller (frames: the caller's path) */
  char *source;         /* text of the site's source line, or NULL */
  int leak;             /* index into lgr_report_t.leaks, -1 when none */
  double *series;       /* suspects: live bytes at each snapshot of its run (lgr_run_t.snap_t) */
  lgr_bound_t *bounded; /* held through a full bounded container, so a plateau; NULL: not */
  int startup;          /* 1: grew under a module import (lgr_is_import_frame): start-up, not a leak */
  int device;           /* GPU ordinal for the device, managed and pinned spaces, else -1 */
  int has_um;           /* CUPTI Unified Memory counters of a managed site (--cuda-um) */
  int64_t um_cpu_faults, um_gpu_faults, um_bytes_htod, um_bytes_dtoh, um_thrashing;
  int64_t peak_proc_bytes; /* lgr_report_t.at_peak: live bytes at its process's peak snapshot */
  int unjudged;            /* lgr_report_t.at_peak: freed by the end and not among the others (no shape) */
  /* Grew then released (docs/detection.md, rule 7): a site that does not grow whose
   * live bytes rose from released_first_bytes to released_peak_bytes (first reached
   * released_peak_s after its process started) and fell back by more than half of that
   * rise, to released_end_bytes at the end of the analysed part (before an exit's
   * teardown); never a leak. 0: not one (lgr_released). */
  int released;
  int64_t released_first_bytes, released_peak_bytes, released_end_bytes;
  double released_peak_s;
} lgr_site_t;

/* GPU memory of one process on one device at the end of the recording (docs/cuda.md). */
typedef struct lgr_gpu {
  int proc, pid, device;
  int64_t device_bytes, managed_bytes, pinned_bytes; /* recorded sites, live at the end */
  int64_t peak_device_bytes;                         /* device + managed, highest snapshot */
  int64_t registered_bytes, pool_reserved_bytes, pool_used_bytes, vmm_mapped_bytes;
  int64_t contexts, contexts_created, contexts_destroyed, contexts_recreated;
  uint64_t total_bytes;                                /* the device's memory, 0 unknown */
  int has_nvml;                                        /* NVML samples for this process */
  uint64_t nvml_used_bytes, nvml_total_bytes;          /* the device, machine-wide */
  int64_t nvml_process_bytes;                          /* this process, per NVML */
  int64_t untracked_bytes;                             /* nvml_process_bytes - device_bytes */
  int has_torch;                                       /* torch.cuda figures (the Python module) */
  int64_t torch_allocated_bytes, torch_reserved_bytes; /* the last ones */
  int64_t torch_peak_reserved_bytes;                   /* the highest reserve seen */
} lgr_gpu_t;

/* One cause. */
typedef struct lgr_leak {
  int *suspects; /* indexes into lgr_report_t.suspects, the largest grower first */
  int nsuspects;
  char *by;             /* what binds them: "holder", "function", "site" or "spread" */
  lgr_holder_t *holder; /* the shared top holder (its main suspect's first, without details), or NULL */
  char *no_holder;      /* Python code without a holder: why none was named (explains), or NULL */
  char *fix;            /* the fix in one line (fix.c, docs/fixes.md), or NULL */
  int proc, pid, rank;  /* rank: the process's RANK label, -1 when none */
  int64_t live_bytes;   /* held by its suspects when they last grew (before an exit's teardown) */
  double growth_bytes_per_s, growth_bytes_per_step; /* sums over the suspects (NaN: no steps) */
  lg_pattern_t pattern;                             /* of the suspects' summed series */
  double confidence;
  lgd_result_t r;          /* the detector on the suspects' summed series (the main suspect's alone) */
  double detected_after_s; /* earliest flag of its suspects, NaN: found at the end */
  double time_to_oom_s;
} lgr_leak_t;

typedef struct lgr_run {
  int proc, pid, ppid, parent_proc;
  char *command, *end_reason, *kind;
  int has_exit, exit_status, has_signal, signal;
  double duration_s;
  int64_t peak_live_bytes, final_live_bytes;
  uint64_t dropped, steps, snapshots, sample_bytes;
  uint64_t limit_bytes, usage_bytes;
  int pattern;                              /* lg_pattern_t of live bytes + RSS over time, -1 unknown */
  int pattern_nonleak;                      /* the most probable class that is not a leak, -1 unknown */
  double pattern_from_s;                    /* pattern is of the curve from then on (its leaks' window), 0: all of it */
  double *curve_t, *curve_live, *curve_rss; /* the process's curve (before exit), curve_n points */
  size_t curve_n;
  double median_live_bytes;         /* the process's typical size (median of its snapshots) */
  int rank, local_rank, world_size; /* from RANK / LOCAL_RANK / WORLD_SIZE (or MPI's); -1 none */
  char *host;                       /* NULL when not recorded */
  int leaking;                      /* 1 when one of the leaks is in this process */
  double *snap_t, *snap_step;       /* per snapshot seq: seconds since start (NaN: missing), steps */
  int64_t start_ns;
  double exit_begin_s; /* when it began to exit (lg_exiting; s since start), NaN: unknown */
  int64_t nsnap;
  char *notes;                 /* the notes table's lines for it ("\n"-separated), or NULL */
  int attached;                /* recorded by `leakguard attach`: its times count from the attach */
  char *source;                /* merged: the database it came from (its source label), else NULL */
  double gap_from_s, gap_to_s; /* the longest stretch without snapshots, when it is one (NaN: none) */
  int helper;                  /* a short-lived helper, folded into one line (build.c, fold_helpers) */
  /* Lazy start (the recorder's, from the labels lazy, lazy_began_ns, lazy_before_bytes):
   * LGR_LAZY_WAITING, the image never began to record (nothing of it is recorded);
   * LGR_LAZY_BEGAN, it began at lazy_began_s (since start) after lazy_before_bytes
   * allocated unrecorded; 0, recorded from its start. */
  int lazy;
  double lazy_began_s;
  uint64_t lazy_before_bytes;
} lgr_run_t;
enum { LGR_LAZY_WAITING = 1, LGR_LAZY_BEGAN = 2 };

/* CUPTI's Unified Memory counters of one managed allocation site (--cuda-um). */
typedef struct lgr_um {
  int has_pid, pid; /* has_pid 0: its process is not among the runs */
  int stack;
  char *site; /* "function (file:line)", or "(not in a recorded managed block)" */
  double cpu_page_faults, gpu_page_faults, bytes_to_device, bytes_to_host, thrashing;
} lgr_um_t;

/* One line of a liblgpool site profile (docs/pool.md): the generation of the blocks
 * that a native function allocated, measured in this run. */
typedef struct lgr_genrow {
  char *key; /* the function (frames of liblgpool, PyTorch and the CUDA runtime skipped) */
  lgr_life_t life;
  uint64_t alloc_blocks;
} lgr_genrow_t;

/* The lifetime of each stack's site (the HTML site table), sorted by (proc, stack). */
typedef struct lgr_stacklife {
  int proc, stack;
  lgr_life_t life;
} lgr_stacklife_t;

/* ------------------------------------------------------------------ the recording
 * Every stack that held memory, with the frames and modules it names: what the formats
 * that show the whole recording draw (pprof, folded stacks, the HTML page's flame graphs
 * and site table). Read when lgr_options_t.recording is set. */

/* One stored frame location (docs/schema.md, table locations); text columns "" when
 * NULL. */
typedef struct lgr_loc {
  char *function, *file, *module;
  int line, inlined;
  uint64_t ip;
  int proc;    /* the process and location id it is stored under (the recording's */
  int64_t loc; /* locations; the report's own frame cache leaves them 0) */
} lgr_loc_t;

/* A stack's values: live bytes and blocks at the end, allocated bytes and blocks, live
 * bytes at its process's peak snapshot, and its share of its leaking site's growth per
 * second (its live bytes' share of the site's; 0 when the site does not leak). */
enum { LGR_SV_INUSE, LGR_SV_OBJECTS, LGR_SV_ALLOC, LGR_SV_ALLOC_OBJECTS, LGR_SV_PEAK, LGR_SV_GROWTH, LGR_SV_N };
typedef struct lgr_stackval {
  int proc, stack;
  int64_t v[LGR_SV_N];
  char *space; /* "host" when the stack has no row in the stacks table */
  int stored;  /* 1: the stacks table has it; 0: samples of an unknown stack (a damaged database) */
  int *frames; /* indexes into lgr_recording_t.locs, innermost first as stored (a Python */
  int nframes; /* stack: its Python frames, then the native frames under the innermost line) */
  int site;    /* index into frames of the frame its site is named by (as the report's sites:
                * the program's own line or caller, docs/detection.md), -1: no frames */
  int lib;     /* index into frames of the innermost frame passed over to reach it (the
                * site's library_site), -1: none */
} lgr_stackval_t;

typedef struct lgr_module {
  int proc;
  char *path; /* "" for the vdso and other mappings without a file */
  uint64_t start, end;
} lgr_module_t;

typedef struct lgr_recording {
  lgr_stackval_t *stacks; /* every stack that ever held or allocated memory, by (proc, stack) */
  size_t nstacks;
  lgr_loc_t *locs; /* every location, by (proc, loc) */
  size_t nlocs;
  lgr_module_t *modules; /* by (proc, start) */
  size_t nmodules;
} lgr_recording_t;

typedef struct lgr_report {
  lgr_run_t *runs;
  int nruns;
  int main_run;      /* the index of the run that did the work (the largest peak): the report's name */
  int nhelpers;      /* runs folded as short-lived helpers (lgr_run_t.helper) */
  lgr_leak_t *leaks; /* ranked as their main suspects */
  int nleaks;
  lgr_site_t *suspects; /* ranked: strongest first (lgr_rank_sites) */
  int nsuspects;
  lgr_site_t *minor; /* minor growth: growing, but not significantly (never a leak) */
  int nminor;
  lgr_site_t *others; /* largest non-leaking sites at the end, for context */
  int nothers;
  lgr_site_t *at_peak; /* largest non-growing sites at their process's peak snapshot (peak.c) */
  int nat_peak;
  int nstartup;          /* sites that grew only under module imports (start-up, never a leak) */
  double startup_growth; /* their growth, bytes */
  char *limit_source;
  uint64_t import_sample; /* Python imports sampled every this many bytes (0: recorded in full, or no Python) */
  int attached;           /* a process was recorded by `leakguard attach` (lgr_run_t.attached) */
  int live;               /* a recording was still writing the database (lgr_is_live): running
                           * processes are still running, not stopped */
  lgr_gpu_t *gpus;        /* per process and device that used CUDA */
  int ngpus;
  char **cuda_notes; /* driver entry points passed through untracked */
  int ncuda_notes;
  int torch_cuda;    /* a process loaded PyTorch's CUDA libraries */
  char *nvml_status; /* "NVML: ..." when the GPU timeline could not be recorded, or NULL */
  lgr_um_t *um;      /* CUPTI Unified Memory counters per managed site, most page faults first */
  int num;
  lgr_genrow_t *gens; /* lgr_options_t.generations: one row per native site function */
  int ngens;
  lgr_stacklife_t *slife; /* every analysed stack's site lifetime, sorted by (proc, stack) */
  size_t nslife, cslife;
  lgr_recording_t rec; /* lgr_options_t.recording */
} lgr_report_t;

typedef struct lgr_options {
  int top;    /* suspects to print, default 10 */
  int native; /* 1: keep every frame (no trimming of machinery) */
  double min_growth_bytes;
  int generations;        /* 1: fill lgr_report_t.gens (every site's frames are read: slower) */
  int recording;          /* 1: fill lgr_report_t.rec (every stack, location and module) */
  const char *const *own; /* --own: paths whose files and modules are the program's own code */
  int nown;               /* (besides those the recording's meta `own` names) */
} lgr_options_t;

/* Builds the report. 0 or -errno (why gets a one-line reason). */
int lgr_build(lgr_db_t *db, const lgr_options_t *o, lgr_report_t *out, char *why, size_t whylen);
void lgr_free(lgr_report_t *r);

/* The lifetime of the site of a stack (lgr_report_t.slife), or NULL. */
const lgr_life_t *lgr_stack_life(const lgr_report_t *r, int proc, int stack);
/* 1 for the module name of a Python frame. */
int lgr_is_python_module(const char *m);
/* lgr_frame_at_fn over an array of lgr_loc_t pointers. */
void lgr_loc_at(const void *locs, int i, const char **function, const char **file, const char **module);
/* The deepest stack the report reads. */
#define LGR_MAX_FRAMES 2048

/* 1 when a frame is allocator machinery (malloc family, operator new, C++ standard
 * library internals, leakguard itself) and not the allocation site. */
int lgr_is_machinery(const char *function, const char *file, const char *module);

/* Reads frame i of frames (any layout): its function, file and module. */
typedef void (*lgr_frame_at_fn)(const void *frames, int i, const char **function, const char **file,
                                const char **module);
/* The index of the allocation site among n native frames, innermost first: the first
 * frame that is not machinery (lgr_is_machinery), also past the internals of the CUDA
 * runtime up to the runtime API function the program called (cudaMalloc...): those
 * may carry no recognisable name. n - 1 when every frame is machinery; 0 when n <= 0. */
int lgr_site_frame(const void *frames, int n, lgr_frame_at_fn at);
/* 1 for a Python file of the interpreter's library or an installed package, unless it
 * is under an --own path of the report being built. */
int lgr_is_library_file(const char *file);
/* 1 when path is under one of the --own paths of the report being built. */
int lgr_under_own(const char *path);
/* 1 when the module at path is not the program's own object: a system library (in
 * /lib, /usr/lib, their multiarch directories, /usr/local/lib), an installed Python
 * package's, the interpreter's (the main executable exe when it is python*), or
 * leakguard's; never under an --own path, nor the main executable, nor a library named
 * after it (libmosquitto for mosquitto). */
int lgr_module_is_system(const char *path, const char *exe);
/* From frame i, the innermost Python frame, outwards: the first Python frame in the
 * program's own code (not lgr_is_library_file), or i when there is none, or when an
 * import lies between (start-up stays where the import ran). */
int lgr_own_frame(const void *frames, int n, int i, lgr_frame_at_fn at);

/* 1 for a Python frame of importlib's bootstrap (<frozen importlib._bootstrap> and
 * _bootstrap_external: module imports, and the interpreter's own start-up): what is
 * allocated under it is a module's start-up (its code, tables, classes,
 * registrations), made once, however long the imports take (docs/detection.md,
 * "Start-up"). */
int lgr_is_import_frame(const char *function, const char *file);

/* Significance (docs/detection.md, "Minor growth"): 1 when a growth of growth_bytes at
 * rate bytes/s, in a process whose live memory is typically size_bytes (the median of
 * its snapshots), gaining blocks_gained blocks, with time_to_oom_s of headroom at its
 * rate (NaN: unknown), is too small to be called a leak. How steady the growth looked
 * does not matter: in a short recording a cache that fills (CPython's type attribute
 * cache under a web server's requests) grows as steadily as a leak; the evidence for a
 * leak is its size, which a longer recording gives. */
int lgr_is_minor(double growth_bytes, double rate, double size_bytes, double blocks_gained, double time_to_oom_s);

#endif
