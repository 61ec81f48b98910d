/* SPDX-License-Identifier: MIT */
/*
 * eval.c - lg-eval-classifier: measures the committed classifier (lg_classify with
 * src/analysis/classify_model.c) on the held-out synthetic test split and on the
 * series recorded from real programs.
 *
 * Usage: lg-eval-classifier [--count N] [--recorded DIR] [--show-errors K]
 *   --count N        test-split series to generate (default 7000, 1000 per class)
 *   --recorded DIR   directory with labels.csv (file,label[,...]) and the CSV files
 *                    (default: tools/classify-data/recorded under the source tree)
 *   --show-errors K  print up to K misclassified series of each set
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

static void report(const char *title, const tally_t *t)
{
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
  printf("leak predicted for stable/plateau/sawtooth: %.2f %% (%ld/%ld)\n",
         benign ? 100.0 * false_leak / benign : 0.0, false_leak, benign);
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
  for (int j = 0; j < C; j++)
    printf(" %6s", abbr[j]);
  printf("\n");
  for (int i = 0; i < C; i++) {
    printf("%-18s", lg_pattern_name((lg_pattern_t)i));
    for (int j = 0; j < C; j++)
      printf(" %6ld", t->cm[i][j]);
    printf("\n");
  }
  printf("\n");
}

static int parse_label(const char *s)
{
  for (int c = 0; c < C; c++)
    if (!strcmp(s, lg_pattern_name((lg_pattern_t)c)))
      return c;
  return -1;
}

/* Evaluates the recorded series listed in dir/labels.csv; returns 0 or -1. */
static int eval_recorded(const char *dir, int show)
{
  char path[4096], line[1024], err[512];
  snprintf(path, sizeof path, "%s/labels.csv", dir);
  FILE *lf = fopen(path, "r");
  if (!lf) {
    fprintf(stderr, "lg-eval-classifier: %s: cannot open\n", path);
    return -1;
  }
  tally_t t;
  memset(&t, 0, sizeof t);
  int lineno = 0, shown = 0;
  while (fgets(line, sizeof line, lf)) {
    lineno++;
    line[strcspn(line, "\r\n")] = 0;
    if (!line[0] || line[0] == '#' || (lineno == 1 && !strncmp(line, "file,", 5)))
      continue;
    char *file = strtok(line, ","), *lab = strtok(NULL, ",");
    int y = lab ? parse_label(lab) : -1;
    if (!file || y < 0) {
      fprintf(stderr, "lg-eval-classifier: %s:%d: expected file,label\n", path, lineno);
      fclose(lf);
      return -1;
    }
    char sp[4096];
    snprintf(sp, sizeof sp, "%s/%s", dir, file);
    lgi_series_t s;
    if (lgi_series_load(sp, &s, err, sizeof err)) {
      fprintf(stderr, "lg-eval-classifier: %s\n", err);
      fclose(lf);
      return -1;
    }
    lg_pattern_t p;
    double pr[C];
    if (lg_classify(s.t, s.v, s.rss, s.n, &p, pr)) {
      fprintf(stderr, "lg-eval-classifier: %s: rejected by lg_classify\n", sp);
      lgi_series_free(&s);
      fclose(lf);
      return -1;
    }
    t.cm[y][p]++;
    t.n++;
    if ((int)p != y && shown++ < show)
      printf("  miss: %s truth %s predicted %s (p=%.2f)\n", file,
             lg_pattern_name((lg_pattern_t)y), lg_pattern_name(p), pr[p]);
    lgi_series_free(&s);
  }
  fclose(lf);
  snprintf(path, sizeof path, "recorded series (%s)", dir);
  report(path, &t);
  return 0;
}

int main(int argc, char **argv)
{
  unsigned long count = 7000;
  const char *dir = LG_RECORDED_SRC_DIR;
  int show = 0;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--count") && i + 1 < argc)
      count = strtoul(argv[++i], NULL, 10);
    else if (!strcmp(argv[i], "--recorded") && i + 1 < argc)
      dir = argv[++i];
    else if (!strcmp(argv[i], "--show-errors") && i + 1 < argc)
      show = atoi(argv[++i]);
    else {
      fprintf(stderr, "usage: lg-eval-classifier [--count N] [--recorded DIR] "
                      "[--show-errors K]\n");
      return 2;
    }
  }
  tally_t t;
  memset(&t, 0, sizeof t);
  lgi_gen_series_t *s = malloc(sizeof *s);
  if (!s)
    return 1;
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
      printf("  miss: test %lu predicted %s (p=%.2f): %s\n", k, lg_pattern_name(p), pr[p],
             s->desc);
  }
  free(s);
  report("synthetic held-out test split", &t);
  printf("accuracy by series length:");
  for (int b = 0; b < 4; b++)
    printf("  %zu-%zu: %.2f %% (%ld)", edges[b], edges[b + 1] - 1,
           bucket_n[b] ? 100.0 * bucket_ok[b] / bucket_n[b] : 0.0, bucket_n[b]);
  printf("\n\n");
  return eval_recorded(dir, show) ? 1 : 0;
}
