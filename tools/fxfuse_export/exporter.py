"""fxfuse_export: write PyTorch FX/ATen graphs as fxfuse protobuf JSON (proto/fxfuse_ir.proto).

Needs only torch (1.13 or 2.x); the protobuf package is used only for optional binary output.
Never mutates the graph it is given and never raises into a user's compile from the
Inductor pass / backend entry points (errors are logged and the compile continues).
"""
from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import re
import threading

import torch
import torch.fx

__version__ = "0.1"
TOOL = "fxfuse_export " + __version__
IR_MAJOR = 1
IR_MINOR = 0
DEFAULT_MAX_BYTES = 512 << 20  # refuse to write files larger than this
MAX_META_CHARS = 8192          # cap on each meta string

log = logging.getLogger("fxfuse_export")

# --------------------------------------------------------------------------------------
# enums

_DTYPES = {
    "bool": "BOOL", "uint8": "U8", "int8": "I8", "int16": "I16", "int32": "I32",
    "int64": "I64", "float16": "F16", "bfloat16": "BF16", "float32": "F32",
    "float64": "F64", "float8_e4m3fn": "F8E4M3FN", "float8_e5m2": "F8E5M2",
    "float8_e4m3fnuz": "F8E4M3FNUZ", "float8_e5m2fnuz": "F8E5M2FNUZ", "uint16": "U16",
    "uint32": "U32", "uint64": "U64", "complex32": "C32", "complex64": "C64",
    "complex128": "C128", "float8_e8m0fnu": "F8E8M0FNU",
}
_LAYOUTS = {"strided": "STRIDED", "sparse_coo": "SPARSE_COO", "sparse_csr": "SPARSE_CSR"}
_MEMFMTS = {"contiguous_format": "CONTIGUOUS", "channels_last": "CHANNELS_LAST",
            "channels_last_3d": "CHANNELS_LAST_3D", "preserve_format": "PRESERVE"}
STAGES = ("DYNAMO", "AOT_FORWARD", "POST_GRAD_PRE", "POST_GRAD_POST", "EXPORT_TRAIN_IR",
          "EXPORT_CORE_ATEN", "MAKE_FX", "FXFUSE_COMPILED")
_SYMPY_FN = {
    "Add": "ADD", "Mul": "MUL", "Pow": "POW", "FloorDiv": "FLOOR_DIV", "Mod": "MOD",
    "PythonMod": "MOD", "CeilDiv": "CEIL_DIV", "IntTrueDiv": "TRUE_DIV",
    "FloatTrueDiv": "TRUE_DIV", "TrueDiv": "TRUE_DIV", "Max": "MAX", "Min": "MIN",
    "Equality": "EQ", "Unequality": "NE", "StrictLessThan": "LT", "LessThan": "LE",
    "StrictGreaterThan": "GT", "GreaterThan": "GE", "And": "AND", "Or": "OR", "Not": "NOT",
    "ITE": "ITE",
}
_INT64_SAFE = 1 << 53


def _dtype_name(dt):
    return _DTYPES.get(str(dt).replace("torch.", ""))


def _enum_stage(stage):
    s = str(stage).upper()
    aliases = {"POST_GRAD": "POST_GRAD_POST", "PRE": "POST_GRAD_PRE", "POST": "POST_GRAD_POST",
               "AOT": "AOT_FORWARD", "TRAIN_IR": "EXPORT_TRAIN_IR", "CORE_ATEN": "EXPORT_CORE_ATEN"}
    s = aliases.get(s, s)
    return s if s in STAGES else "STAGE_UNSPECIFIED"


def _i64(v):
    """int64 for proto3 JSON: numbers when exactly representable as double, else strings."""
    v = int(v)
    return v if -_INT64_SAFE <= v <= _INT64_SAFE else str(v)


def _cap(s, n=MAX_META_CHARS):
    s = str(s)
    return s if len(s) <= n else s[:n] + "...<truncated>"


# --------------------------------------------------------------------------------------
# target naming

def _is_opoverload(t):
    return isinstance(t, getattr(torch._ops, "OpOverload", ()))


def _is_hop(t):
    cls = getattr(torch._ops, "HigherOrderOperator", None)
    return cls is not None and isinstance(t, cls)


def _is_packet(t):
    return isinstance(t, getattr(torch._ops, "OpOverloadPacket", ()))


def resolve_overload(target, args=(), kwargs=None):
    """OpOverload for a node target; an OpOverloadPacket (torch 1.13 records e.g.
    `aten.sym_size`) is resolved to the first overload whose schema binds the arguments."""
    if not _is_packet(target):
        return target if _is_opoverload(target) else None
    kwargs = kwargs or {}
    try:
        names = target.overloads()
    except Exception:
        return None
    for name in names:
        try:
            ov = getattr(target, name)
            sargs = list(ov._schema.arguments)
        except Exception:
            continue
        pos = [a for a in sargs if not getattr(a, "kwarg_only", False)]
        if len(args) > len(pos):
            continue
        snames = {a.name for a in sargs}
        if any(k not in snames for k in kwargs):
            continue
        ok = True
        for i, a in enumerate(sargs):
            given = i < len(args) and not getattr(a, "kwarg_only", False) or a.name in kwargs
            hd = a.has_default_value() if hasattr(a, "has_default_value") else False
            if not given and not hd:
                ok = False
                break
        if ok:
            return ov
    return None


def op_name(op):
    """Canonical operator name without the `torch.ops.` prefix: `aten.mm.default`."""
    if _is_opoverload(op):
        ns = getattr(op, "namespace", None) or op._schema.name.split("::")[0]
        return "%s.%s.%s" % (ns, op._overloadpacket.__name__, op._overloadname)
    if _is_hop(op):
        return "higher_order." + (op.name() if callable(getattr(op, "name", None)) else op.__name__)
    try:
        from torch.fx.node import _get_qualified_name
        q = _get_qualified_name(op)
    except Exception:
        q = getattr(op, "__module__", "?") + "." + getattr(op, "__name__", repr(op))
    if q.startswith("torch.ops."):
        q = q[len("torch.ops."):]
    if q.startswith("operator."):
        q = "_" + q
    return q


def node_target_name(n):
    if n.op == "call_function":
        if _is_packet(n.target):
            ov = resolve_overload(n.target, n.args, n.kwargs)
            if ov is not None:
                return op_name(ov)
        return op_name(n.target)
    if n.op == "call_method":
        return "call_method." + str(n.target)
    if n.op == "call_module":
        return "call_module." + str(n.target)
    return str(n.target)


def _is_getitem(n):
    import operator
    return n.op == "call_function" and n.target is operator.getitem


def _node_kind(target, name):
    if _is_opoverload(target):
        return "OP"
    if _is_hop(target) or name.startswith("higher_order."):
        return "HOP"
    if name.startswith(("_operator.", "math.", "torch.sym_")) or "sym_node." in name:
        return "SYM_PY"
    return "NODE_KIND_UNSPECIFIED"


def op_histogram(gm_or_graph, include_subgraphs=True):
    """Histogram {canonical target: count} over call nodes, `getitem` not counted.

    This is the count the C++ `fxfuse inspect --json` reports as "ops" for the written
    file (entry graph plus HOP bodies when include_subgraphs)."""
    hist = {}
    graph = gm_or_graph.graph if hasattr(gm_or_graph, "graph") else gm_or_graph
    root = graph.owning_module
    seen = set()

    def visit(g, mod):
        for n in g.nodes:
            if n.op in ("call_function", "call_method", "call_module") and not _is_getitem(n):
                k = node_target_name(n)
                hist[k] = hist.get(k, 0) + 1
            if include_subgraphs and n.op == "get_attr" and mod is not None:
                sub = _getattr_path(mod, n.target)
                if isinstance(sub, torch.fx.GraphModule) and id(sub) not in seen:
                    seen.add(id(sub))
                    visit(sub.graph, sub)
    visit(graph, root)
    return dict(sorted(hist.items()))


def module_histogram(mod):
    """Same histogram computed from a written fxfuse Module dict (all graphs)."""
    hist = {}
    for g in mod.get("graphs", []):
        for n in g.get("nodes", []):
            hist[n["target"]] = hist.get(n["target"], 0) + 1
    return dict(sorted(hist.items()))


def _getattr_path(mod, target):
    obj = mod
    for part in str(target).split("."):
        obj = getattr(obj, part, None)
        if obj is None:
            return None
    return obj


# --------------------------------------------------------------------------------------
# symbolic expressions

def _sym_expr_of(x):
    """sympy expression behind a SymInt/SymFloat/SymBool (torch 2.x or 1.13), or None."""
    node = getattr(x, "node", None)
    if node is not None and hasattr(node, "expr"):
        try:
            return node.expr, getattr(node, "shape_env", None)
        except Exception:
            pass
    if type(x).__name__ in ("PySymInt", "PySymFloat") and hasattr(x, "expr"):  # torch 1.13
        return x.expr, getattr(x, "shape_env", None)
    gp = getattr(x, "get_pyobj", None)  # torch 1.13 SymIntNode
    if gp is not None:
        try:
            p = gp()
            return p.expr, getattr(p, "shape_env", None)
        except Exception:
            pass
    return None, None


def _is_symbolic(x):
    return type(x).__name__ in ("SymInt", "SymFloat", "SymBool", "SymIntNode", "SymFloatNode",
                                "PySymInt", "PySymFloat")


_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class _Ctx:
    """State shared by all graphs of one Module."""

    def __init__(self, shape_env=None, range_constraints=None):
        self.shape_env = shape_env
        self.range_constraints = range_constraints or {}
        self.symbols = {}        # exported name -> sympy Symbol
        self.renames = {}        # original name -> exported name
        self.schemas = {}        # op name -> schema string
        self.graphs = []         # Module.graphs
        self.graph_index = {}    # id(GraphModule) -> index
        self.warnings = {}

    def warn(self, what):
        self.warnings[what] = self.warnings.get(what, 0) + 1

    def note_env(self, env):
        if env is not None and self.shape_env is None:
            self.shape_env = env

    def sym_name(self, s):
        name = str(getattr(s, "name", s))
        if name in self.renames:
            return self.renames[name]
        new = name
        if not _IDENT.match(name):  # torch 1.13 names symbols `t0.size(0)`
            i = len(self.renames)
            new = "s%d" % i
            while new in self.symbols:
                i += 1
                new = "s%d" % i
        self.renames[name] = new
        self.symbols[new] = s
        return new

    def walk(self, e):
        try:
            import sympy
        except Exception:  # pragma: no cover
            return {"apply": {"fn": "OPAQUE", "opaque_name": str(e)}}
        if isinstance(e, bool):
            return {"boolean": e}
        if isinstance(e, int):
            return {"int": _i64(e)}
        if isinstance(e, float):
            return self._real(e)
        if getattr(e, "is_Symbol", False):
            return {"sym": self.sym_name(e)}
        if getattr(e, "is_Integer", False):
            return {"int": _i64(int(e))}
        if e is sympy.true or type(e).__name__ == "BooleanTrue":
            return {"boolean": True}
        if e is sympy.false or type(e).__name__ == "BooleanFalse":
            return {"boolean": False}
        if getattr(e, "is_Rational", False) and not getattr(e, "is_Integer", False):
            return {"apply": {"fn": "TRUE_DIV", "args": [{"int": _i64(int(e.p))},
                                                        {"int": _i64(int(e.q))}]}}
        if getattr(e, "is_Float", False):
            return self._real(float(e))
        cname = type(e).__name__
        if getattr(e, "is_Number", False) or not getattr(e, "args", ()):
            # oo, -oo, int_oo, zoo, nan ...
            return {"apply": {"fn": "OPAQUE", "opaque_name": str(e)}}
        args = [self.walk(a) for a in e.args]
        fn = _SYMPY_FN.get(cname)
        if fn is None:
            self.warn("opaque sympy function " + cname)
            return {"apply": {"fn": "OPAQUE", "opaque_name": cname, "args": args}}
        return {"apply": {"fn": fn, "args": args}}

    def _real(self, f):
        if math.isfinite(f):
            return {"real": f}
        return {"apply": {"fn": "OPAQUE", "opaque_name": str(f)}}

    def sym(self, x):
        """SymExpr for an int / SymInt / SymFloat / SymBool / sympy expr."""
        if isinstance(x, bool):
            return {"boolean": x}
        if isinstance(x, int):
            return {"int": _i64(x)}
        if isinstance(x, float):
            return self._real(x)
        if _is_symbolic(x):
            expr, env = _sym_expr_of(x)
            self.note_env(env)
            if expr is None:
                self.warn("symbolic value without expression")
                return {"apply": {"fn": "OPAQUE", "opaque_name": repr(x)}}
            return self.walk(expr)
        if hasattr(x, "free_symbols"):  # a sympy expression
            return self.walk(x)
        return {"apply": {"fn": "OPAQUE", "opaque_name": repr(x)}}

    def symbol_table(self):
        out = []
        env = self.shape_env
        rc = {str(k): v for k, v in (self.range_constraints or {}).items()}
        for orig, new in sorted(self.renames.items(), key=lambda kv: kv[1]):
            s = self.symbols[new]
            ent = {"name": new}
            vr = rc.get(orig)
            if vr is None and env is not None:
                vr = getattr(env, "var_to_range", {}).get(s)
            if vr is not None:
                lo, hi = _bound(getattr(vr, "lower", None)), _bound(getattr(vr, "upper", None))
                if lo is not None:
                    ent["min"] = _i64(lo)
                if hi is not None:
                    ent["max"] = _i64(hi)
            hint = None
            if env is not None:
                for attr in ("backed_var_to_val", "var_to_val"):
                    if hint is None and hasattr(env, attr):
                        try:
                            hint = _bound(getattr(env, attr).get(s))
                        except Exception:
                            pass
                if hint is None:
                    hint = _bound(getattr(env, "unbacked_var_to_val", {}).get(s))
            if hint is not None:
                ent["hint"] = _i64(hint)
            src = None
            if env is not None:
                srcs = getattr(env, "var_to_sources", {}).get(s) or []
                if srcs:
                    nm = getattr(srcs[0], "name", None)
                    try:
                        src = nm() if callable(nm) else nm
                    except Exception:
                        src = None
            if src is None and orig != new:
                src = orig
            if src:
                ent["source"] = str(src)
            out.append(ent)
        return out


def _bound(b):
    if b is None:
        return None
    if getattr(b, "is_finite", True) is False or "Infinity" in type(b).__name__:
        return None
    try:
        v = int(b)
    except Exception:
        return None
    if abs(v) >= (1 << 62):
        return None
    return v


# --------------------------------------------------------------------------------------
# graph conversion

def _tensor_type(ctx, t):
    tt = {}
    dn = _dtype_name(t.dtype)
    if dn is None:
        ctx.warn("unknown dtype " + str(t.dtype))
        dn = "DTYPE_UNSPECIFIED"
    tt["dtype"] = dn
    tt["shape"] = [ctx.sym(d) for d in t.shape]
    try:
        tt["stride"] = [ctx.sym(d) for d in t.stride()]
        tt["storage_offset"] = ctx.sym(t.storage_offset())
    except Exception:
        pass  # sparse / opaque layouts have no strides
    dev = t.device
    tt["device"] = {"type": dev.type, "index": -1 if dev.index is None else int(dev.index)}
    tt["layout"] = _LAYOUTS.get(str(t.layout).replace("torch.", ""), "OTHER_LAYOUT")
    if getattr(t, "requires_grad", False):
        tt["requires_grad"] = True
    # FakeTensor -> shape env
    fm = getattr(t, "fake_mode", None)
    if fm is not None:
        ctx.note_env(getattr(fm, "shape_env", None))
    return tt


def _value_from_example(ctx, vid, name, v):
    val = {"id": vid, "name": name}
    if isinstance(v, torch.Tensor):
        val["kind"] = "TENSOR"
        try:
            val["tensor"] = _tensor_type(ctx, v)
        except Exception as e:  # noqa: BLE001
            ctx.warn("tensor metadata failed: %s" % type(e).__name__)
    elif isinstance(v, bool) or type(v).__name__ in ("SymBool",):
        val["kind"] = "SYM_BOOL"
        val["sym_value"] = ctx.sym(v)
    elif isinstance(v, int) or type(v).__name__ in ("SymInt", "SymIntNode", "PySymInt"):
        val["kind"] = "SYM_INT"
        val["sym_value"] = ctx.sym(v)
    elif isinstance(v, float) or type(v).__name__ in ("SymFloat", "SymFloatNode", "PySymFloat"):
        val["kind"] = "SYM_FLOAT"
        val["sym_value"] = ctx.sym(v)
    else:
        val["kind"] = "OPAQUE_VALUE"
        val["opaque_type"] = "unknown" if v is None else type(v).__module__ + "." + type(v).__qualname__
    return val


def _example(n):
    m = n.meta
    for k in ("val", "example_value"):
        if k in m:
            return m[k], True
    tm = m.get("tensor_meta")
    if tm is not None and hasattr(tm, "shape"):
        try:
            return torch.empty_strided(tuple(tm.shape), tuple(tm.stride), dtype=tm.dtype,
                                       device="meta"), True
        except Exception:
            pass
    return None, False


def _is_lifted_scalar(t):
    """A 0-d CPU tensor: how Dynamo passes a Python number it lifted into a graph input
    (an `eps` default argument, a global FP8 maximum) when it compiles with dynamic shapes."""
    return (isinstance(t, torch.Tensor) and t.dim() == 0 and t.device.type == "cpu"
            and (t.dtype.is_floating_point or t.dtype in (torch.int64, torch.int32, torch.bool)))


def _scalar_value(t):
    """The value of a real (not fake) 0-d tensor as a float, or None."""
    try:
        from torch._subclasses.fake_tensor import is_fake
        if is_fake(t):
            return None
    except Exception:
        pass
    try:
        v = float(t.item())
    except Exception:
        return None
    return v if v == v else None  # NaN is not representable in proto3 JSON


def lifted_scalar_values(example_inputs):
    """{placeholder index: value} for the 0-d CPU tensors among a backend's example inputs."""
    out = {}
    for i, t in enumerate(example_inputs or ()):
        if _is_lifted_scalar(t):
            v = _scalar_value(t)
            if v is not None:
                out[i] = v
    return out


def _loc_and_meta(n, with_meta):
    meta = {}
    loc = None
    st = n.meta.get("stack_trace")
    if st:
        frames = re.findall(r'File "([^"]+)", line (\d+), in [^\n]*\n([^\n]*)', st)
        if frames:
            f, line, code = frames[-1]
            loc = {"file": f, "line": int(line), "code": code.strip()}
    if not with_meta:
        return loc, meta
    if st:
        meta["stack_trace"] = _cap(st)
    nms = n.meta.get("nn_module_stack")
    if nms:
        try:
            items = []
            for k, v in nms.items():
                path, ty = (v if isinstance(v, (tuple, list)) and len(v) == 2 else (v, ""))
                if isinstance(ty, type):
                    ty = ty.__module__ + "." + ty.__qualname__
                items.append("%s,%s,%s" % (k, path, ty))
            meta["nn_module_stack"] = _cap(";".join(items))
        except Exception:
            meta["nn_module_stack"] = _cap(repr(nms))
    sfs = n.meta.get("source_fn_stack")
    if sfs:
        try:
            meta["source_fn_stack"] = _cap(";".join(
                "%s,%s" % (a, b if isinstance(b, str) else getattr(b, "__qualname__", getattr(b, "__name__", repr(b))))
                for a, b in sfs))
        except Exception:
            meta["source_fn_stack"] = _cap(repr(sfs))
    for k in ("original_aten", "torch_fn"):
        if k in n.meta and n.meta[k] is not None:
            v = n.meta[k]
            meta[k] = _cap(op_name(v) if _is_opoverload(v) else repr(v))
    if "seq_nr" in n.meta:
        meta["seq_nr"] = str(n.meta["seq_nr"])
    return loc, meta


def _mutates(op):
    try:
        for a in op._schema.arguments:
            ai = a.alias_info
            if ai is not None and ai.is_write:
                return True
    except Exception:
        pass
    return False


class _GraphConverter:
    def __init__(self, ctx, gm, name, with_meta=True, input_specs=None, output_specs=None,
                 scalar_values=None):
        self.ctx = ctx
        if scalar_values is not None and not isinstance(scalar_values, dict):
            raise TypeError("scalar_values must map placeholder indices to values, got %s"
                            % type(scalar_values).__name__)
        self.scalar_values = scalar_values or {}  # placeholder index -> recorded value
        self.placeholder_index = 0
        self.gm = gm
        self.graph = gm.graph if hasattr(gm, "graph") else gm
        self.mod = gm if isinstance(gm, torch.nn.Module) else self.graph.owning_module
        self.name = name
        self.with_meta = with_meta
        self.input_specs = input_specs or {}   # placeholder name -> (InputKind, target)
        self.output_specs = output_specs or []  # per output: (OutputKind, target)
        self.values = []
        self.nodes = []
        self.inputs = []
        self.outputs = []
        self.next_id = 1
        self.node_out = {}    # fx Node -> ("one", id) | ("multi", [ids]) | ("graph", idx) | ("none",)
        self.functional = True

    def new_value(self, name, example):
        vid = self.next_id
        self.next_id += 1
        self.values.append(_value_from_example(self.ctx, vid, name, example))
        return vid

    # Attr encoding -----------------------------------------------------------
    def attr(self, a):
        ctx = self.ctx
        if isinstance(a, torch.fx.Node):
            r = self.node_out.get(a)
            if r is None:
                ctx.warn("reference to unknown node")
                return {"opaque": {"type": "fx.Node", "repr": a.name}}
            if r[0] == "one":
                return {"value": r[1]}
            if r[0] == "multi":
                return {"list": {"items": [{"value": i} if i else {"none": True} for i in r[1]]}}
            if r[0] == "graph":
                return {"graph": r[1]}
            return {"none": True}
        if a is None:
            return {"none": True}
        if isinstance(a, bool):
            return {"b": a}
        if isinstance(a, int):
            return {"i": _i64(a)}
        if isinstance(a, float):
            if math.isnan(a):
                return {"special_float": "nan"}
            if math.isinf(a):
                return {"special_float": "inf" if a > 0 else "-inf"}
            return {"f": a}
        if isinstance(a, str):
            return {"s": a}
        if isinstance(a, torch.dtype):
            dn = _dtype_name(a)
            return {"dtype": dn} if dn else {"opaque": {"type": "torch.dtype", "repr": str(a)}}
        if isinstance(a, torch.device):
            return {"device": {"type": a.type, "index": -1 if a.index is None else int(a.index)}}
        if isinstance(a, torch.layout):
            return {"layout": _LAYOUTS.get(str(a).replace("torch.", ""), "OTHER_LAYOUT")}
        if isinstance(a, torch.memory_format):
            mf = _MEMFMTS.get(str(a).replace("torch.", ""))
            return {"memory_format": mf} if mf else {"opaque": {"type": "torch.memory_format", "repr": str(a)}}
        if _is_symbolic(a):
            return {"sym": ctx.sym(a)}
        if isinstance(a, (list, tuple)):
            return {"list": {"items": [self.attr(x) for x in a]}}
        if _is_opoverload(a):
            nm = op_name(a)
            ctx.schemas.setdefault(nm, str(a._schema))
            return {"op": nm}
        if _is_hop(a):
            return {"op": op_name(a)}
        if isinstance(a, torch.fx.GraphModule):
            return {"graph": self.ctx_subgraph(a, "graph")}
        if isinstance(a, complex):
            return {"opaque": {"type": "complex", "repr": repr(a)}}
        if isinstance(a, dict):
            ctx.warn("dict argument")
            return {"opaque": {"type": "dict", "repr": _cap(repr(a), 1024)}}
        if isinstance(a, torch.Tensor):
            ctx.warn("tensor literal argument")
            return {"opaque": {"type": "torch.Tensor", "repr": "tensor(shape=%s, dtype=%s)" % (list(a.shape), a.dtype)}}
        ctx.warn("opaque argument " + type(a).__name__)
        return {"opaque": {"type": type(a).__module__ + "." + type(a).__qualname__, "repr": _cap(repr(a), 1024)}}

    def ctx_subgraph(self, sub, name):
        key = id(sub)
        if key in self.ctx.graph_index:
            return self.ctx.graph_index[key]
        idx = len(self.ctx.graphs)
        self.ctx.graph_index[key] = idx
        self.ctx.graphs.append(None)  # reserve the slot
        conv = _GraphConverter(self.ctx, sub, name, self.with_meta)
        self.ctx.graphs[idx] = conv.convert()
        self.functional = self.functional and conv.functional
        return idx

    # args --------------------------------------------------------------------
    def encode_args(self, n, target):
        args = []
        if _is_opoverload(target):
            schema_args = list(target._schema.arguments)
            pos = list(n.args)
            kw = dict(n.kwargs)
            for i, sa in enumerate(schema_args):
                if i < len(pos):
                    v = pos[i]
                elif sa.name in kw:
                    v = kw.pop(sa.name)
                else:
                    continue  # left at its default
                args.append({"name": sa.name, "keyword": bool(getattr(sa, "kwarg_only", False)),
                             "value": self.attr(v)})
            for v in pos[len(schema_args):]:
                args.append({"name": "", "value": self.attr(v)})
            for k, v in kw.items():
                args.append({"name": k, "keyword": True, "value": self.attr(v)})
            return args
        name = op_name(target) if n.op == "call_function" else ""
        pos = list(n.args)
        if name.startswith("higher_order.auto_functionalized") and pos:
            args.append({"name": "_mutable_op", "value": self.attr(pos[0])})
            pos = pos[1:]
        elif n.op == "call_function" and not _is_hop(target):
            pnames = _py_param_names(target, len(pos))
            for i, v in enumerate(pos):
                args.append({"name": pnames[i], "value": self.attr(v)})
            pos = []
        for v in pos:
            args.append({"name": "", "value": self.attr(v)})
        for k, v in n.kwargs.items():
            args.append({"name": k, "keyword": True, "value": self.attr(v)})
        return args

    # outputs -----------------------------------------------------------------
    def make_outputs(self, n, example, has_example, target=None):
        getitems = {}
        other_users = False
        for u in n.users:
            if _is_getitem(u) and isinstance(u.args[1], int):
                getitems.setdefault(u.args[1], []).append(u)
            else:
                other_users = True
        nret = 0
        target = n.target if target is None else target
        if _is_opoverload(target):
            try:
                nret = len(target._schema.returns)
            except Exception:
                nret = 0
        multi = (isinstance(example, (tuple, list)) or nret > 1 or
                 (not has_example and getitems and not other_users))
        if nret == 0 and _is_opoverload(target) and not n.users:
            self.node_out[n] = ("none",)  # op returns ()
            return []
        if not multi:
            if example is None and has_example and not n.users:
                self.node_out[n] = ("none",)
                return []
            vid = self.new_value(n.name, example)
            self.node_out[n] = ("one", vid)
            return [vid]
        count = len(example) if isinstance(example, (tuple, list)) else 0
        count = max(count, nret if nret > 1 else 0)
        if getitems:
            count = max(count, max(getitems) + 1)
        ids = []
        for i in range(count):
            users = getitems.get(i)
            if not users:
                ids.append(0)
                continue
            ex = example[i] if isinstance(example, (tuple, list)) and i < len(example) else None
            if ex is None:
                ex, _ = _example(users[0])
            vid = self.new_value(users[0].name, ex)
            for u in users:
                self.node_out[u] = ("one", vid)
            ids.append(vid)
        self.node_out[n] = ("multi", ids)
        return ids

    # main ----------------------------------------------------------------------
    def convert(self):
        ctx = self.ctx
        for n in self.graph.nodes:
            try:
                self.convert_node(n)
            except Exception as e:  # noqa: BLE001 - keep going, never lose the whole graph
                ctx.warn("node conversion failed: %s" % type(e).__name__)
                log.debug("fxfuse_export: node %s failed", n.name, exc_info=True)
                self.nodes.append({"name": n.name, "target": node_target_name(n),
                                   "meta": {"fxfuse_export_error": _cap(repr(e), 512)}})
        g = {"name": self.name, "inputs": self.inputs, "outputs": self.outputs,
             "values": self.values, "nodes": self.nodes}
        return g

    def convert_node(self, n):
        ctx = self.ctx
        if n.op == "placeholder":
            ex, _ = _example(n)
            vid = self.new_value(n.name, ex)
            self.node_out[n] = ("one", vid)
            kind, target = self.input_specs.get(n.name, ("USER_INPUT", ""))
            inp = {"value": vid, "kind": kind}
            if target:
                inp["target"] = target
            # Lifted scalars: the value, from the caller's example inputs or a real meta value.
            if isinstance(ex, torch.Tensor) and ex.dim() == 0:
                v = self.scalar_values.get(self.placeholder_index)
                if v is None and _is_lifted_scalar(ex):
                    v = _scalar_value(ex)
                if v is not None:
                    inp["scalar_value"] = float(v)
            self.placeholder_index += 1
            self.inputs.append(inp)
            return
        if n.op == "get_attr":
            obj = _getattr_path(self.mod, n.target) if self.mod is not None else None
            if isinstance(obj, torch.fx.GraphModule):
                self.node_out[n] = ("graph", self.ctx_subgraph(obj, str(n.target)))
                return
            ex, has = _example(n)
            if not has and isinstance(obj, torch.Tensor):
                ex = obj
            vid = self.new_value(n.name, ex)
            self.node_out[n] = ("one", vid)
            kind = "CONSTANT_TENSOR" if isinstance(ex, torch.Tensor) else "CUSTOM_OBJ"
            self.inputs.append({"value": vid, "kind": kind, "target": str(n.target)})
            return
        if n.op == "output":
            outs = n.args[0]
            if not isinstance(outs, (tuple, list)):
                outs = [outs]
            entries = []
            for o in outs:
                if isinstance(o, torch.fx.Node) and self.node_out.get(o, ("",))[0] == "multi":
                    entries.extend(("id", vid) for vid in self.node_out[o][1])
                else:
                    entries.append(("arg", o))
            for i, (t, o) in enumerate(entries):
                kind, target = (self.output_specs[i] if i < len(self.output_specs)
                                else ("USER_OUTPUT", ""))
                out = {"kind": kind}
                if t == "id":
                    out["value"] = o
                elif isinstance(o, torch.fx.Node):
                    a = self.attr(o)
                    out["value"] = a.get("value", 0)
                    if "value" not in a:
                        out["constant"] = a
                elif o is None:
                    out["value"] = 0
                else:
                    out["value"] = 0
                    out["constant"] = self.attr(o)
                if target:
                    out["target"] = target
                self.outputs.append(out)
            return
        if _is_getitem(n):
            src = n.args[0]
            if isinstance(src, torch.fx.Node) and n in self.node_out:
                return  # folded into its producer's outputs
            # getitem on something that is not a folded multi-output: keep as a node
        target = n.target
        if n.op == "call_function" and _is_packet(target):
            target = resolve_overload(target, n.args, n.kwargs) or target
        name = node_target_name(n)
        kind = _node_kind(target, name) if n.op == "call_function" else "NODE_KIND_UNSPECIFIED"
        if _is_opoverload(target):
            ctx.schemas.setdefault(name, str(target._schema))
            if _mutates(target):
                self.functional = False
        node = {"name": n.name, "target": name, "kind": kind}
        node["args"] = self.encode_args(n, target)
        ex, has = _example(n)
        node["outputs"] = self.make_outputs(n, ex, has, target)
        loc, meta = _loc_and_meta(n, self.with_meta)
        if meta:
            node["meta"] = meta
        if loc:
            node["loc"] = loc
        self.nodes.append(node)


def _py_param_names(fn, n):
    names = []
    try:
        import inspect
        for p in inspect.signature(fn).parameters.values():
            if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD):
                names.append(p.name)
    except Exception:
        pass
    if not names and n <= 3:
        names = ["a", "b", "c"]
    return [names[i] if i < len(names) else "" for i in range(n)]


# --------------------------------------------------------------------------------------
# public API

def graph_to_module(gm, stage="STAGE_UNSPECIFIED", *, name="main", with_meta=True,
                    input_specs=None, output_specs=None, range_constraints=None,
                    metadata=None, weights=None, scalar_values=None):
    """Convert a GraphModule (or fx.Graph) into an fxfuse Module dict (proto3 JSON shape).

    scalar_values: {placeholder index: value} of lifted scalar inputs (0-d CPU tensors),
    e.g. `lifted_scalar_values(example_inputs)` in a torch.compile backend; recorded as the
    inputs' `scalar_value` so fxfuse can check rewrites that depend on them."""
    ctx = _Ctx(range_constraints=range_constraints)
    ctx.graphs.append(None)
    conv = _GraphConverter(ctx, gm, name, with_meta, input_specs, output_specs, scalar_values)
    graph = gm.graph if hasattr(gm, "graph") else gm
    if hasattr(gm, "graph"):
        ctx.graph_index[id(gm)] = 0
    ctx.graphs[0] = conv.convert()
    md = {"fxfuse_export.version": __version__}
    try:
        from torch._inductor import config as icfg
        md["enable_auto_functionalized_v2"] = str(bool(getattr(icfg, "enable_auto_functionalized_v2")))
    except Exception:
        pass
    if ctx.warnings:
        md["fxfuse_export.warnings"] = _cap(json.dumps(ctx.warnings, sort_keys=True), 4096)
    md.update({str(k): str(v) for k, v in (metadata or {}).items()})
    mod = {
        "ir_major": IR_MAJOR,
        "ir_minor": IR_MINOR,
        "producer": {"tool": TOOL, "torch_version": str(torch.__version__),
                     "stage": _enum_stage(stage), "functional": bool(conv.functional)},
        "graphs": ctx.graphs,
        "symbols": ctx.symbol_table(),
        "op_schemas": [{"name": k, "schema": v} for k, v in sorted(ctx.schemas.items())],
        "metadata": md,
    }
    if weights:
        mod["weights"] = weights
    return mod


def dumps(mod, indent=None):
    return json.dumps(mod, indent=indent, separators=(",", ":") if indent is None else None,
                      allow_nan=False, sort_keys=False)


def write_module(mod, path, *, max_bytes=DEFAULT_MAX_BYTES, indent=None):
    """Write a Module dict as proto3 JSON (`*.json`) or, if the name ends in `.pb`/`.fxg`
    and the generated `fxfuse_ir_pb2` module plus protobuf are importable, binary.
    Returns the path written, or None when the size guard refused it."""
    text = dumps(mod, indent)
    if len(text) > max_bytes:
        # drop per-node meta first (stack traces dominate), then give up
        for g in mod.get("graphs", []):
            for n in g.get("nodes", []):
                n.pop("meta", None)
        mod.setdefault("metadata", {})["fxfuse_export.meta_dropped"] = "size"
        text = dumps(mod, indent)
        if len(text) > max_bytes:
            log.error("fxfuse_export: %s would be %d bytes (> %d); not written", path, len(text), max_bytes)
            return None
    d = os.path.dirname(os.path.abspath(path))
    os.makedirs(d, exist_ok=True)
    if str(path).endswith((".pb", ".fxg")):
        try:
            from google.protobuf import json_format
            import fxfuse_ir_pb2  # generated from proto/fxfuse_ir.proto
            msg = json_format.Parse(text, fxfuse_ir_pb2.Module())
            data = msg.SerializeToString()
            tmp = str(path) + ".tmp"
            with open(tmp, "wb") as f:
                f.write(data)
            os.replace(tmp, path)
            return path
        except ImportError:
            path = str(path) + ".json"
            log.warning("fxfuse_export: protobuf/fxfuse_ir_pb2 not importable; writing %s", path)
    tmp = str(path) + ".tmp"
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, path)
    return path


def readable_text(gm):
    """print_readable with strides and devices (when this torch supports it) + str(graph)."""
    graph = gm.graph if hasattr(gm, "graph") else gm
    mod = gm if isinstance(gm, torch.fx.GraphModule) else graph.owning_module
    parts = []
    if mod is not None:
        try:
            parts.append(mod.print_readable(print_output=False, include_stride=True, include_device=True))
        except TypeError:
            try:
                parts.append(mod.print_readable(print_output=False))
            except TypeError:  # torch 1.13: print_readable() always prints
                parts.append(mod.code)
    parts.append("\n\n==== str(graph) ====\n" + str(graph))
    return "".join(parts)


# ---- ExportedProgram -----------------------------------------------------------------

_IN_KINDS = {"USER_INPUT": "USER_INPUT", "PARAMETER": "PARAMETER", "BUFFER": "BUFFER",
             "CONSTANT_TENSOR": "CONSTANT_TENSOR", "CUSTOM_OBJ": "CUSTOM_OBJ", "TOKEN": "TOKEN"}
_OUT_KINDS = {"USER_OUTPUT": "USER_OUTPUT", "LOSS_OUTPUT": "LOSS_OUTPUT",
              "BUFFER_MUTATION": "BUFFER_MUTATION", "USER_INPUT_MUTATION": "USER_INPUT_MUTATION"}


def exported_program_to_module(ep, stage=None, with_meta=True, metadata=None):
    sig = ep.graph_signature
    ins, outs = {}, []
    for spec in sig.input_specs:
        k = _IN_KINDS.get(spec.kind.name, "INPUT_KIND_UNSPECIFIED")
        ins[getattr(spec.arg, "name", "")] = (k, spec.target or "")
    for spec in sig.output_specs:
        outs.append((_OUT_KINDS.get(spec.kind.name, "OTHER_OUTPUT"), spec.target or ""))
    weights = []
    tmp_ctx = _Ctx()
    try:
        params = set(dict(ep.named_parameters()).keys()) if hasattr(ep, "named_parameters") else set()
    except Exception:
        params = set()
    for fqn, t in list(getattr(ep, "state_dict", {}).items()) + list(getattr(ep, "constants", {}).items()):
        if isinstance(t, torch.Tensor):
            try:
                weights.append({"fqn": fqn, "type": _tensor_type(tmp_ctx, t), "is_param": fqn in params})
            except Exception:
                pass
    if stage is None:
        stage = "EXPORT_CORE_ATEN" if _is_functional_graph(ep.graph) else "EXPORT_TRAIN_IR"
    md = {"source": "torch.export"}
    md.update(metadata or {})
    return graph_to_module(ep.graph_module, stage, with_meta=with_meta, input_specs=ins,
                           output_specs=outs, range_constraints=getattr(ep, "range_constraints", None),
                           metadata=md, weights=weights)


def _is_functional_graph(graph):
    for n in graph.nodes:
        if n.op == "call_function" and _is_opoverload(n.target) and _mutates(n.target):
            return False
    return True


def export_program(ep, path=None, decompose="none", with_meta=True, max_bytes=DEFAULT_MAX_BYTES):
    """ExportedProgram in, file out. decompose: "none" (training IR as given), "core"
    (`run_decompositions()`, core ATen) or "inductor" (Inductor's decomposition table).
    Returns (module_dict, path_written)."""
    if decompose == "core":
        ep = ep.run_decompositions()
        stage = "EXPORT_CORE_ATEN"
    elif decompose == "inductor":
        from torch._inductor.decomposition import select_decomp_table
        ep = ep.run_decompositions(select_decomp_table())
        stage = "EXPORT_CORE_ATEN"
    else:
        stage = None
    mod = exported_program_to_module(ep, stage, with_meta)
    written = write_module(mod, path, max_bytes=max_bytes) if path else None
    return mod, written


# ---- make_fx (torch 1.13 and 2.x without Dynamo) ------------------------------------

def _functionalize():
    try:
        from torch.func import functionalize
        return functionalize
    except Exception:
        from functorch.experimental import functionalize
        return functionalize


def make_fx_program(fn, args, path=None, symbolic=True, functionalize=True, with_meta=True,
                    input_kinds=None, max_bytes=DEFAULT_MAX_BYTES, metadata=None):
    """Trace `fn(*args)` with make_fx (+ functionalization), write it, return (gm, module).

    This is the torch 1.13 path (Debian's python3-torch). `input_kinds` optionally gives
    (InputKind, target) per positional input."""
    from torch.fx.experimental.proxy_tensor import make_fx
    f = _functionalize()(fn, remove="mutations") if functionalize else fn
    gm = make_fx(f, tracing_mode="symbolic" if symbolic else "fake")(*args)
    _dce_keep_mutations(gm.graph)  # our own traced graph, not the user's
    gm.recompile()
    specs = {}
    if input_kinds:
        phs = [n for n in gm.graph.nodes if n.op == "placeholder"]
        for n, kt in zip(phs, input_kinds):
            specs[n.name] = kt
    mod = graph_to_module(gm, "MAKE_FX", with_meta=with_meta, input_specs=specs,
                          metadata=dict(metadata or {}, functionalized=str(bool(functionalize))))
    if path:
        write_module(mod, path, max_bytes=max_bytes)
    return gm, mod


def _dce_keep_mutations(graph):
    """Dead-code elimination that keeps ops which write to an argument (torch 1.13's
    eliminate_dead_code drops an unused in-place custom op)."""
    changed = True
    while changed:
        changed = False
        for n in reversed(list(graph.nodes)):
            if n.op not in ("call_function", "call_method", "call_module") or n.users:
                continue
            t = n.target
            if n.op == "call_function" and _is_packet(t):
                t = resolve_overload(t, n.args, n.kwargs) or t
            if n.op != "call_function" or (_is_opoverload(t) and _mutates(t)) or not (
                    _is_opoverload(t) or _is_getitem(n)):
                continue
            graph.erase_node(n)
            changed = True


def make_fx_module(module, args, path=None, symbolic=True, functionalize=True, **kw):
    """make_fx_program for an nn.Module: parameters and buffers become graph inputs
    (InputKind PARAMETER / BUFFER with their FQN), then the user inputs."""
    try:
        from torch.func import functional_call
    except Exception:
        from torch.nn.utils.stateless import functional_call
    pnames = [k for k, _ in module.named_parameters()]
    bnames = [k for k, _ in module.named_buffers()]
    state = [t for _, t in module.named_parameters()] + [t for _, t in module.named_buffers()]
    names = pnames + bnames
    nstate = len(state)

    def fn(*flat):
        return functional_call(module, dict(zip(names, flat[:nstate])), tuple(flat[nstate:]))

    kinds = ([("PARAMETER", k) for k in pnames] + [("BUFFER", k) for k in bnames] +
             [("USER_INPUT", "")] * len(args))
    with torch.no_grad():
        return make_fx_program(fn, [s.detach() for s in state] + list(args), path, symbolic,
                               functionalize, input_kinds=kinds, **kw)


# ---- Inductor custom pass and torch.compile backend ------------------------------

try:  # torch >= 2.5
    from torch._inductor.custom_graph_pass import CustomGraphPass as _PassBase
except Exception:  # torch 1.13 / older 2.x
    _PassBase = object


def _rank_suffix():
    for k in ("RANK", "LOCAL_RANK"):
        if os.environ.get(k):
            return ".rank" + re.sub(r"[^0-9A-Za-z]", "", os.environ[k])
    return ""


def _compile_id():
    try:
        from torch._guards import CompileContext
        cid = CompileContext.current_compile_id()
        if cid is not None:
            return re.sub(r"[^0-9A-Za-z]+", "_", str(cid)).strip("_")
    except Exception:
        pass
    return ""


class DumpPass(_PassBase):
    """Inductor custom graph pass that writes the graph it sees and changes nothing.

    Use as `torch._inductor.config.post_grad_custom_pre_pass` / `post_grad_custom_post_pass`
    (or in vLLM's `inductor_compile_config`). Files: `<out_dir>/<prefix>[.rank<r>].<stage>
    .<n>[.c<compile id>].fxg.json` with n counting calls of this pass object (deterministic
    for a deterministic program). With the FX graph cache on, cache hits skip the pass:
    set `torch._inductor.config.force_disable_caches = True` to dump every graph.
    """

    def __init__(self, out_dir, prefix="graph", stage="post_grad_pre", chain=None,
                 write_text=False, max_bytes=DEFAULT_MAX_BYTES, max_files=10000,
                 with_meta=True, on_dump=None, scalar_values=None):
        self.out_dir = str(out_dir)
        self.prefix = prefix
        self.stage = _enum_stage(stage)
        self.chain = chain
        self.write_text = write_text
        self.max_bytes = max_bytes
        self.max_files = max_files
        self.with_meta = with_meta
        self.on_dump = on_dump
        self.scalar_values = scalar_values  # {placeholder index: value} of lifted scalars
        self.count = 0
        self.written = []
        self._lock = threading.Lock()

    def uuid(self):
        h = hashlib.sha256(("%s|%s|%s" % (TOOL, self.stage, self.prefix)).encode()).hexdigest()[:16]
        chained = self.chain.uuid() if self.chain is not None and hasattr(self.chain, "uuid") else None
        return "fxfuse_export-%s-%s" % (h, chained) if chained else "fxfuse_export-" + h

    def base_name(self, idx):
        cid = _compile_id()
        return "%s%s.%s.%03d%s" % (self.prefix, _rank_suffix(), self.stage.lower(), idx,
                                   (".c" + cid) if cid else "")

    def __call__(self, graph):
        try:
            self._dump(graph)
        except Exception:  # noqa: BLE001 - never break the user's compile
            log.warning("fxfuse_export: dump failed (compile continues)", exc_info=True)
        if self.chain is not None:
            return self.chain(graph)
        return None

    def _dump(self, graph):
        with self._lock:
            idx = self.count
            self.count += 1
        if idx >= self.max_files:
            return
        base = os.path.join(self.out_dir, self.base_name(idx))
        gm = graph.owning_module if isinstance(graph, torch.fx.Graph) else graph
        mod = graph_to_module(graph if gm is None else gm, self.stage, with_meta=self.with_meta,
                              metadata={"pass": "DumpPass", "index": idx}, scalar_values=self.scalar_values)
        path = write_module(mod, base + ".fxg.json", max_bytes=self.max_bytes)
        txt = None
        if self.write_text:
            text = readable_text(gm if gm is not None else graph)
            txt = base + ".txt"
            with open(txt, "w") as f:
                f.write(text)
        if path:
            self.written.append(path)
        if self.on_dump is not None:
            self.on_dump(graph, mod, path, txt)


def inductor_pass(out_dir, stage="post_grad_pre", **kw):
    """A DumpPass for `post_grad_custom_pre_pass` (stage post_grad_pre) or
    `post_grad_custom_post_pass` (stage post_grad_post)."""
    return DumpPass(out_dir, stage=stage, **kw)


def vllm_pass(out_dir, stage="post_grad_pre", **kw):
    """DumpPass that is also a vLLM InductorPass when vLLM is importable, so it can go
    into `CompilationConfig(inductor_compile_config={"post_grad_custom_pre_pass": p})`
    or `{"post_grad_custom_post_pass": p}` (appended after vLLM's fusions)."""
    base = None
    for modname in ("vllm.compilation.passes.inductor_pass", "vllm.compilation.inductor_pass"):
        try:
            m = __import__(modname, fromlist=["InductorPass"])
            base = getattr(m, "InductorPass")
            break
        except Exception:
            continue
    if base is None:
        return DumpPass(out_dir, stage=stage, **kw)
    cls = type("FxfuseVllmDumpPass", (DumpPass, base), {})
    return cls(out_dir, stage=stage, **kw)


def backend(out_dir, stage="post_grad_pre", prefix="graph", **kw):
    """torch.compile backend: dumps the graph at `stage` and compiles normally.

    stage: "post_grad_pre" / "post_grad_post" (Inductor, via the custom pass hooks),
    "aot" (aot_autograd forward graph with Inductor's decompositions, then Inductor),
    "dynamo" (the Dynamo graph, then Inductor)."""
    st = _enum_stage(stage)

    def _backend(gm, example_inputs):
        from torch._inductor.compile_fx import compile_fx
        # Dynamo's example inputs hold the real values of lifted Python numbers; the inference
        # graphs after it keep Dynamo's placeholder order, so the index identifies them.
        kw.setdefault("scalar_values", lifted_scalar_values(example_inputs))
        if st in ("POST_GRAD_PRE", "POST_GRAD_POST"):
            from torch._inductor import config as icfg
            key = "post_grad_custom_pre_pass" if st == "POST_GRAD_PRE" else "post_grad_custom_post_pass"
            p = DumpPass(out_dir, prefix=prefix, stage=st, chain=getattr(icfg, key, None), **kw)
            return compile_fx(gm, example_inputs, config_patches={key: p})
        dp = DumpPass(out_dir, prefix=prefix, stage=st, **kw)
        if st == "DYNAMO":
            dp(gm.graph)
            return compile_fx(gm, example_inputs)
        if st == "AOT_FORWARD":
            try:
                from torch._dynamo.backends.common import aot_autograd
                from torch._inductor.decomposition import select_decomp_table

                def fw(g, ex):
                    dp(g.graph)
                    return g.forward
                return aot_autograd(fw_compiler=fw, decompositions=select_decomp_table())(gm, example_inputs)
            except Exception:
                log.warning("fxfuse_export: aot dump failed; compiling normally", exc_info=True)
                return compile_fx(gm, example_inputs)
        return compile_fx(gm, example_inputs)
    return _backend
