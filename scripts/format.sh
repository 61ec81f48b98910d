#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Formats leakguard's C sources with clang-format (.clang-format), or with --check
# lists the files that are not formatted and fails (CI runs it from scripts/test.sh).
#
# Not formatted: programs under test whose line numbers are their ground truth
# (tests/scenarios, tests/torture, tests/cuda programs, tests/python, tests/breaker,
# examples: a "/* LEAK-SITE */" marker must stay on its allocation's line), and the
# generated classifier model (src/analysis/classify_model.c).
set -euo pipefail
cd "$(dirname "$0")/.."
check=0
[ "${1:-}" = "--check" ] && check=1
mapfile -t files < <(git ls-files 'src/*.[ch]' 'include/*.h' 'tools/*.[ch]' 'bench/*.[ch]' \
  'tests/unit/*.[ch]' 'tests/fuzz/*.[ch]' 'tests/layers/*.[ch]' | grep -v '^src/analysis/classify_model\.c$')
if [ "$check" = 1 ]; then
  bad=0
  for f in "${files[@]}"; do
    if ! clang-format --dry-run --Werror "$f" >/dev/null 2>&1; then
      echo "not formatted: $f (run scripts/format.sh)"
      bad=1
    fi
  done
  [ "$bad" = 0 ] && echo "format: ${#files[@]} files formatted"
  exit "$bad"
fi
clang-format -i "${files[@]}"
