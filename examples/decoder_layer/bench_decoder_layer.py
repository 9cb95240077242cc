#!/usr/bin/env python3
"""Llama-3.1-8B-shaped FP8 decoder layer: fxfuse's launch plan under a CUDA graph vs torch
eager and torch.compile (default, max-autotune), side by side, one run (docs/benchmarks/
decoder_layer.md has the table and the exact command).

The torch module (DecoderLayerFP8) is the layer in vLLM's native forms: residual add +
RMSNorm in fp32, static per-tensor FP8 quant (x * (1/s), clamp, cast), torch._scaled_mm
with column-major FP8 weights, neox rotary from a cos/sin cache gathered by position,
causal GQA SDPA, FP8 quant of the attention output, SiLU-and-mul, FP8 down projection.
examples/decoder_layer/llama8b_decoder_fp8.fxg is the same layer as fxfuse's passes leave
it (make_graph.py writes it); `fxfuse bench` times its plan with random inputs of the same
shapes and dtypes (timing does not depend on the values; NaN-free random data, not zeros).

    python3 examples/decoder_layer/bench_decoder_layer.py --fxfuse PATH/fxfuse --out DIR
"""
import argparse
import json
import math
import os
import subprocess
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

from bench_modes import (FXFUSE_MODES, columns as mode_columns, fxfuse_bench_argv, fxfuse_modes, iters_for,
                         next_estimate, parse_modes, torch_plan)

FP8 = torch.float8_e4m3fn
H, I, NH, NKV, D, MAXPOS, EPS = 4096, 14336, 32, 8, 128, 8192, 1e-5


def quant_static(x, scale):
    # vLLM QuantFP8.forward_native, static: x.float() * (1 / scale), clamp, cast.
    return (x.to(torch.float32) * scale.reciprocal()).clamp(-448.0, 448.0).to(FP8)


def rms_norm(x, w):
    xf = x.to(torch.float32)
    xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + EPS)
    return xf.to(x.dtype) * w


class DecoderLayerFP8(nn.Module):
    def __init__(self, device="cuda", dtype=torch.bfloat16, scalar_scales=False):
        super().__init__()
        g = torch.Generator(device="cpu").manual_seed(0)

        def fp8_weight(n_out, n_in):  # [K, N] column-major, as vLLM stores FP8 weights
            w = (torch.rand(n_out, n_in, generator=g) * 2 - 1) / math.sqrt(n_in) * 16
            return w.to(device).to(FP8).t()

        def scale(v):  # per-tensor scales: [1] (vLLM), or 0-d when scalar_scales
            t = torch.tensor([v], dtype=torch.float32, device=device)
            return t.reshape(()) if scalar_scales else t

        self.register_buffer("ln1", (torch.rand(H, generator=g) + 0.5).to(device, dtype))
        self.register_buffer("ln2", (torch.rand(H, generator=g) + 0.5).to(device, dtype))
        self.register_buffer("w_qkv", fp8_weight(NH * D + 2 * NKV * D, H))
        self.register_buffer("w_o", fp8_weight(H, NH * D))
        self.register_buffer("w_gu", fp8_weight(2 * I, H))
        self.register_buffer("w_down", fp8_weight(H, I))
        for n in ("qkv", "o", "gu", "down"):
            self.register_buffer("ws_" + n, scale(1 / 16))
            self.register_buffer("is_" + n, scale(0.05))
        inv = 1.0 / (10000 ** (torch.arange(0, D, 2, dtype=torch.float32) / D))
        f = torch.outer(torch.arange(MAXPOS, dtype=torch.float32), inv)
        self.register_buffer("cos_sin", torch.cat([f.cos(), f.sin()], -1).to(device, dtype))

    def forward(self, positions, hidden, residual):
        T = hidden.shape[0]
        residual = hidden + residual
        x = rms_norm(residual, self.ln1)
        qkv = torch._scaled_mm(quant_static(x, self.is_qkv), self.w_qkv, scale_a=self.is_qkv, scale_b=self.ws_qkv,
                               out_dtype=torch.bfloat16)
        q, k, v = qkv.split([NH * D, NKV * D, NKV * D], dim=-1)
        cos, sin = self.cos_sin[positions].chunk(2, dim=-1)
        cos, sin = cos[:, None, :], sin[:, None, :]

        def rope(t, heads):
            t = t.reshape(T, heads, D)
            t1, t2 = t[..., : D // 2], t[..., D // 2:]
            return torch.cat([t1 * cos - t2 * sin, t2 * cos + t1 * sin], dim=-1)

        q, k = rope(q, NH), rope(k, NKV)
        v = v.reshape(T, NKV, D)
        a = F.scaled_dot_product_attention(q.transpose(0, 1)[None], k.transpose(0, 1)[None], v.transpose(0, 1)[None],
                                           is_causal=True, enable_gqa=True)
        a = a[0].transpose(0, 1).reshape(T, NH * D)
        o = torch._scaled_mm(quant_static(a, self.is_o), self.w_o, scale_a=self.is_o, scale_b=self.ws_o,
                             out_dtype=torch.bfloat16)
        residual = o + residual
        x = rms_norm(residual, self.ln2)
        gu = torch._scaled_mm(quant_static(x, self.is_gu), self.w_gu, scale_a=self.is_gu, scale_b=self.ws_gu,
                              out_dtype=torch.bfloat16)
        act = F.silu(gu[:, :I]) * gu[:, I:]
        out = torch._scaled_mm(quant_static(act, self.is_down), self.w_down, scale_a=self.is_down,
                               scale_b=self.ws_down, out_dtype=torch.bfloat16)
        return out, residual


def inputs(T, device="cuda"):
    g = torch.Generator(device="cpu").manual_seed(T)
    pos = torch.arange(T, dtype=torch.int64).to(device)
    h = (torch.randn(T, H, generator=g) * 0.5).to(device, torch.bfloat16)
    r = (torch.randn(T, H, generator=g) * 0.5).to(device, torch.bfloat16)
    return pos, h, r


def time_fn(fn, args, iters, warmup=5):
    """Median of `iters` calls, each timed with CUDA events (CPU launch cost included)."""
    for _ in range(warmup):
        fn(*args)
    torch.cuda.synchronize()
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    ms = []
    for _ in range(iters):
        a.record()
        fn(*args)
        b.record()
        b.synchronize()
        ms.append(a.elapsed_time(b))
    ms.sort()
    return ms[len(ms) // 2] * 1000.0


def time_graph(fn, args, iters):
    """The same call captured once in a CUDA graph: median of `iters` replays (as fxfuse bench)."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            fn(*args)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn(*args)
    return time_fn(lambda: graph.replay(), (), iters)


def count_kernels(fn, args):
    from torch.profiler import ProfilerActivity, profile
    fn(*args)
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn(*args)
        torch.cuda.synchronize()
    n = 0
    for e in prof.events():
        if e.device_type == torch.autograd.DeviceType.CUDA and "memcpy" not in e.name.lower() \
                and "memset" not in e.name.lower():
            n += 1
    return n


COMPILED = ("default", "default (graph)", "max-autotune", "max-autotune (graph)")


def write_report(args, tokens, columns, results, notes, final=False):
    json.dump({"results": {m: {str(t): v for t, v in r.items()} for m, r in results.items()},
               "torch": torch.__version__, "device": torch.cuda.get_device_name(0), "notes": notes},
              open(os.path.join(args.out, "decoder_layer.json"), "w"), indent=1)
    lines = ["| T | " + " | ".join(columns) + " | fxfuse vs best torch.compile (any) | kernels (" +
             " / ".join(c for c in columns if "(graph)" not in c) + ") | fxfuse arena |",
             "|---|" + "---|" * len(columns) + "---|---|---|"]
    for T in tokens:
        row = [str(T)]
        for m in columns:
            r = results[m].get(T, {})
            row.append(f"{r['us']:.1f} us" if "us" in r else "n/a")
        fx = results.get("fxfuse", {}).get(T, {}).get("us")
        best = [results[m][T]["us"] for m in COMPILED if m in results and "us" in results[m].get(T, {})]
        row.append(f"{min(best) / fx:.2f}x" if fx and best else "n/a")
        row.append(" / ".join(str(results[m].get(T, {}).get("kernels", "-")) for m in columns if "(graph)" not in m))
        ar = results.get("fxfuse", {}).get(T, {}).get("arena")
        row.append(f"{ar / 2**20:.1f} MiB" if ar else "n/a")
        lines.append("| " + " | ".join(row) + " |")
    table = "\n".join(lines)
    open(os.path.join(args.out, "decoder_layer_table.md"), "w").write(
        table + "\n" + "".join(f"\n- {n}" for n in sorted(set(notes))) + "\n")
    if not final:
        return
    print(table)
    for n in sorted(set(notes)):
        print("note:", n)
    for m in columns:
        for T, r in results[m].items():
            if "error" in r:
                print(f"error {m} T={T}: {r['error']}")


def innermost_failure(e):
    """Where the exception chain started: the innermost exception and its last frames."""
    import traceback
    while e.__cause__ is not None or (e.__context__ is not None and not e.__suppress_context__):
        e = e.__cause__ or e.__context__
    frames = traceback.extract_tb(e.__traceback__)[-4:]
    where = "; ".join(f"{os.path.basename(f.filename)}:{f.lineno} {f.name}: {f.line}" for f in frames)
    return f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''} at {where}"


# Ways to get max-autotune through Inductor's _scaled_mm lowering, tried in order until one
# compiles (same math in every one; the table's notes say which was used):
#   as-is; 0-d scale tensors instead of [1]; no prologue fusion into the GEMM templates;
#   the GEMMs from ATen (cuBLASLt) only, every other max-autotune choice kept.
MAX_AUTOTUNE_VARIANTS = [
    ("as-is", False, {}),
    ("0-d scales", True, {}),
    ("0-d scales, prologue_fusion=False", True, {"prologue_fusion": False}),
    ("0-d scales, max_autotune_gemm_backends=ATEN", True, {"max_autotune_gemm_backends": "ATEN"}),
]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--fxfuse", required=True)
    ap.add_argument("--graph", default=os.path.join(os.path.dirname(__file__), "llama8b_decoder_fp8.fxg"))
    ap.add_argument("--tokens", default="1,8,64,512,4096")
    ap.add_argument("--out", default=".", help="decoder_layer.json and decoder_layer_table.md go here")
    ap.add_argument("--work", default="/tmp/fxfuse_bench", help="plan and per-run JSON files")
    ap.add_argument("--deadline-s", type=float, default=200, help="stop starting new torch.compile work after this")
    ap.add_argument("--iters", type=int, default=100)
    ap.add_argument("--modes", default="fxfuse,fxfuse-heuristic,eager,default,max-autotune",
                    help="fxfuse: cuBLASLt algorithms tuned by measurement (the default); fxfuse-heuristic: "
                         "cuBLASLt's first heuristic algorithm (--no-gemm-tune), the baseline of the tuning")
    ap.add_argument("--max-autotune-tokens", default=None,
                    help="T values for max-autotune, in this order (default: --tokens); it runs after the other modes")
    ap.add_argument("--first-variant", type=int, default=0,
                    help="index into MAX_AUTOTUNE_VARIANTS to start from (a known failure need not be re-run)")
    args = ap.parse_args()
    t_start = time.time()
    tokens = [int(t) for t in args.tokens.split(",")]
    try:
        modes = parse_modes(args.modes)
    except ValueError as e:
        ap.error(str(e))
    columns = mode_columns(modes)
    os.makedirs(args.out, exist_ok=True)
    results = {c: {} for c in columns}
    notes = []
    torch.backends.cuda.matmul.allow_tf32 = False

    fx_modes = fxfuse_modes(modes)
    if fx_modes:
        os.makedirs(args.work, exist_ok=True)
        plan = os.path.join(args.work, "decoder_layer.plan.pb")
        subprocess.run([args.fxfuse, "compile", args.graph, "--emit=plan", "-o", plan, "-q"], check=True)
        est = 100.0
        for T in tokens:
            n = iters_for(est, args.iters)  # the same replay count for every fxfuse mode at this T
            for mode in fx_modes:  # tuned and heuristic side by side at each T (same machine state)
                js = os.path.join(args.work, f"{mode}_T{T}.json")
                r = subprocess.run(fxfuse_bench_argv(args.fxfuse, plan, mode, T, n, js), capture_output=True, text=True)
                print(f"[{mode}]", r.stdout.strip(), r.stderr.strip(), flush=True)
                if r.returncode == 0:
                    d = json.load(open(js))
                    matmuls = [ln.strip() for ln in r.stdout.splitlines() if ln.startswith("  step ")]
                    results[mode][T] = {"us": d["median_us"], "kernels": d["kernels"], "arena": d["arena_bytes"],
                                        "iters": n, "matmul_algorithms": matmuls}
                    if mode == fx_modes[0]:
                        est = next_estimate(d["median_us"], T)
                else:
                    results[mode][T] = {"error": (r.stderr or r.stdout).strip()[-300:]}
                write_report(args, tokens, columns, results, notes)

    models = {False: DecoderLayerFP8()}
    # Every mode x shape compiles its own entry of the one forward(): room for all of them
    # (the default limit of 8 would silently fall back to eager).
    for knob in ("cache_size_limit", "recompile_limit", "accumulated_cache_size_limit", "accumulated_recompile_limit"):
        if hasattr(torch._dynamo.config, knob):
            setattr(torch._dynamo.config, knob, 256)

    def build(mode, v):
        name, scalar, patch = MAX_AUTOTUNE_VARIANTS[v] if mode == "max-autotune" else ("as-is", False, {})
        if scalar not in models:
            models[scalar] = DecoderLayerFP8(scalar_scales=scalar)
        if mode == "eager":
            return name, models[scalar]
        # max-autotune without Inductor's own cudagraph trees: the graph column captures the
        # compiled call in a CUDA graph the same way as for eager and default.
        inductor_mode = {"default": None, "max-autotune": "max-autotune-no-cudagraphs"}[mode]  # torch modes only
        compiled = torch.compile(models[scalar], mode=inductor_mode, dynamic=False)
        if not patch:
            return name, compiled
        import torch._inductor.config as icfg
        patch = {k: x for k, x in patch.items() if hasattr(icfg, k)}

        def patched(*a):
            with icfg.patch(patch):
                return compiled(*a)
        return name, patched

    state = {}  # mode -> [variant index, variant name, callable]
    # Eager and default at every T, then max-autotune (minutes of autotuning per T) on its list.
    mat_tokens = [int(t) for t in args.max_autotune_tokens.split(",")] if args.max_autotune_tokens else tokens
    plan = torch_plan(modes, tokens, mat_tokens)  # fxfuse modes were measured above, by fxfuse
    assert not any(m in FXFUSE_MODES for m, _ in plan), plan
    with torch.no_grad():
        for mode, mode_tokens in plan:
            if mode not in state:
                first = args.first_variant if mode == "max-autotune" else 0
                state[mode] = [first, *build(mode, first)]
                if first:
                    notes.append(f"max-autotune: variants before '{MAX_AUTOTUNE_VARIANTS[first][0]}' not retried "
                                 f"(--first-variant {first}; they failed in an earlier run)")
            for T in mode_tokens:
                if mode != "eager" and time.time() - t_start > args.deadline_s:
                    results[mode][T] = {"error": "not run: time budget of the device call"}
                    continue
                a = inputs(T)
                first_s = None
                while True:
                    variant, vname, fn = state[mode]
                    try:
                        t0 = time.time()
                        fn(*a)
                        torch.cuda.synchronize()
                        first_s = time.time() - t0
                        break
                    except Exception as e:  # noqa: BLE001 - report, then the next variant
                        why = innermost_failure(e)
                        print(f"{mode} T={T} [{vname}] failed: {why}", flush=True)
                        notes.append(f"{mode} [{vname}] failed: {why}"[:600])
                        if mode != "max-autotune" or variant + 1 >= len(MAX_AUTOTUNE_VARIANTS):
                            break
                        state[mode] = [variant + 1, *build(mode, variant + 1)]
                if first_s is None:
                    results[mode][T] = {"error": notes[-1][:200]}
                    continue
                try:
                    us = time_fn(fn, a, iters_for(1000.0, args.iters))
                    k = count_kernels(fn, a)
                    results[mode][T] = {"us": us, "kernels": k, "first_call_s": first_s, "variant": vname}
                    gus = time_graph(fn, a, iters_for(us, args.iters))
                    results[mode + " (graph)"][T] = {"us": gus, "variant": vname}
                    if vname != "as-is":
                        notes.append(f"{mode}: compiled with {vname}")
                    print(f"{mode} T={T} [{vname}]: {us:.1f} us per call, {gus:.1f} us in a CUDA graph, {k} kernels, "
                          f"first call {first_s:.1f} s", flush=True)
                except Exception as e:  # noqa: BLE001
                    why = innermost_failure(e)
                    print(f"{mode} T={T} timing failed: {why}", flush=True)
                    if "us" not in results[mode].get(T, {}):
                        results[mode][T] = {"error": why[:200]}
                write_report(args, tokens, columns, results, notes)

    write_report(args, tokens, columns, results, notes, final=True)


if __name__ == "__main__":
    main()
