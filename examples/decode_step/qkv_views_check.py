#!/usr/bin/env python3
"""Checks, in a plan's text form (`fxfuse compile --emit=plan-text`), that every rotary cache
write can become the epilogue of the q/k/v GEMM before it (docs/runtime.md "GEMM epilogues"):
the step right before it is a matmul, and its query, key and value are views of that matmul's
output at columns 0, Hq*E and (Hq+Hk)*E with the output's row stride and heads E apart. The
runtime decides on device pointers (SmallMFp8GemmWithRotaryCache); this is the same condition
on the plan, so a lowering change that breaks it fails on the CPU instead of silently leaving
the epilogue out on the GPU.

    qkv_views_check.py PLAN_TEXT EXPECTED_COUNT
"""
import re
import sys

TOKEN = re.compile(r'\s*(?:([A-Za-z_][A-Za-z0-9_]*)\s*(\{|:\s*("(?:[^"\\]|\\.)*"|[^\s{}]+))|(\}))')


def parse(text):
    """Protobuf text format as nested dicts: each field name maps to a list of values."""
    root, stack, pos = {}, [], 0
    node = root
    while pos < len(text.rstrip()):
        m = TOKEN.match(text, pos)
        if not m:
            raise ValueError("cannot read the plan text at offset %d" % pos)
        pos = m.end()
        name, brace, value, close = m.groups()
        if close:
            node = stack.pop()
        elif brace == "{":
            child = {}
            node.setdefault(name, []).append(child)
            stack.append(node)
            node = child
        else:
            node.setdefault(name, []).append(value.strip('"'))
    return root


def scalar(msg, name):
    """A scalar field; the text format leaves zeros out."""
    return msg.get(name, ["0"])[0]


def number(dim):
    """An int dimension, or None for a symbolic one."""
    return int(dim["int"][0]) if "int" in dim else None


def args_of(step):
    return {a["name"][0]: a for a in step["kernel"][0].get("args", [])}


def check(plan, want):
    tensors = {int(scalar(t, "id")): t for t in plan["tensors"]}
    steps = plan["steps"]
    found = 0
    for i, step in enumerate(steps):
        kernel = step.get("kernel", [{}])[0]
        if kernel.get("kernel", [""])[0] != "rt.reshape_and_cache" or "positions" not in args_of(step):
            continue
        found += 1
        where = "step %d (%s)" % (i, step.get("nodes", ["?"])[0])
        if i == 0 or "matmul" not in steps[i - 1]:
            return "%s: the step before the rotary cache write is not a matmul" % where
        out = tensors[int(scalar(steps[i - 1]["matmul"][0], "d"))]
        row_stride = number(out["stride"][0])
        args = args_of(step)
        views = [tensors[int(scalar(args[n], "tensor"))] for n in ("query", "key", "value")]
        heads = [number(v["shape"][1]) for v in views]
        head_size = number(views[0]["shape"][2])
        starts = [0, heads[0] * head_size, (heads[0] + heads[1]) * head_size]
        for name, view, start in zip(("query", "key", "value"), views, starts):
            strides = [number(s) for s in view["stride"]]
            if scalar(view, "buffer") != scalar(out, "buffer") or number(view["offset"][0]) != start or \
                    strides != [row_stride, head_size, 1]:
                return "%s: %s is not columns %d.. of the matmul's output (strides %s, row stride %s)" % (
                    where, name, start, strides, row_stride)
        if number(out["shape"][1]) != (heads[0] + 2 * heads[1]) * head_size:
            return "%s: the matmul's N is not the q, k and v heads" % where
    if found != want:
        return "%d rotary cache writes, want %d" % (found, want)
    return None


def main():
    plan_text, want = sys.argv[1], int(sys.argv[2])
    with open(plan_text) as f:
        problem = check(parse(f.read()), want)
    if problem:
        print("FAIL: %s: %s" % (plan_text, problem))
        return 1
    print("ok: %s: %d rotary cache writes on the q/k/v columns of the matmul before them" % (plan_text, want))
    return 0


if __name__ == "__main__":
    sys.exit(main())
