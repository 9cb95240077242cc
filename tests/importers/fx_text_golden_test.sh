#!/usr/bin/env bash
# Golden tests of the FX text importer through the CLI, with LLVM FileCheck:
#   `fxfuse inspect F --json | FileCheck F`                 (CHECK lines)
#   `fxfuse convert F -o x.fxg; FileCheck --check-prefix=FXG F < x.fxg`  (FXG lines)
#   files with ERR lines must fail: exit code 2, stderr checked with --check-prefix=ERR.
set -uo pipefail
FXFUSE="$1"; shift
FILECHECK=${FILECHECK:-/usr/lib/llvm-14/bin/FileCheck}
[[ -x "$FILECHECK" ]] || FILECHECK=$(command -v FileCheck || command -v FileCheck-14 || true)
if [[ -z "$FILECHECK" ]]; then echo "FileCheck not found (Debian package llvm-14-tools)"; exit 1; fi
T="${TEST_TMPDIR:-$(mktemp -d)}"
fails=0
for f in "$@"; do
  name=$(basename "$f")
  if grep -q '^# ERR:' "$f"; then
    "$FXFUSE" inspect "$f" --json >"$T/out" 2>"$T/err"; rc=$?
    if [[ $rc -ne 2 ]]; then echo "FAIL $name: exit code $rc, want 2"; fails=$((fails + 1)); continue; fi
    if ! "$FILECHECK" --check-prefix=ERR "$f" <"$T/err"; then echo "FAIL $name: stderr"; fails=$((fails + 1)); continue; fi
    echo "ok   $name (error)"
    continue
  fi
  if ! "$FXFUSE" inspect "$f" --json >"$T/out" 2>"$T/err"; then
    echo "FAIL $name: inspect failed: $(cat "$T/err")"; fails=$((fails + 1)); continue
  fi
  if ! "$FILECHECK" "$f" <"$T/out"; then echo "FAIL $name: inspect --json"; fails=$((fails + 1)); continue; fi
  if grep -q '^# FXG' "$f"; then
    rm -f "$T/x.fxg"
    if ! "$FXFUSE" convert "$f" -o "$T/x.fxg" 2>"$T/err"; then
      echo "FAIL $name: convert failed: $(cat "$T/err")"; fails=$((fails + 1)); continue
    fi
    if ! "$FILECHECK" --check-prefix=FXG "$f" <"$T/x.fxg"; then echo "FAIL $name: .fxg"; fails=$((fails + 1)); continue; fi
  fi
  echo "ok   $name"
done
[[ $fails -eq 0 ]]
