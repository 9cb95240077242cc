#!/usr/bin/env python3
"""Logit parity of fxfuse's decode-step plan against torch on the same inputs.

    python3 examples/decode_step/torch_parity.py --fxfuse PATH/fxfuse --config llama8b --layers 2 \\
        --batch 4 --context 1024 --out DIR

1. tools/fixtures/decode_model.py writes the model (vLLM's custom-op form), `fxfuse compile
   --kv-cache=bf16` makes the plan.
2. torch makes the weights with torch_decode.DecodeModel's distributions (FP8 weights of unit
   gain, static scales that fit the activations, a real rotary table: a well-conditioned
   model, unlike seeded noise) and writes them in `--input`'s format.
3. `fxfuse run PLAN --kv-batch B --kv-context C --kv-query-len 1 --input NAME=FILE ...
   --save-inputs DIR --save-outputs DIR` runs one step on them: it makes the rest of the
   step's inputs (B sequences, one token each over C cached tokens: token ids, positions, the
   paged caches, their block table and slots; the given weights are never generated), saves
   them, and saves the logits.
4. torch runs the same step (torch_decode.py: vLLM's native forms, torch._scaled_mm, SDPA over
   a static cache) on exactly those inputs: the paged caches gathered through the block table
   into [B, Hkv, C, E], eager and (--modes) torch.compile.
5. The logits are compared: relative L2 error ‖fxfuse − torch‖ / ‖torch‖, the largest
   difference, the fraction of elements outside bf16's tolerance (|Δ| ≤ 1e-2 + 1e-2·|ref|) and
   how many rows pick the same top token.

Passes when fxfuse's relative L2 error against torch eager is at most twice the spread of
two correct spellings of the same model, and at most --max-rel-l2 (default 0.02) when the
spread is smaller than that. The spread is the largest relative L2 error against eager of
torch.compile (the other --modes) and of eager with SiLU-and-mul rounded once, as vLLM's
`_C.silu_and_mul` does, instead of twice as torch's native ops do. FP8 e4m3 keeps 3 mantissa
bits: one bf16 step in an activation flips some e4m3 roundings by 6 %, and after a few layers
of random weights such flips spread over every logit, while a wrong layout, scale, cache slot or mask moves the logits by tens
of percent.

`--cpu` runs fxfuse's CPU interpreter instead of the GPU (`fxfuse run --cpu-only`) and
torch's FP8 linears emulated on f32 values (torch_decode.linear_emulated): how CI checks this
script and the interpreter against torch without a GPU or torch FP8.
DIR gets parity_<tag>.json (numbers, commands) and parity_<tag>.md.
"""
import argparse
import json
import os
import subprocess
import sys
import time

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
FIXTURES = os.path.join(HERE, "..", "..", "tools", "fixtures")
sys.path.insert(0, HERE)
sys.path.insert(0, FIXTURES)
import decode_model  # noqa: E402
import torch_decode as td  # noqa: E402

RAW_DTYPES = {"bf16": (torch.int16, torch.bfloat16), "f16": (torch.int16, torch.float16),
              "f32": (torch.float32, None), "i64": (torch.int64, None), "i32": (torch.int32, None),
              "f8e4m3fn": (torch.uint8, "f8e4m3fn")}


def e4m3_table():
    """The value of each e4m3fn byte (sign, 4 exponent bits of bias 7, 3 mantissa bits; 0x7f
    and 0xff are NaN)."""
    vals = []
    for b in range(256):
        sign = -1.0 if b & 0x80 else 1.0
        e, m = (b >> 3) & 0xF, b & 0x7
        if e == 0xF and m == 0x7:
            vals.append(float("nan"))
        elif e == 0:
            vals.append(sign * m / 8.0 * 2.0 ** -6)
        else:
            vals.append(sign * (1 + m / 8.0) * 2.0 ** (e - 7))
    return torch.tensor(vals, dtype=torch.float32)


def read_bytes(path):
    with open(path, "rb") as f:
        return bytearray(f.read())


def read_json(path):
    with open(path) as f:
        return json.load(f)


def load_inputs(directory, device, fp8_native, skip=()):
    """The inputs `fxfuse run --save-inputs` wrote, by name, but those in `skip`: torch tensors
    of their dtype (FP8 as torch's float8_e4m3fn when `fp8_native`, else decoded to f32)."""
    out = {}
    for e in read_json(os.path.join(directory, "inputs.json")):
        if e["name"] in skip:
            continue
        raw, view = RAW_DTYPES[e["dtype"]]
        data = read_bytes(os.path.join(directory, e["file"]))
        t = torch.frombuffer(data, dtype=raw) if data else torch.empty(0, dtype=raw)
        if view == "f8e4m3fn":
            t = t.view(td.fp8_dtype()) if fp8_native else e4m3_table()[t.long()]
        elif view is not None:
            t = t.view(view)
        out[e["name"]] = t.reshape(e["shape"]).to(device)
    return out


def static_cache(paged, block_table, batch, context):
    """A paged cache [num_blocks, block_size, Hkv, E] as torch_decode's static one
    [B, Hkv, C, E]: position p of sequence b is slot block_table[b, p // bs] * bs + p % bs."""
    bs = paged.shape[1]
    flat = paged.reshape(-1, paged.shape[2], paged.shape[3])
    p = torch.arange(context, device=paged.device)
    slots = block_table[:batch, p // bs].long() * bs + p % bs  # [B, C]
    return flat[slots].permute(0, 2, 1, 3).contiguous()


class Step:
    """The decode step of torch_decode.py on fxfuse's inputs (attributes as make_step reads)."""

    def __init__(self, config, layers, inputs, batch, context, fp8):
        H, I, NH, NKV, D, V, _L, eps, _maxpos = config
        self.NH, self.NKV, self.D, self.eps, self.fp8 = NH, NKV, D, eps, fp8
        x = inputs
        self.embed, self.final_norm, self.lm_head = x["model.embed_tokens.weight"], x["model.norm.weight"], x["lm_head.weight"]
        self.input_ids, self.positions = x["input_ids"], x["positions"]
        self.cos_sin = x["cos_sin_cache"]
        self.cache_position = torch.tensor([context - 1], dtype=torch.int64, device=self.embed.device)
        self.layers = []
        for i in range(layers):
            p = "model.layers.%d." % i
            lw = {"ln1": x[p + "input_layernorm.weight"], "ln2": x[p + "post_attention_layernorm.weight"]}
            for short, name in (("qkv", "self_attn.qkv_proj"), ("o", "self_attn.o_proj"), ("gu", "mlp.gate_up_proj"),
                                ("down", "mlp.down_proj")):
                w = x[p + name + ".weight"]  # [K, N]; _scaled_mm takes it column-major, as vLLM stores it
                lw["w_" + short] = w.t().contiguous().t() if fp8 is True else w
                lw["ws_" + short] = x[p + name + ".weight_scale"]
                lw["is_" + short] = x[p + name + ".input_scale"]
            cache = "model_layers_%d_self_attn_attn_" % i
            lw["k_cache"] = static_cache(x[cache + "key_cache"], x["block_table"], batch, context)
            lw["v_cache"] = static_cache(x[cache + "value_cache"], x["block_table"], batch, context)
            self.layers.append(lw)

    def logits(self, mode):
        layer = td.decoder_layer if mode == "eager" else td.layer_for(mode)
        with torch.no_grad():
            saved = [(lw["k_cache"].clone(), lw["v_cache"].clone()) for lw in self.layers]
            out = td.make_step(self, layer)().float()
            for lw, (k, v) in zip(self.layers, saved):  # each mode starts from the same cache
                lw["k_cache"], lw["v_cache"] = k, v
        return out


def compare(got, ref):
    d = (got - ref).float()
    return {"rel_l2": (d.norm() / ref.norm().clamp(min=1e-30)).item(), "max_abs": d.abs().max().item(),
            "outside_bf16_tol": ((d.abs() > 1e-2 + 1e-2 * ref.abs()).float().mean()).item(),
            "same_top_token": int((got.argmax(-1) == ref.argmax(-1)).sum().item()), "rows": int(ref.shape[0]),
            "finite": bool(torch.isfinite(got).all().item())}


T0 = time.time()


def progress(what):
    print("[%6.1f s] %s" % (time.time() - T0, what), flush=True)


def run(cmd, log):
    progress(" ".join(os.path.basename(c) if i == 0 else c for i, c in enumerate(cmd[:3])) + " ...")
    t0 = time.time()
    p = subprocess.run(cmd, capture_output=True, text=True)
    log.append({"cmd": " ".join(cmd), "rc": p.returncode, "seconds": round(time.time() - t0, 2),
                "stdout_tail": p.stdout[-1500:], "stderr_tail": p.stderr[-1500:]})
    if p.returncode != 0:
        sys.exit("FAILED: %s\n%s%s" % (" ".join(cmd), p.stdout[-800:], p.stderr[-800:]))
    return p


def e4m3_bytes(values):
    """The e4m3fn bytes of f32 values that are e4m3 values already (round_e4m3's output)."""
    table = e4m3_table()
    finite = torch.arange(256)[~torch.isnan(table)]
    order = torch.argsort(table[finite])
    sorted_vals, sorted_bytes = table[finite][order], finite[order]
    idx = torch.searchsorted(sorted_vals, values.contiguous()).clamp(max=len(sorted_vals) - 1)
    # -0.0 and 0.0 compare equal: either byte decodes to zero
    assert torch.equal(sorted_vals[idx], values), "not e4m3 values"
    return sorted_bytes[idx].to(torch.uint8)


def write_raw(path, t):
    """`t` in --input's format: its dtype's bytes, row-major in its logical shape."""
    t = t.detach().contiguous().cpu()
    if t.dtype in (torch.bfloat16, torch.float16):
        t = t.view(torch.int16)
    elif t.dtype == td.fp8_dtype():
        t = t.view(torch.uint8)
    with open(path, "wb") as f:
        f.write(t.numpy().tobytes())


def model_weights(config, layers, device, fp8_native, seed):
    """The weights of torch_decode.DecodeModel by graph input name (FP8 linears as e4m3fn
    tensors, or as their f32 values when torch has no FP8) and the rotary table."""
    m = td.DecodeModel(config, device=device, weights="fp8" if fp8_native else "bf16", layers=layers, seed=seed)
    w = {"model.embed_tokens.weight": m.embed, "model.norm.weight": m.final_norm, "lm_head.weight": m.lm_head}
    for i, lw in enumerate(m.layers):
        p = "model.layers.%d." % i
        w[p + "input_layernorm.weight"], w[p + "post_attention_layernorm.weight"] = lw["ln1"], lw["ln2"]
        for short, name in (("qkv", "self_attn.qkv_proj"), ("o", "self_attn.o_proj"), ("gu", "mlp.gate_up_proj"),
                            ("down", "mlp.down_proj")):
            weight = lw["w_" + short]
            w[p + name + ".weight"] = weight if fp8_native else td.round_e4m3(weight.float())
            w[p + name + ".weight_scale"], w[p + name + ".input_scale"] = lw["ws_" + short], lw["is_" + short]
    return w


def write_weights(weights, directory, fp8_names):
    """One --input file per weight; FP8 ones (emulated: f32 values) as e4m3 bytes."""
    os.makedirs(directory, exist_ok=True)
    specs = []
    for name, t in weights.items():
        path = os.path.join(directory, name + ".bin")
        if name in fp8_names and t.dtype == torch.float32:
            with open(path, "wb") as f:
                f.write(e4m3_bytes(t.cpu()).numpy().tobytes())
        else:
            write_raw(path, t)
        specs += ["--input", "%s=%s" % (name, path)]
    return specs


def rotary_table(rows, head_size, device):
    """vLLM's neox cos/sin cache [rows, head_size]: cos then sin, base 500000 (Llama 3)."""
    inv = 1.0 / (500000.0 ** (torch.arange(0, head_size, 2, dtype=torch.float32, device=device) / head_size))
    f = torch.outer(torch.arange(rows, dtype=torch.float32, device=device), inv)
    return torch.cat([f.cos(), f.sin()], -1).to(torch.bfloat16)


def fxfuse_runs(a, config, tag, log, device, fp8_native):
    """Graph -> plan; torch's weights; one step of the plan on them, saving the seeded batch it
    made and the logits. Returns (every input by name, as torch tensors; the logits [B, V] f32)."""
    graph, plan = os.path.join(a.out, tag + ".fxg"), os.path.join(a.out, tag + ".plan.pb")
    with open(graph, "w") as f:
        subprocess.run([sys.executable, os.path.join(FIXTURES, "decode_model.py"), "--config", a.config, "--form",
                        "custom", "--layers", str(a.layers), "--vocab", str(config[5]), "--max-tokens",
                        str(max(64, a.batch))], stdout=f, check=True)
    run([a.fxfuse, "compile", graph, "--kv-cache=bf16", "--emit=plan", "-o", plan, "-q"], log)
    progress("torch: the model's weights")
    weights = model_weights(config, a.layers, device, fp8_native, a.seed)
    weights["cos_sin_cache"] = rotary_table(config[8], config[4], device)  # decode_model's rows: max positions
    fp8_names = {n for n in weights if n.endswith("_proj.weight")}
    step = [a.fxfuse, "run", plan, "--kv-batch", str(a.batch), "--kv-context", str(a.context), "--kv-query-len", "1",
            "--bind", "s0=%d" % a.batch, "--seed", str(a.seed), "--quiet"] + (["--cpu-only"] if a.cpu else [])
    seeded, outs = os.path.join(a.out, tag + "_seeded"), os.path.join(a.out, tag + "_outputs")
    run(step + write_weights(weights, os.path.join(a.out, tag + "_weights"), fp8_names) +
        ["--save-inputs", seeded, "--save-outputs", outs], log)
    inputs = load_inputs(seeded, device, fp8_native, skip=set(weights))
    inputs.update(weights)
    last = read_json(os.path.join(outs, "outputs.json"))[-1]  # the logits: after the caches the step mutates
    data = read_bytes(os.path.join(outs, last["file"]))
    return inputs, torch.frombuffer(data, dtype=torch.float32).reshape(last["shape"])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--fxfuse", required=True)
    ap.add_argument("--config", choices=sorted(decode_model.CONFIGS), required=True)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--vocab", type=int, help="override the config's vocabulary (a smaller embedding and LM head)")
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--context", type=int, default=1024)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--modes", default="eager,default", help="torch modes; the first is the reference")
    ap.add_argument("--max-rel-l2", type=float, default=0.02)
    ap.add_argument("--cpu", action="store_true", help="fxfuse's CPU interpreter and emulated FP8 in torch")
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    config = decode_model.CONFIGS[a.config]
    if a.vocab:
        config = config[:5] + (a.vocab,) + config[6:]
    tag = "%s_l%d_v%d_b%d_c%d%s" % (a.config, a.layers, config[5], a.batch, a.context, "_cpu" if a.cpu else "")
    log = []
    device = "cpu" if a.cpu else "cuda"
    fp8 = "emulate" if a.cpu or td.fp8_dtype() is None else True
    inputs, ours = fxfuse_runs(a, config, tag, log, device, fp8 is True)
    step = Step(config, a.layers, inputs, a.batch, a.context, fp8)
    modes = [m for m in a.modes.split(",") if m]
    progress("torch: the step in " + ", ".join(modes))
    torch_logits = {m: step.logits(m).cpu() for m in modes}
    td.SILU_MUL_ONE_ROUNDING = True
    torch_logits[modes[0] + ", SiLU-mul rounded once"] = step.logits(modes[0]).cpu()
    td.SILU_MUL_ONE_ROUNDING = False
    ref = torch_logits[modes[0]]
    result = {"config": a.config, "layers": a.layers, "batch": a.batch, "context": a.context, "fp8": str(fp8),
              "reference": modes[0], "fxfuse": compare(ours, ref), "log": log,
              "torch": {m: compare(t, ref) for m, t in torch_logits.items() if m != modes[0]}}
    spread = max([c["rel_l2"] for c in result["torch"].values()] + [0.0])
    bound = max(a.max_rel_l2, 2 * spread)
    ok = result["fxfuse"]["finite"] and result["fxfuse"]["rel_l2"] <= bound
    result.update({"spread_rel_l2": spread, "bound_rel_l2": bound, "pass": ok})
    with open(os.path.join(a.out, "parity_%s.json" % tag), "w") as f:
        json.dump(result, f, indent=1)
    rows = [("fxfuse " + ("CPU interpreter" if a.cpu else "plan"), result["fxfuse"])] + \
        [("torch " + m, c) for m, c in result["torch"].items()]
    lines = ["%s (vocabulary %d), %d layers, batch %d x context %d: logits against torch %s: %s (relative L2 %.2e, bound %.2e)" % (
        a.config, config[5], a.layers, a.batch, a.context, modes[0], "PASS" if ok else "FAIL", result["fxfuse"]["rel_l2"],
        bound),
        "", "| | relative L2 | max abs | outside bf16 tol | same top token |", "|---|---|---|---|---|"]
    for name, c in rows:
        lines.append("| %s | %.2e | %.3g | %.2f %% | %d / %d |" % (name, c["rel_l2"], c["max_abs"],
                                                               100 * c["outside_bf16_tol"], c["same_top_token"], c["rows"]))
    table = "\n".join(lines) + "\n"
    with open(os.path.join(a.out, "parity_%s.md" % tag), "w") as f:
        f.write(table)
    print(table)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
