/* SPDX-License-Identifier: MIT */
/*
 * collector.h - the collector (collector layer): what `leakguard run` does between
 * starting a program and printing its report, as a library (`leakguard attach` runs
 * the same collector on a process it did not start).
 *
 * The collector listens on a private Unix socket for recorded process images (each
 * sends a hello with its region, core/region.h), advances their clocks, snapshots
 * them into the store at the snapshot interval and at step markers, symbolizes their
 * stacks off the loop, analyses their allocation sites while they run (flags,
 * suspects files, explanation requests, the live view, Prometheus metrics, the
 * guard's growth hints), and, when the program and every recorded descendant are
 * gone, takes final snapshots from the regions it still maps: nothing recorded is lost
 * when a program is killed.
 *
 * Threads: one, the caller's, plus the symbolization worker it owns. Signals:
 * lgc_signals() must be blocked in the calling thread before lgc_run (the loop reads
 * them from a signalfd): SIGCHLD reaps, SIGINT/SIGTERM/SIGHUP/SIGQUIT go to the child
 * (a second one kills it), SIGUSR1/2 are passed to the child, SIGWINCH fits the live
 * view to the terminal's new size, SIGTSTP gives the terminal back, stops the child and
 * leakguard, and sets the view up again once continued.
 */
#ifndef LG_COLLECTOR_COLLECTOR_H
#define LG_COLLECTOR_COLLECTOR_H

#include <signal.h>
#include <stdint.h>

#include "guard/guard.h"
#include "output/live.h"
#include "output/metrics.h"
#include "output/store.h"

typedef struct lgc_collector lgc_collector_t;

typedef struct lgc_options {
  double interval;          /* snapshot interval in seconds; 0: adaptive (lgc_adaptive_interval_s) */
  uint64_t limit;           /* memory limit for time to OOM */
  const char *limit_source; /* "cgroup", "physical", "--limit" */
  int limit_given;          /* 1: --limit (usage is then the recorded processes' RSS) */
  lgst_t *db;               /* the store, or NULL */
  const char *db_path;      /* for messages */
  lgv_view_t *view;         /* the live view, or NULL */
  lgg_guard_t *guard;       /* the guard, or NULL */
  lgx_registry_t *metrics;  /* Prometheus registry, or NULL */
} lgc_options_t;

/* The adaptive snapshot interval (seconds) of a run age_s seconds old: 0.1 s while the
 * run is young, so that short runs get enough points for the detector, growing with
 * its age (age / 30) to 1 s at 30 s; after 10 minutes age / 600 (6 s at an hour, 1 min
 * from 10 hours on), so that a run of a day stores about 5 000 snapshots, not 86 400.
 * Only what is stored thins out: the live analysis samples every site every 250 ms
 * whatever the interval, so a leak that begins late is flagged as fast. */
double lgc_adaptive_interval_s(double age_s);

/* The signals the collector's loop reads (to block before lgc_run, and before a fork
 * whose child restores its mask). */
void lgc_signals(sigset_t *mask);

/* Creates a collector that listens on DIR/sock (DIR: a private directory that holds
 * the socket and the files the Python module and the collector exchange; it must
 * exist). The options' objects stay the caller's. 0, or -errno with a one-line reason
 * in why. */
int lgc_new(const lgc_options_t *o, const char *dir, lgc_collector_t **out, char *why, size_t whylen);
/* The socket path (LEAKGUARD_SOCK for the recorded programs). */
const char *lgc_socket_path(const lgc_collector_t *c);
/* The started program: the run ends when it and every recorded descendant are gone. */
void lgc_set_child(lgc_collector_t *c, int pid);
/* `leakguard attach`: the process pid was not started by us (its agent connects like
 * a recorded program). The run ends at deadline_ns (CLOCK_MONOTONIC, 0: none), on
 * SIGINT/SIGTERM/SIGHUP/SIGQUIT (not passed on), or when every image has ended. */
void lgc_set_attached(lgc_collector_t *c, int pid, uint64_t deadline_ns);
/* After lgc_run of an attach: the Python processes asked for their holders at the end
 * that did not answer in time (their main thread ran no Python code meanwhile). */
int lgc_final_unanswered(const lgc_collector_t *c);
/* After lgc_run of an attach: seconds from the collector's start to when the process
 * ended before the recording's end (--duration, interrupt), else -1. */
double lgc_attach_gone_s(const lgc_collector_t *c);
/* The loop, until the run ends; then final snapshots, every symbolized stack stored.
 * 0 or -ENOMEM. */
int lgc_run(lgc_collector_t *c);
/* The child's wait status (valid after lgc_run), and the number of recorded images. */
int lgc_child_status(const lgc_collector_t *c);
int lgc_nprocs(const lgc_collector_t *c);
/* Stops the worker, unmaps the regions, removes DIR's files (not DIR) and frees. */
void lgc_free(lgc_collector_t *c);

#endif
