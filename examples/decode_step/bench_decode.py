#!/usr/bin/env python3
"""The whole-model decode step on the GPU: fxfuse's plan of a Llama-shaped FP8 model
(make_model.py: embedding -> layers -> final norm -> LM head, vLLM's forms) over a paged KV
cache, at each batch x context, against the floor: the bytes the step must move (weights,
the KV cache read, this step's KV write) / the device copy rate measured in the same run.

    python3 examples/decode_step/bench_decode.py --fxfuse PATH/fxfuse --config llama8b \\
        --batches 1,8,32,64 --contexts 1024,4096 --out DIR

Each point is `fxfuse bench PLAN --kv-batch B --kv-query-len 1 --kv-context C`: B sequences
decoding one token each over C cached tokens (C - 1 cached plus this step's), random weights
and cache contents, the step replayed in a CUDA graph (median of many replays).
DIR gets decode_<config>.json (raw numbers, commands) and decode_<config>.md (the table).
torch's side (eager and torch.compile over a static cache) is not part of this script yet:
docs/benchmarks/decode_step.md says what was measured and what is still missing.
"""
import argparse
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import make_model  # noqa: E402

KV_BYTES = {"bf16": 2, "f16": 2, "fp8": 1}


def step_bytes(config, batch, context, kv_cache):
    """Bytes one decode step must move: every weight once (FP8 linears, bf16 norms and LM
    head; the embedding only for the rows it gathers), the cache read (context tokens of K and
    V per layer) and this step's K/V write."""
    H, I, NH, NKV, D, V, L, _eps, _maxpos = config
    Q, KV = NH * D, NKV * D
    fp8_weights = L * (H * (Q + 2 * KV) + Q * H + H * 2 * I + I * H)
    bf16_weights = 2 * (V * H + (2 * L + 1) * H + batch * H)
    kv_per_token = 2 * L * KV * KV_BYTES[kv_cache]
    return {"weights": fp8_weights + bf16_weights, "kv_read": batch * context * kv_per_token,
            "kv_write": batch * kv_per_token}


def copy_rate(gib=2.0, iters=30):
    """Device-to-device copy of a buffer larger than L2: bytes read + written per second."""
    import torch
    n = int(gib * (1 << 30))
    a = torch.empty(n, dtype=torch.uint8, device="cuda")
    b = torch.empty_like(a)
    for _ in range(3):
        b.copy_(a)
    torch.cuda.synchronize()
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    ms = []
    for _ in range(iters):
        s.record()
        b.copy_(a)
        e.record()
        e.synchronize()
        ms.append(s.elapsed_time(e))
    ms.sort()
    rate = 2 * n / (ms[len(ms) // 2] / 1000.0)
    del a, b
    torch.cuda.empty_cache()
    return rate


def run(cmd, log):
    t0 = time.time()
    p = subprocess.run(cmd, capture_output=True, text=True)
    log.append({"cmd": " ".join(cmd), "rc": p.returncode, "seconds": round(time.time() - t0, 2),
                "stdout_tail": p.stdout[-1500:], "stderr_tail": p.stderr[-1500:]})
    if p.returncode != 0:
        print("FAILED: %s\n%s%s" % (" ".join(cmd), p.stdout[-800:], p.stderr[-800:]), file=sys.stderr)
    return p


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--fxfuse", required=True)
    ap.add_argument("--config", choices=sorted(make_model.CONFIGS), default="llama8b")
    ap.add_argument("--form", choices=["custom", "native"], default="custom")
    ap.add_argument("--layers", type=int)
    ap.add_argument("--batches", default="1,8,32,64")
    ap.add_argument("--contexts", default="1024,4096")
    ap.add_argument("--kv-cache", choices=sorted(KV_BYTES), default="bf16")
    ap.add_argument("--iters", type=int, default=100)
    ap.add_argument("--copy-rate", type=float, help="bytes/s; default: measured here with torch")
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    config = list(make_model.CONFIGS[a.config])
    if a.layers:
        config[6] = a.layers
    tag = "%s_%s_%s" % (a.config, a.form, a.kv_cache)
    log = []
    graph = os.path.join(a.out, tag + ".fxg")
    gen = [sys.executable, os.path.join(HERE, "make_model.py"), "--config", a.config, "--form", a.form]
    if a.layers:
        gen += ["--layers", str(a.layers)]
    with open(graph, "w") as f:
        subprocess.run(gen, stdout=f, check=True)
    plan = os.path.join(a.out, tag + ".plan.pb")
    t0 = time.time()
    p = run([a.fxfuse, "compile", graph, "--kv-cache=" + a.kv_cache, "--emit=plan", "-o", plan, "-q"], log)
    compile_s = time.time() - t0
    if p.returncode != 0:
        sys.exit(1)
    rate = a.copy_rate or copy_rate()
    print("copy rate %.3f TB/s; compile %.2f s" % (rate / 1e12, compile_s), flush=True)
    rows = []
    for ctx in [int(x) for x in a.contexts.split(",")]:
        for batch in [int(x) for x in a.batches.split(",")]:
            js = os.path.join(a.out, "%s_b%d_c%d.json" % (tag, batch, ctx))
            p = run([a.fxfuse, "bench", plan, "--kv-batch", str(batch), "--kv-query-len", "1", "--kv-context",
                     str(ctx), "--iters", str(a.iters), "--json", js], log)
            row = {"batch": batch, "context": ctx}
            row.update(step_bytes(config, batch, ctx, a.kv_cache))
            row["bytes"] = row["weights"] + row["kv_read"] + row["kv_write"]
            row["floor_us"] = row["bytes"] / rate * 1e6
            if p.returncode == 0:
                r = json.load(open(js))
                row.update({"fxfuse_us": r["median_us"], "kernels": r["kernels"],
                            "tokens_per_s": batch / (r["median_us"] * 1e-6),
                            "fraction_of_floor": row["floor_us"] / r["median_us"]})
            else:
                row["error"] = (p.stderr or p.stdout).strip().splitlines()[-1:] or ["failed"]
            rows.append(row)
            print(json.dumps(row), flush=True)
    result = {"config": a.config, "layers": config[6], "form": a.form, "kv_cache": a.kv_cache,
              "copy_rate_bytes_per_s": rate, "compile_seconds": compile_s, "rows": rows, "log": log,
              "command": " ".join([os.path.basename(sys.executable)] + sys.argv)}
    json.dump(result, open(os.path.join(a.out, "decode_%s.json" % tag), "w"), indent=1)
    lines = ["| batch x context | fxfuse µs/step | tokens/s | kernels | floor µs | fraction of floor |",
             "|---|---|---|---|---|---|"]
    for r in rows:
        if "fxfuse_us" in r:
            lines.append("| %d x %d | %.1f | %.0f | %d | %.1f | %.0f %% |" % (
                r["batch"], r["context"], r["fxfuse_us"], r["tokens_per_s"], r["kernels"], r["floor_us"],
                100 * r["fraction_of_floor"]))
        else:
            lines.append("| %d x %d | failed: %s | | | %.1f | |" % (r["batch"], r["context"], r["error"][0][:80],
                                                                   r["floor_us"]))
    open(os.path.join(a.out, "decode_%s.md" % tag), "w").write("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
