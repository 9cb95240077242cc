"""fxfuse_torch: fxfuse's canonical and fused ops as a torch op library.

    import fxfuse_torch                      # registers torch.ops.fxfuse.* (reference impls)
    ep = torch.export.load("fused.pt2")      # archives written by `fxfuse compile -o X.pt2`
    ep.module()(*inputs)

    fxfuse_torch.load_kernels("libfxfuse_torch_kernels.so")   # optional CUDA kernels
    fxfuse_torch.register_vllm_stubs()       # vLLM's _C/vllm op schemas where vLLM is absent

Schemas come from fxfuse_torch/schemas.py, generated from ir/op_schema.cc (importable
without torch). docs/pt2-output.md describes the archive and the op library.
"""

from .library import load_kernels, register, registered_ops  # noqa: F401
from .vllm_stubs import register_vllm_stubs  # noqa: F401

register()
