// SPDX-License-Identifier: MIT
/*
 * tt_tlocal.cpp - C++ thread_local objects whose destructors free and allocate
 * (issue #17). glibc runs them at thread exit through __cxa_thread_atexit_impl, before
 * the pthread key destructors (leakguard's own among them): a destructor that grows
 * a vector, frees what its constructor allocated, and first uses another
 * thread_local, whose constructor allocates and whose destructor is registered while
 * the thread is already tearing its thread_locals down. 400 threads; then a leak.
 */
#include <pthread.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "tt.h"

static std::atomic<int> holder_dtors{0}, late_dtors{0};

struct Late {
  char *p;
  Late() : p((char *)malloc(300)) { memset(p, 3, 300); }
  ~Late()
  {
    free(p);
    late_dtors++;
  }
};
static thread_local Late late;

struct Holder {
  char *buf;
  std::vector<std::string> *names;
  Holder() : buf((char *)malloc(256)), names(new std::vector<std::string>) { memset(buf, 1, 256); }
  ~Holder()
  {
    for (int i = 0; i < 20; i++)
      names->push_back(std::string(100 + i, 'x')); /* allocates during teardown */
    delete names;
    free(buf);
    late.p[0] = 4; /* first use: constructed now, destroyed after this destructor */
    char *q = (char *)malloc(50);
    memset(q, 2, 50);
    free(q);
    holder_dtors++;
  }
};
static thread_local Holder holder;

static void *worker(void *)
{
  holder.buf[0] = 2;
  return nullptr;
}

int main()
{
  for (int r = 0; r < 50; r++) {
    pthread_t th[8];
    for (int i = 0; i < 8; i++)
      if (pthread_create(&th[i], nullptr, worker, nullptr) != 0)
        tt_die("pthread_create");
    for (int i = 0; i < 8; i++)
      pthread_join(th[i], nullptr);
  }
  printf("tlocal: %d of 400 thread_local destructors ran, %d of 400 late ones\n", holder_dtors.load(),
         late_dtors.load());
  tt_leak(2000, 32768);
  return holder_dtors != 400 || late_dtors != 400;
}
