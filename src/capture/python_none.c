/* SPDX-License-Identifier: MIT */
/* python_none.c - stand-in for python.c when built without CPython 3.11 headers. */
#include "capture/recorder.h"

void lgi_python_detect(void) {}
int lgi_python_active(void) { return 0; }
unsigned lgi_python_frames(lgi_tls_t *t, uint64_t *out, unsigned max) {
  (void)t;
  (void)out;
  (void)max;
  return 0;
}
int lgi_python_interp_frame(uint64_t ip) {
  (void)ip;
  return 0;
}
