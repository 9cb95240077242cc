#!/usr/bin/env python3
"""Checks `fxfuse inspect --json` op histograms against tests/data/expected_counts.json.

Usage: check_expected_counts.py FXFUSE DATA_DIR [SUFFIX...]
expected_counts.json was computed in Python from the graphs torch wrote (getitem not
counted), independently of fxfuse. Only files ending in one of SUFFIX are checked (all
when none is given).
"""
import json
import os
import subprocess
import sys


def main():
    fxfuse, data, suffixes = sys.argv[1], sys.argv[2], tuple(sys.argv[3:])
    expected = json.load(open(os.path.join(data, "expected_counts.json")))
    passed = failed = 0
    for rel, want in sorted(expected.items()):
        if suffixes and not rel.endswith(suffixes):
            continue
        path = os.path.join(data, rel)
        out = subprocess.run([fxfuse, "inspect", "--json", path], capture_output=True, text=True)
        if out.returncode != 0:
            print(f"FAIL {rel}: exit {out.returncode}: {out.stderr.strip()}")
            failed += 1
            continue
        got = json.loads(out.stdout)["ops"]
        if got != want["ops"]:
            diff = {k: (got.get(k), want["ops"].get(k)) for k in set(got) | set(want["ops"]) if got.get(k) != want["ops"].get(k)}
            print(f"FAIL {rel}: (fxfuse, expected) differ: {diff}")
            failed += 1
        else:
            print(f"ok   {rel}: {sum(got.values())} call nodes")
            passed += 1
    print(f"{passed} passed, {failed} failed")
    sys.exit(1 if failed or not passed else 0)


if __name__ == "__main__":
    main()
