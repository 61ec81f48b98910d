/* SPDX-License-Identifier: MIT */
/* guard_fake_nvml.c - a stand-in for libnvidia-ml.so.1 (tests only): one device whose
 * used memory is read from the file named by LEAKGUARD_FAKE_NVML ("USED TOTAL [PID
 * BYTES]"); loaded by the guard with LEAKGUARD_NVML=path/libfake_nvml.so. */
#include <stdio.h>
#include <stdlib.h>

typedef struct { unsigned long long total, free, used; } mem_t;
typedef struct { unsigned int pid; unsigned long long used; } proc_t;

int nvmlInit_v2(void);
int nvmlShutdown(void);
int nvmlDeviceGetCount_v2(unsigned *n);
int nvmlDeviceGetHandleByIndex_v2(unsigned i, void **h);
int nvmlDeviceGetMemoryInfo(void *h, mem_t *m);
int nvmlDeviceGetComputeRunningProcesses(void *h, unsigned *n, proc_t *p);
const char *nvmlErrorString(int rc);

static int dev;
static int rd(unsigned long long *used, unsigned long long *total, unsigned *pid, unsigned long long *pb) {
  const char *f = getenv("LEAKGUARD_FAKE_NVML");
  FILE *fp = f ? fopen(f, "r") : NULL;
  *used = 1ULL << 30;
  *total = 80ULL << 30;
  *pid = 0;
  *pb = 0;
  if (!fp) return 0;
  int k = fscanf(fp, "%llu %llu %u %llu", used, total, pid, pb);
  fclose(fp);
  return k;
}
int nvmlInit_v2(void) { return 0; }
int nvmlShutdown(void) { return 0; }
int nvmlDeviceGetCount_v2(unsigned *n) { *n = 1; return 0; }
int nvmlDeviceGetHandleByIndex_v2(unsigned i, void **h) { *h = &dev; return i == 0 ? 0 : 2; }
int nvmlDeviceGetMemoryInfo(void *h, mem_t *m) {
  (void)h;
  unsigned pid;
  unsigned long long pb;
  rd(&m->used, &m->total, &pid, &pb);
  m->free = m->total - m->used;
  return 0;
}
int nvmlDeviceGetComputeRunningProcesses(void *h, unsigned *n, proc_t *p) {
  (void)h;
  unsigned long long u, t, pb;
  unsigned pid;
  rd(&u, &t, &pid, &pb);
  if (!pid) { *n = 0; return 0; }
  if (*n < 1) { *n = 1; return 7; }
  p[0].pid = pid;
  p[0].used = pb;
  *n = 1;
  return 0;
}
const char *nvmlErrorString(int rc) { (void)rc; return "fake error"; }
