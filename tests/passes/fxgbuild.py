"""A tiny builder of `.fxg` graphs for fxfuse's golden tests.

The node sequences follow the torch 2.11 traces of
`shared/docs/vllm-fusion-semantics.md` Appendix A (native forms) and §2.2 (custom-op forms,
auto_functionalized v1). `gen_tests.py` uses it to write the test files; the generated
files are checked in, so running the tests needs no Python.
"""

INT64_MAX = 9223372036854775807
MIN_SCALE = 1.0 / (448.0 * 512.0)


class DT:
    def __init__(self, name):
        self.name = name


class Op:
    def __init__(self, target):
        self.target = target


class Sym:
    def __init__(self, expr):
        self.expr = expr


class Raw:
    def __init__(self, text):
        self.text = text


class Val:
    def __init__(self, g, vid, typ):
        self.g, self.id, self.type = g, vid, typ

    @property
    def dtype(self):
        return self.type.split("[", 1)[0]

    @property
    def shape(self):
        return self.type.split("[", 1)[1].split("]", 1)[0]


def fmt_float(v):
    r = repr(float(v))
    if "e" not in r and "." not in r:
        r += ".0"
    return r


def fmt(a):
    if isinstance(a, Val):
        return "%%%d" % a.id
    if isinstance(a, bool):
        return "true" if a else "false"
    if isinstance(a, int):
        return str(a)
    if isinstance(a, float):
        return fmt_float(a)
    if isinstance(a, str):
        return '"%s"' % a
    if isinstance(a, DT):
        return a.name
    if isinstance(a, Op):
        return "@" + a.target
    if isinstance(a, Sym):
        return "sym(%s)" % a.expr
    if isinstance(a, Raw):
        return a.text
    if a is None:
        return "None"
    if isinstance(a, (list, tuple)):
        return "[" + ", ".join(fmt(x) for x in a) + "]"
    raise TypeError(a)


class G:
    def __init__(self, symbols=(("s0", 2, 8192, 257),)):
        self.symbols = symbols
        self.lines = []
        self.inputs = []
        self.next = 1
        self.names = {}

    def _name(self, base):
        base = base.split(".")[-2] if "." in base else base
        n = self.names.get(base, 0)
        self.names[base] = n + 1
        return base if n == 0 else "%s_%d" % (base, n)

    def inp(self, name, typ, kind=None, target=None):
        v = Val(self, self.next, typ)
        self.next += 1
        line = 'input %%%d "%s": %s' % (v.id, name, typ)
        if kind:
            line += " " + kind
        if target:
            line += ' "%s"' % target
        self.inputs.append(line)
        return v

    def op(self, target, args, outs, name=None, kw_from=None):
        """args: list of (name, value); outs: a type string, or a list (None = null slot)."""
        single = isinstance(outs, str)
        outs_l = [outs] if single else outs
        vals, parts = [], []
        for t in outs_l:
            if t is None:
                vals.append(None)
                parts.append("_")
            else:
                v = Val(self, self.next, t)
                self.next += 1
                vals.append(v)
                parts.append("%%%d: %s" % (v.id, t))
        arg_s = []
        for i, (k, a) in enumerate(args):
            if kw_from is not None and i == kw_from:
                arg_s.append("*")
            arg_s.append(fmt(a) if k is None else "%s=%s" % (k, fmt(a)))
        lhs = (", ".join(parts) + " = ") if outs_l else ""
        self.lines.append("%s%s(%s)  // %s" % (lhs, target, ", ".join(arg_s), name or self._name(target)))
        return vals[0] if single else vals

    def output(self, *vals):
        for v in vals:
            self.lines.append("output %%%d" % v.id)

    def text(self):
        out = ["fxfuse.module {"]
        for s, lo, hi, hint in self.symbols:
            out.append("  symbol %s range=[%s, %s] hint=%d" % (s, lo, "?" if hi is None else hi, hint))
        out.append("  graph @main {")
        out += ["    " + l for l in self.inputs + self.lines]
        out.append("  }")
        out.append("}")
        return "\n".join(out) + "\n"


def ty(dtype, shape):
    return "%s[%s]" % (dtype, shape)


def retype(v, dtype):
    return ty(dtype, v.shape)


# ----------------------------------------------------------------------------- native forms

def P(g, x, dtype):
    return g.op("prims.convert_element_type.default", [("a", x), ("dtype", DT(dtype))], retype(x, dtype))


def native_rms(g, x, w, eps, residual=None, model_dtype="bf16", keep_residual=True, eps_value=None):
    """vLLM RMSNorm.forward_static as Inductor writes it (Appendix A)."""
    rows = x.shape.rsplit(",", 1)[0]
    xf = x if x.dtype == "f32" else P(g, x, "f32")
    res_out = None
    if residual is not None:
        xf = g.op("aten.add.Tensor", [("self", xf), ("other", residual)], retype(xf, "f32"))
        if keep_residual:
            res_out = P(g, xf, model_dtype)
    p = g.op("aten.pow.Tensor_Scalar", [("self", xf), ("exponent", 2)], xf.type)
    m = g.op("aten.mean.dim", [("self", p), ("dim", [-1]), ("keepdim", True)], "f32[%s, 1]" % rows)
    a = g.op("aten.add.Tensor", [("self", m), ("other", eps if eps_value is None else eps_value)], m.type)
    r = g.op("aten.rsqrt.default", [("self", a)], m.type)
    n = g.op("aten.mul.Tensor", [("self", xf), ("other", r)], xf.type)
    c = P(g, n, model_dtype)
    if w is None:
        return c, res_out
    y = g.op("aten.mul.Tensor", [("self", c), ("other", w)], retype(c, model_dtype))
    return y, res_out


def native_quant_static(g, x, scale, divide=False):
    xf = P(g, x, "f32")
    if divide:
        m = g.op("aten.div.Tensor", [("self", xf), ("other", scale)], xf.type)
    else:
        rc = g.op("aten.reciprocal.default", [("self", scale)], scale.type)
        m = g.op("aten.mul.Tensor", [("self", xf), ("other", rc)], xf.type)
    lo = g.op("aten.clamp_min.default", [("self", m), ("min", -448.0)], xf.type)
    hi = g.op("aten.clamp_max.default", [("self", lo), ("max", 448.0)], xf.type)
    return P(g, hi, "f8e4m3fn")


def native_quant_dynamic(g, x, per_tensor=False):
    rows = x.shape.rsplit(",", 1)[0]
    ab = g.op("aten.abs.default", [("self", x)], x.type)
    if per_tensor:
        mx = g.op("aten.max.default", [("self", ab)], "%s[]" % x.dtype)
        us = g.op("aten.unsqueeze.default", [("self", mx), ("dim", -1)], "%s[1]" % x.dtype)
    else:
        mx, _ = g.op("aten.max.dim", [("self", ab), ("dim", -1)], ["%s[%s]" % (x.dtype, rows), None])
        us = g.op("aten.unsqueeze.default", [("self", mx), ("dim", -1)], "%s[%s, 1]" % (x.dtype, rows))
    sf = P(g, us, "f32")
    dv = g.op("aten.div.Tensor", [("self", sf), ("other", 448.0)], sf.type)
    s = g.op("aten.clamp_min.default", [("self", dv), ("min", MIN_SCALE)], sf.type)
    xf = P(g, x, "f32")
    rc = g.op("aten.reciprocal.default", [("self", s)], s.type)
    m = g.op("aten.mul.Tensor", [("self", xf), ("other", rc)], xf.type)
    lo = g.op("aten.clamp_min.default", [("self", m), ("min", -448.0)], xf.type)
    hi = g.op("aten.clamp_max.default", [("self", lo), ("max", 448.0)], xf.type)
    return P(g, hi, "f8e4m3fn"), s


def native_silu_and_mul(g, x, d, dtype="bf16"):
    rows = x.shape.rsplit(",", 1)[0]
    gate = g.op("aten.slice.Tensor", [("self", x), ("dim", 1), ("start", 0), ("end", d)], ty(dtype, "%s, %d" % (rows, d)))
    gf = P(g, gate, "f32")
    ng = g.op("aten.neg.default", [("self", gf)], gf.type)
    ex = g.op("aten.exp.default", [("self", ng)], gf.type)
    ad = g.op("aten.add.Tensor", [("self", ex), ("other", 1)], gf.type)
    dv = g.op("aten.div.Tensor", [("self", gf), ("other", ad)], gf.type)
    h = P(g, dv, dtype)
    up = g.op("aten.slice.Tensor", [("self", x), ("dim", 1), ("start", d), ("end", INT64_MAX)], gate.type)
    return g.op("aten.mul.Tensor", [("self", h), ("other", up)], gate.type)


# ----------------------------------------------------------------------------- custom-op forms

def AF(g, op, kwargs, outs):
    return g.op("higher_order.auto_functionalized", [(None, Op(op))] + list(kwargs), outs, kw_from=1,
                name=g._name("auto_functionalized"))


def empty(g, sizes, dtype, typ):
    return g.op("aten.empty.memory_format",
                [("size", sizes), ("dtype", DT(dtype)), ("layout", Raw("layout.strided")),
                 ("device", Raw("device(cuda:0)")), ("pin_memory", False)], typ)


def custom_rms(g, x, w, eps, residual=None, sizes=None):
    if residual is None:
        buf = g.op("aten.empty_like.default", [("self", x), ("memory_format", Raw("memory_format.contiguous"))], x.type)
        _, out = AF(g, "_C.rms_norm.default",
                    [("result", buf), ("input", x), ("weight", w), ("epsilon", eps)], [None, x.type])
        return out, None
    _, out, res = AF(g, "_C.fused_add_rms_norm.default",
                     [("input", x), ("residual", residual), ("weight", w), ("epsilon", eps)],
                     [None, x.type, residual.type])
    return out, res


def custom_quant_static(g, x, scale, sizes):
    buf = empty(g, sizes, "f8e4m3fn", retype(x, "f8e4m3fn"))
    _, q = AF(g, "_C.static_scaled_fp8_quant.default", [("result", buf), ("input", x), ("scale", scale)],
              [None, buf.type])
    return q


def custom_quant_dynamic(g, x, sizes, per_tensor=False):
    buf = empty(g, sizes, "f8e4m3fn", retype(x, "f8e4m3fn"))
    rows = x.shape.rsplit(",", 1)[0]
    if per_tensor:
        sb = g.op("aten.zeros.default", [("size", [1]), ("dtype", DT("f32")), ("device", Raw("device(cuda:0)"))],
                  "f32[1]")
        _, q, s = AF(g, "_C.dynamic_scaled_fp8_quant.default", [("result", buf), ("input", x), ("scale", sb)],
                     [None, buf.type, sb.type])
        return q, s
    sb = empty(g, [sizes[0], 1], "f32", "f32[%s, 1]" % rows)
    _, q, s = AF(g, "_C.dynamic_per_token_scaled_fp8_quant.default",
                 [("result", buf), ("input", x), ("scale", sb), ("scale_ub", None)], [None, buf.type, sb.type])
    return q, s


def custom_silu_and_mul(g, x, sizes, d, dtype="bf16"):
    rows = x.shape.rsplit(",", 1)[0]
    buf = empty(g, sizes, dtype, ty(dtype, "%s, %d" % (rows, d)))
    _, out = AF(g, "_C.silu_and_mul.default", [("result", buf), ("input", x)], [None, buf.type])
    return out


def scaled_mm(g, q, w, scale_a, scale_b, n, rows):
    return g.op("aten._scaled_mm.default",
                [("self", q), ("mat2", w), ("scale_a", scale_a), ("scale_b", scale_b), ("bias", None),
                 ("scale_result", None), ("out_dtype", DT("bf16"))], "bf16[%s, %d]" % (rows, n))


def all_reduce(g, x):
    return g.op("vllm.all_reduce.default", [("tensor", x), ("group_name", "tp:0")], x.type)
