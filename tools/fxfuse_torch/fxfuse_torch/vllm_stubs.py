"""Stub registrations of vLLM's custom ops, for loading `--op-names=vllm` archives
without vLLM.

Schemas are vLLM's as recorded in schemas.py (VLLM_SCHEMAS, from ir/op_schema.cc).
The ops fxfuse writes get implementations with the kernels' semantics
(/work docs: vllm-fusion-semantics.md §1.8): they write their results in place into the
mutable arguments, composed from reference.py. Other ops are defined with an
implementation that raises. An op that already exists (a real vLLM build is imported)
is left alone.
"""

import torch

from . import reference as ref
from .library import _register_fake, _split
from .schemas import VLLM_SCHEMAS

_LIBS = {}


def _rms_norm(result, input, weight, epsilon):
    result.copy_(ref.rms_norm(input, weight, epsilon))


def _fused_add_rms_norm(input, residual, weight, epsilon):
    out, res = ref.fused_add_rms_norm(input, residual, weight, epsilon, variance_of_rounded_sum=True)
    residual.copy_(res)
    input.copy_(out)


def _static_scaled_fp8_quant(result, input, scale):
    result.copy_(ref.quant_fp8(input, scale, "static_tensor")[0])


def _dynamic_scaled_fp8_quant(result, input, scale):
    q, s = ref.quant_fp8(input, None, "dynamic_tensor", min_scale=0.0)
    result.copy_(q)
    scale.copy_(s.reshape(scale.shape))


def _dynamic_per_token_scaled_fp8_quant(result, input, scale, scale_ub):
    q, s = ref.quant_fp8(input, None, "dynamic_token", scale_ub=scale_ub, divide=True)
    result.copy_(q)
    scale.copy_(s.reshape(scale.shape))


def _silu_and_mul(result, input):
    result.copy_(ref.silu_and_mul(input))


def _rms_norm_static_fp8_quant(result, input, weight, scale, epsilon):
    result.copy_(ref.rms_norm_quant(input, weight, epsilon, scale, "static_tensor")[0])


def _fused_add_rms_norm_static_fp8_quant(result, input, residual, weight, scale, epsilon):
    q, res, _ = ref.fused_add_rms_norm_quant(input, residual, weight, epsilon, scale, "static_tensor",
                                             variance_of_rounded_sum=True)
    residual.copy_(res)
    result.copy_(q)


def _rms_norm_dynamic_per_token_quant(result, input, weight, scale, epsilon, scale_ub, residual):
    if residual is None:
        q, s = ref.rms_norm_quant(input, weight, epsilon, None, "dynamic_token", scale_ub=scale_ub, divide=True)
    else:
        q, res, s = ref.fused_add_rms_norm_quant(input, residual, weight, epsilon, None, "dynamic_token",
                                                 scale_ub=scale_ub, variance_of_rounded_sum=False, divide=True)
        residual.copy_(res)
    result.copy_(q)
    scale.copy_(s.reshape(scale.shape))


def _silu_and_mul_quant(result, input, scale):
    result.copy_(ref.silu_and_mul_quant(input, scale))


def _unified_attention_with_output(query, key, value, output, layer_name, output_scale=None,
                                   output_block_scale=None):
    a = ref.attention(query, key, value, layout="vllm", layer_name=layer_name)
    if output_scale is not None:
        a = ref.quant_fp8(a, output_scale, "static_tensor")[0]
    output.copy_(a.reshape(output.shape))


def _unified_attention(query, key, value, layer_name):
    return ref.attention(query, key, value, layout="vllm", layer_name=layer_name)


def _rotate(x, cos, sin, is_neox):
    if is_neox:
        x1, x2 = x.chunk(2, dim=-1)
        return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1)
    x1, x2 = x[..., ::2], x[..., 1::2]
    return torch.stack((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1).flatten(-2)


def _rotary_embedding(positions, query, key, head_size, cos_sin_cache, is_neox):
    # The kernel's arithmetic in the tensors' dtype; neox: halves, else interleaved pairs.
    cos, sin = cos_sin_cache[positions.flatten()].chunk(2, dim=-1)
    cos, sin = cos.unsqueeze(-2), sin.unsqueeze(-2)
    rot = cos.shape[-1] * 2
    for x in (query, key):
        if x is None:
            continue
        v = x.view(x.shape[0], -1, head_size)
        v[..., :rot] = _rotate(v[..., :rot], cos.to(x.dtype), sin.to(x.dtype), is_neox)


def _all_reduce(tensor, group_name):
    return ref.all_reduce(tensor, group_name)


IMPLEMENTATIONS = {
    "_C::rms_norm": _rms_norm,
    "_C::fused_add_rms_norm": _fused_add_rms_norm,
    "_C::static_scaled_fp8_quant": _static_scaled_fp8_quant,
    "_C::dynamic_scaled_fp8_quant": _dynamic_scaled_fp8_quant,
    "_C::dynamic_per_token_scaled_fp8_quant": _dynamic_per_token_scaled_fp8_quant,
    "_C::silu_and_mul": _silu_and_mul,
    "_C::rms_norm_static_fp8_quant": _rms_norm_static_fp8_quant,
    "_C::fused_add_rms_norm_static_fp8_quant": _fused_add_rms_norm_static_fp8_quant,
    "_C::rms_norm_dynamic_per_token_quant": _rms_norm_dynamic_per_token_quant,
    "_C::silu_and_mul_quant": _silu_and_mul_quant,
    "_C::rotary_embedding": _rotary_embedding,
    "vllm::unified_attention_with_output": _unified_attention_with_output,
    "vllm::unified_attention": _unified_attention,
    "vllm::all_reduce": _all_reduce,
}


def _not_implemented(qualname):
    def fail(*args, **kwargs):
        raise NotImplementedError(f"{qualname}: only a schema stub (import vLLM for its kernel)")
    return fail


def _exists(ns, name):
    try:
        getattr(getattr(torch.ops, ns), name)
        return True
    except (AttributeError, RuntimeError):
        return False


def register_vllm_stubs():
    """Defines every vLLM op of VLLM_SCHEMAS that is not registered yet. Returns their names."""
    added = []
    for schema in VLLM_SCHEMAS:
        ns, name, decl = _split(schema)
        qualname = f"{ns}::{name}"
        if qualname in _LIBS.get(ns, {}).get("names", set()) or _exists(ns, name):
            continue
        entry = _LIBS.setdefault(ns, {"lib": torch.library.Library(ns, "FRAGMENT"), "names": set()})
        lib = entry["lib"]
        lib.define(decl)
        impl = IMPLEMENTATIONS.get(qualname, _not_implemented(qualname))
        lib.impl(name, impl, "CompositeExplicitAutograd")
        returns_nothing = decl.rstrip().endswith("-> ()")
        _register_fake(qualname, (lambda *a, **k: None) if returns_nothing else impl, lib)
        entry["names"].add(qualname)
        added.append(qualname)
    return added
