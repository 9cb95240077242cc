#!/usr/bin/env bash
# Under `bazel run` the binary starts inside its runfiles tree and BUILD_WORKING_DIRECTORY
# names the user's directory: relative inputs and outputs must resolve against it, not
# against the process's starting directory.
set -uo pipefail
FXFUSE="$(cd "$(dirname "$1")" && pwd)/$(basename "$1")"
GRAPH="$(pwd)/$2"
T="${TEST_TMPDIR:-$(mktemp -d)}"
user="$T/user"; runfiles="$T/runfiles"
mkdir -p "$user/sub" "$runfiles"
cp "$GRAPH" "$user/sub/layer.fxg"
fails=0
expect() { if eval "$2"; then echo "ok   $1"; else echo "FAIL $1"; fails=$((fails+1)); fi; }

cd "$runfiles"
BUILD_WORKING_DIRECTORY="$user" "$FXFUSE" inspect sub/layer.fxg >"$T/inspect.out" 2>&1; rc=$?
expect "relative input resolves against BUILD_WORKING_DIRECTORY" '[[ $rc -eq 0 ]] || ! cat "$T/inspect.out"'
BUILD_WORKING_DIRECTORY="$user" "$FXFUSE" convert sub/layer.fxg -o out.pb 2>"$T/err"
expect "relative output lands in BUILD_WORKING_DIRECTORY" '[[ -s "$user/out.pb" && ! -e "$runfiles/out.pb" ]]'
BUILD_WORKING_DIRECTORY="$user" "$FXFUSE" compile "$user/sub/layer.fxg" -q -o compiled.fxg --report=report.json 2>"$T/err"
expect "absolute input, relative -o and --report" '[[ -s "$user/compiled.fxg" && -s "$user/report.json" && ! -e compiled.fxg ]]'
BUILD_WORKING_DIRECTORY="$user" "$FXFUSE" compile sub/layer.fxg -q --emit=plan -o plan.bin 2>"$T/err"
expect "plan output" '[[ -s "$user/plan.bin" ]]'
BUILD_WORKING_DIRECTORY="$user" "$FXFUSE" run plan.bin --describe >"$T/describe.out" 2>&1
expect "plan input" 'grep -q "^launches" "$T/describe.out"'
# Without the variable, paths are relative to the current directory as usual.
cp "$GRAPH" "$runfiles/here.fxg"
"$FXFUSE" convert here.fxg -o here.pb 2>"$T/err"
expect "no BUILD_WORKING_DIRECTORY: the current directory" '[[ -s "$runfiles/here.pb" ]]'
# A directory that does not exist: one line, exit 2.
BUILD_WORKING_DIRECTORY="$T/missing" "$FXFUSE" inspect x.fxg >/dev/null 2>"$T/err"; rc=$?
expect "missing BUILD_WORKING_DIRECTORY: exit 2, one line" '[[ $rc -eq 2 && $(wc -l <"$T/err") -eq 1 ]] && grep -q BUILD_WORKING_DIRECTORY "$T/err"'
echo "$fails failed"
[[ $fails -eq 0 ]]
