/* SPDX-License-Identifier: MIT */
/*
 * cmd_attach.c - `leakguard attach [OPTIONS] PID`: records a process that is already
 * running (docs/attach.md).
 *
 * Sequence: check the target (attach/inject.c) -> private directory, database, collector
 * listening -> inject libleakguard-agent.so at a safe point; its hello arrives like a
 * recorded program's -> the collector's loop until --duration, Ctrl-C or the target's
 * exit -> the collector closes the connection: the agent restores the GOT and stays as
 * a pass-through -> the report. The target keeps running.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cli/commands.h"
#include "attach/attach.h"
#include "cli/run_options.h"
#include "cli/services.h"
#include "cli/target.h"
#include "collector/collector.h"
#include "core/util.h"
#include "core/sysmem.h"
#include "cli/final_report.h"
#include "findings/report.h"
#include "output/store.h"

static void usage(FILE *f) {
  fprintf(f, "usage: leakguard attach [-o FILE [--force]] [-i SEC] [-s BYTES] [-d DEPTH] [--duration SEC] [--quiet]\n"
             "                        [--no-mmap] [--fail-on-leak] [--metrics ADDR:PORT] [--guard]\n"
             "                        [--guard-config F] [--guard-dry-run] [--format FMT] [--report FILE]\n"
             "                        [--own PATH] PID\n"
             "Records the running process PID until --duration SEC, Ctrl-C or its exit, then detaches\n"
             "(the process keeps running) and prints the report. The other options are those of\n"
             "`leakguard run` (see leakguard run --help), but the guard watches PID alone: its memory\n"
             "against [guard] limit, else its cgroup's limit, else RAM. docs/attach.md.\n");
}

/* The agent next to libleakguard.so (LEAKGUARD_AGENT overrides). */
static int find_agent(char *out, size_t n) {
  const char *env = getenv("LEAKGUARD_AGENT");
  if (env && *env) {
    snprintf(out, n, "%s", env);
    return access(out, R_OK) == 0 ? 0 : -ENOENT;
  }
  char lib[PATH_MAX];
  if (lg_find_library(lib, sizeof lib) != 0) return -ENOENT;
  char *slash = strrchr(lib, '/');
  if (!slash) return -ENOENT;
  *slash = 0;
  snprintf(out, n, "%s/libleakguard-agent.so", lib);
  return access(out, R_OK) == 0 ? 0 : -ENOENT;
}

typedef struct attach_opts {
  const char *output;
  double interval, duration;
  uint64_t sample;
  long depth;
  int quiet, fail_on_leak, no_mmap;
  int guard, guard_dry_run;
  const char *guard_config, *metrics;
  pid_t pid;
  int force;      /* --force: replace an existing output file */
  lg_final_t fin; /* --format, --report: the final report */
  lg_own_t own;   /* --own PATH: the program's own code (stored in meta) */
} attach_opts_t;

static int parse(int argc, char **argv, attach_opts_t *o) {
  static const struct option lo[] = {{"output", required_argument, 0, 'o'},
                                     {"interval", required_argument, 0, 'i'},
                                     {"sample", required_argument, 0, 's'},
                                     {"depth", required_argument, 0, 'd'},
                                     {"duration", required_argument, 0, 'D'},
                                     {"quiet", no_argument, 0, 'q'},
                                     {"fail-on-leak", no_argument, 0, 'F'},
                                     {"no-mmap", no_argument, 0, 'N'},
                                     {"metrics", required_argument, 0, 'M'},
                                     {"guard", no_argument, 0, 'G'},
                                     {"guard-config", required_argument, 0, 'C'},
                                     {"guard-dry-run", no_argument, 0, 'Y'},
                                     {"force", no_argument, 0, 'f'},
                                     {"format", required_argument, 0, 'T'},
                                     {"report", required_argument, 0, 'R'},
                                     {"own", required_argument, 0, 'W'},
                                     {"help", no_argument, 0, 'h'},
                                     {0, 0, 0, 0}};
  memset(o, 0, sizeof *o);
  o->depth = 64;
  const char *format = NULL, *report = NULL;
  int c;
  optind = 1;
  while ((c = getopt_long(argc, argv, "+o:i:s:d:qh", lo, NULL)) != -1) {
    switch (c) {
    case 'o': o->output = optarg; break;
    case 'f': o->force = 1; break;
    case 'i':
      if (lgu_parse_double(optarg, &o->interval) != 0 || o->interval < 0.05 || o->interval > 3600) {
        lgu_err("attach: -i: an interval of 0.05 to 3600 seconds");
        return LG_EXIT_USAGE;
      }
      break;
    case 's':
      if (lgu_parse_size(optarg, &o->sample) != 0 || o->sample < 1 || o->sample > (1ULL << 40)) {
        lgu_err("attach: -s: a size of 1 byte to 1 TiB");
        return LG_EXIT_USAGE;
      }
      break;
    case 'd':
      if (lgu_parse_long(optarg, 1, 256, &o->depth) != 0) {
        lgu_err("attach: -d: a depth of 1 to 256");
        return LG_EXIT_USAGE;
      }
      break;
    case 'D':
      if (lgu_parse_double(optarg, &o->duration) != 0 || o->duration <= 0) {
        lgu_err("attach: --duration: a positive number of seconds");
        return LG_EXIT_USAGE;
      }
      break;
    case 'q': o->quiet = 1; break;
    case 'F': o->fail_on_leak = 1; break;
    case 'N': o->no_mmap = 1; break;
    case 'M': o->metrics = optarg; break;
    case 'G': o->guard = 1; break;
    case 'C':
      o->guard = 1;
      o->guard_config = optarg;
      break;
    case 'Y':
      o->guard = 1;
      o->guard_dry_run = 1;
      break;
    case 'T': format = optarg; break;
    case 'R': report = optarg; break;
    case 'W': {
      int orc = lg_own_parse("attach", optarg, &o->own);
      if (orc) return orc;
      break;
    }
    case 'h': usage(stdout); return 0;
    default: usage(stderr); return LG_EXIT_USAGE;
    }
  }
  int frc = lg_final_parse("attach", format, report, &o->fin);
  if (frc) return frc;
  long pid;
  if (optind != argc - 1 || lgu_parse_long(argv[optind], 1, INT_MAX, &pid) != 0) {
    lgu_err("attach: one process id is needed (leakguard attach [OPTIONS] PID)");
    return LG_EXIT_USAGE;
  }
  o->pid = (pid_t)pid;
  return -1;
}

/* Why the leakguard module could not be set up in a Python target (written by the
 * agent's bootstrap, src/capture/agent/pymod.c): one line; the recording itself goes on.
 * 1 when said. */
static int say_pyboot(const char *dir, pid_t pid) {
  char path[PATH_MAX], name[64], line[512];
  snprintf(name, sizeof name, LG_FILE_PYBOOT, (int)pid);
  snprintf(path, sizeof path, "%s/%s", dir, name);
  FILE *f = fopen(path, "r");
  if (!f) return 0;
  size_t k = fread(line, 1, sizeof line - 1, f);
  fclose(f);
  unlink(path);
  line[k] = 0;
  line[strcspn(line, "\n")] = 0;
  lgu_err("attach: no Python holders for process %d (the leakguard module: %s)", (int)pid, line);
  return 1;
}

/* The database's facts of an attach: version, when (began, ISO 8601 UTC), sampling,
 * the command it stands for. */
static void meta_at_attach(lgst_t *db, const attach_opts_t *o, char *began, size_t n) {
  char v[64];
  time_t t0 = time(NULL);
  struct tm tm;
  gmtime_r(&t0, &tm);
  strftime(began, n, "%Y-%m-%dT%H:%M:%SZ", &tm);
  lgst_meta(db, "version", LG_VERSION);
  lgst_meta(db, "attached_at", began);
  snprintf(v, sizeof v, "%" PRIu64, o->sample);
  lgst_meta(db, "sample_bytes", v);
  snprintf(v, sizeof v, "attach %d", (int)o->pid);
  lgst_meta(db, "command", v);
  lg_own_meta(db, &o->own);
}

/* The agent's configuration (cfg, n bytes). The agent connects to the collector's
 * socket in dir, and a Python target imports the leakguard module from pydir and
 * exchanges its files (holders, the collector's requests) through dir
 * (docs/attach.md): both must be the target's own when it runs as another user (root
 * attaching to a service's process). */
static void agent_config(lgc_collector_t *col, const attach_opts_t *o, const char *dir, char *cfg, size_t n) {
  char pydir[PATH_MAX] = "", tproc[32];
  struct stat tst;
  snprintf(tproc, sizeof tproc, "/proc/%d", (int)o->pid);
  if (stat(tproc, &tst) == 0 && tst.st_uid != geteuid() &&
      (chown(dir, tst.st_uid, tst.st_gid) != 0 || chown(lgc_socket_path(col), tst.st_uid, tst.st_gid) != 0))
    lgu_err("attach: cannot give the collector's directory to process %d's user (%s): the agent may not reach it",
            (int)o->pid, strerror(errno));
  if (lg_find_python_dir(pydir, sizeof pydir) != 0) pydir[0] = 0;
  int cl = snprintf(cfg, n, "sock=%s\nsample=%" PRIu64 "\ndepth=%ld\ncli=%d\nmmap=%d\ndir=%s\n", lgc_socket_path(col),
                    o->sample, o->depth, (int)getpid(), !o->no_mmap, dir);
  if (pydir[0] && cl > 0 && (size_t)cl < n) snprintf(cfg + cl, n - (size_t)cl, "pydir=%s\n", pydir);
}

/* The final report of an attach, and what only an attach says below it (when it
 * began, the pre-attach bytes released: st, NULL when the agent's figures could not be
 * read). The exit status. */
static int report_attach(attach_opts_t *o, lgst_t *db, const char *began, const lg_agent_stats_t *st) {
  lgr_db_t *rdb = lgr_borrow(lgst_db(db));
  int leaks = -1,
      frc = rdb ? lg_final_report("attach", rdb, o->output, &o->fin, 10, o->quiet, &leaks) : LG_EXIT_INTERNAL;
  if (!rdb) lgu_err("attach: cannot build the report: out of memory");
  lgr_close(rdb);
  if (!o->quiet && frc == 0) {
    /* below a text report on standard output, else on standard error (final_report.h) */
    FILE *say = o->fin.format->render == lgo_render_text && !o->fin.path ? stdout : stderr;
    fprintf(say, "\nRecording began at attach, %s (growth is judged from then on).\n", began);
    if (st)
      fprintf(say, "Pre-attach bytes released while attached: %" PRIu64 " in %" PRIu64 " blocks%s.\n",
              st->preattach_bytes_released, st->preattach_blocks_released,
              o->sample ? " (not counted in sampled mode)" : "");
    fprintf(say, "Recorded in %s (leakguard report %s --format json)\n", o->output, o->output);
    if (o->fin.path) fprintf(say, "Report (%s) in %s\n", o->fin.format->name, o->fin.path);
  }
  return o->fail_on_leak && leaks > 0 ? LG_EXIT_LEAK : 0;
}

static int attach(attach_opts_t *o) {
  char why[2048], agent[PATH_MAX], load[PATH_MAX], outbuf[PATH_MAX], dir[32] = "/tmp/leakguard-XXXXXX";
  if (lgj_check(o->pid, why, sizeof why) != 0) {
    lgu_err("attach: %s", why);
    return LG_EXIT_CANNOT_EXEC;
  }
  if (find_agent(agent, sizeof agent) != 0) {
    lgu_err("attach: cannot find libleakguard-agent.so next to libleakguard.so; set LEAKGUARD_AGENT");
    return LG_EXIT_INTERNAL;
  }
  if (lgj_agent_in_target(o->pid, agent, load, sizeof load, why, sizeof why) != 0) {
    lgu_err("attach: %s", why);
    return LG_EXIT_CANNOT_EXEC;
  }
  lgst_t *db = NULL;
  int rc = o->output ? lg_claim_output("attach", o->output, o->force, &db) : lg_check_output_dir("attach");
  if (rc) return rc;
  lgcli_services_t svc;
  if ((rc = lgcli_services_start("attach", o->guard, o->guard_config, o->guard_dry_run, o->metrics, (int)o->pid,
                                 &svc)) != 0) {
    lgcli_services_stop(&svc);
    lgst_discard(db, o->output);
    return rc;
  }
  if (!mkdtemp(dir)) {
    lgu_err("attach: cannot create a temporary directory: %s", strerror(errno));
    lgcli_services_stop(&svc);
    lgst_discard(db, o->output);
    return LG_EXIT_INTERNAL;
  }
  if (!o->output) {
    snprintf(outbuf, sizeof outbuf, "leakguard-attach-%d.db", (int)o->pid);
    o->output = outbuf;
    if ((rc = lg_claim_output("attach", o->output, o->force, &db)) != 0) {
      rmdir(dir);
      lgcli_services_stop(&svc);
      return rc;
    }
  }
  lgc_collector_t *col = NULL;
  int injected = 0;
  char v[64], began[32];
  meta_at_attach(db, o, began, sizeof began);
  const char *limit_source = "physical";
  uint64_t limit = lgsm_memory_limit(&limit_source);
  lgc_options_t co = {.interval = o->interval,
                      .limit = limit,
                      .limit_source = limit_source,
                      .db = db,
                      .db_path = o->output,
                      .guard = svc.guard,
                      .metrics = svc.reg};
  sigset_t mask, old;
  lgc_signals(&mask);
  sigprocmask(SIG_BLOCK, &mask, &old);
  lgcli_collector_env();
  if (lgc_new(&co, dir, &col, why, sizeof why) != 0) {
    lgu_err("attach: %s", why);
    rc = LG_EXIT_INTERNAL;
    goto out;
  }
  uint64_t deadline = o->duration > 0 ? lgu_now_ns() + (uint64_t)(o->duration * 1e9) : 0;
  lgc_set_attached(col, o->pid, deadline);
  char cfg[4096];
  agent_config(col, o, dir, cfg, sizeof cfg);
  lgj_result_t res;
  if ((rc = lgj_inject(o->pid, load, cfg, &res, why, sizeof why)) != 0) {
    lgu_err("attach: %s", why);
    rc = LG_EXIT_CANNOT_EXEC;
    goto out;
  }
  injected = 1; /* what is recorded from now on is kept */
  if (!o->quiet)
    fprintf(stderr,
            "leakguard: attached to process %d (all threads stopped %.1f ms, loading thread %.1f ms%s); "
            "recording from %s\n",
            (int)o->pid, res.all_stopped_ms, res.caller_ms, res.idle ? ", idle: loaded in a waiting thread" : "",
            began);
  snprintf(v, sizeof v, "%.3f", res.all_stopped_ms);
  lgst_meta(db, "attach_stopped_ms", v);
  if (lgc_run(col) != 0) lgu_err("attach: out of memory in the collector; the recording may be incomplete");
  double gone = lgc_attach_gone_s(col);
  if (gone >= 0)
    lgu_err("attach: process %d ended %.1f s after the recording began; the report covers it until then", (int)o->pid,
            gone);
  if (!say_pyboot(dir, o->pid) && lgc_final_unanswered(col) && !o->quiet)
    lgu_err("attach: no Python holders at the end for process %d: its main thread ran no Python code within "
            "4 s (inside a long C call or a blocking wait)",
            (int)o->pid);
  lg_agent_stats_t st;
  int have = lgj_read_stats(o->pid, res.stats_addr, &st) == 0;
  if (have) {
    snprintf(v, sizeof v, "%" PRIu64, st.preattach_bytes_released);
    lgst_meta(db, "preattach_bytes_released", v);
  }
  lgc_free(col); /* closes the connection: the agent detaches */
  col = NULL;
  rc = report_attach(o, db, began, have ? &st : NULL);
out:
  lgc_free(col);
  rmdir(dir);
  if (injected) lgst_close(db);
  else lgst_discard(db, o->output); /* nothing recorded: a retry must not find it in its way */
  lgcli_services_stop(&svc);
  sigprocmask(SIG_SETMASK, &old, NULL);
  return rc;
}

int lg_cmd_attach(int argc, char **argv) {
  attach_opts_t o;
  int rc = parse(argc, argv, &o);
  if (rc < 0) rc = attach(&o);
  lg_own_free(&o.own);
  return rc;
}
