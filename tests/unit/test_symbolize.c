/* SPDX-License-Identifier: MIT */
/*
 * test_symbolize.c - the symbolizer's files shared between processes (core/symbolize.c):
 * this test's own executable added to two "processes", loaded at its real bias in one
 * and 256 MiB higher in the other (as two processes of one run load the same file at
 * different addresses), names the same function and file:line at both places; an
 * address in no module is "??"; a module loaded over another (a dlclose, a dlopen at
 * the same place) replaces it; a file that is not ELF is refused. A stripped copy finds
 * its debug file by its .gnu_debuglink (beside it, in .debug/) and refuses one that is
 * not its own; a library without debug information is looked up without loading
 * libdebuginfod (symbolize.c, "separate debug information"). libc's and this test's
 * symbol tables, read directly, name every address as libdwfl's symbol-by-symbol
 * reading does.
 */
#include <dlfcn.h>
#include <errno.h>
#include <link.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "core/symbolize.h"

#define DELTA ((uint64_t)256 << 20)

static char exe[4096];
static uint64_t lo, hi, bias;
static int marker_line;

/* The function whose address is looked up; its line is recorded where it returns. */
__attribute__((noinline)) static uintptr_t marker(void) {
  marker_line = __LINE__ + 1;
  return (uintptr_t)__builtin_return_address(0) ^ (uintptr_t)&marker_line;
}

static int phdr_cb(struct dl_phdr_info *info, size_t size, void *arg) {
  (void)size;
  (void)arg;
  if (info->dlpi_name && info->dlpi_name[0]) return 0; /* the main program comes first, unnamed */
  lo = UINT64_MAX;
  for (int i = 0; i < info->dlpi_phnum; i++) {
    const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
    if (ph->p_type != PT_LOAD) continue;
    uint64_t a = info->dlpi_addr + ph->p_vaddr;
    if (a < lo) lo = a;
    if (a + ph->p_memsz > hi) hi = a + ph->p_memsz;
  }
  bias = info->dlpi_addr;
  return 1;
}

static int setup(void **state) {
  (void)state;
  ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (n <= 0) return -1;
  exe[n] = 0;
  dl_iterate_phdr(phdr_cb, NULL);
  marker();
  return hi > lo ? 0 : -1;
}

/* An address inside marker(): its first instruction + 1 is looked up as a return
 * address (lgs_lookup reads ip - 1). */
static uint64_t marker_ip(void) { return (uint64_t)(uintptr_t)&marker + 1; }

static void check_marker(const lgs_frame_t *f, int n, uint64_t ip) {
  assert_true(n >= 1);
  assert_int_equal(f[n - 1].ip, ip);
  assert_string_equal(f[n - 1].function, "marker");
  assert_non_null(strstr(f[n - 1].file, "test_symbolize.c"));
  /* the function's first instruction belongs to its opening line, a few lines above */
  assert_true(f[n - 1].line > 0 && f[n - 1].line < marker_line && f[n - 1].line >= marker_line - 3);
  assert_string_equal(f[n - 1].module, strrchr(exe, '/') + 1);
}

/* C++ names demangled by libstdc++'s demangler, opened at the first one (symbolize.c). */
static void test_demangle(void **state) {
  (void)state;
  char *d = lgs_demangle("_ZN7session5storeERKSt6vectorIiSaIiEE");
  assert_non_null(d);
  assert_string_equal(d, "session::store(std::vector<int, std::allocator<int> > const&)");
  free(d);
  assert_null(lgs_demangle("malloc"));
  assert_null(lgs_demangle("_Znot a mangled name"));
}

static int libc_cb(struct dl_phdr_info *info, size_t size, void *arg);

/* The function names of every 16th byte of [from, to) in path, loaded at [lo, hi) with
 * bias, by a file set that reads symbol tables directly (slow 0) or through libdwfl
 * symbol by symbol (slow 1); *direct: how many tables it read directly. */
static const char **names_of(const char *path, uint64_t lo_, uint64_t hi_, uint64_t bias_, uint64_t from, uint64_t to,
                             int slow, size_t *direct, lgs_files_t **keep) {
  lgs_files_t *fs = lgs_files_new();
  assert_non_null(fs);
  lgs_files_symtab_test(fs, slow);
  lgs_symbolizer_t *s = lgs_new(fs);
  assert_non_null(s);
  assert_int_equal(lgs_add_module(s, path, lo_, hi_, bias_), 0);
  size_t n = (size_t)(to - from) / 16;
  const char **names = calloc(n + 1, sizeof *names);
  assert_non_null(names);
  for (size_t i = 0; i < n; i++) {
    lgs_frame_t f[8];
    int k = lgs_lookup(s, from + 16 * i + 1, f, 8);
    names[i] = f[k - 1].function; /* the outermost: the symbol table's name */
  }
  *direct = lgs_files_symtab_test(fs, slow);
  lgs_free(s);
  *keep = fs; /* the strings live as long as it */
  return names;
}

static void same_names(const char *path, uint64_t lo_, uint64_t hi_, uint64_t bias_, uint64_t from, uint64_t to) {
  size_t direct_fast = 0, direct_slow = 0;
  lgs_files_t *ffast, *fslow;
  const char **fast = names_of(path, lo_, hi_, bias_, from, to, 0, &direct_fast, &ffast);
  const char **slow = names_of(path, lo_, hi_, bias_, from, to, 1, &direct_slow, &fslow);
  assert_int_equal(direct_fast, 1); /* the table was read directly, not through libdwfl */
  assert_int_equal(direct_slow, 0);
  size_t named = 0;
  for (size_t i = 0; fast[i]; i++) {
    if (strcmp(fast[i], slow[i]) != 0)
      fail_msg("%s+%#llx: %s read directly, %s through libdwfl", path, (unsigned long long)(from + 16 * i - bias_),
               fast[i], slow[i]);
    named += strcmp(fast[i], "??") != 0;
  }
  assert_true(named > 100); /* the range is code with symbols, not a gap */
  free(fast);
  free(slow);
  lgs_files_free(ffast);
  lgs_files_free(fslow);
}

/* Symbol indexes (symbolize.c symidx_of): each table read in one pass and sorted by
 * address gives every address the name libdwfl's symbol-by-symbol reading gives, for
 * libc (a system library: libc6-dbg's table where installed) and this PIE executable. */
static void test_symbol_table_read(void **state) {
  (void)state;
  char libc[4096] = "";
  uint64_t r[4] = {0, 0, 0, (uint64_t)(uintptr_t)libc}; /* lo, hi, bias, path */
  assert_int_equal(dl_iterate_phdr(libc_cb, r), 1);
  /* 64 KiB of libc's code around its malloc (libc's own: &malloc is the sanitizer's
   * interceptor in an ASan build) */
  void *h = dlopen("libc.so.6", RTLD_LAZY | RTLD_NOLOAD);
  assert_non_null(h);
  uint64_t m = (uint64_t)(uintptr_t)dlsym(h, "malloc");
  dlclose(h);
  assert_true(m > r[0] + 0x8000 && m + 0x8000 < r[1]);
  same_names(libc, r[0], r[1], r[2], m - 0x8000, m + 0x8000);
  uint64_t t = marker_ip() - 1;
  uint64_t from = t > lo + 0x4000 ? t - 0x4000 : lo;
  same_names(exe, lo, hi, bias, from, t + 0x4000 < hi ? t + 0x4000 : hi);
}

static void test_shared_file(void **state) {
  (void)state;
  lgs_files_t *fs = lgs_files_new();
  assert_non_null(fs);
  lgs_symbolizer_t *a = lgs_new(fs), *b = lgs_new(fs);
  assert_non_null(a);
  assert_non_null(b);
  assert_int_equal(lgs_add_module(a, exe, lo, hi, bias), 0);
  assert_int_equal(lgs_add_module(b, exe, lo + DELTA, hi + DELTA, bias + DELTA), 0);
  lgs_frame_t fa[8], fb[8];
  uint64_t ip = marker_ip();
  int na = lgs_lookup(a, ip, fa, 8);
  check_marker(fa, na, ip);
  int nb = lgs_lookup(b, ip + DELTA, fb, 8); /* the same instruction, the other process */
  check_marker(fb, nb, ip + DELTA);
  assert_int_equal(na, nb);
  assert_ptr_equal(fa[na - 1].file, fb[nb - 1].file); /* one string: the one cached entry */
  /* the same address in b is in no module of b */
  lgs_frame_t fn[8];
  assert_int_equal(lgs_lookup(b, ip, fn, 8), 1);
  assert_string_equal(fn[0].function, "??");
  assert_string_equal(fn[0].module, "");
  lgs_free(a);
  /* b's lookups survive a's end */
  nb = lgs_lookup(b, ip + DELTA, fb, 8);
  check_marker(fb, nb, ip + DELTA);
  lgs_free(b);
  lgs_files_free(fs);
}

static void test_replaced_and_refused(void **state) {
  (void)state;
  lgs_files_t *fs = lgs_files_new();
  lgs_symbolizer_t *s = lgs_new(fs);
  /* not ELF: refused, and the address stays unnamed */
  char tmp[] = "/tmp/lg-test-symbolize-XXXXXX";
  int fd = mkstemp(tmp);
  assert_true(fd >= 0);
  assert_int_equal(write(fd, "not an ELF file\n", 16), 16);
  close(fd);
  assert_true(lgs_add_module(s, tmp, lo, hi, bias) < 0);
  assert_true(lgs_add_module(s, "[vdso]", lo, hi, bias) < 0);
  assert_true(lgs_add_module(s, "/nonexistent/lg-test", lo, hi, bias) < 0);
  lgs_frame_t f[8];
  assert_int_equal(lgs_lookup(s, marker_ip(), f, 8), 1);
  assert_string_equal(f[0].function, "??");
  /* the executable, then the same range taken by "another library" loaded over it
   * (here the same file 256 MiB lower, so that its addresses name nothing): the newer
   * module wins, as after a dlclose and a dlopen at the same place */
  assert_int_equal(lgs_add_module(s, exe, lo, hi, bias), 0);
  int n = lgs_lookup(s, marker_ip(), f, 8);
  check_marker(f, n, marker_ip());
  assert_int_equal(lgs_add_module(s, exe, lo, hi, bias - DELTA), 0);
  n = lgs_lookup(s, marker_ip(), f, 8);
  assert_true(n >= 1);
  assert_string_not_equal(f[n - 1].function, "marker");
  unlink(tmp);
  lgs_free(s);
  lgs_files_free(fs);
}

static int sh(const char *fmt, ...) {
  char cmd[8192];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(cmd, sizeof cmd, fmt, ap);
  va_end(ap);
  return system(cmd);
}

/* marker() looked up in `file` (the test's executable or a copy) at its real place. */
static int lookup_in(const char *file, lgs_frame_t *f, int max) {
  lgs_files_t *fs = lgs_files_new();
  lgs_symbolizer_t *s = lgs_new(fs);
  assert_int_equal(lgs_add_module(s, file, lo, hi, bias), 0);
  int n = lgs_lookup(s, marker_ip(), f, max);
  static char keep[8][2][256]; /* the strings outlive the symbolizer */
  for (int i = 0; i < n && i < 8; i++) {
    snprintf(keep[i][0], sizeof keep[i][0], "%s", f[i].function ? f[i].function : "");
    snprintf(keep[i][1], sizeof keep[i][1], "%s", f[i].file ? f[i].file : "");
    f[i].function = keep[i][0];
    f[i].file = keep[i][1];
  }
  lgs_free(s);
  lgs_files_free(fs);
  return n;
}

static void test_debuglink(void **state) {
  (void)state;
  char dir[] = "/tmp/lg-test-debuglink-XXXXXX";
  assert_non_null(mkdtemp(dir));
  /* a stripped copy, its debug information in prog.debug beside it */
  assert_int_equal(sh("cp '%s' %s/prog && objcopy --only-keep-debug %s/prog %s/prog.debug && "
                      "objcopy --strip-debug --add-gnu-debuglink=%s/prog.debug %s/prog",
                      exe, dir, dir, dir, dir, dir),
                   0);
  char prog[4096];
  snprintf(prog, sizeof prog, "%s/prog", dir);
  lgs_frame_t f[8];
  int n = lookup_in(prog, f, 8);
  assert_true(n >= 1);
  assert_string_equal(f[n - 1].function, "marker");
  assert_non_null(strstr(f[n - 1].file, "test_symbolize.c"));
  /* the same from its .debug directory */
  assert_int_equal(sh("mkdir %s/.debug && mv %s/prog.debug %s/.debug/", dir, dir, dir), 0);
  n = lookup_in(prog, f, 8);
  assert_true(n >= 1);
  assert_non_null(strstr(f[n - 1].file, "test_symbolize.c"));
  /* another file's debug information under that name: refused (no line), the function
   * still named from the copy's own symbol table */
  assert_int_equal(sh("objcopy --only-keep-debug /bin/true %s/.debug/prog.debug", dir), 0);
  n = lookup_in(prog, f, 8);
  assert_true(n >= 1);
  assert_string_equal(f[n - 1].function, "marker");
  assert_string_equal(f[n - 1].file, "");
  assert_int_equal(sh("rm -rf %s", dir), 0);
}

static int libc_cb(struct dl_phdr_info *info, size_t size, void *arg) {
  (void)size;
  uint64_t *r = arg;
  if (!info->dlpi_name || !strstr(info->dlpi_name, "/libc.so")) return 0;
  r[0] = UINT64_MAX;
  for (int i = 0; i < info->dlpi_phnum; i++) {
    const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
    if (ph->p_type != PT_LOAD) continue;
    uint64_t a = info->dlpi_addr + ph->p_vaddr;
    if (a < r[0]) r[0] = a;
    if (a + ph->p_memsz > r[1]) r[1] = a + ph->p_memsz;
  }
  r[2] = info->dlpi_addr;
  snprintf((char *)(uintptr_t)r[3], 4096, "%s", info->dlpi_name);
  return 1;
}

/* libc has no debug information here (or has it installed by build ID): either way its
 * lookup must not load libdebuginfod and its network stack with no server configured. */
static void test_no_debuginfod(void **state) {
  (void)state;
  unsetenv("DEBUGINFOD_URLS");
  char libc[4096] = "";
  uint64_t r[4] = {0, 0, 0, (uint64_t)(uintptr_t)libc};
  assert_int_equal(dl_iterate_phdr(libc_cb, r), 1);
  lgs_files_t *fs = lgs_files_new();
  lgs_symbolizer_t *s = lgs_new(fs);
  assert_int_equal(lgs_add_module(s, libc, r[0], r[1], r[2]), 0);
  lgs_frame_t f[8];
  uint64_t ip = (uint64_t)(uintptr_t)dlsym(RTLD_DEFAULT, "getpid") + 1;
  int n = lgs_lookup(s, ip, f, 8);
  assert_true(n >= 1);
  assert_non_null(strstr(f[n - 1].function, "getpid"));
  assert_null(dlopen("libdebuginfod.so.1", RTLD_NOW | RTLD_NOLOAD));
  lgs_free(s);
  lgs_files_free(fs);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_demangle),          cmocka_unit_test(test_shared_file),
      cmocka_unit_test(test_symbol_table_read), cmocka_unit_test(test_replaced_and_refused),
      cmocka_unit_test(test_debuglink),         cmocka_unit_test(test_no_debuginfod),
  };
  return cmocka_run_group_tests(tests, setup, NULL);
}
