"""fxfuse_export: dump PyTorch FX/ATen graphs into fxfuse's protobuf JSON (see docs/exporter.md)."""
from .exporter import (  # noqa: F401
    __version__, TOOL, DumpPass, backend, dumps, export_program, exported_program_to_module,
    graph_to_module, inductor_pass, lifted_scalar_values, make_fx_module, make_fx_program, module_histogram,
    op_histogram, op_name, readable_text, vllm_pass, write_module,
)
