/* SPDX-License-Identifier: MIT */
/* classify_api.c - lg_classify(): the features of classify.c fed to the generated
 * model (classify_model.c). Apart from classify.c so that tools/classify/train.c, which
 * writes the model, links the features without one. */
#include "analysis/classify.h"

#include <errno.h>
#include <string.h>

LG_API int lg_classify(const double *t, const double *v, const double *rss, size_t n, lg_pattern_t *out,
                       double probs[LG_PATTERN_COUNT]) {
  double f[LGA_CLS_NFEAT], p[LG_PATTERN_COUNT];
  if (!out) return -EINVAL;
  int rc = lga_classify_features(t, v, rss, n, f);
  if (rc) return rc;
  *out = lga_classify_infer(&lga_classify_model, f, p);
  if (probs) memcpy(probs, p, sizeof p);
  return 0;
}
