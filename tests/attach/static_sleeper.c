/* SPDX-License-Identifier: MIT */
/* static_sleeper.c - a statically linked program (attach must refuse it). */
#include <unistd.h>

int main(void) {
  for (;;) pause();
}
