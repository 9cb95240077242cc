#!/usr/bin/env python3
"""Import benchmark driver: fxfuse's import vs Python's json.loads, same files, same run.

  python3 tools/bench/run_import_bench.py [--runs N] [--out docs/benchmarks/import.md] FILE...

For each file (.pt2 or export JSON, optionally gzip-compressed: it is decompressed to a
temporary file first), times `json.loads` of the ExportedProgram JSON (bytes already in
memory: the most favourable setting for Python) and `bench_import` (fxfuse: read the
archive, parse, build the IR), medians of N runs, and writes a Markdown table.
"""
import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from json_baseline import program_bytes, time_json_loads, unpacked  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("files", nargs="+")
    ap.add_argument("--runs", type=int, default=15)
    ap.add_argument("--bench", default="bazel-bin/tools/bench/bench_import")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    rows = []
    tmp = tempfile.mkdtemp()
    try:
        for f in args.files:
            src = unpacked(f, tmp)
            data = program_bytes(src)
            py_ms = time_json_loads(data, args.runs)
            out = subprocess.run([args.bench, src, "--runs", str(args.runs)], capture_output=True, text=True, check=True)
            r = json.loads(out.stdout)
            rows.append((os.path.basename(f), len(data), r["nodes"], py_ms, r["median_ms"], r["mb_per_s"], r["nodes_per_s"]))
    finally:
        shutil.rmtree(tmp)
    cmd = "python3 tools/bench/run_import_bench.py " + " ".join(sys.argv[1:])
    lines = [
        "| file | model.json MB | nodes | Python json.loads ms | fxfuse import ms | fxfuse MB/s | fxfuse nodes/s | speedup vs json.loads |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name, size, nodes, py, fx, mbs, nps in rows:
        lines.append(f"| {name} | {size/1e6:.1f} | {nodes} | {py:.1f} | {fx:.1f} | {mbs:.0f} | {nps:,.0f} | {py/fx:.2f}x |")
    table = "\n".join(lines)
    print(table)
    if args.out:
        with open(args.out, "w") as o:
            o.write("# Import benchmark\n\n")
            o.write("fxfuse's whole import (read the archive, parse the ExportedProgram JSON with simdjson, build the "
                    "IR with def-use links and canonical symbolic sizes) against Python's `json.loads` alone on the "
                    "same `model.json` bytes, already in memory. Medians of %d runs after one warm-up, same machine, "
                    "same run.\n\n" % args.runs)
            o.write(f"Command:\n\n```\nbazel build //tools/bench:bench_import && {cmd}\n```\n\n")
            o.write(f"Machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}.\n\n")
            o.write(table + "\n")


if __name__ == "__main__":
    main()
