#!/usr/bin/env bash
# Every example answers --help as a user expects: exit status 0, the text on stdout (nothing on
# stderr), saying what the program does, its usage and an example command.
#   usage: check_help.sh BINARY...
set -uo pipefail
if [[ $# -eq 0 || "$1" == "-h" || "$1" == "--help" ]]; then
  sed -n '2,5p' "$0" | sed 's/^# \{0,1\}//'
  exit 0
fi
failed=0
for bin in "$@"; do
  out=$("$bin" --help 2>/tmp/check_help.$$.err); rc=$?
  err=$(cat /tmp/check_help.$$.err); rm -f /tmp/check_help.$$.err
  why=""
  ((rc == 0)) || why+=" exit status $rc;"
  [[ -z "$err" ]] || why+=" wrote to stderr: ${err:0:200};"
  grep -qi "usage:" <<<"$out" || why+=" no 'usage:' line;"
  grep -qi "example" <<<"$out" || why+=" no example command;"
  (($(wc -l <<<"$out") >= 4)) || why+=" too short to say what it does;"
  if [[ -z "$why" ]]; then
    echo "ok      $(basename "$bin") --help"
  else
    echo "FAILED  $(basename "$bin") --help:$why"
    failed=$((failed + 1))
  fi
done
echo "$# examples, $failed failed"
((failed == 0))
