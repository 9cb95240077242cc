#!/bin/bash
# Everything issue #7 runs on the H200, in one device call (logs into $OUT):
#   1. the decoder-layer benchmark (examples/decoder_layer/bench_decoder_layer.py)
#   2. the build-time-compiled example (examples/decoder_fp8)
#   3. GPU parity: plan vs CPU interpreter, fused and unfused, for the fixtures (time-boxed)
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
} 2>&1 | tee "$OUT/env.txt"

echo "== bench" | tee "$OUT/bench.txt"
PYTHONUNBUFFERED=1 TORCHINDUCTOR_COMPILE_THREADS=16 timeout "${BENCH_BUDGET:-200}" \
  python3 examples/decoder_layer/bench_decoder_layer.py --fxfuse "$D/fxfuse" --out "$OUT" \
  --deadline-s "${COMPILE_DEADLINE:-150}" 2>&1 | tee -a "$OUT/bench.txt"
echo "== example" | tee "$OUT/example.txt"
timeout 30 "$D/decoder_example" 64 2>&1 | tee -a "$OUT/example.txt"

echo "== parity" | tee "$OUT/parity.txt"
JOBS=${JOBS:-12} PARITY_TIMEOUT=${PARITY_TIMEOUT:-50} LOG="$OUT/parity_full.log" \
  timeout "${PARITY_BUDGET:-75}" bash tests/runtime/gpu_parity.sh "$D/fxfuse" tests/plans/*.fxg \
  tests/data/vllm/*.post_grad.fxg.json tests/data/hf/*.post_grad.fxg.json tests/data/hf/*.core_aten.fxg.json \
  2>&1 | tee -a "$OUT/parity.txt"

cat "$OUT/decoder_layer_table.md" 2>/dev/null
