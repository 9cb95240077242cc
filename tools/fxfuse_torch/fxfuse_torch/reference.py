"""Reference implementations of fxfuse's canonical and fused ops in torch.

Each function computes what docs/canonical-ops.md specifies, with the same rounding
points, using the torch ops the source spellings use (so an ATen graph and its fused
.pt2 give bit-identical results on one device, up to attention backend choice).

Output dtypes ("natural" dtypes) follow fixed rules that ir/pt2_writer.cc relies on
(naturalDType there): a 16-bit IR output of an op whose natural dtype is fp32 gets one
`aten._to_copy` after the op in the written graph.

  rms_norm              N = norm_dtype or input.dtype; out = N, or promote(N, weight.dtype)
  fused_add_rms_norm    N = norm_dtype or residual.dtype; out as above; residual_out = residual.dtype
  quant_fp8             q = float8_e4m3fn, scale_out = float32
  silu_and_mul          promote(input.dtype, up.dtype)
  attention             query.dtype (layout 'vllm': shaped like query)
  all_reduce            input.dtype (one rank: a copy)
  paged_attention       out = query.dtype, or float8_e4m3fn with output_scale; the caches' dtypes
  *_quant fused ops     q = float8_e4m3fn; residual_out and scale_out as the parts

No output aliases an input (torch.library ops must not return views of their inputs).
"""

import torch
import torch.nn.functional as F

FP8_MAX = 448.0
MIN_SCALE = 1.0 / (448.0 * 512.0)


def _fp8_dtype():
    return torch.float8_e4m3fn


# ------------------------------------------------------------------ canonical ops


def rms_norm(input, weight, epsilon, norm_dtype=None):
    norm = norm_dtype if norm_dtype is not None else input.dtype
    xf = input.to(torch.float32)
    var = xf.pow(2).mean(dim=-1, keepdim=True)
    n = (xf * torch.rsqrt(var + epsilon)).to(norm)
    out = n if weight is None else n * weight
    return out.clone() if out is input else out


def fused_add_rms_norm(input, residual, weight, epsilon, variance_of_rounded_sum=False, norm_dtype=None):
    s = input.to(torch.float32) + residual.to(torch.float32)
    residual_out = s.to(residual.dtype)
    v = residual_out.to(torch.float32) if variance_of_rounded_sum else s
    var = v.pow(2).mean(dim=-1, keepdim=True)
    n = (v * torch.rsqrt(var + epsilon)).to(norm_dtype if norm_dtype is not None else residual.dtype)
    out = n if weight is None else n * weight
    return out, residual_out


def _apply_scale(x, s, divide):
    return x / s if divide else x * s.reciprocal()


def _to_fp8(v):
    return v.clamp(-FP8_MAX, FP8_MAX).to(_fp8_dtype())


def _dynamic_scale(a, scale_ub, min_abs, min_scale):
    if scale_ub is not None:
        a = torch.minimum(a, scale_ub.to(torch.float32))
    if min_abs:
        a = a.clamp(min=min_abs)
    return (a / FP8_MAX).clamp(min=min_scale)


def quant_fp8(input, scale, kind, group_size=0, column_major_scales=False, scale_ub=None, divide=False,
              min_abs=0.0, min_scale=MIN_SCALE, scale_ue8m0=False):
    x = input.to(torch.float32)
    if kind == "static_tensor":
        s = scale.to(torch.float32)
        return _to_fp8(_apply_scale(x, s, divide)), s.clone()
    if kind == "dynamic_token":
        s = _dynamic_scale(x.abs().amax(dim=-1, keepdim=True), scale_ub, min_abs, min_scale)
        return _to_fp8(_apply_scale(x, s, divide)), s
    if kind == "dynamic_tensor":
        s = _dynamic_scale(x.abs().max().reshape(1), scale_ub, min_abs, min_scale)
        return _to_fp8(_apply_scale(x, s, divide)), s
    if kind == "dynamic_group":
        h = x.shape[-1]
        xg = x.reshape(*x.shape[:-1], h // group_size, group_size)
        a = xg.abs().amax(dim=-1, keepdim=True)
        if min_abs:
            a = a.clamp(min=min_abs)
        s = a / FP8_MAX
        if scale_ue8m0:
            s = torch.exp2(torch.ceil(torch.log2(s)))
        s = s.clamp(min=min_scale)
        q = _to_fp8(_apply_scale(xg, s, divide)).reshape(x.shape)
        scales = s.squeeze(-1)
        if column_major_scales and scales.dim() >= 2:
            scales = scales.transpose(-2, -1).contiguous().transpose(-2, -1)
        return q, scales
    raise ValueError(f"fxfuse.quant_fp8: unknown kind '{kind}'")


def silu_and_mul(input, up=None):
    if up is None:
        d = input.shape[-1] // 2
        gate, up = input[..., :d], input[..., d:]
    else:
        gate = input
    return F.silu(gate) * up


def attention(query, key, value, attn_mask=None, is_causal=False, scale=None, enable_gqa=False, layout="bhsd",
              layer_name=""):
    if layout == "bhsd":
        out = F.scaled_dot_product_attention(query, key, value, attn_mask=attn_mask, is_causal=is_causal,
                                             scale=scale, enable_gqa=enable_gqa)
        # [B, H, S, D] laid out as [B, S, H, D] in memory, as the flash, efficient and cuDNN
        # kernels return it: exported graphs view `out.transpose(1, 2)` as [B, S, H * D]
        # without a copy, which only that layout allows.
        return out.transpose(1, 2).contiguous().transpose(1, 2) if out.dim() == 4 else out
    if layout != "vllm":
        raise ValueError(f"fxfuse.attention: unknown layout '{layout}'")
    # vLLM's unified attention, reference semantics: one prefill sequence, empty KV cache.
    t, hk, e = key.shape[0], key.shape[-2], key.shape[-1]
    q = query.reshape(t, -1, e).transpose(0, 1).unsqueeze(0)
    k = key.reshape(t, hk, e).transpose(0, 1).unsqueeze(0)
    v = value.reshape(t, hk, value.shape[-1]).transpose(0, 1).unsqueeze(0)
    out = F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=scale, enable_gqa=q.shape[1] != hk)
    return out.squeeze(0).transpose(0, 1).reshape(query.shape[:-1] + (-1,) if query.dim() == 3 else (t, -1))


def _is_fake(t):
    fake = getattr(getattr(torch, "_subclasses", None), "FakeTensor", None)
    return t.device.type == "meta" or (fake is not None and isinstance(t, fake))


def paged_attention(query, key, value, key_cache, value_cache, slot_mapping, block_table, seq_lens,
                    query_start_loc, k_scale=None, v_scale=None, output_scale=None, scale=None, layer_name=""):
    """vLLM's attention over a paged KV cache (docs/canonical-ops.md): writes this step's keys
    and values at their slots, then attends each sequence's queries over its cached context."""
    t, hk, e = key.shape
    out_dtype = _fp8_dtype() if output_scale is not None else query.dtype
    if _is_fake(query):  # shapes only: the metadata's values are unknown
        return (torch.empty(query.shape, dtype=out_dtype, device=query.device), torch.empty_like(key_cache),
                torch.empty_like(value_cache))
    fp8 = key_cache.dtype == _fp8_dtype()
    kc, vc = key_cache.clone(), value_cache.clone()
    bs = kc.shape[1]
    slots = slot_mapping.tolist()
    for i, s in enumerate(slots):
        if s < 0:
            continue
        for cache, src, sc in ((kc, key, k_scale), (vc, value, v_scale)):
            x = src[i].float()
            cache[s // bs, s % bs] = (x / sc.float()).clamp(-FP8_MAX, FP8_MAX).to(cache.dtype) if fp8 else src[i]
    q = query.reshape(t, -1, e)
    out = torch.zeros(q.shape, dtype=torch.float32, device=query.device)
    qsl, lens, table = query_start_loc.tolist(), seq_lens.tolist(), block_table.tolist()
    for b, ctx in enumerate(lens):
        qs, qe = qsl[b], qsl[b + 1]
        if qe == qs:
            continue
        rows = [table[b][j // bs] * bs + j % bs for j in range(ctx)]
        flat = lambda c: c.reshape(-1, hk, e)[rows].float()
        k, v = flat(kc), flat(vc)
        if fp8:
            k, v = k * k_scale.float(), v * v_scale.float()
        ql = qe - qs
        keep = torch.ones(ql, ctx, dtype=torch.bool, device=query.device).tril(ctx - ql)
        o = F.scaled_dot_product_attention(q[qs:qe].float().transpose(0, 1), k.transpose(0, 1), v.transpose(0, 1),
                                           attn_mask=keep, scale=scale, enable_gqa=q.shape[1] != hk)
        out[qs:qe] = o.transpose(0, 1)
    out = out.to(query.dtype).reshape(query.shape)
    if output_scale is not None:
        out = quant_fp8(out, output_scale, "static_tensor")[0]
    return out, kc, vc


def all_reduce(input, group_name="", reduce_op="sum"):
    # One rank (the CPU interpreter's semantics): the sum over one rank is the input.
    return input.clone()


# ------------------------------------------------------------------ fused ops


def rms_norm_quant(input, weight, epsilon, scale, kind, group_size=0, column_major_scales=False, scale_ub=None,
                   norm_dtype=None, divide=False, min_abs=0.0, min_scale=MIN_SCALE, scale_ue8m0=False):
    n = rms_norm(input, weight, epsilon, norm_dtype)
    if input.dtype in (torch.float16, torch.bfloat16):
        n = n.to(input.dtype)
    elif norm_dtype is not None:
        n = n.to(norm_dtype)
    return quant_fp8(n, scale, kind, group_size, column_major_scales, scale_ub, divide, min_abs, min_scale,
                     scale_ue8m0)


def fused_add_rms_norm_quant(input, residual, weight, epsilon, scale, kind, group_size=0, column_major_scales=False,
                             scale_ub=None, variance_of_rounded_sum=True, norm_dtype=None, divide=False, min_abs=0.0,
                             min_scale=MIN_SCALE, scale_ue8m0=False):
    n, residual_out = fused_add_rms_norm(input, residual, weight, epsilon, variance_of_rounded_sum, norm_dtype)
    q, scale_out = quant_fp8(n, scale, kind, group_size, column_major_scales, scale_ub, divide, min_abs, min_scale,
                             scale_ue8m0)
    return q, residual_out, scale_out


def silu_and_mul_quant(input, scale, up=None):
    return quant_fp8(silu_and_mul(input, up), scale, "static_tensor")[0]


def attention_quant(query, key, value, output_scale, attn_mask=None, is_causal=False, scale=None, enable_gqa=False,
                    layout="bhsd", layer_name=""):
    a = attention(query, key, value, attn_mask, is_causal, scale, enable_gqa, layout, layer_name)
    return quant_fp8(a, output_scale, "static_tensor")[0]


def all_reduce_rms_norm(input, residual, weight, epsilon, world_size, group_name="", variance_of_rounded_sum=False,
                        norm_dtype=None, max_token_num=0):
    a = all_reduce(input, group_name)
    if residual is None:
        return rms_norm(a, weight, epsilon, norm_dtype), a
    return fused_add_rms_norm(a, residual, weight, epsilon, variance_of_rounded_sum, norm_dtype)


def all_reduce_rms_norm_quant(input, residual, weight, epsilon, scale, world_size, group_name="",
                              variance_of_rounded_sum=False, norm_dtype=None, divide=False, max_token_num=0):
    out, residual_out = all_reduce_rms_norm(input, residual, weight, epsilon, world_size, group_name,
                                            variance_of_rounded_sum, norm_dtype, max_token_num)
    return quant_fp8(out, scale, "static_tensor", divide=divide)[0], residual_out


# Op name (as in schemas.py) → implementation.
IMPLEMENTATIONS = {
    "rms_norm": rms_norm,
    "fused_add_rms_norm": fused_add_rms_norm,
    "quant_fp8": quant_fp8,
    "silu_and_mul": silu_and_mul,
    "attention": attention,
    "all_reduce": all_reduce,
    "paged_attention": paged_attention,
    "rms_norm_quant": rms_norm_quant,
    "fused_add_rms_norm_quant": fused_add_rms_norm_quant,
    "silu_and_mul_quant": silu_and_mul_quant,
    "attention_quant": attention_quant,
    "all_reduce_rms_norm": all_reduce_rms_norm,
    "all_reduce_rms_norm_quant": all_reduce_rms_norm_quant,
}
