/* SPDX-License-Identifier: MIT */
/*
 * config.c - the guard's INI configuration (parsed with inih), defaults and checks.
 * Every error names the file, the line and the reason. Reference: docs/guard.md and
 * deploy/guard.example.ini.
 */
#include "guard/guard_impl.h"
#include "leakguard.h"

#include <errno.h>
#include <ini.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <limits.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/util.h"

void lgg_config_defaults(lgg_config_t *c) {
  memset(c, 0, sizeof *c);
  c->interval_s = 0.1;
  c->memory = LGSM_MEM_RSS;
  c->scan_interval_s = 1.0;
  c->gpu_interval_s = 0.5;
  c->gpu = -1;
  c->lv.thr[1] = 0.75;
  c->lv.thr[2] = 0.88;
  c->lv.thr[3] = 0.95;
  c->lv.hysteresis = 0.05;
  c->lv.min_dwell_s = 5.0;
  c->lv.window_s = 4.0;
  c->lv.horizon_s[1] = 120;
  c->lv.horizon_s[2] = 30;
  c->lv.horizon_s[3] = 5;
  c->lv.predict_min = 0.5;
  c->lv.psi[1] = 10;
  c->lv.psi[2] = 30;
  c->lv.psi[3] = 0;
  for (int k = 0; k < LGG_NLEVELS; k++) {
    c->act[k].signal = SIGUSR1;
    c->act[k].signal_target = LGG_T_ALL;
    c->act[k].memory_high = 0.9;
  }
  c->act[1].mask = LGG_A_LOG;
  c->act[2].mask = LGG_A_LOG | LGG_A_PUBLISH;
  c->act[3].mask = LGG_A_LOG | LGG_A_PUBLISH | LGG_A_KILL;
  c->act[3].repeat_s = 2.0;
  c->kill_grace_s = 1.0;
  c->kill_fallback = LGG_FB_LARGEST;
  c->kill_min_growth = 64 * 1024;
}

void lgg_config_free(lgg_config_t *c) {
  free(c->log_path);
  for (int k = 0; k < LGG_NLEVELS; k++) free(c->act[k].command);
  c->log_path = NULL;
  for (int k = 0; k < LGG_NLEVELS; k++) c->act[k].command = NULL;
}

const char *lgg_action_name(unsigned bit) {
  switch (bit) {
  case LGG_A_LOG: return "log";
  case LGG_A_PUBLISH: return "publish";
  case LGG_A_SIGNAL: return "signal";
  case LGG_A_MEMHIGH: return "memory_high";
  case LGG_A_EXEC: return "exec";
  case LGG_A_KILL: return "kill";
  }
  return "?";
}

static const struct {
  const char *name;
  int sig;
} sigs[] = {{"HUP", SIGHUP},     {"INT", SIGINT},   {"QUIT", SIGQUIT}, {"USR1", SIGUSR1}, {"USR2", SIGUSR2},
            {"TERM", SIGTERM},   {"KILL", SIGKILL}, {"CONT", SIGCONT}, {"STOP", SIGSTOP}, {"ALRM", SIGALRM},
            {"WINCH", SIGWINCH}, {"PWR", SIGPWR},   {"URG", SIGURG}};

int lgg_signal_parse(const char *s) {
  long v;
  if (lgu_parse_long(s, 1, 64, &v) == 0) return (int)v;
  if (!strncasecmp(s, "SIG", 3)) s += 3;
  for (size_t i = 0; i < sizeof sigs / sizeof *sigs; i++)
    if (!strcasecmp(s, sigs[i].name)) return sigs[i].sig;
  if (!strncasecmp(s, "RTMIN+", 6) && lgu_parse_long(s + 6, 0, 30, &v) == 0 && SIGRTMIN + v <= SIGRTMAX)
    return SIGRTMIN + (int)v;
  return -1;
}

const char *lgg_signal_name(int sig, char *buf, size_t n) {
  for (size_t i = 0; i < sizeof sigs / sizeof *sigs; i++)
    if (sigs[i].sig == sig) {
      snprintf(buf, n, "SIG%s", sigs[i].name);
      return buf;
    }
  snprintf(buf, n, "%d", sig);
  return buf;
}

/* ------------------------------------------------------------------ value parsers */

/* "75%" or "0.75" -> 0.75, in [0, 1]. */
static int parse_fraction(const char *s, double *out) {
  char tmp[64];
  size_t n = strlen(s);
  if (n == 0 || n >= sizeof tmp) return -EINVAL;
  memcpy(tmp, s, n + 1);
  double div = 1;
  if (tmp[n - 1] == '%') {
    tmp[n - 1] = 0;
    div = 100;
  }
  double v;
  if (lgu_parse_double(tmp, &v) != 0) return -EINVAL;
  v /= div;
  if (v < 0 || v > 1) return -ERANGE;
  *out = v;
  return 0;
}

/* "2", "2s", "500ms", "1.5m", "1h" -> seconds, >= 0. */
static int parse_duration(const char *s, double *out) {
  char tmp[64];
  size_t n = strlen(s);
  if (n == 0 || n >= sizeof tmp) return -EINVAL;
  memcpy(tmp, s, n + 1);
  double mul = 1;
  if (n > 2 && !strcmp(tmp + n - 2, "ms")) {
    mul = 0.001;
    tmp[n - 2] = 0;
  } else if (tmp[n - 1] == 's') tmp[n - 1] = 0;
  else if (tmp[n - 1] == 'm') {
    mul = 60;
    tmp[n - 1] = 0;
  } else if (tmp[n - 1] == 'h') {
    mul = 3600;
    tmp[n - 1] = 0;
  }
  double v;
  if (lgu_parse_double(tmp, &v) != 0) return -EINVAL;
  if (v < 0) return -ERANGE;
  *out = v * mul;
  return 0;
}

static int parse_bool(const char *s, int *out) {
  if (!strcasecmp(s, "1") || !strcasecmp(s, "true") || !strcasecmp(s, "yes") || !strcasecmp(s, "on")) {
    *out = 1;
    return 0;
  }
  if (!strcasecmp(s, "0") || !strcasecmp(s, "false") || !strcasecmp(s, "no") || !strcasecmp(s, "off")) {
    *out = 0;
    return 0;
  }
  return -EINVAL;
}

static int parse_actions(const char *s, unsigned *mask, char *bad, size_t badlen) {
  static const unsigned all[] = {LGG_A_LOG, LGG_A_PUBLISH, LGG_A_SIGNAL, LGG_A_MEMHIGH, LGG_A_EXEC, LGG_A_KILL};
  unsigned m = 0;
  const char *p = s;
  while (*p) {
    while (*p == ' ' || *p == '\t' || *p == ',') p++;
    if (!*p) break;
    const char *e = p;
    while (*e && *e != ',' && *e != ' ' && *e != '\t') e++;
    size_t len = (size_t)(e - p);
    if (len == 4 && !strncmp(p, "none", 4)) {
      p = e;
      continue;
    }
    unsigned bit = 0;
    for (size_t i = 0; i < sizeof all / sizeof *all; i++)
      if (strlen(lgg_action_name(all[i])) == len && !strncmp(p, lgg_action_name(all[i]), len)) bit = all[i];
    if (!bit) {
      snprintf(bad, badlen, "%.*s", (int)len, p);
      return -EINVAL;
    }
    m |= bit;
    p = e;
  }
  *mask = m;
  return 0;
}

/* ------------------------------------------------------------------ the INI handler */
typedef struct ctx {
  lgg_config_t *c;
  const char *name;
  int line; /* current line (counted by our reader) */
  int err_line;
  char err[256];
  int line_levels; /* where thresholds / actions were last set, for checks */
  int line_act[LGG_NLEVELS];
  const char *text; /* for the string reader */
  FILE *f;
  int long_line; /* first line longer than inih reads at once */
  int cont;      /* the last piece read did not end its line */
} ctx_t;

static int fail(ctx_t *x, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int fail(ctx_t *x, const char *fmt, ...) {
  if (!x->err_line) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(x->err, sizeof x->err, fmt, ap);
    va_end(ap);
    x->err_line = x->line;
  }
  return 0;
}

static int setstr(char **dst, const char *v) {
  char *d = strdup(v);
  if (!d) return -ENOMEM;
  free(*dst);
  *dst = d;
  return 0;
}

#define KEY(k) (!strcmp(name, k))

static int handler(void *user, const char *section, const char *name, const char *value) {
  ctx_t *x = user;
  lgg_config_t *c = x->c;
  double d;
  int b;
  if (!*value && strcmp(name, "command")) return fail(x, "empty value for '%s'", name);
  if (!strcmp(section, "guard")) {
    if (KEY("interval")) {
      if (parse_duration(value, &d) || d < 0.01 || d > 60)
        return fail(x, "interval: '%s' is not a duration between 10ms and 60s", value);
      c->interval_s = d;
    } else if (KEY("dry_run")) {
      if (parse_bool(value, &b)) return fail(x, "dry_run: '%s' is not true or false", value);
      c->dry_run = b;
    } else if (KEY("memory")) {
      if (!strcmp(value, "rss")) c->memory = LGSM_MEM_RSS;
      else if (!strcmp(value, "pss")) c->memory = LGSM_MEM_PSS;
      else return fail(x, "memory: '%s' is not rss or pss", value);
    } else if (KEY("log")) {
      if (setstr(&c->log_path, value)) return fail(x, "out of memory");
    } else if (KEY("scan_interval")) {
      if (parse_duration(value, &d) || d < 0.05) return fail(x, "scan_interval: '%s' is not a duration >= 50ms", value);
      c->scan_interval_s = d;
    } else if (KEY("gpu_interval")) {
      if (parse_duration(value, &d) || d < 0.05) return fail(x, "gpu_interval: '%s' is not a duration >= 50ms", value);
      c->gpu_interval_s = d;
    } else if (KEY("gpu")) {
      if (!strcmp(value, "auto")) c->gpu = -1;
      else if (parse_bool(value, &b) == 0) c->gpu = b;
      else return fail(x, "gpu: '%s' is not auto, on or off", value);
    } else if (KEY("limit")) {
      uint64_t v;
      if (lgu_parse_size(value, &v) || v == 0) return fail(x, "limit: '%s' is not a size (e.g. 512M, 8G)", value);
      c->limit = v;
    } else {
      return fail(x, "unknown key '%s' in [guard]", name);
    }
    return 1;
  }
  if (!strcmp(section, "levels")) {
    for (int k = 1; k < LGG_NLEVELS; k++) {
      char hk[32], pk[32];
      snprintf(hk, sizeof hk, "horizon_%s", lg_level_name((lg_level_t)k));
      snprintf(pk, sizeof pk, "psi_%s", lg_level_name((lg_level_t)k));
      if (KEY(lg_level_name((lg_level_t)k))) {
        if (parse_fraction(value, &d))
          return fail(x, "%s: '%s' is not a percentage (0-100%%) or fraction (0-1)", name, value);
        c->lv.thr[k] = d;
        x->line_levels = x->line;
        return 1;
      }
      if (KEY(hk)) {
        if (parse_duration(value, &d))
          return fail(x, "%s: '%s' is not a duration (e.g. 30s, 5m; 0 = off)", name, value);
        c->lv.horizon_s[k] = d;
        return 1;
      }
      if (KEY(pk)) {
        if (lgu_parse_double(value, &d) || d < 0 || d > 100)
          return fail(x, "%s: '%s' is not a PSI percentage 0-100 (0 = off)", name, value);
        c->lv.psi[k] = d;
        return 1;
      }
    }
    if (KEY("hysteresis")) {
      if (parse_fraction(value, &d) || d > 0.5)
        return fail(x, "hysteresis: '%s' is not a percentage between 0 and 50%%", value);
      c->lv.hysteresis = d;
      x->line_levels = x->line;
    } else if (KEY("min_dwell")) {
      if (parse_duration(value, &d)) return fail(x, "min_dwell: '%s' is not a duration", value);
      c->lv.min_dwell_s = d;
    } else if (KEY("window")) {
      if (parse_duration(value, &d) || d < 0.5 || d > 3600)
        return fail(x, "window: '%s' is not a duration between 0.5s and 1h", value);
      c->lv.window_s = d;
    } else if (KEY("predict_min")) {
      if (parse_fraction(value, &d)) return fail(x, "predict_min: '%s' is not a percentage or fraction", value);
      c->lv.predict_min = d;
    } else {
      return fail(x, "unknown key '%s' in [levels]", name);
    }
    return 1;
  }
  for (int k = 1; k < LGG_NLEVELS; k++) {
    if (strcmp(section, lg_level_name((lg_level_t)k))) continue;
    lgg_actions_cfg_t *a = &c->act[k];
    if (KEY("actions")) {
      char bad[64];
      if (parse_actions(value, &a->mask, bad, sizeof bad))
        return fail(x, "unknown action '%s' (actions: log, publish, signal, memory_high, exec, kill, none)", bad);
      x->line_act[k] = x->line;
    } else if (KEY("signal")) {
      int s = lgg_signal_parse(value);
      if (s < 0) return fail(x, "signal: '%s' is not a signal name or number", value);
      a->signal = s;
    } else if (KEY("signal_target")) {
      if (!strcmp(value, "all")) a->signal_target = LGG_T_ALL;
      else if (!strcmp(value, "top")) a->signal_target = LGG_T_TOP;
      else return fail(x, "signal_target: '%s' is not all or top", value);
    } else if (KEY("memory_high")) {
      if (parse_fraction(value, &d) || d < 0.05)
        return fail(x, "memory_high: '%s' is not a percentage of the limit (5-100%%)", value);
      a->memory_high = d;
    } else if (KEY("command")) {
      if (setstr(&a->command, value)) return fail(x, "out of memory");
    } else if (KEY("repeat")) {
      if (parse_duration(value, &d)) return fail(x, "repeat: '%s' is not a duration (0 = once)", value);
      a->repeat_s = d;
    } else {
      return fail(x, "unknown key '%s' in [%s]", name, section);
    }
    return 1;
  }
  if (!strcmp(section, "kill")) {
    if (KEY("grace")) {
      if (parse_duration(value, &d) || d > 60) return fail(x, "grace: '%s' is not a duration up to 60s", value);
      c->kill_grace_s = d;
    } else if (KEY("fallback")) {
      if (!strcmp(value, "largest")) c->kill_fallback = LGG_FB_LARGEST;
      else if (!strcmp(value, "none")) c->kill_fallback = LGG_FB_NONE;
      else return fail(x, "fallback: '%s' is not largest or none", value);
    } else if (KEY("min_growth")) {
      uint64_t v;
      if (lgu_parse_size(value, &v)) return fail(x, "min_growth: '%s' is not a size per second (e.g. 1M)", value);
      c->kill_min_growth = (double)v;
    } else if (KEY("include_protected")) {
      if (parse_bool(value, &b)) return fail(x, "include_protected: '%s' is not true or false", value);
      c->kill_protected = b;
    } else {
      return fail(x, "unknown key '%s' in [kill]", name);
    }
    return 1;
  }
  if (!*section)
    return fail(x, "key '%s' outside a section (sections: guard, levels, warn, breaker, emergency, kill)", name);
  return fail(x, "unknown section [%s] (sections: guard, levels, warn, breaker, emergency, kill)", section);
}

/* Line readers: count lines so errors name them (inih calls the reader once a line,
 * or once per 199-character piece of an over-long line). */
static char *count_line(ctx_t *x, char *str, int num) {
  size_t n = strlen(str);
  if (!x->cont) x->line++;
  x->cont = n > 0 && str[n - 1] != '\n' && n + 1 >= (size_t)num;
  if (x->cont && !x->long_line) x->long_line = x->line;
  return str;
}

static char *file_reader(char *str, int num, void *stream) {
  ctx_t *x = stream;
  return fgets(str, num, x->f) ? count_line(x, str, num) : NULL;
}

static char *string_reader(char *str, int num, void *stream) {
  ctx_t *x = stream;
  if (!*x->text) return NULL;
  const char *nl = strchr(x->text, '\n');
  size_t len = nl ? (size_t)(nl - x->text) + 1 : strlen(x->text);
  if (len > (size_t)num - 1) len = (size_t)num - 1;
  memcpy(str, x->text, len);
  str[len] = 0;
  x->text += len;
  return count_line(x, str, num);
}

static int check(ctx_t *x, char *why, size_t whylen) {
  lgg_config_t *c = x->c;
  double prev = 0;
  for (int k = 1; k < LGG_NLEVELS; k++) {
    if (c->lv.thr[k] <= 0) continue;
    if (c->lv.thr[k] <= prev) {
      snprintf(why, whylen, "%s:%d: thresholds must increase: %s (%.0f%%) is not above the level below it (%.0f%%)",
               x->name, x->line_levels, lg_level_name((lg_level_t)k), c->lv.thr[k] * 100, prev * 100);
      return -EINVAL;
    }
    if (c->lv.thr[k] <= c->lv.hysteresis) {
      snprintf(why, whylen, "%s:%d: hysteresis (%.0f%%) must be below the %s threshold (%.0f%%)", x->name,
               x->line_levels, c->lv.hysteresis * 100, lg_level_name((lg_level_t)k), c->lv.thr[k] * 100);
      return -EINVAL;
    }
    prev = c->lv.thr[k];
  }
  for (int k = 1; k < LGG_NLEVELS; k++) {
    if ((c->act[k].mask & LGG_A_EXEC) && !c->act[k].command) {
      snprintf(why, whylen, "%s:%d: [%s] action 'exec' needs 'command = ...' in [%s]", x->name, x->line_act[k],
               lg_level_name((lg_level_t)k), lg_level_name((lg_level_t)k));
      return -EINVAL;
    }
  }
  if (c->lv.window_s < 4 * c->interval_s) {
    snprintf(why, whylen, "%s: window (%gs) must be at least 4 intervals (%gs)", x->name, c->lv.window_s,
             c->interval_s);
    return -EINVAL;
  }
  return 0;
}

static int finish(ctx_t *x, int rc, char *why, size_t whylen) {
  if (rc == -1) {
    snprintf(why, whylen, "%s: cannot open: %s", x->name, strerror(errno));
    return -errno;
  }
  if (rc == -2) {
    snprintf(why, whylen, "%s: out of memory", x->name);
    return -ENOMEM;
  }
  if (x->long_line && (!x->err_line || x->long_line <= x->err_line)) {
    snprintf(why, whylen, "%s:%d: line too long (at most %d characters)", x->name, x->long_line, INI_MAX_LINE - 2);
    return -EINVAL;
  }
  if (x->err_line && (rc <= 0 || x->err_line <= rc)) {
    snprintf(why, whylen, "%s:%d: %s", x->name, x->err_line, x->err);
    return -EINVAL;
  }
  if (rc > 0) {
    snprintf(why, whylen, "%s:%d: syntax error: expected '[section]', 'key = value' or a comment", x->name, rc);
    return -EINVAL;
  }
  return check(x, why, whylen);
}

/* sshd's StrictModes for a file that can make the guard exec a command or kill a
 * process: the file, and every directory above it, owned by us or root and writable by
 * nobody else (group or other). Checked on the opened file (fstat: what is read is what
 * was checked) and on the directories of its real path. 0, or -EPERM with the file, the
 * reason and the fix in why. A sticky directory others may write (/tmp) is fine. */
static int trusted(int fd, const char *path, char *why, size_t whylen) {
  uid_t me = geteuid();
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    snprintf(why, whylen, "%s: not a regular file", path);
    return -EINVAL;
  }
  if ((st.st_uid != me && st.st_uid != 0) || (st.st_mode & (S_IWGRP | S_IWOTH))) {
    snprintf(why, whylen,
             "%s: refused: %s; the guard runs its actions (exec, kill) as uid %u, so its configuration must "
             "be owned by that user or root and writable by nobody else (chown, chmod go-w)",
             path, (st.st_uid != me && st.st_uid != 0) ? "owned by another user" : "writable by group or others",
             (unsigned)me);
    return -EPERM;
  }
  /* the directories of the file that was opened (its descriptor's path), not of what
   * the name resolves to now: a link swapped after the open cannot pass them off */
  char real[PATH_MAX], fdp[64];
  snprintf(fdp, sizeof fdp, "/proc/self/fd/%d", fd);
  ssize_t rl = readlink(fdp, real, sizeof real - 1);
  if (rl <= 0 || real[0] != '/') {
    snprintf(why, whylen, "%s: cannot tell which directory holds it (%s)", path, rl < 0 ? strerror(errno) : "?");
    return -EPERM;
  }
  real[rl] = 0;
  for (char *slash = strrchr(real, '/'); slash; slash = strrchr(real, '/')) {
    if (slash == real) slash[1] = 0; /* "/" itself, last */
    else *slash = 0;
    struct stat ds;
    if (stat(real, &ds) != 0) break;
    /* a sticky one (/tmp) is fine: nobody else can replace what is in it */
    if ((ds.st_uid != me && ds.st_uid != 0) || ((ds.st_mode & (S_IWGRP | S_IWOTH)) && !(ds.st_mode & S_ISVTX))) {
      snprintf(why, whylen,
               "%s: refused: its directory %s is %s; the guard runs its actions as uid %u, so every directory "
               "above its configuration must be owned by that user or root and writable by nobody else",
               path, real,
               (ds.st_uid != me && ds.st_uid != 0) ? "owned by another user" : "writable by group or others",
               (unsigned)me);
      return -EPERM;
    }
    if (!strcmp(real, "/")) break;
  }
  return 0;
}

int lgg_config_load(lgg_config_t *c, const char *path, char *why, size_t whylen) {
  ctx_t x = {.c = c, .name = path};
  x.f = fopen(path, "re");
  if (!x.f) {
    int e = errno;
    snprintf(why, whylen, "%s: cannot open: %s", path, strerror(e));
    return -e;
  }
  int trc = trusted(fileno(x.f), path, why, whylen);
  if (trc) {
    fclose(x.f);
    return trc;
  }
  int rc = ini_parse_stream(file_reader, &x, handler, &x);
  fclose(x.f);
  return finish(&x, rc, why, whylen);
}

int lgg_config_load_string(lgg_config_t *c, const char *text, const char *name, char *why, size_t whylen) {
  ctx_t x = {.c = c, .name = name, .text = text};
  int rc = ini_parse_stream(string_reader, &x, handler, &x);
  return finish(&x, rc, why, whylen);
}
