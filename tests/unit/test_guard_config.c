/* SPDX-License-Identifier: MIT */
/* test_guard_config.c - guard configuration (errors name line and reason), the
 * shipped example config, and the source readers on fixture directories (cgroup v2
 * and v1 files, PSI text). */
#include <errno.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "guard/guard.h"
#include "guard/guard_impl.h"

static int load(const char *text, lgg_config_t *c, char *why, size_t n) {
  lgg_config_defaults(c);
  return lgg_config_load_string(c, text, "t.ini", why, n);
}

static void defaults_valid(void **st) {
  (void)st;
  lgg_config_t c;
  char why[256] = "";
  assert_int_equal(load("", &c, why, sizeof why), 0);
  assert_true(c.lv.thr[1] == 0.75 && c.lv.thr[2] == 0.88 && c.lv.thr[3] == 0.95);
  assert_int_equal(c.act[1].mask, LGG_A_LOG);
  assert_int_equal(c.act[2].mask, LGG_A_LOG | LGG_A_PUBLISH);
  assert_int_equal(c.act[3].mask, LGG_A_LOG | LGG_A_PUBLISH | LGG_A_KILL);
  assert_null(c.act[3].command); /* nothing runs unless configured */
  lgg_config_free(&c);
}

static void full_config(void **st) {
  (void)st;
  lgg_config_t c;
  char why[256] = "";
  const char *t = "; comment\n"
                  "[guard]\ninterval = 50ms\ndry_run = yes\nmemory = pss\nlimit = 2G\n"
                  "[levels]\nwarn = 60%\nbreaker = 0.8\nemergency = 90%\nhysteresis = 3%\n"
                  "min_dwell = 2s\nwindow = 1m\nhorizon_emergency = 0\npsi_emergency = 60\n"
                  "[breaker]\nactions = log, signal, memory_high   ; inline comment\nsignal = SIGUSR2\n"
                  "signal_target = top\nmemory_high = 85%\n"
                  "[emergency]\nactions = log,exec,kill\ncommand = logger \"oom soon\"\nrepeat = 500ms\n"
                  "[kill]\ngrace = 3\nfallback = none\nmin_growth = 1M\n";
  assert_int_equal(load(t, &c, why, sizeof why), 0);
  assert_true(c.interval_s == 0.05 && c.dry_run == 1 && c.memory == LGSM_MEM_PSS);
  assert_true(c.limit == 2ULL << 30);
  assert_true(c.lv.thr[1] == 0.6 && c.lv.thr[2] == 0.8 && c.lv.thr[3] == 0.9);
  assert_true(c.lv.window_s == 60 && c.lv.min_dwell_s == 2 && c.lv.horizon_s[3] == 0 && c.lv.psi[3] == 60);
  assert_int_equal(c.act[2].mask, LGG_A_LOG | LGG_A_SIGNAL | LGG_A_MEMHIGH);
  assert_int_equal(c.act[2].signal, SIGUSR2);
  assert_int_equal(c.act[2].signal_target, LGG_T_TOP);
  assert_string_equal(c.act[3].command, "logger \"oom soon\"");
  assert_true(c.act[3].repeat_s == 0.5 && c.kill_grace_s == 3 && c.kill_fallback == LGG_FB_NONE);
  lgg_config_free(&c);
}

/* Each malformed config: the message names the line and says why. */
static void errors(void **st) {
  (void)st;
  static const struct {
    const char *text, *want;
  } cases[] = {
      {"[guard]\ninterval = fast\n", "t.ini:2: interval: 'fast' is not a duration"},
      {"[levels]\n\nwarn = 180%\n", "t.ini:3: warn: '180%' is not a percentage"},
      {"[levels]\nwarn = 90%\n",
       "t.ini:2: thresholds must increase: breaker (88%) is not above the level below it (90%)"},
      {"[guard]\nfoo = 1\n", "t.ini:2: unknown key 'foo' in [guard]"},
      {"[nope]\na = b\n", "t.ini:2: unknown section [nope]"},
      {"interval = 1\n", "t.ini:1: key 'interval' outside a section"},
      {"[guard]\njust words\n", "t.ini:2: syntax error: expected '[section]', 'key = value' or a comment"},
      {"[guard\n", "t.ini:1: syntax error"},
      {"[warn]\nactions = log, explode\n", "t.ini:2: unknown action 'explode'"},
      {"[warn]\nsignal = SIGFOO\n", "t.ini:2: signal: 'SIGFOO' is not a signal name or number"},
      {"[emergency]\n# no command\nactions = exec\n", "t.ini:3: [emergency] action 'exec' needs 'command = ...'"},
      {"[kill]\ngrace = -1\n", "t.ini:2: grace: '-1' is not a duration"},
      {"[guard]\ninterval = 1\n[levels]\nwindow = 2\n", "t.ini: window (2s) must be at least 4 intervals"},
      {"[guard]\nlog =\n", "t.ini:2: empty value for 'log'"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    lgg_config_t c;
    char why[256] = "";
    assert_int_equal(load(cases[i].text, &c, why, sizeof why), -EINVAL);
    if (strncmp(why, cases[i].want, strlen(cases[i].want)))
      fail_msg("case %zu: got '%s', want '%s...'", i, why, cases[i].want);
    lgg_config_free(&c);
  }
}

static void long_line(void **st) {
  (void)st;
  char text[600];
  snprintf(text, sizeof text, "[guard]\ninterval = 1\n[emergency]\ncommand = %0400d\n", 7);
  lgg_config_t c;
  char why[256] = "";
  assert_int_equal(load(text, &c, why, sizeof why), -EINVAL);
  assert_string_equal(why, "t.ini:4: line too long (at most 198 characters)");
  lgg_config_free(&c);
}

static void missing_file(void **st) {
  (void)st;
  lgg_config_t c;
  char why[256] = "";
  lgg_config_defaults(&c);
  assert_int_equal(lgg_config_load(&c, "/nonexistent/guard.ini", why, sizeof why), -ENOENT);
  assert_string_equal(why, "/nonexistent/guard.ini: cannot open: No such file or directory");
  lgg_config_free(&c);
}

/* The documented example in deploy/ parses (and lgg_new accepts it). */
static void example_config(void **st) {
  (void)st;
  char path[512], why[256] = "";
  snprintf(path, sizeof path, "%s/../../../deploy/guard.example.ini", LGG_TEST_DATA);
  lgg_config_t c;
  lgg_config_defaults(&c);
  int rc = lgg_config_load(&c, path, why, sizeof why);
  if (rc) fail_msg("%s", why);
  lgg_config_free(&c);
  lgg_guard_t *g = NULL;
  FILE *devnull = fopen("/dev/null", "w");
  lgg_options_t o = {.config_path = path, .dry_run = 1, .log = devnull};
  assert_int_equal(lgg_new(&o, &g, why, sizeof why), 0);
  lgg_free(g);
  fclose(devnull);
}

static void signals(void **st) {
  (void)st;
  char b[16];
  assert_int_equal(lgg_signal_parse("SIGUSR1"), SIGUSR1);
  assert_int_equal(lgg_signal_parse("usr2"), SIGUSR2);
  assert_int_equal(lgg_signal_parse("15"), SIGTERM);
  assert_int_equal(lgg_signal_parse("RTMIN+2"), SIGRTMIN + 2);
  assert_int_equal(lgg_signal_parse("SIGNOPE"), -1);
  assert_string_equal(lgg_signal_name(SIGTERM, b, sizeof b), "SIGTERM");
}

/* ------------------------------------------------------------------ readers */
static void put(const char *dir, const char *f, const char *text) {
  char p[512];
  snprintf(p, sizeof p, "%s/%s", dir, f);
  FILE *fp = fopen(p, "w");
  assert_non_null(fp);
  fputs(text, fp);
  fclose(fp);
}

static void cgroup_v2_fixture(void **st) {
  (void)st;
  char dir[] = "/tmp/lgg-v2-XXXXXX";
  assert_non_null(mkdtemp(dir));
  put(dir, "memory.current", "209715200\n");
  put(dir, "memory.max", "268435456\n");
  put(dir, "memory.high", "max\n");
  put(dir, "memory.events", "low 0\nhigh 3\nmax 7\noom 2\noom_kill 1\noom_group_kill 0\n");
  put(dir, "memory.stat", "anon 150000000\nfile 50000000\nkernel 1000\ninactive_file 40000000\nactive_file 10000000\n");
  put(dir, "memory.pressure",
      "some avg10=1.50 avg60=0.20 avg300=0.00 total=1234\nfull avg10=0.75 avg60=0.10 avg300=0.00 total=99\n");
  put(dir, "cgroup.procs", "12\n34\n");
  assert_int_equal(lgsm_cgroup_version(dir), 2);
  lgsm_cg_sample_t s;
  assert_int_equal(lgsm_cgroup_read(dir, 2, &s), 0);
  assert_true(s.usage == 209715200 && s.limit == 268435456 && s.high == 0);
  assert_true(s.working_set == 209715200 - 40000000);
  assert_true(s.anon == 150000000 && s.file == 50000000);
  assert_true(s.oom_kill == 1 && s.oom == 2 && s.high_events == 3 && s.max_events == 7);
  assert_true(s.psi_some10 == 1.5 && s.psi_full10 == 0.75);
  int *pids = NULL;
  assert_int_equal(lgsm_cgroup_pids(dir, &pids), 2);
  assert_true(pids[0] == 12 && pids[1] == 34);
  free(pids);
  /* the cgroup disappears */
  char cmd[600];
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  assert_int_equal(system(cmd), 0);
  assert_int_equal(lgsm_cgroup_read(dir, 2, &s), -ENOENT);
  assert_int_equal(lgsm_cgroup_version(dir), -ENOENT);
}

static void cgroup_v1_fixture(void **st) {
  (void)st;
  char dir[] = "/tmp/lgg-v1-XXXXXX";
  assert_non_null(mkdtemp(dir));
  put(dir, "memory.usage_in_bytes", "104857600\n");
  put(dir, "memory.limit_in_bytes", "9223372036854771712\n"); /* unlimited here */
  put(dir, "memory.stat",
      "cache 1\nrss 2\ntotal_cache 20971520\ntotal_rss 83886080\n"
      "total_inactive_file 10485760\nhierarchical_memory_limit 268435456\n");
  put(dir, "memory.oom_control", "oom_kill_disable 0\nunder_oom 0\noom_kill 4\n");
  put(dir, "memory.failcnt", "9\n");
  assert_int_equal(lgsm_cgroup_version(dir), 1);
  lgsm_cg_sample_t s;
  assert_int_equal(lgsm_cgroup_read(dir, 1, &s), 0);
  assert_true(s.usage == 104857600);
  assert_true(s.limit == 268435456); /* from the ancestor (hierarchical) */
  assert_true(s.working_set == 104857600 - 10485760);
  assert_true(s.anon == 83886080 && s.file == 20971520 && s.oom_kill == 4 && s.max_events == 9);
  assert_true(s.psi_some10 < 0 && s.psi_full10 < 0);
  /* unreadable file (not a number) */
  put(dir, "memory.usage_in_bytes", "garbage\n");
  assert_int_equal(lgsm_cgroup_read(dir, 1, &s), -EINVAL);
  char cmd[600];
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  assert_int_equal(system(cmd), 0);
}

static void psi_and_proc(void **st) {
  (void)st;
  double some, full;
  assert_int_equal(lgsm_psi_parse("some avg10=12.34 avg60=1 avg300=0 total=5\n", &some, &full), 0);
  assert_true(some == 12.34 && full < 0);
  assert_int_equal(lgsm_psi_parse("garbage", &some, &full), -EINVAL);
  assert_true(lgsm_proc_mem(getpid(), LGSM_MEM_RSS) > 0);
  assert_true(lgsm_proc_mem(getpid(), LGSM_MEM_PSS) > 0);
  assert_true(lgsm_proc_mem(0x7ffffff0, LGSM_MEM_RSS) < 0);
  uint64_t t, a;
  assert_int_equal(lgsm_meminfo(&t, &a), 0);
  assert_true(t > 0 && a <= t);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(defaults_valid), cmocka_unit_test(full_config),       cmocka_unit_test(errors),
      cmocka_unit_test(long_line),      cmocka_unit_test(missing_file),      cmocka_unit_test(example_config),
      cmocka_unit_test(signals),        cmocka_unit_test(cgroup_v2_fixture), cmocka_unit_test(cgroup_v1_fixture),
      cmocka_unit_test(psi_and_proc),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
