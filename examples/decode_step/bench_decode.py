#!/usr/bin/env python3
"""The whole-model decode step on the GPU: fxfuse's plan of a Llama-shaped FP8 model
(tools/fixtures/decode_model.py: embedding -> layers -> final norm -> LM head, vLLM's forms) over a paged KV
cache, at each batch x context, against the floor: the bytes the step must move (weights,
the KV cache read, this step's KV write) / the device copy rate measured in the same run.

    python3 examples/decode_step/bench_decode.py --fxfuse PATH/fxfuse --config llama8b \\
        --batches 1,8,32,64 --contexts 1024,4096 --out DIR

Each point is `fxfuse bench PLAN --kv-batch B --kv-query-len 1 --kv-context C`: B sequences
decoding one token each over C cached tokens (C - 1 cached plus this step's), random weights
and cache contents, the step replayed in a CUDA graph (median of many replays).
Then torch 2.11 runs the same model shape (torch_decode.py: vLLM's native forms over a static
KV cache, random weights of the same distributions — not the same values: for 70B the weights
do not fit on the GPU twice) in each of --torch-modes (eager, torch.compile default,
max-autotune), the whole step captured in one CUDA graph, after fxfuse's processes have
exited. DIR gets decode_<tag>.json (raw numbers, commands) and decode_<tag>.md (the table).
"""
import argparse
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
FIXTURES = os.path.join(HERE, "..", "..", "tools", "fixtures")
sys.path.insert(0, HERE)
sys.path.insert(0, FIXTURES)
import decode_model  # noqa: E402

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


def torch_points(a, config, points, rows):
    """torch's time and kernels per step at each (batch, context) of `points`, into `rows`."""
    import torch
    import torch_decode as td
    model = td.DecodeModel(config, device="cuda", weights="fp8")
    deadline = time.time() + a.torch_budget
    for mode in [m for m in a.torch_modes.split(",") if m and m != "none"]:
        layer = td.layer_for(mode)
        for (batch, ctx), row in zip(points, rows):
            key = "torch_" + mode.replace("-", "_")
            if time.time() > deadline:
                row[key + "_error"] = "not run: --torch-budget spent"
                continue
            try:
                step = td.make_step(model.set_batch(batch, ctx), layer)
                row[key + "_us"] = td.time_graph(step, a.iters)
                row[key + "_kernels"] = td.count_kernels(step)
            except Exception as e:  # a mode that fails at one shape is reported, not fatal
                row[key + "_error"] = ("%s: %s" % (type(e).__name__, e)).splitlines()[0][:200]
            print(json.dumps({"batch": batch, "context": ctx, key: row.get(key + "_us", row.get(key + "_error"))}),
                  flush=True)
    del model
    torch.cuda.empty_cache()


def markdown(rows, modes):
    keys = ["torch_" + m.replace("-", "_") for m in modes]
    head = ["batch x context", "fxfuse µs/step"] + ["torch %s µs" % m for m in modes] + [
        "fxfuse vs best torch.compile", "kernels fxfuse / torch", "tokens/s", "floor µs", "fraction of floor"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        ours = r.get("fxfuse_us")
        cells = ["%d x %d" % (r["batch"], r["context"]), "%.1f" % ours if ours else "failed: %s" % r["error"][0][:60]]
        cells += ["%.1f" % r[k + "_us"] if k + "_us" in r else "—" for k in keys]
        compiled = [r[k + "_us"] for k in keys if k != "torch_eager" and k + "_us" in r]
        cells.append("%.2fx" % (min(compiled) / ours) if compiled and ours else "—")
        torch_kernels = [str(r[k + "_kernels"]) for k in keys if k + "_kernels" in r]
        cells.append("%s / %s" % (r.get("kernels", "—"), ", ".join(torch_kernels) or "—"))
        cells.append("%.0f" % r["tokens_per_s"] if "tokens_per_s" in r else "—")
        cells.append("%.1f" % r["floor_us"])
        cells.append("%.0f %%" % (100 * r["fraction_of_floor"]) if "fraction_of_floor" in r else "—")
        lines.append("| " + " | ".join(cells) + " |")
    for r in rows:  # where fxfuse's time goes (--profile): the largest step groups
        if r.get("profile"):
            total = sum(g["us"] for g in r["profile"]) or 1.0
            lines.append("\nsteps of %d x %d, per-step medians without a CUDA graph (sum %.0f µs): %s" % (
                r["batch"], r["context"], total, "; ".join(
                    "%s x%d %.0f µs (%.0f %%)" % (g["what"], g["steps"], g["us"], 100 * g["us"] / total)
                    for g in r["profile"][:8])))
    for r in rows:  # what each step group costs the replayed step (--ablate), per layer too
        a = r.get("ablation")
        if a:
            layers = r.get("layers") or 1
            lines.append("\nablation of %d x %d (CUDA graph replay without each group; all steps %.0f µs before, "
                         "%.0f after): %s" % (r["batch"], r["context"], a["before_us"], a["after_us"], "; ".join(
                             "%s x%d saves %.0f µs (%.1f per layer)" % (g["what"], g["steps"], g["saved_us"],
                                                                        g["saved_us"] / layers)
                             for g in a["groups"] if g["saved_us"] > 0.002 * a["before_us"])))
    return "\n".join(lines) + "\n"


def run(cmd, log, stdout_file=None):
    t0 = time.time()
    p = subprocess.run(cmd, capture_output=True, text=True)
    if stdout_file:  # the whole output (matmul algorithm choices, the profile)
        with open(stdout_file, "w") as f:
            f.write(p.stdout + p.stderr)
    log.append({"cmd": " ".join(cmd), "rc": p.returncode, "seconds": round(time.time() - t0, 2),
                "stdout_tail": p.stdout[-1500:], "stderr_tail": p.stderr[-1500:]})
    if p.returncode != 0:
        print("FAILED: %s\n%s%s" % (" ".join(cmd), p.stdout[-800:], p.stderr[-800:]), file=sys.stderr)
    return p


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--fxfuse", required=True)
    ap.add_argument("--config", choices=sorted(decode_model.CONFIGS), default="llama8b")
    ap.add_argument("--form", choices=["custom", "native"], default="custom")
    ap.add_argument("--layers", type=int)
    ap.add_argument("--batches", default="1,8,32,64")
    ap.add_argument("--contexts", default="1024,4096")
    ap.add_argument("--kv-cache", choices=sorted(KV_BYTES), default="bf16")
    ap.add_argument("--iters", type=int, default=100)
    ap.add_argument("--profile", type=int, default=0,
                    help="also time each step over this many plain runs (fxfuse bench --profile)")
    ap.add_argument("--ablate", type=int, default=0,
                    help="also time the replay without each step group, this many replays each (fxfuse bench --ablate)")
    ap.add_argument("--copy-rate", type=float, help="bytes/s; default: measured here with torch")
    ap.add_argument("--torch-modes", default="eager,default",
                    help="comma list of eager, default, max-autotune, max-autotune-aten (max-autotune "
                         "with ATen GEMMs: torch_decode.compile_kwargs); 'none' skips torch")
    ap.add_argument("--torch-budget", type=float, default=400, help="seconds after which no torch point starts")
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    config = list(decode_model.CONFIGS[a.config])
    if a.layers:
        config[6] = a.layers
    tag = "%s_%s_%s" % (a.config, a.form, a.kv_cache)
    log = []
    graph = os.path.join(a.out, tag + ".fxg")
    gen = [sys.executable, os.path.join(FIXTURES, "decode_model.py"), "--config", a.config, "--form", a.form]
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
    rows, points = [], []
    for ctx in [int(x) for x in a.contexts.split(",")]:
        for batch in [int(x) for x in a.batches.split(",")]:
            points.append((batch, ctx))
            js = os.path.join(a.out, "%s_b%d_c%d.json" % (tag, batch, ctx))
            p = run([a.fxfuse, "bench", plan, "--kv-batch", str(batch), "--kv-query-len", "1", "--kv-context",
                     str(ctx), "--iters", str(a.iters), "--json", js] +
                    (["--profile", str(a.profile)] if a.profile else []) +
                    (["--ablate", str(a.ablate)] if a.ablate else []), log, js[:-len(".json")] + ".txt")
            row = {"batch": batch, "context": ctx, "layers": config[6]}
            row.update(step_bytes(config, batch, ctx, a.kv_cache))
            row["bytes"] = row["weights"] + row["kv_read"] + row["kv_write"]
            row["floor_us"] = row["bytes"] / rate * 1e6
            if p.returncode == 0:
                r = json.load(open(js))
                row.update({"fxfuse_us": r["median_us"], "kernels": r["kernels"],
                            "programmatic_launch": r.get("programmatic_launch"),
                            "tokens_per_s": batch / (r["median_us"] * 1e-6),
                            "fraction_of_floor": row["floor_us"] / r["median_us"], "profile": r.get("profile", []),
                            "ablation": r.get("ablation")})
            else:
                row["error"] = (p.stderr or p.stdout).strip().splitlines()[-1:] or ["failed"]
            rows.append(row)
            print(json.dumps(row), flush=True)
    modes = [m for m in a.torch_modes.split(",") if m and m != "none"]

    def write_results():  # after fxfuse's points, and again after torch's (a timeout keeps the first)
        result = {"config": a.config, "layers": config[6], "form": a.form, "kv_cache": a.kv_cache,
                  "copy_rate_bytes_per_s": rate, "compile_seconds": compile_s, "rows": rows, "log": log,
                  "command": " ".join([os.path.basename(sys.executable)] + sys.argv)}
        json.dump(result, open(os.path.join(a.out, "decode_%s.json" % tag), "w"), indent=1)
        table = markdown(rows, modes)
        open(os.path.join(a.out, "decode_%s.md" % tag), "w").write(table)
        return table

    write_results()
    if modes:
        torch_points(a, config, points, rows)
    print(write_results())


if __name__ == "__main__":
    main()
