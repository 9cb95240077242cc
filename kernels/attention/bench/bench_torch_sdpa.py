#!/usr/bin/env python3
"""Baseline for docs/benchmarks/attention.md: torch scaled_dot_product_attention (cuDNN and flash
backends, each timed; the best is the baseline) on the shapes of bench_attention: prefill at 16k
tokens per batch (32 query heads, 8 KV heads, head 128, bf16, causal and not; [B, S, H, E]
memory viewed as [B, H, S, E]) and decode (batch 1..64, context 1k..32k, one query token, KV
caches rotated past L2). CUDA events, warm-up, median. One JSON object per line.
GQA: enable_gqa=True where the backend takes it, else K/V expanded to 32 heads (noted)."""
import json
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

QUICK = "--quick" in sys.argv
REPS = 5 if QUICK else 20
BACKENDS = {"cudnn": SDPBackend.CUDNN_ATTENTION, "flash": SDPBackend.FLASH_ATTENTION}


def median_ms(fn, reps=REPS, warmup=3):
    for i in range(warmup):
        fn(i)
    torch.cuda.synchronize()
    times = []
    for i in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn(warmup + i)
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
    times.sort()
    return times[len(times) // 2]


def gqa_mode(backend, q, k, v, causal):
    """'gqa' when the backend takes enable_gqa, else 'expanded' (K/V repeated before timing)."""
    with sdpa_kernel([BACKENDS[backend]]):
        try:
            F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=True)
            return "gqa"
        except RuntimeError:
            return "expanded"


def prepare(how, q, k, v):
    if how == "gqa":
        return k, v
    rep = q.shape[1] // k.shape[1]
    return k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)


def run(backend, how, q, k, v, causal):
    with sdpa_kernel([BACKENDS[backend]]):
        return F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=how == "gqa")


def prefill(seqlen, causal):
    tokens, hq, hk, e = 16384, 32, 8, 128
    b = tokens // seqlen
    dev = "cuda"
    q = (torch.rand(b, seqlen, hq, e, device=dev, dtype=torch.bfloat16) * 2 - 1).transpose(1, 2)
    k = (torch.rand(b, seqlen, hk, e, device=dev, dtype=torch.bfloat16) * 2 - 1).transpose(1, 2)
    v = (torch.rand(b, seqlen, hk, e, device=dev, dtype=torch.bfloat16) * 2 - 1).transpose(1, 2)
    flops = 4.0 * b * hq * seqlen * seqlen * e * (0.5 if causal else 1.0)
    for name in BACKENDS:
        try:
            how = gqa_mode(name, q, k, v, causal)
            k2, v2 = prepare(how, q, k, v)
            ms = median_ms(lambda i: run(name, how, q, k2, v2, causal))
            print(json.dumps({"kind": "prefill", "backend": name, "gqa": how, "seqlen": seqlen, "batch": b,
                              "causal": causal, "ms": ms, "tflops": flops / ms / 1e9}), flush=True)
        except Exception as ex:  # a backend that refuses the shape
            print(json.dumps({"kind": "prefill", "backend": name, "seqlen": seqlen, "causal": causal,
                              "error": str(ex)[:200]}), flush=True)


def decode(batch, ctx):
    hq, hk, e = 32, 8, 128
    kv_bytes = 2 * batch * ctx * hk * e * 2
    copies = max(1, (400 << 20) // kv_bytes + 1)
    q = torch.rand(batch, 1, hq, e, device="cuda", dtype=torch.bfloat16).transpose(1, 2)
    kvs = [((torch.rand(batch, ctx, hk, e, device="cuda", dtype=torch.bfloat16) * 2 - 1).transpose(1, 2),
            (torch.rand(batch, ctx, hk, e, device="cuda", dtype=torch.bfloat16) * 2 - 1).transpose(1, 2))
           for _ in range(copies)]
    nbytes = kv_bytes + 2 * 2 * batch * hq * e
    for name in BACKENDS:
        try:
            how = gqa_mode(name, q, kvs[0][0], kvs[0][1], False)
            prepared = [prepare(how, q, k, v) for k, v in kvs]
            ms = median_ms(lambda i: run(name, how, q, prepared[i % copies][0], prepared[i % copies][1], False))
            del prepared
            print(json.dumps({"kind": "decode", "backend": name, "gqa": how, "batch": batch, "ctx": ctx, "ms": ms,
                              "gbps": nbytes / ms / 1e6}), flush=True)
        except Exception as ex:
            print(json.dumps({"kind": "decode", "backend": name, "batch": batch, "ctx": ctx,
                              "error": str(ex)[:200]}), flush=True)
    del kvs
    torch.cuda.empty_cache()


def main():
    print(json.dumps({"kind": "env", "torch": torch.__version__, "device": torch.cuda.get_device_name()}), flush=True)
    for s in (512, 1024, 2048, 4096, 8192, 16384):
        for causal in (False, True):
            prefill(s, causal)
    for b in (1, 4, 16, 64):
        for ctx in (1024, 2048, 8192, 32768):
            decode(b, ctx)


if __name__ == "__main__":
    main()
