#!/usr/bin/env python3
"""Checks fxfuse's folder layering (docs/architecture.md, "Layers").

The top-level folders form a stack; a folder may use (C++ #include, Bazel label) only itself
and folders below it:

    proto < kernels < ir < passes < compiler < tools < tests < examples

and no top-level source folder may hold more than MAX_SHARE of the C++/CUDA source lines.
Prints every violation as FILE:LINE: message and exits 1 if there is any.

usage: check_layers.py [REPO_ROOT]
       check_layers.py --self-test   # the checker finds planted violations in a scratch tree
"""
import os
import re
import sys

LAYERS = ["proto", "kernels", "ir", "passes", "compiler", "tools", "tests", "examples"]
RANK = {name: i for i, name in enumerate(LAYERS)}
SOURCE_LAYERS = ["kernels", "ir", "passes", "compiler", "tools"]  # product code, for the size rule
MAX_SHARE = 0.36
CODE_EXT = (".cc", ".h", ".cu", ".cuh")
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')
LABEL = re.compile(r'"//([a-z_]+)[:/"]')


def top_folder(path):
    return path.split("/", 1)[0]


def walk(root):
    for layer in LAYERS:
        base = os.path.join(root, layer)
        for dirpath, dirnames, filenames in os.walk(base):
            dirnames[:] = [d for d in dirnames if not d.startswith((".", "bazel-")) and d != "data"]
            for f in filenames:
                yield os.path.relpath(os.path.join(dirpath, f), root)


def uses(root, rel):
    """(line number, used top folder) for each include or label in a file."""
    name = os.path.basename(rel)
    if rel.endswith(CODE_EXT):
        pattern = INCLUDE
    elif name in ("BUILD", "BUILD.bazel") or name.endswith(".bzl"):
        pattern = LABEL
    else:
        return
    with open(os.path.join(root, rel), encoding="utf-8", errors="replace") as fh:
        for n, line in enumerate(fh, 1):
            for m in pattern.finditer(line):
                target = m.group(1)
                folder = target.split("/", 1)[0] if pattern is INCLUDE else target
                if folder in RANK and (pattern is LABEL or "/" in target):
                    yield n, folder


def violations(root):
    errors = []
    lines = {layer: 0 for layer in SOURCE_LAYERS}
    for rel in walk(root):
        layer = top_folder(rel)
        for n, used in uses(root, rel):
            if RANK[used] > RANK[layer]:
                errors.append(f"{rel}:{n}: {layer}/ uses {used}/, a folder above it")
        if layer in lines and rel.endswith(CODE_EXT) and "/tests/" not in rel:
            with open(os.path.join(root, rel), encoding="utf-8", errors="replace") as fh:
                lines[layer] += sum(1 for _ in fh)
    total = sum(lines.values())
    for layer, n in sorted(lines.items(), key=lambda kv: -kv[1]):
        share = n / total if total else 0
        print(f"{layer:10s} {n:7d} lines {100 * share:5.1f}%")
        if share > MAX_SHARE:
            errors.append(f"{layer}/: {100 * share:.1f}% of the source lines (at most {100 * MAX_SHARE:.0f}%)")
    return errors


def self_test():
    import tempfile
    with tempfile.TemporaryDirectory() as root:
        files = {
            "ir/graph.h": '#include "passes/toolkit/pass.h"\n',  # ir uses passes: a back-edge
            "passes/BUILD": 'deps = ["//compiler/lowering"]\n',  # passes uses compiler: a back-edge
            "passes/p.cc": '#include "ir/graph.h"\n' + "x\n" * 10,  # allowed
            "tools/t.cc": "x\n" * 200,  # tools holds most lines
        }
        for rel, text in files.items():
            os.makedirs(os.path.join(root, os.path.dirname(rel)), exist_ok=True)
            with open(os.path.join(root, rel), "w") as fh:
                fh.write(text)
        found = violations(root)
    expect = ["ir/graph.h:1: ir/ uses passes/", "passes/BUILD:1: passes/ uses compiler/", "tools/: "]
    missing = [e for e in expect if not any(f.startswith(e) for f in found)]
    extra = [f for f in found if not any(f.startswith(e) for e in expect)]
    print("self-test:", "ok" if not missing and not extra else f"missing {missing}, unexpected {extra}")
    return 1 if missing or extra else 0


def main():
    if sys.argv[1:] == ["--self-test"]:
        return self_test()
    errors = violations(sys.argv[1] if len(sys.argv) > 1 else os.getcwd())
    for e in errors:
        print(e)
    print(f"layering: {len(errors)} violation(s)")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
