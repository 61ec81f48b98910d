/* SPDX-License-Identifier: MIT */
/*
 * eval.c - lg-eval-classifier: measures the committed classifier (lg_classify with
 * src/analysis/classify_model.c) on the held-out synthetic test split and on the
 * series recorded from real programs.
 *
 * Usage: lg-eval-classifier [--count N] [--recorded DIR] [--set NAME] [--show-errors K]
 *   --count N        test-split series to generate (default 7000, 1000 per class;
 *                    0 skips the synthetic split)
 *   --recorded DIR   directory with labels.csv and the CSV files (default:
 *                    tools/classify-data/recorded under the source tree); columns
 *                    file,label[,kind,program,args,interval_s,set]
 *   --set NAME       only the recorded series whose `set` column is NAME
 *   --show-errors K  print up to K misclassified series of each set
 * The recorded series are also summarised by kind (shapes, process, site) and set.
 * For each set prints accuracy, per-class precision/recall, the confusion matrix and
 * the rate of leak predictions on stable/plateau/sawtooth series. Exit status 0, or
 * 1 when a set cannot be read.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "analysis/classify.h"
#include "gen.h"

#ifndef LG_RECORDED_SRC_DIR
#define LG_RECORDED_SRC_DIR "tools/classify-data/recorded"
#endif

enum { C = LG_PATTERN_COUNT };

typedef struct tally {
  long cm[C][C]; /* [truth][predicted] */
  long n;
} tally_t;

static void report(const char *title, const tally_t *t) {
  long ok = 0, benign = 0, false_leak = 0;
  for (int i = 0; i < C; i++) {
    ok += t->cm[i][i];
    if (i == LG_PATTERN_STABLE || i == LG_PATTERN_PLATEAU || i == LG_PATTERN_SAWTOOTH)
      for (int j = 0; j < C; j++) {
        benign += t->cm[i][j];
        false_leak += lg_pattern_is_leak((lg_pattern_t)j) ? t->cm[i][j] : 0;
      }
  }
  printf("== %s: %ld series\n", title, t->n);
  printf("accuracy: %.2f %% (%ld/%ld)\n", t->n ? 100.0 * ok / t->n : 0.0, ok, t->n);
  printf("leak predicted for stable/plateau/sawtooth: %.2f %% (%ld/%ld)\n", benign ? 100.0 * false_leak / benign : 0.0,
         false_leak, benign);
  printf("\n%-18s %9s %9s %7s\n", "class", "precision", "recall", "n");
  for (int i = 0; i < C; i++) {
    long row = 0, col = 0;
    for (int j = 0; j < C; j++) {
      row += t->cm[i][j];
      col += t->cm[j][i];
    }
    char prec[16], rec[16];
    snprintf(prec, sizeof prec, col ? "%.2f %%" : "-", col ? 100.0 * t->cm[i][i] / col : 0);
    snprintf(rec, sizeof rec, row ? "%.2f %%" : "-", row ? 100.0 * t->cm[i][i] / row : 0);
    printf("%-18s %9s %9s %7ld\n", lg_pattern_name((lg_pattern_t)i), prec, rec, row);
  }
  printf("\nconfusion matrix (rows: truth, columns: predicted)\n%-18s", "");
  static const char *const abbr[C] = {"stab", "lin", "acc", "step", "plat", "saw", "frag"};
  for (int j = 0; j < C; j++) printf(" %6s", abbr[j]);
  printf("\n");
  for (int i = 0; i < C; i++) {
    printf("%-18s", lg_pattern_name((lg_pattern_t)i));
    for (int j = 0; j < C; j++) printf(" %6ld", t->cm[i][j]);
    printf("\n");
  }
  printf("\n");
}

static int parse_label(const char *s) {
  for (int c = 0; c < C; c++)
    if (!strcmp(s, lg_pattern_name((lg_pattern_t)c))) return c;
  return -1;
}

/* Evaluates the recorded series listed in dir/labels.csv; returns 0 or -1. */
typedef struct group {
  char name[32];
  long n, ok;
} group_t;

/* Counts one result in the group called name (up to MAXG groups). */
#define MAXG 32
static void group_add(group_t *g, int *ng, const char *name, int ok) {
  int i = 0;
  while (i < *ng && strcmp(g[i].name, name)) i++;
  if (i == *ng) {
    if (*ng == MAXG) return;
    snprintf(g[i].name, sizeof g[i].name, "%s", name);
    g[i].n = g[i].ok = 0;
    (*ng)++;
  }
  g[i].n++;
  g[i].ok += ok;
}

static int eval_recorded(const char *dir, const char *only, int show) {
  char path[4096], line[1024], err[512];
  snprintf(path, sizeof path, "%s/labels.csv", dir);
  FILE *lf = fopen(path, "r");
  if (!lf) {
    fprintf(stderr, "lg-eval-classifier: %s: cannot open\n", path);
    return -1;
  }
  tally_t t;
  memset(&t, 0, sizeof t);
  int lineno = 0, shown = 0, ngroups = 0;
  group_t groups[MAXG];
  while (fgets(line, sizeof line, lf)) {
    lineno++;
    line[strcspn(line, "\r\n")] = 0;
    if (!line[0] || line[0] == '#' || (lineno == 1 && !strncmp(line, "file,", 5))) continue;
    char *field[7] = {0};
    int nf = 0;
    for (char *p = line; nf < 7;) { /* empty fields kept */
      field[nf++] = p;
      p = strchr(p, ',');
      if (!p) break;
      *p++ = 0;
    }
    char *file = field[0], *lab = field[1];
    const char *kind = field[2] && *field[2] ? field[2] : "-";
    const char *set = field[6] && *field[6] ? field[6] : "-";
    if (only && strcmp(only, set)) continue;
    int y = lab ? parse_label(lab) : -1;
    if (!file || y < 0) {
      fprintf(stderr, "lg-eval-classifier: %s:%d: expected file,label\n", path, lineno);
      fclose(lf);
      return -1;
    }
    char sp[4096];
    snprintf(sp, sizeof sp, "%s/%s", dir, file);
    lga_series_t s;
    if (lga_series_load(sp, 0, &s, err, sizeof err)) {
      fprintf(stderr, "lg-eval-classifier: %s\n", err);
      fclose(lf);
      return -1;
    }
    lg_pattern_t p;
    double pr[C];
    if (lg_classify(s.t, s.v, s.rss, s.n, &p, pr)) {
      fprintf(stderr, "lg-eval-classifier: %s: rejected by lg_classify\n", sp);
      lga_series_free(&s);
      fclose(lf);
      return -1;
    }
    t.cm[y][p]++;
    t.n++;
    char g[48];
    snprintf(g, sizeof g, "kind %s", kind);
    group_add(groups, &ngroups, g, (int)p == y);
    snprintf(g, sizeof g, "set %s", set);
    group_add(groups, &ngroups, g, (int)p == y);
    /* the recorder's interval: the default 1 s, or finer */
    double iv = field[5] && *field[5] ? atof(field[5]) : 0;
    group_add(groups, &ngroups, iv >= 1 ? "interval 1 s" : "interval < 1 s", (int)p == y);
    if ((int)p != y && shown++ < show)
      printf("  miss: %s truth %s predicted %s (p=%.2f)\n", file, lg_pattern_name((lg_pattern_t)y), lg_pattern_name(p),
             pr[p]);
    lga_series_free(&s);
  }
  fclose(lf);
  snprintf(path, sizeof path, "recorded series (%s%s%s)", dir, only ? ", set " : "", only ? only : "");
  report(path, &t);
  printf("recorded accuracy by group:");
  for (int i = 0; i < ngroups; i++)
    printf("  %s: %.2f %% (%ld/%ld)", groups[i].name, groups[i].n ? 100.0 * groups[i].ok / groups[i].n : 0.0,
           groups[i].ok, groups[i].n);
  printf("\n");
  return 0;
}

int main(int argc, char **argv) {
  unsigned long count = 7000;
  const char *dir = LG_RECORDED_SRC_DIR;
  const char *only = NULL;
  int show = 0;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--count") && i + 1 < argc) count = strtoul(argv[++i], NULL, 10);
    else if (!strcmp(argv[i], "--recorded") && i + 1 < argc) dir = argv[++i];
    else if (!strcmp(argv[i], "--set") && i + 1 < argc) only = argv[++i];
    else if (!strcmp(argv[i], "--show-errors") && i + 1 < argc) show = atoi(argv[++i]);
    else {
      fprintf(stderr, "usage: lg-eval-classifier [--count N] [--recorded DIR] "
                      "[--set NAME] [--show-errors K]\n");
      return 2;
    }
  }
  tally_t t;
  memset(&t, 0, sizeof t);
  lgi_gen_series_t *s = malloc(sizeof *s);
  if (!s) return 1;
  int shown = 0;
  static const size_t edges[] = {8, 24, 100, 500, LGI_GEN_MAXN + 1};
  long bucket_n[4] = {0}, bucket_ok[4] = {0};
  for (unsigned long k = 0; k < count; k++) {
    lgi_gen_make(LGI_GEN_TEST, k, s);
    lg_pattern_t p;
    double pr[C];
    if (lg_classify(s->t, s->v, s->has_rss ? s->rss : NULL, s->n, &p, pr)) {
      fprintf(stderr, "lg-eval-classifier: test series %lu rejected\n", k);
      return 1;
    }
    t.cm[s->label][p]++;
    t.n++;
    for (int b = 0; b < 4; b++)
      if (s->n >= edges[b] && s->n < edges[b + 1]) {
        bucket_n[b]++;
        bucket_ok[b] += (int)p == s->label;
      }
    if ((int)p != s->label && shown++ < show)
      printf("  miss: test %lu predicted %s (p=%.2f): %s\n", k, lg_pattern_name(p), pr[p], s->desc);
  }
  free(s);
  if (count) {
    report("synthetic held-out test split", &t);
    printf("accuracy by series length:");
    for (int b = 0; b < 4; b++)
      printf("  %zu-%zu: %.2f %% (%ld)", edges[b], edges[b + 1] - 1,
             bucket_n[b] ? 100.0 * bucket_ok[b] / bucket_n[b] : 0.0, bucket_n[b]);
    printf("\n\n");
  }
  return eval_recorded(dir, only, show) ? 1 : 0;
}
