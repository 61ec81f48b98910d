#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The pause of one holder explanation (issue #10), under `leakguard run`, for several
# object counts: bench/explain_pause.sh BUILD [REPS]. Prints the explain_pause lines.
set -euo pipefail
build=${1:-build}
reps=${2:-7}
here=$(cd "$(dirname "$0")" && pwd)
db=$(mktemp -d)/pause.db
"$build/bin/leakguard" run -q --force -o "$db" -- /usr/bin/python3 "$here/explain_pause.py" "$reps" 0 10000 100000
rm -rf "$(dirname "$db")"
