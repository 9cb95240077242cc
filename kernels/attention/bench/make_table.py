#!/usr/bin/env python3
"""Markdown tables for docs/benchmarks/attention.md from one device run's JSON lines:
  python3 kernels/attention/bench/make_table.py bench_ours.jsonl bench_torch.jsonl

Decode lines carry the kernel: "split" (kernels/attention's split-KV kernel, the runtime's
default; lines without the field come from runs before the paged route and are that kernel) or
"paged" (the paged kernel over the dense cache's identity view, FXFUSE_DENSE_DECODE=paged).
Both get their columns."""
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
    decode = [d for d in ours if d["kind"] == "decode"]

    def kernel_row(kernel, d):
        return next((x for x in decode if x.get("kernel", "split") == kernel and x["out"] == d["out"]
                     and x["batch"] == d["batch"] and x["ctx"] == d["ctx"]), None)

    print("| batch | context | split-KV splits | split-KV µs | split-KV GB/s | paged splits | paged µs | paged GB/s "
          "| best % of copy | cuDNN GB/s | flash GB/s | split-KV / best torch | paged / best torch |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for d in decode:
        if d["out"] != "bf16" or d.get("kernel", "split") != "split":
            continue
        paged = kernel_row("paged", d)
        tb = {x["backend"]: x.get("gbps") for x in torch
              if x["kind"] == "decode" and x["batch"] == d["batch"] and x["ctx"] == d["ctx"]}
        best = max(v for v in tb.values() if v)
        ours_best = max(d["gbps"], paged["gbps"] if paged else 0)
        paged_cells = (f"{paged['splits']} | {paged['ms'] * 1000:.1f} | {paged['gbps']:.0f}" if paged else "– | – | –")
        paged_ratio = f"{paged['gbps'] / best:.2f}" if paged else "–"
        print(f"| {d['batch']} | {d['ctx']} | {d['splits']} | {d['ms'] * 1000:.1f} | {d['gbps']:.0f} | {paged_cells} | "
              f"{100 * ours_best / copy:.0f}% | {tb.get('cudnn') or 0:.0f} | {tb.get('flash') or 0:.0f} | "
              f"{d['gbps'] / best:.2f} | {paged_ratio} |")
    f8 = [d for d in decode if d["out"] == "fp8"]
    if f8:
        print("\nDecode with FP8 output (batch 16): " + ", ".join(
            f"ctx {d['ctx']}: {d['gbps']:.0f} GB/s ({d.get('kernel', 'split')})" for d in f8) + ".")

if __name__ == "__main__":
    main()
