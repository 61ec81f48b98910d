/* SPDX-License-Identifier: MIT */
/*
 * cmd_run.c - `leakguard run`: starts the target under the recorder and collects.
 *
 * Sequence: check the target (cli/target.c: exists, dynamically linked, not setuid)
 * -> private directory -> fork; the child waits on a pipe -> create the database
 * (now that the pid is known) -> the collector listens (collector/collector.h) ->
 * release the child, which execs with LD_PRELOAD -> the collector's loop until the
 * target and its recorded descendants are gone (final snapshots from the regions it
 * still maps: nothing recorded is lost even after SIGKILL) -> the report, from the
 * database -> the target's exit status.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cli/commands.h"
#include "cli/run_options.h"
#include "cli/services.h"
#include "cli/target.h"
#include "collector/collector.h"
#include "core/sysmem.h"
#include "core/util.h"
#include "cli/final_report.h"
#include "findings/report.h"
#include "output/store.h"

static void store_meta(lgst_t *db, const run_opts_t *o, uint64_t limit, const char *limit_source, char **targv) {
  char v[64];
  lgst_meta(db, "version", LG_VERSION);
  if (o->interval > 0) snprintf(v, sizeof v, "%g", o->interval);
  else snprintf(v, sizeof v, "adaptive");
  lgst_meta(db, "interval_s", v);
  snprintf(v, sizeof v, "%" PRIu64, o->sample);
  lgst_meta(db, "sample_bytes", v);
  snprintf(v, sizeof v, "%" PRIu64, o->sample ? 0 : o->import_sample);
  lgst_meta(db, "import_sample_bytes", v);
  snprintf(v, sizeof v, "%" PRIu64, limit);
  lgst_meta(db, "limit_bytes", v);
  lgst_meta(db, "limit_source", limit_source ? limit_source : "physical");
  char cmd[2048] = "";
  for (char **a = targv; *a; a++) {
    size_t l = strlen(cmd);
    snprintf(cmd + l, sizeof cmd - l, "%s%s", l ? " " : "", *a);
  }
  lgst_meta(db, "command", cmd);
  lg_own_meta(db, &o->own);
}

/* Everything a run holds, released in one place (run_free). */
typedef struct run {
  lgcli_services_t svc; /* the guard, the metrics endpoint */
  lgst_t *db;
  lgv_view_t *view;
  lgc_collector_t *col;
  char dir[64];         /* the private directory: socket, the Python side's files */
  pid_t child;          /* started, not yet waited for (killed on errors) */
  int go, err;          /* the child's release and exec-error pipes */
  const char *discard;  /* the database's path until the target runs: a failure before removes it */
  struct rlimit nofile; /* the descriptor limit before ours was raised (metrics): the target's */
} run_t;

static void run_free(run_t *r) {
  if (r->child > 0) {
    kill(r->child, SIGKILL);
    waitpid(r->child, NULL, 0);
  }
  if (r->go >= 0) close(r->go);
  if (r->err >= 0) close(r->err);
  lgc_free(r->col);
  if (*r->dir) rmdir(r->dir);
  lgv_free(r->view);
  if (r->discard) lgst_discard(r->db, r->discard);
  else lgst_close(r->db);
  lgcli_services_stop(&r->svc);
}

/* Forks the target, which waits for run_release before it execs. */
static int start_child(run_t *r, const char *path, char **targv, const sigset_t *old,
                       const struct sigaction *old_chld) {
  int go[2], err[2];
  if (pipe2(go, O_CLOEXEC) != 0) return -errno;
  if (pipe2(err, O_CLOEXEC) != 0) {
    int e = errno;
    close(go[0]);
    close(go[1]);
    return -e;
  }
  pid_t pid = fork();
  if (pid < 0) {
    int e = errno;
    close(go[0]), close(go[1]), close(err[0]), close(err[1]);
    return -e;
  }
  if (pid == 0) {
    sigaction(SIGCHLD, old_chld, NULL);
    sigprocmask(SIG_SETMASK, old, NULL);
    setrlimit(RLIMIT_NOFILE, &r->nofile); /* the program's own limit, not the collector's */
    close(go[1]);
    close(err[0]);
    char b;
    if (read(go[0], &b, 1) != 1) _exit(LG_EXIT_INTERNAL);
    execv(path, targv);
    int e = errno;
    (void)!write(err[1], &e, sizeof e);
    _exit(LG_EXIT_CANNOT_EXEC);
  }
  close(go[0]);
  close(err[1]);
  r->child = pid;
  r->go = go[1];
  r->err = err[0];
  return 0;
}

/* Lets the child exec (release_go), then waits for the exec's outcome (release_wait):
 * 0, or the exec's errno. What the CLI does in between overlaps the program's start. */
static void release_go(run_t *r) {
  (void)!write(r->go, "g", 1);
  close(r->go);
  r->go = -1;
}

static int release_wait(run_t *r) {
  int e = 0;
  ssize_t k;
  do k = read(r->err, &e, sizeof e);
  while (k < 0 && errno == EINTR);
  close(r->err);
  r->err = -1;
  return k == (ssize_t)sizeof e ? e : 0;
}

/* The run's private directory (0700, mkdtemp), on a tmpfs where there is one: the
 * user's XDG_RUNTIME_DIR, /dev/shm, else /tmp. On this VM's ext4 /tmp its mkdtemp, the
 * socket's bind and the cleanup took up to ~1.5 ms while the disk was busy, on tmpfs
 * ~10 us always (BENCHMARKS.md). 0, or -1 with errno and dir empty. */
static int make_run_dir(char *dir, size_t n) {
  const char *bases[] = {getenv("XDG_RUNTIME_DIR"), "/dev/shm", "/tmp"};
  for (size_t i = 0; i < sizeof bases / sizeof *bases; i++) {
    const char *b = bases[i];
    struct stat st;
    if (!b || b[0] != '/' || snprintf(dir, n, "%s/leakguard-XXXXXX", b) >= (int)n) continue;
    /* another user's runtime directory (sudo -E keeps the variable) is not ours */
    if (i == 0 && (stat(b, &st) != 0 || st.st_uid != geteuid())) continue;
    if (mkdtemp(dir)) return 0;
  }
  *dir = 0;
  return -1;
}

static int run_target(run_opts_t *o, char **targv) {
  char path[PATH_MAX], lib[PATH_MAX], outbuf[PATH_MAX], why[512];
  lg_final_t fin;
  int rc = lg_final_parse("run", o->format, o->report, &fin);
  if (rc) return rc;
  if ((rc = lg_check_target(targv[0], path, sizeof path))) return rc;
  if (lg_find_library(lib, sizeof lib) != 0) {
    lgu_err("cannot find libleakguard.so (looked next to the leakguard binary and in %s); set LEAKGUARD_LIBRARY",
            LG_INSTALL_LIBDIR);
    return LG_EXIT_INTERNAL;
  }
  run_t r = {.go = -1, .err = -1};
  getrlimit(RLIMIT_NOFILE, &r.nofile);
  /* the output is claimed before anything starts: a file in use by another recording,
   * or one that exists without --force, is refused with nothing run or touched */
  if ((rc = o->output ? lg_claim_output_file("run", o->output, o->force, &r.db) : lg_check_output_dir("run")))
    return rc;
  r.discard = o->output;
  if ((rc = lgcli_services_start("run", o->guard, o->guard_config, o->guard_dry_run, o->metrics, 0, &r.svc)) != 0) {
    run_free(&r);
    return rc;
  }
  const char *limit_source = "--limit";
  uint64_t limit = o->limit ? o->limit : lgsm_memory_limit(&limit_source);

  if (make_run_dir(r.dir, sizeof r.dir) != 0) {
    lgu_err("cannot create a temporary directory: %s", strerror(errno));
    *r.dir = 0;
    run_free(&r);
    return LG_EXIT_INTERNAL;
  }
  char sock[sizeof r.dir + 8];
  snprintf(sock, sizeof sock, "%s/sock", r.dir);
  lg_target_env_t te = {.library = lib,
                        .socket = sock,
                        .dir = r.dir,
                        .sample = o->sample,
                        .import_sample = o->import_sample,
                        .depth = o->depth,
                        .explain_at_step = o->explain_at_step,
                        .follow = o->follow,
                        .mmap = o->mmap,
                        .cuda_um = o->cuda_um,
                        .steps_off = o->steps_off,
                        .lazy_bytes = o->lazy_bytes,
                        .lazy_ms = o->lazy_ms};
  if (lg_target_env(&te) != 0) {
    lgu_err("cannot set the target's environment: out of memory");
    run_free(&r);
    return LG_EXIT_INTERNAL;
  }

  sigset_t mask, old;
  lgc_signals(&mask);
  sigprocmask(SIG_BLOCK, &mask, &old);
  /* An inherited SIG_IGN for SIGCHLD would auto-reap the target and lose its status. */
  struct sigaction dfl = {.sa_handler = SIG_DFL}, old_chld;
  sigaction(SIGCHLD, &dfl, &old_chld);
  prctl(PR_SET_CHILD_SUBREAPER, 1);
  if ((rc = start_child(&r, path, targv, &old, &old_chld)) != 0) {
    lgu_err("cannot start '%s': %s", path, strerror(-rc));
    run_free(&r);
    return LG_EXIT_INTERNAL;
  }
  unsetenv("LD_PRELOAD");
  lgcli_collector_env();

  if (!o->output) {
    const char *b = strrchr(targv[0], '/');
    snprintf(outbuf, sizeof outbuf, "leakguard-%s-%d.db", b ? b + 1 : targv[0], (int)r.child);
    o->output = outbuf;
    if ((rc = lg_claim_output_file("run", o->output, o->force, &r.db)) != 0) { /* the target has not run yet */
      run_free(&r);
      return rc;
    }
    r.discard = o->output;
  }
  /* on a terminal, a view in the last lines; elsewhere a plain line every 10 s */
  if (!o->quiet) r.view = lgv_new(stderr, o->top < 10 ? o->top : 10);
  lgc_options_t co = {.interval = o->interval,
                      .limit = limit,
                      .limit_source = limit_source,
                      .limit_given = o->limit != 0,
                      .db = r.db,
                      .db_path = o->output,
                      .view = r.view,
                      .guard = r.svc.guard,
                      .metrics = r.svc.reg};
  if (lgc_new(&co, r.dir, &r.col, why, sizeof why) != 0) {
    lgu_err("run: %s", why);
    run_free(&r);
    return LG_EXIT_INTERNAL;
  }
  lgc_set_child(r.col, r.child);
  /* The program starts (its hello waits on the socket: it never waits for us) while
   * the database is made in the claimed file: SQLite's schema, ~1.5 ms of every run,
   * beside the program's exec and loader on another CPU (BENCHMARKS.md). */
  release_go(&r);
  int orc = lg_open_output("run", &r.db);
  if (orc == 0) store_meta(r.db, o, limit, limit_source, targv);
  int e = release_wait(&r);
  if (e) {
    lgu_err("cannot run '%s': %s", path, strerror(e));
    waitpid(r.child, NULL, 0);
    r.child = 0;
    run_free(&r);
    return e == ENOENT ? LG_EXIT_NOT_FOUND : LG_EXIT_CANNOT_EXEC;
  }
  if (orc) {
    /* nothing can be recorded (a full disk, an I/O error): the program, in its first
     * milliseconds, is stopped rather than run unrecorded under a leakguard that said
     * it could not record (the line above) */
    r.discard = NULL;
    run_free(&r); /* kills and waits for the child */
    return orc;
  }
  r.discard = NULL; /* the target runs: what is recorded is kept */
  if (lgc_run(r.col) != 0) lgu_err("run: out of memory in the collector; the recording may be incomplete");
  r.child = 0; /* waited for by the collector */
  int status = lgc_child_status(r.col);
  if (WIFEXITED(status)) rc = WEXITSTATUS(status);
  else if (WIFSIGNALED(status)) rc = 128 + WTERMSIG(status);
  else rc = LG_EXIT_INTERNAL;
  if (lgc_nprocs(r.col) == 0)
    lgu_err("the target never connected to the recorder (did it reset LD_PRELOAD?); nothing was recorded");
  lgc_free(r.col);
  r.col = NULL;
  lgv_free(r.view);
  r.view = NULL;

  /* The report, from the database only. */
  lgr_db_t *rdb = lgr_borrow(lgst_db(r.db));
  int leaks = -1, frc = rdb ? lg_final_report("run", rdb, o->output, &fin, o->top, o->quiet, &leaks) : LG_EXIT_INTERNAL;
  if (!rdb) lgu_err("run: cannot build the report: out of memory");
  lgr_close(rdb);
  int leak = leaks > 0;
  if (!o->quiet && frc == 0) {
    /* where the recording is: below a text report on standard output, else on standard
     * error, so that a JSON or HTML document on standard output stays one */
    FILE *say = fin.format->render == lgo_render_text && !fin.path ? stdout : stderr;
    fprintf(say, "\nRecorded in %s (leakguard report %s --format json)\n", o->output, o->output);
    if (fin.path) fprintf(say, "Report (%s) in %s\n", fin.format->name, fin.path);
  }
  run_free(&r);
  if (o->fail_on_leak && leak) return LG_EXIT_LEAK;
  return rc;
}

int lg_cmd_run(int argc, char **argv) {
  run_opts_t o;
  char **targv;
  int rc = lg_run_options(argc, argv, &o, &targv);
  if (rc < 0) rc = run_target(&o, targv);
  lg_own_free(&o.own);
  return rc;
}
