/* SPDX-License-Identifier: MIT */
/* codec.h - API of libscencodec.so, the shared library used by mt_shlib. */
#ifndef SCEN_CODEC_H
#define SCEN_CODEC_H

#include <stddef.h>
#include <stdint.h>

struct codec_side_data {
  uint32_t kind;
  size_t len;
  unsigned char bytes[];
};

struct codec_frame {
  uint64_t pts;
  size_t len;
  unsigned char *pixels;
  struct codec_side_data *side; /* optional, e.g. HDR metadata */
};

struct codec_ctx;

struct codec_ctx *codec_open(unsigned width, unsigned height);
/* Decodes one packet into *out. Returns 0, or -1 on a corrupt packet. */
int codec_decode(struct codec_ctx *ctx, const unsigned char *pkt, size_t len,
                 struct codec_frame *out);
void codec_frame_release(struct codec_frame *f);
void codec_close(struct codec_ctx *ctx);
unsigned long codec_frames_decoded(const struct codec_ctx *ctx);

#endif
