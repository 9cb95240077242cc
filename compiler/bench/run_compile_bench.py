#!/usr/bin/env python3
"""Compile benchmark driver: fxfuse's whole compile (load, all passes, write) vs Python's
json.loads of the same model.json, in one run on one machine.

  bazel build -c opt //compiler/bench:bench_compile
  python3 compiler/bench/run_compile_bench.py [--runs N] [--out docs/benchmarks/compile.md] FILE...

Each FILE is a torch.export JSON (optionally .gz: decompressed to a temporary file first,
outside the timing) or a .pt2 archive. json.loads gets the bytes already in memory (the
most favourable setting for Python); fxfuse reads the file itself. Medians of N runs after
one warm-up. The last table column checks linear growth: time per layer relative to the
first file.
"""
import argparse
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools", "bench"))
from json_baseline import program_bytes, time_json_loads, unpacked  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("files", nargs="+")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--bench", default="bazel-bin/compiler/bench/bench_compile")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    rows = []
    tmp = tempfile.mkdtemp()
    try:
        for f in args.files:
            src = unpacked(f, tmp)
            data = program_bytes(src)
            py_ms = time_json_loads(data, args.runs)
            out = subprocess.run([args.bench, src, "--runs", str(args.runs), "--out", os.path.join(tmp, "out.pb")],
                                 capture_output=True, text=True, check=True)
            r = json.loads(out.stdout)
            m = re.search(r"(\d+)", os.path.basename(f))
            layers = int(m.group(1)) if m else 0
            rows.append((os.path.basename(f), layers, len(data), r, py_ms))
    finally:
        shutil.rmtree(tmp)
    lines = [
        "| file | layers | model.json MB | nodes before → after | json.loads ms | fxfuse load ms | passes ms | write ms | fxfuse total ms | total vs json.loads | total / layer vs first |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    base = None
    for name, layers, size, r, py in rows:
        per_layer = r["median_ms"] / layers if layers else 0
        if base is None:
            base = per_layer
        lines.append(f"| {name} | {layers} | {size/1e6:.1f} | {r['nodes']} → {r['nodes_after']} | {py:.1f} | "
                     f"{r['load_ms']:.1f} | {r['passes_ms']:.1f} | {r['write_ms']:.1f} | {r['median_ms']:.1f} | "
                     f"{r['median_ms']/py:.2f}x | {per_layer/base:.2f} |")
    table = "\n".join(lines)
    print(table)
    if args.out:
        cmd = "python3 compiler/bench/run_compile_bench.py " + " ".join(sys.argv[1:])
        with open(args.out, "w") as o:
            o.write("# Compile benchmark\n\n")
            o.write("`fxfuse compile` end to end (load the torch.export JSON, run the default pipeline of "
                    "docs/passes.md with the verifier off, write the result as `.pb`) against Python's "
                    "`json.loads` alone on the same `model.json` bytes already in memory. Medians of "
                    f"{args.runs} runs after one warm-up, same machine, same run. Ratios below 1.00x mean "
                    "the whole compile is faster than `json.loads`.\n\n")
            o.write("Command:\n\n```\nbazel build -c opt //compiler/bench:bench_compile && " + cmd + "\n```\n\n")
            o.write(f"Machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}.\n\n")
            o.write(table + "\n")
            o.write("\nFusion/canonical counts of the run (core-ATen exports of transformers' Llama: no FP8, "
                    "so nothing fuses; every RMSNorm, SiLU-mul and attention is canonicalized):\n\n")
            for name, layers, size, r, py in rows:
                o.write(f"* {name}: canonical {json.dumps(r['canonical'])}\n")


if __name__ == "__main__":
    main()
