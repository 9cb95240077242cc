"""Registers every fxfuse op of schemas.py with torch.library.

Implementations: the torch references of reference.py for every device
(CompositeExplicitAutograd) and as fake/meta kernels, so exported programs load, run and
re-trace. A shared library of CUDA kernels can override the CUDA implementations
(load_kernels): it registers `TORCH_LIBRARY_IMPL(fxfuse, CUDA, m)` for any subset of the
ops; the ops it leaves out keep the reference implementation.

Works with torch >= 1.13 for definitions; fake kernels need torch >= 2.1.
"""

import os

import torch

from . import reference
from .schemas import FXFUSE_SCHEMAS

_LIB = None
_NAMES = []


def _split(schema):
    """"ns::name(args) -> ret" → ("ns", "name", "name(args) -> ret") (overload kept)."""
    ns, rest = schema.split("::", 1)
    name = rest.split("(", 1)[0]
    return ns, name.split(".", 1)[0], rest


def _register_fake(qualname, fn, lib):
    if hasattr(torch.library, "register_fake"):
        torch.library.register_fake(qualname, fn, lib=lib)
    elif hasattr(torch.library, "impl_abstract"):
        torch.library.impl_abstract(qualname, fn, lib=lib)
    else:  # torch < 2.1: a Meta kernel
        lib.impl(qualname.split("::", 1)[1], fn, "Meta")


def register():
    """Defines torch.ops.fxfuse.<op> for every schema; idempotent."""
    global _LIB
    if _LIB is not None:
        return
    _LIB = torch.library.Library("fxfuse", "DEF")
    for schema in FXFUSE_SCHEMAS:
        ns, name, decl = _split(schema)
        if ns != "fxfuse":
            raise ValueError(f"schema outside the fxfuse namespace: {schema}")
        impl = reference.IMPLEMENTATIONS.get(name)
        if impl is None:
            raise ValueError(f"no reference implementation for fxfuse::{name}")
        _LIB.define(decl)
        _LIB.impl(name, impl, "CompositeExplicitAutograd")
        _register_fake(f"fxfuse::{name}", impl, _LIB)
        _NAMES.append(name)


def registered_ops():
    return list(_NAMES)


def load_kernels(path=None):
    """Loads fxfuse's CUDA kernels for the op library from a shared library.

    `path` defaults to $FXFUSE_TORCH_KERNELS. Returns the path loaded, or None when no
    library is given (the reference implementations stay in use).
    """
    path = path or os.environ.get("FXFUSE_TORCH_KERNELS")
    if not path:
        return None
    if not os.path.isfile(path):
        raise FileNotFoundError(f"fxfuse_torch: kernel library {path} does not exist")
    torch.ops.load_library(path)
    return path
