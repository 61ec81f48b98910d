/* SPDX-License-Identifier: MIT */
/*
 * test_util.c - unit tests for the collector's small helpers: the command-line
 * parsers (lgu_parse_size, lgu_parse_long, lgu_parse_double), the human-readable
 * formatters (lgu_fmt_bytes, lgu_fmt_duration, checked as exact strings) and the
 * report's allocator-machinery filter (lgr_is_machinery), which decides which frames
 * are trimmed before the allocation site that a user sees.
 */
#include <errno.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "capture/nolibm.h"
#include "core/cgpath.h"
#include "core/util.h"
#include "findings/report.h"
#include "findings/impl.h" /* lgr_own_add */

#define KiB 1024ULL
#define MiB (1024ULL * KiB)
#define GiB (1024ULL * MiB)
#define TiB (1024ULL * GiB)

/* ------------------------------------------------------------------ parse_size */

static void expect_size(const char *s, uint64_t want) {
  uint64_t v = 0xdeadbeef;
  int rc = lgu_parse_size(s, &v);
  if (rc != 0) print_error("lgu_parse_size(\"%s\") = %d\n", s, rc);
  assert_int_equal(rc, 0);
  if (v != want)
    print_error("lgu_parse_size(\"%s\") -> %llu, want %llu\n", s, (unsigned long long)v, (unsigned long long)want);
  assert_true(v == want);
}

static void expect_bad_size(const char *s) {
  uint64_t v = 777;
  int rc = lgu_parse_size(s, &v);
  if (rc != -EINVAL) print_error("lgu_parse_size(\"%s\") = %d, want -EINVAL\n", s, rc);
  assert_int_equal(rc, -EINVAL);
  assert_true(v == 777); /* out untouched on failure */
}

static void test_parse_size_valid(void **state) {
  (void)state;
  expect_size("512M", 512 * MiB);
  expect_size("2GiB", 2 * GiB);
  expect_size("4096", 4096);
  expect_size("1.5k", 1536);
  expect_size("1.5K", 1536);
  expect_size("0", 0);
  expect_size("3T", 3 * TiB);
  expect_size("64KB", 64 * KiB);
  expect_size("7mib", 7 * MiB);
  expect_size("100B", 100);
}

static void test_parse_size_invalid(void **state) {
  (void)state;
  expect_bad_size("");
  expect_bad_size("12X");
  expect_bad_size("-1");
  expect_bad_size("M");
  expect_bad_size("12MX");
  expect_bad_size("12 M");
  expect_bad_size("1GiBs");
  expect_bad_size("nan");
  expect_bad_size("inf");
  expect_bad_size("1e30"); /* does not fit in 64 bits */
  uint64_t v = 5;
  assert_int_equal(lgu_parse_size(NULL, &v), -EINVAL);
  assert_true(v == 5);
}

/* ------------------------------------------------------------------ parse_long */

static void test_parse_long(void **state) {
  (void)state;
  long v = -7;
  assert_int_equal(lgu_parse_long("42", 0, 100, &v), 0);
  assert_int_equal(v, 42);
  assert_int_equal(lgu_parse_long("0", 0, 100, &v), 0);
  assert_int_equal(v, 0);
  assert_int_equal(lgu_parse_long("100", 0, 100, &v), 0); /* bounds are inclusive */
  assert_int_equal(v, 100);
  assert_int_equal(lgu_parse_long("-3", -5, 5, &v), 0);
  assert_int_equal(v, -3);

  /* well-formed but outside [lo, hi]: -ERANGE, out untouched */
  v = 11;
  assert_int_equal(lgu_parse_long("101", 0, 100, &v), -ERANGE);
  assert_int_equal(lgu_parse_long("-1", 0, 100, &v), -ERANGE);
  assert_int_equal(lgu_parse_long("257", 1, 256, &v), -ERANGE);
  assert_int_equal(lgu_parse_long("0", 1, 256, &v), -ERANGE);
  assert_int_equal(v, 11);

  /* malformed: -EINVAL */
  assert_int_equal(lgu_parse_long("", 0, 100, &v), -EINVAL);
  assert_int_equal(lgu_parse_long(NULL, 0, 100, &v), -EINVAL);
  assert_int_equal(lgu_parse_long("abc", 0, 100, &v), -EINVAL);
  assert_int_equal(lgu_parse_long("12abc", 0, 100, &v), -EINVAL);
  assert_int_equal(lgu_parse_long("1.5", 0, 100, &v), -EINVAL);
  assert_int_equal(lgu_parse_long("10 ", 0, 100, &v), -EINVAL);
  assert_int_equal(v, 11);

  /* does not fit in a long: an error either way (-EINVAL today; -ERANGE would be
   * just as acceptable), never a wrapped value. */
  assert_true(lgu_parse_long("99999999999999999999999", 0, 100, &v) < 0);
  assert_int_equal(v, 11);
}

/* ------------------------------------------------------------------ parse_double */

static void test_parse_double(void **state) {
  (void)state;
  double d = -1;
  assert_int_equal(lgu_parse_double("0.5", &d), 0);
  assert_true(d == 0.5);
  assert_int_equal(lgu_parse_double("2", &d), 0);
  assert_true(d == 2.0);
  assert_int_equal(lgu_parse_double("1e-3", &d), 0);
  assert_true(d == 1e-3);
  assert_int_equal(lgu_parse_double("3600", &d), 0);
  assert_true(d == 3600.0);

  d = 9;
  assert_int_equal(lgu_parse_double("", &d), -EINVAL);
  assert_int_equal(lgu_parse_double(NULL, &d), -EINVAL);
  assert_int_equal(lgu_parse_double("abc", &d), -EINVAL);
  assert_int_equal(lgu_parse_double("1.5s", &d), -EINVAL);
  assert_int_equal(lgu_parse_double("inf", &d), -EINVAL);
  assert_int_equal(lgu_parse_double("nan", &d), -EINVAL);
  assert_int_equal(lgu_parse_double("1e999", &d), -EINVAL); /* overflows to inf */
  assert_true(d == 9);
}

/* util.h: lgu_parse_double parses any finite decimal number and leaves the range to
 * its callers (cmd_run's --interval checks 0.05..3600). */
static void test_parse_double_leaves_range_to_callers(void **state) {
  (void)state;
  double d = 9;
  assert_int_equal(lgu_parse_double("-1", &d), 0);
  assert_true(d == -1);
  assert_int_equal(lgu_parse_double("0", &d), 0);
  assert_true(d == 0);
}

/* ------------------------------------------------------------------ formatting */

static void expect_bytes(double b, const char *want) {
  char buf[32];
  memset(buf, 'x', sizeof buf);
  const char *r = lgu_fmt_bytes(buf, sizeof buf, b);
  assert_ptr_equal(r, buf);
  assert_string_equal(buf, want);
}

static void test_fmt_bytes(void **state) {
  (void)state;
  expect_bytes(0, "0 B");
  expect_bytes(1, "1 B");
  expect_bytes(1023, "1023 B");
  expect_bytes(1024, "1.00 KiB");
  expect_bytes(1536, "1.50 KiB");
  expect_bytes(10 * 1024, "10.0 KiB");
  expect_bytes(99.5 * 1024, "99.5 KiB");
  expect_bytes(100 * 1024, "100 KiB");
  expect_bytes(1.5 * MiB, "1.50 MiB");
  expect_bytes(512.0 * MiB, "512 MiB");
  expect_bytes(2.0 * GiB, "2.00 GiB");
  expect_bytes(3.0 * TiB, "3.00 TiB");
  expect_bytes(1024.0 * TiB, "1.00 PiB");
  expect_bytes(2048.0 * 1024.0 * TiB, "2048 PiB"); /* no unit above PiB */
  expect_bytes(-2048, "-2.00 KiB");                /* negative growth keeps its sign */
  expect_bytes(-5, "-5 B");

  /* truncation respects the buffer size */
  char small[6];
  lgu_fmt_bytes(small, sizeof small, 1.5 * MiB);
  assert_string_equal(small, "1.50 ");
}

static void expect_duration(double s, const char *want) {
  char buf[32];
  memset(buf, 'x', sizeof buf);
  const char *r = lgu_fmt_duration(buf, sizeof buf, s);
  assert_ptr_equal(r, buf);
  assert_string_equal(buf, want);
}

static void test_fmt_duration(void **state) {
  (void)state;
  expect_duration(0, "0.0s");
  expect_duration(12.34, "12.3s");
  expect_duration(59.4, "59.4s");
  expect_duration(60, "1m00s");
  expect_duration(192, "3m12s");
  expect_duration(3599, "59m59s");
  expect_duration(3600, "1.0h");
  expect_duration(8640, "2.4h");
  expect_duration(47 * 3600.0, "47.0h");
  expect_duration(2 * 86400.0, "2.0d");
  expect_duration(3.5 * 86400, "3.5d");
  expect_duration(-1, "never");
  expect_duration(INFINITY, "never");
  expect_duration(-INFINITY, "never");
  expect_duration(NAN, "never");
}

/* ------------------------------------------------------------------ machinery */

static void test_is_machinery(void **state) {
  (void)state;
  /* allocator entry points, by name, whatever the module */
  assert_int_equal(lgr_is_machinery("malloc", "", "libc.so.6"), 1);
  assert_int_equal(lgr_is_machinery("calloc", NULL, NULL), 1);
  assert_int_equal(lgr_is_machinery("realloc", "", "libc.so.6"), 1);
  assert_int_equal(lgr_is_machinery("posix_memalign", "", "libc.so.6"), 1);
  assert_int_equal(lgr_is_machinery("__strdup", "", "libc.so.6"), 1);
  assert_int_equal(lgr_is_machinery("g_malloc0", "", "libglib-2.0.so.0"), 1);

  /* C++ operator new, demangled and mangled */
  assert_int_equal(lgr_is_machinery("operator new(unsigned long)", "", "libstdc++.so.6"), 1);
  assert_int_equal(lgr_is_machinery("operator new[](unsigned long)", "", "libstdc++.so.6"), 1);
  assert_int_equal(lgr_is_machinery("_Znwm", "", "libstdc++.so.6"), 1);

  /* standard library internals, by namespace or by header */
  assert_int_equal(lgr_is_machinery("std::vector<int, std::allocator<int> >::_M_realloc_insert<int const&>"
                                    "(__gnu_cxx::__normal_iterator<int*, std::vector<int, std::allocator<int> > >,"
                                    " int const&)",
                                    "/usr/include/c++/12/bits/vector.tcc", "app"),
                   1);
  assert_int_equal(lgr_is_machinery("std::vector<int>::_M_realloc_insert", "", "app"), 1);
  assert_int_equal(lgr_is_machinery("__gnu_cxx::new_allocator<int>::allocate(unsigned long, void const*)", "", "app"),
                   1);
  /* an unnamed (inlined) frame inside a libstdc++ header */
  assert_int_equal(lgr_is_machinery("_M_create_storage", "/usr/include/c++/12/bits/vector.tcc", "app"), 1);

  /* leakguard itself, whatever the function */
  assert_int_equal(lgr_is_machinery("lg_record_alloc", "/src/capture/preload.c", "libleakguard.so"), 1);
  assert_int_equal(lgr_is_machinery("??", "", "libleakguard.so"), 1);

  /* user code is the allocation site */
  assert_int_equal(lgr_is_machinery("grow_cache", "/home/u/app/cache.c", "app"), 0);
  assert_int_equal(lgr_is_machinery("main", "/home/u/app/main.c", "app"), 0);
  assert_int_equal(lgr_is_machinery("Cache::insert(int)", "/home/u/app/cache.cc", "app"), 0);
  assert_int_equal(lgr_is_machinery("mallocate_buffers", "", "app"), 0); /* prefix is not a match */
  assert_int_equal(lgr_is_machinery("stdout_flush", "", "app"), 0);      /* "std" but not "std::" */
  assert_int_equal(lgr_is_machinery(NULL, "", "app"), 0);
  assert_int_equal(lgr_is_machinery("user_fn", "/usr/include/stdio.h", "app"), 0); /* not the C++ headers */
}

/* ------------------------------------------------------------------ CUDA runtime frames */

typedef struct tframe {
  const char *fn, *file, *module;
} tframe_t;

static void tframe_at(const void *frames, int i, const char **fn, const char **file, const char **module) {
  const tframe_t *f = (const tframe_t *)frames + i;
  *fn = f->fn;
  *file = f->file;
  *module = f->module;
}
#define SITE(fr) lgr_site_frame(fr, (int)(sizeof fr / sizeof *fr), tframe_at)

static void test_cuda_runtime_frames(void **state) {
  (void)state;
  /* CUDA 13's static runtime names its internals libcudart_static_<sha1>; the shared
   * runtime is its own module; the templates of cuda_runtime.h */
  assert_int_equal(lgr_is_machinery("libcudart_static_76a125a71b5a557a55dda5b7bcab25d92df5527b", "", "train"), 1);
  assert_int_equal(lgr_is_machinery("__cudart1234", "", "train"), 1);
  assert_int_equal(lgr_is_machinery("cudaMallocAsync_ptsz", "", "train"), 1);
  assert_int_equal(lgr_is_machinery("cudaHostAlloc", "", "train"), 1);
  assert_int_equal(lgr_is_machinery("cudaMalloc<float>", "/usr/local/cuda/include/cuda_runtime.h", "train"), 1);
  assert_int_equal(lgr_is_machinery("cudaStreamCreate", "", "libcudart.so.13"), 1);
  assert_int_equal(lgr_is_machinery("cudaStreamCreate", "", "train"), 0); /* per stack, below */

  /* nvcc's default: cudaMalloc -> libcudart_static_<sha1> -> the driver */
  const tframe_t named[] = {{"libcudart_static_76a125a71b5a557a55dda5b7bcab25d92df5527b", "", "train"},
                            {"libcudart_static_418eebf4e9b7463362b8385a31d08da131d0ea88", "", "train"},
                            {"cudaMalloc", "", "train"},
                            {"grow_cache", "/src/train.cu", "train"},
                            {"main", "/src/train.cu", "train"}};
  assert_int_equal(SITE(named), 3);
  /* internals no name rule knows, and an unsymbolised one, up to an API call that
   * allocates inside; an API function that calls another */
  const tframe_t anon[] = {{"rt_5d7a31b0", "", "train"},
                           {"??", "", "train"},
                           {"__pthread_once_slow", "", "libc.so.6"},
                           {"cudaStreamCreateWithPriority", "", "train"},
                           {"cudaStreamCreate", "", "train"},
                           {"make_streams", "/src/train.cu", "train"},
                           {"main", "/src/train.cu", "train"}};
  assert_int_equal(SITE(anon), 5);
  /* a host allocation inside the runtime: malloc first, then the same */
  const tframe_t host[] = {{"malloc", "", "libc.so.6"},
                           {"libcudart_static_0000", "", "train"},
                           {"cudaGraphInstantiate", "", "train"},
                           {"build_graph", "/src/g.cu", "train"}};
  assert_int_equal(SITE(host), 3);
  /* not the runtime: a user function named cudaX with debug information is a site */
  const tframe_t user_named[] = {{"cudaAllocOrDie", "/src/app.c", "app"}, {"main", "/src/app.c", "app"}};
  assert_int_equal(SITE(user_named), 0);
  /* a frame with a source file ends the search: a cudaX caller further out does not move the site */
  const tframe_t driver_api[] = {{"workspace_alloc", "/src/op.c", "app"},
                                 {"??", "", "app"},
                                 {"cudaLaunchKernel", "", "app"},
                                 {"main", "/src/op.c", "app"}};
  assert_int_equal(SITE(driver_api), 0);
  /* no API function found: the first frame that is not machinery (here unnamed) */
  const tframe_t stripped[] = {{"??", "", "train"}, {"??", "", "train"}, {"??", "", "train"}};
  assert_int_equal(SITE(stripped), 0);
  /* everything machinery: the last frame; nothing: 0 */
  const tframe_t all[] = {{"malloc", "", "libc.so.6"}, {"cudaMalloc", "", "train"}};
  assert_int_equal(SITE(all), 1);
  assert_int_equal(lgr_site_frame(NULL, 0, tframe_at), 0);
}

/* A Python site is the program's own line: the library frames inside torch, the
 * standard library and site-packages are passed over (lgr_own_frame); not under an
 * import, and not when every line is library code. */
static void test_own_python_frame(void **state) {
  (void)state;
  assert_int_equal(lgr_is_library_file("/usr/lib/python3/dist-packages/torch/nn/modules/linear.py"), 1);
  assert_int_equal(lgr_is_library_file("/home/u/venv/lib/python3.11/site-packages/numpy/core/numeric.py"), 1);
  assert_int_equal(lgr_is_library_file("/root/.pyenv/versions/3.13.0t/lib/python3.13t/json/encoder.py"), 1);
  assert_int_equal(lgr_is_library_file("/usr/lib/python3.11/collections/__init__.py"), 1);
  assert_int_equal(lgr_is_library_file("<frozen importlib._bootstrap>"), 1);
  assert_int_equal(lgr_is_library_file("/home/u/proj/train.py"), 0);
  assert_int_equal(lgr_is_library_file("/home/u/lib/python3.x/train.py"), 0); /* no version number */
  assert_int_equal(lgr_is_library_file("<string>"), 0);
  assert_int_equal(lgr_is_library_file(""), 0);
  /* native frames, then torch's Linear.forward and Module._call_impl, then the user's */
  const tframe_t mlp[] = {{"c10::alloc_cpu", "", "libc10.so"},
                          {"forward", "/usr/lib/python3/dist-packages/torch/nn/modules/linear.py", "python"},
                          {"Module._call_impl", "/usr/lib/python3/dist-packages/torch/nn/modules/module.py", "python"},
                          {"MLP.forward", "/home/u/proj/train.py", "python"},
                          {"main", "/home/u/proj/train.py", "python"}};
  assert_int_equal(lgr_own_frame(mlp, 5, 1, tframe_at), 3);
  assert_int_equal(lgr_own_frame(mlp, 5, 3, tframe_at), 3); /* already the program's own */
  /* a module's body under an import: the innermost line stays (start-up) */
  const tframe_t imp[] = {{"<module>", "/usr/lib/python3/dist-packages/torch/__init__.py", "python"},
                          {"_call_with_frames_removed", "<frozen importlib._bootstrap>", "python"},
                          {"<module>", "/home/u/proj/train.py", "python"}};
  assert_int_equal(lgr_own_frame(imp, 3, 0, tframe_at), 0);
  /* only library code (a thread of a library): the innermost line */
  const tframe_t lib[] = {{"run", "/usr/lib/python3.11/threading.py", "python"},
                          {"_bootstrap_inner", "/usr/lib/python3.11/threading.py", "python"}};
  assert_int_equal(lgr_own_frame(lib, 2, 0, tframe_at), 0);
}

/* Which native modules are the program's own objects (lgr_module_is_system,
 * findings/headline.c): the main executable wherever it lies (a server in /usr/bin),
 * not the interpreter; the system's libraries, site-packages' and leakguard's are not;
 * a library named after the program is; --own makes anything own. */
static void test_own_native_modules(void **state) {
  (void)state;
  const char *redis = "/usr/bin/redis-server";
  assert_int_equal(lgr_module_is_system("/usr/bin/redis-server", redis), 0);
  assert_int_equal(lgr_module_is_system("/lib/x86_64-linux-gnu/libc.so.6", redis), 1);
  assert_int_equal(lgr_module_is_system("/usr/lib/x86_64-linux-gnu/libstdc++.so.6", redis), 1);
  assert_int_equal(lgr_module_is_system("/usr/lib64/libcrypto.so.3", redis), 1);
  assert_int_equal(lgr_module_is_system("/usr/local/lib/libjemalloc.so.2", redis), 1);
  assert_int_equal(lgr_module_is_system("/lib64/ld-linux-x86-64.so.2", redis), 1);
  assert_int_equal(lgr_module_is_system("/home/u/venv/lib/python3.11/site-packages/torch/lib/libtorch_cpu.so", redis),
                   1);
  assert_int_equal(lgr_module_is_system("/opt/app/lib/libleakguard.so", redis), 1);
  /* a program under /usr/lib and its plug-ins: not directly in a library directory */
  const char *pg = "/usr/lib/postgresql/15/bin/postgres";
  assert_int_equal(lgr_module_is_system(pg, pg), 0);
  assert_int_equal(lgr_module_is_system("/usr/lib/postgresql/15/lib/plpgsql.so", pg), 0);
  /* a library the program ships, named after it */
  assert_int_equal(lgr_module_is_system("/usr/lib/x86_64-linux-gnu/libmosquitto.so.1", "/usr/sbin/mosquitto"), 0);
  assert_int_equal(lgr_module_is_system("/usr/lib/x86_64-linux-gnu/libmosq.so.1", "/usr/sbin/mosquitto"), 1);
  /* the interpreter is not the program's own code: its Python files are */
  assert_int_equal(lgr_module_is_system("/usr/bin/python3.11", "/usr/bin/python3.11"), 1);
  assert_int_equal(lgr_module_is_system("/usr/lib/x86_64-linux-gnu/libpython3.11.so.1.0", "/usr/bin/python3.11"), 1);
  assert_int_equal(
      lgr_module_is_system("/home/u/proj/build/_fast.cpython-311-x86_64-linux-gnu.so", "/usr/bin/python3.11"), 0);
  assert_int_equal(lgr_module_is_system("/home/u/app/build/libcodec.so", "/home/u/app/build/app"), 0);
  assert_int_equal(lgr_module_is_system("", redis), 0);
  /* --own: a monorepo's library installed as a package, a vendored system library */
  assert_int_equal(lgr_own_add("/home/u/venv/lib/python3.11/site-packages/mylib/"), 0);
  assert_int_equal(lgr_own_add("/usr/lib/x86_64-linux-gnu/libvendored.so.1"), 0);
  assert_int_equal(lgr_module_is_system("/home/u/venv/lib/python3.11/site-packages/mylib/_core.so", redis), 0);
  assert_int_equal(lgr_module_is_system("/home/u/venv/lib/python3.11/site-packages/mylibx/_core.so", redis), 1);
  assert_int_equal(lgr_module_is_system("/usr/lib/x86_64-linux-gnu/libvendored.so.1", redis), 0);
  assert_int_equal(lgr_is_library_file("/home/u/venv/lib/python3.11/site-packages/mylib/cache.py"), 0);
  assert_int_equal(lgr_is_library_file("/home/u/venv/lib/python3.11/site-packages/numpy/core/numeric.py"), 1);
  lgr_own_clear();
  assert_int_equal(lgr_is_library_file("/home/u/venv/lib/python3.11/site-packages/mylib/cache.py"), 1);
}

/* lgu_fopen_new never writes through what is already at the path: a planted symbolic
 * link is removed (its target untouched), a stale file replaced, and the new file is a
 * regular file with what was written. */
static void test_fopen_new(void **state) {
  (void)state;
  char dir[] = "/tmp/lgu-fopen-XXXXXX";
  assert_non_null(mkdtemp(dir));
  char victim[64], path[64];
  snprintf(victim, sizeof victim, "%s/victim", dir);
  snprintf(path, sizeof path, "%s/x.tmp", dir);
  FILE *v = fopen(victim, "w");
  assert_non_null(v);
  fputs("precious", v);
  fclose(v);
  assert_int_equal(symlink(victim, path), 0);
  FILE *f = lgu_fopen_new(path);
  assert_non_null(f);
  fputs("new", f);
  assert_int_equal(fclose(f), 0);
  char buf[32] = "";
  v = fopen(victim, "r");
  assert_non_null(v);
  assert_non_null(fgets(buf, sizeof buf, v));
  fclose(v);
  assert_string_equal(buf, "precious");
  struct stat st;
  assert_int_equal(lstat(path, &st), 0);
  assert_true(S_ISREG(st.st_mode));
  f = lgu_fopen_new(path); /* a stale file of ours: replaced */
  assert_non_null(f);
  fputs("again", f);
  assert_int_equal(fclose(f), 0);
  v = fopen(path, "r");
  assert_non_null(v);
  assert_non_null(fgets(buf, sizeof buf, v));
  fclose(v);
  assert_string_equal(buf, "again");
  unlink(path);
  unlink(victim);
  rmdir(dir);
}

/* core/cgpath.h: the process's memory cgroup from /proc/PID/cgroup and mountinfo, as
 * the collector's limit reader and the isolated calls both find it. */
/* ------------------------------------------------------------------ nolibm */

/* The preload library's log and 1 - e^-x (capture/nolibm.h, written out so that it
 * links no libm) against libm's, over the ranges the sampling gives them: the uniform
 * draw's (0, 1) and size/B from one byte in a 16-MiB mean to many means. */
static void test_nolibm(void **state) {
  (void)state;
  double worst_ln = 0, worst_p = 0;
  for (double u = 0x1p-53; u < 1.0; u *= 1.0137) {
    double want = log(u), got = lgi_ln(u), err = fabs(got - want) / fabs(want ? want : 1);
    if (err > worst_ln) worst_ln = err;
  }
  for (double u = 0.5; u < 1.0; u += 0.000731) { /* near 1, where ln u is small */
    double want = log(u), got = lgi_ln(u);
    if (want != 0 && fabs(got - want) / fabs(want) > worst_ln) worst_ln = fabs(got - want) / fabs(want);
  }
  for (double x = 1.0 / (16 << 20); x < 800; x *= 1.0113) {
    double want = -expm1(-x), got = lgi_one_minus_exp_neg(x), err = fabs(got - want) / want;
    if (err > worst_p) worst_p = err;
  }
  if (worst_ln > 1e-13 || worst_p > 1e-13) print_error("ln %.3g, 1-e^-x %.3g\n", worst_ln, worst_p);
  assert_true(worst_ln <= 1e-13);
  assert_true(worst_p <= 1e-13);
  assert_true(lgi_ln(1.0) == 0.0);
  assert_true(lgi_one_minus_exp_neg(0.0) == 0.0);
  assert_true(lgi_one_minus_exp_neg(1e6) == 1.0);
}

static void test_cgroup_paths(void **state) {
  (void)state;
  char out[256], mnt[256], root[256];
  /* hybrid: v1 memory controller beside cgroup2 */
  const char *hybrid = "12:cpuset:/\n11:memory,hugetlb:/user.slice/job-7\n10:pids:/x\n0::/user.slice/job-7\n";
  assert_int_equal(lgsm_cg_path(hybrid, 1, out, sizeof out), 0);
  assert_string_equal(out, "/user.slice/job-7");
  assert_int_equal(lgsm_cg_path(hybrid, 2, out, sizeof out), 0);
  assert_string_equal(out, "/user.slice/job-7");
  /* "memory" must be a whole controller name, not a part of one */
  assert_int_equal(lgsm_cg_path("5:nomemory:/a\n0::/b", 1, out, sizeof out), -1);
  assert_int_equal(lgsm_cg_path("5:memory:/a", 2, out, sizeof out), -1);
  assert_int_equal(lgsm_cg_path("0::/last-line-without-newline", 2, out, sizeof out), 0);
  assert_string_equal(out, "/last-line-without-newline");
  assert_int_equal(lgsm_cg_path("", 2, out, sizeof out), -1);
  /* mountinfo: cgroup2 at /sys/fs/cgroup of a container whose cgroup root is /kubepods/pod1 */
  const char *v2 = "35 24 0:30 /kubepods/pod1 /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw,nsdelegate\n";
  assert_int_equal(lgsm_cg_mount(v2, 1, mnt, sizeof mnt, root, sizeof root), -1);
  assert_int_equal(lgsm_cg_mount(v2, 2, mnt, sizeof mnt, root, sizeof root), 0);
  assert_string_equal(mnt, "/sys/fs/cgroup");
  assert_string_equal(root, "/kubepods/pod1");
  const char *v1 = "40 30 0:35 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n";
  assert_int_equal(lgsm_cg_mount(v1, 1, mnt, sizeof mnt, root, sizeof root), 0);
  assert_string_equal(mnt, "/sys/fs/cgroup/memory");
  assert_int_equal(lgsm_cg_mount("41 30 0:36 / /sys/fs/cgroup/cpu rw - cgroup cgroup rw,cpu\n", 1, mnt, sizeof mnt,
                                 root, sizeof root),
                   -1);
  /* the path less the mount's root; a path outside it as it is; the root itself */
  assert_int_equal(lgsm_cg_join(out, sizeof out, "/sys/fs/cgroup", "/kubepods/pod1", "/kubepods/pod1/c2"), 0);
  assert_string_equal(out, "/sys/fs/cgroup/c2");
  assert_int_equal(lgsm_cg_join(out, sizeof out, "/sys/fs/cgroup", "/kubepods/pod1", "/kubepods/pod10"), 0);
  assert_string_equal(out, "/sys/fs/cgroup/kubepods/pod10");
  assert_int_equal(lgsm_cg_join(out, sizeof out, "/sys/fs/cgroup", "/", "/"), 0);
  assert_string_equal(out, "/sys/fs/cgroup");
  assert_int_equal(lgsm_cg_join(out, 8, "/sys/fs/cgroup", "/", "/a"), -1);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_parse_size_valid),
      cmocka_unit_test(test_parse_size_invalid),
      cmocka_unit_test(test_parse_long),
      cmocka_unit_test(test_parse_double),
      cmocka_unit_test(test_parse_double_leaves_range_to_callers),
      cmocka_unit_test(test_fmt_bytes),
      cmocka_unit_test(test_fmt_duration),
      cmocka_unit_test(test_is_machinery),
      cmocka_unit_test(test_cuda_runtime_frames),
      cmocka_unit_test(test_own_native_modules),
      cmocka_unit_test(test_own_python_frame),
      cmocka_unit_test(test_fopen_new),
      cmocka_unit_test(test_cgroup_paths),
      cmocka_unit_test(test_nolibm),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
