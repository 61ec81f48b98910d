/* SPDX-License-Identifier: MIT */
/*
 * codec.c - libscencodec.so: a toy video decoder used by mt_shlib.
 *
 * Ground truth: codec_decode() attaches side data (HDR metadata) to some frames;
 * codec_frame_release() frees the pixels but forgets the side data, so the
 * side-data allocation in codec_decode() (LEAK-SITE) leaks for every frame that
 * carries metadata. The decoder's scratch buffers and reference frames are
 * bounded.
 */
#include "codec.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

struct codec_ctx {
  unsigned width, height;
  unsigned char *ref[2]; /* reference frames, reused */
  unsigned char *scratch;
  size_t scratch_cap;
  unsigned long decoded;
};

struct codec_ctx *codec_open(unsigned width, unsigned height) {
  struct codec_ctx *c = calloc(1, sizeof *c);
  c->width = width;
  c->height = height;
  for (int i = 0; i < 2; i++) c->ref[i] = calloc((size_t)width * height, 1);
  return c;
}

static unsigned char *scratch_get(struct codec_ctx *c, size_t need) {
  if (need > c->scratch_cap) {
    free(c->scratch);
    c->scratch_cap = need + need / 2;
    c->scratch = malloc(c->scratch_cap);
  }
  return c->scratch;
}

int codec_decode(struct codec_ctx *c, const unsigned char *pkt, size_t len,
                 struct codec_frame *out) {
  if (len < 16 || pkt[0] != 0x47) return -1;
  size_t npix = (size_t)c->width * c->height / (1u + (pkt[1] & 3));
  unsigned char *tmp = scratch_get(c, len * 2);
  for (size_t i = 0; i < len; i++) tmp[i] = (unsigned char)(pkt[i] ^ c->ref[c->decoded & 1][i % npix]);
  memset(out, 0, sizeof *out);
  out->pts = c->decoded;
  out->len = npix;
  out->pixels = malloc(npix);
  for (size_t i = 0; i < npix; i += 64) out->pixels[i] = tmp[i % len];
  if (pkt[2] & 0x80) { /* packet carries HDR metadata */
    size_t slen = 64 + (size_t)pkt[3] * 4 + (pkt[4] & 63);
    struct codec_side_data *sd = malloc(sizeof *sd + slen); /* LEAK-SITE */
    sd->kind = pkt[2] & 0x7f;
    sd->len = slen;
    memcpy(sd->bytes, pkt + 5, slen < len - 5 ? slen : len - 5);
    out->side = sd;
  }
  memcpy(c->ref[c->decoded & 1], out->pixels, npix < 4096 ? npix : 4096);
  c->decoded++;
  return 0;
}

void codec_frame_release(struct codec_frame *f) {
  free(f->pixels); /* bug: f->side is never freed */
  f->pixels = NULL;
}

void codec_close(struct codec_ctx *c) {
  for (int i = 0; i < 2; i++) free(c->ref[i]);
  free(c->scratch);
  free(c);
}

unsigned long codec_frames_decoded(const struct codec_ctx *c) { return c->decoded; }
