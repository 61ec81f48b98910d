#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Installs the Debian 12 packages leakguard needs (idempotent: apt runs only when
# something is missing). Run as root.
#   scripts/deps.sh --build   what building, installing and using leakguard needs: the
#                             quickstart (scripts/quickstart.sh), `cmake --install`, man
#                             leakguard, `import leakguard` in Debian's python3
#   scripts/deps.sh           that and what the tests run or compare against
#                             (scripts/test.sh, CI)
# Further arguments are more packages to install.
set -euo pipefail
# build: the libraries CMakeLists.txt finds with pkg-config; libcmocka-dev because the
# tests are configured with the build (LG_BUILD_TESTS); python3-dev for the Python module;
# man-db for `man leakguard` (not in Debian's container images).
PKGS=(build-essential cmake pkg-config libunwind-dev libdw-dev libelf-dev libsqlite3-dev
      libcjson-dev libcmocka-dev python3 python3-dev libc6-dev g++ libmicrohttpd-dev libinih-dev
      zlib1g-dev man-db)
PKGS+=(libseccomp-dev) # isolated calls (issue #15)
if [ "${1:-}" = "--build" ]; then
  shift
else
  # tests: what they record or compare against (tests/integration, tests/python, the
  # Prometheus scrape, the HTML page in Chromium, go tool pprof) and the format check
  PKGS+=(sqlite3 prometheus wrk python3-torch libjemalloc2 clang-format golang-go chromium
         redis-server redis-tools)
  PKGS+=(tmux) # the live view beside the program's output (tests/integration/term.py)
fi
PKGS+=("$@")
missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "leakguard: installing ${missing[*]}" >&2
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
