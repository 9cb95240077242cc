#!/usr/bin/env python3
"""Baseline for fxfuse's kernel benchmark: the native PyTorch forms of the same ops, eager and
under torch.compile (Inductor), timed with the same method as kernels/bench/bench_kernels
(CUDA events around each call, calls enqueued in batches behind a spin kernel, warm-up, median,
inputs rotated over >= 3x L2 of buffer sets, random bf16 data). Reads the C++ benchmark's JSON
and writes one table (JSON + Markdown) side by side.

  python3 tools/bench_kernels_baseline.py --cpp-json cpp.json --out-dir docs/benchmarks \
      [--tokens 1,16,...] [--hidden 4096,...] [--kernels a,b] [--reps 100] [--no-compile]

The native forms follow docs in shared/docs/vllm-fusion-semantics.md §1.9 (RMSNorm.forward_static,
QuantFP8.forward_native, SiluAndMul.forward_native). Torch marks T dynamic (vLLM compiles with a
symbolic token count and static hidden size); T = 1 compiles its own specialized graph.
"""

import argparse
import json
import math
import os
import statistics
import sys
import time

import torch
import torch.nn.functional as F

FP8 = torch.float8_e4m3fn
FP8_MAX = 448.0
MIN_SCALE = 1.0 / (FP8_MAX * 512.0)
EPS = 1e-6


# ---- native forms (vLLM's forward_native / forward_static math) ----------------------------

def rms_norm(x, w):
    xf = x.to(torch.float32)
    var = xf.pow(2).mean(dim=-1, keepdim=True)
    xf = xf * torch.rsqrt(var + EPS)
    return xf.to(x.dtype) * w


def fused_add_rms_norm(x, r, w):
    xf = x.to(torch.float32) + r  # fp32 + bf16: the residual is promoted, not cast
    r_out = xf.to(x.dtype)
    var = xf.pow(2).mean(dim=-1, keepdim=True)
    xf = xf * torch.rsqrt(var + EPS)
    return xf.to(x.dtype) * w, r_out


def quant_static(x, scale):
    out = x.to(torch.float32) * scale.reciprocal()
    return out.clamp(-FP8_MAX, FP8_MAX).to(FP8)


def quant_per_token(x):
    m = x.abs().max(dim=-1).values.unsqueeze(-1).to(torch.float32)
    s = (m / FP8_MAX).clamp(min=MIN_SCALE)
    out = x.to(torch.float32) * s.reciprocal()
    return out.clamp(-FP8_MAX, FP8_MAX).to(FP8), s


def quant_per_tensor(x):
    m = x.abs().max().unsqueeze(-1).to(torch.float32)
    s = (m / FP8_MAX).clamp(min=MIN_SCALE)
    out = x.to(torch.float32) * s.reciprocal()
    return out.clamp(-FP8_MAX, FP8_MAX).to(FP8), s


def quant_group(x, g=128, column_major=False):
    t, h = x.shape
    xg = x.view(t, h // g, g)
    a = xg.abs().max(dim=-1, keepdim=True)[0].float()
    s = (a / FP8_MAX).clamp(min=MIN_SCALE)
    q = (xg / s).clamp(-FP8_MAX, FP8_MAX).to(FP8).view(t, h)
    s = s.squeeze(-1)
    if column_major:
        s = s.t().contiguous().t()
    return q, s


def silu_and_mul(x):
    d = x.shape[-1] // 2
    return F.silu(x[..., :d]) * x[..., d:]


OPS = {
    # name: (function, input builder key)
    "rms_norm": (lambda x, w: rms_norm(x, w), "xw"),
    "fused_add_rms_norm": (lambda x, r, w: fused_add_rms_norm(x, r, w), "xrw"),
    "quant_fp8_static": (lambda x, s: quant_static(x, s), "xs"),
    "quant_fp8_per_token": (lambda x: quant_per_token(x), "x"),
    "quant_fp8_per_tensor": (lambda x: quant_per_tensor(x), "x"),
    "quant_fp8_group128": (lambda x: quant_group(x, 128), "x"),
    "rms_norm_quant_fp8_static": (lambda x, w, s: quant_static(rms_norm(x, w), s), "xws"),
    "fused_add_rms_norm_quant_fp8_static":
        (lambda x, r, w, s: (lambda n, ro: (quant_static(n, s), ro))(*fused_add_rms_norm(x, r, w)), "xrws"),
    "rms_norm_quant_fp8_per_token": (lambda x, w: quant_per_token(rms_norm(x, w)), "xw"),
    "fused_add_rms_norm_quant_fp8_per_token":
        (lambda x, r, w: (lambda n, ro: (quant_per_token(n), ro))(*fused_add_rms_norm(x, r, w)), "xrw"),
    "rms_norm_quant_fp8_group128": (lambda x, w: quant_group(rms_norm(x, w), 128), "xw"),
    "fused_add_rms_norm_quant_fp8_group128":
        (lambda x, r, w: (lambda n, ro: (quant_group(n, 128, column_major=True), ro))(*fused_add_rms_norm(x, r, w)),
         "xrw"),
    "silu_and_mul": (lambda x: silu_and_mul(x), "x2"),
    "silu_and_mul_quant_fp8_static": (lambda x, s: quant_static(silu_and_mul(x), s), "x2s"),
}


def make_input_sets(key, t, h, nsets, device, gen):
    """`nsets` argument tuples for one op. Drawn as one big tensor per role (fast for thousands
    of small sets), then each set's tensors are cloned into allocations of their own: slices
    with a storage offset would make Inductor drop its 16-byte alignment assumption (about 2x
    slower kernels, measured), and activations in a model are fresh allocations."""
    width = 2 * h if key.startswith("x2") else h
    x = (torch.randn(nsets * t, width, device=device, generator=gen) * 2.0).to(torch.bfloat16)
    body = key[2:] if key.startswith("x2") else key[1:]
    extra = {}
    for c in body:
        if c == "r":
            extra["r"] = (torch.randn(nsets * t, h, device=device, generator=gen) * 2.0).to(torch.bfloat16)
        elif c == "w":
            extra["w"] = (torch.rand(nsets, h, device=device, generator=gen) + 0.5).to(torch.bfloat16)
        elif c == "s":
            extra["s"] = torch.full((nsets, 1), 0.02, device=device, dtype=torch.float32)
    sets = []
    for i in range(nsets):
        args = [x[i * t:(i + 1) * t].clone()]
        for c in body:
            if c == "r":
                args.append(extra["r"][i * t:(i + 1) * t].clone())
            elif c == "w":
                args.append(extra["w"][i].clone())
            elif c == "s":
                args.append(extra["s"][i].clone())
        sets.append(args)
    del x, extra
    return sets


def set_bytes(key, t, h):
    width = 2 * h if key.startswith("x2") else h
    n = 2 * t * width + (2 * t * h if "r" in key else 0) + (2 * h if "w" in key else 0)
    return 2 * n  # inputs + about as much output


def time_calls(fn, arg_sets, warmup, reps, spin_cycles):
    """Median ms of fn(*arg_sets[i % n]) over `reps` calls: CUDA events around each call;
    calls enqueued in batches of 5 behind a spin kernel and 2 untimed calls (the host enqueues
    while the GPU is busy, so host overhead stays out of the events), as the C++ benchmark."""
    n = len(arg_sets)
    warmup = max(warmup, 2)
    for i in range(warmup):
        fn(*arg_sets[i % n])
    torch.cuda.synchronize()
    batch = 5
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(batch)]
    stops = [torch.cuda.Event(enable_timing=True) for _ in range(batch)]
    times = []
    done = 0
    while done < reps:
        k = min(batch, reps - done)
        torch.cuda._sleep(spin_cycles)
        fn(*arg_sets[(warmup + done - 2) % n])
        fn(*arg_sets[(warmup + done - 1) % n])
        for i in range(k):
            starts[i].record()
            fn(*arg_sets[(warmup + done + i) % n])
            stops[i].record()
        torch.cuda.synchronize()
        times.extend(starts[i].elapsed_time(stops[i]) for i in range(k))
        done += k
    times.sort()
    return times[len(times) // 2]


def bytes_to_move(k, t, h):  # same formula as kernels/bench/bench_kernels.cc
    e = t * h
    if k == "silu_and_mul":
        return 6 * e
    if k == "silu_and_mul_quant_fp8_static":
        return 5 * e
    if k == "rms_norm":
        return 4 * e + 2 * h
    if k == "fused_add_rms_norm":
        return 8 * e + 2 * h
    b = 3 * e
    if "rms_norm" in k:
        b += 2 * h
    if "fused_add" in k:
        b += 4 * e
    if "per_token" in k:
        b += 4 * t
    if "per_tensor" in k or "static" in k:
        b += 4
    if "group128" in k:
        b += 4 * (e // 128)
    return b


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cpp-json", required=True, help="output of kernels/bench/bench_kernels --out")
    ap.add_argument("--out-dir", required=True)
    ap.add_argument("--tokens", default=None, help="default: the C++ run's tokens")
    ap.add_argument("--hidden", default=None, help="default: the C++ run's hidden sizes")
    ap.add_argument("--kernels", default=None)
    ap.add_argument("--reps", type=int, default=100)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--no-compile", action="store_true")
    ap.add_argument("--hint-order", choices=["ascending", "descending"], default="ascending",
                    help="order of the token counts per (op, H). Inductor picks its kernel configs "
                         "from the first dynamic-T call (its size hint): ascending makes that T=16 "
                         "(the committed table), descending the largest T (vLLM compiles its "
                         "general graph at the profiling run's max_num_batched_tokens)")
    ap.add_argument("--device-command", default="", help="the device `run` command, recorded in the table")
    args = ap.parse_args()

    with open(args.cpp_json) as f:
        cpp = json.load(f)
    cpp_cases = {(c["kernel"], c["tokens"], c["hidden"]): c for c in cpp["cases"]}
    tokens = [int(v) for v in args.tokens.split(",")] if args.tokens else sorted({c["tokens"] for c in cpp["cases"]})
    hidden = [int(v) for v in args.hidden.split(",")] if args.hidden else sorted({c["hidden"] for c in cpp["cases"]})
    kernels = args.kernels.split(",") if args.kernels else [k for k in OPS if any(c[0] == k for c in cpp_cases)]

    device = torch.device("cuda")
    props = torch.cuda.get_device_properties(device)
    l2 = getattr(props, "L2_cache_size", 60 * 2**20)
    torch._dynamo.config.cache_size_limit = 64
    spin_cycles = int(1.5e-3 * 1.98e9)  # ~1.5 ms: longer than the host needs to enqueue a batch
    gen = torch.Generator(device=device)
    gen.manual_seed(0)

    # Copy bandwidth through torch, as a cross-check of the C++ number.
    a = torch.empty(2**30, dtype=torch.uint8, device=device)
    b = torch.empty_like(a)
    copy_ms = time_calls(lambda src, dst: dst.copy_(src), [(a, b), (b, a)], 3, 20, spin_cycles)
    torch_copy_gbps = 2 * a.numel() / (copy_ms * 1e-3) / 1e9
    del a, b
    copy_gbps = cpp.get("copy_gbps", torch_copy_gbps)
    print(f"torch {torch.__version__}, {props.name}; copy {torch_copy_gbps:.0f} GB/s (C++: {copy_gbps:.0f})", flush=True)

    rows = []
    errors = []
    compile_seconds = 0.0
    for k in kernels:
        fn, key = OPS[k]
        for h in hidden:
            compiled = None
            if not args.no_compile:
                compiled = torch.compile(fn)
            for t in (tokens if args.hint_order == "ascending" else sorted(tokens, reverse=True)):
                nsets = max(2, min(4096, math.ceil(3 * l2 / set_bytes(key, t, h))))
                arg_sets = make_input_sets(key, t, h, nsets, device, gen)
                if t > 1:
                    for s in arg_sets:
                        torch._dynamo.mark_dynamic(s[0], 0)
                        if key.startswith("xr"):
                            torch._dynamo.mark_dynamic(s[1], 0)
                with torch.no_grad():
                    eager_ms = time_calls(fn, arg_sets, args.warmup, args.reps, spin_cycles)
                    inductor_ms = None
                    if compiled is not None:
                        try:
                            t0 = time.time()
                            compiled(*arg_sets[0])  # compile outside the timing
                            torch.cuda.synchronize()
                            compile_seconds += time.time() - t0
                            inductor_ms = time_calls(compiled, arg_sets, args.warmup, args.reps, spin_cycles)
                        except Exception as e:  # record and go on: one failing compile must not lose the table
                            errors.append(f"{k} T={t} H={h}: {type(e).__name__}: {e}"[:500])
                            print("inductor failed:", errors[-1], flush=True)
                del arg_sets
                nbytes = bytes_to_move(k, t, h)
                ours = cpp_cases.get((k, t, h), {})
                row = {
                    "kernel": k, "tokens": t, "hidden": h, "bytes": nbytes,
                    "fused": ours.get("fused", False), "subgraph": ours.get("subgraph", ""),
                    "fxfuse_us": ours.get("median_us"),
                    "fxfuse_fraction_of_copy": ours.get("fraction_of_copy"),
                    "eager_us": eager_ms * 1e3,
                    "inductor_us": inductor_ms * 1e3 if inductor_ms is not None else None,
                }
                if row["inductor_us"]:
                    row["inductor_fraction_of_copy"] = nbytes / (row["inductor_us"] * 1e-6) / 1e9 / copy_gbps
                if row["fxfuse_us"] and row["inductor_us"]:
                    row["speedup_vs_inductor"] = row["inductor_us"] / row["fxfuse_us"]
                if row["fxfuse_us"]:
                    row["speedup_vs_eager"] = row["eager_us"] / row["fxfuse_us"]
                rows.append(row)
                ind = f"{row['inductor_us']:9.2f}" if row["inductor_us"] else "        -"
                fx = f"{row['fxfuse_us']:9.2f}" if row["fxfuse_us"] else "        -"
                print(f"{k:40s} T={t:6d} H={h:5d} fxfuse {fx} eager {row['eager_us']:9.2f} inductor {ind}",
                      flush=True)
                torch.cuda.empty_cache()
        write_outputs(args, cpp, rows, errors, copy_gbps, torch_copy_gbps, compile_seconds)  # partial table

    goals = write_outputs(args, cpp, rows, errors, copy_gbps, torch_copy_gbps, compile_seconds)
    print(json.dumps(goals, indent=1))


def write_outputs(args, cpp, rows, errors, copy_gbps, torch_copy_gbps, compile_seconds):
    order = {k: i for i, k in enumerate(OPS)}
    rows = sorted(rows, key=lambda r: (order.get(r["kernel"], 99), r["hidden"], r["tokens"]))
    empty_us = cpp.get("empty_kernel_us")
    goals = summarize_goals(rows, empty_us)
    result = {
        "device": cpp.get("device"),
        "torch": torch.__version__,
        "copy_gbps": copy_gbps,
        "torch_copy_gbps": torch_copy_gbps,
        "empty_kernel_us": empty_us,
        "cpp_command": cpp.get("command"),
        "baseline_command": " ".join(["python3"] + sys.argv),
        "device_command": args.device_command,
        "method": cpp.get("method"),
        "baseline_method": "torch: CUDA events around each call; calls enqueued in batches of 5 behind "
                           "torch.cuda._sleep (~1.5 ms) and 2 untimed calls; warm-up (and compilation) "
                           "first; median; same buffer rotation (>= 3x L2) and data distribution.",
        "inductor_compile_seconds": compile_seconds,
        "inductor_errors": errors,
        "goals": goals,
        "rows": rows,
    }
    os.makedirs(args.out_dir, exist_ok=True)
    with open(os.path.join(args.out_dir, "kernels.json"), "w") as f:
        json.dump(result, f, indent=1)
    with open(os.path.join(args.out_dir, "kernels.md"), "w") as f:
        f.write(render_markdown(result))
    return goals


def summarize_goals(rows, empty_us):
    big = [r for r in rows if r["fused"] and r["tokens"] * r["hidden"] >= 2**24 and r["fxfuse_us"]]
    goals = {}
    if big:
        worst_bw = min(big, key=lambda r: r["fxfuse_fraction_of_copy"])
        goals["fused_min_fraction_of_copy_at_TH_ge_2^24"] = {
            "value": worst_bw["fxfuse_fraction_of_copy"], "goal": 0.90,
            "where": f"{worst_bw['kernel']} T={worst_bw['tokens']} H={worst_bw['hidden']}"}
        with_ind = [r for r in big if r.get("speedup_vs_inductor")]
        if with_ind:
            worst_sp = min(with_ind, key=lambda r: r["speedup_vs_inductor"])
            goals["fused_min_speedup_vs_inductor_at_TH_ge_2^24"] = {
                "value": worst_sp["speedup_vs_inductor"], "goal": 1.2,
                "where": f"{worst_sp['kernel']} T={worst_sp['tokens']} H={worst_sp['hidden']}"}
    t1 = [r for r in rows if r["tokens"] == 1 and r["fxfuse_us"]]
    if t1 and empty_us:
        worst = max(t1, key=lambda r: r["fxfuse_us"])
        goals["t1_max_us_above_empty_kernel"] = {
            "value": worst["fxfuse_us"] - empty_us, "goal": 2.0,
            "where": f"{worst['kernel']} H={worst['hidden']}"}
    return goals


def fmt(v, spec):
    return format(v, spec) if v is not None else "-"


def render_markdown(res):
    dev = res.get("device") or {}
    out = []
    out.append("# Kernel benchmark: fxfuse CUDA kernels vs PyTorch eager and Inductor\n")
    out.append("Generated by `tools/bench_kernels_baseline.py` from the C++ benchmark's JSON "
               "(`kernels/bench/bench_kernels`); raw numbers in `kernels.json`. "
               "See `docs/kernels.md` for the method and the analysis of missed goals.\n")
    out.append(f"* Device: {dev.get('name')} ({dev.get('sm_count')} SMs, L2 {int(dev.get('l2_bytes', 0)) >> 20} MB), "
               f"torch {res['torch']}.")
    out.append(f"* Device-to-device copy bandwidth (same run): {res['copy_gbps']:.0f} GB/s "
               f"(C++ cudaMemcpyAsync, 1 GiB; torch copy_: {res['torch_copy_gbps']:.0f} GB/s).")
    if res.get("empty_kernel_us") is not None:
        out.append(f"* Empty kernel launch (same method): {res['empty_kernel_us']:.2f} us.")
    out.append(f"* Method (C++): {res.get('method')}")
    out.append(f"* Method (PyTorch): {res.get('baseline_method')}")
    out.append("* Commands:")
    if res.get("device_command"):
        out.append(f"  * device: `{res['device_command']}`")
    out.append(f"  * C++: `{res.get('cpp_command')}`")
    out.append(f"  * baseline: `{res['baseline_command']}`")
    out.append("")
    out.append("## Goals\n")
    out.append("| goal | target | measured | where |")
    out.append("|---|---|---|---|")
    g = res["goals"]
    if "fused_min_fraction_of_copy_at_TH_ge_2^24" in g:
        v = g["fused_min_fraction_of_copy_at_TH_ge_2^24"]
        out.append(f"| fused kernels, T·H ≥ 2^24: fraction of copy bandwidth (minimum) | ≥ 90% | "
                   f"{100 * v['value']:.1f}% | {v['where']} |")
    if "fused_min_speedup_vs_inductor_at_TH_ge_2^24" in g:
        v = g["fused_min_speedup_vs_inductor_at_TH_ge_2^24"]
        out.append(f"| fused kernels, T·H ≥ 2^24: speed-up over Inductor (minimum) | ≥ 1.2x | "
                   f"{v['value']:.2f}x | {v['where']} |")
    if "t1_max_us_above_empty_kernel" in g:
        v = g["t1_max_us_above_empty_kernel"]
        out.append(f"| T = 1: time above an empty kernel (maximum) | ≤ 2 us | {v['value']:.2f} us | {v['where']} |")
    out.append("")
    out.append("## Per kernel\n")
    out.append("Minimum over the cases with T·H ≥ 2^24 (T = 8192 and 32768 for every H, and T = 2048 at "
               "H = 8192) of the fraction of copy bandwidth and of the speed-up over Inductor; the "
               "maximum over H of the T = 1 time above an empty kernel. Fused kernels are marked *; "
               "dynamic per-tensor quantization is three operations (memset + 2 kernels).\n")
    out.append("| kernel | copy% (min) | vs Inductor (min) | T=1 above empty (max) |")
    out.append("|---|---:|---:|---:|")
    empty = res.get("empty_kernel_us") or 0.0
    kernels = []
    for r in res["rows"]:
        if r["kernel"] not in kernels:
            kernels.append(r["kernel"])
    for k in kernels:
        rs = [r for r in res["rows"] if r["kernel"] == k]
        big = [r for r in rs if r["tokens"] * r["hidden"] >= 2**24 and r["fxfuse_us"]]
        t1 = [r for r in rs if r["tokens"] == 1 and r["fxfuse_us"]]
        frac = min((r["fxfuse_fraction_of_copy"] for r in big), default=None)
        sp = min((r["speedup_vs_inductor"] for r in big if r.get("speedup_vs_inductor")), default=None)
        above = max((r["fxfuse_us"] - empty for r in t1), default=None)
        fused = any(r["fused"] for r in rs)
        out.append("| {} | {} | {} | {} |".format(k + (" *" if fused else ""),
                                                  fmt(100 * frac if frac is not None else None, ".1f"),
                                                  fmt(sp, ".2f"), fmt(above, ".2f")))
    out.append("")
    out.append("## All cases (bf16)\n")
    out.append("Times are medians in µs; `copy%` = (bytes that must move ÷ time) ÷ copy bandwidth; "
               "`vs Ind.` = Inductor time ÷ fxfuse time. Fused kernels are marked *.\n")
    out.append("| kernel | T | H | MB moved | fxfuse µs | fxfuse copy% | eager µs | Inductor µs | Inductor copy% | vs Ind. | vs eager |")
    out.append("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in res["rows"]:
        name = r["kernel"] + (" *" if r["fused"] else "")
        out.append("| {} | {} | {} | {:.2f} | {} | {} | {} | {} | {} | {} | {} |".format(
            name, r["tokens"], r["hidden"], r["bytes"] / 1e6, fmt(r["fxfuse_us"], ".2f"),
            fmt(100 * r["fxfuse_fraction_of_copy"] if r["fxfuse_fraction_of_copy"] is not None else None, ".1f"),
            fmt(r["eager_us"], ".2f"), fmt(r["inductor_us"], ".2f"),
            fmt(100 * r["inductor_fraction_of_copy"] if r.get("inductor_fraction_of_copy") else None, ".1f"),
            fmt(r.get("speedup_vs_inductor"), ".2f"), fmt(r.get("speedup_vs_eager"), ".2f")))
    out.append("")
    return "\n".join(out)


if __name__ == "__main__":
    main()
