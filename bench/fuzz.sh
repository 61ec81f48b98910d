#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Fuzzes leakguard's input parsers with AFL++ (Debian package afl++): a benchmark job,
# not CI. Targets (tests/fuzz/fuzz_TARGET.c):
#   csv      the classify CSV reader and the classifier (src/analysis/csv.c)
#   ini      the guard's INI config (src/guard/config.c)
#   report   the report on a corrupted or hostile database (src/findings/reader.c, build.c)
#
#   bench/fuzz.sh [-t SECONDS] [TARGET...]      default: 1800 s each, all targets, one at a time
#
# Builds the harnesses with afl-clang-fast and ASan+UBSan in build-fuzz/, runs afl-fuzz
# (nice -n 19) from tests/fuzz/corpus/TARGET, copies every crash and hang to
# tests/fuzz/crashes/TARGET/ (the fuzz-regress ctests replay them: fix each, keep it),
# minimises the queue with afl-cmin back into tests/fuzz/corpus/TARGET, and prints one
# line per target for BENCHMARKS.md: seconds run, executions, paths, crashes, hangs.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
SECS=1800
while getopts "t:" o; do
  case $o in
    t) SECS=$OPTARG ;;
    *) echo "usage: $0 [-t SECONDS] [csv|ini|report]..." >&2; exit 2 ;;
  esac
done
shift $((OPTIND - 1))
TARGETS=("$@")
((${#TARGETS[@]})) || TARGETS=(csv ini report)
command -v afl-fuzz >/dev/null || { echo "fuzz.sh: afl-fuzz not found (apt-get install afl++)" >&2; exit 2; }

B=$ROOT/build-fuzz
OUT=${FUZZ_OUT:-$B/out}
# clang (afl-clang-fast) does not know some of the GCC warning options the build uses.
CC=afl-clang-fast CXX=afl-clang-fast++ cmake -S "$ROOT" -B "$B" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DLG_SANITIZE=ON -DCMAKE_C_FLAGS=-Wno-unknown-warning-option >/dev/null
for t in "${TARGETS[@]}"; do
  AFL_USE_ASAN=1 AFL_USE_UBSAN=1 nice -n 19 cmake --build "$B" -j2 --target "fuzz_$t" >/dev/null
done

export AFL_SKIP_CPUFREQ=1 AFL_NO_AFFINITY=1 AFL_I_DONT_CARE_ABOUT_MISSING_CRASHES=1 \
       AFL_NO_UI=1 AFL_SKIP_CRASHES=1
export ASAN_OPTIONS=abort_on_error=1:detect_leaks=0:symbolize=0:allocator_may_return_null=1
export UBSAN_OPTIONS=halt_on_error=1:abort_on_error=1
for t in "${TARGETS[@]}"; do
  bin=$B/tests/fuzz/fuzz_$t
  o=$OUT/$t
  rm -rf "$o"
  mkdir -p "$o"
  echo "fuzz.sh: $t for ${SECS}s ($bin)" >&2
  # -t 2000: an input that runs 2 s is a hang (every target parses small inputs).
  nice -n 19 afl-fuzz -i "$ROOT/tests/fuzz/corpus/$t" -o "$o" -V "$SECS" -t 2000 -m none \
    -x "$ROOT/tests/fuzz/$t.dict" -- "$bin" >"$o/afl.log" 2>&1 || true
  mkdir -p "$ROOT/tests/fuzz/crashes/$t"
  for kind in crashes hangs; do
    for f in "$o"/default/$kind/id:*; do
      [ -e "$f" ] || continue
      cp "$f" "$ROOT/tests/fuzz/crashes/$t/$kind-$(sha1sum <"$f" | cut -c1-12)"
    done
  done
  rmdir "$ROOT/tests/fuzz/crashes/$t" 2>/dev/null || true
  # Minimised corpus: the smallest set of inputs with the same coverage.
  if AFL_SKIP_BIN_CHECK=1 nice -n 19 afl-cmin -i "$o/default/queue" -o "$o/cmin" -t 5000 -m none -- "$bin" \
       >"$o/cmin.log" 2>&1; then
    rm -rf "$ROOT/tests/fuzz/corpus/$t"
    mkdir -p "$ROOT/tests/fuzz/corpus/$t"
    i=0
    for f in "$o"/cmin/*; do
      cp "$f" "$ROOT/tests/fuzz/corpus/$t/$(printf 'min-%04d' $i)"
      i=$((i + 1))
    done
  fi
  s=$o/default/fuzzer_stats
  awk -v t="$t" -F' *: *' '
    $1=="run_time"{rt=$2} $1=="execs_done"{ex=$2} $1=="corpus_count"{pc=$2}
    $1=="saved_crashes"{cr=$2} $1=="saved_hangs"{hg=$2} $1=="unique_crashes"{cr=$2} $1=="unique_hangs"{hg=$2}
    END{printf "%s: %d s, %d execs, %d paths, %d crashes, %d hangs\n", t, rt, ex, pc, cr, hg}' "$s"
done
