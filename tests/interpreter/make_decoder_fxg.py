#!/usr/bin/env python3
"""Writes a vLLM-shaped FP8 Llama decoder as .fxg (the verify benchmark's input).

The graph is what vLLM's post-grad pass sees with the native (custom_ops="none") forms:
embedding; per layer a decomposed RMSNorm (plain for layer 0, fused residual add after),
static FP8 quant (reciprocal form), `_scaled_mm` projections, `_C.rotary_embedding` and
`vllm.unified_attention_with_output` through auto_functionalized, SiLU-and-mul decomposed
(neg/exp/add/div); a final norm and an unquantized lm_head. The token dim is the symbol s0.

    python3 make_decoder_fxg.py --layers 2 --hidden 1024 > decoder.fxg
"""
import argparse
import sys


class G:
    def __init__(self):
        self.lines = []
        self.n = 0

    def val(self, typ, rhs, name):
        self.n += 1
        self.lines.append(f"    %{self.n}: {typ} = {rhs}  // {name}")
        return self.n

    def vals(self, typs, rhs, name):
        ids = []
        outs = []
        for t in typs:
            if t is None:
                outs.append("_")
            else:
                self.n += 1
                ids.append(self.n)
                outs.append(f"%{self.n}: {t}")
        self.lines.append(f"    {', '.join(outs)} = {rhs}  // {name}")
        return ids

    def inp(self, name, typ, kind=""):
        self.n += 1
        self.lines.append(f"    input %{self.n} \"{name}\": {typ}{(' ' + kind) if kind else ''}")
        return self.n


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--hidden", type=int, default=1024)
    ap.add_argument("--heads", type=int, default=16)
    ap.add_argument("--kv-heads", type=int, default=4)
    ap.add_argument("--intermediate", type=int, default=2816)
    ap.add_argument("--vocab", type=int, default=32000)
    ap.add_argument("--max-pos", type=int, default=4096)
    ap.add_argument("--eps", default="1e-05")
    ap.add_argument("--hint", type=int, default=64)
    a = ap.parse_args()
    H, I, V = a.hidden, a.intermediate, a.vocab
    hd = H // a.heads
    q_sz, kv_sz = a.heads * hd, a.kv_heads * hd
    qkv = q_sz + 2 * kv_sz
    T = "s0"
    g = G()
    ids = g.inp("input_ids", f"i64[{T}]")
    pos = g.inp("positions", f"i64[{T}]")
    emb_w = g.inp("embed_tokens.weight", f"bf16[{V}, {H}]", 'parameter "model.embed_tokens.weight"')
    cache = g.inp("cos_sin_cache", f"bf16[{a.max_pos}, {hd}]", 'buffer "model.rotary_emb.cos_sin_cache"')
    params = []
    for l in range(a.layers):
        p = {}
        pre = f"model.layers.{l}."
        p["in_norm"] = g.inp(pre + "input_layernorm.weight", f"bf16[{H}]", f'parameter "{pre}input_layernorm.weight"')
        for nm, (k, n) in {"qkv": (H, qkv), "o": (q_sz, H), "gate_up": (H, 2 * I), "down": (I, H)}.items():
            # Column-major FP8 weight [K, N] (the transposed [N, K] weight vLLM stores).
            p[nm] = g.inp(pre + nm + ".weight", f"f8e4m3fn[{k}, {n}][1, {k}]", f'parameter "{pre}{nm}.weight"')
            p[nm + "_ws"] = g.inp(pre + nm + ".weight_scale", "f32[1]", f'parameter "{pre}{nm}.weight_scale"')
            p[nm + "_is"] = g.inp(pre + nm + ".input_scale", "f32[1]", f'parameter "{pre}{nm}.input_scale"')
        p["post_norm"] = g.inp(pre + "post_attention_layernorm.weight", f"bf16[{H}]",
                               f'parameter "{pre}post_attention_layernorm.weight"')
        params.append(p)
    final_norm = g.inp("norm.weight", f"bf16[{H}]", 'parameter "model.norm.weight"')
    lm_head = g.inp("lm_head.weight", f"bf16[{V}, {H}]", 'parameter "lm_head.weight"')

    def rms(x, w, residual, tag):
        xf = g.val(f"f32[{T}, {H}]", f"prims.convert_element_type.default(a=%{x}, dtype=f32)", tag + "_xf")
        res_out = None
        if residual is not None:
            xf = g.val(f"f32[{T}, {H}]", f"aten.add.Tensor(self=%{xf}, other=%{residual})", tag + "_add")
            res_out = g.val(f"bf16[{T}, {H}]", f"prims.convert_element_type.default(a=%{xf}, dtype=bf16)", tag + "_resid")
        sq = g.val(f"f32[{T}, {H}]", f"aten.pow.Tensor_Scalar(self=%{xf}, exponent=2)", tag + "_sq")
        var = g.val(f"f32[{T}, 1]", f"aten.mean.dim(self=%{sq}, dim=[-1], keepdim=true)", tag + "_var")
        ve = g.val(f"f32[{T}, 1]", f"aten.add.Tensor(self=%{var}, other={a.eps})", tag + "_ve")
        inv = g.val(f"f32[{T}, 1]", f"aten.rsqrt.default(self=%{ve})", tag + "_inv")
        nf = g.val(f"f32[{T}, {H}]", f"aten.mul.Tensor(self=%{xf}, other=%{inv})", tag + "_nf")
        nb = g.val(f"bf16[{T}, {H}]", f"prims.convert_element_type.default(a=%{nf}, dtype=bf16)", tag + "_nb")
        out = g.val(f"bf16[{T}, {H}]", f"aten.mul.Tensor(self=%{nb}, other=%{w})", tag)
        return out, res_out

    def quant(x, width, scale, tag):
        xf = g.val(f"f32[{T}, {width}]", f"prims.convert_element_type.default(a=%{x}, dtype=f32)", tag + "_xf")
        r = g.val("f32[1]", f"aten.reciprocal.default(self=%{scale})", tag + "_rcp")
        m = g.val(f"f32[{T}, {width}]", f"aten.mul.Tensor(self=%{xf}, other=%{r})", tag + "_mul")
        lo = g.val(f"f32[{T}, {width}]", f"aten.clamp_min.default(self=%{m}, min=-448.0)", tag + "_lo")
        hi = g.val(f"f32[{T}, {width}]", f"aten.clamp_max.default(self=%{lo}, max=448.0)", tag + "_hi")
        return g.val(f"f8e4m3fn[{T}, {width}]", f"prims.convert_element_type.default(a=%{hi}, dtype=f8e4m3fn)", tag)

    def linear(q, w, in_scale, w_scale, n, tag):
        return g.val(f"bf16[{T}, {n}]", f"aten._scaled_mm.default(self=%{q}, mat2=%{w}, scale_a=%{in_scale}, "
                     f"scale_b=%{w_scale}, out_dtype=bf16)", tag)

    ntok = g.val(f"Sym({T})", f"aten.sym_size.int(self=%{ids}, dim=0)", "ntok")
    h = g.val(f"bf16[{T}, {H}]", f"aten.embedding.default(weight=%{emb_w}, indices=%{ids})", "embed")
    resid = None
    x = h
    for l, p in enumerate(params):
        tag = f"l{l}"
        if resid is None:
            n, _ = rms(x, p["in_norm"], None, tag + "_in_norm")
            resid = x
        else:
            n, resid = rms(x, p["in_norm"], resid, tag + "_in_norm")
        q = quant(n, H, p["qkv_is"], tag + "_qkv_quant")
        y = linear(q, p["qkv"], p["qkv_is"], p["qkv_ws"], qkv, tag + "_qkv")
        qq, kk, vv = g.vals([f"bf16[{T}, {q_sz}][{qkv}, 1]", f"bf16[{T}, {kv_sz}][{qkv}, 1]+({q_sz})",
                             f"bf16[{T}, {kv_sz}][{qkv}, 1]+({q_sz + kv_sz})"],
                            f"aten.split_with_sizes.default(self=%{y}, split_sizes=[{q_sz}, {kv_sz}, {kv_sz}], dim=-1)",
                            tag + "_split")
        qr, kr = g.vals([None, f"bf16[{T}, {q_sz}][{qkv}, 1]", f"bf16[{T}, {kv_sz}][{qkv}, 1]+({q_sz})"],
                           f"higher_order.auto_functionalized(@_C.rotary_embedding.default, positions=%{pos}, "
                           f"query=%{qq}, key=%{kk}, head_size={hd}, cos_sin_cache=%{cache}, is_neox=true)",
                           tag + "_rope")
        q3 = g.val(f"bf16[{T}, {a.heads}, {hd}]", f"aten.reshape.default(self=%{qr}, shape=[-1, {a.heads}, {hd}])", tag + "_q3")
        k3 = g.val(f"bf16[{T}, {a.kv_heads}, {hd}]", f"aten.reshape.default(self=%{kr}, shape=[-1, {a.kv_heads}, {hd}])", tag + "_k3")
        v3 = g.val(f"bf16[{T}, {a.kv_heads}, {hd}]", f"aten.reshape.default(self=%{vv}, shape=[-1, {a.kv_heads}, {hd}])", tag + "_v3")
        buf = g.val(f"bf16[{T}, {a.heads}, {hd}]",
                    f"aten.empty.memory_format(size=[%{ntok}, {a.heads}, {hd}], dtype=bf16)", tag + "_attn_buf")
        (att,) = g.vals([None, f"bf16[{T}, {a.heads}, {hd}]", None],
                           f"higher_order.auto_functionalized(@vllm.unified_attention_with_output.default, "
                           f"query=%{q3}, key=%{k3}, value=%{v3}, output=%{buf}, layer_name=\"model.layers.{l}.attn\", "
                           f"output_scale=None, output_block_scale=None)", tag + "_attn")
        att2 = g.val(f"bf16[{T}, {q_sz}]", f"aten.reshape.default(self=%{att}, shape=[-1, {q_sz}])", tag + "_attn2")
        qo = quant(att2, q_sz, p["o_is"], tag + "_o_quant")
        o = linear(qo, p["o"], p["o_is"], p["o_ws"], H, tag + "_o")
        n2, resid = rms(o, p["post_norm"], resid, tag + "_post_norm")
        q2 = quant(n2, H, p["gate_up_is"], tag + "_gu_quant")
        gu = linear(q2, p["gate_up"], p["gate_up_is"], p["gate_up_ws"], 2 * I, tag + "_gate_up")
        gate = g.val(f"bf16[{T}, {I}][{2 * I}, 1]", f"aten.slice.Tensor(self=%{gu}, dim=1, start=0, end={I})", tag + "_gate")
        up = g.val(f"bf16[{T}, {I}][{2 * I}, 1]+({I})",
                   f"aten.slice.Tensor(self=%{gu}, dim=1, start={I}, end=9223372036854775807)", tag + "_up")
        gf = g.val(f"f32[{T}, {I}]", f"prims.convert_element_type.default(a=%{gate}, dtype=f32)", tag + "_gf")
        ng = g.val(f"f32[{T}, {I}]", f"aten.neg.default(self=%{gf})", tag + "_neg")
        ex = g.val(f"f32[{T}, {I}]", f"aten.exp.default(self=%{ng})", tag + "_exp")
        de = g.val(f"f32[{T}, {I}]", f"aten.add.Tensor(self=%{ex}, other=1)", tag + "_den")
        sl = g.val(f"f32[{T}, {I}]", f"aten.div.Tensor(self=%{gf}, other=%{de})", tag + "_silu_f")
        sb = g.val(f"bf16[{T}, {I}]", f"prims.convert_element_type.default(a=%{sl}, dtype=bf16)", tag + "_silu")
        act = g.val(f"bf16[{T}, {I}]", f"aten.mul.Tensor(self=%{sb}, other=%{up})", tag + "_act")
        qa = quant(act, I, p["down_is"], tag + "_down_quant")
        x = linear(qa, p["down"], p["down_is"], p["down_ws"], H, tag + "_down")
    nf, _ = rms(x, final_norm, resid, "final_norm")
    lt = g.val(f"bf16[{H}, {V}][1, {H}]", f"aten.permute.default(self=%{lm_head}, dims=[1, 0])", "lm_head_t")
    logits = g.val(f"bf16[{T}, {V}]", f"aten.mm.default(self=%{nf}, mat2=%{lt})", "logits")
    out = sys.stdout
    out.write(f"// Generated by tests/interpreter/make_decoder_fxg.py {' '.join(sys.argv[1:])}\n")
    out.write("fxfuse.module {\n")
    out.write(f"  symbol s0 range=[2, 8192] hint={a.hint}\n")
    out.write("  graph @main {\n")
    out.write("\n".join(g.lines) + "\n")
    out.write(f"    output %{logits}\n  }}\n}}\n")


if __name__ == "__main__":
    main()
