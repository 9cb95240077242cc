"""torch's side of the decode-step benchmark (bench_decode.py): the model of tools/fixtures/decode_model.py as
users run decode in torch 2.11 — vLLM's native forms (fp32 RMSNorm, static per-tensor FP8
quant as x * (1/s) clamped, `torch._scaled_mm` with column-major FP8 weights, neox rotary from
a cos/sin cache gathered by position, SiLU-and-mul, bf16 LM head) over a static KV cache
[B, Hkv, C, E] per layer (this step's keys and values written at position C - 1 with
`index_copy_`, then SDPA over the whole cache with grouped-query heads).

Modes: "eager" and "default" / "max-autotune" / "max-autotune-aten" (one decoder layer
compiled with torch.compile and reused for every layer, its weights passed as arguments;
compile_kwargs says what the last one is); each timed with the whole step
captured in one CUDA graph (median of replays, CUDA events). Random weights and cache with
the distributions fxfuse's bench uses in spirit (not the same values: for 70B the weights do
not fit on the GPU twice).

`weights="bf16"` replaces the FP8 linears by bf16 matmuls: only for checking this file's
shapes on a machine without FP8 support (tests run it on the CPU with the tiny config).
torch_parity.py runs this step on fxfuse's own inputs; without torch FP8 (Debian's torch on
the CPU) its linears are emulated: `fp8="emulate"` in `dims`, weights already decoded to f32,
activations rounded to e4m3 values by round_e4m3 (the same math, on f32 values).
"""
import math

import torch
import torch.nn.functional as F


def fp8_dtype():
    return getattr(torch, "float8_e4m3fn", None)


class DecodeModel:
    """Weights of a Llama-shaped model (a decode_model.CONFIGS entry), generated on `device`;
    set_batch() adds the caches and inputs of one batch x context."""

    def __init__(self, config, device="cuda", weights="fp8", layers=None, seed=0):
        H, I, NH, NKV, D, V, L, eps, _maxpos = config
        self.H, self.I, self.NH, self.NKV, self.D, self.V, self.eps = H, I, NH, NKV, D, V, eps
        self.L = L if layers is None else layers
        self.Q, self.KV = NH * D, NKV * D
        self.device, self.fp8 = device, weights == "fp8"
        self.g = torch.Generator(device=device).manual_seed(seed)
        bf16 = torch.bfloat16

        def weight(n_out, n_in):  # [K, N] column-major, as vLLM stores FP8 weights
            w = (self.rand(n_out, n_in) * 2 - 1) / math.sqrt(n_in) * 16
            return (w.to(fp8_dtype()) if self.fp8 else w.to(bf16)).t()

        def scale(v):
            return torch.tensor([v], dtype=torch.float32, device=device)

        self.layers = []
        for _ in range(self.L):
            lw = {"ln1": (self.rand(H) + 0.5).to(bf16), "ln2": (self.rand(H) + 0.5).to(bf16)}
            for name, (n_out, n_in) in {"qkv": (self.Q + 2 * self.KV, H), "o": (H, self.Q),
                                        "gu": (2 * I, H), "down": (H, I)}.items():
                lw["w_" + name] = weight(n_out, n_in)
                lw["ws_" + name] = scale(1 / 16)
                lw["is_" + name] = scale(0.05)
            self.layers.append(lw)
        self.embed = (self.randn(V, H) * 0.5).to(bf16)
        self.final_norm = (self.rand(H) + 0.5).to(bf16)
        self.lm_head = (self.randn(V, H) / math.sqrt(H)).to(bf16)

    def rand(self, *shape):
        return torch.rand(*shape, generator=self.g, device=self.device)

    def randn(self, *shape):
        return torch.randn(*shape, generator=self.g, device=self.device)

    def set_batch(self, batch, context):
        """B sequences decoding one token each over `context` cached tokens (this step's
        included): per layer a [B, Hkv, context, E] bf16 key and value cache, random."""
        bf16 = torch.bfloat16
        self.B, self.C = batch, context
        for lw in self.layers:
            lw.pop("k_cache", None)
            lw.pop("v_cache", None)
        if self.device != "cpu":
            torch.cuda.empty_cache()
        for lw in self.layers:
            lw["k_cache"] = (self.randn(batch, self.NKV, context, self.D) * 0.5).to(bf16)
            lw["v_cache"] = (self.randn(batch, self.NKV, context, self.D) * 0.5).to(bf16)
        inv = 1.0 / (500000.0 ** (torch.arange(0, self.D, 2, dtype=torch.float32, device=self.device) / self.D))
        f = torch.outer(torch.arange(context, dtype=torch.float32, device=self.device), inv)
        self.cos_sin = torch.cat([f.cos(), f.sin()], -1).to(bf16)
        self.input_ids = torch.randint(0, self.V, (batch,), generator=self.g, device=self.device)
        self.positions = torch.full((batch,), context - 1, dtype=torch.int64, device=self.device)
        self.cache_position = torch.tensor([context - 1], dtype=torch.int64, device=self.device)
        return self


def quant_static(x, s):
    return (x.to(torch.float32) * s.reciprocal()).clamp(-448.0, 448.0).to(fp8_dtype())


def round_e4m3(x):
    """f32 values rounded to the nearest e4m3fn value (ties to even; |x| <= 448 already):
    3 mantissa bits above 2^-6, steps of 2^-9 below (subnormals)."""
    mag = x.abs()
    exp = torch.floor(torch.log2(mag.clamp(min=2.0 ** -6)))
    step = torch.pow(2.0, exp - 3)
    return torch.round(x / step) * step


def linear_emulated(x, w, ws, xs):
    """torch._scaled_mm's math on f32 values: e4m3 activations times decoded e4m3 weights, the
    f32 product scaled by scale_a * scale_b, rounded to bf16."""
    q = round_e4m3((x.to(torch.float32) * xs.reciprocal()).clamp(-448.0, 448.0))
    return ((q @ w) * (xs * ws)).to(torch.bfloat16)


def _torch_at_least(major, minor):
    parts = torch.__version__.split("+")[0].split(".")
    return (int(parts[0]), int("".join(c for c in parts[1] if c.isdigit()) or 0)) >= (major, minor)


def attend(q, k_cache, v_cache):
    """SDPA of one query per sequence over the whole cache, grouped-query heads. torch before
    2.5 has no enable_gqa (before 2.0 no SDPA): there the KV heads are repeated and the softmax
    taken in f32, for the CPU tests with Debian's torch."""
    if _torch_at_least(2, 5):
        return F.scaled_dot_product_attention(q, k_cache, v_cache, enable_gqa=True)
    g = q.shape[1] // k_cache.shape[1]
    k, v = k_cache.repeat_interleave(g, dim=1).float(), v_cache.repeat_interleave(g, dim=1).float()
    s = (q.float() @ k.transpose(-1, -2)) / math.sqrt(q.shape[-1])
    return (s.softmax(-1) @ v).to(q.dtype)


# How silu_and_mul rounds: False as torch's native ops do (silu rounded to bf16, then the
# product), True as vLLM's _C.silu_and_mul (f32 throughout, one rounding). torch_parity.py
# flips it to measure how far two correct spellings of the model lie apart.
SILU_MUL_ONE_ROUNDING = False


def silu_and_mul(gu):
    half = gu.shape[-1] // 2
    if SILU_MUL_ONE_ROUNDING:
        return (F.silu(gu[:, :half].float()) * gu[:, half:].float()).to(gu.dtype)
    return F.silu(gu[:, :half]) * gu[:, half:]


def rms_norm(x, w, eps):
    xf = x.to(torch.float32)
    xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    return xf.to(x.dtype) * w


def linear(x, w, ws, xs, fp8):
    if fp8 == "emulate":
        return linear_emulated(x, w, ws, xs)
    if fp8:
        return torch._scaled_mm(quant_static(x, xs), w, scale_a=xs, scale_b=ws, out_dtype=torch.bfloat16)
    return x @ w


def decoder_layer(h, residual, positions, cache_position, cos_sin, ln1, ln2, w_qkv, ws_qkv, is_qkv, w_o, ws_o, is_o,
                  w_gu, ws_gu, is_gu, w_down, ws_down, is_down, k_cache, v_cache, dims):
    """One layer of one decode step: h, residual [B, H]; the caches are updated in place."""
    NH, NKV, D, eps, fp8 = dims
    B = h.shape[0]
    residual = h if residual is None else h + residual
    x = rms_norm(residual, ln1, eps)
    qkv = linear(x, w_qkv, ws_qkv, is_qkv, fp8)
    q, k, v = qkv.split([NH * D, NKV * D, NKV * D], dim=-1)
    cos, sin = cos_sin[positions].chunk(2, dim=-1)
    cos, sin = cos[:, None, :], sin[:, None, :]

    def rope(t, heads):
        t = t.reshape(B, heads, D)
        t1, t2 = t[..., : D // 2], t[..., D // 2:]
        return torch.cat([t1 * cos - t2 * sin, t2 * cos + t1 * sin], dim=-1)

    q, k = rope(q, NH), rope(k, NKV)
    k_cache.index_copy_(2, cache_position, k[:, :, None, :])
    v_cache.index_copy_(2, cache_position, v.reshape(B, NKV, D)[:, :, None, :])
    a = attend(q[:, :, None, :], k_cache, v_cache)
    a = a.reshape(B, NH * D)
    o = linear(a, w_o, ws_o, is_o, fp8)
    residual = o + residual
    x = rms_norm(residual, ln2, eps)
    gu = linear(x, w_gu, ws_gu, is_gu, fp8)
    act = silu_and_mul(gu)
    return linear(act, w_down, ws_down, is_down, fp8), residual


LAYER_ARGS = ("ln1", "ln2", "w_qkv", "ws_qkv", "is_qkv", "w_o", "ws_o", "is_o", "w_gu", "ws_gu", "is_gu", "w_down",
              "ws_down", "is_down", "k_cache", "v_cache")


def make_step(m, layer_fn):
    """The whole decode step (embedding -> layers -> norm -> LM head) with `layer_fn` per layer."""
    dims = (m.NH, m.NKV, m.D, m.eps, m.fp8)

    def step():
        h = m.embed[m.input_ids]
        residual = None
        for lw in m.layers:
            h, residual = layer_fn(h, residual, m.positions, m.cache_position, m.cos_sin,
                                   *[lw[k] for k in LAYER_ARGS], dims)
        out = rms_norm(h + residual, m.final_norm, m.eps)
        return out @ m.lm_head.t()

    return step


def compile_kwargs(mode):
    """torch.compile's arguments for a compiled mode. "max-autotune-aten" is max-autotune with
    Inductor's GEMM autotuning over ATen (cuBLAS) kernels only: torch 2.11's Triton GEMM
    templates fail to lower this model's FP8 `_scaled_mm` at batch 1 and 8 (InductorError:
    LoweringException: AssertionError in select_algorithm's store_output), so plain
    "max-autotune" does not compile it (docs/benchmarks/decode_step.md, twenty-fourth session)."""
    if mode == "default":
        return {}
    if mode == "max-autotune-aten":
        from torch._inductor import list_mode_options
        return {"options": dict(list_mode_options("max-autotune"), max_autotune_gemm_backends="ATEN")}
    return {"mode": mode}


def layer_for(mode):
    """The layer function of a mode: eager, or compiled once and reused by every layer (and,
    with torch's automatic dynamic shapes, by the later batch x context points)."""
    if mode == "eager":
        return decoder_layer
    return torch.compile(decoder_layer, **compile_kwargs(mode))


def capture_graph(step, warmup=3):
    """The step captured once in a CUDA graph (after `warmup` eager runs on a side stream) and
    replayed three times."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(warmup):
            step()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        step()
    for _ in range(3):
        graph.replay()
    torch.cuda.synchronize()
    return graph


def time_graph(step, iters, warmup=3):
    """The step captured once in a CUDA graph: median of `iters` replays (CUDA events), in µs."""
    graph = capture_graph(step, warmup)
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    ms = []
    for _ in range(iters):
        a.record()
        graph.replay()
        b.record()
        b.synchronize()
        ms.append(a.elapsed_time(b))
    ms.sort()
    return ms[len(ms) // 2] * 1000.0


def count_kernels(step):
    from torch.profiler import ProfilerActivity, profile
    step()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        step()
        torch.cuda.synchronize()
    return sum(1 for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA
               and "memcpy" not in e.name.lower() and "memset" not in e.name.lower())
