"""Generates the FX readable-text fixtures in tests/importers/data/ (torch >= 2.8, one GPU).

    python3 tests/importers/fx_text_gen_fixtures.py OUT_DIR

Each case is independent (a failure is logged and skipped). Files written:

  hop_cond_export.txt       torch.export with torch.cond: nested true/false graph classes
  hop_cond_python_code.py   graph.python_code(verbose=True) of the same graph module
  hop_map_export.txt        torch.export with a scan / map body, if available
  aot_invoke_subgraph.txt   AOT forward graph with invoke_subgraph (nested_compile_region)
  aot_symint.txt            AOT forward graph with SymInt arithmetic (dynamic shapes)
  dynamo_symint.txt         Dynamo graph of the same (method calls, operator.*)
  no_annotations.py         gm.code: no shape annotations (must be rejected)
  sizes_only.txt            print_readable() without strides/devices
  multi_output.txt          max.dim / split / unbind getitems
  export_module.txt         ep.module().print_readable() (pytree in/out spec)

The checked-in copies were made with torch 2.11.0+cu130 on an H200; absolute paths in their
`# File:` comments were rewritten afterwards (this script's folder -> `demo/`, the torch
install -> `site-packages/`):
  sed -i 's#/.*/tests/importers/#demo/#g; s#/.*/site-packages/#site-packages/#g' *
"""
import os
import sys
import traceback

import torch

OUT = sys.argv[1]
os.makedirs(OUT, exist_ok=True)
dev = "cuda" if torch.cuda.is_available() else "cpu"


def write(name, text):
    with open(os.path.join(OUT, name), "w") as f:
        f.write(text)
    print("wrote", name, len(text.splitlines()), "lines")


def readable(gm, **kw):
    kw.setdefault("include_stride", True)
    kw.setdefault("include_device", True)
    return gm.print_readable(print_output=False, **kw)


def case(fn):
    try:
        fn()
    except Exception:  # noqa: BLE001
        print("case", fn.__name__, "failed")
        traceback.print_exc()


def cond_export():
    class M(torch.nn.Module):
        def forward(self, x, y):
            def t(x, y):
                return (x.sin() + y,)

            def f(x, y):
                return (x.cos() - y,)

            return torch.cond(x.sum() > 0, t, f, (x, y))

    n = torch.export.Dim("n", min=2, max=1024)
    args = (torch.randn(4, 8, device=dev), torch.randn(4, 8, device=dev))
    ep = torch.export.export(M(), args, dynamic_shapes=({0: n}, {0: n}))
    write("hop_cond_export.txt", readable(ep.graph_module))
    code = ep.graph_module.graph.python_code(root_module="self", verbose=True).src
    write("hop_cond_python_code.py", code)


def map_export():
    from torch._higher_order_ops.map import map as hop_map

    class M(torch.nn.Module):
        def forward(self, xs, y):
            def body(x, y):
                return x * y + 1

            return hop_map(body, xs, y)

    args = (torch.randn(3, 4, device=dev), torch.randn(4, device=dev))
    ep = torch.export.export(M(), args)
    write("hop_map_export.txt", readable(ep.graph_module))


def capture_aot(model, args, name, dynamic=True, dynamo_name=None):
    from torch._dynamo.backends.common import aot_autograd

    graphs = {}

    def fw(gm, example_inputs):
        graphs.setdefault("aot", readable(gm))
        return gm.forward

    def backend(gm, example_inputs):
        graphs.setdefault("dynamo", readable(gm))
        return aot_autograd(fw_compiler=fw)(gm, example_inputs)

    torch._dynamo.reset()
    with torch.no_grad():
        torch.compile(model, backend=backend, dynamic=dynamic, fullgraph=True)(*args)
    write(name, graphs["aot"])
    if dynamo_name:
        write(dynamo_name, graphs["dynamo"])


def invoke_subgraph():
    region = torch.compiler.nested_compile_region

    @region
    def block(x, w):
        return torch.nn.functional.silu(x @ w)

    def model(x, w):
        return block(block(x, w), w) + 1

    capture_aot(model, (torch.randn(8, 16, device=dev), torch.randn(16, 16, device=dev)), "aot_invoke_subgraph.txt")


def symint():
    def model(x, y):
        z = x.reshape(x.shape[0] * x.shape[1])
        return z[: y.shape[0] * 2] * 2, z.sum(-1)

    capture_aot(model, (torch.randn(6, 5, device=dev), torch.randn(3, device=dev)), "aot_symint.txt",
                dynamo_name="dynamo_symint.txt")


def no_annotations_and_sizes_only():
    class M(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(8, 4)

        def forward(self, x):
            return torch.relu(self.lin(x)).sum(-1)

    ep = torch.export.export(M().to(dev), (torch.randn(3, 8, device=dev),))
    gm = ep.run_decompositions().graph_module
    write("no_annotations.py", gm.code)
    write("sizes_only.txt", gm.print_readable(print_output=False))
    write("export_module.txt", readable(ep.module()))


def multi_output():
    class M(torch.nn.Module):
        def forward(self, x):
            v, i = x.max(dim=1)
            a, b, c = torch.split(x, [2, 3, 3], dim=1)
            u = torch.unbind(x[:, :2], dim=1)
            return v, i, b + c, u[1], a

    ep = torch.export.export(M(), (torch.randn(4, 8, device=dev),))
    write("multi_output.txt", readable(ep.run_decompositions().graph_module))


for c in (cond_export, map_export, invoke_subgraph, symint, no_annotations_and_sizes_only, multi_output):
    case(c)
print("torch", torch.__version__)
