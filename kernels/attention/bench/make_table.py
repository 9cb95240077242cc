#!/usr/bin/env python3
"""Markdown tables for docs/benchmarks/attention.md from one device run's JSON lines:
  python3 kernels/attention/bench/make_table.py bench_ours.jsonl bench_torch.jsonl"""
import json
import sys


def load(path):
    with open(path) as f:
        return [json.loads(l) for l in f if l.strip().startswith("{")]


def main():
    ours, torch = load(sys.argv[1]), load(sys.argv[2])
    copy = next(d["gbps"] for d in ours if d["kind"] == "copy")
    print(f"Device-to-device copy ceiling (same run): {copy:.0f} GB/s (read + write).\n")
    print("### Prefill (16k tokens per batch, 32 q heads, 8 KV heads, head 128; TFLOP/s)\n")
    print("| seqlen | batch | causal | fxfuse bf16 out | fxfuse FP8 out | FP8 cost | cuDNN | flash | best torch | fxfuse / best |")
    print("|---:|---:|:---:|---:|---:|---:|---:|---:|---:|---:|")
    for d in ours:
        if d["kind"] != "prefill" or d["out"] != "bf16":
            continue
        f8 = next(x for x in ours if x["kind"] == "prefill" and x["out"] == "fp8" and x["seqlen"] == d["seqlen"]
                  and x["causal"] == d["causal"])
        tb = {x["backend"]: x.get("tflops") for x in torch
              if x["kind"] == "prefill" and x["seqlen"] == d["seqlen"] and x["causal"] == d["causal"]}
        best = max(v for v in tb.values() if v)
        cost = (f8["ms"] / d["ms"] - 1) * 100
        print(f"| {d['seqlen']} | {d['batch']} | {'yes' if d['causal'] else 'no'} | {d['tflops']:.0f} | {f8['tflops']:.0f} | "
              f"{cost:+.1f}% | {tb.get('cudnn') or 0:.0f} | {tb.get('flash') or 0:.0f} | {best:.0f} | {d['tflops'] / best:.2f} |")
    print("\n### Decode (1 query token, 32 q heads, 8 KV heads, head 128, bf16 KV cache; effective GB/s)\n")
    print("| batch | context | splits | fxfuse µs | fxfuse GB/s | % of copy | cuDNN GB/s | flash GB/s | fxfuse / best torch |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for d in ours:
        if d["kind"] != "decode" or d["out"] != "bf16":
            continue
        tb = {x["backend"]: x.get("gbps") for x in torch
              if x["kind"] == "decode" and x["batch"] == d["batch"] and x["ctx"] == d["ctx"]}
        best = max(v for v in tb.values() if v)
        print(f"| {d['batch']} | {d['ctx']} | {d['splits']} | {d['ms'] * 1000:.1f} | {d['gbps']:.0f} | "
              f"{100 * d['gbps'] / copy:.0f}% | {tb.get('cudnn') or 0:.0f} | {tb.get('flash') or 0:.0f} | {d['gbps'] / best:.2f} |")
    f8 = [d for d in ours if d["kind"] == "decode" and d["out"] == "fp8"]
    if f8:
        print("\nDecode with FP8 output (batch 16): " + ", ".join(
            f"ctx {d['ctx']}: {d['gbps']:.0f} GB/s" for d in f8) + ".")


if __name__ == "__main__":
    main()
