#!/usr/bin/env bash
# Builds fxfuse's fuzz targets (tests/fuzz/fuzz_*.cc: six importers, the launch-plan reader
# and the whole pipeline)
# with clang + libFuzzer under AddressSanitizer (leak checking included) and
# UndefinedBehaviorSanitizer, then runs each for a bounded time. Any crash, leak, UB report, timeout (-timeout=10 s per input) or
# memory blow-up (-rss_limit_mb=2048) fails the script, which then prints the reproducer.
#
#   tools/run_fuzzers.sh [SECONDS_PER_TARGET] [TARGET...]     (default 30 s, all targets;
#                                                              pipeline gets at least 60 s)
#   tools/run_fuzzers.sh --build-only
#   tools/run_fuzzers.sh --repro TARGET FILE                  (re-run one input)
#
# Targets: fx_text export_json export_archive fxg proto_binary proto_json plan pipeline.
# plan (tests/fuzz/fuzz_plan.cc) also links lowering's plan reader and the weight-prefetch
# placement.
# pipeline (tests/fuzz/fuzz_pipeline.cc) also links the passes, the interpreter and lowering;
# its seeds are every .fxg test of the repository (tests/**/*.fxg) plus corpus/pipeline/.
# The ir sources are compiled directly with clang++ (objects cached, rebuilt on change via
# make and -MMD), plus the sources Bazel generates (bazel-bin/proto/fxfuse_ir.pb.*, dtype.h),
# linked with Debian's libprotobuf, libsimdjson, libzip and libfmt (the shared library rather
# than header-only fmt, and line tables rather than full debug info, to compile faster).
#
# Environment: FXFUSE_FUZZ_BUILD (build folder; default ~/.cache/fxfuse-fuzz/<checkout>),
# FXFUSE_FUZZ_ARTIFACTS (where crash reproducers go; default <build>/artifacts),
# FXFUSE_FUZZ_JOBS (parallel compiles, default 2), CXX (default clang++-14),
# FXFUSE_FUZZ_FRESH_CORPUS=1 (start from the seeds alone, dropping the corpus earlier runs grew;
# with a fixed -seed the run is then reproducible), FXFUSE_FUZZ_EXTRA (more libFuzzer flags, e.g. "-fork=1 -ignore_crashes=1 -ignore_ooms=1
# -ignore_timeouts=1" to keep a long run going past findings and collect them all).
# Seeds: tests/fuzz/corpus/<target>/ (read-only; the growing corpus lives in the build
# folder). Dictionaries: tests/fuzz/<target>.dict when present.
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD

ALL_TARGETS=(fx_text export_json export_archive fxg proto_binary proto_json plan pipeline)
MODE=run
SECS=30
TARGETS=()
if [[ ${1:-} == --build-only ]]; then
  MODE=build
  shift
elif [[ ${1:-} == --repro ]]; then
  MODE=repro
  shift
  [[ $# -eq 2 ]] || { echo "usage: $0 --repro TARGET FILE" >&2; exit 2; }
  TARGETS=("$1")
  REPRO_FILE=$2
  shift 2
elif [[ ${1:-} =~ ^[0-9]+$ ]]; then
  SECS=$1
  shift
fi
if [[ $MODE != repro ]]; then
  if [[ $# -gt 0 ]]; then TARGETS=("$@"); else TARGETS=("${ALL_TARGETS[@]}"); fi
fi
for t in "${TARGETS[@]}"; do
  [[ -f tests/fuzz/fuzz_$t.cc ]] || { echo "run_fuzzers: unknown target '$t' (have: ${ALL_TARGETS[*]})" >&2; exit 2; }
done

CXX=${CXX:-clang++-14}
if ! command -v "$CXX" >/dev/null; then
  echo "run_fuzzers: $CXX not found (Debian: apt-get install clang-14 libclang-rt-14-dev)" >&2
  exit 1
fi
KEY=$(printf '%s' "$ROOT" | md5sum | cut -c1-10)
BUILD=${FXFUSE_FUZZ_BUILD:-${XDG_CACHE_HOME:-$HOME/.cache}/fxfuse-fuzz/$KEY}
ARTIFACTS=${FXFUSE_FUZZ_ARTIFACTS:-$BUILD/artifacts}
JOBS=${FXFUSE_FUZZ_JOBS:-2}
mkdir -p "$BUILD/gen/proto" "$ARTIFACTS" || exit 1

# --- generated sources, from Bazel (the same genrules the product uses): protoc output and
# proto/dtype.h (the one dtype enum, generated from fxfuse_ir.proto) ----------------------
PB=bazel-bin/proto/fxfuse_plan.pb.cc
DTYPE_H=bazel-bin/proto/dtype.h
if [[ ! -f $PB || ! -f $DTYPE_H || proto/fxfuse_ir.proto -nt $PB || proto/fxfuse_plan.proto -nt $PB ||
      proto/fxfuse_ir.proto -nt $DTYPE_H || proto/dtype_h.awk -nt $DTYPE_H ]]; then
  echo "run_fuzzers: bazel build //proto:fxfuse_ir_cc_gen //proto:fxfuse_plan_cc_gen //proto:dtype_h_gen"
  bazel build //proto:fxfuse_ir_cc_gen //proto:fxfuse_plan_cc_gen //proto:dtype_h_gen >"$BUILD/bazel.log" 2>&1 ||
    { tail -20 "$BUILD/bazel.log"; exit 1; }
fi
for f in fxfuse_ir.pb.h fxfuse_ir.pb.cc fxfuse_plan.pb.h fxfuse_plan.pb.cc dtype.h; do
  cmp -s "bazel-bin/proto/$f" "$BUILD/gen/proto/$f" || cp -f "bazel-bin/proto/$f" "$BUILD/gen/proto/$f"
  chmod u+w "$BUILD/gen/proto/$f"
done

# --- build with make (incremental, header dependencies from -MMD) ------------------------
IR_SRCS=$(ls ir/*.cc ir/importers/*.cc | tr '\n' ' ')
PIPE_SRCS=$(ls passes/*.cc passes/{toolkit,canonicalize,fuse,serve,pipeline}/*.cc tools/interpreter/*.cc \
  compiler/lowering/*.cc kernels/attention/check.cc | tr '\n' ' ')
cat >"$BUILD/Makefile" <<EOF
ROOT := $ROOT
CXX := $CXX
FLAGS := -std=c++17 -gline-tables-only -O1 -fno-omit-frame-pointer -fsanitize=address,undefined \\
  -fno-sanitize-recover=undefined -I\$(ROOT) -I$BUILD/gen -I/usr/local/cuda/include
CXXFLAGS := \$(FLAGS) -fsanitize=fuzzer-no-link -Wno-deprecated-declarations
LIBS := -lprotobuf -lsimdjson -lzip -lfmt -lz -lpthread
IR_OBJS := \$(patsubst %.cc,obj/%.o,$IR_SRCS) obj/gen/proto/fxfuse_ir.pb.o obj/gen/proto/fxfuse_plan.pb.o
PIPE_OBJS := \$(patsubst %.cc,obj/%.o,$PIPE_SRCS)
TARGETS := $(printf 'fuzz_%s ' "${ALL_TARGETS[@]}")

all: \$(TARGETS)
obj/gen/proto/%.o: $BUILD/gen/proto/%.cc
	@mkdir -p \$(dir \$@)
	\$(CXX) \$(FLAGS) -MMD -MP -c \$< -o \$@
obj/%.o: \$(ROOT)/%.cc
	@mkdir -p \$(dir \$@)
	\$(CXX) \$(CXXFLAGS) -MMD -MP -c \$< -o \$@
fuzz_pipeline: obj/tests/fuzz/fuzz_pipeline.o \$(IR_OBJS) \$(PIPE_OBJS)
	\$(CXX) \$(FLAGS) -fsanitize=fuzzer \$^ \$(LIBS) -lopenblas -o \$@
fuzz_plan: obj/tests/fuzz/fuzz_plan.o obj/compiler/runtime/weight_prefetch.o \$(IR_OBJS) \$(PIPE_OBJS)
	\$(CXX) \$(FLAGS) -fsanitize=fuzzer \$^ \$(LIBS) -lopenblas -o \$@
fuzz_%: obj/tests/fuzz/fuzz_%.o \$(IR_OBJS)
	\$(CXX) \$(FLAGS) -fsanitize=fuzzer \$^ \$(LIBS) -o \$@
.SECONDARY:
-include \$(shell find obj -name '*.d' 2>/dev/null)
EOF
MAKE_TARGETS=()
for t in "${TARGETS[@]}"; do MAKE_TARGETS+=("fuzz_$t"); done
echo "run_fuzzers: building ${MAKE_TARGETS[*]} in $BUILD"
if ! make -C "$BUILD" -j"$JOBS" -s "${MAKE_TARGETS[@]}" >"$BUILD/make.log" 2>&1; then
  grep -E "error|Error" "$BUILD/make.log" | head -30
  echo "run_fuzzers: build failed (full log: $BUILD/make.log)"
  exit 1
fi
[[ $MODE == build ]] && { echo "run_fuzzers: built"; exit 0; }

export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1:symbolize=1:detect_stack_use_after_return=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}

if [[ $MODE == repro ]]; then
  exec "$BUILD/fuzz_${TARGETS[0]}" -rss_limit_mb=2048 -timeout=10 "$REPRO_FILE"
fi

# --- run --------------------------------------------------------------------------------
failed=()
for t in "${TARGETS[@]}"; do
  work="$BUILD/corpus/$t"
  [[ ${FXFUSE_FUZZ_FRESH_CORPUS:-0} == 1 ]] && rm -rf "$work"
  mkdir -p "$work"
  dict=()
  [[ -f tests/fuzz/$t.dict ]] && dict=(-dict="$ROOT/tests/fuzz/$t.dict")
  log="$BUILD/fuzz_$t.log"
  seeds="$ROOT/tests/fuzz/corpus/$t"
  secs=$SECS
  if [[ $t == pipeline ]]; then
    # every .fxg test of the repository is a seed (copied: the seed folders are read-only)
    seeds="$BUILD/seeds/pipeline"
    rm -rf "$seeds" && mkdir -p "$seeds"
    find "$ROOT/tests" -path "$ROOT/tests/fuzz/findings" -prune -o -name '*.fxg' -size -64k -exec cp {} "$seeds/" \;
    [[ -d $ROOT/tests/fuzz/corpus/pipeline ]] && cp "$ROOT"/tests/fuzz/corpus/pipeline/* "$seeds/"
    ((secs < 60)) && secs=60
    dict=(-dict="$ROOT/tests/fuzz/fxg.dict")
  fi
  # In fork mode (-fork=1 -ignore_crashes=1) libFuzzer exits 0 after findings: the
  # reproducers it writes decide then.
  before=$(ls "$ARTIFACTS" 2>/dev/null | grep -c "^$t-" || true)
  "$BUILD/fuzz_$t" -max_total_time="$secs" -rss_limit_mb=2048 -timeout=10 -max_len=65536 \
    -artifact_prefix="$ARTIFACTS/$t-" -print_final_stats=1 "${dict[@]}" ${FXFUSE_FUZZ_EXTRA:-} "$work" "$seeds" \
    >"$log" 2>&1
  rc=$?
  after=$(ls "$ARTIFACTS" 2>/dev/null | grep -c "^$t-" || true)
  if [[ $rc -eq 0 && $after -gt $before ]]; then
    rc=1
    echo "fuzz $t: $((after - before)) new reproducer(s) in $ARTIFACTS:"
    ls -t "$ARTIFACTS" | grep "^$t-" | head -$((after - before)) | sed "s|^|  tools/run_fuzzers.sh --repro $t $ARTIFACTS/|"
  fi
  runs=$(grep -oE 'stat::number_of_executed_units: *[0-9]+' "$log" | grep -oE '[0-9]+$' || true)
  # fork mode prints no stat:: lines: the last status line's count
  [[ -n $runs ]] || runs=$(grep -oE '^#[0-9]+' "$log" | tail -n 1 | tr -d '#' || true)
  if [[ $rc -eq 0 ]]; then
    echo "fuzz $t: ok (${runs:-?} inputs in ${secs}s)"
  else
    failed+=("$t")
    echo "fuzz $t: FAILED (exit $rc)"
    grep -E "ERROR: |runtime error|FINDING|SUMMARY|Test unit written|libFuzzer: (timeout|out-of-memory)" "$log" | head -12 | sed 's/^/  /'
    unit=$(grep -oE 'Test unit written to [^ ]+' "$log" | tail -1 | cut -d' ' -f5)
    [[ -n $unit ]] && echo "  reproduce: tools/run_fuzzers.sh --repro $t $unit"
    echo "  log: $log"
  fi
done
if ((${#failed[@]})); then
  echo "run_fuzzers: FAILED: ${failed[*]}"
  exit 1
fi
echo "run_fuzzers: all ${#TARGETS[@]} targets clean (${SECS}s each)"
