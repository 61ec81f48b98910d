#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Installs the Debian 12 packages leakguard needs to build and test (idempotent:
# apt runs only when something is missing). Run as root.
set -euo pipefail
PKGS=(build-essential cmake pkg-config libunwind-dev libdw-dev libelf-dev libsqlite3-dev
      libcjson-dev libcmocka-dev python3 sqlite3 libc6-dev g++ libmicrohttpd-dev prometheus wrk libinih-dev python3-torch python3-dev
      libjemalloc2 clang-format zlib1g-dev golang-go chromium redis-server redis-tools)
PKGS+=(libseccomp-dev) # isolated calls (issue #15)
PKGS+=(tmux)           # the live view beside the program's output (tests/integration/term.py)
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
