#!/usr/bin/env bash
# The whole fxfuse test suite (what CI runs): installs missing Debian packages, runs every
# Bazel test except those tagged `gpu`, then the CLI bad/hostile-input tests under ASan/UBSan,
# the layering and function-length checks, then the fuzzers (six graph readers, the launch-plan
# reader and the whole pipeline) for a bounded time under ASan/UBSan. Prints "N passed, M failed" last; exits non-zero on any failure.
# It also builds and tests examples/external_workspace (the fxfuse_plan rule used from another
# workspace, see docs/runtime.md; about 8 minutes on 2 cores; FXFUSE_EXTERNAL_WORKSPACE=0 skips it).
#
#   tools/test.sh                 # everything
#   FXFUSE_FUZZ_SECONDS=0 tools/test.sh   # skip fuzzing
set -uo pipefail
cd "$(dirname "$0")/.."

FXFUSE_WITH_TORCH=1 tools/install_deps.sh || { echo "install_deps failed"; echo "0 passed, 1 failed"; exit 1; }

log=$(mktemp)
bazel test //... 2>&1 | tee "$log"
bazel_rc=${PIPESTATUS[0]}
# Bazel exit code 4 means "no tests found"; anything but 0 is a failure here.
passed=$(grep -cE '^//.* PASSED in' "$log" || true)
failed=$(grep -cE '^//.* (FAILED|TIMEOUT|NO STATUS|FAILED TO BUILD)' "$log" || true)
if [[ $bazel_rc -ne 0 && $failed -eq 0 ]]; then failed=1; fi

# The CLI corpus of bad and hostile inputs again under AddressSanitizer + UBSan.
bazel test --config=asan //tests/cli:bad_input_test //tests/cli:hostile_inputs_test 2>&1 | tee "$log"
asan_rc=${PIPESTATUS[0]}
asan_passed=$(grep -cE '^//.* PASSED in' "$log" || true)
asan_failed=$(grep -cE '^//.* (FAILED|TIMEOUT|NO STATUS|FAILED TO BUILD)' "$log" || true)
if [[ $asan_rc -ne 0 && $asan_failed -eq 0 ]]; then asan_failed=1; fi
passed=$((passed + asan_passed)); failed=$((failed + asan_failed))
echo "asan CLI tests: $asan_passed passed, $asan_failed failed"

# fxfuse_plan from another workspace (examples/external_workspace names this repository
# @fxfuse through local_repository): built and tested in its own Bazel workspace, offline.
if [[ ${FXFUSE_EXTERNAL_WORKSPACE:-1} == 1 ]]; then
  # The main workspace's Bazel server is stopped first: two idle JVMs on a small CI machine.
  bazel shutdown
  if (cd examples/external_workspace && bazel test //... && bazel shutdown); then
    passed=$((passed + 1)); echo "external workspace: PASSED"
  else
    failed=$((failed + 1)); echo "external workspace: FAILED"
  fi
fi

# The folder layering and size rule of docs/architecture.md.
if python3 tests/architecture/check_layers.py --self-test && python3 tests/architecture/check_layers.py .; then
  passed=$((passed + 1)); echo "layering: PASSED"
else
  failed=$((failed + 1)); echo "layering: FAILED"
fi
# No function over 150 lines in lowering, the runtime or the interpreter (docs/architecture.md).
if python3 tests/architecture/check_function_length.py --self-test && python3 tests/architecture/check_function_length.py .; then
  passed=$((passed + 1)); echo "function length: PASSED"
else
  failed=$((failed + 1)); echo "function length: FAILED"
fi

fuzz_seconds="${FXFUSE_FUZZ_SECONDS:-20}"
# CI's fuzzing is a gate, not exploration: a fixed libFuzzer seed and a fresh corpus make its
# inputs the first inputs of the same sequence a longer run with the same seed covers
# (`FXFUSE_FUZZ_EXTRA=-seed=20261202 tools/run_fuzzers.sh 1800 pipeline` in a new build
# folder), so a clean long run here means a clean CI run. Exploration belongs in long runs with
# random seeds (docs/benchmarks/fuzz_pipeline.md).
fuzz_seed="${FXFUSE_FUZZ_SEED:-20261202}"
if [[ -x tools/run_fuzzers.sh && "$fuzz_seconds" != 0 ]]; then
  if FXFUSE_FUZZ_EXTRA="-seed=$fuzz_seed ${FXFUSE_FUZZ_EXTRA:-}" FXFUSE_FUZZ_FRESH_CORPUS=1 \
      tools/run_fuzzers.sh "$fuzz_seconds"; then
    passed=$((passed + 1)); echo "fuzzers: PASSED"
  else
    failed=$((failed + 1)); echo "fuzzers: FAILED"
  fi
fi
rm -f "$log"
echo "$passed passed, $failed failed"
[[ $failed -eq 0 ]]
