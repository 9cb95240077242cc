#!/usr/bin/env python3
"""Writes a whole Llama-shaped FP8 model as vLLM hands it to its compiler passes (a post-grad
graph, TP=1): embedding -> N decoder layers -> final RMSNorm -> LM head, in one of vLLM's two
spellings, as an `.fxg` graph for `fxfuse compile`.

    python3 examples/decode_step/make_model.py --config llama8b --form custom > llama8b.fxg
    python3 examples/decode_step/make_model.py --config tiny --layers 2 --form native > tiny.fxg

The node sequences are those of torch 2.11's post-grad dumps of vLLM's Llama
(tests/data/vllm/vllm_llama32_fp8_{custom,native}.post_grad.txt, written by
tools/fixtures/gen_fixtures.py): static per-tensor FP8 linears (`_scaled_mm` with the weight
stored column-major, as vLLM keeps it), the fused qkv projection split three ways, vLLM's
rotary op functionalized over views of qkv (`slice_scatter` back into qkv), and
`vllm.unified_attention_with_output` per layer. The two forms differ where vLLM's
`custom_ops` setting makes them differ:

  custom: _C.rms_norm / _C.fused_add_rms_norm, _C.static_scaled_fp8_quant, _C.silu_and_mul
          (auto_functionalized calls into `empty` buffers)
  native: the forward_native decompositions Inductor sees (f32 RMSNorm, reciprocal-multiply
          clamp quant, exp-based SiLU), which fxfuse's canonicalization lifts to the same ops.

Both compile to the same plan. The rotary embedding is vLLM's custom op in both forms (as in
the dumps); the LM head is a bf16 `mm` on every token (vLLM computes logits outside its
compiled graph; here the step ends with them so one plan is the whole decode step).
Weights are graph parameters: `fxfuse run/bench` fills them with random data.
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools", "fixtures"))
import fxgbuild as fb  # noqa: E402

# name: (hidden, intermediate, heads, kv_heads, head_size, vocab, layers, rms_eps, max_positions)
CONFIGS = {
    "llama8b": (4096, 14336, 32, 8, 128, 128256, 32, 1e-5, 131072),   # Llama-3.1-8B
    "llama70b": (8192, 28672, 64, 8, 128, 128256, 80, 1e-5, 131072),  # Llama-3.1-70B
    "tiny": (256, 512, 4, 2, 64, 512, 2, 1e-5, 4096),                  # CPU-sized, same structure
}

BF16 = "bf16"


class Model:
    def __init__(self, g, config, form, layers, max_positions):
        H, I, NH, NKV, D, V, L, eps, maxpos = config
        self.g, self.form = g, form
        self.H, self.I, self.NH, self.NKV, self.D, self.V, self.eps = H, I, NH, NKV, D, V, eps
        self.L = L if layers is None else layers
        self.maxpos = maxpos if max_positions is None else max_positions
        self.Q, self.KV = NH * D, NKV * D
        self.T = "s0"

    # -------------------------------------------------------------------------- inputs
    def param(self, name, typ):
        return self.g.inp(name, typ, "parameter", name)

    def fp8_linear_params(self, prefix, k, n):
        """vLLM's Fp8LinearMethod: the weight [K, N] column-major (stride [1, K]), its scale and
        the static input scale, all per tensor."""
        w = self.param(prefix + ".weight", "f8e4m3fn[%d, %d][1, %d]" % (k, n, k))
        ws = self.param(prefix + ".weight_scale", "f32[1]")
        xs = self.param(prefix + ".input_scale", "f32[1]")
        return w, ws, xs

    # -------------------------------------------------------------------------- building blocks
    def rms(self, x, w, residual=None):
        if self.form == "custom":
            return fb.custom_rms(self.g, x, w, self.eps, residual)
        return fb.native_rms(self.g, x, w, self.eps, residual)

    def linear(self, x, params, n):
        w, ws, xs = params
        if self.form == "custom":
            q = fb.custom_quant_static(self.g, x, xs, [fb.Sym(self.T), int(x.shape.split(",")[-1])])
        else:
            q = fb.native_quant_static(self.g, x, xs)
        return fb.scaled_mm(self.g, q, w, xs, ws, n, self.T)

    def silu_and_mul(self, x):
        if self.form == "custom":
            return fb.custom_silu_and_mul(self.g, x, [fb.Sym(self.T), self.I], self.I)
        return fb.native_silu_and_mul(self.g, x, self.I)

    def split_qkv(self, qkv, which):
        """One getitem of split_with_sizes(qkv, [Q, KV, KV], -1) (Inductor re-splits per use)."""
        g, Q, KV, T = self.g, self.Q, self.KV, self.T
        row = Q + 2 * KV
        types = ["bf16[%s, %d][%d, 1]" % (T, Q, row), "bf16[%s, %d][%d, 1]+(%d)" % (T, KV, row, Q),
                 "bf16[%s, %d][%d, 1]+(%d)" % (T, KV, row, Q + KV)]
        outs = [t if i == which else None for i, t in enumerate(types)]
        vals = g.op("aten.split_with_sizes.default", [("self", qkv), ("split_sizes", [Q, KV, KV]), ("dim", -1)], outs)
        return vals[which]

    def attention_block(self, qkv, positions, cos_sin, layer):
        """Rotary on q and k (views of qkv), then vLLM's attention into an `empty` output."""
        g, Q, KV, D, T = self.g, self.Q, self.KV, self.D, self.T
        q, k = self.split_qkv(qkv, 0), self.split_qkv(qkv, 1)
        # Named after the layer (not by op count), so both forms name them alike.
        _, q2, k2 = g.op("higher_order.auto_functionalized",
                         [(None, fb.Op("_C.rotary_embedding.default")), ("positions", positions), ("query", q),
                          ("key", k), ("head_size", D), ("cos_sin_cache", cos_sin), ("is_neox", True)],
                         [None, q.type, k.type], kw_from=1, name="layers_%d_rotary" % layer)
        full = "bf16[%s, %d]" % (T, Q + 2 * KV)
        s1 = g.op("aten.slice_scatter.default", [("self", qkv), ("src", q2), ("dim", 1), ("start", 0), ("end", Q)], full)
        s2 = g.op("aten.slice_scatter.default", [("self", s1), ("src", k2), ("dim", 1), ("start", Q), ("end", Q + KV)],
                  full)
        heads = []
        for which, n in ((0, self.NH), (1, self.NKV), (2, self.NKV)):
            part = self.split_qkv(s2, which)
            heads.append(g.op("aten.reshape.default", [("self", part), ("shape", [-1, n, D])],
                              "bf16[%s, %d, %d][%d, %d, 1]" % (T, n, D, Q + 2 * KV, D)))
        out = fb.empty(g, [fb.Sym(T), Q], BF16, "bf16[%s, %d]" % (T, Q))
        out3 = g.op("aten.reshape.default", [("self", out), ("shape", [-1, self.NH, D])], "bf16[%s, %d, %d]" % (T, self.NH, D))
        _, o = g.op("higher_order.auto_functionalized",
                    [(None, fb.Op("vllm.unified_attention_with_output.default")), ("query", heads[0]),
                     ("key", heads[1]), ("value", heads[2]), ("output", out3),
                     ("layer_name", "model.layers.%d.self_attn.attn" % layer), ("output_scale", None),
                     ("output_block_scale", None)], [None, out3.type], kw_from=1, name="layers_%d_attn" % layer)
        return g.op("aten.reshape.default", [("self", o), ("shape", [fb.Sym(T), Q])], "bf16[%s, %d]" % (T, Q))

    # -------------------------------------------------------------------------- the model
    def build(self):
        g, H, T = self.g, self.H, self.T
        input_ids = g.inp("input_ids", "i64[%s]" % T)
        positions = g.inp("positions", "i64[%s]" % T)
        embed = self.param("model.embed_tokens.weight", "bf16[%d, %d]" % (self.V, H))
        cos_sin = g.inp("cos_sin_cache", "bf16[%d, %d]" % (self.maxpos, self.D), "buffer", "rotary_emb.cos_sin_cache")
        layers = []
        for i in range(self.L):
            p = "model.layers.%d." % i
            layers.append({
                "in_norm": self.param(p + "input_layernorm.weight", "bf16[%d]" % H),
                "qkv": self.fp8_linear_params(p + "self_attn.qkv_proj", H, self.Q + 2 * self.KV),
                "o": self.fp8_linear_params(p + "self_attn.o_proj", self.Q, H),
                "post_norm": self.param(p + "post_attention_layernorm.weight", "bf16[%d]" % H),
                "gate_up": self.fp8_linear_params(p + "mlp.gate_up_proj", H, 2 * self.I),
                "down": self.fp8_linear_params(p + "mlp.down_proj", self.I, H),
            })
        final_norm = self.param("model.norm.weight", "bf16[%d]" % H)
        lm_head = self.param("lm_head.weight", "bf16[%d, %d]" % (self.V, H))

        h = g.op("aten.embedding.default", [("weight", embed), ("indices", input_ids)], "bf16[%s, %d]" % (T, H))
        residual = None
        for i, w in enumerate(layers):
            if residual is None:
                x, _ = self.rms(h, w["in_norm"])
                residual = h
            else:
                x, residual = self.rms(h, w["in_norm"], residual)
            qkv = self.linear(x, w["qkv"], self.Q + 2 * self.KV)
            a = self.attention_block(qkv, positions, cos_sin, i)
            o = self.linear(a, w["o"], H)
            x, residual = self.rms(o, w["post_norm"], residual)
            gu = self.linear(x, w["gate_up"], 2 * self.I)
            h = self.linear(self.silu_and_mul(gu), w["down"], H)
        out, _ = self.rms(h, final_norm, residual)
        head_t = g.op("aten.permute.default", [("self", lm_head), ("dims", [1, 0])],
                      "bf16[%d, %d][1, %d]" % (H, self.V, H))
        logits = g.op("aten.mm.default", [("self", out), ("mat2", head_t)], "bf16[%s, %d]" % (T, self.V))
        g.output(logits)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--config", choices=sorted(CONFIGS), required=True)
    ap.add_argument("--form", choices=["custom", "native"], required=True)
    ap.add_argument("--layers", type=int, help="override the config's layer count")
    ap.add_argument("--max-positions", type=int, help="rows of the rotary cos/sin cache")
    ap.add_argument("--max-tokens", type=int, default=8192, help="upper bound of the token symbol s0")
    a = ap.parse_args()
    config = CONFIGS[a.config]
    g = fb.G(symbols=(("s0", 1, a.max_tokens, min(64, a.max_tokens)),))
    m = Model(g, config, a.form, a.layers, a.max_positions)
    m.build()
    print("// %s-shaped FP8 model, %d layers, vLLM %s-op form (generated by examples/decode_step/make_model.py;"
          % (a.config, m.L, a.form))
    print("// do not edit). Embedding -> decoder layers -> final RMSNorm -> LM head.")
    sys.stdout.write(g.text())


if __name__ == "__main__":
    main()
