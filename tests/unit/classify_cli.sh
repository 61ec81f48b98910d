#!/bin/sh
# SPDX-License-Identifier: MIT
# `leakguard classify`'s command line (src/cli/cmd_classify.c): exit statuses and the
# exact one-line errors. What it prints for a good file is tested in test_csv.c
# (lga_classify_file) and by the classify_cli_* tests.
#   classify_cli.sh LEAKGUARD RECORDED_DIR
set -u
lg=$1
rec=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0

# expect WHAT STATUS STDERR_LINE STDOUT_GREP -- ARGS...
expect() {
  what=$1 want_rc=$2 want_err=$3 want_out=$4
  shift 5
  "$lg" classify "$@" >"$tmp/out" 2>"$tmp/err" <"$rec/linear-1.csv"
  rc=$?
  err=$(cat "$tmp/err")
  ok=1
  [ "$rc" = "$want_rc" ] || ok=0
  if [ -n "$want_err" ]; then [ "$err" = "$want_err" ] || ok=0; else [ -z "$err" ] || ok=0; fi
  [ -z "$want_out" ] || grep -q -- "$want_out" "$tmp/out" || ok=0
  if [ $ok = 1 ]; then
    echo "  ok   $what"
  else
    echo "  FAIL $what: exit $rc (want $want_rc), stderr: $err"
    fails=$((fails + 1))
  fi
}

expect "a recorded curve: the class first" 0 "" "^linear-leak$" -- "$rec/linear-1.csv"
# nvidia-smi --query-gpu=timestamp,memory.used --format=csv (and csv,nounits): a card
# whose memory grows by 25 MiB every 2 s, +-3 MiB
{
  echo "timestamp, memory.used [MiB]"
  for i in $(seq 0 59); do
    s=$((600 + i * 2))
    printf '2026/12/04 10:%02d:%02d.%03d, %d MiB\n' $((s / 60 % 60)) $((s % 60)) $((i * 37 % 1000)) \
      $((1000 + 25 * i + (i * 5 % 7) - 3))
  done
} >"$tmp/smi.csv"
sed 's/ MiB$//' "$tmp/smi.csv" >"$tmp/smi-nounits.csv"
expect "nvidia-smi's CSV (dates, sizes in MiB)" 0 "" "^linear-leak$" -- "$tmp/smi.csv"
expect "nvidia-smi's CSV, nounits (the header's [MiB])" 0 "" "^linear-leak$" -- "$tmp/smi-nounits.csv"
printf 'time,value\n2026/13/04 10:00:00,1\n' >"$tmp/baddate.csv"
expect "a date that is none" 2 "leakguard: $tmp/baddate.csv:2: column 1: '2026/13/04 10:00:00' is not a number, a size or a date" "" -- "$tmp/baddate.csv"
expect "standard input" 0 "" "^linear-leak$" -- -
expect "--format=json" 0 "" '^{"class":"linear-leak",' -- --format=json "$rec/linear-1.csv"
expect "--help" 0 "" "^usage: leakguard classify" -- --help
expect "a missing file" 2 "leakguard: /nonexistent/x.csv: No such file or directory" "" -- /nonexistent/x.csv
expect "a CSV file of something else" 2 \
  "leakguard: $rec/labels.csv:1: expected 2 or 3 columns (time,value[,rss]), got 7" "" -- "$rec/labels.csv"
expect "--format xml" 2 "leakguard: unknown format 'xml' (text or json)" "" -- --format xml "$rec/linear-1.csv"
expect "--format without a value" 2 "leakguard: --format needs an argument (text or json)" "" -- --format
expect "two files" 2 "leakguard: only one FILE may be given" "" -- "$rec/linear-1.csv" "$rec/linear-1.csv"
# bounded input (issue #31): a device is refused at once, a file over --max-bytes too
expect "a device (/dev/zero)" 2 "leakguard: /dev/zero: not a regular file" "" -- /dev/zero
expect "a file over --max-bytes" 2 \
  "leakguard: $rec/linear-1.csv: $(stat -c %s "$rec/linear-1.csv") bytes, more than 100 (--max-bytes raises the limit)" \
  "" -- --max-bytes 100 "$rec/linear-1.csv"
expect "--max-bytes 0: no limit" 0 "" "^linear-leak$" -- --max-bytes 0 "$rec/linear-1.csv"
# usage errors print the usage after the one line: only the status is checked here
"$lg" classify >/dev/null 2>"$tmp/err"
rc=$?
if [ $rc = 2 ] && [ "$(head -n1 "$tmp/err")" = "leakguard: missing FILE" ]; then
  echo "  ok   no file"
else
  echo "  FAIL no file: exit $rc"
  fails=$((fails + 1))
fi
if [ -w /dev/full ]; then
  "$lg" classify "$rec/linear-1.csv" >/dev/full 2>"$tmp/err"
  rc=$?
  if [ $rc = 98 ] && grep -q "^leakguard: cannot write the result" "$tmp/err"; then
    echo "  ok   a full output: exit 98"
  else
    echo "  FAIL a full output: exit $rc, stderr: $(cat "$tmp/err")"
    fails=$((fails + 1))
  fi
fi
echo "$fails failed"
[ $fails = 0 ]
