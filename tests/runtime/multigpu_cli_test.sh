#!/bin/bash
# `fxfuse run/bench --world-size N` without a GPU: the lockstep CPU reference of every rank
# (--cpu-only), and the one-line errors (exit code 2) for unsupported world sizes, hidden rank
# flags used by hand, a plan of another world size, and no GPU at all.
set -uo pipefail
FXFUSE="$1"
GRAPH="$2"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failed=0

# expect_error NAME PATTERN CMD...: exit code 2, exactly one line on stderr matching PATTERN.
expect_error() {
  local name="$1" pattern="$2"; shift 2
  "$@" > "$tmp/out" 2> "$tmp/err"
  local rc=$?
  local lines
  lines=$(wc -l < "$tmp/err")
  if [[ $rc -ne 2 || $lines -ne 1 ]] || ! grep -q -- "$pattern" "$tmp/err"; then
    echo "FAIL $name: rc=$rc, $lines stderr lines, want exit 2 and one line matching '$pattern':"
    cat "$tmp/err"
    failed=$((failed + 1))
  else
    echo "ok   $name: $(cat "$tmp/err")"
  fi
}

# Lockstep reference: two ranks with their own activations give different outputs; every rank
# reports each output.
if ! "$FXFUSE" run "$GRAPH" --world-size 2 --cpu-only > "$tmp/cpu" 2>&1; then
  echo "FAIL lockstep --cpu-only:"; cat "$tmp/cpu"; failed=$((failed + 1))
else
  r0=$(grep '^cpu rank 0 output 0' "$tmp/cpu" | sed 's/^cpu rank 0//')
  r1=$(grep '^cpu rank 1 output 0' "$tmp/cpu" | sed 's/^cpu rank 1//')
  if [[ -z "$r0" || -z "$r1" || "$r0" == "$r1" || $(grep -c '^cpu rank' "$tmp/cpu") -ne 4 ]]; then
    echo "FAIL lockstep --cpu-only: want 2 outputs per rank, rank 0 and 1 different:"; cat "$tmp/cpu"
    failed=$((failed + 1))
  else
    echo "ok   lockstep --cpu-only: rank 0$r0 | rank 1$r1"
  fi
fi
# The same ranks at world size 4: rank 0's activations are the same, its sum is not.
"$FXFUSE" run "$GRAPH" --world-size 4 --cpu-only > "$tmp/cpu4" 2>&1
if [[ $(grep -c '^cpu rank' "$tmp/cpu4") -ne 8 ]] || [[ "$(grep '^cpu rank 0 output 0' "$tmp/cpu4")" == "$(grep '^cpu rank 0 output 0' "$tmp/cpu")" ]]; then
  echo "FAIL lockstep world size 4:"; cat "$tmp/cpu4"; failed=$((failed + 1))
else
  echo "ok   lockstep world size 4"
fi

expect_error "world size 9" "world-size: Value 9 not in range 1 to 8" "$FXFUSE" run "$GRAPH" --world-size 9
expect_error "world size 0" "world-size: Value 0 not in range 1 to 8" "$FXFUSE" bench "$GRAPH" --world-size 0
expect_error "timeout 0" "timeout-s: expected a number in \[1, 86400\], got .0." "$FXFUSE" run "$GRAPH" --world-size 2 --timeout-s 0
expect_error "unknown all-reduce" "allreduce: bogus not in" "$FXFUSE" run "$GRAPH" --world-size 2 --allreduce bogus
expect_error "rank by hand" "rank needs --rendezvous" "$FXFUSE" run "$GRAPH" --world-size 2 --rank 0
expect_error "rank outside" "rank 3 is outside world size 2" "$FXFUSE" run "$GRAPH" --world-size 2 --rank 3 --rendezvous "$tmp"
"$FXFUSE" compile "$GRAPH" --world-size 2 --emit=plan -o "$tmp/ws2.plan.pb" -q
expect_error "plan of another world size" "lowered for world size 2, not 4" "$FXFUSE" run "$tmp/ws2.plan.pb" --world-size 4
# No GPU here (CI): a clear error before any rank starts.
if ! command -v nvidia-smi > /dev/null 2>&1; then
  expect_error "run, no GPU" "cannot run on the GPU" "$FXFUSE" run "$GRAPH" --world-size 2 --compare-cpu
  expect_error "bench, no GPU" "cannot run on the GPU" "$FXFUSE" bench "$GRAPH" --world-size 2
  expect_error "plan ws2, no GPU" "cannot run on the GPU" "$FXFUSE" run "$tmp/ws2.plan.pb"
fi
echo "$failed failed"
[[ $failed -eq 0 ]]
