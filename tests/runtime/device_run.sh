#!/bin/bash
# Everything issue #7 runs on the H200, in one device call (logs into $OUT):
#   1. GPU parity: plan vs CPU interpreter, fused and unfused, for the fixtures (time-boxed;
#      a run whose outputs differ carries its node-by-node proof in parity_full.log)
#   2. the build-time-compiled example (examples/decoder_fp8)
#   3. per-kernel times of the decoder-layer plan under ncu (T in NCU_TOKENS)
#   4. the decoder-layer benchmark (examples/decoder_layer/bench_decoder_layer.py; BENCH_ARGS
#      adds arguments)
# Budgets (seconds, env): PARITY_BUDGET, NCU_BUDGET (per T), BENCH_BUDGET, COMPILE_DEADLINE;
# SKIP_BENCH=1 / SKIP_NCU=1 leave those parts out (a parity-only call takes about 70 s).
# Five files under $OUT (the device tool returns at most 8): misc.txt (environment, example,
# kernel times), parity.txt, parity_full.log, bench.txt, decoder_layer.json/_table.md.
# Run tests/runtime/stage_device.sh here first; then, on the device:
#   bash tests/runtime/device_run.sh            (carry: [".device_rt"])
set -uo pipefail
OUT=${OUT:-/tmp/fxfuse_out}
mkdir -p "$OUT"
D=/tmp/fxrt
mkdir -p "$D" && tar -C "$D" -xJf .device_rt/bundle.tar.xz
# Carried libraries only for our binaries (not for python/torch).
for b in fxfuse decoder_example; do
  mv "$D/$b" "$D/$b.bin"
  printf '#!/bin/bash\nexport LD_LIBRARY_PATH=%s/lib:/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}\nexec %s/%s.bin "$@"\n' "$D" "$D" "$b" > "$D/$b"
  chmod +x "$D/$b"
done
export FXFUSE_CACHE_DIR=/tmp/fxfuse_kernel_cache
{
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv
  python3 -c "import torch; print('torch', torch.__version__, torch.cuda.get_device_name(0))"
  "$D/fxfuse" run tests/plans/decoder_fp8.fxg --describe | tail -2
} 2>&1 | tee "$OUT/misc.txt"

GRAPHS=(tests/plans/*.fxg tests/data/vllm/*.post_grad.fxg.json tests/data/hf/*.post_grad.fxg.json
        tests/data/hf/*.core_aten.fxg.json tests/data/hf/*.train_ir.pt2)
echo "== parity" | tee "$OUT/parity.txt"
JOBS=${JOBS:-14} PARITY_TIMEOUT=${PARITY_TIMEOUT:-50} LOG="$OUT/parity_full.log" \
  timeout "${PARITY_BUDGET:-60}" bash tests/runtime/gpu_parity.sh "$D/fxfuse" "${GRAPHS[@]}" 2>&1 | tee -a "$OUT/parity.txt"

echo "== example" | tee -a "$OUT/misc.txt"
timeout 30 "$D/decoder_example" 64 2>&1 | tee -a "$OUT/misc.txt"

# Where the layer's time goes: each kernel of the plan once under ncu (duration only).
if [[ ${SKIP_NCU:-0} != 1 ]]; then
  echo "== kernel times" | tee -a "$OUT/misc.txt"
  "$D/fxfuse" compile examples/decoder_layer/llama8b_decoder_fp8.fxg --emit=plan -o /tmp/layer.plan.pb -q
  for T in ${NCU_TOKENS:-8 64}; do
    echo "-- T=$T" >> "$OUT/misc.txt"
    timeout "${NCU_BUDGET:-20}" "$(command -v ncu || echo /usr/local/cuda/bin/ncu)" --metrics gpu__time_duration.sum --csv \
      "$D/fxfuse" bench /tmp/layer.plan.pb --device=cuda --bind "s0=$T" --iters 1 --warmup 1 --no-graph 2>&1 |
      grep -E '^"' >> "$OUT/misc.txt"
  done
fi
[[ ${SKIP_BENCH:-0} == 1 ]] && exit 0

echo "== bench" | tee "$OUT/bench.txt"
PYTHONUNBUFFERED=1 TORCHINDUCTOR_COMPILE_THREADS=16 timeout "${BENCH_BUDGET:-120}" \
  python3 examples/decoder_layer/bench_decoder_layer.py --fxfuse "$D/fxfuse" --out "$OUT" \
  --deadline-s "${COMPILE_DEADLINE:-100}" ${BENCH_ARGS:-} 2>&1 | tee -a "$OUT/bench.txt"
cat "$OUT/decoder_layer_table.md" 2>/dev/null
