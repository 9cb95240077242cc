#!/usr/bin/env python3
"""Tests of tools/fxfuse_export on torch 1.13 (Debian's python3-torch, CPU): the make_fx +
functionalize path end to end (trace -> file -> checks of the written JSON), plus
conformance of the committed torch 2.11 fixtures (tests/data) to proto/fxfuse_ir.proto.

    /usr/bin/python3 tests/exporter/test_exporter_113.py              # run, prints "N passed, M failed"
    ... --out DIR                 # keep the written files and DIR/expected_counts.json
    ... --expect-json FILE        # print {"ops": {...}, "nodes": N} expected for a written/fixture file
    ... --inspect-cmd 'bazel run //:fxfuse -- inspect {} --json'
                                  # also run the command on every written file and compare its
                                  # "ops" with the traced graph's histogram (one test per file)

Exit status is non-zero when a test failed. Works without torch for the fixture checks
(torch tests are then reported as skipped); python3-protobuf is optional (strict parse).
"""
import argparse
import glob
import json
import os
import shlex
import subprocess
import sys
import tempfile
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "tools"))
sys.path.insert(0, HERE)

import proto_json_check as pjc  # noqa: E402

try:
    import torch
    import fxfuse_export as fe
    HAVE_TORCH = True
except Exception as _e:  # noqa: BLE001
    HAVE_TORCH = False
    TORCH_ERR = repr(_e)

DATA = os.path.join(ROOT, "tests", "data")
OUT = None
EXPECTED = {}   # file name -> {"ops": ..., "nodes": ...} from the traced FX graph
WRITTEN = []
TESTS = []


class Skip(Exception):
    pass


def test(fn):
    TESTS.append(fn)
    return fn


def need_torch():
    if not HAVE_TORCH:
        raise Skip("torch not importable: " + TORCH_ERR)


def expect(cond, msg="check failed"):
    if not cond:
        raise AssertionError(msg)


def write(name, gm, mod):
    """Write mod as OUT/name, record the FX histogram as the expected inspect result."""
    path = os.path.join(OUT, name)
    fe.write_module(mod, path)
    h = fe.op_histogram(gm)
    EXPECTED[name] = {"ops": h, "nodes": sum(h.values())}
    WRITTEN.append(path)
    return path, json.load(open(path))


def conforms(m):
    errs = pjc.check(m) + pjc.semantic_errors(m)
    expect(not errs, "schema/semantic errors: %s" % errs[:5])


def nodes(m, g=0):
    return m["graphs"][g]["nodes"]


def values(m, g=0):
    return {v["id"]: v for v in m["graphs"][g]["values"]}


def hist_check(gm, m):
    h1, h2 = fe.op_histogram(gm), fe.module_histogram(m)
    expect(h1 == h2, "histogram fx %s != json %s" % (h1, h2))
    # node for node: same call nodes (minus getitem) in the same order
    fx = [n.name for n in gm.graph.nodes if n.op == "call_function" and not fe.exporter._is_getitem(n)]
    expect(fx == [n["name"] for n in nodes(m)], "node lists differ")


# ------------------------------------------------------------------------------- torch tests

@test
def test_mlp_symbolic_functionalized():
    need_torch()

    def f(x, w, b):
        y = torch.addmm(b, x, w.t())
        y.relu_()               # in-place: must be functionalized away
        z = y.view(-1, 2)
        return y.sum(-1), z * 2.0

    args = (torch.randn(6, 4), torch.randn(10, 4), torch.randn(10))
    gm, m0 = fe.make_fx_program(f, args)
    path, m = write("mlp_symbolic.fxg.json", gm, m0)
    conforms(m)
    hist_check(gm, m)
    expect(m["producer"]["stage"] == "MAKE_FX" and m["producer"]["functional"] is True)
    expect("aten.relu.default" in fe.module_histogram(m) and "aten.relu_.default" not in fe.module_histogram(m))
    expect(m["ir_major"] == 1 and m["producer"]["torch_version"] == str(torch.__version__))
    vals = values(m)
    ins = m["graphs"][0]["inputs"]
    expect([i["kind"] for i in ins] == ["USER_INPUT"] * 3)
    x = vals[ins[0]["value"]]
    expect(x["kind"] == "TENSOR" and x["tensor"]["dtype"] == "F32")
    expect(x["tensor"]["device"] == {"type": "cpu", "index": -1})
    expect(all("sym" in d for d in x["tensor"]["shape"]), "symbolic dims expected: %s" % x["tensor"]["shape"])
    expect(x["tensor"]["stride"][1] == {"int": 1} and x["tensor"]["storage_offset"] == {"int": 0})
    syms = {s["name"]: s for s in m["symbols"]}
    expect(len(syms) == 3, "3 distinct sizes -> 3 symbols, got %s" % list(syms))
    hints = sorted(s["hint"] for s in syms.values())
    expect(hints == [4, 6, 10], hints)
    expect(all(s["source"].startswith("t") and ".size(" in s["source"] for s in syms.values()))
    # the view's first dim is an expression tree, not a string
    view = [n for n in nodes(m) if n["target"] == "aten.view.default"][0]
    vshape = vals[view["outputs"][0]]["tensor"]["shape"]
    expect("apply" in vshape[0] and vshape[0]["apply"]["fn"] == "FLOOR_DIV", vshape)
    # schemas for every op
    names = {s["name"] for s in m["op_schemas"]}
    expect(names == set(fe.module_histogram(m)), (names, fe.module_histogram(m)))
    expect(all("::" in s["schema"] for s in m["op_schemas"]))
    # args by schema name
    addmm = [n for n in nodes(m) if n["target"] == "aten.addmm.default"][0]
    expect([a["name"] for a in addmm["args"]] == ["self", "mat1", "mat2"], addmm["args"])
    expect(addmm["kind"] == "OP" and all(a["keyword"] is False for a in addmm["args"]))
    expect(addmm["args"][1]["value"] == {"value": ins[0]["value"]})
    # outputs
    outs = m["graphs"][0]["outputs"]
    expect(len(outs) == 2 and all(o["kind"] == "USER_OUTPUT" and o["value"] in vals for o in outs))


@test
def test_module_parameters_fake():
    need_torch()
    mod = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
    mod.register_buffer("scale", torch.ones(4))
    gm, m0 = fe.make_fx_module(mod, (torch.randn(3, 8),), symbolic=False)
    path, m = write("module_fake.fxg.json", gm, m0)
    conforms(m)
    hist_check(gm, m)
    ins = m["graphs"][0]["inputs"]
    kinds = [(i["kind"], i.get("target", "")) for i in ins]
    expect(kinds == [("PARAMETER", "0.weight"), ("PARAMETER", "0.bias"), ("PARAMETER", "2.weight"),
                     ("PARAMETER", "2.bias"), ("BUFFER", "scale"), ("USER_INPUT", "")], kinds)
    vals = values(m)
    w = vals[ins[0]["value"]]["tensor"]
    expect(w["shape"] == [{"int": 16}, {"int": 8}] and w["stride"] == [{"int": 8}, {"int": 1}], w)
    expect(m["symbols"] == [], "fake mode: no symbols")
    # nn_module_stack / stack trace are optional in 1.13; loc when present must be well formed
    for n in nodes(m):
        if "loc" in n:
            expect(isinstance(n["loc"]["line"], int) and n["loc"]["file"])


@test
def test_multi_output_getitem_folding():
    need_torch()

    def f(x):
        a, b, c = x.split([2, 3, 3], dim=1)     # b unused -> 0 slot
        mx = a.max(dim=-1)                     # (values, indices), indices unused
        return mx.values, c

    gm, m0 = fe.make_fx_program(f, (torch.randn(5, 8),), symbolic=False)
    path, m = write("multi_output.fxg.json", gm, m0)
    conforms(m)
    hist_check(gm, m)
    expect(not any(n["target"].endswith("getitem") for n in nodes(m)))
    byt = {n["target"]: n for n in nodes(m)}
    sp = byt["aten.split_with_sizes.default"]
    expect(len(sp["outputs"]) == 3 and sp["outputs"][1] == 0 and sp["outputs"][0] and sp["outputs"][2], sp["outputs"])
    mx = byt["aten.max.dim"]
    expect(len(mx["outputs"]) == 2 and mx["outputs"][1] == 0 and mx["outputs"][0], mx["outputs"])
    expect(mx["args"][0]["value"] == {"value": sp["outputs"][0]}, "user refers to the folded value")
    outs = [o["value"] for o in m["graphs"][0]["outputs"]]
    expect(outs == [mx["outputs"][0], sp["outputs"][2]], outs)
    vals = values(m)
    expect(vals[sp["outputs"][2]]["tensor"]["shape"] == [{"int": 5}, {"int": 3}])
    expect(vals[sp["outputs"][2]]["tensor"]["stride"] == [{"int": 8}, {"int": 1}])
    expect(vals[sp["outputs"][2]]["tensor"]["storage_offset"] == {"int": 5})


@test
def test_attr_encoding():
    need_torch()

    def f(x):
        y = torch.clamp(x, min=float("-inf"), max=3.0).to(torch.float16)
        z = torch.zeros(x.shape[0], 3, dtype=torch.bfloat16)
        s = x.sum(dim=[0, 1], keepdim=True)
        return y, z, s, torch.full((2,), float("nan"))

    gm, m0 = fe.make_fx_program(f, (torch.randn(6, 4),), symbolic=False)
    path, m = write("attrs.fxg.json", gm, m0)
    conforms(m)
    hist_check(gm, m)
    byt = {n["target"]: n for n in nodes(m)}
    args = lambda t: {a["name"]: a for a in byt[t]["args"]}  # noqa: E731
    cl = args("aten.clamp.default")
    expect(cl["min"]["value"] == {"special_float": "-inf"} and cl["max"]["value"] == {"f": 3.0}, cl)
    tc = args("aten._to_copy.default")
    expect(tc["dtype"]["value"] == {"dtype": "F16"} and tc["dtype"]["keyword"] is True, tc)
    zs = args("aten.zeros.default")
    expect(zs["size"]["value"] == {"list": {"items": [{"i": 6}, {"i": 3}]}}, zs["size"])
    expect(zs["dtype"]["value"] == {"dtype": "BF16"})
    expect(zs["device"]["value"] == {"device": {"type": "cpu", "index": -1}})
    expect(zs["pin_memory"]["value"] == {"b": False})
    sm = args("aten.sum.dim_IntList")
    expect(sm["dim"]["value"] == {"list": {"items": [{"i": 0}, {"i": 1}]}} and sm["keepdim"]["value"] == {"b": True})
    expect("dtype" not in sm, "defaulted kwarg omitted")
    fl = args("aten.full.default")
    expect(fl["fill_value"]["value"] == {"special_float": "nan"}, fl)
    vals = values(m)
    expect(vals[byt["aten.zeros.default"]["outputs"][0]]["tensor"]["dtype"] == "BF16")


@test
def test_symint_nodes():
    need_torch()

    def f(x):
        n = x.shape[0]
        return x.view(n * 2, -1).relu(), torch.zeros(n, 3)

    gm, m0 = fe.make_fx_program(f, (torch.randn(6, 4),))
    path, m = write("symint.fxg.json", gm, m0)
    conforms(m)
    hist_check(gm, m)
    byt = {n["target"]: n for n in nodes(m)}
    expect("aten.sym_size.int" in byt, list(byt))
    expect(byt["aten.sym_size.int"]["kind"] == "OP")
    mul = byt["_operator.mul"]
    expect(mul["kind"] == "SYM_PY" and [a["name"] for a in mul["args"]] == ["a", "b"], mul)
    vals = values(m)
    sv = vals[byt["aten.sym_size.int"]["outputs"][0]]
    expect(sv["kind"] == "SYM_INT" and "sym" in sv["sym_value"], sv)
    mv = vals[mul["outputs"][0]]
    expect(mv["kind"] == "SYM_INT" and mv["sym_value"]["apply"]["fn"] == "MUL", mv)
    view = byt["aten.view.default"]
    expect(view["args"][1]["value"]["list"]["items"][0] == {"value": mul["outputs"][0]})
    expect({s["name"] for s in m["op_schemas"]} >= {"aten.sym_size.int", "aten.view.default"})


@test
def test_custom_ops_and_mutation():
    need_torch()
    lib = torch.library.Library("fxfuse_t113", "DEF")
    lib.define("scale(Tensor x, float s) -> Tensor")
    lib.impl("scale", lambda x, s: x * s, "CompositeExplicitAutograd")
    lib.define("inc_(Tensor(a!) x) -> ()")

    def inc_(x):
        x.add_(1)
    lib.impl("inc_", inc_, "CompositeExplicitAutograd")
    test_custom_ops_and_mutation.lib = lib  # keep alive

    def f(x):
        return torch.ops.fxfuse_t113.scale(x, 0.5)
    gm, m0 = fe.make_fx_program(f, (torch.randn(3, 4),), symbolic=False)
    path, m = write("custom_op.fxg.json", gm, m0)
    conforms(m)
    hist_check(gm, m)
    sch = {s["name"]: s["schema"] for s in m["op_schemas"]}
    expect(sch.get("fxfuse_t113.scale.default") == "fxfuse_t113::scale(Tensor x, float s) -> Tensor", sch)
    expect(m["producer"]["functional"] is True)

    def g(x):
        y = x * 2
        torch.ops.fxfuse_t113.inc_(y)   # 1.13 cannot functionalize custom mutating ops
        return y
    gm, m0 = fe.make_fx_program(g, (torch.randn(3, 4),), symbolic=False, functionalize=False)
    path, m = write("custom_mutating_op.fxg.json", gm, m0)
    conforms(m)
    hist_check(gm, m)
    expect(fe.module_histogram(m).get("fxfuse_t113.inc_.default") == 1, "unused in-place op kept by DCE")
    expect(m["producer"]["functional"] is False)
    inc = [n for n in nodes(m) if n["target"] == "fxfuse_t113.inc_.default"][0]
    expect(inc["outputs"] == [], inc)
    expect("Tensor(a!) x" in {s["name"]: s["schema"] for s in m["op_schemas"]}["fxfuse_t113.inc_.default"])


@test
def test_dtypes():
    need_torch()

    def f(x):
        return (x.to(torch.bfloat16), x.to(torch.float16), x.to(torch.int64), x > 0,
                x.to(torch.uint8), x.to(torch.float64), x.to(torch.int32))
    gm, m0 = fe.make_fx_program(f, (torch.randn(2, 3),), symbolic=False)
    path, m = write("dtypes.fxg.json", gm, m0)
    conforms(m)
    hist_check(gm, m)
    vals = values(m)
    outs = [vals[o["value"]]["tensor"]["dtype"] for o in m["graphs"][0]["outputs"]]
    expect(outs == ["BF16", "F16", "I64", "BOOL", "U8", "F64", "I32"], outs)


@test
def test_sympy_walk():
    need_torch()
    import sympy
    from torch.fx.experimental.symbolic_shapes import FloorDiv
    ctx = fe.exporter._Ctx()
    s0, s1 = sympy.Symbol("s0", integer=True), sympy.Symbol("t1.size(0)", integer=True)
    e = ctx.walk(FloorDiv(s0 * 2 + s1, 3))
    expect(e["apply"]["fn"] == "FLOOR_DIV" and e["apply"]["args"][1] == {"int": 3}, e)
    add = e["apply"]["args"][0]["apply"]
    expect(add["fn"] == "ADD" and len(add["args"]) == 2, add)
    expect(ctx.renames["t1.size(0)"].startswith("s") and ctx.renames["s0"] == "s0", ctx.renames)
    expect(ctx.walk(sympy.Max(s0, 4))["apply"]["fn"] == "MAX")
    expect(ctx.walk(sympy.Min(s0, 4))["apply"]["fn"] == "MIN")
    expect(ctx.walk(sympy.Mod(s0, 4))["apply"]["fn"] == "MOD")
    expect(ctx.walk(sympy.Gt(s0, 4))["apply"]["fn"] == "GT")
    expect(ctx.walk(sympy.Eq(s0, 4))["apply"]["fn"] == "EQ")
    expect(ctx.walk(s0 ** 2)["apply"]["fn"] == "POW")
    expect(ctx.walk(sympy.Rational(1, 2)) == {"apply": {"fn": "TRUE_DIV", "args": [{"int": 1}, {"int": 2}]}})
    expect(ctx.walk(sympy.Integer(1 << 60)) == {"int": str(1 << 60)}, "large int64 as string")
    expect(ctx.walk(sympy.true) == {"boolean": True})
    op = ctx.walk(sympy.floor(s0 / 3 + sympy.Rational(1, 2)))
    expect(op["apply"]["fn"] == "OPAQUE" and op["apply"]["opaque_name"] == "floor", op)
    expect(ctx.walk(sympy.oo)["apply"]["fn"] == "OPAQUE")
    expect(ctx.sym(7) == {"int": 7} and ctx.sym(True) == {"boolean": True})


@test
def test_dump_pass_and_safety():
    need_torch()

    def f(x):
        return torch.relu(x) + 1
    gm, _ = fe.make_fx_program(f, (torch.randn(4, 4),), symbolic=False)
    d = os.path.join(OUT, "dump")
    p = fe.DumpPass(d, prefix="demo", stage="post_grad_pre", write_text=True)
    before = str(gm.graph)
    expect(p(gm.graph) is None)
    p(gm.graph)
    expect(str(gm.graph) == before, "graph mutated")
    files = sorted(os.listdir(d))
    expect(files == ["demo.post_grad_pre.000.fxg.json", "demo.post_grad_pre.000.txt",
                     "demo.post_grad_pre.001.fxg.json", "demo.post_grad_pre.001.txt"], files)
    a = open(os.path.join(d, files[0])).read()
    b = open(os.path.join(d, files[2])).read()
    expect(os.path.getsize(os.path.join(d, files[1])) > 100, "readable text written")
    expect(a.replace('"index":"0"', "") == b.replace('"index":"1"', ""), "deterministic output")
    m = json.loads(a)
    conforms(m)
    expect(m["producer"]["stage"] == "POST_GRAD_PRE")
    expect(fe.DumpPass(d, prefix="demo").uuid() == fe.DumpPass("/elsewhere", prefix="demo").uuid())
    expect(fe.DumpPass(d, prefix="demo").uuid() != fe.DumpPass(d, prefix="demo", stage="post_grad_post").uuid())
    # never raises, even on garbage
    import logging
    logging.getLogger("fxfuse_export").setLevel(logging.CRITICAL)
    p(None)
    p(object())
    chained = []
    p2 = fe.DumpPass(os.path.join(OUT, "nowhere", "\0bad"), chain=lambda g: chained.append(g))
    p2(gm.graph)
    expect(chained == [gm.graph], "chained pass still runs when dumping fails")
    # max_files bound
    p3 = fe.DumpPass(os.path.join(OUT, "dump3"), max_files=1)
    p3(gm.graph)
    p3(gm.graph)
    expect(len(os.listdir(os.path.join(OUT, "dump3"))) == 1)


@test
def test_lifted_scalar_values():
    """A 0-d CPU tensor input (a Python float Dynamo lifted) gets its value recorded as the
    input's scalar_value, from the backend's example inputs."""
    need_torch()

    def f(x, eps):
        return x * torch.rsqrt((x * x).mean(-1, keepdim=True) + eps)
    example = (torch.randn(4, 8), torch.tensor(1e-6, dtype=torch.float64))
    gm, _ = fe.make_fx_program(f, example, symbolic=False)
    expect(fe.lifted_scalar_values(example) == {1: 1e-6}, fe.lifted_scalar_values(example))
    m = fe.graph_to_module(gm, "AOT_FORWARD", scalar_values=fe.lifted_scalar_values(example))
    conforms(m)
    ins = m["graphs"][0]["inputs"]
    expect("scalar_value" not in ins[0], "a 2-d input records no value")
    expect(ins[1].get("scalar_value") == 1e-6, ins[1])


@test
def test_size_guard_and_determinism():
    need_torch()

    def f(x):
        return (x @ x.t()).softmax(-1)
    gm, m0 = fe.make_fx_program(f, (torch.randn(4, 4),), symbolic=False)
    gm2, m1 = fe.make_fx_program(f, (torch.randn(4, 4),), symbolic=False)
    expect(fe.dumps(m0) == fe.dumps(m1), "same program -> same bytes")
    n = len(fe.dumps(m0))
    path = os.path.join(OUT, "guard.fxg.json")
    expect(fe.write_module(json.loads(fe.dumps(m0)), path, max_bytes=50) is None and not os.path.exists(path))
    expect(fe.write_module(json.loads(fe.dumps(m0)), path, max_bytes=n + 10) == path)


@test
def test_protobuf_strict_parse():
    """Optional: every written file parses with protobuf's JSON parser (python3-protobuf +
    protoc), and the binary writer round-trips."""
    need_torch()
    try:
        from google.protobuf import json_format
    except Exception:
        raise Skip("python3-protobuf not installed")
    gen = os.path.join(OUT, "pb")
    os.makedirs(gen, exist_ok=True)
    r = subprocess.run(["protoc", "-I", os.path.join(ROOT, "proto"), "--python_out=" + gen,
                        os.path.join(ROOT, "proto", "fxfuse_ir.proto")], capture_output=True, text=True)
    if r.returncode != 0:
        raise Skip("protoc failed/missing: " + r.stderr[:200])
    sys.path.insert(0, gen)
    import fxfuse_ir_pb2 as pb
    for p in WRITTEN:
        msg = json_format.Parse(open(p).read(), pb.Module())
        expect(len(msg.graphs) >= 1)
    m = json.load(open(WRITTEN[0]))
    bp = fe.write_module(m, os.path.join(OUT, "bin.fxg"))
    expect(bp.endswith(".fxg"), bp)
    back = pb.Module()
    back.ParseFromString(open(bp, "rb").read())
    expect(len(back.graphs[0].nodes) == len(m["graphs"][0]["nodes"]))


def _apply_body(body, x):  # stands in for a higher-order op taking a subgraph
    return body(x)


@test
def test_subgraph_get_attr():
    need_torch()
    sub = torch.fx.symbolic_trace(torch.nn.ReLU())
    root = torch.nn.Module()
    root.body = sub
    g = torch.fx.Graph()
    x = g.placeholder("x")
    b = g.get_attr("body")
    y = g.call_function(_apply_body, (b, x))
    g.output(y)
    gm = torch.fx.GraphModule(root, g)
    m = fe.graph_to_module(gm, "DYNAMO")
    conforms(m)
    expect(len(m["graphs"]) == 2, len(m["graphs"]))
    call = m["graphs"][0]["nodes"][0]
    expect(call["args"][0] == {"name": "body", "value": {"graph": 1}}, call["args"])
    expect(m["graphs"][1]["name"] == "body" and len(m["graphs"][1]["inputs"]) == 1)
    expect(fe.op_histogram(gm) == fe.module_histogram(m), (fe.op_histogram(gm), fe.module_histogram(m)))


# ------------------------------------------------------------------------------- fixture tests

@test
def test_fixtures_conform_to_schema():
    files = sorted(glob.glob(os.path.join(DATA, "**", "*.fxg.json"), recursive=True))
    if not files:
        raise Skip("no fixtures")
    bad = []
    for f in files:
        m = json.load(open(f))
        errs = pjc.check(m) + pjc.semantic_errors(m)
        if errs:
            bad.append((os.path.relpath(f, DATA), errs[:3]))
    expect(not bad, bad[:3])


@test
def test_fixture_counts_match_expected():
    p = os.path.join(DATA, "expected_counts.json")
    if not os.path.exists(p):
        raise Skip("no expected_counts.json")
    exp = json.load(open(p))
    checked = 0
    for rel, ent in exp.items():
        f = os.path.join(DATA, rel)
        expect(os.path.exists(f), "listed fixture missing: " + rel)
        if rel.endswith(".fxg.json"):
            got = module_histogram_nojs(json.load(open(f)))
            expect(got == ent["ops"], "%s: %s != %s" % (rel, got, ent["ops"]))
            checked += 1
    expect(checked > 0)


@test
def test_fixture_auto_functionalized_v1_shape():
    f = os.path.join(DATA, "vllm", "vllm_fusion_custom_static_eps1e-5.post_grad.fxg.json")
    if not os.path.exists(f):
        raise Skip("fixture missing")
    m = json.load(open(f))
    af = [n for n in m["graphs"][0]["nodes"] if n["target"] == "higher_order.auto_functionalized"]
    expect(len(af) == 7, len(af))
    sch = {s["name"] for s in m["op_schemas"]}
    for n in af:
        expect(n["kind"] == "HOP" and n["args"][0]["name"] == "_mutable_op")
        op = n["args"][0]["value"]["op"]
        expect(op in sch, op)
        expect(all(a["keyword"] for a in n["args"][1:]))
        if op == "_C.fused_add_rms_norm.default":
            expect([a["name"] for a in n["args"][1:]] == ["input", "residual", "weight", "epsilon"])
            expect(len(n["outputs"]) == 3 and n["outputs"][0] == 0)


def module_histogram_nojs(m):
    h = {}
    for g in m.get("graphs", []):
        for n in g.get("nodes", []):
            h[n["target"]] = h.get(n["target"], 0) + 1
    return dict(sorted(h.items()))


# ------------------------------------------------------------------------------- driver

def expected_for(path):
    """Expected inspect result for a file written by this test (OUT/expected_counts.json)
    or for a committed fixture (tests/data/expected_counts.json)."""
    ap = os.path.abspath(path)
    for base in (os.path.dirname(ap), DATA):
        ec = os.path.join(base, "expected_counts.json")
        if os.path.exists(ec):
            exp = json.load(open(ec))
            rel = os.path.relpath(ap, base)
            if rel in exp:
                return exp[rel]
    raise SystemExit("no expected counts for " + path)


def main():
    global OUT
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", help="keep written files here (default: a temp dir)")
    ap.add_argument("--expect-json", metavar="FILE", help="print expected {'ops', 'nodes'} for FILE and exit")
    ap.add_argument("--inspect-cmd", help="command run per written file ('{}' = path); its JSON "
                    "'ops' must equal the traced graph's histogram")
    ap.add_argument("--fixtures", action="store_true", help="with --inspect-cmd: also check tests/data")
    args = ap.parse_args()
    if args.expect_json:
        print(json.dumps(expected_for(args.expect_json), sort_keys=True))
        return 0
    OUT = args.out or tempfile.mkdtemp(prefix="fxfuse_export_test_")
    os.makedirs(OUT, exist_ok=True)
    passed = failed = skipped = 0
    for t in TESTS:
        try:
            t()
            print("PASS", t.__name__)
            passed += 1
        except Skip as e:
            print("SKIP", t.__name__, "-", e)
            skipped += 1
        except Exception as e:  # noqa: BLE001
            print("FAIL", t.__name__, "-", repr(e)[:800])
            traceback.print_exc()
            failed += 1
    with open(os.path.join(OUT, "expected_counts.json"), "w") as f:
        json.dump(EXPECTED, f, indent=1, sort_keys=True)
    if args.inspect_cmd:
        targets = list(WRITTEN)
        if args.fixtures:
            exp = json.load(open(os.path.join(DATA, "expected_counts.json")))
            targets += [os.path.join(DATA, k) for k in sorted(exp) if k.endswith((".fxg.json", ".pt2"))]
        for p in targets:
            name = "inspect " + os.path.relpath(p, ROOT if p.startswith(DATA) else OUT)
            try:
                cmd = args.inspect_cmd.replace("{}", shlex.quote(p))
                r = subprocess.run(cmd, shell=True, capture_output=True, text=True, cwd=ROOT, timeout=600)
                expect(r.returncode == 0, "rc %d: %s" % (r.returncode, r.stderr[-500:]))
                got = json.loads(r.stdout[r.stdout.index("{"):])["ops"]
                want = expected_for(p)["ops"]
                expect(got == want, "ops differ: got %s want %s" % (got, want))
                print("PASS", name)
                passed += 1
            except Exception as e:  # noqa: BLE001
                print("FAIL", name, "-", repr(e)[:800])
                failed += 1
    if not args.out:
        print("(files in %s)" % OUT)
    print("%d passed, %d failed%s" % (passed, failed, ", %d skipped" % skipped if skipped else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
