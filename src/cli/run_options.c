/* SPDX-License-Identifier: MIT */
/* run_options.c - the command line of `leakguard run`: --help, options, and the checks
 * on the target command that come before anything is started. */
#include "cli/run_options.h"

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli/commands.h"
#include "cli/target.h"
#include "core/region.h"
#include "core/util.h"
#include "output/store.h"

enum {
  OPT_NO_FOLLOW = 256,
  OPT_FAIL_ON_LEAK,
  OPT_NO_MMAP,
  OPT_GUARD,
  OPT_GUARD_CONFIG,
  OPT_GUARD_DRY,
  OPT_METRICS,
  OPT_EXPLAIN_AT,
  OPT_STEPS,
  OPT_CUDA_UM,
  OPT_IMPORT_SAMPLE,
  OPT_FORCE,
  OPT_FORMAT,
  OPT_REPORT,
  OPT_OWN,
  OPT_LAZY,
};

static void usage(FILE *f) {
  fprintf(f, "usage: leakguard run [OPTIONS] [--] COMMAND [ARGS...]\n"
             "\n"
             "Runs COMMAND with the recorder preloaded, shows growing allocation sites while it\n"
             "runs, stores everything in a SQLite database and prints a leak report at the end.\n"
             "The live view is on standard error: on a terminal in its last lines, below the\n"
             "program's output, which it never erases; elsewhere (not a terminal, TERM unset or\n"
             "dumb, fewer than 5 rows) a plain status line every 10 s.\n"
             "\n"
             "  -o, --output FILE     database path (default leakguard-<program>-<pid>.db); never\n"
             "                        through a symbolic link, never one another run is using\n"
             "      --force           replace FILE if it exists (an earlier recording)\n"
             "  -i, --interval SEC    snapshot interval in seconds, 0.05-3600 (default: 0.1 s\n"
             "                        while the run is young, 1 s after 30 s, coarser after\n"
             "                        10 minutes: 6 s at an hour, at most 60 s)\n"
             "  -s, --sample BYTES    sample allocations: one sample per BYTES allocated on\n"
             "                        average (Poisson, weighted); e.g. 512K. Default: record all\n"
             "      --import-sample BYTES  Python: while a module is imported, one sample per\n"
             "                        BYTES (default 64K; 0 records imports in full too).\n"
             "                        Start-up, never a leak's growth: `import torch` costs\n"
             "                        1.6x instead of 2.7x (docs/python.md)\n"
             "  -d, --depth N         native stack depth, 1-256 (default 64)\n"
             "  -l, --limit BYTES     memory limit for time-to-OOM (default: cgroup, else RAM)\n"
             "      --no-follow       record only the started process (through what it execs,\n"
             "                        a wrapper chain), not its forked or spawned children\n"
             "      --lazy SIZE,SEC   an image other than the started command's first (what a\n"
             "                        wrapper execs, a helper it runs) records nothing until it\n"
             "                        has allocated SIZE or lived SEC (default 32M,0.1): a\n"
             "                        pyenv shim's or a launcher's helpers cost next to nothing.\n"
             "                        What an image allocated before is not attributed (the\n"
             "                        report says how much); --lazy off records every image\n"
             "                        from its start\n"
             "      --no-mmap         do not record anonymous mmap regions\n"
             "      --fail-on-leak    exit with status 97 when a leak is found\n"
             "      --guard           act before the OOM killer: graded levels on the target's\n"
             "                        memory, system memory and leakguard's memory cgroup,\n"
             "                        published to the target's breaker API (docs/guard.md)\n"
             "      --guard-config F  guard levels and actions from an INI file (implies --guard)\n"
             "      --guard-dry-run   the guard only logs what it would do (implies --guard)\n"
             "      --metrics ADDR    serve Prometheus metrics on ADDR:PORT (e.g. 127.0.0.1:9464;\n"
             "                        loopback unless another address is given)\n"
             "      --cuda-um         CUDA Unified Memory: page faults and migrations per managed\n"
             "                        allocation site (CUPTI; docs/cuda.md)\n"
             "      --explain-at-step N  Python: find who holds the suspects' memory at step N\n"
             "                        (also done at exit; docs/python.md)\n"
             "      --steps MODE      auto (default): a PyTorch program that never calls\n"
             "                        leakguard.step() counts a step at each optimizer.step();\n"
             "                        off: only leakguard.step() counts\n"
             "      --own PATH        files and modules under PATH are the program's own code,\n"
             "                        even under site-packages or /usr/lib: a site is named by\n"
             "                        its innermost frame there (repeatable; kept in the\n"
             "                        database for later reports)\n"
             "  -n, --top N           suspects in the final report (default 10)\n"
             "      --format FMT      the final report's format: text (default), json, folded,\n"
             "                        pprof, html or pool-profile (as leakguard report's)\n"
             "      --report FILE     write the final report to FILE (replaced if it exists),\n"
             "                        not to standard output, which the program shares\n"
             "  -q, --quiet           no live view (nor status lines) and no final report on\n"
             "                        standard output\n"
             "  -h, --help            this help\n"
             "\n"
             "Exit status: the target's (128+N if killed by signal N); 97 with --fail-on-leak\n"
             "and a leak; 127 command not found; 126 cannot be recorded (static, setuid);\n"
             "2 usage error; 98 internal error.\n");
}

int lg_check_target(const char *cmd, char *path, size_t n) {
  int fr = lg_find_command(cmd, path, n);
  if (fr == -ENOENT) {
    lgu_err("cannot run '%s': command not found", cmd);
    return LG_EXIT_NOT_FOUND;
  }
  if (fr == -EACCES) {
    lgu_err("cannot run '%s': permission denied (not executable)", cmd);
    return LG_EXIT_CANNOT_EXEC;
  }
  struct stat st;
  if (stat(path, &st) == 0 && (st.st_mode & (S_ISUID | S_ISGID))) {
    lgu_err("cannot record '%s': it is set-user/group-ID, and the dynamic loader ignores LD_PRELOAD for such programs",
            path);
    return LG_EXIT_CANNOT_EXEC;
  }
  if (lg_is_static_elf(path) == 1) {
    lgu_err("cannot record '%s': it is statically linked, so LD_PRELOAD cannot interpose its allocator (link it "
            "dynamically)",
            path);
    return LG_EXIT_CANNOT_EXEC;
  }
  return 0;
}

static int parse_run(int argc, char **argv, run_opts_t *out, char ***targv);

/* --lazy: "off", or SIZE,SECONDS with SIZE 1 byte..1T and SECONDS 0.001..3600. */
static int parse_lazy(const char *s, uint64_t *bytes, long *ms) {
  if (!strcmp(s, "off")) {
    *bytes = 0;
    *ms = 0;
    return 0;
  }
  const char *comma = strchr(s, ',');
  char size[64];
  double sec;
  if (!comma || (size_t)(comma - s) >= sizeof size) return -1;
  memcpy(size, s, (size_t)(comma - s));
  size[comma - s] = 0;
  if (lgu_parse_size(size, bytes) != 0 || *bytes < 1 || *bytes > (1ULL << 40)) return -1;
  if (lgu_parse_double(comma + 1, &sec) != 0 || !(sec >= 0.001 && sec <= 3600)) return -1;
  *ms = (long)(sec * 1000 + 0.5);
  return 0;
}

int lg_run_options(int argc, char **argv, run_opts_t *out, char ***targv) {
  memset(&out->own, 0, sizeof out->own);
  int rc = parse_run(argc, argv, out, targv);
  if (rc >= 0) lg_own_free(&out->own);
  return rc;
}

static int parse_run(int argc, char **argv, run_opts_t *out, char ***targv) {
  run_opts_t o = {.interval = 0,
                  .follow = 1,
                  .mmap = 1,
                  .depth = LG_DEFAULT_DEPTH,
                  .top = 10,
                  .import_sample = LG_IMPORT_SAMPLE_DEFAULT,
                  .lazy_bytes = LG_LAZY_DEFAULT_BYTES,
                  .lazy_ms = LG_LAZY_DEFAULT_MS};
  static const struct option longopts[] = {{"output", required_argument, NULL, 'o'},
                                           {"interval", required_argument, NULL, 'i'},
                                           {"sample", required_argument, NULL, 's'},
                                           {"depth", required_argument, NULL, 'd'},
                                           {"limit", required_argument, NULL, 'l'},
                                           {"top", required_argument, NULL, 'n'},
                                           {"quiet", no_argument, NULL, 'q'},
                                           {"help", no_argument, NULL, 'h'},
                                           {"no-follow", no_argument, NULL, OPT_NO_FOLLOW},
                                           {"fail-on-leak", no_argument, NULL, OPT_FAIL_ON_LEAK},
                                           {"no-mmap", no_argument, NULL, OPT_NO_MMAP},
                                           {"guard", no_argument, NULL, OPT_GUARD},
                                           {"guard-config", required_argument, NULL, OPT_GUARD_CONFIG},
                                           {"guard-dry-run", no_argument, NULL, OPT_GUARD_DRY},
                                           {"metrics", required_argument, NULL, OPT_METRICS},
                                           {"explain-at-step", required_argument, NULL, OPT_EXPLAIN_AT},
                                           {"steps", required_argument, NULL, OPT_STEPS},
                                           {"cuda-um", no_argument, NULL, OPT_CUDA_UM},
                                           {"import-sample", required_argument, NULL, OPT_IMPORT_SAMPLE},
                                           {"force", no_argument, NULL, OPT_FORCE},
                                           {"format", required_argument, NULL, OPT_FORMAT},
                                           {"report", required_argument, NULL, OPT_REPORT},
                                           {"own", required_argument, NULL, OPT_OWN},
                                           {"lazy", required_argument, NULL, OPT_LAZY},
                                           {NULL, 0, NULL, 0}};
  optind = 1;
  opterr = 0;
  int ch;
  long lv;
  while ((ch = getopt_long(argc, argv, "+o:i:s:d:l:n:qh", longopts, NULL)) != -1) {
    switch (ch) {
    case 'o': o.output = optarg; break;
    case OPT_FORCE: o.force = 1; break;
    case OPT_FORMAT: o.format = optarg; break;
    case OPT_REPORT: o.report = optarg; break;
    case OPT_OWN: {
      int orc = lg_own_parse("run", optarg, &out->own); /* out->own: freed on every error */
      if (orc) return orc;
      break;
    }
    case 'i':
      if (lgu_parse_double(optarg, &o.interval) != 0 || o.interval < 0.05 || o.interval > 3600) {
        lgu_err("run: --interval must be a number of seconds between 0.05 and 3600, not '%s'", optarg);
        return LG_EXIT_USAGE;
      }
      break;
    case 's':
      if (lgu_parse_size(optarg, &o.sample) != 0 || o.sample < 1 || o.sample > (1ULL << 40)) {
        lgu_err("run: --sample must be a size between 1 and 1T bytes, not '%s'", optarg);
        return LG_EXIT_USAGE;
      }
      break;
    case 'd':
      if (lgu_parse_long(optarg, 1, LG_MAX_DEPTH, &lv) != 0) {
        lgu_err("run: --depth must be an integer between 1 and %d, not '%s'", LG_MAX_DEPTH, optarg);
        return LG_EXIT_USAGE;
      }
      o.depth = lv;
      break;
    case 'l':
      if (lgu_parse_size(optarg, &o.limit) != 0 || o.limit < 1) {
        lgu_err("run: --limit must be a size such as 8G or 512M, not '%s'", optarg);
        return LG_EXIT_USAGE;
      }
      break;
    case 'n':
      if (lgu_parse_long(optarg, 1, 100000, &lv) != 0) {
        lgu_err("run: --top must be an integer between 1 and 100000, not '%s'", optarg);
        return LG_EXIT_USAGE;
      }
      o.top = (int)lv;
      break;
    case 'q': o.quiet = 1; break;
    case 'h': usage(stdout); return LG_EXIT_OK;
    case OPT_NO_FOLLOW: o.follow = 0; break;
    case OPT_FAIL_ON_LEAK: o.fail_on_leak = 1; break;
    case OPT_NO_MMAP: o.mmap = 0; break;
    case OPT_LAZY:
      if (parse_lazy(optarg, &o.lazy_bytes, &o.lazy_ms) != 0) {
        lgu_err("run: --lazy must be SIZE,SECONDS (e.g. 32M,0.1) or off, not '%s'", optarg);
        return LG_EXIT_USAGE;
      }
      break;
    case OPT_GUARD: o.guard = 1; break;
    case OPT_GUARD_CONFIG:
      o.guard = 1;
      o.guard_config = optarg;
      break;
    case OPT_GUARD_DRY:
      o.guard = 1;
      o.guard_dry_run = 1;
      break;
    case OPT_METRICS: o.metrics = optarg; break;
    case OPT_CUDA_UM: o.cuda_um = 1; break;
    case OPT_IMPORT_SAMPLE:
      if (lgu_parse_size(optarg, &o.import_sample) != 0 || o.import_sample > (1ULL << 40)) {
        lgu_err("run: --import-sample must be a size between 0 and 1T bytes, not '%s'", optarg);
        return LG_EXIT_USAGE;
      }
      break;
    case OPT_EXPLAIN_AT:
      if (lgu_parse_long(optarg, 1, LONG_MAX, &lv) != 0) {
        lgu_err("run: --explain-at-step must be a positive step number, not '%s'", optarg);
        return LG_EXIT_USAGE;
      }
      o.explain_at_step = lv;
      break;
    case OPT_STEPS:
      if (strcmp(optarg, "auto") && strcmp(optarg, "off")) {
        lgu_err("run: --steps must be auto or off, not '%s'", optarg);
        return LG_EXIT_USAGE;
      }
      o.steps_off = !strcmp(optarg, "off");
      break;
    default:
      if (optopt) lgu_err("run: unknown or incomplete option '-%c' (see leakguard run --help)", optopt);
      else lgu_err("run: unknown option '%s' (see leakguard run --help)", argv[optind - 1]);
      return LG_EXIT_USAGE;
    }
  }
  if (optind >= argc) {
    lgu_err("run: no command given (usage: leakguard run [OPTIONS] -- COMMAND [ARGS...])");
    return LG_EXIT_USAGE;
  }
  *targv = argv + optind;
  o.own = out->own;
  *out = o;
  return -1;
}

/* The exit status of a failed claim or open, after its one-line error: a refusal
 * (exists, in use, a link, a bad directory) or an unwritable path is the user's to
 * fix; a full disk or an I/O error is not. */
static int output_failed(const char *cmd, int rc, const char *why) {
  lgu_err("%s: cannot record: %s", cmd, why);
  return rc == -ENOSPC || rc == -EIO || rc == -ENOMEM ? LG_EXIT_INTERNAL : LG_EXIT_USAGE;
}

int lg_claim_output(const char *cmd, const char *output, int force, lgst_t **db) {
  char why[1024];
  int rc = lgst_create_ex(output, force ? LGST_FORCE : 0, db, why, sizeof why);
  return rc ? output_failed(cmd, rc, why) : 0;
}

int lg_claim_output_file(const char *cmd, const char *output, int force, lgst_t **db) {
  char why[1024];
  int rc = lgst_claim(output, force ? LGST_FORCE : 0, db, why, sizeof why);
  return rc ? output_failed(cmd, rc, why) : 0;
}

int lg_open_output(const char *cmd, lgst_t **db) {
  char why[1024];
  int rc = lgst_open(*db, why, sizeof why);
  if (!rc) return 0;
  *db = NULL;
  return output_failed(cmd, rc, why);
}

int lg_check_output_dir(const char *cmd) {
  if (access(".", W_OK) != 0) {
    lgu_err("%s: cannot write the database in the current directory: %s (use --output)", cmd, strerror(errno));
    return LG_EXIT_USAGE;
  }
  return 0;
}
