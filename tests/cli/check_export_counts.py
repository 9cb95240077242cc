#!/usr/bin/env python3
"""Checks `fxfuse inspect --json` op counts against the archive's own node list.

Usage: check_export_counts.py FXFUSE FILE...   (.pt2 archives or bare export JSON)
The expected histogram is computed here, independently of fxfuse, by reading the
ExportedProgram JSON with Python's zipfile/json: every node of the top-level graph,
target with the `torch.ops.` prefix removed.
"""
import collections
import json
import subprocess
import sys
import zipfile


def program_json(path):
    if zipfile.is_zipfile(path):
        with zipfile.ZipFile(path) as z:
            names = z.namelist()
            member = next((n for n in names if n.endswith("/models/model.json")), None)
            member = member or next(n for n in names if n.endswith("serialized_exported_program.json"))
            return json.loads(z.read(member))
    with open(path) as f:
        return json.load(f)


def expected(path):
    nodes = program_json(path)["graph_module"]["graph"]["nodes"]
    hist = collections.Counter()
    for n in nodes:
        t = n["target"]
        hist[t[len("torch.ops."):] if t.startswith("torch.ops.") else t] += 1
    return dict(hist)


def main():
    fxfuse, files = sys.argv[1], sys.argv[2:]
    failed = 0
    for f in files:
        out = subprocess.run([fxfuse, "inspect", "--json", f], capture_output=True, text=True)
        if out.returncode != 0:
            print(f"FAIL {f}: fxfuse exited {out.returncode}: {out.stderr.strip()}")
            failed += 1
            continue
        got = json.loads(out.stdout)["ops"]
        want = expected(f)
        if got != want:
            print(f"FAIL {f}:\n  fxfuse  {sorted(got.items())}\n  archive {sorted(want.items())}")
            failed += 1
        else:
            print(f"ok   {f}: {sum(want.values())} nodes, {len(want)} targets")
    print(f"{len(files) - failed} passed, {failed} failed")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
