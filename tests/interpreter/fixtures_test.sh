#!/bin/bash
# Acceptance: fxfuse verify (default pipeline) passes on the real fixtures in tests/data:
# transformers exports (Llama, Qwen3, Mistral, Phi-3, Gemma; post-grad, training IR and
# core ATen) and vLLM-shaped FP8 graphs (native and custom-op forms, static and dynamic
# quant, with and without all-reduce; the all-reduce ones also at TP=2).
# Args: FXFUSE FILE...
set -u
FX="$1"; shift
fails=0; n=0
for f in "$@"; do
  case "$f" in *.txt|*.md|*.json.gz|*manifest.json|*expected_counts.json) continue;; esac
  sizes=1
  case "$f" in *allreduce*|*llama32*) sizes="1 2";; esac
  for ws in $sizes; do
    n=$((n+1))
    out=$("$FX" verify "$f" --world-size=$ws 2>&1); rc=$?
    fus=$(echo "$out" | sed -n 's/.*fusions: //p')
    if [ "$rc" != 0 ]; then
      echo "FAIL: $f (world size $ws): exit $rc"; echo "$out" | tail -8 | sed 's/^/    /'; fails=$((fails+1))
    else
      echo "ok: $(basename "$f") ws=$ws fusions: $fus"
    fi
  done
done
echo "$n verify runs"
[ "$fails" = 0 ] || { echo "$fails failure(s)"; exit 1; }
